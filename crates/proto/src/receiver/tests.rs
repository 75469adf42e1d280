use super::*;
use crate::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr};
use peregrine_wire::status::{StatusFrame, StatusRepr};

const SRC: &str = "127.0.0.1:5000";

fn src() -> SocketAddr {
    SRC.parse().unwrap()
}

/// Sends `messages` through a sender and returns the datagrams.
fn datagrams(sender: &mut Sender, messages: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut sink = |b: Batch<'_>| -> Result<(), ()> {
        out.extend(b.datagrams().map(|d| d.to_vec()));
        Ok(())
    };
    for m in messages {
        sender.offer(m, 0, &mut sink).unwrap();
    }
    sender.flush(0, &mut sink).unwrap();
    out
}

fn deliver(r: &mut Receiver, dgrams: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    for d in dgrams {
        let (_, p) = r.on_datagram(
            d,
            0,
            src(),
            0,
            &mut |m: Message<'_>| got.push((m.sequence, m.payload.to_vec())),
            usize::MAX,
        );
        assert_eq!(p, Progress::Done);
    }
    got
}

fn events(r: &mut Receiver) -> Vec<SubscriberEvent> {
    std::iter::from_fn(|| r.next_event()).collect()
}

#[test]
fn fragmentation_round_trip_at_the_edge_sizes() {
    let dgram = 1472;
    let max_payload = dgram - 32;
    let sizes = [
        0,
        1,
        max_payload - 1,
        max_payload,
        max_payload + 1,
        64 << 10,
        1 << 20,
    ];
    for mode in [
        SendMode::Urgent,
        SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: 1,
        },
    ] {
        for packing in [Packing::Datagrams, Packing::Stream] {
            let mut s = Sender::new(SenderConfig {
                mode,
                ..SenderConfig::new(9, 7, packing, dgram)
            });
            let mut r = Receiver::new(ReceiverConfig::new(7, 1));
            let msgs: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| (0..n).map(|i| (i * 31 + k) as u8).collect())
                .collect();
            let d = datagrams(&mut s, &msgs);
            if packing == Packing::Datagrams {
                assert!(d.iter().all(|x| x.len() <= dgram));
            }
            let got = deliver(&mut r, &d);
            assert_eq!(got.len(), msgs.len(), "{mode:?} {packing:?}");
            for (g, m) in got.iter().zip(&msgs) {
                assert_eq!(&g.1, m, "size {}", m.len());
            }
            assert_eq!(r.counters().lost, 0);
            assert_eq!(r.counters().corrupt_frames, 0);
            assert_eq!(
                events(&mut r),
                vec![SubscriberEvent::Connected {
                    session_id: 9,
                    first_sequence: 0
                }]
            );
        }
    }
}

#[test]
fn a_gap_is_reported_exactly_and_delivery_carries_on() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let msgs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 8]).collect();
    let mut d = datagrams(&mut s, &msgs);
    d.remove(3);
    d.remove(3); // sequences 3 and 4
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    let got = deliver(&mut r, &d);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 5, 6, 7, 8, 9]
    );
    let ev = events(&mut r);
    assert_eq!(
        ev[1],
        SubscriberEvent::Lost {
            session_id: 9,
            from_sequence: 3,
            count: 2
        }
    );
    assert_eq!((r.counters().gaps, r.counters().lost), (1, 2));
}

#[test]
fn duplicates_are_dropped_and_counted() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &[b"a".to_vec(), b"b".to_vec()]);
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    let twice = [d[0].clone(), d[0].clone(), d[1].clone(), d[0].clone()];
    assert_eq!(deliver(&mut r, &twice).len(), 2);
    assert_eq!(r.counters().duplicates, 2);
}

#[test]
fn a_lost_fragment_drops_its_message_and_counts_the_frames() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let msgs = vec![vec![1u8; 4000], vec![2u8; 10], vec![3u8; 4000]];
    let mut d = datagrams(&mut s, &msgs);
    // Frames: 0,1,2 (message 0), 3 (message 1), 4,5,6 (message 2). Lose frame 1.
    d.remove(1);
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    let got = deliver(&mut r, &d);
    assert_eq!(got, vec![(3, vec![2u8; 10]), (4, vec![3u8; 4000])]);
    assert!(events(&mut r).contains(&SubscriberEvent::Lost {
        session_id: 9,
        from_sequence: 1,
        count: 1
    }));
}

#[test]
fn joining_mid_message_waits_for_the_next_begin() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &[vec![1u8; 4000], b"next".to_vec()]);
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    let got = deliver(&mut r, &d[1..]);
    assert_eq!(got, vec![(3, b"next".to_vec())]);
    assert_eq!(
        events(&mut r),
        vec![SubscriberEvent::Connected {
            session_id: 9,
            first_sequence: 1
        }]
    );
    assert_eq!(r.counters().lost, 0, "joining is not a loss");
}

#[test]
fn heartbeat_reveals_tail_loss_and_bye_closes() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    deliver(&mut r, &d[..1]);
    deliver(&mut r, &[s.heartbeat().to_vec()]);
    let mut bye = [0u8; BYE_LEN];
    ByeRepr {
        session_id: 9,
        stream_id: 7,
        final_next_sequence: 5,
    }
    .emit(&mut ByeFrame::new_unchecked(&mut bye[..]));
    deliver(&mut r, &[bye.to_vec()]);
    assert_eq!(
        events(&mut r),
        vec![
            SubscriberEvent::Connected {
                session_id: 9,
                first_sequence: 0
            },
            SubscriberEvent::Lost {
                session_id: 9,
                from_sequence: 1,
                count: 2
            },
            SubscriberEvent::Lost {
                session_id: 9,
                from_sequence: 3,
                count: 2
            },
            SubscriberEvent::PublisherClosed { session_id: 9 },
        ]
    );
    assert!(!r.is_connected());
}

#[test]
fn the_delivery_limit_resumes_inside_a_datagram() {
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    let msgs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 8]).collect();
    let d = datagrams(&mut s, &msgs);
    assert_eq!(d.len(), 1);
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    let mut got = Vec::new();
    let mut at = 0;
    let mut calls = 0;
    loop {
        calls += 1;
        let (n, p) = r.on_datagram(
            &d[0],
            at,
            src(),
            0,
            &mut |m: Message<'_>| got.push(m.payload[0]),
            3,
        );
        assert!(n <= 3);
        match p {
            Progress::Done => break,
            Progress::Resume(next) => at = next,
        }
    }
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    assert_eq!(calls, 4);
}

