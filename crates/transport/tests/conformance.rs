//! One conformance suite, run against every transport: ipc, udp, mcast, tcp.
//!
//! Each check is written once against `TransportPublisher` / `TransportSubscriber`; a
//! `Transport` value knows how to make a fresh publisher and subscriber pair (real sockets on
//! loopback, real shared memory) for it.

use peregrine_transport::ipc::{IpcConfig, IpcPublisher, IpcSubscriber};
use peregrine_transport::net::tcp::{TcpPublisher, TcpSubscriber};
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{
    random_u32, AnyPublisher, AnySubscriber, Message, OfferError, Scheme, SubscriberEvent,
    TransportPublisher, TransportSubscriber, Uri,
};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

const STREAM: u32 = 77;
const TOPIC: &str = "conformance";

use peregrine_testkit::free_port;

/// A URI of a fresh address for `scheme`, with extra parameters.
fn fresh_uri(scheme: Scheme, params: &str) -> String {
    let q = if params.is_empty() {
        String::new()
    } else {
        format!("?{params}")
    };
    match scheme {
        Scheme::Ipc => format!("ipc://conf-{}-{:08x}{q}", std::process::id(), random_u32()),
        Scheme::Udp => format!("udp://127.0.0.1:{}{q}", free_port(false)),
        Scheme::Tcp => format!("tcp://127.0.0.1:{}{q}", free_port(true)),
        Scheme::Mcast => {
            let r = random_u32();
            format!(
                "mcast://239.255.{}.{}:{}{q}",
                (r >> 8) & 0xff,
                (r & 0xff).max(1),
                20_000 + (r >> 16) % 40_000
            )
        }
        other => panic!("the suite has no case for {other}://: add one"),
    }
}

fn cfg(uri: &str) -> NetConfig {
    NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap()
}

/// Runs `check` with a publisher and subscriber of `uri`.
fn with_pair(uri: &str, check: &mut dyn FnMut(&mut dyn Pair)) {
    let parsed = Uri::parse(uri).unwrap();
    match parsed.scheme {
        Scheme::Ipc => {
            let c = IpcConfig::from_uri(&parsed).unwrap();
            let p = IpcPublisher::create(&c, TOPIC, STREAM).unwrap();
            let s = IpcSubscriber::new(&c, TOPIC, false).unwrap();
            check(&mut Both {
                p,
                s,
                uri: uri.into(),
            });
        }
        Scheme::Udp | Scheme::Mcast => {
            let c = cfg(uri);
            let p = UdpPublisher::create(&c, uri, random_u32(), STREAM).unwrap();
            let s = UdpSubscriber::new(&c, uri, STREAM).unwrap();
            check(&mut Both {
                p,
                s,
                uri: uri.into(),
            });
        }
        Scheme::Tcp => {
            let c = cfg(uri);
            let p = TcpPublisher::create(&c, uri, random_u32(), STREAM).unwrap();
            let s = TcpSubscriber::new(&c, uri, STREAM).unwrap();
            check(&mut Both {
                p,
                s,
                uri: uri.into(),
            });
        }
        other => panic!("the suite has no case for {other}://: add one"),
    }
}

/// The operations the checks use, over a concrete pair.
trait Pair {
    fn uri(&self) -> &str;
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError>;
    fn flush(&mut self);
    fn do_work(&mut self);
    fn poll(&mut self, got: &mut Vec<(u64, Vec<u8>)>, limit: usize) -> usize;
    fn event(&mut self) -> Option<SubscriberEvent>;
    fn subscriber_count(&self) -> usize;
    fn connected(&self) -> bool;
    fn max_message_len(&self) -> usize;
}

struct Both<P, S> {
    p: P,
    s: S,
    uri: String,
}

impl<P: TransportPublisher, S: TransportSubscriber> Pair for Both<P, S> {
    fn uri(&self) -> &str {
        &self.uri
    }
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        self.p.offer(payload)
    }
    fn flush(&mut self) {
        self.p.flush().unwrap();
    }
    fn do_work(&mut self) {
        self.p.do_work();
    }
    fn poll(&mut self, got: &mut Vec<(u64, Vec<u8>)>, limit: usize) -> usize {
        self.s.poll(
            &mut |m: Message<'_>| got.push((m.sequence, m.payload.to_vec())),
            limit,
        )
    }
    fn event(&mut self) -> Option<SubscriberEvent> {
        self.s.next_event()
    }
    fn subscriber_count(&self) -> usize {
        self.p.subscriber_count()
    }
    fn connected(&self) -> bool {
        self.s.is_connected()
    }
    fn max_message_len(&self) -> usize {
        self.p.max_message_len()
    }
}

