//! The publisher's view of its network receivers, sans I/O: who joined (STATUS JOIN), who is
//! still there (STATUS keep-alives), who left (STATUS LEAVE or silence), and the flow-control
//! limit their windows allow. (The subscriber side is [`receiver`](crate::receiver).)
//!
//! ```
//! use peregrine_proto::receiver_table::{ReceiverTable, StatusOutcome};
//! use peregrine_wire::header::status_flags;
//! use peregrine_wire::status::StatusRepr;
//!
//! let mut table = ReceiverTable::new(7, 1_000_000_000, 16);
//! let addr = "127.0.0.1:4000".parse().unwrap();
//! let join = StatusRepr { session_id: 0, stream_id: 7, receiver_id: 9, next_sequence: 0,
//!                         window: 1000, flags: status_flags::JOIN };
//! assert_eq!(table.on_status(addr, &join, 0x55, 42, 0), StatusOutcome::Joined);
//! // The receiver starts at the publisher's position (42) with a window of 1000 frames.
//! assert_eq!(table.limit(), Some(1042));
//! ```

use peregrine_wire::header::status_flags;
use peregrine_wire::status::StatusRepr;
use std::net::SocketAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    addr: SocketAddr,
    receiver_id: u32,
    next_sequence: u64,
    window: u32,
    last_heard_ns: u64,
}

/// What a STATUS frame changed.
// Not #[non_exhaustive]: the driver answers each outcome in its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOutcome {
    /// A new receiver: answer it with a HEARTBEAT so it learns the session and position.
    Joined,
    /// A known receiver asked to join again (its JOIN crossed our HEARTBEAT): answer again.
    Rejoined,
    /// A keep-alive or window update.
    Updated,
    /// The receiver left.
    Left,
    /// Not for this stream or session, or the table is full: ignored (and counted).
    Ignored,
}

/// The receivers of one publisher. See the [module documentation](self).
#[derive(Debug)]
pub struct ReceiverTable {
    stream_id: u32,
    timeout_ns: u64,
    max_receivers: usize,
    entries: Vec<Entry>,
    /// Receivers dropped because they stopped sending STATUS.
    pub timed_out: u64,
    /// STATUS frames ignored (other stream or session, table full).
    pub ignored: u64,
}

impl ReceiverTable {
    pub fn new(stream_id: u32, timeout_ns: u64, max_receivers: usize) -> Self {
        ReceiverTable {
            stream_id,
            timeout_ns,
            max_receivers,
            entries: Vec::new(),
            timed_out: 0,
            ignored: 0,
        }
    }

    /// Applies one STATUS frame from `addr`. `session_id` is the publisher's session and
    /// `next_sequence` its current position (where a joining receiver starts).
    pub fn on_status(
        &mut self,
        addr: SocketAddr,
        s: &StatusRepr,
        session_id: u32,
        next_sequence: u64,
        now_ns: u64,
    ) -> StatusOutcome {
        let join = s.flags & status_flags::JOIN != 0;
        let found = self
            .entries
            .iter()
            .position(|e| e.addr == addr && e.receiver_id == s.receiver_id);
        if s.stream_id != self.stream_id || (found.is_some() && !join && s.session_id != session_id)
        {
            self.ignored += 1;
            return StatusOutcome::Ignored;
        }
        if s.flags & status_flags::LEAVE != 0 {
            return match found {
                Some(i) => {
                    self.entries.swap_remove(i);
                    StatusOutcome::Left
                }
                None => StatusOutcome::Ignored,
            };
        }
        // A receiver's position is never ahead of ours (a stale or spoofed value is clamped).
        let position = if s.session_id != session_id {
            next_sequence
        } else {
            s.next_sequence.min(next_sequence)
        };
        match found {
            Some(i) => {
                let e = &mut self.entries[i];
                e.next_sequence = e.next_sequence.max(position);
                e.window = s.window;
                e.last_heard_ns = now_ns;
                if join {
                    StatusOutcome::Rejoined
                } else {
                    StatusOutcome::Updated
                }
            }
            // An unknown receiver joins, whether it says JOIN or keeps alive a session it knew
            // (this publisher replaced one on the same address).
            None => {
                if self.entries.len() >= self.max_receivers {
                    self.ignored += 1;
                    return StatusOutcome::Ignored;
                }
                self.entries.push(Entry {
                    addr,
                    receiver_id: s.receiver_id,
                    next_sequence: position,
                    window: s.window,
                    last_heard_ns: now_ns,
                });
                StatusOutcome::Joined
            }
        }
    }

