//! Load with pings (Ultra Messaging's lbmpubload / lbmsubload), and one-way latency from
//! embedded timestamps (the RMDS method).
//!
//! **Load with pings.** This process publishes a stream at a requested rate, paced by
//! [`crate::pacer`]. About one message in `ping_every` is a *ping*; the subscriber process
//! discards the load, checks every message's number, and reflects each ping on a second stream,
//! which this process reads between batches. Latency is half the round trip from the ping's
//! actual send time, and, in a second distribution, the time the ping waited behind the
//! schedule (its actual minus its scheduled send time) plus half the round trip: that one is
//! corrected for coordinated omission, since a sender that falls behind delays every ping
//! it has not yet sent.
//!
//! The outer loop's sleep (when the next message is more than 1 ms away) is spent reading
//! reflected pings: in lbmpubload a context thread reads them; here the one thread does both,
//! so the run needs exactly two busy threads on a 2-core machine.
//!
//! **Embedded timestamps.** The roles swap: a publisher process paces the stream and writes the
//! time of each send into the message; this process subscribes and records, for every message,
//! its arrival time minus the time written in it. Both processes read the same TSC (invariant
//! and synchronised across cores: checked before the TSC is chosen, see [`crate::clock`]), and
//! the publisher converts with this process's calibration, passed on its command line.
//!
//! Message layout (little-endian): word 0 is the message number with [`PING`] and
//! [`MEASURED`] flags in its top bits (MEASURED: sent after the warm-up); in embedded mode,
//! word 1 is the send time in clock ticks.

use crate::clock::Clock;
use crate::floor::{with_cpu, Line};
use crate::helper::protocol::{say_ready, say_ready_with, say_result, Helper, Role};
use crate::jitter::{CpuJitter, LoopStalls, StallSpans};
use crate::pacer::{Pacer, PingPicker, Step};
use crate::stats::{LatencyRecorder, Summary};
use crate::{BenchError, CpuPair};
use peregrine::{IdleKind, OfferError, Publisher, Scheme, Subscriber};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Word 0's flag: this message is a ping, to be reflected.
pub const PING: u64 = 1 << 63;
/// Word 0's flag: this message was scheduled after the warm-up (it counts).
pub const MEASURED: u64 = 1 << 62;
const NUMBER: u64 = MEASURED - 1;

/// Which measurement a load run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Pings reflected by the subscriber: RTT / 2.
    Pings,
    /// Every message carries its send time: one-way latency read by the subscriber.
    Embedded,
    /// The floor under load: the same pacer and ping picker, but each message is a store to
    /// one shared cache line (its number, and the ping's number when it is a ping) and the
    /// reflector answers pings on a second line. No transport: what the machine allows
    /// under the schedule.
    CacheLine,
}

/// Settings of a load run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoadConfig {
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    pub rate_msgs_per_s: f64,
    /// One ping per this many messages ([`Method::Pings`]).
    pub ping_every: u64,
    /// The measured interval, after the warm-up.
    pub seconds: f64,
    pub warmup_seconds: f64,
    pub cpus: CpuPair,
    /// What the subscriber does when there is nothing to read.
    #[serde(with = "crate::by_name")]
    pub idle: IdleKind,
    pub method: Method,
    pub name: String,
    pub connect_timeout: Duration,
    /// The load stream's URI (default: loopback, from `transport` and `name`).
    pub uri: Option<String>,
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Messages published in the measured interval, and in all.
    pub sent: u64,
    pub sent_total: u64,
    /// The measured interval's length and the rate achieved in it.
    pub seconds: f64,
    pub achieved_msgs_per_s: f64,
    /// Messages the subscriber received (all, warm-up included), never received, received
    /// twice, and received out of order.
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Offers refused by back-pressure in the measured interval (each retried).
    pub refused: u64,
    /// Latency from the actual send time (RTT / 2, or one-way), and from the scheduled one.
    pub latency: LatencyRecorder,
    pub latency_from_schedule: LatencyRecorder,
    /// Pings sent in the measured interval, and pings whose reflection never came back.
    pub pings: u64,
    pub pings_unanswered: u64,
    /// Application batches (inner loops), the largest, and outer-loop sleeps.
    pub batches: u64,
    pub max_batch: u64,
    pub sleeps: u64,
    pub publisher_cpu_s: f64,
    pub subscriber_cpu_s: f64,
    /// The stalls the two spinning loops saw over the measured interval (the machine's jitter
    /// over the same interval), when counted.
    pub stalls_publisher: Option<CpuJitter>,
    pub stalls_subscriber: Option<CpuJitter>,
    /// The pings no stall of either loop overlapped (from their send to their reflection's
    /// arrival), and how many a stall did: the tail apart from the machine's. None when the
    /// stalls or the pings were not all kept (more than [`jitter::MAX_SPANS`] stalls in a loop,
    /// more than 2,097,152 pings).
    ///
    /// [`jitter::MAX_SPANS`]: crate::jitter::MAX_SPANS
    pub untouched: Option<Untouched>,
}

/// The latency of the pings no stall touched ([`LoadResult::untouched`]).
#[derive(Debug, Clone)]
pub struct Untouched {
    pub latency: LatencyRecorder,
    /// Pings a stall of either loop overlapped, left out of `latency`.
    pub touched: u64,
}

impl LoadResult {
    /// The latency of the pings no stall touched, when the stalls were kept and some were.
    pub fn unstalled(&self) -> Option<Summary> {
        self.untouched.as_ref()?.latency.nonempty_summary()
    }

