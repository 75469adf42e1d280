//! The text report: seed 001's Full Results shape, the other sections, and values formatted
//! from the sample's cells.

mod common;

use common::{cells, rate_label, sample, thousands, transports, us};
use peregrine_report::model::{Cell, Detail, FanoutDetail, JitterDetail, Results, Scenario};
use peregrine_report::text;

/// The lines of the section titled `title` (title and underline excluded), up to the next
/// section; panics when the section is absent.
fn section<'a>(report: &'a str, title: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = report.lines().collect();
    let is_title = |i: usize| {
        lines
            .get(i + 1)
            .is_some_and(|next| !next.is_empty() && next.chars().all(|c| c == '-'))
    };
    let start = (0..lines.len())
        .find(|&i| lines[i] == title && is_title(i))
        .unwrap_or_else(|| panic!("no section {title:?} in:\n{report}"));
    let end = (start + 2..lines.len())
        .find(|&i| is_title(i))
        .unwrap_or(lines.len());
    lines[start + 2..end].to_vec()
}

fn has_section(report: &str, title: &str) -> bool {
    report
        .lines()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0] == title && w[1].chars().all(|c| c == '-') && !w[1].is_empty())
}

fn tokens(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The line whose first token is `label`, among `lines`.
fn row<'a>(lines: &[&'a str], label: &str) -> Option<&'a str> {
    lines
        .iter()
        .copied()
        .find(|l| l.split_whitespace().next() == Some(label))
}

fn label(c: &Cell) -> String {
    format!(
        "{}B/{}",
        c.size_bytes,
        rate_label(c.rate_requested_msgs_per_s.expect("load cells have a rate"))
    )
}

/// The seed's columns, with the ratio to the floor under load after the median and the 99.9th,
/// the ratio to the unloaded ping-pong after the median, and the machine's stalls over the
/// cell's interval next to the 99.9th.
const SEED_HEADER: [&str; 17] = [
    "Message",
    "Size/Rate",
    "Min",
    "Avg",
    "Max",
    "Median",
    "x",
    "floor",
    "x",
    "unloaded",
    "99.9th",
    "%",
    "x",
    "floor",
    "Stalls",
    "Std.",
    "Dev",
];

/// Full Results lines of one transport: from its title to the coordinated-omission caption.
fn full_block<'a>(full: &[&'a str], transport_title_prefix: &str) -> Vec<&'a str> {
    let start = full
        .iter()
        .position(|l| l.starts_with(transport_title_prefix) && l.ends_with(", load with pings"))
        .unwrap_or_else(|| panic!("no Full Results title for {transport_title_prefix}"));
    let end = (start + 1..full.len())
        .find(|&i| full[i].starts_with("Corrected for coordinated omission"))
        .expect("each transport has a corrected table");
    full[start + 1..end].to_vec()
}

/// The corrected table of one transport: from its caption to the next blank line.
fn corrected_block<'a>(full: &[&'a str], transport_title_prefix: &str) -> Vec<&'a str> {
    let caption = format!(
        "Corrected for coordinated omission (from scheduled send time): {transport_title_prefix}"
    );
    let start = full
        .iter()
        .position(|l| l.starts_with(&caption))
        .unwrap_or_else(|| panic!("no corrected table for {transport_title_prefix}"));
    let end = (start + 1..full.len())
        .find(|&i| full[i].is_empty())
        .unwrap_or(full.len());
    full[start + 1..end].to_vec()
}

fn title_prefix(transport: &str) -> &'static str {
    match transport {
        "ipc" => "IPC",
        "udp" => "UDP",
        other => panic!("the sample has no {other} load cells"),
    }
}

#[test]
fn header_block_names_machine_command_and_start() {
    let r = sample();
    let t = text(&r);
    let head: Vec<&str> = t.lines().take_while(|l| !l.is_empty()).collect();
    let head = head.join("\n");
    for needle in [
        &r.machine.cpu_model,
        &r.machine.kernel,
        &r.machine.clocksource,
        &r.machine.clock,
        &r.started_utc,
        &r.machine.cpus_online.to_string(),
    ] {
        assert!(head.contains(needle.as_str()), "{needle:?} not in:\n{head}");
    }
    assert!(
        head.contains(&r.command_line.join(" ")),
        "the command line is shown:\n{head}"
    );
}

