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

use crate::counters::SubscriberCounters;
use crate::events::{Message, SubscriberEvent};
use crate::held::HeldFrames;
use peregrine_wire::bye::{ByeFrame, ByeRepr};
use peregrine_wire::data::{DataFrame, DataRepr};
use peregrine_wire::header::{flags, FrameType, Frames};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr, MAX_NAK_RANGES};
use peregrine_wire::status::{StatusFrame, StatusRepr, STATUS_LEN};
use peregrine_wire::WireError;
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// A receiver's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverConfig {
    pub stream_id: u32,
    /// Random id this receiver puts in its STATUS frames.
    pub receiver_id: u32,
    /// Largest message reassembled; longer ones are dropped and counted as corrupt.
    pub max_message_len: usize,
    /// Sessions followed at once; frames of further sessions are dropped and counted.
    pub max_sessions: usize,
    /// A session heard from for this long is declared dead.
    pub session_timeout_ns: u64,
    /// STATUS keep-alive interval towards each session's sender.
    pub status_interval_ns: u64,
    /// Flow-control window announced in STATUS frames, in frames past the next expected one
    /// (0: no window, the sender is not held back by this receiver).
    pub window_frames: u32,
    /// With `window_frames` 0: a window of this many bytes (the receive buffer this receiver
    /// may fill), announced in frames of the average length seen so far (1472 bytes until a
    /// thousand frames were seen, at least 64). 0: no window.
    pub window_bytes: u64,
    /// Loss repair by NAK (`None`: a gap is reported as `Lost` at once).
    pub nak: Option<NakConfig>,
    /// The least sequence jump a single frame is believed for; the bound is larger when the
    /// window or the sender's announced retention is ([`Receiver::jump_bound`]). `u64::MAX`:
    /// no bound (TCP, where the connection vouches for every frame).
    pub max_jump_frames: u64,
    /// Where a session joined mid-stream starts (needs `nak`; without it, always at the first
    /// frame seen).
    pub late_join: LateJoin,
    /// A session may be heard from a second source address: A and B lines
    /// (`mcast://...?b=GROUP`), whose sender may send line B from another interface
    /// (`b_iface=`). The first other source a session is heard from is bound as its B line's,
    /// as the first one was as its own; a third is foreign. STATUS frames go to both, a NAK to
    /// the one last heard.
    pub second_source: bool,
}

/// Where a receiver starts a session it first hears mid-stream (`late_join=` on `udp://` and
/// `mcast://` subscribers; docs/protocol.md §13). Anything before the first frame seen is asked
/// for by NAK, like a gap: what the sender still retains is delivered in order before the
/// rest, what it no longer retains is reported `Lost` (except for [`Start`](Self::Start),
/// which asks only when the sender still has the session's first message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LateJoin {
    /// At the first frame seen: nothing sent before is delivered or reported.
    None,
    /// The default: a session first heard within its first [`LATE_JOIN_START_MAX`] sequence
    /// numbers, whose first message the sender still retains (it began moments ago, within
    /// the sender's retention), is delivered from that first message; any other session
    /// starts at the first frame seen, as with `None`. A subscriber that exists when a source
    /// starts gets the source from its first message, however long topic resolution or the
    /// JOIN took, and one joining a long-running stream is not handed its history.
    #[default]
    Start,
    /// From the session's first message (sequence 0), as far back as the sender retains;
    /// the rest is reported `Lost`.
    All,
    /// The last N sequence numbers before the first frame seen (N messages when none is
    /// fragmented), as far back as the sender retains; the rest is reported `Lost`.
    Last(u64),
}

/// [`LateJoin::Start`] recovers a session from its first message only when the first frame
/// seen is at most this many sequence numbers in.
pub const LATE_JOIN_START_MAX: u64 = 65_536;

impl fmt::Display for LateJoin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LateJoin::None => f.write_str("none"),
            LateJoin::Start => f.write_str("start"),
            LateJoin::All => f.write_str("all"),
            LateJoin::Last(n) => write!(f, "{n}"),
        }
    }
}

/// A `late_join` value that is none of `none`, `start`, `all` or a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateJoinError(pub String);

impl fmt::Display for LateJoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "late_join={} is not accepted: use none (start at the first message seen), start (from the first message when the stream began moments ago; the default), all (everything the publisher still retains) or a number of messages to go back, for example late_join=1000",
            self.0
        )
    }
}
impl std::error::Error for LateJoinError {}

