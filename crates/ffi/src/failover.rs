//! Failover groups in the C ABI: a publisher made a member of a group
//! (`pg_publisher_set_failover_group`, `pg_publisher_offer_sequenced`) and a subscriber of a
//! group over one or more subscribers (`pg_failover_subscriber_*`), with the handle, status and
//! `pg_last_error` conventions of the messaging API (the header's preamble).

use super::{
    cstring, free, insert, put, put_optional, run, text, with, with_publisher, Failure, Kind,
    SubscriberObject,
};
use crate::subscriber::{hand_to_c, subscriber_event};
use crate::{pg_event, pg_event_kind, pg_message_handler, pg_publisher, pg_subscriber};
use peregrine::failover::{
    disagreement, group_id, offer_as_member, validate_group, ArbiterConfig, FailoverEvent,
    FailoverSubscriber,
};
use std::ffi::{c_char, c_void, CString};

/// A subscriber of a failover group: each sequence of the group's stream once, in order,
/// from whichever member's copy came first. Opaque; made by `pg_failover_subscriber_new`,
/// freed by `pg_failover_subscriber_free`.
#[derive(Debug)]
pub struct pg_failover_subscriber {
    _opaque: [u8; 0],
}

/// What a failover subscriber counted (`pg_failover_subscriber_get_counters`).
#[repr(C)]
#[derive(Debug, Default)]
pub struct pg_failover_counters {
    /// Messages delivered, each sequence once.
    pub delivered: u64,
    /// Copies dropped because another member's came first.
    pub duplicates: u64,
    /// Sequences no member supplied (reported as `PG_EVENT_GROUP_LOST`).
    pub lost: u64,
    /// Late copies whose content differed from the delivered one.
    pub disagreements: u64,
    /// Messages held ahead of a gap, and those dropped because the held bytes were full.
    pub held: u64,
    pub held_overflow: u64,
    /// Messages beyond the jump bound: kept aside, confirmed, replaced.
    pub jumps_held: u64,
    pub jumps_confirmed: u64,
    pub jumps_discarded: u64,
    /// Messages of sessions that are not members of the group (ignored).
    pub refused_messages: u64,
    /// Messages refused because 64 members were live at once.
    pub members_refused: u64,
}

#[derive(Debug)]
struct FailoverSubscriberObject {
    subscriber: FailoverSubscriber,
    /// The topic of the first subscriber, handed with every message.
    topic: CString,
    event_text: [CString; 3],
}

/// Makes `publisher` a member of the failover group `group` (1 to 64 bytes of UTF-8 without
/// control characters): `pg_publisher_offer_sequenced` then puts the group's header in front
/// of each message. Every member of a group must publish the same messages with the same
/// sequences.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_set_failover_group(
    publisher: *mut pg_publisher,
    group: *const c_char,
) -> i32 {
    with_publisher(publisher, |p| {
        let group = text(group, "group")?;
        validate_group(group).map_err(|e| Failure::invalid(e.to_string()))?;
        p.group_id = Some(group_id(group));
        Ok(0)
    })
}

/// Publishes `length` bytes at `data` as the failover group's `sequence` (the application's
/// own number). Never blocks. On success writes the session's sequence to `*session_sequence`
/// unless it is NULL. `PG_ERROR_INVALID_ARGUMENT` before `pg_publisher_set_failover_group`;
/// `PG_ERROR_BACK_PRESSURED`: nothing was sent, try again.
#[no_mangle]
pub unsafe extern "C" fn pg_publisher_offer_sequenced(
    publisher: *mut pg_publisher,
    sequence: u64,
    data: *const c_void,
    length: usize,
    session_sequence: *mut u64,
) -> i32 {
    with_publisher(publisher, |p| {
        let Some(group) = p.group_id else {
            return Err(Failure::invalid(
                "this publisher is not a member of a failover group: call pg_publisher_set_failover_group first",
            ));
        };
        if p.claim.is_some() {
            return Err(Failure::claim(
                "a claim is pending on this publisher: commit or abort it first",
            ));
        }
        let message = if length == 0 {
            &[][..]
        } else {
            if data.is_null() {
                return Err(Failure::null("data"));
            }
            // SAFETY: non-null; the caller promises `length` readable bytes at `data`, which
            // live for the call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) }
        };
        let seq = offer_as_member(&mut p.publisher, group, sequence, message)?;
        put_optional(session_sequence, seq)?;
        Ok(0)
    })
}

