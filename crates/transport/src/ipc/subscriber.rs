//! A reader of a shared-memory log. Any number per segment, each in its own process or thread.

use super::layout::*;
use super::segment::{process_start_ticks, Segment};
use super::{IpcConfig, SlowSubscriberPolicy};
use crate::error::OpenError;
use crate::{Message, SubscriberEvent};
use peregrine_agent::Wake;
use peregrine_proto::counters::SubscriberCounters;
use peregrine_wire::data::{words, DATA_HEADER_LEN};
use peregrine_wire::header::FrameType;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Empty polls between liveness checks of the publisher (a `flock` probe).
const LIVENESS_CHECK_EVERY: u32 = 1 << 16;
/// Resynchronisations after being lapped in one overwrite-mode poll: a live publisher rarely
/// laps a subscriber twice in one poll; a corrupt claim word would make every read look
/// lapped, and the poll must still end.
const RESYNCS_PER_POLL: u32 = 2;
/// A log whose publisher has sent at most this many messages (and not yet filled the log once)
/// is read from its first message by a subscriber that attaches to it.
const YOUNG_LOG_MESSAGES: u64 = 65_536;
/// ... and was created at most this long ago (the network's retention, `retain_ms`, is 10 s):
/// a new subscriber of a slow stream that began an hour ago starts at its tail.
const YOUNG_LOG_NS: u64 = 10_000_000_000;
/// Messages a back-pressure poll delivers between two publications of its position (besides
/// the one at its end): a handler slow enough to spend `flow_timeout_ms` on this many is taken
/// for a stalled subscriber.
const PUBLISH_POSITION_EVERY: usize = 64;
/// Nanoseconds between attempts to attach while no publisher is there.
const ATTACH_RETRY_NS: u64 = 1_000_000;

/// Reads one topic's shared-memory log; created before or after its publisher, it attaches when
/// the publisher appears and re-attaches when a new publisher replaces a closed or dead one.
#[derive(Debug)]
pub struct IpcSubscriber {
    cfg: IpcConfig,
    topic: String,
    attached: Option<Attached>,
    events: VecDeque<SubscriberEvent>,
    counters: SubscriberCounters,
    blocking: bool,
    next_attach_ns: u64,
    /// Overwrite mode copies each message here before validating it.
    scratch: Vec<u8>,
}

#[derive(Debug)]
struct Attached {
    seg: Segment,
    log: *const u8,
    capacity: u64,
    mask: u64,
    max_frame: usize,
    slot: u32,
    /// Position of the next frame to read.
    position: u64,
    /// Sequence number expected there.
    expected: u64,
    overwrite: bool,
    session_id: u32,
    empty_polls: u32,
    waiting: bool,
    wake_seq_seen: u32,
}

// SAFETY: `Attached::log` is the only field that is not `Send`; it points into `seg`'s mapping,
// which is process-shared, not tied to a thread, and moves with the subscriber. Not `Sync`: every
// read takes `&mut self`.
unsafe impl Send for IpcSubscriber {}

impl IpcSubscriber {
    /// Creates a subscriber for `topic` on the segment the configuration names. It attaches at
    /// once if the publisher exists, otherwise on a later `poll`.
    pub fn new(cfg: &IpcConfig, topic: &str, blocking: bool) -> Result<Self, OpenError> {
        crate::validate_topic(topic)?;
        super::dir::validate_name(&cfg.name).map_err(OpenError::InvalidName)?;
        let mut s = IpcSubscriber {
            cfg: cfg.clone(),
            topic: topic.to_string(),
            attached: None,
            events: VecDeque::new(),
            counters: SubscriberCounters::default(),
            blocking,
            next_attach_ns: 0,
            scratch: Vec::new(),
        };
        s.try_attach()?;
        Ok(s)
    }

