//! The size x rate sweep's defaults and labels, and the maximum-throughput search (the runs
//! themselves are [`crate::scenario::paced`]'s).
//!
//! The sweep runs, per transport and size, the rates in increasing order and stops a size at
//! its first rate not sustained (the seeds' "CPU-bound after N msgs/sec"). The search for the
//! maximum sustainable rate doubles a rate while it holds, then halves the interval between
//! the highest rate that held and the lowest that did not ([`search_max`]).

/// The default sizes and rates (docs/benchmarks.md, the sweep).
pub const DEFAULT_SIZES: [usize; 7] = [32, 128, 256, 512, 1024, 1472, 2048];
pub const DEFAULT_RATES: [f64; 7] = [
    10_000.0,
    100_000.0,
    250_000.0,
    500_000.0,
    1_000_000.0,
    1_500_000.0,
    2_000_000.0,
];

/// `10K`, `1.5M`, `730K`, `950`: a rate as the seeds label it.
pub fn rate_label(r: f64) -> String {
    let trim = |v: f64| {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if r >= 1e6 {
        format!("{}M", trim(r / 1e6))
    } else if r >= 1e3 {
        format!("{}K", trim(r / 1e3))
    } else {
        trim(r)
    }
}

/// Searches the highest rate for which `holds(rate)` is true: up from `start` by doubling
/// while it holds (at most to `cap`), then down by halving the interval between the highest
/// rate that held and the lowest that did not, until they are within `tolerance` (0.05: 5%)
/// of each other. Returns the highest rate that held, or `None` if not even the lowest tried
/// (`start` halved down to `floor`) did.
pub fn search_max<E>(
    start: f64,
    floor: f64,
    cap: f64,
    tolerance: f64,
    mut holds: impl FnMut(f64) -> Result<bool, E>,
) -> Result<Option<f64>, E> {
    let mut ok: Option<f64> = None;
    let mut fail: Option<f64> = None;
    let mut rate = start.clamp(floor, cap);
    // Up (or down, if the start rate fails) until the boundary is bracketed.
    loop {
        if holds(rate)? {
            ok = Some(rate);
            if fail.is_some() || rate >= cap {
                break;
            }
            rate = (rate * 2.0).min(cap);
        } else {
            fail = Some(rate);
            if ok.is_some() {
                break;
            }
            if rate <= floor {
                return Ok(None);
            }
            rate = (rate / 2.0).max(floor);
        }
    }
    // Bisect.
    while let (Some(lo), Some(hi)) = (ok, fail) {
        if hi <= lo * (1.0 + tolerance) {
            break;
        }
        let mid = ((lo + hi) / 2.0).round();
        if holds(mid)? {
            ok = Some(mid);
        } else {
            fail = Some(mid);
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(threshold: f64, start: f64) -> (Option<f64>, Vec<f64>) {
        let mut tried = Vec::new();
        let r = search_max::<()>(start, 1_000.0, 100e6, 0.05, |rate| {
            tried.push(rate);
            Ok(rate <= threshold)
        })
        .unwrap();
        (r, tried)
    }

    #[test]
    fn the_search_goes_up_by_doubling_then_bisects() {
        let (r, tried) = search(3_300_000.0, 1_000_000.0);
        let r = r.unwrap();
        assert!((3_300_000.0 / 1.05..=3_300_000.0).contains(&r), "{r}");
        assert_eq!(&tried[..3], &[1e6, 2e6, 4e6]);
        assert!(tried.len() <= 8, "{tried:?}");
    }

    #[test]
    fn the_search_goes_down_when_the_start_fails() {
        let (r, tried) = search(180_000.0, 1_000_000.0);
        let r = r.unwrap();
        assert!((180_000.0 / 1.05..=180_000.0).contains(&r), "{r} {tried:?}");
        assert_eq!(&tried[..4], &[1e6, 5e5, 2.5e5, 1.25e5]);
    }

    #[test]
    fn the_search_stops_at_the_cap_and_the_floor() {
        assert_eq!(search(1e12, 1e6).0, Some(100e6));
        assert_eq!(search(10.0, 1e6).0, None);
    }

    #[test]
    fn rates_are_labelled_as_the_seeds_do() {
        assert_eq!(rate_label(10_000.0), "10K");
        assert_eq!(rate_label(1_500_000.0), "1.5M");
        assert_eq!(rate_label(730_000.0), "730K");
        assert_eq!(rate_label(2_000_000.0), "2M");
        assert_eq!(rate_label(950.0), "950");
    }
}
