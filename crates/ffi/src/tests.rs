//! The C API called as C calls it, from Rust: every entry point with NULL and with bad
//! handles, and the calls working together in one process. (The C examples, built by the C
//! compiler and run across processes, are in tests/c_examples.rs.)

use super::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: pg_last_error returns a NUL-terminated string owned by this thread.
    unsafe { CStr::from_ptr(pg_last_error()) }
        .to_str()
        .unwrap()
        .to_string()
}

/// The values that are not live handles of any kind: NULL, small numbers, every kind's tag
/// with a slot never given out, garbage, and (added by the caller) freed handles.
fn bad_values() -> Vec<usize> {
    vec![
        0,
        1,
        2,
        3,
        4,
        0xdead_beef,
        usize::MAX,
        (7usize << 32) | (4_000_000 << 2) | 2,
    ]
}

struct Freed {
    context: usize,
    publisher: usize,
    subscriber: usize,
}

/// A context, publisher and subscriber, made and freed: their handles are dead.
fn freed_handles() -> Freed {
    let mut ctx = null_mut();
    let mut publ = null_mut();
    let mut sub = null_mut();
    let uri = CString::new(format!("ipc://ffi-freed-{}", std::process::id())).unwrap();
    // SAFETY: valid outputs and NUL-terminated strings, as C passes them.
    unsafe {
        assert_eq!(pg_context_new(&mut ctx), 0);
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), uri.as_ptr(), &mut publ),
            0
        );
        assert_eq!(
            pg_subscriber_new(ctx, c"t".as_ptr(), uri.as_ptr(), 0, &mut sub),
            0
        );
        assert_eq!(pg_publisher_free(publ), 0);
        assert_eq!(pg_subscriber_free(sub), 0);
        assert_eq!(pg_context_free(ctx), 0);
    }
    Freed {
        context: ctx as usize,
        publisher: publ as usize,
        subscriber: sub as usize,
    }
}

unsafe extern "C" fn count_messages(user: *mut c_void, message: *const pg_message) {
    // SAFETY: `user` is the &mut Vec the test passed; `message` lives for the call.
    unsafe {
        let got = &mut *(user as *mut Vec<(u64, Vec<u8>, String)>);
        let m = &*message;
        let payload = std::slice::from_raw_parts(m.payload, m.length).to_vec();
        let topic = std::slice::from_raw_parts(m.topic.cast::<u8>(), m.topic_length);
        got.push((
            m.sequence,
            payload,
            String::from_utf8(topic.to_vec()).unwrap(),
        ));
    }
}