    /// Drops receivers not heard from for the timeout; returns how many.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let before = self.entries.len();
        let timeout = self.timeout_ns;
        self.entries
            .retain(|e| now_ns.saturating_sub(e.last_heard_ns) <= timeout);
        let n = before - self.entries.len();
        self.timed_out += n as u64;
        n
    }

    /// The flow-control limit: the lowest `next_sequence + window` of the receivers that
    /// announce a window, or `None` when none does.
    pub fn limit(&self) -> Option<u64> {
        self.entries
            .iter()
            .filter(|e| e.window > 0)
            .map(|e| e.next_sequence.saturating_add(u64::from(e.window)))
            .min()
    }

    /// The lowest `next_sequence` confirmed by a receiver (`None` without receivers): a
    /// closing publisher lingers until it reaches its last sequence.
    pub fn lowest_next(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.next_sequence).min()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Addresses data goes to (unicast). Several receivers may share an address.
    pub fn addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.entries.iter().map(|e| e.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(session_id: u32, receiver_id: u32, next: u64, window: u32, flags: u16) -> StatusRepr {
        StatusRepr {
            session_id,
            stream_id: 7,
            receiver_id,
            next_sequence: next,
            window,
            flags,
        }
    }

    #[test]
    fn join_update_leave_and_expiry() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut t = ReceiverTable::new(7, 1000, 4);
        assert_eq!(
            t.on_status(a, &st(0, 1, 0, 100, status_flags::JOIN), 5, 10, 0),
            StatusOutcome::Joined
        );
        assert_eq!(
            t.on_status(b, &st(0, 2, 0, 50, status_flags::JOIN), 5, 10, 0),
            StatusOutcome::Joined
        );
        assert_eq!(t.limit(), Some(60));
        assert_eq!(t.lowest_next(), Some(10));
        assert_eq!(
            t.on_status(b, &st(5, 2, 40, 50, 0), 5, 45, 500),
            StatusOutcome::Updated
        );
        assert_eq!(t.limit(), Some(90));
        // A position ahead of the publisher is clamped to it.
        assert_eq!(
            t.on_status(a, &st(5, 1, 999, 100, 0), 5, 45, 500),
            StatusOutcome::Updated
        );
        assert_eq!(t.limit(), Some(90));
        // A known receiver's keep-alive for another session and another stream are ignored.
        assert_eq!(
            t.on_status(a, &st(6, 1, 0, 100, 0), 5, 45, 500),
            StatusOutcome::Ignored
        );
        let mut other = st(5, 1, 0, 100, 0);
        other.stream_id = 8;
        assert_eq!(t.on_status(a, &other, 5, 45, 500), StatusOutcome::Ignored);
        assert_eq!(t.ignored, 2);
        // a is silent after 500; b speaks at 1200; a expires at 1600.
        assert_eq!(
            t.on_status(b, &st(5, 2, 45, 50, 0), 5, 45, 1200),
            StatusOutcome::Updated
        );
        assert_eq!(t.expire(1600), 1);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.on_status(b, &st(5, 2, 45, 0, status_flags::LEAVE), 5, 45, 1700),
            StatusOutcome::Left
        );
        assert!(t.is_empty());
        assert_eq!(t.limit(), None);
        // A keep-alive for an older session from an unknown receiver: this publisher replaced
        // the one it knew, so it joins at the current position.
        assert_eq!(
            t.on_status(b, &st(4, 2, 3, 50, 0), 5, 45, 1800),
            StatusOutcome::Joined
        );
        assert_eq!(t.limit(), Some(95));
    }

    #[test]
    fn a_full_table_ignores_new_receivers() {
        let mut t = ReceiverTable::new(7, 1000, 1);
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_eq!(
            t.on_status(a, &st(0, 1, 0, 0, status_flags::JOIN), 5, 0, 0),
            StatusOutcome::Joined
        );
        assert_eq!(
            t.on_status(b, &st(0, 2, 0, 0, status_flags::JOIN), 5, 0, 0),
            StatusOutcome::Ignored
        );
        assert_eq!(
            t.limit(),
            None,
            "receivers without a window do not hold the sender"
        );
        assert_eq!(
            t.on_status(a, &st(0, 1, 0, 0, status_flags::JOIN), 5, 0, 0),
            StatusOutcome::Rejoined
        );
    }
}
