//! The A/B paths case of `bench failover`: one publisher sends every datagram on two multicast
//! groups (`mcast://A:PORT?b=B`), a subscriber of both (this process) takes each message from
//! the first copy, and line A, whose copies arrive first (the publisher sends each datagram to
//! A, then to B), is cut again and again while the stream runs.
//!
//! **Where and how a line is cut.** The case runs in a network namespace of its own (a thread
//! of this process and the publisher it starts: nothing of the host's traffic is touched), so
//! it needs root, `ip` and `nft`. A cut is an nft rule on input dropping group A's datagrams
//! once a byte quota of them has passed (about half a second of the stream): the line goes
//! down at a moment no process chose, with no process starting or running at that moment. (A
//! rule added at the moment of the cut would start `nft` then, and on two cores it takes the
//! CPU of the subscriber or of the publisher: the gap measured would be the tool's.) The rule
//! is removed after each cut, and line A carries again before the next.
//!
//! **The gap of a cut.** The subscriber counts the second copies it drops (`duplicates`): they
//! stop when a line is cut. The cut came after the last poll whose copies included a duplicate;
//! its gap is the time from the last message delivered by then to the first delivered after
//! (with a spinning subscriber a poll takes one datagram or a few: the resolution is a poll).
//!
//! **The baseline of the same run.** Between cuts, both lines carrying, the same gap is taken
//! at a moment with no cut: from the last message delivered before it to the first after.
//!
//! The publisher spins (one process: it has a core of its own) and sends each message when it
//! is due, so the stream's messages are evenly spaced. Every delivered message is checked
//! (lost, duplicated, out of order, corrupted), and a cut line must need no NAK.

use super::{fill, FailoverConfig, SequenceCheck};
use crate::clock::Clock;
use crate::helper::protocol::{Helper, Role};
use crate::BenchError;
use peregrine::{Config, Context, IdleKind, OfferError, Subscriber};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The two lines, inside the run's own network namespace (nothing else uses them there).
const GROUP_A: &str = "239.255.77.1";
const GROUP_B: &str = "239.255.77.2";
const PORT: u16 = 40_777;
const TOPIC: &str = "bench.paths";
/// The nft table and chain holding the cut.
const TABLE: &str = "pgpaths";
/// Duplicates absent this long, while half of this time's messages were delivered: the cut
/// has taken effect.
const CUT_QUIET_NS: u64 = 20_000_000;
/// Both lines carry this long before a probe or a cut.
const SETTLE_NS: u64 = 200_000_000;

/// The stream's URI: lines A and B, sent and joined on the namespace's loopback.
fn uri() -> String {
    format!("mcast://{GROUP_A}:{PORT}?b={GROUP_B}&iface=127.0.0.1")
}

/// The publisher's settings, in its helper process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathsSpec {
    pub cfg: FailoverConfig,
    pub clock: Clock,
    /// Message `i` is due at `start_ns + i / rate` on `clock`.
    pub start_ns: u64,
}

impl Role for PathsSpec {
    const TAG: &'static str = "paths_publisher";
    const WHAT: &'static str = "A/B paths publisher";
}

/// A context with no topic resolution: both sides name the stream's URI.
fn context() -> Result<Context, BenchError> {
    let cfg = Config::default()
        .with_resolver("local", "none")
        .and_then(|c| c.with_resolver("remote", "none"))
        .map_err(|e| BenchError::Config(e.to_string()))?;
    Ok(Context::with_config(cfg))
}

/// The publisher, in its helper process (in the run's namespace): spins on `cpus.b`, sending
/// each message as it falls due, until it is killed.
pub fn publish(spec: &PathsSpec) -> Result<(), BenchError> {
    peregrine_agent::pin_to_cpu(spec.cfg.cpus.b)?;
    let mut p = context()?
        .publisher(TOPIC, &uri())
        .map_err(|e| BenchError::Child(format!("A/B publisher: {e}")))?;
    println!("ready");
    use std::io::Write;
    std::io::stdout().flush()?;
    let interval = spec.cfg.interval_ns();
    let due = |now: u64| (now.saturating_sub(spec.start_ns) as f64 / interval) as u64;
    let mut next = due(spec.clock.now());
    let mut buf = vec![0u8; spec.cfg.size];
    loop {
        let now_due = due(spec.clock.now());
        if next > now_due {
            p.do_work();
            continue;
        }
        while next <= now_due {
            fill(&mut buf, next);
            match p.offer(&buf) {
                Ok(_) => next += 1,
                Err(OfferError::BackPressured) => {
                    p.do_work();
                    break;
                }
                Err(e) => return Err(BenchError::Child(format!("A/B publisher offer: {e}"))),
            }
        }
        let _ = p.flush();
    }
}

