//! The machine's jitter floor, sysjitter's method: one thread per CPU, pinned, spins reading
//! the clock; every gap between two consecutive reads longer than a threshold is time the
//! machine took from the thread (an interrupt, the hypervisor, a preemption). Reported per CPU:
//! how many gaps per second passed 1 us, 10 us, 100 us and 1 ms, the largest, and the fraction
//! of the time lost in gaps of 1 us or more. No messaging runs meanwhile: this is what any
//! spinning thread on these CPUs loses, the floor under every tail the other scenarios report.

use crate::clock::Clock;
use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Gap thresholds, in nanoseconds: 1 us, 10 us, 100 us, 1 ms.
pub const THRESHOLDS_NS: [f64; 4] = [1_000.0, 10_000.0, 100_000.0, 1_000_000.0];

/// A jitter run: the CPUs to spin on (one thread each, all at once) and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct JitterConfig {
    pub cpus: Vec<usize>,
    pub seconds: f64,
}

impl JitterConfig {
    /// Checks the CPUs (allowed, no repeats) and the duration.
    pub fn validate(&self) -> Result<(), BenchError> {
        let allowed = peregrine_agent::allowed_cpus();
        if self.cpus.is_empty() {
            return Err(BenchError::Config(format!(
                "--cpus is empty: give CPUs from the allowed set {allowed:?}, for example --cpus 0,1"
            )));
        }
        for (i, c) in self.cpus.iter().enumerate() {
            if !allowed.contains(c) {
                return Err(BenchError::Config(format!(
                    "--cpus: CPU {c} is not one this process may use; the allowed set is {allowed:?}"
                )));
            }
            if self.cpus[..i].contains(c) {
                return Err(BenchError::Config(format!(
                    "--cpus: CPU {c} is given twice; give each CPU once"
                )));
            }
        }
        if !(0.1..=3600.0).contains(&self.seconds) {
            return Err(BenchError::Config(format!(
                "--seconds {} is not accepted: give 0.1 to 3600 seconds",
                self.seconds
            )));
        }
        Ok(())
    }
}

/// What one CPU's spinning thread lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuJitter {
    pub cpu: usize,
    /// How long the thread spun.
    pub seconds: f64,
    /// Clock reads.
    pub reads: u64,
    /// Gaps of at least each of [`THRESHOLDS_NS`].
    pub gaps_over: [u64; 4],
    pub largest_gap_ns: f64,
    /// The sum of the gaps of 1 us or more.
    pub lost_ns: f64,
    /// Where the gaps of at least [`SPAN_MIN_NS`] fell: each as the clock readings (ticks of
    /// the benchmark clock, which every process of a run shares) before and after it, in order;
    /// at most [`MAX_SPANS`]. Kept by every loop that counts with [`Stalls`]; a load run checks
    /// each latency sample against its two loops' spans (`bench jitter` reports the counts only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans_ticks: Vec<(u64, u64)>,
    /// More gaps of [`SPAN_MIN_NS`] came than [`MAX_SPANS`]: the spans are incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spans_overflowed: bool,
}

