//! Reading a results folder's `results.json`.

use crate::error::ReportError;
use crate::model::{Detail, Results, Scenario, FORMAT_V1, FORMAT_VERSION};
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
    if format == u64::from(FORMAT_V1) {
        return from_v1(value).map_err(|e| ReportError::Malformed {
            path,
            detail: e.to_string(),
        });
    }
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

/// A format 1 file: each cell's free `detail` map becomes the typed detail of its scenario.
fn from_v1(mut value: serde_json::Value) -> Result<Results, serde_json::Error> {
    if let Some(cells) = value.get_mut("cells").and_then(|c| c.as_array_mut()) {
        for cell in cells {
            let scenario: Option<Scenario> = match cell.get("scenario") {
                Some(s) => serde_json::from_value(s.clone())?,
                None => None,
            };
            let map = match cell.get_mut("detail").map(serde_json::Value::take) {
                Some(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            let detail = serde_json::to_value(Detail::from_v1(scenario, map)?)?;
            if let Some(obj) = cell.as_object_mut() {
                obj.insert("detail".into(), detail);
            }
        }
    }
    serde_json::from_value(value)
}
