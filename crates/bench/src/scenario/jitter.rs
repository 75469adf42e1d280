//! `peregrine bench jitter`: the machine's jitter floor per CPU ([`crate::jitter`]), as cells
//! of the results folder and a table of the report; the default suite runs it before its load
//! runs, so their tails can be read next to what the machine alone takes.

use super::Session;
use crate::jitter::{CpuJitter, JitterConfig, THRESHOLDS_NS};
use crate::{round3, BenchError};
use peregrine_report::model::{Cell, Detail, JitterDetail, Scenario};
use serde_json::json;

/// Measures, prints and records one cell per CPU.
pub fn run(cfg: &JitterConfig, s: &mut Session) -> Result<Vec<CpuJitter>, BenchError> {
    let results = crate::jitter::measure(cfg, s.clock())?;
    if !s.out.json {
        println!(
            "machine jitter: a thread per CPU spinning on the clock for {} s (sysjitter's method)",
            cfg.seconds
        );
        println!(
            "  {:>4} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
            "cpu", ">=1us/s", ">=10us/s", ">=100us/s", ">=1ms/s", "largest_us", "lost_%"
        );
    }
    for r in &results {
        if s.out.json {
            println!("{}", line(r));
        } else {
            println!(
                "  {:>4} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>10.4}",
                r.cpu,
                r.per_s(0),
                r.per_s(1),
                r.per_s(2),
                r.per_s(3),
                r.largest_gap_ns / 1e3,
                r.lost_fraction() * 100.0
            );
        }
        s.record(cell(r), None, None)?;
    }
    Ok(results)
}

fn line(r: &CpuJitter) -> serde_json::Value {
    json!({
        "kind": "jitter", "cpu": r.cpu, "seconds": round3(r.seconds), "reads": r.reads,
        "gaps_over_1us_per_s": round3(r.per_s(0)), "gaps_over_10us_per_s": round3(r.per_s(1)),
        "gaps_over_100us_per_s": round3(r.per_s(2)), "gaps_over_1ms_per_s": round3(r.per_s(3)),
        "largest_gap_ns": r.largest_gap_ns, "lost_fraction": r.lost_fraction(),
    })
}

/// One CPU's jitter as a cell (`transport` is `cpu<N>`).
pub fn cell(r: &CpuJitter) -> Cell {
    // The fields name the thresholds: 1 us, 10 us, 100 us, 1 ms.
    const _: () = assert!(THRESHOLDS_NS.len() == 4);
    let mut detail = JitterDetail {
        cpu: Some(r.cpu as u64),
        gaps_over_1us_per_s: Some(round3(r.per_s(0))),
        gaps_over_10us_per_s: Some(round3(r.per_s(1))),
        gaps_over_100us_per_s: Some(round3(r.per_s(2))),
        gaps_over_1ms_per_s: Some(round3(r.per_s(3))),
        largest_gap_ns: Some(r.largest_gap_ns),
        lost_fraction: Some(r.lost_fraction()),
        ..JitterDetail::default()
    };
    detail.settings.insert("reads".into(), r.reads.into());
    Cell {
        id: format!("jitter-cpu{}", r.cpu),
        scenario: Some(Scenario::Jitter),
        transport: format!("cpu{}", r.cpu),
        seconds: round3(r.seconds),
        detail: Detail::Jitter(detail),
        ..Cell::default()
    }
}
