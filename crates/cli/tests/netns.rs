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
