//! `peregrine record` and `peregrine replay` across processes: a publisher's messages are
//! recorded by a recorder of its topic's glob and replayed exactly as the publisher printed
//! them (whole, and from a sequence); bad flags and an unknown topic are refused, named.

#[allow(dead_code)] // the helpers serve other test files
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_peregrine")
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(exe()).args(args).output().unwrap()
}

/// `seq=S len=L: PAYLOAD` of a `pub --print` or `replay --print` line.
fn tail(line: &str) -> Option<String> {
    line.find(" seq=").map(|i| line[i + 1..].to_string())
}

#[test]
fn what_a_publisher_sent_is_recorded_and_replayed_exactly() {
    let pid = std::process::id();
    let dir: PathBuf = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("p{pid}.rec.a");
    let glob = format!("p{pid}.rec.*");
    let mut rec = Command::new(exe())
        .args(["record", "--topics", &glob, "--dir"])
        .arg(&dir)
        .args([
            "--fsync",
            "each",
            "--segment-len",
            "64k",
            "--serve",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let out = rec.stdout.take().unwrap();
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(l);
            }
        })
    };
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lines.lock().unwrap().iter().any(|l| l.contains(what)) {
            assert!(
                Instant::now() < deadline,
                "no {what:?} from the recorder: {:?}",
                lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for("recording ");
    // The publisher waits for the recorder to find it: every message is the recorder's.
    let sent = run(&[
        "pub",
        &topic,
        "--count",
        "3000",
        "--rate",
        "20k",
        "--print",
        "--wait-subscribers",
        "1",
    ]);
    assert!(sent.status.success(), "{sent:?}");
    let sent: Vec<String> = String::from_utf8_lossy(&sent.stdout)
        .lines()
        .filter(|l| l.starts_with("sent "))
        .filter_map(tail)
        .collect();
    assert_eq!(sent.len(), 3000);
    wait_for(": 3000 messages");
    // The same over TCP, from the recorder itself.
    let served = {
        let l = lines.lock().unwrap();
        let first = l
            .iter()
            .find(|l| l.starts_with("recording "))
            .unwrap()
            .clone();
        first
            .rsplit_once("serving replays on ")
            .unwrap_or_else(|| panic!("{first}"))
            .1
            .to_string()
    };
    let o = run(&["replay", "--recorder", &served, &topic, "--print"]);
    assert!(o.status.success(), "{o:?}");
    let over_tcp: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(tail)
        .collect();
    assert_eq!(over_tcp, sent, "the replay over TCP is what was sent");
    peregrine_testkit::signal(rec.id(), rustix::process::Signal::TERM).unwrap();
    assert!(rec.wait().unwrap().success());
    reader.join().unwrap();
    let out = lines.lock().unwrap().join("\n");
    assert!(out.contains("started "), "{out}");
    assert!(out.contains("done: 3000 messages"), "{out}");
    assert!(!out.contains("FAILED") && !out.contains("LOST"), "{out}");

    let replay = |more: &[&str]| {
        let mut args = vec!["replay", "--dir", dir.to_str().unwrap(), &topic, "--print"];
        args.extend_from_slice(more);
        let o = run(&args);
        assert!(o.status.success(), "{o:?}");
        let lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(tail)
            .collect();
        (lines, String::from_utf8_lossy(&o.stderr).to_string())
    };
    let (all, err) = replay(&[]);
    assert_eq!(all, sent, "the replay is what was sent");
    assert!(err.contains("replayed 3000 messages"), "{err}");
    // From the 1000th message's sequence.
    let from: u64 = sent[1000]["seq=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (later, _) = replay(&["--from-seq", &from.to_string()]);
    assert_eq!(later, sent[1000..]);
    // Before the first message's time: everything; a time to come: nothing.
    let (since, _) = replay(&["--since", "1970-01-01T00:00:00Z"]);
    assert_eq!(since.len(), 3000);
    let (none, _) = replay(&["--since", "2262-01-01T00:00:00Z"]);
    assert!(none.is_empty());
    let o = run(&["replay", "--dir", dir.to_str().unwrap(), "no.such.topic"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("holds no recording of topic no.such.topic"),
        "{o:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_record_flags_are_refused_with_the_fix() {
    for (args, says) in [
        (
            vec![
                "record",
                "--topics",
                "t",
                "--dir",
                "/tmp/x",
                "--fsync",
                "sometimes",
            ],
            "give none, each, or interval:MS",
        ),
        (
            vec![
                "record",
                "--topics",
                "t",
                "--dir",
                "/tmp/x",
                "--segment-len",
                "1000",
            ],
            "segment length 1000 is not accepted",
        ),
        (
            vec!["replay", "--dir", "/tmp/x", "t", "--since", "yesterday"],
            "is not a time",
        ),
        (vec!["record", "--dir", "/tmp/x"], "--topics <TOPICS>"),
        (
            vec![
                "record",
                "--dir",
                "/tmp/x",
                "--topics",
                "t",
                "--service",
                "FEED2",
            ],
            "--backbone",
        ),
        (
            vec![
                "record",
                "--dir",
                "/tmp/x",
                "--backbone",
                "mcast://239.255.96.1:40900?auth=none",
                "--service",
                "no spaces",
            ],
            "--service no spaces",
        ),
        (
            vec![
                "record",
                "export",
                "--dir",
                "/tmp/x",
                "--out",
                "/tmp/x.parquet",
                "--format",
                "csv",
            ],
            "--format csv is not a format this export writes: give parquet",
        ),
        (
            vec![
                "record",
                "export",
                "--dir",
                "/nonexistent/rec",
                "--out",
                "/tmp/x.parquet",
            ],
            "/nonexistent/rec",
        ),
    ] {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn bench_record_measures_recording_and_replay_against_the_disk() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-rec-{}", std::process::id()));
    let o = run(&[
        "bench",
        "record",
        "--size",
        "32,1024",
        "--bytes",
        "2m",
        "--runs",
        "1",
        "--dir",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    // The export of a recording of market data: every message a row (the command checks).
    assert_eq!(rows[2]["kind"], "export");
    assert_eq!(rows[2]["rows"], 16_384, "one per 128 bytes of --bytes 2m");
    assert!(rows[2]["rows_per_s"].as_f64() > Some(0.0), "{}", rows[2]);
    for (r, size) in rows.iter().zip([32, 1024]) {
        // Recorded from a live stream over shared memory: back-pressured, never lost.
        assert_eq!(r["live_lost"], 0, "{r}");
        assert!(r["live_msgs_per_s"].as_f64() > Some(0.0), "{r}");
        assert_eq!(r["kind"], "record");
        assert_eq!(r["size_bytes"], size);
        // Every message was replayed and checked (the command fails otherwise).
        assert!(r["messages"].as_u64() > Some(1000), "{r}");
        for k in [
            "record_msgs_per_s",
            "append_ceiling_bytes_per_s",
            "replay_msgs_per_s",
            "seek_us",
            "seek_without_index_us",
            "read_ceiling_bytes_per_s",
        ] {
            assert!(r[k].as_f64() > Some(0.0), "{k}: {r}");
        }
        assert_eq!(r["record_x_ceiling"].as_array().unwrap().len(), 1);
    }
    assert!(!dir.exists(), "the bench removes its files");
}

/// Replayed `seq=S len=L: PAYLOAD` lines of `topic` in `dir`.
fn replayed(dir: &std::path::Path, topic: &str) -> Vec<String> {
    let o = run(&["replay", "--dir", dir.to_str().unwrap(), topic, "--print"]);
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(tail)
        .collect()
}

fn seq_of(line: &str) -> u64 {
    line["seq=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_recorder_killed_and_started_again_keeps_what_it_had_and_records_each_message_once() {
    let pid = std::process::id();
    let dir: PathBuf =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-kill-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("p{pid}.kill.a");
    let start = || {
        let mut c = Command::new(exe())
            .args(["record", "--topics", &topic, "--dir"])
            .arg(&dir)
            .args(["--fsync", "each"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        // Its first line: subscribed.
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("recording "), "{first}");
        (c, lines)
    };
    let (mut first, mut lines) = start();
    let mut publ = Command::new(exe())
        .args([
            "pub",
            &topic,
            "--count",
            "6000",
            "--rate",
            "2000",
            "--wait-subscribers",
            "1",
            "--linger-ms",
            "3000",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the stream is being recorded, mid-stream.
    let started = lines.next().unwrap().unwrap();
    assert!(started.starts_with("started "), "{started}");
    std::thread::sleep(Duration::from_millis(800));
    first.kill().unwrap();
    first.wait().unwrap();
    let before = replayed(&dir, &topic);
    assert!(!before.is_empty());
    let (mut second, _lines) = start();
    assert!(publ.wait().unwrap().success());
    // The publisher lingered for its subscribers; the recorder's stream ends with it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let a = replayed(&dir, &topic);
        // The last message ("#5999..." padded with dots) is the restarted recorder's.
        if a.iter()
            .any(|l| l.ends_with(": #5999..........................."))
        {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted recorder did not record the last message: {:?}",
            a.last()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    peregrine_testkit::signal(second.id(), rustix::process::Signal::TERM).unwrap();
    second.wait().unwrap();
    // What was on disk at the kill is still there, first; nothing twice; in order.
    assert_eq!(after[..before.len()], before[..]);
    let seqs: Vec<u64> = after.iter().map(|l| seq_of(l)).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "in order, once each");
    assert!(after.len() > before.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `peregrine pub TOPIC --stdin` with `env`, waiting for one subscriber: each line the test
/// writes is a message, sent as it comes. Message `i` is `m{i}`.
struct Feed {
    publ: std::process::Child,
    input: Option<std::process::ChildStdin>,
    written: u64,
}

impl Feed {
    fn start(topic: &str, env: &[(&str, &str)]) -> Feed {
        let mut publ = Command::new(exe())
            .args(["pub", topic, "--stdin", "--wait-subscribers", "1"])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let input = publ.stdin.take();
        Feed {
            publ,
            input,
            written: 0,
        }
    }

    /// Writes the next `n` messages; the number written in all.
    fn write(&mut self, n: u64) -> u64 {
        let text: String = (self.written..self.written + n)
            .map(|i| format!("m{i}\n"))
            .collect();
        let input = self.input.as_mut().expect("the input is open");
        std::io::Write::write_all(input, text.as_bytes()).unwrap();
        self.written += n;
        self.written
    }

    /// Ends the input: the publisher sends what it has and exits, successfully.
    fn finish(mut self) {
        drop(self.input.take());
        assert!(self.publ.wait().unwrap().success());
    }
}

/// `peregrine record --topics TOPIC --dir DIR --fsync none --serve 127.0.0.1:0` with `env`,
/// once it has started: its lines, and the address it serves replays on.
fn serving_recorder(topic: &str, dir: &std::path::Path, env: &[(&str, &str)]) -> (Lines, String) {
    let mut rec = Command::new(exe());
    rec.args(["record", "--topics", topic, "--dir"])
        .arg(dir)
        .args(["--fsync", "none", "--serve", "127.0.0.1:0"])
        .envs(env.iter().copied());
    let rec = Lines::start(rec);
    rec.wait_for(|l| l.starts_with("recording "), "the recorder's start");
    let served = rec.served();
    (rec, served)
}

/// A process whose output lines are collected by a thread.
struct Lines {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Lines {
    fn start(mut c: Command) -> Lines {
        let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Lines { child, lines }
    }

    fn any(&self, f: impl Fn(&str) -> bool) -> bool {
        self.lines.lock().unwrap().iter().any(|l| f(l))
    }

    /// The address a `record --serve` process serves replays on, from its first line.
    fn served(&self) -> String {
        let l = self.lines.lock().unwrap();
        let first = l.iter().find(|l| l.starts_with("recording ")).unwrap();
        first
            .rsplit_once("serving replays on ")
            .unwrap_or_else(|| panic!("{first}"))
            .1
            .to_string()
    }

    /// Waits up to 30 s for a line `f` accepts.
    fn wait_for(&self, f: impl Fn(&str) -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.any(&f) {
            assert!(
                Instant::now() < deadline,
                "no line of {what}: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_subscriber_from_a_past_sequence_gets_history_then_live_with_no_gap_and_no_duplicate() {
    let pid = std::process::id();
    let dir: PathBuf =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-merge-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("p{pid}.merge.a");
    // Over UDP (not shared memory, whose log a late subscriber reads from its start), and the
    // merging subscribers join at the live position (no late join from the publisher's
    // retention): what they missed can only come from the recording.
    let udp = [("PEREGRINE_RESOLVER_LOCAL", "none")];
    let (rec, served) = serving_recorder(&topic, &dir, &udp);
    // The deadline only turns a hang into a failure.
    let deadline = Instant::now() + Duration::from_secs(60);
    let until = |what: &str, f: &dyn Fn() -> bool| {
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The publisher sends the lines the test writes, as they come: the history is written
    // first, the live part only once the subscribers exist, so both parts are certain
    // whatever the machine's speed.
    let mut feed = Feed::start(&topic, &udp);
    const HISTORY: u64 = 30_000;
    let mut sent = feed.write(HISTORY);
    until("the recorder recorded the history", &|| {
        let o = run(&["replay", "--dir", dir.to_str().unwrap(), &topic]);
        String::from_utf8_lossy(&o.stderr).contains(&format!("replayed {HISTORY} messages"))
    });
    let sub = |history: &[&str]| {
        let mut c = Command::new(exe());
        c.args(["sub", topic.as_str(), "--from-seq", "0", "--print"])
            .args(history)
            .envs(udp)
            .env("PEREGRINE_UDP_LATE_JOIN", "none");
        Lines::start(c)
    };
    // Two recorders for redundancy, the first not there: the second answers.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let recorders = format!("{dead},{served}");
    let subs = [
        ("--dir", sub(&["--dir", dir.to_str().unwrap()])),
        ("--recorder", sub(&["--recorder", &recorders])),
    ];
    // Live messages until both subscribers reached their seam (a live message is what ends
    // a history), then to 60,000 in all, then the end of the input.
    while !subs.iter().all(|(_, s)| s.any(|l| l.starts_with("seam "))) {
        assert!(Instant::now() < deadline, "no seam");
        sent = feed.write(100);
        std::thread::sleep(Duration::from_millis(10));
    }
    let total = feed.write(60_000u64.saturating_sub(sent));
    feed.finish();
    let last = format!(": m{}", total - 1);
    for (name, s) in &subs {
        until(&format!("{name}: the last message"), &|| {
            s.any(|l| l.ends_with(&last))
        });
    }
    for (name, mut s) in subs {
        peregrine_testkit::signal(s.child.id(), rustix::process::Signal::TERM).unwrap();
        s.child.wait().unwrap();
        let lines = s.lines.lock().unwrap().clone();
        let seqs: Vec<u64> = lines
            .iter()
            .filter_map(|l| tail(l))
            .map(|l| seq_of(&l))
            .collect();
        assert_eq!(seqs.len() as u64, total, "{name}");
        assert!(
            seqs.iter().enumerate().all(|(i, s)| *s == i as u64),
            "{name}: every sequence once, in order"
        );
        let seam = lines.iter().find(|l| l.starts_with("seam ")).unwrap();
        let recorded: u64 = seam
            .split(": ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            recorded >= HISTORY,
            "{name}: the history came from the recording: {seam}"
        );
        assert!(!lines.iter().any(|l| l.starts_with("GAP ")), "{name}");
        // The summary counts what was delivered, and the live copies the seam dropped.
        let done = lines
            .iter()
            .find(|l| l.starts_with("done"))
            .unwrap_or_else(|| panic!("{name}: no summary line"));
        assert!(
            done.contains(&format!("received {total} messages"))
                && done.contains("live copies of recorded ones dropped "),
            "{name}: {done}"
        );
    }
    let mut rec = rec;
    peregrine_testkit::signal(rec.child.id(), rustix::process::Signal::TERM).unwrap();
    rec.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `args` of this crate's binary inside network namespace `ns` with `env`.
fn in_ns(ns: &str, args: &[&str], env: &[(&str, String)]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, exe()]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

#[test]
fn two_recorders_on_two_hosts_record_a_multicast_stream_and_either_serves_its_replay() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let pid = std::process::id();
    let hosts = common::TwoHosts::new("rc", 93);
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir: PathBuf = tmp.join(format!("rec-hosts-{pid}"));
    let dir_a: PathBuf = tmp.join(format!("rec-hosts-a-{pid}"));
    for d in [&dir, &dir_a] {
        let _ = std::fs::remove_dir_all(d);
    }
    let topic = format!("p{pid}.hosts.a");
    // Each host on its own address; the publisher offers a multicast group to other hosts.
    let group = format!(
        "mcast://239.255.93.{}:{}",
        1 + pid % 250,
        31_000 + pid % 2000
    );
    let env = |addr: std::net::Ipv4Addr| {
        vec![
            ("PEREGRINE_RESOLVER_IFACE", addr.to_string()),
            ("PEREGRINE_MCAST_IFACE", addr.to_string()),
            ("PEREGRINE_RESOLVER_REMOTE", group.clone()),
        ]
    };
    // Two recorders of the stream for redundancy: one on each host, each serving replays.
    let recorder = |ns: &str, addr: std::net::Ipv4Addr, d: &PathBuf| {
        let mut rec = in_ns(
            ns,
            &[
                "record",
                "--topics",
                &topic,
                "--dir",
                d.to_str().unwrap(),
                "--serve",
                &format!("{addr}:0"),
            ],
            &env(addr),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
        let mut lines = BufReader::new(rec.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("recording "), "{first}");
        let served = first
            .rsplit_once("serving replays on ")
            .unwrap()
            .1
            .to_string();
        (rec, lines, served)
    };
    let (mut rec, mut lines, served_b) = recorder(&hosts.b, hosts.addr_b, &dir);
    let (mut rec_a, mut lines_a, served_a) = recorder(&hosts.a, hosts.addr_a, &dir_a);
    let publ = in_ns(
        &hosts.a,
        &[
            "pub",
            &topic,
            "--count",
            "2000",
            "--rate",
            "5000",
            "--print",
            "--wait-subscribers",
            "2",
        ],
        &env(hosts.addr_a),
    )
    .output()
    .unwrap();
    assert!(publ.status.success(), "{publ:?}");
    let sent: Vec<String> = String::from_utf8_lossy(&publ.stdout)
        .lines()
        .filter(|l| l.starts_with("sent "))
        .filter_map(tail)
        .collect();
    assert_eq!(sent.len(), 2000);
    // The stream ends at each recorder when the publisher closes.
    for lines in [&mut lines, &mut lines_a] {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        for l in lines.by_ref() {
            let l = l.unwrap();
            seen.push(l.clone());
            if l.starts_with("ended ") {
                break;
            }
            assert!(Instant::now() < deadline, "{seen:?}");
        }
        assert!(
            seen.iter()
                .any(|l| l.starts_with("ended ") && l.ends_with(": 2000 messages")),
            "{seen:?}"
        );
    }
    // Replayed on host A from the list of both recorders: the first answers; with it gone,
    // the other host's, across the link.
    let list = format!("{served_a},{served_b}");
    let replay_list = || {
        let o = in_ns(
            &hosts.a,
            &["replay", "--recorder", &list, &topic, "--print"],
            &env(hosts.addr_a),
        )
        .output()
        .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(tail)
            .collect::<Vec<_>>()
    };
    assert_eq!(replay_list(), sent, "from host A's recorder");
    peregrine_testkit::signal(rec_a.id(), rustix::process::Signal::KILL).unwrap();
    rec_a.wait().unwrap();
    assert_eq!(replay_list(), sent, "from host B's recorder, host A's gone");
    peregrine_testkit::signal(rec.id(), rustix::process::Signal::TERM).unwrap();
    rec.wait().unwrap();
    // Replayed here, from the folder the other host wrote.
    assert_eq!(replayed(&dir, &topic), sent);
    for d in [&dir, &dir_a] {
        let _ = std::fs::remove_dir_all(d);
    }
    drop(hosts);
}

/// A feed's ticks recorded off its backbone (`record --backbone`) with a raw topic beside
/// them, exported (`record export`) and read by pyarrow: every message recorded is a row;
/// each item's REFRESH names it and its UPDATEs follow with item_seq +1 each, ending at the
/// last item_seq the feed says it sent (`feed --items-out`); the raw rows are what `pub`
/// sent. (Every value of every column type is checked against known messages by
/// crates/archive/tests/export.rs.)
#[test]
fn a_feeds_ticks_recorded_off_its_backbone_export_to_parquet_for_pyarrow() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let Some(python) =
        peregrine_testkit::python_with(&tmp.join("../pyarrow-venv"), &[("pyarrow", "pyarrow")])
    else {
        return;
    };
    let pid = std::process::id();
    let dir = tmp.join(format!("rec-export-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = peregrine_testkit::free_port(false);
    let backbone = format!("mcast://239.255.96.{}:{port}", 1 + pid % 250);
    let requests = format!("mcast://239.255.96.{}:{}", 1 + pid % 250, port + 1);
    let raw = format!("p{pid}.export.raw");
    let items: Vec<&str> = include_str!("../../md/items/sample.txt")
        .lines()
        .take(10)
        .collect();
    let items_file = dir.join("items.txt");
    std::fs::write(&items_file, items.join("\n") + "\n").unwrap();
    let rec_dir = dir.join("rec");
    let mut c = Command::new(exe());
    c.args(["record", "--backbone", &backbone, "--topics", &raw, "--dir"])
        .arg(&rec_dir);
    let mut lines = Lines::start(c);
    lines.wait_for(|l| l.starts_with("recording "), "the recorder's start");
    let last_seqs = dir.join("last.txt");
    let feed = Command::new(exe())
        .args(["feed", "--items"])
        .arg(&items_file)
        .args([
            "--rate",
            "2000",
            "--duration",
            "1",
            "--backbone",
            &backbone,
            "--requests",
            &requests,
            "--items-out",
        ])
        .arg(&last_seqs)
        .output()
        .unwrap();
    assert!(feed.status.success(), "{feed:?}");
    let sent = run(&[
        "pub",
        &raw,
        "--count",
        "5",
        "--print",
        "--wait-subscribers",
        "1",
    ]);
    assert!(sent.status.success(), "{sent:?}");
    let sent: Vec<String> = String::from_utf8_lossy(&sent.stdout)
        .lines()
        .filter(|l| l.starts_with("sent "))
        .map(|l| l.split_once(": ").unwrap().1.to_string())
        .collect();
    lines.wait_for(|l| l.starts_with("ended md.FEED1 "), "the feed's end");
    lines.wait_for(
        |l| l.starts_with(&format!("ended {raw} ")),
        "the publisher's end",
    );
    peregrine_testkit::signal(lines.child.id(), rustix::process::Signal::TERM).unwrap();
    assert!(lines.child.wait().unwrap().success());
    let out = lines.lines.lock().unwrap().join("\n");
    assert!(!out.contains("FAILED") && !out.contains("LOST"), "{out}");
    let recorded: u64 = out
        .lines()
        .find(|l| l.starts_with("ended md.FEED1 "))
        .and_then(|l| l.rsplit_once(": "))
        .and_then(|(_, n)| n.strip_suffix(" messages"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(recorded >= 10, "the images at least: {out}");

    let parquet = dir.join("ticks.parquet");
    let o = Command::new(exe())
        .args(["record", "export", "--format", "parquet", "--dir"])
        .arg(&rec_dir)
        .arg("--out")
        .arg(&parquet)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains(&format!(
            "exported {} rows of 2 streams to {}: {recorded} market data, 5 raw (0 on md.* topics not market data)",
            recorded + 5,
            parquet.display()
        )),
        "{said}"
    );
    const READ: &str = r#"
import json, sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], columns=["topic", "message_type", "item", "item_seq", "payload", "BID", "receive_time"])
c = {n: t.column(n).to_pylist() for n in ["topic", "message_type", "item", "item_seq", "payload"]}
rows = [[c["topic"][i], c["message_type"][i], c["item"][i], c["item_seq"][i],
         None if c["payload"][i] is None else c["payload"][i].decode()] for i in range(t.num_rows)]
ordered = t.column("receive_time").cast("int64").to_pylist() == sorted(t.column("receive_time").cast("int64").to_pylist())
bids = sum(1 for b in t.column("BID").to_pylist() if b is not None)
print(json.dumps({"rows": rows, "ordered": ordered, "bids": bids}))
"#;
    let read = Command::new(&python)
        .args(["-c", READ])
        .arg(&parquet)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(got["ordered"], true, "rows in receive order");
    // (topic, message_type, item, item_seq, payload)
    type Row = (
        String,
        Option<String>,
        Option<String>,
        Option<u32>,
        Option<String>,
    );
    let rows: Vec<Row> = serde_json::from_value(got["rows"].clone()).unwrap();
    assert_eq!(rows.len() as u64, recorded + 5);
    // The raw topic: what pub sent, in order.
    let raw_rows: Vec<&String> = rows
        .iter()
        .filter(|r| r.0 == raw)
        .map(|r| r.4.as_ref().unwrap())
        .collect();
    assert_eq!(raw_rows, sent.iter().collect::<Vec<_>>());
    // The backbone: per item, a REFRESH then UPDATEs whose item_seq goes up by one, to the
    // last item_seq the feed sent.
    let mut last: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for (topic, ty, item, seq, payload) in rows.iter().filter(|r| r.0 != raw) {
        assert_eq!(topic, "md.FEED1");
        assert!(payload.is_none());
        let (item, seq) = (item.clone().unwrap(), seq.unwrap());
        match ty.as_deref() {
            Some("REFRESH") => {
                assert!(items.contains(&item.as_str()), "{item}");
                assert!(last.insert(item, seq).is_none(), "one image each");
            }
            Some("UPDATE") => {
                let prev = last
                    .get_mut(&item)
                    .expect("an update after its item's image");
                assert_eq!(seq, *prev + 1, "{item}");
                *prev = seq;
            }
            other => panic!("{other:?} on the backbone"),
        }
    }
    assert_eq!(last.len(), items.len());
    let feed_last: std::collections::HashMap<String, u32> = std::fs::read_to_string(&last_seqs)
        .unwrap()
        .lines()
        .map(|l| {
            let (name, seq) = l.split_once(' ').unwrap();
            (name.to_string(), seq.parse().unwrap())
        })
        .collect();
    assert_eq!(last, feed_last, "each item's last item_seq is the feed's");
    assert_eq!(got["bids"], json_u64(recorded), "every quote has its BID");
    let _ = std::fs::remove_dir_all(&dir);
}

fn json_u64(n: u64) -> serde_json::Value {
    serde_json::Value::from(n)
}

/// Off-transport recovery: a subscriber (`sub TOPIC --dir DIR`) stopped with SIGSTOP while
/// its publisher, keeping only 64 KiB or 50 ms of datagrams, sends 20,000 more messages past
/// the stop (the publisher waits for it one flow timeout, then leaves it behind). Resumed, its
/// transport finds the gap beyond the publisher's retention and reports it lost; the
/// subscriber reads the range from the recorder's folder instead and delivers it in order: it
/// prints every message the publisher sent, once, in order, with a `recovered` line and no
/// gap. The stop ends on the publisher's count, not on a time.
#[test]
fn a_loss_beyond_the_publishers_retention_is_recovered_from_the_recording() {
    let pid = std::process::id();
    let dir: PathBuf =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-recover-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("p{pid}.recover");
    let mut c = Command::new(exe());
    c.args(["record", "--topics", &topic, "--fsync", "none", "--dir"])
        .arg(&dir);
    let mut rec = Lines::start(c);
    rec.wait_for(|l| l.starts_with("recording "), "the recorder's start");
    let mut c = Command::new(exe());
    c.args(["sub", &topic, "--print", "--count", "60000", "--dir"])
        .arg(&dir)
        .env("PEREGRINE_RESOLVER_LOCAL", "none")
        .env("PEREGRINE_UDP_RCVBUF", "64k");
    let mut sub = Lines::start(c);
    sub.wait_for(
        |l| l.starts_with("subscribed to "),
        "the subscriber's start",
    );
    let mut c = Command::new(exe());
    c.args([
        "pub",
        &topic,
        "--count",
        "60000",
        "--rate",
        "20k",
        "--print",
        "--wait-subscribers",
        "2",
    ])
    .env("PEREGRINE_RESOLVER_LOCAL", "none")
    .env("PEREGRINE_UDP_RETAIN", "64k")
    .env("PEREGRINE_UDP_RETAIN_MS", "50");
    let mut publ = Lines::start(c);
    let sent_count = |p: &Lines| {
        p.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("sent "))
            .count()
    };
    sub.wait_for(|l| l.contains(" seq=1000 "), "the first 1000 messages");
    peregrine_testkit::signal(sub.child.id(), rustix::process::Signal::STOP).unwrap();
    let stopped_at = sent_count(&publ);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent_count(&publ) < stopped_at + 20_000 {
        assert!(Instant::now() < deadline, "the publisher stopped sending");
        std::thread::sleep(Duration::from_millis(20));
    }
    peregrine_testkit::signal(sub.child.id(), rustix::process::Signal::CONT).unwrap();
    assert!(publ.child.wait().unwrap().success());
    let status = sub.child.wait().unwrap();
    let out = sub.lines.lock().unwrap().clone();
    assert!(
        status.success(),
        "{:?}",
        &out[out.len().saturating_sub(20)..]
    );
    let sent: Vec<String> = publ
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("sent "))
        .filter_map(|l| tail(l))
        .collect();
    assert_eq!(sent.len(), 60_000);
    let got: Vec<String> = out.iter().filter_map(|l| tail(l)).collect();
    let recovered: Vec<&String> = out.iter().filter(|l| l.starts_with("recovered ")).collect();
    let gaps: Vec<&String> = out
        .iter()
        .filter(|l| l.starts_with("GAP") || l.starts_with("LOST"))
        .collect();
    assert!(gaps.is_empty(), "{gaps:?}");
    assert!(
        !recovered.is_empty(),
        "the stop outlived the retention: a loss was recovered"
    );
    assert!(got == sent, "every message once, in order ({recovered:?})");
    peregrine_testkit::signal(rec.child.id(), rustix::process::Signal::TERM).unwrap();
    assert!(rec.child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Durable subscribers: `sub TOPIC --durable NAME --recorder ADDR` keeps its position with the
/// recorder. Stopped cleanly (SIGTERM) after message 99, it is started again after 100 more
/// were sent without it: it resumes at 100 exactly (history, then live), every message once.
/// Killed (SIGKILL) mid-stream, it resumes from its last commit: no gap, and any repeat is
/// only of what it printed after that commit (at least once). The same with the positions
/// in the folder (`--dir`).
#[test]
fn a_durable_subscriber_resumes_where_it_stood_after_a_stop_and_after_a_crash() {
    let pid = std::process::id();
    let dir: PathBuf =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-durable-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("p{pid}.durable");
    let udp = [("PEREGRINE_RESOLVER_LOCAL", "none")];
    let (mut rec, served) = serving_recorder(&topic, &dir, &udp);
    let mut feed = Feed::start(&topic, &udp);
    let recorded = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = run(&["replay", "--dir", dir.to_str().unwrap(), &topic]);
            if String::from_utf8_lossy(&o.stderr).contains(&format!("replayed {n} messages")) {
                return;
            }
            assert!(Instant::now() < deadline, "{n} messages never recorded");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let durable = |name: &str, history: &[&str]| {
        let mut c = Command::new(exe());
        c.args(["sub", topic.as_str(), "--durable", name, "--print"])
            .args(["--commit-ms", "50"])
            .args(history)
            .envs(udp)
            .env("PEREGRINE_UDP_LATE_JOIN", "none");
        Lines::start(c)
    };
    let printed = |s: &Lines| -> Vec<u64> {
        s.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.rsplit_once(": m"))
            .map(|(_, i)| i.parse().unwrap())
            .collect()
    };
    let has = |s: &Lines, i: u64| {
        let end = format!(": m{i}");
        s.any(|l| l.ends_with(&end))
    };
    let wait_has = |s: &Lines, i: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !has(s, i) {
            assert!(
                Instant::now() < deadline,
                "m{i} never printed: {:?}",
                s.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let stop = |mut s: Lines, signal| {
        peregrine_testkit::signal(s.child.id(), signal).unwrap();
        s.child.wait().unwrap();
        s
    };
    use rustix::process::Signal;

    for (name, history) in [
        ("risk", ["--recorder", served.as_str()]),
        ("local", ["--dir", dir.to_str().unwrap()]),
    ] {
        let base = feed.written;
        // A new name starts live: the publisher is told of it before anything is sent.
        let s = durable(name, &history);
        s.wait_for(|l| l.contains("(new name: kept from now on)"), "a new name");
        // (Live from the first message this subscriber hears: wait for it to hear one.)
        while !s.any(|l| l.contains(": m")) {
            feed.write(1);
            std::thread::sleep(Duration::from_millis(20));
        }
        let first = printed(&s)[0];
        feed.write(base + 100 - feed.written);
        wait_has(&s, base + 99);
        let s = stop(s, Signal::TERM);
        let got = printed(&s);
        assert_eq!(got, (first..base + 100).collect::<Vec<_>>(), "{name}");
        // 100 more while it is away, recorded.
        feed.write(100);
        recorded(feed.written);
        let s = durable(name, &history);
        s.wait_for(|l| l.contains("resuming where it stood"), "the resume");
        wait_has(&s, base + 199);
        feed.write(50);
        wait_has(&s, base + 249);
        let s = stop(s, Signal::TERM);
        assert_eq!(
            printed(&s),
            (base + 100..base + 250).collect::<Vec<_>>(),
            "{name}: resumed exactly after a clean stop: {:?}",
            s.lines
                .lock()
                .unwrap()
                .iter()
                .filter(|l| !l.contains(": m"))
                .collect::<Vec<_>>()
        );
        // Killed: it resumes from its last commit, no gap.
        let s = durable(name, &history);
        s.wait_for(|l| l.contains("resuming where it stood"), "the resume");
        feed.write(50);
        wait_has(&s, base + 299);
        let s = stop(s, Signal::KILL);
        let before = printed(&s);
        assert_eq!(before, (base + 250..base + 300).collect::<Vec<_>>());
        feed.write(10);
        recorded(feed.written);
        let s = durable(name, &history);
        wait_has(&s, base + 309);
        let s = stop(s, Signal::TERM);
        let after = printed(&s);
        let resumed_at = after[0];
        assert!(
            (base + 250..=base + 300).contains(&resumed_at),
            "{name}: resumed at m{resumed_at}, within what the killed one printed or right after"
        );
        assert_eq!(
            after,
            (resumed_at..base + 310).collect::<Vec<_>>(),
            "{name}: no gap, no repeat beyond the last commit"
        );
    }
    feed.finish();
    peregrine_testkit::signal(rec.child.id(), Signal::TERM).unwrap();
    rec.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