    /// The rate held within 1% with nothing lost, duplicated or out of order.
    pub fn sustained(&self, rate_msgs_per_s: f64) -> bool {
        self.achieved_msgs_per_s >= 0.99 * rate_msgs_per_s
            && self.lost == 0
            && self.duplicates == 0
            && self.out_of_order == 0
            && self.pings_unanswered == 0
    }
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &LoadConfig) -> Result<(), BenchError> {
    crate::pingpong::check_transport(cfg.transport, &[("--uri", &cfg.uri)])?;
    let min = match cfg.method {
        Method::Pings | Method::CacheLine => 8,
        Method::Embedded => 16,
    };
    let max = if cfg.transport == Scheme::Ipc {
        peregrine::ipc_max_message_len(peregrine::IPC_DEFAULT_CAPACITY)
    } else {
        1 << 20
    };
    if cfg.size < min || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted: give {min} to {max} bytes (each message carries its {}-byte header)",
            cfg.size,
            min
        )));
    }
    if !(cfg.rate_msgs_per_s.is_finite()
        && cfg.rate_msgs_per_s >= 1.0
        && cfg.rate_msgs_per_s <= 1e9)
    {
        return Err(BenchError::Config(format!(
            "--rate {} is not accepted: give 1 to 1g messages per second (suffixes k, m, g), for example --rate 1m",
            cfg.rate_msgs_per_s
        )));
    }
    if cfg.ping_every == 0 {
        return Err(BenchError::Config(
            "--ping-every 0 is not accepted: give 1 (every message) or more".into(),
        ));
    }
    if !(cfg.seconds > 0.0 && cfg.seconds <= 3600.0) {
        return Err(BenchError::Config(format!(
            "--seconds {} is not accepted: give more than 0 and at most 3600",
            cfg.seconds
        )));
    }
    if !(cfg.warmup_seconds >= 0.0 && cfg.warmup_seconds <= 600.0) {
        return Err(BenchError::Config(format!(
            "--warmup-seconds {} is not accepted: give 0 to 600",
            cfg.warmup_seconds
        )));
    }
    Ok(())
}

/// The load stream's URI and the reflected stream's (loopback defaults). The reflected stream
/// is latency-critical (`mode=urgent`, and `gro=0` on UDP); the load stream keeps the
/// transport's defaults, batching included.
fn uris(cfg: &LoadConfig) -> (String, String) {
    match cfg.transport {
        Scheme::Ipc => (
            cfg.uri
                .clone()
                .unwrap_or_else(|| format!("ipc://{}-load", cfg.name)),
            format!("ipc://{}-reflect", cfg.name),
        ),
        t => {
            let load = cfg
                .uri
                .clone()
                .unwrap_or_else(|| crate::pingpong::loopback_uri(t, &cfg.name, 0));
            let mut reflect = crate::pingpong::loopback_uri(t, &cfg.name, 1);
            reflect.push_str(if t == Scheme::Tcp {
                "?mode=urgent"
            } else {
                "?mode=urgent&gro=0"
            });
            (load, reflect)
        }
    }
}

/// What a subscriber process reports.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SubReport {
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub corrupt: u64,
    pub reflected: u64,
    pub cpu_s: f64,
    /// The reflector loop's stalls after the first measured message.
    #[serde(default)]
    pub stalls: Option<CpuJitter>,
}

/// What a paced publisher process reports (embedded mode).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PubReport {
    pub stats: PacedStats,
    pub cpu_s: f64,
}

/// Runs a load test: this process publishes (pings) or subscribes (embedded); the other side
/// is `exe` started with `--role`.
pub fn run(cfg: &LoadConfig, exe: &Path, clock: &Clock) -> Result<LoadResult, BenchError> {
    validate(cfg)?;
    match cfg.method {
        Method::Pings => run_pings(cfg, exe, clock),
        Method::Embedded => run_embedded(cfg, exe, clock),
        Method::CacheLine => run_cache_line(cfg, exe, clock),
    }
}

/// The pings of a run in flight and their latencies: the sending side tells it each ping's
/// send time, the reading side each reflection.
struct PingBook {
    /// Pings in flight, oldest first: (number, send ticks, scheduled ns since the start).
    in_flight: VecDeque<(u64, u64, u64)>,
    latency: LatencyRecorder,
    from_schedule: LatencyRecorder,
    unanswered: u64,
    bad_echo: Option<String>,
    first_measured: u64,
    t0: u64,
    /// Every measured ping: (send, reflection's arrival) ticks and RTT / 2; at most
    /// [`MAX_PING_SAMPLES`].
    samples: Vec<(u64, u64, f64)>,
    /// More pings were measured than [`MAX_PING_SAMPLES`]: `samples` is incomplete.
    samples_full: bool,
}

/// Pings whose send and arrival a run keeps to check against the stalls (48 MiB): at the
/// default 5,000 pings a second, about 7 minutes. A longer run has no unstalled figures.
const MAX_PING_SAMPLES: usize = 1 << 21;

impl PingBook {
    fn new(t0: u64) -> PingBook {
        PingBook {
            in_flight: VecDeque::new(),
            latency: LatencyRecorder::new(),
            from_schedule: LatencyRecorder::new(),
            unanswered: 0,
            bad_echo: None,
            first_measured: u64::MAX,
            t0,
            samples: Vec::new(),
            samples_full: false,
        }
    }

    /// Ping `number` was sent at `sent_ticks`, scheduled at `sched_ns` (after the warm-up).
    fn sent(&mut self, number: u64, sent_ticks: u64, sched_ns: u64) {
        if self.first_measured == u64::MAX {
            self.first_measured = number;
        }
        self.in_flight.push_back((number, sent_ticks, sched_ns));
    }

    /// Ping `number`'s reflection arrived at `now` (ticks).
    fn reflected(&mut self, number: u64, now: u64, clock: &Clock) {
        // Warm-up pings are not kept: their reflections are ignored.
        if number < self.first_measured {
            return;
        }
        // Reflections come back in order: a ping older than this one was lost.
        while let Some(&(n, sent, sched)) = self.in_flight.front() {
            if n > number {
                break;
            }
            self.in_flight.pop_front();
            if n == number {
                let rtt_half_ns = clock.ticks_to_ns(now - sent) / 2.0;
                let sent_ns = clock.ticks_to_ns(sent - self.t0);
                let behind_ns = (sent_ns - sched as f64).max(0.0);
                self.latency.record(rtt_half_ns);
                self.from_schedule.record(behind_ns + rtt_half_ns);
                if self.samples.len() < MAX_PING_SAMPLES {
                    self.samples.push((sent, now, rtt_half_ns));
                } else {
                    self.samples_full = true;
                }
                return;
            }
            self.unanswered += 1;
        }
        self.bad_echo = Some(format!(
            "a reflection of ping {number}, which was not sent or was answered before"
        ));
    }
}

