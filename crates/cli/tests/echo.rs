//! `peregrine bench echo` end to end through the binary: the echo in normal and urgent mode
//! with the ping-pong of each transport beside it, the cells it records, the JSON it prints,
//! and the report's echo table and box plot. These tests check what is recorded and reported,
//! never a speed.

#[allow(dead_code)] // the process helpers serve other test files
mod common;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    common::one_bench_at_a_time()
}

fn run(args: &[&str]) -> Output {
    common::run_bench(args)
}

fn fresh_dir(tag: &str) -> PathBuf {
    common::fresh_results_dir(tag)
}

const COUNT: u64 = 2000;

#[test]
fn echo_records_both_modes_beside_the_pingpong_and_reports_them() {
    let _one = serial();
    let dir = fresh_dir("echo");
    let out = run(&[
        "bench",
        "echo",
        "--transport",
        "udp,tcp,ipc",
        "--modes",
        "normal,urgent",
        "--sizes",
        "28",
        "--count",
        &COUNT.to_string(),
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // --json: one object per cell, as the other scenarios print them.
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    assert_eq!(lines.len(), 9, "{stdout}");
    let printed = |kind: &str| lines.iter().filter(|l| l["kind"] == kind).count();
    assert_eq!((printed("pingpong"), printed("echo")), (3, 6), "{stdout}");
    for l in lines.iter().filter(|l| l["kind"] == "echo") {
        assert_eq!(l["samples"], COUNT, "{l}");
        assert!(
            l["detail"]["median_x_pingpong"].as_f64().unwrap() > 0.0,
            "{l}"
        );
        assert!(l["detail"]["mode"].is_string(), "{l}");
    }

    let r: Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let cells = r["cells"].as_array().unwrap();
    let cell = |id: &str| {
        cells
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no cell {id} in {r}"))
    };
    for t in ["udp", "tcp", "ipc"] {
        let pp = cell(&format!("pingpong-{t}-28B"));
        assert_eq!(pp["scenario"], "pingpong");
        assert_eq!(pp["latency"]["samples"], COUNT);
        let pp_median = pp["latency"]["median_ns"].as_f64().unwrap();
        for mode in ["normal", "urgent"] {
            let c = cell(&format!("echo-{t}-{mode}-28B"));
            assert_eq!(c["scenario"], "echo", "{c}");
            assert_eq!(c["transport"], t, "{c}");
            assert_eq!(c["size_bytes"], 28, "{c}");
            assert_eq!(c["detail"]["mode"], mode, "{c}");
            assert_eq!(c["latency"]["samples"], COUNT, "{c}");
            let median = c["latency"]["median_ns"].as_f64().unwrap();
            let ratio = c["detail"]["median_x_pingpong"].as_f64().unwrap();
            assert!(
                (ratio - median / pp_median).abs() <= 0.001 + 0.001 * ratio,
                "{ratio} vs {median} / {pp_median}"
            );
            assert!(dir.join(c["hdr_log"].as_str().unwrap()).exists(), "{c}");
            assert!(c["cpu_s"]["sender"].as_f64().unwrap() > 0.0, "{c}");
            assert!(c["cpu_s"]["echo"].as_f64().unwrap() > 0.0, "{c}");
            let interval = &c["detail"]["batch_interval_us"];
            match (t, mode) {
                ("ipc", _) => {
                    assert!(interval.is_null(), "{c}");
                    assert!(c["detail"]["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("no send modes")));
                }
                // The transports' default, read from their configuration.
                (_, "normal") => {
                    assert_eq!(interval.as_f64(), Some(100.0), "{c}");
                    assert_eq!(c["detail"]["echo_batch_interval_us"].as_f64(), Some(100.0));
                }
                _ => assert!(interval.is_null(), "{c}"),
            }
        }
    }
    assert_eq!(cells.len(), 9);

    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.contains("Echo (half round trip), microseconds"),
        "{report}"
    );
    assert!(report.contains("x ping-pong"), "{report}");
    assert!(report.contains("ipc has no send modes"), "{report}");
    for (t, mode) in [("udp", "normal"), ("tcp", "urgent"), ("ipc", "normal")] {
        assert!(
            report
                .lines()
                .any(|l| l.split_whitespace().take(3).eq([t, mode, "28"])),
            "no {t} {mode} row:\n{report}"
        );
    }
    // The ping-pong references are ordinary ping-pong rows.
    assert!(
        report.contains("Ping-pong latency (half round trip)"),
        "{report}"
    );
    assert!(dir.join("charts/echo_boxplot.svg").exists());
    assert!(dir.join("charts/echo_boxplot.png").exists());
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("data-name=\"echo_boxplot\""));
    assert!(html.contains("Echo (half round trip)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_echo_flags_are_refused_naming_the_value_and_the_fix_before_anything_runs() {
    let _one = serial();
    let dir = fresh_dir("echo-refused");
    let d = dir.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 5] = [
        (&["--modes", "batched"], &["'batched'", "normal,urgent"]),
        (
            &["--modes", "urgent,urgent"],
            &["--modes lists urgent twice"],
        ),
        (&["--sizes", ""], &["an empty list", "28,1460"]),
        (&["--sizes", "28,x"], &["'x' is not a size"]),
        (
            &["--transport", "ipc", "--sizes", "100000000"],
            &["--sizes 100000000", "on ipc", "8 to"],
        ),
    ];
    for (args, want) in cases {
        let mut argv = vec!["bench", "echo", "--out", d];
        argv.extend_from_slice(args);
        let out = run(&argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        for w in want {
            assert!(err.contains(w), "{args:?}: '{err}' lacks '{w}'");
        }
        assert!(!dir.exists(), "{args:?} left a results folder");
    }
}
