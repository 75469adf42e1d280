//! Topic resolution through real sockets in one process: each `Context` has its own resolver,
//! and they find each other on the loopback multicast group, as processes on one host do.

use peregrine::{Config, Context, IdleKind, Pattern, PatternKind, SubscriberEvent};
use std::time::{Duration, Instant};

/// Topic names unique to this test run (other tests share the resolver group).
fn topic(name: &str) -> String {
    format!("t{}.{name}", std::process::id())
}

/// Polls until `want` messages arrived (or 10 s); returns (topic, session, sequence, payload).
fn collect(
    sub: &mut peregrine::Subscriber,
    want: usize,
    mut between: impl FnMut(),
) -> Vec<(String, u32, u64, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < want && Instant::now() < deadline {
        let n = sub.poll_topic(
            &mut |t, m| got.push((t.to_string(), m.session_id, m.sequence, m.payload.to_vec())),
            256,
        );
        if n == 0 {
            between();
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

fn events(sub: &mut peregrine::Subscriber) -> Vec<SubscriberEvent> {
    std::iter::from_fn(|| sub.next_event()).collect()
}

/// Waits until `f` holds, polling `sub` (up to 10 s).
fn wait_for(sub: &mut peregrine::Subscriber, mut f: impl FnMut(&peregrine::Subscriber) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f(sub) {
        assert!(Instant::now() < deadline, "timed out");
        sub.poll(&mut |_| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn same_host_subscribers_use_shared_memory_and_see_every_message() {
    let t = topic("shm");
    let pub_ctx = Context::new();
    let sub_ctx = Context::new();
    let mut sub = sub_ctx.subscribe(&t, IdleKind::Backoff).unwrap();
    let mut publ = pub_ctx.publish(&t).unwrap();
    assert!(publ.uri().contains("ipc://") && publ.uri().contains("udp://127.0.0.1:"));
    wait_for(&mut sub, |s| s.sources().len() == 1);
    let ev = events(&mut sub);
    assert!(
        ev.iter().any(
            |e| matches!(e, SubscriberEvent::SourceFound { uri, .. } if uri.starts_with("ipc://"))
        ),
        "{ev:?}"
    );
    while publ.subscriber_count() == 0 {
        sub.poll(&mut |_| {}, 1);
    }
    for i in 0..1000u32 {
        publ.offer(&i.to_le_bytes()).unwrap();
    }
    let got = collect(&mut sub, 1000, || {});
    assert_eq!(got.len(), 1000);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.0, t);
        assert_eq!(g.3, (i as u32).to_le_bytes());
    }
    // Closing withdraws: the subscriber is told, after every message was delivered.
    publ.close();
    wait_for(&mut sub, |s| s.sources().is_empty());
    let ev = events(&mut sub);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SubscriberEvent::SourceLost {
                reason: "withdrawn",
                ..
            }
        )),
        "{ev:?}"
    );
    assert_eq!(sub.counters().messages, 1000);
    assert_eq!(sub.counters().lost, 0);
}

#[test]
fn a_glob_joins_several_topics_and_several_publishers_over_udp() {
    let prefix = topic("glob");
    // The subscriber's context takes the network even on this host.
    let cfg = Config::default().with_resolver("local", "none").unwrap();
    let sub_ctx = Context::with_config(cfg);
    let mut sub = sub_ctx
        .subscribe(&format!("{prefix}.eq.*"), IdleKind::Backoff)
        .unwrap();
    let a1 = Context::new();
    let a2 = Context::new();
    let mut pubs = [
        a1.publish(&format!("{prefix}.eq.AAPL")).unwrap(),
        a2.publish(&format!("{prefix}.eq.AAPL")).unwrap(),
        a2.publish(&format!("{prefix}.eq.MSFT")).unwrap(),
    ];
    let mut other = a1.publish(&format!("{prefix}.fx.EUR")).unwrap();
    wait_for(&mut sub, |s| s.sources().len() == 3);
    for (_, _, uri) in sub.sources() {
        assert!(uri.starts_with("udp://127.0.0.1:"), "{uri}");
    }
    // Each publisher waits for its UDP subscriber's join.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pubs.iter().any(|p| p.subscriber_count() == 0) {
        assert!(Instant::now() < deadline);
        for p in pubs.iter_mut() {
            p.do_work();
        }
        sub.poll(&mut |_| {}, 16);
    }
    for (k, p) in pubs.iter_mut().enumerate() {
        for i in 0..100u32 {
            p.offer(&[k as u8, i as u8]).unwrap();
        }
        p.flush().unwrap();
    }
    other.offer(b"not for you").unwrap();
    let got = collect(&mut sub, 300, || {
        for p in pubs.iter_mut() {
            p.do_work();
        }
    });
    assert_eq!(got.len(), 300);
    for k in 0..3u8 {
        let from: Vec<_> = got.iter().filter(|g| g.3[0] == k).collect();
        assert_eq!(from.len(), 100, "publisher {k}");
        assert!(
            from.windows(2).all(|w| w[1].3[1] == w[0].3[1] + 1),
            "in order"
        );
        let session = pubs[k as usize].session_id();
        assert!(from.iter().all(|g| g.1 == session));
        assert_eq!(from[0].0, pubs[k as usize].topic());
    }
    assert!(got.iter().all(|g| !g.0.contains(".fx.")));
}

