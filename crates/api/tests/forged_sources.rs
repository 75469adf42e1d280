//! Forged advertisements (issue 14, item 8): anybody on the resolver group can advertise a topic
//! at any address. A subscriber must not open a transport (a socket it polls, JOINs sent to the
//! address) for each of them, and the real source must still be found and read.
//!
//! Each test runs its contexts on a resolver group of its own, so the forgeries reach nobody else.

use peregrine::{Config, Context, IdleKind, SubscriberEvent, MAX_UNPROVEN_LEGS};
use peregrine_wire::advertise::{AdvertiseFrame, AdvertiseRepr};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// A resolver group and topic of this test alone.
fn setup(k: u8, name: &str) -> (SocketAddrV4, Config, String) {
    let pid = std::process::id();
    let group = SocketAddrV4::new(
        Ipv4Addr::new(239, 255, 96, k),
        (20_000 + (pid * 7 + u32::from(k)) % 40_000) as u16,
    );
    let cfg = Config::default()
        .with_resolver("group", &group.to_string())
        .unwrap()
        .with_resolver("local", "none")
        .unwrap();
    (group, cfg, format!("forged{pid}.{name}"))
}

/// `count` forged sources of `topic`: sessions from `first_session`, each at a loopback port
/// from `first_port` where nothing listens.
fn forge_sources(
    out: &UdpSocket,
    group: SocketAddrV4,
    topic: &str,
    count: u32,
    first_session: u32,
    first_port: u32,
) {
    for k in 0..count {
        let uri = format!("udp://127.0.0.1:{}", first_port + k);
        advertise(out, group, first_session + k, topic, &uri);
    }
}

/// One ADVERTISE frame per datagram, as a peer would send it.
fn advertise(out: &UdpSocket, group: SocketAddrV4, session_id: u32, topic: &str, uri: &str) {
    let repr = AdvertiseRepr {
        session_id,
        stream_id: peregrine_proto::resolver::stream_id_of(topic),
        ttl_ms: 60_000,
        topic,
        uri,
    };
    let mut buf = vec![0u8; repr.buffer_len().next_multiple_of(8)];
    repr.emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
    out.send_to(&buf, group).unwrap();
}

fn sender() -> UdpSocket {
    let out = UdpSocket::bind("127.0.0.1:0").unwrap();
    out.set_multicast_loop_v4(true).unwrap();
    out
}

/// Polls `sub` until `f` holds (up to `limit`), running `between` in each round.
fn poll_until(
    sub: &mut peregrine::Subscriber,
    limit: Duration,
    mut between: impl FnMut(),
    mut f: impl FnMut(&peregrine::Subscriber, &[u8]) -> bool,
) -> Vec<u8> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while !f(sub, &got) {
        assert!(
            Instant::now() < deadline,
            "timed out; {:?}",
            sub.source_admission()
        );
        sub.poll(&mut |m| got.extend_from_slice(m.payload), 64);
        between();
        std::thread::sleep(Duration::from_micros(500));
    }
    got
}

/// Sends `payload` and polls `sub` until it arrives (up to 10 s); it must be that payload.
fn send_and_read(sub: &mut peregrine::Subscriber, publ: &mut peregrine::Publisher, payload: &[u8]) {
    publ.offer(payload).unwrap();
    publ.flush().unwrap();
    let got = poll_until(
        sub,
        Duration::from_secs(10),
        || {
            publ.do_work();
        },
        |_, got| !got.is_empty(),
    );
    assert_eq!(got, payload);
}

#[test]
fn forged_sources_get_a_bounded_number_of_transports_and_the_real_one_is_still_found() {
    let (group, cfg, topic) = setup(1, "flood");
    let ctx = Context::with_config(cfg.clone());
    let mut sub = ctx.subscribe(&topic, IdleKind::Backoff).unwrap();
    // 400 sources of the topic at 400 loopback ports where nothing listens.
    let out = sender();
    forge_sources(&out, group, &topic, 400, 0x0f00_0001, 20_000);
    // Every forgery reached the subscriber: opened, or waiting.
    poll_until(
        &mut sub,
        Duration::from_secs(10),
        || {},
        |s, _| {
            let a = s.source_admission().unwrap();
            a.legs + a.waiting >= MAX_UNPROVEN_LEGS + 200
        },
    );
    let a = sub.source_admission().unwrap();
    assert!(
        sub.sources().len() <= MAX_UNPROVEN_LEGS && a.legs <= MAX_UNPROVEN_LEGS,
        "{} sources followed through {} transports: {a:?}",
        sub.sources().len(),
        a.legs
    );
    assert_eq!(a.unproven_legs, a.legs);

    // The real publisher: found once the silent transports close (the newest waiting source
    // is tried first), then read.
    let pub_ctx = Context::with_config(cfg);
    let mut publ = pub_ctx.publish(&topic).unwrap();
    let real = publ.session_id();
    poll_until(
        &mut sub,
        Duration::from_secs(15),
        || {
            publ.do_work();
        },
        |s, _| s.sources().iter().any(|(id, _, _)| *id == real),
    );
    while publ.subscriber_count() == 0 {
        publ.do_work();
        sub.poll(&mut |_| {}, 16);
    }
    send_and_read(&mut sub, &mut publ, b"the real one");
    let a = sub.source_admission().unwrap();
    assert!(a.unproven_closed >= MAX_UNPROVEN_LEGS as u64, "{a:?}");
    assert!(a.legs <= MAX_UNPROVEN_LEGS + 1, "{a:?}");
    let silent = std::iter::from_fn(|| sub.next_event())
        .filter(|e| {
            matches!(
                e,
                SubscriberEvent::SourceLost {
                    reason: "silent",
                    ..
                }
            )
        })
        .count();
    assert!(
        silent >= MAX_UNPROVEN_LEGS,
        "{silent} silent sources reported"
    );
}

