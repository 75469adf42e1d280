//! `peregrine pub` and `peregrine sub` as separate processes finding each other by topic name:
//! on this host over loopback multicast, and between two network namespaces joined by a veth
//! pair, by multicast and through `peregrine resolverd`.
//!
//! The namespace tests need root and iproute2: without them they say so and skip, except under
//! `.ci/run` (`PEREGRINE_REQUIRE_TOOLS=1`), where they fail.

#[allow(dead_code)] // the helpers serve other test files
mod common;

use common::TwoHosts;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// One multi-process test at a time: each runs several processes on two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_peregrine")
}

/// A topic prefix unique to this run.
fn prefix(name: &str) -> String {
    format!("p{}.{name}", std::process::id())
}

fn peregrine(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut c = Command::new(exe());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Runs `cmd` inside network namespace `ns`.
fn in_ns(ns: &str, cmd: &Command) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(cmd.get_program());
    c.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child with a deadline, killing it if it overruns.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `--print` lines of a sub: (topic, session) -> sequences, in arrival order.
fn received(out: &str) -> BTreeMap<(String, String), Vec<u64>> {
    let mut m: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for l in out.lines() {
        let mut w = l.split_whitespace();
        let (Some(topic), Some(session), Some(seq)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let (Some(session), Some(seq)) =
            (session.strip_prefix("session="), seq.strip_prefix("seq="))
        else {
            continue;
        };
        m.entry((topic.to_string(), session.to_string()))
            .or_default()
            .push(seq.parse().unwrap());
    }
    m
}

/// Starts a sub and waits for its "subscribed" line so publishers start after it.
fn start_sub(mut c: Command) -> (Child, BufReader<std::process::ChildStdout>) {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert!(l.starts_with("subscribed to"), "{l}");
    (child, out)
}

/// Reads the rest of a sub's stdout, with a deadline.
fn finish_sub(
    mut child: Child,
    mut out: BufReader<std::process::ChildStdout>,
    limit: Duration,
) -> (bool, String) {
    let reader = thread::spawn(move || {
        let mut s = String::new();
        let mut l = String::new();
        while out.read_line(&mut l).unwrap_or(0) > 0 {
            s.push_str(&l);
            l.clear();
        }
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.success();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, reader.join().unwrap())
}

#[test]
fn a_glob_subscriber_receives_every_message_of_several_publishers_in_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = prefix("glob");
    // 1.5 s of publishing, so the sub prints a rate line.
    const N: u64 = 3000;
    let (sub, out) = start_sub(peregrine(
        &[
            "sub",
            &format!("{p}.eq.*"),
            "--print",
            "--count",
            &(3 * N).to_string(),
            "--seconds",
            "30",
        ],
        &[],
    ));
    let pubs: Vec<Child> = [
        format!("{p}.eq.AAPL"),
        format!("{p}.eq.AAPL"),
        format!("{p}.eq.MSFT"),
        format!("{p}.fx.EUR"),
    ]
    .iter()
    .map(|t| {
        spawn(peregrine(
            &[
                "pub",
                t,
                "--count",
                &N.to_string(),
                "--rate",
                "2000",
                "--wait-subscribers",
                "1",
            ],
            &[],
        ))
    })
    .collect();
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(40));
    let outputs: Vec<Output> = pubs
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(5)))
        .collect();
    assert!(ok, "sub failed:\n{stdout}");
    for o in &outputs[..3] {
        assert!(o.status.success(), "{}", text(o));
    }
    let got = received(&stdout);
    assert_eq!(
        got.len(),
        3,
        "three sessions: {:?}",
        got.keys().collect::<Vec<_>>()
    );
    for ((topic, session), seqs) in &got {
        assert!(topic.contains(".eq."), "{topic}");
        assert_eq!(
            seqs,
            &(0..N).collect::<Vec<_>>(),
            "{topic} {session}: every message once, in order"
        );
    }
    assert_eq!(
        got.keys().filter(|k| k.0.ends_with("AAPL")).count(),
        2,
        "two publishers of one topic"
    );
    assert!(stdout.contains("lost 0, resolver rejected 0"), "{stdout}");
    assert!(stdout.matches("source found:").count() == 3, "{stdout}");
    // Issue 34, item 2: the sources counted are those messages came from (all gone by the
    // end), and each source's line comes before its first message.
    assert!(stdout.contains("messages from 3 source(s)"), "{stdout}");
    for (topic, session) in got.keys() {
        let found = stdout
            .find(&format!("source found: {topic} session={session}"))
            .unwrap_or_else(|| panic!("no source line for {topic} {session}: {stdout}"));
        let first = stdout
            .find(&format!("{topic} session={session} seq=0 "))
            .unwrap_or_else(|| panic!("no seq 0 of {topic} {session}: {stdout}"));
        assert!(found < first, "{topic} {session}: {stdout}");
    }
    assert!(
        stdout.contains("[sub "),
        "a rate line every second: {stdout}"
    );
    // The fx publisher had no subscriber: it gave up waiting (or was killed), never matched.
    assert!(!stdout.contains(".fx."), "{stdout}");
}

