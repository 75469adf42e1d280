//! `peregrine bench jitter`: one result per CPU with the gap counts, the largest gap and the
//! time lost, in JSON, in the results folder and in the report. Behaviour only: what the
//! machine loses is not asserted.

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_peregrine");

#[test]
fn jitter_reports_every_cpu_with_ordered_gap_counts() {
    let out = std::env::temp_dir().join(format!("pg-jitter-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let cpus = peregrine_agent::allowed_cpus();
    let o = Command::new(BIN)
        .args(["bench", "jitter", "--seconds", "0.2", "--json", "--cpus"])
        .arg(cpus[0].to_string())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let j = &lines[0];
    assert_eq!(j["kind"], "jitter");
    assert_eq!(j["cpu"], cpus[0]);
    assert!(j["seconds"].as_f64().unwrap() >= 0.2, "{j}");
    assert!(j["reads"].as_u64().unwrap() > 0, "{j}");
    // A gap over 1 ms is also over 100 us, 10 us and 1 us.
    let per_s = |k: &str| j[k].as_f64().unwrap();
    assert!(
        per_s("gaps_over_1us_per_s") >= per_s("gaps_over_10us_per_s"),
        "{j}"
    );
    assert!(
        per_s("gaps_over_10us_per_s") >= per_s("gaps_over_100us_per_s"),
        "{j}"
    );
    assert!(
        per_s("gaps_over_100us_per_s") >= per_s("gaps_over_1ms_per_s"),
        "{j}"
    );
    let lost = j["lost_fraction"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&lost), "{j}");
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(report.contains("Machine jitter"), "{report}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn bad_jitter_flags_are_refused_naming_the_value() {
    peregrine_testkit::assert_refused(
        BIN,
        &["bench", "jitter"],
        &[
            (&["--cpus", "0,0"][..], "CPU 0 is given twice"),
            (&["--cpus", "100000"][..], "CPU 100000"),
            (&["--seconds", "0"][..], "--seconds 0"),
        ],
    );
}
