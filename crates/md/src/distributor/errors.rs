//! Why the distributor refused something: a client's message, a request, a backbone message,
//! a configuration. Each `Display` is the text the client (or the operator) reads.

use super::ServiceId;
use crate::codec::{MdError, MessageType};
use crate::model::ItemState;
use core::fmt;

/// Why a client's connection is closed (the answer before it: a LOGIN_RESPONSE before login,
/// a STATUS `rejected` after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientError {
    /// The codec rejected a message (or the stream's framing).
    Malformed(MdError),
    /// A LOGIN of a version this distributor does not speak.
    UnsupportedVersion(u16),
    /// A LOGIN of a version this build speaks but the configuration refuses
    /// (`min_client_version`).
    VersionRefused { version: u16, min: u16 },
    /// Unknown user or wrong token (the same answer for both).
    BadCredentials,
    /// A message other than LOGIN before login.
    LoginFirst(MessageType),
    /// A second LOGIN.
    AlreadyLoggedIn,
    /// A message type only the distributor or a feed sends.
    NotFromClients(MessageType),
    /// No LOGIN within the login timeout.
    LoginTimeout { timeout_ms: u64 },
    /// A LOGIN over plaintext from an address that is not loopback, and
    /// `allow_plaintext_logins` is off.
    PlaintextLogin,
    /// Failed logins from this address or for this user: none is checked before `retry_ms`.
    Throttled { retry_ms: u64 },
    /// `max_clients` clients are logged in.
    Full { max: usize },
    /// The user has `max_clients_per_user` connections logged in.
    UserLimit { max: usize },
    /// `max_pending_clients` connections were waiting to log in when another came: the
    /// oldest of them is closed.
    Evicted { max: usize },
    /// The user was removed from the users file (a reload): logged out.
    UserRemoved,
    /// More than a message's worth sent while its login was being checked.
    InputBeforeLogin { max: usize },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ClientError::Malformed(e) => write!(f, "malformed message: {e}"),
            ClientError::UnsupportedVersion(v) => write!(
                f,
                "protocol version {v} is not supported: this distributor speaks versions {} to {}",
                crate::codec::MIN_VERSION,
                crate::codec::VERSION
            ),
            ClientError::VersionRefused { version, min } => write!(
                f,
                "protocol version {version} is refused: this distributor requires version {min} \
                 or newer (version 2 keeps idle connections alive with PINGs; \
                 min_client_version = 1 accepts older clients)"
            ),
            ClientError::BadCredentials => write!(f, "unknown user or wrong token"),
            ClientError::LoginFirst(t) => {
                write!(
                    f,
                    "log in first: the first message must be LOGIN, not {}",
                    t.name()
                )
            }
            ClientError::AlreadyLoggedIn => write!(f, "already logged in: LOGIN is sent once"),
            ClientError::NotFromClients(t) => {
                write!(
                    f,
                    "{} is not a message clients send (OPEN, CLOSE)",
                    t.name()
                )
            }
            ClientError::LoginTimeout { timeout_ms } => {
                write!(f, "no LOGIN within {timeout_ms} ms of connecting")
            }
            ClientError::PlaintextLogin => f.write_str(
                "a login over plaintext from a non-loopback address is refused (the token would \
                 cross the network in the clear): connect with TLS, or the distributor's \
                 operator sets allow_plaintext_logins = true for a trusted network",
            ),
            ClientError::Throttled { retry_ms } => write!(
                f,
                "too many failed logins from this address or for this user: try again in \
                 {retry_ms} ms"
            ),
            ClientError::Full { max } => write!(
                f,
                "the distributor serves its maximum of {max} logged-in clients (max_clients)"
            ),
            ClientError::UserLimit { max } => write!(
                f,
                "this user has its maximum of {max} connections logged in \
                 (max_clients_per_user)"
            ),
            ClientError::InputBeforeLogin { max } => write!(
                f,
                "more than {max} bytes sent before the login was answered: wait for the \
                 LOGIN_RESPONSE"
            ),
            ClientError::UserRemoved => {
                f.write_str("the user was removed from the distributor's users file: logged out")
            }
            ClientError::Evicted { max } => write!(
                f,
                "more than {max} connections were waiting to log in (max_pending_clients): \
                 the oldest, this one, was closed"
            ),
        }
    }
}

