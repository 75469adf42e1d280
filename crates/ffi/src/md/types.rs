//! The market data tier's C types: handles, fields, events, posts and their enums, laid out
//! as `include/peregrine.h` declares them.

use std::ffi::{c_char, c_void};

/// A market data provider of one service (RTSDK's non-interactive provider): it publishes its
/// items on the backbone, keeps their images and answers the distributors' image requests.
/// Opaque; made by `pg_md_provider_new`, freed by `pg_md_provider_free`.
#[derive(Debug)]
pub struct pg_md_provider {
    _opaque: [u8; 0],
}

/// A market data consumer: logged in to a distributor (or the next of a list), its requests
/// and the events they bring. Opaque; made by `pg_md_consumer_new`, freed by
/// `pg_md_consumer_free`.
#[derive(Debug)]
pub struct pg_md_consumer {
    _opaque: [u8; 0],
}

/// The type of a field's value (`pg_md_field.type`), as the dictionary types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_type {
    /// A signed integer: `int_value`.
    PG_MD_INT = 1,
    /// A fixed-point decimal: `int_value` × 10^`exponent` (189.21 is 18921 and -2).
    PG_MD_PRICE = 2,
    /// Nanoseconds since 1970-01-01 UTC: `time_ns`.
    PG_MD_TIME = 3,
    /// An enumerated code: `enum_value`.
    PG_MD_ENUM = 4,
    /// UTF-8 text of `string_length` bytes (at most 255) at `string`.
    PG_MD_STRING = 5,
}

/// One field of a REFRESH or UPDATE. To publish: set `fid`, or leave it 0 and set `name` (a
/// dictionary name, NUL-terminated); set `type` and the value's member. In an event: every
/// member is set, `name` is the dictionary's name or NULL for a field it does not know, and
/// `string` points into the consumer's buffer (not NUL-terminated).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pg_md_field {
    pub fid: u16,
    /// A `pg_md_type`.
    pub r#type: i32,
    pub name: *const c_char,
    /// `PG_MD_INT`: the value; `PG_MD_PRICE`: the mantissa.
    pub int_value: i64,
    /// `PG_MD_PRICE`: the decimal exponent, -12 to 6.
    pub exponent: i32,
    /// `PG_MD_ENUM`: the code.
    pub enum_value: u16,
    /// `PG_MD_TIME`: nanoseconds since the epoch, UTC.
    pub time_ns: u64,
    pub string: *const c_char,
    pub string_length: usize,
}

/// Kinds of market data events (`pg_md_event.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_event_kind {
    /// Logged in (after every connection); every open request was sent again.
    PG_MD_LOGGED_IN = 1,
    /// The item's full image: `fields`.
    PG_MD_REFRESH = 2,
    /// The fields that changed.
    PG_MD_UPDATE = 3,
    /// The item's state (`state`, `text`): stale, closed, not-entitled, not-found, rejected.
    PG_MD_STATUS = 4,
    /// An `item_seq` that did not follow the item's last message (`expected`, `item_seq`):
    /// updates were missed without a STATUS; the UPDATE follows as its own event.
    PG_MD_GAP = 5,
    /// The consumer fell behind: `items` conflated REFRESHes follow (`dropped` updates).
    PG_MD_CONFLATED = 6,
    /// Not connected (`text` says why); items were reported stale just before. The consumer
    /// reconnects by itself.
    PG_MD_DISCONNECTED = 7,
    /// A service of the distributor's directory (`item`: its name; `state`: `PG_MD_OK` while
    /// a provider of it is live, else `PG_MD_STALE`; `items`: 1 if this user may open it),
    /// after each login and when its state changes.
    PG_MD_SERVICE = 8,
    /// The answer to a post (`request`: the post's id; `state`: a `pg_md_ack_code`; `item`;
    /// `text`: why it was refused). Exactly one per post.
    PG_MD_ACK = 9,
    /// The distributor's field dictionary arrived (`items`: its fields); field names come
    /// from it from the next poll on.
    PG_MD_DICTIONARY = 10,
}

/// What became of a post (`pg_md_event.state` of a `PG_MD_ACK`); every code but
/// `PG_MD_ACCEPTED` refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_ack_code {
    /// The provider accepted it.
    PG_MD_ACCEPTED = 0,
    /// The provider refused it (`text` says why).
    PG_MD_REFUSED = 1,
    /// The user may not post to the item (the users file's `post` globs).
    PG_MD_NOT_ENTITLED_TO_POST = 2,
    /// No provider of the service is live.
    PG_MD_SERVICE_DOWN = 3,
    /// The distributor carries no such service.
    PG_MD_UNKNOWN_SERVICE = 4,
    /// Too many posts in flight.
    PG_MD_BUSY = 5,
    /// No answer in time, or the connection broke first (it may or may not have arrived).
    PG_MD_TIMEOUT = 6,
    /// Its content was refused (a field of the wrong type, ...).
    PG_MD_INVALID = 7,
}

/// A post for a provider (`pg_md_provider_poll_post`), valid until the provider's next call.
#[repr(C)]
#[derive(Debug)]
pub struct pg_md_post {
    /// Answer it with this id (`pg_md_provider_accept`, `_refuse`, `_publish_post`).
    pub id: u64,
    /// The user who posted it.
    pub user: *const c_char,
    pub user_length: usize,
    pub item: *const c_char,
    pub item_length: usize,
    /// 1: a full image (a new item); 0: the fields that changed.
    pub refresh: i32,
    pub fields: *const pg_md_field,
    pub field_count: usize,
}

/// Item states (`pg_md_event.state`, and `pg_md_provider_status`'s `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_state {
    PG_MD_OK = 0,
    PG_MD_STALE = 1,
    PG_MD_CLOSED = 2,
    PG_MD_NOT_ENTITLED = 3,
    PG_MD_NOT_FOUND = 4,
    PG_MD_REJECTED = 5,
}

/// One market data event, valid only during the handler call it is passed to. Texts are not
/// NUL-terminated: each has its length.
#[repr(C)]
#[derive(Debug)]
pub struct pg_md_event {
    /// A `pg_md_event_kind`.
    pub kind: i32,
    pub item: *const c_char,
    pub item_length: usize,
    /// REFRESH, UPDATE, GAP: the item's `item_seq`.
    pub item_seq: u32,
    /// GAP: the `item_seq` that was due.
    pub expected: u32,
    /// REFRESH, UPDATE: when the provider sent it (its CLOCK_MONOTONIC, nanoseconds).
    pub timestamp_ns: u64,
    /// STATUS: a `pg_md_state`.
    pub state: i32,
    /// STATUS, DISCONNECTED: why, for people.
    pub text: *const c_char,
    pub text_length: usize,
    /// REFRESH, UPDATE: the request it is for (an item several requests hold comes once per
    /// request, each with its own view's fields). STATUS: the request it answers (0: none).
    pub request: u32,
    /// CONFLATED: REFRESHes that follow, and updates dropped.
    pub items: u32,
    pub dropped: u32,
    /// REFRESH, UPDATE: the fields.
    pub fields: *const pg_md_field,
    pub field_count: usize,
}

/// Called by `pg_md_consumer_poll` for each event, on the polling thread. It must not call
/// any function on the same consumer.
pub type pg_md_event_handler =
    Option<unsafe extern "C" fn(user: *mut c_void, event: *const pg_md_event)>;
