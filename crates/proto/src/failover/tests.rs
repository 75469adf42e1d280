//! The arbiter on a virtual clock: members in step, a member's death, gaps filled by the
//! other member, declared when nobody can fill them or after the window, disagreements, the
//! jump bound, the bounds; and a property test over random interleavings.

use super::*;
use proptest::prelude::*;

const A: u32 = 0xa;
const B: u32 = 0xb;
const MS: u64 = 1_000_000;

fn msg(seq: u64) -> Vec<u8> {
    format!("#{seq}........").into_bytes()
}

/// Feeds one message and returns what was delivered because of it (in place and held ones
/// that became ready), as (sequence, member).
fn feed(a: &mut Arbiter, member: u32, seq: u64, now: u64) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    if a.on_message(member, seq, &msg(seq), now) == Verdict::Deliver {
        out.push((seq, member));
    }
    drain(a, &mut out);
    a.check_invariants().unwrap();
    out
}

fn drain(a: &mut Arbiter, out: &mut Vec<(u64, u32)>) {
    while let Some(r) = a.pop_ready() {
        assert_eq!(r.message, msg(r.sequence));
        out.push((r.sequence, r.member));
    }
}

fn events(a: &mut Arbiter) -> Vec<ArbiterEvent> {
    std::iter::from_fn(|| a.next_event()).collect()
}

fn arbiter() -> Arbiter {
    Arbiter::new(ArbiterConfig::default()).unwrap()
}

#[test]
fn two_members_in_step_deliver_each_sequence_once_from_the_first_copy() {
    let mut a = arbiter();
    let mut got = Vec::new();
    for s in 1..=100 {
        let (first, second) = if s % 3 == 0 { (B, A) } else { (A, B) };
        got.extend(feed(&mut a, first, s, s * MS));
        got.extend(feed(&mut a, second, s, s * MS));
    }
    let want: Vec<(u64, u32)> = (1..=100)
        .map(|s| (s, if s % 3 == 0 { B } else { A }))
        .collect();
    assert_eq!(got, want);
    let c = a.counters();
    assert_eq!((c.delivered, c.duplicates, c.lost), (100, 100, 0));
    assert!(events(&mut a).is_empty());
}

#[test]
fn the_survivor_carries_on_when_the_leading_member_dies_without_loss_or_duplicate() {
    let mut a = arbiter();
    let mut got = Vec::new();
    // A leads by 3: B's copies of 1..=10 come after A's.
    for s in 1..=10 {
        got.extend(feed(&mut a, A, s, s * MS));
        if s > 3 {
            got.extend(feed(&mut a, B, s - 3, s * MS));
        }
    }
    // A dies (SIGKILL: its session goes quiet, then is declared dead).
    a.member_gone(A, 20 * MS);
    for s in 8..=20 {
        got.extend(feed(&mut a, B, s, (20 + s) * MS));
    }
    let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    assert!(got[..10].iter().all(|g| g.1 == A) && got[10..].iter().all(|g| g.1 == B));
    assert_eq!(a.counters().lost, 0);
    assert!(events(&mut a).is_empty());
}

#[test]
fn a_gap_one_member_skipped_is_filled_by_the_other_in_order() {
    let mut a = arbiter();
    let mut got = Vec::new();
    for s in 1..=2 {
        got.extend(feed(&mut a, A, s, 0));
        got.extend(feed(&mut a, B, s, 0));
    }
    // A's session lost 3 and 4 for good; its 5 and 6 are held while B is behind them.
    assert!(feed(&mut a, A, 5, MS).is_empty());
    assert!(feed(&mut a, A, 6, MS).is_empty());
    assert_eq!(a.held(), (2, msg(5).len() * 2));
    assert_eq!(a.next_deadline(), Some(MS + 100 * MS));
    got.extend(feed(&mut a, B, 3, 2 * MS));
    got.extend(feed(&mut a, B, 4, 2 * MS));
    got.extend(feed(&mut a, B, 5, 2 * MS));
    let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    assert_eq!(&got[2..], &[(3, B), (4, B), (5, A), (6, A)]);
    assert_eq!(a.held(), (0, 0));
    assert_eq!(a.next_deadline(), None);
    assert_eq!(a.counters().lost, 0);
}

#[test]
fn a_gap_every_live_member_went_past_is_lost_at_once_exactly() {
    let mut a = arbiter();
    let mut got = feed(&mut a, A, 1, 0);
    got.extend(feed(&mut a, B, 1, 0));
    // Both members' sessions lost 2..=4 (say, the two publishers' feed dropped them).
    got.extend(feed(&mut a, A, 5, MS));
    assert!(got.len() == 1, "B may still send 2: {got:?}");
    got.extend(feed(&mut a, B, 5, MS));
    assert_eq!(got, vec![(1, A), (5, A)]);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost { from: 2, count: 3 }]
    );
    assert_eq!(a.counters().lost, 3);
}