/// What the case measured.
#[derive(Debug, Clone, Serialize)]
pub struct PathsResult {
    pub rate: f64,
    pub size: usize,
    /// Each cut's gap (ns).
    pub gaps_ns: Vec<u64>,
    /// The same gap at moments with no cut, both lines carrying (one per round).
    pub baseline_gaps_ns: Vec<u64>,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub corrupt: u64,
    /// The transport's counters over the run: second copies dropped, NAKs sent,
    /// retransmissions received, messages it reported lost.
    pub line_duplicates: u64,
    pub naks_sent: u64,
    pub retransmits_received: u64,
    pub transport_lost: u64,
    pub seconds: f64,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

impl PathsResult {
    pub fn gap_median_ns(&self) -> u64 {
        median(self.gaps_ns.clone())
    }
    pub fn gap_max_ns(&self) -> u64 {
        self.gaps_ns.iter().copied().max().unwrap_or(0)
    }
    pub fn baseline_median_ns(&self) -> u64 {
        median(self.baseline_gaps_ns.clone())
    }
    /// The stream's inter-message time.
    pub fn interval_ns(&self) -> f64 {
        1e9 / self.rate
    }
}

/// A program on `PATH`, or the error naming its package.
fn program(name: &str, package: &str) -> Result<PathBuf, BenchError> {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            BenchError::Config(format!(
                "--paths cuts a multicast line with an nft rule in a network namespace of its own and needs {name}, which is not installed: apt-get install {package}"
            ))
        })
}

/// Checks what the case needs before anything starts: root, `ip` and `nft`.
pub fn check_tools() -> Result<(PathBuf, PathBuf), BenchError> {
    if !rustix::process::geteuid().is_root() {
        return Err(BenchError::Config(
            "--paths cuts a multicast line with an nft rule in a network namespace of its own, which needs root: run it as root, or leave --paths out".into(),
        ));
    }
    Ok((program("ip", "iproute2")?, program("nft", "nftables")?))
}