#[test]
fn full_results_have_one_seed_header_per_transport_and_size() {
    let r = sample();
    let t = text(&r);
    let full = section(&t, "Full Results");
    let load = cells(&r, Scenario::Load);
    let mut groups: Vec<(String, usize)> = load
        .iter()
        .map(|c| (c.transport.clone(), c.size_bytes))
        .collect();
    groups.sort();
    groups.dedup();
    let headers = full.iter().filter(|l| tokens(l) == SEED_HEADER).count();
    assert_eq!(headers, groups.len(), "{}", full.join("\n"));
    let titles = full
        .iter()
        .filter(|l| l.ends_with(", load with pings"))
        .count();
    assert_eq!(titles, transports(&load).len());
    // A transport's title carries the path its cells name in `detail.path`.
    let udp_paths: Vec<Option<&str>> = load
        .iter()
        .filter(|c| c.transport == "udp")
        .map(|c| c.detail.path())
        .collect();
    let expected = match udp_paths.first() {
        Some(Some(path)) if udp_paths.iter().all(|p| p == &Some(*path)) => {
            format!("UDP ({path}), load with pings")
        }
        _ => "UDP, load with pings".to_string(),
    };
    assert!(full.contains(&expected.as_str()), "no {expected:?}");
}

#[test]
fn full_results_rows_are_the_sustained_cells_with_seed_labels() {
    let r = sample();
    let t = text(&r);
    let full = section(&t, "Full Results");
    let load = cells(&r, Scenario::Load);
    for transport in transports(&load) {
        let block = full_block(&full, title_prefix(&transport));
        let ours: Vec<&Cell> = load
            .iter()
            .copied()
            .filter(|c| c.transport == transport)
            .collect();
        for c in &ours {
            let present = row(&block, &label(c)).is_some();
            assert_eq!(
                present,
                c.sustained != Some(false),
                "{} {}: row shown iff sustained",
                transport,
                label(c)
            );
        }
        // Rows of a size come after that size's header, rates ascending.
        let labels: Vec<&str> = block
            .iter()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|t| t.contains("B/"))
            .collect();
        let mut expected: Vec<&Cell> = ours
            .iter()
            .copied()
            .filter(|c| c.sustained != Some(false))
            .collect();
        expected.sort_by(|a, b| {
            (a.size_bytes, a.rate_requested_msgs_per_s.unwrap_or(0.0))
                .partial_cmp(&(b.size_bytes, b.rate_requested_msgs_per_s.unwrap_or(0.0)))
                .unwrap()
        });
        let expected: Vec<String> = expected.iter().map(|c| label(c)).collect();
        assert_eq!(labels, expected);
    }
}

#[test]
fn cpu_bound_line_follows_the_size_that_could_not_keep_up() {
    let r = sample();
    let t = text(&r);
    let full = section(&t, "Full Results");
    let load = cells(&r, Scenario::Load);
    let failed: Vec<&Cell> = load
        .iter()
        .copied()
        .filter(|c| c.sustained == Some(false))
        .collect();
    assert!(!failed.is_empty());
    let notes: Vec<&str> = full
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("CPU-bound"))
        .collect();
    let mut failed_groups: Vec<(String, usize)> = failed
        .iter()
        .map(|c| (c.transport.clone(), c.size_bytes))
        .collect();
    failed_groups.dedup();
    assert_eq!(notes.len(), failed_groups.len(), "{notes:?}");
    for (transport, size) in failed_groups {
        let highest = load
            .iter()
            .filter(|c| {
                c.transport == transport && c.size_bytes == size && c.sustained != Some(false)
            })
            .filter_map(|c| c.rate_requested_msgs_per_s)
            .fold(f64::NEG_INFINITY, f64::max);
        let expected = format!("CPU-bound after {} msgs/sec", rate_label(highest));
        let block = full_block(&full, title_prefix(&transport));
        // The note comes right after the last row of that size.
        let last_row = block
            .iter()
            .rposition(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|t| t.starts_with(&format!("{size}B/")))
            })
            .expect("the size has a sustained row");
        assert_eq!(block[last_row + 1].trim(), expected);
    }
    // The sample's one failure: udp 256B at 1M after 100K held.
    assert!(notes.contains(&"CPU-bound after 100K msgs/sec"));
}

fn load_cell<'a>(r: &'a Results, transport: &str, size: usize, rate: f64) -> &'a Cell {
    r.cells
        .iter()
        .find(|c| {
            c.scenario == Some(Scenario::Load)
                && c.transport == transport
                && c.size_bytes == size
                && c.rate_requested_msgs_per_s == Some(rate)
        })
        .unwrap_or_else(|| panic!("the sample has load {transport} {size}B at {rate}"))
}

