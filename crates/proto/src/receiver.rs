//! The receiving half of a network stream, sans I/O: sessions, ordering, reassembly, loss
//! accounting, STATUS scheduling.
//!
//! A [`Receiver`] follows one stream (topic) across every session that sends it (one per
//! publisher). The driver hands it datagrams (or chunks of a TCP stream cut at frame
//! boundaries) with their source address and `now_ns`; it calls the handler for each complete
//! message, in sequence order per session, borrowing the driver's buffer when a message sits in
//! one frame and its own reassembly buffer when it was fragmented.
//!
//! **Loss.** Without repair ([`ReceiverConfig::nak`] `None`) a sequence number jump is reported
//! at once as a [`SubscriberEvent::Lost`] with the exact range. With repair, frames after a gap
//! are held (in [`HeldFrames`]), the gap is asked for by NAK
//! ([`poll_repair`](Receiver::poll_repair): a fixed delay on unicast, a random back-off with
//! suppression by other receivers' NAKs on multicast, retries), filled by retransmissions, and
//! given up with an exact `Lost` when the sender no longer retains it, the tries or the stall
//! limit run out, or the held bytes reach their limit.
//!
//! **Joining.** A receiver joining a session mid-stream starts where [`LateJoin`] says: at the
//! first frame it sees, or earlier by asking the sender for what it retains (a late-join gap,
//! repaired like any other, what is no longer retained reported `Lost`). Fragments before the
//! first BEGIN are dropped (docs/protocol.md §12).
//!
//! **Hostile input** (docs/protocol.md §13, "Receiver rules"). A session is bound to the source
//! address it was first heard from; its frames from elsewhere are dropped and counted
//! ([`ReceiverStats::foreign_source`]). A frame (DATA, HEARTBEAT or BYE) that would move a
//! session further than a legitimate sender can ([`Receiver::jump_bound`]: the window, the
//! sender's announced retention, at least [`ReceiverConfig::max_jump_frames`]) is held, not
//! acted on, until a second frame from the source confirms the new position; and a
//! HEARTBEAT's `oldest_retained` gives up only gaps that earlier frames revealed. Memory is
//! bounded whatever arrives: sessions (`max_sessions`), one held jump per session, gaps
//! ([`MAX_GAPS`]), held bytes and the span of the reorder ring (`NakConfig`).
//!
//! **Where each part is.** This file takes frames apart and hands them to the units in
//! `receiver/`: `in_order.rs` (the common case first: a run of whole messages in sequence,
//! taken in one loop), `session.rs` (the sessions followed, bound to their source, created with late
//! join), `jump.rs` (the jump bound and its confirmation), `reassembly.rs` (messages from
//! in-order frames), `gaps.rs` (the loss detector's record of missing ranges), `nak.rs` (when
//! to NAK: delay, back-off, retries, giving up), `repair.rs` (holding frames behind gaps and
//! delivering them in order), `status.rs` (STATUS keep-alives, window updates, JOIN and
//! LEAVE) and `config.rs`. Each has its own virtual-clock tests; `tests.rs` drives the whole.

mod config;
mod gaps;
mod in_order;
mod jump;
mod nak;
mod reassembly;
mod repair;
mod session;
mod status;

pub use config::{LateJoin, LateJoinError, ReceiverConfig, LATE_JOIN_START_MAX};
pub use gaps::MAX_GAPS;
pub use nak::NakConfig;
pub use peregrine_wire::header::status_flags;