    pub fn is_connected(&self) -> bool {
        self.attached.is_some()
    }
    pub fn counters(&self) -> SubscriberCounters {
        self.counters
    }
    /// The publisher's session id, while connected.
    pub fn session_id(&self) -> Option<u32> {
        self.attached.as_ref().map(|a| a.session_id)
    }
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        self.events.pop_front()
    }

    fn try_attach(&mut self) -> Result<bool, OpenError> {
        let Some(seg) = Segment::open(&self.cfg.name, &self.cfg.dir_spec())? else {
            return Ok(false);
        };
        let found = seg.topic();
        if found != self.topic {
            return Err(OpenError::TopicMismatch {
                uri: format!("ipc://{}", self.cfg.name),
                wanted: self.topic.clone(),
                found,
            });
        }
        let slot = claim_slot(&seg)?;
        let (position, expected) = join(&seg, slot, Join::New)?;
        let session_id = seg.session_id;
        self.attached = Some(self.attach_at(seg, slot, position, expected));
        self.events.push_back(SubscriberEvent::Connected {
            session_id,
            first_sequence: expected,
        });
        Ok(true)
    }

    /// Attachment to `seg` at `position`, where sequence `expected` comes next, in `slot`
    /// (already [`SLOT_ACTIVE`]).
    fn attach_at(&mut self, seg: Segment, slot: u32, position: u64, expected: u64) -> Attached {
        if self.blocking {
            seg.u32_at(BLOCKING_SUBSCRIBERS)
                .fetch_add(1, Ordering::SeqCst);
        }
        let (log, capacity) = seg.log();
        let policy = seg.policy();
        let session_id = seg.session_id;
        let max_frame = DATA_HEADER_LEN + seg.max_message as usize;
        if policy == SlowSubscriberPolicy::Overwrite {
            self.scratch.resize(max_frame, 0);
        }
        Attached {
            seg,
            log,
            capacity,
            mask: capacity - 1,
            max_frame,
            slot,
            position,
            expected,
            overwrite: policy == SlowSubscriberPolicy::Overwrite,
            session_id,
            empty_polls: 0,
            waiting: false,
            wake_seq_seen: 0,
        }
    }

    /// Moves on to the log that succeeds the drained, closed one (layout invariant 6), in the
    /// same session: at position 0 with nothing lost when the publisher kept this subscriber's
    /// slot there, otherwise as a new subscriber joins, with a `Lost` event for exactly what
    /// lies between. False when it cannot: no segment of the session under the name (the
    /// publisher ended it, or died), or none it can join now (its subscriber table full). The
    /// caller tells these apart by the old log's `end_sequence` and the publisher's lock.
    #[cold]
    fn follow(&mut self) -> bool {
        let Some(a) = self.attached.as_ref() else {
            return false;
        };
        let successor = a.seg.u32_at(SUCCESSOR).load(Ordering::Relaxed);
        if successor <= a.seg.generation || a.overwrite {
            return false;
        }
        let Ok(Some(seg)) = Segment::open(&self.cfg.name, &self.cfg.dir_spec()) else {
            return false;
        };
        let same_stream = seg.session_id == a.session_id
            && seg.policy() == a.seg.policy()
            && seg.generation >= successor
            && seg.first_sequence >= a.expected
            && seg.topic() == self.topic;
        if !same_stream {
            return false;
        }
        let expected = a.expected;
        let old_slot = a.seg.slot_offset(a.slot);
        let (pid, ticks) = (
            a.seg.u32_at(old_slot + SLOT_PID).load(Ordering::Relaxed),
            a.seg
                .u64_at(old_slot + SLOT_START_TICKS)
                .load(Ordering::Relaxed),
        );
        let reserved = seg.generation == successor
            && seg.first_sequence == expected
            && a.slot < seg.max_subscribers
            && take_reservation(&seg, a.slot, pid, ticks);
        let (slot, position, start) = if reserved {
            (a.slot, 0, expected)
        } else {
            let Ok(slot) = claim_slot(&seg) else {
                return false;
            };
            match join(&seg, slot, Join::Continue) {
                Ok((position, start)) => (slot, position, start),
                Err(_) => return false,
            }
        };
        let lost = start - expected;
        if lost > 0 {
            self.counters.gaps += 1;
            self.counters.lost += lost;
            seg.u64_at(seg.slot_offset(slot) + SLOT_LOST)
                .fetch_add(lost, Ordering::Relaxed);
            self.events.push_back(SubscriberEvent::Lost {
                session_id: seg.session_id,
                from_sequence: expected,
                count: lost,
            });
        }
        let next = self.attach_at(seg, slot, position, start);
        if let Some(old) = self.attached.replace(next) {
            old.release(self.blocking);
        }
        true
    }

    fn detach(&mut self, why: Detach) {
        if let Some(a) = self.attached.take() {
            let session_id = a.session_id;
            let path = a.seg.path().display().to_string();
            a.release(self.blocking);
            self.events.push_back(match why {
                Detach::Died => SubscriberEvent::PublisherDied { session_id },
                Detach::Closed => SubscriberEvent::PublisherClosed { session_id },
                Detach::Damaged => SubscriberEvent::SegmentDamaged {
                    session_id,
                    reason: format!(
                        "shared-memory segment {path} was truncated or damaged by another process of your user"
                    ),
                },
            });
        }
    }

    /// Delivers up to `limit` messages to `handler`, in sequence order, and returns how many.
    /// Never blocks. In back-pressure mode `handler` reads the message in place in shared memory.
    #[inline]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let n = self.poll_attached(handler, limit);
        if n != 0 {
            return n;
        }
        let Some(a) = self.attached.as_mut() else {
            self.poll_detached();
            return 0;
        };
        a.empty_polls += 1;
        // Empty polls only: the closed flag (shared), and whether the segment was damaged (a
        // relaxed load of process-local memory).
        if a.empty_polls < LIVENESS_CHECK_EVERY
            && a.seg.header_u32::<CLOSED>().load(Ordering::Acquire) == 0
            && !a.seg.damaged()
        {
            return 0;
        }
        a.empty_polls = 0;
        self.check_publisher(handler, limit)
    }

    #[inline]
    fn poll_attached<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let Some(a) = self.attached.as_mut() else {
            return 0;
        };
        let r = if a.overwrite {
            a.poll_overwrite(
                handler,
                limit,
                &mut self.scratch,
                &mut self.counters,
                &mut self.events,
            )
        } else {
            a.poll_in_place(handler, limit, &mut self.counters, &mut self.events)
        };
        match r {
            Ok(n) => {
                if n > 0 {
                    a.empty_polls = 0;
                }
                n
            }
            Err(n) => {
                // A frame that breaks the layout: the segment is not trustworthy any more.
                self.counters.corrupt_frames += 1;
                let damaged = self.attached.as_ref().is_some_and(|a| a.seg.damaged());
                self.detach(if damaged {
                    Detach::Damaged
                } else {
                    Detach::Closed
                });
                n
            }
        }
    }

    /// Detaches if the publisher closed or died, after one more poll: the flag (or the released
    /// lock) is ordered after the publisher's last commit, so that poll drains everything.
    #[cold]
    fn check_publisher<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let Some(a) = self.attached.as_ref() else {
            return 0;
        };
        if a.seg.damaged() {
            // What it reads now are zero pages: deliver nothing more from it.
            self.detach(Detach::Damaged);
            return 0;
        }
        let closed = a.seg.u32_at(CLOSED).load(Ordering::Acquire) != 0;
        let died = !closed && !a.seg.publisher_alive();
        if !closed && !died {
            return 0;
        }
        let n = self.poll_attached(handler, limit);
        if n != 0 {
            return n;
        }
        let successor = closed && successor_of(self.attached.as_ref()) != 0;
        if !successor {
            self.detach(if died { Detach::Died } else { Detach::Closed });
            return 0;
        }
        // The publisher went on in a successor log (layout invariant 6).
        let now = peregrine_agent::monotonic_ns();
        if now < self.next_attach_ns {
            return 0;
        }
        if self.follow() {
            return self.poll_attached(handler, limit);
        }
        let Some(a) = self.attached.as_ref() else {
            return 0;
        };
        let end = a.seg.u64_at(END_SEQUENCE).load(Ordering::Acquire);
        if end == 0 && a.seg.publisher_alive() {
            // The session goes on, but its current log could not be joined now (its
            // subscriber table full, or the name being replaced): try again shortly.
            self.next_attach_ns = now + ATTACH_RETRY_NS;
            return 0;
        }
        // The session ended while this subscriber was behind: what it missed is exact when the
        // publisher said where it ended; a publisher that died said nothing.
        if end > a.expected && end < TAIL_LIMIT {
            let (session_id, from_sequence, count) = (a.session_id, a.expected, end - a.expected);
            self.counters.gaps += 1;
            self.counters.lost += count;
            self.events.push_back(SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            });
        }
        self.detach(if end == 0 {
            Detach::Died
        } else {
            Detach::Closed
        });
        0
    }

    #[cold]
    fn poll_detached(&mut self) {
        let now = peregrine_agent::monotonic_ns();
        if now >= self.next_attach_ns {
            self.next_attach_ns = now + ATTACH_RETRY_NS;
            if let Err(e) = self.try_attach() {
                self.events.push_back(SubscriberEvent::AttachFailed {
                    reason: e.to_string(),
                });
                self.next_attach_ns = now + 100 * ATTACH_RETRY_NS;
            }
        }
    }
}

