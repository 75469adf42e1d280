//! Arbitration of a failover group: several publishers (members) send the same
//! application-sequenced stream; the subscriber delivers each sequence once, in order, from
//! whichever member's copy comes first.
//!
//! The [`Arbiter`] is sans-I/O: it is given each member's messages in the order that member's
//! session delivers them (each session is already in order and repaired by its own NAKs), the
//! departures of members, and the time; it answers what to deliver and reports what no member
//! could supply. The header carrying the sequence is `peregrine_wire::failover`.
//!
//! ## Rules
//! - The first message from any member starts the stream at its sequence. Afterwards the
//!   arbiter keeps `next`, the sequence it delivers next.
//! - A message with `sequence == next` is delivered at once, in place ([`Verdict::Deliver`]);
//!   then every held message that has become next is delivered ([`Arbiter::pop_ready`]).
//! - A message below `next` is a duplicate: dropped. If the arbiter still remembers the
//!   delivered copy (the last [`ArbiterConfig::history`] sequences) and the contents differ,
//!   both members are reported ([`ArbiterEvent::Disagreement`]): the first copy was delivered.
//! - A message above `next` is held (copied), to be delivered when the sequences before it have
//!   come or been declared lost. A gap `[next, first held)` is declared
//!   [`ArbiterEvent::Lost`] (exactly once, with its exact range) as soon as every live member
//!   has gone past it (each member's stream is in order, so a member past a sequence it did not
//!   send never will), or when it has waited [`ArbiterConfig::window_ns`].
//! - **Jump bound.** A message further than [`ArbiterConfig::max_jump`] ahead of what the
//!   arbiter believes (`next`, or the highest message held) is not acted on: it is kept aside,
//!   one per member, until a second message from the same member confirms the position (the
//!   receiver's rule for sessions, docs/protocol.md §13). One stray or forged message moves
//!   nothing and declares nothing lost.
//! - A member is live from its first message until [`Arbiter::member_gone`] (its publisher
//!   closed, died or was withdrawn). A member that was never seen or is gone is not waited for.
//!
//! Memory is bounded: members ([`MAX_MEMBERS`]), held bytes ([`ArbiterConfig::max_held_bytes`],
//! beyond which an ahead message is dropped and counted: it is then reported lost unless
//! another member supplies it), one message kept aside per member, and the history ring.

use std::collections::{BTreeMap, VecDeque};

/// Most members followed at once; a further session's messages are refused and counted
/// (`members_refused`) until a member is gone.
pub const MAX_MEMBERS: usize = 64;

/// Settings of an [`Arbiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArbiterConfig {
    /// How long a missing sequence is waited for while a member is ahead of it and another
    /// live member has not yet gone past it (a member that is slow, stopped, or repairing its
    /// own session's loss). Default 100 ms.
    pub window_ns: u64,
    /// The furthest ahead of the arbiter's position one message is believed without
    /// confirmation. Default 65,536.
    pub max_jump: u64,
    /// Most bytes of messages held ahead of a gap. Default 64 MiB.
    pub max_held_bytes: usize,
    /// Delivered sequences whose content is remembered (as a 64-bit hash) to check late copies
    /// against; a power of two. Default 4,096; 0 turns the check off.
    pub history: usize,
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        ArbiterConfig {
            window_ns: 100_000_000,
            max_jump: 65_536,
            max_held_bytes: 64 << 20,
            history: 4096,
        }
    }
}

/// Why an [`ArbiterConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArbiterConfigError {
    HistoryNotPowerOfTwo(usize),
    ZeroJump,
}

impl std::fmt::Display for ArbiterConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArbiterConfigError::HistoryNotPowerOfTwo(n) => write!(
                f,
                "failover history of {n} is not a power of two: use 0 (no content check) or 1024, 4096, ..."
            ),
            ArbiterConfigError::ZeroJump => {
                write!(f, "failover max_jump of 0 would believe no message: use 1 or more")
            }
        }
    }
}

impl std::error::Error for ArbiterConfigError {}

/// What to do with one member's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it now, then call [`Arbiter::pop_ready`] until it returns `None`.
    Deliver,
    /// Another member's copy came first (or the stream started after it): drop it.
    Duplicate,
    /// Copied and held until the sequences before it are delivered or declared lost.
    Held,
    /// Not used: beyond the jump bound (kept aside), beyond the held bytes, or from a member
    /// over [`MAX_MEMBERS`]; counted.
    Dropped,
}

