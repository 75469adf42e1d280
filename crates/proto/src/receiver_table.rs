//! The publisher's view of its network receivers, sans I/O: who joined (STATUS JOIN), who is
//! still there (STATUS keep-alives), who left (STATUS LEAVE or silence), and the flow-control
//! limit their windows allow. (The subscriber side is [`receiver`](crate::receiver).)
//!
//! **Flow control with a bound** (docs/architecture.md, *Flow control*). The limit is the
//! lowest `next_sequence + window` of the receivers *in flow control*, as in Aeron's min flow
//! control, with three rules that keep one receiver from freezing the publisher:
//!
//! - **A receiver holds the publisher back only once it has shown that it hears the
//!   publisher, or while it leaves it room.** A new receiver is *unproven* until a STATUS of the
//!   publisher's session acknowledges a position at or after the one it joined at (which the
//!   publisher's answer to its JOIN told it; nobody can claim a position past what was sent),
//!   or announces a limit (`next_sequence + window`) beyond what was sent; until then its
//!   window does not count. A receiver's limit never moves back. So a JOIN from a forged
//!   address, or keep-alives that repeat a stale position with a small window, never hold
//!   anything back, and a blind guess at the publisher's position can at most give room to be
//!   taken back after `flow_timeout_ns`. An unproven receiver that acknowledges nothing for
//!   `timeout_ns` while data flows is dropped (it is, as far as the data goes, silent).
//! - **A refused message may wait for one receiver at most `flow_timeout_ns`.** When the
//!   publisher refuses an offer needing sequence numbers below `wanted`
//!   ([`on_refused`](ReceiverTable::on_refused)), every receiver whose limit is below `wanted`
//!   starts a *stall*; the stall ends when that receiver's limit reaches `wanted`. A stall older
//!   than `flow_timeout_ns` drops the receiver from flow control (it stays a receiver: data,
//!   heartbeats, NAK repair within the retention, or an exact `Lost`, like any slow
//!   subscriber). It comes back in once it has caught up (its limit is past what was sent)
//!   after `flow_timeout_ns`, twice that after a second drop, and so on up to `flow_rest_ns`:
//!   a subscriber that was paused is protected again, one that stalls on purpose costs the
//!   publisher less and less. Its IP address *rests* for `flow_rest_ns`: new receivers from it
//!   join outside flow control, and the ones that entered flow control while it was stalling
//!   the publisher get no grace, so one host cannot stall the publisher again and again under
//!   new receiver ids (receivers of that host that were in flow control before keep theirs).
//! - **Admission is bounded.** New receivers pass a token bucket (`joins_per_s`, burst
//!   `join_burst`), the table holds at most `max_receivers` (a full table makes room by dropping
//!   its oldest unproven receiver), and a STATUS claiming a position the publisher has not sent
//!   yet is ignored and counted, so an acknowledgement cannot be made up wholesale.
//!
//! ```
//! use peregrine_proto::receiver_table::{ReceiverTable, StatusOutcome, TableConfig};
//! use peregrine_wire::header::status_flags;
//! use peregrine_wire::status::StatusRepr;
//!
//! let mut table = ReceiverTable::new(TableConfig::new(7));
//! let addr = "127.0.0.1:4000".parse().unwrap();
//! let join = StatusRepr { session_id: 0, stream_id: 7, receiver_id: 9, next_sequence: 0,
//!                         window: 1000, flags: status_flags::JOIN };
//! assert_eq!(table.on_status(addr, &join, 0x55, 42, 0), StatusOutcome::Joined);
//! // Joined at the publisher's position (42), but it has not shown it hears it: no limit.
//! assert_eq!(table.limit(), None);
//! // Its first STATUS names the session and the position the publisher's answer told it.
//! let status = StatusRepr { session_id: 0x55, flags: 0, next_sequence: 42, ..join };
//! assert_eq!(table.on_status(addr, &status, 0x55, 42, 1_000), StatusOutcome::Updated);
//! // It holds the publisher at 42 + 1000.
//! assert_eq!(table.limit(), Some(1042));
//! ```

use crate::rate::TokenBucket;
use peregrine_wire::header::status_flags;
use peregrine_wire::status::StatusRepr;
use std::net::{IpAddr, SocketAddr};

/// A receiver table's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    pub stream_id: u32,
    /// Receivers silent this long are dropped; an unproven receiver that acknowledges no data
    /// this long after data was sent is dropped too.
    pub timeout_ns: u64,
    /// Most receivers at once.
    pub max_receivers: usize,
    /// Longest a refused offer waits for one receiver before that receiver is dropped from
    /// flow control (`flow_timeout_ms` of a URI).
    pub flow_timeout_ns: u64,
    /// How long receivers from the IP address of a receiver dropped from flow control stay
    /// out of it.
    pub flow_rest_ns: u64,
    /// New receivers admitted per second...
    pub joins_per_s: u64,
    /// ...and at once.
    pub join_burst: u64,
}

