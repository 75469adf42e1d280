//! Peregrine: broker-less publish/subscribe for trading and market data.
//!
//! A [`Context`] is one process's handle. It makes [`Publisher`]s and [`Subscriber`]s on
//! *topics*: by name alone through topic resolution ([`Context::publish`],
//! [`Context::subscribe`] with a name or glob, [`Context::subscribe_pattern`] with a regular
//! expression), or on a transport given by URI ([`Context::publisher`],
//! [`Context::subscriber`]; `ipc://NAME` for shared memory on one host).
//!
//! No thread is in the data path: your own `offer` and `poll` calls move the data, and an
//! [`IdleKind`] decides what [`Subscriber::idle`] does when a poll found nothing. (Publishing or
//! subscribing by topic name starts one resolver thread per context, which never touches data.)
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

pub mod config;
mod context;
pub mod failover;
mod publisher;
mod resolve;
pub mod stat;
mod subscriber;

pub use config::{Config, ConfigError, Remote, ResolverSettings};
pub use context::{stream_id, Context};
pub use peregrine_proto::resolver::{
    LostReason, Pattern, PatternError, ResolverCounters, Schedule,
};
pub use peregrine_wire::query::PatternKind;
pub use publisher::{ClaimToken, Publisher};
pub use resolve::{SourceAdmission, MAX_UNPROVEN_LEGS, MAX_WAITING_SOURCES, PROOF_TIMEOUT_NS};
pub use subscriber::Subscriber;

use peregrine_transport::ipc::IpcConfig;

pub use peregrine_agent::IdleKind;
pub use peregrine_proto::lossgen::LossCounters;
pub use peregrine_transport::ipc::segment::shm_dir;
pub use peregrine_transport::ipc::SlowSubscriberPolicy;
pub use peregrine_transport::net::parse_loss;
pub use peregrine_transport::uri::parse_bytes;

/// Largest message an `ipc://` log of `capacity` bytes accepts.
pub fn ipc_max_message_len(capacity: u64) -> usize {
    peregrine_transport::ipc::layout::max_message_for(capacity) as usize
}

/// The default `ipc://` log capacity in bytes.
pub const IPC_DEFAULT_CAPACITY: u64 = IpcConfig::DEFAULT_CAPACITY;
pub use peregrine_transport::uri::UnknownScheme;
pub use peregrine_transport::{
    EventFields, Message, OfferError, OpenError, PublisherCounters, Scheme, SubscriberCounters,
    SubscriberEvent, UriError,
};
