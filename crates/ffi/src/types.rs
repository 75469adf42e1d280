//! The messaging API's C types: the handles, messages, events and counters, laid out as
//! `include/peregrine.h` declares them, and the objects the handles stand for.

use peregrine::{ClaimToken, Context, Publisher, Subscriber};
use std::ffi::{c_char, c_void, CString};

/// A context: configuration, topic resolution, the factory of publishers and subscribers.
/// Opaque; made by `pg_context_new`, freed by `pg_context_free`.
#[derive(Debug)]
pub struct pg_context {
    _opaque: [u8; 0],
}

/// A publisher of one topic. Opaque; made by `pg_publisher_new` or `pg_publish`, freed by
/// `pg_publisher_free`.
#[derive(Debug)]
pub struct pg_publisher {
    _opaque: [u8; 0],
}

/// A subscriber of one topic or pattern. Opaque; made by `pg_subscriber_new`,
/// `pg_subscribe` or `pg_subscribe_regex`, freed by `pg_subscriber_free`.
#[derive(Debug)]
pub struct pg_subscriber {
    _opaque: [u8; 0],
}

/// Idle strategies, for the `idle` argument of the subscriber constructors: what
/// `pg_subscriber_idle` does after a poll that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_idle {
    /// Busy-spin: the lowest latency, a whole core.
    PG_IDLE_SPIN = 0,
    /// `sched_yield` between polls.
    PG_IDLE_YIELD = 1,
    /// Spin, then yield, then sleep for up to 1 ms.
    PG_IDLE_BACKOFF = 2,
    /// Sleep until data arrives (a futex on shared memory, poll(2) on a socket).
    PG_IDLE_BLOCK = 3,
}

/// One received message, valid only during the handler call it is passed to: `payload`
/// points into the transport's buffer (shared memory itself on `ipc://`).
#[repr(C)]
#[derive(Debug)]
pub struct pg_message {
    /// The payload's first byte (not NUL-terminated; may be NULL when `length` is 0).
    pub payload: *const u8,
    /// The payload's length in bytes.
    pub length: usize,
    /// The message's sequence number in its publisher's session (0, 1, 2...).
    pub sequence: u64,
    /// The publisher's session.
    pub session_id: u32,
    /// The message's topic: `topic_length` bytes of UTF-8, not NUL-terminated in general.
    pub topic: *const c_char,
    /// The topic's length in bytes.
    pub topic_length: usize,
}

/// Called by `pg_subscriber_poll` for each message, on the polling thread. It must not call
/// any function on the same subscriber.
pub type pg_message_handler =
    Option<unsafe extern "C" fn(user: *mut c_void, message: *const pg_message)>;

/// Kinds of subscriber events (`pg_event.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_event_kind {
    /// An event of a kind newer than this header: `reason` describes it.
    PG_EVENT_OTHER = 0,
    /// Attached to a publisher's session; `sequence` is the first message's sequence.
    PG_EVENT_CONNECTED = 1,
    /// Messages `sequence .. sequence + count` were lost for good; delivery goes on after them.
    PG_EVENT_LOST = 2,
    /// The publisher closed its session.
    PG_EVENT_PUBLISHER_CLOSED = 3,
    /// The publisher's process ended without closing.
    PG_EVENT_PUBLISHER_DIED = 4,
    /// Attaching failed for a reason that will not pass by itself (`reason`).
    PG_EVENT_ATTACH_FAILED = 5,
    /// The session's shared memory was damaged by another process; `reason` names the file.
    PG_EVENT_SEGMENT_DAMAGED = 6,
    /// Topic resolution found a publisher of a matching `topic` at `uri`.
    PG_EVENT_SOURCE_FOUND = 7,
    /// A publisher found by topic resolution went away (`reason`: "withdrawn" or "expired").
    PG_EVENT_SOURCE_LOST = 8,
    /// A failover subscriber: sequences `sequence .. sequence + count` of the group's stream
    /// came from no member; delivery goes on after them.
    PG_EVENT_GROUP_LOST = 9,
    /// A failover subscriber: two members sent different contents for `sequence`; the copy of
    /// the member named in `reason` was delivered, `session_id`'s was dropped.
    PG_EVENT_DISAGREEMENT = 10,
    /// A failover subscriber: session `session_id` is not a member of the group (a plain
    /// publisher of the topic, or of another group); `reason` names the topic and both
    /// settings. Its messages are ignored.
    PG_EVENT_REFUSED = 11,
}

