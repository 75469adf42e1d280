//! Peregrine protocol logic, sans I/O: state machines take bytes and `now_ns` and return frames,
//! deadlines and events. Nothing here reads a clock or touches a socket.
//!
//! Today: the per-session counters every transport reports. The reliability units (loss
//! detector, NAK scheduler, retransmit buffer, rate limiter) and the resolver land here next.
#![forbid(unsafe_code)]

pub mod counters;
