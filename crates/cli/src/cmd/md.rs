//! What the market data commands (`feed`, `distributor`, `client`) share beyond the library
//! (`peregrine_market_data::backbone` has the topics, the request URI and the backbone's
//! sealing): list files, the file-descriptor limit.

use anyhow::{bail, Context as _, Result};
use std::path::Path;

/// The lines of a list file (items, a watchlist): trimmed, without blank lines and `#`
/// comments; each checked by `check`, an error naming the file, the line and the fix.
pub fn read_list(
    path: &Path,
    what: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Err(e) = check(line) {
            bail!("{}:{}: {what} '{line}' {e}", path.display(), i + 1);
        }
        out.push(line.to_string());
    }
    if out.is_empty() {
        bail!(
            "{} holds no {what}: write one per line (# starts a comment)",
            path.display()
        );
    }
    Ok(out)
}

/// Raises the soft limit of open files to the hard limit (a distributor serves a socket per
/// client); returns the soft limit in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    // `None` is unlimited; the soft limit is never above the hard one.
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
