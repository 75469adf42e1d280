//! Seed 001's load sections: the full results per size and rate, each cell's tail apart from the
//! machine's stalls beside its floor under load, and the highest rate sustained per size.

use super::format::{
    dash, header, latency_values, rate_and_mb, rate_label, size_rate_label, thousands, us,
};
use super::{by_rate, of, shown, sizes, transport_title, transports, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

const FULL_HEADER: [&str; 11] = [
    "Message Size/Rate",
    "Min",
    "Avg",
    "Max",
    "Median",
    "x floor",
    "x unloaded",
    "99.9th %",
    "x floor",
    "Stalls",
    "Std. Dev",
];

/// A cell's ratio (to its floor), starred when the floor moved around it.
pub(super) fn ratio_text(ratio: Option<f64>, moved: bool) -> String {
    match ratio {
        Some(x) => format!("{x:.2}{}", if moved { "*" } else { "" }),
        None => dash(),
    }
}

/// The machine's jitter over a cell's interval: the stalls of 100 us or more its two spinning
/// loops saw per second, and the largest, `3.5/s, 1.21 ms`.
fn stalls_text(c: &Cell) -> String {
    let d = c.detail.paced();
    match (
        d.and_then(|d| d.stalls_over_100us_per_s),
        d.and_then(|d| d.largest_stall_ns),
    ) {
        (Some(per_s), Some(largest)) if largest >= 1e6 => {
            format!("{per_s:.1}/s, {:.2} ms", largest / 1e6)
        }
        (Some(per_s), Some(largest)) => format!("{per_s:.1}/s, {:.0} us", largest / 1e3),
        _ => dash(),
    }
}

pub(super) fn full_results(results: &Results) -> Option<Section> {
    let load = of(results, Scenario::Load);
    if load.is_empty() {
        return None;
    }
    let mut tables = Vec::new();
    for transport in transports(&load) {
        let cells: Vec<&Cell> = load
            .iter()
            .copied()
            .filter(|c| c.transport == transport)
            .collect();
        let title = transport_title(transport, &cells);
        let mut rows = Vec::new();
        let mut corrected = vec![header(&[
            "Message Size/Rate",
            "Median",
            "99th",
            "99.9th",
            "Max",
            "Achieved msgs/s",
            "Lost",
            "Refused",
        ])];
        for size in sizes(&cells) {
            let mut block: Vec<&Cell> = cells
                .iter()
                .copied()
                .filter(|c| c.size_bytes == size)
                .collect();
            block.sort_by(by_rate);
            rows.push(header(&FULL_HEADER));
            for c in block.iter().filter(|c| shown(c)) {
                let mut row = vec![size_rate_label(c)];
                let v = latency_values(c.latency.as_ref(), |l| {
                    [
                        l.min_ns,
                        l.mean_ns,
                        l.max_ns,
                        l.median_ns,
                        l.p999_ns,
                        l.stddev_ns,
                    ]
                });
                row.extend(v[..4].iter().cloned());
                let d = c.detail.paced();
                let moved = d.and_then(|d| d.floor_moved) == Some(true);
                row.push(ratio_text(d.and_then(|d| d.median_x_floor), moved));
                row.push(ratio_text(d.and_then(|d| d.median_x_unloaded), moved));
                row.push(v[4].clone());
                row.push(ratio_text(d.and_then(|d| d.p999_x_floor), moved));
                row.push(stalls_text(c));
                row.push(v[5].clone());
                rows.push(Row::Cells(row));
                let mut row = vec![size_rate_label(c)];
                row.extend(latency_values(c.latency_from_schedule.as_ref(), |l| {
                    [l.median_ns, l.p99_ns, l.p999_ns, l.max_ns]
                }));
                row.push(
                    c.rate_achieved_msgs_per_s
                        .map(|r| thousands(r.round() as u64))
                        .unwrap_or_else(dash),
                );
                row.push(thousands(c.lost));
                row.push(thousands(c.refused));
                corrected.push(Row::Cells(row));
            }
            if let Some(note) = cpu_bound_note(&block) {
                rows.push(Row::Note(note));
            }
        }
        tables.push(Table {
            caption: Some(format!("{title}, load with pings")),
            left: 1,
            rows,
        });
        tables.push(Table {
            caption: Some(format!(
                "Corrected for coordinated omission (from scheduled send time): {title}"
            )),
            left: 1,
            rows: corrected,
        });
    }
    let floors = of(results, Scenario::FloorLoad);
    if !floors.is_empty() {
        let mut rows = vec![header(&[
            "For cell",
            "Min",
            "Avg",
            "Max",
            "Median",
            "99.9th %",
            "Stalls",
            "Floor before/after",
        ])];
        for c in &floors {
            let d = c.detail.paced();
            let mut row = vec![d.and_then(|d| d.for_cell.clone()).unwrap_or_default()];
            row.extend(latency_values(c.latency.as_ref(), |l| {
                [l.min_ns, l.mean_ns, l.max_ns, l.median_ns, l.p999_ns]
            }));
            row.push(stalls_text(c));
            row.push(
                match (
                    d.and_then(|d| d.floor_before_ns),
                    d.and_then(|d| d.floor_after_ns),
                ) {
                    (Some(a), Some(b)) => format!("{a:.0} / {b:.0} ns"),
                    _ => dash(),
                },
            );
            rows.push(Row::Cells(row));
        }
        tables.push(Table {
            caption: Some(
                "Machine floor under load: the same schedule and pings on one cache line"
                    .to_string(),
            ),
            left: 1,
            rows,
        });
    }
    if let Some(t) = unstalled_tails(&load, &floors) {
        tables.push(t);
    }
    Some(Section {
        title: "Full Results".to_string(),
        intro: Some(
            "All values are latency in microseconds (half round trip of the pings), measured \
             from each ping's actual send time; the second table of each transport measures \
             from the time the ping was scheduled to be sent. x floor: the median and the \
             99.9th percentile over the machine's floor under load, measured just before the \
             cell with the same pacer, rate and pings on one shared cache line (last table). \
             x unloaded: the median over the median of a plain ping-pong of the same \
             transport and size, measured just before the cell. \
             * marks a cell whose cache-line floor, measured before and after it, moved by \
             more than 1.3x: its ratios compare two machine modes. Stalls: the machine's \
             jitter over the cell's interval, gaps of 100 us or more per second that its two \
             spinning loops saw, and the largest."
                .to_string(),
        ),
        tables,
    })
}

/// Each load cell's tail apart from the machine's stalls, beside its floor under load's: the
/// pings a stall of 100 us or more overlapped, and the 99.9th percentile of the others.
fn unstalled_tails(load: &[&Cell], floors: &[&Cell]) -> Option<Table> {
    let stalled = |c: &Cell| -> String {
        let pings = c.latency.map(|l| l.samples).unwrap_or(0);
        match c.detail.paced().and_then(|d| d.pings_stalled) {
            Some(n) if pings > 0 => {
                format!("{} ({:.2}%)", thousands(n), 100.0 * n as f64 / pings as f64)
            }
            Some(n) => thousands(n),
            None => dash(),
        }
    };
    let p999 = |c: Option<&Cell>| {
        c.and_then(|c| c.detail.paced()?.unstalled_p999_ns)
            .map(us)
            .unwrap_or_else(dash)
    };
    let mut rows = vec![header(&[
        "Cell",
        "Pings",
        "Stalled",
        "99.9th %",
        "99.9th % unstalled",
        "Floor: stalled",
        "Floor: 99.9th % unstalled",
        "x floor",
    ])];
    for c in load
        .iter()
        .filter(|c| c.detail.paced().is_some_and(|d| d.pings_stalled.is_some()))
    {
        let floor = floors
            .iter()
            .copied()
            .find(|f| f.detail.paced().and_then(|d| d.for_cell.as_deref()) == Some(c.id.as_str()));
        let mut row = vec![
            c.id.clone(),
            thousands(c.latency.map(|l| l.samples).unwrap_or(0)),
            stalled(c),
        ];
        row.extend(latency_values(c.latency.as_ref(), |l| [l.p999_ns]));
        row.push(p999(Some(c)));
        row.push(floor.map(stalled).unwrap_or_else(dash));
        row.push(p999(floor));
        let d = c.detail.paced();
        row.push(ratio_text(
            d.and_then(|d| d.unstalled_p999_x_floor),
            d.and_then(|d| d.floor_moved) == Some(true),
        ));
        rows.push(Row::Cells(row));
    }
    (rows.len() > 1).then(|| Table {
        caption: Some(
            "Tails apart from the machine's stalls: the pings a stall of 100 us or more in \
             either spinning loop overlapped, and the 99.9th percentile of the others"
                .to_string(),
        ),
        left: 1,
        rows,
    })
}

/// `CPU-bound after 1M msgs/sec` when some rate of this size could not be sustained.
/// `block` holds one transport's cells of one size.
pub(crate) fn cpu_bound_note(block: &[&Cell]) -> Option<String> {
    if !block.iter().any(|c| c.sustained == Some(false)) {
        return None;
    }
    let highest_sustained = block
        .iter()
        .filter(|c| shown(c))
        .filter_map(|c| c.rate_requested_msgs_per_s)
        .max_by(f64::total_cmp);
    Some(match highest_sustained {
        Some(r) => format!("CPU-bound after {} msgs/sec", rate_label(r)),
        None => {
            let lowest = block
                .iter()
                .filter_map(|c| c.rate_requested_msgs_per_s)
                .min_by(f64::total_cmp);
            match lowest {
                Some(r) => format!(
                    "CPU-bound below the lowest rate tried ({} msgs/sec)",
                    rate_label(r)
                ),
                None => "CPU-bound below the lowest rate tried".to_string(),
            }
        }
    })
}

pub(super) fn max_throughput(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Max);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&["transport", "size", "msgs/s", "MB/s"])];
    for c in cells {
        let (rate, mb) = rate_and_mb(c);
        rows.push(Row::Cells(vec![
            c.transport.clone(),
            c.size_bytes.to_string(),
            rate,
            mb,
        ]));
    }
    Some(Section {
        title: "Maximum sustainable throughput".to_string(),
        intro: Some(
            "The highest rate held for the whole measured interval with nothing lost and no \
             back-pressure refusals."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 1,
            rows,
        }],
    })
}
