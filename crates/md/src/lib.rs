//! Peregrine market data: the model, the wire codec, the field dictionary, and the sans-I/O
//! core of the distributor (docs/market-data.md).
//!
//! - [`model`]: services, items, fields and typed values, item states, name rules.
//! - [`codec`]: one module per message type (checked views, parse/emit), [`codec::Message`]
//!   for any message, [`codec::Messages`] to split a TCP stream. Never panics, never allocates
//!   on parse.
//! - [`dictionary`]: field names and types from a TOML file; prints field lists.
//!
//! The feed, distributor and client socket loops are thin drivers over this crate in the CLI.
#![forbid(unsafe_code)]

pub mod codec;
pub mod dictionary;
mod load;
pub mod model;

pub use load::LoadError;
