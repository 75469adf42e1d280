//! UDP unicast (`udp://HOST:PORT`) and multicast (`mcast://GROUP:PORT`) drivers.
//!
//! See the [parent module](super) for who binds what. The publisher's socket sends batches
//! (one UDP GSO send per batch and destination when the kernel supports it, else one send per
//! datagram) and receives STATUS frames; the subscriber's socket receives with `recvfrom` or
//! `recvmmsg` (32 datagrams per call, non-blocking), with UDP_GRO when the kernel has it (a GSO
//! batch then arrives in one buffer on loopback), and sends STATUS frames back.

mod publisher;
mod send;
mod socket;
mod subscriber;

pub use publisher::UdpPublisher;
pub use send::gso_batch_datagrams;
pub use socket::set_buffer;
pub use subscriber::UdpSubscriber;

/// Largest message on the network transports (the receivers' reassembly limit).
pub const NET_MAX_MESSAGE_LEN: usize = 64 << 20;

/// How often a publisher reads STATUS and NAK frames while it only offers (a non-blocking
/// receive call each time: about 1% of a busy publisher's time).
const CONTROL_INTERVAL_NS: u64 = 100_000;
/// Receivers silent for this long are dropped by a publisher.
const RECEIVER_TIMEOUT_NS: u64 = 2_000_000_000;
