//! `pg_publisher_*` and `pg_publish`: publishers by URI or topic, offers, claims, counters.

use super::error::Failure;
use super::handles::Kind;
use crate::types::*;
use crate::{
    check_out, cstring, free, insert, put, put_optional, text, with_context, with_publisher,
};
use peregrine::Publisher;
use std::ffi::{c_char, c_void};

pub(super) fn new_publisher(
    publisher: Publisher,
    out: *mut *mut pg_publisher,
) -> Result<i32, Failure> {
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
