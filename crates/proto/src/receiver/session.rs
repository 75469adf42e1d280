//! The sessions a receiver follows (one per publisher of the stream): a session's state, its
//! binding to the source it was first heard from (and a B line's, with
//! [`ReceiverConfig::second_source`](super::ReceiverConfig::second_source)), and the
//! receiver's table of them: found or created for each frame (with late join), ended by BYE,
//! timeout or a lost connection, remembered when they departed or closed.

use super::config::{LateJoin, LATE_JOIN_START_MAX};
use super::gaps::{Gap, Gaps};
use super::jump::Suspect;
use super::reassembly::Reassembly;
use super::status::StatusSchedule;
use super::Receiver;
use crate::counters::SubscriberCounters;
use crate::events::SubscriberEvent;
use crate::held::HeldFrames;
use std::net::SocketAddr;

/// Departed sessions remembered.
const DEPARTED_KEPT: usize = 16;
/// Closed sessions remembered.
pub(super) const CLOSED_KEPT: usize = 16;

#[derive(Debug)]
pub(super) struct Session {
    pub(super) session_id: u32,
    pub(super) source: SocketAddr,
    /// With [`ReceiverConfig::second_source`](super::ReceiverConfig::second_source): the B
    /// line's source, once heard, and whether the last frame came from it.
    pub(super) source_b: Option<SocketAddr>,
    pub(super) last_from_b: bool,
    pub(super) next_sequence: u64,
    pub(super) reassembly: Reassembly,
    pub(super) last_heard_ns: u64,
    pub(super) status: StatusSchedule,
    pub(super) counters: SubscriberCounters,
    /// Loss repair: one past the highest sequence seen; frames held behind gaps; the gaps.
    /// `[next_sequence, high)` is exactly the held frames and the gaps.
    pub(super) high: u64,
    pub(super) held: HeldFrames,
    pub(super) gaps: Gaps,
    /// A frame that would move the session further than the jump bound allows, held (not
    /// acted on) until another frame from the source confirms it.
    pub(super) suspect: Suspect,
    /// `next_sequence - oldest_retained` of the last heartbeat acted on: how far behind the
    /// sender a receiver can fall and still repair (part of the jump bound).
    pub(super) retained_span: u64,
    /// The first position heard (a late join asks for what came before).
    pub(super) joined_at: u64,
    /// [`LateJoin::Start`] asked for the session's first messages and does not know yet
    /// whether the sender still retains them (its `Connected` event waits for that).
    pub(super) tentative: bool,
}

impl Session {
    /// Whether a frame from `source` comes from where the session is bound: its first source
    /// or, with `second_source`, its B line's (bound here when first heard).
    #[inline]
    fn bound_to(&mut self, source: SocketAddr, second_source: bool) -> bool {
        if self.source == source {
            // (Only a session with a B line has a line to remember: no store otherwise.)
            if self.source_b.is_some() {
                self.last_from_b = false;
            }
            return true;
        }
        match self.source_b {
            Some(b) if b == source => {}
            None if second_source => self.source_b = Some(source),
            _ => return false,
        }
        self.last_from_b = true;
        true
    }

    /// Where NAKs go: the line last heard from (the other may be the one that is down).
    pub(super) fn nak_destination(&self) -> SocketAddr {
        match self.source_b {
            Some(b) if self.last_from_b => b,
            _ => self.source,
        }
    }
}

