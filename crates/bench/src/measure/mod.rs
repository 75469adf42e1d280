//! The two-process measurements: each runs this process on one CPU and a helper process
//! (started through [`crate::helper::protocol`]) on another, and returns what it measured;
//! [`crate::scenario`] composes them into the suite's cells.
//!
//! - [`floor`]: the machine's own floor, a cache-line ping-pong between two processes.
//! - [`pingpong`]: half round trip over a transport, with its ratio to the floor.
//! - [`raw`]: the same ping-pong over bare udp, mcast and tcp sockets, Peregrine's own baseline.
//! - [`throughput`]: one publisher, N subscriber processes, every sequence number checked.
//! - [`load`]: a paced stream with pings, the floor under the same load, and one-way latency
//!   from embedded timestamps.

pub mod floor;
pub mod load;
pub mod pingpong;
pub mod raw;
pub mod throughput;