#[test]
fn other_streams_and_sessions_beyond_the_limit_are_dropped() {
    let mut other = Sender::new(SenderConfig::new(9, 8, Packing::Datagrams, 1472));
    let d = datagrams(&mut other, &[b"x".to_vec()]);
    let mut r = Receiver::new(ReceiverConfig {
        max_sessions: 1,
        ..ReceiverConfig::new(7, 1)
    });
    assert!(deliver(&mut r, &d).is_empty());
    assert_eq!(r.stats().other_streams, 1);
    let mut a = Sender::new(SenderConfig::new(1, 7, Packing::Datagrams, 1472));
    let mut b = Sender::new(SenderConfig::new(2, 7, Packing::Datagrams, 1472));
    let da = datagrams(&mut a, &[b"a".to_vec()]);
    let db = datagrams(&mut b, &[b"b".to_vec()]);
    assert_eq!(deliver(&mut r, &da).len(), 1);
    assert!(deliver(&mut r, &db).is_empty());
    assert_eq!(r.stats().sessions_refused, 1);
}

/// Short timers for the STATUS and timeout tests: a session dies after 1000 ns of silence, a
/// keep-alive goes every 100, a window of 40 frames.
fn timers_cfg() -> ReceiverConfig {
    ReceiverConfig {
        session_timeout_ns: 1000,
        status_interval_ns: 100,
        window_frames: 40,
        ..ReceiverConfig::new(7, 1)
    }
}

