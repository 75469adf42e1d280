//! Choosing what to draw from the results: one [`Planned`] chart per figure the seeds show
//! and the data has (latency against size and rate, jitter, box plots, the echo, failover
//! gaps, the market data tier's rates), tested without pixels.

use super::draw::PALETTE;
use crate::model::{Cell, Latency, Results, Scenario};
use crate::tables::{self, rate_label, shown};

/// A chart to draw: its file stem, title and data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub name: String,
    pub title: String,
    pub plot: Plot,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plot {
    /// Line charts side by side, all with a logarithmic x axis.
    Lines(Vec<LinePanel>),
    Bars(Bars),
    Boxes(BoxPlot),
}

/// Seed 004's box plot: one box per cell, the first at the top.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoxPlot {
    /// What the values are: `latency`, `gap` (in microseconds on the axis).
    pub quantity: &'static str,
    /// The line inside each box.
    pub centre: Centre,
    /// A logarithmic value axis; else linear from zero.
    pub log_scale: bool,
    pub boxes: Vec<BoxStat>,
}

/// What the line inside a box marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Centre {
    /// As seed 004 draws it.
    Mean,
    Median,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LinePanel {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    /// Where the x axis has ticks, and their labels (the data's own x values).
    pub x_ticks: Vec<(f64, String)>,
    pub series: Vec<Series>,
    /// A logarithmic y axis (the values span more than two decades); else linear from zero.
    pub log_y: bool,
}

/// Whether the y values of `series` span more than two decades (a linear axis would lay the
/// small ones flat on zero beneath the large).
pub(crate) fn series_span_decades(series: &[Series]) -> bool {
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let lo = ys
        .clone()
        .filter(|y| *y > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = ys.fold(0.0, f64::max);
    lo.is_finite() && hi / lo > 100.0
}

/// The machine's floor under load beside load cells: "floor Avg" and "floor 99.9th" at each
/// plotted cell's x, from the floor-under-load cells measured for them (the mean where
/// several share an x).
fn floor_series(
    results: &Results,
    cells: &[&Cell],
    x_of: impl Fn(&Cell) -> Option<f64>,
) -> Vec<Series> {
    let mut points: Vec<(f64, f64, f64)> = Vec::new();
    for c in cells {
        let Some(x) = x_of(c) else { continue };
        let floor = results.cells.iter().find(|f| {
            f.scenario == Some(Scenario::FloorLoad)
                && f.detail.paced().and_then(|d| d.for_cell.as_deref()) == Some(c.id.as_str())
        });
        if let Some(l) = floor.and_then(|f| f.latency) {
            points.push((x, us(l.mean_ns), us(l.p999_ns)));
        }
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64, f64, f64)> = Vec::new();
    for (x, a, p) in points {
        match merged.last_mut() {
            Some(m) if m.0 == x => {
                m.1 += a;
                m.2 += p;
                m.3 += 1.0;
            }
            _ => merged.push((x, a, p, 1.0)),
        }
    }
    if merged.is_empty() {
        return Vec::new();
    }
    let grey = PALETTE.len() - 3;
    vec![
        Series {
            name: "floor Avg".to_string(),
            colour: grey,
            dashed: false,
            points: merged.iter().map(|m| (m.0, m.1 / m.3)).collect(),
        },
        Series {
            name: "floor 99.9th".to_string(),
            colour: grey,
            dashed: true,
            points: merged.iter().map(|m| (m.0, m.2 / m.3)).collect(),
        },
    ]
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// The legend: `udp Avg`, `udp 99.9th`.
    pub name: String,
    pub colour: usize,
    pub dashed: bool,
    /// (x, y in microseconds), ascending x.
    pub points: Vec<(f64, f64)>,
}

/// Grouped bars: one group per size, one bar per rate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bars {
    pub groups: Vec<String>,
    /// The legend: one entry per rate.
    pub bars: Vec<String>,
    /// `values[bar][group]`, microseconds; `None` leaves the slot blank.
    pub values: Vec<Vec<Option<f64>>>,
}

