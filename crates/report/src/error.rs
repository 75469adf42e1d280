//! What can go wrong while loading a results folder or rendering its report.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error from [`load`](crate::load()), [`charts`](crate::charts()) or
/// [`render`](crate::render()).
///
/// Every message names the file involved and says what to do about it.
#[derive(Debug)]
pub enum ReportError {
    /// `results.json` (or the folder holding it) does not exist.
    NotFound {
        /// The `results.json` that was looked for.
        path: PathBuf,
    },
    /// `results.json` exists but could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: io::Error,
    },
    /// `results.json` is not valid JSON, or does not have the layout of
    /// [`Results`](crate::model::Results).
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the parser said, with the line and column where it applies.
        detail: String,
    },
    /// `results.json` declares a layout version this reader does not know.
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The `format` field found in the file.
        found: u64,
        /// [`FORMAT_VERSION`](crate::model::FORMAT_VERSION), the version this reader knows.
        expected: u32,
        /// The `peregrine_version` that wrote the file, when the file says.
        written_by: Option<String>,
    },
    /// A report file or the charts folder could not be written.
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why writing failed.
        source: io::Error,
    },
    /// plotters failed while drawing a chart.
    Chart {
        /// The file being drawn.
        path: PathBuf,
        /// What plotters said.
        detail: String,
    },
    /// The embedded DejaVu font could not be registered with plotters (a build problem, not a
    /// data problem).
    Font,
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::NotFound { path } => write!(
                f,
                "{}: not found; point the report at a results folder written by `peregrine bench` \
                 (one that contains results.json)",
                path.display()
            ),
            ReportError::Read { path, source } => write!(
                f,
                "{}: cannot be read ({source}); check the file's permissions",
                path.display()
            ),
            ReportError::Malformed { path, detail } => write!(
                f,
                "{}: not a valid results file ({detail}); restore it from the benchmark run or \
                 re-run the benchmark to write it again",
                path.display()
            ),
            ReportError::UnsupportedFormat {
                path,
                found,
                expected,
                written_by,
            } => {
                write!(
                    f,
                    "{}: results format version {found}, but this peregrine reads version \
                     {expected}; ",
                    path.display()
                )?;
                match written_by {
                    Some(v) => write!(f, "render it with peregrine {v}, which wrote it, ")?,
                    None => write!(f, "render it with the peregrine that wrote it, ")?,
                }
                write!(f, "or re-run the benchmark with this version")
            }
            ReportError::Write { path, source } => write!(
                f,
                "{}: cannot be written ({source}); check that the results folder is writable and \
                 the disk is not full",
                path.display()
            ),
            ReportError::Chart { path, detail } => {
                write!(f, "{}: drawing the chart failed ({detail})", path.display())
            }
            ReportError::Font => write!(
                f,
                "the embedded DejaVu Sans font was rejected by plotters; rebuild peregrine with \
                 the plotters `ab_glyph` feature and the `dejavu` crate"
            ),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Read { source, .. } | ReportError::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}