#[test]
fn every_entry_point_refuses_null_and_bad_handles() {
    let freed = freed_handles();
    let mut values = bad_values();
    values.extend([freed.context, freed.publisher, freed.subscriber]);
    let mut out_ctx = null_mut();
    let mut out_pub = null_mut();
    let mut out_sub = null_mut();
    let mut seq = 0u64;
    let mut buf: *mut u8 = null_mut();
    let mut len = 0usize;
    let mut uri: *const c_char = null();
    let mut fd = 0i32;
    let mut pc = pg_publisher_counters::default();
    let mut sc = pg_subscriber_counters::default();
    // SAFETY: pg_event is plain data: integers and pointers, all zero is a valid value.
    let mut ev: pg_event = unsafe { std::mem::zeroed() };
    for &v in &values {
        let (c, p, s) = (
            v as *mut pg_context,
            v as *mut pg_publisher,
            v as *mut pg_subscriber,
        );
        let expected = |r: i32, call: &str| {
            let want = if v == 0 {
                PG_ERROR_NULL_POINTER
            } else {
                PG_ERROR_BAD_HANDLE
            } as i32;
            assert_eq!(r, want, "{call} with {v:#x}: {}", last_error());
            assert!(!last_error().is_empty(), "{call}: a message is set");
        };
        // SAFETY: the calls under test; every pointer but the handle is valid.
        unsafe {
            expected(pg_context_free(c), "pg_context_free");
            expected(
                pg_publisher_new(c, c"t".as_ptr(), c"ipc://x".as_ptr(), &mut out_pub),
                "pg_publisher_new",
            );
            expected(pg_publish(c, c"t".as_ptr(), &mut out_pub), "pg_publish");
            expected(
                pg_subscriber_new(c, c"t".as_ptr(), c"ipc://x".as_ptr(), 0, &mut out_sub),
                "pg_subscriber_new",
            );
            expected(
                pg_subscribe(c, c"t".as_ptr(), 0, &mut out_sub),
                "pg_subscribe",
            );
            expected(
                pg_subscribe_regex(c, c"t".as_ptr(), 0, &mut out_sub),
                "pg_subscribe_regex",
            );
            expected(
                pg_publisher_offer(p, b"x".as_ptr().cast(), 1, &mut seq),
                "pg_publisher_offer",
            );
            expected(pg_publisher_claim(p, 1, &mut buf), "pg_publisher_claim");
            expected(pg_publisher_commit(p, &mut seq), "pg_publisher_commit");
            expected(pg_publisher_abort(p), "pg_publisher_abort");
            expected(pg_publisher_flush(p), "pg_publisher_flush");
            expected(pg_publisher_do_work(p), "pg_publisher_do_work");
            expected(pg_publisher_close(p), "pg_publisher_close");
            expected(pg_publisher_uri(p, &mut uri), "pg_publisher_uri");
            expected(
                pg_publisher_max_message_len(p, &mut len),
                "pg_publisher_max_message_len",
            );
            expected(
                pg_publisher_subscriber_count(p),
                "pg_publisher_subscriber_count",
            );
            expected(
                pg_publisher_get_counters(p, &mut pc),
                "pg_publisher_get_counters",
            );
            expected(pg_publisher_free(p), "pg_publisher_free");
            expected(
                pg_subscriber_poll(s, Some(count_messages), null_mut(), 10),
                "pg_subscriber_poll",
            );
            expected(pg_subscriber_idle(s, 0), "pg_subscriber_idle");
            expected(
                pg_subscriber_next_event(s, &mut ev),
                "pg_subscriber_next_event",
            );
            expected(pg_subscriber_is_connected(s), "pg_subscriber_is_connected");
            expected(
                pg_subscriber_readable_fd(s, &mut fd),
                "pg_subscriber_readable_fd",
            );
            expected(
                pg_subscriber_get_counters(s, &mut sc),
                "pg_subscriber_get_counters",
            );
            expected(pg_subscriber_free(s), "pg_subscriber_free");
        }
    }
    // A handle of the wrong kind is a bad handle too.
    // SAFETY: valid outputs; the handles are live but of another kind.
    unsafe {
        assert_eq!(pg_context_new(&mut out_ctx), 0);
        let as_pub = out_ctx as *mut pg_publisher;
        assert_eq!(
            pg_publisher_offer(as_pub, b"x".as_ptr().cast(), 1, null_mut()),
            PG_ERROR_BAD_HANDLE as i32
        );
        assert_eq!(pg_publisher_free(as_pub), PG_ERROR_BAD_HANDLE as i32);
        assert_eq!(pg_context_free(out_ctx), 0);
        assert_eq!(
            pg_context_free(out_ctx),
            PG_ERROR_BAD_HANDLE as i32,
            "a double free is refused"
        );
    }
}

