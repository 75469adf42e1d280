//! Loom models of the shared-memory log's lock-free protocol (`src/ipc/layout.rs`):
//!
//! 1. the commit word (invariant 1), cleaning ahead across a wrap (invariant 2) and the
//!    back-pressure hand-over of lines (invariant 4), with one publisher and one in-place
//!    subscriber;
//! 2. the overwrite-mode claim check (invariant 3): a subscriber that copies racing bytes and
//!    validates the copy against the publisher's claim never accepts a torn copy;
//! 3. the hand-over to a successor log (invariant 6): a subscriber that finds the old log
//!    closed has drained every frame of it, and goes on in the new log at the reservation the
//!    publisher made for it, which the new log's writes respect.
//!
//! Run with `cargo test --workspace --features peregrine-transport/loom-models --test loom_ipc`.
//!
//! The models are the production steps scaled down: positions count 64-byte lines, frames are
//! one or two lines, the ring has 2 or 4 lines and `CLEAN_AHEAD` is 2 lines. Each step names the
//! function of `src/ipc/publisher.rs` or `src/ipc/subscriber.rs` it stands for. What the
//! protocol makes safe to write or read with plain accesses is a `loom::cell::UnsafeCell`, so
//! loom reports a data race if an ordering is too weak; what production reads while it may race
//! (overwrite mode's copy) is relaxed atomics. Each model takes its orderings as a parameter, and
//! the `..._is_caught` tests weaken one and check that loom finds the failure: the models can
//! fail.
#![cfg(feature = "loom-models")]
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use peregrine_transport::ipc::layout::{claim_overlaps, UNCOMMITTED};
use peregrine_wire::data::words;
use peregrine_wire::header::FrameType;

/// Bytes per line (`layout::FRAME_ALIGN`); the models count positions in lines.
const LINE: u64 = 64;

/// Runs `f` in every interleaving with at most `preemptions` preemptions (LOOM_MAX_PREEMPTIONS
/// overrides). The bounds below keep each model within seconds in release mode; three already
/// find every failure the `..._is_caught` tests plant.
fn explore(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound.get_or_insert(preemptions);
    b.check(f);
}

// ---------------------------------------------------------------------------------------------
// Model 1: commit word, clean ahead, back-pressure.

/// Lines in the ring of model 1.
const RING_LINES: u64 = 4;
/// `CLEAN_AHEAD` in lines.
const CLEAN_AHEAD_LINES: u64 = 2;

/// The frames model 1 publishes, in lines. Positions 0, 1-2, 3, 4-5 (wrapping to lines 0-1)
/// and 6 (line 2). Frame 1's payload covers line 2's commit word with the very sequence, 4,
/// that the subscriber expects there a lap later: only cleaning ahead stops it reading the
/// stale payload as a commit.
const FRAMES: [u64; 5] = [1, 2, 1, 2, 1];
/// What frame 1's payload holds where line 2's commit word is.
const PLANTED: u64 = 4;

/// One line of the log.
struct Line {
    /// The frame's `sequence` field, its commit word (`layout::COMMIT_WORD`), or payload bytes
    /// when a longer frame covers this line.
    commit: AtomicU64,
    /// The rest of the line, written with plain stores: the `words::LENGTH_TYPE` word of a frame
    /// that starts here (the other header words add nothing to the model) and a payload word.
    body: UnsafeCell<[u64; 2]>,
}

struct Log {
    lines: Vec<Line>,
    /// `layout::CLAIM_POSITION`.
    claim: AtomicU64,
    /// The subscriber's `SLOT_POSITION`: what back-pressure waits for.
    subscriber_position: AtomicU64,
}

impl Log {
    fn new(lines: u64) -> Self {
        Log {
            // segment.rs `Segment::init`: every line starts uncommitted (invariant 2).
            lines: (0..lines)
                .map(|_| Line {
                    commit: AtomicU64::new(UNCOMMITTED),
                    body: UnsafeCell::new([0; 2]),
                })
                .collect(),
            claim: AtomicU64::new(0),
            subscriber_position: AtomicU64::new(0),
        }
    }
    fn line(&self, position: u64) -> &Line {
        &self.lines[(position % self.lines.len() as u64) as usize]
    }
}

