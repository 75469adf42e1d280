//! `peregrine bench fanout` end to end: real feed, distributor (or nats-server) and client
//! processes on loopback. Each probe's verdict comes from every client's items checked against
//! what the feed sent; these tests check that accounting and the results folder, never a
//! speed (the rates are low and the lag bound a minute, so a loaded machine still passes).

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// The probes of one run use multicast groups derived from this process's id: the tests of
/// this file run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const BIN: &str = env!("CARGO_BIN_EXE_peregrine");

fn run(args: &[&str], out: &Path) -> Vec<Value> {
    run_logged(args, out).0
}

/// The JSON lines of a run, and what it logged on standard error.
fn run_logged(args: &[&str], out: &Path) -> (Vec<Value>, String) {
    let o = Command::new(BIN)
        .args(["bench", "fanout", "--json", "--out"])
        .arg(out)
        .args(args)
        .output()
        .expect("peregrine runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "peregrine bench fanout {args:?} failed ({}):\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    (
        stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn out_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pg-fanout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every update of every client's watchlist arrived, nothing of another client's did, and the
/// numbers add up: what the probe reports is what the items files say.
fn assert_exact(p: &Value, clients: u64) {
    assert_eq!(p["clients"], clients, "{p}");
    assert_eq!(p["sustained"], true, "{p}");
    assert_eq!(p["lost"], 0, "{p}");
    assert_eq!(p["gaps"], 0, "{p}");
    assert_eq!(p["undelivered"], 0, "{p}");
    assert_eq!(p["foreign"], 0, "{p}");
    assert_eq!(p["inconsistent"], 0, "{p}");
    let delivered = p["delivered"].as_u64().unwrap();
    assert!(delivered > 0, "{p}");
    // 4 clients of 20 items, 10 shared: 50 items, each update of a shared one goes to all 4,
    // of an own one to 1; uniform draws make delivered / sent about (10 x 4 + 40) / 50 = 1.6.
    let sent = p["feed_updates_per_s"].as_f64().unwrap();
    let per_s = p["updates_per_s"].as_f64().unwrap();
    assert!(sent > 0.0 && per_s > 0.0, "{p}");
    let fan_out = per_s / sent;
    assert!((1.2..=2.0).contains(&fan_out), "fan-out {fan_out}: {p}");
}

#[test]
fn four_clients_get_every_update_of_their_watchlists_and_none_of_another() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = out_dir("peregrine");
    let (lines, log) = run_logged(
        &[
            "--log",
            "info",
            "--clients",
            "4",
            "--items",
            "20",
            "--overlap",
            "50%",
            "--seconds",
            "1",
            "--start-rate",
            "5k",
            "--max-rate",
            "5k",
            "--max-lag-ms",
            "60000",
        ],
        &out,
    );
    let probes: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] == "fanout_probe")
        .collect();
    assert_eq!(probes.len(), 1, "{lines:?}");
    // --log info: the probe is logged on standard error.
    assert!(
        log.contains("INFO") && log.contains("fan-out probe: 4 clients"),
        "{log}"
    );
    assert_eq!(probes[0]["system"], "peregrine");
    assert_exact(probes[0], 4);
    let result = lines
        .iter()
        .find(|l| l["kind"] == "fanout")
        .expect("a fanout result line");
    assert_eq!(result["system"], "peregrine");
    assert_eq!(result["feed_rate"], 5000.0);
    // The results folder holds the probe and the result, and its report has the section.
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let scenarios: Vec<&str> = results["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(scenarios, ["fanout_probe", "fanout"]);
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(
        report.contains("Market data fan-out (Producer 50/50)"),
        "{report}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_latency_table_and_the_nats_comparison_run_side_by_side() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if peregrine_testkit::program("nats-server", "apt-get install nats-server").is_none() {
        return;
    }
    let out = out_dir("nats");
    let lines = run(
        &[
            "--latency",
            "--rates",
            "1k,2k",
            "--clients",
            "4",
            "--items",
            "20",
            "--seconds",
            "1",
            "--max-lag-ms",
            "60000",
            "--compare",
            "nats",
        ],
        &out,
    );
    let rows: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "md_latency").collect();
    let systems: Vec<(&str, f64)> = rows
        .iter()
        .map(|r| (r["system"].as_str().unwrap(), r["rate"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        systems,
        [
            ("peregrine", 1000.0),
            ("peregrine", 2000.0),
            ("nats", 1000.0),
            ("nats", 2000.0)
        ]
    );
    for r in &rows {
        assert_exact(r, 4);
        // The updates after the warm-up are the latency points; the statistics are ordered.
        let points = r["points"].as_u64().unwrap();
        assert!(
            0 < points && points < r["delivered"].as_u64().unwrap(),
            "{r}"
        );
        let (min, mean, max) = (
            r["min_ns"].as_f64().unwrap(),
            r["mean_ns"].as_f64().unwrap(),
            r["max_ns"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= mean && mean <= max, "{r}");
        assert!(r["stddev_ns"].as_f64().unwrap() >= 0.0, "{r}");
    }
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(
        report.contains("Update Rate [74-byte messages/sec]"),
        "{report}"
    );
    assert!(report.contains("NATS (nats-server)"), "{report}");
    assert!(
        out.join("charts/md_latency.svg").exists(),
        "the report's Figures 3-2 and 3-3"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn bad_fanout_flags_are_refused_naming_the_value() {
    peregrine_testkit::assert_refused(
        BIN,
        &["bench", "fanout"],
        &[
            (&["--clients", "0"][..], "--clients"),
            (&["--overlap", "150%"][..], "150%"),
            (&["--size", "62"][..], "--size 62"),
            (
                &["--rates", "1k"][..],
                "--rates lists the update rates of --latency",
            ),
            (&["--compare", "kafka"][..], "kafka"),
            (&["--pin", "0,0"][..], "--pin"),
            (&["--log", "bogus==="][..], "is not a log filter"),
        ],
    );
}