impl Receiver {
    /// The index of session `session_id`, created (with a `Connected` event) when new. A
    /// session is bound to the source it was first heard from: a frame for it from another
    /// source is counted and refused.
    pub(super) fn session(
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
        let mut gaps = Gaps::default();
        if start < next {
            let delay = self.cfg.nak.map_or(0, |nak| self.nak_delay.next(&nak));
            gaps.push(Gap::new(start, next, now_ns, delay));
            self.stats.late_joins += 1;
        }
        self.sessions.push(Session {
            session_id,
            source,
            source_b: None,
            last_from_b: false,
            next_sequence: start,
            reassembly: Reassembly::new(need_begin),
            last_heard_ns: now_ns,
            status: StatusSchedule::new(next),
            counters: SubscriberCounters::default(),
            high: next,
            held: HeldFrames::default(),
            gaps,
            suspect: Suspect::default(),
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
    pub(super) fn known_session(&mut self, session_id: u32, source: SocketAddr) -> Option<usize> {
        let i = self
            .sessions
            .iter()
            .position(|s| s.session_id == session_id)?;
        self.heard_from_bound_source(i, source).then_some(i)
    }

    /// Whether a frame of session `i` from `source` comes from where the session is bound; a
    /// frame from elsewhere is counted foreign.
    #[inline]
    fn heard_from_bound_source(&mut self, i: usize, source: SocketAddr) -> bool {
        let bound = self.sessions[i].bound_to(source, self.cfg.second_source);
        if !bound {
            self.stats.foreign_source += 1;
        }
        bound
    }

    /// Ends the uncertainty of a [`LateJoin::Start`] session: `young` (the sender still had
    /// its first message) keeps the late-join gap; otherwise it is dropped and delivery
    /// starts where the session was first heard, as if no late join had been asked for.
    pub(super) fn settle(&mut self, i: usize, young: bool) {
        let s = &mut self.sessions[i];
        if !s.tentative {
            return;
        }
        s.tentative = false;
        if !young && s.next_sequence < s.joined_at {
            let at = s.joined_at;
            s.gaps.drop_before(at);
            s.held.skip_to(at);
            s.next_sequence = at;
            s.reassembly.cut();
        }
        let (session_id, first_sequence) = (s.session_id, s.next_sequence);
        self.events.push_back(SubscriberEvent::Connected {
            session_id,
            first_sequence,
        });
    }

    /// Removes session `i`, releasing what it held.
    pub(super) fn remove_session(&mut self, i: usize) -> Session {
        let s = self.sessions.swap_remove(i);
        self.last_session = 0;
        s
    }

    /// Removes session `i` after its BYE: `PublisherClosed`, and its later frames (another
    /// receiver's retransmissions) are not taken for a new session.
    pub(super) fn close(&mut self, i: usize) {
        let session_id = self.remove_session(i).session_id;
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(session_id);
        self.events
            .push_back(SubscriberEvent::PublisherClosed { session_id });
    }

    /// Removes session `i` as gone without a BYE: `PublisherDied`, and remember its position.
    pub(super) fn depart(&mut self, i: usize) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(source: &str) -> Session {
        Session {
            session_id: 1,
            source: source.parse().unwrap(),
            source_b: None,
            last_from_b: false,
            next_sequence: 0,
            reassembly: Reassembly::new(true),
            last_heard_ns: 0,
            status: StatusSchedule::new(0),
            counters: SubscriberCounters::default(),
            high: 0,
            held: HeldFrames::default(),
            gaps: Gaps::default(),
            suspect: Suspect::default(),
            retained_span: 0,
            joined_at: 0,
            tentative: false,
        }
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_session_hears_only_its_first_source() {
        let mut s = session("10.0.0.1:5000");
        assert!(s.bound_to(addr("10.0.0.1:5000"), false));
        assert!(!s.bound_to(addr("10.0.0.1:5001"), false), "another port");
        assert!(!s.bound_to(addr("10.0.0.2:5000"), false), "another host");
        assert_eq!(s.source_b, None);
        assert_eq!(s.nak_destination(), addr("10.0.0.1:5000"));
    }

    #[test]
    fn with_a_b_line_the_second_source_is_bound_and_a_third_is_foreign() {
        let (a, b) = (addr("10.0.0.1:5000"), addr("10.0.1.1:5000"));
        let mut s = session("10.0.0.1:5000");
        assert!(s.bound_to(b, true));
        assert_eq!(s.source_b, Some(b));
        assert!(!s.bound_to(addr("10.0.2.1:5000"), true));
        // NAKs follow the line last heard from.
        assert_eq!(s.nak_destination(), b);
        assert!(s.bound_to(a, true));
        assert_eq!(s.nak_destination(), a);
        assert!(s.bound_to(b, true));
        assert_eq!(s.nak_destination(), b);
    }
}
