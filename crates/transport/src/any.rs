//! One publisher type and one subscriber type over every transport, for code that learns the
//! transport at run time (a URI from a user or from topic resolution): [`AnyPublisher`] and
//! [`AnySubscriber`] open the transport a [`Uri`] names and dispatch with a `match` (static
//! dispatch, no virtual call per message).
//!
//! Both are deliberately not `#[non_exhaustive]`: the `peregrine` crate matches them
//! exhaustively (it takes the shared-memory arm inline), so a new transport does not compile
//! until every dispatch handles it, where a wildcard arm would route it silently. Adding a
//! transport is therefore a breaking change of this crate.
//!
//! The hot calls (`offer`, `offer_with`, `poll`) keep the shared-memory arm inline and call the
//! network arms out of line: with every arm inlined, the function grew past what the compiler
//! inlines into a caller's loop, and ipc throughput fell by a fifth. (A network send is a system
//! call; one more call is noise.)

use crate::ipc::{IpcConfig, IpcPublisher, IpcSubscriber};
use crate::net::tcp::{TcpPublisher, TcpSubscriber};
use crate::net::udp::{UdpPublisher, UdpSubscriber};
use crate::net::NetConfig;
use crate::uri::{Scheme, Uri};
use crate::{
    Message, OfferError, OpenError, PublisherCounters, SubscriberCounters, SubscriberEvent,
    TransportPublisher, TransportSubscriber,
};
use peregrine_agent::{IdleStrategy, Wake};
use peregrine_proto::lossgen::LossCounters;
use std::net::SocketAddrV4;

/// `Scheme` is `#[non_exhaustive]` (it lives in `peregrine-proto`): a scheme added there before
/// its transport is added here is refused, not routed to another transport.
fn no_transport(uri: &Uri, scheme: Scheme) -> OpenError {
    uri.error(format!("no transport of this build opens {scheme}://"))
        .into()
}

/// A publisher on the transport its URI names.
// Every variant stays inline: boxing the network ones would save memory only in the
// shared-memory case, and boxing the shared-memory one would put a pointer chase in front of
// every offer.
// A tag byte of its own (`repr(u8)`), not a niche in a field of one of the variants: the
// offer loop tests it with one compare (two for the API's enum around it), where decoding the
// niche took about ten instructions more an offer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[repr(u8)]
pub enum AnyPublisher {
    /// `ipc://`
    Ipc(IpcPublisher),
    /// `udp://` and `mcast://`
    Udp(UdpPublisher),
    /// `tcp://`
    Tcp(TcpPublisher),
}

impl AnyPublisher {
    /// Creates the publisher `uri` names, publishing `topic` as stream `stream_id` of session
    /// `session_id`.
    pub fn open(
        uri: &Uri,
        topic: &str,
        stream_id: u32,
        session_id: u32,
    ) -> Result<AnyPublisher, OpenError> {
        Ok(match uri.scheme {
            Scheme::Ipc => AnyPublisher::Ipc(IpcPublisher::create_with_session(
                &IpcConfig::from_uri(uri)?,
                topic,
                stream_id,
                session_id,
            )?),
            Scheme::Udp | Scheme::Mcast => AnyPublisher::Udp(UdpPublisher::create(
                &NetConfig::from_uri(uri)?,
                uri.as_str(),
                session_id,
                stream_id,
            )?),
            Scheme::Tcp => AnyPublisher::Tcp(TcpPublisher::create(
                &NetConfig::from_uri(uri)?,
                uri.as_str(),
                session_id,
                stream_id,
            )?),
            other => return Err(no_transport(uri, other)),
        })
    }

