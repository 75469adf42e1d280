use super::*;
use peregrine_wire::header::Frames;
use peregrine_wire::FrameRepr;

fn collect(batches: &mut Vec<(Vec<u8>, usize)>) -> impl FnMut(Batch<'_>) -> Result<(), ()> + '_ {
    move |b| {
        batches.push((b.bytes.to_vec(), b.segment_len));
        Ok(())
    }
}

/// Every datagram of every batch, parsed: (sequence, flags, message_length, payload) of DATA
/// frames; PAD frames are checked and skipped.
fn data_frames(batches: &[(Vec<u8>, usize)]) -> Vec<(u64, u16, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (bytes, seg) in batches {
        let step = if *seg == 0 { bytes.len() } else { *seg };
        for dgram in bytes.chunks(step) {
            if *seg != 0 {
                assert!(dgram.len() <= *seg);
            }
            for f in Frames::new(dgram) {
                let (_, fb) = f.expect("every frame the sender writes is valid");
                match FrameRepr::parse(fb).unwrap() {
                    FrameRepr::Data(d) => {
                        out.push((d.sequence, d.flags, d.message_length, d.payload.to_vec()))
                    }
                    FrameRepr::Pad(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
    out
}

#[test]
fn urgent_mode_sends_each_message_in_its_own_datagram() {
    let mut batches = Vec::new();
    let mut s = Sender::new(SenderConfig::new(1, 2, Packing::Datagrams, 1472));
    for i in 0..3u8 {
        assert_eq!(
            s.offer(&[i; 10], 0, &mut collect(&mut batches)).unwrap(),
            i as u64
        );
    }
    assert_eq!(batches.len(), 3);
    for (i, (b, seg)) in batches.iter().enumerate() {
        assert_eq!(*seg, 1472);
        assert_eq!(b.len(), 42, "the last frame's padding is not sent");
        let f = data_frames(&[(b.clone(), *seg)]);
        assert_eq!(
            f,
            vec![(
                i as u64,
                flags::BEGIN | flags::END | flags::URGENT,
                10,
                vec![i as u8; 10]
            )]
        );
    }
}

#[test]
fn normal_mode_fills_full_datagrams_and_pads_them_for_gso() {
    let mut batches = Vec::new();
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 1 << 20,
            batch_interval_ns: 1_000_000,
        },
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    // 256-byte messages: 288-byte frames, 5 per datagram, 32 bytes left for a PAD.
    for i in 0..12u32 {
        s.offer(&[i as u8; 256], 0, &mut collect(&mut batches))
            .unwrap();
    }
    assert!(
        batches.is_empty(),
        "nothing leaves before the batch is full or due"
    );
    s.flush(0, &mut collect(&mut batches)).unwrap();
    assert_eq!(batches.len(), 1);
    let (bytes, seg) = &batches[0];
    assert_eq!(
        bytes.len(),
        2 * 1472 + 2 * 288,
        "two full datagrams and a short last one"
    );
    let frames = data_frames(&batches);
    assert_eq!(frames.len(), 12);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.0, i as u64);
        assert_eq!(f.3, vec![i as u8; 256]);
    }
    assert_eq!(*seg, 1472);
    assert_eq!(s.stats().datagrams, 3);
}

#[test]
fn a_segment_that_cannot_be_padded_ends_the_batch() {
    let mut batches = Vec::new();
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 1 << 20,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    // 1472 = 3 * 480 + 32; frames of 32 + 448 = 480: 32 left, padded. Frames of 488 (456 B):
    // 3 * 488 = 1464, 8 left: too small for a PAD, so the batch must end there.
    for _ in 0..4 {
        s.offer(&[7; 456], 0, &mut collect(&mut batches)).unwrap();
    }
    assert_eq!(batches.len(), 1, "the short datagram ended the batch");
    assert_eq!(batches[0].0.len(), 1464);
    s.flush(0, &mut collect(&mut batches)).unwrap();
    assert_eq!(data_frames(&batches).len(), 4);
}

#[test]
fn the_batch_interval_flushes_on_poll_and_offer() {
    let mut batches = Vec::new();
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 1 << 20,
            batch_interval_ns: 1000,
        },
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    s.offer(b"a", 100, &mut collect(&mut batches)).unwrap();
    let out = s.poll(500, &mut collect(&mut batches)).unwrap();
    assert!(batches.is_empty());
    assert_eq!(out.next_deadline_ns, 1100);
    s.poll(1100, &mut collect(&mut batches)).unwrap();
    assert_eq!(batches.len(), 1);
    s.offer(b"b", 2000, &mut collect(&mut batches)).unwrap();
    s.offer(b"c", 3000, &mut collect(&mut batches)).unwrap();
    assert_eq!(batches.len(), 2, "an offer after the interval flushes");
    assert_eq!(data_frames(&batches).len(), 3);
}

#[test]
fn fragments_take_consecutive_sequences_and_full_segments() {
    for packing in [Packing::Datagrams, Packing::Stream] {
        let mut batches = Vec::new();
        let mut s = Sender::new(SenderConfig::new(1, 2, packing, 1472));
        let msg: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        s.offer(b"x", 0, &mut collect(&mut batches)).unwrap();
        assert_eq!(s.offer(&msg, 0, &mut collect(&mut batches)).unwrap(), 1);
        assert_eq!(s.next_sequence(), 1 + 4, "5000 bytes in fragments of 1440");
        let frames = data_frames(&batches);
        assert_eq!(frames.len(), 5);
        let mut joined = Vec::new();
        for (i, f) in frames[1..].iter().enumerate() {
            assert_eq!(f.0, 1 + i as u64);
            assert_eq!(f.2, 5000);
            let want = match i {
                0 => flags::BEGIN,
                3 => flags::END | flags::URGENT,
                _ => 0,
            };
            assert_eq!(f.1, want);
            joined.extend_from_slice(&f.3);
        }
        assert_eq!(joined, msg);
    }
}

#[test]
fn flow_control_limit_refuses_whole_messages() {
    let mut batches = Vec::new();
    let mut s = Sender::new(SenderConfig::new(1, 2, Packing::Datagrams, 1472));
    s.set_limit(3);
    s.offer(b"a", 0, &mut collect(&mut batches)).unwrap();
    // A 3-fragment message does not fit under the limit: nothing of it is sent.
    assert_eq!(
        s.offer(&[0; 3000], 0, &mut collect(&mut batches)),
        Err(SendError::BackPressured)
    );
    assert_eq!(s.next_sequence(), 1);
    s.offer(b"b", 0, &mut collect(&mut batches)).unwrap();
    s.offer(b"c", 0, &mut collect(&mut batches)).unwrap();
    assert_eq!(
        s.offer(b"d", 0, &mut collect(&mut batches)),
        Err(SendError::BackPressured)
    );
    s.set_limit(10);
    s.offer(b"d", 0, &mut collect(&mut batches)).unwrap();
    assert_eq!(s.stats().back_pressured, 2);
}

#[test]
fn a_refused_offer_sends_what_is_batched_under_the_limit() {
    let mut batches = Vec::new();
    let mut s = Sender::new(SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: 100_000,
        },
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    });
    s.set_limit(4);
    for m in [b"a", b"b", b"c", b"d"] {
        s.offer(m, 0, &mut collect(&mut batches)).unwrap();
    }
    // Batched, within the limit, the interval not passed: nothing has left yet.
    assert!(batches.is_empty());
    assert_eq!(
        s.offer(b"e", 0, &mut collect(&mut batches)),
        Err(SendError::BackPressured)
    );
    // The refusal sent the four: the receiver can now see them and open its window.
    let sent: Vec<u64> = data_frames(&batches).iter().map(|f| f.0).collect();
    assert_eq!(sent, [0, 1, 2, 3]);
    assert_eq!(s.pending_len(), 0);
    // Refused again with nothing batched: nothing more is sent.
    assert_eq!(
        s.offer(b"e", 0, &mut collect(&mut batches)),
        Err(SendError::BackPressured)
    );
    assert_eq!(data_frames(&batches).len(), 4);
}

