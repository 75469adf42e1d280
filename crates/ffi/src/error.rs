//! Error codes and the per-thread message of the last failed call.

use crate::handles::HandleError;
use peregrine::{ConfigError, OfferError, OpenError};
use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// What a call returns: `PG_OK` (0), or one of these negative codes. Calls that return a count
/// (`pg_subscriber_poll`, `pg_publisher_do_work`...) return it when it is 0 or more.
/// After a failure, `pg_last_error()` gives the message.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_status {
    /// Success.
    PG_OK = 0,
    /// A pointer the call needs was NULL.
    PG_ERROR_NULL_POINTER = -1,
    /// The handle is not a live handle of the kind the call takes: freed already, of another
    /// kind, or not a handle at all.
    PG_ERROR_BAD_HANDLE = -2,
    /// An argument is invalid: text that is not UTF-8, an unknown idle strategy, a length too
    /// large. The message names it.
    PG_ERROR_INVALID_ARGUMENT = -3,
    /// The publisher or subscriber could not be created (a bad URI, a name in use, a system
    /// call failing...): the message says why and what to change.
    PG_ERROR_OPEN = -4,
    /// The configuration is invalid (a bad key or value): the message names it.
    PG_ERROR_CONFIG = -5,
    /// Back-pressure or flow control: the slowest subscriber has not made room yet. Nothing was
    /// published; try again later.
    PG_ERROR_BACK_PRESSURED = -6,
    /// The message is larger than the transport accepts (see `pg_publisher_max_message_len`).
    PG_ERROR_TOO_LARGE = -7,
    /// The publisher was closed.
    PG_ERROR_CLOSED = -8,
    /// A network send failed; the message may have reached some receivers.
    PG_ERROR_SEND = -9,
    /// The shared-memory segment was damaged under the publisher by another process: create
    /// a new publisher.
    PG_ERROR_SEGMENT_DAMAGED = -10,
    /// Claim misuse: committing or aborting with no claim pending, offering or claiming while
    /// one is, or a claim overtaken by another offer.
    PG_ERROR_CLAIM = -11,
    /// An internal error (a bug in Peregrine) was caught before it crossed into the caller. The
    /// object is left in an unknown state: every later call on its handle fails with this code
    /// until it is freed.
    PG_ERROR_INTERNAL = -12,
    /// The process holds as many handles as the library can give out (4 million).
    PG_ERROR_TOO_MANY_HANDLES = -13,
    /// Market data: the distributor refused the login (unknown user or wrong token, another
    /// version), or none of the distributors accepted one in time: the message says which.
    PG_ERROR_REFUSED = -14,
}

/// The last failure on this thread: kept unformatted when it is an offer's (a loop retrying a
/// back-pressured offer fails millions of times a second; the text is made when asked for).
#[derive(Debug)]
enum Last {
    None,
    Offer(OfferError),
    Text(String),
}

thread_local! {
    static LAST: RefCell<Last> = const { RefCell::new(Last::None) };
    static LAST_TEXT: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its code and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: pg_status,
    last: Last,
}

impl Failure {
    pub(crate) fn new(status: pg_status, message: impl Into<String>) -> Self {
        Failure {
            status,
            last: Last::Text(message.into()),
        }
    }

    /// Records the message for `pg_last_error` and returns the code.
    pub(crate) fn report(self) -> i32 {
        LAST.with(|l| *l.borrow_mut() = self.last);
        self.status as i32
    }

    pub(crate) fn handle(e: HandleError, what: &str) -> Self {
        match e {
            HandleError::Null => {
                Failure::new(pg_status::PG_ERROR_NULL_POINTER, format!("{what} is NULL"))
            }
            HandleError::Bad => Failure::new(
                pg_status::PG_ERROR_BAD_HANDLE,
                format!("{what} is not a live handle of that kind (freed already, or never one)"),
            ),
            HandleError::Poisoned => Failure::new(
                pg_status::PG_ERROR_INTERNAL,
                format!(
                    "{what} was left in an unknown state by an earlier internal error: free it"
                ),
            ),
            HandleError::Full => Failure::new(
                pg_status::PG_ERROR_TOO_MANY_HANDLES,
                format!(
                    "no handle left: {} are alive; free some",
                    crate::handles::MAX_HANDLES
                ),
            ),
        }
    }

