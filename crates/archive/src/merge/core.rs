//! The replay merge's state machine, without I/O: it is handed each live message, each loss
//! the transport reports and the time, reads history through a [`HistorySource`], and hands
//! messages on in order with [`MergeEvent`]s. [`super::MergingSubscriber`] drives it with a
//! live subscriber and a recording; the tests below drive it with a virtual clock and a
//! history in memory.
//!
//! Per stream (publisher session) it is in one of these states:
//!
//! - **pending**: reading history from `next` up to the first live message held (or a loss's
//!   end); live messages are held meanwhile. At the seam the held messages are delivered, up
//!   to a gap among them that the transport reported lost (read from the history in turn).
//! - **seamed**: live delivery; a message past the next expected is held until the poll's
//!   events say whether it follows a loss (the stream goes back to pending from `next`) or a
//!   message of several frames (delivered at once).
//! - **caught up**: resumed from a position and never heard live within the limit: its
//!   history was read to the recording's end.

use super::{MergeEvent, MergedMessage, Start};
use crate::ArchiveError;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Where a stream's history is read from.
pub(crate) trait HistorySource {
    /// Hands `deliver` session `session`'s recorded messages whose sequence is `from` or
    /// more, in order, until it returns false (or the recording ends).
    fn read(
        &mut self,
        session: u32,
        from: u64,
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Result<(), ArchiveError>;
}

/// Why a stream reads history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// From where it starts, to the live stream.
    Start,
    /// A loss the transport reported, from this sequence.
    Loss(u64),
    /// From a position given before it was heard live.
    Resume,
}

/// A stream reading history: what arrived live meanwhile (held), and where the history stands.
#[derive(Debug)]
struct Pending {
    held: VecDeque<(u64, Vec<u8>)>,
    /// The next sequence the history must deliver.
    next: u64,
    /// With nothing held: where the history must reach (the end of a loss at the stream's
    /// tail).
    until: Option<u64>,
    why: Why,
    /// Ranges the transport reported lost while the stream read history: a gap among the
    /// held messages that one of them covers is read from the history too, never skipped.
    lost: Vec<(u64, u64)>,
    recorded: u64,
    since: Instant,
    /// When the history was last read.
    tried: Option<Instant>,
}

impl Pending {
    fn new(next: u64, why: Why, now: Instant) -> Pending {
        Pending {
            held: VecDeque::new(),
            next,
            until: None,
            why,
            lost: Vec::new(),
            recorded: 0,
            since: now,
            tried: None,
        }
    }

    /// Where the history must reach: the first message held, else `until`, else no end.
    fn live_from(&self) -> u64 {
        self.held
            .front()
            .map(|h| h.0)
            .or(self.until)
            .unwrap_or(u64::MAX)
    }
}

/// See the module's documentation.
#[derive(Debug)]
pub(crate) struct MergeCore {
    start: Start,
    limit: Duration,
    started: Instant,
    /// Streams past their seam: the next live sequence to deliver.
    seamed: HashMap<u32, u64>,
    pending: HashMap<u32, Pending>,
    /// Streams caught up from a position without being heard live: where they stand.
    caught_up: HashMap<u32, u64>,
    /// Live messages of a seamed stream after a jump in its sequence, held until the poll's
    /// events say whether the jump was a loss (or a message of several frames).
    jumped: HashMap<u32, VecDeque<(u64, Vec<u8>)>>,
    /// Losses reported in this poll of streams that were not pending.
    lost: HashMap<u32, Vec<(u64, u64)>>,
    events: Vec<MergeEvent>,
    duplicates: u64,
}

impl MergeCore {
    pub(crate) fn new(start: Start, limit: Duration, now: Instant) -> MergeCore {
        MergeCore {
            start,
            limit,
            started: now,
            seamed: HashMap::new(),
            pending: HashMap::new(),
            caught_up: HashMap::new(),
            jumped: HashMap::new(),
            lost: HashMap::new(),
            events: Vec::new(),
            duplicates: 0,
        }
    }