/// What the arbiter reports besides deliveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArbiterEvent {
    /// Sequences `from .. from + count` came from no member: every live member went past them,
    /// or they were waited for a whole window. Reported once; delivery carries on after them.
    Lost { from: u64, count: u64 },
    /// Two members sent different contents for one sequence: `delivered_from`'s copy was
    /// delivered, `other`'s was dropped.
    Disagreement {
        sequence: u64,
        delivered_from: u32,
        other: u32,
    },
}

/// A held message that has become next: deliver it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyMessage {
    pub sequence: u64,
    pub member: u32,
    pub message: Vec<u8>,
}

/// What the arbiter counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArbiterCounters {
    /// Messages delivered (in place or from the held ones).
    pub delivered: u64,
    /// Copies dropped because another member's came first.
    pub duplicates: u64,
    /// Sequences declared lost.
    pub lost: u64,
    /// Late copies whose content differed from the delivered one.
    pub disagreements: u64,
    /// Messages held ahead of a gap (all time).
    pub held: u64,
    /// Ahead messages dropped because the held bytes were at their bound.
    pub held_overflow: u64,
    /// Messages beyond the jump bound kept aside, confirmed by a second, or replaced unconfirmed.
    pub jumps_held: u64,
    pub jumps_confirmed: u64,
    pub jumps_discarded: u64,
    /// Messages refused because [`MAX_MEMBERS`] members were live.
    pub members_refused: u64,
}

#[derive(Debug)]
struct Member {
    id: u32,
    /// The highest sequence believed from this member.
    last: Option<u64>,
    /// A message beyond the jump bound, waiting for a second to confirm it.
    aside: Option<(u64, Vec<u8>)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Remembered {
    sequence: u64,
    hash: u64,
    member: u32,
    valid: bool,
}

/// The arbitration of one failover group's stream (see the module's rules).
#[derive(Debug)]
pub struct Arbiter {
    config: ArbiterConfig,
    next: Option<u64>,
    members: Vec<Member>,
    held: BTreeMap<u64, (u32, Vec<u8>)>,
    held_bytes: usize,
    /// When the current gap (`next` missing, something held) was first seen.
    gap_since_ns: Option<u64>,
    now_ns: u64,
    history: Box<[Remembered]>,
    events: VecDeque<ArbiterEvent>,
    counters: ArbiterCounters,
}

impl Arbiter {
    pub fn new(config: ArbiterConfig) -> Result<Arbiter, ArbiterConfigError> {
        if config.history != 0 && !config.history.is_power_of_two() {
            return Err(ArbiterConfigError::HistoryNotPowerOfTwo(config.history));
        }
        if config.max_jump == 0 {
            return Err(ArbiterConfigError::ZeroJump);
        }
        Ok(Arbiter {
            config,
            next: None,
            members: Vec::new(),
            held: BTreeMap::new(),
            held_bytes: 0,
            gap_since_ns: None,
            now_ns: 0,
            history: vec![Remembered::default(); config.history].into_boxed_slice(),
            events: VecDeque::new(),
            counters: ArbiterCounters::default(),
        })
    }

    /// The sequence delivered next (`None` before the first message).
    pub fn next_sequence(&self) -> Option<u64> {
        self.next
    }

    pub fn counters(&self) -> ArbiterCounters {
        self.counters
    }

    /// The live members' ids, in the order they were first seen.
    pub fn members(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().map(|m| m.id)
    }

    /// Each live member and the highest sequence believed from it (`None` before its first
    /// believed message): how far behind the stream a member runs.
    pub fn member_positions(&self) -> impl Iterator<Item = (u32, Option<u64>)> + '_ {
        self.members.iter().map(|m| (m.id, m.last))
    }

    /// Messages held now and their bytes.
    pub fn held(&self) -> (usize, usize) {
        (self.held.len(), self.held_bytes)
    }

    /// The next reported event, if any.
    pub fn next_event(&mut self) -> Option<ArbiterEvent> {
        self.events.pop_front()
    }

    /// When [`poll`](Self::poll) has something to do: the end of the current gap's window.
    pub fn next_deadline(&self) -> Option<u64> {
        self.gap_since_ns
            .map(|t| t.saturating_add(self.config.window_ns))
    }