fn until(what: &str, pair: &mut dyn Pair, mut done: impl FnMut(&mut dyn Pair) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(pair) {
        assert!(
            Instant::now() < deadline,
            "{}: timed out waiting for {what}",
            pair.uri()
        );
        pair.do_work();
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn connect(pair: &mut dyn Pair) {
    let mut sink = Vec::new();
    until("the subscriber to connect", pair, |p| {
        p.poll(&mut sink, 16);
        p.subscriber_count() >= 1 && p.connected()
    });
    assert!(sink.is_empty());
}

/// Sends every message (retrying on back-pressure while the subscriber polls) and returns
/// what arrived.
fn exchange(pair: &mut dyn Pair, messages: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    for m in messages {
        loop {
            match pair.offer(m) {
                Ok(_) => break,
                Err(OfferError::BackPressured) => {
                    pair.poll(&mut got, usize::MAX);
                    pair.do_work();
                }
                Err(e) => panic!("{}: offer of {} bytes: {e}", pair.uri(), m.len()),
            }
        }
    }
    pair.flush();
    let want = messages.len();
    until("every message", pair, |p| {
        p.poll(&mut got, usize::MAX);
        got.len() >= want
    });
    got
}

#[test]
fn messages_arrive_in_order_and_intact_on_every_transport() {
    for scheme in Scheme::ALL {
        for params in [
            "",
            if scheme == Scheme::Ipc {
                ""
            } else {
                "mode=urgent"
            },
        ] {
            with_pair(&fresh_uri(scheme, params), &mut |pair| {
                connect(pair);
                let messages: Vec<Vec<u8>> = (0..5000u32)
                    .map(|i| {
                        let len = 8 + (i as usize * 7919) % 600;
                        let mut m = vec![(i % 251) as u8; len];
                        m[..4].copy_from_slice(&i.to_le_bytes());
                        m
                    })
                    .collect();
                let got = exchange(pair, &messages);
                assert_eq!(got.len(), messages.len(), "{}", pair.uri());
                for (i, (g, m)) in got.iter().zip(&messages).enumerate() {
                    assert_eq!(&g.1, m, "{}: message {i}", pair.uri());
                }
                assert!(
                    got.windows(2).all(|w| w[0].0 < w[1].0),
                    "{}: sequences rise",
                    pair.uri()
                );
                while let Some(e) = pair.event() {
                    assert!(
                        matches!(e, SubscriberEvent::Connected { .. }),
                        "{}: {e:?}",
                        pair.uri()
                    );
                }
            });
        }
    }
}

#[test]
fn fragmentation_and_reassembly_at_the_edge_sizes() {
    for scheme in Scheme::ALL {
        let params = match scheme {
            Scheme::Ipc => "capacity=16m",
            Scheme::Tcp => "frame=1472",
            _ => "",
        };
        with_pair(&fresh_uri(scheme, params), &mut |pair| {
            connect(pair);
            // One datagram (or TCP frame) carries 1472 - 32 bytes of payload.
            let d = 1472 - 32;
            let sizes = [0, 1, d - 1, d, d + 1, 64 << 10, 1 << 20];
            let messages: Vec<Vec<u8>> = sizes
                .iter()
                .map(|&n| (0..n).map(|i| (i * 131 + n) as u8).collect())
                .collect();
            assert!(pair.max_message_len() >= 1 << 20);
            let got = exchange(pair, &messages);
            assert_eq!(got.len(), sizes.len(), "{}", pair.uri());
            for (g, m) in got.iter().zip(&messages) {
                assert!(
                    g.1 == *m,
                    "{}: a message of {} bytes came back as {} bytes or changed",
                    pair.uri(),
                    m.len(),
                    g.1.len()
                );
            }
        });
    }
}

#[test]
fn poll_never_delivers_more_than_its_limit() {
    for scheme in Scheme::ALL {
        with_pair(&fresh_uri(scheme, ""), &mut |pair| {
            connect(pair);
            for i in 0..50u32 {
                pair.offer(&i.to_le_bytes()).unwrap();
            }
            pair.flush();
            let mut got = Vec::new();
            until("50 messages three at a time", pair, |p| {
                let n = p.poll(&mut got, 3);
                assert!(n <= 3, "{}: poll(limit 3) delivered {n}", p.uri());
                got.len() == 50
            });
            let order: Vec<u32> = got
                .iter()
                .map(|g| u32::from_le_bytes(g.1[..4].try_into().unwrap()))
                .collect();
            assert_eq!(order, (0..50).collect::<Vec<_>>());
        });
    }
}

#[test]
fn a_subscriber_polled_a_few_at_a_time_gets_every_message_intact_while_its_buffer_turns_over() {
    // 20,000 messages of 1 to 400 bytes (about 4 MB) against polls of 7: the TCP subscriber's
    // buffer holds far more than a poll takes, so it checks frames ahead of delivery and
    // compacts under them many times over.
    for scheme in Scheme::ALL {
        with_pair(&fresh_uri(scheme, ""), &mut |pair| {
            connect(pair);
            let message = |i: u32| {
                let mut m = vec![(i % 251) as u8; 1 + (i as usize * 37) % 400];
                m[..1].copy_from_slice(&[(i % 256) as u8]);
                if m.len() >= 4 {
                    m[..4].copy_from_slice(&i.to_le_bytes());
                }
                m
            };
            let mut got = Vec::new();
            for i in 0..20_000u32 {
                let m = message(i);
                loop {
                    match pair.offer(&m) {
                        Ok(_) => break,
                        Err(OfferError::BackPressured) => {
                            let n = pair.poll(&mut got, 7);
                            assert!(n <= 7, "{}: poll(limit 7) delivered {n}", pair.uri());
                            pair.do_work();
                        }
                        Err(e) => panic!("{}: offer: {e}", pair.uri()),
                    }
                }
            }
            pair.flush();
            until("20,000 messages seven at a time", pair, |p| {
                assert!(p.poll(&mut got, 7) <= 7);
                got.len() >= 20_000
            });
            assert_eq!(got.len(), 20_000, "{}", pair.uri());
            for (i, (_, m)) in got.iter().enumerate() {
                assert_eq!(*m, message(i as u32), "{}: message {i}", pair.uri());
            }
        });
    }
}

#[test]
fn any_publisher_and_subscriber_open_the_transport_the_uri_names() {
    for scheme in Scheme::ALL {
        let uri = Uri::parse(&fresh_uri(scheme, "")).unwrap();
        let p = AnyPublisher::open(&uri, TOPIC, STREAM, random_u32()).unwrap();
        let s = AnySubscriber::open(&uri, TOPIC, STREAM, false).unwrap();
        let opened = match (&p, &s) {
            (AnyPublisher::Ipc(_), AnySubscriber::Ipc(_)) => vec![Scheme::Ipc],
            (AnyPublisher::Udp(_), AnySubscriber::Udp(_)) => vec![Scheme::Udp, Scheme::Mcast],
            (AnyPublisher::Tcp(_), AnySubscriber::Tcp(_)) => vec![Scheme::Tcp],
            _ => vec![],
        };
        assert!(opened.contains(&scheme), "{uri}: opened {p:?}, {s:?}");
        let pair = &mut Both {
            p,
            s,
            uri: uri.to_string(),
        };
        connect(pair);
        let messages: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let got: Vec<Vec<u8>> = exchange(pair, &messages).into_iter().map(|g| g.1).collect();
        assert_eq!(got, messages, "{uri}");
    }
}

#[test]
fn a_subscriber_started_before_its_publisher_connects_when_it_appears() {
    for scheme in [Scheme::Udp, Scheme::Mcast, Scheme::Tcp] {
        let uri = fresh_uri(scheme, "");
        let c = cfg(&uri);
        let mut got = Vec::new();
        match scheme {
            Scheme::Tcp => {
                let mut s = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
                for _ in 0..20 {
                    s.poll(&mut |_m: Message<'_>| {}, 16);
                }
                let mut p = TcpPublisher::create(&c, &uri, 5, STREAM).unwrap();
                let deadline = Instant::now() + Duration::from_secs(10);
                while !(p.subscriber_count() == 1 && s.is_connected()) {
                    assert!(Instant::now() < deadline, "{uri}: no connection");
                    p.do_work();
                    s.poll(&mut |_m: Message<'_>| {}, 16);
                    std::thread::sleep(Duration::from_millis(1));
                }
                p.offer(b"hello").unwrap();
                p.flush().unwrap();
                while got.is_empty() {
                    assert!(Instant::now() < deadline);
                    s.poll(
                        &mut |m: Message<'_>| got.push((m.sequence, m.payload.to_vec())),
                        16,
                    );
                }
            }
            _ => {
                let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
                for _ in 0..20 {
                    s.poll(&mut |_m: Message<'_>| {}, 16);
                }
                let mut p = UdpPublisher::create(&c, &uri, 5, STREAM).unwrap();
                let deadline = Instant::now() + Duration::from_secs(10);
                while !(p.subscriber_count() == 1 && s.is_connected()) {
                    assert!(Instant::now() < deadline, "{uri}: no connection");
                    p.do_work();
                    s.poll(&mut |_m: Message<'_>| {}, 16);
                    std::thread::sleep(Duration::from_millis(1));
                }
                p.offer(b"hello").unwrap();
                p.flush().unwrap();
                while got.is_empty() {
                    assert!(Instant::now() < deadline);
                    s.poll(
                        &mut |m: Message<'_>| got.push((m.sequence, m.payload.to_vec())),
                        16,
                    );
                }
            }
        }
        assert_eq!(got, vec![(0, b"hello".to_vec())], "{uri}");
    }
}

#[test]
fn closing_the_publisher_tells_the_subscriber_after_the_last_message() {
    for scheme in [Scheme::Udp, Scheme::Mcast, Scheme::Tcp] {
        let uri = fresh_uri(scheme, "");
        let c = cfg(&uri);
        let mut events = Vec::new();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        macro_rules! run {
            ($p:expr, $s:expr) => {{
                let mut p = $p;
                let mut s = $s;
                while !(p.subscriber_count() == 1 && s.is_connected()) {
                    assert!(Instant::now() < deadline, "{uri}: no connection");
                    p.do_work();
                    s.poll(&mut |_m: Message<'_>| {}, 16);
                    std::thread::sleep(Duration::from_millis(1));
                }
                p.offer(b"last words").unwrap();
                drop(p);
                loop {
                    assert!(Instant::now() < deadline, "{uri}: no close event");
                    s.poll(&mut |m: Message<'_>| got.push(m.payload.to_vec()), 16);
                    while let Some(e) = s.next_event() {
                        events.push(e);
                    }
                    if events
                        .iter()
                        .any(|e| matches!(e, SubscriberEvent::PublisherClosed { .. }))
                    {
                        break;
                    }
                }
            }};
        }
        match scheme {
            Scheme::Tcp => run!(
                TcpPublisher::create(&c, &uri, 9, STREAM).unwrap(),
                TcpSubscriber::new(&c, &uri, STREAM).unwrap()
            ),
            _ => run!(
                UdpPublisher::create(&c, &uri, 9, STREAM).unwrap(),
                UdpSubscriber::new(&c, &uri, STREAM).unwrap()
            ),
        }
        assert_eq!(got, vec![b"last words".to_vec()], "{uri}");
        assert_eq!(
            events,
            vec![
                SubscriberEvent::Connected {
                    session_id: 9,
                    first_sequence: 0
                },
                SubscriberEvent::PublisherClosed { session_id: 9 }
            ],
            "{uri}"
        );
    }
}

#[test]
fn bad_addresses_give_clear_errors() {
    // A port in use.
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let uri = format!("udp://{}", taken.local_addr().unwrap());
    let e = UdpPublisher::create(&cfg(&uri), &uri, 1, STREAM)
        .unwrap_err()
        .to_string();
    assert!(e.contains("port is in use") && e.contains(&uri), "{e}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("tcp://{}", taken.local_addr().unwrap());
    let e = TcpPublisher::create(&cfg(&uri), &uri, 1, STREAM)
        .unwrap_err()
        .to_string();
    assert!(e.contains("port is in use"), "{e}");
    // An address this host does not have.
    let uri = "udp://192.0.2.1:4000";
    let e = UdpPublisher::create(&cfg(uri), uri, 1, STREAM)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("192.0.2.1 is not an address of this host"),
        "{e}"
    );
    // A missing interface.
    let uri = "mcast://239.255.1.1:4000?iface=192.0.2.1";
    let e = UdpSubscriber::new(&cfg(uri), uri, STREAM)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("iface=192.0.2.1 is not an address of this host"),
        "{e}"
    );
    let e = UdpPublisher::create(&cfg(uri), uri, 1, STREAM)
        .unwrap_err()
        .to_string();
    assert!(e.contains("iface=192.0.2.1"), "{e}");
    // A group that is not multicast, and multicast on udp://.
    for (uri, needle) in [
        ("mcast://10.1.2.3:4000", "10.1.2.3 is not a multicast group"),
        ("udp://239.1.2.3:4000", "use mcast://"),
    ] {
        let e = NetConfig::from_uri(&Uri::parse(uri).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
}

/// A TCP subscriber that stops reading: `slow=disconnect` drops it (the other subscriber gets
/// everything, the publisher never waits), and when it reads again it gets what was queued,
/// `PublisherDied`, reconnects, and is told exactly which sequence numbers it missed.
#[test]
fn a_stalled_tcp_subscriber_is_disconnected_and_told_exactly_what_it_missed() {
    let uri = fresh_uri(
        Scheme::Tcp,
        "max_pending=64k&sndbuf=4k&rcvbuf=4k&mode=urgent&slow=disconnect",
    );
    let c = cfg(&uri);
    let mut p = TcpPublisher::create(&c, &uri, 21, STREAM).unwrap();
    let mut fast = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
    let mut slow = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() < 2 || !fast.is_connected() || !slow.is_connected() {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        fast.poll(&mut |_m: Message<'_>| {}, 16);
        slow.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    let total = 100_000u64;
    let mut fast_got = Vec::new();
    for i in 0..total {
        let mut m = [0u8; 100];
        m[..8].copy_from_slice(&i.to_le_bytes());
        assert_eq!(p.offer(&m), Ok(i), "slow=disconnect never refuses");
        fast.poll(&mut |m: Message<'_>| fast_got.push(m.sequence), usize::MAX);
    }
    assert!(p.disconnected >= 1, "the stalled subscriber was dropped");
    // Later messages reach the reconnected subscriber.
    let mut slow_got: Vec<u64> = Vec::new();
    let mut events = Vec::new();
    let mut next = total;
    while Instant::now() < deadline {
        p.do_work();
        if next < total + 1000 {
            let mut m = [0u8; 100];
            m[..8].copy_from_slice(&next.to_le_bytes());
            p.offer(&m).unwrap();
            next += 1;
        }
        fast.poll(&mut |m: Message<'_>| fast_got.push(m.sequence), usize::MAX);
        slow.poll(&mut |m: Message<'_>| slow_got.push(m.sequence), usize::MAX);
        while let Some(e) = slow.next_event() {
            events.push(e);
        }
        if next == total + 1000
            && slow_got.last() == Some(&(next - 1))
            && fast_got.len() as u64 == next
        {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(
        fast_got,
        (0..next).collect::<Vec<_>>(),
        "the fast subscriber got everything"
    );
    assert_eq!(
        slow_got.last(),
        Some(&(next - 1)),
        "the slow one caught up after reconnecting: {events:?}"
    );
    // What it got plus what it was told it lost is every sequence number exactly once.
    let mut covered: Vec<u64> = slow_got.clone();
    for e in &events {
        if let SubscriberEvent::Lost {
            from_sequence,
            count,
            ..
        } = e
        {
            covered.extend(*from_sequence..from_sequence + count);
        }
    }
    covered.sort_unstable();
    assert_eq!(covered, (0..next).collect::<Vec<_>>(), "events: {events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, SubscriberEvent::PublisherDied { session_id: 21 })));
    assert!(events
        .iter()
        .any(|e| matches!(e, SubscriberEvent::Lost { session_id: 21, .. })));
}

/// With `slow=backpressure` a stalled TCP subscriber makes `offer` refuse once its queue is
/// full; nothing is dropped, and both subscribers get everything once it reads again.
#[test]
fn a_stalled_tcp_subscriber_back_pressures_the_publisher_and_loses_nothing() {
    let uri = fresh_uri(
        Scheme::Tcp,
        "max_pending=64k&sndbuf=4k&rcvbuf=4k&mode=urgent&slow=backpressure",
    );
    let c = cfg(&uri);
    let mut p = TcpPublisher::create(&c, &uri, 22, STREAM).unwrap();
    let mut fast = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
    let mut slow = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() < 2 || !fast.is_connected() || !slow.is_connected() {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        fast.poll(&mut |_m: Message<'_>| {}, 16);
        slow.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut fast_got = Vec::new();
    let mut sent = 0u64;
    loop {
        match p.offer(&[7u8; 100]) {
            Ok(s) => {
                assert_eq!(s, sent);
                sent += 1;
            }
            Err(OfferError::BackPressured) => break,
            Err(e) => panic!("{e}"),
        }
        fast.poll(&mut |m: Message<'_>| fast_got.push(m.sequence), usize::MAX);
        assert!(sent < 10_000_000, "never back-pressured");
    }
    assert!(p.counters().back_pressured >= 1);
    let mut slow_got = Vec::new();
    while (slow_got.len() as u64) < sent || (fast_got.len() as u64) < sent {
        assert!(
            Instant::now() < deadline,
            "{} / {} / {sent}",
            slow_got.len(),
            fast_got.len()
        );
        p.do_work();
        fast.poll(&mut |m: Message<'_>| fast_got.push(m.sequence), usize::MAX);
        slow.poll(&mut |m: Message<'_>| slow_got.push(m.sequence), usize::MAX);
    }
    assert_eq!(slow_got, (0..sent).collect::<Vec<_>>());
    assert_eq!(fast_got, (0..sent).collect::<Vec<_>>());
    assert_eq!(p.disconnected, 0);
}

/// A peer that is not a Peregrine publisher: garbage on a TCP stream and in UDP datagrams is
/// rejected and counted, never delivered, never a panic.
#[test]
fn garbage_from_the_network_is_rejected_and_counted() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("tcp://{}", listener.local_addr().unwrap());
    let mut s = TcpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    listener.set_nonblocking(true).unwrap();
    let mut conn = loop {
        s.poll(&mut |_m: Message<'_>| panic!("garbage delivered"), 16);
        if let Ok((c, _)) = listener.accept() {
            break c;
        }
        assert!(Instant::now() < deadline);
    };
    let mut junk = vec![0u8; 4096];
    let mut x = 0x9e37_79b9u32;
    for b in &mut junk {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    conn.write_all(&junk).unwrap();
    while s.corrupt_streams == 0 {
        s.poll(&mut |_m: Message<'_>| panic!("garbage delivered"), 16);
        assert!(Instant::now() < deadline, "garbage not detected");
    }
    assert_eq!(s.counters().messages, 0);

    // UDP: a subscriber of a multicast group receiving datagrams of junk and of truncated frames.
    let uri = fresh_uri(Scheme::Mcast, "");
    let c = cfg(&uri);
    let mut sub = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.set_multicast_loop_v4(true).unwrap();
    let mut frame = vec![0u8; 48];
    frame[..4].copy_from_slice(&100u32.to_le_bytes()); // claims 100 bytes, has 48
    frame[4..6].copy_from_slice(&0x4750u16.to_le_bytes());
    frame[6] = 1;
    frame[7] = 1;
    for _ in 0..20 {
        tx.send_to(&junk[..300], c.addr).unwrap();
        tx.send_to(&frame, c.addr).unwrap();
    }
    while sub.counters().corrupt_frames < 40 {
        sub.poll(&mut |_m: Message<'_>| panic!("garbage delivered"), 16);
        assert!(Instant::now() < deadline, "{:?}", sub.counters());
    }
    assert_eq!(sub.counters().messages, 0);
    let stats = sub.receiver_stats();
    assert!(stats.wire_errors.iter().sum::<u64>() >= 40, "{stats:?}");
}

/// A subscriber arriving while a publisher in normal (batching) mode offers without pause and
/// never calls `do_work`: it is still taken on, and starts on a message boundary.
#[test]
fn a_late_subscriber_joins_a_publisher_that_never_stops_offering() {
    for scheme in [Scheme::Udp, Scheme::Mcast, Scheme::Tcp] {
        let uri = fresh_uri(scheme, "");
        let c = cfg(&uri);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut events: Vec<SubscriberEvent> = Vec::new();
        let mut last_counters = String::new();
        macro_rules! run {
            ($p:expr, $s:expr) => {{
                let mut p = $p;
                let mut s = None;
                let mut i = 0u64;
                while got.len() < 1000 {
                    assert!(
                        Instant::now() < deadline,
                        "{uri}: the late subscriber got {} messages",
                        got.len()
                    );
                    let mut m = vec![0u8; 3000]; // two frames each: joining mid-message is possible
                    m[..8].copy_from_slice(&i.to_le_bytes());
                    match p.offer(&m) {
                        Ok(_) => i += 1,
                        Err(OfferError::BackPressured) => {}
                        Err(e) => panic!("{uri}: {e}"),
                    }
                    if i == 1000 && s.is_none() {
                        s = Some($s);
                    }
                    if let Some(s) = s.as_mut() {
                        s.poll(
                            &mut |m: Message<'_>| got.push(m.payload.to_vec()),
                            usize::MAX,
                        );
                        while let Some(e) = s.next_event() {
                            events.push(e);
                        }
                        last_counters = format!("{:?}", s.counters());
                    }
                }
            }};
        }
        match scheme {
            Scheme::Tcp => run!(
                TcpPublisher::create(&c, &uri, 3, STREAM).unwrap(),
                TcpSubscriber::new(&c, &uri, STREAM).unwrap()
            ),
            _ => run!(
                UdpPublisher::create(&c, &uri, 3, STREAM).unwrap(),
                UdpSubscriber::new(&c, &uri, STREAM).unwrap()
            ),
        }
        // Whole, consecutive messages from wherever it joined, and no loss. (This test found a
        // heartbeat announcing frames still in the batch, which the subscriber then reported
        // lost and dropped as duplicates: had anything been lost, every missing message must
        // have a frame inside a `Lost` range.)
        let lost: Vec<(u64, u64)> = events
            .iter()
            .filter_map(|e| match e {
                SubscriberEvent::Lost {
                    from_sequence,
                    count,
                    ..
                } => Some((*from_sequence, *count)),
                _ => None,
            })
            .collect();
        let index = |m: &Vec<u8>| u64::from_le_bytes(m[..8].try_into().unwrap());
        for w in got.windows(2) {
            assert_eq!(w[1].len(), 3000, "{uri}");
            let (a, b) = (index(&w[0]), index(&w[1]));
            assert!(b > a, "{uri}: {a} then {b}");
            for missing in a + 1..b {
                // Message k takes sequence numbers 3k, 3k+1, 3k+2 (3000 bytes in 1440-byte frames).
                let reported = (3 * missing..3 * missing + 3)
                    .any(|q| lost.iter().any(|&(f, c)| q >= f && q < f + c));
                assert!(reported, "{uri}: message {missing} missing without a Lost event: {events:?} {last_counters}");
            }
        }
        assert!(lost.is_empty(), "{uri}: {events:?}");
    }
}

/// Loss repair over real sockets: a multicast subscriber that stops reading while the
/// publisher keeps sending (no flow control, a small buffer) loses datagrams in the kernel,
/// NAKs them, and gets them retransmitted from the publisher's retention: every message,
/// in order, nothing reported lost.
#[test]
fn an_overrun_subscriber_repairs_its_loss_by_nak() {
    for scheme in [Scheme::Udp, Scheme::Mcast] {
        let uri = fresh_uri(scheme, "window=0&rcvbuf=64k&nak=1&retain=64m&mode=urgent");
        let c = cfg(&uri);
        let mut p = UdpPublisher::create(&c, &uri, 31, STREAM).unwrap();
        let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.subscriber_count() == 0 || !s.is_connected() {
            assert!(Instant::now() < deadline, "{uri}: no connection");
            p.do_work();
            s.poll(&mut |_m: Message<'_>| {}, 16);
            std::thread::sleep(Duration::from_millis(1));
        }
        let total = 20_000u64;
        let mut got = Vec::new();
        for i in 0..total {
            p.offer(&i.to_le_bytes().repeat(8)).unwrap();
            // Read only now and then: the 64 KiB buffer overflows in between.
            if i % 2000 == 0 {
                s.poll(
                    &mut |m: Message<'_>| {
                        got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                    },
                    usize::MAX,
                );
            }
        }
        while (got.len() as u64) < total {
            assert!(
                Instant::now() < deadline,
                "{uri}: {} of {total}; {:?}",
                got.len(),
                s.receiver_stats()
            );
            p.do_work();
            s.poll(
                &mut |m: Message<'_>| {
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                usize::MAX,
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got, (0..total).collect::<Vec<_>>(), "{uri}");
        let (st, c) = (s.receiver_stats(), s.counters());
        assert!(
            st.gaps_detected > 0 && c.naks_sent > 0 && c.recovered > 0,
            "{uri}: the buffer never overflowed? {st:?} {c:?}"
        );
        assert_eq!(s.counters().lost, 0, "{uri}");
        assert!(p.sender_stats().retransmitted > 0);
    }
}

/// Hostile control traffic over real sockets: while a subscriber receives 50 000 messages, an
/// attacker floods the publisher's socket with garbage, NAKs for other sessions, and NAKs of
/// the right session for random, future, evicted and huge ranges. The work it causes is
/// bounded (retransmissions stay within the retransmission rate limit) and counted; the
/// subscriber still gets every message in order; nothing panics.
#[test]
fn a_flood_of_hostile_naks_is_bounded_and_counted() {
    use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr};
    for scheme in [Scheme::Udp, Scheme::Mcast] {
        // 1 MB/s of retransmission allowed: bursts of one 65000-byte batch.
        let uri = fresh_uri(scheme, "retain=1m&retransmit_rate=1m");
        let c = cfg(&uri);
        let mut p = UdpPublisher::create(&c, &uri, 41, STREAM).unwrap();
        let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.subscriber_count() == 0 || !s.is_connected() {
            assert!(Instant::now() < deadline, "{uri}: no connection");
            p.do_work();
            s.poll(&mut |_m: Message<'_>| {}, 16);
            std::thread::sleep(Duration::from_millis(1));
        }
        let target = p.local_addr();
        let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
        attacker.set_nonblocking(true).unwrap();
        let session = p.session_id();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let nak = |session_id: u32, ranges: &[NakRange]| -> Vec<u8> {
            let repr = NakRepr {
                session_id,
                stream_id: STREAM,
                receiver_id: 666,
                ranges: NakRanges::new(ranges).unwrap(),
            };
            let mut b = vec![0u8; repr.buffer_len()];
            repr.emit(&mut NakFrame::new_unchecked(&mut b[..]));
            b
        };
        let total = 50_000u64;
        let mut got = Vec::new();
        let started = Instant::now();
        let mut sent_attacks = 0u64;
        let mut i = 0u64;
        while (got.len() as u64) < total {
            assert!(Instant::now() < deadline, "{uri}: {} of {total}", got.len());
            if i < total && p.offer(&i.to_le_bytes()).is_ok() {
                i += 1;
            }
            if i % 16 == 0 || i == total {
                // A burst of attacks per 16 messages.
                for k in 0..8 {
                    let start = next() % (i + 1000);
                    let frame = match k {
                        0 => vec![0xA5; (next() % 200) as usize],
                        1 => nak(session ^ 1, &[NakRange { start, count: 10 }]),
                        2 => nak(
                            session,
                            &[NakRange {
                                start: 1 << 60,
                                count: u32::MAX,
                            }],
                        ),
                        3 => nak(
                            session,
                            &[NakRange {
                                start: 0,
                                count: u32::MAX,
                            }],
                        ),
                        _ => {
                            let ranges: Vec<NakRange> = (0..64)
                                .map(|_| NakRange {
                                    start: next() % (i + 1),
                                    count: (next() % 100) as u32 + 1,
                                })
                                .collect();
                            nak(session, &ranges)
                        }
                    };
                    if attacker.send_to(&frame, target).is_ok() {
                        sent_attacks += 1;
                    }
                }
                p.do_work();
            }
            if i == total {
                p.flush().unwrap();
                p.do_work();
            }
            s.poll(
                &mut |m: Message<'_>| {
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                usize::MAX,
            );
        }
        let elapsed_s = started.elapsed().as_secs_f64();
        assert_eq!(got, (0..total).collect::<Vec<_>>(), "{uri}");
        assert_eq!(s.counters().lost, 0, "{uri}");
        let st = p.sender_stats();
        let pc = p.counters();
        assert!(
            sent_attacks > 10_000,
            "{uri}: the flood was small: {sent_attacks}"
        );
        assert!(
            p.bad_control_frames > 0,
            "{uri}: garbage and foreign NAKs are counted"
        );
        assert!(st.naks_received > 1000, "{uri}: {st:?}");
        assert!(
            st.nak_future > 0 && st.nak_rate_limited > 0,
            "{uri}: future ranges and the rate limit are counted: {st:?}"
        );
        assert!(pc.retransmit_refused > 0, "{uri}: {pc:?}");
        // Retransmitted bytes stay within the rate limit over the run: one burst (a 65000-byte
        // batch, and one datagram of debt) plus 1 MiB/s. A frame here is 40 bytes.
        let allowed_bytes = 65_000.0 + 1472.0 + elapsed_s * f64::from(1u32 << 20);
        assert!(
            (st.retransmitted * 40) as f64 <= allowed_bytes,
            "{uri}: {} frames retransmitted in {elapsed_s:.2} s",
            st.retransmitted
        );
    }
}