/// Makes a subscriber of the failover group `group` over the `count` subscribers at
/// `subscribers` (one by topic name finds every member; or one per member's URI) into `*out`.
/// It takes them: on success their handles are freed and must not be used again; on failure
/// they are left as they were. `window_ms`: how long a missing sequence is waited for while a
/// member is ahead of it (0: the default, 100 ms; at most 60000).
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_new(
    subscribers: *const *mut pg_subscriber,
    count: usize,
    group: *const c_char,
    window_ms: u64,
    out: *mut *mut pg_failover_subscriber,
) -> i32 {
    run(|| {
        let group = text(group, "group")?;
        validate_group(group).map_err(|e| Failure::invalid(e.to_string()))?;
        if window_ms > 60_000 {
            return Err(Failure::invalid(format!(
                "window_ms {window_ms} is not accepted: give 1 to 60000 milliseconds, or 0 for the default 100"
            )));
        }
        if subscribers.is_null() {
            return Err(Failure::null("subscribers"));
        }
        if count == 0 || count > 64 {
            return Err(Failure::invalid(format!(
                "count {count} is not accepted: give 1 to 64 subscribers"
            )));
        }
        super::check_out(out, "out")?;
        // SAFETY: non-null; the caller promises `count` handles at `subscribers`.
        let handles = unsafe { std::slice::from_raw_parts(subscribers, count) };
        // Every handle checked before any is taken, so a failure leaves them all as they were.
        let mut topic = None;
        for (i, h) in handles.iter().enumerate() {
            if handles[..i].contains(h) {
                return Err(Failure::invalid(format!(
                    "subscriber {i} is given twice: give each subscriber once"
                )));
            }
            // SAFETY: the handle table checks the handle's kind and generation.
            let s =
                unsafe { super::handles::get::<SubscriberObject>(*h as usize, Kind::Subscriber) }
                    .map_err(|e| Failure::handle(e, "a subscriber"))?;
            topic.get_or_insert_with(|| s.topic.clone());
        }
        let mut taken = Vec::with_capacity(count);
        for h in handles {
            // SAFETY: checked just above to be a live subscriber, of type SubscriberObject.
            let s = unsafe {
                super::handles::remove::<SubscriberObject>(*h as usize, Kind::Subscriber)
            }
            .map_err(|e| Failure::handle(e, "a subscriber"))?;
            taken.push(s.subscriber);
        }
        let config = ArbiterConfig {
            window_ns: if window_ms == 0 { 100 } else { window_ms } * 1_000_000,
            ..ArbiterConfig::default()
        };
        let subscriber = FailoverSubscriber::new(taken, group, config)
            .map_err(|e| Failure::invalid(e.to_string()))?;
        let h = insert(
            Kind::FailoverSubscriber,
            FailoverSubscriberObject {
                subscriber,
                topic: topic.unwrap_or_default(),
                event_text: Default::default(),
            },
        )?;
        put(out, h as *mut pg_failover_subscriber, "out")?;
        Ok(0)
    })
}

fn with_failover(
    s: *mut pg_failover_subscriber,
    body: impl FnOnce(&mut FailoverSubscriberObject) -> Result<i32, Failure>,
) -> i32 {
    with(
        s as usize,
        Kind::FailoverSubscriber,
        "failover subscriber",
        body,
    )
}

/// Receives up to `limit` messages from the members and calls `handler(user, message)` for
/// each one delivered, in the group's order: `message->sequence` is the group's sequence and
/// `message->session_id` the member whose copy it is. Returns how many messages were received
/// (delivered or not, for `pg_failover_subscriber_idle`), or a negative code. Never blocks.
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_poll(
    subscriber: *mut pg_failover_subscriber,
    handler: pg_message_handler,
    user: *mut c_void,
    limit: usize,
) -> i32 {
    with_failover(subscriber, |s| {
        let Some(handler) = handler else {
            return Err(Failure::null("handler"));
        };
        let topic = s.topic.as_bytes();
        let n = s.subscriber.poll(
            &mut |m| hand_to_c(handler, user, topic, m.payload, m.sequence, m.session_id),
            limit.min(i32::MAX as usize),
        );
        Ok(n as i32)
    })
}