    /// Publishes `payload`; returns its sequence number. Never blocks.
    #[inline]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        match self {
            AnyPublisher::Ipc(p) => p.offer(payload),
            // Its common case inline, the rest out of line (`TcpPublisher::offer`).
            AnyPublisher::Tcp(p) => p.offer(payload),
            other => other.cold_offer(payload),
        }
    }

    /// Publishes a message of `len` bytes written in place by `fill`.
    #[inline]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        match self {
            AnyPublisher::Ipc(p) => p.offer_with(len, fill),
            AnyPublisher::Tcp(p) => p.offer_with(len, fill),
            other => other.cold_offer_with(len, fill),
        }
    }

    #[inline(never)]
    fn cold_offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        match self {
            AnyPublisher::Ipc(p) => p.offer(payload),
            AnyPublisher::Udp(p) => p.offer(payload),
            AnyPublisher::Tcp(p) => p.offer(payload),
        }
    }

    #[inline(never)]
    fn cold_offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        self.offer_with_inlined(len, fill)
    }

    /// [`offer_with`](Self::offer_with) with every transport's path inlined into the caller,
    /// for a caller that is itself out of line (the API's path for the network transports):
    /// one call instead of two on every offer.
    #[inline(always)]
    pub fn offer_with_inlined<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        match self {
            AnyPublisher::Ipc(p) => p.offer_with(len, fill),
            AnyPublisher::Udp(p) => p.offer_with(len, fill),
            AnyPublisher::Tcp(p) => p.offer_with(len, fill),
        }
    }

    /// Sends whatever is batched (shared memory has nothing to flush).
    pub fn flush(&mut self) -> Result<(), OfferError> {
        match self {
            AnyPublisher::Ipc(_) => Ok(()),
            AnyPublisher::Udp(p) => p.flush(),
            AnyPublisher::Tcp(p) => p.flush(),
        }
    }

    /// The duty cycle of a network publisher (see [`TransportPublisher::do_work`]).
    pub fn do_work(&mut self) -> usize {
        match self {
            AnyPublisher::Ipc(_) => 0,
            AnyPublisher::Udp(p) => p.do_work(),
            AnyPublisher::Tcp(p) => p.do_work(),
        }
    }

    /// Ends the session: a network one sends what is batched, lingers and says goodbye; a
    /// shared-memory log is marked closed (its file goes when the publisher is dropped).
    pub fn close(&mut self) {
        match self {
            AnyPublisher::Ipc(p) => p.close(),
            AnyPublisher::Udp(p) => p.close(),
            AnyPublisher::Tcp(p) => p.close(),
        }
    }

    pub fn max_message_len(&self) -> usize {
        match self {
            AnyPublisher::Ipc(p) => p.max_message_len(),
            AnyPublisher::Udp(p) => p.max_message_len(),
            AnyPublisher::Tcp(p) => p.max_message_len(),
        }
    }

    pub fn subscriber_count(&self) -> usize {
        match self {
            AnyPublisher::Ipc(p) => p.subscriber_count(),
            AnyPublisher::Udp(p) => p.subscriber_count(),
            AnyPublisher::Tcp(p) => p.subscriber_count(),
        }
    }

    pub fn session_id(&self) -> u32 {
        match self {
            AnyPublisher::Ipc(p) => p.session_id(),
            AnyPublisher::Udp(p) => p.session_id(),
            AnyPublisher::Tcp(p) => p.session_id(),
        }
    }

    pub fn counters(&self) -> PublisherCounters {
        match self {
            AnyPublisher::Ipc(p) => p.counters(),
            AnyPublisher::Udp(p) => p.counters(),
            AnyPublisher::Tcp(p) => p.counters(),
        }
    }

    /// What the test loss generator saw and dropped (UDP and multicast only; `None`: none runs).
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match self {
            AnyPublisher::Udp(p) => p.loss_counters(),
            AnyPublisher::Ipc(_) | AnyPublisher::Tcp(_) => None,
        }
    }

    /// The address a network publisher bound (`None` on shared memory).
    pub fn local_addr(&self) -> Option<SocketAddrV4> {
        match self {
            AnyPublisher::Ipc(_) => None,
            AnyPublisher::Udp(p) => Some(p.local_addr()),
            AnyPublisher::Tcp(p) => Some(p.local_addr()),
        }
    }
}

impl TransportPublisher for AnyPublisher {
    #[inline]
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        AnyPublisher::offer(self, payload)
    }
    fn flush(&mut self) -> Result<(), OfferError> {
        AnyPublisher::flush(self)
    }
    fn max_message_len(&self) -> usize {
        AnyPublisher::max_message_len(self)
    }
    fn subscriber_count(&self) -> usize {
        AnyPublisher::subscriber_count(self)
    }
    fn session_id(&self) -> u32 {
        AnyPublisher::session_id(self)
    }
    fn counters(&self) -> PublisherCounters {
        AnyPublisher::counters(self)
    }
    fn do_work(&mut self) -> usize {
        AnyPublisher::do_work(self)
    }
}

/// A subscriber on the transport its URI names.
// A tag byte of its own (`repr(u8)`), as `AnyPublisher`'s: the poll loop tests it with one
// compare.
#[derive(Debug)]
#[repr(u8)]
pub enum AnySubscriber {
    /// `ipc://`
    Ipc(IpcSubscriber),
    /// `udp://` and `mcast://`
    Udp(UdpSubscriber),
    /// `tcp://`
    Tcp(TcpSubscriber),
}

impl AnySubscriber {
    /// Creates the subscriber `uri` names, of `topic` (shared memory checks the segment's topic)
    /// as stream `stream_id` (the network transports filter on it). `blocking`: shared memory
    /// arms its futex for [`Wake`].
    pub fn open(
        uri: &Uri,
        topic: &str,
        stream_id: u32,
        blocking: bool,
    ) -> Result<AnySubscriber, OpenError> {
        Ok(match uri.scheme {
            Scheme::Ipc => AnySubscriber::Ipc(IpcSubscriber::new(
                &IpcConfig::from_uri(uri)?,
                topic,
                blocking,
            )?),
            Scheme::Udp | Scheme::Mcast => AnySubscriber::Udp(UdpSubscriber::new(
                &NetConfig::from_uri(uri)?,
                uri.as_str(),
                stream_id,
            )?),
            Scheme::Tcp => AnySubscriber::Tcp(TcpSubscriber::new(
                &NetConfig::from_uri(uri)?,
                uri.as_str(),
                stream_id,
            )?),
            other => return Err(no_transport(uri, other)),
        })
    }

