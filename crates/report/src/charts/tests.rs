#[test]
fn log_axis_ticks_keep_their_labels_apart() {
    let rates = [1e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1.5e5, 2e5, 3e5, 4e5, 5e5, 6e5];
    let kept = super::draw::spaced_ticks(rates.into_iter(), 1e3 / 1.5, 6e5 * 1.5, 480);
    assert_eq!(kept, [1e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 4e5]);
    // Wide enough: every tick stays.
    let all = super::draw::spaced_ticks(rates.into_iter(), 1e3 / 1.5, 6e5 * 1.5, 4800);
    assert_eq!(all, rates);
}

use super::plan::{
    chart_rate, file_safe, plan, series_span_decades, spans_decades, BoxPlot, BoxStat, Centre,
    Planned, Plot, Series,
};
use super::*;
use crate::model::{Cell, Scenario};

fn load(transport: &str, size: usize, rate: f64, sustained: bool) -> Cell {
    Cell {
        scenario: Some(Scenario::Load),
        transport: transport.into(),
        size_bytes: size,
        rate_requested_msgs_per_s: Some(rate),
        sustained: Some(sustained),
        latency: Some(Default::default()),
        ..Cell::default()
    }
}

#[test]
fn chart_rate_prefers_100k() {
    let cells = [load("udp", 32, 10e3, true), load("udp", 32, 100e3, true)];
    let refs: Vec<&Cell> = cells.iter().collect();
    assert_eq!(chart_rate(&refs), Some(100e3));
}

#[test]
fn chart_rate_falls_back_to_the_lowest_rate_every_size_has() {
    let cells = [
        load("udp", 32, 10e3, true),
        load("udp", 32, 500e3, true),
        load("udp", 32, 1e6, true),
        load("udp", 1024, 500e3, true),
        load("udp", 1024, 1e6, true),
    ];
    let refs: Vec<&Cell> = cells.iter().collect();
    assert_eq!(chart_rate(&refs), Some(500e3));
}

#[test]
fn chart_rate_without_a_common_rate_takes_the_best_covered_lowest() {
    let cells = [
        load("udp", 32, 10e3, true),
        load("udp", 256, 250e3, true),
        load("udp", 1024, 250e3, true),
        load("udp", 2048, 2e6, true),
    ];
    let refs: Vec<&Cell> = cells.iter().collect();
    assert_eq!(chart_rate(&refs), Some(250e3));
}

#[test]
fn load_charts_draw_the_floor_under_load_and_go_logarithmic_past_two_decades() {
    let mut cells = Vec::new();
    for (rate, mean_ns, p999_ns) in [(100e3, 300.0, 5_000.0), (1e6, 400.0, 900_000.0)] {
        let mut c = load("ipc", 32, rate, true);
        c.id = format!("load-ipc-32B-{rate}");
        c.latency = Some(crate::model::Latency {
            mean_ns,
            p999_ns,
            ..Default::default()
        });
        let mut f = load("cacheline", 8, rate, true);
        f.scenario = Some(Scenario::FloorLoad);
        f.id = format!("floorload-{}", c.id);
        f.detail.paced_mut().for_cell = Some(c.id.clone());
        f.latency = Some(crate::model::Latency {
            mean_ns: mean_ns / 2.0,
            p999_ns: p999_ns / 4.0,
            ..Default::default()
        });
        cells.push(f);
        cells.push(c);
    }
    let results = crate::tables::tests::results_of(cells);
    let planned = plan(&results);
    let by_rate = planned
        .iter()
        .find(|p| p.name == "latency_vs_rate")
        .unwrap();
    let Plot::Lines(panels) = &by_rate.plot else {
        panic!("latency vs rate is a line chart");
    };
    let names: Vec<&str> = panels[0].series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["ipc Avg", "ipc 99.9th", "floor Avg", "floor 99.9th"]
    );
    assert_eq!(panels[0].series[2].points, [(100e3, 0.15), (1e6, 0.2)]);
    assert_eq!(panels[0].series[3].points, [(100e3, 1.25), (1e6, 225.0)]);
    // 0.15 us to 900 us: a linear axis would lay the averages flat on zero.
    assert!(panels[0].log_y);
    // The floor-under-load cells are not plotted as a transport of their own.
    assert!(planned.iter().all(|p| p.name != "stddev_cacheline"));
    // Within two decades the axis stays linear.
    let flat = vec![Series {
        name: "x".into(),
        colour: 0,
        dashed: false,
        points: vec![(1.0, 1.0), (2.0, 99.0)],
    }];
    assert!(!series_span_decades(&flat));
    // The charts draw (SVG and PNG) on the log axis.
    let dir = std::env::temp_dir().join(format!("pg-charts-{}", std::process::id()));
    let drawn = charts(&results, &dir).unwrap();
    assert!(drawn
        .iter()
        .any(|c| c.name == "latency_vs_rate" && c.png_path.exists()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stddev_bars_are_blank_where_a_rate_was_not_sustained() {
    let results = Results {
        format: crate::model::FORMAT_VERSION,
        peregrine_version: "test".into(),
        started_utc: String::new(),
        command_line: vec![],
        machine: Default::default(),
        cells: vec![
            load("udp", 32, 100e3, true),
            load("udp", 32, 1e6, true),
            load("udp", 256, 100e3, true),
            load("udp", 256, 1e6, false),
        ],
    };
    let planned = plan(&results);
    let bars = planned
        .iter()
        .find(|p| p.name == "stddev_udp")
        .expect("a stddev chart for udp");
    let Plot::Bars(bars) = &bars.plot else {
        panic!("stddev is a bar chart");
    };
    assert_eq!(bars.groups, ["32B", "256B"]);
    assert_eq!(bars.bars, ["100K", "1M"]);
    assert_eq!(bars.values[1][0], Some(0.0));
    assert_eq!(bars.values[1][1], None);
    assert!(planned.iter().all(|p| p.name != "embedded"));
}

#[test]
fn file_names_keep_only_safe_characters() {
    assert_eq!(file_safe("udp"), "udp");
    assert_eq!(file_safe("tcp/v6 x"), "tcp_v6_x");
}

fn boxes_of<'a>(planned: &'a [Planned], name: &str) -> &'a BoxPlot {
    let chart = planned
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no chart {name}"));
    let Plot::Boxes(b) = &chart.plot else {
        panic!("{name} is a box plot");
    };
    b
}