    /// One message of `member` (a publisher session) with its application `sequence`.
    #[inline]
    pub fn on_message(
        &mut self,
        member: u32,
        sequence: u64,
        message: &[u8],
        now_ns: u64,
    ) -> Verdict {
        self.now_ns = self.now_ns.max(now_ns);
        let Some(mi) = self.member_index(member) else {
            self.counters.members_refused += 1;
            return Verdict::Dropped;
        };
        let Some(next) = self.next else {
            // The first message of the stream.
            self.members[mi].last = Some(sequence);
            self.next = Some(sequence.wrapping_add(1));
            self.remember(sequence, member, message);
            self.counters.delivered += 1;
            return Verdict::Deliver;
        };
        if sequence == next {
            let m = &mut self.members[mi];
            m.last = Some(m.last.map_or(sequence, |l| l.max(sequence)));
            m.aside = None;
            self.next = Some(next.wrapping_add(1));
            self.remember(sequence, member, message);
            self.counters.delivered += 1;
            return Verdict::Deliver;
        }
        if sequence < next {
            let m = &mut self.members[mi];
            m.last = Some(m.last.map_or(sequence, |l| l.max(sequence)));
            self.on_duplicate(sequence, member, message, None);
            return Verdict::Duplicate;
        }
        self.on_ahead(mi, sequence, message)
    }

    #[cold]
    fn on_ahead(&mut self, mi: usize, sequence: u64, message: &[u8]) -> Verdict {
        let next = self.next.expect("started");
        let member = self.members[mi].id;
        if let Some((held_from, held_msg)) = self.held.get(&sequence) {
            let (held_from, differs) = (*held_from, *held_msg != message);
            let m = &mut self.members[mi];
            m.last = Some(m.last.map_or(sequence, |l| l.max(sequence)));
            self.on_duplicate(sequence, member, message, Some((held_from, differs)));
            // This member has gone past the gap too.
            self.settle();
            return Verdict::Duplicate;
        }
        let believed = self
            .held
            .keys()
            .next_back()
            .copied()
            .unwrap_or(next)
            .max(next);
        if sequence.saturating_sub(believed) > self.config.max_jump {
            // Beyond the jump bound: believed only when the same member confirms it.
            let confirmed = match &self.members[mi].aside {
                Some((s, _)) => sequence > *s && sequence - *s <= self.config.max_jump,
                None => false,
            };
            if !confirmed {
                if self.members[mi].aside.is_some() {
                    self.counters.jumps_discarded += 1;
                }
                self.counters.jumps_held += 1;
                self.members[mi].aside = Some((sequence, message.to_vec()));
                return Verdict::Dropped;
            }
            self.counters.jumps_confirmed += 1;
            let (s, first) = self.members[mi].aside.take().expect("confirmed");
            self.hold(mi, s, first);
        }
        let verdict = self.hold(mi, sequence, message.to_vec());
        self.settle();
        verdict
    }

    fn hold(&mut self, mi: usize, sequence: u64, message: Vec<u8>) -> Verdict {
        if self.held_bytes + message.len() > self.config.max_held_bytes {
            self.counters.held_overflow += 1;
            return Verdict::Dropped;
        }
        let m = &mut self.members[mi];
        m.last = Some(m.last.map_or(sequence, |l| l.max(sequence)));
        self.held_bytes += message.len();
        self.held.insert(sequence, (m.id, message));
        self.counters.held += 1;
        if self.gap_since_ns.is_none() {
            self.gap_since_ns = Some(self.now_ns);
        }
        Verdict::Held
    }

    fn on_duplicate(
        &mut self,
        sequence: u64,
        member: u32,
        message: &[u8],
        held: Option<(u32, bool)>,
    ) {
        self.counters.duplicates += 1;
        let first = match held {
            Some((from, true)) => Some(from),
            Some((_, false)) => None,
            None if self.history.is_empty() => None,
            None => {
                let r = self.history[sequence as usize & (self.history.len() - 1)];
                (r.valid && r.sequence == sequence && r.hash != content_hash(message))
                    .then_some(r.member)
            }
        };
        if let Some(delivered_from) = first {
            self.counters.disagreements += 1;
            self.events.push_back(ArbiterEvent::Disagreement {
                sequence,
                delivered_from,
                other: member,
            });
        }
    }

