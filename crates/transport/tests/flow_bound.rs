//! Issue 14, item 7, over real sockets: one subscriber (real, fake or stuck) cannot hold a
//! network publisher back for longer than `flow_timeout_ms` (1 s by default).

use peregrine_transport::ipc::{IpcConfig, IpcPublisher, IpcSubscriber};
use peregrine_transport::net::tcp::{TcpPublisher, TcpSubscriber};
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::{Message, OfferError, SubscriberEvent};
use peregrine_wire::header::status_flags;
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::status::{StatusFrame, StatusRepr, STATUS_LEN};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

const STREAM: u32 = 78;

use peregrine_testkit::free_port;

mod common;
use common::{cfg, tcp_pair};

fn status(session_id: u32, next: u64, window: u32, flags: u16) -> [u8; STATUS_LEN] {
    let mut b = [0u8; STATUS_LEN];
    StatusRepr {
        session_id,
        stream_id: STREAM,
        receiver_id: 0x0bad_f00d,
        next_sequence: next,
        window,
        flags,
    }
    .emit(&mut StatusFrame::new_unchecked(&mut b[..]));
    b
}

/// A receiver that is not a subscriber: it JOINs with a window of one frame and keeps itself
/// alive, never reading data. `echo`: it reads the publisher's answer to its JOIN and repeats
/// the session and position it names (as a live receiver would), else it keeps alive with a
/// position of 0.
struct Fake {
    sock: UdpSocket,
    echo: bool,
    session_id: u32,
    position: u64,
    last: Instant,
}

impl Fake {
    fn join(publisher: std::net::SocketAddrV4, echo: bool, session_id: u32) -> Fake {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(publisher).unwrap();
        sock.set_nonblocking(true).unwrap();
        sock.send(&status(0, 0, 1, status_flags::JOIN)).unwrap();
        Fake {
            sock,
            echo,
            session_id,
            position: 0,
            last: Instant::now(),
        }
    }
    /// Reads what arrived (only a heartbeat interests it) and keeps alive every 20 ms.
    fn keep_alive(&mut self) {
        let mut buf = [0u8; 65536];
        while let Ok(n) = self.sock.recv(&mut buf) {
            if self.echo && self.position == 0 {
                if let Ok(hb) =
                    HeartbeatFrame::new_checked(&buf[..n]).and_then(|f| HeartbeatRepr::parse(&f))
                {
                    self.position = hb.next_sequence;
                    // Answer at once, as a subscriber does.
                    self.last = Instant::now() - Duration::from_secs(1);
                }
            }
        }
        if self.last.elapsed() >= Duration::from_millis(20) {
            let _ = self
                .sock
                .send(&status(self.session_id, self.position, 1, 0));
            self.last = Instant::now();
        }
    }
}