#[test]
fn a_known_cell_is_printed_in_microseconds_with_two_decimals() {
    let r = sample();
    let t = text(&r);
    let full = section(&t, "Full Results");
    let c = load_cell(&r, "udp", 32, 100_000.0);
    let l = c.latency.expect("latency");
    let block = full_block(&full, "UDP");
    let line = row(&block, "32B/100K").expect("a 32B/100K row");
    // The sample's cells carry no floor under load, no unloaded reference and no stalls:
    // dashes.
    let expected: Vec<String> = vec![
        us(l.min_ns),
        us(l.mean_ns),
        us(l.max_ns),
        us(l.median_ns),
        "-".into(),
        "-".into(),
        us(l.p999_ns),
        "-".into(),
        "-".into(),
        us(l.stddev_ns),
    ];
    assert_eq!(tokens(line)[1..], expected[..], "{line}");

    let corrected = corrected_block(&full, "UDP");
    let line = row(&corrected, "32B/100K").expect("a corrected 32B/100K row");
    let s = c.latency_from_schedule.expect("latency from schedule");
    let mut expected: Vec<String> = [s.median_ns, s.p99_ns, s.p999_ns, s.max_ns]
        .map(us)
        .to_vec();
    expected.push(thousands(
        c.rate_achieved_msgs_per_s.expect("achieved").round() as u64,
    ));
    expected.push(thousands(c.lost));
    expected.push(thousands(c.refused));
    assert_eq!(tokens(line)[1..], expected[..], "{line}");
}

#[test]
fn full_results_columns_are_aligned() {
    let r = sample();
    let t = text(&r);
    let full = section(&t, "Full Results");
    let block = full_block(&full, "UDP");
    let widths: Vec<usize> = block
        .iter()
        .filter(|l| !l.trim_start().starts_with("CPU-bound") && !l.is_empty())
        .map(|l| l.chars().count())
        .collect();
    assert!(widths.len() > 2);
    assert!(
        widths.iter().all(|w| *w == widths[0]),
        "right-aligned columns end together:\n{}",
        block.join("\n")
    );
}

#[test]
fn pingpong_rows_carry_the_ratio_to_their_floor() {
    let r = sample();
    let t = text(&r);
    let pp = section(&t, "Ping-pong latency (half round trip), microseconds");
    let median = |scenario: Scenario, transport: &str| {
        cells(&r, scenario)
            .into_iter()
            .find(|c| c.transport == transport)
            .and_then(|c| c.latency)
            .map(|l| l.median_ns)
            .unwrap_or_else(|| panic!("no {scenario:?} {transport}"))
    };
    let floor = cells(&r, Scenario::Floor)[0].latency.unwrap().median_ns;
    let find = |test: &str, transport: &str| {
        pp.iter()
            .copied()
            .find(|l| tokens(l).first() == Some(&test) && tokens(l).get(1) == Some(&transport))
            .unwrap_or_else(|| panic!("no {test} {transport} row in\n{}", pp.join("\n")))
    };
    // The x floor column, then x 2-line (the sample's cells carry no two-line floor: a dash).
    let ratios = |line: &str| -> (String, String) {
        let t = tokens(line);
        (t[t.len() - 2].to_string(), t[t.len() - 1].to_string())
    };
    let ipc = find("pingpong", "ipc");
    let ratio = median(Scenario::Pingpong, "ipc") / floor;
    assert_eq!(ratios(ipc), (format!("{ratio:.2}"), "-".to_string()));
    let udp = find("pingpong", "udp");
    let ratio = median(Scenario::Pingpong, "udp") / median(Scenario::Raw, "udp");
    assert_eq!(ratios(udp), (format!("{ratio:.2}"), "-".to_string()));
    // The floors themselves have no ratio.
    let none = ("-".to_string(), "-".to_string());
    assert_eq!(ratios(find("floor", "cacheline")), none);
    assert_eq!(ratios(find("raw", "udp")), none);
    let header = tokens(pp.iter().find(|l| l.starts_with("test")).unwrap()).join(" ");
    assert_eq!(
        header,
        "test transport size samples Min Avg Median 99th 99.9th Max Std Dev x floor x 2-line"
    );
}

