//! The report's tables as data: built once from [`Results`], written out by [`crate::text`]
//! (aligned plain text) and [`crate::html`] (HTML tables), so both show the same numbers.

use crate::model::{Cell, Latency, Results, Scenario};
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

fn pingpong(results: &Results) -> Option<Section> {
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
            )
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
        let moved = c.detail.get("floor_moved").and_then(|v| v.as_bool()) == Some(true);
        row.push(
            x_floor(results, c)
                .map(|x| format!("{x:.2}{}", if moved { "*" } else { "" }))
                .unwrap_or_else(dash),
        );
        row.push(ratio_text(c, "median_x_two_line_floor"));
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
    if let Some(x) = cell.detail.get("median_x_floor").and_then(|v| v.as_f64()) {
        return Some(x);
    }
    let floor = floor_of(results, cell)?.latency?.median_ns;
    let median = cell.latency?.median_ns;
    (floor > 0.0).then(|| median / floor)
}

/// An echo cell's send mode (`detail.mode`), `-` when it names none.
pub(crate) fn mode_of(c: &Cell) -> &str {
    match detail_str(c, "mode") {
        "" => "-",
        m => m,
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
    if let Some(x) = cell
        .detail
        .get("median_x_pingpong")
        .and_then(|v| v.as_f64())
    {
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
const ECHO_HEADER: [&str; 13] = [
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
fn echo(results: &Results) -> Option<Section> {
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
                .map(|o| detail_str(o, "note"))
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
        .flat_map(|c| ["batch_interval_us", "echo_batch_interval_us"].map(|k| c.detail.get(k)))
        .flatten()
        .filter_map(|v| v.as_f64())
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

/// A cell's ratio `key` (to its floor under load), starred when the floor moved around it.
fn ratio_text(c: &Cell, key: &str) -> String {
    let moved = c.detail.get("floor_moved").and_then(|v| v.as_bool()) == Some(true);
    match c.detail.get(key).and_then(|v| v.as_f64()) {
        Some(x) => format!("{x:.2}{}", if moved { "*" } else { "" }),
        None => dash(),
    }
}

/// The machine's jitter over a cell's interval: the stalls of 100 us or more its two spinning
/// loops saw per second, and the largest, `3.5/s, 1.21 ms`.
fn stalls_text(c: &Cell) -> String {
    let d = |k: &str| c.detail.get(k).and_then(|v| v.as_f64());
    match (d("stalls_over_100us_per_s"), d("largest_stall_ns")) {
        (Some(per_s), Some(largest)) if largest >= 1e6 => {
            format!("{per_s:.1}/s, {:.2} ms", largest / 1e6)
        }
        (Some(per_s), Some(largest)) => format!("{per_s:.1}/s, {:.0} us", largest / 1e3),
        _ => dash(),
    }
}

fn full_results(results: &Results) -> Option<Section> {
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
                row.push(ratio_text(c, "median_x_floor"));
                row.push(ratio_text(c, "median_x_unloaded"));
                row.push(v[4].clone());
                row.push(ratio_text(c, "p999_x_floor"));
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
            let mut row = vec![detail_str(c, "for_cell").to_string()];
            row.extend(latency_values(c.latency.as_ref(), |l| {
                [l.min_ns, l.mean_ns, l.max_ns, l.median_ns, l.p999_ns]
            }));
            row.push(stalls_text(c));
            let d = |k: &str| c.detail.get(k).and_then(|v| v.as_f64());
            row.push(match (d("floor_before_ns"), d("floor_after_ns")) {
                (Some(a), Some(b)) => format!("{a:.0} / {b:.0} ns"),
                _ => dash(),
            });
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
    let f64_of = |c: &Cell, k: &str| c.detail.get(k).and_then(|v| v.as_f64());
    let stalled = |c: &Cell| -> String {
        let pings = c.latency.map(|l| l.samples).unwrap_or(0);
        match c.detail.get("pings_stalled").and_then(|v| v.as_u64()) {
            Some(n) if pings > 0 => {
                format!("{} ({:.2}%)", thousands(n), 100.0 * n as f64 / pings as f64)
            }
            Some(n) => thousands(n),
            None => dash(),
        }
    };
    let p999 = |c: Option<&Cell>| {
        c.and_then(|c| f64_of(c, "unstalled_p999_ns"))
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
        .filter(|c| c.detail.contains_key("pings_stalled"))
    {
        let floor = floors
            .iter()
            .copied()
            .find(|f| detail_str(f, "for_cell") == c.id);
        let mut row = vec![
            c.id.clone(),
            thousands(c.latency.map(|l| l.samples).unwrap_or(0)),
            stalled(c),
        ];
        row.extend(latency_values(c.latency.as_ref(), |l| [l.p999_ns]));
        row.push(p999(Some(c)));
        row.push(floor.map(stalled).unwrap_or_else(dash));
        row.push(p999(floor));
        row.push(ratio_text(c, "unstalled_p999_x_floor"));
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

fn latency_values<const N: usize>(
    latency: Option<&Latency>,
    pick: impl Fn(&Latency) -> [f64; N],
) -> Vec<String> {
    match latency {
        Some(l) => pick(l).map(us).to_vec(),
        None => vec![dash(); N],
    }
}

fn max_throughput(results: &Results) -> Option<Section> {
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

fn embedded(results: &Results) -> Option<Section> {
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
fn table2_header(size: usize) -> Row {
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
fn table2_row(c: &Cell) -> Row {
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

fn throughput(results: &Results) -> Option<Section> {
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
        let d = |k: &str| c.detail.get(k).and_then(|v| v.as_f64());
        rows.push(Row::Cells(vec![
            c.transport.clone(),
            c.size_bytes.to_string(),
            rate,
            mb,
            thousands(c.lost),
            d("x_ceiling").map_or_else(dash, |x| format!("{x:.2}")),
            d("ceiling_msgs_per_s").map_or_else(dash, |r| thousands(r.round() as u64)),
            c.detail
                .get("ceiling")
                .and_then(|v| v.as_str())
                .map_or_else(dash, str::to_string),
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

/// sysjitter's table: per CPU, the gaps a spinning thread saw per second over each threshold,
/// the largest, and the fraction of the time lost.
fn jitter(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Jitter);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&[
        "CPU",
        "Seconds",
        ">= 1 us /s",
        ">= 10 us /s",
        ">= 100 us /s",
        ">= 1 ms /s",
        "Largest (us)",
        "Time lost (%)",
    ])];
    for c in cells {
        let d = |k: &str| c.detail.get(k).and_then(|v| v.as_f64());
        let per_s = |k: &str| d(k).map(|v| format!("{v:.1}")).unwrap_or_else(dash);
        rows.push(Row::Cells(vec![
            d("cpu").map(|v| format!("{v:.0}")).unwrap_or_else(dash),
            format!("{:.1}", c.seconds),
            per_s("gaps_over_1us_per_s"),
            per_s("gaps_over_10us_per_s"),
            per_s("gaps_over_100us_per_s"),
            per_s("gaps_over_1ms_per_s"),
            d("largest_gap_ns")
                .map(|v| format!("{:.1}", v / 1e3))
                .unwrap_or_else(dash),
            d("lost_fraction")
                .map(|v| format!("{:.4}", v * 100.0))
                .unwrap_or_else(dash),
        ]));
    }
    Some(Section {
        title: "Machine jitter".to_string(),
        intro: Some(
            "A thread per CPU spinning on the clock with nothing else to do (sysjitter's \
             method): every gap between two reads of 1 us or more is time the machine took. A \
             latency tail near these gaps is the machine's, not the messaging's."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 1,
            rows,
        }],
    })
}

/// The failover table: per case, the kills, what was delivered, lost and duplicated, and the
/// gap a kill left next to the stream's own inter-message and inter-delivery times.
fn failover(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Failover);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&[
        "Case",
        "Transport",
        "Rate",
        "Kills",
        "Delivered",
        "Lost",
        "Duplicated",
        "Gap median (us)",
        "Gap max (us)",
        "No kill (us)",
        "Gap x no kill",
        "Interval (us)",
        "Inter-delivery 99.9% (us)",
        "Items stale",
    ])];
    for c in cells {
        let d = |k: &str| c.detail.get(k).and_then(|v| v.as_f64());
        let n = |k: &str| d(k).map(|v| format!("{v:.0}")).unwrap_or_else(dash);
        let micros = |k: &str| d(k).map(us).unwrap_or_else(dash);
        rows.push(Row::Cells(vec![
            case_name(c),
            c.transport.clone(),
            c.rate_requested_msgs_per_s
                .map(rate_label)
                .unwrap_or_else(dash),
            n("kills"),
            n("delivered"),
            c.lost.to_string(),
            n("duplicated"),
            micros("gap_median_ns"),
            micros("gap_max_ns"),
            micros("baseline_gap_median_ns"),
            d("gap_x_baseline")
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(dash),
            micros("interval_ns"),
            micros("interdelivery_p999_ns"),
            n("stale_items"),
        ]));
    }
    Some(Section {
        title: "Failover".to_string(),
        intro: Some(
            "A failover group's two members publish one stream; the member whose copies are \
             being delivered is killed with SIGKILL, then restarted once the other has taken \
             over. The gap is the time from the last message delivered before a kill to the \
             first after it. \"No kill\" is the same run's baseline: at a moment with no kill, \
             the time from the leader's last first copy to the other member's next newer \
             sequence (median of one probe per round), the gap a kill would leave if failing \
             over cost nothing. The interval is the stream's time between messages, and the \
             inter-delivery 99.9th percentile what the stream shows all run long (members \
             send in small bursts). The paths case cuts line A of one publisher sending \
             each datagram on two multicast groups (an nft rule in a network namespace of the \
             run's own); its gap runs from the last message delivered before the cut to the \
             first after, and its \"no kill\" is the same gap at a moment with no cut. The \
             feeds case kills the two feeds of an A/B pair in \
             turn under a distributor and counts every item's updates at a consumer (gap, \
             and items reported stale); the distributors case kills the distributor a \
             consumer of two is using (gap: from the kill to its first update from the \
             other)."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 2,
            rows,
        }],
    })
}

/// A failover cell's case, with its mode when it has one (`distributors (warm)`).
pub(crate) fn case_name(c: &Cell) -> String {
    let case = c.detail.get("case").and_then(|v| v.as_str()).unwrap_or("-");
    match c.detail.get("mode").and_then(|v| v.as_str()) {
        Some(mode) => format!("{case} ({mode})"),
        None => case.to_string(),
    }
}

/// A fan-out cell's system, `peregrine` when none is named.
pub(crate) fn system_of(c: &Cell) -> &str {
    c.system.as_deref().unwrap_or("peregrine")
}

/// `Peregrine`, `NATS`.
pub(crate) fn system_title(system: &str) -> String {
    match system {
        "peregrine" => "Peregrine".to_string(),
        "nats" => "NATS (nats-server)".to_string(),
        other => other.to_string(),
    }
}

fn detail_str<'a>(c: &'a Cell, key: &str) -> &'a str {
    c.detail.get(key).and_then(|v| v.as_str()).unwrap_or("")
}

/// Seed 003's Table 1 (aggregate updates/s delivered by the tier in the Producer 50/50 test),
/// one row per system, with the ratio to NATS when both ran; then every probe of the search.
fn fanout(results: &Results) -> Option<Section> {
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
            let d = |k: &str| c.detail.get(k).map(|v| v.to_string()).unwrap_or_else(dash);
            let overlap = c
                .detail
                .get("overlap")
                .and_then(|v| v.as_f64())
                .map(|o| format!("{:.0}%", o * 100.0))
                .unwrap_or_else(dash);
            let (feed, delivered) = if c.sustained == Some(true) {
                (
                    c.detail
                        .get("feed_updates_per_s")
                        .and_then(|v| v.as_f64())
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
                d("clients"),
                d("items_per_client"),
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
                    .get("feed_updates_per_s")
                    .and_then(|v| v.as_f64())
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
            let why = detail_str(c, "why");
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
                    detail_str(c, "verdict")
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
    let verdict = detail_str(c, "verdict");
    match detail_str(c, "why") {
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

/// Seed 003's Table 2 per system: one-way latency, feed to client through the tier.
fn md_latency(results: &Results) -> Option<Section> {
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
                        match detail_str(c, "why") {
                            "" => detail_str(c, "verdict"),
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

fn rate_and_mb(c: &Cell) -> (String, String) {
    match c.rate_achieved_msgs_per_s {
        Some(r) => (
            thousands(r.round() as u64),
            format!("{:.1}", r * c.size_bytes as f64 / 1e6),
        ),
        None => (dash(), dash()),
    }
}

fn header(names: &[&str]) -> Row {
    Row::Header(names.iter().map(|s| s.to_string()).collect())
}

fn dash() -> String {
    "-".to_string()
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

/// Nanoseconds as microseconds with two decimals: `5421.7` -> `5.42`.
pub(crate) fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

/// A message rate as the seeds write it: `100K`, `1.5M`, `2M`, `730K`, `500`.
pub(crate) fn rate_label(msgs_per_s: f64) -> String {
    let (value, suffix) = if msgs_per_s >= 1e6 {
        (msgs_per_s / 1e6, "M")
    } else if msgs_per_s >= 1e3 {
        (msgs_per_s / 1e3, "K")
    } else {
        (msgs_per_s, "")
    };
    let digits = format!("{value:.2}");
    let digits = digits.trim_end_matches('0').trim_end_matches('.');
    format!("{digits}{suffix}")
}

/// A row label of seed 001's Full Results: `32B/100K`.
pub(crate) fn size_rate_label(cell: &Cell) -> String {
    match cell.rate_requested_msgs_per_s {
        Some(r) => format!("{}B/{}", cell.size_bytes, rate_label(r)),
        None => format!("{}B/unpaced", cell.size_bytes),
    }
}

/// An integer with thousands separators: `1,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
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
    let paths: Vec<Option<&str>> = cells
        .iter()
        .map(|c| c.detail.get("path").and_then(|p| p.as_str()))
        .collect();
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn rate_labels_follow_the_seed() {
        assert_eq!(rate_label(10_000.0), "10K");
        assert_eq!(rate_label(100_000.0), "100K");
        assert_eq!(rate_label(250_000.0), "250K");
        assert_eq!(rate_label(730_000.0), "730K");
        assert_eq!(rate_label(1_000_000.0), "1M");
        assert_eq!(rate_label(1_500_000.0), "1.5M");
        assert_eq!(rate_label(1_250_000.0), "1.25M");
        assert_eq!(rate_label(2_000_000.0), "2M");
        assert_eq!(rate_label(500.0), "500");
    }

    #[test]
    fn thousands_separators_every_three_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(600_000), "600,000");
        assert_eq!(thousands(18_520_000), "18,520,000");
    }

    #[test]
    fn microseconds_have_two_decimals() {
        assert_eq!(us(5421.7), "5.42");
        assert_eq!(us(49.8), "0.05");
        assert_eq!(us(1_840_000.0), "1840.00");
    }

    #[test]
    fn cpu_lists_collapse_into_ranges() {
        assert_eq!(cpu_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(cpu_list(&[3, 0, 2, 6]), "0,2-3,6");
        assert_eq!(cpu_list(&[]), "-");
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let args = ["peregrine", "bench", "--note", "two words", "it's"].map(String::from);
        assert_eq!(
            command_line(&args),
            r"peregrine bench --note 'two words' 'it'\''s'"
        );
    }

    fn load_cell(size: usize, rate: f64, sustained: Option<bool>) -> Cell {
        Cell {
            scenario: Some(Scenario::Load),
            transport: "udp".into(),
            size_bytes: size,
            rate_requested_msgs_per_s: Some(rate),
            sustained,
            ..Cell::default()
        }
    }

    #[test]
    fn cpu_bound_note_names_the_highest_sustained_rate() {
        let cells = [
            load_cell(256, 100e3, Some(true)),
            load_cell(256, 1e6, Some(false)),
            load_cell(256, 500e3, Some(true)),
        ];
        let refs: Vec<&Cell> = cells.iter().collect();
        assert_eq!(
            cpu_bound_note(&refs).as_deref(),
            Some("CPU-bound after 500K msgs/sec")
        );
    }

    #[test]
    fn cpu_bound_note_when_no_rate_was_sustained() {
        let cells = [
            load_cell(2048, 1e6, Some(false)),
            load_cell(2048, 250e3, Some(false)),
        ];
        let refs: Vec<&Cell> = cells.iter().collect();
        assert_eq!(
            cpu_bound_note(&refs).as_deref(),
            Some("CPU-bound below the lowest rate tried (250K msgs/sec)")
        );
    }

    #[test]
    fn no_cpu_bound_note_when_every_rate_held() {
        let cells = [load_cell(32, 1e6, Some(true)), load_cell(32, 2e6, None)];
        let refs: Vec<&Cell> = cells.iter().collect();
        assert_eq!(cpu_bound_note(&refs), None);
    }

    #[test]
    fn transport_title_carries_a_common_path() {
        let mut a = load_cell(32, 1e5, Some(true));
        a.detail.insert("path".into(), "loopback".into());
        let b = a.clone();
        assert_eq!(transport_title("udp", &[&a, &b]), "UDP (loopback)");
        let c = load_cell(32, 1e5, Some(true));
        assert_eq!(transport_title("udp", &[&a, &c]), "UDP");
        assert_eq!(transport_title("ipc", &[&c]), "IPC (shared memory)");
    }

    fn latency(median_us: f64) -> Latency {
        let ns = median_us * 1000.0;
        Latency {
            samples: 2000,
            min_ns: ns * 0.5,
            mean_ns: ns * 1.1,
            p1_ns: ns * 0.6,
            p25_ns: ns * 0.9,
            median_ns: ns,
            p75_ns: ns * 1.2,
            p90_ns: ns * 1.5,
            p99_ns: ns * 2.0,
            p999_ns: ns * 4.0,
            p9999_ns: ns * 8.0,
            max_ns: ns * 10.0,
            stddev_ns: ns * 0.3,
        }
    }

    /// An echo cell as `bench echo` records it.
    pub(crate) fn echo_cell(transport: &str, mode: &str, size: usize, median_us: f64) -> Cell {
        let mut c = Cell {
            id: format!("echo-{transport}-{mode}-{size}B"),
            scenario: Some(Scenario::Echo),
            transport: transport.into(),
            size_bytes: size,
            latency: Some(latency(median_us)),
            ..Cell::default()
        };
        c.detail.insert("mode".into(), mode.into());
        if transport == "ipc" {
            c.detail
                .insert("note".into(), "ipc has no send modes: one path".into());
        } else if mode == "normal" {
            c.detail.insert("batch_interval_us".into(), 100.0.into());
            c.detail
                .insert("echo_batch_interval_us".into(), 100.0.into());
        }
        c
    }

    fn pingpong_cell(transport: &str, size: usize, median_us: f64) -> Cell {
        Cell {
            id: format!("pingpong-{transport}-{size}B"),
            scenario: Some(Scenario::Pingpong),
            transport: transport.into(),
            size_bytes: size,
            latency: Some(latency(median_us)),
            ..Cell::default()
        }
    }

    pub(crate) fn results_of(cells: Vec<Cell>) -> Results {
        Results {
            format: crate::model::FORMAT_VERSION,
            peregrine_version: "test".into(),
            started_utc: String::new(),
            command_line: vec![],
            machine: Default::default(),
            cells,
        }
    }

    fn cells_rows(table: &Table) -> Vec<Vec<String>> {
        table
            .rows
            .iter()
            .filter_map(|r| match r {
                Row::Cells(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn echo_rows_go_by_transport_mode_and_size_with_the_ratio_to_the_pingpong() {
        let mut urgent = echo_cell("udp", "urgent", 28, 8.0);
        urgent
            .detail
            .insert("median_x_pingpong".into(), 1.05.into());
        let results = results_of(vec![
            pingpong_cell("udp", 28, 7.5),
            pingpong_cell("udp", 1460, 10.0),
            echo_cell("udp", "normal", 1460, 120.0),
            echo_cell("udp", "normal", 28, 110.0),
            urgent,
            pingpong_cell("ipc", 28, 0.25),
            echo_cell("ipc", "normal", 28, 0.3),
            echo_cell("ipc", "urgent", 28, 0.3),
        ]);
        let sections = sections(&results);
        let echo = sections
            .iter()
            .find(|s| s.title == "Echo (half round trip), microseconds")
            .expect("an echo section");
        let intro = echo.intro.as_deref().unwrap();
        assert!(intro.contains("100 us in this run"), "{intro}");
        let table = &echo.tables[0];
        assert_eq!(table.rows[0], header(&ECHO_HEADER));
        let rows = cells_rows(table);
        let keys: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("udp", "normal", "28"),
                ("udp", "normal", "1460"),
                ("udp", "urgent", "28"),
                ("ipc", "normal", "28"),
                ("ipc", "urgent", "28"),
            ]
        );
        // samples, min, 25th, median, 75th, 99th, 99.9th, max, std dev, ratio.
        assert_eq!(
            rows[0][3..],
            [
                "2,000", "55.00", "99.00", "110.00", "132.00", "220.00", "440.00", "1100.00",
                "33.00", "14.67"
            ]
        );
        // The ratio recorded with the cell wins over one computed from the report's cells.
        assert_eq!(rows[2][12], "1.05");
        assert_eq!(rows[3][12], "1.20");
        // ipc's note, once, after its rows.
        let notes: Vec<&Row> = table
            .rows
            .iter()
            .filter(|r| matches!(r, Row::Note(_)))
            .collect();
        assert_eq!(
            notes,
            [&Row::Note("ipc has no send modes: one path".into())]
        );
        assert_eq!(table.rows.last(), Some(notes[0]));
        // The ping-pong table keeps its own cells only.
        let pingpong = sections
            .iter()
            .find(|s| s.title.starts_with("Ping-pong latency"))
            .unwrap();
        assert_eq!(cells_rows(&pingpong.tables[0]).len(), 3);
    }

    /// An ipc ping-pong row ends with its ratios to the one-line and the two-line floor of
    /// its moments, both starred when the floor moved during the run.
    #[test]
    fn an_ipc_pingpong_row_shows_both_floor_ratios() {
        let mut c = pingpong_cell("ipc", 32, 0.16);
        let d = &mut c.detail;
        d.insert("median_x_floor".into(), 1.506.into());
        d.insert("median_x_two_line_floor".into(), 1.09.into());
        d.insert("floor_moved".into(), true.into());
        let results = results_of(vec![c]);
        let pp = sections(&results)
            .into_iter()
            .find(|s| s.title.starts_with("Ping-pong"))
            .unwrap();
        let row = &cells_rows(&pp.tables[0])[0];
        assert_eq!(row[row.len() - 2..], ["1.51*", "1.09*"]);
    }

    #[test]
    fn no_echo_section_without_echo_cells() {
        let results = results_of(vec![pingpong_cell("udp", 28, 7.5)]);
        assert!(sections(&results)
            .iter()
            .all(|s| !s.title.starts_with("Echo")));
    }

    #[test]
    fn a_load_row_shows_its_floor_and_unloaded_ratios_starred_when_the_floor_moved_its_stalls_and_its_unstalled_tail(
    ) {
        let mut load = Cell {
            id: "load-ipc-32B-1M".into(),
            scenario: Some(Scenario::Load),
            transport: "ipc".into(),
            size_bytes: 32,
            rate_requested_msgs_per_s: Some(1e6),
            sustained: Some(true),
            latency: Some(latency(0.3)),
            ..Cell::default()
        };
        let d = &mut load.detail;
        d.insert("median_x_floor".into(), 1.172.into());
        d.insert("median_x_unloaded".into(), 1.104.into());
        d.insert("p999_x_floor".into(), 0.259.into());
        d.insert("floor_moved".into(), true.into());
        d.insert("stalls_over_100us_per_s".into(), 11.5.into());
        d.insert("largest_stall_ns".into(), 4_074_884.4.into());
        d.insert("pings_stalled".into(), 30.into());
        d.insert("unstalled_p999_ns".into(), 15_720.0.into());
        d.insert("unstalled_p999_x_floor".into(), 2.74.into());
        let mut floor = Cell {
            id: "floorload-load-ipc-32B-1M".into(),
            scenario: Some(Scenario::FloorLoad),
            transport: "cacheline".into(),
            size_bytes: 8,
            rate_requested_msgs_per_s: Some(1e6),
            latency: Some(latency(0.25)),
            ..Cell::default()
        };
        let d = &mut floor.detail;
        d.insert("for_cell".into(), "load-ipc-32B-1M".into());
        d.insert("floor_before_ns".into(), 175.0.into());
        d.insert("floor_after_ns".into(), 180.0.into());
        d.insert("stalls_over_100us_per_s".into(), 5.0.into());
        d.insert("largest_stall_ns".into(), 650_000.0.into());
        d.insert("pings_stalled".into(), 4.into());
        d.insert("unstalled_p999_ns".into(), 5_740.0.into());
        let results = results_of(vec![floor, load]);
        let full = sections(&results)
            .into_iter()
            .find(|s| s.title == "Full Results")
            .unwrap();
        let row = &cells_rows(&full.tables[0])[0];
        assert_eq!(
            row[1..],
            [
                "0.15",
                "0.33",
                "3.00",
                "0.30",
                "1.17*",
                "1.10*",
                "1.20",
                "0.26*",
                "11.5/s, 4.07 ms",
                "0.09"
            ]
        );
        let floors = &full.tables[full.tables.len() - 2];
        assert!(floors
            .caption
            .as_deref()
            .unwrap()
            .starts_with("Machine floor under load"));
        assert_eq!(
            cells_rows(floors)[0],
            [
                "load-ipc-32B-1M",
                "0.12",
                "0.28",
                "2.50",
                "0.25",
                "1.00",
                "5.0/s, 650 us",
                "175 / 180 ns"
            ]
        );
        // The tails apart from the stalls, beside the floor under load's.
        let tails = full.tables.last().unwrap();
        assert!(tails
            .caption
            .as_deref()
            .unwrap()
            .starts_with("Tails apart from the machine's stalls"));
        assert_eq!(
            cells_rows(tails)[0],
            [
                "load-ipc-32B-1M",
                "2,000",
                "30 (1.50%)",
                "1.20",
                "15.72",
                "4 (0.20%)",
                "5.74",
                "2.74*"
            ]
        );
    }
}
