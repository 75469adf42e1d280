//! Issue 14, item 7, and issue 35, through a publisher by topic: one stalled subscriber (a
//! network receiver, or a shared-memory subscriber that stops polling) holds the other
//! subscribers of the same topic back for `flow_timeout_ms` at most.

use peregrine::{Config, Context, IdleKind};
use peregrine_wire::header::status_flags;
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::status::{StatusFrame, StatusRepr, STATUS_LEN};
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

fn status(session_id: u32, stream_id: u32, next: u64, flags: u16) -> [u8; STATUS_LEN] {
    let mut b = [0u8; STATUS_LEN];
    StatusRepr {
        session_id,
        stream_id,
        receiver_id: 0x0bad_f00d,
        next_sequence: next,
        window: 1,
        flags,
    }
    .emit(&mut StatusFrame::new_unchecked(&mut b[..]));
    b
}

/// Offers messages `0..total` (each its index as 8 bytes), calling `between` after every offer
/// (the publisher's work, and a poll that pushes what a subscriber received), until `total`
/// were received. Returns them, and the longest time offers were refused in a row.
fn publish_all(
    publ: &mut peregrine::Publisher,
    total: u64,
    deadline: Instant,
    mut between: impl FnMut(&mut peregrine::Publisher, &mut Vec<u64>),
) -> (Vec<u64>, Duration) {
    let mut got = Vec::new();
    let mut i = 0u64;
    let mut refused_since: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    while (got.len() as u64) < total {
        assert!(
            Instant::now() < deadline,
            "stuck: {i} offered, {} received, {:?}",
            got.len(),
            publ.counters()
        );
        if i < total {
            // Read before the offer: a refusal run counted from here started no later than
            // the publisher's own clock for it, so it is never measured short.
            let before = Instant::now();
            match publ.offer(&i.to_le_bytes()) {
                Ok(_) => {
                    i += 1;
                    if let Some(t) = refused_since.take() {
                        longest = longest.max(t.elapsed());
                    }
                }
                Err(_) => {
                    refused_since.get_or_insert(before);
                }
            }
        }
        between(publ, &mut got);
    }
    (got, longest)
}