/// A box of seed 004's box plot, in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoxStat {
    pub label: String,
    pub colour: usize,
    pub p1: f64,
    pub p25: f64,
    pub mean: f64,
    pub median: f64,
    pub p75: f64,
    pub p99: f64,
}

impl BoxStat {
    /// The box of a cell's latency, labelled `label`.
    fn of(label: String, colour: usize, l: &Latency) -> BoxStat {
        BoxStat {
            label,
            colour,
            p1: us(l.p1_ns),
            p25: us(l.p25_ns),
            mean: us(l.mean_ns),
            median: us(l.median_ns),
            p75: us(l.p75_ns),
            p99: us(l.p99_ns),
        }
    }

    pub(super) fn centre(&self, centre: Centre) -> f64 {
        match centre {
            Centre::Mean => self.mean,
            Centre::Median => self.median,
        }
    }
}

/// A box of a failover case's gaps (a JSON array of nanoseconds): the whiskers are the
/// smallest and the largest (a few dozen kills have no meaningful 1st and 99th percentiles).
fn gap_box(label: String, colour: usize, gaps: &[u64]) -> Option<BoxStat> {
    let mut v: Vec<f64> = gaps.iter().map(|g| *g as f64).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| us(v[((v.len() - 1) as f64 * q).round() as usize]);
    Some(BoxStat {
        label,
        colour,
        p1: at(0.0),
        p25: at(0.25),
        mean: us(v.iter().sum::<f64>() / v.len() as f64),
        median: at(0.5),
        p75: at(0.75),
        p99: at(1.0),
    })
}

/// Whether box values span more than two decades (whisker to whisker, over every box): then
/// the value axis is logarithmic, or the smallest boxes would be lines at zero.
pub(crate) fn spans_decades(boxes: &[BoxStat]) -> bool {
    let positive = |v: &f64| v.is_finite() && *v > 0.0;
    let lo = boxes
        .iter()
        .map(|b| b.p1.min(b.p25))
        .filter(positive)
        .fold(f64::INFINITY, f64::min);
    let hi = boxes
        .iter()
        .map(|b| b.p99.max(b.p75))
        .filter(positive)
        .fold(0.0, f64::max);
    lo.is_finite() && hi / lo > 100.0
}

pub(super) fn us(ns: f64) -> f64 {
    ns / 1000.0
}

fn same_rate(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.5
}

/// Load cells that count as measurements: sustained (or not judged) and with latency.
fn load_points(results: &Results) -> Vec<&Cell> {
    results
        .cells
        .iter()
        .filter(|c| {
            c.scenario == Some(Scenario::Load)
                && shown(c)
                && c.latency.is_some()
                && !tables::across_namespaces(c)
        })
        .collect()
}

/// The rate of the latency-vs-size chart and of the box plot's load boxes: 100K when measured
/// (seed 001 uses 100,000 msgs/sec), else the lowest rate measured at every size, else the rate
/// measured at the most sizes.
pub(crate) fn chart_rate(load: &[&Cell]) -> Option<f64> {
    let rates = distinct_rates(load);
    if let Some(r) = rates.iter().find(|r| same_rate(**r, 100_000.0)) {
        return Some(*r);
    }
    let sizes = tables::sizes(load);
    let coverage = |r: f64| {
        sizes
            .iter()
            .filter(|&&s| {
                load.iter().any(|c| {
                    c.size_bytes == s
                        && c.rate_requested_msgs_per_s.is_some_and(|x| same_rate(x, r))
                })
            })
            .count()
    };
    // Ties go to the lowest rate: `max_by_key` keeps the last maximum, so scan from the top.
    rates.iter().rev().copied().max_by_key(|r| coverage(*r))
}

/// Every transport in the results, in order of first appearance: its index is its colour.
fn colour_of(results: &Results, transport: &str) -> usize {
    let all: Vec<&Cell> = results.cells.iter().collect();
    tables::transports(&all)
        .iter()
        .position(|t| *t == transport)
        .unwrap_or(0)
}

