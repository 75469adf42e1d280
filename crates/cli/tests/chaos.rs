//! Issue 31's chaos test: for about 45 s, every redundant pair of the system loses members
//! while it runs, and nothing is lost. The pairs: two publishers of a failover group (`peregrine
//! pub --group`), two feeds of an A/B pair (`peregrine feed --ab`), two distributors. Under them:
//! a subscriber of the group, a consumer of both distributors (cold failover), one with a warm
//! standby, and (as root) one in a network namespace this test makes, across a veth link.
//!
//! Every 5 s the killer (this test, with a fixed seed: the same run every time) SIGKILLs a random
//! member of a random pair and restarts it, SIGSTOPs a member of another pair for 2 s, and
//! every third round cuts the veth link until the consumer across it reports the silence (a
//! stopped distributor is given up after three ping intervals). It never takes both members of
//! a pair.
//!
//! Checks: the group's subscriber got every sequence once, in order, and nothing was declared
//! lost; every consumer reported no gap (a missed update is a `Gap`; an interval without a
//! source is STALE then a fresh image) and ends with every item's last `item_seq` equal to the
//! last the feeds sent (the stream is a function of it); the consumer across the veth link saw
//! the link go (a silent distributor given up, items stale) and came back; the long-lived
//! processes' resident memory did not grow.

#[allow(dead_code)] // the helpers serve other test files
mod common;

