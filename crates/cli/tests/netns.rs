//! Ping-pong across a veth pair between two network namespaces, through
//! `scripts/netns-pingpong.sh`: udp, mcast and tcp over a real (virtual) link rather than
//! loopback.
//!
//! Needs root and iproute2 (`ip netns`): without them it says so and skips, except under
//! `.ci/run` (`PEREGRINE_REQUIRE_TOOLS=1`), where it fails.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

const COUNT: u64 = 3000;
const WARMUP: u64 = 300;
const TRANSPORTS: [&str; 3] = ["udp", "mcast", "tcp"];

#[test]
fn pingpong_across_veth_between_namespaces() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns-pingpong.sh");
    assert!(script.exists(), "missing {}", script.display());

    let out = Command::new("bash")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_peregrine"))
        .env("TRANSPORTS", TRANSPORTS.join(" "))
        .env("COUNT", COUNT.to_string())
        .env("WARMUP", WARMUP.to_string())
        .env("SIZE", "64")
        .env("IDLE", "spin")
        .env("CPUS", "0,1")
        // Each side of each transport is stopped after this long (a hang fails the run, named
        // by the script); the whole run normally takes a few seconds.
        .env("TIMEOUT", "20")
        .output()
        .expect("cannot run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        script.display(),
        out.status
    );

    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n--- stderr\n{stderr}"))
        })
        .collect();
    for t in TRANSPORTS {
        let line = lines
            .iter()
            .find(|v| v["kind"] == "pingpong" && v["transport"] == t)
            .unwrap_or_else(|| {
                panic!(
                    "no pingpong result line for {t}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
                )
            });
        assert_eq!(
            line["samples"].as_u64(),
            Some(COUNT),
            "{t}: samples in {line}"
        );
        let median_ns = line["median_ns"]
            .as_f64()
            .unwrap_or_else(|| panic!("{t}: no numeric median_ns in {line}"));
        assert!(
            median_ns > 0.0,
            "{t}: median {median_ns} ns is not positive in {line}"
        );
        eprintln!("{t}: median {:.2} us across the veth", median_ns / 1000.0);
    }
}

/// `bench pingpong --transport xdp --netns`: the kernel path, the AF_XDP path and sockperf
/// across the veth pair the run creates, one JSON object each, every ping answered.
#[test]
fn kernel_bypass_comparison_across_a_veth_pair() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let sockperf = peregrine_testkit::program("sockperf", "apt-get install sockperf").is_some();
    let rows = json_lines(&[
        "bench",
        "pingpong",
        "--transport",
        "xdp",
        "--netns",
        "--sizes",
        "1024",
        "--count",
        "2000",
        "--warmup-count",
        "200",
        "--json",
    ]);
    let mut paths = vec!["udp", "xdp"];
    if sockperf {
        paths.push("sockperf");
    }
    for size in [1024u64] {
        for path in &paths {
            let r = rows
                .iter()
                .find(|r| r["transport"] == *path && r["detail"]["row_size"] == size)
                .unwrap_or_else(|| panic!("no {path} row of {size} bytes in:\n{rows:#?}"));
            assert_eq!(r["size_bytes"], size, "{r}");
            assert_eq!(r["detail"]["netns"], true, "{r}");
            let median = r["median_ns"].as_f64().unwrap();
            assert!(median > 0.0, "{r}");
            if *path != "sockperf" {
                assert_eq!(r["samples"], 2000, "every measured ping answered: {r}");
            }
        }
    }
    assert_eq!(rows.len(), paths.len(), "{rows:#?}");
}