impl CpuJitter {
    /// Gaps per second of at least `THRESHOLDS_NS[i]`.
    pub fn per_s(&self, i: usize) -> f64 {
        if self.seconds > 0.0 {
            self.gaps_over[i] as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The fraction of the time lost in gaps of 1 us or more.
    pub fn lost_fraction(&self) -> f64 {
        if self.seconds > 0.0 {
            self.lost_ns / (self.seconds * 1e9)
        } else {
            0.0
        }
    }
}

/// Counts the gaps between consecutive clock reads (sans-I/O: fed gaps in nanoseconds).
#[derive(Debug, Clone, Default)]
pub struct GapCounter {
    gaps_over: [u64; 4],
    largest_ns: f64,
    lost_ns: f64,
}

impl GapCounter {
    /// One gap between two reads.
    #[inline]
    pub fn gap(&mut self, ns: f64) {
        if ns < THRESHOLDS_NS[0] {
            return;
        }
        self.lost_ns += ns;
        self.largest_ns = self.largest_ns.max(ns);
        for (count, t) in self.gaps_over.iter_mut().zip(THRESHOLDS_NS) {
            if ns >= t {
                *count += 1;
            }
        }
    }

    pub fn finish(self, cpu: usize, seconds: f64, reads: u64) -> CpuJitter {
        CpuJitter {
            cpu,
            seconds,
            reads,
            gaps_over: self.gaps_over,
            largest_gap_ns: self.largest_ns,
            lost_ns: self.lost_ns,
            spans_ticks: Vec::new(),
            spans_overflowed: false,
        }
    }
}

/// Gaps of at least this are *stalls*: the machine's, not the loop's work. A loop iteration of
/// the benchmarks does at most a batch of work (microseconds), so a gap of 100 us or more is
/// time the machine (an interrupt, the hypervisor, the host) took from the loop.
pub const SPAN_MIN_NS: f64 = THRESHOLDS_NS[2];
/// Stalls whose place a loop keeps: at the test guest's 5 to 50 a second, hours.
pub const MAX_SPANS: usize = 100_000;

/// The stalls a benchmark's own spinning loop sees over its measured interval: the gaps
/// between its consecutive clock reads, counted as [`GapCounter`] does, and where each stall
/// ([`SPAN_MIN_NS`] or more) fell: the jitter over the same interval as the latencies, next to
/// which a tail is read, and the spans against which each sample is checked
/// ([`touched`](StallSpans::touched)).
#[derive(Debug, Clone)]
pub struct Stalls {
    counter: GapCounter,
    ns_per_tick: f64,
    span_min_ticks: u64,
    spans: Vec<(u64, u64)>,
    overflowed: bool,
    first: u64,
    prev: u64,
    reads: u64,
}

impl Stalls {
    /// Starts counting at clock reading `now_ticks`.
    pub fn start(clock: &Clock, now_ticks: u64) -> Stalls {
        Stalls {
            counter: GapCounter::default(),
            ns_per_tick: clock.ns_per_tick,
            span_min_ticks: (SPAN_MIN_NS / clock.ns_per_tick).ceil() as u64,
            spans: Vec::new(),
            overflowed: false,
            first: now_ticks,
            prev: now_ticks,
            reads: 1,
        }
    }

    /// One more clock reading of the loop (a clock that steps back, as it should not, counts
    /// as no gap).
    #[inline]
    pub fn at(&mut self, now_ticks: u64) {
        let gap = now_ticks.saturating_sub(self.prev);
        self.counter.gap(gap as f64 * self.ns_per_tick);
        if gap >= self.span_min_ticks {
            self.stalled(now_ticks);
        }
        self.prev = now_ticks;
        self.reads += 1;
    }

    #[cold]
    fn stalled(&mut self, now_ticks: u64) {
        if self.spans.len() < MAX_SPANS {
            self.spans.push((self.prev, now_ticks));
        } else {
            self.overflowed = true;
        }
    }

    /// What the loop on `cpu` lost, from the first reading to the last, and where it stalled.
    pub fn finish(self, cpu: usize) -> CpuJitter {
        let seconds = self.prev.saturating_sub(self.first) as f64 * self.ns_per_tick / 1e9;
        CpuJitter {
            spans_ticks: self.spans,
            spans_overflowed: self.overflowed,
            ..self.counter.finish(cpu, seconds, self.reads)
        }
    }
}

/// A benchmark loop's [`Stalls`] over its measured interval, the gap that led into that
/// interval included: a stall that held the loop as the interval began (the reflector that
/// sees the first measured message only when the machine gives it its CPU back) is one of the
/// interval's stalls, not a gap nobody counted.
#[derive(Debug, Clone)]
pub struct LoopStalls {
    clock: Clock,
    /// The latest reading before the measured interval.
    before: Option<u64>,
    stalls: Option<Stalls>,
}

impl LoopStalls {
    pub fn new(clock: &Clock) -> LoopStalls {
        LoopStalls {
            clock: *clock,
            before: None,
            stalls: None,
        }
    }

    /// One clock reading of the loop; `measuring`: whether the measured interval has begun.
    #[inline]
    pub fn at(&mut self, now_ticks: u64, measuring: bool) {
        match &mut self.stalls {
            Some(s) => s.at(now_ticks),
            None if measuring => self.begin(now_ticks),
            None => self.before = Some(now_ticks),
        }
    }

    #[cold]
    fn begin(&mut self, now_ticks: u64) {
        let mut s = Stalls::start(&self.clock, self.before.unwrap_or(now_ticks));
        s.at(now_ticks);
        self.stalls = Some(s);
    }

    /// What the loop on `cpu` lost over its measured interval (None if it never began).
    pub fn finish(self, cpu: usize) -> Option<CpuJitter> {
        self.stalls.map(|s| s.finish(cpu))
    }
}

/// The stalls of several loops of one run (the two sides of a load run), merged: which
/// intervals of the shared clock any of them overlapped.
#[derive(Debug, Clone, Default)]
pub struct StallSpans {
    /// Spans sorted by start, and the latest end among each one and those before it.
    starts: Vec<u64>,
    max_end: Vec<u64>,
}

impl StallSpans {
    /// The spans of `loops`; None when a loop's spans overflowed (the check would miss some).
    pub fn of<'a>(loops: impl IntoIterator<Item = &'a CpuJitter>) -> Option<StallSpans> {
        let mut spans = Vec::new();
        for j in loops {
            if j.spans_overflowed {
                return None;
            }
            spans.extend_from_slice(&j.spans_ticks);
        }
        spans.sort_unstable();
        let mut end = 0;
        let max_end = spans
            .iter()
            .map(|&(_, e)| {
                end = end.max(e);
                end
            })
            .collect();
        Some(StallSpans {
            starts: spans.iter().map(|&(s, _)| s).collect(),
            max_end,
        })
    }

    /// Whether a stall overlapped the interval `[from, to]` (clock ticks): some span started
    /// before `to` and ended after `from`.
    pub fn touched(&self, from: u64, to: u64) -> bool {
        let before = self.starts.partition_point(|&s| s < to);
        before > 0 && self.max_end[before - 1] > from
    }
}

/// Spins on every CPU of `cfg` at once for its seconds and returns what each lost.
pub fn measure(cfg: &JitterConfig, clock: &Clock) -> Result<Vec<CpuJitter>, BenchError> {
    cfg.validate()?;
    let clock = *clock;
    let start = std::sync::Arc::new(std::sync::Barrier::new(cfg.cpus.len()));
    let threads: Vec<_> = cfg
        .cpus
        .iter()
        .map(|&cpu| {
            let start = std::sync::Arc::clone(&start);
            let seconds = cfg.seconds;
            std::thread::spawn(move || -> Result<CpuJitter, String> {
                peregrine_agent::pin_to_cpu(cpu)
                    .map_err(|e| format!("pinning to CPU {cpu}: {e}"))?;
                start.wait();
                Ok(spin(&clock, cpu, Duration::from_secs_f64(seconds)))
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| BenchError::Child("a jitter thread panicked".into()))?
                .map_err(BenchError::Child)
        })
        .collect()
}

/// The spinning loop of one CPU.
fn spin(clock: &Clock, cpu: usize, length: Duration) -> CpuJitter {
    // Rounded up, so the loop never ends short of the length asked.
    let length_ticks = (length.as_nanos() as f64 / clock.ns_per_tick).ceil() as u64;
    let first = clock.now();
    let end = first + length_ticks;
    let mut stalls = Stalls::start(clock, first);
    loop {
        let now = clock.now();
        stalls.at(now);
        if now >= end {
            break;
        }
    }
    stalls.finish(cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_counted_by_threshold_and_summed_from_one_microsecond() {
        let mut g = GapCounter::default();
        for ns in [20.0, 999.0, 1_000.0, 15_000.0, 250_000.0, 2_500_000.0, 40.0] {
            g.gap(ns);
        }
        let j = g.finish(1, 2.0, 7);
        assert_eq!(j.gaps_over, [4, 3, 2, 1]);
        assert_eq!(j.largest_gap_ns, 2_500_000.0);
        assert_eq!(j.lost_ns, 1_000.0 + 15_000.0 + 250_000.0 + 2_500_000.0);
        assert_eq!(j.per_s(0), 2.0);
        assert!((j.lost_fraction() - 2_766_000.0 / 2e9).abs() < 1e-12);
    }

    #[test]
    fn a_loops_stalls_are_counted_from_its_clock_readings_on_a_virtual_clock() {
        // CLOCK_MONOTONIC_RAW's "ticks" are nanoseconds: readings given by hand.
        let clock = Clock::from_arg("raw").unwrap();
        let mut st = Stalls::start(&clock, 1_000);
        // Readings 50 ns apart, then a 150 us stall, a 2 ms stall, a 20 us one.
        let mut t = 1_000;
        for gap in [50, 50, 150_000, 50, 2_000_000, 20_000, 50] {
            t += gap;
            st.at(t);
        }
        let j = st.finish(3);
        assert_eq!(j.cpu, 3);
        assert_eq!(j.reads, 8);
        assert_eq!(j.gaps_over, [3, 3, 2, 1]);
        assert_eq!(j.largest_gap_ns, 2_000_000.0);
        assert_eq!(j.seconds, (t - 1_000) as f64 / 1e9);
        assert_eq!(j.lost_ns, 2_170_000.0);
        // Where the two stalls of 100 us or more fell, between the readings around them.
        assert_eq!(
            j.spans_ticks,
            [(1_100, 151_100), (151_150, 2_151_150)],
            "{j:?}"
        );
        assert!(!j.spans_overflowed);
    }

    /// A stall that spans the start of the measured interval counts: the loop's spans start
    /// at its last reading before the interval, and nothing before that counts.
    #[test]
    fn the_gap_into_the_measured_interval_is_one_of_its_stalls() {
        let clock = Clock::from_arg("raw").unwrap();
        let mut l = LoopStalls::new(&clock);
        // Warm-up readings, including a 5 ms gap that is not counted.
        for t in [1_000, 2_000, 5_002_000, 5_003_000] {
            l.at(t, false);
        }
        // Held 20 ms; the first reading after it is already in the measured interval.
        l.at(25_003_000, true);
        l.at(25_004_000, true);
        let j = l.finish(1).unwrap();
        assert_eq!(j.spans_ticks, [(5_003_000, 25_003_000)]);
        assert_eq!(j.gaps_over[3], 1);
        assert_eq!(j.reads, 3);
        assert!(LoopStalls::new(&clock).finish(0).is_none());
    }

    /// Intervals are touched by a stall of either loop that overlaps them, and only then.
    #[test]
    fn an_interval_is_touched_only_by_a_stall_that_overlaps_it() {
        let side = |spans: Vec<(u64, u64)>| CpuJitter {
            spans_ticks: spans,
            ..CpuJitter::default()
        };
        let a = side(vec![(100, 200), (1_000, 5_000)]);
        let b = side(vec![(300, 400), (1_500, 1_600)]);
        let s = StallSpans::of([&a, &b]).unwrap();
        for (from, to, touched) in [
            (0, 50, false),
            (0, 101, true),
            (150, 160, true),
            (200, 300, false),
            (250, 350, true),
            (401, 999, false),
            (2_000, 3_000, true),
            (4_999, 6_000, true),
            (5_000, 6_000, false),
            (10, 10_000, true),
        ] {
            assert_eq!(s.touched(from, to), touched, "[{from}, {to}]");
        }
        assert!(!StallSpans::of([&side(vec![])])
            .unwrap()
            .touched(0, u64::MAX));
        let full = CpuJitter {
            spans_overflowed: true,
            ..a.clone()
        };
        assert!(StallSpans::of([&full, &b]).is_none());
    }

    #[test]
    fn a_short_spin_reads_the_clock_for_the_time_asked() {
        let clock = Clock::calibrate(Duration::from_millis(20));
        let cpu = peregrine_agent::allowed_cpus()[0];
        let r = measure(
            &JitterConfig {
                cpus: vec![cpu],
                seconds: 0.1,
            },
            &clock,
        )
        .unwrap();
        assert_eq!(r.len(), 1);
        // Behaviour, not speed: it spun for the time asked and read the clock many times.
        // (ticks are turned back into seconds in floating point: a nanosecond of rounding)
        assert!(r[0].seconds >= 0.1 - 1e-9 && r[0].seconds < 10.0, "{r:?}");
        assert!(r[0].reads > 1000, "{r:?}");
        assert!(r[0].lost_fraction() <= 1.0, "{r:?}");
    }

    #[test]
    fn bad_cpu_lists_are_refused_naming_the_cpu() {
        let e = JitterConfig {
            cpus: vec![0, 0],
            seconds: 1.0,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("CPU 0 is given twice"), "{e}");
        let e = JitterConfig {
            cpus: vec![100_000],
            seconds: 1.0,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("CPU 100000"), "{e}");
        let e = JitterConfig {
            cpus: vec![0],
            seconds: 0.0,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--seconds 0"), "{e}");
    }
}