    /// Delivers up to `limit` messages in order; returns how many. Never blocks.
    #[inline]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        match self {
            AnySubscriber::Ipc(s) => s.poll(handler, limit),
            other => other.cold_poll(handler, limit),
        }
    }

    #[inline(never)]
    fn cold_poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        match self {
            AnySubscriber::Ipc(s) => s.poll(handler, limit),
            AnySubscriber::Udp(s) => s.poll(handler, limit),
            AnySubscriber::Tcp(s) => s.poll(handler, limit),
        }
    }

    /// Applies `idle` after a poll that returned `work_count` messages. One arm per transport,
    /// so the strategy runs against the transport's own [`Wake`] rather than this enum's.
    #[inline]
    pub fn idle<I: IdleStrategy>(&mut self, work_count: usize, idle: &mut I) {
        match self {
            AnySubscriber::Ipc(s) => idle.idle(work_count, s),
            AnySubscriber::Udp(s) => idle.idle(work_count, s),
            AnySubscriber::Tcp(s) => idle.idle(work_count, s),
        }
    }

    /// The socket a `udp://` or `mcast://` subscriber receives on, for a driver's own
    /// `epoll` ([`UdpSubscriber::readable_fd`]); `None` on shared memory and TCP, which
    /// must be polled on a timer.
    pub fn readable_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            AnySubscriber::Udp(s) => Some(s.readable_fd()),
            AnySubscriber::Ipc(_) | AnySubscriber::Tcp(_) => None,
        }
    }

    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        match self {
            AnySubscriber::Ipc(s) => s.next_event(),
            AnySubscriber::Udp(s) => s.next_event(),
            AnySubscriber::Tcp(s) => s.next_event(),
        }
    }

    pub fn is_connected(&self) -> bool {
        match self {
            AnySubscriber::Ipc(s) => s.is_connected(),
            AnySubscriber::Udp(s) => s.is_connected(),
            AnySubscriber::Tcp(s) => s.is_connected(),
        }
    }

    pub fn counters(&self) -> SubscriberCounters {
        match self {
            AnySubscriber::Ipc(s) => s.counters(),
            AnySubscriber::Udp(s) => s.counters(),
            AnySubscriber::Tcp(s) => s.counters(),
        }
    }

    /// The counters of each publisher session followed now, by session id (on shared memory,
    /// the one session, once attached).
    pub fn session_counters(&self) -> Vec<(u32, SubscriberCounters)> {
        match self {
            AnySubscriber::Ipc(s) => s
                .session_id()
                .map(|id| vec![(id, s.counters())])
                .unwrap_or_default(),
            AnySubscriber::Udp(s) => s.session_counters(),
            AnySubscriber::Tcp(s) => s.session_counters(),
        }
    }

    /// What the test loss generator saw and dropped (UDP and multicast only; `None`: none runs).
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match self {
            AnySubscriber::Udp(s) => s.loss_counters(),
            AnySubscriber::Ipc(_) | AnySubscriber::Tcp(_) => None,
        }
    }

    /// Starts recording how long each repaired frame was missing (UDP and multicast only: the
    /// others repair nothing); see [`take_recovery_ns`](Self::take_recovery_ns).
    pub fn record_recovery(&mut self) {
        match self {
            AnySubscriber::Udp(s) => s.record_recovery(),
            AnySubscriber::Ipc(_) | AnySubscriber::Tcp(_) => {}
        }
    }

    /// The recovery times recorded since the last call, in nanoseconds.
    pub fn take_recovery_ns(&mut self) -> Vec<u64> {
        match self {
            AnySubscriber::Udp(s) => s.take_recovery_ns(),
            AnySubscriber::Ipc(_) | AnySubscriber::Tcp(_) => Vec::new(),
        }
    }
}

impl Wake for AnySubscriber {
    fn prepare_wait(&mut self) {
        match self {
            AnySubscriber::Ipc(s) => s.prepare_wait(),
            AnySubscriber::Udp(s) => s.prepare_wait(),
            AnySubscriber::Tcp(s) => s.prepare_wait(),
        }
    }
    fn wait(&mut self, timeout_ns: u64) {
        match self {
            AnySubscriber::Ipc(s) => s.wait(timeout_ns),
            AnySubscriber::Udp(s) => s.wait(timeout_ns),
            AnySubscriber::Tcp(s) => s.wait(timeout_ns),
        }
    }
    fn cancel_wait(&mut self) {
        match self {
            AnySubscriber::Ipc(s) => s.cancel_wait(),
            AnySubscriber::Udp(s) => s.cancel_wait(),
            AnySubscriber::Tcp(s) => s.cancel_wait(),
        }
    }
}

impl TransportSubscriber for AnySubscriber {
    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        AnySubscriber::poll(self, handler, limit)
    }
    fn next_event(&mut self) -> Option<SubscriberEvent> {
        AnySubscriber::next_event(self)
    }
    fn is_connected(&self) -> bool {
        AnySubscriber::is_connected(self)
    }
    fn counters(&self) -> SubscriberCounters {
        AnySubscriber::counters(self)
    }
}