#[test]
fn heartbeats_back_off_while_idle_and_reset_on_data() {
    let mut batches = Vec::new();
    let cfg = SenderConfig {
        heartbeat_min_ns: 100,
        heartbeat_max_ns: 800,
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    s.offer(b"a", 1000, &mut collect(&mut batches)).unwrap();
    let mut sent_at = Vec::new();
    for now in (1000..5000).step_by(10) {
        if s.poll(now, &mut collect(&mut batches))
            .unwrap()
            .heartbeat_due
        {
            sent_at.push(now);
            s.heartbeat_sent(now);
        }
    }
    assert_eq!(sent_at, vec![1100, 1300, 1700, 2500, 3300, 4100, 4900]);
    let hb = s.heartbeat();
    match FrameRepr::parse(&hb).unwrap() {
        FrameRepr::Heartbeat(h) => {
            assert_eq!((h.session_id, h.stream_id, h.next_sequence), (1, 2, 1));
        }
        other => panic!("{other:?}"),
    }
    s.offer(b"b", 5000, &mut collect(&mut batches)).unwrap();
    assert!(
        !s.poll(5050, &mut collect(&mut batches))
            .unwrap()
            .heartbeat_due
    );
    assert!(
        s.poll(5100, &mut collect(&mut batches))
            .unwrap()
            .heartbeat_due
    );
}

#[test]
fn too_large_messages_are_refused() {
    let mut s = Sender::new(SenderConfig::new(1, 2, Packing::Stream, 65536));
    let mut sink = |_: Batch<'_>| -> Result<(), ()> { Ok(()) };
    let r = s.offer_with((1 << 30) + 1, 0, &mut sink, |_| unreachable!());
    assert!(matches!(r, Err(SendError::TooLarge { .. })));
    assert_eq!(s.next_sequence(), 0);
}

#[test]
fn a_heartbeat_announces_only_frames_already_sent() {
    // Regression: a heartbeat sent while a batch was pending announced the batched frames, and
    // a receiver reported them lost, then dropped them as duplicates when the batch came.
    let mut batches = Vec::new();
    let cfg = SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 1 << 20,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    };
    let mut s = Sender::new(cfg);
    s.offer(b"a", 0, &mut collect(&mut batches)).unwrap();
    s.flush(0, &mut collect(&mut batches)).unwrap();
    s.offer(b"b", 0, &mut collect(&mut batches)).unwrap();
    s.offer(&[0; 3000], 0, &mut collect(&mut batches)).unwrap();
    assert_eq!(s.next_sequence(), 5);
    let next = |hb: [u8; 40]| match FrameRepr::parse(&hb).unwrap() {
        FrameRepr::Heartbeat(h) => h.next_sequence,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        next(s.heartbeat()),
        1,
        "sequences 1..5 are batched, not sent"
    );
    s.flush(0, &mut collect(&mut batches)).unwrap();
    assert_eq!(next(s.heartbeat()), 5);
}

