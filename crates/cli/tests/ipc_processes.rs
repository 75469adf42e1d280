//! Multi-process tests of the shared-memory transport through the `peregrine` binary: real
//! processes, real segments in /dev/shm, real signals. (The attacks of issue 14 are in
//! `shm_security.rs`.)

use serde_json::Value;
mod common;
use common::{Role, ShmBase, Signal};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_peregrine")
}

fn unique(tag: &str) -> String {
    format!(
        "it-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() % 100_000
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(exe())
        .args(args)
        .env("PEREGRINE_RESULTS", common::results_base())
        .output()
        .expect("peregrine runs")
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// `bench throughput --role pub --name NAME --size SIZE --json`, then `extra`.
fn throughput_pub(name: &str, size: &str, extra: &[&str], env: &[(&str, &Path)]) -> Role {
    let mut args = vec![
        "bench",
        "throughput",
        "--role",
        "pub",
        "--name",
        name,
        "--size",
        size,
        "--json",
    ];
    args.extend_from_slice(extra);
    Role::start_with(&args, env)
}

/// `bench throughput --role sub --name NAME --size SIZE`: says `ready` once attached.
fn throughput_sub(name: &str, size: &str, env: &[(&str, &Path)]) -> Role {
    Role::start_with(
        &[
            "bench",
            "throughput",
            "--role",
            "sub",
            "--name",
            name,
            "--size",
            size,
        ],
        env,
    )
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_publisher_and_three_subscriber_processes_move_ten_million_messages_without_loss() {
    let out = run(&[
        "bench",
        "throughput",
        "--count",
        "10000000",
        "--subscribers",
        "3",
        "--size",
        "32",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    assert_eq!(r["kind"], "throughput");
    assert_eq!(r["samples"], 10_000_000u64, "messages published");
    // Each subscriber checked every sequence number and payload (the command fails on any
    // out-of-order or corrupt message) and received all of them.
    assert_eq!(r["lost"], 0);
    assert_eq!(r["detail"]["subscribers"], 3);
}

/// `bench throughput --group`: every message through a failover group of one member, checked
/// by its application sequence at each subscriber, on shared memory and UDP.
#[test]
fn a_failover_group_throughput_run_delivers_every_sequence_to_every_subscriber() {
    for transport in ["ipc", "udp"] {
        let out = run(&[
            "bench",
            "throughput",
            "--transport",
            transport,
            "--group",
            "--count",
            "200000",
            "--subscribers",
            "2",
            "--size",
            "32",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{transport}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = json_lines(&out.stdout);
        assert_eq!(lines.len(), 1);
        let r = &lines[0];
        assert_eq!(r["samples"], 200_000u64, "{transport}: {r}");
        assert_eq!(r["lost"], 0, "{transport}: {r}");
        assert_eq!(r["detail"]["failover_group"], "bench", "{transport}: {r}");
    }
}

#[test]
fn a_stopped_subscriber_in_overwrite_mode_reports_exactly_how_many_messages_it_lost() {
    let name = unique("ow");
    let base = ShmBase::new("ow");
    let env = base.env();
    let mut publ = throughput_pub(
        &name,
        "32",
        &[
            "--count",
            "2000000",
            "--policy",
            "overwrite",
            "--capacity",
            "64k",
        ],
        &env,
    );
    // The publisher makes its segment, then waits for its subscriber: stopped there, it
    // publishes nothing until the subscriber is stopped in turn, so the subscriber provably
    // cannot keep up, however fast the machine.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !base.segment(&name).exists() {
        assert!(
            Instant::now() < deadline,
            "no segment {}",
            base.segment(&name).display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    publ.signal(Signal::STOP);
    let mut sub = throughput_sub(&name, "32", &env);
    sub.expect_ready();
    sub.signal(Signal::STOP);
    publ.signal(Signal::CONT);
    // The publisher never waits in overwrite mode: it finishes while the subscriber is stopped.
    let pub_line = publ.line();
    let p: Value = serde_json::from_str(pub_line.trim()).unwrap();
    assert!(publ.child.wait().unwrap().success());
    let sent = p["samples"].as_u64().unwrap();
    assert_eq!(sent, 2_000_000);
    sub.signal(Signal::CONT);
    let r = sub.result();
    let (received, lost) = (r["received"].as_u64().unwrap(), r["lost"].as_u64().unwrap());
    assert_eq!(r["out_of_order"], 0, "{r}");
    assert_eq!(r["corrupt"], 0, "{r}");
    assert!(
        lost > 0 && r["gaps"].as_u64().unwrap() >= 1,
        "a 64 KiB log cannot hold what a stopped subscriber missed: {r}"
    );
    assert_eq!(
        received + lost,
        sent,
        "every message is either delivered or counted as lost: {r}"
    );
}

#[test]
fn a_segment_left_by_a_publisher_killed_with_sigkill_is_reclaimed_by_the_next_publisher() {
    let name = unique("kill");
    let base = ShmBase::new("kill");
    let env = base.env();
    let path = base.segment(&name);
    let args = |count: &'static str| {
        vec![
            "bench",
            "throughput",
            "--role",
            "pub",
            "--name",
            name.as_str(),
            "--count",
            count,
            "--size",
            "32",
            "--json",
        ]
    };
    // The first publisher waits for a subscriber that never comes.
    let first = Role::start_with(&args("1000"), &env);
    wait_until("the segment", || path.exists());
    // While it lives, the name is refused to another publisher, naming its pid.
    let refused = Command::new(exe())
        .args(args("1000"))
        .envs(env)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("live publisher") && err.contains(&first.child.id().to_string()),
        "{err}"
    );
    first.signal(Signal::KILL);
    drop(first);
    assert!(path.exists(), "kill -9 leaves the segment behind");
    // A subscriber started now finds only the dead publisher's segment: it must not take it
    // for a publisher (it would report a connection and its end, and nothing between), but
    // wait. It says `ready` only once attached, so nothing may come yet.
    let mut sub = throughput_sub(&name, "32", &env);
    std::thread::sleep(Duration::from_millis(300));
    assert!(path.exists(), "the dead publisher's segment is still there");
    assert!(
        sub.child.try_wait().unwrap().is_none(),
        "the subscriber ended on a dead publisher's segment instead of waiting"
    );
    // The next publisher detects the dead owner and replaces the segment; the waiting
    // subscriber attaches to it and gets every message.
    let mut second = Role::start_with(&args("1000"), &env);
    sub.expect_ready();
    let r = sub.result();
    assert_eq!(
        (
            r["received"].as_u64(),
            r["lost"].as_u64(),
            r["out_of_order"].as_u64()
        ),
        (Some(1000), Some(0), Some(0)),
        "{r}"
    );
    let p: Value = serde_json::from_str(second.line().trim()).unwrap();
    assert_eq!(p["samples"], 1000);
    assert!(second.child.wait().unwrap().success());
    assert!(
        !path.exists(),
        "a publisher that closes removes its segment"
    );
}

#[test]
fn a_subscriber_whose_publisher_is_killed_keeps_every_message_it_got_in_order_and_ends() {
    let name = unique("died");
    let base = ShmBase::new("died");
    let env = base.env();
    let publ = throughput_pub(&name, "64", &["--count", "1000000000"], &env);
    let mut sub = throughput_sub(&name, "64", &env);
    sub.expect_ready();
    std::thread::sleep(Duration::from_millis(300));
    publ.signal(Signal::KILL);
    let r = sub.result();
    assert!(r["received"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        (
            r["out_of_order"].as_u64(),
            r["corrupt"].as_u64(),
            r["lost"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{r}"
    );
    drop(publ);
    assert!(
        base.segment(&name).exists(),
        "kill -9 leaves the segment (removed with the base)"
    );
}

#[test]
fn pingpong_measures_and_prints_the_stable_json_keys() {
    let out = run(&[
        "bench",
        "pingpong",
        "--count",
        "20000",
        "--warmup-count",
        "1000",
        "--size",
        "32",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    assert_eq!(
        lines
            .iter()
            .map(|l| l["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["floor", "pingpong"]
    );
    let pp = &lines[1];
    for k in [
        "transport",
        "size_bytes",
        "samples",
        "min_ns",
        "mean_ns",
        "median_ns",
        "p99_ns",
        "p999_ns",
        "p9999_ns",
        "max_ns",
        "stddev_ns",
    ] {
        assert!(pp.get(k).is_some(), "missing {k}: {pp}");
    }
    assert_eq!(pp["samples"], 20000);
    assert_eq!(pp["size_bytes"], 32);
    let (min, med, max) = (
        pp["min_ns"].as_f64().unwrap(),
        pp["median_ns"].as_f64().unwrap(),
        pp["max_ns"].as_f64().unwrap(),
    );
    assert!(0.0 < min && min <= med && med <= max, "{pp}");
    // The ratio is each block against the cache-line floor measured around it; a block whose
    // floor moved between the bursts (the guest changing mode) is left out, so a run where every
    // block straddled a move has no ratio, and says so, rather than a false one.
    let steady = pp["detail"]["blocks_steady_floor"].as_u64().unwrap();
    assert!(steady <= pp["detail"]["blocks"].as_u64().unwrap(), "{pp}");
    if steady > 0 {
        assert!(pp["median_x_floor"].as_f64().unwrap() > 0.0, "{pp}");
    } else {
        assert!(pp.get("median_x_floor").is_none(), "{pp}");
        assert_eq!(pp["detail"]["floor_moved"], true, "{pp}");
    }
}

#[test]
fn pingpong_with_blocking_receivers_completes() {
    let out = run(&[
        "bench",
        "pingpong",
        "--count",
        "2000",
        "--warmup-count",
        "100",
        "--idle",
        "block",
        "--no-floor",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    assert_eq!(lines[0]["samples"], 2000);
    assert_eq!(lines[0]["detail"]["idle"], "block");
}

/// `--group`: the pings through a failover group of one member (every ping arbitrated and
/// echoed once, or the run fails: an echo of another ping is an error).
#[test]
fn pingpong_through_a_failover_group_completes() {
    // `--warmup` is --warmup-count's older spelling: it still works.
    let out = run(&[
        "bench", "pingpong", "--count", "2000", "--warmup", "100", "--group", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    let pp = lines.iter().find(|l| l["kind"] == "pingpong").unwrap();
    assert_eq!(pp["samples"], 2000);
    assert_eq!(pp["detail"]["failover_group"], "bench");
}

#[test]
fn bad_flags_are_rejected_naming_the_value_and_what_is_accepted() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["bench", "pingpong", "--size", "4"], &["--size 4", "8 to"]),
        (
            &["bench", "pingpong", "--transport", "sctp"],
            &["'sctp'", "--transport", "ipc, udp, mcast, tcp"],
        ),
        (
            &["bench", "pingpong", "--transport", "udp", "--role", "pong"],
            &["--ping-uri and --pong-uri"],
        ),
        (
            &[
                "bench",
                "pingpong",
                "--transport",
                "udp",
                "--ping-uri",
                "tcp://127.0.0.1:1",
            ],
            &["--ping-uri tcp://127.0.0.1:1", "give a udp:// URI"],
        ),
        (
            &[
                "bench",
                "throughput",
                "--transport",
                "mcast",
                "--uri",
                "mcast://10.0.0.1:5000",
            ],
            &["10.0.0.1 is not a multicast group"],
        ),
        (
            &["bench", "pingpong", "--cpus", "0,99"],
            &["0,99", "allowed set"],
        ),
        (
            &["bench", "pingpong", "--cpus", "zero"],
            &["zero", "two CPU numbers"],
        ),
        (
            &["bench", "pingpong", "--cpus", "0,0"],
            &["0,0", "two different CPUs"],
        ),
        (
            &["bench", "pingpong", "--idle", "busy"],
            &["'busy'", "spin, yield, backoff, block"],
        ),
        (&["bench", "pingpong", "--count", "0"], &["0", "--count"]),
        (
            &["bench", "throughput", "--capacity", "1000"],
            &["'1000'", "power of two"],
        ),
        (
            &["bench", "throughput", "--policy", "drop"],
            &["'drop'", "backpressure or overwrite"],
        ),
        (
            &["bench", "throughput", "--subscribers", "0"],
            &["--subscribers 0", "1 to 64"],
        ),
        (
            &["bench", "throughput", "--size", "9000000"],
            &["--size 9000000", "raise --capacity"],
        ),
        (
            &["bench", "throughput", "--seconds", "0"],
            &["--seconds 0", "more than 0"],
        ),
        (
            &["bench", "throughput", "--role", "ping", "--name", "x"],
            &["not a throughput role"],
        ),
        (&["bench", "pingpong", "--role", "ping"], &["--name"]),
        (&["bench", "frobnicate"], &["frobnicate"]),
    ];
    for (args, needles) in cases {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        for n in *needles {
            assert!(err.contains(n), "{args:?}: '{n}' missing from: {err}");
        }
    }
}

/// Issue 35: a subscriber process stopped with SIGSTOP holds a back-pressure publisher for
/// `flow_timeout_ms` at most. The publisher goes on in a new log; the other subscriber receives
/// every message; the stopped one, continued after the publisher finished and left, receives
/// what the old log held and is told exactly what it missed.
#[test]
fn a_stopped_subscriber_holds_a_back_pressure_publisher_for_the_flow_timeout_only() {
    let name = unique("bpstop");
    let base = ShmBase::new("bpstop");
    let env = base.env();
    let uri = format!("ipc://{name}?policy=backpressure&capacity=64k&flow_timeout_ms=200");
    let sent_target = 2_000_000u64;
    let count = sent_target.to_string();
    let mut publ = throughput_pub(
        &name,
        "32",
        &["--uri", &uri, "--subscribers", "2", "--count", &count],
        &env,
    );
    wait_until("the segment", || base.segment(&name).exists());
    // The publisher waits for both subscribers: stopped meanwhile, it publishes nothing until
    // one of them is stopped, so that one provably misses messages, however fast the machine.
    publ.signal(Signal::STOP);
    let mut live = throughput_sub(&name, "32", &env);
    let mut stopped = throughput_sub(&name, "32", &env);
    live.expect_ready();
    stopped.expect_ready();
    stopped.signal(Signal::STOP);
    publ.signal(Signal::CONT);
    // Without the flow timeout the publisher would wait for the stopped subscriber for ever.
    let p: Value = serde_json::from_str(publ.line().trim()).unwrap();
    assert!(publ.child.wait().unwrap().success());
    assert_eq!(p["samples"].as_u64().unwrap(), sent_target, "{p}");
    let r = live.result();
    assert_eq!(r["received"].as_u64().unwrap(), sent_target, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["out_of_order"], 0, "{r}");
    assert_eq!(r["corrupt"], 0, "{r}");
    stopped.signal(Signal::CONT);
    let r = stopped.result();
    let (received, lost) = (r["received"].as_u64().unwrap(), r["lost"].as_u64().unwrap());
    assert_eq!(r["out_of_order"], 0, "{r}");
    assert_eq!(r["corrupt"], 0, "{r}");
    assert!(
        lost > 0 && r["gaps"].as_u64().unwrap() == 1,
        "a 64 KiB log cannot hold what a stopped subscriber missed: {r}"
    );
    assert_eq!(
        received + lost,
        sent_target,
        "every message is either delivered or counted as lost: {r}"
    );
}
