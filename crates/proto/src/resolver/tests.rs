//! Scripted resolver tests on a virtual clock: schedules, expiry, wildcards, several publishers,
//! late subscribers, hostile input and the traffic of 10 000 topics.

use super::*;
use peregrine_wire::header::FrameType;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// Resolvers on one virtual multicast group: every datagram reaches every resolver, the
/// sender included (as IP_MULTICAST_LOOP does), at the instant it is sent.
struct Group {
    members: Vec<Resolver>,
    now_ns: u64,
    /// Whether each member's datagrams get through (a dead or partitioned member: false).
    connected: Vec<bool>,
    /// (time, sender, datagram length, advertisements in it)
    log: Vec<(u64, usize, usize, usize)>,
}

impl Group {
    fn new(n: usize) -> Group {
        Group::with(n, |_| {})
    }
    fn with(n: usize, tweak: impl Fn(&mut ResolverConfig)) -> Group {
        let members = (0..n)
            .map(|i| {
                let mut cfg = ResolverConfig::new(1000 + i as u32);
                tweak(&mut cfg);
                Resolver::new(cfg)
            })
            .collect();
        Group {
            members,
            now_ns: 0,
            connected: vec![true; n],
            log: Vec::new(),
        }
    }

    /// Sends everything due now and delivers it, until nothing is due.
    fn flush(&mut self) {
        let mut buf = vec![0u8; 65536];
        loop {
            let mut sent = false;
            for i in 0..self.members.len() {
                while let Some(n) = self.members[i].poll_transmit(self.now_ns, &mut buf) {
                    sent = true;
                    let ads = Frames::new(&buf[..n])
                        .filter(|f| matches!(f, Ok((FrameType::Advertise, _))))
                        .count();
                    self.log.push((self.now_ns, i, n, ads));
                    if !self.connected[i] {
                        continue;
                    }
                    for m in self.members.iter_mut() {
                        m.on_datagram(&buf[..n], self.now_ns);
                    }
                }
            }
            if !sent {
                break;
            }
        }
    }

    /// Runs every deadline up to `until_ns`, then sets the clock there.
    fn run_until(&mut self, until_ns: u64) {
        self.flush();
        loop {
            let next = self.members.iter().filter_map(|m| m.poll_timeout()).min();
            match next {
                Some(t) if t <= until_ns => {
                    self.now_ns = self.now_ns.max(t);
                    self.flush();
                }
                _ => break,
            }
        }
        self.now_ns = until_ns;
        self.flush();
    }

    fn events(&mut self, i: usize) -> Vec<ResolverEvent> {
        std::iter::from_fn(|| self.members[i].poll_event()).collect()
    }

    /// Send times (ms) of the datagrams member `i` sent holding frames of type `ty`.
    fn times_of(&self, i: usize, ads: bool) -> Vec<u64> {
        self.log
            .iter()
            .filter(|l| l.1 == i && (l.3 > 0) == ads)
            .map(|l| l.0 / MS)
            .collect()
    }
}

fn udp(port: u16) -> Vec<String> {
    vec![format!("udp://10.0.0.1:{port}")]
}

fn glob(p: &str) -> Pattern {
    Pattern::new(PatternKind::Glob, p).unwrap()
}
fn exact(p: &str) -> Pattern {
    Pattern::new(PatternKind::Exact, p).unwrap()
}