#[test]
fn a_late_subscriber_joins_mid_stream_and_a_killed_publisher_expires() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = prefix("late.X");
    // The publisher is killed with SIGKILL: its segment goes in a base directory of this
    // test's own, removed at the end.
    struct Base(std::path::PathBuf);
    impl Drop for Base {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let base = Base(std::path::PathBuf::from(format!(
        "/dev/shm/pgtest-topics-late-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&base.0).unwrap();
    let shm = ("PEREGRINE_SHM_DIR", base.0.display().to_string());
    // Short advertisement TTL so expiry shows within the test.
    let env = [
        shm.clone(),
        ("PEREGRINE_RESOLVER_SOURCE_TTL_MS", "1000".to_string()),
        (
            "PEREGRINE_RESOLVER_ADVERTISE_SUSTAIN_INTERVAL_MS",
            "200".to_string(),
        ),
        (
            "PEREGRINE_RESOLVER_ADVERTISE_INITIAL_DURATION_MS",
            "500".to_string(),
        ),
    ];
    let mut publ = spawn(peregrine(&["pub", &t, "--rate", "500"], &env));
    thread::sleep(Duration::from_millis(1500));
    let (sub, out) = start_sub(peregrine(&["sub", &t, "--print", "--seconds", "4"], &[shm]));
    thread::sleep(Duration::from_millis(1500));
    publ.kill().unwrap();
    let _ = publ.wait();
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(10));
    assert!(ok, "{stdout}");
    let got = received(&stdout);
    assert_eq!(got.len(), 1, "{stdout}");
    let seqs = got.values().next().unwrap();
    // The stream began 1.5 s ago (750 messages): its shared-memory log is young, so the
    // late subscriber reads it from its first message, as late_join=start does on the
    // network. (One older than 10 s, 65 536 messages or a lap of its log is joined at its
    // tail: the transport's tests.)
    assert_eq!(seqs[0], 0, "a young stream is read from its first message");
    assert!(
        seqs.len() > 750,
        "and on past where it joined: {}",
        seqs.len()
    );
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "contiguous from there"
    );
    // Told of the loss: the shared-memory transport sees the process die, and the resolver
    // expires the source when its advertisements stop.
    assert!(
        stdout.contains("(expired)"),
        "the source expires:\n{stdout}"
    );
}

/// Issue 14, item 10: `peregrine sub T --print` started before `peregrine pub T`, with the
/// topic's transport an explicit multicast group (`[topics]`): the subscriber delivers the
/// stream from its first message and reports nothing lost. It used to open the group only once
/// topic resolution reported the publisher, start at sequence 1 or 2, and report `lost 0`.
#[test]
fn a_subscriber_started_before_its_publisher_gets_it_from_the_first_message() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = prefix("first.h");
    let pid = std::process::id();
    let config =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("first-{pid}.toml"));
    std::fs::write(
        &config,
        format!(
            "[topics]\n\"{t}\" = \"mcast://239.255.91.{}:{}\"\n",
            1 + pid % 250,
            30_000 + pid % 20_000
        ),
    )
    .unwrap();
    let env = [("PEREGRINE_CONFIG", config.display().to_string())];
    const N: u64 = 300;
    let (sub, out) = start_sub(peregrine(
        &[
            "sub",
            &t,
            "--print",
            "--count",
            &N.to_string(),
            "--seconds",
            "20",
        ],
        &env,
    ));
    let publ = spawn(peregrine(
        &["pub", &t, "--count", &N.to_string(), "--rate", "1000"],
        &env,
    ));
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(30));
    let p = finish(publ, Duration::from_secs(10));
    assert!(ok, "sub failed:\n{stdout}\npub:\n{}", text(&p));
    let got = received(&stdout);
    assert_eq!(got.len(), 1, "{stdout}");
    let seqs = got.values().next().unwrap();
    assert_eq!(
        seqs,
        &(0..N).collect::<Vec<_>>(),
        "from the first message, in order"
    );
    assert!(stdout.contains("lost 0,"), "{stdout}");
    let _ = std::fs::remove_file(&config);
}

