//! Where a folder of recordings keeps each stream: `DIR/<topic>/<session>/`, the topic
//! escaped for a file name and the session as 8 hex digits; and finding a topic's recordings.

use crate::{ArchiveError, Entry, RecordingReader};
use std::path::{Path, PathBuf};

/// The folder name of `topic`: its bytes kept where they are letters, digits, `.`, `-` or
/// `_`, others as `%XX`; a leading `.` escaped (no `.` or `..`); past 200 bytes cut and ended
/// with a hash of the whole (the topic itself is in every segment's header).
pub fn topic_dir_name(topic: &str) -> String {
    let mut out = String::new();
    for (i, b) in topic.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > 200 {
        let h = topic.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        out.truncate(180);
        // (Cut on a char boundary: the escaped name is ASCII.)
        out.push_str(&format!("~{h:016x}"));
    }
    out
}

/// The folder of one stream's recording under `dir`.
pub fn stream_dir(dir: &Path, topic: &str, session_id: u32) -> PathBuf {
    dir.join(topic_dir_name(topic))
        .join(format!("{session_id:08x}"))
}

/// Nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The recordings of `topic` under `dir` (one per session), by their first message's
/// receive time.
pub fn recordings_of(dir: &Path, topic: &str) -> Result<Vec<RecordingReader>, ArchiveError> {
    // (The escaped name may be shared by two topics cut at 200 bytes: the header says.)
    let out = recordings_in(&dir.join(topic_dir_name(topic)))?
        .into_iter()
        .filter(|r| r.meta().topic == topic);
    let mut keyed = Vec::new();
    for r in out {
        let first = r
            .cursor()
            .next_entry()
            .and_then(|e| match e {
                Ok(Entry::Message { receive_ns, .. }) => Some(receive_ns),
                _ => None,
            })
            .unwrap_or(u64::MAX);
        keyed.push((first, r));
    }
    keyed.sort_by_key(|(t, r)| (*t, r.meta().session_id));
    Ok(keyed.into_iter().map(|(_, r)| r).collect())
}

/// Every recording (session folder) in the topic folder `tdir`; none when it does not exist.
pub(crate) fn recordings_in(tdir: &Path) -> Result<Vec<RecordingReader>, ArchiveError> {
    let entries = match std::fs::read_dir(tdir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ArchiveError::io(tdir, "read folder", e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| ArchiveError::io(tdir, "read folder", e))?;
        if e.file_type().is_ok_and(|ft| ft.is_dir()) {
            out.push(RecordingReader::open(&e.path())?);
        }
    }
    Ok(out)
}
