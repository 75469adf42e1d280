//! Multi-process tests of the network transports through the `peregrine` binary: real
//! processes, real sockets on loopback.

mod common;
use common::{Role, Signal};
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_peregrine"));
    c.args(args)
        .env("PEREGRINE_RESULTS", common::results_base());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("peregrine runs")
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

fn ok(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    json_lines(&out.stdout)
}

#[test]
fn one_publisher_and_three_subscriber_processes_lose_nothing_over_each_network_transport() {
    for transport in ["udp", "mcast", "tcp"] {
        let out = run(
            &[
                "bench",
                "throughput",
                "--transport",
                transport,
                "--count",
                "1000000",
                "--subscribers",
                "3",
                "--size",
                "100",
                "--json",
            ],
            &[],
        );
        let lines = ok(&out);
        assert_eq!(lines.len(), 1, "{transport}");
        let r = &lines[0];
        assert_eq!(r["transport"], transport);
        assert_eq!(
            r["samples"], 1_000_000u64,
            "{transport}: messages published"
        );
        // Every subscriber checked every sequence number and payload (the command fails on any
        // out-of-order or corrupt message) and received every message.
        assert_eq!(r["lost"], 0, "{transport}");
    }
}

#[test]
fn three_multicast_subscribers_dropping_1_and_5_percent_repair_everything() {
    // Each subscriber process drops 1% (then 5%) of the datagrams it receives, with its own
    // seed, and repairs by NAK from the publisher's retention: all of them get every one of
    // the 1 M messages exactly once and in order (the command fails on any message out of
    // order, duplicated or corrupt; `lost` counts messages not delivered).
    for loss in ["1%", "5%"] {
        let out = run(
            &[
                "bench",
                "throughput",
                "--transport",
                "mcast",
                "--count",
                "1000000",
                "--subscribers",
                "3",
                "--size",
                "64",
                "--loss",
                loss,
                "--json",
            ],
            &[],
        );
        let lines = ok(&out);
        let r = &lines[0];
        assert_eq!(r["samples"], 1_000_000u64, "{loss}");
        assert_eq!(r["lost"], 0, "{loss}: {r}");
        let d = &r["detail"];
        assert_eq!(d["unrecoverable"], 0, "{loss}: {r}");
        let each = |key: &str| -> Vec<u64> {
            d[key]
                .as_array()
                .unwrap_or_else(|| panic!("{key} in {r}"))
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        let (dropped, recovered) = (each("dropped_each"), each("recovered_each"));
        assert_eq!(dropped.len(), 3);
        for k in 0..3 {
            // Every subscriber really lost datagrams and had frames repaired.
            assert!(dropped[k] > 0 && recovered[k] > 0, "{loss}: {r}");
        }
        assert!(d["retransmitted"].as_u64().unwrap() > 0, "{loss}: {r}");
    }
}

#[test]
fn fragmented_messages_cross_processes_intact() {
    // 5000-byte messages: 4 datagrams each on udp and mcast.
    for transport in ["udp", "mcast", "tcp"] {
        let out = run(
            &[
                "bench",
                "throughput",
                "--transport",
                transport,
                "--count",
                "20000",
                "--size",
                "5000",
                "--json",
            ],
            &[],
        );
        let r = &ok(&out)[0];
        assert_eq!(r["samples"], 20_000u64, "{transport}");
        assert_eq!(r["lost"], 0, "{transport}");
    }
}

/// Without flow control or repair and with a small receive buffer, the subscriber process may
/// or may not keep up (that is the machine's call, so nothing here depends on it): whatever it
/// lost, it checks that the gaps it saw are exactly the ranges of its `Lost` events (the
/// command fails otherwise), and the parent that received + lost == sent. That an overrun
/// subscriber is told exactly what it lost is proven deterministically, with a subscriber that
/// reads only after the publisher is done, in crates/transport/tests/net_subscriber.rs.
#[test]
fn an_unrepaired_udp_subscriber_accounts_for_every_message() {
    let out = run(
        &[
            "bench",
            "throughput",
            "--transport",
            "udp",
            "--uri",
            "udp://127.0.0.1:0?window=0&rcvbuf=64k&mode=urgent&nak=0",
            "--count",
            "300000",
            "--size",
            "64",
            "--json",
        ],
        &[],
    );
    let r = &ok(&out)[0];
    let lost = r["lost"].as_u64().unwrap();
    assert!(lost < 300_000, "{r}");
}

#[test]
fn pingpong_prints_the_raw_floor_and_compares_with_sockperf() {
    if peregrine_testkit::program("sockperf", "apt-get install sockperf").is_none() {
        return;
    }
    let out = run(
        &[
            "bench",
            "pingpong",
            "--transport",
            "udp",
            "--size",
            "64",
            "--count",
            "3000",
            "--warmup-count",
            "300",
            "--compare",
            "sockperf",
            "--json",
        ],
        &[],
    );
    let lines = ok(&out);
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["raw", "pingpong", "sockperf"]);
    for l in &lines {
        assert_eq!(l["transport"], "udp");
        assert_eq!(l["size_bytes"], 64);
        assert!(l["median_ns"].as_f64().unwrap() > 0.0, "{l}");
    }
    assert_eq!(lines[0]["samples"], 3000);
    assert_eq!(lines[1]["samples"], 3000);
    assert!(lines[2]["samples"].as_u64().unwrap() > 0);
    let ours = &lines[1];
    assert!(
        ours["median_x_floor"].as_f64().unwrap() > 0.0,
        "ratio to the raw floor: {ours}"
    );
    assert!(
        ours["detail"]["median_x_sockperf"].as_f64().unwrap() > 0.0,
        "{ours}"
    );
    assert!(lines[2]["detail"]["client"]
        .as_str()
        .unwrap()
        .contains("sockperf ping-pong"));
}

