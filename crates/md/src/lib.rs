//! Peregrine market data: the model, the wire codec, the field dictionary, and the sans-I/O
//! core of the distributor (docs/market-data.md).
//!
//! - [`model`]: services, items, fields and typed values, item states, name rules.
//! - [`codec`]: one module per message type (checked views, parse/emit), [`codec::Message`]
//!   for any message, [`codec::Messages`] to split a TCP stream. Never panics, never allocates
//!   on parse.
//! - [`dictionary`]: field names and types from a TOML file; prints field lists.
//! - [`dist`]: the distributor's core: cache, users and entitlements, per-client queues and
//!   the fan-out state machine. No sockets, no clock: time is an argument.
//! - [`quotes`]: the items a test feed publishes, their REFRESHes and UPDATEs (any size from
//!   60 bytes), the seeded generators that draw them, the sample item names.
//!
//! The feed, distributor and client socket loops are thin drivers over this crate in the CLI.
#![forbid(unsafe_code)]

pub mod codec;
pub mod consumer;
pub mod dictionary;
pub mod dist;
mod load;
pub mod model;
pub mod provider;
pub mod quotes;

pub use load::LoadError;