fn run_pings(cfg: &LoadConfig, exe: &Path, clock: &Clock) -> Result<LoadResult, BenchError> {
    let cpu_before = crate::cpu_seconds_self();
    let ctx = crate::pingpong::context()?;
    let (load_uri, _) = uris(cfg);
    let mut publ = ctx.publisher("bench.load", &load_uri)?;
    let bound = publ.uri().to_string();
    let helper = Helper::start(
        exe,
        &LoadReflector {
            cfg: LoadConfig {
                uri: Some(bound.clone()),
                ..cfg.clone()
            },
            clock: *clock,
        },
    )?;
    let reflect_uri = if helper.ready_info.is_empty() {
        uris(cfg).1
    } else {
        helper.ready_info.clone()
    };
    let mut sub = ctx.subscriber("bench.reflect", &reflect_uri, IdleKind::Spin)?;
    // The reflector sends nothing before the first ping, so nothing can arrive early here.
    let early =
        crate::pingpong::wait_connected(&mut publ, &mut sub, cfg.connect_timeout, "subscriber")?;
    if !early.is_empty() {
        return Err(BenchError::Child(format!(
            "{} message(s) arrived on the reflect stream before the first ping",
            early.len()
        )));
    }
    // A network subscriber may still be learning the session (the heartbeat answering its
    // join): let it, so that it joins at message 0 rather than at a later position.
    let settle = Instant::now();
    while cfg.transport != Scheme::Ipc && settle.elapsed() < Duration::from_millis(20) {
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }

    let warmup_ns = (cfg.warmup_seconds * 1e9) as u64;
    let picker = PingPicker::new(cfg.ping_every, 0x5eed ^ cfg.rate_msgs_per_s as u64);
    let (stats, book) = with_cpu(cfg.cpus.a, || -> Result<_, BenchError> {
        let t0 = clock.now();
        // Both the sending side (`on_ping`) and the reading side (`service`) reach it.
        let book = RefCell::new(PingBook::new(t0));
        let reflect = |sub: &mut Subscriber| {
            sub.poll(
                &mut |m| {
                    let now = clock.now();
                    let mut book = book.borrow_mut();
                    match m.payload.get(..8) {
                        Some(word) => {
                            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                            book.reflected(word & NUMBER, now, clock);
                        }
                        None => {
                            book.bad_echo = Some(format!("a {}-byte reflection", m.payload.len()));
                        }
                    }
                },
                64,
            )
        };
        let stats = paced_publish(
            &mut publ,
            clock,
            t0,
            cfg,
            Some(picker),
            |buf, word| buf[..8].copy_from_slice(&word.to_le_bytes()),
            |i, sent_ticks, sched_ns| {
                if sched_ns >= warmup_ns {
                    book.borrow_mut().sent(i, sent_ticks, sched_ns);
                }
            },
            |publ| {
                if reflect(&mut sub) == 0 {
                    publ.do_work();
                }
            },
        )?;
        // The last pings' reflections.
        let wait = Instant::now();
        while !book.borrow().in_flight.is_empty() && wait.elapsed() < Duration::from_secs(2) {
            if reflect(&mut sub) == 0 {
                publ.do_work();
            }
        }
        Ok((stats, book.into_inner()))
    })??;
    if let Some(e) = book.bad_echo {
        return Err(BenchError::Child(format!(
            "the subscriber reflected {e}: this is a bug, please report it"
        )));
    }
    // Ends the session (a shared-memory publisher ends it when dropped): the subscriber
    // drains and reports.
    publ.close();
    drop(publ);
    let publisher_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let report: SubReport = helper.finish()?;
    if report.corrupt > 0 {
        return Err(BenchError::Child(format!(
            "{} messages arrived corrupted: this is a bug, please report it",
            report.corrupt
        )));
    }
    Ok(ping_result(stats, book, report, publisher_cpu_s))
}

/// The pings of `book` that no stall of the two loops overlapped, and how many one did (None
/// when a loop's stalls or the pings were not all kept).
fn untouched(book: &PingBook, a: Option<&CpuJitter>, b: Option<&CpuJitter>) -> Option<Untouched> {
    if book.samples_full {
        return None;
    }
    let spans = StallSpans::of([a?, b?])?;
    let mut u = Untouched {
        latency: LatencyRecorder::new(),
        touched: 0,
    };
    for &(sent, arrived, half_ns) in &book.samples {
        if spans.touched(sent, arrived) {
            u.touched += 1;
        } else {
            u.latency.record(half_ns);
        }
    }
    Some(u)
}

/// The result of a ping run (over a transport or on the cache line) from the paced side's
/// counts, its pings and the reflector's report.
fn ping_result(
    stats: PacedStats,
    book: PingBook,
    report: SubReport,
    publisher_cpu_s: f64,
) -> LoadResult {
    let untouched = untouched(&book, stats.stalls.as_ref(), report.stalls.as_ref());
    LoadResult {
        untouched,
        sent: stats.measured_sent,
        sent_total: stats.sent_total,
        seconds: stats.measured_seconds(),
        achieved_msgs_per_s: stats.achieved_msgs_per_s(),
        received: report.received,
        // Every message sent and not received once (gaps and a lost tail alike).
        lost: stats
            .sent_total
            .saturating_sub(report.received - report.duplicates),
        duplicates: report.duplicates,
        out_of_order: report.out_of_order,
        refused: stats.refused,
        pings: stats.pings,
        pings_unanswered: book.unanswered + book.in_flight.len() as u64,
        latency: book.latency,
        latency_from_schedule: book.from_schedule,
        batches: stats.batches,
        max_batch: stats.max_batch,
        sleeps: stats.sleeps,
        publisher_cpu_s,
        subscriber_cpu_s: report.cpu_s,
        stalls_publisher: stats.stalls,
        stalls_subscriber: report.stalls,
    }
}

