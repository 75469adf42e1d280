//! [`Subscriber`]: a topic's or a pattern's receiver over one transport or several sources,
//! with its idle strategy, events, counters and `peregrine stat` record.

use crate::resolve::SourceAdmission;
use crate::{resolve, stat};
use peregrine_agent::{Idle, IdleKind, IdleStrategy};
use peregrine_proto::lossgen::LossCounters;
use peregrine_proto::resolver::ResolverCounters;
use peregrine_transport::stat::Record;
use peregrine_transport::{AnySubscriber, Message, SubscriberCounters, SubscriberEvent};

#[inline(never)]
pub(super) fn cold_poll<F: FnMut(Message<'_>)>(
    inner: &mut SubscriberInner,
    handler: &mut F,
    limit: usize,
) -> usize {
    match inner {
        SubscriberInner::One(s) => s.poll(handler, limit),
        SubscriberInner::Multi(s) => s.poll(&mut |_, m| handler(m), limit),
    }
}

/// Gauges after a subscriber's counters: sources followed now (0 or 1 on one URI).
pub(super) const SUBSCRIBER_SOURCES: &str = "sources";

/// A subscriber on one transport given by URI, or one by topic pattern over several.
// The transport stays inline: boxing it would put a pointer chase in front of every poll.
// Its own tag byte, as `AnySubscriber`'s (see there).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[repr(u8)]
pub(super) enum SubscriberInner {
    One(AnySubscriber),
    Multi(Box<resolve::MultiSubscriber>),
}

/// Receives messages of one topic, in order, through `poll`.
#[derive(Debug)]
pub struct Subscriber {
    pub(super) inner: SubscriberInner,
    pub(super) idle: Idle,
    pub(super) topic: String,
    /// This subscriber's values in the context's counters file (see [`stat`]).
    pub(super) stat: Record,
    /// Messages were delivered since the values were last written.
    pub(super) stat_dirty: bool,
    /// Polls that delivered since the values were last written.
    pub(super) stat_polls: u32,
    /// Polls in a row that found nothing since messages were delivered.
    pub(super) stat_empty: u32,
}

