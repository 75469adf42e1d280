//! The C ABI of Peregrine: `libperegrine.so` / `libperegrine.a` and `include/peregrine.h`.
//!
//! The header is generated from this crate by cbindgen (`cbindgen.toml`); a test fails when
//! the checked-in copy is stale (`PEREGRINE_BLESS=1 cargo test -p peregrine-ffi --test header`
//! rewrites it). The rules every function follows are in the header's preamble (the
//! `header` of `cbindgen.toml`): status codes, `pg_last_error`, handles, ownership, threads.
//!
//! Every function catches a Rust panic before it would cross into C and turns it into
//! `PG_ERROR_INTERNAL`; every handle is checked (see [`handles`]) before it is used.
// The C ABI is unsafe by nature: raw pointers in, raw pointers out. Every block says why it
// holds.
#![allow(unsafe_code)]
// C's names: pg_context, pg_message... as the header spells them.
#![allow(non_camel_case_types)]
// Each function's doc says what its pointers must be; the general rules (NULL is checked,
// outputs must point to writable memory, handles come from this library) are in the header's
// preamble rather than a `# Safety` section repeated on every function.
#![allow(clippy::missing_safety_doc)]

mod error;
mod failover;
mod handles;
mod md;
mod merging;

pub use error::pg_status;
use error::{pg_status::*, Failure};
use handles::Kind;
pub use merging::{pg_merge_event, pg_merge_event_kind, pg_merging_subscriber};
use peregrine::{ClaimToken, Config, Context, IdleKind, Publisher, Subscriber, SubscriberEvent};
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

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
struct ContextObject {
    context: Context,
}

#[derive(Debug)]
struct PublisherObject {
    publisher: Publisher,
    claim: Option<ClaimToken>,
    uri: CString,
    /// The failover group's id after `pg_publisher_set_failover_group`.
    group_id: Option<u32>,
}

#[derive(Debug)]
struct SubscriberObject {
    subscriber: Subscriber,
    /// By pattern: messages come from several topics.
    by_pattern: bool,
    topic: CString,
    /// The strings of the last event returned: topic, uri, reason.
    event_text: [CString; 3],
}

// ---------------------------------------------------------------------------------------------
// Plumbing: every entry point runs its body under `run`, which catches panics.

/// Runs `body`, turning a failure into its code and a panic into `PG_ERROR_INTERNAL`.
#[inline(always)]
fn run(body: impl FnOnce() -> Result<i32, Failure>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => f.report(),
        Err(panic) => internal(&*panic),
    }
}

#[cold]
fn internal(panic: &(dyn std::any::Any + Send)) -> i32 {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string());
    Failure::new(
        PG_ERROR_INTERNAL,
        format!("internal error in Peregrine (please report it): {what}"),
    )
    .report()
}

/// Frees the object behind `handle` (of `kind`, stored as a `T`).
fn free<T>(handle: usize, kind: Kind, what: &str) -> i32 {
    run(|| {
        // SAFETY: each kind is inserted with its own type only (ContextObject,
        // PublisherObject, SubscriberObject), which the callers below name; the header tells
        // callers to free a handle while no other thread uses it.
        let object =
            unsafe { handles::remove::<T>(handle, kind) }.map_err(|e| Failure::handle(e, what))?;
        drop(object);
        Ok(0)
    })
}

/// Runs `body` on the object behind `handle`; a panic poisons the handle.
#[inline(always)]
fn with<T>(
    handle: usize,
    kind: Kind,
    what: &str,
    body: impl FnOnce(&mut T) -> Result<i32, Failure>,
) -> i32 {
    let r = run(|| {
        // SAFETY: the kind fixes the type (ContextObject, PublisherObject, SubscriberObject:
        // each kind is inserted with its own type only), and the header tells callers to use a
        // handle from one thread at a time, so this is the only reference.
        let object =
            unsafe { handles::get::<T>(handle, kind) }.map_err(|e| Failure::handle(e, what))?;
        body(object)
    });
    if r == PG_ERROR_INTERNAL as i32 {
        handles::poison(handle, kind);
    }
    r
}

/// [`with`] for a publisher handle.
#[inline(always)]
fn with_publisher(
    publisher: *mut pg_publisher,
    body: impl FnOnce(&mut PublisherObject) -> Result<i32, Failure>,
) -> i32 {
    with(publisher as usize, Kind::Publisher, "publisher", body)
}