fn retaining(retain_bytes: usize) -> Sender {
    Sender::new(SenderConfig {
        retain_bytes,
        retain_age_ns: 1_000_000_000,
        retransmit_linger_ns: 1000,
        retransmit_max_frames: 50,
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    })
}

#[test]
fn a_nak_is_answered_with_the_retained_frames_flagged_retransmit() {
    let mut batches = Vec::new();
    let mut s = retaining(1 << 20);
    for i in 0..100u32 {
        s.offer(&i.to_le_bytes(), 0, &mut collect(&mut batches))
            .unwrap();
    }
    assert_eq!(s.oldest_retained(), 0);
    let mut rtx = Vec::new();
    let n = s
        .on_nak([(10, 3), (40, 1)], 5, &mut collect(&mut rtx))
        .unwrap();
    assert_eq!(n, 4);
    let frames = data_frames(&rtx);
    assert_eq!(
        frames.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![10, 11, 12, 40]
    );
    for f in &frames {
        assert_eq!(f.1 & flags::RETRANSMIT, flags::RETRANSMIT);
        assert_eq!(f.3, (f.0 as u32).to_le_bytes().to_vec(), "same payload");
    }
    // The same loss reported by another receiver moments later is not sent again...
    let mut again = Vec::new();
    assert_eq!(
        s.on_nak([(10, 3)], 500, &mut collect(&mut again)).unwrap(),
        0
    );
    assert!(again.is_empty());
    assert_eq!(s.stats().nak_lingering, 3);
    // ...but it is once the linger time has passed.
    assert_eq!(
        s.on_nak([(10, 3)], 2000, &mut collect(&mut again)).unwrap(),
        3
    );
}

