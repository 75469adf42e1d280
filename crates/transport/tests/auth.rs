//! `auth=KEYFILE` over real sockets on loopback (issue 14, item 9): publishers and subscribers
//! that share a key exchange everything (data, STATUS, NAK repair, heartbeats, BYE), and every
//! datagram without a valid AUTH frame is dropped before anything reads it, counted by kind:
//! unsigned, signed with another key, or altered.

use peregrine_proto::auth::AuthKey;
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{random_u32, Message, Scheme, SubscriberEvent, Uri};
use peregrine_wire::data::{DataFrame, DataRepr};
use peregrine_wire::header::{flags, status_flags};
use peregrine_wire::status::{StatusFrame, StatusRepr, STATUS_LEN};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const STREAM: u32 = 91;
const MISSING: usize = 0;
const WRONG_KEY: usize = 1;
const BAD_TAG: usize = 2;

/// A private key file of `byte` repeated (removed on drop).
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(byte: u8) -> KeyFile {
        let p = std::env::temp_dir().join(format!(
            "pg-auth-{}-{byte}-{:08x}.key",
            std::process::id(),
            random_u32()
        ));
        std::fs::write(&p, format!("{byte:02x}").repeat(32)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        KeyFile(p)
    }
    fn key(&self) -> AuthKey {
        peregrine_transport::net::auth::load_key(&self.0).unwrap()
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn fresh_uri(scheme: Scheme, params: &str) -> String {
    let params = if params.is_empty() {
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
            format!("udp://127.0.0.1:{port}{params}")
        }
        _ => {
            let r = random_u32();
            format!(
                "mcast://239.255.{}.{}:{}{params}",
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

fn number(m: &Message<'_>) -> u64 {
    u64::from_le_bytes(m.payload[..8].try_into().unwrap())
}

/// Drives both until `until` holds or 10 s pass (then fails, naming `what`).
fn drive(
    p: &mut UdpPublisher,
    s: &mut UdpSubscriber,
    got: &mut Vec<u64>,
    what: &str,
    until: impl Fn(&UdpPublisher, &UdpSubscriber, &[u64]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !until(p, s, got) {
        assert!(
            Instant::now() < deadline,
            "{what}: got {} messages, subscriber rejected {:?}, publisher rejected {:?}",
            got.len(),
            s.auth_rejected(),
            p.auth_rejected()
        );
        p.do_work();
        s.poll(&mut |m: Message<'_>| got.push(number(&m)), usize::MAX);
        while s.next_event().is_some() {}
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn data_frame(session_id: u32, sequence: u64) -> Vec<u8> {
    let payload = sequence.to_le_bytes();
    let d = DataRepr {
        session_id,
        stream_id: STREAM,
        sequence,
        message_length: 8,
        flags: flags::BEGIN | flags::END,
        payload: &payload,
    };
    let mut b = vec![0u8; d.buffer_len()];
    d.emit(&mut DataFrame::new_unchecked(&mut b[..]));
    b
}

/// Keyed both ways, with 5% of data datagrams dropped by the loss generator: every message
/// arrives once, in order (NAKs, retransmissions and heartbeats are signed and checked too),
/// and nothing was rejected. The two sides seal with different MACs in one case (a publisher
/// with `mac=hmac-sha256`, a subscriber with the default BLAKE3): each checks the other's.
#[test]
fn a_keyed_stream_delivers_everything_and_repairs_loss() {
    let key = KeyFile::new(0x11);
    for (scheme, pub_mac) in [
        (Scheme::Udp, ""),
        (Scheme::Mcast, ""),
        (Scheme::Udp, "&mac=hmac-sha256"),
    ] {
        let uri = fresh_uri(scheme, &format!("auth={}", key.0.display()));
        let sub_uri = format!("{uri}&loss=rate=5%,seed=3,dir=recv,kinds=data");
        let uri = format!("{uri}{pub_mac}");
        let mut p = UdpPublisher::create(&cfg(&uri), &uri, 61, STREAM).unwrap();
        let mut s = UdpSubscriber::new(&cfg(&sub_uri), &sub_uri, STREAM).unwrap();
        let mut got = Vec::new();
        drive(&mut p, &mut s, &mut got, "connect", |p, s, _| {
            p.subscriber_count() > 0 && s.is_connected()
        });
        for i in 0..2000u64 {
            while p.offer(&i.to_le_bytes()).is_err() {
                p.do_work();
                s.poll(&mut |m: Message<'_>| got.push(number(&m)), usize::MAX);
            }
        }
        p.flush().unwrap();
        drive(&mut p, &mut s, &mut got, &uri, |_, _, g| g.len() >= 2000);
        assert_eq!(got, (0..2000).collect::<Vec<u64>>(), "{uri}");
        assert_eq!(s.counters().lost, 0, "{uri}");
        assert!(
            s.counters().retransmits_received > 0,
            "{uri}: loss was repaired"
        );
        assert_eq!(s.auth_rejected(), [0; 3], "{uri}");
        assert_eq!(p.auth_rejected(), [0; 3], "{uri}");
    }
}

/// Forged DATA (the item 6 attack: a known session, a billion sequence numbers ahead) sent
/// unsigned, signed with another key, and signed then altered: none is read, each is counted
/// by kind, and the real stream carries on untouched.
#[test]
fn unsigned_foreign_and_altered_datagrams_are_dropped_before_anything_reads_them() {
    let key = KeyFile::new(0x22);
    let other = KeyFile::new(0x33);
    let uri = fresh_uri(Scheme::Mcast, &format!("auth={}", key.0.display()));
    let c = cfg(&uri);
    let mut p = UdpPublisher::create(&c, &uri, 62, STREAM).unwrap();
    let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
    let mut got = Vec::new();
    drive(&mut p, &mut s, &mut got, "connect", |p, s, _| {
        p.subscriber_count() > 0 && s.is_connected()
    });
    for i in 0..10u64 {
        p.offer(&i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    drive(&mut p, &mut s, &mut got, "first ten", |_, _, g| {
        g.len() >= 10
    });

    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    attacker.set_multicast_loop_v4(true).unwrap();
    let forged = data_frame(62, 1_000_000_000);
    let mut foreign = Vec::new();
    other.key().seal_into(&forged, &mut foreign);
    let mut altered = Vec::new();
    key.key().seal_into(&data_frame(62, 10), &mut altered);
    altered[35] ^= 0xff; // a payload byte
    attacker.send_to(&forged, c.addr).unwrap();
    attacker.send_to(&foreign, c.addr).unwrap();
    attacker.send_to(&altered, c.addr).unwrap();
    drive(
        &mut p,
        &mut s,
        &mut got,
        "the forgeries counted",
        |_, s, _| s.auth_rejected() == [1, 1, 1],
    );
    for i in 10..20u64 {
        p.offer(&i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    drive(&mut p, &mut s, &mut got, "the next ten", |_, _, g| {
        g.len() >= 20
    });
    assert_eq!(got, (0..20).collect::<Vec<u64>>());
    assert_eq!(s.counters().lost, 0);
    assert_eq!(
        s.receiver_stats().foreign_source,
        0,
        "nothing forged reached the receiver"
    );
    let mut events = Vec::new();
    while let Some(e) = s.next_event() {
        events.push(e);
    }
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SubscriberEvent::Lost { .. })),
        "{events:?}"
    );
}

/// The item 7 attack on a keyed publisher: unsigned STATUS JOINs with a window of one frame.
/// The publisher never takes them on (it counts them), and keeps publishing at full pace to
/// its real, keyed subscriber.
#[test]
fn a_keyed_publisher_takes_no_receiver_that_cannot_sign() {
    let key = KeyFile::new(0x44);
    let uri = fresh_uri(Scheme::Udp, &format!("auth={}", key.0.display()));
    let c = cfg(&uri);
    let mut p = UdpPublisher::create(&c, &uri, 63, STREAM).unwrap();
    let target: SocketAddr = SocketAddr::V4(p.local_addr());
    let fake = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut join = [0u8; STATUS_LEN];
    StatusRepr {
        session_id: 0,
        stream_id: STREAM,
        receiver_id: 7,
        next_sequence: 0,
        window: 1,
        flags: status_flags::JOIN,
    }
    .emit(&mut StatusFrame::new_unchecked(&mut join[..]));
    for _ in 0..10 {
        fake.send_to(&join, target).unwrap();
    }
    let mut s = UdpSubscriber::new(&c, &uri, STREAM).unwrap();
    let mut got = Vec::new();
    drive(&mut p, &mut s, &mut got, "connect", |p, s, _| {
        p.subscriber_count() > 0 && s.is_connected() && p.auth_rejected()[MISSING] >= 10
    });
    assert_eq!(p.subscriber_count(), 1, "only the keyed subscriber");
    for i in 0..5000u64 {
        while p.offer(&i.to_le_bytes()).is_err() {
            p.do_work();
            s.poll(&mut |m: Message<'_>| got.push(number(&m)), usize::MAX);
        }
    }
    p.flush().unwrap();
    drive(&mut p, &mut s, &mut got, "all of it", |_, _, g| {
        g.len() >= 5000
    });
    assert_eq!(got.len(), 5000);
    assert_eq!(p.counters().flow_dropped, 0, "nobody held it back");
    assert_eq!(p.auth_rejected()[WRONG_KEY] + p.auth_rejected()[BAD_TAG], 0);
}

/// Both sides must hold the key: a keyed subscriber reads nothing of an unkeyed publisher
/// (every datagram counted as unsigned), and a datagram size too small for the AUTH frame is
/// refused when the URI is read.
#[test]
fn a_keyed_subscriber_reads_nothing_unsigned_and_small_datagrams_are_refused() {
    let key = KeyFile::new(0x55);
    let plain = fresh_uri(Scheme::Mcast, "");
    let keyed = format!("{plain}?auth={}", key.0.display());
    let mut p = UdpPublisher::create(&cfg(&plain), &plain, 64, STREAM).unwrap();
    let mut s = UdpSubscriber::new(&cfg(&keyed), &keyed, STREAM).unwrap();
    let mut got = Vec::new();
    for i in 0..10u64 {
        p.offer(&i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    drive(
        &mut p,
        &mut s,
        &mut got,
        "the unsigned datagrams counted",
        |_, s, _| s.auth_rejected()[MISSING] >= 1,
    );
    assert!(got.is_empty() && !s.is_connected());

    let small = format!("{plain}?datagram=64&auth={}", key.0.display());
    let e = NetConfig::from_uri(&Uri::parse(&small).unwrap()).unwrap_err();
    assert!(e.to_string().contains("datagram=96 or more"), "{e}");
    let tcp = format!("tcp://127.0.0.1:1?auth={}", key.0.display());
    let e = NetConfig::from_uri(&Uri::parse(&tcp).unwrap()).unwrap_err();
    assert!(e.to_string().contains("auth"), "{e}");
    let bad_mac = format!("{plain}?auth={}&mac=sha1", key.0.display());
    let e = NetConfig::from_uri(&Uri::parse(&bad_mac).unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("mac=sha1 is not accepted: use mac=blake3"),
        "{e}"
    );
    let lone_mac = format!("{plain}?mac=blake3");
    let e = NetConfig::from_uri(&Uri::parse(&lone_mac).unwrap()).unwrap_err();
    assert!(e.to_string().contains("without auth="), "{e}");
}
