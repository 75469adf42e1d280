//! The report's charts, drawn with plotters as SVG (inlined in `report.html`) and PNG.
//!
//! Choosing what to draw ([`plan`]) is separate from drawing it, so the choice can be tested
//! without pixels. Text is set in DejaVu Sans, compiled into the binary (the `dejavu` crate), so
//! the charts render the same on a machine with no fonts installed.

use crate::error::ReportError;
use crate::model::{Cell, Latency, Results, Scenario};
use crate::tables::{self, rate_label, shown};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One chart written by [`charts`]: the same drawing as SVG and as PNG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// The file stem, also the chart's `data-name` in `report.html`: `latency_vs_size`,
    /// `stddev_udp`.
    pub name: String,
    /// What the chart shows, as in its caption.
    pub title: String,
    /// The SVG document, as written to `svg_path`.
    pub svg: String,
    /// `charts/<name>.svg`.
    pub svg_path: PathBuf,
    /// `charts/<name>.png`.
    pub png_path: PathBuf,
}

/// The font family name the charts ask plotters for; registered from DejaVu Sans.
const FONT: &str = "sans-serif";

/// Ten colours that stay apart from each other (Tableau 10). Transports keep one colour in
/// every chart.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Draws every chart the results have data for into `charts_dir` (created if needed), each as
/// `<name>.svg` and `<name>.png`, and returns them in report order. Charts without data are
/// not drawn and not returned.
pub fn charts(results: &Results, charts_dir: &Path) -> Result<Vec<Chart>, ReportError> {
    register_fonts()?;
    let planned = plan(results);
    if planned.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(charts_dir).map_err(|source| ReportError::Write {
        path: charts_dir.to_path_buf(),
        source,
    })?;
    planned
        .into_iter()
        .map(|p| write_chart(charts_dir, p))
        .collect()
}

fn register_fonts() -> Result<(), ReportError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ReportError::Font)
    }
}

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

    fn centre(&self, centre: Centre) -> f64 {
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

fn us(ns: f64) -> f64 {
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
        .filter(|c| c.scenario == Some(Scenario::Load) && shown(c) && c.latency.is_some())
        .collect()
}

/// The rate of the latency-vs-size chart and of the box plot's load boxes: 100K when measured
/// (seed 001 uses 100,000 msgs/sec), else the lowest rate measured at every size, else the rate
/// measured at the most sizes.
pub(crate) fn chart_rate(load: &[&Cell]) -> Option<f64> {
    let mut rates: Vec<f64> = load
        .iter()
        .filter_map(|c| c.rate_requested_msgs_per_s)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup_by(|a, b| same_rate(*a, *b));
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
    let mut rates: Vec<f64> = cells
        .iter()
        .filter_map(|c| c.rate_requested_msgs_per_s)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup_by(|a, b| same_rate(*a, *b));
    rates.into_iter().map(|r| (r, rate_label(r))).collect()
}

/// A file-name-safe form of a transport name.
fn file_safe(name: &str) -> String {
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
            .filter(|c| c.scenario == Some(Scenario::Pingpong) && c.latency.is_some())
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
        .filter(|c| c.scenario == Some(Scenario::Load))
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

impl Plot {
    /// The picture's size in pixels.
    fn size(&self) -> (u32, u32) {
        match self {
            Plot::Lines(panels) if panels.len() > 1 => (1200, 520),
            Plot::Boxes(p) => (960, (120 + 40 * p.boxes.len() as u32).max(360)),
            _ => (960, 540),
        }
    }
}

fn write_chart(dir: &Path, planned: Planned) -> Result<Chart, ReportError> {
    let size = planned.plot.size();
    let svg_path = dir.join(format!("{}.svg", planned.name));
    let png_path = dir.join(format!("{}.png", planned.name));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root, &planned).map_err(|e| ReportError::Chart {
            path: svg_path.clone(),
            detail: e.to_string(),
        })?;
    }
    std::fs::write(&svg_path, &svg).map_err(|source| ReportError::Write {
        path: svg_path.clone(),
        source,
    })?;
    {
        let root = BitMapBackend::new(&png_path, size).into_drawing_area();
        draw(&root, &planned).map_err(|e| ReportError::Chart {
            path: png_path.clone(),
            detail: e.to_string(),
        })?;
    }
    Ok(Chart {
        name: planned.name,
        title: planned.title,
        svg,
        svg_path,
        png_path,
    })
}

