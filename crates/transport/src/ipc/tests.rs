//! Scripted tests of the shared-memory transport inside one process (threads). Multi-process
//! behaviour (kill -9, SIGSTOP, several subscriber processes) is tested in `crates/cli/tests`.

use super::layout::*;
use super::*;
use crate::{Message, OfferError, OpenError, SubscriberEvent};
use peregrine_agent::{Blocking, IdleStrategy};
use std::sync::atomic::{AtomicUsize, Ordering};

fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A base directory of the test's own under `/dev/shm`, removed with everything in it when
/// the last configuration using it is dropped: tests do not see each other's segments (a
/// publisher's creation removes the dead segments of its directory), and leave nothing behind.
#[derive(Debug)]
pub(super) struct TestBase(pub std::path::PathBuf);

impl TestBase {
    pub(super) fn new(tag: &str) -> std::sync::Arc<TestBase> {
        let p = std::path::Path::new("/dev/shm").join(format!("pgtest-{}", unique(tag)));
        std::fs::create_dir(&p).unwrap();
        std::sync::Arc::new(TestBase(p))
    }
    /// This user's segment directory in it.
    pub(super) fn user_dir(&self) -> std::path::PathBuf {
        self.0
            .join(format!("peregrine-{}", rustix::process::geteuid().as_raw()))
    }
}

impl Drop for TestBase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An `IpcConfig` with a base directory of its own (see [`TestBase`]).
#[derive(Debug, Clone)]
pub(super) struct TestCfg {
    pub cfg: IpcConfig,
    pub base: std::sync::Arc<TestBase>,
}

impl std::ops::Deref for TestCfg {
    type Target = IpcConfig;
    fn deref(&self) -> &IpcConfig {
        &self.cfg
    }
}

impl TestCfg {
    /// The file of this configuration's segment.
    pub(super) fn file(&self) -> std::path::PathBuf {
        self.base.user_dir().join(&self.cfg.name)
    }
    /// Another segment name in the same directory.
    pub(super) fn sibling(&self, tag: &str) -> TestCfg {
        let mut c = self.clone();
        c.cfg.name = unique(tag);
        c
    }
}

pub(super) fn cfg(tag: &str, capacity: u64, policy: SlowSubscriberPolicy) -> TestCfg {
    let base = TestBase::new(tag);
    TestCfg {
        cfg: IpcConfig {
            capacity,
            policy,
            base_dir: Some(base.0.clone()),
            ..IpcConfig::new(&unique(tag))
        },
        base,
    }
}

/// Polls until `want` messages arrived or `max_polls` polls passed; returns (sequence, payload).
fn drain(sub: &mut IpcSubscriber, want: usize, max_polls: usize) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    for _ in 0..max_polls {
        let limit = (want - got.len()).min(1024);
        sub.poll(
            &mut |m: Message<'_>| got.push((m.sequence, m.payload.to_vec())),
            limit,
        );
        if got.len() >= want {
            break;
        }
    }
    got
}

/// Polls a detached subscriber (which retries attaching every millisecond) until the publisher
/// counts it, as a publisher that must not start before its subscribers does.
fn wait_attached(sub: &mut IpcSubscriber, publ: &IpcPublisher) {
    for _ in 0..2_000 {
        sub.poll(&mut |_m: Message<'_>| {}, 1);
        if publ.subscriber_count() == 1 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("the subscriber never attached");
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 31 + i) as u8).collect()
}

#[test]
fn delivers_messages_of_every_size_up_to_the_maximum_in_order() {
    let c = cfg("sizes", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "sizes", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "sizes", false).unwrap();
    let max = publ.max_message_len();
    assert_eq!(max, (1 << 20) / 8 - 32);
    let sizes = [0, 1, 31, 32, 33, 63, 64, 65, 1000, 4096, max - 1, max];
    for (i, &len) in sizes.iter().enumerate() {
        assert_eq!(publ.offer(&payload(i as u64, len)).unwrap(), i as u64);
    }
    let got = drain(&mut sub, sizes.len(), 10);
    assert_eq!(got.len(), sizes.len());
    for (i, (seq, data)) in got.iter().enumerate() {
        assert_eq!(*seq, i as u64);
        assert!(
            *data == payload(i as u64, sizes[i]),
            "message {i} of {} bytes corrupted",
            sizes[i]
        );
    }
    assert_eq!(
        publ.offer(&vec![0; max + 1]),
        Err(OfferError::TooLarge { len: max + 1, max })
    );
}