/// Offers `count` messages, keeping the fake alive and the subscriber reading; returns the
/// longest time the publisher refused in a row and what the subscriber got.
fn publish_through(
    p: &mut UdpPublisher,
    s: &mut UdpSubscriber,
    fake: &mut Fake,
    count: u64,
    limit: Duration,
) -> (Duration, Vec<u64>) {
    let mut got = Vec::new();
    let start = Instant::now();
    let mut refused_since: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    let mut i = 0;
    while (got.len() as u64) < count {
        assert!(
            start.elapsed() < limit,
            "the publisher is stuck: {i} of {count} offered, {} received, counters {:?}",
            got.len(),
            p.counters()
        );
        if i < count {
            match p.offer(&i.to_le_bytes()) {
                Ok(_) => {
                    i += 1;
                    if let Some(t) = refused_since.take() {
                        longest = longest.max(t.elapsed());
                    }
                }
                Err(OfferError::BackPressured) => {
                    refused_since.get_or_insert_with(Instant::now);
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => panic!("{e}"),
            }
            if i == count {
                p.flush().unwrap();
            }
        }
        p.do_work();
        fake.keep_alive();
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
    }
    (longest, got)
}

fn connected_pair(uri: &str, session_id: u32) -> (UdpPublisher, UdpSubscriber) {
    let c = cfg(uri);
    let mut p = UdpPublisher::create(&c, uri, session_id, STREAM).unwrap();
    let mut s = UdpSubscriber::new(&c, uri, STREAM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() == 0 || !s.is_connected() {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        s.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    (p, s)
}

/// The attack of issue 14, item 7: a fake JOIN with `window=1` kept alive stopped a running
/// unicast publisher for good (and its real subscriber with it). It never shows that it hears
/// the publisher, so now it never holds it back at all.
#[test]
fn a_fake_join_with_window_1_kept_alive_does_not_freeze_a_udp_publisher() {
    // The longest flow timeout: were the fake to hold the publisher at all, it would hold it
    // for an hour, and the run would stop at its 10 s limit whatever the machine's speed.
    let uri = format!(
        "udp://127.0.0.1:{}?mode=urgent&flow_timeout_ms=3600000",
        free_port(false)
    );
    let (mut p, mut s) = connected_pair(&uri, 51);
    let mut warm = Vec::new();
    for i in 0..1000u64 {
        p.offer(&i.to_le_bytes()).unwrap();
        s.poll(&mut |m: Message<'_>| warm.push(m.sequence), usize::MAX);
    }
    let mut fake = Fake::join(p.local_addr(), false, p.session_id());
    let (longest, got) =
        publish_through(&mut p, &mut s, &mut fake, 20_000, Duration::from_secs(10));
    assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    println!("longest wait for the real subscriber: {longest:?}");
    assert_eq!(p.counters().flow_dropped, 0);
}

/// A fake that does hear the publisher (it echoes the position the publisher's answer named)
/// but never moves holds the publisher for the flow timeout, then is dropped from flow control
/// and counted; the real subscriber gets every message.
#[test]
fn a_receiver_that_never_moves_holds_a_udp_publisher_for_the_flow_timeout_only() {
    let uri = format!(
        "udp://127.0.0.1:{}?mode=urgent&flow_timeout_ms=300",
        free_port(false)
    );
    let (mut p, mut s) = connected_pair(&uri, 52);
    for i in 0..1000u64 {
        p.offer(&i.to_le_bytes()).unwrap();
        s.poll(&mut |_m: Message<'_>| {}, usize::MAX);
    }
    let mut fake = Fake::join(p.local_addr(), true, p.session_id());
    let (longest, got) =
        publish_through(&mut p, &mut s, &mut fake, 20_000, Duration::from_secs(10));
    assert_eq!(got.len(), 20_000);
    // At least the flow timeout (the table's clock starts at the refusal the test's does);
    // how much longer is the machine's business (the run's 10 s limit bounds it).
    assert!(
        longest >= Duration::from_millis(250),
        "held {longest:?} for a flow timeout of 300 ms"
    );
    assert_eq!(p.counters().flow_dropped, 1, "{:?}", p.counters());
    assert_eq!(p.subscriber_count(), 2, "the fake is still a receiver");
}

/// A TCP subscriber that connects and never reads stopped a publisher under the default
/// `slow=backpressure` for good; now its connection is dropped after the flow timeout and the
/// real subscriber gets everything.
#[test]
fn a_tcp_subscriber_that_never_reads_is_disconnected_after_the_flow_timeout() {
    let uri = format!(
        "tcp://127.0.0.1:{}?max_pending=64k&sndbuf=4k&mode=urgent&flow_timeout_ms=300",
        free_port(true)
    );
    let c = cfg(&uri);
    let mut p = TcpPublisher::create(&c, &uri, 53, STREAM).unwrap();
    let mut s = TcpSubscriber::new(&c, &uri, STREAM).unwrap();
    let stuck = TcpStream::connect(p.local_addr()).unwrap();
    stuck
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() < 2 || !s.is_connected() {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        s.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    let total = 200_000u64;
    let mut got = Vec::new();
    let mut i = 0u64;
    let mut refused = 0u64;
    while (got.len() as u64) < total {
        assert!(
            Instant::now() < deadline,
            "the publisher is stuck: {i} offered, {} received, {refused} refusals, {:?}",
            got.len(),
            p.counters()
        );
        if i < total {
            match p.offer(&[7u8; 100]) {
                Ok(_) => i += 1,
                Err(OfferError::BackPressured) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        p.do_work();
        s.poll(&mut |m: Message<'_>| got.push(m.sequence), usize::MAX);
    }
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert!(refused > 0, "the stuck connection back-pressured first");
    assert_eq!(p.flow_dropped, 1);
    assert_eq!(p.counters().flow_dropped, 1);
    assert_eq!(p.subscriber_count(), 1);
    drop(stuck);
}

/// In normal (batching) mode most offers take the publisher's inline path, which writes into the
/// batch without looking at the connections. A subscriber that stops reading still
/// back-pressures it after a bounded number of offers, as in urgent mode, and when it reads
/// again it gets every message once, in order.
#[test]
fn a_batching_tcp_publisher_is_back_pressured_by_a_subscriber_that_stops_reading() {
    let uri = format!(
        "tcp://127.0.0.1:{}?max_pending=64k&sndbuf=4k&rcvbuf=4k&flow_timeout_ms=3600000",
        free_port(true)
    );
    let (mut p, mut s) = tcp_pair(&uri, 56, STREAM, 0);
    // Offers only: no duty cycle, the subscriber not polled. A 64 KiB queue, a batch of 65,000
    // bytes and the two small socket buffers hold a few thousand 40-byte frames; refusals
    // must begin long before 100,000 (4 MB).
    let mut next = 0u64;
    loop {
        match p.offer(&next.to_le_bytes()) {
            Ok(_) => next += 1,
            Err(OfferError::BackPressured) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(
            next < 100_000,
            "{next} offers of 8 bytes, none refused, with a subscriber that does not read"
        );
    }
    let total = next + 20_000;
    let mut got: Vec<u64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (got.len() as u64) < total {
        assert!(
            Instant::now() < deadline,
            "{} of {total} received, {next} offered",
            got.len()
        );
        if next < total {
            match p.offer(&next.to_le_bytes()) {
                Ok(_) => next += 1,
                Err(OfferError::BackPressured) => {}
                Err(e) => panic!("{e}"),
            }
        } else {
            p.flush().unwrap();
        }
        p.do_work();
        s.poll(&mut |m: Message<'_>| got.push(m.sequence), usize::MAX);
    }
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert_eq!(
        p.flow_dropped, 0,
        "a subscriber that reads again is not dropped"
    );
}

/// A real TCP subscriber that stalls longer than the flow timeout under `slow=backpressure` is
/// disconnected as `slow=disconnect` would; when it reads again it reconnects and is told
/// exactly which sequence numbers it missed.
#[test]
fn a_stalled_tcp_subscriber_under_backpressure_is_told_exactly_what_it_missed() {
    let uri = format!(
        "tcp://127.0.0.1:{}?max_pending=64k&sndbuf=4k&rcvbuf=4k&mode=urgent&flow_timeout_ms=200",
        free_port(true)
    );
    let (mut p, mut slow) = tcp_pair(&uri, 54, STREAM, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Offer while it does not read, until its connection is dropped.
    let mut next = 0u64;
    let mut refused = 0u64;
    while p.flow_dropped == 0 {
        assert!(
            Instant::now() < deadline,
            "never dropped: {refused} refusals"
        );
        match p.offer(&next.to_le_bytes()) {
            Ok(_) => next += 1,
            Err(OfferError::BackPressured) => {
                refused += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0);
    let stop_at = next + 1000;
    let mut got: Vec<u64> = Vec::new();
    let mut events = Vec::new();
    while Instant::now() < deadline {
        p.do_work();
        if next < stop_at && p.offer(&next.to_le_bytes()).is_ok() {
            next += 1;
        }
        slow.poll(&mut |m: Message<'_>| got.push(m.sequence), usize::MAX);
        while let Some(e) = slow.next_event() {
            events.push(e);
        }
        if next == stop_at && got.last() == Some(&(next - 1)) {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(got.last(), Some(&(next - 1)), "{events:?}");
    let mut covered = got.clone();
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
    assert_eq!(covered, (0..next).collect::<Vec<_>>(), "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, SubscriberEvent::PublisherDied { session_id: 54 })));
}

/// The two sides of a network stream, for [`slow_reader_run`].
trait Side {
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError>;
    fn do_work(&mut self);
    fn flow_dropped(&self) -> u64;
}

trait Reader: Send + 'static {
    fn read(&mut self, got: &mut Vec<u64>, limit: usize);
    fn event(&mut self) -> Option<SubscriberEvent>;
}

macro_rules! sides {
    ($publisher:ty, $subscriber:ty) => {
        impl Side for $publisher {
            fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
                <$publisher>::offer(self, payload)
            }
            fn do_work(&mut self) {
                <$publisher>::do_work(self);
            }
            fn flow_dropped(&self) -> u64 {
                self.counters().flow_dropped
            }
        }
        impl Reader for $subscriber {
            fn read(&mut self, got: &mut Vec<u64>, limit: usize) {
                self.poll(
                    &mut |m: Message<'_>| {
                        got.push(u64::from_le_bytes(m.payload.try_into().unwrap()))
                    },
                    limit,
                );
            }
            fn event(&mut self) -> Option<SubscriberEvent> {
                self.next_event()
            }
        }
    };
}
sides!(TcpPublisher, TcpSubscriber);
sides!(UdpPublisher, UdpSubscriber);

impl Side for IpcPublisher {
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        IpcPublisher::offer(self, payload)
    }
    fn do_work(&mut self) {}
    fn flow_dropped(&self) -> u64 {
        self.counters().flow_dropped
    }
}

impl Reader for IpcSubscriber {
    fn read(&mut self, got: &mut Vec<u64>, limit: usize) {
        self.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload.try_into().unwrap())),
            limit,
        );
    }
    fn event(&mut self) -> Option<SubscriberEvent> {
        self.next_event()
    }
}

/// Issue 35's progress rule: the subscriber, on a thread of its own, reads 64 messages a
/// millisecond at most (far fewer than the publisher offers) until it has `total`, for at least
/// 4 s (two flow timeouts of 2 s: long enough for the old rule to drop it, with a timeout no
/// scheduling pause of a reading thread comes near), while the publisher offers as fast as it
/// is let. The publisher must never drop it, and every sequence must arrive, none lost.
fn slow_reader_run(mut p: impl Side, mut s: impl Reader) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let total = 260_000u64;
    let reader = std::thread::spawn(move || {
        let mut got: Vec<u64> = Vec::with_capacity(total as usize);
        let mut events = Vec::new();
        while (got.len() as u64) < total && Instant::now() < deadline {
            s.read(&mut got, 64);
            while let Some(e) = s.event() {
                events.push(e);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        (got, events)
    });
    let (mut next, mut refused) = (0u64, 0u64);
    while next < total {
        assert!(Instant::now() < deadline, "stuck at {next}");
        match p.offer(&next.to_le_bytes()) {
            Ok(_) => next += 1,
            Err(OfferError::BackPressured) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        p.do_work();
    }
    while !reader.is_finished() {
        p.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    let (got, events) = reader.join().unwrap();
    println!("{total} messages, {refused} offers refused");
    assert_eq!(p.flow_dropped(), 0);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SubscriberEvent::Lost { .. })),
        "{events:?}"
    );
    assert_eq!(got, (0..total).collect::<Vec<_>>());
}

/// Issue 35: a TCP subscriber that reads, but much more slowly than its publisher offers, is
/// making progress: under the default `slow=backpressure` it holds the publisher back for as
/// long as it reads and is never dropped, and every sequence arrives. (Before, a queue that
/// never drained to half of `max_pending` within `flow_timeout_ms` was dropped: 94% of
/// `bench throughput --transport tcp` was lost.)
#[test]
fn a_slow_tcp_subscriber_that_keeps_reading_is_back_pressured_never_dropped() {
    let uri = format!(
        "tcp://127.0.0.1:{}?max_pending=64k&sndbuf=4k&rcvbuf=4k&mode=urgent&flow_timeout_ms=2000",
        free_port(true)
    );
    let (p, s) = tcp_pair(&uri, 55, STREAM, 0);
    slow_reader_run(p, s);
}

/// Issue 35: the same progress rule under UDP flow control, which kept it already: a
/// subscriber that reads far more slowly than its publisher moves its window with every
/// STATUS, so each refused offer waits for it less than a flow timeout and it is never dropped
/// from flow control.
#[test]
fn a_slow_udp_subscriber_that_keeps_reading_is_back_pressured_never_dropped() {
    let uri = format!("udp://127.0.0.1:{}?flow_timeout_ms=2000", free_port(false));
    let (p, s) = connected_pair(&uri, 56);
    slow_reader_run(p, s);
}

/// Issue 35: the same progress rule on shared memory, where a subscriber that makes no progress
/// for `flow_timeout_ms` is left on the old log: one that reads, however slowly (its 64 KiB log
/// holds about a thousand messages, so it holds the publisher back at every one of its reads),
/// makes progress at every read and is never left.
#[test]
fn a_slow_shared_memory_subscriber_that_keeps_reading_is_back_pressured_never_left_behind() {
    let name = format!("flow-bound-{}", std::process::id());
    let uri = format!("ipc://{name}?capacity=64k&flow_timeout_ms=2000");
    let c = IpcConfig::from_uri(&peregrine_transport::uri::Uri::parse(&uri).unwrap()).unwrap();
    let p = IpcPublisher::create(&c, "flow-bound", STREAM).unwrap();
    let s = IpcSubscriber::new(&c, "flow-bound", false).unwrap();
    slow_reader_run(p, s);
}
