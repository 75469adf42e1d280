//! `pg_subscriber_*`, `pg_subscribe` and `pg_subscribe_regex`: subscribers by URI, topic or
//! pattern, polls, events, counters.

use super::error::Failure;
use super::handles::Kind;
use crate::types::*;
use crate::{
    check_out, cstring, free, idle_kind, insert, put, text, with_context, with_subscriber,
};
use peregrine::{Subscriber, SubscriberEvent};
use std::ffi::{c_char, c_void, CString};

pub(super) fn new_subscriber(
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
pub(super) fn hand_to_c(
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
pub(super) fn subscriber_event(text: &mut [CString; 3], e: &SubscriberEvent) -> pg_event {
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
