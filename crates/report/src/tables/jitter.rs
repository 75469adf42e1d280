//! The machine's jitter on one CPU: gaps per second over 1 us to 1 ms, the largest, time lost.

use super::format::{dash, header};
use super::{of, Row, Section, Table};
use crate::model::{Results, Scenario};

/// sysjitter's table: per CPU, the gaps a spinning thread saw per second over each threshold,
/// the largest, and the fraction of the time lost.
pub(super) fn jitter(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Jitter);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&[
        "CPU",
        "Seconds",
        ">= 1 us /s",
        ">= 10 us /s",
        ">= 100 us /s",
        ">= 1 ms /s",
        "Largest (us)",
        "Time lost (%)",
    ])];
    for c in cells {
        let d = c.detail.jitter().cloned().unwrap_or_default();
        let per_s = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(dash);
        rows.push(Row::Cells(vec![
            d.cpu.map(|v| v.to_string()).unwrap_or_else(dash),
            format!("{:.1}", c.seconds),
            per_s(d.gaps_over_1us_per_s),
            per_s(d.gaps_over_10us_per_s),
            per_s(d.gaps_over_100us_per_s),
            per_s(d.gaps_over_1ms_per_s),
            d.largest_gap_ns
                .map(|v| format!("{:.1}", v / 1e3))
                .unwrap_or_else(dash),
            d.lost_fraction
                .map(|v| format!("{:.4}", v * 100.0))
                .unwrap_or_else(dash),
        ]));
    }
    Some(Section {
        title: "Machine jitter".to_string(),
        intro: Some(
            "A thread per CPU spinning on the clock with nothing else to do (sysjitter's \
             method): every gap between two reads of 1 us or more is time the machine took. A \
             latency tail near these gaps is the machine's, not the messaging's."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 1,
            rows,
        }],
    })
}