/// A linear axis from 0 to `slots` with one tick in the middle of each unit slot, for bar
/// groups and boxes (labels come from the chart's formatter).
#[derive(Debug, Clone, Copy)]
struct SlotAxis {
    slots: usize,
}

impl Ranged for SlotAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (span * value / self.slots.max(1) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.slots).map(|i| i as f64 + 0.5).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.slots.max(1) as f64
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, planned: &Planned) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    match &planned.plot {
        Plot::Lines(panels) if panels.len() > 1 => {
            let area = root.titled(&planned.title, (FONT, 22))?;
            let parts = area.split_evenly((1, panels.len()));
            for (part, panel) in parts.iter().zip(panels) {
                draw_lines(part, panel)?;
            }
        }
        Plot::Lines(panels) => {
            for panel in panels {
                draw_lines(root, panel)?;
            }
        }
        Plot::Bars(bars) => draw_bars(root, &planned.title, bars)?,
        Plot::Boxes(p) => draw_boxes(root, &planned.title, p)?,
    }
    root.present()
}

/// Axis numbers with as many decimals as the axis' scale needs.
fn axis_number(v: f64, top: f64) -> String {
    if top < 1.0 {
        format!("{v:.2}")
    } else if top < 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The label of the tick nearest `v` (ticks are the data's own x values).
fn tick_label(ticks: &[(f64, String)], v: f64) -> String {
    ticks
        .iter()
        .find(|(x, _)| (x - v).abs() <= x.abs() * 1e-9 + 1e-9)
        .map(|(_, label)| label.clone())
        .unwrap_or_default()
}

/// The ticks of a log axis from `x_min` to `x_max` drawn `width_px` wide that keep their labels
/// apart: ascending, each at least 36 pixels (a label's width) after the last one kept
/// (100K 150K 200K 300K 400K 500K 600K on a narrow panel keeps 100K 200K 400K).
fn spaced_ticks(
    ticks: impl Iterator<Item = f64>,
    x_min: f64,
    x_max: f64,
    width_px: u32,
) -> Vec<f64> {
    let mut sorted: Vec<f64> = ticks.collect();
    sorted.sort_by(f64::total_cmp);
    let span = (x_max / x_min).log10().max(f64::MIN_POSITIVE);
    let min_step = span * 36.0 / f64::from(width_px.max(1));
    let mut kept: Vec<f64> = Vec::new();
    for t in sorted {
        if kept.last().is_none_or(|&k| (t / k).log10() >= min_step) {
            kept.push(t);
        }
    }
    kept
}

fn draw_lines<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &LinePanel) -> DrawResult<DB> {
    let xs = p.x_ticks.iter().map(|t| t.0);
    let x_min = xs.clone().fold(f64::INFINITY, f64::min);
    let x_max = xs.fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) = if x_min.is_finite() && x_min > 0.0 {
        (x_min / 1.5, x_max * 1.5)
    } else {
        (1.0, 10.0)
    };
    let ys = p.series.iter().flat_map(|s| s.points.iter().map(|pt| pt.1));
    let y_max = ys.clone().fold(0.0, f64::max);
    let y_min = ys.filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
    let ticks = spaced_ticks(
        p.x_ticks.iter().map(|t| t.0),
        x_min,
        x_max,
        area.dim_in_pixel().0,
    );
    let builder = || {
        let mut b = ChartBuilder::on(area);
        b.caption(&p.title, (FONT, 20))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(64);
        b
    };
    let x_label = |v: &f64| tick_label(&p.x_ticks, *v);
    // The mesh, the series and the legend, the same on either y axis.
    macro_rules! draw_on {
        ($chart:expr, $y_top:expr) => {{
            let mut chart = $chart;
            let y_top = $y_top;
            let y_label = |v: &f64| axis_number(*v, y_top);
            chart
                .configure_mesh()
                .x_desc(p.x_desc.as_str())
                .y_desc(p.y_desc.as_str())
                .x_label_formatter(&x_label)
                .y_label_formatter(&y_label)
                .label_style((FONT, 13))
                .axis_desc_style((FONT, 15))
                .light_line_style(RGBColor(238, 238, 238))
                .draw()?;
            for s in &p.series {
                let c = colour(s.colour);
                let line = c.stroke_width(2);
                // A log axis has no zero: points at or below zero are left out.
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|pt| !p.log_y || pt.1 > 0.0)
                    .collect();
                if s.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, line))?
                        .label(s.name.as_str())
                        .legend(move |(x, y)| {
                            EmptyElement::at((x, y))
                                + PathElement::new(vec![(0, 0), (7, 0)], line)
                                + PathElement::new(vec![(12, 0), (19, 0)], line)
                                + TriangleMarker::new((10, 0), 4, c.filled())
                        });
                    chart.draw_series(
                        pts.iter().map(|&pt| TriangleMarker::new(pt, 5, c.filled())),
                    )?;
                } else {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), line))?
                        .label(s.name.as_str())
                        .legend(move |(x, y)| {
                            EmptyElement::at((x, y))
                                + PathElement::new(vec![(0, 0), (19, 0)], line)
                                + Circle::new((10, 0), 3, c.filled())
                        });
                    chart.draw_series(pts.iter().map(|&pt| Circle::new(pt, 4, c.filled())))?;
                }
            }
            chart
        }};
    }
    let mut chart = if p.log_y && y_min.is_finite() && y_max > 0.0 {
        // Headroom above the data for the legend: a decade and a half on a log axis.
        let (lo, hi) = (y_min / 2.0, y_max * 30.0);
        let mut chart = draw_on!(
            builder().build_cartesian_2d(
                (x_min..x_max).log_scale().with_key_points(ticks),
                (lo..hi).log_scale(),
            )?,
            hi
        );
        return chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font((FONT, 13))
            .draw();
    } else {
        // Headroom above the data for the legend.
        let y_top = if y_max > 0.0 { y_max * 1.35 } else { 1.0 };
        draw_on!(
            builder().build_cartesian_2d(
                (x_min..x_max).log_scale().with_key_points(ticks),
                0f64..y_top,
            )?,
            y_top
        )
    };
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 13))
        .draw()
}

fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    b: &Bars,
) -> DrawResult<DB> {
    let groups = b.groups.len().max(1);
    let top = b
        .values
        .iter()
        .flatten()
        .flatten()
        .fold(0.0, |a: f64, &v| a.max(v));
    let top = if top > 0.0 { top * 1.35 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 20))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(64)
        .build_cartesian_2d(SlotAxis { slots: groups }, 0f64..top)?;
    let x_label = |v: &f64| {
        b.groups
            .get(v.floor() as usize)
            .cloned()
            .unwrap_or_default()
    };
    let y_label = |v: &f64| axis_number(*v, top);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("message size")
        .y_desc("std dev (microseconds)")
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    let slot = 0.8 / b.bars.len().max(1) as f64;
    for (i, (name, values)) in b.bars.iter().zip(&b.values).enumerate() {
        let c = colour(i);
        let rects = values.iter().enumerate().filter_map(|(g, v)| {
            let v = (*v)?;
            let x0 = g as f64 + 0.1 + i as f64 * slot;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + slot * 0.9, v)],
                c.filled(),
            ))
        });
        chart
            .draw_series(rects)?
            .label(format!("{name} msgs/sec"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 13))
        .draw()
}

fn draw_boxes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    plot: &BoxPlot,
) -> DrawResult<DB> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let hi = plot
        .boxes
        .iter()
        .flat_map(|b| [b.p99, b.p75, b.centre(plot.centre)])
        .filter(|v| positive(*v))
        .fold(0.0, f64::max);
    if !plot.log_scale {
        let hi = if hi > 0.0 { hi * 1.1 } else { 1.0 };
        let x_label = move |v: &f64| axis_number(*v, hi);
        return draw_boxes_on(
            area,
            title,
            plot,
            0f64..hi,
            0.0,
            &format!("{} (microseconds)", plot.quantity),
            &x_label,
        );
    }
    let lo = plot
        .boxes
        .iter()
        .flat_map(|b| [b.p1, b.p25, b.centre(plot.centre)])
        .filter(|v| positive(*v))
        .fold(f64::INFINITY, f64::min);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.01, 1.0)
    };
    let x_label = |v: &f64| {
        if *v >= 10.0 {
            format!("{v:.0}")
        } else if *v >= 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.2}")
        }
    };
    draw_boxes_on(
        area,
        title,
        plot,
        (lo..hi).log_scale(),
        lo,
        &format!("{} (microseconds, log scale)", plot.quantity),
        &x_label,
    )
}