#[test]
fn a_gap_is_lost_when_the_member_that_could_fill_it_dies() {
    let mut a = arbiter();
    feed(&mut a, A, 1, 0);
    feed(&mut a, B, 1, 0);
    assert!(feed(&mut a, A, 4, MS).is_empty());
    a.member_gone(B, 2 * MS);
    let mut got = Vec::new();
    drain(&mut a, &mut got);
    assert_eq!(got, vec![(4, A)]);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost { from: 2, count: 2 }]
    );
}

#[test]
fn a_stopped_member_is_waited_for_one_window_then_its_late_copies_are_duplicates() {
    let mut a = arbiter();
    feed(&mut a, A, 1, 0);
    feed(&mut a, B, 1, 0);
    assert!(feed(&mut a, A, 3, 10 * MS).is_empty());
    a.poll(10 * MS + 99 * MS);
    assert!(a.pop_ready().is_none(), "still inside the window");
    a.poll(10 * MS + 100 * MS);
    let mut got = Vec::new();
    drain(&mut a, &mut got);
    assert_eq!(got, vec![(3, A)]);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost { from: 2, count: 1 }]
    );
    // B wakes up: its 2 and 3 come too late and are dropped, never delivered twice.
    assert!(feed(&mut a, B, 2, 200 * MS).is_empty());
    assert!(feed(&mut a, B, 3, 200 * MS).is_empty());
    assert_eq!(feed(&mut a, B, 4, 200 * MS), vec![(4, B)]);
    assert_eq!(a.counters().duplicates, 3);
}

#[test]
fn members_that_disagree_are_reported_with_both_and_the_first_copy_stands() {
    let mut a = arbiter();
    assert_eq!(a.on_message(A, 1, b"bid 10", 0), Verdict::Deliver);
    assert_eq!(a.on_message(B, 1, b"bid 11", 0), Verdict::Duplicate);
    assert_eq!(a.on_message(B, 2, b"ask 12", 0), Verdict::Deliver);
    assert_eq!(a.on_message(A, 2, b"ask 12", 0), Verdict::Duplicate);
    // Held copies are compared too.
    assert_eq!(a.on_message(A, 4, b"x", 0), Verdict::Held);
    assert_eq!(a.on_message(B, 4, b"y", 0), Verdict::Duplicate);
    assert_eq!(
        events(&mut a),
        vec![
            ArbiterEvent::Disagreement {
                sequence: 1,
                delivered_from: A,
                other: B
            },
            ArbiterEvent::Disagreement {
                sequence: 4,
                delivered_from: A,
                other: B
            },
            // Both members went past 3 without sending it.
            ArbiterEvent::Lost { from: 3, count: 1 }
        ]
    );
    assert_eq!(a.pop_ready().map(|r| r.message), Some(b"x".to_vec()));
    assert_eq!(a.counters().disagreements, 2);
}

#[test]
fn one_message_beyond_the_jump_bound_moves_nothing_until_a_second_confirms_it() {
    let cfg = ArbiterConfig {
        max_jump: 100,
        ..ArbiterConfig::default()
    };
    let mut a = Arbiter::new(cfg).unwrap();
    feed(&mut a, A, 1, 0);
    // A stray (or forged) far sequence: kept aside, nothing declared lost, A not moved.
    assert_eq!(a.on_message(A, 1_000_000, b"far", MS), Verdict::Dropped);
    a.poll(500 * MS);
    assert!(events(&mut a).is_empty());
    assert_eq!(feed(&mut a, A, 2, 500 * MS), vec![(2, A)]);
    // A far sequence confirmed by the member's next one (the group restarted further on):
    // with no other live member behind, the skipped range is lost and delivery resumes there.
    assert_eq!(
        a.on_message(A, 5_000, &msg(5_000), 600 * MS),
        Verdict::Dropped
    );
    let got = feed(&mut a, A, 5_001, 600 * MS);
    assert_eq!(got, vec![(5_000, A), (5_001, A)]);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost {
            from: 3,
            count: 4_997
        }]
    );
    let c = a.counters();
    // The stray was dropped when A went on in order (not counted as replaced).
    assert_eq!(
        (c.jumps_held, c.jumps_discarded, c.jumps_confirmed),
        (2, 0, 1)
    );
}