#[test]
fn a_stalled_network_receiver_holds_shared_memory_subscribers_for_the_flow_timeout_only() {
    let t = format!("t{}.flowbound", std::process::id());
    let cfg = Config::from_toml("[udp]\nflow_timeout_ms = 300\n", "test").unwrap();
    let pub_ctx = Context::with_config(cfg);
    let sub_ctx = Context::new();
    let mut sub = sub_ctx.subscribe(&t, IdleKind::Backoff).unwrap();
    let mut publ = pub_ctx.publish(&t).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while publ.subscriber_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the shared-memory subscriber never came"
        );
        sub.poll(&mut |_| {}, 16);
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    // A receiver on the topic's UDP endpoint that hears the publisher (it echoes the session
    // and position of the answer to its JOIN) with a window of one frame, and never moves.
    let udp = publ
        .uri()
        .split_whitespace()
        .find_map(|u| u.strip_prefix("udp://"))
        .expect("a UDP endpoint is advertised");
    let addr: SocketAddrV4 = udp.split('?').next().unwrap().parse().unwrap();
    let stream_id = peregrine_proto::resolver::stream_id_of(&t);
    let fake = UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.connect(addr).unwrap();
    fake.set_nonblocking(true).unwrap();
    fake.send(&status(0, stream_id, 0, status_flags::JOIN))
        .unwrap();
    let position = std::cell::Cell::new(None);
    let mut last_keepalive = Instant::now();
    let mut first = true;
    let mut keep_alive = |publ: &mut peregrine::Publisher| {
        let mut buf = [0u8; 65536];
        while let Ok(n) = fake.recv(&mut buf) {
            if position.get().is_none() {
                if let Ok(hb) =
                    HeartbeatFrame::new_checked(&buf[..n]).and_then(|f| HeartbeatRepr::parse(&f))
                {
                    position.set(Some(hb.next_sequence));
                }
            }
        }
        if let Some(p) = position.get() {
            if last_keepalive.elapsed() >= Duration::from_millis(20) || first {
                first = false;
                let _ = fake.send(&status(publ.session_id(), stream_id, p, 0));
                last_keepalive = Instant::now();
            }
        }
    };
    while position.get().is_none() {
        assert!(Instant::now() < deadline, "no answer to the JOIN");
        publ.do_work();
        keep_alive(&mut publ);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Its first STATUS (sent at once) reaches the publisher.
    for _ in 0..50 {
        publ.do_work();
        keep_alive(&mut publ);
        std::thread::sleep(Duration::from_millis(1));
    }
    let total = 5000u64;
    let (got, longest) = publish_all(&mut publ, total, deadline, |publ, got| {
        publ.do_work();
        keep_alive(publ);
        sub.poll(
            &mut |m| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
    });
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert!(
        longest >= Duration::from_millis(250) && longest < Duration::from_secs(3),
        "the shared-memory subscriber was held {longest:?} for a flow timeout of 300 ms"
    );
    assert_eq!(publ.counters().flow_dropped, 1, "{:?}", publ.counters());
}

/// Issue 35, through the API with `[ipc] flow_timeout_ms`: a shared-memory subscriber that
/// stops polling holds a publisher by topic for the flow timeout only. The other subscriber
/// receives every message; the stopped one, polled again, receives what the old log held and a
/// `Lost` event for exactly the rest of what it missed, then the new messages.
#[test]
fn a_shared_memory_subscriber_that_stops_polling_holds_a_publisher_by_topic_for_the_flow_timeout_only(
) {
    use peregrine::SubscriberEvent;
    let t = format!("t{}.ipcstall", std::process::id());
    let cfg = Config::from_toml(
        "[ipc]\ncapacity = \"64k\"\nflow_timeout_ms = 300\n[resolver]\nlocal = \"ipc\"\n",
        "test",
    )
    .unwrap();
    let pub_ctx = Context::with_config(cfg);
    let sub_ctx = Context::new();
    let mut live = sub_ctx.subscribe(&t, IdleKind::Backoff).unwrap();
    let mut stalled = sub_ctx.subscribe(&t, IdleKind::Backoff).unwrap();
    let mut publ = pub_ctx.publish(&t).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while publ.subscriber_count() < 2 {
        assert!(Instant::now() < deadline, "the subscribers never came");
        live.poll(&mut |_| {}, 16);
        stalled.poll(&mut |_| {}, 16);
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    // Two 64 KiB logs' worth: more than the old log holds for the stalled one.
    let total = 2 * 1024u64;
    let (got, longest) = publish_all(&mut publ, total, deadline, |publ, got| {
        publ.do_work();
        live.poll(
            &mut |m| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
    });
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    // The publisher's clock starts at a refused offer: never less than the timeout.
    assert!(longest >= Duration::from_millis(300), "held {longest:?}");
    assert_eq!(publ.counters().flow_dropped, 1, "{:?}", publ.counters());
    let mut live_events = Vec::new();
    while let Some(e) = live.next_event() {
        live_events.push(e);
    }
    assert!(
        !live_events.iter().any(|e| matches!(
            e,
            SubscriberEvent::Lost { .. } | SubscriberEvent::PublisherClosed { .. }
        )),
        "{live_events:?}"
    );
    // The stalled subscriber reads again.
    let mut theirs = Vec::new();
    let mut lost = Vec::new();
    while (theirs.len() as u64 + lost.iter().map(|l: &(u64, u64)| l.1).sum::<u64>()) < total {
        assert!(
            Instant::now() < deadline,
            "{} received, lost {lost:?}",
            theirs.len()
        );
        stalled.poll(
            &mut |m| theirs.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
        while let Some(e) = stalled.next_event() {
            if let SubscriberEvent::Lost {
                from_sequence,
                count,
                ..
            } = e
            {
                lost.push((from_sequence, count));
            }
        }
    }
    let [(from, count)] = lost[..] else {
        panic!("one loss: {lost:?}");
    };
    assert!(count > 0);
    let want: Vec<u64> = (0..from).chain(from + count..total).collect();
    assert_eq!(theirs, want);
}
