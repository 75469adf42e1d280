use super::*;
use crate::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};

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
    assert_eq!(r.stats().duplicates, 2);
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