impl TableConfig {
    /// Defaults: silence 2 s, 1024 receivers, flow timeout 1 s, rest 60 s, 64 joins per second
    /// with bursts of 64.
    pub fn new(stream_id: u32) -> Self {
        TableConfig {
            stream_id,
            timeout_ns: 2_000_000_000,
            max_receivers: 1024,
            flow_timeout_ns: 1_000_000_000,
            flow_rest_ns: 60_000_000_000,
            joins_per_s: 64,
            join_burst: 64,
        }
    }
}

/// A receiver's part in flow control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Has not acknowledged the position it joined at (`join_next`): does not hold the
    /// publisher. `data_since_ns`: when the publisher was first seen past `join_next`.
    Unproven {
        join_next: u64,
        data_since_ns: Option<u64>,
    },
    /// Holds the publisher at `next_sequence + window` since `since_ns`. `stall`: since when a
    /// refused offer needing sequence numbers below `wanted` waits for it, as
    /// `(since_ns, wanted)`.
    Member {
        since_ns: u64,
        stall: Option<(u64, u64)>,
    },
    /// Out of flow control: receives, never holds the publisher back; comes back in once
    /// `until_ns` has passed and it leaves the publisher room.
    Out { until_ns: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    addr: SocketAddr,
    receiver_id: u32,
    next_sequence: u64,
    window: u32,
    /// The highest `next_sequence + window` it announced: a limit never moves back, so a
    /// receiver cannot take back room it gave (Aeron's senders keep the same rule).
    limit_max: u64,
    last_heard_ns: u64,
    joined_ns: u64,
    flow: Flow,
    /// Times it was dropped from flow control: each doubles how long it stays out.
    drops: u32,
}

impl Entry {
    /// Applies the position and window of a STATUS of the publisher's session (not a JOIN).
    /// `rest_until_ns`: its IP address rests from flow control until then (0: it does not).
    fn on_position(&mut self, s: &StatusRepr, sent_next: u64, rest_until_ns: u64, now_ns: u64) {
        self.next_sequence = self.next_sequence.max(s.next_sequence);
        let announced = s.next_sequence.saturating_add(u64::from(s.window));
        if s.window > 0 {
            self.limit_max = self.limit_max.max(announced);
        }
        let room = s.window > 0 && announced > sent_next;
        match self.flow {
            // It names the position the answer to its JOIN told it (or a later one), or it
            // leaves the publisher room: it hears the publisher, or holds nothing back yet.
            Flow::Unproven { join_next, .. } if s.next_sequence >= join_next || room => {
                self.flow = if rest_until_ns > now_ns {
                    Flow::Out {
                        until_ns: rest_until_ns,
                    }
                } else {
                    Flow::Member {
                        since_ns: now_ns,
                        stall: None,
                    }
                };
            }
            // Back in once its time out is over and it has caught up.
            Flow::Out { until_ns } if now_ns >= until_ns && room => {
                self.flow = Flow::Member {
                    since_ns: now_ns,
                    stall: None,
                };
            }
            _ => {}
        }
        if let (
            Flow::Member {
                since_ns,
                stall: Some((_, wanted)),
            },
            Some(l),
        ) = (self.flow, self.limit())
        {
            if l >= wanted {
                self.flow = Flow::Member {
                    since_ns,
                    stall: None,
                };
            }
        }
    }

    fn limit(&self) -> Option<u64> {
        (matches!(self.flow, Flow::Member { .. }) && self.window > 0).then(|| {
            self.limit_max
                .max(self.next_sequence.saturating_add(u64::from(self.window)))
        })
    }
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
    /// Not for this stream or session, a position not sent yet, or not admitted: ignored (and
    /// counted).
    Ignored,
}

/// IP addresses resting from flow control, at most this many (the oldest is forgotten).
const MAX_RESTING: usize = 64;

/// The receivers of one publisher. See the [module documentation](self).
#[derive(Debug)]
pub struct ReceiverTable {
    cfg: TableConfig,
    entries: Vec<Entry>,
    joins: TokenBucket,
    /// (address, from_ns, until_ns): receivers from the address that enter flow control from
    /// `from_ns` on get no grace, new ones stay out until `until_ns`.
    resting: Vec<(IpAddr, u64, u64)>,
    /// Receivers dropped because they stopped sending STATUS, or acknowledged no data.
    pub timed_out: u64,
    /// STATUS frames ignored (other stream or session, a position not sent yet, not admitted).
    pub ignored: u64,
    /// New receivers not admitted: over the admission rate, or the table full.
    pub joins_refused: u64,
    /// STATUS frames claiming a position beyond what the publisher sent (also in `ignored`).
    pub claims_ahead: u64,
    /// Receivers dropped from flow control for keeping a refused offer waiting past
    /// `flow_timeout_ns`.
    pub flow_dropped: u64,
}

