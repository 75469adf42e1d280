//! The single writer of a shared-memory log.

use super::layout::*;
use super::segment::{process_alive, Created, Segment, SegmentSpec};
use super::IpcConfig;
use crate::error::{OfferError, OpenError};
use peregrine_proto::counters::PublisherCounters;
use peregrine_wire::data::{words, DATA_HEADER_LEN};
use peregrine_wire::header::{flags, FrameType};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// How often (in refused offers) a back-pressured publisher checks whether the subscriber holding
/// it back is still alive.
const REAP_CHECK_EVERY: u32 = 4096;

/// Room for one message claimed in the log by [`IpcPublisher::claim`], until it is committed
/// (or dropped, which abandons it).
#[derive(Debug)]
#[must_use = "a claim publishes nothing until it is committed"]
pub struct IpcClaim {
    /// The frame's offset in the log.
    off: usize,
    /// The position before the PAD this claim may have written.
    start: u64,
    /// The frame's position (after that PAD): the publisher's position until the commit.
    position: u64,
    /// The claim position stored for this frame.
    claim: u64,
    clean_first: bool,
    seq: u64,
    len: usize,
    aligned: u64,
}

/// Publishes messages into a shared-memory log: one per name on the host.
#[derive(Debug)]
pub struct IpcPublisher {
    seg: Segment,
    log: *mut u8,
    capacity: u64,
    mask: u64,
    /// Position the next frame will be written at.
    position: u64,
    /// Sequence number the next DATA frame will carry.
    next_sequence: u64,
    /// Claims must stay at or below this position; when one would pass it, the cold
    /// `refresh_limit` runs: in back-pressure mode it recomputes the limit from the subscriber
    /// table (so the fast path reads no shared line), in overwrite mode it moves it a lap on.
    /// Both first check whether the segment was damaged, which sets it to 0 for good.
    limit: u64,
    overwrite: bool,
    max_message: usize,
    session_id: u32,
    stream_id: u32,
    refused_since_reap_check: u32,
    counters: PublisherCounters,
    created: Created,
    /// The segment's path, leaked once it is found damaged (for the `Copy` error).
    damaged: Option<&'static std::path::Path>,
    /// `close` was called: every claim fails with [`OfferError::Closed`].
    closed: bool,
    /// What the segment was created from: a successor (layout invariant 6) is created from it.
    spec: SegmentSpec,
    /// `flow_timeout_ms`, in nanoseconds.
    flow_timeout_ns: u64,
    /// Since when refused offers have found the subscribers holding the publisher back without
    /// progress.
    stall: Option<Stall>,
    /// Logs this publisher moved on from (layout invariant 6), oldest first, kept while a
    /// live subscriber still reads one: when the session ends, each is told its last sequence
    /// (`end_sequence`), so a subscriber left on it learns exactly what it missed even once the
    /// publisher is gone. The newest is also where a subscriber holding a reservation in the
    /// current log makes its progress (it drains that log first).
    older: Vec<Segment>,
    /// Subscribers reaped in logs before the current one.
    reaped_before: u64,
}

/// The subscribers holding a refused publisher back, as last seen, and since when they have
/// been seen so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stall {
    /// The lowest subscriber position in the current log.
    min: u64,
    /// The sum of the positions, in the previous log, of the subscribers that hold a
    /// reservation in the current one.
    previous_progress: u64,
    since_ns: u64,
}

// SAFETY: `log` is the only field that is not `Send`; it points into `seg`'s mapping, which is
// process-shared, not tied to a thread, and moves with the publisher. Not `Sync`: every write
// takes `&mut self`, so one thread at a time writes.
unsafe impl Send for IpcPublisher {}

impl IpcPublisher {
    /// Creates the segment named by the configuration (replacing one whose publisher died).
    pub fn create(cfg: &IpcConfig, topic: &str, stream_id: u32) -> Result<Self, OpenError> {
        Self::create_with_session(cfg, topic, stream_id, crate::random_u32())
    }

