//! One small error enum per operation.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a publisher or subscriber could not be created.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// The URI or one of its parameters is invalid.
    Uri(crate::uri::UriError),
    /// The segment name is not acceptable.
    InvalidName(String),
    /// A live publisher already owns this name.
    InUse { name: String, pid: Option<u32> },
    /// A system call failed.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// An existing segment cannot be read by this build.
    Incompatible { path: PathBuf, what: String },
    /// The segment carries another topic than the one asked for.
    TopicMismatch {
        uri: String,
        wanted: String,
        found: String,
    },
    /// The topic name is empty, too long, or contains a NUL byte.
    InvalidTopic(String),
    /// Every subscriber slot of the segment is taken.
    Full { path: PathBuf, max_subscribers: u32 },
    /// A socket could not be set up as the URI asks.
    Socket {
        uri: String,
        what: String,
        source: io::Error,
    },
    /// The shared-memory directory is missing, or is not safe to use (a symbolic link, another
    /// user's, readable by others); `problem` names the fix.
    SegmentDir { path: PathBuf, problem: String },
    /// A file under a segment's name is refused: a symbolic link, not a regular file, or
    /// another user's (or another group's) file.
    Refused { path: PathBuf, why: String },
    /// The kernel bypass (`xdp=`) could not be set up.
    Xdp {
        uri: String,
        error: crate::net::xdp::XdpError,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Uri(e) => e.fmt(f),
            OpenError::InvalidName(why) => f.write_str(why),
            OpenError::InUse { name, pid: Some(pid) } => write!(
                f,
                "ipc://{name} already has a live publisher (pid {pid}); choose another name or stop that process"
            ),
            OpenError::InUse { name, pid: None } => {
                write!(f, "ipc://{name} already has a live publisher; choose another name or stop it")
            }
            OpenError::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            OpenError::Xdp { uri, error } => write!(f, "{uri}: {error}"),
            OpenError::Incompatible { path, what } => write!(
                f,
                "{} is not a segment this build can use: {what} (remove the file if no process uses it)",
                path.display()
            ),
            OpenError::TopicMismatch { uri, wanted, found } => {
                write!(f, "{uri} carries topic '{found}', not '{wanted}'")
            }
            OpenError::InvalidTopic(why) => f.write_str(why),
            OpenError::Socket { uri, what, source } => write!(f, "{uri}: {what}: {source}"),
            OpenError::SegmentDir { path, problem } => {
                write!(f, "shared-memory directory {}: {problem}", path.display())
            }
            OpenError::Refused { path, why } => write!(f, "refused {}: {why}", path.display()),
            OpenError::Full { path, max_subscribers } => write!(
                f,
                "{} already has {max_subscribers} subscribers (its publisher's max_subscribers); raise it with ?max_subscribers=N",
                path.display()
            ),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Io { source, .. } => Some(source),
            OpenError::Socket { source, .. } => Some(source),
            OpenError::Uri(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::uri::UriError> for OpenError {
    fn from(e: crate::uri::UriError) -> Self {
        OpenError::Uri(e)
    }
}

/// Why `offer` did not publish a message. Nothing was written in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OfferError {
    /// The network send failed (`errno`); the message may have reached some receivers.
    Send { errno: i32 },
    /// Back-pressure: the slowest subscriber is a whole log behind. Retry later (or idle).
    BackPressured,
    /// The message is larger than the transport accepts.
    TooLarge { len: usize, max: usize },
    /// The publisher was closed.
    Closed,
    /// The shared-memory segment was truncated (or otherwise damaged) under the publisher by
    /// another process: nothing more can be published on it. The path is leaked once per
    /// damaged publisher so that this error stays `Copy`.
    SegmentDamaged { path: &'static std::path::Path },
    /// A claimed message was committed after another offer or commit on the same publisher
    /// took its room: nothing was published. Claim again.
    ClaimStale,
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfferError::BackPressured => f.write_str("back-pressured: the slowest subscriber has not made room yet"),
            OfferError::TooLarge { len, max } => write!(
                f,
                "message of {len} bytes exceeds this transport's maximum of {max} bytes (on ipc:// raise ?capacity=)"
            ),
            OfferError::Closed => f.write_str("the publisher is closed"),
            OfferError::ClaimStale => f.write_str(
                "the claim was overtaken by another offer or commit on this publisher and published nothing: claim again"
            ),
            OfferError::SegmentDamaged { path } => write!(
                f,
                "shared-memory segment {} was truncated or damaged by another process of your user: this publisher cannot go on; create a new one",
                path.display()
            ),
            OfferError::Send { errno } if *errno == libc::EMSGSIZE => write!(
                f,
                "network send failed: {} (the datagram is larger than the path MTU: lower ?datagram=)",
                io::Error::from_raw_os_error(*errno)
            ),
            OfferError::Send { errno } => {
                write!(f, "network send failed: {}", io::Error::from_raw_os_error(*errno))
            }
        }
    }
}
impl std::error::Error for OfferError {}