impl Subscriber {
    /// Calls `handler` for up to `limit` messages and returns how many. Never blocks. The
    /// message borrows the transport's buffer (shared memory in place, on `ipc` with
    /// back-pressure; the receive buffer on the network transports) and is valid only during
    /// the call.
    #[inline(always)]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let n = match &mut self.inner {
            SubscriberInner::One(AnySubscriber::Ipc(s)) => s.poll(handler, limit),
            other => cold_poll(other, handler, limit),
        };
        self.count(n);
        n
    }

    /// The counters file's cadence (see [`stat`]): write the values while waiting, or every
    /// [`stat::SUBSCRIBER_EVERY_POLLS`] polls that delivered.
    #[inline(always)]
    fn count(&mut self, delivered: usize) {
        if delivered > 0 {
            self.stat_dirty = true;
            self.stat_empty = 0;
            self.stat_polls += 1;
            if self.stat_polls >= stat::SUBSCRIBER_EVERY_POLLS {
                self.publish_counters();
            }
        } else if self.stat_dirty {
            // Only once it has been waiting a while: a subscriber keeping up with a fast
            // publisher finds nothing every other poll, and writing the values on each of
            // those cost the IPC 32 B throughput about a tenth.
            self.stat_empty += 1;
            if self.stat_empty >= stat::SUBSCRIBER_EVERY_POLLS {
                self.publish_counters();
            }
        }
    }

    /// Writes every value to the counters file.
    #[cold]
    #[inline(never)]
    fn publish_counters(&mut self) {
        self.stat_dirty = false;
        self.stat_polls = 0;
        self.stat_empty = 0;
        let v = self.counters().values();
        self.stat.set_all(v);
        let sources = match &self.inner {
            SubscriberInner::One(s) => s.is_connected() as u64,
            SubscriberInner::Multi(s) => s.source_count() as u64,
        };
        self.stat.set(v.len(), sources);
    }

    /// Applies the idle strategy after a poll that returned `work_count` messages: spin, yield,
    /// back off, or block (a futex on `ipc`, `poll(2)` on the socket otherwise).
    #[inline]
    pub fn idle(&mut self, work_count: usize) {
        // A strategy that may sleep or block writes the values first (it may not poll again
        // for a long time).
        if work_count == 0
            && self.stat_dirty
            && matches!(self.idle.kind(), IdleKind::Backoff | IdleKind::Block)
        {
            self.publish_counters();
        }
        let idle = &mut self.idle;
        match &mut self.inner {
            SubscriberInner::One(s) => s.idle(work_count, idle),
            SubscriberInner::Multi(s) => idle.idle(work_count, &mut **s),
        }
    }

    /// Like [`poll`](Self::poll), with the topic of each message: for subscribers by pattern,
    /// whose messages come from several topics.
    pub fn poll_topic<F: FnMut(&str, Message<'_>)>(
        &mut self,
        handler: &mut F,
        limit: usize,
    ) -> usize {
        let n = match &mut self.inner {
            SubscriberInner::Multi(s) => s.poll(handler, limit),
            other => {
                let topic = &self.topic;
                cold_poll(other, &mut |m| handler(topic, m), limit)
            }
        };
        self.count(n);
        n
    }

    /// The next connection, loss or resolution event, if any.
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        let e = match &mut self.inner {
            SubscriberInner::One(s) => s.next_event(),
            SubscriberInner::Multi(s) => s.next_event(),
        };
        if e.is_some() {
            self.publish_counters();
        }
        e
    }

    /// The socket a subscriber on a `udp://` or `mcast://` URI receives on, for a driver
    /// that waits on many sources in its own `epoll` instead of [`idle`](Self::idle): it
    /// turns readable when datagrams arrive. Keep calling [`poll`](Self::poll) every few
    /// milliseconds while a session is live (loss repair and keep-alives run in it), and
    /// after a wake-up until it returns less than its limit. `None` for shared memory, TCP
    /// and subscribers by pattern: poll those on a timer.
    pub fn readable_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.inner {
            SubscriberInner::One(s) => s.readable_fd(),
            SubscriberInner::Multi(_) => None,
        }
    }

    pub fn is_connected(&self) -> bool {
        match &self.inner {
            SubscriberInner::One(s) => s.is_connected(),
            SubscriberInner::Multi(s) => s.is_connected(),
        }
    }
    pub fn counters(&self) -> SubscriberCounters {
        match &self.inner {
            SubscriberInner::One(s) => s.counters(),
            SubscriberInner::Multi(s) => s.counters(),
        }
    }
    /// The sources a subscriber by pattern follows now: (session id, topic, URI).
    pub fn sources(&self) -> Vec<(u32, String, String)> {
        match &self.inner {
            SubscriberInner::One(_) => Vec::new(),
            SubscriberInner::Multi(s) => s.sources(),
        }
    }
    /// How a subscriber by pattern admitted the sources topic resolution found: transports
    /// open, those still waiting for a first frame, sources waiting for one of those, and what
    /// was refused (sources of a pinned topic advertised elsewhere, transports that stayed
    /// silent, sources dropped from the wait).
    pub fn source_admission(&self) -> Option<SourceAdmission> {
        match &self.inner {
            SubscriberInner::One(_) => None,
            SubscriberInner::Multi(s) => Some(s.source_admission()),
        }
    }
    /// What the context's resolver counted, for a subscriber by pattern.
    pub fn resolver_counters(&self) -> Option<ResolverCounters> {
        match &self.inner {
            SubscriberInner::One(_) => None,
            SubscriberInner::Multi(s) => Some(s.resolver_counters()),
        }
    }
    /// The counters of each publisher session followed now, by session id (on shared memory,
    /// the one session).
    pub fn session_counters(&self) -> Vec<(u32, SubscriberCounters)> {
        match &self.inner {
            SubscriberInner::One(s) => s.session_counters(),
            SubscriberInner::Multi(s) => s.session_counters(),
        }
    }
    /// What the test loss generator (`loss=`, `PEREGRINE_LOSS`) saw and dropped, if one runs.
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match &self.inner {
            SubscriberInner::One(s) => s.loss_counters(),
            SubscriberInner::Multi(_) => None,
        }
    }
    /// Starts recording, on UDP and multicast, how long each repaired frame was missing (from
    /// the gap's detection to the frame's arrival); see
    /// [`take_recovery_ns`](Self::take_recovery_ns).
    pub fn record_recovery(&mut self) {
        if let SubscriberInner::One(s) = &mut self.inner {
            s.record_recovery();
        }
    }
    /// The recovery times recorded since the last call, in nanoseconds.
    pub fn take_recovery_ns(&mut self) -> Vec<u64> {
        match &mut self.inner {
            SubscriberInner::One(s) => s.take_recovery_ns(),
            SubscriberInner::Multi(_) => Vec::new(),
        }
    }
    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn idle_kind(&self) -> IdleKind {
        self.idle.kind()
    }
}