    /// [`create`](Self::create) with a session id chosen by the caller (topic resolution
    /// advertises one session on several transports).
    pub fn create_with_session(
        cfg: &IpcConfig,
        topic: &str,
        stream_id: u32,
        session_id: u32,
    ) -> Result<Self, OpenError> {
        crate::validate_topic(topic)?;
        let spec = SegmentSpec {
            name: cfg.name.clone(),
            capacity: cfg.capacity,
            max_subscribers: cfg.max_subscribers,
            policy: cfg.policy,
            session_id,
            stream_id,
            topic: topic.to_string(),
            dir: cfg.dir_spec(),
            generation: 0,
            first_sequence: 0,
        };
        let (seg, created) = Segment::create(&spec)?;
        let (log, capacity) = seg.log();
        Ok(IpcPublisher {
            log,
            capacity,
            mask: capacity - 1,
            position: 0,
            next_sequence: 0,
            limit: capacity,
            overwrite: cfg.policy == SlowSubscriberPolicy::Overwrite,
            max_message: max_message_for(capacity) as usize,
            session_id,
            stream_id,
            refused_since_reap_check: 0,
            counters: PublisherCounters::default(),
            created,
            damaged: None,
            closed: false,
            seg,
            spec,
            flow_timeout_ns: cfg.flow_timeout_ns,
            stall: None,
            older: Vec::new(),
            reaped_before: 0,
        })
    }

    pub fn session_id(&self) -> u32 {
        self.session_id
    }
    pub fn max_message_len(&self) -> usize {
        self.max_message
    }
    /// True when this publisher replaced a segment left by a publisher that died (or any
    /// file under its name that no live publisher held).
    pub fn reclaimed_stale_segment(&self) -> bool {
        self.created.replaced_stale
    }
    /// How many other segments (and leftovers of interrupted creations) whose owner had died
    /// this publisher removed from the directory when it was created.
    pub fn stale_segments_removed(&self) -> usize {
        self.created.removed_stale
    }
    /// True once the segment was found truncated under this publisher (then every `offer`
    /// fails with [`OfferError::SegmentDamaged`]).
    pub fn is_damaged(&self) -> bool {
        self.seg.damaged()
    }
    pub fn counters(&self) -> PublisherCounters {
        let mut c = self.counters;
        c.subscribers_reaped =
            self.reaped_before + self.seg.u64_at(SUBSCRIBERS_REAPED).load(Ordering::Relaxed);
        c
    }
    /// How many logs it moved on from it still keeps (for a subscriber still reading one).
    #[cfg(test)]
    pub(crate) fn older_logs_for_tests(&self) -> usize {
        self.older.len()
    }
    #[cfg(test)]
    pub(crate) fn seg_for_tests(&self) -> &Segment {
        &self.seg
    }
    /// Leaves the segment as a killed publisher would: its lock released (as the kernel does
    /// at death), neither marked closed nor removed.
    #[cfg(test)]
    pub(crate) fn die_for_tests(self) {
        self.seg.release_lock_for_tests();
        for seg in &self.older {
            seg.release_lock_for_tests();
        }
        std::mem::forget(self);
    }

    pub fn path(&self) -> &std::path::Path {
        self.seg.path()
    }

    /// Subscribers attached right now (0 once the segment is damaged): those reading, and
    /// those still draining the previous log that hold a reservation in this one (layout
    /// invariant 6).
    pub fn subscriber_count(&self) -> usize {
        if self.seg.damaged() {
            return 0;
        }
        (0..self.seg.max_subscribers)
            .filter(|&i| {
                matches!(
                    self.seg
                        .u32_at(self.seg.slot_offset(i) + SLOT_STATE)
                        .load(Ordering::Acquire),
                    SLOT_ACTIVE | SLOT_RESERVED
                )
            })
            .count()
    }

    /// The generation of the log being written: 0 for the session's first, one more each time
    /// subscribers that made no progress were left behind on the old one (layout invariant 6).
    pub fn generation(&self) -> u32 {
        self.seg.generation
    }

