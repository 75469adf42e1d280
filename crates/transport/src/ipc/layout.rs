//! The shared-memory segment layout (version 2), shared by the publisher and every subscriber.
//!
//! ```text
//! offset        size          content
//! 0             128           descriptor: immutable once the segment is visible under its name
//! 128           64            publisher line: claim position, tail seqlock (written per message)
//! 256           64            wake line: waiters, wake sequence (futex word), flags
//! 384           64            publisher counters
//! 1024          1024          topic name (UTF-8, `topic_len` bytes)
//! 4096          128 x N       subscriber slots (N = max_subscribers), one per attached subscriber
//! log_offset    capacity      the log: DATA and PAD frames (docs/protocol.md), 64-byte aligned
//! ```
//!
//! Lines that different processes write are 128 bytes apart, so adjacent-line prefetching does
//! not make them share traffic.
//!
//! ## Trust
//!
//! Every process that maps a segment can write all of it (only its own user, or its group with
//! `group=`, can open it: see [`dir`](super::dir)). So nothing read from a segment is trusted
//! without a check: the descriptor is read once when a segment is opened, checked (magic,
//! version, capacity a power of two in range, `log_offset` consistent with `max_subscribers`,
//! the file long enough, policy known, `max_message` consistent, `topic_len` in range), and only
//! that copy is used afterwards; the tail (invariant 5) must name a line start below 2^62 with a
//! sequence below 2^62 (so never [`UNCOMMITTED`]); every frame's type and length are checked
//! before delivery (invariant 1 makes a checked frame stable in back-pressure mode). The slot
//! table and the publisher line can hold anything: a bad value there can stall a publisher or
//! make a subscriber see losses, never make either read or write outside the segment. A file
//! truncated under its mappings is survived (see [`sigbus`](super::sigbus)).
//!
//! ## The log
//!
//! The log is a ring of `capacity` bytes (a power of two) addressed by an ever-growing 64-bit
//! *position*; the byte at position `p` lives at offset `p & (capacity - 1)`. Every frame starts
//! at a multiple of [`FRAME_ALIGN`] (one cache line), so a 32-byte message with its 32-byte DATA
//! header is exactly one line: one cache-line transfer per message. A frame never wraps: when one
//! does not fit before the end of the ring, the publisher fills the rest with a PAD frame.
//!
//! Invariants the code relies on:
//! 1. **Commit word.** A frame's `sequence` field ([`COMMIT_WORD`], offset 24) is written
//!    last, with release ordering. A reader that expects sequence `s` at position `p` and loads
//!    `s` there (acquire) sees the whole frame. PAD frames carry the sequence of the DATA frame
//!    that follows them.
//! 2. **Clean ahead.** A reader expecting sequence `s` at `p` must never mistake old bytes at
//!    `p + COMMIT_WORD` (possibly a payload that holds the very number it expects) for a commit.
//!    So every 64-byte line's commit word is set to [`UNCOMMITTED`] at creation, and while
//!    writing the frame at `[p, p + n)` the publisher sets the commit words of the lines
//!    `[p + CLEAN_AHEAD, p + n + CLEAN_AHEAD)` to [`UNCOMMITTED`] again: every line between the
//!    tail and `tail + CLEAN_AHEAD` has been cleaned since its previous lap, and nothing but a
//!    new frame writes it afterwards. Cleaning [`CLEAN_AHEAD`] bytes ahead rather than the very next line
//!    keeps the line a caught-up subscriber spins on written once per message, and the early
//!    store works as a prefetch-for-ownership of the line the publisher writes next.
//! 3. **Claim.** Before writing anything for a frame, the publisher stores in `claim_position`
//!    the position below which all its writes for that frame fall (including the cleaning of 2).
//!    Bytes at positions `>= claim - capacity` may be being overwritten; a reader in overwrite
//!    mode validates a copy by re-reading `claim` afterwards (a seqlock).
//! 4. **Back-pressure.** In back-pressure mode the publisher never claims beyond
//!    `min(active subscriber positions) + capacity`, so what a subscriber has not consumed is
//!    never overwritten, and its handler can read the frame in place (zero copy).
//! 5. **Tail.** `tail_position`/`tail_sequence` (a seqlock on `tail_version`) name the position
//!    and sequence of the next frame; a joining or lapped subscriber starts there.
//! 6. **Generations.** A log is never written again once its publisher has moved on from it. In
//!    back-pressure mode, when the slowest subscribers have made no progress for
//!    `flow_timeout_ms` while offers were refused (a process stopped, or one that stopped
//!    polling), the publisher starts a *successor*: a new segment of the same session under the
//!    same name, of generation `generation + 1`, whose log starts at position 0 with sequence
//!    `first_sequence` (the next one). Before it is visible, every slot of a subscriber that
//!    was not among the stalled ones is copied into it as [`SLOT_RESERVED`] at position 0 (same
//!    index, pid and start time), so the new log is held for it from its first byte. Then the
//!    publisher stores the new generation in the old segment's `successor` word, sets `closed`
//!    (release), and wakes waiters. A subscriber that finds `closed` drains the old log (whose
//!    frames stay intact: nothing writes it any more, so a slice a stopped handler holds stays
//!    valid), then opens the name again: with its reservation there it goes on at position 0
//!    with nothing lost and no event; without one (it was the stalled subscriber) it joins as
//!    a new subscriber would, at position 0 if that is still intact, else at the tail, and is
//!    told exactly what it missed (`Lost`). The publisher keeps the old logs that live
//!    subscribers still read, and when the session ends it stores its next sequence in their
//!    `end_sequence` word before it closes the current log: a subscriber that finds no
//!    successor under the name any more (the publisher closed and left) learns from it exactly
//!    what it missed.

