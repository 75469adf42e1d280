//! The ping-pong section: half round trip per transport and size, beside the floor of the same
//! run (the cache line for `ipc`, bare sockets for the network).

use super::bypass::across_namespaces;
use super::format::{dash, header, thousands, us};
use super::load::ratio_text;
use super::{of, scenario_name, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

pub(super) fn pingpong(results: &Results) -> Option<Section> {
    let rank = |c: &Cell| match c.scenario {
        Some(Scenario::Floor) => 0,
        Some(Scenario::Raw) => 1,
        _ => 2,
    };
    let mut cells: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| {
            matches!(
                c.scenario,
                Some(Scenario::Floor | Scenario::Raw | Scenario::Pingpong)
            ) && !across_namespaces(c)
        })
        .collect();
    if cells.is_empty() {
        return None;
    }
    cells.sort_by_key(|c| rank(c));
    let mut rows = vec![header(&[
        "test",
        "transport",
        "size",
        "samples",
        "Min",
        "Avg",
        "Median",
        "99th",
        "99.9th",
        "Max",
        "Std Dev",
        "x floor",
        "x 2-line",
    ])];
    for c in &cells {
        let mut row = vec![
            scenario_name(c.scenario).to_string(),
            c.transport.clone(),
            c.size_bytes.to_string(),
        ];
        match &c.latency {
            Some(l) => {
                row.push(thousands(l.samples));
                row.extend(
                    [
                        l.min_ns,
                        l.mean_ns,
                        l.median_ns,
                        l.p99_ns,
                        l.p999_ns,
                        l.max_ns,
                        l.stddev_ns,
                    ]
                    .map(us),
                );
            }
            None => row.extend(std::iter::repeat_n(dash(), 8)),
        }
        let d = c.detail.latency();
        let moved = d.and_then(|d| d.floor_moved) == Some(true);
        row.push(
            x_floor(results, c)
                .map(|x| format!("{x:.2}{}", if moved { "*" } else { "" }))
                .unwrap_or_else(dash),
        );
        row.push(ratio_text(d.and_then(|d| d.median_x_two_line_floor), moved));
        rows.push(Row::Cells(row));
    }
    Some(Section {
        title: "Ping-pong latency (half round trip), microseconds".to_string(),
        intro: Some(
            "x floor: median over the machine's floor median (the cache-line ping-pong for ipc, \
             the bare-socket ping-pong of the same transport for network transports). An ipc \
             ping-pong measures the cache-line floor in short bursts between blocks of pings and \
             compares each block with the floor of its own moment (the median over blocks is \
             shown); * marks a run during which the machine's floor moved by more than 1.3x \
             (its blocks that straddled the change are left out of the ratio). x 2-line: the \
             same against the two-line floor of the same moments (each side writes one line \
             and spins on the other's), the least a round trip over two one-way streams can \
             cost (docs/benchmarks.md, \"What is Peregrine's\")."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 2,
            rows,
        }],
    })
}

/// The cell a ping-pong cell is compared with: the cache-line floor for `ipc`, the raw socket
/// ping-pong of the same transport otherwise; the same size when there is one.
pub(crate) fn floor_of<'a>(results: &'a Results, cell: &Cell) -> Option<&'a Cell> {
    if matches!(cell.scenario, Some(Scenario::Floor | Scenario::Raw)) {
        return None;
    }
    // Measured across a veth pair between namespaces (`--netns`): the loopback floors are not
    // its floor; its comparison is with the other paths of the same pair (its own section).
    if across_namespaces(cell) {
        return None;
    }
    let candidates: Vec<&Cell> = if cell.transport == "ipc" {
        of(results, Scenario::Floor)
    } else {
        of(results, Scenario::Raw)
            .into_iter()
            .filter(|c| c.transport == cell.transport)
            .collect()
    };
    let with_latency = |c: &&Cell| c.latency.is_some();
    candidates
        .iter()
        .copied()
        .filter(with_latency)
        .find(|c| c.size_bytes == cell.size_bytes)
        .or_else(|| candidates.iter().copied().find(with_latency))
}

/// Median over the floor's median: the ratio the cell carries (against the floor of its own
/// moments, measured in bursts between blocks of pings), else the floor cell's.
pub(crate) fn x_floor(results: &Results, cell: &Cell) -> Option<f64> {
    if let Some(x) = cell.detail.latency().and_then(|d| d.median_x_floor) {
        return Some(x);
    }
    let floor = floor_of(results, cell)?.latency?.median_ns;
    let median = cell.latency?.median_ns;
    (floor > 0.0).then(|| median / floor)
}