#[test]
fn hostile_naks_cause_bounded_counted_work() {
    let mut batches = Vec::new();
    let mut s = retaining(64 * 40); // 40 frames of 64 bytes
    for i in 0..100u32 {
        s.offer(&[i as u8; 32], 0, &mut collect(&mut batches))
            .unwrap();
    }
    assert_eq!(s.oldest_retained(), 60);
    let mut rtx = Vec::new();
    // Evicted, future and huge ranges.
    let n = s
        .on_nak(
            [(0, 10), (100, 5), (u64::MAX - 3, 3), (0, u64::MAX)],
            0,
            &mut collect(&mut rtx),
        )
        .unwrap();
    let st = s.stats();
    assert_eq!(n, 40, "only what is retained, once");
    assert_eq!(st.nak_unavailable, 10 + 60);
    assert_eq!(st.nak_future, 5 + 3 + (u64::MAX - 100));
    assert_eq!(data_frames(&rtx).len(), 40);
    // The per-NAK cap.
    let mut s = retaining(1 << 20);
    for i in 0..1000u32 {
        s.offer(&[i as u8; 8], 0, &mut collect(&mut batches))
            .unwrap();
    }
    let mut rtx = Vec::new();
    assert_eq!(
        s.on_nak([(0, 1000)], 0, &mut collect(&mut rtx)).unwrap(),
        50
    );
    assert_eq!(s.stats().nak_capped, 950);
}

#[test]
fn retransmissions_pack_into_gso_ready_datagrams() {
    let mut batches = Vec::new();
    let mut s = retaining(1 << 20);
    for i in 0..200u32 {
        s.offer(&[i as u8; 300], 0, &mut collect(&mut batches))
            .unwrap();
    }
    let mut rtx = Vec::new();
    s.on_nak([(0, 200)], 0, &mut collect(&mut rtx)).unwrap();
    for (bytes, seg) in &rtx {
        assert_eq!(*seg, 1472);
        // Every datagram but the last of a batch is full length.
        let n = bytes.len().div_ceil(*seg);
        assert!(bytes.len() > (n - 1) * seg);
    }
    let f = data_frames(&rtx);
    assert_eq!(f.len(), 50, "the cap");
    assert!(f.windows(2).all(|w| w[1].0 == w[0].0 + 1));
}

#[test]
fn the_rate_limit_holds_the_long_run_rate_and_refuses_offers_beyond_it() {
    // 10 MB/s in urgent mode, 1000-byte messages (1032-byte datagrams) offered every 10 us for
    // one virtual second: 100 MB offered, about 10 MB may leave.
    let rate = 10_000_000u64;
    let mut s = Sender::new(SenderConfig {
        rate_bytes_per_s: rate,
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    });
    let mut sent_bytes = 0u64;
    let mut sink = |b: Batch<'_>| -> Result<(), ()> {
        sent_bytes += b.bytes.len() as u64;
        Ok(())
    };
    let (mut accepted, mut refused) = (0u64, 0u64);
    let mut now = 0;
    while now < 1_000_000_000 {
        match s.offer(&[0u8; 1000], now, &mut sink) {
            Ok(_) => accepted += 1,
            Err(SendError::BackPressured) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
        now += 10_000;
    }
    // The burst (one 65000-byte batch, more than 1 ms at 10 MB/s) plus the rate, plus at most
    // one datagram of debt.
    assert!(
        (rate..=rate + 65_000 + 1032).contains(&sent_bytes),
        "{sent_bytes}"
    );
    assert_eq!(accepted * 1032, sent_bytes);
    assert_eq!(s.stats().rate_limited, refused);
    assert_eq!(accepted + refused, 100_000);
}