#[test]
fn xdp_without_netns_and_netns_with_another_transport_are_refused() {
    for (args, says) in [
        (vec!["--transport", "xdp"], "add --netns"),
        (vec!["--transport", "tcp", "--netns"], "use --transport xdp"),
        (
            vec!["--transport", "xdp", "--netns", "--sizes", "8"],
            "from 12 to 1472",
        ),
        (vec!["--transport", "xdp", "--netns", "--raw"], "drop --raw"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_peregrine"))
            .args(["bench", "pingpong"])
            .args(&args)
            .output()
            .expect("peregrine runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}

/// `bench throughput --transport xdp --netns`: unpaced throughput across the pair through the
/// kernel and through AF_XDP, every message checked, none lost.
#[test]
fn kernel_bypass_throughput_across_a_veth_pair() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let rows = json_lines(&[
        "bench",
        "throughput",
        "--transport",
        "xdp",
        "--netns",
        "--size",
        "64",
        "--seconds",
        "1",
        "--json",
    ]);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for path in ["udp", "xdp"] {
        let r = rows
            .iter()
            .find(|r| r["transport"] == path)
            .unwrap_or_else(|| panic!("no {path} row in:\n{rows:#?}"));
        assert_eq!(r["lost"], 0, "{r}");
        assert!(r["msgs_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["detail"]["netns"], true, "{r}");
    }
}

/// `bench load --transport xdp --netns`: a paced stream with pings across the pair through
/// the kernel and through AF_XDP (and sockperf at the same rate where installed), every
/// message checked and every ping answered.
#[test]
fn kernel_bypass_load_across_a_veth_pair() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let sockperf = peregrine_testkit::program("sockperf", "apt-get install sockperf").is_some();
    let rows = json_lines(&[
        "bench",
        "load",
        "--transport",
        "xdp",
        "--netns",
        "--sizes",
        "64,256",
        "--rate",
        "20k",
        "--ping-every",
        "10",
        "--seconds",
        "0.5",
        "--warmup-seconds",
        "0.2",
        "--json",
    ]);
    assert_eq!(rows.len(), if sockperf { 6 } else { 4 }, "{rows:#?}");
    for (path, size) in [("udp", 64), ("xdp", 64), ("udp", 256), ("xdp", 256)] {
        let r = rows
            .iter()
            .find(|r| r["transport"] == path && r["detail"]["row_size"] == size)
            .unwrap_or_else(|| panic!("no {path} row of {size} bytes in:\n{rows:#?}"));
        assert_eq!(r["size_bytes"], size, "{r}");
        assert_eq!(r["scenario"], "load", "{r}");
        assert_eq!(r["detail"]["netns"], true, "{r}");
        assert_eq!(r["detail"]["path"], "veth pair", "{r}");
        for field in ["lost", "duplicates", "out_of_order"] {
            assert_eq!(r[field], 0, "{field}: {r}");
        }
        assert_eq!(r["detail"]["pings_unanswered"], 0, "{r}");
        let pings = r["detail"]["pings"].as_u64().expect("pings counted");
        assert!(pings > 0, "{r}");
        assert_eq!(r["latency"]["samples"], pings, "one sample per ping: {r}");
    }
    if sockperf {
        for size in [64, 256] {
            let r = rows
                .iter()
                .find(|r| r["transport"] == "sockperf" && r["detail"]["row_size"] == size)
                .unwrap_or_else(|| panic!("no sockperf row of {size} bytes in:\n{rows:#?}"));
            assert_eq!(r["rate_requested_msgs_per_s"], 20_000.0, "{r}");
            assert!(r["latency"]["median_ns"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[test]
fn load_with_xdp_needs_netns_and_netns_takes_no_uri() {
    for (args, says) in [
        (vec!["--transport", "xdp"], "add --netns"),
        (vec!["--transport", "ipc", "--netns"], "use --transport xdp"),
        (
            vec![
                "--transport",
                "xdp",
                "--netns",
                "--uri",
                "udp://10.0.0.1:4000",
            ],
            "drop --uri",
        ),
        (
            vec!["--transport", "xdp", "--netns", "--size", "1441"],
            "8 to 1440 bytes",
        ),
        (
            vec!["--transport", "xdp", "--netns", "--sizes", "32,2000"],
            "--size 2000 is not accepted",
        ),
        (vec!["--transport", "udp", "--sizes", "32"], "--netns"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_peregrine"))
            .args(["bench", "load"])
            .args(&args)
            .env_remove("PEREGRINE_CONFIG")
            .output()
            .expect("peregrine runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}

/// Runs `peregrine ARGS` (without the environment's configuration), checks it succeeded, and
/// returns its JSON lines.
fn json_lines(args: &[&str]) -> Vec<Value> {
    // One folder per command (the tests run side by side in one process).
    let results = std::env::temp_dir().join(format!(
        "peregrine-netns-{}-{}",
        std::process::id(),
        args[1]
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .args(args)
        .env("PEREGRINE_RESULTS", &results)
        .env_remove("PEREGRINE_CONFIG")
        .output()
        .expect("peregrine runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The run wrote its results folder and report there (every cell recorded).
    let report = std::fs::read_dir(&results)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.path().join("report.html").is_file());
    let _ = std::fs::remove_dir_all(&results);
    assert!(
        report,
        "no results folder with a report under {}",
        results.display()
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}