#[test]
fn malformed_and_spoofed_resolver_datagrams_are_rejected_and_counted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A group of its own, so only this test's datagrams arrive.
    let port = 20000 + (std::process::id() % 20000) as u16;
    let group = format!("239.255.90.7:{port}");
    let env = [("PEREGRINE_RESOLVER_GROUP", group.clone())];
    let (sub, out) = start_sub(peregrine(&["sub", "md.*", "--seconds", "1.5"], &env));
    thread::sleep(Duration::from_millis(200));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_multicast_loop_v4(true).unwrap();
    let dest: std::net::SocketAddrV4 = group.parse().unwrap();
    let mut ad = advertisement("md.eq.AAPL", "udp://127.0.0.1:9");
    let mut bad: Vec<Vec<u8>> = Vec::new();
    // Wrong sizes.
    bad.push(ad[..ad.len() - 1].to_vec());
    let mut b = ad.clone();
    b[0] = b[0].wrapping_add(8);
    b.extend_from_slice(&[0; 8]);
    bad.push(b);
    // A huge topic name (topic_len 5000).
    let mut b = ad[..32].to_vec();
    b[24..26].copy_from_slice(&5000u16.to_le_bytes());
    b.extend(std::iter::repeat_n(b'x', 5000 + ad.len() - 32));
    let len = b.len() as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    bad.push(b);
    // Unknown version; unknown frame type.
    let mut b = ad.clone();
    b[6] = 7;
    bad.push(b);
    let mut b = ad.clone();
    b[7] = 0x66;
    bad.push(b);
    // Spoofed: a stream id that is not the topic's, a URI of no transport.
    let mut b = ad.clone();
    b[16] ^= 0xff;
    bad.push(b);
    bad.push(advertisement("md.eq.AAPL", "file:///etc/passwd"));
    for d in &bad {
        sock.send_to(d, dest).unwrap();
    }
    // And one genuine advertisement: it is found, not rejected.
    ad[12] = 0x42; // another session id
    sock.send_to(&ad, dest).unwrap();
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(10));
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains(&format!("resolver rejected {}", bad.len())),
        "{} datagrams rejected:\n{stdout}",
        bad.len()
    );
    assert!(stdout.contains("source found: md.eq.AAPL"), "{stdout}");
}

/// Issue 14: a topic name (and URI) chosen by whoever can reach the resolver group may hold
/// terminal escape sequences; `peregrine sub` prints them escaped, never raw.
#[test]
fn topic_names_with_terminal_escapes_are_printed_escaped() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = 20000 + ((std::process::id() + 7) % 20000) as u16;
    let group = format!("239.255.90.8:{port}");
    let env = [("PEREGRINE_RESOLVER_GROUP", group.clone())];
    let (sub, out) = start_sub(peregrine(&["sub", "md.*", "--seconds", "1.5"], &env));
    thread::sleep(Duration::from_millis(200));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_multicast_loop_v4(true).unwrap();
    let dest: std::net::SocketAddrV4 = group.parse().unwrap();
    let hostile = "md.\x1b[2J\x1b]0;owned\x07.AAPL";
    sock.send_to(&advertisement(hostile, "udp://127.0.0.1:9"), dest)
        .unwrap();
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(10));
    assert!(ok, "{stdout}");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "a control character reached the terminal:\n{stdout:?}"
    );
    assert!(
        stdout.contains("source found: md.\\u{1b}[2J\\u{1b}]0;owned\\u{7}.AAPL"),
        "{stdout}"
    );
}