use crate::counters::SubscriberCounters;
use crate::events::{Message, SubscriberEvent};
use jump::{Claim, Verdict};
use nak::NakDelay;
use peregrine_wire::bye::{ByeFrame, ByeRepr};
use peregrine_wire::data::{DataFrame, DataRepr};
use peregrine_wire::header::{flags, FrameType, Frames};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::nak::{NakFrame, NakRepr};
use peregrine_wire::status::STATUS_LEN;
use peregrine_wire::WireError;
use reassembly::Step;
use session::Session;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Counts beyond [`SubscriberCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Frames of other streams (topics) sharing the socket.
    pub other_streams: u64,
    /// Frames of sessions beyond `max_sessions`.
    pub sessions_refused: u64,
    pub status_sent: u64,
    /// Gaps found (frames missing), NAK frames sent and the ranges they carried.
    pub gaps_detected: u64,
    pub nak_ranges_sent: u64,
    /// NAKs not sent because another receiver's NAK asked for the same frames.
    pub naks_suppressed: u64,
    /// Frames given up: past the retention of the sender, out of tries, or stalled too long.
    pub unrecoverable: u64,
    /// Frames of a followed session from another source address than the one the session
    /// was first heard from: dropped.
    pub foreign_source: u64,
    /// Frames (DATA, HEARTBEAT, BYE) that jumped further than the jump bound: held until a
    /// second frame confirms the position (`jumps_confirmed`), or dropped unconfirmed when
    /// another such frame took their place (`jumps_discarded`).
    pub jumps_held: u64,
    pub jumps_confirmed: u64,
    pub jumps_discarded: u64,
    /// Sessions joined mid-stream that asked for what came before (late join).
    pub late_joins: u64,
    /// Frames of a session that said goodbye (BYE), dropped: a retransmission sent for another
    /// receiver after it, not a new session.
    pub closed_session_frames: u64,
    /// Rejected frames by [`WireError::index`].
    pub wire_errors: [u64; WireError::NAMES.len()],
}

/// What a receiver holds in memory now, in the units its bounds are stated in (for tests and
/// the fuzz target: none of it may grow without bound whatever arrives).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub sessions: usize,
    /// Gaps open, over all sessions (each session keeps at most [`MAX_GAPS`]).
    pub gaps: usize,
    /// Bytes of frames held behind gaps, and slots of the reorder rings.
    pub held_bytes: usize,
    pub held_slots: usize,
    /// Bytes of frames held while a jump waits for confirmation (one frame per session).
    pub jump_bytes: usize,
    pub departed: usize,
    pub closed: usize,
    /// Events not yet taken with [`Receiver::next_event`].
    pub events: usize,
}

/// Where [`Receiver::on_datagram`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Every frame of the datagram was processed.
    Done,
    /// The delivery limit was reached; call again from this byte offset.
    Resume(usize),
}

/// The receiver of one stream. See the [module documentation](self).
#[derive(Debug)]
pub struct Receiver {
    cfg: ReceiverConfig,
    sessions: Vec<Session>,
    events: VecDeque<SubscriberEvent>,
    counters: SubscriberCounters,
    stats: ReceiverStats,
    /// Sessions that went away without a BYE (timeout, lost connection) and where they stood,
    /// so a session that comes back reports exactly what it lost in between.
    departed: VecDeque<(u32, u64)>,
    /// Sessions that said goodbye (BYE), most recent last. A publisher never opens a session
    /// again once it closed it, so a frame of one of these is a retransmission that another
    /// receiver's NAK brought: taken for a new session, it would deliver the closed stream
    /// again from its start.
    closed: VecDeque<u32>,
    /// Index of the session of the last frame (a cache: checked before use).
    last_session: usize,
    /// DATA frames seen and their bytes (8-byte aligned), for the byte-based window.
    frames_seen: u64,
    frame_bytes_seen: u64,
    /// Datagrams read (for `window_datagrams`).
    datagrams_seen: u64,
    /// The wait before each new gap's first NAK (seeded from `receiver_id`).
    nak_delay: NakDelay,
    /// Detection-to-repair times of recovered frames, when `record_recovery` is on.
    recovery_ns: Option<Vec<u64>>,
    /// Tests: every frame through the general path (the in-order run is compared with it).
    #[cfg(test)]
    general_only: bool,
}

impl Receiver {
    pub fn new(cfg: ReceiverConfig) -> Self {
        Receiver {
            cfg,
            sessions: Vec::new(),
            events: VecDeque::new(),
            counters: SubscriberCounters::default(),
            stats: ReceiverStats::default(),
            departed: VecDeque::new(),
            closed: VecDeque::new(),
            last_session: 0,
            frames_seen: 0,
            frame_bytes_seen: 0,
            datagrams_seen: 0,
            nak_delay: NakDelay::new(cfg.receiver_id),
            recovery_ns: None,
            #[cfg(test)]
            general_only: false,
        }
    }

    pub fn counters(&self) -> SubscriberCounters {
        self.counters
    }
    /// The counters of each session followed now, by session id (those of sessions that
    /// ended are in [`counters`](Self::counters) only).
    pub fn session_counters(&self) -> impl Iterator<Item = (u32, SubscriberCounters)> + '_ {
        self.sessions.iter().map(|s| (s.session_id, s.counters))
    }
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        self.events.pop_front()
    }
    /// What it holds in memory now.
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            sessions: self.sessions.len(),
            departed: self.departed.len(),
            closed: self.closed.len(),
            events: self.events.len(),
            ..Footprint::default()
        };
        for s in &self.sessions {
            f.gaps += s.gaps.len();
            f.held_bytes += s.held.bytes();
            f.held_slots += s.held.span();
            f.jump_bytes += s.suspect.bytes();
        }
        f
    }
    /// Checks the invariants of each session's loss-repair state (for tests and the fuzz
    /// target): the gaps are sorted, disjoint and within `[next_sequence, high)`; the frames
    /// held lie there too, outside the gaps; and together they cover that range exactly, so
    /// every frame held has a gap in front of it and will be delivered or given up.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.cfg.nak.is_none() {
            return Ok(());
        }
        for s in &self.sessions {
            let (next, high) = (s.next_sequence, s.high);
            let fail = |what: &str| {
                Err(format!(
                    "session {}: {what}: next {next} high {high} gaps {:?} held {:?}",
                    s.session_id,
                    s.gaps,
                    s.held.sequences().take(20).collect::<Vec<_>>()
                ))
            };
            if next > high {
                return fail("next past high");
            }
            let covered = match s.gaps.check(next, high) {
                Ok(covered) => covered,
                Err(what) => return fail(what),
            };
            for q in s.held.sequences() {
                if q <= next || q >= high || s.gaps.contains(q) {
                    return fail("a held frame outside the range or inside a gap");
                }
            }
            if covered + s.held.len() as u128 != u128::from(high - next) {
                return fail("gaps and held frames do not cover the range");
            }
        }
        Ok(())
    }
    /// True while at least one session is followed.
    pub fn is_connected(&self) -> bool {
        !self.sessions.is_empty()
    }
    /// The senders of the sessions followed (where STATUS frames go).
    pub fn sources(&self) -> impl Iterator<Item = (u32, SocketAddr)> + '_ {
        self.sessions.iter().map(|s| (s.session_id, s.source))
    }

    /// Processes the frames of `datagram` from byte `start`, delivering at most `limit`
    /// messages to `handler`. Returns how many were delivered and where it stopped.
    pub fn on_datagram<F: FnMut(Message<'_>)>(
        &mut self,
        datagram: &[u8],
        start: usize,
        source: SocketAddr,
        now_ns: u64,
        handler: &mut F,
        limit: usize,
    ) -> (usize, Progress) {
        let mut delivered = 0;
        if start == 0 {
            self.datagrams_seen += 1;
        }
        let mut at = start.min(datagram.len());
        loop {
            if delivered >= limit {
                if at < datagram.len() {
                    return (delivered, Progress::Resume(at));
                }
                return (delivered, Progress::Done);
            }
            // The common case first (whole messages in sequence), then one frame of anything
            // else through the general path.
            let (taken, n) =
                self.in_order_run(&datagram[at..], source, now_ns, handler, limit - delivered);
            at += taken;
            delivered += n;
            if n > 0 {
                continue;
            }
            let mut frames = Frames::new(&datagram[at..]);
            let Some(item) = frames.next() else {
                return (delivered, Progress::Done);
            };
            match item {
                Err(e) => {
                    self.reject(e);
                    return (delivered, Progress::Done);
                }
                Ok((ty, bytes)) => match self.on_frame(ty, bytes, source, now_ns, handler) {
                    Ok(n) => delivered += n,
                    Err(e) => self.reject(e),
                },
            }
            at = datagram.len() - frames.remaining().len();
        }
    }

    fn reject(&mut self, e: WireError) {
        self.counters.corrupt_frames += 1;
        self.stats.wire_errors[e.index()] += 1;
    }

    fn on_frame<F: FnMut(Message<'_>)>(
        &mut self,
        ty: FrameType,
        bytes: &[u8],
        source: SocketAddr,
        now_ns: u64,
        handler: &mut F,
    ) -> Result<usize, WireError> {
        match ty {
            FrameType::Data => {
                // `Frames` checked the common header; check the rest once.
                let d = DataRepr::parse_checked_header(&DataFrame::new_unchecked(bytes))?;
                if d.stream_id != self.cfg.stream_id {
                    self.stats.other_streams += 1;
                    return Ok(0);
                }
                if d.sequence == u64::MAX {
                    // Never a sequence number (docs/protocol.md §12): one past it would not fit.
                    return Err(WireError::BadField {
                        field: "data.sequence",
                        value: d.sequence,
                    });
                }
                let Some(i) = self.session(d.session_id, d.sequence, source, now_ns) else {
                    return Ok(0);
                };
                if self.beyond_bound(i, d.sequence) {
                    let claim = Claim::Data {
                        sequence: d.sequence,
                    };
                    return Ok(self.on_jump(i, claim, bytes, now_ns, handler));
                }
                Ok(self.on_data(i, &d, bytes, now_ns, handler))
            }
            FrameType::Heartbeat => {
                let h = HeartbeatRepr::parse(&HeartbeatFrame::new_checked(bytes)?)?;
                if h.stream_id != self.cfg.stream_id {
                    self.stats.other_streams += 1;
                    return Ok(0);
                }
                let Some(i) = self.session(h.session_id, h.next_sequence, source, now_ns) else {
                    return Ok(0);
                };
                let claim = Claim::Heartbeat {
                    next: h.next_sequence,
                    oldest: h.oldest_retained,
                };
                if self.beyond_bound(i, h.next_sequence) {
                    return Ok(self.on_jump(i, claim, &[], now_ns, handler));
                }
                Ok(self.apply(i, claim, &[], false, now_ns, handler))
            }
            FrameType::Bye => {
                let b = ByeRepr::parse(&ByeFrame::new_checked(bytes)?)?;
                if b.stream_id != self.cfg.stream_id {
                    self.stats.other_streams += 1;
                    return Ok(0);
                }
                let Some(i) = self.known_session(b.session_id, source) else {
                    return Ok(0);
                };
                let claim = Claim::Bye {
                    final_next: b.final_next_sequence,
                };
                if self.beyond_bound(i, b.final_next_sequence) {
                    return Ok(self.on_jump(i, claim, &[], now_ns, handler));
                }
                Ok(self.apply(i, claim, &[], false, now_ns, handler))
            }
            FrameType::Pad => {
                DataFrame::new_checked(bytes)?;
                Ok(0)
            }
            // Another receiver's NAK on a multicast group: the frames it asks for will be
            // retransmitted to the group, so do not ask for them too (suppression).
            FrameType::Nak => {
                let n = NakRepr::parse(&NakFrame::new_checked(bytes)?)?;
                if n.stream_id != self.cfg.stream_id || n.receiver_id == self.cfg.receiver_id {
                    return Ok(0);
                }
                let Some(nak) = self.cfg.nak.filter(|c| c.multicast) else {
                    return Ok(0);
                };
                let ranges = n
                    .ranges
                    .iter()
                    .map(|r| (r.start, r.start.saturating_add(u64::from(r.count))));
                self.on_foreign_nak(n.session_id, ranges, &nak, now_ns);
                Ok(0)
            }
            // Other receivers' STATUS frames on a shared multicast group, resolver traffic:
            // checked and ignored.
            _ => {
                peregrine_wire::FrameRepr::parse(bytes)?;
                Ok(0)
            }
        }
    }

    /// Acts on what a frame says (a DATA frame's bytes in `frame`): `trusted` when a second
    /// frame confirmed it, so even its `oldest_retained` may give up the gap it reveals.
    fn apply<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        claim: Claim,
        frame: &[u8],
        trusted: bool,
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        match claim {
            Claim::Data { .. } => {
                // Checked when it arrived.
                match DataRepr::parse_checked_header(&DataFrame::new_unchecked(frame)) {
                    Ok(d) => self.on_data(i, &d, frame, now_ns, handler),
                    Err(_) => 0,
                }
            }
            Claim::Heartbeat { next, oldest } => {
                let s = &mut self.sessions[i];
                s.status.announce(next);
                s.retained_span = next.saturating_sub(oldest);
                if self.cfg.nak.is_some() {
                    return self.on_heartbeat_repaired(i, next, oldest, trusted, now_ns, handler);
                }
                self.tail_loss(i, next);
                0
            }
            Claim::Bye { final_next } => {
                // The publisher has gone: nothing more can be repaired.
                let mut n = 0;
                if self.cfg.nak.is_some() {
                    n = self.give_up_all(i, handler);
                }
                self.tail_loss(i, final_next);
                self.close(i);
                n
            }
        }
    }

    /// Whether a frame reaching `end` (a DATA frame's sequence, a HEARTBEAT's `next_sequence`,
    /// a BYE's `final_next_sequence`) would skip more than [`jump_bound`](Self::jump_bound)
    /// sequence numbers past what session `i` has seen. One compare for a frame in order.
    #[inline]
    fn beyond_bound(&self, i: usize, end: u64) -> bool {
        let s = &self.sessions[i];
        let seen = if self.cfg.nak.is_some() {
            s.high
        } else {
            s.next_sequence
        };
        jump::beyond(seen, end, self.jump_bound_of(s))
    }

    /// How many sequence numbers a single frame of session `session_id` may skip and be
    /// believed: the largest of [`ReceiverConfig::max_jump_frames`], the window this receiver
    /// announces (a sender that respects it is never further ahead) and the span the sender
    /// last announced it retains (a receiver that far behind can still repair).
    pub fn jump_bound(&self, session_id: u32) -> Option<u64> {
        self.sessions
            .iter()
            .find(|s| s.session_id == session_id)
            .map(|s| self.jump_bound_of(s))
    }

    fn jump_bound_of(&self, s: &Session) -> u64 {
        self.cfg
            .max_jump_frames
            .max(u64::from(self.window()))
            .max(s.retained_span)
    }

    /// A frame beyond the jump bound: held until a second frame from the source confirms it
    /// ([`jump`](self::jump)), then both are acted on.
    fn on_jump<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        claim: Claim,
        frame: &[u8],
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        let bound = self.jump_bound_of(&self.sessions[i]);
        match self.sessions[i].suspect.offer(claim, frame, bound) {
            Verdict::Held { replaced } => {
                self.stats.jumps_discarded += u64::from(replaced);
                self.stats.jumps_held += 1;
                0
            }
            Verdict::Confirmed {
                first: (first, b1),
                second: (second, b2),
            } => {
                self.stats.jumps_confirmed += 1;
                let mut n = self.apply(i, first, &b1, true, now_ns, handler);
                if matches!(first, Claim::Bye { .. }) {
                    return n; // two BYEs: the session is gone
                }
                n += self.apply(i, second, &b2, true, now_ns, handler);
                n
            }
        }
    }

    /// A HEARTBEAT or BYE says the stream reached `next`: anything we have not seen below it
    /// is lost.
    fn tail_loss(&mut self, i: usize, next: u64) {
        let s = &mut self.sessions[i];
        if next > s.next_sequence {
            let from = s.next_sequence;
            s.next_sequence = next;
            s.reassembly.cut();
            self.lost(i, from, next - from);
        }
    }

    /// Counts on session `i` and on the receiver as a whole.
    fn count(&mut self, i: usize, f: impl Fn(&mut SubscriberCounters)) {
        f(&mut self.counters);
        f(&mut self.sessions[i].counters);
    }

    fn lost(&mut self, i: usize, from_sequence: u64, count: u64) {
        let session_id = self.sessions[i].session_id;
        // Saturating: a hostile sender's jumps can add up past 2^64.
        self.count(i, |c| {
            c.gaps += 1;
            c.lost = c.lost.saturating_add(count);
        });
        self.events.push_back(SubscriberEvent::Lost {
            session_id,
            from_sequence,
            count,
        });
    }

    /// The flow-control window announced now, in frames (0: none).
    pub fn window(&self) -> u32 {
        if self.cfg.window_frames == 0 && self.cfg.window_datagrams > 0 {
            let per_datagram = if self.frames_seen >= 1000 {
                (self.frames_seen / self.datagrams_seen.max(1)).max(1)
            } else {
                1
            };
            return (u64::from(self.cfg.window_datagrams) * per_datagram).min(u64::from(u32::MAX))
                as u32;
        }
        if self.cfg.window_frames > 0 || self.cfg.window_bytes == 0 {
            return self.cfg.window_frames;
        }
        let avg = if self.frames_seen >= 1000 {
            (self.frame_bytes_seen / self.frames_seen).max(64)
        } else {
            1472
        };
        (self.cfg.window_bytes / avg).clamp(16, u64::from(u32::MAX)) as u32
    }

    fn on_data<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        d: &DataRepr<'_>,
        frame: &[u8],
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        self.frames_seen += 1;
        self.frame_bytes_seen += (32 + d.payload.len()).next_multiple_of(8) as u64;
        if d.flags & flags::RETRANSMIT != 0 {
            self.count(i, |c| c.retransmits_received += 1);
        }
        let s = &mut self.sessions[i];
        if d.sequence < s.next_sequence {
            self.count(i, |c| c.duplicates += 1);
            return 0;
        }
        if self.cfg.nak.is_some() {
            return self.on_data_repaired(i, d, frame, now_ns, handler);
        }
        if d.sequence > s.next_sequence {
            let from = s.next_sequence;
            s.next_sequence = d.sequence;
            s.reassembly.cut();
            self.lost(i, from, d.sequence - from);
        }
        self.deliver(i, d, handler)
    }

    /// The in-order delivery of frame `d`, next in sequence: whole messages, fragments,
    /// reassembly.
    fn deliver<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        d: &DataRepr<'_>,
        handler: &mut F,
    ) -> usize {
        if self.sessions[i].tentative {
            // The late join's first frame came: the sender still had it.
            self.settle(i, true);
        }
        let max_message_len = self.cfg.max_message_len;
        let s = &mut self.sessions[i];
        s.next_sequence = d.sequence + 1;
        match s.reassembly.on_frame(d, max_message_len) {
            Step::Nothing => 0,
            Step::Whole(payload) => {
                let n = payload.len() as u64;
                self.count(i, |c| {
                    c.messages += 1;
                    c.bytes += n;
                });
                handler(Message {
                    payload,
                    sequence: d.sequence,
                    session_id: d.session_id,
                });
                1
            }
            Step::Complete { first, message } => {
                let n = message.len() as u64;
                self.count(i, |c| {
                    c.messages += 1;
                    c.bytes += n;
                });
                handler(Message {
                    payload: &message,
                    sequence: first,
                    session_id: d.session_id,
                });
                // Keep the allocation for the next fragmented message.
                self.sessions[i].reassembly.recycle(message);
                1
            }
            Step::Corrupt => {
                self.count(i, |c| c.corrupt_frames += 1);
                0
            }
        }
    }

    /// The earliest time at which [`poll`](Self::poll) has work that only time brings: a
    /// session's keep-alive STATUS or its timeout (`u64::MAX`: no session). A driver may skip
    /// `poll` until then, except after a datagram it handed to
    /// [`on_datagram`](Self::on_datagram) (a new session, a HEARTBEAT to confirm, a window
    /// update due are what frames bring) and after [`poll_repair`](Self::poll_repair)
    /// delivered. A STATUS sent or a frame heard since only moves the true time later.
    pub fn next_timer_ns(&self) -> u64 {
        let interval_ns = self.cfg.status_interval_ns;
        let timeout_ns = self.cfg.session_timeout_ns;
        self.sessions
            .iter()
            .map(|s| {
                // `poll` declares a session dead once strictly more than the timeout passed.
                let dies_ns = s.last_heard_ns.saturating_add(timeout_ns).saturating_add(1);
                s.status.keepalive_at(interval_ns).min(dies_ns)
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Runs the timers: declares silent sessions dead and emits the STATUS frames that are due
    /// ([`status`](self::status)) by calling `emit(destination, frame)`.
    pub fn poll<E: FnMut(SocketAddr, &[u8])>(&mut self, now_ns: u64, emit: &mut E) {
        let mut i = 0;
        while i < self.sessions.len() {
            let s = &self.sessions[i];
            if now_ns.saturating_sub(s.last_heard_ns) > self.cfg.session_timeout_ns {
                self.depart(i);
                continue;
            }
            i += 1;
        }
        // The window (divisions by the averages seen) only when a STATUS goes: this runs on
        // every poll that delivered, and on every empty one.
        let interval_ns = self.cfg.status_interval_ns;
        if !self
            .sessions
            .iter()
            .any(|s| s.status.due(now_ns, s.next_sequence, interval_ns))
        {
            return;
        }
        let window = self.window();
        for s in &mut self.sessions {
            if s.status.due(now_ns, s.next_sequence, interval_ns) {
                let frame =
                    status::status_frame(&self.cfg, s.session_id, s.next_sequence, 0, window);
                emit(s.source, &frame);
                // Both lines: the sender hears the receiver while either path is up.
                if let Some(b) = s.source_b {
                    emit(b, &frame);
                }
                s.status.sent(now_ns, s.next_sequence, window);
                self.stats.status_sent += 1;
            }
        }
    }

    /// STATUS frames saying goodbye to every session's sender (when the subscriber closes).
    pub fn leave<E: FnMut(SocketAddr, &[u8])>(&mut self, emit: &mut E) {
        for s in &self.sessions {
            let frame = status::status_frame(
                &self.cfg,
                s.session_id,
                s.next_sequence,
                status_flags::LEAVE,
                0,
            );
            emit(s.source, &frame);
            if let Some(b) = s.source_b {
                emit(b, &frame);
            }
        }
    }

    /// A STATUS JOIN frame asking a publisher (whose session is not known yet) to take this
    /// receiver on.
    pub fn join_frame(&self) -> [u8; STATUS_LEN] {
        status::join_frame(&self.cfg, self.window())
    }
}

#[cfg(test)]
mod tests;