/// Draws the boxes on the value axis `x`, whose start is `lo`: values at or below it (a log
/// axis cannot show zero) sit on it.
fn draw_boxes_on<DB: DrawingBackend, X>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    plot: &BoxPlot,
    x: X,
    lo: f64,
    x_desc: &str,
    x_label: &dyn Fn(&f64) -> String,
) -> DrawResult<DB>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let boxes = &plot.boxes;
    let n = boxes.len().max(1);
    let clamp = |v: f64| if v.is_finite() && v > lo { v } else { lo };
    let longest = boxes
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0) as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(16 + 8 * longest)
        .build_cartesian_2d(x, SlotAxis { slots: n })?;
    // The first box at the top.
    let row_y = |i: usize| (n - 1 - i) as f64 + 0.5;
    let y_label = |v: &f64| {
        let row = v.floor() as usize;
        boxes
            .get(n.saturating_sub(1).saturating_sub(row))
            .map(|b| b.label.clone())
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(x_desc)
        .x_label_formatter(x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for (i, b) in boxes.iter().enumerate() {
        let c = colour(b.colour);
        let y = row_y(i);
        let (p1, p25, centre, p75, p99) = (
            clamp(b.p1),
            clamp(b.p25),
            clamp(b.centre(plot.centre)),
            clamp(b.p75),
            clamp(b.p99),
        );
        let whisker = BLACK.stroke_width(1);
        chart.draw_series([
            PathElement::new(vec![(p1, y), (p25, y)], whisker),
            PathElement::new(vec![(p75, y), (p99, y)], whisker),
            PathElement::new(vec![(p1, y - 0.15), (p1, y + 0.15)], whisker),
            PathElement::new(vec![(p99, y - 0.15), (p99, y + 0.15)], whisker),
        ])?;
        chart.draw_series([
            Rectangle::new([(p25, y - 0.3), (p75, y + 0.3)], c.mix(0.35).filled()),
            Rectangle::new([(p25, y - 0.3), (p75, y + 0.3)], c.stroke_width(1)),
        ])?;
        chart.draw_series([PathElement::new(
            vec![(centre, y - 0.3), (centre, y + 0.3)],
            BLACK.stroke_width(3),
        )])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_axis_ticks_keep_their_labels_apart() {
        let rates = [1e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1.5e5, 2e5, 3e5, 4e5, 5e5, 6e5];
        let kept = super::spaced_ticks(rates.into_iter(), 1e3 / 1.5, 6e5 * 1.5, 480);
        assert_eq!(kept, [1e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 4e5]);
        // Wide enough: every tick stays.
        let all = super::spaced_ticks(rates.into_iter(), 1e3 / 1.5, 6e5 * 1.5, 4800);
        assert_eq!(all, rates);
    }

    use super::*;

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
}