/// The payload word of every line of frame `seq`.
fn payload(seq: u64) -> u64 {
    0x5eed_0000 + seq
}

/// Orderings and rules of model 1 that the `..._is_caught` tests weaken.
#[derive(Clone, Copy)]
struct Commit {
    /// The commit store (publisher.rs `offer_with`: `commit_word(..).store(seq, Release)`).
    commit: Ordering,
    /// The subscriber's position store (subscriber.rs `publish_position`: Release).
    release_position: Ordering,
    /// Clean first for frames of `CLEAN_AHEAD` or more (publisher.rs `offer_with`,
    /// `clean_first`); when false, always after the commit.
    clean_first_when_long: bool,
}

const PRODUCTION_COMMIT: Commit = Commit {
    commit: Ordering::Release,
    release_position: Ordering::Release,
    clean_first_when_long: true,
};

/// publisher.rs `IpcPublisher::offer_with` in back-pressure mode, for each of `FRAMES`.
fn publish(log: &Log, p: Commit) {
    let mut position = 0;
    for (seq, &lines) in FRAMES.iter().enumerate() {
        let seq = seq as u64;
        let start = position;
        // `claim = start + pad + aligned + CLEAN_AHEAD`
        let claim = start + lines + CLEAN_AHEAD_LINES;
        // `refresh_limit`: the claim stays within a ring of the subscriber's position.
        while claim > log.subscriber_position.load(Ordering::Acquire) + RING_LINES {
            thread::yield_now();
        }
        log.claim.store(claim, Ordering::Relaxed);
        fence(Ordering::Release);
        // `clean_first = pad + aligned + FRAME_ALIGN > CLEAN_AHEAD`
        let clean_first = p.clean_first_when_long && lines + 1 > CLEAN_AHEAD_LINES;
        if clean_first {
            clean_ahead(log, start, claim);
        }
        // `write_header` and `fill`: plain stores.
        let length_type = words::length_type((lines * LINE) as u32, FrameType::Data);
        for i in 0..lines {
            let line = log.line(start + i);
            if i > 0 {
                // Payload bytes over the commit word of a line the frame covers (a plain
                // store in production; loom has no mixed atomic/plain location).
                let covered = if seq == 1 { PLANTED } else { payload(seq) };
                line.commit.store(covered, Ordering::Relaxed);
            }
            let first = if i == 0 { length_type } else { payload(seq) };
            // SAFETY: back-pressure (the claim check above) keeps the subscriber off this line
            // until the commit below; loom checks that claim.
            line.body
                .with_mut(|b| unsafe { *b = [first, payload(seq)] });
        }
        // `commit_word(off + COMMIT_WORD).store(seq, Release)`
        log.line(start).commit.store(seq, p.commit);
        if !clean_first {
            clean_ahead(log, start, claim);
        }
        position = start + lines;
    }
}

/// publisher.rs `IpcPublisher::clean_ahead`: lines `[start + CLEAN_AHEAD, claim)`.
fn clean_ahead(log: &Log, start: u64, claim: u64) {
    for position in start + CLEAN_AHEAD_LINES..claim {
        log.line(position)
            .commit
            .store(UNCOMMITTED, Ordering::Relaxed);
    }
}