    pub(crate) fn null(what: &str) -> Self {
        Failure::new(pg_status::PG_ERROR_NULL_POINTER, format!("{what} is NULL"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Failure::new(pg_status::PG_ERROR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn claim(message: &str) -> Self {
        Failure::new(pg_status::PG_ERROR_CLAIM, message)
    }
}

impl From<OfferError> for Failure {
    fn from(e: OfferError) -> Self {
        let status = match e {
            OfferError::BackPressured => pg_status::PG_ERROR_BACK_PRESSURED,
            OfferError::TooLarge { .. } => pg_status::PG_ERROR_TOO_LARGE,
            OfferError::Closed => pg_status::PG_ERROR_CLOSED,
            OfferError::Send { .. } => pg_status::PG_ERROR_SEND,
            OfferError::SegmentDamaged { .. } => pg_status::PG_ERROR_SEGMENT_DAMAGED,
            OfferError::ClaimStale => pg_status::PG_ERROR_CLAIM,
            _ => pg_status::PG_ERROR_SEND,
        };
        Failure {
            status,
            last: Last::Offer(e),
        }
    }
}

impl From<OpenError> for Failure {
    fn from(e: OpenError) -> Self {
        Failure::new(pg_status::PG_ERROR_OPEN, e.to_string())
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Failure::new(pg_status::PG_ERROR_CONFIG, e.to_string())
    }
}

/// The message of the last failure on this thread, as a C string owned by the thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    let text = LAST.with(|l| match &*l.borrow() {
        Last::None => String::new(),
        Last::Offer(e) => e.to_string(),
        Last::Text(t) => t.clone(),
    });
    // Interior NULs cannot come from our messages, but a name the caller passed could hold
    // one in principle: cut there rather than fail.
    let text = text.split('\0').next().unwrap_or_default().to_string();
    LAST_TEXT.with(|t| {
        let mut t = t.borrow_mut();
        *t = CString::new(text).unwrap_or_default();
        t.as_ptr()
    })
}

/// The constant's name of a code, as a static C string.
pub(crate) fn status_name(code: i32) -> &'static std::ffi::CStr {
    use pg_status::*;
    let all = [
        (PG_OK, c"PG_OK"),
        (PG_ERROR_NULL_POINTER, c"PG_ERROR_NULL_POINTER"),
        (PG_ERROR_BAD_HANDLE, c"PG_ERROR_BAD_HANDLE"),
        (PG_ERROR_INVALID_ARGUMENT, c"PG_ERROR_INVALID_ARGUMENT"),
        (PG_ERROR_OPEN, c"PG_ERROR_OPEN"),
        (PG_ERROR_CONFIG, c"PG_ERROR_CONFIG"),
        (PG_ERROR_BACK_PRESSURED, c"PG_ERROR_BACK_PRESSURED"),
        (PG_ERROR_TOO_LARGE, c"PG_ERROR_TOO_LARGE"),
        (PG_ERROR_CLOSED, c"PG_ERROR_CLOSED"),
        (PG_ERROR_SEND, c"PG_ERROR_SEND"),
        (PG_ERROR_SEGMENT_DAMAGED, c"PG_ERROR_SEGMENT_DAMAGED"),
        (PG_ERROR_CLAIM, c"PG_ERROR_CLAIM"),
        (PG_ERROR_INTERNAL, c"PG_ERROR_INTERNAL"),
        (PG_ERROR_TOO_MANY_HANDLES, c"PG_ERROR_TOO_MANY_HANDLES"),
        (PG_ERROR_REFUSED, c"PG_ERROR_REFUSED"),
    ];
    match all.iter().find(|(s, _)| *s as i32 == code) {
        Some((_, name)) => name,
        None if code > 0 => c"PG_OK",
        None => c"PG_UNKNOWN",
    }
}