/// An ADVERTISE frame as a publisher sends it (session 0x01020304, TTL 5 s).
fn advertisement(topic: &str, uri: &str) -> Vec<u8> {
    let len = 32 + topic.len() + uri.len();
    let mut b = vec![0u8; len];
    b[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    b[4..8].copy_from_slice(&[0x50, 0x47, 0x01, 0x05]);
    b[12..16].copy_from_slice(&0x0102_0304u32.to_le_bytes());
    b[16..20].copy_from_slice(&peregrine::stream_id(topic).to_le_bytes());
    b[20..24].copy_from_slice(&5000u32.to_le_bytes());
    b[24..26].copy_from_slice(&(topic.len() as u16).to_le_bytes());
    b[26..28].copy_from_slice(&(uri.len() as u16).to_le_bytes());
    b[32..32 + topic.len()].copy_from_slice(topic.as_bytes());
    b[32 + topic.len()..].copy_from_slice(uri.as_bytes());
    b
}

/// A publisher in namespace A, a glob subscriber in namespace B: they find each other through
/// `resolver_env` and the messages cross the veth over UDP.
fn across_hosts(hosts: &TwoHosts, resolver_env: &[(&str, String)], topic: &str) -> String {
    const N: u64 = 1000;
    let env_for = |addr: Ipv4Addr| {
        let mut e: Vec<(&str, String)> = resolver_env.to_vec();
        e.push(("PEREGRINE_RESOLVER_IFACE", addr.to_string()));
        e
    };
    let pattern = format!("{}*", &topic[..topic.len() - 1]);
    let (sub, out) = start_sub(in_ns(
        &hosts.b,
        &peregrine(
            &[
                "sub",
                &pattern,
                "--print",
                "--count",
                &N.to_string(),
                "--seconds",
                "20",
            ],
            &env_for(hosts.addr_b),
        ),
    ));
    let publ = spawn(in_ns(
        &hosts.a,
        &peregrine(
            &[
                "pub",
                topic,
                "--count",
                &N.to_string(),
                "--rate",
                "5000",
                "--wait-subscribers",
                "1",
            ],
            &env_for(hosts.addr_a),
        ),
    ));
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(30));
    let p = finish(publ, Duration::from_secs(10));
    assert!(
        ok,
        "sub in {} failed:\n{stdout}\npub:\n{}",
        hosts.b,
        text(&p)
    );
    assert!(p.status.success(), "{}", text(&p));
    let got = received(&stdout);
    assert_eq!(got.len(), 1, "{stdout}");
    assert_eq!(got.values().next().unwrap(), &(0..N).collect::<Vec<_>>());
    // Another host: the shared-memory log is not offered to it, the network is.
    let via = stdout
        .lines()
        .find(|l| l.starts_with("source found:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        via.contains(&format!("via udp://{}:", hosts.addr_a)),
        "{via}"
    );
    stdout
}

#[test]
fn hosts_find_each_other_by_multicast_across_namespaces() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let hosts = TwoHosts::new("m", 91);
    across_hosts(&hosts, &[], &format!("{}.A", prefix("mc")));
}