#[test]
fn a_topic_pinned_by_topics_is_read_at_its_uri_only() {
    let (group, cfg, topic) = setup(2, "pinned");
    let pid = std::process::id();
    let data = format!(
        "mcast://239.255.96.{}:{}",
        100 + pid % 100,
        20_000 + pid % 40_000
    );
    let cfg = cfg.with_topic(&topic, &data).unwrap();
    let ctx = Context::with_config(cfg.clone());
    let mut sub = ctx.subscribe(&topic, IdleKind::Backoff).unwrap();
    let out = sender();
    forge_sources(&out, group, &topic, 50, 0x0e00_0001, 21_000);
    poll_until(
        &mut sub,
        Duration::from_secs(10),
        || {},
        |s, _| s.source_admission().unwrap().pinned_elsewhere == 50,
    );
    assert!(sub.sources().is_empty(), "{:?}", sub.sources());
    assert_eq!(
        sub.source_admission().unwrap().legs,
        1,
        "only the [topics] group is open"
    );
    let events: Vec<SubscriberEvent> = std::iter::from_fn(|| sub.next_event()).collect();
    let reports: Vec<&SubscriberEvent> = events
        .iter()
        .filter(|e| matches!(e, SubscriberEvent::AttachFailed { reason } if reason.contains("[topics]")))
        .collect();
    assert_eq!(reports.len(), 1, "one report per topic: {events:?}");

    // The real publisher, with the same [topics] entry, is read through the group.
    let pub_ctx = Context::with_config(cfg);
    let mut publ = pub_ctx.publish(&topic).unwrap();
    assert_eq!(publ.uri(), data);
    let real = publ.session_id();
    poll_until(
        &mut sub,
        Duration::from_secs(10),
        || {
            publ.do_work();
        },
        |s, _| s.sources().iter().any(|(id, _, _)| *id == real),
    );
    send_and_read(&mut sub, &mut publ, b"pinned");
}

/// A private key file of `byte` repeated, as `auth` reads it.
fn key_file(name: &str, byte: u8) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("forged-{}-{name}.key", std::process::id()));
    std::fs::write(&path, format!("{byte:02x}").repeat(32)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// `[resolver] auth`: contexts with the key find each other; forged advertisements (unsigned,
/// or sealed under another key) are dropped before anything reads them, and counted.
#[test]
fn with_a_resolver_key_only_advertisements_under_it_are_read() {
    let (group, cfg, topic) = setup(3, "sealed");
    let keyed = cfg
        .clone()
        .with_resolver("auth", &key_file("a", 0xa1))
        .unwrap();
    let foreign = cfg.with_resolver("auth", &key_file("b", 0xb2)).unwrap();
    let ctx = Context::with_config(keyed.clone());
    let mut sub = ctx.subscribe(&topic, IdleKind::Backoff).unwrap();
    // Forgeries: 20 unsigned, and a publisher of the topic under another key.
    let out = sender();
    forge_sources(&out, group, &topic, 20, 0x0d00_0001, 22_000);
    let foreign_ctx = Context::with_config(foreign);
    let mut foreign_pub = foreign_ctx.publish(&topic).unwrap();
    let keyed_pub_ctx = Context::with_config(keyed);
    let mut publ = keyed_pub_ctx.publish(&topic).unwrap();
    let real = publ.session_id();
    poll_until(
        &mut sub,
        Duration::from_secs(10),
        || {
            publ.do_work();
            foreign_pub.do_work();
        },
        |s, _| {
            let c = s.resolver_counters().unwrap();
            s.sources().iter().any(|(id, _, _)| *id == real)
                && c.auth_rejected[0] >= 20
                && c.auth_rejected[1] >= 1
        },
    );
    // Half a second more: the foreign publisher keeps advertising, and is never found.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        sub.poll(&mut |_| {}, 16);
        publ.do_work();
        foreign_pub.do_work();
        std::thread::sleep(Duration::from_millis(2));
    }
    let ids: Vec<u32> = sub.sources().iter().map(|(id, _, _)| *id).collect();
    assert_eq!(ids, [real], "only the keyed publisher is followed");
    let c = sub.resolver_counters().unwrap();
    assert!(c.rejected() >= c.auth_rejected.iter().sum::<u64>());
    assert_eq!(sub.source_admission().unwrap().unproven_closed, 0);
}

#[test]
fn a_resolver_key_file_that_is_not_private_or_not_a_key_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let path = key_file("open", 0x11);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Config::default()
        .with_resolver("auth", &path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth = ") && e.contains("chmod 600"), "{e}");
    let e = Config::default()
        .with_resolver("auth", "/nonexistent/pg.key")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/pg.key") && e.contains("cannot read"),
        "{e}"
    );
}