/// "Avg" and "99.9th" lines per transport, x from `x_of`.
fn avg_and_p999(
    results: &Results,
    cells: &[&Cell],
    x_of: impl Fn(&Cell) -> Option<f64>,
) -> Vec<Series> {
    let mut series = Vec::new();
    for transport in tables::transports(cells) {
        let mut points: Vec<(f64, f64, f64)> = cells
            .iter()
            .filter(|c| c.transport == transport)
            .filter_map(|c| Some((x_of(c)?, c.latency?)))
            .map(|(x, l)| (x, us(l.mean_ns), us(l.p999_ns)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let colour = colour_of(results, transport);
        series.push(Series {
            name: format!("{transport} Avg"),
            colour,
            dashed: false,
            points: points.iter().map(|p| (p.0, p.1)).collect(),
        });
        series.push(Series {
            name: format!("{transport} 99.9th"),
            colour,
            dashed: true,
            points: points.iter().map(|p| (p.0, p.2)).collect(),
        });
    }
    series
}

fn size_ticks(cells: &[&Cell]) -> Vec<(f64, String)> {
    tables::sizes(cells)
        .into_iter()
        .map(|s| (s as f64, s.to_string()))
        .collect()
}

fn rate_ticks(cells: &[&Cell]) -> Vec<(f64, String)> {
    distinct_rates(cells)
        .into_iter()
        .map(|r| (r, rate_label(r)))
        .collect()
}

/// The requested rates of `cells`, ascending, each once.
fn distinct_rates(cells: &[&Cell]) -> Vec<f64> {
    let mut rates: Vec<f64> = cells
        .iter()
        .filter_map(|c| c.rate_requested_msgs_per_s)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup_by(|a, b| same_rate(*a, *b));
    rates
}

/// A file-name-safe form of a transport name.
pub(super) fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The charts the results have data for, in report order.
pub(crate) fn plan(results: &Results) -> Vec<Planned> {
    let mut out = Vec::new();
    let load = load_points(results);
    let rate = chart_rate(&load);

    // Seed 001, "Latency Versus Message Size": Avg and 99.9th at one rate.
    let at_rate: Vec<&Cell> = match rate {
        Some(r) => load
            .iter()
            .copied()
            .filter(|c| c.rate_requested_msgs_per_s.is_some_and(|x| same_rate(x, r)))
            .collect(),
        None => Vec::new(),
    };
    let (by_size, title) = if let (Some(r), false) = (rate, at_rate.is_empty()) {
        (
            at_rate.clone(),
            format!(
                "Latency vs message size at {} msgs/sec (load with pings)",
                rate_label(r)
            ),
        )
    } else {
        let pingpong: Vec<&Cell> = results
            .cells
            .iter()
            .filter(|c| {
                c.scenario == Some(Scenario::Pingpong)
                    && c.latency.is_some()
                    && !tables::across_namespaces(c)
            })
            .collect();
        (
            pingpong,
            "Latency vs message size (ping-pong, half round trip)".to_string(),
        )
    };
    if !by_size.is_empty() {
        let mut series = avg_and_p999(results, &by_size, |c| Some(c.size_bytes as f64));
        series.extend(floor_series(results, &by_size, |c| {
            Some(c.size_bytes as f64)
        }));
        out.push(Planned {
            name: "latency_vs_size".to_string(),
            title: title.clone(),
            plot: Plot::Lines(vec![LinePanel {
                title,
                x_desc: "message size (bytes)".to_string(),
                y_desc: "latency (microseconds)".to_string(),
                x_ticks: size_ticks(&by_size),
                log_y: series_span_decades(&series),
                series,
            }]),
        });
    }

    // Seed 001, "Latency Versus Message Rate": the smallest size at every rate.
    if let Some(size) = load.iter().map(|c| c.size_bytes).min() {
        let smallest: Vec<&Cell> = load
            .iter()
            .copied()
            .filter(|c| c.size_bytes == size && c.rate_requested_msgs_per_s.is_some())
            .collect();
        if !smallest.is_empty() {
            let title = format!("Latency vs message rate, {size}-byte messages");
            let mut series = avg_and_p999(results, &smallest, |c| c.rate_requested_msgs_per_s);
            series.extend(floor_series(results, &smallest, |c| {
                c.rate_requested_msgs_per_s
            }));
            out.push(Planned {
                name: "latency_vs_rate".to_string(),
                title: title.clone(),
                plot: Plot::Lines(vec![LinePanel {
                    title,
                    x_desc: "requested rate (msgs/sec)".to_string(),
                    y_desc: "latency (microseconds)".to_string(),
                    x_ticks: rate_ticks(&smallest),
                    log_y: series_span_decades(&series),
                    series,
                }]),
            });
        }
    }

    // Seed 001, "Standard Deviation (Jitter)": blank where a rate was not sustained.
    let all_load: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| c.scenario == Some(Scenario::Load) && !tables::across_namespaces(c))
        .collect();
    for transport in tables::transports(&all_load) {
        let cells: Vec<&Cell> = all_load
            .iter()
            .copied()
            .filter(|c| c.transport == transport)
            .collect();
        let sizes = tables::sizes(&cells);
        let rates = rate_ticks(&cells);
        let values: Vec<Vec<Option<f64>>> = rates
            .iter()
            .map(|(rate, _)| {
                sizes
                    .iter()
                    .map(|&size| {
                        cells
                            .iter()
                            .find(|c| {
                                c.size_bytes == size
                                    && shown(c)
                                    && c.rate_requested_msgs_per_s
                                        .is_some_and(|x| same_rate(x, *rate))
                            })
                            .and_then(|c| c.latency)
                            .map(|l| us(l.stddev_ns))
                    })
                    .collect()
            })
            .collect();
        if values.iter().flatten().all(Option::is_none) {
            continue;
        }
        out.push(Planned {
            name: format!("stddev_{}", file_safe(transport)),
            title: format!(
                "Standard deviation (jitter), {}",
                tables::transport_title(transport, &cells)
            ),
            plot: Plot::Bars(Bars {
                groups: sizes.iter().map(|s| format!("{s}B")).collect(),
                bars: rates.into_iter().map(|(_, label)| label).collect(),
                values,
            }),
        });
    }

    // Seed 004: mean, quartiles, 1st and 99th percentiles.
    let mut boxed: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| {
            matches!(
                c.scenario,
                Some(Scenario::Floor | Scenario::Raw | Scenario::Pingpong)
            )
        })
        .collect();
    boxed.sort_by_key(|c| match c.scenario {
        Some(Scenario::Floor) => 0,
        Some(Scenario::Raw) => 1,
        _ => 2,
    });
    let mut at_rate = at_rate;
    at_rate.sort_by_key(|c| (colour_of(results, &c.transport), c.size_bytes));
    boxed.extend(at_rate);
    let boxes: Vec<BoxStat> = boxed
        .iter()
        .filter_map(|c| {
            let l = c.latency?;
            let label = match (c.scenario, c.rate_requested_msgs_per_s) {
                (Some(Scenario::Floor), _) => format!("floor {}B", c.size_bytes),
                (Some(Scenario::Raw), _) => format!("{} {}B raw", c.transport, c.size_bytes),
                (Some(Scenario::Load), Some(r)) => {
                    format!("{} {}B @{}", c.transport, c.size_bytes, rate_label(r))
                }
                _ if tables::across_namespaces(c) => {
                    format!("{} {}B veth", c.transport, c.size_bytes)
                }
                _ => format!("{} {}B", c.transport, c.size_bytes),
            };
            Some(BoxStat::of(label, colour_of(results, &c.transport), &l))
        })
        .collect();
    if !boxes.is_empty() {
        out.push(Planned {
            name: "boxplot".to_string(),
            title: "Latency distribution: box = quartiles, centre line = mean, whiskers = 1st \
                    and 99th percentiles"
                .to_string(),
            plot: Plot::Boxes(BoxPlot {
                quantity: "latency",
                centre: Centre::Mean,
                log_scale: true,
                boxes,
            }),
        });
    }

    // Seeds 001, 002 and 004: the kernel's path and the bypass side by side.
    out.extend(bypass_charts(results));

    // Seed 004's own measurement: the echo per transport, mode and size.
    let echo: Vec<BoxStat> = tables::echo_cells(results)
        .into_iter()
        .filter_map(|c| {
            let label = format!("{} {} {}B", c.transport, tables::mode_of(c), c.size_bytes);
            Some(BoxStat::of(
                label,
                colour_of(results, &c.transport),
                &c.latency?,
            ))
        })
        .collect();
    if !echo.is_empty() {
        out.push(Planned {
            name: "echo_boxplot".to_string(),
            title: "Echo, half round trip: box = quartiles, centre line = median, whiskers = \
                    1st and 99th percentiles"
                .to_string(),
            plot: Plot::Boxes(BoxPlot {
                quantity: "latency",
                centre: Centre::Median,
                log_scale: spans_decades(&echo),
                boxes: echo,
            }),
        });
    }

    // Failover: the gaps the kills left, per case, next to the same run's no-kill baseline.
    let failover: Vec<BoxStat> = results
        .cells
        .iter()
        .filter(|c| c.scenario == Some(Scenario::Failover))
        .flat_map(|c| {
            let colour = colour_of(results, &c.transport);
            let d = c.detail.failover();
            let name = match d.and_then(|d| d.case.as_deref()) {
                Some("group") => format!("group {}", c.transport),
                _ => crate::tables::case_name(c),
            };
            let gaps = d.and_then(|d| d.gaps_ns.as_deref());
            let baseline = d.and_then(|d| d.baseline_gaps_ns.as_deref());
            [(gaps, "kills"), (baseline, "no kill")]
                .into_iter()
                .filter_map(move |(gaps, what)| gap_box(format!("{name}, {what}"), colour, gaps?))
        })
        .collect();
    if !failover.is_empty() {
        out.push(Planned {
            name: "failover_gaps".to_string(),
            title: "Failover gaps, kills and no kill: box = quartiles, centre line = median, \
                    whiskers = extremes"
                .to_string(),
            plot: Plot::Boxes(BoxPlot {
                quantity: "gap",
                centre: Centre::Median,
                log_scale: spans_decades(&failover),
                boxes: failover,
            }),
        });
    }

    // Seed 003, Figures 3-2 and 3-3: mean and standard deviation vs update rate.
    let embedded: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| {
            c.scenario == Some(Scenario::Embedded)
                && c.latency.is_some()
                && c.rate_requested_msgs_per_s
                    .or(c.rate_achieved_msgs_per_s)
                    .is_some()
        })
        .collect();
    if !embedded.is_empty() {
        let groups = tables::embedded_groups(&embedded)
            .into_iter()
            .map(|(transport, size, group)| {
                (
                    format!("{transport} {size}B"),
                    colour_of(results, transport),
                    group,
                )
            })
            .collect();
        out.push(mean_and_stddev_vs_rate(
            "embedded",
            "One-way latency from embedded timestamps vs update rate",
            "update rate (msgs/sec)",
            groups,
        ));
    }

    // The same figures for the market data tier: both systems on one chart.
    let md: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| {
            c.scenario == Some(Scenario::MdLatency)
                && c.sustained != Some(false)
                && c.latency.is_some()
                && c.rate_requested_msgs_per_s.is_some()
        })
        .collect();
    if !md.is_empty() {
        let groups = tables::md_latency_groups(&md)
            .into_iter()
            .enumerate()
            .map(|(i, (system, size, group))| {
                (
                    format!("{} {size}B", tables::system_title(system)),
                    i,
                    group,
                )
            })
            .collect();
        out.push(mean_and_stddev_vs_rate(
            "md_latency",
            "Market data latency, feed to client, vs update rate (seed 003, Figures 3-2 and 3-3)",
            "update rate (updates/sec)",
            groups,
        ));
    }
    out
}