    /// Session `session` resumes from `next` (before the first message).
    pub(crate) fn resume(&mut self, session: u32, next: u64, now: Instant) {
        self.pending
            .insert(session, Pending::new(next, Why::Resume, now));
    }

    /// A live message: delivered now (returns 1), or held.
    pub(crate) fn live(
        &mut self,
        session: u32,
        sequence: u64,
        payload: &[u8],
        now: Instant,
        handler: &mut dyn FnMut(MergedMessage<'_>),
    ) -> usize {
        if let Some(held) = self.jumped.get_mut(&session) {
            held.push_back((sequence, payload.to_vec()));
            return 0;
        }
        if let Some(next) = self.seamed.get_mut(&session) {
            if sequence < *next {
                self.duplicates += 1;
                return 0;
            }
            if sequence > *next {
                // A loss, or the previous message took several frames (sequences): the
                // poll's events tell.
                self.jumped
                    .insert(session, VecDeque::from([(sequence, payload.to_vec())]));
                return 0;
            }
            *next = sequence + 1;
            handler(MergedMessage::new(session, sequence, payload, false));
            return 1;
        }
        if let Some(p) = self.pending.get_mut(&session) {
            p.held.push_back((sequence, payload.to_vec()));
            return 0;
        }
        let from = match (self.caught_up.remove(&session), self.start) {
            (Some(next), _) => next,
            (None, Start::Sequence(from)) => from,
            (None, Start::Live) => {
                self.seamed.insert(session, sequence + 1);
                handler(MergedMessage::new(session, sequence, payload, false));
                return 1;
            }
        };
        let mut p = Pending::new(from, Why::Start, now);
        p.held.push_back((sequence, payload.to_vec()));
        self.pending.insert(session, p);
        0
    }

    /// The transport reported sequences `from .. from + count` of `session` lost.
    pub(crate) fn lost(&mut self, session: u32, from: u64, count: u64) {
        let range = (from, from.saturating_add(count));
        match self.pending.get_mut(&session) {
            Some(p) => p.lost.push(range),
            None => self.lost.entry(session).or_default().push(range),
        }
    }

    /// After a poll's messages and events: settles the jumps, starts reading history for the
    /// losses, and moves every stream reading history towards its seam. Returns the messages
    /// delivered.
    pub(crate) fn settle(
        &mut self,
        now: Instant,
        history: &mut dyn HistorySource,
        handler: &mut dyn FnMut(MergedMessage<'_>),
    ) -> Result<usize, ArchiveError> {
        let mut delivered = 0;
        let mut lost = std::mem::take(&mut self.lost);
        for (s, held) in std::mem::take(&mut self.jumped) {
            let next = self.seamed.remove(&s).expect("a jump of a seamed stream");
            if let Some(ranges) = lost.remove(&s) {
                let mut p = Pending::new(next, Why::Loss(next), now);
                p.held = held;
                p.lost = ranges;
                self.pending.insert(s, p);
                continue;
            }
            // No loss: the jump was a message of several frames.
            let mut next = next;
            for (q, payload) in held {
                next = q + 1;
                delivered += 1;
                handler(MergedMessage::new(s, q, &payload, false));
            }
            self.seamed.insert(s, next);
        }
        // A loss with nothing after it yet (the stream's tail): the history must reach its end.
        for (s, ranges) in lost {
            let end = ranges.iter().map(|r| r.1).max().unwrap_or(0);
            if let Some(&next) = self.seamed.get(&s) {
                if next < end {
                    self.seamed.remove(&s);
                    let mut p = Pending::new(next, Why::Loss(next), now);
                    p.until = Some(end);
                    p.lost = ranges;
                    self.pending.insert(s, p);
                }
            }
        }
        let sessions: Vec<u32> = self.pending.keys().copied().collect();
        for s in sessions {
            delivered += self.advance(s, now, history, handler)?;
        }
        Ok(delivered)
    }

    /// Reads session `s`'s history up to its first held live message; at the seam, delivers
    /// the held messages and hands the stream to live delivery.
    fn advance(
        &mut self,
        s: u32,
        now: Instant,
        history: &mut dyn HistorySource,
        handler: &mut dyn FnMut(MergedMessage<'_>),
    ) -> Result<usize, ArchiveError> {
        let mut delivered = 0;
        let p = self.pending.get_mut(&s).expect("pending");
        let live_from = p.live_from();
        // Read again every millisecond while the live stream waits on the history (the
        // recorder writes behind it), every 20 ms when nothing live waits.
        let every = Duration::from_millis(if live_from == u64::MAX { 20 } else { 1 });
        let due = p
            .tried
            .is_none_or(|t| now.saturating_duration_since(t) >= every);
        if p.next < live_from && due {
            p.tried = Some(now);
            let (mut next, mut got) = (p.next, 0u64);
            history.read(s, p.next, &mut |sequence, payload| {
                if sequence >= live_from {
                    return false;
                }
                if sequence >= next {
                    next = sequence + 1;
                    got += 1;
                    handler(MergedMessage::new(s, sequence, payload, true));
                }
                true
            })?;
            delivered += got as usize;
            p.recorded += got;
            p.next = next;
        }
        let seam = p.next >= live_from;
        let timed_out = !seam && now.saturating_duration_since(p.since) > self.limit;
        if !(seam || timed_out) {
            return Ok(delivered);
        }
        let p = self.pending.remove(&s).expect("pending");
        if live_from == u64::MAX {
            // Resumed, never heard live: its history is all there is.
            self.events.push(MergeEvent::CaughtUp {
                session_id: s,
                recorded: p.recorded,
                next: p.next,
            });
            self.caught_up.insert(s, p.next);
            return Ok(delivered);
        }
        self.events.push(match (seam, p.why) {
            (true, Why::Loss(from)) => MergeEvent::Recovered {
                session_id: s,
                from,
                to: live_from,
                recorded: p.recorded,
            },
            (true, _) => MergeEvent::Seam {
                session_id: s,
                recorded: p.recorded,
                live_from,
                after: now.saturating_duration_since(self.started),
            },
            (false, _) => MergeEvent::Gap {
                session_id: s,
                from: p.next,
                live_from,
                reason: format!(
                    "the recording did not reach sequence {live_from} within {:?}",
                    self.limit
                ),
            },
        });
        // The held live messages the history did not already give, in order, up to a gap
        // among them that the transport reported lost: that one is read from the history
        // too (the stream reads history again from there, with the rest held).
        let mut next = match (self.start, p.why) {
            (Start::Sequence(from), Why::Start) => p.next.max(from),
            _ => p.next,
        };
        if !seam {
            next = next.max(live_from);
        }
        let mut held = p.held;
        while let Some((q, payload)) = held.pop_front() {
            if q < next {
                self.duplicates += 1;
                continue;
            }
            if q > next && p.lost.iter().any(|&(a, b)| a < q && b > next) {
                held.push_front((q, payload));
                let mut again = Pending::new(next, Why::Loss(next), now);
                again.held = held;
                again.lost = p.lost;
                self.pending.insert(s, again);
                return Ok(delivered);
            }
            next = q + 1;
            delivered += 1;
            handler(MergedMessage::new(s, q, &payload, false));
        }
        self.seamed.insert(s, next);
        Ok(delivered)
    }

    pub(crate) fn take_events(&mut self) -> Vec<MergeEvent> {
        std::mem::take(&mut self.events)
    }

    pub(crate) fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Each stream's next sequence to deliver (streams reading history: where their history
    /// stands).
    pub(crate) fn positions(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .seamed
            .iter()
            .map(|(s, n)| (*s, *n))
            .chain(self.pending.iter().map(|(s, p)| (*s, p.next)))
            .chain(self.caught_up.iter().map(|(s, n)| (*s, *n)))
            .collect();
        v.sort_unstable();
        v.dedup_by_key(|x| x.0);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recordings in memory: per session, its messages (each payload the sequence's bytes).
    #[derive(Default)]
    struct Mem(HashMap<u32, Vec<u64>>);

    impl Mem {
        fn record(&mut self, s: u32, seqs: impl IntoIterator<Item = u64>) {
            self.0.entry(s).or_default().extend(seqs);
        }
    }

    impl HistorySource for Mem {
        fn read(
            &mut self,
            session: u32,
            from: u64,
            deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
        ) -> Result<(), ArchiveError> {
            for &q in self.0.get(&session).into_iter().flatten() {
                if q >= from && !deliver(q, &q.to_le_bytes()) {
                    break;
                }
            }
            Ok(())
        }
    }

    /// A merge on a virtual clock, with what it delivered.
    struct Run {
        core: MergeCore,
        mem: Mem,
        t0: Instant,
        now: Instant,
        got: Vec<(u64, bool)>,
    }

    impl Run {
        fn new(start: Start) -> Run {
            let t0 = Instant::now();
            Run {
                core: MergeCore::new(start, Duration::from_secs(10), t0),
                mem: Mem::default(),
                t0,
                now: t0,
                got: Vec::new(),
            }
        }
        fn live(&mut self, seqs: impl IntoIterator<Item = u64>) {
            for q in seqs {
                let got = &mut self.got;
                self.core.live(1, q, &q.to_le_bytes(), self.now, &mut |m| {
                    assert_eq!(m.payload, m.sequence.to_le_bytes());
                    got.push((m.sequence, m.recorded))
                });
            }
        }
        fn settle(&mut self) {
            let got = &mut self.got;
            self.core
                .settle(self.now, &mut self.mem, &mut |m| {
                    assert_eq!(m.payload, m.sequence.to_le_bytes());
                    got.push((m.sequence, m.recorded))
                })
                .unwrap();
        }
        fn later(&mut self, ms: u64) {
            self.now += Duration::from_millis(ms);
        }
        /// The sequences delivered, checked to be `want` in order.
        fn delivered(&self) -> Vec<u64> {
            self.got.iter().map(|g| g.0).collect()
        }
    }

    fn seq(r: std::ops::Range<u64>) -> Vec<u64> {
        r.collect()
    }

    #[test]
    fn history_from_a_sequence_then_live_with_no_gap_and_no_duplicate() {
        let mut r = Run::new(Start::Sequence(0));
        r.mem.record(1, 0..30);
        r.live(50..53);
        r.settle();
        // The recording is behind the live stream: what it has, then nothing until it has more.
        assert_eq!(r.delivered(), seq(0..30));
        r.mem.record(1, 30..60);
        r.settle();
        assert_eq!(
            r.delivered(),
            seq(0..30),
            "read again only after a millisecond"
        );
        r.later(1);
        r.settle();
        r.live(53..55);
        assert_eq!(r.delivered(), seq(0..55));
        assert!(r.got[..50].iter().all(|g| g.1) && r.got[50..].iter().all(|g| !g.1));
        assert!(matches!(
            r.core.take_events()[..],
            [MergeEvent::Seam {
                recorded: 50,
                live_from: 50,
                ..
            }]
        ));
        assert_eq!(r.core.duplicates(), 0);
        assert_eq!(r.core.positions(), vec![(1, 55)]);
    }

    #[test]
    fn a_loss_after_the_seam_is_read_from_the_history_before_what_follows_it() {
        let mut r = Run::new(Start::Live);
        r.mem.record(1, 0..100);
        r.live(0..10);
        r.settle();
        r.live(15..17);
        r.core.lost(1, 10, 5);
        r.settle();
        assert_eq!(r.delivered(), seq(0..17));
        assert!(r.got[10..15].iter().all(|g| g.1), "from the recording");
        assert_eq!(
            r.core.take_events(),
            vec![MergeEvent::Recovered {
                session_id: 1,
                from: 10,
                to: 15,
                recorded: 5
            }]
        );
        // Live again: the next in order goes straight through.
        r.live(17..18);
        assert_eq!(r.delivered(), seq(0..18));
    }

    #[test]
    fn a_jump_without_a_loss_is_a_message_of_several_frames_delivered_at_once() {
        let mut r = Run::new(Start::Live);
        r.live([0, 3, 4, 9]);
        r.settle();
        assert_eq!(r.delivered(), vec![0, 3, 4, 9]);
        assert!(r.core.take_events().is_empty());
        assert_eq!(r.core.positions(), vec![(1, 10)]);
    }

    #[test]
    fn a_loss_among_the_held_messages_is_read_from_the_history_too() {
        let mut r = Run::new(Start::Sequence(0));
        r.mem.record(1, 0..100);
        r.live([50, 51, 55, 56]);
        // Reported while the stream still read history.
        r.core.lost(1, 52, 3);
        r.settle();
        assert_eq!(r.delivered(), seq(0..52), "up to the gap");
        r.later(1);
        r.settle();
        assert_eq!(r.delivered(), seq(0..57));
        let events = r.core.take_events();
        assert!(
            matches!(events[0], MergeEvent::Seam { live_from: 50, .. }),
            "{events:?}"
        );
        assert_eq!(
            events[1],
            MergeEvent::Recovered {
                session_id: 1,
                from: 52,
                to: 55,
                recorded: 3
            }
        );
    }

    #[test]
    fn a_loss_at_the_tail_is_read_to_its_end_and_live_goes_on_after_it() {
        let mut r = Run::new(Start::Live);
        r.mem.record(1, 0..20);
        r.live(0..10);
        r.core.lost(1, 10, 5);
        r.settle();
        assert_eq!(r.delivered(), seq(0..15));
        r.live(15..16);
        r.settle();
        assert_eq!(r.delivered(), seq(0..16));
    }

    #[test]
    fn a_loss_the_history_lacks_too_is_reported_as_a_gap_after_the_limit() {
        let mut r = Run::new(Start::Live);
        r.mem.record(1, 0..12);
        r.live(0..10);
        r.live(15..16);
        r.core.lost(1, 10, 5);
        r.settle();
        assert_eq!(r.delivered(), seq(0..12));
        r.later(10_001);
        r.settle();
        assert_eq!(r.delivered(), [seq(0..12), vec![15]].concat());
        let e = r.core.take_events();
        assert!(
            matches!(
                e[..],
                [MergeEvent::Gap {
                    from: 12,
                    live_from: 15,
                    ..
                }]
            ),
            "{e:?}"
        );
        r.live(16..17);
        assert_eq!(r.delivered().last(), Some(&16));
    }

    #[test]
    fn a_resumed_stream_not_heard_live_catches_up_then_seams_when_it_is() {
        let mut r = Run::new(Start::Sequence(0));
        r.mem.record(1, 0..20);
        r.core.resume(1, 5, r.now);
        r.settle();
        assert_eq!(r.delivered(), seq(5..20));
        assert_eq!(r.core.positions(), vec![(1, 20)]);
        r.later(10_001);
        r.settle();
        assert_eq!(
            r.core.take_events(),
            vec![MergeEvent::CaughtUp {
                session_id: 1,
                recorded: 15,
                next: 20
            }]
        );
        // Heard live at last, further on: the history between, then live.
        r.mem.record(1, 20..30);
        r.live(25..27);
        r.settle();
        assert_eq!(r.delivered(), seq(5..27));
        assert_eq!(r.core.positions(), vec![(1, 27)]);
        let _ = r.t0;
    }
}