#[test]
fn null_arguments_are_refused_with_a_message() {
    let uri = CString::new(format!("ipc://ffi-null-{}", std::process::id())).unwrap();
    let (mut ctx, mut publ, mut sub) = (null_mut(), null_mut(), null_mut());
    // SAFETY: the calls under test, with NULL where the test says so and valid pointers
    // elsewhere.
    unsafe {
        assert_eq!(pg_context_new(null_mut()), PG_ERROR_NULL_POINTER as i32);
        assert_eq!(
            pg_context_from_env(null_mut()),
            PG_ERROR_NULL_POINTER as i32
        );
        assert_eq!(
            pg_context_with_config(null(), &mut ctx),
            PG_ERROR_NULL_POINTER as i32
        );
        assert_eq!(pg_context_new(&mut ctx), 0);
        let n = PG_ERROR_NULL_POINTER as i32;
        assert_eq!(pg_publisher_new(ctx, null(), uri.as_ptr(), &mut publ), n);
        assert!(last_error().contains("topic is NULL"), "{}", last_error());
        assert_eq!(pg_publisher_new(ctx, c"t".as_ptr(), null(), &mut publ), n);
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), uri.as_ptr(), null_mut()),
            n
        );
        assert_eq!(pg_publish(ctx, null(), &mut publ), n);
        assert_eq!(
            pg_subscriber_new(ctx, c"t".as_ptr(), null(), 0, &mut sub),
            n
        );
        assert_eq!(pg_subscribe(ctx, null(), 0, &mut sub), n);
        assert_eq!(pg_subscribe_regex(ctx, null(), 0, &mut sub), n);
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), uri.as_ptr(), &mut publ),
            0
        );
        assert_eq!(
            pg_subscriber_new(ctx, c"t".as_ptr(), uri.as_ptr(), 0, &mut sub),
            0
        );
        assert_eq!(pg_publisher_offer(publ, null(), 3, null_mut()), n);
        assert_eq!(
            pg_publisher_offer(publ, null(), 0, null_mut()),
            0,
            "an empty message needs no data"
        );
        assert_eq!(pg_publisher_claim(publ, 3, null_mut()), n);
        assert_eq!(pg_publisher_uri(publ, null_mut()), n);
        assert_eq!(pg_publisher_max_message_len(publ, null_mut()), n);
        assert_eq!(pg_publisher_get_counters(publ, null_mut()), n);
        assert_eq!(pg_subscriber_poll(sub, None, null_mut(), 1), n);
        assert!(last_error().contains("handler is NULL"), "{}", last_error());
        assert_eq!(pg_subscriber_next_event(sub, null_mut()), n);
        assert_eq!(pg_subscriber_readable_fd(sub, null_mut()), n);
        assert_eq!(pg_subscriber_get_counters(sub, null_mut()), n);
        // Invalid values, named.
        let bad = [0xffu8, 0xfe, 0];
        assert_eq!(
            pg_publisher_new(ctx, bad.as_ptr().cast(), uri.as_ptr(), &mut publ),
            PG_ERROR_INVALID_ARGUMENT as i32
        );
        assert!(last_error().contains("not UTF-8"), "{}", last_error());
        assert_eq!(
            pg_subscriber_new(ctx, c"t".as_ptr(), uri.as_ptr(), 9, &mut sub),
            PG_ERROR_INVALID_ARGUMENT as i32
        );
        assert!(last_error().contains("idle strategy 9"), "{}", last_error());
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), c"smoke://x".as_ptr(), &mut publ),
            PG_ERROR_OPEN as i32
        );
        assert!(last_error().contains("smoke"), "{}", last_error());
        assert_eq!(
            pg_context_with_config(c"[udp]\nno_such_key = 1\n".as_ptr(), &mut ctx),
            PG_ERROR_CONFIG as i32
        );
        assert!(last_error().contains("no_such_key"), "{}", last_error());
        assert_eq!(
            pg_subscribe_regex(ctx, c"(".as_ptr(), 0, &mut sub),
            PG_ERROR_INVALID_ARGUMENT as i32
        );
        let unaligned = (std::ptr::addr_of_mut!(sub) as *mut u8).wrapping_add(1) as *mut usize;
        let unaligned_out =
            (std::ptr::addr_of_mut!(publ) as *mut u8).wrapping_add(1) as *mut *mut pg_publisher;
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), uri.as_ptr(), unaligned_out),
            PG_ERROR_INVALID_ARGUMENT as i32,
            "refused before the publisher is made"
        );
        assert_eq!(
            pg_publisher_max_message_len(publ, unaligned),
            PG_ERROR_INVALID_ARGUMENT as i32
        );
        assert_eq!(pg_publisher_free(publ), 0);
        assert_eq!(pg_subscriber_free(sub), 0);
        assert_eq!(pg_context_free(ctx), 0);
    }
}