#[test]
fn echo_boxes_show_each_transport_mode_and_size_around_the_median() {
    use crate::tables::tests::{echo_cell, results_of};
    let results = results_of(vec![
        echo_cell("udp", "normal", 28, 110.0),
        echo_cell("udp", "urgent", 28, 8.0),
        echo_cell("ipc", "normal", 28, 0.3),
        echo_cell("ipc", "urgent", 28, 0.3),
    ]);
    let planned = plan(&results);
    let echo = boxes_of(&planned, "echo_boxplot");
    let title = &planned
        .iter()
        .find(|p| p.name == "echo_boxplot")
        .unwrap()
        .title;
    assert!(
        title.contains("median") && title.contains("1st and 99th"),
        "{title}"
    );
    assert_eq!(echo.centre, Centre::Median);
    let labels: Vec<&str> = echo.boxes.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "udp normal 28B",
            "udp urgent 28B",
            "ipc normal 28B",
            "ipc urgent 28B"
        ]
    );
    let b = &echo.boxes[0];
    assert_eq!((b.p25, b.median, b.p75), (99.0, 110.0, 132.0));
    assert_eq!((b.p1, b.p99), (66.0, 220.0));
    // Transports keep their colour.
    assert_eq!(echo.boxes[0].colour, echo.boxes[1].colour);
    assert_ne!(echo.boxes[0].colour, echo.boxes[2].colour);
    // From 0.18 us (ipc's 1st percentile) to 220 us: past two decades, a log axis.
    assert!(echo.log_scale);
    // Echo cells add nothing to the ping-pong box plot.
    assert!(planned.iter().all(|p| p.name != "boxplot"));
}

#[test]
fn echo_boxes_within_two_decades_keep_a_linear_axis() {
    use crate::tables::tests::{echo_cell, results_of};
    let results = results_of(vec![
        echo_cell("udp", "urgent", 28, 8.0),
        echo_cell("tcp", "urgent", 28, 10.0),
    ]);
    let planned = plan(&results);
    assert!(!boxes_of(&planned, "echo_boxplot").log_scale);
    // 1st percentile of the first (4.8 us) to 99th of the udp normal box (600 us).
    let results = results_of(vec![
        echo_cell("udp", "urgent", 28, 8.0),
        echo_cell("udp", "normal", 28, 300.0),
    ]);
    assert!(boxes_of(&plan(&results), "echo_boxplot").log_scale);
    let at = |p1: f64, p99: f64| BoxStat {
        label: String::new(),
        colour: 0,
        p1,
        p25: p1,
        mean: p1,
        median: p1,
        p75: p99,
        p99,
    };
    assert!(!spans_decades(&[at(1.0, 100.0)]));
    assert!(spans_decades(&[at(1.0, 100.5)]));
    assert!(!spans_decades(&[at(0.0, 0.0)]));
}

