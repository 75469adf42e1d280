//! UDP GSO with small datagrams: the kernel refuses a GSO send of more than its
//! `UDP_MAX_SEGMENTS` datagrams (EINVAL), so a publisher of small datagrams must batch no more
//! than that, or it loses GSO at its first full batch and sends one datagram a call from then
//! on. (The refusal itself, and the fallback, are tested in `net::udp`'s unit tests.)

mod common;

use common::{cfg, connect, drive};
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::{Message, OfferError};

const STREAM: u32 = 92;

/// Offers message `i` (16 bytes, its number first), reading into `got` while the publisher is
/// back-pressured: a receive buffer smaller than this machine's (an unprivileged process gets
/// the sysctl's) announces a smaller window.
fn offer_reading(p: &mut UdpPublisher, s: &mut UdpSubscriber, got: &mut Vec<u64>, i: u64) {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&i.to_le_bytes());
    while let Err(e) = p.offer(&m) {
        assert!(matches!(e, OfferError::BackPressured), "offer: {e}");
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
        p.do_work();
    }
}

/// A connected publisher and subscriber of 96-byte datagrams on `scheme` (`udp`, or `mcast` to
/// `group`), whose batches leave when full or flushed, not after 100 us: each flush sends one.
fn small_datagram_stream(scheme: &str, group: &str, session: u32) -> (UdpPublisher, UdpSubscriber) {
    let port = peregrine_testkit::free_port(false);
    let params = "datagram=96&batch_interval_us=1000000";
    let uri = match scheme {
        "udp" => format!("udp://127.0.0.1:{port}?{params}"),
        _ => format!("mcast://{group}:{port}?{params}"),
    };
    let mut p = UdpPublisher::create(&cfg(&uri), &uri, session, STREAM).unwrap();
    let mut s = UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap();
    connect(&mut p, &mut [&mut s]);
    (p, s)
}

#[test]
fn a_publisher_of_small_datagrams_keeps_gso_through_full_batches_and_loses_nothing() {
    for scheme in ["udp", "mcast"] {
        let (mut p, mut s) = small_datagram_stream(scheme, "239.255.92.7", 0x6a);
        assert!(p.gso(), "{scheme}: the socket took UDP_SEGMENT");
        // 16-byte messages are 48-byte frames, two filling each 96-byte datagram: 500 of them
        // are 250 datagrams, more than a GSO send may carry (a datagram with room left for
        // less than a PAD frame would end its batch).
        let mut got = Vec::new();
        for k in 0..10u64 {
            for i in k * 500..(k + 1) * 500 {
                offer_reading(&mut p, &mut s, &mut got, i);
            }
            p.flush().unwrap();
            drive(&mut p, &mut [(&mut s, &mut got)], (k as usize + 1) * 500);
        }
        assert!(p.gso(), "{scheme}: GSO kept through full batches");
        assert_eq!(got, (0..5000).collect::<Vec<u64>>(), "{scheme}");
        let c = s.counters();
        assert_eq!((c.lost, c.gaps), (0, 0), "{scheme}: {c:?}");
    }
}

/// UDP GRO is turned on only once a backlog lasts: a subscriber that reads each datagram as it
/// comes keeps the cheaper `recvfrom` (GRO's `recvmsg` costs every poll, empty or not), and
/// one that falls behind a GSO publisher reads whole GSO sends from then on. Nothing is lost
/// or reordered across the switch.
#[test]
fn a_subscriber_turns_gro_on_once_a_backlog_lasts_and_loses_nothing_across() {
    if let Err(e) = peregrine_transport::net::sys::probe_udp_gro() {
        peregrine_testkit::skip(
            &format!("the kernel refused UDP_GRO ({e})"),
            "Linux 5.0 or later has it",
        );
        return;
    }
    for scheme in ["udp", "mcast"] {
        let (mut p, mut s) = small_datagram_stream(scheme, "239.255.92.8", 0x6b);
        assert!(
            !s.gro_active(),
            "{scheme}: GRO is not on before any backlog"
        );
        // One message at a time, each read before the next is sent.
        let mut got = Vec::new();
        for i in 0..300u64 {
            offer_reading(&mut p, &mut s, &mut got, i);
            p.flush().unwrap();
            drive(&mut p, &mut [(&mut s, &mut got)], i as usize + 1);
        }
        assert!(!s.gro_active(), "{scheme}: datagrams read as they came");
        // 4000 more without reading (unless the window holds the publisher back): GSO sends
        // of up to 64 datagrams, two messages each, pile up in the socket.
        let total = 4300u64;
        for i in 300..total {
            offer_reading(&mut p, &mut s, &mut got, i);
        }
        p.flush().unwrap();
        drive(&mut p, &mut [(&mut s, &mut got)], total as usize);
        assert!(s.gro_active(), "{scheme}: GRO on after the backlog");
        // And from now on GSO sends arrive whole: still every message, in order.
        let more = total + 2000;
        for i in total..more {
            offer_reading(&mut p, &mut s, &mut got, i);
        }
        p.flush().unwrap();
        drive(&mut p, &mut [(&mut s, &mut got)], more as usize);
        assert_eq!(got, (0..more).collect::<Vec<u64>>(), "{scheme}");
        let c = s.counters();
        assert_eq!((c.lost, c.gaps), (0, 0), "{scheme}: {c:?}");
    }
}
