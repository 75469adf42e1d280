//! Failover groups: two or more publishers of one topic send the same application-sequenced
//! stream, and a subscriber of the group delivers each sequence once, in order, from
//! whichever member's copy comes first. A member that dies costs nothing while another lives.
//!
//! - [`FailoverPublisher`] wraps any [`Publisher`]: [`offer`](FailoverPublisher::offer) takes
//!   the application's own sequence number with each message and puts the failover header
//!   (`peregrine_wire::failover`, 16 bytes) in front of it.
//! - [`FailoverSubscriber`] reads one or more [`Subscriber`]s: one by topic name through
//!   topic resolution (it finds every member, whatever its transport), or one per member's
//!   URI (a `udp://` subscriber follows the one publisher it names; members on one `mcast://`
//!   group share one subscriber). Each member is one publisher session, and the [`Arbiter`] decides what to
//!   deliver (its rules: `peregrine_proto::failover`). A session that is not a member of the
//!   group (a plain publisher of the topic, or one of another group) is refused with
//!   [`FailoverEvent::Refused`], naming the topic and both settings.
//!
//! ```
//! use peregrine::failover::{FailoverPublisher, FailoverSubscriber};
//! use peregrine::{Context, IdleKind};
//! use peregrine::failover::ArbiterConfig;
//!
//! # let name = format!("doc-failover-{}", std::process::id());
//! let ctx = Context::new();
//! let uri = format!("ipc://{name}");
//! let sub = ctx.subscriber("orders", &uri, IdleKind::Backoff)?;
//! let mut sub = FailoverSubscriber::new(vec![sub], "engine", ArbiterConfig::default())?;
//! let mut a = FailoverPublisher::new(ctx.publisher("orders", &uri)?, "engine")?;
//!
//! a.offer(7, b"fill 100 @ 189.20")?;
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     let n = sub.poll(&mut |m| got.push((m.sequence, m.payload.to_vec())), 16);
//!     sub.idle(n);
//! }
//! assert_eq!(got[0], (7, b"fill 100 @ 189.20".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{IdleKind, OfferError, Publisher, Subscriber, SubscriberEvent};
use peregrine_agent::{Idle, IdleStrategy, NoWake};
use peregrine_proto::failover::{Arbiter, ArbiterEvent, Verdict};
pub use peregrine_proto::failover::{
    ArbiterConfig, ArbiterConfigError, ArbiterCounters, MAX_MEMBERS,
};
pub use peregrine_wire::failover::group_id;
use peregrine_wire::failover::{FailoverRepr, FAILOVER_HEADER_LEN};
use std::collections::{HashSet, VecDeque};
use std::fmt;

/// The longest failover group name, in bytes.
pub const MAX_GROUP_NAME: usize = 64;

/// Events a failover subscriber keeps for [`FailoverSubscriber::next_event`] at most (an
/// application that never reads them, or members that disagree on every message, cannot grow
/// it without bound).
pub const MAX_QUEUED_EVENTS: usize = 4096;

/// Why a failover publisher or subscriber could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailoverError {
    /// The group name is empty, too long or holds control characters.
    BadGroupName(String),
    /// The arbiter's settings were refused.
    Config(ArbiterConfigError),
    /// A failover subscriber was given no subscriber to read.
    NoSource,
}

impl fmt::Display for FailoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailoverError::BadGroupName(name) => write!(
                f,
                "failover group '{}' is not accepted: a group name is 1 to {MAX_GROUP_NAME} bytes \
                 of UTF-8 without control characters",
                name.escape_debug()
            ),
            FailoverError::Config(e) => e.fmt(f),
            FailoverError::NoSource => f.write_str(
                "a failover subscriber needs at least one subscriber: one by topic name, or one per member's URI",
            ),
        }
    }
}

impl std::error::Error for FailoverError {}