/// subscriber.rs `Attached::poll_in_place`, one frame per poll, until all `FRAMES` arrived.
fn subscribe_in_place(log: &Log, p: Commit) {
    let mut position = 0;
    for (expected, &lines) in FRAMES.iter().enumerate() {
        let expected = expected as u64;
        // `word(off + COMMIT_WORD).load(Acquire) != self.expected`: nothing new yet.
        while log.line(position).commit.load(Ordering::Acquire) != expected {
            thread::yield_now();
        }
        for i in 0..lines {
            // SAFETY: the commit was acquired, and the publisher does not write this line again
            // before the position published below lets it (invariants 1 and 4); loom checks both.
            let [first, word] = log.line(position + i).body.with(|b| unsafe { *b });
            if i == 0 {
                // `read_len_type`
                assert_eq!(
                    words::frame_length(first) as u64,
                    lines * LINE,
                    "frame {expected}: a header not (yet) written was read as committed"
                );
                assert_eq!(words::frame_type(first), FrameType::Data as u8);
            }
            assert_eq!(word, payload(expected), "frame {expected}: payload");
        }
        // `advance` and `publish_position`.
        position += lines;
        log.subscriber_position.store(position, p.release_position);
    }
}

fn commit_model(p: Commit) {
    explore(5, move || {
        let log = Arc::new(Log::new(RING_LINES));
        let publisher = {
            let log = log.clone();
            thread::spawn(move || publish(&log, p))
        };
        subscribe_in_place(&log, p);
        publisher.join().unwrap();
    });
}

