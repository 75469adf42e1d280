//! The report's charts, drawn with plotters as SVG (inlined in `report.html`) and PNG.
//!
//! Choosing what to draw (`plan.rs`) is separate from drawing it (`draw.rs`), so the choice can
//! be tested without pixels. Text is set in DejaVu Sans, compiled into the binary (the `dejavu`
//! crate), so the charts render the same on a machine with no fonts installed.

mod draw;
mod plan;
#[cfg(test)]
mod tests;

use self::draw::draw;
use self::plan::{plan, Planned};
use crate::error::ReportError;
use crate::model::Results;
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
