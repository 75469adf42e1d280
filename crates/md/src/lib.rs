//! Peregrine market data: the model, the wire codec, the field dictionary, and the sans-I/O
//! cores of the distributor, the provider and the consumer (docs/market-data.md).
//!
//! - [`model`]: services, items, fields and typed values, item states, name rules.
//! - [`codec`]: one module per message type (checked views, parse/emit), [`codec::Message`]
//!   for any message, [`codec::Messages`] to split a TCP stream. Never panics, never allocates
//!   on parse.
//! - [`dictionary`]: field names and types from a TOML file; prints field lists.
//! - [`distributor`]: the distributor's core: cache, users and entitlements, per-client queues and
//!   the fan-out state machine. No sockets, no clock: time is an argument.
//! - [`provider`]: the provider's core: its items' last images and `item_seq`, answers to
//!   image requests, coalesced and bounded.
//! - [`consumer`]: the consumer's session core: login, requests, `item_seq` gaps, the
//!   reconnection schedule.
//! - [`ticks`]: recorded ticks as text (a CSV of time, service, item, FIELD=value), what a
//!   feed replays.
//! - [`quotes`]: the items a test feed publishes, their REFRESHes and UPDATEs (any size from
//!   60 bytes), the seeded generators that draw them, the sample item names.
//!
//! The socket drivers over these cores are `peregrine-market-data`'s (the provider, the
//! consumer, the distributor); the `peregrine` commands are thin drivers over that.
#![forbid(unsafe_code)]

pub mod codec;
pub mod consumer;
pub mod dictionary;
pub mod distributor;
pub mod json;
mod load;
pub mod model;
pub mod provider;
pub mod quotes;
pub mod ticks;

pub use load::LoadError;
