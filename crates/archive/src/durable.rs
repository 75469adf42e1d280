//! Durable subscribers' positions, kept in a recording folder: `DIR/.durable/<name>` holds a
//! [`positions`](crate::format::positions) frame (replaced whole: written beside it, forced,
//! renamed). A recorder keeps them for subscribers that reach it over the replay protocol
//! ([`crate::ReplayClient::load_positions`]); a subscriber that reads the folder itself keeps
//! them there directly. `.durable` starts with a dot, so no topic's folder can be it.

use crate::folder::recordings_of;
use crate::format::positions::{check_name, Op, PositionsRepr};
use crate::{ArchiveError, Entry};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The folder of the positions under a recording folder.
pub const DURABLE_DIR: &str = ".durable";

/// The file of `name`'s positions.
pub fn positions_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(DURABLE_DIR).join(name)
}

/// The positions kept for `name`, `None` when it has none. A name kept for another topic is
/// an error naming both.
pub fn load(dir: &Path, name: &str, topic: &str) -> Result<Option<PositionsRepr>, ArchiveError> {
    check_name(name).map_err(ArchiveError::Config)?;
    let path = positions_path(dir, name);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ArchiveError::io(&path, "read", e)),
    };
    let p = PositionsRepr::parse(&bytes).map_err(|error| ArchiveError::BadPositions {
        path: path.clone(),
        error,
    })?;
    if p.topic != topic {
        return Err(ArchiveError::Config(format!(
            "the durable name {name} follows topic {}, not {topic}: give each topic's subscriber a name of its own",
            p.topic
        )));
    }
    Ok(Some(p))
}

/// Keeps `p` (its op is stored as [`Op::Positions`]) as its name's positions.
pub fn save(dir: &Path, p: &PositionsRepr) -> Result<(), ArchiveError> {
    check_name(&p.name).map_err(ArchiveError::Config)?;
    let folder = dir.join(DURABLE_DIR);
    std::fs::create_dir_all(&folder).map_err(|e| ArchiveError::io(&folder, "create folder", e))?;
    let path = positions_path(dir, &p.name);
    let partial = folder.join(format!("{}.partial", p.name));
    let frame = PositionsRepr {
        op: Op::Positions,
        ..p.clone()
    }
    .emit();
    let mut f =
        std::fs::File::create(&partial).map_err(|e| ArchiveError::io(&partial, "create", e))?;
    f.write_all(&frame)
        .and_then(|()| f.sync_data())
        .map_err(|e| ArchiveError::io(&partial, "write", e))?;
    std::fs::rename(&partial, &path).map_err(|e| ArchiveError::io(&path, "rename onto", e))?;
    // The rename itself made durable.
    if let Ok(d) = std::fs::File::open(&folder) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Where `p`'s subscriber resumes each stream of its topic recorded under `dir`: its kept
/// position, and the start of every stream recorded that began after the name was created
/// and that it has no position for (a stream that came and went while it was away). By
/// session.
pub fn resume_points(dir: &Path, p: &PositionsRepr) -> Result<Vec<(u32, u64)>, ArchiveError> {
    let mut out = p.entries.clone();
    if p.created_ns != 0 {
        for r in recordings_of(dir, &p.topic)? {
            let s = r.meta().session_id;
            if out.iter().any(|e| e.0 == s) {
                continue;
            }
            let first = r.cursor().next_entry().and_then(|e| match e {
                Ok(Entry::Message {
                    sequence,
                    receive_ns,
                    ..
                }) => Some((sequence, receive_ns)),
                _ => None,
            });
            if let Some((sequence, receive_ns)) = first {
                if receive_ns >= p.created_ns {
                    out.push((s, sequence));
                }
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_kept_replaced_whole_and_bound_to_their_topic() {
        let dir = std::env::temp_dir().join(format!("durable-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&dir, "risk", "orders").unwrap(), None);
        let mut p = PositionsRepr {
            op: Op::Save,
            name: "risk".into(),
            topic: "orders".into(),
            created_ns: 5,
            entries: vec![(1, 10)],
        };
        save(&dir, &p).unwrap();
        p.entries = vec![(1, 11), (2, 0)];
        save(&dir, &p).unwrap();
        let got = load(&dir, "risk", "orders").unwrap().unwrap();
        assert_eq!(got.entries, vec![(1, 11), (2, 0)]);
        assert_eq!(got.op, Op::Positions);
        assert!(!dir.join(".durable/risk.partial").exists());
        let e = load(&dir, "risk", "quotes").unwrap_err().to_string();
        assert!(e.contains("follows topic orders, not quotes"), "{e}");
        assert!(load(&dir, "../x", "orders").is_err());
        // A damaged file is an error naming it, never positions made up.
        let path = positions_path(&dir, "risk");
        let mut b = std::fs::read(&path).unwrap();
        b[40] ^= 1;
        std::fs::write(&path, b).unwrap();
        let e = load(&dir, "risk", "orders").unwrap_err().to_string();
        assert!(e.contains(".durable/risk"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
