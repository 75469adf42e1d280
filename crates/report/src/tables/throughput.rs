//! Unpaced throughput: each transport's rate beside the same run's ceiling.

use super::format::{dash, header, rate_and_mb, thousands};
use super::{of, Row, Section, Table};
use crate::model::{Results, Scenario};

pub(super) fn throughput(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Throughput);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&[
        "transport",
        "size",
        "msgs/s",
        "MB/s",
        "lost",
        "x ceiling",
        "ceiling msgs/s",
        "ceiling",
    ])];
    for c in cells {
        let (rate, mb) = rate_and_mb(c);
        let d = c.detail.throughput();
        rows.push(Row::Cells(vec![
            c.transport.clone(),
            c.size_bytes.to_string(),
            rate,
            mb,
            thousands(c.lost),
            d.and_then(|d| d.x_ceiling)
                .map_or_else(dash, |x| format!("{x:.2}")),
            d.and_then(|d| d.ceiling_msgs_per_s)
                .map_or_else(dash, |r| thousands(r.round() as u64)),
            d.and_then(|d| d.ceiling.clone()).unwrap_or_else(dash),
        ]));
    }
    Some(Section {
        title: "Throughput".to_string(),
        intro: Some(
            "Unpaced: the publisher sends as fast as it can; the rate is the slowest \
             subscriber's. The ceiling is what the bare mechanism moves between the same two \
             CPUs in the same run, for as long as the publisher ran (at most 2 s): a plain SPSC \
             ring of the same message size for shared memory, bare sockets carrying the same \
             datagrams (with UDP GSO) or the same bytes (TCP) for the network transports; \
             x ceiling is the rate over it."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 1,
            rows,
        }],
    })
}