/// Words of the floor's page ([`crate::floor::Line`]) the floor under load uses: two lines and
/// two rings. The load line (written by the paced side, spun on by the reflector) holds the
/// latest message's word 0 and a [`PingChannel`] of the pings sent; the reflect line (written
/// by the reflector, read by the paced side between batches) holds the channel of the pings
/// reflected. Each channel keeps its last [`INLINE`] numbers on its own line, so a reader that
/// keeps up takes one line per ping each way, as a ping over two one-way logs does (a floor
/// that cost more lines than a transport would not be a floor); every number also goes to a
/// ring of [`RING`] slots, so that no ping is lost while a reader is held up (a stall of the
/// machine): like a log, the floor keeps every ping and its tail. Lines written by different
/// sides are 128 bytes or more apart.
const LOAD_WORD: usize = 16;
const PINGS_SENT: PingChannel = PingChannel {
    count_word: 17,
    ring_word: 64,
};
const PINGS_REFLECTED: PingChannel = PingChannel {
    count_word: 48,
    ring_word: 64 + RING as usize + 16,
};
/// Slots of each ring: at about 5,000 pings a second, 38 ms of pings.
const RING: u64 = 192;
/// Numbers each channel keeps on its count's line, after the count.
const INLINE: u64 = 6;

/// One direction of the floor under load's pings: a count, the last [`INLINE`] numbers on the
/// count's line, and every number in a ring of [`RING`] slots.
///
/// Invariants: number `n` (0-based) is stored in inline slot `n % INLINE` and ring slot
/// `n % RING`, both with release ordering, before the count becomes `n + 1` (release). Inline
/// slot `n % INLINE` is next overwritten by number `n + INLINE`, which is stored after the count
/// became `n + INLINE`: so a reader that loads the slot (acquire) and then the count, and finds
/// the count below `n + INLINE`, read number `n` itself.
#[derive(Clone, Copy)]
struct PingChannel {
    count_word: usize,
    ring_word: usize,
}

impl PingChannel {
    /// The writer: stores number `n`.
    #[inline]
    fn push(self, line: &Line, n: u64, number: u64) {
        line.word_at(self.ring_word + (n % RING) as usize)
            .store(number, Ordering::Release);
        line.word_at(self.count_word + 1 + (n % INLINE) as usize)
            .store(number, Ordering::Release);
        line.word_at(self.count_word)
            .store(n + 1, Ordering::Release);
    }

    /// How many numbers the writer has stored.
    #[inline]
    fn count(self, line: &Line) -> u64 {
        line.word_at(self.count_word).load(Ordering::Acquire)
    }

    /// The reader: number `n`, which [`count`](Self::count) has shown stored. From the count's
    /// line while the writer is fewer than [`INLINE`] numbers ahead; from the ring otherwise
    /// (which holds it unless the writer is a whole ring ahead: the caller's check).
    #[inline]
    fn get(self, line: &Line, n: u64) -> u64 {
        let v = line
            .word_at(self.count_word + 1 + (n % INLINE) as usize)
            .load(Ordering::Acquire);
        if self.count(line) - n < INLINE {
            return v;
        }
        line.word_at(self.ring_word + (n % RING) as usize)
            .load(Ordering::Acquire)
    }
}

// The two lines and the two rings do not overlap, and fit in the page.
const _: () = {
    assert!(LOAD_WORD / 8 == PINGS_SENT.count_word / 8);
    assert!(PINGS_SENT.count_word + (INLINE as usize) < 24);
    assert!(PINGS_REFLECTED.count_word % 8 == 0);
    assert!(PINGS_SENT.ring_word >= PINGS_REFLECTED.count_word + 16);
    assert!(PINGS_REFLECTED.ring_word >= PINGS_SENT.ring_word + RING as usize + 16);
    assert!(PINGS_REFLECTED.ring_word + RING as usize <= 512);
};

/// The load side of the floor under load: each message is a store to the load line.
struct LineSink<'a> {
    line: &'a Line,
    /// The load line's word, looked up once.
    load: &'a AtomicU64,
    pings: u64,
}

