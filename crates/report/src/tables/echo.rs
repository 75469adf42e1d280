//! Seed 004's section: the echo's half round trip per transport, mode and size, over the
//! ping-pong of the same run.

use super::format::{dash, header, latency_values, thousands};
use super::{of, transports, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

/// An echo cell's send mode (`detail.mode`), `-` when it names none.
pub(crate) fn mode_of(c: &Cell) -> &str {
    match c.detail.echo().and_then(|d| d.mode.as_deref()) {
        None | Some("") => "-",
        Some(m) => m,
    }
}

/// The echo cells in report order: transports, then modes, in the order they first appear;
/// sizes ascending.
pub(crate) fn echo_cells(results: &Results) -> Vec<&Cell> {
    let mut cells = of(results, Scenario::Echo);
    let transports = transports(&cells);
    let mut modes: Vec<&str> = Vec::new();
    for c in &cells {
        if !modes.contains(&mode_of(c)) {
            modes.push(mode_of(c));
        }
    }
    let rank = |c: &Cell| {
        (
            transports.iter().position(|t| *t == c.transport),
            modes.iter().position(|m| *m == mode_of(c)),
            c.size_bytes,
        )
    };
    cells.sort_by_key(|c| rank(c));
    cells
}

/// An echo cell's median over the ping-pong median of the same transport and size: the ratio
/// recorded with it, else computed from the ping-pong cell of the same run.
pub(crate) fn x_pingpong(results: &Results, cell: &Cell) -> Option<f64> {
    if let Some(x) = cell.detail.echo().and_then(|d| d.median_x_pingpong) {
        return Some(x);
    }
    let reference = of(results, Scenario::Pingpong)
        .into_iter()
        .find(|c| c.transport == cell.transport && c.size_bytes == cell.size_bytes)?
        .latency?
        .median_ns;
    let median = cell.latency?.median_ns;
    (reference > 0.0).then(|| median / reference)
}

/// The echo table's columns.
pub(super) const ECHO_HEADER: [&str; 13] = [
    "transport",
    "mode",
    "size",
    "samples",
    "Min",
    "25th",
    "Median",
    "75th",
    "99th",
    "99.9th",
    "Max",
    "Std Dev",
    "x ping-pong",
];

/// Seed 004's measurements as a table: the echo's half round trip per transport, mode and
/// size, with its ratio to the ping-pong; notes (ipc's single path) under each transport.
pub(super) fn echo(results: &Results) -> Option<Section> {
    let cells = echo_cells(results);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&ECHO_HEADER)];
    for (i, c) in cells.iter().enumerate() {
        let mut row = vec![
            c.transport.clone(),
            mode_of(c).to_string(),
            c.size_bytes.to_string(),
        ];
        row.push(c.latency.map(|l| thousands(l.samples)).unwrap_or_else(dash));
        row.extend(latency_values(c.latency.as_ref(), |l| {
            [
                l.min_ns,
                l.p25_ns,
                l.median_ns,
                l.p75_ns,
                l.p99_ns,
                l.p999_ns,
                l.max_ns,
                l.stddev_ns,
            ]
        }));
        row.push(
            x_pingpong(results, c)
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(dash),
        );
        rows.push(Row::Cells(row));
        let last_of_transport = cells
            .get(i + 1)
            .is_none_or(|next| next.transport != c.transport);
        if last_of_transport {
            let mut notes: Vec<&str> = Vec::new();
            for n in cells
                .iter()
                .filter(|o| o.transport == c.transport)
                .filter_map(|o| o.detail.echo().and_then(|d| d.note.as_deref()))
                .filter(|n| !n.is_empty())
            {
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            rows.extend(notes.into_iter().map(|n| Row::Note(n.to_string())));
        }
    }
    let mut intervals: Vec<f64> = cells
        .iter()
        .filter_map(|c| c.detail.echo())
        .flat_map(|d| [d.batch_interval_us, d.echo_batch_interval_us])
        .flatten()
        .collect();
    intervals.sort_by(f64::total_cmp);
    intervals.dedup();
    let interval = match intervals.as_slice() {
        [] => "the URI's batch_interval_us, 100 us by default".to_string(),
        [one] => format!("batch_interval_us, {one} us in this run"),
        many => format!(
            "batch_interval_us, {} us in this run",
            many.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    };
    Some(Section {
        title: "Echo (half round trip), microseconds".to_string(),
        intro: Some(format!(
            "A sender and an echo process, each an application's event loop: offer a message \
             (no flush), then poll for the answer and run the publisher's duty cycle on every \
             empty poll; RTT / 2 as in seed 004. urgent: every message leaves in its offer. \
             normal (batched): a message leaves when the oldest message of its batch has \
             waited the batch interval ({interval}), checked by the duty cycle, on each side: \
             each leg waits about one interval, so normal mode's half round trip is about one \
             batch interval above urgent's. x ping-pong: median over the median of the \
             ping-pong (urgent) of the same transport and size in this run."
        )),
        tables: vec![Table {
            caption: None,
            left: 2,
            rows,
        }],
    })
}