impl FromStr for LateJoin {
    type Err = LateJoinError;
    fn from_str(v: &str) -> Result<Self, Self::Err> {
        match v {
            "none" => Ok(LateJoin::None),
            "start" => Ok(LateJoin::Start),
            "all" => Ok(LateJoin::All),
            _ => match v.parse::<u64>() {
                Ok(0) => Ok(LateJoin::None),
                Ok(n) => Ok(LateJoin::Last(n)),
                Err(_) => Err(LateJoinError(v.to_string())),
            },
        }
    }
}

/// How a receiver asks for lost frames (docs/architecture.md, "Loss repair").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NakConfig {
    /// Multicast: the first NAK for a gap waits a random time up to `backoff_max_ns`, and a
    /// NAK from another receiver for the same frames counts as ours (suppression). Unicast: it
    /// waits `delay_ns`, so frames merely reordered can still arrive.
    pub multicast: bool,
    pub delay_ns: u64,
    pub backoff_max_ns: u64,
    /// A NAK not answered is repeated after this long...
    pub retry_ns: u64,
    /// ...at most this many times in all; then the frames are reported lost.
    pub max_tries: u32,
    /// A gap is never waited for longer than this: then it is reported lost and delivery
    /// carries on.
    pub max_stall_ns: u64,
    /// Bytes of frames held behind gaps (over all sessions); a frame that does not fit gives
    /// up the oldest gaps until it does. It also bounds the reorder ring: a frame is held
    /// only within `max_buffered_bytes / 32` sequence numbers (at least 1024) of the first
    /// frame held, as many as the bytes could hold of the smallest frames.
    pub max_buffered_bytes: usize,
}

impl NakConfig {
    /// Defaults: 50 us unicast delay, multicast back-off up to 500 us, retries every 2 ms, up
    /// to 50 tries and at most 1 s stalled, 32 MiB held.
    pub fn new(multicast: bool) -> Self {
        NakConfig {
            multicast,
            delay_ns: 50_000,
            backoff_max_ns: 500_000,
            retry_ns: 2_000_000,
            max_tries: 50,
            max_stall_ns: 1_000_000_000,
            max_buffered_bytes: 32 << 20,
        }
    }
}

/// A range of missing sequence numbers of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    start: u64,
    end: u64,
    detected_ns: u64,
    nak_at_ns: u64,
    tries: u32,
    gave_up: bool,
}

impl ReceiverConfig {
    pub fn new(stream_id: u32, receiver_id: u32) -> Self {
        ReceiverConfig {
            stream_id,
            receiver_id,
            max_message_len: 64 << 20,
            max_sessions: 64,
            session_timeout_ns: 5_000_000_000,
            status_interval_ns: 100_000_000,
            window_frames: 0,
            window_bytes: 0,
            nak: None,
            max_jump_frames: 4096,
            late_join: LateJoin::Start,
            second_source: false,
        }
    }
}

#[derive(Debug)]
struct Session {
    session_id: u32,
    source: SocketAddr,
    /// With [`ReceiverConfig::second_source`]: the B line's source, once heard, and whether
    /// the last frame came from it.
    source_b: Option<SocketAddr>,
    last_from_b: bool,
    next_sequence: u64,
    /// Fragments of the message being reassembled: (first sequence, message length, bytes).
    reassembly: Option<(u64, usize, Vec<u8>)>,
    /// Waiting for a BEGIN (joined mid-message, or a gap cut a message).
    need_begin: bool,
    last_heard_ns: u64,
    /// When the last STATUS went to this session's sender (`None`: never, send one now).
    last_status_ns: Option<u64>,
    reported_next: u64,
    /// The highest `next_sequence` a HEARTBEAT announced: once delivery reaches it, a STATUS
    /// confirms it at once (a closing publisher waits for that).
    announced: u64,
    counters: SubscriberCounters,
    /// Loss repair: one past the highest sequence seen; frames held behind gaps; the gaps
    /// (sorted, disjoint). `[next_sequence, high)` is exactly the held frames and the gaps.
    high: u64,
    held: HeldFrames,
    gaps: Vec<Gap>,
    /// A frame that would move the session further than [`Receiver::jump_bound`] allows, held
    /// (not acted on) until another frame from the source confirms it; a DATA frame's bytes
    /// are in `suspect_frame` (kept for reuse).
    suspect: Option<Claim>,
    suspect_frame: Vec<u8>,
    /// `next_sequence - oldest_retained` of the last heartbeat acted on: how far behind the
    /// sender a receiver can fall and still repair (part of the jump bound).
    retained_span: u64,
    /// The first position heard (a late join asks for what came before).
    joined_at: u64,
    /// [`LateJoin::Start`] asked for the session's first messages and does not know yet
    /// whether the sender still retains them (its `Connected` event waits for that).
    tentative: bool,
}

/// What a frame says about a session's position: kept while a jump waits for confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Data { sequence: u64 },
    Heartbeat { next: u64, oldest: u64 },
    Bye { final_next: u64 },
}