/// [`with`] for a subscriber handle.
#[inline(always)]
fn with_subscriber(
    subscriber: *mut pg_subscriber,
    body: impl FnOnce(&mut SubscriberObject) -> Result<i32, Failure>,
) -> i32 {
    with(subscriber as usize, Kind::Subscriber, "subscriber", body)
}

/// [`with`] for a context handle.
#[inline(always)]
fn with_context(
    context: *mut pg_context,
    body: impl FnOnce(&mut ContextObject) -> Result<i32, Failure>,
) -> i32 {
    with(context as usize, Kind::Context, "context", body)
}

/// The UTF-8 text at `p` (NUL-terminated).
///
/// The caller of the entry point promises `p` is NULL or a NUL-terminated string.
fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller passes a NUL-terminated string (header preamble); it
    // lives for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|e| Failure::invalid(format!("{what} is not UTF-8 ({e}): give UTF-8 text")))
}

/// Checks that `out` can take a value (not NULL, aligned): constructors check before they
/// make the object, so a bad output pointer leaks nothing.
fn check_out<T>(out: *mut T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(what));
    }
    if !out.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    Ok(())
}

/// Writes `value` to the caller's `out`.
fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    check_out(out, what)?;
    // SAFETY: non-null and aligned; the caller promises it points to writable memory of the
    // type (header preamble).
    unsafe { out.write(value) };
    Ok(())
}

/// Writes `value` to `out` when `out` is not NULL.
#[inline(always)]
fn put_optional<T>(out: *mut T, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Ok(());
    }
    put(out, value, "the output pointer")
}

fn idle_kind(idle: i32) -> Result<IdleKind, Failure> {
    Ok(match idle {
        0 => IdleKind::Spin,
        1 => IdleKind::Yield,
        2 => IdleKind::Backoff,
        3 => IdleKind::Block,
        other => {
            return Err(Failure::invalid(format!(
                "idle strategy {other} is unknown: give PG_IDLE_SPIN (0), PG_IDLE_YIELD (1), PG_IDLE_BACKOFF (2) or PG_IDLE_BLOCK (3)"
            )))
        }
    })
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{fffd}")).expect("NULs replaced")
}

fn insert<T>(kind: Kind, object: T) -> Result<usize, Failure> {
    handles::insert(kind, Box::new(object)).map_err(|e| Failure::handle(e, "a new handle"))
}

// ---------------------------------------------------------------------------------------------
// Library

/// The library's version, a static string ("0.1.0").
#[no_mangle]
pub extern "C" fn pg_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the version has no NUL"),
        };
    VERSION.as_ptr()
}

/// The message of the last call that failed on this thread (an empty string if none did).
/// The string belongs to the thread and stays valid until its next `pg_last_error` call.
#[no_mangle]
pub extern "C" fn pg_last_error() -> *const c_char {
    catch_unwind(error::last_error_ptr).unwrap_or(c"internal error".as_ptr())
}

/// The name of a status code ("PG_ERROR_BACK_PRESSURED"), a static string; "PG_UNKNOWN" for a
/// negative value that is not a code.
#[no_mangle]
pub extern "C" fn pg_status_name(status: i32) -> *const c_char {
    error::status_name(status).as_ptr()
}

// ---------------------------------------------------------------------------------------------
// Contexts