/// Applies the idle strategy after a poll that returned `work_count`.
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_idle(
    subscriber: *mut pg_failover_subscriber,
    work_count: i32,
) -> i32 {
    with_failover(subscriber, |s| {
        s.subscriber.idle(work_count.max(0) as usize);
        Ok(0)
    })
}

/// The next event, if any, into `*event`: the group's (`PG_EVENT_GROUP_LOST`,
/// `PG_EVENT_DISAGREEMENT`, `PG_EVENT_REFUSED`) and those of the subscribers underneath
/// (members found, lost, closed, died). Returns 1 when one was written, 0 when there is none,
/// or a negative code. The strings stay valid until the next call or the free.
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_next_event(
    subscriber: *mut pg_failover_subscriber,
    event: *mut pg_event,
) -> i32 {
    with_failover(subscriber, |s| {
        if event.is_null() {
            return Err(Failure::null("event"));
        }
        let Some(e) = s.subscriber.next_event() else {
            return Ok(0);
        };
        use pg_event_kind::*;
        let mut ev = pg_event {
            kind: PG_EVENT_OTHER as i32,
            session_id: 0,
            sequence: 0,
            count: 0,
            topic: std::ptr::null(),
            uri: std::ptr::null(),
            reason: std::ptr::null(),
        };
        match e {
            FailoverEvent::Source(e) => ev = subscriber_event(&mut s.event_text, &e),
            FailoverEvent::Lost {
                from_sequence,
                count,
            } => {
                ev.kind = PG_EVENT_GROUP_LOST as i32;
                ev.sequence = from_sequence;
                ev.count = count;
            }
            FailoverEvent::Disagreement {
                sequence,
                delivered_from,
                other,
            } => {
                ev.kind = PG_EVENT_DISAGREEMENT as i32;
                ev.sequence = sequence;
                ev.session_id = other;
                s.event_text[2] = cstring(&disagreement(sequence, delivered_from, other));
                ev.reason = s.event_text[2].as_ptr();
            }
            FailoverEvent::Refused { session_id, reason } => {
                ev.kind = PG_EVENT_REFUSED as i32;
                ev.session_id = session_id;
                s.event_text[2] = cstring(&reason);
                ev.reason = s.event_text[2].as_ptr();
            }
            other => {
                s.event_text[2] = cstring(&format!("{other:?}"));
                ev.reason = s.event_text[2].as_ptr();
            }
        }
        put(event, ev, "event")?;
        Ok(1)
    })
}

/// The failover subscriber's counters into `*counters`.
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_get_counters(
    subscriber: *mut pg_failover_subscriber,
    counters: *mut pg_failover_counters,
) -> i32 {
    with_failover(subscriber, |s| {
        let c = s.subscriber.counters();
        put(
            counters,
            pg_failover_counters {
                delivered: c.delivered,
                duplicates: c.duplicates,
                lost: c.lost,
                disagreements: c.disagreements,
                held: c.held,
                held_overflow: c.held_overflow,
                jumps_held: c.jumps_held,
                jumps_confirmed: c.jumps_confirmed,
                jumps_discarded: c.jumps_discarded,
                refused_messages: s.subscriber.refused_messages(),
                members_refused: c.members_refused,
            },
            "counters",
        )?;
        Ok(0)
    })
}

/// Frees a failover subscriber and the subscribers it took.
#[no_mangle]
pub unsafe extern "C" fn pg_failover_subscriber_free(
    subscriber: *mut pg_failover_subscriber,
) -> i32 {
    free::<FailoverSubscriberObject>(
        subscriber as usize,
        Kind::FailoverSubscriber,
        "failover subscriber",
    )
}

#[cfg(test)]
mod tests {
    //! The failover entry points called as C calls them: bad handles, the group's errors, and
    //! two members with overlapping streams through one failover subscriber.