#[test]
fn wraps_around_the_ring_with_pad_frames_without_losing_or_corrupting() {
    let c = cfg("wrap", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "wrap", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "wrap", false).unwrap();
    let mut next_expected = 0u64;
    let mut rng = 0x9e37_79b9u64;
    for seq in 0..200_000u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = (rng % 700) as usize;
        loop {
            match publ.offer(&payload(seq, len)) {
                Ok(s) => {
                    assert_eq!(s, seq);
                    break;
                }
                Err(OfferError::BackPressured) => {
                    sub.poll(
                        &mut |m: Message<'_>| {
                            assert_eq!(m.sequence, next_expected);
                            assert_eq!(m.payload, &payload(m.sequence, m.payload.len())[..]);
                            next_expected += 1;
                        },
                        usize::MAX,
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    sub.poll(
        &mut |m: Message<'_>| {
            assert_eq!(m.sequence, next_expected);
            next_expected += 1;
        },
        usize::MAX,
    );
    assert_eq!(next_expected, 200_000);
    assert_eq!(sub.counters().lost, 0);
    assert!(
        publ.counters().back_pressured > 0,
        "the small ring must have filled up"
    );
}

#[test]
fn back_pressure_refuses_offers_until_the_slowest_subscriber_makes_room() {
    let c = cfg("bp", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "bp", 1).unwrap();
    let mut fast = IpcSubscriber::new(&c, "bp", false).unwrap();
    let mut slow = IpcSubscriber::new(&c, "bp", false).unwrap();
    assert_eq!(publ.subscriber_count(), 2);
    // 32-byte messages take one 64-byte line each; the publisher keeps CLEAN_AHEAD bytes free.
    let fits = ((MIN_CAPACITY - CLEAN_AHEAD) / 64) as usize;
    let mut sent = 0;
    while publ.offer(&[7u8; 32]).is_ok() {
        sent += 1;
        fast.poll(&mut |_m: Message<'_>| {}, usize::MAX);
    }
    assert_eq!(sent, fits);
    assert_eq!(publ.offer(&[7u8; 32]), Err(OfferError::BackPressured));
    assert_eq!(drain(&mut slow, 10, 1).len(), 10);
    for _ in 0..10 {
        publ.offer(&[8u8; 32]).unwrap();
    }
    assert_eq!(publ.offer(&[7u8; 32]), Err(OfferError::BackPressured));
    let rest = drain(&mut slow, fits, 10);
    assert_eq!(rest.len(), fits);
    assert_eq!(rest.last().unwrap().0, fits as u64 + 9);
    assert_eq!(slow.counters().lost, 0);
    // Once the slow subscriber leaves, it no longer holds the publisher back.
    drop(slow);
    fast.poll(&mut |_m: Message<'_>| {}, usize::MAX);
    assert!(publ.offer(&[9u8; 32]).is_ok());
}

#[test]
fn overwrite_mode_tells_a_lapped_subscriber_exactly_how_many_it_lost() {
    let c = cfg("ow", MIN_CAPACITY, SlowSubscriberPolicy::Overwrite);
    let mut publ = IpcPublisher::create(&c, "ow", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "ow", false).unwrap();
    assert!(matches!(
        sub.next_event(),
        Some(SubscriberEvent::Connected {
            first_sequence: 0,
            ..
        })
    ));
    let total = 5_000u64; // about 5 laps of 1023 one-line messages
    for seq in 0..total {
        assert_eq!(publ.offer(&payload(seq, 24)).unwrap(), seq);
    }
    let got = drain(&mut sub, usize::MAX, 3);
    let lost: u64 = std::iter::from_fn(|| sub.next_event())
        .map(|e| match e {
            SubscriberEvent::Lost {
                from_sequence,
                count,
                ..
            } => {
                assert_eq!(from_sequence, 0, "nothing was read before the first lap");
                count
            }
            other => panic!("unexpected {other:?}"),
        })
        .sum();
    assert_eq!(
        lost, total,
        "resumes at the tail: all {total} written so far were lost"
    );
    assert!(got.is_empty());
    assert_eq!(sub.counters().lost, total);
    // After the loss it carries on with whatever comes next, intact.
    for seq in total..total + 100 {
        publ.offer(&payload(seq, 24)).unwrap();
    }
    let got = drain(&mut sub, 100, 3);
    assert_eq!(got.len(), 100);
    for (i, (seq, data)) in got.iter().enumerate() {
        assert_eq!(*seq, total + i as u64);
        assert_eq!(*data, payload(*seq, 24));
    }
}

#[test]
fn overwrite_mode_with_a_keeping_up_subscriber_loses_nothing() {
    let c = cfg("ow2", MIN_CAPACITY, SlowSubscriberPolicy::Overwrite);
    let mut publ = IpcPublisher::create(&c, "ow2", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "ow2", false).unwrap();
    let mut expected = 0;
    for seq in 0..50_000u64 {
        publ.offer(&payload(seq, (seq % 300) as usize)).unwrap();
        if seq % 100 == 99 {
            sub.poll(
                &mut |m: Message<'_>| {
                    assert_eq!(m.sequence, expected);
                    assert_eq!(m.payload, &payload(expected, (expected % 300) as usize)[..]);
                    expected += 1;
                },
                usize::MAX,
            );
        }
    }
    assert_eq!(expected, 50_000);
    assert_eq!(sub.counters().lost, 0);
}

/// A subscriber that attaches to a young log (its publisher has not filled it once) reads it
/// from the first message, as `late_join=start` does on the network: one that exists before its
/// publisher and finds it a moment later through topic resolution misses nothing (it missed
/// what was written before it attached, silently). To an older log it attaches at the tail.
#[test]
fn a_late_subscriber_reads_a_young_log_from_its_first_message_and_an_old_one_from_the_tail() {
    let c = cfg("late", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "late", 1).unwrap();
    for i in 0..10 {
        publ.offer(&[i; 8]).unwrap();
    }
    let mut sub = IpcSubscriber::new(&c, "late", false).unwrap();
    assert!(matches!(
        sub.next_event(),
        Some(SubscriberEvent::Connected {
            first_sequence: 0,
            ..
        })
    ));
    publ.offer(&[10; 8]).unwrap();
    let got = drain(&mut sub, 11, 3);
    assert_eq!(
        got,
        (0..11u8)
            .map(|i| (u64::from(i), vec![i; 8]))
            .collect::<Vec<_>>()
    );
    drop(sub);

    // Past the first lap (the publisher alone, so nothing holds it back): at the tail.
    let mut n = 11u64;
    while n < 100_000 {
        publ.offer(&n.to_le_bytes()).unwrap();
        n += 1;
    }
    let mut sub = IpcSubscriber::new(&c, "late", false).unwrap();
    assert!(matches!(
        sub.next_event(),
        Some(SubscriberEvent::Connected {
            first_sequence: 100_000,
            ..
        })
    ));
    publ.offer(&n.to_le_bytes()).unwrap();
    assert_eq!(drain(&mut sub, 1, 3), vec![(n, n.to_le_bytes().to_vec())]);
}

#[test]
fn a_subscriber_created_first_attaches_when_its_publisher_appears_and_follows_a_replacement() {
    let c = cfg("early", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let mut sub = IpcSubscriber::new(&c, "early", false).unwrap();
    assert!(!sub.is_connected());
    assert!(drain(&mut sub, 1, 10).is_empty());
    let mut publ = IpcPublisher::create(&c, "early", 1).unwrap();
    wait_attached(&mut sub, &publ);
    publ.offer(b"one").unwrap();
    assert_eq!(drain(&mut sub, 1, 3), vec![(0, b"one".to_vec())]);
    let first = publ.session_id();
    drop(publ);
    assert!(drain(&mut sub, 1, 3).is_empty());
    let events: Vec<_> = std::iter::from_fn(|| sub.next_event()).collect();
    assert_eq!(
        events,
        vec![
            SubscriberEvent::Connected {
                session_id: first,
                first_sequence: 0
            },
            SubscriberEvent::PublisherClosed { session_id: first },
        ]
    );
    assert!(
        !c.name.is_empty() && !c.file().exists(),
        "closing removes the segment"
    );
    let mut publ2 = IpcPublisher::create(&c, "early", 1).unwrap();
    wait_attached(&mut sub, &publ2);
    publ2.offer(b"two").unwrap();
    assert_eq!(drain(&mut sub, 1, 3), vec![(0, b"two".to_vec())]);
    assert_eq!(sub.session_id(), Some(publ2.session_id()));
}

#[test]
fn a_second_live_publisher_on_a_name_is_refused_naming_the_owner() {
    let c = cfg("dup", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let _publ = IpcPublisher::create(&c, "dup", 1).unwrap();
    let e = IpcPublisher::create(&c, "dup", 1).unwrap_err();
    assert!(
        matches!(e, OpenError::InUse { pid: Some(p), .. } if p == std::process::id()),
        "{e:?}"
    );
    assert!(e.to_string().contains("live publisher"), "{e}");
}

#[test]
fn segments_are_created_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let c = cfg("mode", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let publ = IpcPublisher::create(&c, "mode", 1).unwrap();
    let mode = std::fs::metadata(publ.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_subscriber_for_another_topic_is_refused() {
    let c = cfg("topic", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let _publ = IpcPublisher::create(&c, "md.eq.AAPL", 1).unwrap();
    let e = IpcSubscriber::new(&c, "md.eq.MSFT", false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'md.eq.AAPL'") && e.contains("'md.eq.MSFT'"),
        "{e}"
    );
}

#[test]
fn a_full_subscriber_table_is_refused_with_the_fix() {
    let mut c = cfg("full", 1 << 20, SlowSubscriberPolicy::BackPressure);
    c.cfg.max_subscribers = 2;
    let _publ = IpcPublisher::create(&c, "full", 1).unwrap();
    let _a = IpcSubscriber::new(&c, "full", false).unwrap();
    let _b = IpcSubscriber::new(&c, "full", false).unwrap();
    let e = IpcSubscriber::new(&c, "full", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_subscribers"), "{e}");
}

#[test]
fn a_dead_subscriber_holding_back_the_publisher_is_reaped() {
    let c = cfg("reap", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "reap", 1).unwrap();
    let sub = IpcSubscriber::new(&c, "reap", false).unwrap();
    // Make the slot look like it belongs to a process that has exited.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let seg = &publ.seg_for_tests();
    seg.u32_at(seg.slot_offset(0) + SLOT_PID)
        .store(dead_pid, Ordering::Relaxed);
    std::mem::forget(sub); // its slot stays active, as after kill -9
    let mut refused = 0u64;
    let mut sent = 0u64;
    while sent < 5_000 {
        match publ.offer(&[1u8; 32]) {
            Ok(_) => sent += 1,
            Err(OfferError::BackPressured) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(refused < 1_000_000, "the dead subscriber was never reaped");
    }
    assert!(refused > 0);
    assert_eq!(publ.counters().subscribers_reaped, 1);
    assert_eq!(publ.subscriber_count(), 0);
}

#[test]
fn a_blocking_subscriber_sleeps_until_a_message_is_published() {
    let c = cfg("block", 1 << 20, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "block", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "block", true).unwrap();
    let t = std::thread::spawn(move || {
        let mut idle = Blocking::new(5_000_000_000);
        let mut got = Vec::new();
        while got.len() < 3 {
            let n = sub.poll(&mut |m: Message<'_>| got.push(m.payload.to_vec()), 16);
            idle.idle(n, &mut sub);
        }
        got
    });
    for i in 0..3u8 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        publ.offer(&[i]).unwrap();
    }
    assert_eq!(t.join().unwrap(), vec![vec![0], vec![1], vec![2]]);
}

#[test]
fn threads_publish_and_three_subscribers_receive_every_message_intact() {
    let c = cfg("mt", 256 << 10, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "mt", 1).unwrap();
    let n = 300_000u64;
    let subs: Vec<_> = (0..3)
        .map(|_| IpcSubscriber::new(&c, "mt", false).unwrap())
        .collect();
    let handles: Vec<_> = subs
        .into_iter()
        .map(|mut sub| {
            std::thread::spawn(move || {
                let mut expected = 0u64;
                while expected < n {
                    sub.poll(
                        &mut |m: Message<'_>| {
                            assert_eq!(m.sequence, expected);
                            let len = (expected % 200) as usize;
                            assert_eq!(m.payload, &payload(expected, len)[..]);
                            expected += 1;
                        },
                        256,
                    );
                }
                sub.counters()
            })
        })
        .collect();
    for seq in 0..n {
        let msg = payload(seq, (seq % 200) as usize);
        while publ.offer(&msg) == Err(OfferError::BackPressured) {
            std::hint::spin_loop();
        }
    }
    for h in handles {
        let c = h.join().unwrap();
        assert_eq!((c.messages, c.lost, c.corrupt_frames), (n, 0, 0));
    }
}

#[test]
fn uri_parameters_are_validated_with_the_accepted_values() {
    use crate::uri::Uri;
    let ok = IpcConfig::from_uri(
        &Uri::parse("ipc://md?capacity=1m&policy=overwrite&max_subscribers=4").unwrap(),
    )
    .unwrap();
    assert_eq!(
        (ok.capacity, ok.policy, ok.max_subscribers),
        (1 << 20, SlowSubscriberPolicy::Overwrite, 4)
    );
    let cases = [
        ("ipc://md?capacity=1000", "power of two from 64k to 4g"),
        ("ipc://md?capacity=32k", "power of two"),
        (
            "ipc://md?policy=drop",
            "policy=backpressure or policy=overwrite",
        ),
        ("ipc://md?max_subscribers=0", "1 to 1024"),
        (
            "ipc://md?size=1m",
            "accepted parameters are capacity, policy, max_subscribers",
        ),
        ("ipc://bad/name", "letters, digits"),
        ("ipc://.hidden", "must not start with '.'"),
    ];
    for (text, needle) in cases {
        let e = IpcConfig::from_uri(&Uri::parse(text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle) && e.contains(text), "{text}: {e}");
    }
}

/// Regression: cleaning commit words ahead of a frame longer than CLEAN_AHEAD once overwrote
/// the end of that frame's own payload.
#[test]
fn frames_longer_than_the_clean_ahead_distance_arrive_intact_across_laps() {
    let c = cfg("long", 256 << 10, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "long", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "long", false).unwrap();
    let sizes = [4033, 4064, 4096, 4097, 8191, 20_000, 32_735];
    let mut expected = 0u64;
    let mut check = |m: Message<'_>| {
        let want = payload(m.sequence, sizes[m.sequence as usize % sizes.len()]);
        assert!(
            m.sequence == expected && m.payload == &want[..],
            "message {} corrupted",
            m.sequence
        );
        expected += 1;
    };
    for seq in 0..600u64 {
        let len = sizes[seq as usize % sizes.len()];
        while publ.offer(&payload(seq, len)) == Err(OfferError::BackPressured) {
            sub.poll(&mut check, usize::MAX);
        }
    }
    sub.poll(&mut check, usize::MAX);
    assert_eq!(expected, 600);
}

/// A publisher that replaces a dead one's segment must never be mistaken, while it does so,
/// for that dead publisher: a subscriber attaching at that moment would take the dead segment,
/// see it closed a moment later and end without a message (seen in CI as a `bench throughput`
/// subscriber reporting 0 of 1000 messages). Subscribers race each reclaim here, attaching in
/// a tight loop; each must end up on the new publisher's session.
#[test]
fn a_subscriber_racing_a_reclaim_never_attaches_to_the_dead_segment() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    for round in 0..2000u32 {
        let c = cfg("reclaim", 1 << 16, SlowSubscriberPolicy::BackPressure);
        // The dead publisher's segment: made, then its lock released (as by the kernel when
        // its process dies), never marked closed.
        let dead = super::segment::SegmentSpec {
            name: c.name.clone(),
            capacity: c.capacity,
            max_subscribers: c.max_subscribers,
            policy: c.policy,
            session_id: 1,
            stream_id: 7,
            topic: "reclaim".into(),
            dir: c.dir_spec(),
            generation: 0,
            first_sequence: 0,
        };
        drop(super::segment::Segment::create(&dead).unwrap());
        let go = Arc::new(AtomicBool::new(false));
        let racer = {
            let (c, go) = (c.clone(), go.clone());
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                loop {
                    let sub = IpcSubscriber::new(&c, "reclaim", false).unwrap();
                    if sub.is_connected() {
                        return sub.session_id();
                    }
                }
            })
        };
        go.store(true, Ordering::Release);
        let publ = IpcPublisher::create_with_session(&c, "reclaim", 7, 2).unwrap();
        assert!(publ.reclaimed_stale_segment());
        let attached_to = racer.join().unwrap();
        assert_eq!(
            attached_to,
            Some(2),
            "round {round}: a subscriber attached to the dead publisher's segment"
        );
    }
}

/// A frame the publisher should have written, by its model of the log: at log position
/// `position`, DATA with sequence `sequence` and `len` payload bytes, or a PAD to the ring's end
/// announcing `sequence`.
struct Expected {
    position: u64,
    sequence: u64,
    pad: bool,
    len: usize,
}

#[test]
fn the_log_holds_wire_data_and_pad_frames_field_for_field() {
    use peregrine_wire::data::{DataFrame, DataRepr, PadRepr, DATA_HEADER_LEN};
    use peregrine_wire::header::flags;
    const STREAM: u32 = 0x5157_4e45;
    let c = cfg("wire", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "wire", STREAM).unwrap();
    let max = publ.max_message_len();
    let capacity = c.capacity;
    // Sizes around the line boundaries, plus large ones so frames regularly miss the end of
    // the ring and a PAD fills it. No subscriber: nothing holds the publisher back.
    let sizes = [0, 1, 31, 32, 33, 95, 96, 1000, 4000, max - 1, max, 2500];
    let mut expected = Vec::new();
    let mut position = 0u64;
    for seq in 0..200u64 {
        let len = sizes[seq as usize % sizes.len()];
        let aligned = align_frame(DATA_HEADER_LEN + len) as u64;
        let to_end = capacity - position % capacity;
        if aligned > to_end {
            expected.push(Expected {
                position,
                sequence: seq,
                pad: true,
                len: to_end as usize,
            });
            position += to_end;
        }
        expected.push(Expected {
            position,
            sequence: seq,
            pad: false,
            len,
        });
        position += aligned;
        assert_eq!(publ.offer(&payload(seq, len)).unwrap(), seq);
    }
    // The live shared memory, through the file: the log follows the subscriber table.
    let file = std::fs::read(publ.path()).unwrap();
    let log = &file[log_offset(c.max_subscribers)..][..capacity as usize];
    // Everything the publisher wrote after a frame lies below `position + CLEAN_AHEAD` (the
    // last claim), so the frames of the last `capacity - CLEAN_AHEAD` bytes are intact.
    let intact = expected
        .iter()
        .filter(|e| e.position + capacity >= position + CLEAN_AHEAD)
        .collect::<Vec<_>>();
    assert!(intact.iter().filter(|e| e.pad).count() >= 1);
    assert!(intact.iter().filter(|e| !e.pad).count() >= 20);
    for e in &intact {
        let off = (e.position % capacity) as usize;
        let frame = DataFrame::new_checked(&log[off..])
            .unwrap_or_else(|err| panic!("frame at position {}: {err}", e.position));
        if e.pad {
            assert!(frame.is_pad());
            assert_eq!(off + e.len, capacity as usize, "a PAD fills the ring's end");
            assert_eq!(
                PadRepr::parse(&frame).unwrap(),
                PadRepr {
                    session_id: publ.session_id(),
                    sequence: e.sequence,
                    frame_length: e.len as u32,
                }
            );
            continue;
        }
        let data = DataRepr::parse(&frame).unwrap();
        assert_eq!(
            (
                data.session_id,
                data.stream_id,
                data.sequence,
                data.message_length,
                data.flags,
                frame.frame_length() as usize,
            ),
            (
                publ.session_id(),
                STREAM,
                e.sequence,
                e.len as u32,
                flags::BEGIN | flags::END,
                DATA_HEADER_LEN + e.len,
            ),
            "(session, stream, sequence, message length, flags, frame length) at position {}",
            e.position
        );
        assert!(
            data.payload == payload(e.sequence, e.len),
            "payload at position {}",
            e.position
        );
    }
    // The line the next frame goes to was cleaned: its commit word commits nothing.
    let next = (position % capacity) as usize + COMMIT_WORD;
    assert_eq!(
        u64::from_le_bytes(log[next..next + 8].try_into().unwrap()),
        UNCOMMITTED
    );
}

fn dead_spec(
    c: &TestCfg,
    topic: &str,
    policy: SlowSubscriberPolicy,
) -> super::segment::SegmentSpec {
    super::segment::SegmentSpec {
        name: c.name.clone(),
        capacity: c.capacity,
        max_subscribers: c.max_subscribers,
        policy,
        session_id: 1,
        stream_id: 7,
        topic: topic.into(),
        dir: c.dir_spec(),
        generation: 0,
        first_sequence: 0,
    }
}

/// Issue 14: a publisher killed with kill -9 left its segment behind for good. The next
/// publisher created in the directory removes every segment whose owner died (and leftovers of
/// creations that died half-way), counts them, and leaves live ones alone; a subscriber still
/// reading a removed segment keeps its mapping and drains it.
#[test]
fn segments_left_by_dead_publishers_are_removed_by_the_next_publisher_and_counted() {
    let c = cfg("scan", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let live_cfg = c.sibling("live");
    let live = IpcPublisher::create(&live_cfg, "live", 1).unwrap();
    let mut dead = IpcPublisher::create(&c, "scan", 1).unwrap();
    let mut reader = IpcSubscriber::new(&c, "scan", false).unwrap();
    for i in 0..10u64 {
        dead.offer(&payload(i, 40)).unwrap();
    }
    let other = c.sibling("other");
    let other_publisher = IpcPublisher::create(&other, "other", 1).unwrap();
    // Both die (creating one removes the dead ones already there).
    dead.die_for_tests();
    other_publisher.die_for_tests();
    let leftover = c.base.user_dir().join(".tmp.1.00000000.half-made");
    std::fs::write(&leftover, b"").unwrap();
    assert!(c.file().exists() && other.file().exists());

    let next = IpcPublisher::create(&c.sibling("next"), "next", 1).unwrap();
    assert_eq!(next.stale_segments_removed(), 3);
    assert!(!c.file().exists() && !other.file().exists() && !leftover.exists());
    assert!(live_cfg.file().exists(), "a live publisher's segment stays");
    assert_eq!(live.subscriber_count(), 0);
    // The reader of the removed segment gets all ten, then learns it was closed.
    let got = drain(&mut reader, 10, 10);
    assert_eq!(got.len(), 10);
    assert!(drain(&mut reader, 1, 3).is_empty());
    assert!(std::iter::from_fn(|| reader.next_event())
        .any(|e| matches!(e, SubscriberEvent::PublisherClosed { .. })));
}

/// Issue 14: any file under the name that no live publisher holds (an empty file, a stale
/// segment truncated to any length, a link to an empty file) is replaced by the next publisher,
/// and refused by a subscriber with a message naming it; nothing crashes.
#[test]
fn an_empty_truncated_or_linked_file_under_the_name_is_replaced_by_a_publisher_and_refused_by_a_subscriber(
) {
    let c = cfg("junk", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let empty = c.base.0.join("empty");
    std::fs::write(&empty, b"").unwrap();
    type Make<'a> = Box<dyn Fn(&std::path::Path) + 'a>;
    let junk: [(&str, Make<'_>); 5] = [
        ("empty file", Box::new(|p| std::fs::write(p, b"").unwrap())),
        (
            "link to an empty file",
            Box::new(|p| std::os::unix::fs::symlink(&empty, p).unwrap()),
        ),
        (
            "stale segment truncated to 0",
            Box::new(|p| stale_truncated(p, 0)),
        ),
        (
            "stale segment truncated to 100",
            Box::new(|p| stale_truncated(p, 100)),
        ),
        (
            "stale segment truncated to one page",
            Box::new(|p| stale_truncated(p, PAGE as u64)),
        ),
    ];
    fn stale_truncated(p: &std::path::Path, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(len)
            .unwrap();
    }
    super::dir::SegmentDir::open(&c.dir_spec()).unwrap();
    for (what, make) in &junk {
        if what.starts_with("stale") {
            drop(
                super::segment::Segment::create(&dead_spec(
                    &c,
                    "junk",
                    SlowSubscriberPolicy::BackPressure,
                ))
                .unwrap(),
            );
        }
        make(&c.file());
        match IpcSubscriber::new(&c, "junk", false) {
            Err(e) => assert!(
                e.to_string().contains(&c.file().display().to_string()),
                "{what}: {e}"
            ),
            Ok(s) => assert!(!s.is_connected(), "{what}: attached"),
        }
        let publ = IpcPublisher::create(&c, "junk", 1).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(publ.reclaimed_stale_segment(), "{what}");
        let mut sub = IpcSubscriber::new(&c, "junk", false).unwrap();
        let mut publ = publ;
        publ.offer(b"after").unwrap();
        assert_eq!(
            drain(&mut sub, 1, 3),
            vec![(0, b"after".to_vec())],
            "{what}"
        );
        drop(sub);
        drop(publ);
        assert!(
            std::fs::metadata(&empty).unwrap().len() == 0,
            "{what}: the link's target was written"
        );
    }
}

/// Issue 14: truncating a live segment killed its publisher and its subscribers with SIGBUS.
/// Now the faulting accesses complete (on zero pages), the publisher's offers fail with
/// `SegmentDamaged` naming the file (within one lap of the log), and the subscriber detaches
/// with a `SegmentDamaged` event naming it.
#[test]
fn a_segment_truncated_under_its_publisher_and_subscriber_is_an_error_naming_the_file_not_a_crash()
{
    for policy in [
        SlowSubscriberPolicy::BackPressure,
        SlowSubscriberPolicy::Overwrite,
    ] {
        let c = cfg("trunc", MIN_CAPACITY, policy);
        let mut publ = IpcPublisher::create(&c, "trunc", 1).unwrap();
        let mut sub = IpcSubscriber::new(&c, "trunc", false).unwrap();
        for i in 0..100 {
            publ.offer(&payload(i, 40)).unwrap();
        }
        assert_eq!(drain(&mut sub, 100, 10).len(), 100);
        // Another process of the user shrinks the file (here: this one, through its path).
        std::fs::OpenOptions::new()
            .write(true)
            .open(c.file())
            .unwrap()
            .set_len(0)
            .unwrap();
        let mut failed = None;
        for i in 0..MIN_CAPACITY {
            match publ.offer(&payload(i, 40)) {
                Ok(_) => {}
                Err(OfferError::BackPressured) => {
                    sub.poll(&mut |_m: Message<'_>| {}, usize::MAX);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let file = c.file();
        let e = failed.expect("offers go on failing to notice the truncation");
        assert!(
            matches!(e, OfferError::SegmentDamaged { path } if path == file),
            "{policy:?}: {e:?}"
        );
        assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        assert!(publ.is_damaged());
        assert!(matches!(
            publ.offer(b"x"),
            Err(OfferError::SegmentDamaged { .. })
        ));
        let mut events = Vec::new();
        for _ in 0..10 {
            sub.poll(&mut |_m: Message<'_>| {}, 16);
            events.extend(std::iter::from_fn(|| sub.next_event()));
        }
        assert!(
            events.iter().any(
                |e| matches!(e, SubscriberEvent::SegmentDamaged { reason, .. }
                if reason.contains(&file.display().to_string()))
            ),
            "{policy:?}: {events:?}"
        );
        assert!(!sub.is_connected());
        drop(sub);
        drop(publ);
        assert!(
            !file.exists(),
            "the closing publisher removes the damaged file"
        );
    }
    assert!(super::sigbus::repaired_faults() > 0);
}

/// The SIGBUS handler only takes faults in segment mappings: a truncated mapping of any other
/// file still ends the process with SIGBUS, as without it (checked in a child process: this
/// test binary, run again for this one test).
#[test]
fn a_sigbus_outside_segment_mappings_still_ends_the_process() {
    use std::os::unix::process::ExitStatusExt;
    const CHILD: &str = "PEREGRINE_TEST_SIGBUS_CHILD";
    if let Some(dir) = std::env::var_os(CHILD) {
        let dir = std::path::PathBuf::from(dir);
        // Install the handler, as any process with a segment has.
        let c = IpcConfig {
            base_dir: Some(dir.clone()),
            ..IpcConfig::new("child")
        };
        let _publ = IpcPublisher::create(&c, "child", 1).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join("foreign"))
            .unwrap();
        f.set_len(4096).unwrap();
        // A shared mapping of a 4096-byte file this test made, truncated on purpose.
        let map = memmap2::MmapOptions::new().len(4096).map_raw(&f).unwrap();
        f.set_len(0).unwrap();
        // SAFETY: in bounds of the mapping; the fault is the point.
        let v = unsafe { map.as_ptr().read_volatile() };
        panic!("read {v} from a truncated mapping without SIGBUS");
    }
    let base = TestBase::new("sigbus-child");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ipc::tests::a_sigbus_outside_segment_mappings_still_ends_the_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &base.0)
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small xorshift generator: the fuzz-like tests are reproducible by seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Issue 14: a header page of random bytes made openers panic (an unaligned tail position is a
/// misaligned atomic), hang (an odd tail version) or spin (a claim that always looks lapped).
/// Every field read from a segment is now checked before use: for many seeds, a subscriber on
/// a segment whose header page was scrambled (wholly, all but the descriptor, or a few words)
/// attaches or refuses, polls without panicking or hanging, and the next publisher replaces it.
#[test]
fn random_bytes_in_the_header_page_never_panic_or_hang_a_subscriber_or_the_next_publisher() {
    use std::os::unix::fs::FileExt;
    let c = cfg("fuzz", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    for seed in 1..=600u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let policy = if seed % 2 == 0 {
            SlowSubscriberPolicy::BackPressure
        } else {
            SlowSubscriberPolicy::Overwrite
        };
        drop(super::segment::Segment::create(&dead_spec(&c, "fuzz", policy)).unwrap());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(c.file())
            .unwrap();
        let mut page = vec![0u8; PAGE];
        file.read_exact_at(&mut page, 0).unwrap();
        let interesting = [0, 1, 7, 63, 64, u64::MAX, u64::MAX - 1, 1 << 62, 1 << 63];
        match seed % 3 {
            0 => page.iter_mut().for_each(|b| *b = rng.next() as u8),
            // The descriptor and the topic intact, the lines processes write scrambled.
            1 => page[64..TOPIC]
                .iter_mut()
                .for_each(|b| *b = rng.next() as u8),
            _ => {
                for _ in 0..1 + rng.next() % 6 {
                    let at = (rng.next() as usize % (TOPIC / 8)) * 8;
                    let v = if rng.next() % 2 == 0 {
                        interesting[rng.next() as usize % interesting.len()]
                    } else {
                        rng.next()
                    };
                    page[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        file.write_all_at(&page, 0).unwrap();
        // Held as a live publisher holds it, so that subscribers attach.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).unwrap();
        if let Ok(mut sub) = IpcSubscriber::new(&c, "fuzz", seed % 5 == 0) {
            for _ in 0..50 {
                sub.poll(&mut |_m: Message<'_>| {}, 64);
            }
            while sub.next_event().is_some() {}
        }
        rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock).unwrap();
        drop(file);
        let publ = IpcPublisher::create(&c, "fuzz", 1)
            .unwrap_or_else(|e| panic!("seed {seed}: the next publisher failed: {e}"));
        assert!(publ.reclaimed_stale_segment(), "seed {seed}");
    }
}

/// `group=` shares a segment with a group instead of the user alone: a directory of the group
/// (mode 0770), segments mode 0660 of that group; a subscriber attaches to them only when it
/// names the group too (it never looks there otherwise), and refuses a file of another group.
#[test]
fn a_group_named_by_both_sides_shares_its_segments_and_nothing_else() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let gid = rustix::process::getegid().as_raw();
    let mut c = cfg("group", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    c.cfg.group = Some(gid);
    let mut publ = IpcPublisher::create(&c, "group", 1).unwrap();
    let dir = c.base.0.join(format!("peregrine-group-{gid}"));
    let file = dir.join(&c.name);
    assert_eq!(publ.path(), file);
    let (d, f) = (
        std::fs::metadata(&dir).unwrap(),
        std::fs::metadata(&file).unwrap(),
    );
    assert_eq!((d.permissions().mode() & 0o7777, d.gid()), (0o770, gid));
    assert_eq!((f.permissions().mode() & 0o777, f.gid()), (0o660, gid));
    // Without group=, a subscriber looks in the user's own directory: nothing there.
    let mut mine_only = c.clone();
    mine_only.cfg.group = None;
    let mut alone = IpcSubscriber::new(&mine_only, "group", false).unwrap();
    let mut shared = IpcSubscriber::new(&c, "group", false).unwrap();
    publ.offer(b"to the group").unwrap();
    assert_eq!(
        drain(&mut shared, 1, 3),
        vec![(0, b"to the group".to_vec())]
    );
    assert!(drain(&mut alone, 1, 3).is_empty() && !alone.is_connected());
    // Group names resolve; unknown ones are refused naming the fix.
    let uri = |t: &str| IpcConfig::from_uri(&crate::uri::Uri::parse(t).unwrap());
    assert_eq!(uri("ipc://x?group=root").unwrap().group, Some(0));
    let e = uri("ipc://x?group=pgr-no-such-group")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such group"), "{e}");
    if rustix::process::geteuid().is_root() {
        // A file of another group in the group's directory (only root could put it there).
        let planted = c.sibling("planted");
        std::fs::write(dir.join(&planted.name), vec![0u8; PAGE]).unwrap();
        std::os::unix::fs::chown(dir.join(&planted.name), None, Some(gid + 1)).unwrap();
        let e = IpcSubscriber::new(&planted, "group", false).unwrap_err();
        assert!(e.to_string().contains("not the configured group"), "{e}");
    } else {
        // A group this user is not in is refused, naming the fix.
        let groups = rustix::process::getgroups().unwrap();
        let other = (1..60_000)
            .find(|g| *g != gid && !groups.iter().any(|m| m.as_raw() == *g))
            .unwrap();
        let mut c2 = c.sibling("nonmember");
        c2.cfg.group = Some(other);
        let e = IpcPublisher::create(&c2, "x", 1).unwrap_err().to_string();
        assert!(e.contains("not a member of group"), "{e}");
    }
}

/// Issue 14: a subscriber attached to a segment of another user. In the user's own directory
/// (where only root could put it), another user's file is refused, naming its owner. (The
/// attack by a real second user is in crates/cli/tests/shm_security.rs.)
#[test]
fn a_subscriber_refuses_a_segment_owned_by_another_user() {
    if !peregrine_testkit::root("it gives a segment to another user") {
        return;
    }
    let c = cfg("owner", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let publ = IpcPublisher::create(&c, "owner", 1).unwrap();
    std::os::unix::fs::chown(c.file(), Some(65534), None).unwrap();
    let e = IpcSubscriber::new(&c, "owner", false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("belongs to uid 65534") && e.contains(&c.file().display().to_string()),
        "{e}"
    );
    drop(publ);
}

/// The directory's checks: created 0700; one with another mode, or a link in its place, is
/// refused naming the fix (nothing is made through the link).
#[test]
fn the_user_directory_is_made_0700_and_one_with_another_mode_or_a_link_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let c = cfg("dirs", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let publ = IpcPublisher::create(&c, "dirs", 1).unwrap();
    let dir = c.base.user_dir();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir), 0o700);
    drop(publ);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = IpcPublisher::create(&c, "dirs", 1).unwrap_err().to_string();
    assert!(e.contains("mode is 0755") && e.contains("chmod 700"), "{e}");
    std::fs::remove_dir(&dir).unwrap();
    let elsewhere = c.base.0.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let e = IpcSubscriber::new(&c, "dirs", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// A back-pressure configuration whose publisher leaves behind subscribers that made no
/// progress for `ms` milliseconds of refused offers (layout invariant 6).
fn stall_cfg(tag: &str, ms: u64) -> TestCfg {
    let mut c = cfg(tag, MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    c.cfg.flow_timeout_ns = ms * 1_000_000;
    c
}

/// Offers `payload(seq, 32)` for `seq` from `*next` until `until(publisher, next)` holds,
/// calling `reader` after every refused offer; returns when the first offer was refused.
/// Panics after 20 s.
fn publish_until(
    publ: &mut IpcPublisher,
    next: &mut u64,
    mut reader: impl FnMut(&IpcPublisher),
    until: impl Fn(&IpcPublisher, u64) -> bool,
) -> Option<std::time::Instant> {
    let start = std::time::Instant::now();
    let mut first_refusal = None;
    while !until(publ, *next) {
        // Read before the offer, so that the first refusal is never later than the
        // publisher's own clock read for it.
        let before = std::time::Instant::now();
        match publ.offer(&payload(*next, 32)) {
            Ok(seq) => {
                assert_eq!(seq, *next);
                *next += 1;
            }
            Err(OfferError::BackPressured) => {
                first_refusal.get_or_insert(before);
                reader(publ);
            }
            Err(e) => panic!("{e}"),
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "the publisher never got there: generation {}, {} sent",
            publ.generation(),
            *next
        );
    }
    first_refusal
}

/// Everything a subscriber received, and its events.
#[derive(Default)]
struct Received {
    messages: Vec<(u64, Vec<u8>)>,
    events: Vec<SubscriberEvent>,
}

impl Received {
    fn poll(&mut self, sub: &mut IpcSubscriber, limit: usize) -> usize {
        let n = sub.poll(
            &mut |m: Message<'_>| self.messages.push((m.sequence, m.payload.to_vec())),
            limit,
        );
        while let Some(e) = sub.next_event() {
            self.events.push(e);
        }
        n
    }
    /// Every message intact, in sequence order, and the sequences those given, in order.
    fn assert_sequences(&self, want: impl Iterator<Item = u64>) {
        let got: Vec<u64> = self.messages.iter().map(|m| m.0).collect();
        assert_eq!(got, want.collect::<Vec<_>>());
        for (seq, p) in &self.messages {
            assert_eq!(p, &payload(*seq, 32), "message {seq} corrupted");
        }
    }
}

#[test]
fn a_subscriber_that_stops_reading_is_left_on_the_old_log_and_told_exactly_what_it_missed() {
    let c = stall_cfg("stall", 100);
    let mut publ = IpcPublisher::create(&c, "stall", 1).unwrap();
    let session = publ.session_id();
    let mut live = IpcSubscriber::new(&c, "stall", false).unwrap();
    let mut stalled = IpcSubscriber::new(&c, "stall", false).unwrap();
    let (mut l, mut s) = (Received::default(), Received::default());
    // The stalled subscriber reads a few messages, then nothing: it holds a message in place
    // (a handler of a stopped process would) across the switch.
    let mut next = 0;
    publish_until(&mut publ, &mut next, |_| {}, |_, n| n == 10);
    assert_eq!(s.poll(&mut stalled, 10), 10);
    // The live one reads all there is at every refusal, but not once the publisher has moved
    // to the new log: there, the publisher must wait for it (its reservation) rather than write
    // over the new log's start.
    let first_refusal = publish_until(
        &mut publ,
        &mut next,
        |p| {
            if p.generation() == 0 {
                l.poll(&mut live, usize::MAX);
            }
        },
        |p, _| p.generation() == 1,
    )
    .expect("offers were refused before the switch");
    // The stall clock starts at a refused offer: never before flow_timeout_ms of them.
    assert!(first_refusal.elapsed() >= std::time::Duration::from_millis(100));
    let switched_at = next;
    assert_eq!(publ.counters().flow_dropped, 1);
    assert_eq!(
        publ.subscriber_count(),
        1,
        "the live subscriber's slot was kept"
    );
    // Two logs' worth more: the new log's first message is gone when the stalled one returns.
    let total = next + 2 * (MIN_CAPACITY / 64);
    publish_until(
        &mut publ,
        &mut next,
        |_| {
            l.poll(&mut live, usize::MAX);
        },
        |_, n| n == total,
    );
    while l.messages.len() < total as usize {
        assert!(l.poll(&mut live, usize::MAX) > 0 || live.is_connected());
        assert!(live.is_connected());
    }
    l.assert_sequences(0..total);
    assert_eq!(
        publ.generation(),
        1,
        "the live subscriber was never left behind"
    );
    assert_eq!(
        l.events,
        vec![SubscriberEvent::Connected {
            session_id: session,
            first_sequence: 0
        }],
        "the live subscriber went on to the new log with nothing lost and no event"
    );
    assert_eq!(live.counters().lost, 0);
    assert_eq!(
        publ.older_logs_for_tests(),
        1,
        "kept for the stalled subscriber"
    );
    // The stalled subscriber resumes: the old log, intact up to the switch, then an exact loss.
    for _ in 0..1_000 {
        s.poll(&mut stalled, usize::MAX);
        if s.messages.last().is_some_and(|m| m.0 == total - 1) {
            break;
        }
    }
    let Some(&SubscriberEvent::Lost {
        session_id,
        from_sequence,
        count,
    }) = s.events.get(1)
    else {
        panic!("no Lost event after Connected: {:?}", s.events);
    };
    assert_eq!((session_id, from_sequence), (session, switched_at));
    assert!(count > 0);
    assert_eq!(s.events.len(), 2, "{:?}", s.events);
    s.assert_sequences((0..switched_at).chain(switched_at + count..total));
    assert_eq!(stalled.counters().lost, count);
    assert!(stalled.is_connected());
    assert_eq!(publ.subscriber_count(), 2);
    // And it is a subscriber of the new log like any other.
    publ.offer(&payload(total, 32)).unwrap();
    assert_eq!(s.poll(&mut stalled, usize::MAX), 1);
    assert_eq!(s.messages.last().unwrap().0, total);
    // Nobody reads the old log any more: a lap later the publisher has let it go.
    let mut next = total + 1;
    publish_until(
        &mut publ,
        &mut next,
        |_| {
            l.poll(&mut live, usize::MAX);
            s.poll(&mut stalled, usize::MAX);
        },
        |_, n| n == total + 1 + MIN_CAPACITY / 64,
    );
    assert_eq!(publ.older_logs_for_tests(), 0);
    assert_eq!(publ.generation(), 1);
}

#[test]
fn a_stalled_subscriber_that_returns_while_the_new_log_holds_its_start_loses_nothing() {
    let c = stall_cfg("stall-back", 50);
    let mut publ = IpcPublisher::create(&c, "stall-back", 1).unwrap();
    let mut stalled = IpcSubscriber::new(&c, "stall-back", false).unwrap();
    let mut s = Received::default();
    let mut next = 0;
    // Its only subscriber stalls: the publisher goes on in a new log with no reservation.
    publish_until(&mut publ, &mut next, |_| {}, |p, _| p.generation() == 1);
    assert_eq!(publ.subscriber_count(), 0);
    let total = next + 100;
    publish_until(&mut publ, &mut next, |_| {}, |_, n| n == total);
    while s.messages.len() < total as usize {
        assert!(
            s.poll(&mut stalled, usize::MAX) > 0,
            "{} received",
            s.messages.len()
        );
    }
    s.assert_sequences(0..total);
    assert_eq!(s.events.len(), 1, "only Connected: {:?}", s.events);
    assert_eq!(stalled.counters().lost, 0);
    assert_eq!(publ.counters().flow_dropped, 1);
}

/// A subscriber still draining the old log, slowly but steadily, holds its reservation in the
/// new one: its progress there is progress, and it is never left behind (the rule of issue
/// 35: a subscriber slower than its publisher is back-pressured, not dropped).
#[test]
fn a_slow_subscriber_draining_the_old_log_keeps_its_place_in_the_new_one() {
    let c = stall_cfg("stall-slow", 100);
    let mut publ = IpcPublisher::create(&c, "stall-slow", 1).unwrap();
    let mut slow = IpcSubscriber::new(&c, "stall-slow", false).unwrap();
    let _stalled = IpcSubscriber::new(&c, "stall-slow", false).unwrap();
    let mut r = Received::default();
    let mut next = 0;
    // The slow one reads a message a millisecond: at the switch (a flow timeout, 100 ms, after
    // the log filled) it has read about a tenth of the log. Draining the rest takes it about
    // ten flow timeouts, while the new log fills and waits for it.
    let slow_read = |r: &mut Received, slow: &mut IpcSubscriber| {
        std::thread::sleep(std::time::Duration::from_millis(1));
        r.poll(slow, 1);
    };
    publish_until(
        &mut publ,
        &mut next,
        |_| slow_read(&mut r, &mut slow),
        |p, _| p.generation() == 1,
    );
    let behind = next - r.messages.len() as u64;
    assert!(
        behind > MIN_CAPACITY / 64 / 2,
        "only {behind} behind at the switch"
    );
    // More than the new log holds: the publisher must wait for the reservation.
    let total = next + MIN_CAPACITY / 64 + 100;
    let start = std::time::Instant::now();
    while r.messages.len() < total as usize {
        if next < total {
            match publ.offer(&payload(next, 32)) {
                Ok(_) => {
                    next += 1;
                    continue;
                }
                Err(OfferError::BackPressured) => {}
                Err(e) => panic!("{e}"),
            }
        }
        slow_read(&mut r, &mut slow);
        assert_eq!(publ.generation(), 1, "the slow subscriber was left behind");
        assert!(start.elapsed() < std::time::Duration::from_secs(60));
    }
    assert_eq!(publ.generation(), 1, "the slow subscriber was left behind");
    r.assert_sequences(0..total);
    assert_eq!(r.events.len(), 1, "only Connected: {:?}", r.events);
    assert_eq!(publ.counters().flow_dropped, 1);
}

/// A subscriber left on an old log that resumes after its publisher closed and left (the name
/// gone) is told exactly what it missed, from the old log's `end_sequence`; one whose
/// publisher died learns that it died.
#[test]
fn a_subscriber_left_behind_learns_where_the_session_ended_once_its_publisher_is_gone() {
    for die in [false, true] {
        let c = stall_cfg("stall-end", 50);
        let mut publ = IpcPublisher::create(&c, "stall-end", 1).unwrap();
        let session = publ.session_id();
        let mut stalled = IpcSubscriber::new(&c, "stall-end", false).unwrap();
        let mut s = Received::default();
        let mut next = 0;
        publish_until(&mut publ, &mut next, |_| {}, |p, _| p.generation() == 1);
        let switched_at = next;
        publish_until(&mut publ, &mut next, |_| {}, |_, n| n == switched_at + 10);
        if die {
            publ.die_for_tests();
        } else {
            drop(publ);
        }
        // A killed publisher leaves its segment under the name, a closed one removes it.
        assert_eq!(c.file().exists(), die);
        for _ in 0..100 {
            s.poll(&mut stalled, usize::MAX);
        }
        assert!(!stalled.is_connected(), "die: {die}: {:?}", s.events);
        s.assert_sequences(0..switched_at);
        let ended = if die {
            SubscriberEvent::PublisherDied {
                session_id: session,
            }
        } else {
            SubscriberEvent::PublisherClosed {
                session_id: session,
            }
        };
        let mut want = vec![SubscriberEvent::Connected {
            session_id: session,
            first_sequence: 0,
        }];
        if !die {
            want.push(SubscriberEvent::Lost {
                session_id: session,
                from_sequence: switched_at,
                count: 10,
            });
        }
        want.push(ended);
        assert_eq!(s.events, want, "die: {die}");
    }
}

/// A back-pressure poll publishes its position every 64 messages, not only at its end: a
/// subscriber whose handler is slow still shows progress (and makes room) within a long poll.
#[test]
fn a_long_poll_publishes_its_position_every_64_messages() {
    let c = cfg("pos64", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
    let mut publ = IpcPublisher::create(&c, "pos64", 1).unwrap();
    let mut sub = IpcSubscriber::new(&c, "pos64", false).unwrap();
    for _ in 0..200 {
        publ.offer(&[3u8; 32]).unwrap();
    }
    let seg = publ.seg_for_tests();
    let position = seg.u64_at(seg.slot_offset(0) + SLOT_POSITION);
    // What the publisher sees while message k is being handled.
    let mut seen = Vec::new();
    let n = sub.poll(
        &mut |_m: Message<'_>| seen.push(position.load(Ordering::Relaxed)),
        usize::MAX,
    );
    assert_eq!(n, 200);
    // A 32-byte message and its header take one 64-byte line.
    assert_eq!((seen[0], seen[63]), (0, 0));
    assert_eq!((seen[64], seen[127]), (64 * 64, 64 * 64));
    assert_eq!((seen[128], seen[199]), (128 * 64, 192 * 64));
    assert_eq!(position.load(Ordering::Relaxed), 200 * 64);
}

/// Every field of the descriptor is checked when a subscriber opens a segment: one that no
/// publisher of this build writes is refused, naming what is wrong (a segment of layout
/// version 1, from a build before successor logs, among them).
#[test]
fn a_descriptor_field_out_of_range_is_refused_naming_it() {
    use std::os::unix::fs::FileExt;
    let cases: [(usize, &[u8], &str); 8] = [
        (MAGIC, b"PGSHMv00", "bad magic"),
        (
            VERSION,
            &1u32.to_le_bytes(),
            "layout version 1, this build reads version 2",
        ),
        (
            CAPACITY,
            &(3u64 << 20).to_le_bytes(),
            "not a power of two in range",
        ),
        (
            MAX_SUBSCRIBERS,
            &0u32.to_le_bytes(),
            "subscriber table of 0 slots",
        ),
        (
            POLICY,
            &7u32.to_le_bytes(),
            "unknown slow-subscriber policy",
        ),
        (
            MAX_MESSAGE,
            &1u32.to_le_bytes(),
            "maximum message length inconsistent",
        ),
        (
            TOPIC_LEN,
            &2000u32.to_le_bytes(),
            "topic name longer than 1024 bytes",
        ),
        (
            FIRST_SEQUENCE,
            &(1u64 << 62).to_le_bytes(),
            "first sequence beyond",
        ),
    ];
    for (offset, bytes, what) in cases {
        let c = cfg("desc", MIN_CAPACITY, SlowSubscriberPolicy::BackPressure);
        let _publ = IpcPublisher::create(&c, "desc", 1).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(c.file())
            .unwrap();
        f.write_all_at(bytes, offset as u64).unwrap();
        match IpcSubscriber::new(&c, "desc", false) {
            Err(OpenError::Incompatible { what: got, .. }) => {
                assert!(got.contains(what), "offset {offset}: {got}")
            }
            other => panic!("offset {offset}: {other:?}"),
        }
    }
}