/// `b"PGSHMv01"` read as little-endian.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"PGSHMv01");
pub const LAYOUT_VERSION: u32 = 2;
pub const PAGE: usize = 4096;
/// Frames start at multiples of this (one cache line).
pub const FRAME_ALIGN: usize = 64;
/// How far ahead of the frame being written the publisher cleans commit words (invariant 2).
pub const CLEAN_AHEAD: u64 = 4096;
/// Value of a commit word that no frame has been committed to.
pub const UNCOMMITTED: u64 = u64::MAX;
/// Offset in a frame (and in every [`FRAME_ALIGN`] line) of its commit word: the DATA/PAD
/// header's `sequence` field (invariant 1).
pub const COMMIT_WORD: usize = peregrine_wire::data::words::SEQUENCE;

// Descriptor (line 0).
pub const MAGIC: usize = 0;
pub const VERSION: usize = 8;
pub const LOG_OFFSET: usize = 12;
pub const CAPACITY: usize = 16;
pub const MAX_MESSAGE: usize = 24;
pub const POLICY: usize = 28;
pub const SESSION_ID: usize = 32;
pub const STREAM_ID: usize = 36;
pub const PUBLISHER_PID: usize = 40;
pub const MAX_SUBSCRIBERS: usize = 44;
pub const PUBLISHER_START_TICKS: usize = 48;
pub const TOPIC_LEN: usize = 56;
/// Descriptor, second line: the log's generation within its session (0 for the first log,
/// one more for each successor, invariant 6) and the sequence its position 0 holds.
pub const GENERATION: usize = 64;
pub const FIRST_SEQUENCE: usize = 72;
/// Bytes of the descriptor (read once when a segment is opened).
pub const DESCRIPTOR_LEN: usize = 128;

// Publisher line.
pub const CLAIM_POSITION: usize = 128;
pub const TAIL_VERSION: usize = 136;
pub const TAIL_POSITION: usize = 144;
pub const TAIL_SEQUENCE: usize = 152;

// Wake line.
pub const WAITERS: usize = 256;
pub const WAKE_SEQ: usize = 260;
pub const BLOCKING_SUBSCRIBERS: usize = 264;
pub const CLOSED: usize = 268;
/// The generation of the log that succeeds this one (invariant 6), stored before `closed`;
/// 0 when none does.
pub const SUCCESSOR: usize = 272;
/// Of a log with a successor: the sequence after the session's last message, stored (release)
/// when the session ends, before its current log is closed; 0 until then (invariant 6).
pub const END_SEQUENCE: usize = 280;

// Publisher counters.
pub const BACK_PRESSURED: usize = 384;
pub const SUBSCRIBERS_REAPED: usize = 392;

pub const TOPIC: usize = 1024;
pub const MAX_TOPIC_LEN: usize = 1024;

pub const SLOTS: usize = PAGE;
pub const SLOT_SIZE: usize = 128;
// Offsets within a subscriber slot.
pub const SLOT_STATE: usize = 0;
pub const SLOT_PID: usize = 4;
pub const SLOT_POSITION: usize = 8;
pub const SLOT_START_TICKS: usize = 16;
pub const SLOT_LOST: usize = 24;

/// Slot states.
pub const SLOT_FREE: u32 = 0;
pub const SLOT_CLAIMING: u32 = 1;
/// Reading, with a final position: counted by back-pressure and by `subscriber_count`.
pub const SLOT_ACTIVE: u32 = 2;
/// Joining: its position already holds back the publisher, but it is not counted as attached
/// until the position is final (so a publisher that waits for its subscribers does not start
/// while one of them may still move its start forward).
pub const SLOT_JOINING: u32 = 3;
/// Kept for a subscriber of the previous log (invariant 6): its position (0) holds the
/// publisher back and it counts as attached, until that subscriber, having drained the previous
/// log, makes it [`SLOT_ACTIVE`].
pub const SLOT_RESERVED: u32 = 4;

