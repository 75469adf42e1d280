//! Throughput: one publisher process, N subscriber processes. Each subscriber checks every
//! sequence number (and, for messages of 8 bytes or more, the number the publisher wrote into
//! the payload), counts what it lost, and measures its own receive rate.

use crate::helper::protocol::{say_ready, say_result, Helper, Role};
use crate::measure::floor::with_cpu;
use crate::{BenchError, CpuPair};
use peregrine::failover::{ArbiterConfig, FailoverEvent, FailoverSubscriber};
use peregrine::{IdleKind, OfferError, Scheme, SlowSubscriberPolicy, SubscriberEvent};
use peregrine_wire::failover::{FailoverRepr, FAILOVER_HEADER_LEN};
use std::path::Path;
use std::time::{Duration, Instant};

/// Settings of a throughput run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ThroughputConfig {
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    /// Publish for this long, unless `count` is set.
    pub seconds: f64,
    /// Publish exactly this many messages.
    pub count: Option<u64>,
    pub subscribers: u32,
    #[serde(with = "crate::by_name")]
    pub policy: SlowSubscriberPolicy,
    /// Log capacity in bytes (a power of two).
    pub capacity: u64,
    /// With one subscriber: publisher on `a`, subscriber on `b`. With more, unpinned.
    pub cpus: Option<CpuPair>,
    pub name: String,
    pub connect_timeout: Duration,
    /// What subscribers do when there is nothing to read.
    #[serde(with = "crate::by_name")]
    pub idle: IdleKind,
    /// The stream's URI (default: from `transport` and `name`, on loopback).
    pub uri: Option<String>,
    /// udp, mcast: each subscriber drops this fraction of the datagrams it receives (its own
    /// seeded loss generator, `loss=` on its URI), and repairs them by NAK.
    pub loss: Option<String>,
    /// Every message goes through a failover group of one member (the pingpong's group): each
    /// carries the group's 16-byte header and its application sequence, and the subscribers
    /// arbitrate with a `FailoverSubscriber` (the cost of a failover group when nothing fails).
    #[serde(default)]
    pub group: bool,
    /// The subscribers run in this network namespace (`bench throughput --netns`; the
    /// publisher's thread is moved into the other one by its caller).
    #[serde(default)]
    pub sub_netns: Option<String>,
}

/// What one subscriber process saw.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SubscriberReport {
    pub received: u64,
    pub lost: u64,
    pub gaps: u64,
    /// Messages whose sequence number was not the one expected (duplicates or reordering).
    pub out_of_order: u64,
    /// Messages whose payload did not carry their own sequence number.
    pub corrupt: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub cpu_s: f64,
    /// Loss repair (udp, mcast): datagrams the loss generator dropped, NAKs sent, frames
    /// received twice, retransmitted frames received, missing frames repaired.
    #[serde(default)]
    pub dropped: u64,
    #[serde(default)]
    pub naks_sent: u64,
    #[serde(default)]
    pub duplicates: u64,
    #[serde(default)]
    pub retransmits_received: u64,
    #[serde(default)]
    pub recovered: u64,
    /// Recovery times (gap detected to frame received), nanoseconds: median, 99th, 99.9th
    /// percentile and maximum.
    #[serde(default)]
    pub recovery_ns: [u64; 4],
    /// Sequence number after the last message delivered, and after the last range reported
    /// lost.
    #[serde(default)]
    pub end_sequence: u64,
    #[serde(default)]
    pub lost_end_sequence: u64,
    /// Sequence number after the first range reported lost (0: none).
    #[serde(default)]
    pub first_lost_end_sequence: u64,
}

impl SubscriberReport {
    pub fn msgs_per_s(&self) -> f64 {
        if self.last_ns > self.first_ns && self.received > 1 {
            (self.received - 1) as f64 * 1e9 / (self.last_ns - self.first_ns) as f64
        } else {
            0.0
        }
    }
}

/// What a throughput run measured.
#[derive(Debug, Clone)]
pub struct ThroughputResult {
    pub sent: u64,
    pub refused: u64,
    pub publisher_msgs_per_s: f64,
    pub publisher_cpu_s: f64,
    pub publisher: peregrine::PublisherCounters,
    pub subscribers: Vec<SubscriberReport>,
}

impl ThroughputResult {
    /// The slowest subscriber's receive rate.
    pub fn delivered_msgs_per_s(&self) -> f64 {
        self.subscribers
            .iter()
            .map(|s| s.msgs_per_s())
            .fold(f64::INFINITY, f64::min)
    }
    /// Messages published but not delivered, summed over subscribers.
    pub fn lost(&self) -> u64 {
        self.subscribers
            .iter()
            .map(|s| self.sent - s.received)
            .sum()
    }
}