use common::Signal;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const ROUNDS: u32 = 9;
const ROUND: Duration = Duration::from_secs(5);
const ITEMS: usize = 20;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_peregrine")
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The killer's choices, from a fixed seed: the feed's generator.
struct Rng(peregrine_md::quotes::SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(peregrine_md::quotes::Draws::seeded(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        peregrine_md::quotes::Draws::below(&mut self.0, n as u64) as usize
    }
}

/// A running process whose standard output is collected line by line.
struct Running {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(name: &str, prefix: &[&str], args: &[String]) -> Running {
        let (program, pre): (&str, &[&str]) = match prefix.split_first() {
            Some((p, rest)) => (p, rest),
            None => (exe(), &[]),
        };
        let mut cmd = Command::new(program);
        cmd.args(pre);
        if !prefix.is_empty() {
            cmd.arg(exe());
        }
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Running {
            name: name.to_string(),
            child,
            lines,
        }
    }

    /// Waits (up to 20 s) for a line containing `what`.
    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.lines.lock().unwrap().iter().any(|l| l.contains(what)) {
            assert!(
                Instant::now() < deadline,
                "{}: no line with {what:?}:\n{}",
                self.name,
                self.lines.lock().unwrap().join("\n")
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: Signal) {
        peregrine_testkit::signal(self.child.id(), sig)
            .unwrap_or_else(|e| panic!("{}: {sig:?}: {e}", self.name));
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Lines containing `what` so far.
    fn count(&self, what: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    }

    /// Waits (up to `limit`) until more than `seen` lines contain `what`.
    fn wait_for_more(&self, what: &str, seen: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.count(what) <= seen {
            assert!(
                Instant::now() < deadline,
                "{}: no new line with {what:?} in {limit:?}:\n{}",
                self.name,
                self.lines.lock().unwrap().join("\n")
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then its exit (10 s at most) and every line it wrote.
    fn finish(mut self) -> (bool, Vec<String>) {
        self.signal(Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "{} did not exit", self.name);
            thread::sleep(Duration::from_millis(20));
        };
        thread::sleep(Duration::from_millis(100)); // the reader takes the last lines
        let lines = self.lines.lock().unwrap().clone();
        (status.success(), lines)
    }
}

/// A redundant pair: how to start member 0 or 1, and the members running (None while one is
/// being restarted).
struct Pair {
    name: &'static str,
    members: [Option<Running>; 2],
    start: Box<dyn Fn(usize) -> Running>,
}

impl Pair {
    fn new(name: &'static str, start: Box<dyn Fn(usize) -> Running>) -> Pair {
        Pair {
            name,
            members: [Some(start(0)), Some(start(1))],
            start,
        }
    }

    fn restart(&mut self, i: usize) {
        if let Some(m) = self.members[i].take() {
            m.kill();
        }
        self.members[i] = Some((self.start)(i));
    }
}

/// The veth link to the namespace of the remote consumer, removed with the namespace.
struct Link {
    ns: String,
    host_if: String,
    host_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Link {
    fn new() -> Link {
        let pid = std::process::id();
        let link = Link {
            ns: format!("pgchaos{pid}"),
            host_if: format!("pgc{}a", pid % 100_000),
            host_ip: format!("10.202.{}.1", pid % 250),
        };
        let peer_if = format!("pgc{}b", pid % 100_000);
        let peer_ip = format!("10.202.{}.2", pid % 250);
        ip(&["netns", "add", &link.ns]);
        ip(&[
            "link",
            "add",
            &link.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &link.ns]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", link.host_ip),
            "dev",
            &link.host_if,
        ]);
        ip(&["link", "set", &link.host_if, "up"]);
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &link.ns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        exec(&["addr", "add", &format!("{peer_ip}/30"), "dev", &peer_if]);
        exec(&["link", "set", &peer_if, "up"]);
        exec(&["link", "set", "lo", "up"]);
        link
    }

    fn set(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// `NAME SEQ...` lines of an --items-out file: each item's last `item_seq` (the second column
/// of a feed's file, the third of a client's).
fn last_seqs(path: &Path, column: usize) -> BTreeMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[column].parse().unwrap())
        })
        .collect()
}

#[test]
fn nothing_is_lost_while_members_of_every_pair_are_killed_stopped_and_cut_off() {
    let link = peregrine_testkit::root_with_netns().then(Link::new);
    let pid = std::process::id();
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let items: Vec<String> = (0..ITEMS).map(|i| format!("CH{i:02}.X")).collect();
    std::fs::write(dir.join("items.txt"), items.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("watch.txt"), "*\n").unwrap();
    {
        use sha2::Digest;
        std::fs::write(
            dir.join("users.toml"),
            format!(
                "[users.bob]\ntoken_sha256 = \"{}\"\nitems = [\"*\"]\n",
                hex::encode(sha2::Sha256::digest(b"bob-token"))
            ),
        )
        .unwrap();
    }
    let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let backbone = format!(
        "mcast://239.255.96.{}:{}?auth=none",
        1 + pid % 250,
        30_000 + (pid % 4000) * 2
    );
    let ports = [
        peregrine_testkit::free_port(true),
        peregrine_testkit::free_port(true),
    ];
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    // The pairs.
    let dist_args = {
        let (backbone, users) = (backbone.clone(), path("users.toml"));
        let remote = link.is_some();
        move |i: usize| {
            let mut a = s(&[
                "distributor",
                "--listen",
                &format!("0.0.0.0:{}", ports[i]),
                "--backbone",
                &backbone,
                "--users",
                &users,
                "--mode",
                "latency",
                "--json",
            ]);
            if remote {
                a.push("--allow-plaintext-logins".into());
            }
            a
        }
    };
    let mut dists = Pair::new(
        "distributors",
        Box::new(move |i| {
            let d = Running::start(&format!("distributor {i}"), &[], &dist_args(i));
            d.wait_for("\"listening\"");
            d
        }),
    );
    let feed_args = {
        let (backbone, items) = (backbone.clone(), path("items.txt"));
        let dir = dir.clone();
        move |i: usize| {
            let out = dir.join(format!("feed{i}.items"));
            s(&[
                "feed",
                "--ab",
                "--items",
                &items,
                "--rate",
                "2000",
                "--backbone",
                &backbone,
                "--json",
                "--items-out",
                out.to_str().unwrap(),
            ])
        }
    };
    let mut feeds = Pair::new(
        "feeds",
        Box::new(move |i| Running::start(&format!("feed {i}"), &[], &feed_args(i))),
    );
    let topic = format!("chaos{pid}.orders");
    let pub_topic = topic.clone();
    let mut publishers = Pair::new(
        "publishers",
        Box::new(move |i| {
            Running::start(
                &format!("publisher {i}"),
                &[],
                &s(&[
                    "pub",
                    &pub_topic,
                    "--group",
                    "engine",
                    "--rate",
                    "1000",
                    "--linger-ms",
                    "0",
                ]),
            )
        }),
    );

    // The ones under them, never killed.
    let sub = Running::start(
        "subscriber",
        &[],
        &s(&[
            "sub",
            &topic,
            "--group",
            "engine",
            "--window-ms",
            "60000",
            "--print",
        ]),
    );
    let local: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let client = |name: &str, prefix: &[&str], connect: &str, more: &[&str]| {
        let mut a = s(&[
            "client",
            "--connect",
            connect,
            "--user",
            "bob",
            "--token",
            "bob-token",
            "--watch",
            &path("watch.txt"),
            "--ping-interval-ms",
            "1000",
            "--json",
            "--items-out",
            &path(&format!("{name}.items")),
        ]);
        a.extend(more.iter().map(|m| m.to_string()));
        Running::start(name, prefix, &a)
    };
    let mut clients = vec![
        client("cold", &[], &local.join(","), &[]),
        client("warm", &[], &local.join(","), &["--warm-standby"]),
    ];
    if let Some(l) = &link {
        let remote: Vec<String> = ports.iter().map(|p| format!("{}:{p}", l.host_ip)).collect();
        clients.push(client(
            "remote",
            &["ip", "netns", "exec", &l.ns],
            &remote.join(","),
            &[],
        ));
    }
    thread::sleep(Duration::from_secs(3));
    let watched: Vec<(String, u32)> = clients
        .iter()
        .chain([&sub])
        .map(|p| (p.name.clone(), p.child.id()))
        .collect();
    let early: Vec<u64> = watched.iter().map(|(_, p)| rss_kib(*p)).collect();

    // The killer.
    let mut rng = Rng::new(0x00c4_a05e);
    let mut log = Vec::new();
    for round in 0..ROUNDS {
        let started = Instant::now();
        let k = rng.below(3);
        let st = (k + 1 + rng.below(2)) % 3;
        let (ki, si) = (rng.below(2), rng.below(2));
        let cut = link.as_ref().filter(|_| round % 3 == 1);
        // The remote consumer's silence reports before the cut: the link comes back only once
        // it has reported one more, however long its silence limit takes on this machine.
        const SILENT: &str = "nothing from the distributor for";
        let silences_before = clients
            .iter()
            .find(|c| c.name == "remote")
            .map(|c| c.count(SILENT));
        let stopped = {
            let pairs: [&Pair; 3] = [&dists, &feeds, &publishers];
            let p = pairs[st];
            let m = p.members[si].as_ref().unwrap();
            m.signal(Signal::STOP);
            log.push(format!("round {round}: stop {} {si}", p.name));
            (st, si)
        };
        if let Some(l) = cut {
            l.set(false);
            log.push(format!("round {round}: link down"));
        }
        {
            let pairs: [&mut Pair; 3] = [&mut dists, &mut feeds, &mut publishers];
            let p = pairs.into_iter().nth(k).unwrap();
            log.push(format!("round {round}: kill {} {ki}", p.name));
            if let Some(m) = p.members[ki].take() {
                m.kill();
            }
            thread::sleep(Duration::from_millis(500));
            p.restart(ki);
        }
        thread::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()));
        {
            let pairs: [&Pair; 3] = [&dists, &feeds, &publishers];
            pairs[stopped.0].members[stopped.1]
                .as_ref()
                .unwrap()
                .signal(Signal::CONT);
        }
        if let (Some(l), Some(seen)) = (cut, silences_before) {
            let remote = clients.iter().find(|c| c.name == "remote").unwrap();
            remote.wait_for_more(SILENT, seen, Duration::from_secs(30));
            l.set(true);
            log.push(format!("round {round}: link up"));
        }
        thread::sleep(ROUND.saturating_sub(started.elapsed()));
    }
    let late: Vec<u64> = watched.iter().map(|(_, p)| rss_kib(*p)).collect();

    // Settle, stop the feeds (their last numbers are written), let the consumers take the
    // last updates, stop everything.
    thread::sleep(Duration::from_secs(4));
    for f in feeds.members.iter_mut() {
        let (ok, lines) = f.take().unwrap().finish();
        assert!(ok, "a feed failed: {lines:?}");
    }
    thread::sleep(Duration::from_secs(3));
    let mut outs = BTreeMap::new();
    for c in clients {
        let name = c.name.clone();
        let (_, lines) = c.finish();
        outs.insert(name, lines);
    }
    let (_, sub_lines) = sub.finish();
    for p in [&mut dists, &mut publishers] {
        for m in p.members.iter_mut() {
            if let Some(m) = m.take() {
                m.kill();
            }
        }
    }
    let story = log.join("\n");

    // The group's subscriber: every sequence once, in order.
    let seqs: Vec<u64> = sub_lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{topic} seq=")))
        .map(|r| r.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(seqs.len() > 10_000, "{} delivered\n{story}", seqs.len());
    for w in seqs.windows(2) {
        assert_eq!(w[1], w[0] + 1, "a gap or a duplicate at {w:?}\n{story}");
    }
    let all = sub_lines.join("\n");
    assert!(!all.contains("LOST"), "{story}\n{all}");

    // The consumers: no gap, every item's last image the feeds' last.
    let feeds_last = {
        let (a, b) = (
            last_seqs(&dir.join("feed0.items"), 1),
            last_seqs(&dir.join("feed1.items"), 1),
        );
        let mut m = a;
        for (k, v) in b {
            let e = m.entry(k).or_insert(v);
            // (item_seq wraps at 2^32: the later of two is within half of it.)
            if ((v as u32).wrapping_sub(*e as u32) as i32) > 0 {
                *e = v;
            }
        }
        m
    };
    assert_eq!(feeds_last.len(), ITEMS);
    for (name, lines) in &outs {
        let done: serde_json::Value = lines
            .iter()
            .rev()
            .find_map(|l| {
                serde_json::from_str(l)
                    .ok()
                    .filter(|v: &serde_json::Value| v["done"] == true)
            })
            .unwrap_or_else(|| panic!("{name}: no summary\n{}", lines.join("\n")));
        assert_eq!(done["gaps"], 0, "{name}: {done}\n{story}");
        let got = last_seqs(&dir.join(format!("{name}.items")), 2);
        assert_eq!(got, feeds_last, "{name}: last item_seq per item\n{story}");
        if name == "remote" {
            assert!(
                done["silences"].as_u64() > Some(0) && done["statuses"].as_u64() > Some(0),
                "the remote consumer never saw its link go: {done}\n{story}"
            );
        }
    }

    // Memory: the long-lived processes did not grow.
    for (((name, _), e), l) in watched.iter().zip(&early).zip(&late) {
        assert!(
            *l <= e + e / 2 + 8 * 1024,
            "{name}: resident memory grew from {e} KiB to {l} KiB"
        );
    }
    drop(link);
}