impl<'a> LineSink<'a> {
    fn new(line: &'a Line) -> LineSink<'a> {
        LineSink {
            line,
            load: line.word_at(LOAD_WORD),
            pings: 0,
        }
    }
}

impl Sink for LineSink<'_> {
    #[inline]
    fn offer_word(
        &mut self,
        _size: usize,
        word: u64,
        _fill: &mut impl FnMut(&mut [u8], u64),
    ) -> Result<(), OfferError> {
        if word & PING != 0 {
            PINGS_SENT.push(self.line, self.pings, word);
            self.pings += 1;
        }
        self.load.store(word, Ordering::Release);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The floor under load: [`Method::CacheLine`].
fn run_cache_line(cfg: &LoadConfig, exe: &Path, clock: &Clock) -> Result<LoadResult, BenchError> {
    let cpu_before = crate::cpu_seconds_self();
    let name = crate::run_name("fl");
    let line = Line::open(&name, true)?;
    let helper = Helper::start(
        exe,
        &CacheLineReflector {
            cfg: cfg.clone(),
            line: name,
            clock: *clock,
        },
    )?;
    let warmup_ns = (cfg.warmup_seconds * 1e9) as u64;
    let picker = PingPicker::new(cfg.ping_every, 0x5eed ^ cfg.rate_msgs_per_s as u64);
    let (stats, book) = with_cpu(cfg.cpus.a, || -> Result<_, BenchError> {
        let t0 = clock.now();
        let book = RefCell::new(PingBook::new(t0));
        let (mut seen, mut latest) = (0u64, None);
        let mut reflect = || {
            let c = PINGS_REFLECTED.count(&line);
            if c == seen {
                return;
            }
            let now = clock.now();
            let mut book = book.borrow_mut();
            // More than the ring holds since the last look: the oldest are gone (counted
            // unanswered when a later one arrives).
            seen = seen.max(c.saturating_sub(RING));
            while seen < c {
                let number = PINGS_REFLECTED.get(&line, seen) & NUMBER;
                seen += 1;
                // Pings are reflected in order: a number not above the latest is a slot the
                // reflector skipped when it fell a whole ring behind, still holding a ping
                // of the lap before.
                if latest.is_some_and(|l| number <= l) {
                    continue;
                }
                latest = Some(number);
                book.reflected(number, now, clock);
            }
        };
        let stats = paced_publish(
            &mut LineSink::new(&line),
            clock,
            t0,
            cfg,
            Some(picker),
            |_, _| {},
            |i, sent_ticks, sched_ns| {
                if sched_ns >= warmup_ns {
                    book.borrow_mut().sent(i, sent_ticks, sched_ns);
                }
            },
            |_| reflect(),
        )?;
        let wait = Instant::now();
        while !book.borrow().in_flight.is_empty() && wait.elapsed() < Duration::from_secs(2) {
            reflect();
        }
        Ok((stats, book.into_inner()))
    })??;
    line.word_at(LOAD_WORD)
        .store(crate::floor::STOP, Ordering::Release);
    let publisher_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let report: SubReport = helper.finish()?;
    if let Some(e) = book.bad_echo {
        return Err(BenchError::Child(format!(
            "the cache-line reflector reflected {e}: this is a bug, please report it"
        )));
    }
    Ok(LoadResult {
        // One line holds only the latest message: the reflector counts the changes it was
        // fast enough to see, and nothing can be lost, duplicated or reordered.
        lost: 0,
        duplicates: 0,
        out_of_order: 0,
        ..ping_result(stats, book, report, publisher_cpu_s)
    })
}

/// The floor under load's reflector, as a helper, on the shared page `line`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CacheLineReflector {
    pub cfg: LoadConfig,
    pub line: String,
    pub clock: Clock,
}

impl Role for CacheLineReflector {
    const TAG: &'static str = "cache_line_reflector";
    const WHAT: &'static str = "cache-line reflector";
}

/// The reflector of the floor under load: spins on the load line, answers each new ping on
/// the reflect line, and counts its loop's stalls once measured messages come.
pub fn reflect_cache_line(cfg: &LoadConfig, name: &str, clock: &Clock) -> Result<(), BenchError> {
    let line = Line::open(name, false)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready();
    let load = line.word_at(LOAD_WORD);
    let (mut last, mut reflected, mut changes) = (0u64, 0u64, 0u64);
    let mut stalls = LoopStalls::new(clock);
    let mut measuring = false;
    loop {
        let word = load.load(Ordering::Acquire);
        if word == crate::floor::STOP {
            break;
        }
        if word != last {
            last = word;
            changes += 1;
            measuring |= word & MEASURED != 0;
            let sent = PINGS_SENT.count(&line);
            // More pings than the ring holds since the last look: the oldest are gone (the
            // measuring side counts them unanswered).
            reflected = reflected.max(sent.saturating_sub(RING));
            while reflected < sent {
                let p = PINGS_SENT.get(&line, reflected);
                PINGS_REFLECTED.push(&line, reflected, p);
                reflected += 1;
            }
        }
        stalls.at(clock.now(), measuring);
        std::hint::spin_loop();
    }
    say_result(&SubReport {
        received: changes,
        reflected,
        cpu_s: crate::cpu_seconds_self(),
        stalls: stalls.finish(cfg.cpus.b),
        ..SubReport::default()
    });
    Ok(())
}

fn run_embedded(cfg: &LoadConfig, exe: &Path, clock: &Clock) -> Result<LoadResult, BenchError> {
    let cpu_before = crate::cpu_seconds_self();
    let ctx = crate::pingpong::context()?;
    let (load_uri, _) = uris(cfg);
    // The publisher binds: with udp://...:0 its helper tells the port on its ready line.
    let helper = Helper::start(
        exe,
        &EmbeddedPublisher {
            cfg: LoadConfig {
                uri: Some(load_uri.clone()),
                ..cfg.clone()
            },
            clock: *clock,
        },
    )?;
    let uri = if helper.ready_info.is_empty() {
        load_uri
    } else {
        helper.ready_info.clone()
    };
    let mut sub = ctx.subscriber("bench.load", &uri, cfg.idle)?;
    let mut latency = LatencyRecorder::new();
    let mut check = SequenceCheck::default();
    let mut corrupt = 0u64;
    with_cpu(cfg.cpus.a, || {
        subscribe_loop(&mut sub, cfg.connect_timeout, |payload| {
            let now = clock.now();
            let Some(head) = payload.get(..16) else {
                corrupt += 1;
                return;
            };
            let word = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
            let sent = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
            check.see(word & NUMBER);
            if payload.len() != cfg.size {
                corrupt += 1;
            }
            if word & MEASURED != 0 {
                latency.record(clock.ticks_to_ns(now.wrapping_sub(sent)));
            }
        })
    })??;
    let subscriber_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let report: PubReport = helper.finish()?;
    if corrupt > 0 {
        return Err(BenchError::Child(format!(
            "{corrupt} messages arrived corrupted: this is a bug, please report it"
        )));
    }
    let s = report.stats;
    Ok(LoadResult {
        sent: s.measured_sent,
        sent_total: s.sent_total,
        seconds: s.measured_seconds(),
        achieved_msgs_per_s: s.achieved_msgs_per_s(),
        received: check.received,
        lost: s
            .sent_total
            .saturating_sub(check.received - check.duplicates),
        duplicates: check.duplicates,
        out_of_order: check.out_of_order,
        refused: s.refused,
        pings: 0,
        pings_unanswered: 0,
        latency_from_schedule: LatencyRecorder::new(),
        latency,
        batches: s.batches,
        max_batch: s.max_batch,
        sleeps: s.sleeps,
        publisher_cpu_s: report.cpu_s,
        subscriber_cpu_s,
        stalls_publisher: s.stalls.clone(),
        stalls_subscriber: None,
        // The subscriber's loop does not count its stalls in this mode.
        untouched: None,
    })
}

/// Counts of the paced publisher.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PacedStats {
    pub sent_total: u64,
    /// Messages sent in the measured interval, and the interval's ends (ns since the start).
    pub measured_sent: u64,
    pub measured_from_ns: u64,
    pub measured_to_ns: u64,
    /// Refusals in the measured interval.
    pub refused: u64,
    pub pings: u64,
    pub batches: u64,
    pub max_batch: u64,
    pub sleeps: u64,
    /// The paced loop's stalls over the measured interval.
    #[serde(default)]
    pub stalls: Option<CpuJitter>,
}

