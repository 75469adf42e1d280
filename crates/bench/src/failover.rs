//! The failover measurement: a failover group of two member processes publishing one
//! application-sequenced stream at a steady rate, a subscriber of the group (this process),
//! and the member whose copies the subscriber is delivering (the leader) killed with SIGKILL,
//! again and again, each time restarted once the other has taken over.
//!
//! Both members pace against one schedule (message `i` is due `i / rate` after a start time on
//! the run's shared [`Clock`]), so a restarted member joins where the stream is. For each kill
//! the subscriber's *gap* is the time from the last message delivered before the kill to the
//! first after it; the stream's own inter-delivery times of the same run (all messages, kills
//! included) are recorded next to it, since a member sends in small bursts (it sleeps between
//! them, so that two members and a spinning subscriber fit on two cores). Every delivered
//! sequence is checked: lost, duplicated or out of order.
//!
//! **The baseline of the same run.** Once per round, at a moment with no kill, the last
//! message delivered (the leader's copy) is noted, and the time until another member's copy of
//! a newer sequence reaches the subscriber (its position, which the arbiter keeps) is measured:
//! the gap a kill at that moment would leave if failing over cost nothing. The kills' gaps are
//! reported against it.

pub mod distributors;
pub mod feeds;
mod md;
pub mod paths;
pub use md::MdFailoverConfig;

use crate::clock::Clock;
use crate::helper::protocol::{Helper, Role};
use crate::stats::LatencyRecorder;
use crate::BenchError;
use peregrine::failover::{ArbiterConfig, FailoverPublisher, FailoverSubscriber};
use peregrine::{Config, Context, IdleKind, OfferError, Scheme};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Settings of one failover run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailoverConfig {
    /// The transport both members publish on (found by topic resolution).
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    /// Messages per second of the stream.
    pub rate: f64,
    /// Bytes per message (the application's, without the 16-byte failover header), at least 8.
    pub size: usize,
    /// How many times the leader is killed.
    pub kills: u32,
    /// The subscriber's window for a missing sequence, in milliseconds.
    pub window_ms: u64,
    /// The subscriber spins on `a`; both members run on `b`.
    pub cpus: crate::CpuPair,
}

impl FailoverConfig {
    /// Checks the settings, with the fix in the message.
    pub fn validate(&self) -> Result<(), BenchError> {
        if !(self.rate >= 1.0 && self.rate <= 2e6) {
            return Err(BenchError::Config(format!(
                "--rate {} is not accepted: give 1 to 2M messages per second (the members pace on one schedule), for example 100k",
                self.rate
            )));
        }
        if !(8..=65_000).contains(&self.size) {
            return Err(BenchError::Config(format!(
                "--size {} is not accepted: give 8 to 65000 bytes (the first 8 carry the sequence for the check)",
                self.size
            )));
        }
        if !(1..=1000).contains(&self.kills) {
            return Err(BenchError::Config(format!(
                "--kills {} is not accepted: give 1 to 1000",
                self.kills
            )));
        }
        if self.transport == Scheme::Mcast {
            return Err(BenchError::Config(
                "--transport mcast is not measured by bench failover yet (members are found by topic resolution, which opens mcast only with a configured group): use ipc, udp or tcp".into(),
            ));
        }
        Ok(())
    }

    fn interval_ns(&self) -> f64 {
        1e9 / self.rate
    }
}

/// One member process's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberSpec {
    pub cfg: FailoverConfig,
    pub topic: String,
    pub group: String,
    pub clock: Clock,
    /// Message `i` is due at `start_ns + i / rate` on `clock`.
    pub start_ns: u64,
}

impl Role for MemberSpec {
    const TAG: &'static str = "failover_member";
    const WHAT: &'static str = "failover group member";
}

/// The context a member publishes through: only the run's transport.
fn member_context(transport: Scheme) -> Result<Context, BenchError> {
    let (local, remote) = match transport {
        Scheme::Ipc => ("ipc", "none"),
        Scheme::Udp => ("none", "udp"),
        Scheme::Tcp => ("none", "tcp"),
        other => {
            return Err(BenchError::Config(format!(
                "transport {other} is not measured by bench failover"
            )))
        }
    };
    let cfg = Config::default()
        .with_resolver("local", local)
        .and_then(|c| c.with_resolver("remote", remote))
        .map_err(|e| BenchError::Config(e.to_string()))?;
    Ok(Context::with_config(cfg))
}

