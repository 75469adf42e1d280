//! Peregrine's benchmark results: the [`model`] of a results folder, and the report rendered
//! from it by [`render`]: `report.txt`, `charts/*.{svg,png}` and one self-contained
//! `report.html`.
//!
//! Each table and chart follows one of the four reports listed in `docs/benchmarks.md` (the
//! UM, sockperf, STAC RMDS and Reflex reports):
//!
//! | output | follows |
//! | --- | --- |
//! | text "Ping-pong latency (half round trip)" | the sockperf and Reflex reports: RTT / 2, with a ratio to the machine's own floor |
//! | text "Echo (half round trip)", per transport, mode (normal, urgent) and size, with a ratio to the ping-pong | the Reflex report's TCP/UDP NORMAL/URGENT runs |
//! | text "Full Results", per transport and size, `32B/100K` rows, "CPU-bound after N msgs/sec" | the UM report, Full Results |
//! | text "Corrected for coordinated omission" | load latency from the scheduled send time (docs/benchmarks.md) |
//! | text "Maximum sustainable throughput" | the UM report, per-transport single-threaded message rates |
//! | text "One-way latency from embedded timestamps" | the STAC RMDS report, Table 2 |
//! | text "Throughput" | the sockperf report, throughput runs |
//! | chart `latency_vs_size` (Avg and 99.9th) | the UM report, "Latency Versus Message Size" |
//! | chart `latency_vs_rate` (Avg and 99.9th) | the UM report, "Latency Versus Message Rate" |
//! | charts `stddev_<transport>` (bars by size and rate, blank when not sustained) | the UM report, "Standard Deviation (Jitter)" |
//! | chart `boxplot` (centre = mean, box = quartiles, whiskers = 1st and 99th percentiles) | the Reflex report |
//! | chart `echo_boxplot` (centre = median, box = quartiles, whiskers = 1st and 99th percentiles; log axis past two decades) | the Reflex report |
//! | chart `embedded` (mean and std dev vs update rate) | the STAC RMDS report, Figures 3-2 and 3-3 |
//! | text "Failover" and chart `failover_gaps` (per case: the gap each kill left, and the no-kill baseline; box = quartiles, centre = median, whiskers = extremes) | no report: `peregrine bench failover` (docs/benchmarks.md) |
//!
//! Latencies are shown in microseconds with two decimals; the model keeps nanoseconds.
#![deny(unsafe_code)]

mod charts;
mod error;
mod html;
mod load;
pub mod model;
mod tables;
mod text;

pub use charts::{charts, Chart};
pub use error::ReportError;
pub use html::html;
pub use load::{load, RESULTS_FILE};
pub use tables::thousands;
pub use text::text;

use std::path::{Path, PathBuf};

/// The text report's file name in a results folder.
pub const TEXT_FILE: &str = "report.txt";
/// The HTML report's file name in a results folder.
pub const HTML_FILE: &str = "report.html";
/// The charts' folder in a results folder.
pub const CHARTS_DIR: &str = "charts";

/// What [`render`] wrote.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The text report, as written to `text_path`.
    pub text: String,
    /// `DIR/report.txt`.
    pub text_path: PathBuf,
    /// `DIR/report.html`.
    pub html_path: PathBuf,
    /// The charts written to `DIR/charts/`, in report order.
    pub charts: Vec<Chart>,
}

impl Rendered {
    /// Every file written: `report.txt`, each chart's SVG and PNG, `report.html`.
    pub fn files(&self) -> Vec<&Path> {
        let mut files = vec![self.text_path.as_path()];
        for chart in &self.charts {
            files.push(&chart.svg_path);
            files.push(&chart.png_path);
        }
        files.push(&self.html_path);
        files
    }
}

/// Loads `dir/results.json` and writes the report beside it: `report.txt`, `charts/*.svg` and
/// `charts/*.png` (one pair per chart the data allows), and `report.html`.
pub fn render(dir: &Path) -> Result<Rendered, ReportError> {
    let results = load(dir)?;
    let text = text(&results);
    let text_path = dir.join(TEXT_FILE);
    write(&text_path, &text)?;
    let charts = charts(&results, &dir.join(CHARTS_DIR))?;
    let html_path = dir.join(HTML_FILE);
    write(&html_path, &html(&results, &charts))?;
    Ok(Rendered {
        text,
        text_path,
        html_path,
        charts,
    })
}

fn write(path: &Path, contents: &str) -> Result<(), ReportError> {
    std::fs::write(path, contents).map_err(|source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    })
}
