//! The UDP and multicast subscriber over real sockets on loopback: a hostile datagram sent to
//! the group (issue 14, item 6) and late join (item 10). The sans-I/O rules behind them are
//! tested with a virtual clock in `crates/proto/src/receiver/tests.rs`.

use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{random_u32, Message, Scheme, SubscriberEvent, Uri};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::data::{DataFrame, DataRepr};
use peregrine_wire::header::flags;
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

const STREAM: u32 = 78;

fn fresh_uri(scheme: Scheme, params: &str) -> String {
    let q = if params.is_empty() {
        String::new()
    } else {
        format!("?{params}")
    };
    match scheme {
        Scheme::Udp => {
            let port = UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            format!("udp://127.0.0.1:{port}{q}")
        }
        _ => {
            let r = random_u32();
            format!(
                "mcast://239.255.{}.{}:{}{q}",
                (r >> 8) & 0xff,
                (r & 0xff).max(1),
                20_000 + (r >> 16) % 40_000
            )
        }
    }
}

fn cfg(uri: &str) -> NetConfig {
    NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap()
}

/// Polls until `want` messages (their 8-byte numbers) arrived, driving the publisher.
fn receive(
    uri: &str,
    p: &mut UdpPublisher,
    s: &mut UdpSubscriber,
    got: &mut Vec<u64>,
    events: &mut Vec<SubscriberEvent>,
    want: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "{uri}: {got:?} {events:?} {:?}",
            s.receiver_stats()
        );
        p.do_work();
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
        while let Some(e) = s.next_event() {
            events.push(e);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Drives both sides until they are connected; returns the numbers of the messages the
/// subscriber delivered meanwhile (a late join's repair can arrive before the publisher counts
/// the subscriber: how soon is the machine's business, so nothing delivered may be dropped).
fn connect(uri: &str, p: &mut UdpPublisher, s: &mut UdpSubscriber) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while p.subscriber_count() == 0 || !s.is_connected() {
        assert!(Instant::now() < deadline, "{uri}: no connection");
        p.do_work();
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            16,
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

/// Issue 14, item 6: a DATA frame, a HEARTBEAT and a BYE naming the session, a billion
/// sequence numbers ahead, sent to the group from another socket. Before the fix the DATA
/// frame was delivered, about a billion messages were reported lost and the real stream was
/// never delivered again (its frames looked old).
#[test]
fn forged_datagrams_sent_to_the_group_neither_blind_a_subscriber_nor_report_a_loss() {
    for nak in ["1", "0"] {
        let uri = fresh_uri(Scheme::Mcast, &format!("nak={nak}"));
        let c = cfg(&uri);
        let mut p = UdpPublisher::create(&c, &uri, 51, STREAM).unwrap();
        let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
        assert!(connect(&uri, &mut p, &mut s).is_empty());
        let (mut got, mut events) = (Vec::new(), Vec::new());
        for i in 0..100u64 {
            p.offer(&i.to_le_bytes()).unwrap();
        }
        p.flush().unwrap();
        receive(&uri, &mut p, &mut s, &mut got, &mut events, 100);

        let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
        attacker.set_multicast_loop_v4(true).unwrap();
        let far = 1_000_000_000u64;
        let payload = far.to_le_bytes();
        let data = DataRepr {
            session_id: 51,
            stream_id: STREAM,
            sequence: far,
            message_length: 8,
            flags: flags::BEGIN | flags::END,
            payload: &payload,
        };
        let mut d = vec![0u8; data.buffer_len()];
        data.emit(&mut DataFrame::new_unchecked(&mut d[..]));
        let mut hb = [0u8; 40];
        HeartbeatRepr {
            session_id: 51,
            stream_id: STREAM,
            next_sequence: far,
            oldest_retained: far,
        }
        .emit(&mut HeartbeatFrame::new_unchecked(&mut hb[..]));
        let mut bye = [0u8; BYE_LEN];
        ByeRepr {
            session_id: 51,
            stream_id: STREAM,
            final_next_sequence: far,
        }
        .emit(&mut ByeFrame::new_unchecked(&mut bye[..]));
        for frame in [&d[..], &hb[..], &bye[..]] {
            attacker.send_to(frame, c.addr).unwrap();
        }
        // Let the forged datagrams arrive first, then the real stream carries on.
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.receiver_stats().foreign_source < 3 {
            assert!(Instant::now() < deadline, "{uri}: {:?}", s.receiver_stats());
            s.poll(
                &mut |m: Message<'_>| {
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                usize::MAX,
            );
        }
        for i in 100..200u64 {
            p.offer(&i.to_le_bytes()).unwrap();
        }
        p.flush().unwrap();
        receive(&uri, &mut p, &mut s, &mut got, &mut events, 200);
        assert_eq!(got, (0..200).collect::<Vec<u64>>(), "{uri}");
        assert_eq!(s.counters().lost, 0, "{uri}");
        assert!(
            !events.iter().any(|e| matches!(
                e,
                SubscriberEvent::Lost { .. } | SubscriberEvent::PublisherClosed { .. }
            )),
            "{uri}: {events:?}"
        );
        assert!(s.is_connected());
    }
}

/// Issue 14, item 10: the publisher starts and sends before the subscriber's socket exists
/// (as when the subscriber learns the source by topic resolution). With the default late join
/// the subscriber asks for those messages and delivers the stream from its first message;
/// `late_join=none` starts where it joined.
#[test]
fn a_subscriber_that_joins_a_young_stream_gets_it_from_its_first_message() {
    for scheme in [Scheme::Udp, Scheme::Mcast] {
        for late_join in ["", "late_join=none"] {
            let uri = fresh_uri(scheme, late_join);
            let c = cfg(&uri);
            let mut p = UdpPublisher::create(&c, &uri, 52, STREAM).unwrap();
            for i in 0..5u64 {
                p.offer(&i.to_le_bytes()).unwrap();
            }
            p.flush().unwrap();
            let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
            let mut got = connect(&uri, &mut p, &mut s);
            for i in 5..10u64 {
                p.offer(&i.to_le_bytes()).unwrap();
            }
            p.flush().unwrap();
            let mut events = Vec::new();
            let want = if late_join.is_empty() { 10 } else { 5 };
            receive(&uri, &mut p, &mut s, &mut got, &mut events, want);
            let first = if late_join.is_empty() { 0 } else { 5 };
            assert_eq!(got, (first..10).collect::<Vec<u64>>(), "{uri}");
            assert_eq!(
                events.first(),
                Some(&SubscriberEvent::Connected {
                    session_id: 52,
                    first_sequence: first
                }),
                "{uri}"
            );
            assert_eq!(s.counters().lost, 0, "{uri}");
            let asked = u64::from(late_join.is_empty());
            assert_eq!(s.receiver_stats().late_joins, asked, "{uri}");
            assert_eq!(s.counters().recovered, 5 * asked, "{uri}");
        }
    }
}

/// Issue 27, item 1: a subscriber that provably cannot keep up is told exactly what it lost.
/// No flow control (`window=0`), no repair (`nak=0`), a 64 KiB receive buffer, and the
/// subscriber reads nothing until the publisher has sent every message (one thread does both,
/// so no machine is fast enough for the subscriber to keep up): the kernel keeps what fits and
/// drops the rest. Then the subscriber reads, the publisher's heartbeats tell it where the
/// stream ended, and the gaps it saw are exactly the ranges of its `Lost` events:
/// received + lost == sent.
#[test]
fn an_overrun_udp_subscriber_is_told_exactly_what_it_lost() {
    const SENT: u64 = 20_000;
    let uri = fresh_uri(Scheme::Udp, "window=0&rcvbuf=64k&mode=urgent&nak=0");
    let c = cfg(&uri);
    let mut p = UdpPublisher::create(&c, &uri, 53, STREAM).unwrap();
    let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
    assert!(connect(&uri, &mut p, &mut s).is_empty());
    let mut payload = [b'.'; 64];
    for i in 0..SENT {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        p.offer(&payload).unwrap();
    }
    p.flush().unwrap();

    let (mut got, mut lost_ranges) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    let accounted = |got: &Vec<u64>, lost: &Vec<(u64, u64)>| {
        got.len() as u64 + lost.iter().map(|r| r.1 - r.0).sum::<u64>()
    };
    while accounted(&got, &lost_ranges) < SENT {
        assert!(
            Instant::now() < deadline,
            "{uri}: received {} lost {:?} {:?}",
            got.len(),
            lost_ranges,
            s.receiver_stats()
        );
        p.do_work();
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
        while let Some(e) = s.next_event() {
            if let SubscriberEvent::Lost {
                from_sequence,
                count,
                ..
            } = e
            {
                lost_ranges.push((from_sequence, from_sequence + count));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !lost_ranges.is_empty(),
        "{uri}: {SENT} messages of 64 B cannot fit a 64 KiB buffer"
    );
    // Every sequence is either received or inside exactly one Lost range, in order.
    let mut expect = 0u64;
    let (mut g, mut l) = (got.iter().peekable(), lost_ranges.iter().peekable());
    while expect < SENT {
        if g.peek() == Some(&&expect) {
            g.next();
            expect += 1;
        } else {
            let r = l.next().unwrap_or_else(|| {
                panic!("{uri}: sequence {expect} neither received nor reported lost")
            });
            assert_eq!(r.0, expect, "{uri}: a Lost range {r:?} that is not the gap");
            expect = r.1;
        }
    }
    assert!(g.next().is_none() && l.next().is_none(), "{uri}: extra");
    assert_eq!(s.counters().lost, SENT - got.len() as u64, "{uri}");
}

/// A session whose frames all arrived in polls that delivered them (no empty poll received
/// anything after it began) is still declared dead once its publisher falls silent: an empty
/// poll skips the timers until they are due, and a datagram makes them due.
#[test]
fn a_publisher_heard_only_in_delivering_polls_is_declared_dead_after_the_timeout() {
    let uri = fresh_uri(Scheme::Mcast, "timeout_ms=300&window=0&mode=urgent");
    let mut s = UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap();
    // Timers run with no session yet: nothing is due until a datagram comes.
    for _ in 0..10 {
        assert_eq!(s.poll(&mut |_| {}, 16), 0);
    }
    let mut p = UdpPublisher::create(&cfg(&uri), &uri, 0x5d, STREAM).unwrap();
    let (mut got, mut events) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..20u64 {
        p.offer(&i.to_le_bytes()).unwrap();
        while got.len() <= i as usize {
            assert!(Instant::now() < deadline, "{uri}: {got:?}");
            s.poll(
                &mut |m: Message<'_>| {
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                16,
            );
        }
    }
    assert_eq!(got, (0..20).collect::<Vec<u64>>());
    // The publisher vanishes without a BYE (a killed process).
    std::mem::forget(p);
    let silent = Instant::now();
    while !events
        .iter()
        .any(|e| matches!(e, SubscriberEvent::PublisherDied { .. }))
    {
        assert!(
            silent.elapsed() < Duration::from_secs(5),
            "{uri}: not declared dead 5 s after falling silent (timeout 300 ms): {events:?}"
        );
        s.poll(&mut |_| {}, 16);
        while let Some(e) = s.next_event() {
            events.push(e);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!s.is_connected());
}
