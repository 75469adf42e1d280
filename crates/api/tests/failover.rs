//! Failover groups through real transports in one process: members on different transports
//! found by topic resolution, a member that closes or dies mid-stream, members that are not
//! of the group, and a gap no member can fill.

use peregrine::failover::{ArbiterConfig, FailoverEvent, FailoverPublisher, FailoverSubscriber};
use peregrine::{Config, Context, IdleKind, SubscriberEvent};
use std::time::{Duration, Instant};

fn topic(name: &str) -> String {
    format!("t{}.failover.{name}", std::process::id())
}

fn message(seq: u64) -> Vec<u8> {
    format!("#{seq}.....").into_bytes()
}

/// Polls until `until` holds for what was delivered (or 10 s); returns the deliveries as
/// (sequence, session) and the events.
fn run(
    sub: &mut FailoverSubscriber,
    mut until: impl FnMut(&[(u64, u32)]) -> bool,
    mut between: impl FnMut(),
) -> (Vec<(u64, u32)>, Vec<FailoverEvent>) {
    let mut got = Vec::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !until(&got) {
        assert!(
            Instant::now() < deadline,
            "timed out with {} delivered",
            got.len()
        );
        let n = sub.poll(
            &mut |m| {
                assert_eq!(m.payload, message(m.sequence), "sequence {}", m.sequence);
                got.push((m.sequence, m.session_id));
            },
            256,
        );
        events.extend(std::iter::from_fn(|| sub.next_event()));
        if n == 0 {
            between();
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    (got, events)
}

/// A window of a minute: a gap is then declared only when every live member went past it,
/// never because a member (a UDP repair, a thread on a loaded machine) was slow.
fn patient() -> ArbiterConfig {
    ArbiterConfig {
        window_ns: 60_000_000_000,
        ..ArbiterConfig::default()
    }
}

fn member_ctx(remote: &str) -> Context {
    Context::with_config(
        Config::default()
            .with_resolver("local", "none")
            .unwrap()
            .with_resolver("remote", remote)
            .unwrap(),
    )
}

#[test]
fn members_on_udp_and_tcp_give_every_sequence_once_when_the_leader_closes_mid_stream() {
    let t = topic("udp-tcp");
    let (ctx_a, ctx_b, ctx_s) = (member_ctx("udp"), member_ctx("tcp"), Context::new());
    let sub = ctx_s.subscribe(&t, IdleKind::Backoff).unwrap();
    let mut sub = FailoverSubscriber::new(vec![sub], "engine", patient()).unwrap();
    let mut a = FailoverPublisher::new(ctx_a.publish(&t).unwrap(), "engine").unwrap();
    let mut b = FailoverPublisher::new(ctx_b.publish(&t).unwrap(), "engine").unwrap();
    assert!(a.publisher().uri().starts_with("udp://") && b.publisher().uri().starts_with("tcp://"));
    assert_eq!(
        (a.group(), b.group(), sub.group()),
        ("engine", "engine", "engine")
    );
    assert_eq!(sub.next_sequence(), None, "nothing delivered yet");
    assert!(
        a.publisher().loss_counters().is_none(),
        "no loss= configured"
    );
    let (sa, sb) = (a.publisher().session_id(), b.publisher().session_id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.publisher().subscriber_count() == 0 || b.publisher().subscriber_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the subscriber never joined both members"
        );
        sub.poll(&mut |_| {}, 16);
        a.publisher().do_work();
        b.publisher().do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    // A leads B by 100 sequences; at 2,000 A closes, B goes on to 4,000.
    let offer = |p: &mut FailoverPublisher, s: u64| loop {
        match p.offer(s, &message(s)) {
            Ok(_) => break,
            Err(peregrine::OfferError::BackPressured) => {
                p.publisher().do_work();
            }
            Err(e) => panic!("offer {s}: {e}"),
        }
    };
    let mut got = Vec::new();
    let mut events = Vec::new();
    for s in 0..4_000u64 {
        if s < 2_000 {
            offer(&mut a, s);
            if s == 1_999 {
                a.publisher().flush().unwrap();
                a.publisher().close();
            }
        }
        if s >= 100 {
            offer(&mut b, s - 100);
        }
        if s % 64 == 0 {
            let _ = b.publisher().flush();
            a.publisher().do_work();
            b.publisher().do_work();
            sub.poll(&mut |m| got.push((m.sequence, m.session_id)), 1024);
            events.extend(std::iter::from_fn(|| sub.next_event()));
        }
    }
    for s in 3_900..4_000 {
        offer(&mut b, s);
    }
    b.publisher().flush().unwrap();
    let (rest, ev) = run(
        &mut sub,
        |g| g.len() + got.len() >= 4_000,
        || {
            b.publisher().do_work();
        },
    );
    got.extend(rest);
    events.extend(ev);
    let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        seqs,
        (0..4_000).collect::<Vec<_>>(),
        "each sequence once, in order"
    );
    assert!(got.iter().all(|g| g.1 == sa || g.1 == sb));
    assert!(got.iter().any(|g| g.1 == sb), "B's copies took over");
    assert_eq!(sub.next_sequence(), Some(4_000));
    let sessions: Vec<u32> = sub.subscribers()[0]
        .session_counters()
        .iter()
        .map(|&(session, _)| session)
        .collect();
    assert!(
        sessions.iter().all(|s| *s == sa || *s == sb) && sessions.contains(&sb),
        "the subscriber underneath counted B's session: {sessions:?} (A {sa}, B {sb})"
    );
    let c = sub.counters();
    assert_eq!((c.delivered, c.lost, c.disagreements), (4_000, 0, 0));
    assert!(
        !events.iter().any(|e| matches!(
            e,
            FailoverEvent::Lost { .. } | FailoverEvent::Refused { .. }
        )),
        "{events:?}"
    );
}

#[test]
fn sessions_outside_the_group_are_refused_naming_the_topic_and_both_settings() {
    let t = topic("refused");
    let uri = format!("ipc://pg-failover-refused-{}", std::process::id());
    let uri2 = format!("{uri}-2");
    let uri3 = format!("{uri}-3");
    let ctx = Context::new();
    let subs = vec![
        ctx.subscriber(&t, &uri, IdleKind::Backoff).unwrap(),
        ctx.subscriber(&t, &uri2, IdleKind::Backoff).unwrap(),
        ctx.subscriber(&t, &uri3, IdleKind::Backoff).unwrap(),
    ];
    let mut sub = FailoverSubscriber::new(subs, "engine", patient()).unwrap();
    let mut plain = ctx.publisher(&t, &uri).unwrap();
    let mut other = FailoverPublisher::new(ctx.publisher(&t, &uri2).unwrap(), "risk").unwrap();
    let mut member = FailoverPublisher::new(ctx.publisher(&t, &uri3).unwrap(), "engine").unwrap();
    for s in 0..10 {
        plain.offer(&message(s)).unwrap();
        other.offer(s, &message(s)).unwrap();
        member.offer(s, &message(s)).unwrap();
    }
    let (got, events) = run(&mut sub, |g| g.len() >= 10, || {});
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert!(got.iter().all(|g| g.1 == member.publisher().session_id()));
    let refused: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            FailoverEvent::Refused { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 2, "{events:?}");
    let plain_reason = refused
        .iter()
        .find(|r| r.contains("plain publisher"))
        .unwrap();
    assert!(
        plain_reason.contains(&t) && plain_reason.contains("failover group 'engine'"),
        "{plain_reason}"
    );
    let other_reason = refused
        .iter()
        .find(|r| r.contains("another failover group"))
        .unwrap();
    assert!(
        other_reason.contains(&format!(
            "{:08x}",
            peregrine_wire::failover::group_id("risk")
        )),
        "{other_reason}"
    );
    assert_eq!(sub.refused_messages(), 20);
}

#[test]
fn a_gap_no_member_can_fill_is_reported_lost_once_and_delivery_goes_on() {
    let t = topic("gap");
    let uri = format!("ipc://pg-failover-gap-{}", std::process::id());
    let ctx = Context::new();
    let s = ctx.subscriber(&t, &uri, IdleKind::Backoff).unwrap();
    let mut sub = FailoverSubscriber::new(vec![s], "engine", ArbiterConfig::default()).unwrap();
    let mut a = FailoverPublisher::new(ctx.publisher(&t, &uri).unwrap(), "engine").unwrap();
    for s in (0..10).chain(20..30) {
        a.offer(s, &message(s)).unwrap();
    }
    let (got, events) = run(&mut sub, |g| g.len() >= 20, || {});
    let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(seqs, (0..10).chain(20..30).collect::<Vec<_>>());
    let lost: Vec<&FailoverEvent> = events
        .iter()
        .filter(|e| matches!(e, FailoverEvent::Lost { .. }))
        .collect();
    assert_eq!(
        lost,
        vec![&FailoverEvent::Lost {
            from_sequence: 10,
            count: 10
        }]
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, FailoverEvent::Source(SubscriberEvent::Lost { .. }))));
}

