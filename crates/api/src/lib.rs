//! Peregrine: broker-less publish/subscribe for trading and market data.
//!
//! A [`Context`] is one process's handle. It makes [`Publisher`]s and [`Subscriber`]s on
//! *topics*; for now the transport of a topic is given by a URI (`ipc://NAME` for shared memory
//! on one host). Topic resolution by name alone comes later and slots in behind the same calls.
//!
//! No thread is started for you: your own `offer` and `poll` calls move the data, and an
//! [`IdleKind`] decides what [`Subscriber::idle`] does when a poll found nothing.
//!
//! ```
//! use peregrine::{Context, IdleKind};
//!
//! # let name = format!("doc-{}", std::process::id());
//! let ctx = Context::new();
//! let uri = format!("ipc://{name}");
//! let mut publisher = ctx.publisher("md.eq.AAPL", &uri)?;
//! let mut subscriber = ctx.subscriber("md.eq.AAPL", &uri, IdleKind::Backoff)?;
//!
//! publisher.offer(b"bid 189.20 ask 189.21")?;
//!
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     let n = subscriber.poll(&mut |msg| got.push(msg.payload.to_vec()), 16);
//!     subscriber.idle(n);
//! }
//! assert_eq!(got[0], b"bid 189.20 ask 189.21");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]

use peregrine_agent::{Idle, IdleStrategy};
use peregrine_transport::ipc::{IpcConfig, IpcPublisher, IpcSubscriber};
use peregrine_transport::{Scheme, TransportPublisher, TransportSubscriber, Uri};

pub use peregrine_agent::IdleKind;
pub use peregrine_transport::ipc::segment::shm_dir;
pub use peregrine_transport::ipc::SlowSubscriberPolicy;
pub use peregrine_transport::uri::parse_bytes;

/// Largest message an `ipc://` log of `capacity` bytes accepts.
pub fn ipc_max_message_len(capacity: u64) -> usize {
    peregrine_transport::ipc::layout::max_message_for(capacity) as usize
}

/// The default `ipc://` log capacity in bytes.
pub const IPC_DEFAULT_CAPACITY: u64 = IpcConfig::DEFAULT_CAPACITY;
pub use peregrine_transport::{
    Message, OfferError, OpenError, PublisherCounters, SubscriberCounters, SubscriberEvent,
    UriError,
};

/// One process's handle: configuration and the factory of publishers and subscribers.
#[derive(Debug, Clone, Default)]
pub struct Context {
    _private: (),
}

impl Context {
    /// A context with the defaults (single host, no configuration file).
    pub fn new() -> Self {
        Context::default()
    }

    /// A publisher of `topic` on the transport `uri`.
    pub fn publisher(&self, topic: &str, uri: &str) -> Result<Publisher, OpenError> {
        let uri = Uri::parse(uri)?;
        let inner = match uri.scheme {
            Scheme::Ipc => PublisherInner::Ipc(IpcPublisher::create(
                &IpcConfig::from_uri(&uri)?,
                topic,
                stream_id(topic),
            )?),
        };
        Ok(Publisher {
            inner,
            topic: topic.to_string(),
        })
    }

    /// A subscriber of `topic` on the transport `uri`, idling with `idle` in [`Subscriber::idle`].
    /// It may be created before its publisher exists: it attaches when the publisher appears.
    pub fn subscriber(
        &self,
        topic: &str,
        uri: &str,
        idle: IdleKind,
    ) -> Result<Subscriber, OpenError> {
        let uri = Uri::parse(uri)?;
        let inner = match uri.scheme {
            Scheme::Ipc => SubscriberInner::Ipc(IpcSubscriber::new(
                &IpcConfig::from_uri(&uri)?,
                topic,
                idle == IdleKind::Block,
            )?),
        };
        Ok(Subscriber {
            inner,
            idle: Idle::new(idle),
            topic: topic.to_string(),
        })
    }
}

/// The stream id a topic name maps to inside a session (FNV-1a of the name).
pub fn stream_id(topic: &str) -> u32 {
    topic.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[derive(Debug)]
enum PublisherInner {
    Ipc(IpcPublisher),
}

/// Publishes messages on one topic. `offer` never blocks.
#[derive(Debug)]
pub struct Publisher {
    inner: PublisherInner,
    topic: String,
}

impl Publisher {
    /// Publishes `payload`; returns its sequence number, or why nothing was sent
    /// ([`OfferError::BackPressured`]: try again after the subscribers make room).
    #[inline]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        match &mut self.inner {
            PublisherInner::Ipc(p) => p.offer(payload),
        }
    }

    /// Publishes a message of `len` bytes written in place by `fill` (zero copy).
    #[inline]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        match &mut self.inner {
            PublisherInner::Ipc(p) => p.offer_with(len, fill),
        }
    }

    /// Sends whatever is batched.
    pub fn flush(&mut self) -> Result<(), OfferError> {
        match &mut self.inner {
            PublisherInner::Ipc(p) => TransportPublisher::flush(p),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn max_message_len(&self) -> usize {
        match &self.inner {
            PublisherInner::Ipc(p) => p.max_message_len(),
        }
    }
    pub fn subscriber_count(&self) -> usize {
        match &self.inner {
            PublisherInner::Ipc(p) => p.subscriber_count(),
        }
    }
    pub fn session_id(&self) -> u32 {
        match &self.inner {
            PublisherInner::Ipc(p) => p.session_id(),
        }
    }
    pub fn counters(&self) -> PublisherCounters {
        match &self.inner {
            PublisherInner::Ipc(p) => TransportPublisher::counters(p),
        }
    }
}

#[derive(Debug)]
enum SubscriberInner {
    Ipc(IpcSubscriber),
}

/// Receives messages of one topic, in order, through `poll`.
#[derive(Debug)]
pub struct Subscriber {
    inner: SubscriberInner,
    idle: Idle,
    topic: String,
}

impl Subscriber {
    /// Calls `handler` for up to `limit` messages and returns how many. Never blocks. The
    /// message borrows the transport's buffer (shared memory in place, on `ipc` with
    /// back-pressure) and is valid only during the call.
    #[inline]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        match &mut self.inner {
            SubscriberInner::Ipc(s) => s.poll(handler, limit),
        }
    }

    /// Applies the idle strategy after a poll that returned `work_count` messages.
    #[inline]
    pub fn idle(&mut self, work_count: usize) {
        match &mut self.inner {
            SubscriberInner::Ipc(s) => self.idle.idle(work_count, s),
        }
    }

    /// The next connection or loss event, if any.
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        match &mut self.inner {
            SubscriberInner::Ipc(s) => s.next_event(),
        }
    }

    pub fn is_connected(&self) -> bool {
        match &self.inner {
            SubscriberInner::Ipc(s) => s.is_connected(),
        }
    }
    pub fn counters(&self) -> SubscriberCounters {
        match &self.inner {
            SubscriberInner::Ipc(s) => TransportSubscriber::counters(s),
        }
    }
    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn idle_kind(&self) -> IdleKind {
        self.idle.kind()
    }
}
