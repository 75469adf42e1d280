//! The report's tables as data: built once from [`Results`], written out by [`crate::text`]
//! (aligned plain text) and [`crate::html`] (HTML tables), so both show the same numbers.

mod bypass;
mod echo;
mod embedded;
mod failover;
mod fanout;
mod format;
mod jitter;
mod load;
mod md_latency;
mod pingpong;
#[cfg(test)]
pub(crate) mod tests;
mod throughput;

pub(crate) use echo::{echo_cells, mode_of};
pub(crate) use embedded::embedded_groups;
pub(crate) use failover::case_name;
pub(crate) use fanout::system_title;
pub(crate) use format::rate_label;
pub use format::thousands;
pub(crate) use md_latency::md_latency_groups;

use self::bypass::bypass;
pub(crate) use self::bypass::{across, across_namespaces, row_size};
use self::echo::echo;
use self::embedded::embedded;
use self::failover::failover;
use self::fanout::fanout;
use self::jitter::jitter;
use self::load::{full_results, max_throughput};
use self::md_latency::md_latency;
use self::pingpong::pingpong;
use self::throughput::throughput;
use crate::model::{Cell, Results, Scenario};
use std::cmp::Ordering;

/// One titled part of the report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Section {
    pub title: String,
    /// A sentence under the title (units, what the numbers mean).
    pub intro: Option<String>,
    pub tables: Vec<Table>,
}

/// A table whose header may repeat inside it, as in seed 001's "Full Results" (one header per
/// message size).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    pub caption: Option<String>,
    /// How many leading columns hold labels (left-aligned); the rest hold numbers.
    pub left: usize,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Row {
    Header(Vec<String>),
    Cells(Vec<String>),
    /// A line inside the table, under the number columns: "CPU-bound after 1M msgs/sec".
    Note(String),
}

/// The machine block: (label, value) pairs, in display order.
pub(crate) fn machine(results: &Results) -> Vec<(&'static str, String)> {
    let m = &results.machine;
    let mut cpus = format!(
        "{} online, allowed {}",
        m.cpus_online,
        cpu_list(&m.cpus_allowed)
    );
    if !m.cpus_used.is_empty() {
        cpus.push_str(&format!(", pinned to {}", m.cpus_used));
    }
    vec![
        ("peregrine", results.peregrine_version.clone()),
        ("started", results.started_utc.clone()),
        ("host", m.hostname.clone()),
        ("cpu", m.cpu_model.clone()),
        ("cpus", cpus),
        (
            "memory",
            format!("{:.1} GiB", m.memory_bytes as f64 / (1u64 << 30) as f64),
        ),
        ("kernel", m.kernel.clone()),
        ("clocksource", m.clocksource.clone()),
        ("clock", m.clock.clone()),
        ("command", command_line(&results.command_line)),
    ]
}

/// Every section that has cells, in report order.
pub(crate) fn sections(results: &Results) -> Vec<Section> {
    [
        jitter(results),
        pingpong(results),
        bypass(results),
        echo(results),
        full_results(results),
        max_throughput(results),
        embedded(results),
        throughput(results),
        fanout(results),
        md_latency(results),
        failover(results),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn of(results: &Results, scenario: Scenario) -> Vec<&Cell> {
    results
        .cells
        .iter()
        .filter(|c| c.scenario == Some(scenario))
        .collect()
}

/// Transports in the order they first appear.
pub(crate) fn transports<'a>(cells: &[&'a Cell]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for c in cells {
        if !out.contains(&c.transport.as_str()) {
            out.push(&c.transport);
        }
    }
    out
}

/// Sizes, ascending, without repeats.
pub(crate) fn sizes(cells: &[&Cell]) -> Vec<usize> {
    let mut out: Vec<usize> = cells.iter().map(|c| c.size_bytes).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Orders by requested rate, unpaced cells last.
pub(crate) fn by_rate(a: &&Cell, b: &&Cell) -> Ordering {
    match (a.rate_requested_msgs_per_s, b.rate_requested_msgs_per_s) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// A cell shown as a measurement: not one that failed to hold its rate.
pub(crate) fn shown(c: &Cell) -> bool {
    c.sustained != Some(false)
}

/// The name of a scenario as in `results.json`.
pub(crate) fn scenario_name(s: Option<Scenario>) -> &'static str {
    match s {
        Some(Scenario::Floor) => "floor",
        Some(Scenario::Raw) => "raw",
        Some(Scenario::Pingpong) => "pingpong",
        Some(Scenario::Echo) => "echo",
        Some(Scenario::Load) => "load",
        Some(Scenario::MaxProbe) => "max_probe",
        Some(Scenario::FloorLoad) => "floor_load",
        Some(Scenario::Max) => "max",
        Some(Scenario::Embedded) => "embedded",
        Some(Scenario::Throughput) => "throughput",
        Some(Scenario::FanoutProbe) => "fanout_probe",
        Some(Scenario::Fanout) => "fanout",
        Some(Scenario::MdLatency) => "md_latency",
        Some(Scenario::Jitter) => "jitter",
        Some(Scenario::Failover) => "failover",
        None => "-",
    }
}

/// A transport's title: `UDP (loopback)`. The part in brackets is the cells' `detail.path`
/// when all of them name the same one.
pub(crate) fn transport_title(transport: &str, cells: &[&Cell]) -> String {
    let name = match transport {
        "ipc" => "IPC (shared memory)".to_string(),
        "udp" => "UDP".to_string(),
        "mcast" => "UDP multicast".to_string(),
        "tcp" => "TCP".to_string(),
        "cacheline" => "Cache line".to_string(),
        other => other.to_uppercase(),
    };
    let paths: Vec<Option<&str>> = cells.iter().map(|c| c.detail.path()).collect();
    match paths.first() {
        Some(Some(first)) if paths.iter().all(|p| p == &Some(*first)) => {
            format!("{name} ({first})")
        }
        _ => name,
    }
}

/// CPU numbers as ranges: `0-3,6`.
fn cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(",")
    }
}

/// The command line as a shell would take it back: arguments with spaces or quotes are
/// single-quoted.
fn command_line(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