#[test]
fn max_and_throughput_rows_show_rate_and_megabytes() {
    let r = sample();
    let t = text(&r);
    let max = section(&t, "Maximum sustainable throughput");
    for c in cells(&r, Scenario::Max) {
        let rate = c.rate_achieved_msgs_per_s.unwrap();
        let expected = [
            c.transport.clone(),
            c.size_bytes.to_string(),
            thousands(rate.round() as u64),
            format!("{:.1}", rate * c.size_bytes as f64 / 1e6),
        ];
        assert!(
            max.iter().any(|l| tokens(l) == expected),
            "{expected:?} not in\n{}",
            max.join("\n")
        );
    }
    let tp = section(&t, "Throughput");
    for c in cells(&r, Scenario::Throughput) {
        let rate = c.rate_achieved_msgs_per_s.unwrap();
        let expected = [
            c.transport.clone(),
            c.size_bytes.to_string(),
            thousands(rate.round() as u64),
            format!("{:.1}", rate * c.size_bytes as f64 / 1e6),
            thousands(c.lost),
            // The sample's cells predate ceilings: the ceiling's columns are empty.
            "-".to_string(),
            "-".to_string(),
            "-".to_string(),
        ];
        assert!(tp.iter().any(|l| tokens(l) == expected), "{expected:?}");
    }
}

#[test]
fn a_throughput_row_shows_its_ceiling_and_the_rate_over_it() {
    let mut r = sample();
    let c = r
        .cells
        .iter_mut()
        .find(|c| c.scenario == Some(Scenario::Throughput))
        .expect("the sample has a throughput cell");
    c.rate_achieved_msgs_per_s = Some(35_300_000.0);
    let d = c.detail.throughput_mut();
    d.ceiling = Some("bare sockets, GSO".into());
    d.ceiling_msgs_per_s = Some(45_360_000.0);
    d.x_ceiling = Some(0.778);
    let (transport, size) = (c.transport.clone(), c.size_bytes);
    let t = text(&r);
    let tp = section(&t, "Throughput");
    let row = tp
        .iter()
        .find(|l| tokens(l).get(2) == Some(&"35,300,000"))
        .unwrap_or_else(|| panic!("no row of 35,300,000 msgs/s in\n{}", tp.join("\n")));
    assert_eq!(
        tokens(row)[..2],
        [transport.as_str(), size.to_string().as_str()]
    );
    assert_eq!(
        tokens(row)[5..],
        ["0.78", "45,360,000", "bare", "sockets,", "GSO"]
    );
}

#[test]
fn embedded_table_follows_seed_003_table_2() {
    let r = sample();
    let t = text(&r);
    let emb = section(&t, "One-way latency from embedded timestamps");
    let all = emb.join("\n");
    let size = cells(&r, Scenario::Embedded)[0].size_bytes;
    for heading in [
        format!("Update Rate [{size}-byte messages/sec]"),
        "Mean Latency (us)".to_string(),
        "Std Deviation (us)".to_string(),
        "Maximum Latency (us)".to_string(),
        "Minimum Latency (us)".to_string(),
        "Number of Latency Points".to_string(),
    ] {
        assert!(all.contains(&heading), "{heading} not in\n{all}");
    }
    for c in cells(&r, Scenario::Embedded) {
        let l = c.latency.unwrap();
        let rate = thousands(c.rate_requested_msgs_per_s.unwrap().round() as u64);
        let line = row(&emb, &rate).unwrap_or_else(|| panic!("no row {rate}"));
        let mut expected: Vec<String> = [l.mean_ns, l.stddev_ns, l.max_ns, l.min_ns]
            .map(us)
            .to_vec();
        expected.push(l.samples.to_string());
        assert_eq!(tokens(line)[1..], expected[..]);
    }
    // Thousands separators as in the seed.
    assert_eq!(thousands(1_000), "1,000");
    assert_eq!(thousands(100_000), "100,000");
}

#[test]
fn sections_without_cells_are_left_out() {
    let mut r = sample();
    r.cells.retain(|c| c.scenario == Some(Scenario::Pingpong));
    let t = text(&r);
    assert!(has_section(
        &t,
        "Ping-pong latency (half round trip), microseconds"
    ));
    for absent in [
        "Full Results",
        "Maximum sustainable throughput",
        "One-way latency from embedded timestamps",
        "Throughput",
    ] {
        assert!(!has_section(&t, absent), "{absent} shown with no cells");
    }
    // No floor or raw cell: no ratio.
    let pp = section(&t, "Ping-pong latency (half round trip), microseconds");
    assert!(pp
        .iter()
        .filter(|l| l.starts_with("pingpong"))
        .all(|l| l.ends_with(" -")));
}