#[test]
fn raw_pingpong_runs_over_every_network_transport() {
    for transport in ["udp", "mcast", "tcp"] {
        let out = run(
            &[
                "bench",
                "pingpong",
                "--raw",
                "--transport",
                transport,
                "--size",
                "64",
                "--count",
                "2000",
                "--warmup-count",
                "200",
                "--json",
            ],
            &[],
        );
        let lines = ok(&out);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["kind"], "raw");
        assert_eq!(lines[0]["samples"], 2000, "{transport}");
    }
}

#[test]
fn configuration_from_file_and_environment_is_validated_and_named() {
    let out = run(
        &["bench", "pingpong", "--transport", "mcast", "--count", "10"],
        &[("PEREGRINE_MCAST_TTL", "300")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PEREGRINE_MCAST_TTL=300") && err.contains("0 to 255"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("peregrine-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[udp]\ndatagram = 1500\n").unwrap();
    let out = run(
        &["bench", "pingpong", "--transport", "udp", "--count", "10"],
        &[("PEREGRINE_CONFIG", file.to_str().unwrap())],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: [udp] datagram = 1500") && err.contains("multiple of 8"),
        "{err}"
    );

    // A good file is used: an 8 KiB datagram carries 5000-byte messages unfragmented.
    let file = dir.join("good.toml");
    std::fs::write(&file, "[udp]\ndatagram = 8192\n").unwrap();
    let out = run(
        &[
            "bench",
            "throughput",
            "--transport",
            "udp",
            "--count",
            "2000",
            "--size",
            "5000",
            "--json",
        ],
        &[("PEREGRINE_CONFIG", file.to_str().unwrap())],
    );
    let r = &ok(&out)[0];
    assert_eq!(r["lost"], 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_subscriber_stopped_past_the_retention_is_told_exactly_what_it_lost_and_carries_on() {
    // The publisher keeps 1 MiB or 100 ms of datagrams. The subscriber is stopped (SIGSTOP)
    // for 3 s: the publisher stops waiting for it after the flow timeout (1 s) and moves on, far
    // past its retention. Resumed, the subscriber reads what its socket still held, finds the gap,
    // asks for it, learns it is gone, and reports it as lost: the ranges it reports are
    // exactly the gaps in what it delivered (the subscriber checks this itself and counts any
    // difference as out of order), and what it received plus what it reported lost is every
    // message published.
    let pid = std::process::id();
    let uri = format!(
        "mcast://239.255.93.{}:{}?retain=1m&retain_ms=100",
        1 + pid % 250,
        20_000 + pid % 20_000
    );
    let name = format!("stop-{pid}");
    let common = [
        "bench",
        "throughput",
        "--transport",
        "mcast",
        "--uri",
        &uri,
        "--name",
        &name,
        "--size",
        "64",
    ];
    let mut sub = Role::start(&[&common[..], &["--role", "sub"]].concat());
    sub.expect_ready();
    let mut publ =
        Role::start(&[&common[..], &["--role", "pub", "--seconds", "5", "--json"]].concat());
    std::thread::sleep(Duration::from_secs(1));
    sub.signal(Signal::STOP);
    std::thread::sleep(Duration::from_secs(3));
    sub.signal(Signal::CONT);
    let p: Value = serde_json::from_str(publ.line().trim()).expect("the publisher's result");
    let sent = p["samples"].as_u64().unwrap();
    let s = sub.result();
    let (received, lost) = (s["received"].as_u64().unwrap(), s["lost"].as_u64().unwrap());
    assert!(lost > 0, "the gap outlived the retention: {s}");
    assert!(s["gaps"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(
        s["out_of_order"], 0,
        "reported losses differ from the gaps seen: {s}"
    );
    assert_eq!(s["corrupt"], 0, "{s}");
    assert_eq!(received + lost, sent, "{s} {p}");
    // It carried on after the loss of its stop. (Not necessarily loss-free: once dropped from
    // flow control it is a slow subscriber like any other, and comes back in only when it has
    // caught up with a publisher sending as fast as it can; on a loaded machine it may not, and
    // then loses more, each loss reported exactly as checked above.)
    assert!(
        s["end_sequence"].as_u64().unwrap() > s["first_lost_end_sequence"].as_u64().unwrap(),
        "it carried on after the loss: {s}"
    );
}
