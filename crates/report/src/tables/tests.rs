//! The tables' tests, and the results other modules' tests render.

use super::echo::ECHO_HEADER;
use super::format::{header, rate_label, thousands, us};
use super::load::cpu_bound_note;
use super::*;
use crate::model::Latency;

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
    a.detail.paced_mut().path = Some("loopback".into());
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
    let d = c.detail.echo_mut();
    d.mode = Some(mode.into());
    if transport == "ipc" {
        d.note = Some("ipc has no send modes: one path".into());
    } else if mode == "normal" {
        d.batch_interval_us = Some(100.0);
        d.echo_batch_interval_us = Some(100.0);
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
    urgent.detail.echo_mut().median_x_pingpong = Some(1.05);
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
            "2,000", "55.00", "99.00", "110.00", "132.00", "220.00", "440.00", "1100.00", "33.00",
            "14.67"
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
    let d = c.detail.latency_mut();
    d.median_x_floor = Some(1.506);
    d.median_x_two_line_floor = Some(1.09);
    d.floor_moved = Some(true);
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
    let d = load.detail.paced_mut();
    d.median_x_floor = Some(1.172);
    d.median_x_unloaded = Some(1.104);
    d.p999_x_floor = Some(0.259);
    d.floor_moved = Some(true);
    d.stalls_over_100us_per_s = Some(11.5);
    d.largest_stall_ns = Some(4_074_884.4);
    d.pings_stalled = Some(30);
    d.unstalled_p999_ns = Some(15_720.0);
    d.unstalled_p999_x_floor = Some(2.74);
    let mut floor = Cell {
        id: "floorload-load-ipc-32B-1M".into(),
        scenario: Some(Scenario::FloorLoad),
        transport: "cacheline".into(),
        size_bytes: 8,
        rate_requested_msgs_per_s: Some(1e6),
        latency: Some(latency(0.25)),
        ..Cell::default()
    };
    let d = floor.detail.paced_mut();
    d.for_cell = Some("load-ipc-32B-1M".into());
    d.floor_before_ns = Some(175.0);
    d.floor_after_ns = Some(180.0);
    d.stalls_over_100us_per_s = Some(5.0);
    d.largest_stall_ns = Some(650_000.0);
    d.pings_stalled = Some(4);
    d.unstalled_p999_ns = Some(5_740.0);
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

#[test]
fn a_cell_measured_across_namespaces_has_no_loopback_floor() {
    let mut raw = pingpong_cell("udp", 64, 1.8);
    raw.scenario = Some(Scenario::Raw);
    let loopback = pingpong_cell("udp", 64, 2.2);
    let mut veth = pingpong_cell("udp", 64, 2.5);
    veth.detail
        .latency_mut()
        .settings
        .insert("netns".into(), true.into());
    let results = results_of(vec![raw, loopback.clone(), veth.clone()]);
    let x = super::pingpong::x_floor(&results, &loopback).expect("the loopback cell's floor");
    assert!((x - 2.2 / 1.8).abs() < 1e-9, "{x}");
    assert_eq!(super::pingpong::x_floor(&results, &veth), None);
}

#[test]
fn the_bypass_table_has_a_row_per_size_with_the_three_paths_and_xdps_ratios() {
    let netns = |transport: &str, size: usize, median_us: f64, row: Option<usize>| {
        let mut c = pingpong_cell(transport, size, median_us);
        let s = &mut c.detail.latency_mut().settings;
        s.insert("netns".into(), true.into());
        if let Some(r) = row {
            s.insert("row_size".into(), r.into());
        }
        c
    };
    let results = results_of(vec![
        pingpong_cell("udp", 32, 2.0),
        netns("udp", 12, 2.4, None),
        netns("sockperf", 14, 1.8, Some(12)),
        netns("xdp", 12, 1.6, None),
        netns("udp", 1472, 4.0, None),
        netns("xdp", 1472, 3.0, None),
    ]);
    let sections = sections(&results);
    let bypass = sections
        .iter()
        .find(|s| {
            s.title
                .starts_with("UDP through the kernel and kernel bypass")
        })
        .expect("a bypass section");
    let rows = cells_rows(&bypass.tables[0]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][0], "12");
    assert_eq!(
        rows[0][3],
        us(1800.0),
        "sockperf's 14-byte cell is the 12-byte row's"
    );
    assert_eq!(rows[0][7], "0.67", "xdp / kernel median at 12 bytes");
    assert_eq!(rows[1][0], "1472");
    assert_eq!(rows[1][3], "-", "no sockperf at 1472");
    assert_eq!(rows[1][7], "0.75");
    // The loopback ping-pong table keeps the loopback cell only.
    let pp = sections
        .iter()
        .find(|s| s.title.starts_with("Ping-pong latency"))
        .expect("the ping-pong section");
    assert_eq!(cells_rows(&pp.tables[0]).len(), 1);
}

#[test]
fn load_across_namespaces_gets_its_own_table_under_the_ping_pong_one() {
    let netns_load = |transport: &str, size: usize, median_us: f64| {
        let mut c = pingpong_cell(transport, size, median_us);
        c.scenario = Some(Scenario::Load);
        c.rate_requested_msgs_per_s = Some(100_000.0);
        c.detail = Default::default();
        let d = c.detail.paced_mut();
        d.path = Some("veth pair".into());
        d.settings.insert("netns".into(), true.into());
        d.settings.insert("row_size".into(), 32.into());
        c
    };
    let results = results_of(vec![
        netns_load("udp", 32, 4.0),
        netns_load("sockperf", 32, 3.0),
        netns_load("xdp", 32, 2.0),
    ]);
    let sections = sections(&results);
    let bypass = sections
        .iter()
        .find(|s| {
            s.title
                .starts_with("UDP through the kernel and kernel bypass")
        })
        .expect("a bypass section");
    assert_eq!(
        bypass.tables.len(),
        1,
        "no ping-pong cells, no ping-pong table"
    );
    assert!(bypass.tables[0]
        .caption
        .as_deref()
        .is_some_and(|c| c.starts_with("Under load")));
    let rows = cells_rows(&bypass.tables[0]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0], "32 @ 100K");
    assert_eq!(rows[0][1], us(4000.0));
    assert_eq!(rows[0][3], us(3000.0));
    assert_eq!(rows[0][5], us(2000.0));
    assert_eq!(rows[0][7], "0.50", "xdp / kernel median");
}
