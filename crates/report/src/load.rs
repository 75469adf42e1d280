//! Reading a results folder's `results.json`.

use crate::error::ReportError;
use crate::model::{Results, FORMAT_VERSION};
use std::io;
use std::path::Path;

/// The results file inside a results folder.
pub const RESULTS_FILE: &str = "results.json";

/// Reads `dir/results.json`.
///
/// The `format` field is checked before the rest, so a file written by another version of
/// Peregrine is reported as such rather than as a missing or unknown field.
pub fn load(dir: &Path) -> Result<Results, ReportError> {
    let path = dir.join(RESULTS_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => ReportError::NotFound { path: path.clone() },
        _ => ReportError::Read {
            path: path.clone(),
            source,
        },
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ReportError::Malformed {
            path: path.clone(),
            detail: e.to_string(),
        })?;
    let format = match value.get("format") {
        Some(f) => f.as_u64().ok_or_else(|| ReportError::Malformed {
            path: path.clone(),
            detail: format!("`format` is {f}, not a version number"),
        })?,
        None => {
            return Err(ReportError::Malformed {
                path,
                detail: "no `format` field at the top level".to_string(),
            })
        }
    };
    if format != u64::from(FORMAT_VERSION) {
        return Err(ReportError::UnsupportedFormat {
            written_by: value
                .get("peregrine_version")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            path,
            found: format,
            expected: FORMAT_VERSION,
        });
    }
    // Parse the text again (not the value) so errors carry a line and column.
    serde_json::from_str(&text).map_err(|e| ReportError::Malformed {
        path,
        detail: e.to_string(),
    })
}