/// A subscriber event. The strings belong to the subscriber and stay valid until its next
/// `pg_subscriber_next_event` or `pg_subscriber_free`; those that do not apply are NULL.
#[repr(C)]
#[derive(Debug)]
pub struct pg_event {
    /// A `pg_event_kind`.
    pub kind: i32,
    /// The publisher's session (0 for `PG_EVENT_ATTACH_FAILED` and `PG_EVENT_OTHER`).
    pub session_id: u32,
    /// `PG_EVENT_CONNECTED`: the first sequence; `PG_EVENT_LOST`: the first one lost.
    pub sequence: u64,
    /// `PG_EVENT_LOST`: how many messages were lost.
    pub count: u64,
    /// `PG_EVENT_SOURCE_FOUND`, `PG_EVENT_SOURCE_LOST`: the topic.
    pub topic: *const c_char,
    /// `PG_EVENT_SOURCE_FOUND`: the URI messages come from.
    pub uri: *const c_char,
    /// `PG_EVENT_ATTACH_FAILED`, `PG_EVENT_SEGMENT_DAMAGED`, `PG_EVENT_SOURCE_LOST`,
    /// `PG_EVENT_OTHER`: why.
    pub reason: *const c_char,
}

/// What a publisher counted (see docs/operations.md for each).
#[repr(C)]
#[derive(Debug, Default)]
pub struct pg_publisher_counters {
    pub messages: u64,
    pub bytes: u64,
    pub back_pressured: u64,
    pub subscribers_reaped: u64,
    pub flow_dropped: u64,
    pub joins_refused: u64,
    pub rate_limited: u64,
    pub naks_received: u64,
    pub retransmitted: u64,
    pub retransmit_unavailable: u64,
    pub retransmit_refused: u64,
}

/// What a subscriber counted (see docs/operations.md for each).
#[repr(C)]
#[derive(Debug, Default)]
pub struct pg_subscriber_counters {
    pub messages: u64,
    pub bytes: u64,
    pub gaps: u64,
    pub lost: u64,
    pub corrupt_frames: u64,
    pub duplicates: u64,
    pub naks_sent: u64,
    pub retransmits_received: u64,
    pub recovered: u64,
}

// Field by field, each from the counter of its name (a test checks both structs against the
// protocol's `NAMES`, so cbindgen's header and `peregrine stat` agree).
impl From<&peregrine::PublisherCounters> for pg_publisher_counters {
    fn from(c: &peregrine::PublisherCounters) -> Self {
        pg_publisher_counters {
            messages: c.messages,
            bytes: c.bytes,
            back_pressured: c.back_pressured,
            subscribers_reaped: c.subscribers_reaped,
            flow_dropped: c.flow_dropped,
            joins_refused: c.joins_refused,
            rate_limited: c.rate_limited,
            naks_received: c.naks_received,
            retransmitted: c.retransmitted,
            retransmit_unavailable: c.retransmit_unavailable,
            retransmit_refused: c.retransmit_refused,
        }
    }
}

impl From<&peregrine::SubscriberCounters> for pg_subscriber_counters {
    fn from(c: &peregrine::SubscriberCounters) -> Self {
        pg_subscriber_counters {
            messages: c.messages,
            bytes: c.bytes,
            gaps: c.gaps,
            lost: c.lost,
            corrupt_frames: c.corrupt_frames,
            duplicates: c.duplicates,
            naks_sent: c.naks_sent,
            retransmits_received: c.retransmits_received,
            recovered: c.recovered,
        }
    }
}

#[derive(Debug)]
pub(super) struct ContextObject {
    pub(super) context: Context,
}

#[derive(Debug)]
pub(super) struct PublisherObject {
    pub(super) publisher: Publisher,
    pub(super) claim: Option<ClaimToken>,
    pub(super) uri: CString,
    /// The failover group's id after `pg_publisher_set_failover_group`.
    pub(super) group_id: Option<u32>,
}

#[derive(Debug)]
pub(super) struct SubscriberObject {
    pub(super) subscriber: Subscriber,
    /// By pattern: messages come from several topics.
    pub(super) by_pattern: bool,
    pub(super) topic: CString,
    /// The strings of the last event returned: topic, uri, reason.
    pub(super) event_text: [CString; 3],
}