    use super::*;
    use crate::error::pg_status::*;
    use crate::{
        pg_context, pg_context_free, pg_context_new, pg_last_error, pg_message, pg_publisher_free,
        pg_publisher_new, pg_subscriber_free, pg_subscriber_new,
    };
    use std::ffi::CStr;
    use std::ptr::null_mut;

    fn last_error() -> String {
        // SAFETY: pg_last_error returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(pg_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    unsafe extern "C" fn collect(user: *mut c_void, message: *const pg_message) {
        // SAFETY: `user` is the &mut Vec the test passed; `message` lives for the call.
        unsafe {
            let got = &mut *(user as *mut Vec<(u64, u32, Vec<u8>)>);
            let m = &*message;
            let payload = std::slice::from_raw_parts(m.payload, m.length).to_vec();
            got.push((m.sequence, m.session_id, payload));
        }
    }

    #[test]
    fn failover_entry_points_refuse_null_and_bad_handles() {
        // SAFETY: pg_event is plain data: integers and pointers, all zero is a valid value.
        let mut ev: pg_event = unsafe { std::mem::zeroed() };
        let mut c = pg_failover_counters::default();
        for v in [0usize, 0xdead_beef, (3usize << 32) | (4_000_000 << 3) | 6] {
            let want = if v == 0 {
                PG_ERROR_NULL_POINTER
            } else {
                PG_ERROR_BAD_HANDLE
            } as i32;
            let s = v as *mut pg_failover_subscriber;
            // SAFETY: the calls under test; every pointer but the handle is valid.
            unsafe {
                assert_eq!(
                    pg_failover_subscriber_poll(s, Some(collect), null_mut(), 1),
                    want
                );
                assert_eq!(pg_failover_subscriber_idle(s, 0), want);
                assert_eq!(pg_failover_subscriber_next_event(s, &mut ev), want);
                assert_eq!(pg_failover_subscriber_get_counters(s, &mut c), want);
                assert_eq!(pg_failover_subscriber_free(s), want);
                assert_eq!(
                    pg_publisher_set_failover_group(v as *mut _, c"g".as_ptr()),
                    want
                );
                assert_eq!(
                    pg_publisher_offer_sequenced(
                        v as *mut _,
                        1,
                        b"x".as_ptr().cast(),
                        1,
                        null_mut()
                    ),
                    want
                );
            }
            assert!(!last_error().is_empty());
        }
    }