impl ReceiverTable {
    pub fn new(cfg: TableConfig) -> Self {
        ReceiverTable {
            cfg,
            entries: Vec::new(),
            joins: TokenBucket::new(cfg.joins_per_s, cfg.join_burst, 0),
            resting: Vec::new(),
            timed_out: 0,
            ignored: 0,
            joins_refused: 0,
            claims_ahead: 0,
            flow_dropped: 0,
        }
    }

    pub fn config(&self) -> &TableConfig {
        &self.cfg
    }

    /// Applies one STATUS frame from `addr`. `session_id` is the publisher's session and
    /// `sent_next` the next sequence number it has not sent yet (where a joining receiver
    /// starts; no receiver can acknowledge beyond it).
    pub fn on_status(
        &mut self,
        addr: SocketAddr,
        s: &StatusRepr,
        session_id: u32,
        sent_next: u64,
        now_ns: u64,
    ) -> StatusOutcome {
        let join = s.flags & status_flags::JOIN != 0;
        let found = self
            .entries
            .iter()
            .position(|e| e.addr == addr && e.receiver_id == s.receiver_id);
        if s.stream_id != self.cfg.stream_id
            || (found.is_some() && !join && s.session_id != session_id)
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
        let current = s.session_id == session_id;
        // Nobody can have received what was not sent: a made-up acknowledgement.
        if current && s.next_sequence > sent_next {
            self.claims_ahead += 1;
            self.ignored += 1;
            return StatusOutcome::Ignored;
        }
        match found {
            Some(i) => {
                let rest = self.rest_until(addr.ip(), now_ns);
                let e = &mut self.entries[i];
                e.window = s.window;
                e.last_heard_ns = now_ns;
                // A JOIN says where nothing: it neither acknowledges nor proves anything.
                if !join && current {
                    e.on_position(s, sent_next, rest, now_ns);
                }
                if join {
                    StatusOutcome::Rejoined
                } else {
                    StatusOutcome::Updated
                }
            }
            // An unknown receiver joins, whether it says JOIN or keeps alive a session it knew
            // (this publisher replaced one on the same address).
            None => {
                if !self.joins.try_take(1, now_ns)
                    || (self.entries.len() >= self.cfg.max_receivers && !self.make_room())
                {
                    self.joins_refused += 1;
                    self.ignored += 1;
                    return StatusOutcome::Ignored;
                }
                // A keep-alive of this session (a multicast receiver registers so) says where
                // the receiver is: it starts there, and may prove itself at once.
                let keepalive = !join && current;
                let mut e = Entry {
                    addr,
                    receiver_id: s.receiver_id,
                    next_sequence: if keepalive {
                        s.next_sequence
                    } else {
                        sent_next
                    },
                    window: s.window,
                    limit_max: 0,
                    last_heard_ns: now_ns,
                    joined_ns: now_ns,
                    flow: Flow::Unproven {
                        join_next: sent_next,
                        data_since_ns: None,
                    },
                    drops: 0,
                };
                if keepalive {
                    let rest = self.rest_until(addr.ip(), now_ns);
                    e.on_position(s, sent_next, rest, now_ns);
                }
                self.entries.push(e);
                StatusOutcome::Joined
            }
        }
    }

