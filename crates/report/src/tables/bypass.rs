//! The seeds' "UDP through the kernel vs kernel bypass" tables (seed 001's "UDP thru kernel /
//! VMA kernel bypass" at 100,000 msgs/s, 002's VMA against OpenOnload): per message size, the
//! ping-pong, and the load with pings at its rate, across a veth pair between two namespaces
//! through the kernel (`udp`), sockperf over the same pair, and through AF_XDP (`xdp`), median
//! and 99.9th, with xdp's ratios to the kernel path.

use super::format::{dash, header, rate_label, us};
use super::{of, Row, Section, Table};
use crate::model::{Cell, Latency, Results, Scenario};

/// Whether `cell` was measured across network namespaces (`bench pingpong|load|throughput
/// --netns`).
pub(crate) fn across_namespaces(cell: &Cell) -> bool {
    let flag = |s: &crate::model::Settings| s.get("netns") == Some(&serde_json::Value::Bool(true));
    cell.detail.latency().is_some_and(|d| flag(&d.settings))
        || cell.detail.paced().is_some_and(|d| flag(&d.settings))
        || cell.detail.throughput().is_some_and(|d| flag(&d.settings))
}

/// The size a cell's row is under: the size asked for (sockperf's smallest message is 14
/// bytes, so its 12-byte row's cell says 14 and names its row).
pub(crate) fn row_size(cell: &Cell) -> usize {
    let settings = cell
        .detail
        .latency()
        .map(|d| &d.settings)
        .or_else(|| cell.detail.paced().map(|d| &d.settings));
    settings
        .and_then(|s| s.get("row_size"))
        .and_then(|v| v.as_u64())
        .map_or(cell.size_bytes, |v| v as usize)
}

/// The cells of `scenario` measured across namespaces.
pub(crate) fn across(results: &Results, scenario: Scenario) -> Vec<&Cell> {
    of(results, scenario)
        .into_iter()
        .filter(|c| across_namespaces(c))
        .collect()
}

pub(super) fn bypass(results: &Results) -> Option<Section> {
    let pingpong = across(results, Scenario::Pingpong);
    let load = across(results, Scenario::Load);
    let mut tables = Vec::new();
    if !pingpong.is_empty() {
        tables.push(Table {
            caption: Some("Ping-pong (one message in flight)".to_string()),
            left: 1,
            rows: rows(&pingpong, "Size (bytes)", |_| String::new()),
        });
    }
    if !load.is_empty() {
        tables.push(Table {
            caption: Some(
                "Under load: a paced stream with pings (sockperf: its ping-pong at the same rate, \
                 every message answered)"
                    .to_string(),
            ),
            left: 1,
            rows: rows(&load, "Size @ rate", |c| {
                c.rate_requested_msgs_per_s
                    .map(|r| format!(" @ {}", rate_label(r)))
                    .unwrap_or_default()
            }),
        });
    }
    if tables.is_empty() {
        return None;
    }
    Some(Section {
        title: "UDP through the kernel and kernel bypass (AF_XDP), half round trip, microseconds"
            .to_string(),
        intro: Some(
            "The same measurement across a veth pair between two network namespaces: Peregrine \
             through the kernel's UDP stack, sockperf over the same pair (busy polling, through \
             the kernel), and Peregrine through AF_XDP (xdp=). Compare rows of one run only. On \
             a veth pair AF_XDP runs in copy mode; a NIC with zero-copy AF_XDP saves the copy on \
             both sides (docs/architecture.md, \"Kernel bypass\")."
                .to_string(),
        ),
        tables,
    })
}

/// One row per row size (and, under load, rate): the three paths' median and 99.9th and
/// xdp's ratios to the kernel path. `label` adds to the size (the rate).
fn rows(cells: &[&Cell], first: &str, label: impl Fn(&Cell) -> String) -> Vec<Row> {
    let mut keys: Vec<(usize, String)> = cells.iter().map(|c| (row_size(c), label(c))).collect();
    keys.sort();
    keys.dedup();
    let mut rows = vec![header(&[
        first,
        "Kernel median",
        "Kernel 99.9th",
        "sockperf median",
        "sockperf 99.9th",
        "XDP median",
        "XDP 99.9th",
        "XDP / kernel median",
        "XDP / kernel 99.9th",
    ])];
    for (size, extra) in keys {
        let find = |path: &str| {
            cells
                .iter()
                .find(|c| c.transport == path && row_size(c) == size && label(c) == extra)
                .and_then(|c| c.latency)
        };
        let (kernel, sockperf, xdp) = (find("udp"), find("sockperf"), find("xdp"));
        let median = |l: Option<Latency>| l.map(|l| us(l.median_ns)).unwrap_or_else(dash);
        let p999 = |l: Option<Latency>| l.map(|l| us(l.p999_ns)).unwrap_or_else(dash);
        let ratio = |f: fn(&Latency) -> f64| match (xdp, kernel) {
            (Some(x), Some(k)) if f(&k) > 0.0 => format!("{:.2}", f(&x) / f(&k)),
            _ => dash(),
        };
        rows.push(Row::Cells(vec![
            format!("{size}{extra}"),
            median(kernel),
            p999(kernel),
            median(sockperf),
            p999(sockperf),
            median(xdp),
            p999(xdp),
            ratio(|l| l.median_ns),
            ratio(|l| l.p999_ns),
        ]));
    }
    rows
}