/// The payload of sequence `i`: `i` little-endian, then a filler derived from it (members
/// must send the same content: the subscriber checks it).
fn fill(buf: &mut [u8], i: u64) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
    for (k, b) in buf[8..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(k as u8);
    }
}

/// A member, in its helper process: publishes on the schedule until it is killed.
pub fn member(spec: &MemberSpec) -> Result<(), BenchError> {
    peregrine_agent::pin_to_cpu(spec.cfg.cpus.b)?;
    let ctx = member_context(spec.cfg.transport)?;
    let publisher = ctx
        .publish(&spec.topic)
        .map_err(|e| BenchError::Child(format!("member publish: {e}")))?;
    let mut p = FailoverPublisher::new(publisher, &spec.group)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    println!("ready {:08x}", p.publisher().session_id());
    use std::io::Write;
    std::io::stdout().flush()?;
    let interval = spec.cfg.interval_ns();
    let due = |now: u64| (now.saturating_sub(spec.start_ns) as f64 / interval) as u64;
    let mut next = due(spec.clock.now());
    let mut buf = vec![0u8; spec.cfg.size];
    loop {
        let now_due = due(spec.clock.now());
        while next <= now_due {
            fill(&mut buf, next);
            match p.offer(next, &buf) {
                Ok(_) => next += 1,
                Err(OfferError::BackPressured) => {
                    p.publisher().do_work();
                    break;
                }
                Err(e) => return Err(BenchError::Child(format!("member offer: {e}"))),
            }
        }
        let _ = p.publisher().flush();
        p.publisher().do_work();
        // Sleep until the next message is due, at least 50 us: two members and a spinning
        // subscriber share two cores.
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// What one kill cost the subscriber.
#[derive(Debug, Clone, Serialize)]
pub struct Kill {
    /// The member killed (the leader: the session of the last message delivered before).
    pub session: String,
    /// From the last message delivered before the kill to the first after it.
    pub gap_ns: u64,
    /// The first sequence delivered after the kill less the last before it (1: the survivor
    /// supplied the very next one).
    pub seq_step: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverResult {
    pub transport: String,
    pub rate: f64,
    pub size: usize,
    pub kills: Vec<Kill>,
    pub delivered: u64,
    /// Sequences never delivered (checked by the subscriber, and the arbiter's own count).
    pub lost: u64,
    pub arbiter_lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    /// Deliveries whose content was not their sequence's.
    pub corrupt: u64,
    pub disagreements: u64,
    /// The inter-delivery times of the whole run (ns): median, 99.9th, largest.
    pub interdelivery_p50_ns: u64,
    pub interdelivery_p999_ns: u64,
    pub interdelivery_max_ns: u64,
    /// The same run's baseline: at a moment with no kill, from the leader's last first copy to
    /// the other member's next newer sequence (one per round).
    pub baseline_gaps_ns: Vec<u64>,
    pub seconds: f64,
}

impl FailoverResult {
    fn gaps(&self) -> Vec<u64> {
        let mut g: Vec<u64> = self.kills.iter().map(|k| k.gap_ns).collect();
        g.sort_unstable();
        g
    }
    pub fn gap_median_ns(&self) -> u64 {
        let g = self.gaps();
        g.get(g.len() / 2).copied().unwrap_or(0)
    }
    pub fn gap_max_ns(&self) -> u64 {
        self.gaps().last().copied().unwrap_or(0)
    }
    /// The median of the baseline's gaps.
    pub fn baseline_median_ns(&self) -> u64 {
        let mut g = self.baseline_gaps_ns.clone();
        g.sort_unstable();
        g.get(g.len() / 2).copied().unwrap_or(0)
    }
    /// The stream's inter-message time.
    pub fn interval_ns(&self) -> f64 {
        1e9 / self.rate
    }
}

/// What a subscriber checks of each message of a stream whose content is its sequence's
/// ([`fill`]): what was lost (sequences skipped), duplicated, out of order or corrupted.
#[derive(Default)]
struct SequenceCheck {
    last_seq: Option<u64>,
    delivered: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    corrupt: u64,
    expect: Vec<u8>,
}

impl SequenceCheck {
    fn on(&mut self, seq: u64, payload: &[u8]) {
        self.delivered += 1;
        self.expect.resize(payload.len(), 0);
        fill(&mut self.expect, seq);
        if payload != self.expect.as_slice() {
            self.corrupt += 1;
        }
        match self.last_seq {
            Some(l) if seq == l + 1 => {}
            Some(l) if seq > l + 1 => self.lost += seq - l - 1,
            Some(l) if seq == l => self.duplicated += 1,
            Some(_) => self.out_of_order += 1,
            None => {}
        }
        self.last_seq = Some(self.last_seq.map_or(seq, |l| l.max(seq)));
    }
}

/// The subscriber's bookkeeping of what it delivered.
struct Tally {
    check: SequenceCheck,
    last_t: Option<u64>,
    last_session: u32,
    gaps: LatencyRecorder,
    /// Set at a kill: the time of the last delivery before it, waiting for the first after.
    kill_pending: Option<(u64, u64, String)>,
    kills: Vec<Kill>,
}

impl Tally {
    fn on(&mut self, t: u64, seq: u64, session: u32, payload: &[u8]) {
        self.check.on(seq, payload);
        if let Some(prev) = self.last_t {
            self.gaps.record(t.saturating_sub(prev) as f64);
        }
        if let Some((before, before_seq, session)) = self.kill_pending.take() {
            self.kills.push(Kill {
                session,
                gap_ns: t.saturating_sub(before),
                seq_step: seq.saturating_sub(before_seq),
            });
        }
        self.last_t = Some(t);
        self.last_session = session;
    }
}

/// The baseline's probe, read from the failover subscriber's member positions: armed at a
/// moment with no kill on the last delivered message (the leader's first copy), it ends when
/// another member's position passes that sequence.
#[derive(Default)]
struct Baseline {
    /// A probe in progress: (leader, sequence, time of its delivery).
    armed: Option<(u32, u64, u64)>,
    gaps: Vec<u64>,
}

impl Baseline {
    fn check(&mut self, sub: &FailoverSubscriber, now: u64) {
        let Some((leader, seq, at)) = self.armed else {
            return;
        };
        let passed = sub
            .member_positions()
            .iter()
            .any(|&(m, p)| m != leader && p.is_some_and(|p| p > seq));
        if passed {
            self.gaps.push(now.saturating_sub(at));
            self.armed = None;
        }
    }
}

/// Starts a member in a thread (the subscriber keeps polling while it starts); the receiver
/// gets the helper and its session.
fn start_member(exe: &Path, spec: MemberSpec) -> mpsc::Receiver<Result<(Helper, u32), BenchError>> {
    let (tx, rx) = mpsc::channel();
    let exe = exe.to_path_buf();
    std::thread::spawn(move || {
        let r = Helper::start(&exe, &spec).and_then(|h| {
            let session = u32::from_str_radix(&h.ready_info, 16).map_err(|_| {
                BenchError::Child(format!("a member said 'ready {}'", h.ready_info))
            })?;
            Ok((h, session))
        });
        let _ = tx.send(r);
    });
    rx
}

/// Runs the kills and measures them (the subscriber spins in this process, on `cpus.a`).
pub fn measure(
    cfg: &FailoverConfig,
    exe: &Path,
    clock: &Clock,
) -> Result<FailoverResult, BenchError> {
    cfg.validate()?;
    crate::measure::floor::with_cpu(cfg.cpus.a, || measure_pinned(cfg, exe, clock))?
}

fn measure_pinned(
    cfg: &FailoverConfig,
    exe: &Path,
    clock: &Clock,
) -> Result<FailoverResult, BenchError> {
    let topic = format!("bench.failover.{}.{}", std::process::id(), cfg.transport);
    let group = "bench".to_string();
    let ctx = Context::new();
    let sub = ctx
        .subscribe(&topic, IdleKind::Spin)
        .map_err(|e| BenchError::Child(format!("subscribe: {e}")))?;
    let arbiter = ArbiterConfig {
        window_ns: cfg.window_ms * 1_000_000,
        ..ArbiterConfig::default()
    };
    let mut sub = FailoverSubscriber::new(vec![sub], &group, arbiter)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    let mut base = Baseline::default();
    let spec = MemberSpec {
        cfg: cfg.clone(),
        topic: topic.clone(),
        group,
        clock: *clock,
        start_ns: clock.now(),
    };
    let mut members: Vec<(Helper, u32)> = Vec::new();
    for _ in 0..2 {
        members.push(
            start_member(exe, spec.clone()).recv().map_err(|_| {
                BenchError::Child("a member thread ended without a result".into())
            })??,
        );
    }
    let mut tally = Tally {
        check: SequenceCheck::default(),
        last_t: None,
        last_session: 0,
        gaps: LatencyRecorder::new(),
        kill_pending: None,
        kills: Vec::new(),
    };
    let started = clock.now();
    let poll = |sub: &mut FailoverSubscriber, tally: &mut Tally, base: &mut Baseline| {
        sub.poll(
            &mut |m| tally.on(clock.now(), m.sequence, m.session_id, m.payload),
            256,
        );
        while sub.next_event().is_some() {}
        base.check(sub, clock.now());
    };
    // Polls until both members' copies are reaching the arbiter and `settle` has passed.
    let wait_for_both = |sub: &mut FailoverSubscriber,
                         tally: &mut Tally,
                         base: &mut Baseline,
                         want: &[u32]|
     -> Result<(), BenchError> {
        let deadline = clock.now() + 30_000_000_000;
        while !want.iter().all(|s| sub.members().contains(s)) {
            if clock.now() > deadline {
                return Err(BenchError::Child(format!(
                    "the subscriber did not hear members {want:08x?} within 30 s (heard {:08x?})",
                    sub.members()
                )));
            }
            poll(sub, tally, base);
        }
        // The baseline's probe starts halfway through.
        let settle = clock.now() + 200_000_000;
        let probe = settle - 100_000_000;
        while clock.now() < settle {
            poll(sub, tally, base);
            if clock.now() >= probe
                && base.armed.is_none()
                && base.gaps.len() < tally.kills.len() + 1
            {
                if let (Some(seq), Some(at)) = (tally.check.last_seq, tally.last_t) {
                    base.armed = Some((tally.last_session, seq, at));
                }
            }
        }
        Ok(())
    };
    let sessions: Vec<u32> = members.iter().map(|m| m.1).collect();
    wait_for_both(&mut sub, &mut tally, &mut base, &sessions)?;
    let mut killed = Vec::new();
    for _ in 0..cfg.kills {
        let leader = tally.last_session;
        let Some(i) = members.iter().position(|m| m.1 == leader) else {
            return Err(BenchError::Child(format!(
                "the last message came from session {leader:08x}, not a running member"
            )));
        };
        let (mut dead, _) = members.swap_remove(i);
        // A probe still open would end in the kill's gap: it is dropped.
        base.armed = None;
        // Reaped after the run: waiting for its exit here would stop the subscriber.
        tally.kill_pending = Some((
            tally.last_t.unwrap_or(0),
            tally.check.last_seq.unwrap_or(0),
            format!("{leader:08x}"),
        ));
        dead.kill();
        killed.push(dead);
        // The replacement starts only once the kill's gap is measured: starting a process
        // takes CPU from the survivor on two cores.
        let deadline = clock.now() + 30_000_000_000;
        while tally.kill_pending.is_some() {
            if clock.now() > deadline {
                return Err(BenchError::Child(
                    "nothing was delivered within 30 s of a kill: the survivor did not take over"
                        .into(),
                ));
            }
            poll(&mut sub, &mut tally, &mut base);
        }
        let restart = start_member(exe, spec.clone());
        let new = loop {
            poll(&mut sub, &mut tally, &mut base);
            match restart.try_recv() {
                Ok(r) => break r?,
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(BenchError::Child(
                        "a member thread ended without a result".into(),
                    ))
                }
            }
        };
        members.push(new);
        let sessions: Vec<u32> = members.iter().map(|m| m.1).collect();
        wait_for_both(&mut sub, &mut tally, &mut base, &sessions)?;
    }
    let seconds = (clock.now() - started) as f64 / 1e9;
    drop(members);
    drop(killed);
    let c = sub.counters();
    let g = tally.gaps.summary();
    Ok(FailoverResult {
        transport: cfg.transport.to_string(),
        rate: cfg.rate,
        size: cfg.size,
        kills: tally.kills,
        delivered: tally.check.delivered,
        lost: tally.check.lost,
        arbiter_lost: c.lost,
        duplicated: tally.check.duplicated,
        out_of_order: tally.check.out_of_order,
        corrupt: tally.check.corrupt,
        disagreements: c.disagreements,
        interdelivery_p50_ns: g.median_ns as u64,
        interdelivery_p999_ns: g.p999_ns as u64,
        interdelivery_max_ns: g.max_ns as u64,
        baseline_gaps_ns: base.gaps,
        seconds,
    })
}
