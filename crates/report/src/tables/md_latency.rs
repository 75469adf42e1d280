//! Seed 003's Table 2 per system: one-way latency, feed to client through the tier.

use super::embedded::{table2_header, table2_row};
use super::fanout::{system_of, system_title};
use super::fanout::{verdict_of, why_of};
use super::format::{dash, thousands};
use super::{by_rate, of, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

/// Seed 003's Table 2 per system: one-way latency, feed to client through the tier.
pub(super) fn md_latency(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::MdLatency);
    if cells.is_empty() {
        return None;
    }
    let tables = md_latency_groups(&cells)
        .into_iter()
        .map(|(system, size, mut group)| {
            group.sort_by(by_rate);
            let mut rows = vec![table2_header(size)];
            for c in &group {
                if c.sustained == Some(false) {
                    rows.push(Row::Note(format!(
                        "not sustained at {} updates/sec: {}",
                        c.rate_requested_msgs_per_s
                            .map(|r| thousands(r.round() as u64))
                            .unwrap_or_else(dash),
                        match why_of(c) {
                            "" => verdict_of(c),
                            why => why,
                        }
                    )));
                    continue;
                }
                rows.push(table2_row(c));
            }
            Table {
                caption: Some(system_title(system)),
                left: 0,
                rows,
            }
        })
        .collect();
    Some(Section {
        title: "Market data latency, feed to client through the distribution tier".to_string(),
        intro: Some(
            "One-way, from the timestamp the feed embeds in every update to its arrival at \
             the client (same host), over every update delivered; the rates stop at the first \
             one not sustained."
                .to_string(),
        ),
        tables,
    })
}

/// Sustained market data latency cells grouped by (system, size), in order of appearance.
pub(crate) fn md_latency_groups<'a>(cells: &[&'a Cell]) -> Vec<(&'a str, usize, Vec<&'a Cell>)> {
    let mut groups: Vec<(&str, usize, Vec<&Cell>)> = Vec::new();
    for c in cells {
        let system = system_of(c);
        match groups
            .iter_mut()
            .find(|(s, z, _)| *s == system && *z == c.size_bytes)
        {
            Some(g) => g.2.push(c),
            None => groups.push((system, c.size_bytes, vec![c])),
        }
    }
    groups
}