#[test]
fn the_retransmission_rate_limit_bounds_what_naks_can_cause() {
    let mut batches = Vec::new();
    let mut s = Sender::new(SenderConfig {
        retain_bytes: 16 << 20,
        retain_age_ns: u64::MAX,
        retransmit_linger_ns: 0,
        retransmit_rate_bytes_per_s: 1_000_000, // bursts of one batch: 65000 bytes
        ..SenderConfig::new(1, 2, Packing::Datagrams, 1472)
    });
    for i in 0..5000u32 {
        s.offer(&[i as u8; 1000], 0, &mut collect(&mut batches))
            .unwrap();
    }
    // A flood: 1000 NAKs for everything, all at the same instant.
    let mut rtx = Vec::new();
    for _ in 0..1000 {
        s.on_nak([(0, 5000)], 1, &mut collect(&mut rtx)).unwrap();
    }
    let rtx_bytes: usize = rtx.iter().map(|b| b.0.len()).sum();
    let st = s.stats();
    // One burst's worth (plus the frame that went into debt), no more.
    assert!(st.retransmitted <= 65_000 / 1032 + 1, "{st:?}");
    assert!(rtx_bytes <= 65_000 + 1472, "{rtx_bytes}");
    assert_eq!(st.naks_received, 1000);
    // Every frame asked for is accounted for: sent, capped or refused by the rate.
    assert_eq!(
        st.retransmitted + st.nak_capped + st.nak_rate_limited,
        1000 * 5000
    );
    // A second later the bucket has refilled: a NAK is answered again.
    assert!(
        s.on_nak([(0, 10)], 1_000_000_001, &mut collect(&mut rtx))
            .unwrap()
            > 0
    );
}

/// `offer_in_batch` takes a message only where nothing but writing it is needed: never a
/// batch's first frame, one that fills the batch, urgent mode, a limit; it writes what
/// `offer_with` writes. It reads no clock: a batch whose interval passed leaves at the next call
/// that takes the time.
#[test]
fn offer_in_batch_takes_only_what_needs_nothing_but_writing() {
    let normal = SendMode::Normal {
        batch_bytes: 200,
        batch_interval_ns: 1_000,
    };
    let cfg = SenderConfig {
        mode: normal,
        ..SenderConfig::new(5, 6, Packing::Stream, 1024)
    };
    let fill = |b: &mut [u8]| b.fill(9);
    let mut s = Sender::new(cfg);
    let mut out = Vec::new();
    assert!(s.offer_in_batch(8, fill).is_err(), "a batch's first frame");
    assert_eq!(s.offer_with(8, 0, &mut collect(&mut out), fill), Ok(0));
    assert_eq!(s.offer_in_batch(8, fill).ok(), Some(1));
    assert_eq!(s.offer_in_batch(8, fill).ok(), Some(2));
    assert_eq!((s.pending_len(), s.stats().messages), (120, 3));
    assert!(
        s.offer_in_batch(48, fill).is_err(),
        "it would fill the batch"
    );
    assert!(s.offer_in_batch(2000, fill).is_err(), "longer than a frame");
    s.set_limit(3);
    assert!(s.offer_in_batch(8, fill).is_err(), "at the limit");
    s.set_limit(u64::MAX);
    // Offered once the interval has passed (at 1,000): no clock, no send; the next call that
    // takes the time sends the batch, this message with it.
    assert_eq!(s.offer_in_batch(8, fill).ok(), Some(3));
    assert!(out.is_empty(), "nothing has left yet");
    s.poll(1_000, &mut collect(&mut out)).unwrap();
    assert_eq!((s.pending_len(), s.stats().batches), (0, 1));
    assert_eq!(s.stats().messages, 4);
    assert_eq!(s.stats().frames, 4);

    // The same four messages through offer_with, the last at 1,000: the same bytes.
    let mut t = Sender::new(cfg);
    let mut expected = Vec::new();
    for (k, now) in [0, 10, 20, 1_000].into_iter().enumerate() {
        assert_eq!(
            t.offer_with(8, now, &mut collect(&mut expected), fill),
            Ok(k as u64)
        );
    }
    assert_eq!(
        t.stats().batches,
        1,
        "the fourth offer found the interval passed"
    );
    assert_eq!(out, expected);

    let mut u = Sender::new(SenderConfig {
        mode: SendMode::Urgent,
        ..cfg
    });
    let mut sent = Vec::new();
    u.offer_with(8, 0, &mut collect(&mut sent), fill).unwrap();
    assert!(u.offer_in_batch(8, fill).is_err(), "urgent mode");
}

/// One step of a publisher's life, for comparing the batch fast path with the general path.
#[derive(Debug, Clone)]
enum Step {
    Offer(usize),
    OfferWith(usize),
    /// `offer_in_batch`, then `offer_with` when it gives the message back, at the time last
    /// given to a call that takes one (`offer_in_batch` reads no clock).
    OfferInBatch(usize),
    Flush,
    Poll,
    Limit(u64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        12 => prop_oneof![8 => 0usize..100, 1 => 1400usize..4000].prop_map(Step::Offer),
        4 => (0usize..200).prop_map(Step::OfferWith),
        4 => (0usize..200).prop_map(Step::OfferInBatch),
        1 => Just(Step::Flush),
        1 => Just(Step::Poll),
        1 => (0u64..64).prop_map(Step::Limit),
    ]
}