    /// A held message that has become next, to deliver now; call until `None` after every
    /// [`Verdict::Deliver`], [`poll`](Self::poll) and [`member_gone`](Self::member_gone).
    pub fn pop_ready(&mut self) -> Option<ReadyMessage> {
        let next = self.next?;
        let entry = self.held.first_entry()?;
        if *entry.key() != next {
            return None;
        }
        let (member, message) = entry.remove();
        self.held_bytes -= message.len();
        self.next = Some(next.wrapping_add(1));
        self.remember(next, member, &message);
        self.counters.delivered += 1;
        self.gap_since_ns = match self.held.keys().next() {
            None => None,
            Some(&s) if s == next.wrapping_add(1) => None,
            // A new gap opens behind the next held message: its window starts now.
            Some(_) => Some(self.now_ns),
        };
        Some(ReadyMessage {
            sequence: next,
            member,
            message,
        })
    }

    /// Advances time: a gap that has waited its window is declared lost. Then call
    /// [`pop_ready`](Self::pop_ready).
    pub fn poll(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.settle();
    }

    /// `member`'s publisher closed, died or was withdrawn: it is no longer waited for. Then call
    /// [`pop_ready`](Self::pop_ready).
    pub fn member_gone(&mut self, member: u32, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.members.retain(|m| m.id != member);
        self.settle();
    }

    /// Declares lost what no live member can still supply, or what waited a whole window.
    fn settle(&mut self) {
        loop {
            let (Some(next), Some(&first_held)) = (self.next, self.held.keys().next()) else {
                self.gap_since_ns = None;
                return;
            };
            if first_held == next {
                return;
            }
            let since = *self.gap_since_ns.get_or_insert(self.now_ns);
            // The least position of the live members: below it, nobody can still send.
            let reach = self
                .members
                .iter()
                .map(|m| m.last.unwrap_or(0))
                .min()
                .unwrap_or(u64::MAX);
            let end = if self.now_ns.saturating_sub(since) >= self.config.window_ns {
                first_held
            } else if reach >= next {
                first_held.min(reach.saturating_add(1))
            } else {
                return;
            };
            let count = end - next;
            self.counters.lost += count;
            self.events
                .push_back(ArbiterEvent::Lost { from: next, count });
            self.next = Some(end);
            if end != first_held {
                return;
            }
        }
    }

    fn member_index(&mut self, id: u32) -> Option<usize> {
        if let Some(i) = self.members.iter().position(|m| m.id == id) {
            return Some(i);
        }
        if self.members.len() >= MAX_MEMBERS {
            return None;
        }
        self.members.push(Member {
            id,
            last: None,
            aside: None,
        });
        Some(self.members.len() - 1)
    }

    #[inline]
    fn remember(&mut self, sequence: u64, member: u32, message: &[u8]) {
        if self.history.is_empty() {
            return;
        }
        let mask = self.history.len() - 1;
        self.history[sequence as usize & mask] = Remembered {
            sequence,
            hash: content_hash(message),
            member,
            valid: true,
        };
    }

    /// Checks the arbiter's bookkeeping (tests and the fuzz target): the held bytes add up,
    /// everything held is ahead of `next`, and a gap has a start time exactly when one exists.
    pub fn check_invariants(&self) -> Result<(), String> {
        let bytes: usize = self.held.values().map(|(_, m)| m.len()).sum();
        if bytes != self.held_bytes {
            return Err(format!("held bytes {} != {bytes}", self.held_bytes));
        }
        if let (Some(next), Some(&first)) = (self.next, self.held.keys().next()) {
            if first < next {
                return Err(format!("held {first} is behind next {next}"));
            }
            if first > next && self.gap_since_ns.is_none() {
                return Err(format!("gap [{next}, {first}) without a start time"));
            }
        }
        if self.members.len() > MAX_MEMBERS {
            return Err(format!("{} members", self.members.len()));
        }
        Ok(())
    }
}

/// A 64-bit hash of a message's content for the disagreement check: FxHash's multiply-rotate
/// over 8-byte words (a few instructions per word, not collision resistant against an
/// adversary: it finds members that disagree by accident, such as a feed handler bug).
#[inline]
pub fn content_hash(message: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = (message.len() as u64).wrapping_mul(K);
    let mut words = message.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h.rotate_left(5) ^ v).wrapping_mul(K);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(last)).wrapping_mul(K);
    }
    h
}

#[cfg(test)]
mod tests;
