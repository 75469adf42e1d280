//! The benchmark clock: the TSC, calibrated against `CLOCK_MONOTONIC_RAW`.
//!
//! Reading the TSC costs ~7 ns against ~17 ns for `clock_gettime` on our 2-vCPU KVM guests,
//! which matters when the thing measured takes 150 ns. The calibration is measured, never
//! assumed: two raw-clock/TSC pairs some tens of milliseconds apart give the tick length. On a CPU
//! without an invariant TSC (or not x86_64) the clock falls back to `clock_gettime`.
#![allow(unsafe_code)]

use std::time::Duration;

/// Which hardware counter the clock reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// `rdtscp`, `ns_per_tick` from calibration.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC_RAW)`, 1 tick = 1 ns.
    MonotonicRaw,
}

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub source: Source,
    pub ns_per_tick: f64,
}

impl serde::Serialize for Clock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_arg())
    }
}

impl<'de> serde::Deserialize<'de> for Clock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Clock, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        Clock::from_arg(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "'{text}' is not a clock: tsc:NS_PER_TICK (on x86-64) or raw"
            ))
        })
    }
}

/// `CLOCK_MONOTONIC_RAW` in nanoseconds.
pub fn monotonic_raw_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicRaw);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU has an invariant TSC (`constant_tsc`, `nonstop_tsc`) and the `rdtscp` instruction
/// (some hypervisors hide it).
fn invariant_tsc() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| {
            c.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
                ["constant_tsc", "nonstop_tsc", "rdtscp"]
                    .iter()
                    .all(|want| l.split_whitespace().any(|f| f == *want))
            })
        })
        .unwrap_or(false)
}

impl Clock {
    /// Calibrates the TSC for `over` (50 ms is plenty: the error is ~1 us / 50 ms = 20 ppm).
    pub fn calibrate(over: Duration) -> Clock {
        #[cfg(target_arch = "x86_64")]
        if invariant_tsc() {
            let (t0, n0) = Self::pair();
            std::thread::sleep(over);
            let (t1, n1) = Self::pair();
            if t1 > t0 && n1 > n0 {
                return Clock {
                    source: Source::Tsc,
                    ns_per_tick: (n1 - n0) as f64 / (t1 - t0) as f64,
                };
            }
        }
        Clock {
            source: Source::MonotonicRaw,
            ns_per_tick: 1.0,
        }
    }

    /// A (ticks, ns) pair read as close together as possible (the tightest of several tries).
    #[cfg(target_arch = "x86_64")]
    fn pair() -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..32 {
            let a = tsc();
            let n = monotonic_raw_ns();
            let b = tsc();
            if b - a < best.0 {
                best = (b - a, a + (b - a) / 2, n);
            }
        }
        (best.1, best.2)
    }

    /// The current tick count.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.source {
            #[cfg(target_arch = "x86_64")]
            Source::Tsc => tsc(),
            _ => monotonic_raw_ns(),
        }
    }

    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick
    }

    /// The clock as text (`tsc:NS_PER_TICK` or `raw`), so both sides of a one-way measurement
    /// read the same clock with the same calibration.
    pub fn to_arg(&self) -> String {
        match self.source {
            Source::Tsc => format!("tsc:{}", self.ns_per_tick),
            Source::MonotonicRaw => "raw".to_string(),
        }
    }

    /// The clock [`to_arg`](Self::to_arg) described (`None` for anything else, or a TSC
    /// clock on a machine without one).
    pub fn from_arg(arg: &str) -> Option<Clock> {
        if arg == "raw" {
            return Some(Clock {
                source: Source::MonotonicRaw,
                ns_per_tick: 1.0,
            });
        }
        let ns_per_tick: f64 = arg.strip_prefix("tsc:")?.parse().ok()?;
        (cfg!(target_arch = "x86_64")
            && ns_per_tick.is_finite()
            && ns_per_tick > 0.0
            && invariant_tsc())
        .then_some(Clock {
            source: Source::Tsc,
            ns_per_tick,
        })
    }

    /// For reports: "TSC (2.600 GHz, calibrated)" or "CLOCK_MONOTONIC_RAW".
    pub fn describe(&self) -> String {
        match self.source {
            Source::Tsc => format!(
                "TSC ({:.3} GHz, calibrated against CLOCK_MONOTONIC_RAW)",
                1.0 / self.ns_per_tick
            ),
            Source::MonotonicRaw => "CLOCK_MONOTONIC_RAW".to_string(),
        }
    }
}

/// `rdtscp`: waits for earlier instructions to finish before reading the counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> u64 {
    let mut aux = 0u32;
    // SAFETY: the intrinsic's only memory effect is writing the processor id to `aux`, a live
    // local. (A CPU without RDTSCP would trap, not misbehave; `calibrate` and `from_arg` choose
    // this source only when /proc/cpuinfo lists it.)
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_passes_to_a_helper_as_an_argument() {
        let c = Clock::calibrate(Duration::from_millis(5));
        let back = Clock::from_arg(&c.to_arg()).unwrap();
        assert_eq!((back.source, back.ns_per_tick), (c.source, c.ns_per_tick));
        assert!(Clock::from_arg("tsc:-1").is_none());
        assert!(Clock::from_arg("sundial").is_none());
    }

    #[test]
    fn calibrated_clock_agrees_with_the_raw_clock_over_an_interval() {
        let c = Clock::calibrate(Duration::from_millis(20));
        let (t0, n0) = (c.now(), monotonic_raw_ns());
        std::thread::sleep(Duration::from_millis(30));
        let (t1, n1) = (c.now(), monotonic_raw_ns());
        let by_clock = c.ticks_to_ns(t1 - t0);
        let by_raw = (n1 - n0) as f64;
        // Calibration error is parts per million; the reads themselves are microseconds apart.
        assert!(
            (by_clock - by_raw).abs() < by_raw * 0.01 + 20_000.0,
            "{by_clock} vs {by_raw}"
        );
    }
}
