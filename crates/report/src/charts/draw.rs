//! Drawing a [`Planned`] chart with plotters: line panels, bar groups and box plots, their
//! axes and ticks, on any backend (SVG for the page, PNG beside it).

use super::plan::{Bars, BoxPlot, LinePanel, Planned, Plot};
use super::FONT;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Ten colours that stay apart from each other (Tableau 10). Transports keep one colour in
/// every chart.
pub(super) const PALETTE: [RGBColor; 10] = [
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

pub(super) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

impl Plot {
    /// The picture's size in pixels.
    pub(super) fn size(&self) -> (u32, u32) {
        match self {
            Plot::Lines(panels) if panels.len() > 1 => (1200, 520),
            Plot::Boxes(p) => (960, (120 + 40 * p.boxes.len() as u32).max(360)),
            _ => (960, 540),
        }
    }
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

pub(super) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    planned: &Planned,
) -> DrawResult<DB> {
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
pub(super) fn spaced_ticks(
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

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;
