//! The paced publisher shared by every load method: the pacer's schedule, pings picked among
//! the messages, the duty cycle serviced, and what it achieved.

use super::{LoadConfig, MEASURED, PING};
use crate::clock::Clock;
use crate::jitter::{CpuJitter, LoopStalls};
use crate::pacer::{Pacer, PingPicker, Step};
use crate::BenchError;
use peregrine::{OfferError, Publisher};

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
pub(super) trait Sink {
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
pub(super) fn paced_publish<S: Sink>(
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