#[test]
fn a_committed_frame_is_seen_whole_across_a_wrap() {
    commit_model(PRODUCTION_COMMIT);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_commit_is_caught() {
    commit_model(Commit {
        commit: Ordering::Relaxed,
        ..PRODUCTION_COMMIT
    });
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_subscriber_position_is_caught() {
    commit_model(Commit {
        release_position: Ordering::Relaxed,
        ..PRODUCTION_COMMIT
    });
}

#[test]
#[should_panic(expected = "was read as committed")]
fn cleaning_after_the_commit_of_a_long_frame_is_caught() {
    commit_model(Commit {
        clean_first_when_long: false,
        ..PRODUCTION_COMMIT
    });
}

// ---------------------------------------------------------------------------------------------
// Model 2: the overwrite-mode claim check.

/// Lines in the ring of model 2: the third message overwrites the first.
const OVERWRITE_RING_LINES: u64 = 2;
/// One-line messages model 2 publishes.
const MESSAGES: u64 = 3;
/// Payload words per message: enough for a copy to be torn.
const WORDS: usize = 2;

struct RacyLine {
    /// The commit word.
    commit: AtomicU64,
    /// Payload words: relaxed atomics, since production copies them while they may be
    /// overwritten (a seqlock read).
    payload: [AtomicU64; WORDS],
}

struct RacyLog {
    lines: Vec<RacyLine>,
    claim: AtomicU64,
    /// The publisher has returned (ends the subscriber's wait; not part of the protocol).
    done: AtomicBool,
}

/// Fences of model 2 that the `..._is_caught` tests remove.
#[derive(Clone, Copy)]
struct Claim {
    /// publisher.rs `offer_with`: `fence(Release)` between the claim and the writes.
    publisher_fence: bool,
    /// subscriber.rs `lapped`: `fence(Acquire)` between the copy and the claim re-read.
    subscriber_fence: bool,
}

const PRODUCTION_CLAIM: Claim = Claim {
    publisher_fence: true,
    subscriber_fence: true,
};

/// publisher.rs `IpcPublisher::offer_with` in overwrite mode: never waits. (Cleaning ahead is
/// model 1's; here the claim covers the frame.)
fn publish_overwriting(log: &RacyLog, p: Claim) {
    for seq in 0..MESSAGES {
        let line = &log.lines[(seq % OVERWRITE_RING_LINES) as usize];
        log.claim.store(seq + 1, Ordering::Relaxed);
        if p.publisher_fence {
            fence(Ordering::Release);
        }
        for w in &line.payload {
            w.store(payload(seq), Ordering::Relaxed);
        }
        line.commit.store(seq, Ordering::Release);
    }
    log.done.store(true, Ordering::Release);
}

/// subscriber.rs `Attached::lapped`.
fn lapped(log: &RacyLog, position: u64, p: Claim) -> bool {
    if p.subscriber_fence {
        fence(Ordering::Acquire);
    }
    let claim = log.claim.load(Ordering::Relaxed);
    claim_overlaps(claim, position, OVERWRITE_RING_LINES)
}

/// subscriber.rs `Attached::poll_overwrite` until lapped (where production resyncs at the
/// tail) or the publisher is done.
fn subscribe_copying(log: &RacyLog, p: Claim) {
    let mut expected = 0;
    while expected < MESSAGES {
        let position = expected;
        let line = &log.lines[(position % OVERWRITE_RING_LINES) as usize];
        if line.commit.load(Ordering::Acquire) != expected {
            if lapped(log, position, p) {
                return;
            }
            if log.done.load(Ordering::Acquire) && line.commit.load(Ordering::Acquire) != expected {
                return;
            }
            thread::yield_now();
            continue;
        }
        // `copy_nonoverlapping` into scratch: racing reads.
        let mut copy = [0u64; WORDS];
        for (c, w) in copy.iter_mut().zip(&line.payload) {
            *c = w.load(Ordering::Relaxed);
        }
        if lapped(log, position, p) {
            return;
        }
        // Handed to the handler: it must be message `expected`, whole.
        assert!(
            copy.iter().all(|&w| w == payload(expected)),
            "accepted a torn or overwritten copy of message {expected}: {copy:x?}"
        );
        expected += 1;
    }
}

fn claim_model(p: Claim) {
    explore(8, move || {
        let log = Arc::new(RacyLog {
            lines: (0..OVERWRITE_RING_LINES)
                .map(|_| RacyLine {
                    commit: AtomicU64::new(UNCOMMITTED),
                    payload: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
            claim: AtomicU64::new(0),
            done: AtomicBool::new(false),
        });
        let publisher = {
            let log = log.clone();
            thread::spawn(move || publish_overwriting(&log, p))
        };
        subscribe_copying(&log, p);
        publisher.join().unwrap();
    });
}

#[test]
fn an_accepted_overwrite_mode_copy_is_never_torn() {
    claim_model(PRODUCTION_CLAIM);
}

#[test]
#[should_panic(expected = "accepted a torn or overwritten copy")]
fn a_missing_subscriber_fence_is_caught() {
    claim_model(Claim {
        subscriber_fence: false,
        ..PRODUCTION_CLAIM
    });
}

#[test]
#[should_panic(expected = "accepted a torn or overwritten copy")]
fn a_missing_publisher_fence_is_caught() {
    claim_model(Claim {
        publisher_fence: false,
        ..PRODUCTION_CLAIM
    });
}

// ---------------------------------------------------------------------------------------------
// Model 3: the successor log.

/// Lines in each ring of model 3.
const GENERATION_RING_LINES: u64 = 2;
/// One-line messages model 3 writes in the old log (it wraps once)...
const SWITCH_AT: u64 = 3;
/// ... and in all: the rest go to the new log, which wraps too.
const GENERATION_MESSAGES: u64 = 6;

/// The old and the new segment of one session, and the words of the hand-over.
struct Generations {
    old: Log,
    /// Its `subscriber_position` is the reservation (`SLOT_RESERVED` at position 0) the
    /// publisher makes before the new segment is visible.
    new: Log,
    /// The new segment under the name (`Segment::create_successor`'s `rename`): a subscriber's
    /// `open` after it sees what the publisher wrote before it.
    visible: AtomicBool,
    /// The old segment's `SUCCESSOR` and `CLOSED` words.
    successor: AtomicU64,
    closed: AtomicBool,
}

/// What the `..._is_caught` tests of model 3 weaken.
#[derive(Clone, Copy)]
struct Handover {
    /// publisher.rs `start_successor`: `CLOSED` stored with release.
    close: Ordering,
    /// publisher.rs `start_successor`: the live subscriber's slot copied into the new segment
    /// as reserved, so back-pressure holds the new log for it.
    reserve: bool,
}

const PRODUCTION_HANDOVER: Handover = Handover {
    close: Ordering::Release,
    reserve: true,
};

/// publisher.rs `commit_current` for a one-line message at `position` of `log`, after
/// `refresh_back_pressure` let it (when `hold`).
fn write_message(log: &Log, position: u64, seq: u64, hold: bool) {
    while hold
        && position + 1 > log.subscriber_position.load(Ordering::Acquire) + GENERATION_RING_LINES
    {
        thread::yield_now();
    }
    let length_type = words::length_type(LINE as u32, FrameType::Data);
    // SAFETY: back-pressure keeps the subscriber off this line until the commit below; loom
    // checks that claim (and finds the race when the new log is not held, see `reserve`).
    log.line(position)
        .body
        .with_mut(|b| unsafe { *b = [length_type, payload(seq)] });
    log.line(position).commit.store(seq, Ordering::Release);
}

/// The publisher: messages in the old log until the subscribers it waits for stall (not
/// modelled: only the hand-over is), then `start_successor`, then the rest in the new log.
fn publish_generations(g: &Generations, p: Handover) {
    for seq in 0..SWITCH_AT {
        write_message(&g.old, seq, seq, true);
    }
    // `create_successor`: the reservation is in the new segment (its position 0, the value
    // `new.subscriber_position` starts with) before the `rename` makes it visible.
    g.visible.store(true, Ordering::Release);
    g.successor.store(1, Ordering::Relaxed);
    g.closed.store(true, p.close);
    for seq in SWITCH_AT..GENERATION_MESSAGES {
        write_message(&g.new, seq - SWITCH_AT, seq, p.reserve);
    }
}

/// subscriber.rs `poll_in_place`, `check_publisher` and `follow`: reads the old log in place;
/// on an empty poll, finds `CLOSED`, polls once more, then follows the successor into its
/// reservation at position 0 and reads on.
fn subscribe_generations(g: &Generations) {
    let (mut log, mut position, mut expected) = (&g.old, 0, 0);
    let mut followed = false;
    while expected < GENERATION_MESSAGES {
        if log.line(position).commit.load(Ordering::Acquire) == expected {
            // SAFETY: the commit was acquired, and the publisher does not write this line
            // again before the position published below lets it; loom checks both.
            let [first, word] = log.line(position).body.with(|b| unsafe { *b });
            assert_eq!(words::frame_type(first), FrameType::Data as u8);
            assert_eq!(word, payload(expected), "message {expected}: payload");
            position += 1;
            expected += 1;
            log.subscriber_position.store(position, Ordering::Release);
            continue;
        }
        if followed || !g.closed.load(Ordering::Acquire) {
            thread::yield_now();
            continue;
        }
        // `check_publisher`: one more poll after the acquire of `CLOSED` drains the log.
        if log.line(position).commit.load(Ordering::Acquire) == expected {
            continue;
        }
        // `follow`.
        assert_eq!(
            g.successor.load(Ordering::Relaxed),
            1,
            "closed with no successor"
        );
        assert!(
            g.visible.load(Ordering::Acquire),
            "the successor is not under the name"
        );
        assert_eq!(
            expected, SWITCH_AT,
            "followed the successor before draining the old log"
        );
        (log, position, followed) = (&g.new, 0, true);
    }
}

fn handover_model(p: Handover) {
    explore(3, move || {
        let g = Arc::new(Generations {
            old: Log::new(GENERATION_RING_LINES),
            new: Log::new(GENERATION_RING_LINES),
            visible: AtomicBool::new(false),
            successor: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let publisher = {
            let g = g.clone();
            thread::spawn(move || publish_generations(&g, p))
        };
        subscribe_generations(&g);
        publisher.join().unwrap();
    });
}

#[test]
fn a_subscriber_follows_a_successor_log_with_nothing_lost() {
    handover_model(PRODUCTION_HANDOVER);
}

#[test]
#[should_panic(expected = "before draining the old log")]
fn a_relaxed_close_is_caught() {
    handover_model(Handover {
        close: Ordering::Relaxed,
        ..PRODUCTION_HANDOVER
    });
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_successor_without_reservations_is_caught() {
    handover_model(Handover {
        reserve: false,
        ..PRODUCTION_HANDOVER
    });
}