#[test]
fn silent_sessions_die_and_status_is_scheduled() {
    let cfg = timers_cfg();
    let mut r = Receiver::new(cfg);
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let msgs: Vec<Vec<u8>> = (0..25u8).map(|i| vec![i; 8]).collect();
    let d = datagrams(&mut s, &msgs);
    let mut sent: Vec<(SocketAddr, StatusRepr)> = Vec::new();
    let mut emit = |to: SocketAddr, f: &[u8]| {
        sent.push((
            to,
            StatusRepr::parse(&StatusFrame::new_checked(f).unwrap()).unwrap(),
        ))
    };
    r.on_datagram(&d[0], 0, src(), 0, &mut |_m: Message<'_>| {}, 1);
    r.poll(0, &mut emit);
    // 24 more frames: a window update after each 10 (a quarter of 40).
    for x in &d[1..] {
        r.on_datagram(x, 0, src(), 10, &mut |_m: Message<'_>| {}, usize::MAX);
        r.poll(10, &mut emit);
    }
    r.poll(120, &mut emit); // keep-alive
    r.poll(2000, &mut emit);
    assert_eq!(
        sent.iter().map(|s| s.1.next_sequence).collect::<Vec<_>>(),
        vec![1, 11, 21, 25]
    );
    assert!(sent
        .iter()
        .all(|s| s.0 == src() && s.1.session_id == 9 && s.1.window == 40 && s.1.receiver_id == 1));
    assert_eq!(
        events(&mut r).last(),
        Some(&SubscriberEvent::PublisherDied { session_id: 9 })
    );
    assert!(!r.is_connected());
}

#[test]
fn next_timer_ns_is_the_first_keepalive_or_timeout() {
    let cfg = timers_cfg();
    let mut r = Receiver::new(cfg);
    assert_eq!(r.next_timer_ns(), u64::MAX, "no session, no timer");
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &[vec![1; 8], vec![2; 8]]);
    r.on_datagram(&d[0], 0, src(), 0, &mut |_m: Message<'_>| {}, 1);
    assert_eq!(
        r.next_timer_ns(),
        0,
        "a new session's first STATUS is due at once"
    );
    let mut sent = 0;
    r.poll(0, &mut |_, _| sent += 1);
    assert_eq!(
        (sent, r.next_timer_ns()),
        (1, 100),
        "the keep-alive, before the timeout"
    );
    r.poll(99, &mut |_, _| sent += 1);
    assert_eq!(sent, 1, "nothing before the time it gave");
    r.poll(100, &mut |_, _| sent += 1);
    assert_eq!((sent, r.next_timer_ns()), (2, 200));
    // A session heard at 950 dies after 1950, but a keep-alive comes first.
    r.on_datagram(&d[1], 0, src(), 950, &mut |_m: Message<'_>| {}, 1);
    r.poll(950, &mut |_, _| sent += 1);
    assert_eq!(r.next_timer_ns(), 1050);
    // Without keep-alives (an interval longer than the timeout) the timeout is the timer.
    let mut quiet = Receiver::new(ReceiverConfig {
        status_interval_ns: 5000,
        ..cfg
    });
    quiet.on_datagram(&d[0], 0, src(), 10, &mut |_m: Message<'_>| {}, 1);
    quiet.poll(10, &mut |_, _| {});
    assert_eq!(quiet.next_timer_ns(), 1011);
    quiet.poll(1010, &mut |_, _| {});
    assert!(quiet.is_connected(), "not dead at exactly the timeout");
    quiet.poll(1011, &mut |_, _| {});
    assert!(!quiet.is_connected());
    assert_eq!(quiet.next_timer_ns(), u64::MAX);
}

/// A driver that calls `poll` only after a datagram or once `next_timer_ns` has come (the UDP
/// subscriber's empty polls) sends the same STATUS frames at the same times, and reports the
/// same events, as one that calls it at every step.
#[test]
fn polling_only_when_a_timer_is_due_changes_nothing() {
    let cfg = timers_cfg();
    for seed in 1..=20u64 {
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
        let msgs: Vec<Vec<u8>> = (0..200u8).map(|i| vec![i; 8]).collect();
        let d = datagrams(&mut s, &msgs);
        let (mut every, mut skipping) = (Receiver::new(cfg), Receiver::new(cfg));
        let (mut out_every, mut out_skipping) = (Vec::new(), Vec::new());
        let mut now = 0;
        let mut k = 0;
        for _ in 0..2000 {
            // Mostly small steps; now and then a silence long enough for a timeout.
            now += if next(50) == 0 {
                900 + next(400)
            } else {
                1 + next(60)
            };
            let heard = k < d.len() && next(3) == 0;
            for r in [&mut every, &mut skipping] {
                if heard {
                    r.on_datagram(&d[k], 0, src(), now, &mut |_m: Message<'_>| {}, 1);
                }
            }
            k += usize::from(heard);
            every.poll(now, &mut |_, f: &[u8]| out_every.push((now, f.to_vec())));
            if heard || now >= skipping.next_timer_ns() {
                skipping.poll(now, &mut |_, f: &[u8]| out_skipping.push((now, f.to_vec())));
            }
        }
        assert!(
            out_every.len() > 20,
            "seed {seed}: {} frames",
            out_every.len()
        );
        assert_eq!(out_every, out_skipping, "seed {seed}");
        let died = events(&mut every);
        assert!(
            died.iter()
                .any(|e| matches!(e, SubscriberEvent::PublisherDied { .. })),
            "seed {seed}: no timeout exercised: {died:?}"
        );
        assert_eq!(died, events(&mut skipping), "seed {seed}");
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600), start in 0usize..700) {
        let mut r = Receiver::new(ReceiverConfig::new(7, 1));
        let _ = r.on_datagram(&bytes, start, src(), 0, &mut |_m: Message<'_>| {}, usize::MAX);
        r.poll(u64::MAX, &mut |_, _| {});
    }
}

#[test]
fn a_byte_window_is_announced_in_frames_of_the_average_size_seen() {
    let cfg = ReceiverConfig {
        window_bytes: 64_000,
        ..ReceiverConfig::new(7, 1)
    };
    let mut r = Receiver::new(cfg);
    // Before enough frames are seen, assume full 1472-byte frames (the cautious guess).
    assert_eq!(r.window(), 64_000 / 1472);
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    let msgs: Vec<Vec<u8>> = (0..1000).map(|_| vec![0u8; 32]).collect();
    deliver(&mut r, &datagrams(&mut s, &msgs));
    assert_eq!(r.window(), 64_000 / 64, "1000 frames of 64 bytes");
    let fixed = Receiver::new(ReceiverConfig {
        window_frames: 10,
        window_bytes: 64_000,
        ..ReceiverConfig::new(7, 1)
    });
    assert_eq!(fixed.window(), 10, "a window in frames wins");
}

#[test]
fn a_datagram_window_is_announced_in_the_frames_datagrams_carry() {
    let cfg = ReceiverConfig {
        window_datagrams: 100,
        window_bytes: 64_000,
        ..ReceiverConfig::new(7, 1)
    };
    let mut r = Receiver::new(cfg);
    // Before a thousand frames: one frame a datagram (the cautious guess), over window_bytes.
    assert_eq!(r.window(), 100);
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    // 32-byte messages, 64-byte frames: 22 to a 1472-byte datagram.
    let msgs: Vec<Vec<u8>> = (0..2200).map(|_| vec![0u8; 32]).collect();
    let dgrams = datagrams(&mut s, &msgs);
    deliver(&mut r, &dgrams);
    let per = 2200 / dgrams.len() as u32;
    assert!(per >= 20, "{} datagrams", dgrams.len());
    assert_eq!(r.window(), 100 * per, "100 datagrams of {per} frames");
    let fixed = Receiver::new(ReceiverConfig {
        window_frames: 10,
        window_datagrams: 100,
        ..ReceiverConfig::new(7, 1)
    });
    assert_eq!(fixed.window(), 10, "a window in frames wins");
}

fn repairing(multicast: bool) -> Receiver {
    Receiver::new(ReceiverConfig {
        nak: Some(NakConfig {
            delay_ns: 100,
            backoff_max_ns: 1000,
            retry_ns: 1000,
            max_tries: 3,
            max_stall_ns: 1_000_000,
            ..NakConfig::new(multicast)
        }),
        ..ReceiverConfig::new(7, 1)
    })
}

/// The NAK ranges `poll_repair` emits at `now`.
fn naks_at(r: &mut Receiver, now: u64, got: &mut Vec<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    r.poll_repair(
        now,
        &mut |m: Message<'_>| got.push(m.sequence),
        &mut |_, f: &[u8]| {
            let n = NakRepr::parse(&NakFrame::new_checked(f).unwrap()).unwrap();
            assert_eq!((n.session_id, n.stream_id, n.receiver_id), (9, 7, 1));
            out.extend(n.ranges.iter().map(|x| (x.start, u64::from(x.count))));
        },
    );
    out
}

fn feed(r: &mut Receiver, d: &[u8], now: u64, got: &mut Vec<u64>) {
    r.on_datagram(
        d,
        0,
        src(),
        now,
        &mut |m: Message<'_>| got.push(m.sequence),
        usize::MAX,
    );
}

#[test]
fn a_gap_is_nakked_after_the_delay_and_filled_by_the_retransmission() {
    let mut s = Sender::new(SenderConfig {
        retain_bytes: 1 << 20,
        retain_age_ns: u64::MAX,
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    });
    let msgs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 8]).collect();
    let d = datagrams(&mut s, &msgs);
    let mut r = repairing(false);
    let mut got = Vec::new();
    for k in [0, 1, 4, 5] {
        feed(&mut r, &d[k], 0, &mut got);
    }
    assert_eq!(got, vec![0, 1], "4 and 5 are held behind the gap");
    assert!(
        naks_at(&mut r, 50, &mut got).is_empty(),
        "not before the delay"
    );
    assert_eq!(naks_at(&mut r, 100, &mut got), vec![(2, 2)]);
    let mut rtx = Vec::new();
    s.on_nak([(2, 2)], 0, &mut |b: Batch<'_>| -> Result<(), ()> {
        rtx.extend(b.datagrams().map(|x| x.to_vec()));
        Ok(())
    })
    .unwrap();
    for x in &rtx {
        feed(&mut r, x, 200, &mut got);
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(r.counters().lost, 0);
    assert_eq!(r.counters().recovered, 2);
    assert_eq!(r.counters().retransmits_received, 2);
    assert!(naks_at(&mut r, 5000, &mut got).is_empty());
}

#[test]
fn unanswered_naks_give_up_with_an_exact_loss_and_delivery_carries_on() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &(0..5u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
    let mut r = repairing(false);
    let mut got = Vec::new();
    for k in [0, 3, 4] {
        feed(&mut r, &d[k], 0, &mut got);
    }
    assert_eq!(naks_at(&mut r, 100, &mut got), vec![(1, 2)]);
    assert_eq!(naks_at(&mut r, 1100, &mut got), vec![(1, 2)]);
    assert_eq!(naks_at(&mut r, 2100, &mut got), vec![(1, 2)]);
    assert!(
        naks_at(&mut r, 3100, &mut got).is_empty(),
        "three tries, then it gives up"
    );
    assert_eq!(got, vec![0, 3, 4]);
    assert_eq!(
        events(&mut r).last(),
        Some(&SubscriberEvent::Lost {
            session_id: 9,
            from_sequence: 1,
            count: 2
        })
    );
    assert_eq!(r.stats().unrecoverable, 2);
}

#[test]
fn frames_below_the_senders_retention_are_reported_lost_at_once() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &(0..5u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
    let mut r = repairing(false);
    let mut got = Vec::new();
    feed(&mut r, &d[0], 0, &mut got);
    feed(&mut r, &d[4], 0, &mut got);
    // A heartbeat saying only 3.. is still retained: 1 and 2 are gone, 3 can be asked for.
    let mut hb = [0u8; 40];
    HeartbeatRepr {
        session_id: 9,
        stream_id: 7,
        next_sequence: 5,
        oldest_retained: 3,
    }
    .emit(&mut HeartbeatFrame::new_unchecked(&mut hb[..]));
    feed(&mut r, &hb, 10, &mut got);
    assert!(events(&mut r).contains(&SubscriberEvent::Lost {
        session_id: 9,
        from_sequence: 1,
        count: 2
    }));
    assert_eq!(naks_at(&mut r, 200, &mut got), vec![(3, 1)]);
    feed(&mut r, &d[3], 300, &mut got);
    assert_eq!(got, vec![0, 3, 4]);
}

#[test]
fn multicast_naks_back_off_randomly_and_are_suppressed_by_other_receivers_naks() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &(0..3u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
    let mut r = repairing(true);
    let mut got = Vec::new();
    feed(&mut r, &d[0], 0, &mut got);
    feed(&mut r, &d[2], 0, &mut got);
    // Another receiver (id 2) asks for frame 1 first.
    let mut buf = [0u8; 48];
    let ranges = [NakRange { start: 1, count: 1 }];
    let other = NakRepr {
        session_id: 9,
        stream_id: 7,
        receiver_id: 2,
        ranges: NakRanges::new(&ranges).unwrap(),
    };
    other.emit(&mut NakFrame::new_unchecked(&mut buf[..]));
    feed(&mut r, &buf, 0, &mut got);
    assert_eq!(r.stats().naks_suppressed, 1);
    // Within the back-off (< 1000) and the retry time after the other's NAK: nothing sent.
    for t in (0..1000).step_by(50) {
        assert!(naks_at(&mut r, t, &mut got).is_empty(), "at {t}");
    }
    // The retransmission never came: after the retry time it asks itself.
    assert_eq!(naks_at(&mut r, 1000, &mut got), vec![(1, 1)]);
    // Back-offs differ between receivers (seeded by receiver id) but stay below the maximum.
    let delay_of = |id: u32| {
        let mut r = Receiver::new(ReceiverConfig {
            nak: Some(NakConfig {
                backoff_max_ns: 1000,
                ..NakConfig::new(true)
            }),
            ..ReceiverConfig::new(7, id)
        });
        let mut got = Vec::new();
        feed(&mut r, &d[0], 0, &mut got);
        feed(&mut r, &d[2], 0, &mut got);
        (0..=1000)
            .find(|&t| !naks_at_any(&mut r, t).is_empty())
            .unwrap()
    };
    let delays: Vec<u64> = (1..6).map(delay_of).collect();
    assert!(delays.iter().all(|&x| x < 1000), "{delays:?}");
    assert!(delays.windows(2).any(|w| w[0] != w[1]), "{delays:?}");
}

fn naks_at_any(r: &mut Receiver, now: u64) -> Vec<u64> {
    let mut out = Vec::new();
    r.poll_repair(now, &mut |_m: Message<'_>| {}, &mut |_, f: &[u8]| {
        out.push(f.len() as u64)
    });
    out
}

#[test]
fn holding_past_the_byte_limit_gives_up_the_oldest_gap() {
    let mut s = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let d = datagrams(&mut s, &(0..10u8).map(|i| vec![i; 100]).collect::<Vec<_>>());
    let mut r = Receiver::new(ReceiverConfig {
        nak: Some(NakConfig {
            max_buffered_bytes: 300,
            ..NakConfig::new(false)
        }),
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    feed(&mut r, &d[0], 0, &mut got);
    for x in &d[2..10] {
        feed(&mut r, x, 0, &mut got);
    }
    // Frames of 132 bytes: two fit under 300; the third forces frame 1 to be given up.
    assert!(events(&mut r).contains(&SubscriberEvent::Lost {
        session_id: 9,
        from_sequence: 1,
        count: 1
    }));
    assert_eq!(got, (0..10).filter(|&k| k != 1).collect::<Vec<u64>>());
}

#[test]
fn counters_are_kept_per_session_and_in_total() {
    let mut a = Sender::new(SenderConfig::new(9, 7, Packing::Datagrams, 1472));
    let mut b = Sender::new(SenderConfig::new(10, 7, Packing::Datagrams, 1472));
    let da = datagrams(&mut a, &(0..5u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
    let db = datagrams(&mut b, &(0..3u8).map(|i| vec![i; 16]).collect::<Vec<_>>());
    let mut r = Receiver::new(ReceiverConfig::new(7, 1));
    // Session 9 loses frame 2 and gets frame 0 twice; session 10 gets everything.
    deliver(
        &mut r,
        &[
            da[0].clone(),
            da[0].clone(),
            da[1].clone(),
            da[3].clone(),
            da[4].clone(),
        ],
    );
    deliver(&mut r, &db);
    let mut per: Vec<(u32, SubscriberCounters)> = r.session_counters().collect();
    per.sort_by_key(|p| p.0);
    let (s9, s10) = (per[0].1, per[1].1);
    assert_eq!(
        (per[0].0, s9.messages, s9.bytes, s9.duplicates),
        (9, 4, 32, 1)
    );
    assert_eq!((s9.gaps, s9.lost), (1, 1));
    assert_eq!(
        (per[1].0, s10.messages, s10.bytes, s10.lost),
        (10, 3, 48, 0)
    );
    let total = r.counters();
    assert_eq!(total.messages, s9.messages + s10.messages);
    assert_eq!(total.bytes, s9.bytes + s10.bytes);
    assert_eq!((total.duplicates, total.lost), (1, 1));
}

#[test]
fn reaching_an_announced_position_is_confirmed_at_once() {
    // A closing publisher waits for every receiver to confirm its last sequence: a receiver
    // that reaches the position a HEARTBEAT announced sends a STATUS without waiting for the
    // keep-alive interval.
    let mut s = Sender::new(SenderConfig {
        retain_bytes: 1 << 20,
        retain_age_ns: u64::MAX,
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    });
    let d = datagrams(&mut s, &(0..4u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
    let mut r = repairing(false);
    let mut got = Vec::new();
    let mut statuses = Vec::new();
    let status_at = |r: &mut Receiver, now: u64, out: &mut Vec<u64>| {
        r.poll(now, &mut |_, f: &[u8]| {
            out.push(
                StatusRepr::parse(&StatusFrame::new_checked(f).unwrap())
                    .unwrap()
                    .next_sequence,
            )
        })
    };
    feed(&mut r, &d[0], 0, &mut got);
    status_at(&mut r, 0, &mut statuses); // the first STATUS goes at once
    feed(&mut r, &d[1], 10, &mut got);
    feed(&mut r, &d[3], 10, &mut got); // frame 2 lost, frame 3 held
    let hb = s.heartbeat(); // announces 4
    feed(&mut r, &hb, 20, &mut got);
    status_at(&mut r, 30, &mut statuses);
    assert_eq!(
        statuses,
        vec![1],
        "not caught up yet: nothing new to confirm"
    );
    // The retransmission fills the gap: delivery reaches 4, and the receiver says so now,
    // long before the 100 ms keep-alive.
    let mut rtx = Vec::new();
    s.on_nak([(2, 1)], 40, &mut |b: Batch<'_>| -> Result<(), ()> {
        rtx.extend(b.datagrams().map(|x| x.to_vec()));
        Ok(())
    })
    .unwrap();
    feed(&mut r, &rtx[0], 50, &mut got);
    assert_eq!(got, vec![0, 1, 2, 3]);
    status_at(&mut r, 60, &mut statuses);
    assert_eq!(statuses, vec![1, 4]);
    status_at(&mut r, 70, &mut statuses);
    assert_eq!(statuses, vec![1, 4], "confirmed once");
}

// ---- Hostile input (issue 14, item 6): source binding, the jump bound, bounded memory ----

const ELSEWHERE: &str = "10.6.6.6:6666";

fn data_frame(session_id: u32, sequence: u64, payload: &[u8]) -> Vec<u8> {
    let repr = DataRepr {
        session_id,
        stream_id: 7,
        sequence,
        message_length: payload.len() as u32,
        flags: flags::BEGIN | flags::END,
        payload,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DataFrame::new_unchecked(&mut b[..]));
    b
}

fn heartbeat_frame(session_id: u32, next_sequence: u64, oldest_retained: u64) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    HeartbeatRepr {
        session_id,
        stream_id: 7,
        next_sequence,
        oldest_retained,
    }
    .emit(&mut HeartbeatFrame::new_unchecked(&mut b[..]));
    b
}

fn bye_frame(session_id: u32, final_next_sequence: u64) -> Vec<u8> {
    let mut b = vec![0u8; BYE_LEN];
    ByeRepr {
        session_id,
        stream_id: 7,
        final_next_sequence,
    }
    .emit(&mut ByeFrame::new_unchecked(&mut b[..]));
    b
}

/// Feeds one datagram from `from` at `now`, collecting delivered sequence numbers.
fn feed_from(r: &mut Receiver, d: &[u8], from: &str, now: u64, got: &mut Vec<u64>) {
    r.on_datagram(
        d,
        0,
        from.parse().unwrap(),
        now,
        &mut |m: Message<'_>| got.push(m.sequence),
        usize::MAX,
    );
}

/// A retransmission another receiver's NAK brought after the publisher's BYE is not a new
/// session: the closed stream is not delivered again from its start.
#[test]
fn a_frame_of_a_closed_session_does_not_open_it_again() {
    let mut r = repairing(true);
    let mut got = Vec::new();
    for s in 0..3 {
        feed(&mut r, &data_frame(9, s, b"m"), 10, &mut got);
    }
    feed(&mut r, &bye_frame(9, 3), 20, &mut got);
    assert_eq!(got, [0, 1, 2]);
    events(&mut r);
    for s in 0..3 {
        feed(&mut r, &data_frame(9, s, b"m"), 30, &mut got);
    }
    feed(&mut r, &heartbeat_frame(9, 3, 0), 40, &mut got);
    assert_eq!(got, [0, 1, 2], "delivered again");
    assert_eq!(events(&mut r), []);
    assert_eq!(r.footprint().sessions, 0);
    assert_eq!(r.stats().closed_session_frames, 4);
    assert!(naks_at(&mut r, 1_000_000, &mut got).is_empty());
    // Another session of the same source is taken as ever.
    feed(&mut r, &data_frame(10, 0, b"n"), 50, &mut got);
    assert_eq!(got, [0, 1, 2, 0]);
}

fn lost_events(r: &mut Receiver) -> Vec<(u64, u64)> {
    events(r)
        .into_iter()
        .filter_map(|e| match e {
            SubscriberEvent::Lost {
                from_sequence,
                count,
                ..
            } => Some((from_sequence, count)),
            _ => None,
        })
        .collect()
}

fn plain() -> Receiver {
    Receiver::new(ReceiverConfig::new(7, 1))
}

#[test]
fn frames_of_a_followed_session_from_another_source_are_dropped_and_counted() {
    // The attack: a datagram naming the session, from any socket. Before the fix it was
    // delivered, and the session's STATUS frames went to the attacker from then on.
    for mut r in [plain(), repairing(true)] {
        let mut got = Vec::new();
        feed_from(&mut r, &data_frame(9, 0, b"real"), SRC, 0, &mut got);
        feed_from(&mut r, &data_frame(9, 1, b"forged"), ELSEWHERE, 1, &mut got);
        feed_from(&mut r, &heartbeat_frame(9, 5, 5), ELSEWHERE, 2, &mut got);
        feed_from(&mut r, &bye_frame(9, 5), ELSEWHERE, 3, &mut got);
        feed_from(&mut r, &data_frame(9, 1, b"real"), SRC, 4, &mut got);
        assert_eq!(got, vec![0, 1], "the forged frames are not delivered");
        assert_eq!(r.stats().foreign_source, 3);
        assert_eq!(r.sources().collect::<Vec<_>>(), vec![(9, src())]);
        assert!(
            r.is_connected(),
            "a BYE from elsewhere does not end the session"
        );
        assert!(lost_events(&mut r).is_empty());
        assert_eq!(r.counters().lost, 0);
    }
}

#[test]
fn a_tcp_reconnection_binds_the_session_again_after_the_old_connection_departs() {
    let mut r = Receiver::new(ReceiverConfig {
        max_jump_frames: u64::MAX,
        late_join: LateJoin::None,
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    let (a, b) = ("127.0.0.1:4001", "127.0.0.1:4002");
    feed_from(&mut r, &data_frame(9, 0, b"x"), a, 0, &mut got);
    r.disconnected(a.parse().unwrap());
    feed_from(&mut r, &data_frame(9, 3, b"x"), b, 1, &mut got);
    assert_eq!(got, vec![0, 3]);
    assert_eq!(
        r.sources().collect::<Vec<_>>(),
        vec![(9, b.parse().unwrap())]
    );
    assert_eq!(
        lost_events(&mut r),
        vec![(1, 2)],
        "what it missed in between"
    );
    assert_eq!(r.stats().foreign_source, 0);
}

/// The attack of issue 14 item 6 from the session's own source address (spoofed): one frame a
/// billion sequence numbers ahead, then the real stream carries on.
fn one_frame_far_ahead(mut r: Receiver, forged: &[u8]) {
    let mut got = Vec::new();
    for q in 0..3 {
        feed_from(&mut r, &data_frame(9, q, b"real"), SRC, q, &mut got);
    }
    feed_from(&mut r, forged, SRC, 10, &mut got);
    for q in 3..10 {
        feed_from(&mut r, &data_frame(9, q, b"real"), SRC, 20 + q, &mut got);
    }
    // Time passes: repair timers run out, the session's silence is not reached.
    for t in (100..2_000_000_000u64).step_by(50_000_000) {
        r.poll_repair(
            t,
            &mut |m: Message<'_>| got.push(m.sequence),
            &mut |_, _| {},
        );
    }
    assert_eq!(
        got,
        (0..10).collect::<Vec<u64>>(),
        "the real stream still arrives"
    );
    assert_eq!(lost_events(&mut r), vec![], "no loss on one frame's word");
    assert_eq!(r.counters().lost, 0);
    assert_eq!(r.stats().jumps_held, 1);
    assert!(r.footprint().held_slots < 100, "{:?}", r.footprint());
}

#[test]
fn one_data_frame_a_billion_ahead_neither_blinds_the_session_nor_reports_a_loss() {
    let forged = data_frame(9, 1_000_000_000, b"forged");
    one_frame_far_ahead(plain(), &forged);
    one_frame_far_ahead(repairing(false), &forged);
    one_frame_far_ahead(repairing(true), &forged);
}

#[test]
fn one_heartbeat_a_billion_ahead_neither_blinds_the_session_nor_reports_a_loss() {
    for oldest in [0, 1_000_000_000] {
        let forged = heartbeat_frame(9, 1_000_000_000, oldest);
        one_frame_far_ahead(plain(), &forged);
        one_frame_far_ahead(repairing(false), &forged);
        one_frame_far_ahead(repairing(true), &forged);
    }
}

#[test]
fn one_bye_a_billion_ahead_neither_ends_the_session_nor_reports_a_loss() {
    let forged = bye_frame(9, 1_000_000_000);
    one_frame_far_ahead(plain(), &forged);
    one_frame_far_ahead(repairing(true), &forged);
}

#[test]
fn a_forged_oldest_retained_gives_up_only_gaps_earlier_frames_revealed() {
    // A heartbeat within the jump bound saying frames 3..10 were sent and none is retained:
    // before the fix, 3..10 were reported lost at once and the real frames 3..9 then dropped
    // as duplicates. Now the tail it reveals is asked for, and the real frames fill it.
    let mut r = repairing(false);
    let mut got = Vec::new();
    for q in 0..3 {
        feed_from(&mut r, &data_frame(9, q, b"real"), SRC, 0, &mut got);
    }
    feed_from(&mut r, &heartbeat_frame(9, 10, 10), SRC, 1, &mut got);
    assert!(lost_events(&mut r).is_empty());
    for q in 3..10 {
        feed_from(&mut r, &data_frame(9, q, b"real"), SRC, 2, &mut got);
    }
    assert_eq!(got, (0..10).collect::<Vec<u64>>());
    assert_eq!(r.counters().lost, 0);
    // A second heartbeat saying the same is evidence: a tail both announced is given up.
    feed_from(&mut r, &heartbeat_frame(9, 14, 14), SRC, 3, &mut got);
    feed_from(&mut r, &heartbeat_frame(9, 14, 14), SRC, 4, &mut got);
    assert_eq!(lost_events(&mut r), vec![(10, 4)]);
}

#[test]
fn a_real_jump_past_the_bound_is_confirmed_by_the_next_frame_and_reported_exactly() {
    // A subscriber stopped for longer than the sender retains: when it reads again the
    // sequence jumps by millions. The first frame is held; the second confirms it.
    for nak in [false, true] {
        let mut r = if nak { repairing(false) } else { plain() };
        let mut got = Vec::new();
        for q in 0..3 {
            feed_from(&mut r, &data_frame(9, q, b"x"), SRC, 0, &mut got);
        }
        let far = 5_000_000;
        let bound = r.jump_bound(9).expect("session 9 is bound");
        assert!(far > bound, "the jump must pass the bound ({bound})");
        assert_eq!(r.jump_bound(10), None, "no bound for a session never heard");
        feed_from(&mut r, &data_frame(9, far, b"x"), SRC, 10, &mut got);
        assert_eq!(got, vec![0, 1, 2], "held until confirmed");
        feed_from(&mut r, &data_frame(9, far + 1, b"x"), SRC, 20, &mut got);
        if nak {
            // Asked for, then given up when the sender says it no longer has it.
            feed_from(
                &mut r,
                &heartbeat_frame(9, far + 2, far - 10),
                SRC,
                30,
                &mut got,
            );
            feed_from(
                &mut r,
                &heartbeat_frame(9, far + 2, far - 10),
                SRC,
                40,
                &mut got,
            );
            let mut naks = Vec::new();
            assert!(naks_at_into(&mut r, 1000, &mut got, &mut naks)
                .iter()
                .all(|&(s, c)| s >= far - 10 && s + c <= far));
        }
        assert_eq!(r.stats().jumps_confirmed, 1, "nak={nak}");
        if !nak {
            assert_eq!(got, vec![0, 1, 2, far, far + 1]);
            assert_eq!(lost_events(&mut r), vec![(3, far - 3)]);
        } else {
            assert_eq!(got, vec![0, 1, 2]);
            assert_eq!(lost_events(&mut r), vec![(3, far - 13)]);
        }
    }
}

/// The NAK ranges emitted at `now` (any session).
fn naks_at_into(
    r: &mut Receiver,
    now: u64,
    got: &mut Vec<u64>,
    out: &mut Vec<(u64, u64)>,
) -> Vec<(u64, u64)> {
    r.poll_repair(
        now,
        &mut |m: Message<'_>| got.push(m.sequence),
        &mut |_, f: &[u8]| {
            let n = NakRepr::parse(&NakFrame::new_checked(f).unwrap()).unwrap();
            out.extend(n.ranges.iter().map(|x| (x.start, u64::from(x.count))));
        },
    );
    out.clone()
}

#[test]
fn a_jump_is_confirmed_by_a_heartbeat_announcing_it() {
    let mut r = plain();
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 0, b"x"), SRC, 0, &mut got);
    let far = 1 << 40;
    feed_from(&mut r, &data_frame(9, far, b"x"), SRC, 1, &mut got);
    assert_eq!(got, vec![0]);
    // The publisher goes idle: its heartbeat announces the position after that frame.
    feed_from(
        &mut r,
        &heartbeat_frame(9, far + 1, far + 1),
        SRC,
        2,
        &mut got,
    );
    assert_eq!(got, vec![0, far]);
    assert_eq!(lost_events(&mut r), vec![(1, far - 1)]);
}

#[test]
fn a_late_joiner_hears_nothing_of_a_forged_jump_before_its_first_frame() {
    // The first frame of a session sets its position: no bound applies (the jump is measured
    // from there), and a frame of a session never heard is never a jump.
    let mut r = plain();
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 1 << 50, b"x"), SRC, 0, &mut got);
    feed_from(
        &mut r,
        &data_frame(9, (1 << 50) + 1, b"x"),
        SRC,
        0,
        &mut got,
    );
    assert_eq!(got, vec![1 << 50, (1 << 50) + 1]);
    assert_eq!(r.stats().jumps_held, 0);
}

#[test]
fn a_hostile_peer_cannot_grow_the_receivers_memory() {
    // Sparse frames far apart, huge heartbeats, many sessions, from the bound source too.
    let mut r = Receiver::new(ReceiverConfig {
        max_sessions: 8,
        nak: Some(NakConfig {
            max_buffered_bytes: 1 << 20,
            ..NakConfig::new(true)
        }),
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for k in 0..200_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let session = (x % 20) as u32;
        let frame = match x % 5 {
            0 => heartbeat_frame(session, x >> (x % 64), (x >> (x % 64)) / 2),
            1 => data_frame(session, (x >> 20) % 1_000_000_000, b"x"),
            _ => data_frame(session, k * 2 + (x % 4000), b"x"),
        };
        feed_from(&mut r, &frame, SRC, k * 1000, &mut got);
        if k % 1000 == 0 {
            r.poll_repair(k * 1000, &mut |_m: Message<'_>| {}, &mut |_, _| {});
            let f = r.footprint();
            assert!(f.sessions <= 8, "{f:?}");
            assert!(f.gaps <= 8 * MAX_GAPS, "{f:?}");
            assert!(f.held_bytes <= (1 << 20) + 64, "{f:?}");
            assert!(f.held_slots <= 8 * (1 << 20) / 32 + 8, "{f:?}");
            assert!(f.jump_bytes <= 8 * 64, "{f:?}");
            r.check_invariants().unwrap();
            while r.next_event().is_some() {}
        }
    }
}

#[test]
fn losses_that_add_up_past_2_to_the_64_saturate_instead_of_panicking() {
    // Found by fuzz/fuzz_targets/receiver.rs: two sessions each losing nearly 2^64 frames
    // (no jump bound, as on TCP) overflowed the total.
    let mut r = Receiver::new(ReceiverConfig {
        max_jump_frames: u64::MAX,
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    for session in [1, 2] {
        feed_from(&mut r, &data_frame(session, 0, b"x"), SRC, 0, &mut got);
        feed_from(
            &mut r,
            &data_frame(session, u64::MAX - 1, b"x"),
            SRC,
            0,
            &mut got,
        );
    }
    assert_eq!(r.counters().lost, u64::MAX);
    // 2^64 - 1 is never a sequence number: rejected, not an overflow one past it.
    feed_from(&mut r, &data_frame(1, u64::MAX, b"x"), SRC, 0, &mut got);
    assert_eq!(r.counters().corrupt_frames, 1);
}

#[test]
fn a_start_late_join_given_up_for_room_never_delivers_its_history_after_the_live_stream() {
    // Found by the fuzz target: a `start` late join (history 0..11776 asked for) whose gap
    // was given up to keep the reorder ring within its span delivered 11776, then the
    // retransmitted frame 1 after it, out of order.
    let mut r = Receiver::new(ReceiverConfig {
        nak: Some(NakConfig {
            max_buffered_bytes: 64 << 10,
            ..NakConfig::new(true)
        }),
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 11_776, b"x"), SRC, 0, &mut got);
    feed_from(&mut r, &data_frame(9, 1, b"x"), SRC, 1, &mut got);
    assert_eq!(got, vec![11_776]);
    r.check_invariants().unwrap();
    assert_eq!(
        lost_events(&mut r),
        vec![],
        "not young after all: as if none was asked"
    );
}

// ---- Late join (issue 14, item 10) ----

fn late(late_join: LateJoin, multicast: bool) -> Receiver {
    Receiver::new(ReceiverConfig {
        late_join,
        ..repairing(multicast).cfg
    })
}

/// Retransmits what the sender retains of `ranges`, as a sender would.
fn answer(s: &mut Sender, ranges: &[(u64, u64)]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    s.on_nak(
        ranges.iter().copied(),
        0,
        &mut |b: Batch<'_>| -> Result<(), ()> {
            out.extend(b.datagrams().map(|d| d.to_vec()));
            Ok(())
        },
    )
    .unwrap();
    out
}

fn retaining() -> Sender {
    Sender::new(SenderConfig {
        retain_bytes: 1 << 20,
        retain_age_ns: u64::MAX,
        mode: SendMode::Urgent,
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    })
}

#[test]
fn a_receiver_that_hears_a_young_session_late_gets_it_from_its_first_message() {
    // The subscriber existed when the source started, but its transport opened after topic
    // resolution, when two messages had gone: it asks for them (default late join) and
    // delivers from message 0, in order. Before the fix it started at 2 and reported no loss.
    for multicast in [false, true] {
        let mut s = retaining();
        let d = datagrams(&mut s, &(0..5u8).map(|i| vec![i; 8]).collect::<Vec<_>>());
        let mut r = Receiver::new(ReceiverConfig {
            nak: Some(NakConfig::new(multicast)),
            ..ReceiverConfig::new(7, 1)
        });
        let mut got = Vec::new();
        feed(&mut r, &d[2], 0, &mut got);
        feed(&mut r, &d[3], 0, &mut got);
        assert!(got.is_empty(), "held until what came before is repaired");
        let naks = naks_at(&mut r, 1_000_000, &mut got);
        assert_eq!(naks, vec![(0, 2)]);
        for x in answer(&mut s, &naks) {
            feed(&mut r, &x, 1_000_001, &mut got);
        }
        feed(&mut r, &d[4], 1_000_002, &mut got);
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert_eq!(
            events(&mut r),
            vec![SubscriberEvent::Connected {
                session_id: 9,
                first_sequence: 0
            }]
        );
        assert_eq!(r.stats().late_joins, 1);
    }
}

#[test]
fn late_join_start_leaves_a_long_running_stream_at_the_first_frame_seen() {
    // Far into the stream: nothing asked for.
    let mut r = late(LateJoin::Start, false);
    let mut got = Vec::new();
    let far = LATE_JOIN_START_MAX + 1;
    feed_from(&mut r, &data_frame(9, far, b"x"), SRC, 0, &mut got);
    assert_eq!(got, vec![far]);
    assert!(naks_at(&mut r, 1_000, &mut got).is_empty());
    // Early in the stream, but the sender no longer has its first message: as if no late
    // join had been asked for, and no loss reported.
    let mut r = late(LateJoin::Start, false);
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 50, b"x"), SRC, 0, &mut got);
    feed_from(&mut r, &heartbeat_frame(9, 51, 30), SRC, 10, &mut got);
    assert_eq!(got, vec![50]);
    assert_eq!(
        events(&mut r),
        vec![SubscriberEvent::Connected {
            session_id: 9,
            first_sequence: 50
        }]
    );
    assert!(naks_at(&mut r, 1_000, &mut got).is_empty());
    // The heartbeat that answers a unicast JOIN is the first frame: the same two cases.
    for (oldest, want) in [(0, vec![(0, 40)]), (10, vec![])] {
        let mut r = late(LateJoin::Start, false);
        feed_from(&mut r, &heartbeat_frame(9, 40, oldest), SRC, 0, &mut got);
        assert_eq!(naks_at(&mut r, 1_000, &mut got), want, "oldest {oldest}");
        assert_eq!(lost_events(&mut r), vec![]);
    }
}

#[test]
fn late_join_all_asks_back_to_the_start_and_reports_exactly_what_is_no_longer_retained() {
    let mut r = late(LateJoin::All, false);
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 100, b"x"), SRC, 0, &mut got);
    assert_eq!(naks_at(&mut r, 1_000, &mut got), vec![(0, 100)]);
    // The sender retains from 40: 0..40 is lost, 40..100 is asked for again.
    feed_from(&mut r, &heartbeat_frame(9, 101, 40), SRC, 2_000, &mut got);
    assert_eq!(lost_events(&mut r), vec![(0, 40)]);
    assert_eq!(naks_at(&mut r, 10_000, &mut got), vec![(40, 60)]);
    for q in 40..100 {
        feed_from(&mut r, &data_frame(9, q, b"x"), SRC, 11_000, &mut got);
    }
    assert_eq!(got, (40..101).collect::<Vec<u64>>());
    assert_eq!(r.counters().lost, 40);
}

#[test]
fn late_join_n_asks_for_the_last_n_and_none_for_nothing() {
    let mut r = late(LateJoin::Last(10), false);
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 100, b"x"), SRC, 0, &mut got);
    assert_eq!(naks_at(&mut r, 1_000, &mut got), vec![(90, 10)]);
    assert_eq!(
        events(&mut r),
        vec![SubscriberEvent::Connected {
            session_id: 9,
            first_sequence: 90
        }]
    );
    let mut r = late(LateJoin::None, false);
    feed_from(&mut r, &data_frame(9, 5, b"x"), SRC, 0, &mut got);
    assert!(naks_at(&mut r, 1_000, &mut got).is_empty());
    assert_eq!(r.stats().late_joins, 0);
}

#[test]
fn a_late_joiner_reports_where_its_delivery_stands_so_flow_control_covers_its_history() {
    // STATUS says where delivery stands, the start of the history a late join waits for: the
    // sender holds back (as for any gap being repaired) rather than overrun what the receiver
    // must hold until the history is in.
    let mut r = Receiver::new(ReceiverConfig {
        window_frames: 1000,
        ..late(LateJoin::All, false).cfg
    });
    let mut got = Vec::new();
    for q in 500..510 {
        feed_from(&mut r, &data_frame(9, q, b"x"), SRC, 0, &mut got);
    }
    let mut reported = Vec::new();
    r.poll(0, &mut |_, f: &[u8]| {
        reported.push(
            StatusRepr::parse(&StatusFrame::new_checked(f).unwrap())
                .unwrap()
                .next_sequence,
        )
    });
    assert_eq!(reported, vec![0]);
    assert!(got.is_empty());
}

#[test]
fn late_join_values_parse_and_bad_ones_say_what_is_accepted() {
    for (text, want) in [
        ("none", LateJoin::None),
        ("start", LateJoin::Start),
        ("all", LateJoin::All),
        ("1000", LateJoin::Last(1000)),
        ("0", LateJoin::None),
    ] {
        assert_eq!(text.parse::<LateJoin>(), Ok(want));
    }
    assert_eq!(LateJoin::Last(7).to_string(), "7");
    let e = "everything".parse::<LateJoin>().unwrap_err().to_string();
    assert!(e.contains("late_join=everything") && e.contains("none") && e.contains("all"));
    assert_eq!(LateJoin::default(), LateJoin::Start);
}

#[test]
fn a_b_line_from_another_interface_is_a_second_bound_source_and_a_third_is_foreign() {
    // The sender's B line leaves from another interface: its copies come from another address.
    const LINE_B: &str = "10.2.0.1:5001";
    let mut r = Receiver::new(ReceiverConfig {
        // (Unicast NAK timing: a fixed delay, no random back-off, for the test's clock.)
        nak: Some(NakConfig {
            delay_ns: 100,
            ..NakConfig::new(false)
        }),
        second_source: true,
        ..ReceiverConfig::new(7, 1)
    });
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 0, b"a"), SRC, 0, &mut got);
    feed_from(&mut r, &data_frame(9, 0, b"a"), LINE_B, 1, &mut got);
    feed_from(&mut r, &data_frame(9, 1, b"b"), LINE_B, 2, &mut got);
    feed_from(&mut r, &data_frame(9, 1, b"b"), SRC, 3, &mut got);
    // A third source is foreign, as ever.
    feed_from(&mut r, &data_frame(9, 2, b"forged"), ELSEWHERE, 4, &mut got);
    assert_eq!(got, vec![0, 1], "each message once, from the first copy");
    assert_eq!(r.counters().duplicates, 2);
    assert_eq!(r.stats().foreign_source, 1);
    assert_eq!(r.sources().collect::<Vec<_>>(), vec![(9, src())]);

    // STATUS goes to both lines' senders.
    let mut status_to = Vec::new();
    r.poll(10, &mut |to: SocketAddr, _: &[u8]| {
        status_to.push(to.to_string())
    });
    assert_eq!(status_to, vec![SRC.to_string(), LINE_B.to_string()]);

    // Line A goes quiet; a gap seen on line B is asked for on line B.
    feed_from(&mut r, &data_frame(9, 3, b"d"), LINE_B, 20, &mut got);
    let mut nak_to = Vec::new();
    r.poll_repair(
        10_000,
        &mut |m: Message<'_>| got.push(m.sequence),
        &mut |to: SocketAddr, _: &[u8]| nak_to.push(to.to_string()),
    );
    assert_eq!(nak_to, vec![LINE_B.to_string()]);
    // Line A again: the next NAK goes there.
    feed_from(&mut r, &data_frame(9, 4, b"e"), SRC, 20_000, &mut got);
    nak_to.clear();
    r.poll_repair(
        10_000_000,
        &mut |m: Message<'_>| got.push(m.sequence),
        &mut |to: SocketAddr, _: &[u8]| nak_to.push(to.to_string()),
    );
    assert!(
        !nak_to.is_empty() && nak_to.iter().all(|t| t == SRC),
        "{nak_to:?}"
    );
}

#[test]
fn without_a_second_source_a_b_line_from_elsewhere_is_foreign() {
    let mut r = plain();
    let mut got = Vec::new();
    feed_from(&mut r, &data_frame(9, 0, b"a"), SRC, 0, &mut got);
    feed_from(
        &mut r,
        &data_frame(9, 1, b"b"),
        "10.2.0.1:5001",
        1,
        &mut got,
    );
    assert_eq!(got, vec![0]);
    assert_eq!(r.stats().foreign_source, 1);
}
