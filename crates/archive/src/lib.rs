//! Recordings of Peregrine streams: the storage under the recorder and replay (Aeron Archive's
//! and Ultra Messaging's persistent store's role; docs/recording.md).
//!
//! A recording is one stream (a topic's session) in a folder of fixed-size segment files.
//! Each file starts with a [`format::segment_header`] and holds [`format::record`]s: a
//! message with its sequence, the time it was received and a CRC-32 over all of it.
//!
//! - [`RecordingWriter`] appends, rolls to a new segment when one is full, and makes the
//!   records durable as its [`Durability`] says (`none`, `interval:MS`, `each`). Opened on
//!   an existing recording it recovers first: a torn tail (a record half written when the
//!   process or the machine stopped, or a disk filled) is cut and counted, never replayed.
//! - [`RecordingReader`] reads a recording from its start, a sequence or a time; a damaged
//!   record (a flipped byte) is reported with its file and offset, and reading carries on
//!   with the next good one.
//!
//! ```no_run
//! use peregrine_archive::{RecordingReader, RecordingWriter, StreamMeta, WriterOptions};
//! use std::path::Path;
//!
//! let meta = StreamMeta { topic: "orders".into(), session_id: 7, stream_id: 1 };
//! let mut w = RecordingWriter::open(Path::new("rec/orders/00000007"), &meta, WriterOptions::default(), 0)?;
//! w.append(0, 1_800_000_000_000_000_000, b"first")?;
//! w.close()?;
//! let r = RecordingReader::open(Path::new("rec/orders/00000007"))?;
//! let mut c = r.from_sequence(0)?;
//! while let Some(e) = c.next_entry() {
//!     println!("{:?}", e?);
//! }
//! # Ok::<(), peregrine_archive::ArchiveError>(())
//! ```

#![forbid(unsafe_code)]

pub mod durable;
#[cfg(feature = "live")]
mod durable_subscriber;
#[cfg(feature = "export")]
pub mod export;
pub mod folder;
pub mod format;
#[cfg(feature = "live")]
pub mod merge;
mod pace;
mod reader;
#[cfg(feature = "live")]
pub mod recorder;
mod segments;
pub mod serve;
mod writer;

#[cfg(feature = "live")]
pub use durable_subscriber::DurableSubscriber;
#[cfg(feature = "live")]
pub use merge::{History, MergeEvent, MergedMessage, MergingSubscriber, Start};
pub use pace::Pacer;
pub use reader::{Cursor, Damage, Entry, RecordingReader};
#[cfg(feature = "live")]
pub use recorder::{Recorder, RecorderEvent};
pub use serve::{RemoteEntry, ReplayClient, ReplayServer};
pub use writer::{Durability, RecordingWriter, Recovery, Retention, StreamMeta, WriterOptions};

use std::fmt;
use std::path::PathBuf;

/// Why a recording could not be written or read.
#[derive(Debug)]
pub enum ArchiveError {
    /// A file operation failed (a full disk is `StorageFull`).
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    /// The disk under the recording is full: the stream is no longer recorded.
    StorageFull { dir: PathBuf },
    /// A segment's header is not valid: the file is not (or no longer) a segment.
    BadSegment {
        path: PathBuf,
        error: format::FormatError,
    },
    /// A durable subscriber's positions file is not valid (damaged, or not one).
    BadPositions {
        path: PathBuf,
        error: format::FormatError,
    },
    /// Another writer (a second recorder of the same folder) is writing this recording.
    Busy { path: PathBuf },
    /// The folder holds no segment.
    NotARecording { dir: PathBuf },
    /// The folder records another stream than the writer was opened for.
    OtherStream { dir: PathBuf, found: String },
    /// A message longer than a segment holds.
    TooLarge { len: usize, max: usize },
    /// A message whose sequence is not after the last recorded: a recording holds each
    /// sequence once, in order.
    SequenceNotAfter { sequence: u64, last: u64 },
    /// A setting out of range, with the fix.
    Config(String),
    /// An earlier write failed: this writer appends nothing more.
    Stopped { dir: PathBuf, reason: String },
    /// A replay server could not be reached or read.
    Net {
        addr: String,
        op: &'static str,
        source: std::io::Error,
    },
    /// A replay server answered with an error.
    Remote { addr: String, text: String },
    /// A replay server (or client) sent what the protocol does not allow.
    BadReply {
        addr: String,
        error: format::FormatError,
    },
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Io { path, op, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            ArchiveError::StorageFull { dir } => write!(
                f,
                "the disk under {} is full: recording of this stream stopped (what was written is kept; free space and start again)",
                dir.display()
            ),
            ArchiveError::BadSegment { path, error } => {
                write!(f, "{}: not a valid segment file: {error}", path.display())
            }
            ArchiveError::BadPositions { path, error } => write!(
                f,
                "{}: not a valid positions file ({error}): remove it to start the durable name afresh",
                path.display()
            ),
            ArchiveError::Busy { path } => write!(
                f,
                "{} is being written by another process (a second recorder of the same folder?): give each recorder a folder of its own",
                path.display()
            ),
            ArchiveError::NotARecording { dir } => write!(
                f,
                "{} holds no recording (no NNNNNNNNNNNNNNNNNNNN.seg segment file)",
                dir.display()
            ),
            ArchiveError::OtherStream { dir, found } => write!(
                f,
                "{} records {found}, not this stream: give each stream a folder of its own",
                dir.display()
            ),
            ArchiveError::SequenceNotAfter { sequence, last } => write!(
                f,
                "sequence {sequence} is not after the last one recorded ({last}): a recording holds each sequence once, in order"
            ),
            ArchiveError::TooLarge { len, max } => write!(
                f,
                "a message of {len} bytes does not fit a segment (at most {max}): raise the segment length"
            ),
            ArchiveError::Config(s) => f.write_str(s),
            ArchiveError::Net { addr, op, source } => write!(f, "{op} {addr}: {source}"),
            ArchiveError::Remote { addr, text } => write!(f, "the recorder at {addr}: {text}"),
            ArchiveError::BadReply { addr, error } => {
                write!(f, "{addr} does not speak the replay protocol: {error}")
            }
            ArchiveError::Stopped { dir, reason } => write!(
                f,
                "recording into {} stopped after an earlier failure ({reason})",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for ArchiveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArchiveError::Io { source, .. } => Some(source),
            ArchiveError::BadSegment { error, .. } | ArchiveError::BadPositions { error, .. } => {
                Some(error)
            }
            ArchiveError::Net { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ArchiveError {
    /// The error of `op` on `path`; a full disk (ENOSPC, EDQUOT) names the folder instead.
    pub(crate) fn io(path: &std::path::Path, op: &'static str, source: std::io::Error) -> Self {
        // EDQUOT (122 on Linux): a quota is a full disk for this recording.
        if source.kind() == std::io::ErrorKind::StorageFull || source.raw_os_error() == Some(122) {
            return ArchiveError::StorageFull {
                dir: path.parent().unwrap_or(path).to_path_buf(),
            };
        }
        ArchiveError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}
