//! Peregrine transports: thin drivers that move frames.
//!
//! Each transport has a publisher and a subscriber type implementing [`TransportPublisher`] and
//! [`TransportSubscriber`]; the conformance suite (`tests/conformance.rs`) is written once
//! against the traits and run for every transport: [`ipc`] (shared memory), and in [`net`] UDP
//! unicast and multicast ([`net::udp`]) and TCP ([`net::tcp`]). [`AnyPublisher`] and
//! [`AnySubscriber`] open whichever one a URI names.
//!
//! Unsafe code is confined to the `ipc` module (shared memory, futexes) and `net::sys` (the
//! socket calls std and socket2 lack: `recvmmsg`, UDP GSO, `poll`).
#![deny(unsafe_code)]

pub mod any;
pub mod error;
pub mod ipc;
pub mod net;
pub mod resolver;
pub mod stat;
pub mod tls;
pub mod uri;

pub use any::{AnyPublisher, AnySubscriber};
pub use error::{OfferError, OpenError};
pub use peregrine_proto::counters::{PublisherCounters, SubscriberCounters};
pub use uri::{Scheme, Uri, UriError};

pub use peregrine_proto::events::{EventFields, Message, SubscriberEvent};

/// The sending side of a transport session.
pub trait TransportPublisher {
    /// Publishes one message, returning its sequence number. Never blocks.
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError>;
    /// Sends anything batched. (Shared memory has nothing to flush.)
    fn flush(&mut self) -> Result<(), OfferError>;
    /// Largest message accepted.
    fn max_message_len(&self) -> usize;
    /// Subscribers known to be attached.
    fn subscriber_count(&self) -> usize;
    fn session_id(&self) -> u32;
    fn counters(&self) -> PublisherCounters;
    /// The duty cycle of a network publisher: sends a batch whose interval passed, heartbeats
    /// while idle, reads the receivers' STATUS frames. Returns the work done. (Shared memory has
    /// nothing to do.)
    fn do_work(&mut self) -> usize {
        0
    }
}

/// The receiving side of a transport session.
pub trait TransportSubscriber: peregrine_agent::Wake {
    /// Delivers up to `limit` messages in order; returns how many. Never blocks.
    fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize;
    fn next_event(&mut self) -> Option<SubscriberEvent>;
    fn is_connected(&self) -> bool;
    fn counters(&self) -> SubscriberCounters;
}

impl TransportPublisher for ipc::IpcPublisher {
    #[inline]
    fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        ipc::IpcPublisher::offer(self, payload)
    }
    fn flush(&mut self) -> Result<(), OfferError> {
        Ok(())
    }
    fn max_message_len(&self) -> usize {
        ipc::IpcPublisher::max_message_len(self)
    }
    fn subscriber_count(&self) -> usize {
        ipc::IpcPublisher::subscriber_count(self)
    }
    fn session_id(&self) -> u32 {
        ipc::IpcPublisher::session_id(self)
    }
    fn counters(&self) -> PublisherCounters {
        ipc::IpcPublisher::counters(self)
    }
}

impl TransportSubscriber for ipc::IpcSubscriber {
    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        ipc::IpcSubscriber::poll(self, handler, limit)
    }
    fn next_event(&mut self) -> Option<SubscriberEvent> {
        ipc::IpcSubscriber::next_event(self)
    }
    fn is_connected(&self) -> bool {
        ipc::IpcSubscriber::is_connected(self)
    }
    fn counters(&self) -> SubscriberCounters {
        ipc::IpcSubscriber::counters(self)
    }
}

macro_rules! net_transport {
    ($p:ty, $s:ty) => {
        impl TransportPublisher for $p {
            #[inline]
            fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
                <$p>::offer(self, payload)
            }
            fn flush(&mut self) -> Result<(), OfferError> {
                <$p>::flush(self)
            }
            fn max_message_len(&self) -> usize {
                <$p>::max_message_len(self)
            }
            fn subscriber_count(&self) -> usize {
                <$p>::subscriber_count(self)
            }
            fn session_id(&self) -> u32 {
                <$p>::session_id(self)
            }
            fn counters(&self) -> PublisherCounters {
                <$p>::counters(self)
            }
            fn do_work(&mut self) -> usize {
                <$p>::do_work(self)
            }
        }
        impl TransportSubscriber for $s {
            #[inline]
            fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
                <$s>::poll(self, handler, limit)
            }
            fn next_event(&mut self) -> Option<SubscriberEvent> {
                <$s>::next_event(self)
            }
            fn is_connected(&self) -> bool {
                <$s>::is_connected(self)
            }
            fn counters(&self) -> SubscriberCounters {
                <$s>::counters(self)
            }
        }
    };
}
net_transport!(net::udp::UdpPublisher, net::udp::UdpSubscriber);
net_transport!(net::tcp::TcpPublisher, net::tcp::TcpSubscriber);

/// Topic names: 1 to 1024 bytes of UTF-8 without NUL.
pub fn validate_topic(topic: &str) -> Result<(), OpenError> {
    if topic.is_empty() || topic.len() > ipc::layout::MAX_TOPIC_LEN || topic.contains('\0') {
        return Err(OpenError::InvalidTopic(format!(
            "topic '{}' is not accepted: a topic is 1 to 1024 bytes of UTF-8 without NUL characters",
            topic.escape_debug()
        )));
    }
    Ok(())
}

/// A random 32-bit number from the operating system (session ids, temporary names).
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the operating system's random source failed");
    u32::from_le_bytes(b)
}