/// Seed 003's Figures 3-2 and 3-3 side by side: mean and standard deviation of latency
/// against update rate, one line per (name, colour, cells) group; a cell's rate is the rate
/// asked, else the one achieved.
fn mean_and_stddev_vs_rate(
    name: &str,
    title: &str,
    x_desc: &str,
    groups: Vec<(String, usize, Vec<&Cell>)>,
) -> Planned {
    let rate_of = |c: &Cell| c.rate_requested_msgs_per_s.or(c.rate_achieved_msgs_per_s);
    let mut mean = Vec::new();
    let mut stddev = Vec::new();
    let mut rates = Vec::new();
    for (label, colour, group) in groups {
        let mut points: Vec<(f64, f64, f64)> = group
            .iter()
            .filter_map(|c| Some((rate_of(c)?, c.latency?)))
            .map(|(r, l)| (r, us(l.mean_ns), us(l.stddev_ns)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        rates.extend(points.iter().map(|p| p.0));
        mean.push(Series {
            name: label.clone(),
            colour,
            dashed: false,
            points: points.iter().map(|p| (p.0, p.1)).collect(),
        });
        stddev.push(Series {
            name: label,
            colour,
            dashed: false,
            points: points.iter().map(|p| (p.0, p.2)).collect(),
        });
    }
    rates.sort_by(f64::total_cmp);
    rates.dedup_by(|a, b| same_rate(*a, *b));
    let ticks: Vec<(f64, String)> = rates.into_iter().map(|r| (r, rate_label(r))).collect();
    let panel = |title: &str, y_desc: &str, series: Vec<Series>| LinePanel {
        title: title.to_string(),
        x_desc: x_desc.to_string(),
        y_desc: y_desc.to_string(),
        x_ticks: ticks.clone(),
        log_y: series_span_decades(&series),
        series,
    };
    Planned {
        name: name.to_string(),
        title: title.to_string(),
        plot: Plot::Lines(vec![
            panel("Mean latency", "mean (microseconds)", mean),
            panel(
                "Latency standard deviation",
                "std dev (microseconds)",
                stddev,
            ),
        ]),
    }
}

/// The paths of the kernel-bypass comparison, in the tables' order.
const BYPASS_PATHS: [&str; 3] = ["udp", "sockperf", "xdp"];

/// The kernel-bypass comparison across a veth pair (`--netns`): for the ping-pong and for the
/// load, the median and the 99.9th against the row's size, one line per path.
fn bypass_charts(results: &Results) -> Vec<Planned> {
    let mut out = Vec::new();
    for (scenario, name, what) in [
        (
            Scenario::Pingpong,
            "bypass_pingpong",
            "ping-pong".to_string(),
        ),
        (Scenario::Load, "bypass_load", String::new()),
    ] {
        let cells = tables::across(results, scenario);
        let cells: Vec<&Cell> = cells.into_iter().filter(|c| c.latency.is_some()).collect();
        if cells.is_empty() {
            continue;
        }
        let what = if scenario == Scenario::Load {
            match distinct_rates(&cells).as_slice() {
                [r] => format!("under load at {} msgs/sec", rate_label(*r)),
                _ => "under load".to_string(),
            }
        } else {
            what
        };
        let title =
            format!("UDP through the kernel and kernel bypass (AF_XDP) across a veth pair, {what}");
        let panel = |label: &str, of: fn(&Latency) -> f64| {
            let series: Vec<Series> = BYPASS_PATHS
                .iter()
                .filter_map(|path| {
                    let mut points: Vec<(f64, f64)> = cells
                        .iter()
                        .filter(|c| c.transport == *path)
                        .filter_map(|c| Some((tables::row_size(c) as f64, us(of(&c.latency?)))))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (!points.is_empty()).then(|| Series {
                        name: format!("{path} {label}"),
                        colour: BYPASS_PATHS.iter().position(|p| p == path).unwrap_or(0),
                        dashed: *path == "sockperf",
                        points,
                    })
                })
                .collect();
            let mut sizes: Vec<usize> = cells.iter().map(|c| tables::row_size(c)).collect();
            sizes.sort_unstable();
            sizes.dedup();
            LinePanel {
                title: format!("{label} (half round trip)"),
                x_desc: "message size (bytes)".to_string(),
                y_desc: "latency (microseconds)".to_string(),
                x_ticks: sizes.iter().map(|&s| (s as f64, s.to_string())).collect(),
                log_y: series_span_decades(&series),
                series,
            }
        };
        out.push(Planned {
            name: name.to_string(),
            title: title.clone(),
            plot: Plot::Lines(vec![
                panel("median", |l| l.median_ns),
                panel("99.9th", |l| l.p999_ns),
            ]),
        });
    }
    out
}