impl PacedStats {
    pub fn measured_seconds(&self) -> f64 {
        self.measured_to_ns.saturating_sub(self.measured_from_ns) as f64 / 1e9
    }
    pub fn achieved_msgs_per_s(&self) -> f64 {
        let s = self.measured_seconds();
        if s > 0.0 {
            self.measured_sent as f64 / s
        } else {
            0.0
        }
    }
}

/// Where the paced loop sends: a publisher, or the floor's cache line.
trait Sink {
    /// Sends a message of `size` bytes whose word 0 is `word`, written by `fill`.
    fn offer_word(
        &mut self,
        size: usize,
        word: u64,
        fill: &mut impl FnMut(&mut [u8], u64),
    ) -> Result<(), OfferError>;
    fn flush(&mut self) -> Result<(), String>;
}

impl Sink for Publisher {
    #[inline]
    fn offer_word(
        &mut self,
        size: usize,
        word: u64,
        fill: &mut impl FnMut(&mut [u8], u64),
    ) -> Result<(), OfferError> {
        self.offer_with(size, |buf| fill(buf, word)).map(drop)
    }
    fn flush(&mut self) -> Result<(), String> {
        Publisher::flush(self).map_err(|e| e.to_string())
    }
}

/// Messages of a long batch (the one that catches up after a stall) between two calls of the
/// paced loop's `service`: lbmpubload reads reflections on a thread of their own while it
/// sends; here, without them waiting for the end of a batch of thousands.
const SERVICE_EVERY: u64 = 256;

/// The paced publisher: the outer loop of [`crate::pacer`] around `publ`.
// The hooks are what differ between the ping and the embedded runs; a struct of closures
// would only rename them.
///
/// - `picker` chooses the pings (none: no message is a ping);
/// - `fill(buf, word)` writes a message whose word 0 is `word` (number and flags);
/// - `on_ping(number, sent_ticks, scheduled_ns)` is told each ping's send time;
/// - `service(publ)` runs between batches, every [`SERVICE_EVERY`] messages of a long one,
///   while an offer is refused, and while the loop waits (reading reflected pings, answering
///   the transport's control traffic).
///
/// Every clock reading also feeds the loop's stalls over the measured interval
/// ([`LoopStalls`]: the gap into it included).
#[allow(clippy::too_many_arguments)]
fn paced_publish<S: Sink>(
    publ: &mut S,
    clock: &Clock,
    t0: u64,
    cfg: &LoadConfig,
    mut picker: Option<PingPicker>,
    mut fill: impl FnMut(&mut [u8], u64),
    mut on_ping: impl FnMut(u64, u64, u64),
    mut service: impl FnMut(&mut S),
) -> Result<PacedStats, BenchError> {
    let warmup_ns = (cfg.warmup_seconds * 1e9) as u64;
    let end_ns = warmup_ns + (cfg.seconds * 1e9) as u64;
    let mut pacer = Pacer::new(cfg.rate_msgs_per_s, 0, u64::MAX);
    let mut st = PacedStats::default();
    let ns = |ticks: u64| clock.ticks_to_ns(ticks.wrapping_sub(t0)) as u64;
    let mut measured_first: Option<u64> = None;
    let mut stalls = LoopStalls::new(clock);
    let size = cfg.size;
    // Steps 1-6 of the pacer's doc. The clock is read once per outer loop, and once more for
    // each ping (its own send time).
    loop {
        let now = clock.now();
        let now_ns = ns(now);
        stalls.at(now, now_ns >= warmup_ns);
        if now_ns >= end_ns {
            st.measured_to_ns = now_ns;
            break;
        }
        if measured_first.is_none() && now_ns >= warmup_ns {
            measured_first = Some(pacer.sent());
            st.measured_from_ns = now_ns;
        }
        match pacer.step(now_ns) {
            Step::Send { first, count } => {
                for i in first..first + count {
                    let sched_ns = pacer.scheduled_ns(i);
                    let measured = sched_ns >= warmup_ns;
                    let ping = picker.as_mut().is_some_and(|p| p.is_ping(i));
                    let word =
                        i | if ping { PING } else { 0 } | if measured { MEASURED } else { 0 };
                    let sent_ticks = if ping { clock.now() } else { 0 };
                    loop {
                        match publ.offer_word(size, word, &mut fill) {
                            Ok(()) => break,
                            Err(OfferError::BackPressured) => {
                                if measured_first.is_some() {
                                    st.refused += 1;
                                }
                                service(publ);
                            }
                            Err(e) => return Err(BenchError::Child(format!("offer failed: {e}"))),
                        }
                    }
                    if ping {
                        on_ping(i, sent_ticks, sched_ns);
                        if measured {
                            st.pings += 1;
                        }
                    }
                    pacer.sent_one();
                    if (i - first) % SERVICE_EVERY == SERVICE_EVERY - 1 {
                        service(publ);
                    }
                }
                publ.flush()
                    .map_err(|e| BenchError::Child(format!("flush failed: {e}")))?;
                st.batches += 1;
                st.max_batch = st.max_batch.max(count);
                service(publ);
            }
            Step::Sleep { until_ns } => {
                st.sleeps += 1;
                loop {
                    let now = clock.now();
                    stalls.at(now, ns(now) >= warmup_ns);
                    if ns(now) >= until_ns.min(end_ns) {
                        break;
                    }
                    service(publ);
                }
            }
            Step::Spin { .. } => service(publ),
            Step::Done => break,
        }
    }
    st.sent_total = pacer.sent();
    st.measured_sent = pacer.sent() - measured_first.unwrap_or(pacer.sent());
    st.stalls = stalls.finish(cfg.cpus.a);
    Ok(st)
}