/// Runs a command to its end (in this thread's network namespace: a child inherits it).
fn run(program: &Path, args: &[&str]) -> Result<(), BenchError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BenchError::Child(format!("{}: {e}", program.display())))?;
    if !out.status.success() {
        return Err(BenchError::Child(format!(
            "{} {}: {}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Moves the calling thread into a new network namespace of its own.
#[allow(unsafe_code)]
fn own_network_namespace() -> Result<(), BenchError> {
    // SAFETY: CLONE_NEWNET changes only this thread's network namespace; the safety condition
    // of `unshare_unsafe` concerns CLONE_FILES (file descriptor tables), not used here. The
    // sockets other threads of this process hold stay in the namespace they were made in.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }.map_err(|e| {
        BenchError::Child(format!("unshare(CLONE_NEWNET) for the A/B paths case: {e}"))
    })
}

/// Runs the case: in a thread of its own (pinned to `cpus.a`, in a network namespace of its
/// own), so nothing of this process's other threads changes namespace.
pub fn measure(cfg: &FailoverConfig, exe: &Path, clock: &Clock) -> Result<PathsResult, BenchError> {
    cfg.validate()?;
    let (ip, nft) = check_tools()?;
    let (cfg, exe, clock) = (cfg.clone(), exe.to_path_buf(), *clock);
    std::thread::spawn(move || {
        peregrine_agent::pin_to_cpu(cfg.cpus.a)?;
        own_network_namespace()?;
        run(&ip, &["link", "set", "lo", "up"])?;
        run(&ip, &["link", "set", "lo", "multicast", "on"])?;
        run(&nft, &["add", "table", "ip", TABLE])?;
        run(
            &nft,
            &[
                "add",
                "chain",
                "ip",
                TABLE,
                "in",
                "{ type filter hook input priority 0; }",
            ],
        )?;
        measure_in_namespace(&cfg, &exe, &clock, &nft)
    })
    .join()
    .map_err(|_| BenchError::Child("the A/B paths thread panicked".into()))?
}

/// What the subscriber delivered, and when.
#[derive(Default)]
struct Stream {
    check: SequenceCheck,
    /// The time of the last delivery.
    last_t: u64,
}

impl Stream {
    fn on(&mut self, t: u64, payload: &[u8]) {
        self.last_t = t;
        match payload.get(..8) {
            Some(b) => {
                let seq = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                self.check.on(seq, payload);
            }
            None => {
                self.check.delivered += 1;
                self.check.corrupt += 1;
            }
        }
    }
}

/// One poll of the subscriber: what it delivered and whether second copies came with it.
struct Poller<'a> {
    sub: Subscriber,
    stream: Stream,
    clock: &'a Clock,
    duplicates: u64,
    /// The stream's inter-message time.
    interval_ns: f64,
}

/// What one poll saw.
struct Poll {
    /// The time of the first delivery of the poll, if any.
    first_t: Option<u64>,
    /// Second copies were dropped in this poll (both lines carried up to here).
    duplicates: bool,
}

impl Poller<'_> {
    fn poll(&mut self) -> Poll {
        let mut first_t = None;
        let (stream, clock) = (&mut self.stream, self.clock);
        self.sub.poll(
            &mut |m| {
                let t = clock.now();
                first_t.get_or_insert(t);
                stream.on(t, m.payload);
            },
            64,
        );
        while self.sub.next_event().is_some() {}
        let d = self.sub.counters().duplicates;
        let duplicates = d > self.duplicates;
        self.duplicates = d;
        Poll {
            first_t,
            duplicates,
        }
    }

    /// Polls until `until` on the run's clock.
    fn poll_until(&mut self, until: u64) {
        while self.clock.now() < until {
            self.poll();
        }
    }

    /// Polls until second copies arrive again (both lines carry), at most `limit_ns`.
    fn until_both_lines(&mut self, limit_ns: u64) -> Result<(), BenchError> {
        let deadline = self.clock.now() + limit_ns;
        while !self.poll().duplicates {
            if self.clock.now() > deadline {
                return Err(BenchError::Child(format!(
                    "line A did not carry again within {} s of the cut's removal (no second copy arrived)",
                    limit_ns / 1_000_000_000
                )));
            }
        }
        Ok(())
    }

    /// The gap at a moment with no cut: from the last delivery before now to the first after.
    fn probe(&mut self) -> u64 {
        let before = self.stream.last_t;
        loop {
            if let Some(t) = self.poll().first_t {
                return t.saturating_sub(before);
            }
        }
    }

    /// Waits for the cut (second copies stop for [`CUT_QUIET_NS`]) and returns its gap.
    fn cut_gap(&mut self, limit_ns: u64) -> Result<u64, BenchError> {
        let deadline = self.clock.now() + limit_ns;
        // The last delivery as of the last poll with a second copy, and the first delivery of
        // a later poll.
        let mut before = self.stream.last_t;
        let mut after: Option<u64> = None;
        let mut last_dup = self.clock.now();
        // Deliveries since: a pause of the whole stream is not a cut.
        let mut since_dup = 0;
        let enough = (CUT_QUIET_NS as f64 / 2.0 / self.interval_ns).max(10.0) as u64;
        loop {
            let delivered = self.stream.check.delivered;
            let p = self.poll();
            let now = self.clock.now();
            if p.duplicates {
                before = self.stream.last_t;
                after = None;
                last_dup = now;
                since_dup = 0;
            } else {
                since_dup += self.stream.check.delivered - delivered;
                if after.is_none() {
                    after = p.first_t;
                }
            }
            if now.saturating_sub(last_dup) >= CUT_QUIET_NS && since_dup >= enough {
                if let Some(a) = after {
                    return Ok(a.saturating_sub(before));
                }
            }
            if now > deadline {
                return Err(BenchError::Child(format!(
                    "line A was not cut within {} s of the rule (second copies kept coming)",
                    limit_ns / 1_000_000_000
                )));
            }
        }
    }
}