#[test]
fn messages_claims_events_and_counters_over_shared_memory() {
    let uri = CString::new(format!("ipc://ffi-flow-{}", std::process::id())).unwrap();
    let (mut ctx, mut publ, mut sub) = (null_mut(), null_mut(), null_mut());
    let mut got: Vec<(u64, Vec<u8>, String)> = Vec::new();
    // SAFETY: the API used as the header says.
    unsafe {
        assert_eq!(pg_context_new(&mut ctx), 0);
        assert_eq!(
            pg_subscriber_new(
                ctx,
                c"md.x".as_ptr(),
                uri.as_ptr(),
                pg_idle::PG_IDLE_SPIN as i32,
                &mut sub
            ),
            0
        );
        assert_eq!(
            pg_publisher_new(ctx, c"md.x".as_ptr(), uri.as_ptr(), &mut publ),
            0
        );
        let mut seq = u64::MAX;
        assert_eq!(
            pg_publisher_offer(publ, b"hello".as_ptr().cast(), 5, &mut seq),
            0
        );
        assert_eq!(seq, 0);
        let mut buf: *mut u8 = null_mut();
        assert_eq!(pg_publisher_claim(publ, 4, &mut buf), 0);
        assert_eq!(
            pg_publisher_claim(publ, 4, &mut buf),
            PG_ERROR_CLAIM as i32,
            "one claim at a time"
        );
        assert_eq!(
            pg_publisher_offer(publ, b"x".as_ptr().cast(), 1, null_mut()),
            PG_ERROR_CLAIM as i32
        );
        std::ptr::copy_nonoverlapping(b"zero".as_ptr(), buf, 4);
        assert_eq!(pg_publisher_commit(publ, &mut seq), 0);
        assert_eq!(seq, 1);
        assert_eq!(pg_publisher_commit(publ, &mut seq), PG_ERROR_CLAIM as i32);
        assert!(
            last_error().contains("no claim is pending"),
            "{}",
            last_error()
        );
        assert_eq!(pg_publisher_claim(publ, 3, &mut buf), 0);
        assert_eq!(pg_publisher_abort(publ), 0);
        assert_eq!(pg_publisher_abort(publ), PG_ERROR_CLAIM as i32);
        let mut max = 0usize;
        assert_eq!(pg_publisher_max_message_len(publ, &mut max), 0);
        assert_eq!(
            pg_publisher_offer(
                publ,
                vec![0u8; max + 1].as_ptr().cast(),
                max + 1,
                null_mut()
            ),
            PG_ERROR_TOO_LARGE as i32
        );
        assert!(last_error().contains("exceeds"), "{}", last_error());
        let mut n = 0;
        for _ in 0..1000 {
            let r = pg_subscriber_poll(
                sub,
                Some(count_messages),
                (&mut got as *mut Vec<_>).cast(),
                16,
            );
            assert!(r >= 0);
            n += r;
            if n >= 2 {
                break;
            }
        }
        assert_eq!(
            got,
            vec![
                (0, b"hello".to_vec(), "md.x".to_string()),
                (1, b"zero".to_vec(), "md.x".to_string())
            ]
        );
        assert_eq!(pg_subscriber_is_connected(sub), 1);
        assert_eq!(pg_publisher_subscriber_count(publ), 1);
        let mut ev: pg_event = std::mem::zeroed();
        assert_eq!(pg_subscriber_next_event(sub, &mut ev), 1);
        assert_eq!(ev.kind, pg_event_kind::PG_EVENT_CONNECTED as i32);
        assert_eq!(ev.sequence, 0);
        let mut pc = pg_publisher_counters::default();
        assert_eq!(pg_publisher_get_counters(publ, &mut pc), 0);
        assert_eq!((pc.messages, pc.bytes), (2, 9));
        let mut sc = pg_subscriber_counters::default();
        assert_eq!(pg_subscriber_get_counters(sub, &mut sc), 0);
        assert_eq!((sc.messages, sc.bytes, sc.lost), (2, 9, 0));
        let mut uri_out: *const c_char = null();
        assert_eq!(pg_publisher_uri(publ, &mut uri_out), 0);
        assert_eq!(CStr::from_ptr(uri_out), uri.as_c_str());
        let mut fd = 0;
        assert_eq!(pg_subscriber_readable_fd(sub, &mut fd), 0);
        assert_eq!(fd, -1, "shared memory has no socket");
        assert_eq!(pg_publisher_close(publ), 0);
        assert_eq!(
            pg_publisher_offer(publ, b"x".as_ptr().cast(), 1, null_mut()),
            PG_ERROR_CLOSED as i32
        );
        // The publisher closed: the subscriber hears it.
        let mut closed = false;
        for _ in 0..1000 {
            pg_subscriber_poll(
                sub,
                Some(count_messages),
                (&mut got as *mut Vec<_>).cast(),
                16,
            );
            if pg_subscriber_next_event(sub, &mut ev) == 1
                && ev.kind == pg_event_kind::PG_EVENT_PUBLISHER_CLOSED as i32
            {
                closed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(closed, "PG_EVENT_PUBLISHER_CLOSED");
        assert_eq!(pg_publisher_free(publ), 0);
        assert_eq!(pg_subscriber_free(sub), 0);
        assert_eq!(pg_context_free(ctx), 0);
    }
}

#[test]
fn a_panic_becomes_an_error_and_poisons_the_handle() {
    let (mut ctx, mut publ) = (null_mut(), null_mut());
    let uri = CString::new(format!("ipc://ffi-panic-{}", std::process::id())).unwrap();
    // SAFETY: the API used as the header says.
    unsafe {
        assert_eq!(pg_context_new(&mut ctx), 0);
        assert_eq!(
            pg_publisher_new(ctx, c"t".as_ptr(), uri.as_ptr(), &mut publ),
            0
        );
    }
    let r = with(
        publ as usize,
        Kind::Publisher,
        "publisher",
        |_: &mut PublisherObject| panic!("a bug"),
    );
    assert_eq!(r, PG_ERROR_INTERNAL as i32);
    assert!(last_error().contains("a bug"), "{}", last_error());
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            pg_publisher_offer(publ, b"x".as_ptr().cast(), 1, null_mut()),
            PG_ERROR_INTERNAL as i32
        );
        assert!(last_error().contains("free it"), "{}", last_error());
        assert_eq!(pg_publisher_free(publ), 0, "a poisoned handle can be freed");
        assert_eq!(pg_context_free(ctx), 0);
    }
}