/// The publisher's URI: the one given, or a loopback default (`udp` and `tcp` bind a free port,
/// which the subscribers are told).
pub fn uri(cfg: &ThroughputConfig) -> String {
    if let Some(u) = &cfg.uri {
        return u.clone();
    }
    match cfg.transport {
        Scheme::Ipc => format!(
            "ipc://{}?policy={}&capacity={}",
            cfg.name,
            cfg.policy.name(),
            cfg.capacity
        ),
        t => crate::measure::pingpong::loopback_uri(t, &cfg.name, 0),
    }
}

/// Sequence numbers one message takes on `uri` (fragments on the network transports).
fn frames_per_message(cfg: &ThroughputConfig, uri: &str) -> Result<u64, BenchError> {
    Ok(
        match crate::measure::pingpong::context()?.frame_payload(uri)? {
            Some(per_frame) => cfg.size.div_ceil(per_frame).max(1) as u64,
            None => 1,
        },
    )
}

pub fn validate(cfg: &ThroughputConfig) -> Result<(), BenchError> {
    crate::measure::pingpong::check_transport(cfg.transport, &[("--uri", &cfg.uri)])?;
    let max = if cfg.transport == Scheme::Ipc {
        peregrine::ipc_max_message_len(cfg.capacity)
    } else {
        1 << 20
    }
    // With --group the failover header comes first.
    .saturating_sub(if cfg.group { FAILOVER_HEADER_LEN } else { 0 });
    if cfg.size > max && cfg.transport != Scheme::Ipc {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted: give 0 to {max} bytes",
            cfg.size
        )));
    }
    if cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted: give 0 to {max} bytes (an eighth of the {}-byte log; raise --capacity)",
            cfg.size, cfg.capacity
        )));
    }
    if cfg.count.is_none() && !(cfg.seconds > 0.0 && cfg.seconds <= 3600.0) {
        return Err(BenchError::Config(format!(
            "--seconds {} is not accepted: give more than 0 and at most 3600",
            cfg.seconds
        )));
    }
    if let Some(l) = &cfg.loss {
        if !matches!(cfg.transport, Scheme::Udp | Scheme::Mcast) {
            return Err(BenchError::Config(format!(
                "--loss {l} is not accepted with --transport {}: loss is injected and repaired on udp and mcast only",
                cfg.transport
            )));
        }
        if peregrine::parse_loss(l).is_err() || l.contains([',', '=', '&']) {
            return Err(BenchError::Config(format!(
                "--loss {l} is not accepted: give the fraction of datagrams each subscriber drops, 0 to 100%, for example --loss 1% or --loss 0.01"
            )));
        }
    }
    if cfg.subscribers == 0 || cfg.subscribers > 64 {
        return Err(BenchError::Config(format!(
            "--subscribers {} is not accepted: give 1 to 64",
            cfg.subscribers
        )));
    }
    Ok(())
}

/// The URI subscriber `k` uses: with `--loss`, its own seeded loss generator on received
/// datagrams.
fn sub_uri(cfg: &ThroughputConfig, uri: &str, k: u32) -> String {
    match &cfg.loss {
        Some(l) => format!(
            "{uri}{}loss=rate={l},seed={},dir=recv",
            if uri.contains('?') { '&' } else { '?' },
            k + 1
        ),
        None => uri.to_string(),
    }
}

/// Runs the publisher here and `cfg.subscribers` subscriber processes started with `exe`.
pub fn run(cfg: &ThroughputConfig, exe: &Path) -> Result<ThroughputResult, BenchError> {
    validate(cfg)?;
    let cpu_before = crate::cpu_seconds_self();
    let ctx = crate::measure::pingpong::context()?;
    let publ = ctx.publisher("bench.throughput", &uri(cfg))?;
    let bound = publ.uri().to_string();
    let mut helpers = Vec::new();
    for k in 0..cfg.subscribers {
        helpers.push(Helper::start_in(
            exe,
            &ThroughputSubscriber {
                cfg: cfg.clone(),
                uri: sub_uri(cfg, &bound, k),
            },
            cfg.sub_netns.as_deref(),
        )?);
    }
    let (sent, refused, rate, publisher) = publish(cfg, publ)?;
    let mut subscribers = Vec::new();
    for h in helpers {
        subscribers.push(h.finish::<SubscriberReport>()?);
    }
    Ok(ThroughputResult {
        sent,
        refused,
        publisher_msgs_per_s: rate,
        publisher_cpu_s: crate::cpu_seconds_self() - cpu_before,
        publisher,
        subscribers,
    })
}

