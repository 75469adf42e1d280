//! How a consumer logs in and reconnects ([`ConsumerConfig`]), and why a session fails
//! ([`ConsumerError`]).

use crate::codec::LoginResult;
use crate::dictionary::{Dictionary, DictionaryMismatch};
use crate::model::NameError;
use std::fmt;

/// How a consumer logs in and reconnects; [`ConsumerConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub user: String,
    pub token: Vec<u8>,
    /// How many distributor addresses the driver has (attempts go through them in turn).
    pub addresses: usize,
    /// The first reconnection delay, doubled after each failed attempt (50 ms).
    pub first_backoff_ns: u64,
    /// The longest reconnection delay (2 s).
    pub max_backoff_ns: u64,
    /// The ping interval to ask the distributor for (0: the distributor's default, 5 s
    /// unless configured); the distributor takes the nearest it allows and says which. A
    /// distributor silent for three intervals is taken as lost.
    pub ping_interval_ns: u64,
    /// How long a LOGIN may wait for its answer before the connection is given up (10 s).
    pub login_timeout_ns: u64,
    /// Ask for the distributor's field dictionary after each login (true).
    pub download_dictionary: bool,
    /// The application's own dictionary, if it has one: the downloaded one must give each
    /// field they both know the same type.
    pub dictionary: Option<Dictionary>,
}

impl ConsumerConfig {
    pub fn new(user: &str, token: &[u8], addresses: usize) -> Self {
        ConsumerConfig {
            user: user.to_string(),
            token: token.to_vec(),
            addresses: addresses.max(1),
            first_backoff_ns: 50_000_000,
            max_backoff_ns: 2_000_000_000,
            ping_interval_ns: 0,
            login_timeout_ns: 10_000_000_000,
            download_dictionary: true,
            dictionary: None,
        }
    }
}

/// Why a consumer call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerError {
    BadUser {
        user: String,
        why: NameError,
    },
    /// A token of 1 to 255 bytes.
    BadToken,
    BadService {
        service: String,
        why: NameError,
    },
    BadPattern {
        pattern: String,
        why: NameError,
    },
    /// A request of no pattern, or one whose patterns do not fit in one OPEN (64 KiB).
    BadRequest {
        why: String,
    },
    /// No open request has this id.
    UnknownRequest {
        request: u32,
    },
    /// The distributor refused the login (the session is over).
    LoginRefused {
        result: LoginResult,
        text: String,
    },
    /// The distributor sent something this consumer cannot read: the connection must close.
    Protocol {
        error: String,
    },
    /// Nothing came from the distributor for three ping intervals: the connection must close
    /// (and a new one is tried).
    Silent {
        silent_ms: u64,
        interval_ms: u64,
    },
    /// The LOGIN was not answered in time: the connection must close (and a new one is
    /// tried).
    LoginTimeout {
        waited_ms: u64,
    },
    /// The distributor's dictionary gives a field another type than the application's (the
    /// session is over: fields would be misread).
    DictionaryMismatch(DictionaryMismatch),
    /// Posting needs a login with version 2 (posts are not queued while disconnected).
    NotLoggedIn,
    /// A post that cannot be sent: a bad name, no field, over 64 KiB.
    BadPost {
        why: String,
    },
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::BadUser { user, why } => write!(
                f,
                "user {user:?}: {why}; give {}",
                crate::model::USER_ALPHABET
            ),
            ConsumerError::BadToken => f.write_str("the token must be 1 to 255 bytes"),
            ConsumerError::BadService { service, why } => write!(
                f,
                "service {service:?}: {why}; give {}",
                crate::model::SERVICE_ALPHABET
            ),
            ConsumerError::BadPattern { pattern, why } => write!(
                f,
                "item {pattern:?}: {why}; give {}",
                crate::model::PATTERN_ALPHABET
            ),
            ConsumerError::BadRequest { why } => f.write_str(why),
            ConsumerError::UnknownRequest { request } => {
                write!(f, "request {request} is not open")
            }
            ConsumerError::LoginRefused { result, text } => {
                write!(f, "login refused ({result:?}): {text}")
            }
            ConsumerError::Protocol { error } => {
                write!(
                    f,
                    "the distributor sent a stream this consumer cannot read: {error}"
                )
            }
            ConsumerError::Silent {
                silent_ms,
                interval_ms,
            } => write!(
                f,
                "nothing from the distributor for {silent_ms} ms (three ping intervals of \
                 {interval_ms} ms): a stopped process or a broken path"
            ),
            ConsumerError::LoginTimeout { waited_ms } => write!(
                f,
                "the distributor did not answer the LOGIN in {waited_ms} ms: a stopped \
                 process, or not a Peregrine distributor"
            ),
            ConsumerError::DictionaryMismatch(m) => m.fmt(f),
            ConsumerError::NotLoggedIn => f.write_str(
                "not logged in (or the distributor speaks version 1): posts are sent only \
                 while logged in; try again after the login",
            ),
            ConsumerError::BadPost { why } => write!(f, "post not sent: {why}"),
        }
    }
}

impl std::error::Error for ConsumerError {}