impl Claim {
    /// One past the last sequence number it says was sent.
    fn reach(self) -> u64 {
        match self {
            Claim::Data { sequence } => sequence.saturating_add(1),
            Claim::Heartbeat { next, .. } => next,
            Claim::Bye { final_next } => final_next,
        }
    }
}

/// Gaps a session keeps open at most; a further one gives up the oldest (reported `Lost`).
pub const MAX_GAPS: usize = 1024;

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

    /// The multicast NAK back-off's random state (seeded from `receiver_id`).
    rng: u64,
    /// Detection-to-repair times of recovered frames, when `record_recovery` is on.
    recovery_ns: Option<Vec<u64>>,
}

/// Departed sessions remembered.
const DEPARTED_KEPT: usize = 16;
/// Closed sessions remembered.
const CLOSED_KEPT: usize = 16;

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

            rng: u64::from(cfg.receiver_id) | 1,
            recovery_ns: None,
        }
    }

    pub fn config(&self) -> &ReceiverConfig {
        &self.cfg
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
            f.jump_bytes += s.suspect_frame.len();
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
            let mut at = next;
            let mut covered = 0u128;
            for g in &s.gaps {
                if g.start < at || g.end <= g.start || g.end > high {
                    return fail("gaps unsorted, overlapping or outside");
                }
                at = g.end;
                covered += u128::from(g.end - g.start);
            }
            for q in s.held.sequences() {
                if q <= next || q >= high || s.gaps.iter().any(|g| g.start <= q && q < g.end) {
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
        let mut frames = Frames::new(&datagram[start.min(datagram.len())..]);
        loop {
            if delivered >= limit {
                let at = datagram.len() - frames.remaining().len();
                if at < datagram.len() {
                    return (delivered, Progress::Resume(at));
                }
                return (delivered, Progress::Done);
            }
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
                if let Some(s) = self
                    .sessions
                    .iter_mut()
                    .find(|s| s.session_id == n.session_id)
                {
                    for r in n.ranges.iter() {
                        let end = r.start.saturating_add(u64::from(r.count));
                        for g in s.gaps.iter_mut() {
                            if g.start < end && r.start < g.end && !g.gave_up {
                                g.nak_at_ns = g.nak_at_ns.max(now_ns.saturating_add(nak.retry_ns));
                                self.stats.naks_suppressed += 1;
                            }
                        }
                    }
                }
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
                s.announced = s.announced.max(next);
                s.retained_span = next.saturating_sub(oldest);
                if self.cfg.nak.is_some() {
                    return self.on_heartbeat_repaired(i, next, oldest, trusted, now_ns, handler);
                }
                self.tail_loss(i, next);
                0
            }
            Claim::Bye { final_next } => {
                // The publisher has gone: nothing more can be repaired. Deliver what was held
                // behind gaps, reporting the gaps lost.
                let mut n = 0;
                if self.cfg.nak.is_some() {
                    for g in &mut self.sessions[i].gaps {
                        g.gave_up = true;
                    }
                    n = self.skip_given_up(i, handler);
                    let s = &mut self.sessions[i];
                    s.next_sequence = s.next_sequence.max(s.high);
                }
                self.tail_loss(i, final_next);
                let session_id = self.remove_session(i).session_id;
                if self.closed.len() == CLOSED_KEPT {
                    self.closed.pop_front();
                }
                self.closed.push_back(session_id);
                self.events
                    .push_back(SubscriberEvent::PublisherClosed { session_id });
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
        end > seen && end - seen > self.jump_bound_of(s)
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

    /// A frame beyond the jump bound: believed only with a second frame from the source whose
    /// position is within the bound of it (a DATA frame continuing it, a heartbeat announcing
    /// it, ...); until then it is held, one per session, the latest replacing an unconfirmed
    /// one. So one datagram can neither blind a session (move it so far ahead that the real
    /// frames look old) nor make it report a loss it has no evidence of.
    fn on_jump<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        claim: Claim,
        frame: &[u8],
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        let bound = self.jump_bound_of(&self.sessions[i]);
        let s = &mut self.sessions[i];
        let confirms = |prev: Claim| {
            // The same DATA frame or BYE again (a duplicated datagram) is no second witness;
            // an idle publisher repeats its heartbeat, which is.
            (prev != claim || matches!(claim, Claim::Heartbeat { .. }))
                && prev.reach().abs_diff(claim.reach()) <= bound
        };
        match s.suspect {
            Some(prev) if confirms(prev) => {
                s.suspect = None;
                self.stats.jumps_confirmed += 1;
                // A BYE ends the session: act on it last.
                let (first, second) = if matches!(prev, Claim::Bye { .. }) {
                    (claim, prev)
                } else {
                    (prev, claim)
                };
                let mut held = std::mem::take(&mut self.sessions[i].suspect_frame);
                let bytes = |c: Claim, held: &[u8]| -> Vec<u8> {
                    // Only the DATA claim needs its frame; copy it out of `held` or `frame`.
                    match c {
                        Claim::Data { .. } if c == prev => held.to_vec(),
                        Claim::Data { .. } => frame.to_vec(),
                        _ => Vec::new(),
                    }
                };
                let (b1, b2) = (bytes(first, &held), bytes(second, &held));
                held.clear();
                self.sessions[i].suspect_frame = held;
                let mut n = self.apply(i, first, &b1, true, now_ns, handler);
                if matches!(first, Claim::Bye { .. }) {
                    return n; // two BYEs: the session is gone
                }
                n += self.apply(i, second, &b2, true, now_ns, handler);
                n
            }
            prev => {
                if prev.is_some() {
                    self.stats.jumps_discarded += 1;
                }
                s.suspect = Some(claim);
                s.suspect_frame.clear();
                if let Claim::Data { .. } = claim {
                    s.suspect_frame.extend_from_slice(frame);
                }
                self.stats.jumps_held += 1;
                0
            }
        }
    }

    /// The index of session `session_id`, created (with a `Connected` event) when new. A
    /// session is bound to the source it was first heard from: a frame for it from another
    /// source is counted and refused.
    fn session(
        &mut self,
        session_id: u32,
        first_sequence: u64,
        source: SocketAddr,
        now_ns: u64,
    ) -> Option<usize> {
        // Most frames belong to the session of the frame before.
        let last = self.last_session;
        if self
            .sessions
            .get(last)
            .is_some_and(|s| s.session_id == session_id)
        {
            if !self.heard_from_bound_source(last, source) {
                return None;
            }
            self.sessions[last].last_heard_ns = now_ns;
            return Some(last);
        }
        if let Some(i) = self
            .sessions
            .iter()
            .position(|s| s.session_id == session_id)
        {
            if !self.heard_from_bound_source(i, source) {
                return None;
            }
            self.last_session = i;
            self.sessions[i].last_heard_ns = now_ns;
            return Some(i);
        }
        if self.closed.contains(&session_id) {
            self.stats.closed_session_frames += 1;
            return None;
        }
        if self.sessions.len() >= self.cfg.max_sessions {
            self.stats.sessions_refused += 1;
            return None;
        }
        // A session coming back continues where it stood; the first frame reveals the gap.
        let departed = self.departed.iter().position(|d| d.0 == session_id);
        let (next, need_begin) = match departed {
            Some(k) => {
                let next = self.departed.remove(k).map_or(first_sequence, |d| d.1);
                (next.min(first_sequence), next < first_sequence)
            }
            None => (first_sequence, true),
        };
        // A session first heard mid-stream: late join asks for what came before.
        let start = match (self.cfg.nak, self.cfg.late_join, departed) {
            (Some(_), LateJoin::All, None) => 0,
            (Some(_), LateJoin::Last(n), None) => next.saturating_sub(n),
            (Some(_), LateJoin::Start, None) if next <= LATE_JOIN_START_MAX => 0,
            _ => next,
        };
        let tentative = start < next && self.cfg.late_join == LateJoin::Start;
        let mut gaps = Vec::new();
        if start < next {
            let delay = self.cfg.nak.map_or(0, |nak| self.nak_delay(&nak));
            gaps.push(Gap {
                start,
                end: next,
                detected_ns: now_ns,
                nak_at_ns: now_ns.saturating_add(delay),
                tries: 0,
                gave_up: false,
            });
            self.stats.late_joins += 1;
        }
        self.sessions.push(Session {
            session_id,
            source,
            source_b: None,
            last_from_b: false,
            next_sequence: start,
            reassembly: None,
            need_begin,
            last_heard_ns: now_ns,
            last_status_ns: None,
            reported_next: next,
            announced: next,
            counters: SubscriberCounters::default(),
            high: next,
            held: HeldFrames::default(),
            gaps,
            suspect: None,
            suspect_frame: Vec::new(),
            retained_span: 0,
            joined_at: next,
            tentative,
        });
        if !tentative {
            self.events.push_back(SubscriberEvent::Connected {
                session_id,
                first_sequence: start,
            });
        }
        Some(self.sessions.len() - 1)
    }

    /// The index of a session already followed, if `source` is the one it is bound to.
    fn known_session(&mut self, session_id: u32, source: SocketAddr) -> Option<usize> {
        let i = self
            .sessions
            .iter()
            .position(|s| s.session_id == session_id)?;
        self.heard_from_bound_source(i, source).then_some(i)
    }

    /// Whether a frame of session `i` from `source` comes from where the session is bound:
    /// its first source or, with [`ReceiverConfig::second_source`], its B line's (bound here
    /// when first heard). A frame from elsewhere is counted foreign.
    #[inline]
    fn heard_from_bound_source(&mut self, i: usize, source: SocketAddr) -> bool {
        let second = self.cfg.second_source;
        let s = &mut self.sessions[i];
        if s.source == source {
            // (Only a session with a B line has a line to remember: no store otherwise.)
            if s.source_b.is_some() {
                s.last_from_b = false;
            }
            return true;
        }
        match s.source_b {
            Some(b) if b == source => {}
            None if second => s.source_b = Some(source),
            _ => {
                self.stats.foreign_source += 1;
                return false;
            }
        }
        s.last_from_b = true;
        true
    }

    /// Ends the uncertainty of a [`LateJoin::Start`] session: `young` (the sender still had
    /// its first message) keeps the late-join gap; otherwise it is dropped and delivery
    /// starts where the session was first heard, as if no late join had been asked for.
    fn settle(&mut self, i: usize, young: bool) {
        let s = &mut self.sessions[i];
        if !s.tentative {
            return;
        }
        s.tentative = false;
        if !young && s.next_sequence < s.joined_at {
            let at = s.joined_at;
            s.gaps.retain(|g| g.start >= at);
            s.held.skip_to(at);
            s.next_sequence = at;
            s.reassembly = None;
            s.need_begin = true;
        }
        let (session_id, first_sequence) = (s.session_id, s.next_sequence);
        self.events.push_back(SubscriberEvent::Connected {
            session_id,
            first_sequence,
        });
    }

    /// A HEARTBEAT with loss repair on: frames up to its `next_sequence` we have not seen are
    /// a gap to ask for (tail loss); frames below its `oldest_retained` can no longer be
    /// retransmitted, so gaps there are given up at once. Unless `trusted` (confirmed by a
    /// second frame), `oldest_retained` gives up only gaps earlier frames revealed: one
    /// heartbeat never reports a loss on its own word.
    fn on_heartbeat_repaired<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        next: u64,
        oldest: u64,
        trusted: bool,
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        let nak = self.cfg.nak.expect("loss repair is on");
        let mut n = 0;
        let s = &self.sessions[i];
        let seen = s.high;
        if s.tentative {
            // Late join `start`: the sender still has the session's first message, or not.
            let young = oldest <= s.next_sequence;
            self.settle(i, young);
            n += self.drain_held(i, handler);
        }
        if next > seen {
            if self.sessions[i].gaps.len() >= MAX_GAPS {
                n += self.give_up_front(i, handler);
            }
            self.open_gap(i, next, &nak, now_ns);
        }
        let oldest = if trusted { oldest } else { oldest.min(seen) };
        let s = &mut self.sessions[i];
        let mut split = Vec::new();
        for g in s.gaps.iter_mut() {
            if g.end <= oldest {
                g.gave_up = true;
            } else if g.start < oldest {
                split.push(Gap {
                    start: oldest,
                    ..*g
                });
                g.end = oldest;
                g.gave_up = true;
            }
        }
        if !split.is_empty() {
            s.gaps.extend(split);
            s.gaps.sort_by_key(|g| g.start);
        }
        n + self.skip_given_up(i, handler)
    }

    /// Loss repair timers: sends the NAKs that are due (through `emit`, to each session's
    /// sender), gives up gaps out of tries or stalled too long, and delivers what that
    /// unblocks. Returns the messages delivered.
    pub fn poll_repair<F: FnMut(Message<'_>), E: FnMut(SocketAddr, &[u8])>(
        &mut self,
        now_ns: u64,
        handler: &mut F,
        emit: &mut E,
    ) -> usize {
        let Some(nak) = self.cfg.nak else {
            return 0;
        };
        let mut delivered = 0;
        let mut buf = [0u8; 32 + 16 * MAX_NAK_RANGES];
        for i in 0..self.sessions.len() {
            let mut ranges: Vec<NakRange> = Vec::new();
            let s = &mut self.sessions[i];
            let mut gave_up = false;
            for g in s.gaps.iter_mut() {
                if g.gave_up || g.nak_at_ns > now_ns {
                    continue;
                }
                if g.tries >= nak.max_tries
                    || now_ns.saturating_sub(g.detected_ns) >= nak.max_stall_ns
                {
                    g.gave_up = true;
                    gave_up = true;
                    continue;
                }
                g.tries += 1;
                g.nak_at_ns = now_ns.saturating_add(nak.retry_ns);
                // One range per gap: a gap longer than a range can say (a late join, a
                // confirmed jump) is asked for from its start, the rest once that is repaired.
                let count = (g.end - g.start).min(u64::from(u32::MAX)) as u32;
                ranges.push(NakRange {
                    start: g.start,
                    count,
                });
            }
            // To the line last heard from: the other may be the one that is down.
            let source = match s.source_b {
                Some(b) if s.last_from_b => b,
                _ => s.source,
            };
            let session_id = s.session_id;
            for chunk in ranges.chunks(MAX_NAK_RANGES) {
                let Ok(rs) = NakRanges::new(chunk) else {
                    continue;
                };
                let repr = NakRepr {
                    session_id,
                    stream_id: self.cfg.stream_id,
                    receiver_id: self.cfg.receiver_id,
                    ranges: rs,
                };
                let len = repr.buffer_len();
                repr.emit(&mut NakFrame::new_unchecked(&mut buf[..len]));
                emit(source, &buf[..len]);
                self.count(i, |c| c.naks_sent += 1);
                self.stats.nak_ranges_sent += chunk.len() as u64;
            }
            if gave_up {
                delivered += self.skip_given_up(i, handler);
            }
        }
        delivered
    }

    /// Whether loss repair has gaps open (then [`poll_repair`](Self::poll_repair) has work
    /// coming, and the driver should call it even while data streams in).
    pub fn is_repairing(&self) -> bool {
        self.cfg.nak.is_some() && self.sessions.iter().any(|s| !s.gaps.is_empty())
    }

    /// The earliest NAK deadline (for a blocking driver's timeout).
    pub fn next_repair_ns(&self) -> Option<u64> {
        self.sessions
            .iter()
            .flat_map(|s| s.gaps.iter().filter(|g| !g.gave_up).map(|g| g.nak_at_ns))
            .min()
    }

    /// Starts recording detection-to-repair times of recovered frames (tests, benchmarks).
    pub fn record_recovery(&mut self) {
        self.recovery_ns.get_or_insert_with(Vec::new);
    }
    /// The recorded detection-to-repair times, emptied.
    pub fn take_recovery_ns(&mut self) -> Vec<u64> {
        self.recovery_ns
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// A HEARTBEAT or BYE says the stream reached `next`: anything we have not seen below it
    /// is lost.
    fn tail_loss(&mut self, i: usize, next: u64) {
        let s = &mut self.sessions[i];
        if next > s.next_sequence {
            let from = s.next_sequence;
            s.next_sequence = next;
            s.reassembly = None;
            s.need_begin = true;
            self.lost(i, from, next - from);
        }
    }

    /// Bytes of frames held behind gaps, over all sessions.
    fn held_bytes(&self) -> usize {
        self.sessions.iter().map(|s| s.held.bytes()).sum()
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
            s.reassembly = None;
            s.need_begin = true;
            self.lost(i, from, d.sequence - from);
        }
        self.deliver(i, d, handler)
    }

    /// A DATA frame at or after `next_sequence` with loss repair on: delivered if it is next
    /// (then whatever it unblocks), held if a gap is in front of it.
    fn on_data_repaired<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        d: &DataRepr<'_>,
        frame: &[u8],
        now_ns: u64,
        handler: &mut F,
    ) -> usize {
        let nak = self.cfg.nak.expect("loss repair is on");
        let s = &mut self.sessions[i];
        let q = d.sequence;
        let mut n = 0;
        if q >= s.high {
            if q > s.high {
                if s.gaps.len() >= MAX_GAPS {
                    n += self.give_up_front(i, handler);
                }
                self.open_gap(i, q, &nak, now_ns);
            }
            self.sessions[i].high = q + 1;
        } else if s.held.contains(q) {
            self.count(i, |c| c.duplicates += 1);
            return 0;
        } else {
            // It fills (part of) a gap.
            if let Some(k) = s.gaps.iter().position(|g| g.start <= q && q < g.end) {
                let g = s.gaps[k];
                let mut parts = Vec::with_capacity(2);
                if g.start < q {
                    parts.push(Gap { end: q, ..g });
                }
                if q + 1 < g.end {
                    parts.push(Gap { start: q + 1, ..g });
                }
                s.gaps.splice(k..=k, parts);
                self.count(i, |c| c.recovered += 1);
                if let Some(log) = self.recovery_ns.as_mut() {
                    log.push(now_ns.saturating_sub(g.detected_ns));
                }
            }
        }
        let s = &mut self.sessions[i];
        if q > s.next_sequence {
            // Hold it until the gap before it is filled or given up, within the byte limit
            // and the span the reorder ring may cover (its slots cost memory too).
            let span_max = (nak.max_buffered_bytes / 32).max(1024) as u64;
            while {
                let s = &self.sessions[i];
                q > s.next_sequence
                    && !s.gaps.is_empty()
                    && (self.held_bytes() + frame.len() > nak.max_buffered_bytes
                        || s.held.span_with(q) > span_max)
            } {
                let before = self.sessions[i].next_sequence;
                n += self.give_up_front(i, handler);
                if self.sessions[i].next_sequence == before {
                    break;
                }
            }
            let s = &mut self.sessions[i];
            if q > s.next_sequence {
                s.held.insert(q, frame);
                return n;
            }
            if q < s.next_sequence {
                // Giving up moved delivery past it (a `start` late join found not young
                // dropped the history it belonged to).
                return n;
            }
        }
        n += self.deliver(i, d, handler);
        n + self.drain_held(i, handler)
    }

    /// Delivers held frames that are next in order.
    fn drain_held<F: FnMut(Message<'_>)>(&mut self, i: usize, handler: &mut F) -> usize {
        // Called after every frame delivered in order: with nothing held (the usual case) it
        // must cost nothing. Taking the store out of the session moves it and drops the empty
        // one put in its place, which was a quarter of the receive path at 20 M msgs/s.
        if self.sessions[i].held.is_empty() {
            return 0;
        }
        let mut n = 0;
        // Out of the session while its frames are delivered (delivery needs the receiver).
        let mut held = std::mem::take(&mut self.sessions[i].held);
        loop {
            let next = self.sessions[i].next_sequence;
            held.skip_to(next);
            let Some(bytes) = held.front(next) else {
                break;
            };
            // Held frames were checked when they arrived.
            if let Ok(d) = DataRepr::parse_checked_header(&DataFrame::new_unchecked(bytes)) {
                n += self.deliver(i, &d, handler);
            }
            held.pop_front();
        }
        self.sessions[i].held = held;
        n
    }

    /// Gives up the first gap of session `i` (reports it lost) and delivers what it blocked.
    fn give_up_front<F: FnMut(Message<'_>)>(&mut self, i: usize, handler: &mut F) -> usize {
        let s = &mut self.sessions[i];
        if s.gaps.is_empty() {
            return 0;
        }
        s.gaps[0].gave_up = true;
        self.skip_given_up(i, handler)
    }

    /// Reports given-up gaps at the front as lost and delivers the frames behind them.
    fn skip_given_up<F: FnMut(Message<'_>)>(&mut self, i: usize, handler: &mut F) -> usize {
        let mut n = 0;
        let s = &self.sessions[i];
        if s.tentative && s.gaps.first().is_some_and(|g| g.gave_up) {
            // A `start` late join given up before the sender said whether it still has the
            // session's first message: it did not answer, so it has not.
            self.settle(i, false);
            n += self.drain_held(i, handler);
        }
        loop {
            let s = &mut self.sessions[i];
            match s.gaps.first() {
                Some(g) if g.gave_up && g.start == s.next_sequence => {
                    let g = s.gaps.remove(0);
                    s.next_sequence = g.end;
                    s.reassembly = None;
                    s.need_begin = true;
                    self.stats.unrecoverable =
                        self.stats.unrecoverable.saturating_add(g.end - g.start);
                    self.lost(i, g.start, g.end - g.start);
                    n += self.drain_held(i, handler);
                }
                _ => return n,
            }
        }
    }

    /// Records the frames from the session's `high` up to `end` as missing, first NAK due after
    /// the configured delay, and moves `high` to `end`.
    fn open_gap(&mut self, i: usize, end: u64, nak: &NakConfig, now_ns: u64) {
        let delay = self.nak_delay(nak);
        let s = &mut self.sessions[i];
        s.gaps.push(Gap {
            start: s.high,
            end,
            detected_ns: now_ns,
            nak_at_ns: now_ns.saturating_add(delay),
            tries: 0,
            gave_up: false,
        });
        s.high = end;
        self.stats.gaps_detected += 1;
    }

    fn nak_delay(&mut self, nak: &NakConfig) -> u64 {
        if !nak.multicast || nak.backoff_max_ns == 0 {
            return nak.delay_ns;
        }
        // xorshift64: a deterministic spread of back-offs; not security related.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % nak.backoff_max_ns
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
        let s = &mut self.sessions[i];
        s.next_sequence = d.sequence + 1;
        let begin = d.flags & flags::BEGIN != 0;
        let end = d.flags & flags::END != 0;
        if begin {
            s.need_begin = false;
        } else if s.need_begin {
            return 0; // a fragment of a message whose start we never saw
        }
        if begin && end {
            s.reassembly = None;
            let n = d.payload.len() as u64;
            self.count(i, |c| {
                c.messages += 1;
                c.bytes += n;
            });
            handler(Message {
                payload: d.payload,
                sequence: d.sequence,
                session_id: d.session_id,
            });
            return 1;
        }
        let len = d.message_length as usize;
        if begin {
            if len > self.cfg.max_message_len {
                s.need_begin = true;
                self.count(i, |c| c.corrupt_frames += 1);
                return 0;
            }
            let mut buf = s.reassembly.take().map(|r| r.2).unwrap_or_default();
            buf.clear();
            buf.reserve(len);
            buf.extend_from_slice(d.payload);
            s.reassembly = Some((d.sequence, len, buf));
            return 0;
        }
        let Some((first, total, mut buf)) = s.reassembly.take() else {
            s.need_begin = true;
            return 0;
        };
        if total != len
            || buf.len() + d.payload.len() > total
            || (end && buf.len() + d.payload.len() != total)
        {
            // Fragments that do not add up: drop the message.
            s.need_begin = true;
            self.count(i, |c| c.corrupt_frames += 1);
            return 0;
        }
        buf.extend_from_slice(d.payload);
        if !end {
            s.reassembly = Some((first, total, buf));
            return 0;
        }
        let n = buf.len() as u64;
        self.count(i, |c| {
            c.messages += 1;
            c.bytes += n;
        });
        handler(Message {
            payload: &buf,
            sequence: first,
            session_id: d.session_id,
        });
        // Keep the allocation for the next fragmented message.
        buf.clear();
        self.sessions[i].reassembly = Some((0, 0, buf));
        self.sessions[i].need_begin = true;
        1
    }

    /// Runs the timers: declares silent sessions dead and emits STATUS frames (keep-alive every
    /// `status_interval_ns`, and a window update when a quarter of the window was consumed) by
    /// calling `emit(destination, frame)`.
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
        let window = self.window();
        let quarter = u64::from(window / 4).max(1);
        for s in &mut self.sessions {
            let keepalive = s
                .last_status_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= self.cfg.status_interval_ns);
            let update = window > 0 && s.next_sequence.saturating_sub(s.reported_next) >= quarter;
            // Caught up with what the sender announced (it is idle or closing): say so now.
            let caught_up = s.announced > s.reported_next && s.next_sequence >= s.announced;
            if keepalive || update || caught_up {
                let frame = status_frame(&self.cfg, s.session_id, s.next_sequence, 0, window);
                emit(s.source, &frame);
                // Both lines: the sender hears the receiver while either path is up.
                if let Some(b) = s.source_b {
                    emit(b, &frame);
                }
                s.last_status_ns = Some(now_ns);
                s.reported_next = s.next_sequence;
                self.stats.status_sent += 1;
            }
        }
    }

    /// Removes session `i`, releasing what it held.
    fn remove_session(&mut self, i: usize) -> Session {
        let s = self.sessions.swap_remove(i);
        self.last_session = 0;
        s
    }

    /// Removes session `i` as gone without a BYE: `PublisherDied`, and remember its position.
    fn depart(&mut self, i: usize) {
        let s = self.remove_session(i);
        if self.departed.len() == DEPARTED_KEPT {
            self.departed.pop_front();
        }
        self.departed.push_back((s.session_id, s.next_sequence));
        self.events.push_back(SubscriberEvent::PublisherDied {
            session_id: s.session_id,
        });
    }

    /// The connection to `source` was lost (TCP): its sessions end with `PublisherDied`; if
    /// one comes back (a reconnection), what it sent in between is reported as `Lost`.
    pub fn disconnected(&mut self, source: SocketAddr) {
        let mut i = 0;
        while i < self.sessions.len() {
            if self.sessions[i].source == source {
                self.depart(i);
            } else {
                i += 1;
            }
        }
    }

    /// STATUS frames saying goodbye to every session's sender (when the subscriber closes).
    pub fn leave<E: FnMut(SocketAddr, &[u8])>(&mut self, emit: &mut E) {
        for s in &self.sessions {
            let frame = status_frame(
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
        status_frame(&self.cfg, 0, 0, status_flags::JOIN, self.window())
    }
}

pub use peregrine_wire::header::status_flags;

fn status_frame(
    cfg: &ReceiverConfig,
    session_id: u32,
    next_sequence: u64,
    fl: u16,
    window: u32,
) -> [u8; STATUS_LEN] {
    let mut b = [0u8; STATUS_LEN];
    StatusRepr {
        session_id,
        stream_id: cfg.stream_id,
        receiver_id: cfg.receiver_id,
        next_sequence,
        window,
        flags: fl,
    }
    .emit(&mut StatusFrame::new_unchecked(&mut b[..]));
    b
}

#[cfg(test)]
mod tests;