#[test]
fn status_names_and_version() {
    // SAFETY: static NUL-terminated strings.
    unsafe {
        assert_eq!(
            CStr::from_ptr(pg_status_name(-6)),
            c"PG_ERROR_BACK_PRESSURED"
        );
        assert_eq!(CStr::from_ptr(pg_status_name(0)), c"PG_OK");
        assert_eq!(CStr::from_ptr(pg_status_name(-999)), c"PG_UNKNOWN");
        assert_eq!(
            CStr::from_ptr(pg_version()).to_str().unwrap(),
            env!("CARGO_PKG_VERSION")
        );
    }
}

/// The C API's counters structs (written out for cbindgen) have the protocol's counters, in
/// the order of their `NAMES`, and each is filled from the field of its name.
#[test]
fn the_c_counters_structs_follow_the_protocol_counters() {
    let header = include_str!("../../../include/peregrine.h");
    let fields = |name: &str| -> Vec<&str> {
        let end = header
            .find(&format!("}} {name};"))
            .unwrap_or_else(|| panic!("{name} is not in include/peregrine.h"));
        let start = header[..end].rfind("typedef struct {").unwrap();
        header[start..end]
            .lines()
            .filter_map(|l| l.trim().strip_prefix("uint64_t "))
            .map(|f| f.trim_end_matches(';'))
            .collect()
    };
    assert_eq!(
        fields("pg_publisher_counters"),
        peregrine::PublisherCounters::NAMES
    );
    assert_eq!(
        fields("pg_subscriber_counters"),
        peregrine::SubscriberCounters::NAMES
    );

    // Each field is filled from its own counter: distinct values come out where they went in.
    let p = pg_publisher_counters::from(&peregrine::PublisherCounters {
        messages: 1,
        bytes: 2,
        back_pressured: 3,
        subscribers_reaped: 4,
        flow_dropped: 5,
        joins_refused: 6,
        rate_limited: 7,
        naks_received: 8,
        retransmitted: 9,
        retransmit_unavailable: 10,
        retransmit_refused: 11,
    });
    let as_array = |c: &pg_publisher_counters| {
        [
            c.messages,
            c.bytes,
            c.back_pressured,
            c.subscribers_reaped,
            c.flow_dropped,
            c.joins_refused,
            c.rate_limited,
            c.naks_received,
            c.retransmitted,
            c.retransmit_unavailable,
            c.retransmit_refused,
        ]
    };
    assert_eq!(as_array(&p), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    let s = pg_subscriber_counters::from(&peregrine::SubscriberCounters {
        messages: 1,
        bytes: 2,
        gaps: 3,
        lost: 4,
        corrupt_frames: 5,
        duplicates: 6,
        naks_sent: 7,
        retransmits_received: 8,
        recovered: 9,
    });
    assert_eq!(
        [
            s.messages,
            s.bytes,
            s.gaps,
            s.lost,
            s.corrupt_frames,
            s.duplicates,
            s.naks_sent,
            s.retransmits_received,
            s.recovered
        ],
        [1, 2, 3, 4, 5, 6, 7, 8, 9]
    );
}