    /// Publishes one message; returns its sequence number. Never blocks: in back-pressure mode a
    /// full log gives [`OfferError::BackPressured`] and writes nothing.
    #[inline]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        self.offer_with(payload.len(), |buf| buf.copy_from_slice(payload))
    }

    /// Publishes a message of `len` bytes that `fill` writes straight into the log (zero copy).
    /// `fill` gets exactly `len` bytes, whose previous content is unspecified.
    // Always inlined: when a caller's loop grew (e.g. the api's dispatch over the network
    // transports), the compiler stopped inlining it and ipc throughput fell by a fifth.
    #[inline(always)]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        let claim = self.claim(len)?;
        fill(self.claimed_payload(&claim));
        Ok(self.commit_current(&claim))
    }

    /// Claims room for a message of `len` bytes in the log: write its payload in place through
    /// [`claimed_payload`](Self::claimed_payload), then [`commit`](Self::commit) it (zero
    /// copy). Subscribers see nothing of it before the commit. Dropping the claim without
    /// committing abandons it: the next claim or offer reuses the room and the sequence number.
    /// Fails as `offer` does (back-pressure, too large, damaged segment).
    #[inline(always)]
    pub fn claim(&mut self, len: usize) -> Result<IpcClaim, OfferError> {
        if len > self.max_message {
            return Err(OfferError::TooLarge {
                len,
                max: self.max_message,
            });
        }
        let frame_len = DATA_HEADER_LEN + len;
        let aligned = align_frame(frame_len) as u64;
        let offset = self.position & self.mask;
        let to_end = self.capacity - offset;
        let pad = if aligned > to_end { to_end } else { 0 };
        // Everything this offer writes lies below `claim` (the optional PAD, the frame, and the
        // lines it cleans ahead): invariant 3 of `layout`.
        let start = self.position;
        let claim = start + pad + aligned + CLEAN_AHEAD;
        if claim > self.limit {
            self.refresh_limit(claim)?;
        }
        let seq = self.next_sequence;
        self.seg
            .header_u64::<CLAIM_POSITION>()
            .store(claim, Ordering::Relaxed);
        // Order the claim before the writes it announces (a no-op instruction on x86).
        fence(Ordering::Release);
        // Invariant 2: clean the commit words of the lines CLEAN_AHEAD beyond this offer's
        // writes. A frame that spans CLEAN_AHEAD or more overlaps the range it cleans: clean first,
        // so its payload overwrites the marks and not the other way round.
        let clean_first = pad + aligned + FRAME_ALIGN as u64 > CLEAN_AHEAD;
        if clean_first {
            self.clean_ahead(start, claim);
        }
        if pad != 0 {
            // SAFETY: [offset, capacity) is inside the log and below `claim`; in back-pressure
            // mode no subscriber is still reading it (limit check above). A PAD is complete in
            // itself: an abandoned claim leaves it, and the position after it, in place.
            unsafe { self.write_pad(offset, pad, seq) };
            self.position += pad;
        }
        Ok(IpcClaim {
            off: (self.position & self.mask) as usize,
            start,
            position: self.position,
            claim,
            clean_first,
            seq,
            len,
            aligned,
        })
    }

    /// The payload bytes of `claim`, in the log (their previous content is unspecified). Only
    /// for a claim that [`is_current`](Self::is_current): a stale one's bytes may belong to a
    /// message published since.
    #[inline(always)]
    pub fn claimed_payload(&mut self, claim: &IpcClaim) -> &mut [u8] {
        // SAFETY: the frame [off, off + aligned) does not wrap (a PAD filled the end of the log
        // instead) and lies below the claim position stored by `claim`; no subscriber trusts
        // it before its commit (invariant 1). `DATA_HEADER_LEN + len <= aligned`, and the
        // `&mut self` borrow keeps this publisher from writing it meanwhile.
        unsafe {
            std::slice::from_raw_parts_mut(self.log.add(claim.off + DATA_HEADER_LEN), claim.len)
        }
    }

    /// True while `claim` can be committed: no offer or commit on this publisher came after it.
    #[inline]
    pub fn is_current(&self, claim: &IpcClaim) -> bool {
        claim.position == self.position && claim.seq == self.next_sequence
    }

    /// Commits `claim`: subscribers receive its payload as written. Returns its sequence number,
    /// or [`OfferError::ClaimStale`] when another offer or commit on this publisher came after
    /// the claim (it took the claim's room; nothing is published). A committed claim is stale.
    #[inline(always)]
    pub fn commit(&mut self, claim: &IpcClaim) -> Result<u64, OfferError> {
        if !self.is_current(claim) {
            return Err(OfferError::ClaimStale);
        }
        Ok(self.commit_current(claim))
    }

    /// Commits a claim known to be the current one.
    #[inline(always)]
    fn commit_current(&mut self, claim: &IpcClaim) -> u64 {
        let &IpcClaim {
            off,
            start,
            claim,
            clean_first,
            seq,
            len,
            aligned,
            ..
        } = claim;
        let frame_len = DATA_HEADER_LEN + len;
        // SAFETY: `off` starts a line of the log (8-byte aligned) and the frame's `frame_len`
        // bytes are inside the log and below the claim position; no reader trusts them before
        // the commit below (invariant 1).
        let frame = unsafe { self.log.add(off) };
        // SAFETY: as above: the fixed part lies inside the frame.
        unsafe {
            write_header(
                frame,
                [
                    words::length_type(frame_len as u32, FrameType::Data),
                    words::flags_session(flags::BEGIN | flags::END, self.session_id),
                    words::stream_length(self.stream_id, len as u32),
                ],
            );
        }
        let next = self.position + aligned;
        // SAFETY: this frame's commit word: inside the log, 8-byte aligned (a line start plus
        // COMMIT_WORD).
        unsafe { self.commit_word(off + COMMIT_WORD) }.store(seq, Ordering::Release);
        if !clean_first {
            // After the commit: the lines cleaned here were last touched a lap ago, and x86 makes
            // stores visible in order, so a cache miss on them before the commit would delay the
            // commit. The next frame's line (at `next < start + CLEAN_AHEAD`) was cleaned by an
            // earlier offer.
            self.clean_ahead(start, claim);
        }
        self.position = next;
        self.next_sequence = seq + 1;
        self.publish_tail();
        self.counters.messages += 1;
        self.counters.bytes += len as u64;
        self.wake_blocked();
        seq
    }

    /// Marks the commit words of the lines in `[start + CLEAN_AHEAD, claim)` uncommitted.
    #[inline]
    fn clean_ahead(&self, start: u64, claim: u64) {
        let mut line = start + CLEAN_AHEAD;
        while line < claim {
            // SAFETY: `line & mask` is a line's offset in the log; its commit word is in bounds
            // and 8-byte aligned, and lies below `claim`.
            unsafe { self.commit_word((line & self.mask) as usize + COMMIT_WORD) }
                .store(UNCOMMITTED, Ordering::Relaxed);
            line += FRAME_ALIGN as u64;
        }
    }

    /// # Safety
    /// `offset` must be 8-byte aligned and `offset + 8 <= capacity`.
    #[inline]
    unsafe fn commit_word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= self.capacity as usize);
        // SAFETY: the caller guarantees bounds and 8-byte alignment (the log is page-aligned,
        // so an aligned offset is an aligned address); the log outlives `&self`.
        unsafe { AtomicU64::from_ptr(self.log.add(offset).cast()) }
    }

    /// # Safety
    /// `offset` must start a line and `[offset, offset + len)` lie inside the log, below the
    /// current claim.
    unsafe fn write_pad(&mut self, offset: u64, len: u64, seq: u64) {
        let offset = offset as usize;
        // SAFETY: guaranteed by the caller; a line start is 8-byte aligned and a PAD's fixed
        // part fits in the line.
        unsafe {
            write_header(
                self.log.add(offset),
                [
                    words::length_type(len as u32, FrameType::Pad),
                    words::flags_session(0, self.session_id),
                    words::stream_length(0, 0),
                ],
            )
        };
        // SAFETY: the PAD's commit word: inside the log, 8-byte aligned.
        unsafe { self.commit_word(offset + COMMIT_WORD) }.store(seq, Ordering::Release);
    }

    /// Updates the tail seqlock (invariant 5): only this process writes it.
    #[inline]
    fn publish_tail(&self) {
        let version = self.seg.header_u64::<TAIL_VERSION>();
        let v = version.load(Ordering::Relaxed);
        version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.seg
            .header_u64::<TAIL_POSITION>()
            .store(self.position, Ordering::Relaxed);
        self.seg
            .header_u64::<TAIL_SEQUENCE>()
            .store(self.next_sequence, Ordering::Relaxed);
        version.store(v + 2, Ordering::Release);
    }

    /// Wakes blocked subscribers, if any may be blocked. The full fence is paid only while some
    /// subscriber uses the blocking idle strategy.
    #[inline]
    fn wake_blocked(&self) {
        if self
            .seg
            .header_u32::<BLOCKING_SUBSCRIBERS>()
            .load(Ordering::Relaxed)
            == 0
        {
            return;
        }
        // Pairs with the subscriber's `prepare_wait` (waiters++ then re-poll): either it sees
        // our commit, or we see it waiting.
        fence(Ordering::SeqCst);
        if self.seg.u32_at(WAITERS).load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        wake_waiters(&self.seg);
    }

    /// The cold half of `offer`'s limit check: fails for good if the segment was damaged;
    /// in overwrite mode moves the limit a lap on; in back-pressure mode recomputes it from the
    /// subscriber table and fails with `BackPressured` if `claim` still does not fit.
    #[cold]
    #[inline(never)]
    fn refresh_limit(&mut self, claim: u64) -> Result<(), OfferError> {
        if self.closed {
            return Err(OfferError::Closed);
        }
        if self.seg.damaged() {
            return Err(self.damaged_error());
        }
        if self.overwrite {
            self.limit = claim + self.capacity;
            return Ok(());
        }
        if self.refresh_back_pressure(claim) {
            Ok(())
        } else {
            self.counters.back_pressured += 1;
            Err(OfferError::BackPressured)
        }
    }

    #[cold]
    fn damaged_error(&mut self) -> OfferError {
        self.limit = 0; // every later offer comes here
        let path = *self
            .damaged
            .get_or_insert_with(|| Box::leak(self.seg.path().to_path_buf().into_boxed_path()));
        OfferError::SegmentDamaged { path }
    }

    /// Recomputes the back-pressure limit from the subscriber table. Returns whether `claim` now
    /// fits. Subscribers that made no progress for `flow_timeout_ms` of refused offers are
    /// left on this log: the publisher goes on in a successor (layout invariant 6).
    fn refresh_back_pressure(&mut self, claim: u64) -> bool {
        // Pairs with a joining subscriber's registration (store, fence, read tail): either we
        // see its slot, or it sees our tail and starts there (see `subscriber::attach`).
        fence(Ordering::SeqCst);
        let max = self.seg.max_subscribers;
        let mut min = self.position;
        let mut slowest = None;
        let mut previous_progress = 0u64;
        for i in 0..max {
            let slot = self.seg.slot_offset(i);
            let state = self.seg.u32_at(slot + SLOT_STATE).load(Ordering::Acquire);
            if slot_holds(state) {
                let p = self
                    .seg
                    .u64_at(slot + SLOT_POSITION)
                    .load(Ordering::Acquire);
                if p < min {
                    min = p;
                    slowest = Some(i);
                }
                if state == SLOT_RESERVED {
                    if let Some(prev) = self
                        .older
                        .last()
                        .filter(|o| o.generation.wrapping_add(1) == self.seg.generation)
                    {
                        previous_progress = previous_progress.wrapping_add(
                            prev.u64_at(prev.slot_offset(i) + SLOT_POSITION)
                                .load(Ordering::Relaxed),
                        );
                    }
                }
            }
        }
        self.limit = min + self.capacity;
        if !self.older.is_empty() {
            // At least once a lap: an old log its subscribers have all left goes (its memory
            // with it, once theirs is unmapped too).
            self.prune_older(false);
        }
        if claim <= self.limit {
            self.refused_since_reap_check = 0;
            self.stall = None;
            return true;
        }
        self.refused_since_reap_check += 1;
        if self.refused_since_reap_check >= REAP_CHECK_EVERY {
            self.refused_since_reap_check = 0;
            self.prune_older(true);
            if let Some(i) = slowest {
                if self.reap_if_dead(i) {
                    return self.refresh_back_pressure(claim);
                }
            }
        }
        let now = peregrine_agent::monotonic_ns();
        match self.stall {
            Some(s) if s.min == min && s.previous_progress == previous_progress => {
                if now.saturating_sub(s.since_ns) >= self.flow_timeout_ns {
                    self.stall = None;
                    // This offer is refused all the same: its place was computed in the old
                    // log. The next one goes to the new log.
                    self.start_successor(min);
                }
            }
            _ => {
                self.stall = Some(Stall {
                    min,
                    previous_progress,
                    since_ns: now,
                })
            }
        }
        false
    }

    /// Leaves the subscribers at position `stalled_at` (the lowest) on this log and goes on in
    /// a successor (layout invariant 6), where every other subscriber has a reservation at
    /// position 0. Leaves everything as it was if the successor cannot be created (the
    /// directory or memory refused it); the stall clock then starts again.
    #[cold]
    #[inline(never)]
    fn start_successor(&mut self, stalled_at: u64) {
        let mut spec = self.spec.clone();
        spec.generation = self.seg.generation.wrapping_add(1);
        spec.first_sequence = self.next_sequence;
        let old = &self.seg;
        let mut left = 0u64;
        let created = old.create_successor(&spec, |new| {
            for i in 0..old.max_subscribers {
                let from = old.slot_offset(i);
                let state = old.u32_at(from + SLOT_STATE).load(Ordering::Acquire);
                if !slot_holds(state) {
                    continue;
                }
                let position = old.u64_at(from + SLOT_POSITION).load(Ordering::Acquire);
                // A reservation in this log is at position 0, the lowest, so it is among the
                // stalled ones whenever it holds the publisher back.
                if position <= stalled_at {
                    left += 1;
                    continue;
                }
                let to = new.slot_offset(i);
                let r = Ordering::Relaxed;
                new.u32_at(to + SLOT_PID)
                    .store(old.u32_at(from + SLOT_PID).load(r), r);
                new.u64_at(to + SLOT_START_TICKS)
                    .store(old.u64_at(from + SLOT_START_TICKS).load(r), r);
                new.u64_at(to + SLOT_POSITION).store(0, r);
                new.u32_at(to + SLOT_STATE).store(SLOT_RESERVED, r);
            }
        });
        let new = match created {
            Ok(new) => new,
            Err(e) => {
                tracing::warn!(
                    "shared-memory publisher {}: subscribers made no progress for flow_timeout_ms, but a new log could not be created ({e}); offers stay refused until they read, or the next attempt, a flow timeout later, succeeds",
                    self.seg.path().display()
                );
                return;
            }
        };
        // The new log is under the name; now tell the old log's readers where to go. The
        // successor word is ordered before `closed` (release), which they load with acquire.
        let old = std::mem::replace(&mut self.seg, new);
        old.u32_at(SUCCESSOR)
            .store(self.seg.generation, Ordering::Relaxed);
        old.u32_at(CLOSED).store(1, Ordering::Release);
        wake_waiters(&old);
        self.reaped_before += old.u64_at(SUBSCRIBERS_REAPED).load(Ordering::Relaxed);
        self.older.push(old);
        self.prune_older(true);
        self.counters.flow_dropped += left;
        let (log, capacity) = self.seg.log();
        self.log = log;
        debug_assert_eq!(capacity, self.capacity);
        self.position = 0;
        self.limit = self.capacity;
        self.refused_since_reap_check = 0;
    }

    /// Lets go of the older logs no subscriber reads any more: whose slots are all free, and
    /// with `check_alive` (it reads `/proc`), whose subscribers' processes are all gone.
    fn prune_older(&mut self, check_alive: bool) {
        self.older.retain(|seg| {
            (0..seg.max_subscribers).any(|i| {
                let slot = seg.slot_offset(i);
                slot_holds(seg.u32_at(slot + SLOT_STATE).load(Ordering::Acquire))
                    && (!check_alive
                        || process_alive(
                            seg.u32_at(slot + SLOT_PID).load(Ordering::Relaxed),
                            seg.u64_at(slot + SLOT_START_TICKS).load(Ordering::Relaxed),
                        ))
            })
        });
    }

    /// Tells the subscribers still reading older logs where the session ended: the sequence
    /// after its last message (layout invariant 6).
    fn end_older(&mut self) {
        for seg in self.older.drain(..) {
            seg.u64_at(END_SEQUENCE)
                .store(self.next_sequence, Ordering::Release);
            wake_waiters(&seg);
        }
    }

    /// Frees slot `i` if the subscriber that holds it died without detaching.
    fn reap_if_dead(&mut self, i: u32) -> bool {
        let slot = self.seg.slot_offset(i);
        let pid = self.seg.u32_at(slot + SLOT_PID).load(Ordering::Relaxed);
        let ticks = self
            .seg
            .u64_at(slot + SLOT_START_TICKS)
            .load(Ordering::Relaxed);
        if process_alive(pid, ticks) {
            return false;
        }
        let state = self.seg.u32_at(slot + SLOT_STATE);
        let freed = [SLOT_ACTIVE, SLOT_JOINING, SLOT_RESERVED]
            .into_iter()
            .any(|from| {
                state
                    .compare_exchange(from, SLOT_FREE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            });
        if freed {
            self.seg
                .u64_at(SUBSCRIBERS_REAPED)
                .fetch_add(1, Ordering::Relaxed);
        }
        freed
    }
}