/// The publisher side alone (`--role pub`): waits for `cfg.subscribers` subscribers, publishes,
/// closes. Returns (sent, refused offers, publish rate).
pub fn publish_role(cfg: &ThroughputConfig) -> Result<(u64, u64, f64), BenchError> {
    validate(cfg)?;
    let publ = crate::measure::pingpong::context()?.publisher("bench.throughput", &uri(cfg))?;
    publish(cfg, publ).map(|r| (r.0, r.1, r.2))
}

/// Publishes, then closes (lingering for repairs on udp and mcast). Returns (sent, refused
/// offers, publish rate, the publisher's counters after closing).
fn publish(
    cfg: &ThroughputConfig,
    mut publ: peregrine::Publisher,
) -> Result<(u64, u64, f64, peregrine::PublisherCounters), BenchError> {
    let start = Instant::now();
    while publ.subscriber_count() < cfg.subscribers as usize {
        publ.do_work();
        if start.elapsed() > cfg.connect_timeout {
            return Err(BenchError::Child(format!(
                "only {} of {} subscribers attached within {} s",
                publ.subscriber_count(),
                cfg.subscribers,
                cfg.connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Subscribers of a network transport may still be learning the session: give them the
    // heartbeat that answers their join before the first message.
    let settle = Instant::now();
    while settle.elapsed()
        < Duration::from_millis(if cfg.transport == Scheme::Ipc { 0 } else { 20 })
    {
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    let size = cfg.size;
    // With --group each message starts with the failover header naming its sequence.
    let group = cfg
        .group
        .then(|| peregrine::failover::group_id(crate::measure::pingpong::GROUP));
    let header = if cfg.group { FAILOVER_HEADER_LEN } else { 0 };
    let limit = cfg.count.unwrap_or(u64::MAX);
    let run_for = Duration::from_secs_f64(cfg.seconds);
    let mut body = || {
        let mut seq = 0u64;
        let mut refused = 0u64;
        let t0 = Instant::now();
        'outer: while seq < limit {
            // Check the clock once per 4096 messages, not per message.
            for _ in 0..4096 {
                if seq == limit {
                    break 'outer;
                }
                let r = publ.offer_with(header + size, |buf| {
                    if let Some(group_id) = group {
                        FailoverRepr {
                            group_id,
                            sequence: seq,
                        }
                        .emit(buf);
                    }
                    if size >= 8 {
                        buf[header..header + 8].copy_from_slice(&seq.to_le_bytes());
                    }
                });
                match r {
                    Ok(_) => seq += 1,
                    Err(OfferError::BackPressured) => {
                        refused += 1;
                        std::hint::spin_loop();
                    }
                    Err(e) => panic!("offer failed: {e}"),
                }
            }
            if cfg.count.is_none() && t0.elapsed() >= run_for {
                break;
            }
        }
        if let Err(e) = publ.flush() {
            panic!("flush failed: {e}");
        }
        let secs = t0.elapsed().as_secs_f64();
        (seq, refused, seq as f64 / secs)
    };
    let r = match (cfg.cpus, cfg.subscribers) {
        (Some(c), 1) => with_cpu(c.a, body)?,
        _ => body(),
    };
    publ.close(); // ends the session: subscribers drain and report
    Ok((r.0, r.1, r.2, publ.counters()))
}

/// The subscriber side started by hand (`--role sub`): the stream is `cfg.uri`, or on shared
/// memory the segment `cfg.name`.
pub fn subscribe_role(cfg: &ThroughputConfig) -> Result<(), BenchError> {
    let uri = match &cfg.uri {
        Some(u) => u.clone(),
        None => format!("ipc://{}", cfg.name),
    };
    subscribe(cfg, &uri)
}

/// A throughput subscriber, as a helper (`uri`: the stream as the publisher bound it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ThroughputSubscriber {
    pub cfg: ThroughputConfig,
    pub uri: String,
}

impl Role for ThroughputSubscriber {
    const TAG: &'static str = "throughput_subscriber";
    const WHAT: &'static str = "throughput subscriber";
}

/// The subscriber side: receives from `uri` until the publisher closes, then prints its
/// report.
pub fn subscribe(cfg: &ThroughputConfig, uri: &str) -> Result<(), BenchError> {
    if cfg.group {
        return subscribe_group(cfg, uri);
    }
    let uri = uri.to_string();
    let mut sub =
        crate::measure::pingpong::context()?.subscriber("bench.throughput", &uri, cfg.idle)?;
    sub.record_recovery();
    let mut recovery_ns: Vec<u64> = Vec::new();
    if let Some(c) = cfg.cpus {
        peregrine_agent::pin_to_cpu(c.b)?;
    }
    // A network subscriber is ready once it exists (its publisher answers the join while it
    // waits for subscribers); a shared-memory one once it has attached, so that a parent which
    // stops it after `ready` stops an attached subscriber.
    let net = cfg.transport != Scheme::Ipc;
    if net {
        say_ready();
    }
    let start = Instant::now();
    // Messages delivered by the poll that connects are kept and counted below, like any.
    let mut early: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut early_ns = 0;
    while !sub.is_connected() {
        if sub.poll(&mut |m| early.push((m.sequence, m.payload.to_vec())), 16) > 0 && early_ns == 0
        {
            early_ns = peregrine_agent::monotonic_ns();
        }
        if start.elapsed() > cfg.connect_timeout {
            return Err(BenchError::Child(format!(
                "no publisher on {uri} within {} s",
                cfg.connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if !net {
        say_ready();
    }
    let mut r = SubscriberReport::default();
    let mut lost_events: Vec<(u64, u64)> = Vec::new();
    // Message k of the session has sequence k * fpm (its fragments take the numbers between).
    let fpm = frames_per_message(cfg, &uri)?;
    let drain_events = |sub: &mut peregrine::Subscriber,
                        expected: &mut Option<u64>,
                        lost_events: &mut Vec<(u64, u64)>| {
        while let Some(ev) = sub.next_event() {
            match ev {
                SubscriberEvent::Connected { first_sequence, .. } if expected.is_none() => {
                    *expected = Some(first_sequence.next_multiple_of(fpm))
                }
                SubscriberEvent::Lost {
                    from_sequence,
                    count,
                    ..
                } => lost_events.push((from_sequence, count)),
                _ => {}
            }
        }
    };
    // Gaps seen in the sequence of delivered messages; at the end they must be exactly the
    // ranges the `Lost` events announced (events are read after a poll that may already have
    // delivered messages following the loss, so the two are compared at the end, not inline).
    let mut tally = Tally {
        expected: None,
        observed_gaps: Vec::new(),
        fpm,
        size: cfg.size,
    };
    for (sequence, payload) in &early {
        tally.see(&mut r, *sequence, payload);
    }
    if !early.is_empty() {
        r.first_ns = early_ns;
        r.last_ns = early_ns;
    }
    drain_events(&mut sub, &mut tally.expected, &mut lost_events);
    loop {
        let n = sub.poll(&mut |m| tally.see(&mut r, m.sequence, m.payload), 256);
        if n > 0 {
            let now = peregrine_agent::monotonic_ns();
            if r.first_ns == 0 {
                r.first_ns = now;
            }
            r.last_ns = now;
        }
        drain_events(&mut sub, &mut tally.expected, &mut lost_events);
        if n == 0 {
            recovery_ns.append(&mut sub.take_recovery_ns());
            if !sub.is_connected() {
                break;
            }
        }
        sub.idle(n);
    }
    tally.settle(&mut r, &lost_events);
    let c = sub.counters();
    r.naks_sent = c.naks_sent;
    r.duplicates = c.duplicates;
    r.retransmits_received = c.retransmits_received;
    r.recovered = c.recovered;
    r.dropped = sub.loss_counters().map_or(0, |l| l.dropped_total());
    recovery_ns.append(&mut sub.take_recovery_ns());
    recovery_ns.sort_unstable();
    r.recovery_ns = [0.5, 0.99, 0.999, 1.0].map(|q| crate::stats::nearest_rank(&recovery_ns, q));
    say_result(&r);
    Ok(())
}

/// The subscriber side of `--group`: the subscriber inside a `FailoverSubscriber` of the
/// group (one member), which delivers each message by its application sequence; counted and
/// checked as [`subscribe`] does, the arbiter's `Lost` events standing for the transport's.
fn subscribe_group(cfg: &ThroughputConfig, uri: &str) -> Result<(), BenchError> {
    let sub = crate::measure::pingpong::context()?.subscriber("bench.throughput", uri, cfg.idle)?;
    if let Some(c) = cfg.cpus {
        peregrine_agent::pin_to_cpu(c.b)?;
    }
    let net = cfg.transport != Scheme::Ipc;
    if net {
        say_ready();
    }
    let mut group = FailoverSubscriber::new(
        vec![sub],
        crate::measure::pingpong::GROUP,
        ArbiterConfig::default(),
    )
    .map_err(|e| BenchError::Config(e.to_string()))?;
    let mut r = SubscriberReport::default();
    let mut lost_events: Vec<(u64, u64)> = Vec::new();
    // One application sequence per message.
    let mut tally = Tally {
        expected: None,
        observed_gaps: Vec::new(),
        fpm: 1,
        size: cfg.size,
    };
    let start = Instant::now();
    let mut connected = false;
    loop {
        let n = group.poll(&mut |m| tally.see(&mut r, m.sequence, m.payload), 256);
        if n > 0 {
            let now = peregrine_agent::monotonic_ns();
            if r.first_ns == 0 {
                r.first_ns = now;
            }
            r.last_ns = now;
        }
        while let Some(ev) = group.next_event() {
            if let FailoverEvent::Lost {
                from_sequence,
                count,
            } = ev
            {
                lost_events.push((from_sequence, count));
            }
        }
        let is_connected = group.subscribers()[0].is_connected();
        if !connected {
            if is_connected {
                connected = true;
                if !net {
                    say_ready();
                }
            } else if start.elapsed() > cfg.connect_timeout {
                return Err(BenchError::Child(format!(
                    "no publisher on {uri} within {} s",
                    cfg.connect_timeout.as_secs()
                )));
            }
        } else if n == 0 && !is_connected {
            break;
        }
        group.idle(n);
    }
    tally.settle(&mut r, &lost_events);
    let c = group.subscribers()[0].counters();
    r.naks_sent = c.naks_sent;
    r.duplicates = c.duplicates;
    r.retransmits_received = c.retransmits_received;
    r.recovered = c.recovered;
    r.dropped = group.subscribers()[0]
        .loss_counters()
        .map_or(0, |l| l.dropped_total());
    say_result(&r);
    Ok(())
}

/// What the subscriber checks of each delivered message: its place in the sequence (gaps,
/// and numbers going back) and, for sizes of 8 bytes and more, its number and size.
struct Tally {
    /// Where the next message should be: from the `Connected` event or the first message
    /// seen, then the message after the last one seen.
    expected: Option<u64>,
    observed_gaps: Vec<(u64, u64)>,
    /// Message k of the session has sequence k * fpm (its fragments take the numbers between).
    fpm: u64,
    size: usize,
}

impl Tally {
    fn see(&mut self, r: &mut SubscriberReport, sequence: u64, payload: &[u8]) {
        let e = self.expected.unwrap_or(sequence);
        if sequence > e {
            self.observed_gaps.push((e, sequence - e));
        } else if sequence < e {
            r.out_of_order += 1;
        }
        if self.size >= 8 {
            let number = payload
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            if number.map(|n| n * self.fpm) != Some(sequence) || payload.len() != self.size {
                r.corrupt += 1;
            }
        }
        self.expected = Some(sequence + self.fpm);
        r.received += 1;
    }

    /// At the end: the losses reported (`lost_events`, from and count) into the report, each
    /// checked against the gaps seen (a loss after the last delivered message shows only as an
    /// event); a difference counts as out of order.
    fn settle(self, r: &mut SubscriberReport, lost_events: &[(u64, u64)]) {
        let Tally {
            expected,
            mut observed_gaps,
            ..
        } = self;
        if let (Some(&(from, count)), Some(e)) = (lost_events.last(), expected) {
            if from + count > e {
                observed_gaps.push((e, from + count - e));
            }
        }
        r.lost = lost_events.iter().map(|&(_, c)| c).sum();
        r.end_sequence = expected.unwrap_or(0);
        r.lost_end_sequence = lost_events.iter().map(|&(f, c)| f + c).max().unwrap_or(0);
        r.first_lost_end_sequence = lost_events.first().map_or(0, |&(f, c)| f + c);
        r.gaps = lost_events.len() as u64;
        if merge_ranges(&observed_gaps) != merge_ranges(lost_events) {
            tracing::warn!(
                "gaps seen {observed_gaps:?} differ from the losses reported {lost_events:?}"
            );
            r.out_of_order += 1;
        }
        r.cpu_s = crate::cpu_seconds_self();
    }
}

/// Joins ranges `(from, count)` that touch, so two reports of one gap compare equal.
fn merge_ranges(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(from, count) in ranges {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == from => last.1 += count,
            _ => out.push((from, count)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::merge_ranges;

    #[test]
    fn touching_ranges_merge_and_others_stay_apart() {
        assert_eq!(
            merge_ranges(&[(0, 100), (100, 50), (200, 5)]),
            vec![(0, 150), (200, 5)]
        );
        assert_eq!(merge_ranges(&[]), vec![]);
    }
}