#[test]
fn a_regular_expression_subscription_and_a_late_subscriber_reading_a_young_stream_from_its_start() {
    let t = topic("late.X1");
    let publ_ctx = Context::new();
    let mut publ = publ_ctx.publish(&t).unwrap();
    for i in 0..500u64 {
        publ.offer(&i.to_le_bytes()).unwrap();
    }
    let re = format!(
        r"{}\.late\.[A-Z][0-9]",
        regex_escape(&topic("")[..topic("").len() - 1])
    );
    let ctx = Context::new();
    let mut sub = ctx
        .subscribe_pattern(
            Pattern::new(PatternKind::Regex, &re).unwrap(),
            IdleKind::Backoff,
        )
        .unwrap();
    // Every message read from the start, including while waiting for the connection.
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sub.is_connected() {
        assert!(Instant::now() < deadline, "timed out");
        sub.poll(
            &mut |m| values.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            16,
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 500..600u64 {
        publ.offer(&i.to_le_bytes()).unwrap();
    }
    // The stream began moments ago (its log is young): read from its first message, as
    // late_join=start does on the network. An older log is joined at its tail (the transport's
    // tests).
    let got = collect(&mut sub, 600 - values.len(), || {});
    values.extend(
        got.iter()
            .map(|g| u64::from_le_bytes(g.3[..8].try_into().unwrap())),
    );
    assert_eq!(values, (0..600).collect::<Vec<u64>>());
}

fn regex_escape(s: &str) -> String {
    s.replace('.', r"\.")
}

#[test]
fn an_explicit_uri_per_topic_is_used_and_advertised() {
    let t = topic("explicit");
    let cfg = Config::default()
        .with_topic(&t, "udp://127.0.0.1:0")
        .unwrap();
    let publ_ctx = Context::with_config(cfg);
    let mut publ = publ_ctx.publish(&t).unwrap();
    assert!(publ.uri().starts_with("udp://127.0.0.1:") && !publ.uri().contains("ipc"));
    let ctx = Context::new();
    let mut sub = ctx.subscribe(&t, IdleKind::Backoff).unwrap();
    wait_for(&mut sub, |s| s.sources().len() == 1);
    assert_eq!(sub.sources()[0].2, publ.uri());
    while publ.subscriber_count() == 0 {
        publ.do_work();
        sub.poll(&mut |_| {}, 1);
    }
    publ.offer(b"hello").unwrap();
    publ.flush().unwrap();
    let got = collect(&mut sub, 1, || {
        publ.do_work();
    });
    assert_eq!(got[0].3, b"hello");
}

#[test]
fn bad_resolver_settings_and_patterns_name_the_value_and_the_fix() {
    let cases = [
        ("group", "10.0.0.1:5", "multicast GROUP:PORT"),
        ("remote", "smtp", "\"udp\", \"tcp\", \"none\""),
        ("advertise_sustain_interval_ms", "0", "from 1 to"),
        ("daemon", "nowhere", "HOST:PORT of a peregrine resolverd"),
        ("colour", "blue", "unknown key 'colour' for [resolver]"),
    ];
    for (k, v, needle) in cases {
        let e = Config::default()
            .with_resolver(k, v)
            .unwrap_err()
            .to_string();
        assert!(e.contains(v) && e.contains(needle), "{k}={v}: {e}");
    }
    let e = Config::default()
        .with_resolver("advertise_min_initial_interval_ms", "300")
        .unwrap()
        .with_resolver("advertise_max_initial_interval_ms", "100")
        .unwrap_err()
        .to_string();
    assert!(e.contains("below the minimum"), "{e}");
    let e = Config::from_toml("[topics]\n\"a.b\" = \"udp://nowhere\"\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.toml: [topics] a.b = udp://nowhere"), "{e}");
    let e = Pattern::new(PatternKind::Regex, "md.(")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'md.('") && e.contains("regular expression"),
        "{e}"
    );
    let e = Context::new()
        .subscribe("", IdleKind::Spin)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pattern ''"), "{e}");
}