#[test]
fn failover_cases_get_a_box_of_their_gaps_and_of_the_no_kill_baseline() {
    let mut group = Cell {
        scenario: Some(Scenario::Failover),
        transport: "udp".into(),
        ..Cell::default()
    };
    let d = group.detail.failover_mut();
    d.case = Some("group".into());
    d.gaps_ns = Some(vec![3000, 1000, 2000]);
    d.baseline_gaps_ns = Some(vec![500]);
    let mut dist = Cell {
        scenario: Some(Scenario::Failover),
        transport: "tcp".into(),
        ..Cell::default()
    };
    let d = dist.detail.failover_mut();
    d.case = Some("distributors".into());
    d.gaps_ns = Some(vec![80_000_000, 700_000_000]);
    let results = crate::tables::tests::results_of(vec![group, dist]);
    let planned = plan(&results);
    let b = boxes_of(&planned, "failover_gaps");
    let labels: Vec<&str> = b.boxes.iter().map(|x| x.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "group udp, kills",
            "group udp, no kill",
            "distributors, kills"
        ]
    );
    let g = &b.boxes[0];
    assert_eq!((g.p1, g.median, g.p99, g.mean), (1.0, 2.0, 3.0, 2.0));
    assert_eq!(b.boxes[1].median, 0.5);
    assert!(b.log_scale, "1 us to 700 ms spans decades");
}

#[test]
fn the_pingpong_box_plot_keeps_the_mean_on_a_log_axis() {
    let mut c = Cell {
        scenario: Some(Scenario::Pingpong),
        transport: "udp".into(),
        size_bytes: 32,
        latency: Some(Default::default()),
        ..Cell::default()
    };
    c.latency.as_mut().unwrap().mean_ns = 9000.0;
    let results = crate::tables::tests::results_of(vec![c]);
    let planned = plan(&results);
    let b = boxes_of(&planned, "boxplot");
    assert_eq!((b.centre, b.log_scale), (Centre::Mean, true));
    assert_eq!(b.boxes[0].mean, 9.0);
    assert!(planned.iter().all(|p| p.name != "echo_boxplot"));
}

#[test]
fn the_bypass_comparison_is_charted_apart_from_the_loopback_cells() {
    let veth = |scenario: Scenario, transport: &str, size: usize, median_ns: f64| {
        let mut c = load(transport, size, 100e3, true);
        c.scenario = Some(scenario);
        c.id = format!("{scenario:?}-{transport}-{size}-netns");
        c.latency = Some(crate::model::Latency {
            median_ns,
            p999_ns: median_ns * 30.0,
            ..Default::default()
        });
        let settings = if scenario == Scenario::Load {
            &mut c.detail.paced_mut().settings
        } else {
            &mut c.detail.latency_mut().settings
        };
        settings.insert("netns".into(), true.into());
        settings.insert("row_size".into(), size.into());
        c
    };
    let mut loopback = load("udp", 64, 100e3, true);
    loopback.scenario = Some(Scenario::Pingpong);
    loopback.rate_requested_msgs_per_s = None;
    let results = crate::tables::tests::results_of(vec![
        loopback,
        veth(Scenario::Pingpong, "udp", 64, 2400.0),
        veth(Scenario::Pingpong, "sockperf", 64, 1800.0),
        veth(Scenario::Pingpong, "xdp", 64, 1600.0),
        veth(Scenario::Pingpong, "udp", 1024, 2600.0),
        veth(Scenario::Pingpong, "xdp", 1024, 2100.0),
        veth(Scenario::Load, "udp", 32, 3000.0),
        veth(Scenario::Load, "xdp", 32, 2000.0),
    ]);
    let planned = plan(&results);
    let pp = planned
        .iter()
        .find(|p| p.name == "bypass_pingpong")
        .expect("the ping-pong comparison's chart");
    let Plot::Lines(panels) = &pp.plot else {
        panic!("a line chart");
    };
    assert_eq!(panels.len(), 2, "median and 99.9th side by side");
    let names: Vec<&str> = panels[0].series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["udp median", "sockperf median", "xdp median"]);
    assert_eq!(panels[0].series[2].points, [(64.0, 1.6), (1024.0, 2.1)]);
    assert_eq!(panels[1].series[0].points, [(64.0, 72.0), (1024.0, 78.0)]);
    let ld = planned
        .iter()
        .find(|p| p.name == "bypass_load")
        .expect("the load comparison's chart");
    assert!(
        ld.title.ends_with("under load at 100K msgs/sec"),
        "{}",
        ld.title
    );
    // The loopback ping-pong chart keeps the loopback cell only; no loopback load chart.
    let by_size = planned
        .iter()
        .find(|p| p.name == "latency_vs_size")
        .expect("the loopback ping-pong chart");
    let Plot::Lines(panels) = &by_size.plot else {
        panic!("a line chart");
    };
    assert!(panels[0].series.iter().all(|s| s.points.len() == 1));
    assert!(planned.iter().all(|p| p.name != "latency_vs_rate"));
    assert!(planned.iter().all(|p| !p.name.starts_with("stddev_")));
}
