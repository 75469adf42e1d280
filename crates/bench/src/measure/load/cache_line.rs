//! The floor under load: the same pacer, rate, pings and CPUs as a load cell, each message a
//! store to one shared cache line and each ping answered on a second: what the machine allows
//! under that schedule.

use super::book::{ping_result, PingBook};
use super::publish::{paced_publish, Sink};
use super::{LoadConfig, LoadResult, SubReport, MEASURED, NUMBER, PING};
use crate::clock::Clock;
use crate::helper::protocol::{say_ready, say_result, Helper, Role};
use crate::jitter::LoopStalls;
use crate::measure::floor::{with_cpu, Line};
use crate::pacer::PingPicker;
use crate::BenchError;
use peregrine::OfferError;
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Words of the floor's page ([`crate::measure::floor::Line`]) the floor under load uses: two lines and
/// two rings. The load line (written by the paced side, spun on by the reflector) holds the
/// latest message's word 0 and a [`PingChannel`] of the pings sent; the reflect line (written
/// by the reflector, read by the paced side between batches) holds the channel of the pings
/// reflected. Each channel keeps its last [`INLINE`] numbers on its own line, so a reader that
/// keeps up takes one line per ping each way, as a ping over two one-way logs does (a floor
/// that cost more lines than a transport would not be a floor); every number also goes to a
/// ring of [`RING`] slots, so that no ping is lost while a reader is held up (a stall of the
/// machine): like a log, the floor keeps every ping and its tail. Lines written by different
/// sides are 128 bytes or more apart.
pub(super) const LOAD_WORD: usize = 16;
pub(super) const PINGS_SENT: PingChannel = PingChannel {
    count_word: 17,
    ring_word: 64,
};
pub(super) const PINGS_REFLECTED: PingChannel = PingChannel {
    count_word: 48,
    ring_word: 64 + RING as usize + 16,
};
/// Slots of each ring: at about 5,000 pings a second, 38 ms of pings.
pub(super) const RING: u64 = 192;
/// Numbers each channel keeps on its count's line, after the count.
pub(super) const INLINE: u64 = 6;

/// One direction of the floor under load's pings: a count, the last [`INLINE`] numbers on the
/// count's line, and every number in a ring of [`RING`] slots.
///
/// Invariants: number `n` (0-based) is stored in inline slot `n % INLINE` and ring slot
/// `n % RING`, both with release ordering, before the count becomes `n + 1` (release). Inline
/// slot `n % INLINE` is next overwritten by number `n + INLINE`, which is stored after the count
/// became `n + INLINE`: so a reader that loads the slot (acquire) and then the count, and finds
/// the count below `n + INLINE`, read number `n` itself.
#[derive(Clone, Copy)]
pub(super) struct PingChannel {
    pub(super) count_word: usize,
    pub(super) ring_word: usize,
}

impl PingChannel {
    /// The writer: stores number `n`.
    #[inline]
    pub(super) fn push(self, line: &Line, n: u64, number: u64) {
        line.word_at(self.ring_word + (n % RING) as usize)
            .store(number, Ordering::Release);
        line.word_at(self.count_word + 1 + (n % INLINE) as usize)
            .store(number, Ordering::Release);
        line.word_at(self.count_word)
            .store(n + 1, Ordering::Release);
    }

    /// How many numbers the writer has stored.
    #[inline]
    pub(super) fn count(self, line: &Line) -> u64 {
        line.word_at(self.count_word).load(Ordering::Acquire)
    }

    /// The reader: number `n`, which [`count`](Self::count) has shown stored. From the count's
    /// line while the writer is fewer than [`INLINE`] numbers ahead; from the ring otherwise
    /// (which holds it unless the writer is a whole ring ahead: the caller's check).
    #[inline]
    pub(super) fn get(self, line: &Line, n: u64) -> u64 {
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
    pub(super) line: &'a Line,
    /// The load line's word, looked up once.
    pub(super) load: &'a AtomicU64,
    pub(super) pings: u64,
}

impl<'a> LineSink<'a> {
    pub(super) fn new(line: &'a Line) -> LineSink<'a> {
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
pub(super) fn run_cache_line(
    cfg: &LoadConfig,
    exe: &Path,
    clock: &Clock,
) -> Result<LoadResult, BenchError> {
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
        .store(crate::measure::floor::STOP, Ordering::Release);
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
        if word == crate::measure::floor::STOP {
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