/// Makes a context with the defaults (one host, no configuration file) into `*out`.
/// A context may be used from several threads at once.
#[no_mangle]
pub unsafe extern "C" fn pg_context_new(out: *mut *mut pg_context) -> i32 {
    run(|| {
        check_out(out, "out")?;
        let h = insert(
            Kind::Context,
            ContextObject {
                context: Context::new(),
            },
        )?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Makes a context configured by the environment into `*out`: the TOML file named by
/// `PEREGRINE_CONFIG` if set, then `PEREGRINE_<TRANSPORT>_<KEY>` variables over it
/// (docs/configuration.md). Fails with `PG_ERROR_CONFIG` naming a bad key or value.
#[no_mangle]
pub unsafe extern "C" fn pg_context_from_env(out: *mut *mut pg_context) -> i32 {
    run(|| {
        check_out(out, "out")?;
        let context = Context::from_env()?;
        let h = insert(Kind::Context, ContextObject { context })?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Makes a context configured by `toml` (the text of a configuration file,
/// docs/configuration.md) into `*out`. Fails with `PG_ERROR_CONFIG` naming a bad key or value.
#[no_mangle]
pub unsafe extern "C" fn pg_context_with_config(
    toml: *const c_char,
    out: *mut *mut pg_context,
) -> i32 {
    run(|| {
        let toml = text(toml, "toml")?;
        check_out(out, "out")?;
        let context = Context::with_config(Config::from_toml(toml, "pg_context_with_config")?);
        let h = insert(Kind::Context, ContextObject { context })?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Frees a context. Publishers and subscribers made from it stay valid (they hold what they
/// need); topic resolution stops when the last of them is freed.
#[no_mangle]
pub unsafe extern "C" fn pg_context_free(context: *mut pg_context) -> i32 {
    free::<ContextObject>(context as usize, Kind::Context, "context")
}

// ---------------------------------------------------------------------------------------------
// Publishers

fn new_publisher(publisher: Publisher, out: *mut *mut pg_publisher) -> Result<i32, Failure> {
    let uri = cstring(publisher.uri());
    let h = insert(
        Kind::Publisher,
        PublisherObject {
            publisher,
            claim: None,
            uri,
            group_id: None,
        },
    )?;
    // `out` was checked before the publisher was made.
    put(out, h as *mut pg_publisher, "out")?;
    Ok(0)
}

/// Makes a publisher of `topic` on the transport `uri` (`ipc://NAME`, `udp://HOST:PORT`,
/// `mcast://GROUP:PORT`, `tcp://HOST:PORT`; port 0 binds any free port, see
/// `pg_publisher_uri`) into `*out`.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_new(
    context: *mut pg_context,
    topic: *const c_char,
    uri: *const c_char,
    out: *mut *mut pg_publisher,
) -> i32 {
    with_context(context, |c| {
        let topic = text(topic, "topic")?;
        let uri = text(uri, "uri")?;
        check_out(out, "out")?;
        new_publisher(c.context.publisher(topic, uri)?, out)
    })
}

/// Makes a publisher of `topic` found by name through topic resolution (subscribers need no
/// URI) into `*out`.
#[no_mangle]
pub unsafe extern "C" fn pg_publish(
    context: *mut pg_context,
    topic: *const c_char,
    out: *mut *mut pg_publisher,
) -> i32 {
    with_context(context, |c| {
        let topic = text(topic, "topic")?;
        check_out(out, "out")?;
        new_publisher(c.context.publish(topic)?, out)
    })
}

/// Publishes `length` bytes at `data` (copied; the caller keeps them). Never blocks. On
/// success writes the message's sequence number to `*sequence` unless `sequence` is NULL.
/// `PG_ERROR_BACK_PRESSURED`: nothing was sent; try again after the subscribers made room.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_offer(
    publisher: *mut pg_publisher,
    data: *const c_void,
    length: usize,
    sequence: *mut u64,
) -> i32 {
    with_publisher(publisher, |p| {
        if p.claim.is_some() {
            return Err(Failure::claim(
                "a claim is pending on this publisher: commit or abort it first",
            ));
        }
        let payload = if length == 0 {
            &[][..]
        } else {
            if data.is_null() {
                return Err(Failure::null("data"));
            }
            // SAFETY: non-null; the caller promises `length` readable bytes at `data`,
            // which live for the call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) }
        };
        let seq = p.publisher.offer(payload)?;
        put_optional(sequence, seq)?;
        Ok(0)
    })
}

/// Claims room for a message of `length` bytes and writes the address where its payload goes
/// to `*buffer`: write exactly `length` bytes there, then `pg_publisher_commit` (or
/// `pg_publisher_abort`). On `ipc://` the buffer is the shared memory itself (zero copy) and
/// subscribers see nothing before the commit; on the network transports it is the publisher's
/// buffer, sent at the commit. Only one claim may be pending per publisher; the buffer is
/// valid until the commit or abort.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_claim(
    publisher: *mut pg_publisher,
    length: usize,
    buffer: *mut *mut u8,
) -> i32 {
    with_publisher(publisher, |p| {
        if buffer.is_null() {
            return Err(Failure::null("buffer"));
        }
        if p.claim.is_some() {
            return Err(Failure::claim(
                "a claim is already pending on this publisher: commit or abort it first",
            ));
        }
        let claim = p.publisher.claim(length)?;
        let at = p.publisher.claim_buffer(&claim).as_mut_ptr();
        put(buffer, at, "buffer")?;
        p.claim = Some(claim);
        Ok(0)
    })
}

/// Publishes the pending claim's payload as written; its sequence number goes to `*sequence`
/// unless NULL. On the network transports flow control may still refuse it
/// (`PG_ERROR_BACK_PRESSURED`): the claim then stays pending, to commit again or abort.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_commit(
    publisher: *mut pg_publisher,
    sequence: *mut u64,
) -> i32 {
    with_publisher(publisher, |p| {
        let Some(claim) = &p.claim else {
            return Err(Failure::claim(
                "no claim is pending on this publisher: call pg_publisher_claim first",
            ));
        };
        match p.publisher.commit(claim) {
            Ok(seq) => {
                p.claim = None;
                put_optional(sequence, seq)?;
                Ok(0)
            }
            // Refused by flow control: the staged payload is intact; the claim stays.
            Err(e @ peregrine::OfferError::BackPressured) => Err(e.into()),
            Err(e) => {
                p.claim = None;
                Err(e.into())
            }
        }
    })
}

/// Abandons the pending claim: nothing is published, and the next offer or claim reuses its
/// room and sequence number.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_abort(publisher: *mut pg_publisher) -> i32 {
    with_publisher(publisher, |p| match p.claim.take() {
        Some(_) => Ok(0),
        None => Err(Failure::claim("no claim is pending on this publisher")),
    })
}

/// Sends whatever is batched (network transports in normal mode; a no-op on `ipc://`).
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_flush(publisher: *mut pg_publisher) -> i32 {
    with_publisher(publisher, |p| {
        p.publisher.flush()?;
        Ok(0)
    })
}

/// The publisher's duty cycle: sends a batch whose interval passed, heartbeats, answers
/// subscribers joining and NAKs. Call it from the idle loop. Returns the work done (0 or
/// more) or a negative code.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_do_work(publisher: *mut pg_publisher) -> i32 {
    with_publisher(publisher, |p| {
        Ok(p.publisher.do_work().min(i32::MAX as usize) as i32)
    })
}

/// Ends the session: sends what is batched and tells subscribers the stream ended (lingering
/// for NAKs on UDP). Later offers fail with `PG_ERROR_CLOSED`; counters stay readable until
/// `pg_publisher_free`, which closes too.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_close(publisher: *mut pg_publisher) -> i32 {
    with_publisher(publisher, |p| {
        p.claim = None;
        p.publisher.close();
        Ok(0)
    })
}

/// Closes (if not yet) and frees a publisher; its handle is dead afterwards.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_free(publisher: *mut pg_publisher) -> i32 {
    free::<PublisherObject>(publisher as usize, Kind::Publisher, "publisher")
}

/// The URI subscribers use (with the port bound for `:0`; for a publisher by topic, every URI
/// it advertises, separated by spaces) into `*uri`: a string owned by the publisher, valid
/// until it is freed.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_uri(
    publisher: *mut pg_publisher,
    uri: *mut *const c_char,
) -> i32 {
    with_publisher(publisher, |p| {
        put(uri, p.uri.as_ptr(), "uri")?;
        Ok(0)
    })
}

/// The largest message this publisher accepts, in bytes, into `*length`.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_max_message_len(
    publisher: *mut pg_publisher,
    length: *mut usize,
) -> i32 {
    with_publisher(publisher, |p| {
        put(length, p.publisher.max_message_len(), "length")?;
        Ok(0)
    })
}

/// Subscribers attached or followed now. Returns the count (0 or more) or a negative code.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_subscriber_count(publisher: *mut pg_publisher) -> i32 {
    with_publisher(publisher, |p| {
        Ok(p.publisher.subscriber_count().min(i32::MAX as usize) as i32)
    })
}

