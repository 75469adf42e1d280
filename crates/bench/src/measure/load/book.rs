//! The ping book: each ping's scheduled and actual send times, matched with its reflection,
//! and the load run's result from it (latency from the send and from the schedule, pings that
//! no stall of the machine touched).

use super::publish::PacedStats;
use super::{LoadResult, SubReport, Untouched};
use crate::clock::Clock;
use crate::jitter::{CpuJitter, StallSpans};
use crate::stats::LatencyRecorder;
use std::collections::VecDeque;

/// The pings of a run in flight and their latencies: the sending side tells it each ping's
/// send time, the reading side each reflection.
pub(super) struct PingBook {
    /// Pings in flight, oldest first: (number, send ticks, scheduled ns since the start).
    pub(super) in_flight: VecDeque<(u64, u64, u64)>,
    pub(super) latency: LatencyRecorder,
    pub(super) from_schedule: LatencyRecorder,
    pub(super) unanswered: u64,
    pub(super) bad_echo: Option<String>,
    pub(super) first_measured: u64,
    pub(super) t0: u64,
    /// Every measured ping: (send, reflection's arrival) ticks and RTT / 2; at most
    /// [`MAX_PING_SAMPLES`].
    pub(super) samples: Vec<(u64, u64, f64)>,
    /// More pings were measured than [`MAX_PING_SAMPLES`]: `samples` is incomplete.
    pub(super) samples_full: bool,
}

/// Pings whose send and arrival a run keeps to check against the stalls (48 MiB): at the
/// default 5,000 pings a second, about 7 minutes. A longer run has no unstalled figures.
const MAX_PING_SAMPLES: usize = 1 << 21;

impl PingBook {
    pub(super) fn new(t0: u64) -> PingBook {
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
    pub(super) fn sent(&mut self, number: u64, sent_ticks: u64, sched_ns: u64) {
        if self.first_measured == u64::MAX {
            self.first_measured = number;
        }
        self.in_flight.push_back((number, sent_ticks, sched_ns));
    }

    /// Ping `number`'s reflection arrived at `now` (ticks).
    pub(super) fn reflected(&mut self, number: u64, now: u64, clock: &Clock) {
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

/// The pings of `book` that no stall of the two loops overlapped, and how many one did (None
/// when a loop's stalls or the pings were not all kept).
pub(super) fn untouched(
    book: &PingBook,
    a: Option<&CpuJitter>,
    b: Option<&CpuJitter>,
) -> Option<Untouched> {
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
pub(super) fn ping_result(
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
