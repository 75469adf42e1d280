//! Seed 003's Table 1: the updates per second a distribution tier delivers to N clients, the
//! probes of the search with their verdicts, and the findings that decided them.

use super::format::{dash, header, rate_label, thousands, us};
use super::{of, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

/// A fan-out cell's system, `peregrine` when none is named.
pub(crate) fn system_of(c: &Cell) -> &str {
    c.system.as_deref().unwrap_or("peregrine")
}

/// A fan-out probe's verdict, empty when it has none.
pub(super) fn verdict_of(c: &Cell) -> &str {
    c.detail
        .fanout()
        .and_then(|d| d.verdict.as_deref())
        .unwrap_or("")
}

/// The findings that decided a probe's verdict (`; ` between them), empty when none.
pub(super) fn why_of(c: &Cell) -> &str {
    c.detail
        .fanout()
        .and_then(|d| d.why.as_deref())
        .unwrap_or("")
}

/// `Peregrine`, `NATS`.
pub(crate) fn system_title(system: &str) -> String {
    match system {
        "peregrine" => "Peregrine".to_string(),
        "nats" => "NATS (nats-server)".to_string(),
        other => other.to_string(),
    }
}

/// Seed 003's Table 1 (aggregate updates/s delivered by the tier in the Producer 50/50 test),
/// one row per system, with the ratio to NATS when both ran; then every probe of the search.
pub(super) fn fanout(results: &Results) -> Option<Section> {
    let best = of(results, Scenario::Fanout);
    let probes = of(results, Scenario::FanoutProbe);
    if best.is_empty() && probes.is_empty() {
        return None;
    }
    let nats = best
        .iter()
        .find(|c| system_of(c) == "nats")
        .and_then(|c| c.rate_achieved_msgs_per_s);
    let mut tables = Vec::new();
    if !best.is_empty() {
        let mut rows = vec![header(&[
            "System",
            "Clients",
            "Items/client",
            "Shared",
            "Size (B)",
            "Feed rate (updates/sec)",
            "Throughput rate (updates/sec)",
            "x NATS",
            "Lost",
            "CPU s (feed / tier / clients)",
        ])];
        for c in &best {
            let d = c.detail.fanout().cloned().unwrap_or_default();
            let count = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(dash);
            let overlap = d
                .overlap
                .map(|o| format!("{:.0}%", o * 100.0))
                .unwrap_or_else(dash);
            let (feed, delivered) = if c.sustained == Some(true) {
                (
                    d.feed_updates_per_s
                        .map(|r| thousands(r.round() as u64))
                        .unwrap_or_else(dash),
                    c.rate_achieved_msgs_per_s
                        .map(|r| thousands(r.round() as u64))
                        .unwrap_or_else(dash),
                )
            } else {
                ("none sustained".to_string(), dash())
            };
            let ratio = match (c.rate_achieved_msgs_per_s, nats) {
                (Some(a), Some(n)) if n > 0.0 && c.sustained == Some(true) => {
                    format!("{:.2}", a / n)
                }
                _ => dash(),
            };
            let cpu = |k: &str| c.cpu_s.get(k).map(|v| format!("{v:.2}"));
            let tier = cpu("distributor").or_else(|| cpu("nats-server"));
            let cpu = match (cpu("feed"), tier, cpu("clients")) {
                (Some(f), Some(t), Some(cl)) => format!("{f} / {t} / {cl}"),
                _ => dash(),
            };
            rows.push(Row::Cells(vec![
                system_title(system_of(c)),
                count(d.clients),
                count(d.items_per_client),
                overlap,
                c.size_bytes.to_string(),
                feed,
                delivered,
                ratio,
                if c.sustained == Some(true) {
                    thousands(c.lost)
                } else {
                    dash()
                },
                cpu,
            ]));
        }
        tables.push(Table {
            caption: Some("Highest sustained rate".to_string()),
            left: 1,
            rows,
        });
    }
    if !probes.is_empty() {
        let mut rows = vec![header(&[
            "System",
            "Feed rate asked",
            "Feed sent/sec",
            "Delivered updates/sec",
            "Lost",
            "Mean latency (us)",
            "Max latency (ms)",
            "Verdict",
        ])];
        for c in &probes {
            rows.push(Row::Cells(vec![
                system_title(system_of(c)),
                c.rate_requested_msgs_per_s
                    .map(rate_label)
                    .unwrap_or_else(dash),
                c.detail
                    .fanout()
                    .and_then(|d| d.feed_updates_per_s)
                    .map(|r| thousands(r.round() as u64))
                    .unwrap_or_else(dash),
                c.rate_achieved_msgs_per_s
                    .map(|r| thousands(r.round() as u64))
                    .unwrap_or_else(dash),
                thousands(c.lost),
                c.latency.map(|l| us(l.mean_ns)).unwrap_or_else(dash),
                c.latency
                    .map(|l| format!("{:.1}", l.max_ns / 1e6))
                    .unwrap_or_else(dash),
                verdict_summary(c),
            ]));
        }
        // What decided each verdict, one finding a line under the table: per-client detail
        // in the Verdict column made every row several screens wide.
        for c in &probes {
            let why = why_of(c);
            if why.is_empty() {
                continue;
            }
            let rate = c
                .rate_requested_msgs_per_s
                .map(rate_label)
                .unwrap_or_else(dash);
            for finding in why.split("; ") {
                rows.push(Row::Note(format!(
                    "{} at {rate}, {}: {finding}",
                    system_title(system_of(c)),
                    verdict_of(c)
                )));
            }
        }
        tables.push(Table {
            caption: Some("Probes, in the order they ran".to_string()),
            left: 1,
            rows,
        });
    }
    Some(Section {
        title: "Market data fan-out (Producer 50/50)".to_string(),
        intro: Some(
            "A feed, a distribution tier and its client processes on one host; the feed rate \
             is raised until an update is lost, a client lags or the tier refuses. Throughput \
             is the updates per second delivered to all clients together; every client's \
             items are checked against what the feed sent."
                .to_string(),
        ),
        tables,
    })
}

/// A probe's verdict with how many findings decided it (listed under the probes table).
fn verdict_summary(c: &Cell) -> String {
    let verdict = verdict_of(c);
    match why_of(c) {
        "" => verdict.to_string(),
        why => {
            let n = why.split("; ").count();
            format!(
                "{verdict} ({n} finding{}, below)",
                if n == 1 { "" } else { "s" }
            )
        }
    }
}
