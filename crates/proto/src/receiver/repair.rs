//! Loss repair, the receiver's side (docs/architecture.md, "Loss repair"): frames after a gap
//! are held in order ([`HeldFrames`](crate::held::HeldFrames)) while the gap is asked for
//! ([`nak`](super::nak)), filled as retransmissions arrive ([`gaps`](super::gaps)), and
//! delivered once what is in front of them is repaired or given up; a given-up gap is reported
//! with an exact `Lost`. Memory stays within `NakConfig::max_buffered_bytes` and [`MAX_GAPS`]:
//! past them the oldest gaps are given up.

use super::gaps::{Gap, MAX_GAPS};
use super::nak::{self, NakConfig, NakFrom};
use super::Receiver;
use crate::events::Message;
use peregrine_wire::data::{DataFrame, DataRepr};
use std::net::SocketAddr;

impl Receiver {
    /// A DATA frame at or after `next_sequence` with loss repair on: delivered if it is next
    /// (then whatever it unblocks), held if a gap is in front of it.
    pub(super) fn on_data_repaired<F: FnMut(Message<'_>)>(
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
        } else if let Some(g) = s.gaps.fill(q) {
            // It fills (part of) a gap.
            self.count(i, |c| c.recovered += 1);
            if let Some(log) = self.recovery_ns.as_mut() {
                log.push(now_ns.saturating_sub(g.detected_ns));
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

    /// A HEARTBEAT with loss repair on: frames up to its `next_sequence` we have not seen are
    /// a gap to ask for (tail loss); frames below its `oldest_retained` can no longer be
    /// retransmitted, so gaps there are given up at once. Unless `trusted` (confirmed by a
    /// second frame), `oldest_retained` gives up only gaps earlier frames revealed: one
    /// heartbeat never reports a loss on its own word.
    pub(super) fn on_heartbeat_repaired<F: FnMut(Message<'_>)>(
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
        self.sessions[i].gaps.give_up_below(oldest);
        n + self.skip_given_up(i, handler)
    }

    /// The publisher said BYE: nothing more can be repaired. Delivers what was held behind
    /// gaps, reporting the gaps lost.
    pub(super) fn give_up_all<F: FnMut(Message<'_>)>(
        &mut self,
        i: usize,
        handler: &mut F,
    ) -> usize {
        self.sessions[i].gaps.give_up_all();
        let n = self.skip_given_up(i, handler);
        let s = &mut self.sessions[i];
        s.next_sequence = s.next_sequence.max(s.high);
        n
    }

    /// Another receiver's NAK on a multicast group for `session_id`: the frames it asks for
    /// will be retransmitted to the group, so do not ask for them too (suppression).
    pub(super) fn on_foreign_nak(
        &mut self,
        session_id: u32,
        ranges: impl Iterator<Item = (u64, u64)>,
        nak: &NakConfig,
        now_ns: u64,
    ) {
        let Some(s) = self
            .sessions
            .iter_mut()
            .find(|s| s.session_id == session_id)
        else {
            return;
        };
        let until = now_ns.saturating_add(nak.retry_ns);
        for (start, end) in ranges {
            self.stats.naks_suppressed += s.gaps.suppress(start, end, until);
        }
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
        let mut ranges = Vec::new();
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            // Nothing to ask for or give up (every poll of a subscriber that waits comes here).
            if s.gaps.is_empty() {
                continue;
            }
            ranges.clear();
            let gave_up = nak::take_due(&mut s.gaps, now_ns, &nak, &mut ranges);
            let from = NakFrom {
                session_id: s.session_id,
                stream_id: self.cfg.stream_id,
                receiver_id: self.cfg.receiver_id,
            };
            let (frames, carried) = nak::emit_naks(from, &ranges, s.nak_destination(), emit);
            if frames > 0 {
                self.count(i, |c| c.naks_sent += frames);
                self.stats.nak_ranges_sent += carried;
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
            .filter_map(|s| s.gaps.next_deadline_ns())
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

    /// Bytes of frames held behind gaps, over all sessions.
    fn held_bytes(&self) -> usize {
        self.sessions.iter().map(|s| s.held.bytes()).sum()
    }

    /// Delivers held frames that are next in order.
    pub(super) fn drain_held<F: FnMut(Message<'_>)>(&mut self, i: usize, handler: &mut F) -> usize {
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
        if !self.sessions[i].gaps.give_up_front() {
            return 0;
        }
        self.skip_given_up(i, handler)
    }

    /// Reports given-up gaps at the front as lost and delivers the frames behind them.
    fn skip_given_up<F: FnMut(Message<'_>)>(&mut self, i: usize, handler: &mut F) -> usize {
        let mut n = 0;
        let s = &self.sessions[i];
        if s.tentative && s.gaps.front_given_up() {
            // A `start` late join given up before the sender said whether it still has the
            // session's first message: it did not answer, so it has not.
            self.settle(i, false);
            n += self.drain_held(i, handler);
        }
        loop {
            let s = &mut self.sessions[i];
            let Some(g) = s.gaps.pop_given_up_at(s.next_sequence) else {
                return n;
            };
            s.next_sequence = g.end;
            s.reassembly.cut();
            self.stats.unrecoverable = self.stats.unrecoverable.saturating_add(g.end - g.start);
            self.lost(i, g.start, g.end - g.start);
            n += self.drain_held(i, handler);
        }
    }

    /// Records the frames from the session's `high` up to `end` as missing, first NAK due after
    /// the configured delay, and moves `high` to `end`.
    fn open_gap(&mut self, i: usize, end: u64, nak: &NakConfig, now_ns: u64) {
        let delay = self.nak_delay.next(nak);
        let s = &mut self.sessions[i];
        s.gaps.push(Gap::new(s.high, end, now_ns, delay));
        s.high = end;
        self.stats.gaps_detected += 1;
    }
}