impl From<ArbiterConfigError> for FailoverError {
    fn from(e: ArbiterConfigError) -> Self {
        FailoverError::Config(e)
    }
}

/// Checks a failover group's name: 1 to [`MAX_GROUP_NAME`] bytes, no control characters.
pub fn validate_group(name: &str) -> Result<(), FailoverError> {
    if name.is_empty() || name.len() > MAX_GROUP_NAME || name.chars().any(char::is_control) {
        return Err(FailoverError::BadGroupName(name.to_string()));
    }
    Ok(())
}

/// A member of a failover group: a publisher whose messages carry the application's sequence.
#[derive(Debug)]
pub struct FailoverPublisher {
    inner: Publisher,
    group: String,
    group_id: u32,
}

impl FailoverPublisher {
    /// Makes `publisher` a member of the failover group `group`. Every member of a group must
    /// publish the same messages with the same sequence numbers.
    pub fn new(publisher: Publisher, group: &str) -> Result<FailoverPublisher, FailoverError> {
        validate_group(group)?;
        Ok(FailoverPublisher {
            inner: publisher,
            group: group.to_string(),
            group_id: group_id(group),
        })
    }

    /// Publishes `message` as the group's `sequence` (written in place behind the 16-byte
    /// header: one copy, as [`Publisher::offer`]). Returns the session's own sequence.
    #[inline]
    pub fn offer(&mut self, sequence: u64, message: &[u8]) -> Result<u64, OfferError> {
        offer_as_member(&mut self.inner, self.group_id, sequence, message)
    }

    /// The largest message [`offer`](Self::offer) takes (the transport's less the header).
    pub fn max_message_len(&self) -> usize {
        self.inner
            .max_message_len()
            .saturating_sub(FAILOVER_HEADER_LEN)
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// The publisher underneath: `do_work`, `flush`, counters, `close`.
    pub fn publisher(&mut self) -> &mut Publisher {
        &mut self.inner
    }
}

/// Publishes `message` as `sequence` of the failover group whose id is `group_id`
/// ([`group_id`] of its name) on a publisher the caller keeps: what
/// [`FailoverPublisher::offer`] does, for bindings that hold the publisher themselves.
#[inline]
pub fn offer_as_member(
    publisher: &mut Publisher,
    group_id: u32,
    sequence: u64,
    message: &[u8],
) -> Result<u64, OfferError> {
    let header = FailoverRepr { group_id, sequence };
    publisher.offer_with(FAILOVER_HEADER_LEN + message.len(), |buf| {
        header.emit(buf);
        buf[FAILOVER_HEADER_LEN..].copy_from_slice(message);
    })
}

/// One message of the group's stream, delivered once.
#[derive(Debug, Clone, Copy)]
pub struct FailoverMessage<'a> {
    /// The application's sequence number.
    pub sequence: u64,
    /// The member (publisher session) whose copy was delivered.
    pub session_id: u32,
    pub payload: &'a [u8],
}

/// What happens to a failover subscriber besides messages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailoverEvent {
    /// Sequences `from_sequence .. from_sequence + count` came from no member (see
    /// `peregrine_proto::failover` for when that is declared). Delivery carries on after them.
    Lost { from_sequence: u64, count: u64 },
    /// Two members sent different contents for `sequence`: `delivered_from`'s copy was
    /// delivered, `other`'s dropped.
    Disagreement {
        sequence: u64,
        delivered_from: u32,
        other: u32,
    },
    /// A session of the topic is not a member of this group: its messages are ignored.
    /// `reason` names the topic and both settings.
    Refused { session_id: u32, reason: String },
    /// An event of the subscriber underneath (members found, lost, closed, died, a member's
    /// own session loss, which another member's copies cover).
    Source(SubscriberEvent),
}

/// The text of a [`FailoverEvent::Disagreement`], as the bindings and commands give it.
pub fn disagreement(sequence: u64, delivered_from: u32, other: u32) -> String {
    format!(
        "session {delivered_from:08x}'s copy of sequence {sequence} was delivered; session \
         {other:08x} sent other content"
    )
}

