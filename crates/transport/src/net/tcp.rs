//! TCP driver (`tcp://HOST:PORT`): the publisher listens, subscribers connect.
//!
//! The stream carries the same frames as a datagram, back to back at 8-byte aligned offsets
//! (docs/protocol.md §1); messages longer than `frame` are fragmented. A new connection first
//! gets a HEARTBEAT (session and position), then every batch from the next one on.
//!
//! **Slow subscribers.** Each connection has a user-space queue for what the socket did not
//! take. When a queue passes `max_pending` bytes, `slow=backpressure` makes `offer` refuse
//! (nothing is dropped; the other subscribers wait too) and `slow=disconnect` drops that
//! connection (its subscriber reconnects and is told exactly what it lost). Back-pressure has a
//! bound: a connection that made offers wait and whose socket took nothing for
//! `flow_timeout_ms` (a subscriber that stopped: SIGSTOP, a hung host, one that connects and
//! never reads) is dropped as `slow=disconnect` would (counted in `flow_dropped`). A subscriber
//! that reads, however much slower than the publisher, is making progress: it is
//! back-pressured, never dropped, and loses nothing.
//!
//! **TLS** (`tls_cert`, `tls_key`, `tls_ca`, `tls_server_name`; [`crate::tls`]): the same
//! stream inside a TLS session. The publisher's queue holds plaintext; rustls takes at most
//! [`crate::tls::TLS_BUFFER_LIMIT`] of it ahead of the socket, so the slow-subscriber bounds
//! count what they did. A handshake that fails (another CA, a name, an expired certificate,
//! no client certificate where one is required) drops the connection and is counted
//! (`tls_refused` on either side); the subscriber retries with back-off, keeps the reason
//! (`TcpSubscriber::last_tls_error`) and tells it as a `SubscriberEvent::AttachFailed` (once
//! per reason), which reaches applications through the API, C and Python like any event.

mod conn;
mod publisher;
mod subscriber;

pub use publisher::TcpPublisher;
pub use subscriber::TcpSubscriber;

use crate::error::OpenError;
use std::io;

const CONTROL_INTERVAL_NS: u64 = 1_000_000;

fn sock_err(uri: &str, what: impl Into<String>, source: io::Error) -> OpenError {
    OpenError::Socket {
        uri: uri.to_string(),
        what: what.into(),
        source,
    }
}