/// The successor word of the log `a` reads (layout invariant 6): 0 when none.
fn successor_of(a: Option<&Attached>) -> u32 {
    a.map_or(0, |a| a.seg.u32_at(SUCCESSOR).load(Ordering::Relaxed))
}

/// Claims a free slot of `seg` (it becomes [`SLOT_CLAIMING`]) and writes this process's
/// identity in it.
fn claim_slot(seg: &Segment) -> Result<u32, OpenError> {
    let slot = (0..seg.max_subscribers)
        .find(|&i| {
            seg.u32_at(seg.slot_offset(i) + SLOT_STATE)
                .compare_exchange(
                    SLOT_FREE,
                    SLOT_CLAIMING,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        })
        .ok_or_else(|| OpenError::Full {
            path: seg.path().to_path_buf(),
            max_subscribers: seg.max_subscribers,
        })?;
    let so = seg.slot_offset(slot);
    let pid = std::process::id();
    seg.u32_at(so + SLOT_PID).store(pid, Ordering::Relaxed);
    seg.u64_at(so + SLOT_START_TICKS)
        .store(process_start_ticks(pid).unwrap_or(0), Ordering::Relaxed);
    seg.u64_at(so + SLOT_LOST).store(0, Ordering::Relaxed);
    Ok(slot)
}

/// Takes slot `slot` of `seg` if the publisher reserved it for the subscriber of process `pid`
/// (started at `ticks`) that held the same slot in the previous log (layout invariant 6).
fn take_reservation(seg: &Segment, slot: u32, pid: u32, ticks: u64) -> bool {
    let so = seg.slot_offset(slot);
    let state = seg.u32_at(so + SLOT_STATE);
    if state.load(Ordering::Acquire) != SLOT_RESERVED
        || seg.u32_at(so + SLOT_PID).load(Ordering::Relaxed) != pid
        || seg.u64_at(so + SLOT_START_TICKS).load(Ordering::Relaxed) != ticks
        || seg.u64_at(so + SLOT_POSITION).load(Ordering::Relaxed) != 0
    {
        return false;
    }
    state
        .compare_exchange(
            SLOT_RESERVED,
            SLOT_ACTIVE,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// Where a subscriber joining a log starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    /// A new subscriber: a young log (created at most 10 s ago, at most 65 536 messages, not
    /// yet filled once) from its first message, any other at its tail.
    New,
    /// A subscriber of the same session coming from the previous log: from the first message
    /// whenever it is still there (the log not yet filled once), else at the tail.
    Continue,
}

/// Joins `seg` in `slot` (claimed by [`claim_slot`]) and makes it [`SLOT_ACTIVE`]; returns
/// the position and sequence it starts at.
fn join(seg: &Segment, slot: u32, from: Join) -> Result<(u64, u64), OpenError> {
    let so = seg.slot_offset(slot);
    // Join at the publisher's current tail. Register as JOINING (which already holds the
    // publisher back), then re-read the tail after a full fence until it stands still: a
    // publisher scan that missed our slot happened before our fence, so its limit came from
    // a tail no later than the one we then read (invariant 4). Only then become ACTIVE,
    // which is when the publisher counts us as attached.
    let corrupt_tail = |seg: &Segment| {
        seg.u32_at(so + SLOT_STATE)
            .store(SLOT_FREE, Ordering::Release);
        OpenError::Incompatible {
            path: seg.path().to_path_buf(),
            what: "its tail (position and sequence) is not one a publisher writes".into(),
        }
    };
    let Some((mut position, mut expected)) = read_tail(seg) else {
        return Err(corrupt_tail(seg));
    };
    let first = seg.first_sequence;
    if expected < first {
        return Err(corrupt_tail(seg));
    }
    // A young log (created at most 10 s ago, at most 65 536 messages, not yet filled
    // once) is read from its first message (as `late_join=start` does on the network): a
    // subscriber that exists when its publisher starts, and finds it a moment later through
    // topic resolution, must not miss what was written meanwhile. A subscriber coming from the
    // previous log of the session takes its first message whenever it is still there.
    //
    // Why position 0 is still intact: a publisher writes nothing at or past `capacity`
    // (which is where it would overwrite position 0) before its first limit refresh: its
    // limit starts at `capacity`, and it refreshes only when a claim (the frame, a PAD
    // before it, and CLEAN_AHEAD bytes after) would pass it, that is from a position above
    // `capacity - 2 * frame - CLEAN_AHEAD`. A refresh after our fence sees our slot at 0
    // and holds the publisher at `capacity`. A refresh before our fence came after the
    // publisher had published its tail at that position, so the tail we read after the
    // fence is at least there: while that tail is below the bound, no refresh has run and
    // nothing of the log was overwritten. Otherwise we join at the tail as before.
    let (_, capacity) = seg.log();
    let max_frame = align_frame(DATA_HEADER_LEN + seg.max_message as usize) as u64;
    let young = |p: u64, e: u64| {
        let unfilled = p + 2 * max_frame + CLEAN_AHEAD < capacity;
        unfilled && (from == Join::Continue || e - first <= YOUNG_LOG_MESSAGES)
    };
    let recent = from == Join::Continue || seg.age_ns().is_some_and(|a| a <= YOUNG_LOG_NS);
    let from_start = recent && young(position, expected);
    if from_start {
        (position, expected) = (0, first);
    }
    seg.u64_at(so + SLOT_POSITION)
        .store(position, Ordering::Relaxed);
    seg.u32_at(so + SLOT_STATE)
        .store(SLOT_JOINING, Ordering::SeqCst);
    let mut settled = false;
    if from_start {
        fence(Ordering::SeqCst);
        match read_tail(seg) {
            Some((p, e)) if e >= first && young(p, e) => settled = true,
            Some((p, e)) if e >= first => {
                (position, expected) = (p, e);
                seg.u64_at(so + SLOT_POSITION)
                    .store(position, Ordering::SeqCst);
            }
            _ => return Err(corrupt_tail(seg)),
        }
    }
    // Joining at the tail: re-read it after the fence until it stands still.
    while !settled {
        fence(Ordering::SeqCst);
        let Some((p, e)) = read_tail(seg).filter(|&(_, e)| e >= first) else {
            return Err(corrupt_tail(seg));
        };
        settled = p == position;
        if !settled {
            (position, expected) = (p, e);
            seg.u64_at(so + SLOT_POSITION)
                .store(position, Ordering::SeqCst);
        }
    }
    seg.u32_at(so + SLOT_STATE)
        .store(SLOT_ACTIVE, Ordering::Release);
    Ok((position, expected))
}

/// Why a subscriber leaves a segment.
#[derive(Debug, Clone, Copy)]
enum Detach {
    Closed,
    Died,
    Damaged,
}

impl Drop for IpcSubscriber {
    fn drop(&mut self) {
        if let Some(a) = self.attached.take() {
            a.release(self.blocking);
        }
    }
}

impl Attached {
    fn release(self, blocking: bool) {
        if self.waiting {
            self.seg.u32_at(WAITERS).fetch_sub(1, Ordering::SeqCst);
        }
        if blocking {
            self.seg
                .u32_at(BLOCKING_SUBSCRIBERS)
                .fetch_sub(1, Ordering::SeqCst);
        }
        self.seg
            .u32_at(self.seg.slot_offset(self.slot) + SLOT_STATE)
            .store(SLOT_FREE, Ordering::Release);
    }

    /// # Safety
    /// `offset` must be 8-byte aligned and `offset + 8 <= capacity`.
    #[inline]
    unsafe fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= self.capacity as usize);
        // SAFETY: the caller guarantees bounds and 8-byte alignment (the log is page-aligned,
        // so an aligned offset is an aligned address); the log outlives `&self`.
        unsafe { AtomicU64::from_ptr(self.log.add(offset).cast_mut().cast()) }
    }

    #[inline]
    fn publish_position(&self) {
        self.seg
            .u64_at(self.seg.slot_offset(self.slot) + SLOT_POSITION)
            .store(self.position, Ordering::Release);
    }

    /// Back-pressure mode: the publisher cannot overwrite what this subscriber has not released
    /// by publishing its position (invariant 4), so frames are handed over in place. Returns
    /// `Err` on a frame that breaks the layout.
    #[inline]
    fn poll_in_place<F: FnMut(Message<'_>)>(
        &mut self,
        handler: &mut F,
        limit: usize,
        counters: &mut SubscriberCounters,
        _events: &mut VecDeque<SubscriberEvent>,
    ) -> Result<usize, usize> {
        let mut n = 0;
        let start = self.position;
        while n < limit {
            let off = (self.position & self.mask) as usize;
            // SAFETY: `off` starts a line of the log, so its commit word is in bounds and
            // 8-byte aligned.
            if unsafe { self.word(off + COMMIT_WORD) }.load(Ordering::Acquire) != self.expected {
                break;
            }
            // SAFETY: the commit word matched (acquire): the 32-byte header is complete and
            // no longer written (invariant 1); it starts a line of the log (8-byte aligned).
            let (frame_len, ty) = unsafe { read_len_type(self.log.add(off)) };
            let room = (self.capacity as usize) - off;
            if ty == FrameType::Pad as u8 {
                if frame_len as u64 != room as u64 {
                    self.finish(start);
                    return Err(n);
                }
                self.position += room as u64;
                continue;
            }
            if ty != FrameType::Data as u8
                || frame_len < DATA_HEADER_LEN
                || frame_len > self.max_frame
                || frame_len > room
            {
                self.finish(start);
                return Err(n);
            }
            // SAFETY: [off + 32, off + frame_len) is inside the log (checked against `room`),
            // committed, and not overwritten before we publish a position past it.
            let payload = unsafe {
                std::slice::from_raw_parts(
                    self.log.add(off + DATA_HEADER_LEN),
                    frame_len - DATA_HEADER_LEN,
                )
            };
            handler(Message {
                payload,
                sequence: self.expected,
                session_id: self.session_id,
            });
            let len = payload.len();
            self.advance(counters, frame_len, len);
            n += 1;
            if n % PUBLISH_POSITION_EVERY == 0 {
                // Within a long poll too, the publisher sees progress (the room, and that this
                // subscriber is not stalled, layout invariant 6). The frames behind it were
                // handed over and their handler calls have returned.
                self.publish_position();
            }
        }
        self.finish(start);
        Ok(n)
    }

    /// Moves past a delivered frame of `frame_len` bytes carrying `len` payload bytes.
    #[inline]
    fn advance(&mut self, counters: &mut SubscriberCounters, frame_len: usize, len: usize) {
        counters.messages += 1;
        counters.bytes += len as u64;
        self.position += align_frame(frame_len) as u64;
        self.expected += 1;
    }

    #[inline]
    fn finish(&self, start: u64) {
        if self.position != start {
            self.publish_position();
        }
    }

    /// Overwrite mode: the publisher may lap this subscriber at any time, so each frame is
    /// copied out and the copy validated against the publisher's claim (invariant 3) before it
    /// is handed over. A lapped subscriber learns the exact number of messages it lost and
    /// resumes at the publisher's tail.
    fn poll_overwrite<F: FnMut(Message<'_>)>(
        &mut self,
        handler: &mut F,
        limit: usize,
        scratch: &mut [u8],
        counters: &mut SubscriberCounters,
        events: &mut VecDeque<SubscriberEvent>,
    ) -> Result<usize, usize> {
        let mut n = 0;
        let mut resyncs = 0;
        let start = self.position;
        while n < limit {
            let off = (self.position & self.mask) as usize;
            // SAFETY: aligned and in bounds, as in `poll_in_place`.
            let committed =
                unsafe { self.word(off + COMMIT_WORD) }.load(Ordering::Acquire) == self.expected;
            if !committed {
                if self.lapped() {
                    resyncs += 1;
                    if resyncs > RESYNCS_PER_POLL {
                        break;
                    }
                    if !self.resync(counters, events) {
                        self.finish(start);
                        return Err(n);
                    }
                    continue;
                }
                break;
            }
            // SAFETY: a line start of the log (in bounds, 8-byte aligned); the content may be
            // racing with the publisher, which is why nothing read here is trusted before
            // `lapped()` below says it was intact.
            let (frame_len, ty) = unsafe { read_len_type(self.log.add(off)) };
            let room = (self.capacity as usize) - off;
            let sane =
                frame_len >= DATA_HEADER_LEN && frame_len <= self.max_frame && frame_len <= room;
            if !sane || (ty != FrameType::Data as u8 && ty != FrameType::Pad as u8) {
                if self.lapped() {
                    resyncs += 1;
                    if resyncs > RESYNCS_PER_POLL {
                        break;
                    }
                    if !self.resync(counters, events) {
                        self.finish(start);
                        return Err(n);
                    }
                    continue;
                }
                self.finish(start);
                return Err(n);
            }
            if ty == FrameType::Pad as u8 {
                if self.lapped() {
                    resyncs += 1;
                    if resyncs > RESYNCS_PER_POLL {
                        break;
                    }
                    if !self.resync(counters, events) {
                        self.finish(start);
                        return Err(n);
                    }
                    continue;
                }
                self.position += room as u64;
                continue;
            }
            let len = frame_len - DATA_HEADER_LEN;
            // Sized by `try_attach` for this segment's `max_frame`; the slicing checks it.
            let copy = &mut scratch[..len];
            // SAFETY: source [off + 32, off + frame_len) is inside the log (checked against
            // `room`), destination is `copy`, exactly `len` bytes. The source may be concurrently
            // overwritten by the publisher in another process: the copy is then discarded below.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.log.add(off + DATA_HEADER_LEN),
                    copy.as_mut_ptr(),
                    len,
                )
            };
            if self.lapped() {
                resyncs += 1;
                if resyncs > RESYNCS_PER_POLL {
                    break;
                }
                if !self.resync(counters, events) {
                    self.finish(start);
                    return Err(n);
                }
                continue;
            }
            handler(Message {
                payload: &scratch[..len],
                sequence: self.expected,
                session_id: self.session_id,
            });
            self.advance(counters, frame_len, len);
            n += 1;
        }
        self.finish(start);
        Ok(n)
    }

    /// True when the publisher's claim shows it may have written over `position`.
    #[inline]
    fn lapped(&self) -> bool {
        fence(Ordering::Acquire);
        let claim = self
            .seg
            .header_u64::<CLAIM_POSITION>()
            .load(Ordering::Relaxed);
        claim_overlaps(claim, self.position, self.capacity)
    }

    /// Moves to the publisher's tail after being lapped. False if the tail is not one a
    /// publisher writes (the segment is corrupt).
    #[cold]
    fn resync(
        &mut self,
        counters: &mut SubscriberCounters,
        events: &mut VecDeque<SubscriberEvent>,
    ) -> bool {
        let Some((position, sequence)) = read_tail(&self.seg) else {
            return false;
        };
        let lost = sequence.saturating_sub(self.expected);
        if lost > 0 {
            counters.gaps += 1;
            counters.lost += lost;
            self.seg
                .u64_at(self.seg.slot_offset(self.slot) + SLOT_LOST)
                .fetch_add(lost, Ordering::Relaxed);
            events.push_back(SubscriberEvent::Lost {
                session_id: self.session_id,
                from_sequence: self.expected,
                count: lost,
            });
        }
        self.position = position;
        self.expected = sequence;
        self.publish_position();
        true
    }

    fn has_data(&self) -> bool {
        let off = (self.position & self.mask) as usize;
        // SAFETY: aligned and in bounds, as in `poll_in_place`.
        unsafe { self.word(off + COMMIT_WORD) }.load(Ordering::Acquire) == self.expected
            || self.lapped()
    }
}