/// A subscriber of a failover group (see the module's documentation).
#[derive(Debug)]
pub struct FailoverSubscriber {
    inner: Vec<Subscriber>,
    /// The idle strategy over several subscribers (a blocking one backs off instead: it
    /// cannot wait on all of them); `None` with one, whose own strategy applies.
    idle: Option<Idle>,
    group: String,
    group_id: u32,
    arbiter: Arbiter,
    refused: HashSet<u32>,
    events: VecDeque<FailoverEvent>,
    refused_messages: u64,
    events_dropped: u64,
}

/// Queues `e` unless [`MAX_QUEUED_EVENTS`] are waiting (then counts it dropped).
fn queue(events: &mut VecDeque<FailoverEvent>, dropped: &mut u64, e: FailoverEvent) {
    if events.len() < MAX_QUEUED_EVENTS {
        events.push_back(e);
    } else {
        *dropped += 1;
    }
}

impl FailoverSubscriber {
    /// Arbitrates the failover group `group` over what `subscribers` receive.
    pub fn new(
        subscribers: Vec<Subscriber>,
        group: &str,
        config: ArbiterConfig,
    ) -> Result<FailoverSubscriber, FailoverError> {
        validate_group(group)?;
        let idle = match subscribers.as_slice() {
            [] => return Err(FailoverError::NoSource),
            [_] => None,
            [first, ..] => Some(Idle::new(match first.idle_kind() {
                IdleKind::Block => IdleKind::Backoff,
                k => k,
            })),
        };
        Ok(FailoverSubscriber {
            inner: subscribers,
            idle,
            group: group.to_string(),
            group_id: group_id(group),
            arbiter: Arbiter::new(config)?,
            refused: HashSet::new(),
            events: VecDeque::new(),
            refused_messages: 0,
            events_dropped: 0,
        })
    }

    /// Receives up to `limit` messages from the members (from each subscriber in turn) and
    /// calls `handler` for each one the arbiter delivers (a copy that completes a gap may
    /// release held messages: they are delivered in the same call, in order). Returns how many
    /// messages were received, delivered or not, for [`idle`](Self::idle). Never blocks.
    ///
    /// Events wait for [`next_event`](Self::next_event), at most [`MAX_QUEUED_EVENTS`] of
    /// them: past that, new ones are dropped and counted
    /// ([`events_dropped`](Self::events_dropped)); what they reported stays in the counters.
    pub fn poll<F: FnMut(FailoverMessage<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let now = peregrine_agent::monotonic_ns();
        let FailoverSubscriber {
            inner,
            idle: _,
            group,
            group_id,
            arbiter,
            refused,
            events,
            refused_messages,
            events_dropped,
        } = self;
        let mut n = 0;
        for sub in inner.iter_mut() {
            if n >= limit {
                break;
            }
            n += sub.poll_topic(
                &mut |topic, m| {
                    if !refused.is_empty() && refused.contains(&m.session_id) {
                        *refused_messages += 1;
                        return;
                    }
                    let (repr, payload) = match FailoverRepr::parse(m.payload) {
                        Ok((r, p)) if r.group_id == *group_id => (r, p),
                        other => {
                            let theirs = match other {
                                Ok((r, _)) => format!(
                                    "a member of another failover group (id {:08x})",
                                    r.group_id
                                ),
                                Err(_) => "a plain publisher (no failover header)".to_string(),
                            };
                            refused.insert(m.session_id);
                            *refused_messages += 1;
                            let e = FailoverEvent::Refused {
                                session_id: m.session_id,
                                reason: format!(
                                    "topic '{}': session {:08x} is {theirs}, but this subscriber \
                                 takes failover group '{group}' (id {group_id:08x}); publish \
                                 it with the same group or subscribe to it without one",
                                    topic.escape_debug(),
                                    m.session_id,
                                ),
                            };
                            queue(events, events_dropped, e);
                            return;
                        }
                    };
                    if arbiter.on_message(m.session_id, repr.sequence, payload, now)
                        == Verdict::Deliver
                    {
                        handler(FailoverMessage {
                            sequence: repr.sequence,
                            session_id: m.session_id,
                            payload,
                        });
                        deliver_ready(arbiter, handler);
                    }
                },
                limit - n,
            );
        }
        self.after_poll(now, handler);
        n
    }

