//! The seeds' "UDP through the kernel vs kernel bypass" table (seed 001's "UDP thru kernel /
//! VMA kernel bypass", 002's VMA against OpenOnload): per message size, the ping-pong across a
//! veth pair between two namespaces through the kernel (`udp`), sockperf over the same pair,
//! and through AF_XDP (`xdp`), median and 99.9th, with xdp's ratios to the kernel path.

use super::format::{dash, header, us};
use super::{of, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

/// Whether `cell` was measured across network namespaces (`bench pingpong --netns`).
pub(crate) fn across_namespaces(cell: &Cell) -> bool {
    let flag = |s: &crate::model::Settings| s.get("netns") == Some(&serde_json::Value::Bool(true));
    cell.detail.latency().is_some_and(|d| flag(&d.settings))
        || cell.detail.throughput().is_some_and(|d| flag(&d.settings))
}

/// The size a cell's row is under: the size asked for (sockperf's smallest message is 14
/// bytes, so its 12-byte row's cell says 14 and names its row).
fn row_size(cell: &Cell) -> usize {
    cell.detail
        .latency()
        .and_then(|d| d.settings.get("row_size"))
        .and_then(|v| v.as_u64())
        .map_or(cell.size_bytes, |v| v as usize)
}

pub(super) fn bypass(results: &Results) -> Option<Section> {
    let cells: Vec<&Cell> = of(results, Scenario::Pingpong)
        .into_iter()
        .filter(|c| across_namespaces(c))
        .collect();
    if cells.is_empty() {
        return None;
    }
    let mut sizes: Vec<usize> = cells.iter().map(|c| row_size(c)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows = vec![header(&[
        "Size (bytes)",
        "Kernel median",
        "Kernel 99.9th",
        "sockperf median",
        "sockperf 99.9th",
        "XDP median",
        "XDP 99.9th",
        "XDP / kernel median",
        "XDP / kernel 99.9th",
    ])];
    for size in sizes {
        let find = |path: &str| {
            cells
                .iter()
                .find(|c| c.transport == path && row_size(c) == size)
                .and_then(|c| c.latency)
        };
        let (kernel, sockperf, xdp) = (find("udp"), find("sockperf"), find("xdp"));
        let median =
            |l: Option<crate::model::Latency>| l.map(|l| us(l.median_ns)).unwrap_or_else(dash);
        let p999 = |l: Option<crate::model::Latency>| l.map(|l| us(l.p999_ns)).unwrap_or_else(dash);
        let ratio = |f: fn(&crate::model::Latency) -> f64| match (xdp, kernel) {
            (Some(x), Some(k)) if f(&k) > 0.0 => format!("{:.2}", f(&x) / f(&k)),
            _ => dash(),
        };
        rows.push(Row::Cells(vec![
            size.to_string(),
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
    Some(Section {
        title: "UDP through the kernel and kernel bypass (AF_XDP), half round trip, microseconds"
            .to_string(),
        intro: Some(
            "The same ping-pong across a veth pair between two network namespaces, size by \
             size: Peregrine through the kernel's UDP stack, sockperf over the same pair (busy \
             polling, through the kernel), and Peregrine through AF_XDP (xdp=). Compare rows of \
             one run only. On a veth pair AF_XDP runs in copy mode; a NIC with zero-copy AF_XDP \
             saves the copy on both sides (docs/architecture.md, \"Kernel bypass\")."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 1,
            rows,
        }],
    })
}
