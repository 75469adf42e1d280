//! Latency statistics: an HdrHistogram for percentiles, exact running sums for mean and
//! standard deviation (so they are not rounded to histogram buckets).

use hdrhistogram::Histogram;

/// The nearest-rank `q` quantile of sorted samples (0 when there are none): the smallest
/// sample with at least a fraction `q` of the samples at or below it.
pub fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Collects latency samples in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
    count: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// A recorder for 1 ns to 1 hour with 3 significant digits.
    pub fn new() -> Self {
        LatencyRecorder {
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }

    /// Records one sample (Welford's update for mean and variance).
    #[inline]
    pub fn record(&mut self, ns: f64) {
        let v = ns.max(0.0);
        self.count += 1;
        let d = v - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (v - self.mean);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let _ = self
            .hist
            .record((v.round() as u64).clamp(1, self.hist.high()));
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The summary, when there is a sample to summarise.
    pub fn nonempty_summary(&self) -> Option<Summary> {
        (self.count > 0).then(|| self.summary())
    }

    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let q = |p: f64| self.hist.value_at_quantile(p) as f64;
        Summary {
            samples: self.count,
            min_ns: self.min,
            mean_ns: self.mean,
            p1_ns: q(0.01),
            p25_ns: q(0.25),
            median_ns: q(0.5),
            p75_ns: q(0.75),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            p9999_ns: q(0.9999),
            max_ns: self.max,
            stddev_ns: (self.m2 / self.count as f64).sqrt(),
        }
    }
}

/// The seeds' columns (and the quartiles and 1st percentile of a box plot), in nanoseconds:
/// the report's own latency record, so a summary goes into a results cell as it is.
pub use peregrine_report::model::Latency as Summary;

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference percentile: the smallest sample with at least `p` of all samples at or below.
    fn reference(sorted: &[f64], p: f64) -> f64 {
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn summary_matches_a_reference_computed_from_raw_samples() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut samples = Vec::new();
        let mut r = LatencyRecorder::new();
        for _ in 0..200_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // A long-tailed distribution: mostly 150-400 ns, some up to ~1 ms.
            let v = if rng % 1000 == 0 {
                1_000.0 + (rng % 1_000_000) as f64
            } else {
                150.0 + (rng % 250) as f64
            };
            samples.push(v);
            r.record(v);
        }
        let s = r.summary();
        samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let sd = (samples.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert_eq!(s.samples, 200_000);
        assert!((s.mean_ns - mean).abs() < 1e-6 * mean);
        assert!((s.stddev_ns - sd).abs() < 1e-6 * sd);
        assert_eq!(s.min_ns, samples[0]);
        assert_eq!(s.max_ns, *samples.last().unwrap());
        for (got, p) in [
            (s.p1_ns, 0.01),
            (s.p25_ns, 0.25),
            (s.median_ns, 0.5),
            (s.p75_ns, 0.75),
            (s.p90_ns, 0.9),
            (s.p99_ns, 0.99),
            (s.p999_ns, 0.999),
            (s.p9999_ns, 0.9999),
        ] {
            let want = reference(&samples, p);
            // 3 significant digits: within 0.1% (plus the 1 ns rounding of the recorded value).
            assert!(
                (got - want).abs() <= want * 0.001 + 1.0,
                "p{p}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn nearest_rank_picks_the_smallest_sample_covering_the_fraction() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(nearest_rank(&v, 0.5), 500);
        assert_eq!(nearest_rank(&v, 0.999), 999);
        assert_eq!(nearest_rank(&v, 0.9991), 1000);
        assert_eq!(nearest_rank(&v, 1.0), 1000);
        assert_eq!(nearest_rank(&v, 0.0), 1);
        assert_eq!(nearest_rank(&[], 0.5), 0);
    }

    #[test]
    fn an_empty_recorder_summarises_to_zeros() {
        assert_eq!(LatencyRecorder::new().summary(), Summary::default());
    }
}