#[test]
fn bad_group_names_and_no_subscriber_are_refused_with_the_fix() {
    let e = FailoverSubscriber::new(Vec::new(), "g", ArbiterConfig::default()).unwrap_err();
    assert!(e.to_string().contains("at least one subscriber"), "{e}");
    let ctx = Context::new();
    let uri = format!("ipc://pg-failover-bad-{}", std::process::id());
    for bad in ["", "a\nb", &"x".repeat(65)] {
        let p = ctx.publisher("t", &uri).unwrap();
        let e = FailoverPublisher::new(p, bad).unwrap_err();
        assert!(e.to_string().contains("1 to 64 bytes"), "{e}");
    }
}

#[test]
fn events_an_application_does_not_read_are_bounded_and_counted() {
    use peregrine::failover::MAX_QUEUED_EVENTS;
    let t = topic("bound");
    let (ua, ub) = (
        format!("ipc://pg-failover-bound-a-{}", std::process::id()),
        format!("ipc://pg-failover-bound-b-{}", std::process::id()),
    );
    let ctx = Context::new();
    let subs = vec![
        ctx.subscriber(&t, &ua, IdleKind::Backoff).unwrap(),
        ctx.subscriber(&t, &ub, IdleKind::Backoff).unwrap(),
    ];
    let mut sub = FailoverSubscriber::new(subs, "engine", patient()).unwrap();
    let mut a = FailoverPublisher::new(ctx.publisher(&t, &ua).unwrap(), "engine").unwrap();
    let mut b = FailoverPublisher::new(ctx.publisher(&t, &ub).unwrap(), "engine").unwrap();
    // B disagrees with A on every sequence; nobody reads the events.
    let n = MAX_QUEUED_EVENTS as u64 + 1000;
    let mut delivered = 0u64;
    for s in 0..n {
        a.offer(s, &message(s)).unwrap();
        b.offer(s, b"something else").unwrap();
        if s % 256 == 255 {
            sub.poll(&mut |_| delivered += 1, usize::MAX);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sub.counters().duplicates < n {
        assert!(Instant::now() < deadline, "{:?}", sub.counters());
        sub.poll(&mut |_| delivered += 1, usize::MAX);
    }
    let c = sub.counters();
    assert_eq!((delivered, c.disagreements), (n, n), "{c:?}");
    let queued = std::iter::from_fn(|| sub.next_event()).count() as u64;
    assert_eq!(queued, MAX_QUEUED_EVENTS as u64);
    // The two Connected events of the subscribers came first and are among the queued ones.
    assert_eq!(sub.events_dropped(), n + 2 - queued);
}