/// True for the slot states whose position holds a back-pressure publisher back.
#[inline]
pub const fn slot_holds(state: u32) -> bool {
    matches!(state, SLOT_ACTIVE | SLOT_JOINING | SLOT_RESERVED)
}

pub const MIN_CAPACITY: u64 = 64 << 10;
pub const MAX_CAPACITY: u64 = 1 << 32;
pub const MAX_SUBSCRIBERS_LIMIT: u32 = 1024;

/// Offset of the log for a segment with `max_subscribers` slots.
pub const fn log_offset(max_subscribers: u32) -> usize {
    let end = SLOTS + max_subscribers as usize * SLOT_SIZE;
    (end + PAGE - 1) & !(PAGE - 1)
}

/// Largest message a segment of `capacity` bytes accepts: an eighth of the ring, so a frame
/// always fits together with the PAD that may precede it.
pub const fn max_message_for(capacity: u64) -> u64 {
    let m = capacity / 8 - peregrine_wire::data::DATA_HEADER_LEN as u64;
    if m > peregrine_wire::data::MAX_MESSAGE_LEN as u64 {
        peregrine_wire::data::MAX_MESSAGE_LEN as u64
    } else {
        m
    }
}

/// True when a publisher whose claim is `claim` may be writing over (or has written over) the
/// byte at `position` of a ring of `capacity` bytes: its writes reach a lap beyond `position`
/// (invariant 3).
#[inline]
pub const fn claim_overlaps(claim: u64, position: u64, capacity: u64) -> bool {
    claim > position + capacity
}

/// Rounds a frame length up to [`FRAME_ALIGN`].
#[inline]
pub const fn align_frame(len: usize) -> usize {
    (len + FRAME_ALIGN - 1) & !(FRAME_ALIGN - 1)
}

/// What the publisher does when a subscriber falls a whole ring behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SlowSubscriberPolicy {
    /// `offer` returns [`OfferError::BackPressured`](crate::OfferError::BackPressured) until the
    /// slowest subscriber makes room. Nothing is lost; subscribers read in place (zero copy).
    #[default]
    BackPressure,
    /// The publisher never waits; a subscriber that is lapped is told exactly how many messages
    /// it lost and resumes at the publisher's newest position. Subscribers validate each message
    /// with a seqlock check on a private copy before handing it over.
    Overwrite,
}

impl SlowSubscriberPolicy {
    pub const fn name(self) -> &'static str {
        match self {
            SlowSubscriberPolicy::BackPressure => "backpressure",
            SlowSubscriberPolicy::Overwrite => "overwrite",
        }
    }
    pub(crate) const fn code(self) -> u32 {
        match self {
            SlowSubscriberPolicy::BackPressure => 0,
            SlowSubscriberPolicy::Overwrite => 1,
        }
    }
    pub(crate) const fn from_code(c: u32) -> Option<Self> {
        match c {
            0 => Some(SlowSubscriberPolicy::BackPressure),
            1 => Some(SlowSubscriberPolicy::Overwrite),
            _ => None,
        }
    }
}

const _: () = assert!(TOPIC + MAX_TOPIC_LEN <= SLOTS);
const _: () = assert!(FIRST_SEQUENCE + 8 <= DESCRIPTOR_LEN && DESCRIPTOR_LEN <= CLAIM_POSITION);
const _: () = assert!(SLOT_LOST + 8 <= SLOT_SIZE);
// What the log's layout assumes of wire's DATA/PAD fixed part: a 32-byte header (a 32-byte
// message and its header fill one line) whose sequence word, the commit word, is an 8-byte
// aligned word inside it (lines are 64-byte aligned, so it is aligned in the mapping too). The
// publisher stores header words natively, which are the wire's little-endian bytes only on a
// little-endian host.
const _: () = assert!(peregrine_wire::data::DATA_HEADER_LEN == 32);
const _: () = assert!(peregrine_wire::data::DATA_HEADER_LEN <= FRAME_ALIGN);
const _: () = assert!(FRAME_ALIGN % 8 == 0 && PAGE % FRAME_ALIGN == 0);
const _: () =
    assert!(COMMIT_WORD % 8 == 0 && COMMIT_WORD + 8 <= peregrine_wire::data::DATA_HEADER_LEN);
const _: () = assert!(
    peregrine_wire::data::words::LENGTH_TYPE % 8 == 0
        && peregrine_wire::data::words::FLAGS_SESSION % 8 == 0
        && peregrine_wire::data::words::STREAM_LENGTH % 8 == 0
);
const _: () = assert!(
    cfg!(target_endian = "little"),
    "the shared-memory log stores wire frames as native 8-byte words"
);