/// Sequence checking of a stream of numbered messages: gaps, duplicates, reordering.
#[derive(Debug, Default, Clone)]
pub struct SequenceCheck {
    /// The number expected next.
    next: u64,
    pub received: u64,
    /// Messages missing when a later one arrived (a later arrival of one is out of order).
    pub gaps: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Numbers missed and not yet seen (a bounded record of the latest gaps).
    missing: VecDeque<(u64, u64)>,
}

impl SequenceCheck {
    /// Accounts message number `n`.
    #[inline]
    pub fn see(&mut self, n: u64) {
        self.received += 1;
        if n == self.next {
            self.next += 1;
            return;
        }
        if n > self.next {
            self.gaps += n - self.next;
            self.missing.push_back((self.next, n));
            if self.missing.len() > 1024 {
                self.missing.pop_front();
            }
            self.next = n + 1;
            return;
        }
        // An old number: a late arrival fills a recorded gap; anything else is a duplicate.
        if let Some(k) = self.missing.iter().position(|&(a, b)| (a..b).contains(&n)) {
            let (a, b) = self.missing[k];
            self.out_of_order += 1;
            self.gaps -= 1;
            self.missing.remove(k);
            if a < n {
                self.missing.insert(k, (a, n));
            }
            if n + 1 < b {
                self.missing.insert(k + usize::from(a < n), (n + 1, b));
            }
        } else {
            self.duplicates += 1;
        }
    }
}