proptest::proptest! {
    /// The batch fast path and the general path, given the same offers, flushes, polls and
    /// flow-control limits at the same times, in every packing and mode (with a rate limit
    /// too): the same batches byte for byte, the same answers, the same counters.
    #[test]
    fn the_batch_fast_path_sends_what_the_general_path_sends(
        steps in proptest::collection::vec(step(), 1..300),
        stream in proptest::bool::ANY,
        urgent in proptest::bool::ANY,
        rate in proptest::bool::ANY,
        segment in proptest::sample::select(vec![256usize, 1472, 4096]),
        batch_bytes in proptest::sample::select(vec![100usize, 1000, 65_000]),
    ) {
        let cfg = SenderConfig {
            mode: if urgent {
                SendMode::Urgent
            } else {
                SendMode::Normal { batch_bytes, batch_interval_ns: 50_000 }
            },
            rate_bytes_per_s: if rate { 10_000_000 } else { 0 },
            ..SenderConfig::new(5, 6, if stream { Packing::Stream } else { Packing::Datagrams }, segment)
        };
        let mut fast = Sender::new(cfg);
        let mut general = Sender::new(cfg);
        general.general_only = true;
        let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
        // The time last given to a call that takes one.
        let mut clock = 0;
        for (k, st) in steps.iter().enumerate() {
            let now = k as u64 * 7_000;
            if !matches!(st, Step::OfferInBatch(_) | Step::Limit(_)) {
                clock = now;
            }
            let mut a = collect(&mut fast_out);
            let mut b = collect(&mut general_out);
            let (x, y) = match st {
                Step::Offer(n) => {
                    let m: Vec<u8> = (0..*n).map(|i| (i + k) as u8).collect();
                    (fast.offer(&m, now, &mut a).map_err(|e| format!("{e:?}")),
                     general.offer(&m, now, &mut b).map_err(|e| format!("{e:?}")))
                }
                Step::OfferWith(n) => {
                    let fill = |buf: &mut [u8]| buf.iter_mut().enumerate().for_each(|(i, x)| *x = (i * 3 + k) as u8);
                    (fast.offer_with(*n, now, &mut a, fill).map_err(|e| format!("{e:?}")),
                     general.offer_with(*n, now, &mut b, fill).map_err(|e| format!("{e:?}")))
                }
                Step::OfferInBatch(n) => {
                    let fill = |buf: &mut [u8]| buf.iter_mut().enumerate().for_each(|(i, x)| *x = (i * 5 + k) as u8);
                    (fast.offer_in_batch(*n, fill)
                        .or_else(|fill| fast.offer_with(*n, clock, &mut a, fill))
                        .map_err(|e| format!("{e:?}")),
                     general.offer_with(*n, clock, &mut b, fill).map_err(|e| format!("{e:?}")))
                }
                Step::Flush => (
                    fast.flush(now, &mut a).map(|_| 0).map_err(|e| format!("{e:?}")),
                    general.flush(now, &mut b).map(|_| 0).map_err(|e| format!("{e:?}")),
                ),
                Step::Poll => (
                    fast.poll(now, &mut a).map(|o| o.next_deadline_ns).map_err(|e| format!("{e:?}")),
                    general.poll(now, &mut b).map(|o| o.next_deadline_ns).map_err(|e| format!("{e:?}")),
                ),
                Step::Limit(ahead) => {
                    let limit = fast.next_sequence() + ahead;
                    fast.set_limit(limit);
                    general.set_limit(limit);
                    (Ok(0), Ok(0))
                }
            };
            proptest::prop_assert_eq!(x, y, "step {} {:?}", k, st);
            proptest::prop_assert_eq!(fast.stats(), general.stats());
            proptest::prop_assert_eq!(fast.pending_len(), general.pending_len());
        }
        let end = steps.len() as u64 * 7_000;
        fast.flush(end, &mut collect(&mut fast_out)).unwrap();
        general.flush(end, &mut collect(&mut general_out)).unwrap();
        proptest::prop_assert_eq!(&fast_out, &general_out);
    }
}