/// Why a request (or one name of it) was refused with STATUS `rejected`; the connection stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRejection {
    /// An OPEN reuses the id of a request still open.
    IdInUse(u32),
    /// A CLOSE names no open request.
    NoSuchRequest(u32),
    TooManyRequests {
        max: usize,
    },
    TooManyPatterns {
        max: usize,
    },
    /// The request's globs would take the client past `max_globs_per_client`.
    TooManyGlobs {
        max: usize,
    },
    /// Opening this item would exceed the client's watchlist bound.
    WatchlistFull {
        max: usize,
    },
}

impl fmt::Display for RequestRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RequestRejection::IdInUse(id) => {
                write!(
                    f,
                    "request id {id} is already open: choose another or CLOSE it first"
                )
            }
            RequestRejection::NoSuchRequest(id) => write!(f, "no open request has id {id}"),
            RequestRejection::TooManyRequests { max } => {
                write!(
                    f,
                    "too many open requests (at most {max}): CLOSE some first"
                )
            }
            RequestRejection::TooManyPatterns { max } => write!(
                f,
                "too many open names and globs (at most {max} per connection): CLOSE some first"
            ),
            RequestRejection::TooManyGlobs { max } => write!(
                f,
                "too many globs (at most {max} open per connection): name the items, or CLOSE \
                 some globs first"
            ),
            RequestRejection::WatchlistFull { max } => {
                write!(f, "watchlist full (at most {max} items per connection)")
            }
        }
    }
}

/// Why a backbone message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackboneError {
    /// The codec rejected it, or it is not exactly one message.
    Malformed(MdError),
    /// A type feeds do not send (only REFRESH, UPDATE and STATUS travel on the backbone).
    NotFromFeeds(MessageType),
    /// A REFRESH naming another service than the backbone's.
    WrongService,
    /// A STATUS for an item the feed's id does not name.
    UnknownItem(u32),
    /// A STATUS whose state a feed does not send (`not-entitled`, `rejected`).
    BadState(ItemState),
}

impl fmt::Display for BackboneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BackboneError::Malformed(e) => write!(f, "malformed backbone message: {e}"),
            BackboneError::NotFromFeeds(t) => {
                write!(
                    f,
                    "{} is not a message feeds send (REFRESH, UPDATE, STATUS)",
                    t.name()
                )
            }
            BackboneError::WrongService => write!(f, "a REFRESH of another service"),
            BackboneError::UnknownItem(id) => write!(f, "a STATUS for unknown feed item id {id}"),
            BackboneError::BadState(s) => write!(f, "a STATUS with state {} from a feed", s.name()),
        }
    }
}