#[test]
fn held_bytes_are_bounded_and_what_did_not_fit_is_reported_lost() {
    let cfg = ArbiterConfig {
        max_held_bytes: 2 * msg(5).len(),
        window_ns: 10 * MS,
        ..ArbiterConfig::default()
    };
    let mut a = Arbiter::new(cfg).unwrap();
    feed(&mut a, A, 1, 0);
    feed(&mut a, B, 1, 0);
    for s in 3..=5 {
        feed(&mut a, A, s, 0);
    }
    assert_eq!(a.held().0, 2);
    assert_eq!(a.counters().held_overflow, 1);
    a.poll(10 * MS);
    let mut got = Vec::new();
    drain(&mut a, &mut got);
    assert_eq!(got, vec![(3, A), (4, A)]);
    // 5 did not fit: once its window passes (B still stuck at 1) it is declared lost too.
    a.poll(20 * MS);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost { from: 2, count: 1 }]
    );
    a.member_gone(B, 21 * MS);
    assert_eq!(
        events(&mut a),
        Vec::<ArbiterEvent>::new(),
        "nothing is held, so nothing is declared: 5 is reported when a later one arrives"
    );
    assert_eq!(feed(&mut a, A, 6, 22 * MS), vec![(6, A)]);
    assert_eq!(
        events(&mut a),
        vec![ArbiterEvent::Lost { from: 5, count: 1 }]
    );
}

#[test]
fn members_past_the_limit_are_refused_until_one_is_gone() {
    let mut a = arbiter();
    for m in 0..MAX_MEMBERS as u32 {
        a.on_message(m, 1, b"m", 0);
    }
    assert_eq!(a.on_message(9999, 2, b"m", 0), Verdict::Dropped);
    assert_eq!(a.counters().members_refused, 1);
    a.member_gone(0, 0);
    assert_eq!(a.on_message(9999, 2, b"m", 0), Verdict::Deliver);
}

#[test]
fn bad_settings_are_refused_with_the_fix() {
    let e = Arbiter::new(ArbiterConfig {
        history: 1000,
        ..ArbiterConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("1000 is not a power of two"), "{e}");
    let e = Arbiter::new(ArbiterConfig {
        max_jump: 0,
        ..ArbiterConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("use 1 or more"), "{e}");
}

/// One step of a random run: a member sends its next sequence (or skips some), a member
/// goes, or time passes.
#[derive(Debug, Clone)]
enum Step {
    Send { member: usize, skip: u64 },
    Gone { member: usize },
    Tick { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..3usize, prop_oneof![6 => Just(0u64), 1 => 1..4u64])
            .prop_map(|(member, skip)| Step::Send { member, skip }),
        1 => (0..3usize).prop_map(|member| Step::Gone { member }),
        2 => (1..60u64).prop_map(|ms| Step::Tick { ms }),
    ]
}

proptest! {
    /// Whatever the interleaving, skips, deaths and timing: deliveries are strictly
    /// increasing, each with the content its sequence was sent with; every sequence from the
    /// first to the last delivered is delivered or reported lost, exactly once; and a sequence
    /// was reported lost only if no member sent it before it was declared, or the window passed.
    #[test]
    fn every_sequence_is_delivered_or_reported_lost_exactly_once(steps in proptest::collection::vec(step(), 1..300)) {
        let mut a = arbiter();
        let mut pos = [1u64; 3];
        let mut gone = [false; 3];
        let mut now = 0u64;
        let mut delivered: Vec<u64> = Vec::new();
        let mut lost: Vec<u64> = Vec::new();
        let mut sent_before_declared: std::collections::BTreeSet<u64> = Default::default();
        let mut window_passed = false;
        for st in steps {
            match st {
                Step::Send { member, skip } => {
                    if gone[member] { continue; }
                    pos[member] += skip;
                    let s = pos[member];
                    pos[member] += 1;
                    sent_before_declared.insert(s);
                    if a.on_message(member as u32, s, &msg(s), now) == Verdict::Deliver {
                        delivered.push(s);
                    }
                }
                Step::Gone { member } => {
                    gone[member] = true;
                    a.member_gone(member as u32, now);
                }
                Step::Tick { ms } => {
                    now += ms * MS;
                    if a.next_deadline().is_some_and(|d| now >= d) { window_passed = true; }
                    a.poll(now);
                }
            }
            while let Some(r) = a.pop_ready() {
                prop_assert_eq!(&r.message, &msg(r.sequence));
                delivered.push(r.sequence);
            }
            while let Some(e) = a.next_event() {
                if let ArbiterEvent::Lost { from, count } = e {
                    for s in from..from + count {
                        prop_assert!(window_passed || !sent_before_declared.contains(&s),
                            "{} declared lost though a member sent it and no window passed", s);
                        lost.push(s);
                    }
                }
            }
            a.check_invariants().map_err(TestCaseError::fail)?;
        }
        prop_assert!(delivered.windows(2).all(|w| w[0] < w[1]), "{:?}", delivered);
        if let (Some(&first), Some(&last)) = (delivered.first(), delivered.last()) {
            let mut all: Vec<u64> = delivered.iter().chain(lost.iter()).copied().filter(|&s| s <= last).collect();
            all.sort_unstable();
            prop_assert_eq!(all, (first..=last).collect::<Vec<_>>());
        }
        let c = a.counters();
        prop_assert_eq!(c.delivered, delivered.len() as u64);
        prop_assert_eq!(c.lost, lost.len() as u64);
    }
}
