//! `peregrine pub --group` and `peregrine sub --group` as separate processes: members of a
//! failover group killed with SIGKILL one after the other (and restarted) while the
//! subscriber's stream goes on with every sequence once, in order; `peregrine bench failover`;
//! and the flags' errors.

#[allow(dead_code)] // the process helpers serve other test files
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_peregrine")
}

/// A running `peregrine` whose standard output is collected line by line.
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = Command::new(exe())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("peregrine runs");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Proc { child, lines }
    }

    /// Waits (up to 20 s) until a line satisfies `f`, after line `from`; returns its index.
    fn wait_line(&self, from: usize, what: &str, f: impl Fn(&str) -> bool) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            {
                let lines = self.lines.lock().unwrap();
                if let Some(i) = lines[from.min(lines.len())..].iter().position(|l| f(l)) {
                    return from + i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no line {what} after line {from}:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn session(&self) -> String {
        let i = self.wait_line(0, "publishing", |l| l.starts_with("publishing"));
        let l = self.lines.lock().unwrap()[i].clone();
        l.split("as session ").nth(1).unwrap()[..8].to_string()
    }
}

/// The subscriber's `[sub ...]` line reports this many members.
fn members(n: usize) -> impl Fn(&str) -> bool {
    move |l: &str| l.starts_with("[sub ") && l.contains(&format!("members {n},"))
}

#[test]
fn every_sequence_comes_once_in_order_while_members_are_killed_in_turn() {
    let topic = format!("fo{}.kill", std::process::id());
    let publisher = |t: &str| {
        Proc::start(&[
            "pub",
            t,
            "--group",
            "engine",
            "--rate",
            "2000",
            "--linger-ms",
            "0",
        ])
    };
    // A window of a minute: a gap is then declared only when every live member went past it,
    // never because a member was slow on a loaded machine.
    let sub = Proc::start(&[
        "sub",
        &topic,
        "--group",
        "engine",
        "--window-ms",
        "60000",
        "--print",
        "--seconds",
        "60",
    ]);
    sub.wait_line(0, "subscribed", |l| l.starts_with("subscribed"));
    let mut a = publisher(&topic);
    let b = publisher(&topic);
    let mut kills = Vec::new();
    let mut seen = sub.wait_line(0, "with two members", members(2));
    // Kill the first member; start it again; once both are heard, kill the other.
    let mut survivor = b;
    for round in 0..2 {
        kills.push(a.session());
        a.kill();
        seen = sub.wait_line(seen, "with one member", members(1));
        let again = publisher(&topic);
        seen = sub.wait_line(seen, "with two members again", members(2));
        if round == 0 {
            a = survivor;
            survivor = again;
        } else {
            a = again;
        }
    }
    thread::sleep(Duration::from_millis(300));
    let mut sub = sub;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(sub.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = sub.child.wait().unwrap();
    // The reader thread ends with the pipe.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sub
        .lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("done"))
    {
        assert!(Instant::now() < deadline, "no done line");
        thread::sleep(Duration::from_millis(20));
    }
    a.kill();
    survivor.kill();
    let lines = sub.lines.lock().unwrap().clone();
    let all = lines.join("\n");
    assert!(status.success(), "{all}");
    // "TOPIC seq=N session=S len=L: #N...."
    let delivered: Vec<(u64, String)> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{topic} seq=")))
        .map(|rest| {
            let seq: u64 = rest.split(' ').next().unwrap().parse().unwrap();
            let session = rest.split("session=").nth(1).unwrap()[..8].to_string();
            assert!(rest.contains(&format!(": #{seq}.")), "{rest}");
            (seq, session)
        })
        .collect();
    assert!(
        delivered.len() > 1000,
        "{} delivered\n{all}",
        delivered.len()
    );
    for w in delivered.windows(2) {
        assert_eq!(w[1].0, w[0].0 + 1, "a gap or a duplicate at {:?}\n{all}", w);
    }
    for k in &kills {
        let last = delivered.iter().rposition(|d| &d.1 == k);
        assert!(
            last.is_none_or(|i| i + 1 < delivered.len()),
            "delivery stopped with killed member {k}"
        );
    }
    let sessions: std::collections::BTreeSet<&String> = delivered.iter().map(|d| &d.1).collect();
    assert!(
        sessions.len() >= 2,
        "copies of one member only: {sessions:?}"
    );
    assert!(!all.contains("LOST"), "{all}");
    let done = lines.iter().find(|l| l.starts_with("done")).unwrap();
    assert!(
        done.contains(", lost 0,") && done.contains("disagreements 0"),
        "{done}"
    );
    assert_eq!(all.matches("member gone: session=").count(), 2, "{all}");
}

#[test]
fn group_flags_are_checked_with_the_fix() {
    peregrine_testkit::assert_refused(
        exe(),
        &["sub"],
        &[
            (
                &["md.*", "--group", "g", "--seconds", "1"],
                "needs one topic name",
            ),
            (&["t", "--group", ""], "1 to 64 bytes"),
            (
                &["t", "--group", "g", "--window-ms", "0"],
                "from 1 to 60000",
            ),
            (&["t", "--window-ms", "50"], "--group"),
            (&["t", "--regex", "--group", "g"], "cannot be used with"),
        ],
    );
    peregrine_testkit::assert_refused(
        exe(),
        &["pub"],
        &[(&["t", "--group", "a\tb"], "1 to 64 bytes")],
    );
}

/// `bench failover --paths`: line A cut twice in the network under the stream (an nft rule in
/// a namespace of the run's own), nothing lost, duplicated or repaired.
#[test]
fn bench_failover_cuts_line_a_and_the_b_line_carries_the_stream_whole() {
    if !peregrine_testkit::root("--paths cuts a line with nft in a network namespace")
        || peregrine_testkit::program("nft", "apt-get install nftables").is_none()
        || peregrine_testkit::program("ip", "apt-get install iproute2").is_none()
    {
        return;
    }
    let _one = common::one_bench_at_a_time();
    let out = common::fresh_results_dir("failover-paths");
    let o = common::run_bench(&[
        "bench",
        "failover",
        "--transport",
        "udp",
        "--kills",
        "2",
        "--rate",
        "10k",
        "--paths",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let p = lines
        .iter()
        .find(|l| l["case"] == "paths")
        .unwrap_or_else(|| panic!("no paths case: {stdout}"));
    assert_eq!(p["kills"], 2, "{p}");
    for k in [
        "lost",
        "duplicated",
        "out_of_order",
        "corrupt",
        "transport_lost",
        "naks_sent",
    ] {
        assert_eq!(p[k], 0, "{k}: {p}");
    }
    assert!(p["delivered"].as_u64() > Some(1000), "{p}");
    assert!(
        p["line_duplicates"].as_u64() > Some(1000),
        "both lines carried: {p}"
    );
    for k in ["gaps_ns", "baseline_gaps_ns"] {
        let v = p[k].as_array().unwrap();
        assert_eq!(v.len(), 2, "{k}: {p}");
        assert!(v.iter().all(|g| g.as_u64() > Some(0)), "{k}: {p}");
    }
}

#[test]
fn bench_failover_kills_the_leader_and_checks_every_sequence_on_each_transport() {
    let _one = common::one_bench_at_a_time();
    let out = common::fresh_results_dir("failover");
    let o = common::run_bench(&[
        "bench",
        "failover",
        "--transport",
        "ipc,udp,tcp",
        "--kills",
        "2",
        "--rate",
        "10k",
        // As above: nothing is declared lost for a member's slowness.
        "--window-ms",
        "60000",
        "--distributors",
        "--feeds",
        "--items",
        "20",
        "--feed-rate",
        "2k",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    // The A/B feed pair: every item's updates once, in order (the bench fails otherwise),
    // and what each kill cost.
    let f = &lines[3];
    assert_eq!(
        (f["case"].as_str(), f["kills"].as_u64()),
        (Some("feeds"), Some(2)),
        "{f}"
    );
    assert_eq!(
        (f["lost"].as_u64(), f["duplicated"].as_u64()),
        (Some(0), Some(0)),
        "{f}"
    );
    assert!(f["delivered"].as_u64().unwrap() > 1000, "{f}");
    for k in ["gaps_ns", "stale_per_kill", "baseline_gaps_ns"] {
        assert_eq!(f[k].as_array().unwrap().len(), 2, "{k}: {f}");
    }
    assert!(
        f["gaps_ns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g.as_u64() > Some(0)),
        "{f}"
    );
    // The distributor pair, warm: the standby resumed, nothing stale (the bench fails
    // otherwise), no new login.
    let w = &lines[5];
    assert_eq!(
        (w["case"].as_str(), w["mode"].as_str(), w["kills"].as_u64()),
        (Some("distributors"), Some("warm"), Some(2)),
        "{w}"
    );
    assert_eq!(
        (w["incomplete_kills"].as_u64(), w["stale_items"].as_u64()),
        (Some(0), Some(0)),
        "{w}"
    );
    assert!(
        w["gaps_ns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g.as_u64() > Some(0)),
        "{w}"
    );
    // The distributor pair: every item stale after each kill, then re-imaged by the other.
    let d = &lines[4];
    assert_eq!(d["mode"], "cold", "{d}");
    assert_eq!(
        (d["case"].as_str(), d["kills"].as_u64()),
        (Some("distributors"), Some(2)),
        "{d}"
    );
    assert_eq!(d["incomplete_kills"], 0, "{d}");
    assert_eq!(d["gaps_ns"].as_array().unwrap().len(), 2, "{d}");
    assert!(
        d["gaps_ns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g.as_u64() > Some(0)),
        "{d}"
    );
    for (l, t) in lines.iter().zip(["ipc", "udp", "tcp"]) {
        assert_eq!(l["kind"], "failover");
        assert_eq!(l["case"], "group");
        assert_eq!(l["transport"], t);
        assert_eq!(l["kills"], 2);
        assert_eq!(l["gaps_ns"].as_array().unwrap().len(), 2);
        assert_eq!(
            l["seq_steps"],
            serde_json::json!([1, 1]),
            "the survivor supplied the next sequence: {l}"
        );
        for k in ["lost", "duplicated", "out_of_order", "corrupt"] {
            assert_eq!(l[k], 0, "{k}: {l}");
        }
        assert!(l["delivered"].as_u64().unwrap() > 1000, "{l}");
        assert!(l["gap_max_ns"].as_u64().unwrap() >= l["gap_median_ns"].as_u64().unwrap());
        // One no-kill probe per round (before each kill, and after the last restart).
        let probes = l["baseline_gaps_ns"].as_array().unwrap().len();
        assert!((1..=3).contains(&probes), "{l}");
        assert!(l["gap_x_baseline"].as_f64().is_some(), "{l}");
    }
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(report.contains("Failover\n--------"), "{report}");
    let rows = report.lines().filter(|l| l.starts_with("group ")).count();
    assert_eq!(rows, 3, "one row per transport: {report}");
    for case in ["distributors (cold) ", "distributors (warm) "] {
        assert!(
            report.lines().any(|l| l.starts_with(case)),
            "{case}: {report}"
        );
    }
    assert!(report.lines().any(|l| l.starts_with("feeds ")), "{report}");
    assert!(
        out.join("charts/failover_gaps.svg").exists(),
        "the failover chart is drawn"
    );
    let _ = std::fs::remove_dir_all(&out);
}
