//! One-way latency from embedded timestamps, as seed 003's Table 2: a row per rate.

use super::format::{dash, latency_values, thousands};
use super::{by_rate, of, transport_title, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

pub(super) fn embedded(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Embedded);
    if cells.is_empty() {
        return None;
    }
    let tables = embedded_groups(&cells)
        .into_iter()
        .map(|(transport, size, mut group)| {
            group.sort_by(by_rate);
            let mut rows = vec![table2_header(size)];
            rows.extend(group.iter().map(|c| table2_row(c)));
            Table {
                caption: Some(transport_title(transport, &group)),
                left: 0,
                rows,
            }
        })
        .collect();
    Some(Section {
        title: "One-way latency from embedded timestamps".to_string(),
        intro: Some(
            "Publisher and subscriber on one host; the subscriber subtracts the timestamp the \
             publisher embedded in each update."
                .to_string(),
        ),
        tables,
    })
}

/// Seed 003's Table 2 header.
pub(super) fn table2_header(size: usize) -> Row {
    Row::Header(vec![
        format!("Update Rate [{size}-byte messages/sec]"),
        "Mean Latency (us)".to_string(),
        "Std Deviation (us)".to_string(),
        "Maximum Latency (us)".to_string(),
        "Minimum Latency (us)".to_string(),
        "Number of Latency Points".to_string(),
    ])
}

/// A cell as a row of seed 003's Table 2: rate, mean, std dev, max, min, points.
pub(super) fn table2_row(c: &Cell) -> Row {
    let rate = c
        .rate_requested_msgs_per_s
        .or(c.rate_achieved_msgs_per_s)
        .map(|r| thousands(r.round() as u64))
        .unwrap_or_else(dash);
    let mut row = vec![rate];
    row.extend(latency_values(c.latency.as_ref(), |l| {
        [l.mean_ns, l.stddev_ns, l.max_ns, l.min_ns]
    }));
    row.push(
        c.latency
            .map(|l| l.samples.to_string())
            .unwrap_or_else(dash),
    );
    Row::Cells(row)
}

/// Embedded cells grouped by (transport, size), in the order the groups first appear.
pub(crate) fn embedded_groups<'a>(cells: &[&'a Cell]) -> Vec<(&'a str, usize, Vec<&'a Cell>)> {
    let mut groups: Vec<(&str, usize, Vec<&Cell>)> = Vec::new();
    for c in cells {
        match groups
            .iter_mut()
            .find(|(t, s, _)| *t == c.transport && *s == c.size_bytes)
        {
            Some(g) => g.2.push(c),
            None => groups.push((&c.transport, c.size_bytes, vec![c])),
        }
    }
    groups
}