/// Reads `frame_length` and `frame_type` of the frame at `frame` (one 8-byte load of the word
/// at `words::LENGTH_TYPE`).
///
/// # Safety
/// `frame` must be 8-byte aligned and point at `DATA_HEADER_LEN` readable bytes.
#[inline]
unsafe fn read_len_type(frame: *const u8) -> (usize, u8) {
    debug_assert!(frame as usize % 8 == 0);
    // SAFETY: guaranteed by the caller; the word's offset is a multiple of 8 inside the fixed
    // part (asserted in `layout`).
    let w = unsafe { frame.add(words::LENGTH_TYPE).cast::<u64>().read_volatile() };
    (words::frame_length(w) as usize, words::frame_type(w))
}

/// Tail positions and sequences stay below this: a publisher cannot reach it (2^62 bytes or
/// messages), and a reader's arithmetic on them cannot overflow.
const TAIL_LIMIT: u64 = 1 << 62;
/// Reads of the tail seqlock before giving up on a publisher that never finishes an update
/// (a live one finishes in nanoseconds; a foreign segment may hold an odd version for good).
const TAIL_TRIES: u32 = 1 << 20;

/// A consistent (position, sequence) of the publisher's tail (invariant 5), or `None` if the
/// seqlock never settles or it names a place no publisher writes: a position that does not
/// start a line, or values a publisher cannot reach (a corrupt or foreign segment). A frame
/// position starts a line, so the commit word read there is aligned; a sequence below
/// `TAIL_LIMIT` is never [`UNCOMMITTED`].
fn read_tail(seg: &Segment) -> Option<(u64, u64)> {
    let version = seg.u64_at(TAIL_VERSION);
    for i in 0..TAIL_TRIES {
        let v1 = version.load(Ordering::Acquire);
        if v1 & 1 == 1 {
            if i % 1024 == 1023 {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
            continue;
        }
        let p = seg.u64_at(TAIL_POSITION).load(Ordering::Relaxed);
        let s = seg.u64_at(TAIL_SEQUENCE).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if version.load(Ordering::Relaxed) == v1 {
            let valid = p % FRAME_ALIGN as u64 == 0 && p < TAIL_LIMIT && s < TAIL_LIMIT;
            return valid.then_some((p, s));
        }
    }
    None
}

impl Wake for IpcSubscriber {
    fn prepare_wait(&mut self) {
        if let Some(a) = self.attached.as_mut() {
            if !a.waiting && self.blocking {
                a.wake_seq_seen = a.seg.u32_at(WAKE_SEQ).load(Ordering::Acquire);
                a.seg.u32_at(WAITERS).fetch_add(1, Ordering::SeqCst);
                a.waiting = true;
            }
        }
    }

    fn wait(&mut self, timeout_ns: u64) {
        let Some(a) = self.attached.as_mut() else {
            // Nothing to wait on yet: sleep briefly, then poll will try to attach.
            std::thread::sleep(std::time::Duration::from_nanos(
                timeout_ns.min(ATTACH_RETRY_NS),
            ));
            return;
        };
        if !a.waiting || !self.blocking {
            std::thread::yield_now();
            return;
        }
        if a.has_data() || a.seg.u32_at(CLOSED).load(Ordering::Acquire) != 0 {
            return;
        }
        let ts = rustix::thread::futex::Timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as i64,
            tv_nsec: (timeout_ns % 1_000_000_000) as i64,
        };
        let word = a.seg.u32_at(WAKE_SEQ);
        // Returns at once if the publisher bumped the word since `prepare_wait`.
        let _ = rustix::thread::futex::wait(
            word,
            rustix::thread::futex::Flags::empty(),
            a.wake_seq_seen,
            Some(&ts),
        );
        a.wake_seq_seen = word.load(Ordering::Acquire);
        a.empty_polls = LIVENESS_CHECK_EVERY; // check the publisher on the next empty poll
    }

    fn cancel_wait(&mut self) {
        if let Some(a) = self.attached.as_mut() {
            if a.waiting {
                a.seg.u32_at(WAITERS).fetch_sub(1, Ordering::SeqCst);
                a.waiting = false;
            }
        }
    }
}