#[test]
fn a_size_with_no_sustained_rate_says_so() {
    let mut r = sample();
    for c in &mut r.cells {
        if c.scenario == Some(Scenario::Load) && c.transport == "udp" && c.size_bytes == 256 {
            c.sustained = Some(false);
        }
    }
    let t = text(&r);
    let full = section(&t, "Full Results");
    let block = full_block(&full, "UDP");
    assert!(row(&block, "256B/100K").is_none());
    assert!(
        block
            .iter()
            .any(|l| l.trim() == "CPU-bound below the lowest rate tried (100K msgs/sec)"),
        "{}",
        block.join("\n")
    );
}

/// A fan-out cell as `peregrine bench fanout` records it.
fn md_cell(scenario: Scenario, system: &str, rate: f64, mean_us: f64, sustained: bool) -> Cell {
    let detail = Detail::Fanout(FanoutDetail {
        clients: Some(16),
        items_per_client: Some(400),
        overlap: Some(0.5),
        feed_updates_per_s: Some(rate),
        verdict: Some(if sustained { "sustained" } else { "lagging" }.into()),
        why: (!sustained).then(|| "client 0: an update took 345.5 ms (lag bound 100 ms)".into()),
        ..FanoutDetail::default()
    });
    let mut cpu_s = std::collections::BTreeMap::new();
    cpu_s.insert("feed".to_string(), 1.5);
    cpu_s.insert(
        if system == "nats" {
            "nats-server"
        } else {
            "distributor"
        }
        .to_string(),
        2.25,
    );
    cpu_s.insert("clients".to_string(), 0.75);
    Cell {
        id: format!("{system}-{rate}"),
        scenario: Some(scenario),
        system: Some(system.to_string()),
        transport: "tcp".into(),
        size_bytes: 74,
        rate_requested_msgs_per_s: Some(rate),
        rate_achieved_msgs_per_s: Some(rate * 1.88),
        sustained: Some(sustained),
        latency: Some(peregrine_report::model::Latency {
            samples: (rate * 2.0) as u64,
            min_ns: 12_000.0,
            mean_ns: mean_us * 1000.0,
            max_ns: 1_500_000.0,
            stddev_ns: 26_500.0,
            ..Default::default()
        }),
        cpu_s,
        detail,
        ..Cell::default()
    }
}

/// Results holding two Peregrine probes: 800K sustained, then 1.6M not (lagging).
fn two_probes() -> Results {
    let mut r = sample();
    r.cells.clear();
    for (rate, mean_us, sustained) in [(800_000.0, 16_000.0, true), (1_600_000.0, 59_000.0, false)]
    {
        r.cells.push(md_cell(
            Scenario::FanoutProbe,
            "peregrine",
            rate,
            mean_us,
            sustained,
        ));
    }
    r
}

