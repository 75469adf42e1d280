//! A recording's folder: its segment files, named by their base position.

use crate::ArchiveError;
use std::path::{Path, PathBuf};

/// The file name of the segment at `base` (20 digits: names sort as positions do).
pub(crate) fn file_name(base: u64) -> String {
    format!("{base:020}.seg")
}

/// The index file of segment file `segment` (`.idx` for `.seg`).
pub(crate) fn index_path(segment: &Path) -> PathBuf {
    segment.with_extension("idx")
}

/// The segments in `dir`, by base position.
pub(crate) fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, ArchiveError> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ArchiveError::io(dir, "read folder", e))?;
    for e in entries {
        let e = e.map_err(|e| ArchiveError::io(dir, "read folder", e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(digits) = name.strip_suffix(".seg") else {
            continue;
        };
        if digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(base) = digits.parse::<u64>() {
                out.push((base, e.path()));
            }
        }
    }
    out.sort_unstable_by_key(|(b, _)| *b);
    Ok(out)
}