fn found(events: &[ResolverEvent]) -> Vec<(String, u32)> {
    let mut v: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ResolverEvent::SourceFound { source, .. } => {
                Some((source.topic.clone(), source.session_id))
            }
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn lost(events: &[ResolverEvent]) -> Vec<(String, u32, LostReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            ResolverEvent::SourceLost {
                topic,
                session_id,
                reason,
                ..
            } => Some((topic.clone(), *session_id, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn advertisements_double_from_the_minimum_to_the_maximum_then_sustain() {
    let mut g = Group::new(1);
    g.members[0].advertise("a", 1, &udp(1), 0).unwrap();
    g.run_until(11_500 * MS);
    // 10 ms doubling: 10, 20, 40, 80, 160, 320, then capped at 500 ms until 5 s have passed,
    // then one a second.
    let expected = [
        0, 10, 30, 70, 150, 310, 630, 1130, 1630, 2130, 2630, 3130, 3630, 4130, 4630, 5130, 6130,
        7130, 8130, 9130, 10130, 11130,
    ];
    assert_eq!(g.times_of(0, true), expected);
}

#[test]
fn the_schedule_is_configurable() {
    let mut g = Group::with(1, |c| {
        c.advertise = Schedule {
            min_initial_interval_ns: 100 * MS,
            max_initial_interval_ns: 300 * MS,
            initial_duration_ns: S,
            sustain_interval_ns: 2 * S,
        }
    });
    g.members[0].advertise("a", 1, &udp(1), 0).unwrap();
    g.run_until(7 * S);
    assert_eq!(
        g.times_of(0, true),
        [0, 100, 300, 600, 900, 1200, 3200, 5200]
    );
}

#[test]
fn exact_queries_stop_when_resolved_and_wildcards_after_the_initial_phase() {
    // Nobody publishes: the exact query keeps on at the sustain interval, the wildcard stops.
    let mut g = Group::new(2);
    g.members[0].subscribe(exact("x"), 0);
    g.members[1].subscribe(glob("x.*"), 0);
    g.run_until(8_500 * MS);
    let initial = [
        0, 20, 60, 140, 300, 500, 700, 900, 1100, 1300, 1500, 1700, 1900, 2100, 2300, 2500, 2700,
        2900, 3100, 3300, 3500, 3700, 3900, 4100, 4300, 4500, 4700, 4900, 5100,
    ];
    let mut exact_times = initial.to_vec();
    exact_times.extend([6100, 7100, 8100]);
    assert_eq!(g.times_of(0, false), exact_times);
    assert_eq!(g.times_of(1, false), initial);

    // A publisher appears: the query it answers is the last the exact subscriber sends.
    let now = g.now_ns;
    g.members[1].advertise("x", 7, &udp(1), now).unwrap();
    g.run_until(20 * S);
    assert_eq!(found(&g.events(0)), [("x".to_string(), 7)]);
    assert!(g.times_of(0, false).iter().all(|&t| t <= 8_500));
    assert_eq!(
        g.members[0].counters().queries_sent,
        exact_times.len() as u64
    );
}

#[test]
fn a_query_brings_the_next_advertisement_forward() {
    let mut g = Group::new(2);
    g.members[0].advertise("md.eq.AAPL", 1, &udp(1), 0).unwrap();
    g.run_until(20_300 * MS); // sustain: next advertisement at 21 130 ms
    g.connected[1] = true;
    let sub = g.members[1].subscribe(exact("md.eq.AAPL"), g.now_ns);
    // The subscriber heard the sustain advertisements already: it is resolved at once.
    assert_eq!(
        found(&g.events(1)),
        [("md.eq.AAPL".to_string(), 1)],
        "known sources are reported at subscribe"
    );
    g.members[1].unsubscribe(sub);

    // A fresh context that has heard nothing: its query gets an answer now, not at 21 130.
    let mut late = Resolver::new(ResolverConfig::new(77));
    late.subscribe(exact("md.eq.AAPL"), g.now_ns);
    let mut buf = vec![0u8; 1472];
    let n = late.poll_transmit(g.now_ns, &mut buf).unwrap();
    g.members[0].on_datagram(&buf[..n], g.now_ns);
    let n = g.members[0].poll_transmit(g.now_ns, &mut buf).unwrap();
    late.on_datagram(&buf[..n], g.now_ns);
    assert!(matches!(
        late.poll_event(),
        Some(ResolverEvent::SourceFound { ref source, .. }) if source.session_id == 1
    ));
    assert_eq!(g.members[0].counters().query_responses, 1);
    // A second query within 10 ms of that answer is not answered again.
    let mut again = Resolver::new(ResolverConfig::new(78));
    again.subscribe(exact("md.eq.AAPL"), g.now_ns + 5 * MS);
    let n = again.poll_transmit(g.now_ns + 5 * MS, &mut buf).unwrap();
    g.members[0].on_datagram(&buf[..n], g.now_ns + 5 * MS);
    assert_eq!(
        g.members[0].poll_transmit(g.now_ns + 5 * MS, &mut buf),
        None
    );
    assert_eq!(g.members[0].counters().query_responses, 1);
}

#[test]
fn sources_that_stop_advertising_expire_and_subscribers_are_told() {
    let mut g = Group::new(2);
    g.members[1].subscribe(exact("t"), 0);
    g.members[0].advertise("t", 5, &udp(1), 0).unwrap();
    g.run_until(12 * S);
    assert_eq!(found(&g.events(1)), [("t".to_string(), 5)]);
    // The publisher's host vanishes: its last advertisement reached us at 11 130 ms.
    g.connected[0] = false;
    g.run_until(16_129 * MS);
    assert_eq!(lost(&g.events(1)), []);
    g.run_until(16_130 * MS);
    assert_eq!(
        lost(&g.events(1)),
        [("t".to_string(), 5, LostReason::Expired)]
    );
    assert_eq!(g.members[1].remote_sources(), 0);
    assert_eq!(g.members[1].counters().sources_expired, 1);
    // The exact subscription queries again from then on.
    let queries_before = g.members[1].counters().queries_sent;
    g.run_until(16_200 * MS);
    assert!(g.members[1].counters().queries_sent >= queries_before + 2);
}

#[test]
fn a_withdrawal_removes_the_source_at_once() {
    let mut g = Group::new(2);
    g.members[1].subscribe(glob("*"), 0);
    let p = g.members[0].advertise("t", 5, &udp(1), 0).unwrap();
    g.members[0].subscribe(exact("t"), 0);
    g.run_until(S);
    assert_eq!(found(&g.events(1)), [("t".to_string(), 5)]);
    let local = g.events(0);
    assert!(matches!(&local[..], [ResolverEvent::SourceFound { source, .. }] if source.local));
    g.members[0].withdraw(p, g.now_ns);
    assert_eq!(
        lost(&g.events(0)),
        [("t".to_string(), 5, LostReason::Withdrawn)]
    );
    g.flush();
    assert_eq!(
        lost(&g.events(1)),
        [("t".to_string(), 5, LostReason::Withdrawn)]
    );
    assert_eq!(g.members[1].counters().withdrawals_received, 1);
    // Member 0's own exact subscription lost its only source: it queries again.
    let queries = g.members[0].counters().queries_sent;
    g.run_until(g.now_ns + 100 * MS);
    assert!(g.members[0].counters().queries_sent > queries);
}

#[test]
fn wildcards_join_topics_as_they_appear_and_several_publishers_share_a_topic() {
    let mut g = Group::new(4);
    g.members[0].subscribe(glob("md.eq.*"), 0);
    g.members[0].subscribe(
        Pattern::new(PatternKind::Regex, r"md\.(eq|fx)\.[A-Z]+").unwrap(),
        0,
    );
    g.run_until(S);
    g.members[1]
        .advertise("md.eq.AAPL", 11, &udp(1), g.now_ns)
        .unwrap();
    g.members[1]
        .advertise("md.fx.EUR", 12, &udp(1), g.now_ns)
        .unwrap();
    g.members[2]
        .advertise("md.eq.AAPL", 21, &udp(2), g.now_ns)
        .unwrap();
    g.members[2]
        .advertise("md.eq.lower", 22, &udp(2), g.now_ns)
        .unwrap();
    g.members[3]
        .advertise("news.AAPL", 31, &udp(3), g.now_ns)
        .unwrap();
    g.run_until(2 * S);
    let e = g.events(0);
    // glob: both AAPL publishers and md.eq.lower; regex: both AAPL and md.fx.EUR.
    let mut f = found(&e);
    f.dedup();
    assert_eq!(
        f,
        [
            ("md.eq.AAPL".to_string(), 11),
            ("md.eq.AAPL".to_string(), 21),
            ("md.eq.lower".to_string(), 22),
            ("md.fx.EUR".to_string(), 12),
        ]
    );
    assert_eq!(found(&e).len(), 6);
    // Long after the wildcard stopped querying, a new topic is found by its advertisements.
    g.run_until(30 * S);
    g.members[3]
        .advertise("md.eq.MSFT", 32, &udp(3), g.now_ns)
        .unwrap();
    g.run_until(31 * S);
    assert_eq!(found(&g.events(0)), vec![("md.eq.MSFT".to_string(), 32); 2]);
}

#[test]
fn multicast_loopback_of_own_frames_is_recognised_not_reported() {
    let mut g = Group::new(1);
    g.members[0].advertise("t", 1, &udp(1), 0).unwrap();
    g.members[0].subscribe(glob("t*"), 0);
    g.run_until(S);
    let e = g.events(0);
    assert_eq!(e.len(), 1, "{e:?}");
    let c = g.members[0].counters();
    assert_eq!(c.own_frames, c.advertisements_received + c.queries_received);
    assert_eq!(c.rejected(), 0);
}

/// One advertisement datagram as `Resolver` sends it, with its fields changed by `f`.
fn crafted(f: impl FnOnce(&mut AdvertiseRepr<'_>)) -> Vec<u8> {
    let topic = "md.eq.AAPL";
    let mut repr = AdvertiseRepr {
        session_id: 0xBAD,
        stream_id: stream_id_of(topic),
        ttl_ms: 5000,
        topic,
        uri: "udp://10.0.0.9:9",
    };
    f(&mut repr);
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut AdvertiseFrame::new_unchecked(&mut b[..]));
    b
}

#[test]
fn malformed_and_spoofed_advertisements_are_rejected_and_counted() {
    let mut r = Resolver::new(ResolverConfig::new(1));
    r.advertise("mine", 42, &udp(1), 0).unwrap();
    r.subscribe(glob("*"), 0);
    let _ = r.poll_event(); // its own local source
    let good = crafted(|_| {});

    // Wrong sizes: a frame_length past the datagram, one that disagrees with the texts.
    r.on_datagram(&good[..good.len() - 3], 0);
    let mut b = good.clone();
    b[0] += 8;
    b.extend_from_slice(&[0; 8]);
    r.on_datagram(&b, 0);
    // A huge topic name: topic_len 4000, and the bytes to go with it.
    let mut huge = good[..32].to_vec();
    huge[24..26].copy_from_slice(&4000u16.to_le_bytes());
    huge[26..28].copy_from_slice(&1u16.to_le_bytes());
    huge.extend(std::iter::repeat_n(b'a', 4001));
    let len = huge.len() as u32;
    huge[0..4].copy_from_slice(&len.to_le_bytes());
    r.on_datagram(&huge, 0);
    // An unknown version, an unknown type, a bad magic, non-UTF-8 text.
    for (at, v) in [(6, 2u8), (7, 0x7f), (4, 0)] {
        let mut b = good.clone();
        b[at] = v;
        r.on_datagram(&b, 0);
    }
    let mut b = good.clone();
    b[32] = 0xff;
    r.on_datagram(&b, 0);
    // A well-formed frame of the wrong kind on the resolver channel.
    r.on_datagram(&keepalive_like(), 0);

    // Believable on the wire, not in fact:
    r.on_datagram(&crafted(|a| a.stream_id ^= 1), 0);
    r.on_datagram(&crafted(|a| a.uri = "smtp://10.0.0.9:25"), 0);
    r.on_datagram(&crafted(|a| a.ttl_ms = u32::MAX), 0);
    r.on_datagram(
        &crafted(|a| {
            a.session_id = 42;
            a.topic = "mine";
            a.stream_id = stream_id_of("mine");
            a.uri = "udp://10.6.6.6:6";
        }),
        0,
    );
    let c = r.counters();
    let kind = |e: WireError| c.malformed[e.index()];
    assert_eq!(
        kind(WireError::Truncated {
            needed: 0,
            available: 0
        }),
        1
    );
    assert_eq!(
        kind(WireError::BadLength {
            frame_length: 0,
            reason: ""
        }),
        1
    );
    assert_eq!(
        kind(WireError::BadField {
            field: "",
            value: 0
        }),
        1,
        "huge topic"
    );
    assert_eq!(kind(WireError::UnsupportedVersion(0)), 1);
    assert_eq!(kind(WireError::UnknownFrameType(0)), 1);
    assert_eq!(kind(WireError::BadMagic(0)), 1);
    assert_eq!(kind(WireError::BadText { field: "" }), 1);
    assert_eq!(c.unexpected_frames, 1);
    assert_eq!(c.bad_stream_id, 1);
    assert_eq!(c.bad_uri, 1);
    assert_eq!(c.bad_ttl, 1);
    assert_eq!(c.spoofed_own, 1);
    assert_eq!(c.rejected(), 12);
    assert_eq!(
        r.poll_event(),
        None,
        "nothing rejected reached a subscription"
    );
    assert_eq!(r.remote_sources(), 0);

    // A genuine source, then an advertisement moving its session to another topic.
    r.on_datagram(&good, 0);
    assert!(r.poll_event().is_some());
    r.on_datagram(
        &crafted(|a| {
            a.topic = "md.eq.EVIL";
            a.stream_id = stream_id_of("md.eq.AAPL");
        }),
        0,
    );
    assert_eq!(r.counters().conflicts, 1);
    assert_eq!(r.poll_event(), None);
}

fn keepalive_like() -> Vec<u8> {
    crate::resolverd::keepalive(9).to_vec()
}

#[test]
fn the_source_table_is_bounded() {
    let mut r = Resolver::new(ResolverConfig {
        max_sources: 10,
        ..ResolverConfig::new(1)
    });
    for i in 0..25u32 {
        r.on_datagram(&crafted(|a| a.session_id = i), 0);
    }
    assert_eq!(r.remote_sources(), 10);
    assert_eq!(r.counters().table_full, 15);
    // Expiry frees room.
    r.handle_timeout(6 * S);
    assert_eq!(r.remote_sources(), 0);
    r.on_datagram(&crafted(|a| a.session_id = 99), 6 * S);
    assert_eq!(r.remote_sources(), 1);
}

/// Issue 14 (small item a): 120,000 advertisements of 1 KiB topics grew every process by
/// about 110 MB (100,000 sources of 1.1 KB each). The table is bounded in bytes too, counted.
#[test]
fn the_source_table_is_bounded_in_bytes() {
    let mut r = Resolver::new(ResolverConfig::new(1));
    let cap = r.config().max_source_bytes;
    let mut ad = Vec::new();
    for i in 0..120_000u32 {
        let topic = format!("{i:08}.{}", "x".repeat(1024 - 9));
        let repr = AdvertiseRepr {
            session_id: i + 1,
            stream_id: stream_id_of(&topic),
            ttl_ms: 5000,
            topic: &topic,
            uri: "udp://10.0.0.9:9",
        };
        ad.clear();
        ad.resize(repr.buffer_len(), 0);
        repr.emit(&mut AdvertiseFrame::new_unchecked(&mut ad[..]));
        r.on_datagram(&ad, 0);
    }
    let held = r.remote_sources() * (1024 + "udp://10.0.0.9:9".len());
    assert!(
        held <= cap,
        "{} sources of 1 KiB: {held} bytes",
        r.remote_sources()
    );
    assert!(r.source_bytes() <= cap);
    assert!(r.remote_sources() > 20_000, "{}", r.remote_sources());
    let c = r.counters();
    assert_eq!(c.table_bytes_full, 120_000 - r.remote_sources() as u64);
    assert_eq!(c.rejected(), c.table_bytes_full);
    // Expiry gives the bytes back, and the count returns to zero exactly.
    r.handle_timeout(6 * S);
    assert_eq!((r.remote_sources(), r.source_bytes()), (0, 0));
    r.on_datagram(&crafted(|a| a.session_id = 7), 6 * S);
    assert_eq!(r.remote_sources(), 1);
}

#[test]
fn uris_and_withdrawals_are_counted_in_the_source_bytes() {
    let mut r = Resolver::new(ResolverConfig::new(1));
    r.on_datagram(&crafted(|_| {}), 0);
    let one = r.source_bytes();
    assert_eq!(
        one,
        SOURCE_COST_BYTES + "md.eq.AAPL".len() + URI_COST_BYTES + "udp://10.0.0.9:9".len()
    );
    r.on_datagram(&crafted(|a| a.uri = "tcp://10.0.0.9:9"), 0);
    assert_eq!(r.source_bytes(), one + URI_COST_BYTES + 16);
    r.on_datagram(
        &crafted(|a| {
            a.uri = "tcp://10.0.0.9:9";
            a.ttl_ms = 0;
        }),
        0,
    );
    assert_eq!(r.source_bytes(), one);
    r.on_datagram(&crafted(|a| a.ttl_ms = 0), 0);
    assert_eq!((r.remote_sources(), r.source_bytes()), (0, 0));
}

#[test]
fn a_publication_that_cannot_fit_a_datagram_or_names_no_transport_is_refused() {
    let mut r = Resolver::new(ResolverConfig::new(1));
    let long = format!("udp://{}", "h".repeat(1000));
    let e = r
        .advertise(&"t".repeat(1000), 1, &[long.clone(), long], 0)
        .unwrap_err();
    assert!(matches!(e, AdvertiseError::TooLong { .. }), "{e}");
    assert!(e.to_string().contains("1472"));
    let e = r.advertise("t", 1, &["http://x".into()], 0).unwrap_err();
    assert!(e.to_string().contains("'http://x'"), "{e}");
    assert!(r.advertise("t", 1, &[], 0).is_err());
    r.advertise("t", 1, &udp(1), 0).unwrap();
    assert_eq!(
        r.advertise("t", 1, &udp(2), 0),
        Err(AdvertiseError::Duplicate)
    );
}

#[test]
fn globs_and_regular_expressions() {
    let g = |p: &str, t: &str| glob(p).matches(t);
    assert!(g("md.eq.*", "md.eq.AAPL"));
    assert!(g("md.eq.*", "md.eq."));
    assert!(g("md.*.AAPL", "md.eq.x.AAPL"), "* crosses dots");
    assert!(!g("md.eq.*", "md.fx.EUR"));
    assert!(g("md.??.*", "md.eq.A") && !g("md.??.*", "md.e.A"));
    assert!(g("*a*b*c", "xxaxxbxxc") && !g("*a*b*c", "xxaxxbxxcx"));
    assert!(g("ü?", "üé"), "? is one character, not one byte");
    let r = Pattern::new(PatternKind::Regex, r"md\.eq\.[A-Z]{4}").unwrap();
    assert!(
        r.matches("md.eq.AAPL") && !r.matches("md.eq.AAPLX"),
        "anchored"
    );
    let e = Pattern::new(PatternKind::Regex, "md.(").unwrap_err();
    assert!(e.to_string().contains("'md.('"), "{e}");
    assert!(Pattern::new(PatternKind::Glob, "").is_err());
    assert_eq!(
        Pattern::exact_or_glob("a.*").unwrap().kind(),
        PatternKind::Glob
    );
    assert_eq!(
        Pattern::exact_or_glob("a.b").unwrap().kind(),
        PatternKind::Exact
    );
}

/// 10 000 topics from one context: every advertisement reaches the subscriber, datagrams are
/// packed, the rate limit holds in every second, and the sustain phase costs one
/// advertisement per topic per second.
#[test]
fn ten_thousand_topics_resolve_within_bounded_traffic() {
    let mut g = Group::new(2);
    g.members[1].subscribe(glob("md.*"), 0);
    let uri = vec!["udp://10.11.12.13:45678".to_string()];
    for i in 0..10_000u32 {
        g.members[0]
            .advertise(&format!("md.eq.T{i:05}"), 100_000 + i, &uri, 0)
            .unwrap();
    }
    g.run_until(20 * S);
    assert_eq!(found(&g.events(1)).len(), 10_000);
    let sent: Vec<_> = g.log.iter().filter(|l| l.1 == 0).collect();
    let per_second = |s: u64| -> (usize, usize) {
        let in_s = sent.iter().filter(|l| l.0 / S == s);
        (in_s.clone().count(), in_s.map(|l| l.3).sum())
    };
    for s in 0..20 {
        let (_, ads) = per_second(s);
        assert!(ads <= 20_000 + 1_000, "second {s}: {ads} advertisements");
    }
    // Sustain: seconds 15..20 carry one advertisement per topic per second (a few sent up to
    // 100 ms early to fill a datagram may fall twice in one second).
    for s in 15..20 {
        let (datagrams, ads) = per_second(s);
        assert!((10_000..=10_500).contains(&ads), "second {s}: {ads}");
        // Each frame is 32 + 12 + 23 = 67 bytes, 72 with padding: 20 fill a 1472-byte
        // datagram, so 500 datagrams is full packing.
        assert!(datagrams <= 500 + 25, "second {s}: {datagrams} datagrams");
    }
    assert!(g.members[0].counters().advertisements_delayed > 0);
    assert_eq!(g.members[1].counters().rejected(), 0);
}

proptest! {
    #[test]
    fn any_bytes_are_counted_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let mut r = Resolver::new(ResolverConfig::new(1));
        r.subscribe(glob("*"), 0);
        r.on_datagram(&bytes, 0);
        prop_assert_eq!(r.counters().datagrams_received, 1);
    }

    #[test]
    fn mutated_advertisements_never_panic(pos in 0usize..64, val in any::<u8>(), cut in 0usize..64) {
        let mut r = Resolver::new(ResolverConfig::new(1));
        r.subscribe(glob("*"), 0);
        let mut b = crafted(|_| {});
        let p = pos % b.len();
        b[p] = val;
        b.truncate(b.len() - cut.min(b.len()));
        r.on_datagram(&b, 0);
        let c = r.counters();
        // Each datagram was either applied as a source or counted somewhere.
        let events: Vec<_> = std::iter::from_fn(|| r.poll_event()).collect();
        prop_assert!(events.len() + c.rejected() as usize + c.own_frames as usize >= 1
            || b.is_empty()
            || c.advertisements_received == 1);
    }
}