    /// A full table drops its oldest unproven receiver for a new one; false when every
    /// receiver has proven itself.
    fn make_room(&mut self) -> bool {
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.flow, Flow::Unproven { .. }))
            .min_by_key(|(_, e)| e.joined_ns)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                self.entries.swap_remove(i);
                self.timed_out += 1;
                true
            }
            None => false,
        }
    }

    /// Until when `ip` rests (0: it does not).
    fn rest_until(&mut self, ip: IpAddr, now_ns: u64) -> u64 {
        self.resting.retain(|&(_, _, until)| until > now_ns);
        self.resting
            .iter()
            .find(|r| r.0 == ip)
            .map_or(0, |&(_, _, until)| until)
    }

    /// When the rest of `ip` began counting (receivers in flow control since then get no
    /// grace), if it rests.
    fn rest_from(&mut self, ip: IpAddr, now_ns: u64) -> Option<u64> {
        self.rest_until(ip, now_ns);
        self.resting
            .iter()
            .find(|r| r.0 == ip)
            .map(|&(_, from, _)| from)
    }

    /// The publisher refused an offer needing sequence numbers below `wanted`: every receiver
    /// in flow control whose limit is below it starts a stall (if not stalled already), and
    /// stalls older than `flow_timeout_ns` end in a drop from flow control. Returns whether
    /// the limit may have changed. Called on the refusal path only.
    pub fn on_refused(&mut self, now_ns: u64, wanted: u64) -> bool {
        let mut changed = false;
        for i in 0..self.entries.len() {
            let e = self.entries[i];
            if let (
                Flow::Member {
                    since_ns,
                    stall: None,
                },
                Some(l),
            ) = (e.flow, e.limit())
            {
                if l < wanted {
                    // A receiver of a resting address that came into flow control while its
                    // neighbour was stalling the publisher gets no grace: the same wave.
                    if e.drops == 0
                        && self
                            .rest_from(e.addr.ip(), now_ns)
                            .is_some_and(|from| since_ns >= from)
                    {
                        self.drop_from_flow(i, now_ns);
                        changed = true;
                    } else {
                        self.entries[i].flow = Flow::Member {
                            since_ns,
                            stall: Some((now_ns, wanted)),
                        };
                    }
                }
            }
        }
        self.drop_stalled(now_ns) || changed
    }

    /// Drops from flow control the receivers stalled for `flow_timeout_ns`.
    fn drop_stalled(&mut self, now_ns: u64) -> bool {
        let mut changed = false;
        for i in 0..self.entries.len() {
            if let Flow::Member {
                stall: Some((since, _)),
                ..
            } = self.entries[i].flow
            {
                if now_ns.saturating_sub(since) >= self.cfg.flow_timeout_ns {
                    self.drop_from_flow(i, now_ns);
                    self.rest(self.entries[i].addr.ip(), since, now_ns);
                    changed = true;
                }
            }
        }
        changed
    }

    /// Entry `i` leaves flow control, counted: for the flow timeout the first time, twice as
    /// long each time after (at most `flow_rest_ns`), and until it has caught up.
    fn drop_from_flow(&mut self, i: usize, now_ns: u64) {
        let e = &mut self.entries[i];
        e.drops = e.drops.saturating_add(1);
        let out_ns = self
            .cfg
            .flow_timeout_ns
            .saturating_mul(1 << (e.drops - 1).min(32))
            .min(self.cfg.flow_rest_ns);
        e.flow = Flow::Out {
            until_ns: now_ns.saturating_add(out_ns),
        };
        self.flow_dropped += 1;
    }

    /// New receivers from `ip` stay out of flow control for `flow_rest_ns`, and those that
    /// entered it since `from_ns` (the stall that caused this) get no grace.
    fn rest(&mut self, ip: IpAddr, from_ns: u64, now_ns: u64) {
        let until = now_ns.saturating_add(self.cfg.flow_rest_ns);
        if let Some(r) = self.resting.iter_mut().find(|r| r.0 == ip) {
            r.2 = until;
            return;
        }
        if self.resting.len() >= MAX_RESTING {
            let first = (0..self.resting.len())
                .min_by_key(|&i| self.resting[i].2)
                .unwrap_or(0);
            self.resting.swap_remove(first);
        }
        self.resting.push((ip, from_ns, until));
    }

    /// Runs the timers: drops receivers silent for `timeout_ns`, unproven receivers that
    /// acknowledged nothing for `timeout_ns` while the publisher sent past their JOIN
    /// (`sent_next` is the next sequence number not sent), and stalled receivers from flow
    /// control. Returns whether the set of receivers or the limit changed.
    pub fn poll(&mut self, now_ns: u64, sent_next: u64) -> bool {
        let before = self.entries.len();
        let timeout = self.cfg.timeout_ns;
        self.entries.retain_mut(|e| {
            if now_ns.saturating_sub(e.last_heard_ns) > timeout {
                return false;
            }
            if let Flow::Unproven {
                join_next,
                data_since_ns,
            } = &mut e.flow
            {
                match *data_since_ns {
                    None if sent_next > *join_next => *data_since_ns = Some(now_ns),
                    Some(t) if now_ns.saturating_sub(t) > timeout => return false,
                    _ => {}
                }
            }
            true
        });
        let n = before - self.entries.len();
        self.timed_out += n as u64;
        let dropped = self.drop_stalled(now_ns);
        n > 0 || dropped
    }

    /// The flow-control limit: the lowest `next_sequence + window` of the receivers in flow
    /// control that announce a window, or `None` when none does.
    pub fn limit(&self) -> Option<u64> {
        self.entries.iter().filter_map(Entry::limit).min()
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
    /// Receivers that hold the publisher back (proven, not dropped from flow control).
    pub fn in_flow_control(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.flow, Flow::Member { .. }))
            .count()
    }
    /// Addresses data goes to (unicast). Several receivers may share an address.
    pub fn addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.entries.iter().map(|e| e.addr)
    }
}

#[cfg(test)]
mod tests;