/// Runs a command while the subscriber keeps polling (it must not stop for the command).
fn run_polling(p: &mut Poller<'_>, program: &Path, args: &[&str]) -> Result<(), BenchError> {
    let mut child: Child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::Child(format!("{}: {e}", program.display())))?;
    let status = loop {
        p.poll();
        if let Some(s) = child.try_wait()? {
            break s;
        }
    };
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        return Err(BenchError::Child(format!(
            "{} {}: {}",
            program.display(),
            args.join(" "),
            err.trim()
        )));
    }
    Ok(())
}

fn measure_in_namespace(
    cfg: &FailoverConfig,
    exe: &Path,
    clock: &Clock,
    nft: &Path,
) -> Result<PathsResult, BenchError> {
    let sub = context()?
        .subscriber(TOPIC, &uri(), IdleKind::Spin)
        .map_err(|e| BenchError::Child(format!("A/B subscriber: {e}")))?;
    let mut p = Poller {
        sub,
        stream: Stream::default(),
        clock,
        duplicates: 0,
        interval_ns: cfg.interval_ns(),
    };
    let spec = PathsSpec {
        cfg: cfg.clone(),
        clock: *clock,
        start_ns: clock.now(),
    };
    // Started from this thread: the helper is in this thread's namespace.
    let _publisher = Helper::start(exe, &spec)?;
    let started = clock.now();
    p.until_both_lines(30_000_000_000)?;
    // About half a second of line A's datagrams (each at most a message and its headers)
    // passes the rule before it drops the rest.
    let quota = (cfg.rate * (cfg.size + 64) as f64 / 2.0).max(4096.0) as u64;
    let cut_rule = format!("ip daddr {GROUP_A} quota over {quota} bytes drop");
    let mut gaps = Vec::new();
    let mut baseline = Vec::new();
    for _ in 0..cfg.kills {
        p.poll_until(clock.now() + SETTLE_NS / 2);
        baseline.push(p.probe());
        p.poll_until(clock.now() + SETTLE_NS / 2);
        let mut args = vec!["add", "rule", "ip", TABLE, "in"];
        args.extend(cut_rule.split(' '));
        run_polling(&mut p, nft, &args)?;
        gaps.push(p.cut_gap(30_000_000_000)?);
        run_polling(&mut p, nft, &["flush", "chain", "ip", TABLE, "in"])?;
        p.until_both_lines(10_000_000_000)?;
    }
    let seconds = (clock.now() - started) as f64 / 1e9;
    let c = p.sub.counters();
    let s = &p.stream.check;
    Ok(PathsResult {
        rate: cfg.rate,
        size: cfg.size,
        gaps_ns: gaps,
        baseline_gaps_ns: baseline,
        delivered: s.delivered,
        lost: s.lost,
        duplicated: s.duplicated,
        out_of_order: s.out_of_order,
        corrupt: s.corrupt,
        line_duplicates: c.duplicates,
        naks_sent: c.naks_sent,
        retransmits_received: c.retransmits_received,
        transport_lost: c.lost,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_check_counts_what_was_lost_duplicated_reordered_and_corrupted() {
        let mut s = Stream::default();
        let mut buf = vec![0u8; 16];
        for seq in [0u64, 1, 2, 5, 5, 4, 6] {
            fill(&mut buf, seq);
            s.on(seq * 10, &buf);
        }
        fill(&mut buf, 7);
        buf[12] ^= 1;
        s.on(70, &buf);
        // Too short to carry a sequence.
        s.on(80, b"abc");
        let c = &s.check;
        assert_eq!(
            (c.delivered, c.lost, c.duplicated, c.out_of_order, c.corrupt),
            (9, 2, 1, 1, 2)
        );
        assert_eq!(s.last_t, 80);
        assert_eq!(c.last_seq, Some(7));
    }
}