#[test]
fn hosts_find_each_other_through_resolverd_across_namespaces() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let hosts = TwoHosts::new("d", 92);
    let listen = format!("{}:14401", hosts.addr_a);
    let mut daemon = in_ns(
        &hosts.a,
        &peregrine(
            &["resolverd", "--listen", &listen, "--stats-every-s", "1"],
            &[],
        ),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut dout = BufReader::new(daemon.stdout.take().unwrap());
    let mut l = String::new();
    dout.read_line(&mut l).unwrap();
    assert!(l.contains("resolverd listening on"), "{l}");
    // No route for multicast between the namespaces would be needed: the daemon relays. The
    // group is moved off the default too, so nothing could be found by multicast by accident.
    let env = [
        ("PEREGRINE_RESOLVER_DAEMON", listen.clone()),
        ("PEREGRINE_RESOLVER_GROUP", "239.255.90.9:14409".to_string()),
    ];
    across_hosts(&hosts, &env, &format!("{}.A", prefix("rd")));
    // The daemon's statistics lines (every second, counts since its start) until one says it
    // relayed: however long the hosts took, its counts only grow.
    let forwarded = |line: &str| -> u64 {
        line.split("forwarded ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut stats = String::new();
    let mut l = String::new();
    let mut relayed = false;
    while !relayed && std::time::Instant::now() < deadline {
        l.clear();
        if dout.read_line(&mut l).unwrap_or(0) == 0 {
            break;
        }
        stats.push_str(&l);
        relayed = l.contains("[resolverd") && forwarded(&l) > 0;
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(relayed, "the daemon relayed: {stats}");
}

/// (arguments, environment, what the error must say)
type BadCase = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn bad_flags_and_settings_are_rejected_with_the_value_and_the_fix() {
    let cases: [BadCase; 8] = [
        // Issue 14: an empty pattern reported a wire field ("query.pattern_len has invalid
        // value 0") instead of what to give.
        (&["sub", ""], &[], "the topic pattern is empty"),
        (&["pub", ""], &[], "the topic is empty"),
        (
            &["sub", "x", "--seconds", "nan"],
            &[],
            "'nan' is not a duration",
        ),
        (
            &["sub", "md.(", "--regex"],
            &[],
            "invalid topic pattern 'md.('",
        ),
        (&["pub", "x", "--rate", "0"], &[], "'0' is not a rate"),
        (&["pub", "x", "--size", "0"], &[], "0"),
        (
            &["sub", "x"],
            &[("PEREGRINE_RESOLVER_GROUP", "10.1.1.1:5")],
            "group = 10.1.1.1:5 is not accepted",
        ),
        (&["resolverd", "--listen", "nowhere"], &[], "nowhere"),
    ];
    for (args, env, needle) in cases {
        let mut c = Command::new(exe());
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = finish(
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            Duration::from_secs(10),
        );
        assert!(!o.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Issue 34, item 3: `peregrine pub` sends a user's own payloads: each line of standard input
/// (`--stdin`) or a literal (`--message`); the subscriber prints exactly them.
#[test]
fn pub_sends_lines_of_standard_input_and_a_literal_message() {
    use std::io::Write as _;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topic = format!("{}.own", prefix("stdin"));
    let (sub, out) = start_sub(peregrine(
        &["sub", &topic, "--print", "--count", "4", "--seconds", "30"],
        &[],
    ));
    let mut publ = peregrine(&["pub", &topic, "--stdin", "--wait-subscribers", "1"], &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    publ.stdin
        .take()
        .unwrap()
        .write_all(b"bid 189.20 ask 189.21\nhello, world\r\n\n")
        .unwrap(); // dropped: the end of the input
    let done = publ.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", text(&done));
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("sent 3 messages"),
        "{}",
        text(&done)
    );
    let literal = peregrine(
        &[
            "pub",
            &topic,
            "--message",
            "one literal",
            "--count",
            "1",
            "--wait-subscribers",
            "1",
        ],
        &[],
    )
    .output()
    .unwrap();
    assert!(literal.status.success(), "{}", text(&literal));
    let (ok, stdout) = finish_sub(sub, out, Duration::from_secs(40));
    assert!(ok, "{stdout}");
    let payloads: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" seq="))
        .map(|l| l.split_once(": ").map_or("", |p| p.1))
        .collect();
    assert_eq!(
        payloads,
        ["bid 189.20 ask 189.21", "hello, world", "", "one literal"],
        "{stdout}"
    );
}
