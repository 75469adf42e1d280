//! Peregrine protocol logic, sans I/O: state machines take bytes and `now_ns` and return frames,
//! deadlines and events. Nothing here reads a clock or touches a socket.
//!
//! - [`sender`]: numbering, fragmentation, datagram/stream batching, heartbeat schedule and the
//!   flow-control limit of one network session;
//! - [`receiver`]: per-session ordering, reassembly, loss repair (NAK scheduling, held frames,
//!   give-up), loss accounting and STATUS scheduling of one subscribed stream;
//! - [`held`]: the receiver's reorder buffer of frames held behind gaps;
//! - [`retention`]: the sender's buffer of sent frames for retransmission;
//! - [`receiver_table`]: the publisher's table of its receivers (joins, keep-alives, windows,
//!   the bound on what one receiver can hold back);
//! - [`join`]: the backoff of a subscriber's JOINs (and TCP connects) to a publisher that has
//!   not answered;
//! - [`events`] and [`counters`]: what every transport reports;
//! - [`rate`]: the publisher's rate limit, a token bucket in bytes per second;
//! - [`failover`]: the arbitration of a failover group (several publishers of one
//!   application-sequenced stream: each sequence delivered once, from the first copy);
//! - [`lossgen`]: a seeded loss generator that drops chosen frames, for tests and benchmarks.
//!
//! - [`resolver`]: topic resolution (advertisements, queries, wildcard subscriptions, expiry);
//! - [`resolverd`]: the relay of `peregrine resolverd`, for networks without multicast;
//! - [`scheme`]: the transports a URI can name (`ipc`, `udp`, `mcast`, `tcp`).
#![forbid(unsafe_code)]

pub mod auth;
pub mod counters;
pub mod events;
pub mod failover;
pub mod held;
pub mod join;
pub mod lossgen;
pub mod rate;
pub mod receiver;
pub mod receiver_table;
pub mod resolver;
pub mod resolverd;
pub mod retention;
pub mod scheme;
pub mod sender;