/// Seed 003's Table 1 and Table 2 from recorded probes: one row per system with the ratio
/// to NATS, the probes in the order they ran, and per system the latency rows by rate with
/// the first rate not sustained as a note, not a row.
#[test]
fn fanout_tables_follow_seed_003_from_recorded_probes() {
    let mut r = two_probes();
    r.cells.push(md_cell(
        Scenario::Fanout,
        "peregrine",
        800_000.0,
        16_000.0,
        true,
    ));
    r.cells
        .push(md_cell(Scenario::Fanout, "nats", 200_000.0, 17_000.0, true));
    for (system, rates) in [
        ("peregrine", [1_000.0, 100_000.0, 200_000.0]),
        ("nats", [1_000.0, 100_000.0, 200_000.0]),
    ] {
        for (i, rate) in rates.into_iter().enumerate() {
            let mean = if system == "nats" { 120.0 } else { 45.0 } + i as f64;
            r.cells
                .push(md_cell(Scenario::MdLatency, system, rate, mean, i < 2));
        }
    }
    let report = text(&r);
    let fan = section(&report, "Market data fan-out (Producer 50/50)");
    let p = tokens(row(&fan, "Peregrine").expect("a Peregrine row"));
    // System, clients, items, shared, size, feed rate, delivered, x NATS, lost, cpu.
    assert_eq!(
        &p[..9],
        [
            "Peregrine",
            "16",
            "400",
            "50%",
            "74",
            "800,000",
            "1,504,000",
            "4.00",
            "0"
        ]
    );
    assert_eq!(&p[9..], ["1.50", "/", "2.25", "/", "0.75"]);
    let probes: Vec<&str> = fan
        .iter()
        .copied()
        .filter(|l| l.starts_with("Peregrine  "))
        .collect();
    assert_eq!(probes.len(), 3, "{fan:?}");
    // The table says the verdict and how many findings; the findings follow it, one a line.
    assert!(
        probes[2].ends_with("lagging (1 finding, below)"),
        "{}",
        probes[2]
    );
    assert!(
        fan.iter().any(|l| l.trim_start()
            == "Peregrine at 1.6M, lagging: client 0: an update took 345.5 ms (lag bound 100 ms)"),
        "{fan:?}"
    );

    let lat = section(
        &report,
        "Market data latency, feed to client through the distribution tier",
    );
    let headers: Vec<usize> = (0..lat.len())
        .filter(|&i| lat[i].starts_with("Update Rate [74-byte messages/sec]"))
        .collect();
    assert_eq!(headers.len(), 2, "one Table 2 per system: {lat:?}");
    assert_eq!(lat[headers[0] - 1].trim(), "Peregrine");
    assert_eq!(lat[headers[1] - 1].trim(), "NATS (nats-server)");
    let first = &lat[headers[0]..headers[1]];
    assert_eq!(
        tokens(row(first, "1,000").unwrap()),
        ["1,000", "45.00", "26.50", "1500.00", "12.00", "2000"]
    );
    assert_eq!(tokens(row(first, "100,000").unwrap())[1], "46.00");
    assert!(
        row(first, "200,000").is_none(),
        "a rate not sustained is no row"
    );
    assert!(
        first
            .iter()
            .any(|l| l.contains("not sustained at 200,000 updates/sec: client 0")),
        "{first:?}"
    );
}

/// A probe judged on the findings of many clients stays one short row: its per-client detail
/// goes under the table, one finding a line (it once padded the Verdict column of every row to
/// thousands of characters).
#[test]
fn a_probe_with_many_findings_keeps_the_probes_table_narrow() {
    let mut r = two_probes();
    let lost = r.cells.last_mut().unwrap();
    let why: Vec<String> = (0..16)
        .map(|k| {
            format!(
                "client {k}: 3 gaps, 0 items short, 0 foreign items, 1 disconnects, 9120 undelivered"
            )
        })
        .collect();
    lost.detail.fanout_mut().verdict = Some("lost".into());
    lost.detail.fanout_mut().why = Some(why.join("; "));
    let report = text(&r);
    let fan = section(&report, "Market data fan-out (Producer 50/50)");
    // The table's lines (the section's introduction is a paragraph).
    let table = fan
        .iter()
        .skip_while(|l| !l.starts_with("Probes, in the order they ran"));
    let widest = table.map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 160, "a line of {widest} characters: {fan:#?}");
    let rows: Vec<&str> = fan
        .iter()
        .copied()
        .filter(|l| l.starts_with("Peregrine  "))
        .collect();
    assert!(
        rows[1].ends_with("lost (16 findings, below)"),
        "{}",
        rows[1]
    );
    for finding in &why {
        let line = format!("Peregrine at 1.6M, lost: {finding}");
        assert!(
            fan.iter().any(|l| l.trim_start() == line),
            "{line}: {fan:#?}"
        );
    }
}

/// sysjitter's table from a recorded cell: the gaps per second by threshold, the largest in
/// microseconds, the time lost in percent.
#[test]
fn jitter_table_from_a_recorded_cell() {
    let mut r = sample();
    r.cells.clear();
    let detail = Detail::Jitter(JitterDetail {
        cpu: Some(1),
        gaps_over_1us_per_s: Some(928.7),
        gaps_over_10us_per_s: Some(377.3),
        gaps_over_100us_per_s: Some(6.0),
        gaps_over_1ms_per_s: Some(0.3),
        largest_gap_ns: Some(5_575_300.0),
        lost_fraction: Some(0.017005),
        ..JitterDetail::default()
    });
    r.cells.push(Cell {
        id: "jitter-cpu1".into(),
        scenario: Some(Scenario::Jitter),
        transport: "cpu1".into(),
        seconds: 3.0,
        detail,
        ..Cell::default()
    });
    let report = text(&r);
    let lines = section(&report, "Machine jitter");
    assert_eq!(
        tokens(row(&lines, "1").expect("the CPU 1 row")),
        ["1", "3.0", "928.7", "377.3", "6.0", "0.3", "5575.3", "1.7005"]
    );
}
