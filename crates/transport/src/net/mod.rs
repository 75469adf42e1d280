//! Network transports: `udp://HOST:PORT`, `mcast://GROUP:PORT?iface=ADDR` and
//! `tcp://HOST:PORT`, IPv4.
//!
//! The drivers are thin: the protocol (numbering, fragmentation, batching, ordering,
//! reassembly, loss accounting, STATUS and flow control) is `peregrine_proto`'s
//! [`Sender`](peregrine_proto::sender::Sender), [`Receiver`](peregrine_proto::receiver::Receiver)
//! and [`ReceiverTable`](peregrine_proto::receiver_table::ReceiverTable); a driver owns the sockets,
//! reads the clock and moves bytes between them.
//!
//! **Who binds what.** The publisher owns the address of a `udp://` or `tcp://` URI: it binds
//! (UDP) or listens (TCP) there, and subscribers come to it. A UDP subscriber registers with a
//! STATUS JOIN frame and then keeps itself registered with STATUS frames that also carry its
//! flow-control window; the publisher sends every batch to each registered subscriber. On
//! `mcast://` the publisher sends to the group and subscribers join it; they send STATUS to the
//! publisher's source address so it knows them and their windows.
//!
//! **No background thread.** A publisher's `offer` and `flush` send; its
//! [`do_work`](udp::UdpPublisher::do_work) sends a batch whose `batch_interval_us` passed,
//! heartbeats while idle, and reads STATUS frames (joins, windows). Call it from the idle loop.

pub mod auth;
pub mod config;
pub mod sys;
pub mod tcp;
pub mod udp;
pub mod xdp;

pub use config::{parse_loss, NetConfig, SlowPolicy};

/// Monotonic time in nanoseconds (the drivers' only clock).
#[inline]
pub(crate) fn now_ns() -> u64 {
    peregrine_agent::monotonic_ns()
}