/// The publisher's counters into `*counters`.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_get_counters(
    publisher: *mut pg_publisher,
    counters: *mut pg_publisher_counters,
) -> i32 {
    with_publisher(publisher, |p| {
        let c = p.publisher.counters();
        let out = pg_publisher_counters::from(&c);
        put(counters, out, "counters")?;
        Ok(0)
    })
}

// ---------------------------------------------------------------------------------------------
// Subscribers

fn new_subscriber(
    subscriber: Subscriber,
    by_pattern: bool,
    out: *mut *mut pg_subscriber,
) -> Result<i32, Failure> {
    let topic = cstring(subscriber.topic());
    let h = insert(
        Kind::Subscriber,
        SubscriberObject {
            subscriber,
            by_pattern,
            topic,
            event_text: Default::default(),
        },
    )?;
    put(out, h as *mut pg_subscriber, "out")?;
    Ok(0)
}

/// Makes a subscriber of `topic` on the transport `uri` into `*out`, idling with `idle` (a
/// `pg_idle`) in `pg_subscriber_idle`. It may come before its publisher: it attaches when the
/// publisher appears.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_new(
    context: *mut pg_context,
    topic: *const c_char,
    uri: *const c_char,
    idle: i32,
    out: *mut *mut pg_subscriber,
) -> i32 {
    with_context(context, |c| {
        let topic = text(topic, "topic")?;
        let uri = text(uri, "uri")?;
        let idle = idle_kind(idle)?;
        check_out(out, "out")?;
        new_subscriber(c.context.subscriber(topic, uri, idle)?, false, out)
    })
}