/// Runs `on_message` for every message until the publisher ends the session.
fn subscribe_loop(
    sub: &mut Subscriber,
    connect_timeout: Duration,
    mut on_message: impl FnMut(&[u8]),
) -> Result<(), BenchError> {
    let start = Instant::now();
    while !sub.is_connected() {
        sub.poll(&mut |m| on_message(m.payload), 1);
        if start.elapsed() > connect_timeout {
            return Err(BenchError::Child(format!(
                "no publisher within {} s",
                connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    loop {
        let n = sub.poll(&mut |m| on_message(m.payload), 256);
        // Losses show in the sequence check (the numbers in the messages); the transport's
        // events are drained so they do not pile up.
        while sub.next_event().is_some() {}
        if n == 0 && !sub.is_connected() {
            return Ok(());
        }
        sub.idle(n);
    }
}

/// One message of a ping run's load stream, on the subscriber: checks its number and size,
/// reflects it if it is a ping.
fn on_load_message(
    payload: &[u8],
    size: usize,
    r: &mut SubReport,
    check: &mut SequenceCheck,
    reflect: &mut Publisher,
) -> Result<(), OfferError> {
    let Some(head) = payload.get(..8) else {
        r.corrupt += 1;
        return Ok(());
    };
    let word = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    check.see(word & NUMBER);
    if payload.len() != size {
        r.corrupt += 1;
    }
    if word & PING != 0 {
        crate::pingpong::offer_spinning(reflect, payload)?;
        r.reflected += 1;
    }
    Ok(())
}

/// The load run's subscriber, as a helper: discards the load, reflects the pings (and counts
/// its loop's stalls with the measuring side's `clock`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoadReflector {
    pub cfg: LoadConfig,
    pub clock: Clock,
}

impl Role for LoadReflector {
    const TAG: &'static str = "load_reflector";
    const WHAT: &'static str = "load reflector";
}

/// The subscriber process of a ping run: discards the load, reflects pings, and counts its
/// loop's stalls once measured messages come.
pub fn reflect(cfg: &LoadConfig, clock: &Clock) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = crate::pingpong::context()?;
    let load_uri = cfg.uri.clone().unwrap_or_else(|| uris(cfg).0);
    let mut reflect = ctx.publisher("bench.reflect", &uris(cfg).1)?;
    let mut sub = ctx.subscriber("bench.load", &load_uri, cfg.idle)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready_with(if cfg.transport == Scheme::Ipc {
        ""
    } else {
        reflect.uri()
    });
    // Load messages and pings that arrived while this side still waited for its own
    // subscriber are handled first, in order.
    let early =
        crate::pingpong::wait_connected(&mut reflect, &mut sub, cfg.connect_timeout, "publisher")?;
    let mut r = SubReport::default();
    let mut check = SequenceCheck::default();
    let size = cfg.size;
    let measuring = Cell::new(false);
    let mut stalls = LoopStalls::new(clock);
    crate::pingpong::serve(
        &mut reflect,
        &mut sub,
        &early,
        256,
        |reflect, payload| {
            if !measuring.get() && payload.get(7).is_some_and(|b| b & 0x40 != 0) {
                // MEASURED (bit 62 of word 0): the measured interval began.
                measuring.set(true);
            }
            on_load_message(payload, size, &mut r, &mut check, reflect)
        },
        || stalls.at(clock.now(), measuring.get()),
    )
    .map_err(|e| BenchError::Child(format!("reflecting a ping failed: {e}")))?;
    r.received = check.received;
    r.lost = check.gaps;
    r.duplicates = check.duplicates;
    r.out_of_order = check.out_of_order;
    r.cpu_s = crate::cpu_seconds_self();
    r.stalls = stalls.finish(cfg.cpus.b);
    say_result(&r);
    Ok(())
}

/// The embedded-timestamp publisher, as a helper: paces the stream and writes the send time,
/// read with the measuring side's `clock`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EmbeddedPublisher {
    pub cfg: LoadConfig,
    pub clock: Clock,
}

impl Role for EmbeddedPublisher {
    const TAG: &'static str = "embedded_publisher";
    const WHAT: &'static str = "embedded-timestamp publisher";
}

/// The publisher process of an embedded-timestamp run: paces the stream and writes each
/// message's send time (clock ticks) into it.
pub fn publish_embedded(cfg: &LoadConfig, clock: &Clock) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = crate::pingpong::context()?;
    let load_uri = cfg.uri.clone().unwrap_or_else(|| uris(cfg).0);
    let mut publ = ctx.publisher("bench.load", &load_uri)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready_with(if cfg.transport == Scheme::Ipc {
        ""
    } else {
        publ.uri()
    });
    let start = Instant::now();
    while publ.subscriber_count() == 0 {
        publ.do_work();
        if start.elapsed() > cfg.connect_timeout {
            return Err(BenchError::Child(format!(
                "no subscriber within {} s",
                cfg.connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(20) {
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = clock.now();
    let stats = paced_publish(
        &mut publ,
        clock,
        t0,
        cfg,
        None,
        |buf, word| {
            buf[..8].copy_from_slice(&word.to_le_bytes());
            buf[8..16].copy_from_slice(&clock.now().to_le_bytes());
        },
        |_, _, _| {},
        |publ: &mut Publisher| {
            publ.do_work();
        },
    )?;
    publ.close();
    say_result(&PubReport {
        stats,
        cpu_s: crate::cpu_seconds_self(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{
        untouched, CpuJitter, Line, PingBook, PingChannel, SequenceCheck, INLINE, PINGS_REFLECTED,
        PINGS_SENT, RING,
    };
    use crate::clock::Clock;

    /// A ping any of whose round trip a stall of either loop overlapped is left out of the
    /// unstalled latency and counted; the others are kept; without both loops' stalls, or all
    /// the pings, there is nothing to say.
    #[test]
    fn pings_a_stall_overlapped_are_counted_apart_from_the_rest() {
        // CLOCK_MONOTONIC_RAW's ticks are nanoseconds.
        let clock = Clock::from_arg("raw").unwrap();
        let mut book = PingBook::new(0);
        // Pings 1..=5, each sent at n * 1_000_000 and reflected 2 us later.
        for n in 1..=5u64 {
            book.sent(n, n * 1_000_000, n * 1_000_000);
        }
        for n in 1..=5u64 {
            book.reflected(n, n * 1_000_000 + 2_000, &clock);
        }
        let side = |spans: Vec<(u64, u64)>| CpuJitter {
            spans_ticks: spans,
            ..CpuJitter::default()
        };
        // The publisher stalled across ping 2's round trip, the reflector inside ping 4's.
        let publisher = side(vec![(1_500_000, 2_000_500)]);
        let reflector = side(vec![(4_000_100, 4_000_900), (4_500_000, 4_600_000)]);
        let u = untouched(&book, Some(&publisher), Some(&reflector)).unwrap();
        assert_eq!(u.touched, 2);
        let l = u.latency.summary();
        assert_eq!(l.samples, 3);
        assert_eq!(l.max_ns, 1_000.0);
        assert!(untouched(&book, Some(&publisher), None).is_none());
        // Nor when the run measured more pings than it keeps.
        book.samples_full = true;
        assert!(untouched(&book, Some(&publisher), Some(&reflector)).is_none());
    }

    fn page() -> Line {
        Line::open(&crate::run_name("chan"), true).unwrap()
    }

    /// A reader that keeps up reads each number from the count's line; one the writer has
    /// lapped on that line, from the ring: every number comes back, in both channels, at any
    /// distance behind the writer short of a whole ring.
    #[test]
    fn a_ping_channel_gives_back_every_number_from_its_line_or_its_ring() {
        let line = page();
        for chan in [PINGS_SENT, PINGS_REFLECTED] {
            let number = |n: u64| (n * 7919) ^ (1 << 40);
            for n in 0..3 * RING {
                chan.push(&line, n, number(n));
                assert_eq!(chan.count(&line), n + 1);
                for behind in [0, 1, INLINE - 1, INLINE, INLINE + 1, RING - 1] {
                    if behind <= n {
                        assert_eq!(chan.get(&line, n - behind), number(n - behind));
                    }
                }
            }
        }
    }

    /// The two channels and the load word share a page without overwriting each other.
    #[test]
    fn the_load_word_and_both_channels_do_not_overlap() {
        let line = page();
        let load = line.word_at(super::LOAD_WORD);
        let (a, b): (PingChannel, PingChannel) = (PINGS_SENT, PINGS_REFLECTED);
        for n in 0..2 * RING {
            a.push(&line, n, n + 1);
            b.push(&line, n, u64::MAX - n);
            load.store(0xdead, std::sync::atomic::Ordering::Relaxed);
        }
        for n in RING..2 * RING {
            assert_eq!(a.get(&line, n), n + 1);
            assert_eq!(b.get(&line, n), u64::MAX - n);
        }
    }

    #[test]
    fn sequence_check_counts_gaps_late_arrivals_and_duplicates() {
        let mut c = SequenceCheck::default();
        for n in [0, 1, 2, 5, 6, 3, 6, 4, 9] {
            c.see(n);
        }
        // 3 and 4 were missing, then arrived late; 7 and 8 never came; 6 came twice.
        assert_eq!(c.received, 9);
        assert_eq!(c.out_of_order, 2);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.gaps, 2);
    }

    #[test]
    fn an_in_order_stream_counts_nothing_but_receipts() {
        let mut c = SequenceCheck::default();
        (0..10_000).for_each(|n| c.see(n));
        assert_eq!(
            (c.received, c.gaps, c.duplicates, c.out_of_order),
            (10_000, 0, 0, 0)
        );
    }
}