/// A distributor configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    NoService,
    BadService {
        name: String,
        problem: String,
    },
    DuplicateService(String),
    /// `max_queue_bytes` below the smallest bound that lets a conflated client recover.
    QueueTooSmall {
        max_queue_bytes: usize,
        min: usize,
    },
    /// A limit set to 0.
    Zero(&'static str),
    /// `min_client_version` names a version this build does not speak.
    MinClientVersion(u16),
    /// Ping intervals out of order or range.
    PingIntervals {
        min_ms: u64,
        default_ms: u64,
        max_ms: u64,
    },
    /// `post_timeout_ms` out of range.
    PostTimeout {
        ms: u64,
    },
    /// `feed_gap_window_ms` or `feed_loss_overlap_ms` out of range (1 ms to `max_ms`).
    FeedWindow {
        key: &'static str,
        ms: u64,
        max_ms: u64,
    },
    /// The dictionary's messages take more than half a client's queue.
    DictionaryTooLarge {
        bytes: usize,
        max_queue_bytes: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoService => write!(f, "no service configured: name at least one"),
            ConfigError::BadService { name, problem } => write!(
                f,
                "service {name:?} {problem}: accepted: {}",
                crate::model::SERVICE_ALPHABET
            ),
            ConfigError::DuplicateService(s) => write!(f, "service {s:?} is named twice"),
            ConfigError::QueueTooSmall {
                max_queue_bytes,
                min,
            } => write!(
                f,
                "max_queue_bytes = {max_queue_bytes} is too small: at least {min} (two of the \
                 largest messages, so a conflated client can always be sent one image)"
            ),
            ConfigError::Zero(name) => write!(f, "{name} = 0: accepted: at least 1"),
            ConfigError::MinClientVersion(v) => write!(
                f,
                "min_client_version = {v}: accepted: {} to {}",
                crate::codec::MIN_VERSION,
                crate::codec::VERSION
            ),
            ConfigError::PingIntervals {
                min_ms,
                default_ms,
                max_ms,
            } => write!(
                f,
                "min_ping_interval_ms = {min_ms}, ping_interval_ms = {default_ms}, \
                 max_ping_interval_ms = {max_ms}: accepted: {} <= min <= default <= max <= \
                 {}",
                super::MIN_PING_INTERVAL_NS / 1_000_000,
                u32::MAX
            ),
            ConfigError::PostTimeout { ms } => write!(
                f,
                "post_timeout_ms = {ms}: accepted: 1 to 3600000 (an hour)"
            ),
            ConfigError::FeedWindow { key, ms, max_ms } => {
                write!(f, "{key} = {ms}: accepted: 1 to {max_ms}")
            }
            ConfigError::DictionaryTooLarge {
                bytes,
                max_queue_bytes,
            } => write!(
                f,
                "the dictionary takes {bytes} bytes on the wire, more than half of \
                 max_queue_bytes = {max_queue_bytes}: raise max_queue_bytes to at least {}",
                bytes * 2
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A client connection refused because `max_clients` are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyClients {
    /// `max_clients_per_address`.
    pub max: usize,
    pub peer: std::net::IpAddr,
}

impl fmt::Display for TooManyClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has {} connections open (max_clients_per_address): refused",
            self.peer, self.max
        )
    }
}

impl std::error::Error for TooManyClients {}

/// Why some items went stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleCause {
    /// The transport reported a loss it could not repair.
    BackboneLoss,
    /// The feed's session ended or died.
    FeedGone,
}

/// Something a driver may log. Counters count everything; events say who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    LoggedIn {
        client: super::ClientId,
        user: String,
    },
    /// The client was refused at login and is being closed.
    LoginDenied {
        client: super::ClientId,
        /// The user its LOGIN named (none if it sent no valid LOGIN).
        user: Option<String>,
        peer: std::net::IpAddr,
        error: ClientError,
    },
    /// The client broke the protocol after login (or its user was removed) and is being
    /// closed.
    ProtocolError {
        client: super::ClientId,
        /// The user it logged in as.
        user: Option<String>,
        peer: std::net::IpAddr,
        error: ClientError,
    },
    /// Nothing was read from the client for three ping intervals: it is being closed.
    Silent {
        client: super::ClientId,
        /// The user its LOGIN named.
        user: Option<String>,
        peer: std::net::IpAddr,
        silent_ms: u64,
    },
    /// The client's queue passed its bound: updates are conflated from now.
    Conflating { client: super::ClientId },
    /// The conflated client caught up: every changed item was sent again.
    CaughtUp { client: super::ClientId },
    /// The client's queue passed its bound and its policy is `disconnect`.
    SlowDisconnect { client: super::ClientId },
    BackboneRejected {
        service: ServiceId,
        error: BackboneError,
    },
    /// Two feeds of a service sent the same `item_seq` of an item with different images:
    /// they are not fed the same stream. The first one's image stays.
    FeedsDisagree {
        service: ServiceId,
        item: String,
        item_seq: u32,
    },
    /// Items of a service went stale; an image request for all of them follows.
    ServiceStale {
        service: ServiceId,
        items: usize,
        cause: StaleCause,
    },
    /// A reload of the users file took entitlements from a logged-in client: `items` it was
    /// watching were answered STATUS `not-entitled` and are no longer sent to it (`requests`
    /// of them for a whole service).
    Revoked {
        client: super::ClientId,
        user: String,
        items: usize,
        requests: usize,
    },
    /// A client's post was answered (by its provider, or by the distributor: see `code`).
    Posted {
        client: super::ClientId,
        user: String,
        service: String,
        item: String,
        code: crate::codec::AckCode,
    },
}