/// Makes a subscriber of every topic `pattern` matches, found by topic resolution, into
/// `*out`: an exact name, or a glob when it holds `*` or `?` (`md.eq.*`). Sources come and go
/// as `PG_EVENT_SOURCE_FOUND` and `PG_EVENT_SOURCE_LOST` events.
#[no_mangle]
pub unsafe extern "C" fn pg_subscribe(
    context: *mut pg_context,
    pattern: *const c_char,
    idle: i32,
    out: *mut *mut pg_subscriber,
) -> i32 {
    with_context(context, |c| {
        let pattern = text(pattern, "pattern")?;
        let idle = idle_kind(idle)?;
        check_out(out, "out")?;
        new_subscriber(c.context.subscribe(pattern, idle)?, true, out)
    })
}

/// `pg_subscribe` with a regular expression matched against whole topic names
/// (`md\.(eq|fx)\..*`).
#[no_mangle]
pub unsafe extern "C" fn pg_subscribe_regex(
    context: *mut pg_context,
    regex: *const c_char,
    idle: i32,
    out: *mut *mut pg_subscriber,
) -> i32 {
    with_context(context, |c| {
        let regex = text(regex, "regex")?;
        let idle = idle_kind(idle)?;
        check_out(out, "out")?;
        let pattern = peregrine::Pattern::new(peregrine::PatternKind::Regex, regex)
            .map_err(|e| Failure::invalid(e.to_string()))?;
        new_subscriber(c.context.subscribe_pattern(pattern, idle)?, true, out)
    })
}

/// Calls `handler(user, message)` for up to `limit` messages, in order, and returns how many
/// (0 or more), or a negative code. Never blocks. Each `pg_message` and its payload are valid
/// only during its handler call: copy what you keep.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_poll(
    subscriber: *mut pg_subscriber,
    handler: pg_message_handler,
    user: *mut c_void,
    limit: usize,
) -> i32 {
    with_subscriber(subscriber, |s| {
        let Some(handler) = handler else {
            return Err(Failure::null("handler"));
        };
        let limit = limit.min(i32::MAX as usize);
        // Hands one message to the C handler, with its topic's bytes.
        let deliver = |topic: &[u8], m: peregrine::Message<'_>| {
            hand_to_c(handler, user, topic, m.payload, m.sequence, m.session_id)
        };
        let n = if s.by_pattern {
            s.subscriber
                .poll_topic(&mut |t: &str, m| deliver(t.as_bytes(), m), limit)
        } else {
            // The subscriber's own topic, NUL-terminated (the length leaves the NUL out).
            let topic = s.topic.as_bytes();
            s.subscriber.poll(&mut |m| deliver(topic, m), limit)
        };
        Ok(n as i32)
    })
}

/// Applies the idle strategy after a poll that returned `work_count`: spin, yield, back off or
/// block (until data arrives or a short timeout).
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_idle(
    subscriber: *mut pg_subscriber,
    work_count: i32,
) -> i32 {
    with_subscriber(subscriber, |s| {
        s.subscriber.idle(work_count.max(0) as usize);
        Ok(0)
    })
}