/// Wakes every subscriber of `seg` blocked in `futex_wait` on its wake word.
fn wake_waiters(seg: &Segment) {
    let word = seg.u32_at(WAKE_SEQ);
    word.fetch_add(1, Ordering::Release);
    let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), u32::MAX);
}

/// Writes the fixed part of a DATA or PAD frame but its sequence, which commits the frame and is
/// stored last (invariant 1): the words at `words::LENGTH_TYPE`, `FLAGS_SESSION` and
/// `STREAM_LENGTH`, as three 8-byte stores.
///
/// # Safety
/// `frame` must be 8-byte aligned and valid for writes of `DATA_HEADER_LEN` bytes.
#[inline(always)]
unsafe fn write_header(frame: *mut u8, [length_type, flags_session, stream_length]: [u64; 3]) {
    debug_assert!(frame as usize % 8 == 0);
    // SAFETY: guaranteed by the caller; each word's offset is a multiple of 8 below
    // DATA_HEADER_LEN (asserted in `layout`), so every store is aligned and in bounds.
    unsafe {
        frame
            .add(words::LENGTH_TYPE)
            .cast::<u64>()
            .write_volatile(length_type);
        frame
            .add(words::FLAGS_SESSION)
            .cast::<u64>()
            .write_volatile(flags_session);
        frame
            .add(words::STREAM_LENGTH)
            .cast::<u64>()
            .write_volatile(stream_length);
    }
}

impl IpcPublisher {
    /// Ends the session: subscribers see it closed once they have read what was published;
    /// later offers and claims fail with [`OfferError::Closed`]. The segment stays until the
    /// publisher is dropped.
    pub fn close(&mut self) {
        self.closed = true;
        self.limit = 0; // every later claim goes through `refresh_limit`
        self.end_older();
        self.seg.u32_at(CLOSED).store(1, Ordering::Release);
        self.wake_all();
    }
}

impl Drop for IpcPublisher {
    fn drop(&mut self) {
        self.end_older();
        self.seg.u32_at(CLOSED).store(1, Ordering::Release);
        self.wake_all();
        self.seg.unlink_if_ours();
    }
}

use super::SlowSubscriberPolicy;