    /// Members that left, windows that passed, and the events of both.
    fn after_poll<F: FnMut(FailoverMessage<'_>)>(&mut self, now: u64, handler: &mut F) {
        let Self {
            inner,
            arbiter,
            refused,
            events,
            events_dropped,
            ..
        } = self;
        for ev in inner
            .iter_mut()
            .flat_map(|s| std::iter::from_fn(|| s.next_event()))
        {
            match &ev {
                SubscriberEvent::PublisherClosed { session_id }
                | SubscriberEvent::PublisherDied { session_id }
                | SubscriberEvent::SourceLost { session_id, .. } => {
                    arbiter.member_gone(*session_id, now);
                    refused.remove(session_id);
                }
                _ => {}
            }
            queue(events, events_dropped, FailoverEvent::Source(ev));
        }
        if self.arbiter.next_deadline().is_some_and(|d| now >= d) {
            self.arbiter.poll(now);
        }
        deliver_ready(&mut self.arbiter, handler);
        while let Some(e) = self.arbiter.next_event() {
            let e = match e {
                ArbiterEvent::Lost { from, count } => FailoverEvent::Lost {
                    from_sequence: from,
                    count,
                },
                ArbiterEvent::Disagreement {
                    sequence,
                    delivered_from,
                    other,
                } => FailoverEvent::Disagreement {
                    sequence,
                    delivered_from,
                    other,
                },
            };
            queue(&mut self.events, &mut self.events_dropped, e);
        }
    }

    /// The next event, if any.
    pub fn next_event(&mut self) -> Option<FailoverEvent> {
        self.events.pop_front()
    }

    /// The subscriber's idle strategy after a poll that received `work_count` messages.
    pub fn idle(&mut self, work_count: usize) {
        match &mut self.idle {
            None => self.inner[0].idle(work_count),
            Some(idle) => idle.idle(work_count, &mut NoWake),
        }
    }

    /// What the arbiter counted: delivered, duplicates, lost, disagreements, held, jumps.
    pub fn counters(&self) -> ArbiterCounters {
        self.arbiter.counters()
    }

    /// Events dropped because [`MAX_QUEUED_EVENTS`] were waiting.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }

    /// Messages ignored because their session is not a member of the group.
    pub fn refused_messages(&self) -> u64 {
        self.refused_messages
    }

    /// The members followed now (publisher sessions), in the order they were first heard.
    pub fn members(&self) -> Vec<u32> {
        self.arbiter.members().collect()
    }

    /// Each member followed now and the highest sequence heard from it (`None` before its
    /// first): how far behind the stream each member runs.
    pub fn member_positions(&self) -> Vec<(u32, Option<u64>)> {
        self.arbiter.member_positions().collect()
    }

    /// The next sequence the group's stream delivers (`None` before the first message).
    pub fn next_sequence(&self) -> Option<u64> {
        self.arbiter.next_sequence()
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// The subscribers underneath (their counters, sources, topics).
    pub fn subscribers(&self) -> &[Subscriber] {
        &self.inner
    }
}

#[inline]
fn deliver_ready<F: FnMut(FailoverMessage<'_>)>(arbiter: &mut Arbiter, handler: &mut F) {
    while let Some(r) = arbiter.pop_ready() {
        handler(FailoverMessage {
            sequence: r.sequence,
            session_id: r.member,
            payload: &r.message,
        });
    }
}