/// Issue 14, item 10: a subscriber by topic whose `[topics]` entry names a multicast group,
/// started before its publisher, gets every message from the first. It used to open the group
/// only when topic resolution reported the publisher, which had sent its first messages by
/// then (and it reported no loss). The group is now opened with the subscription; with
/// `late_join = none` that alone must do it, and with the default late join (`start`) a
/// transport opened late asks for what it missed.
#[test]
fn a_subscriber_started_before_its_publisher_gets_every_message_from_the_first() {
    for late_join in ["none", "start"] {
        let t = topic(&format!("first.{late_join}"));
        let r = peregrine_transport::random_u32();
        let group = format!(
            "mcast://239.255.{}.{}:{}",
            (r >> 8) & 0xff,
            (r & 0xff).max(1),
            20_000 + (r >> 16) % 40_000
        );
        let toml =
            format!("[mcast]\nlate_join = \"{late_join}\"\n[topics]\n\"{t}\" = \"{group}\"\n");
        let cfg = Config::from_toml(&toml, "test.toml").unwrap();
        let ctx = Context::with_config(cfg.clone());
        let mut sub = ctx.subscribe(&t, IdleKind::Backoff).unwrap();
        sub.poll(&mut |_| {}, 16);
        let publ_ctx = Context::with_config(cfg);
        let mut publ = publ_ctx.publish(&t).unwrap();
        for i in 0..50u64 {
            publ.offer(&i.to_le_bytes()).unwrap();
        }
        publ.flush().unwrap();
        let got = collect(&mut sub, 50, || {
            publ.do_work();
        });
        let numbers: Vec<u64> = got
            .iter()
            .map(|g| u64::from_le_bytes(g.3[..8].try_into().unwrap()))
            .collect();
        assert_eq!(
            numbers,
            (0..50).collect::<Vec<u64>>(),
            "late_join={late_join}"
        );
        assert_eq!(sub.counters().lost, 0);
    }
}

#[test]
fn late_join_is_checked_in_the_resolver_section_and_the_transport_sections() {
    let e = Config::default()
        .with_resolver("late_join", "sometimes")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("late_join = sometimes is not accepted") && e.contains("none"),
        "{e}"
    );
    assert!(Config::default().with_resolver("late_join", "all").is_ok());
    let e = Config::from_toml("[udp]\nlate_join = -1\n", "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.toml: [udp] late_join = -1") && e.contains("all"),
        "{e}"
    );
}
