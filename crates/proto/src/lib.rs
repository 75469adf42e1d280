//! Peregrine protocol logic, sans I/O: state machines take bytes and `now_ns` and return frames,
//! deadlines and events. Nothing here reads a clock or touches a socket.
//!
//! - [`sender`]: numbering, fragmentation, datagram/stream batching, heartbeat schedule and the
//!   flow-control limit of one network session;
//! - [`receiver`]: per-session ordering, reassembly, loss accounting and STATUS scheduling of
//!   one subscribed stream;
//! - [`receivers`]: the publisher's table of its receivers (joins, keep-alives, windows);
//! - [`events`] and [`counters`]: what every transport reports.
//!
//! The reliability units (NAK scheduler, retransmit buffer, rate limiter) and the resolver land
//! here next.
#![forbid(unsafe_code)]

pub mod counters;
pub mod events;
pub mod receiver;
pub mod receivers;
pub mod retention;
pub mod sender;
