use super::*;
use crate::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr};

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

#[test]
fn silent_sessions_die_and_status_is_scheduled() {
    let cfg = ReceiverConfig {
        session_timeout_ns: 1000,
        status_interval_ns: 100,
        window_frames: 40,
        ..ReceiverConfig::new(7, 1)
    };
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