/// The next event, if any, into `*event`. Returns 1 when one was written, 0 when there is
/// none, or a negative code.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_next_event(
    subscriber: *mut pg_subscriber,
    event: *mut pg_event,
) -> i32 {
    with_subscriber(subscriber, |s| {
        if event.is_null() {
            return Err(Failure::null("event"));
        }
        let Some(e) = s.subscriber.next_event() else {
            return Ok(0);
        };
        put(event, subscriber_event(&mut s.event_text, &e), "event")?;
        Ok(1)
    })
}

/// Calls the C `handler` with one message as a `pg_message` that lives for the call.
#[inline(always)]
fn hand_to_c(
    handler: unsafe extern "C" fn(*mut c_void, *const pg_message),
    user: *mut c_void,
    topic: &[u8],
    payload: &[u8],
    sequence: u64,
    session_id: u32,
) {
    let msg = pg_message {
        payload: payload.as_ptr(),
        length: payload.len(),
        sequence,
        session_id,
        topic: topic.as_ptr().cast(),
        topic_length: topic.len(),
    };
    // SAFETY: a C function pointer given by the caller, called with the caller's `user` and a
    // message that lives for the call.
    unsafe { handler(user, &msg) }
}

/// A subscriber event as a `pg_event`, its strings kept in `text` (topic, uri, reason).
fn subscriber_event(text: &mut [CString; 3], e: &SubscriberEvent) -> pg_event {
    let f = e.fields();
    use pg_event_kind::*;
    let kind = match f.kind {
        "connected" => PG_EVENT_CONNECTED,
        "lost" => PG_EVENT_LOST,
        "publisher_closed" => PG_EVENT_PUBLISHER_CLOSED,
        "publisher_died" => PG_EVENT_PUBLISHER_DIED,
        "attach_failed" => PG_EVENT_ATTACH_FAILED,
        "segment_damaged" => PG_EVENT_SEGMENT_DAMAGED,
        "source_found" => PG_EVENT_SOURCE_FOUND,
        "source_lost" => PG_EVENT_SOURCE_LOST,
        _ => PG_EVENT_OTHER,
    };
    let other = (kind == PG_EVENT_OTHER).then(|| format!("{e:?}"));
    let reason = f.reason.or(other.as_deref());
    let mut ptrs = [std::ptr::null(); 3];
    for (i, t) in [f.topic, f.uri, reason].into_iter().enumerate() {
        if let Some(t) = t {
            text[i] = cstring(t);
            ptrs[i] = text[i].as_ptr();
        }
    }
    pg_event {
        kind: kind as i32,
        session_id: f.session_id.unwrap_or(0),
        sequence: f.sequence.unwrap_or(0),
        count: f.count.unwrap_or(0),
        topic: ptrs[0],
        uri: ptrs[1],
        reason: ptrs[2],
    }
}

/// 1 when the subscriber is attached to a publisher (by pattern: to at least one), 0 when
/// not, or a negative code.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_is_connected(subscriber: *mut pg_subscriber) -> i32 {
    with_subscriber(subscriber, |s| Ok(s.subscriber.is_connected() as i32))
}

/// The socket a `udp://` or `mcast://` subscriber receives on into `*fd`, for an application
/// that waits in its own epoll (it turns readable when datagrams arrive; keep polling every
/// few milliseconds while a session is live). -1 for shared memory, TCP and patterns.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_readable_fd(
    subscriber: *mut pg_subscriber,
    fd: *mut i32,
) -> i32 {
    with_subscriber(subscriber, |s| {
        put(fd, s.subscriber.readable_fd().unwrap_or(-1), "fd")?;
        Ok(0)
    })
}

/// The subscriber's counters (summed over its sessions) into `*counters`.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_get_counters(
    subscriber: *mut pg_subscriber,
    counters: *mut pg_subscriber_counters,
) -> i32 {
    with_subscriber(subscriber, |s| {
        let c = s.subscriber.counters();
        let out = pg_subscriber_counters::from(&c);
        put(counters, out, "counters")?;
        Ok(0)
    })
}

/// Frees a subscriber (it detaches from its publishers); its handle is dead afterwards.
#[no_mangle]
pub unsafe extern "C" fn pg_subscriber_free(subscriber: *mut pg_subscriber) -> i32 {
    free::<SubscriberObject>(subscriber as usize, Kind::Subscriber, "subscriber")
}

#[cfg(test)]
mod tests;