    #[test]
    fn two_members_through_one_failover_subscriber_give_each_sequence_once() {
        let name = |k: &str| {
            CString::new(format!("ipc://ffi-failover-{k}-{}", std::process::id())).unwrap()
        };
        let (ua, ub, up) = (name("a"), name("b"), name("plain"));
        let mut ctx: *mut pg_context = null_mut();
        let (mut a, mut b, mut plain) = (null_mut(), null_mut(), null_mut());
        let (mut sa, mut sb, mut sp) = (null_mut(), null_mut(), null_mut());
        let mut fs = null_mut();
        // SAFETY: valid outputs and NUL-terminated strings, as C passes them.
        unsafe {
            assert_eq!(pg_context_new(&mut ctx), 0);
            for (u, p, s) in [
                (&ua, &mut a, &mut sa),
                (&ub, &mut b, &mut sb),
                (&up, &mut plain, &mut sp),
            ] {
                assert_eq!(
                    pg_subscriber_new(ctx, c"orders".as_ptr(), u.as_ptr(), 2, s),
                    0
                );
                assert_eq!(pg_publisher_new(ctx, c"orders".as_ptr(), u.as_ptr(), p), 0);
            }
            // Not a member yet; a bad group name.
            assert_eq!(
                pg_publisher_offer_sequenced(a, 0, b"x".as_ptr().cast(), 1, null_mut()),
                PG_ERROR_INVALID_ARGUMENT as i32
            );
            assert!(
                last_error().contains("pg_publisher_set_failover_group"),
                "{}",
                last_error()
            );
            assert_eq!(
                pg_publisher_set_failover_group(a, c"".as_ptr()),
                PG_ERROR_INVALID_ARGUMENT as i32
            );
            assert!(last_error().contains("1 to 64 bytes"), "{}", last_error());
            assert_eq!(pg_publisher_set_failover_group(a, c"engine".as_ptr()), 0);
            assert_eq!(pg_publisher_set_failover_group(b, c"engine".as_ptr()), 0);
            // A failover subscriber over the three; a bad window and a repeated handle first.
            let subs = [sa, sb, sp];
            assert_eq!(
                pg_failover_subscriber_new(subs.as_ptr(), 3, c"engine".as_ptr(), 60_001, &mut fs),
                PG_ERROR_INVALID_ARGUMENT as i32
            );
            let twice = [sa, sa];
            assert_eq!(
                pg_failover_subscriber_new(twice.as_ptr(), 2, c"engine".as_ptr(), 0, &mut fs),
                PG_ERROR_INVALID_ARGUMENT as i32
            );
            assert!(last_error().contains("given twice"), "{}", last_error());
            assert_eq!(
                pg_failover_subscriber_new(subs.as_ptr(), 3, c"engine".as_ptr(), 0, &mut fs),
                0
            );
            // The subscribers were taken: their handles are dead.
            assert_eq!(pg_subscriber_free(sa), PG_ERROR_BAD_HANDLE as i32);
            // A leads with 0..100, B sends 50..150, the plain publisher sends anything.
            let mut seq = 0u64;
            for s in 0..150u64 {
                let m = format!("#{s}");
                if s < 100 {
                    assert_eq!(
                        pg_publisher_offer_sequenced(a, s, m.as_ptr().cast(), m.len(), &mut seq),
                        0
                    );
                    assert_eq!(seq, s, "A's session sequence");
                }
                if s >= 50 {
                    assert_eq!(
                        pg_publisher_offer_sequenced(b, s, m.as_ptr().cast(), m.len(), null_mut()),
                        0
                    );
                }
            }
            assert_eq!(
                crate::pg_publisher_offer(plain, b"plain".as_ptr().cast(), 5, null_mut()),
                0
            );
            let mut got: Vec<(u64, u32, Vec<u8>)> = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while got.len() < 150 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} delivered",
                    got.len()
                );
                let n = pg_failover_subscriber_poll(
                    fs,
                    Some(collect),
                    (&mut got as *mut Vec<_>).cast(),
                    64,
                );
                assert!(n >= 0);
                assert_eq!(pg_failover_subscriber_idle(fs, n), 0);
            }
            // Let the plain publisher's message arrive too.
            for _ in 0..100 {
                pg_failover_subscriber_poll(
                    fs,
                    Some(collect),
                    (&mut got as *mut Vec<_>).cast(),
                    64,
                );
            }
            assert_eq!(
                got.iter().map(|g| g.0).collect::<Vec<_>>(),
                (0..150).collect::<Vec<_>>()
            );
            assert!(got.iter().all(|g| g.2 == format!("#{}", g.0).into_bytes()));
            let mut refused = Vec::new();
            let mut ev: pg_event = std::mem::zeroed();
            while pg_failover_subscriber_next_event(fs, &mut ev) == 1 {
                if ev.kind == pg_event_kind::PG_EVENT_REFUSED as i32 {
                    refused.push(CStr::from_ptr(ev.reason).to_string_lossy().into_owned());
                }
                assert_ne!(ev.kind, pg_event_kind::PG_EVENT_GROUP_LOST as i32);
            }
            assert_eq!(refused.len(), 1, "{refused:?}");
            assert!(
                refused[0].contains("plain publisher") && refused[0].contains("'engine'"),
                "{}",
                refused[0]
            );
            let mut c = pg_failover_counters::default();
            assert_eq!(pg_failover_subscriber_get_counters(fs, &mut c), 0);
            assert_eq!((c.delivered, c.lost, c.refused_messages), (150, 0, 1));
            assert_eq!(
                c.duplicates, 50,
                "every copy of B or A beyond the first: {c:?}"
            );
            assert_eq!(pg_failover_subscriber_free(fs), 0);
            assert_eq!(pg_failover_subscriber_free(fs), PG_ERROR_BAD_HANDLE as i32);
            for p in [a, b, plain] {
                assert_eq!(pg_publisher_free(p), 0);
            }
            assert_eq!(pg_context_free(ctx), 0);
        }
    }
}
