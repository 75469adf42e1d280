//! Peregrine's market data tier for applications (docs/market-data.md): the roles of RTSDK's
//! APIs, as libraries over `peregrine-md`'s sans-I/O cores and the Peregrine messaging API.
//!
//! - [`backbone`]: the backbone's topics and URIs, and its sealing (authenticated by default);
//! - [`provider`]: publish your own items; the provider keeps their images and answers the
//!   distributors' image requests;
//! - [`consumer`]: request items from a distributor (or the next of a list) and receive them
//!   as typed events; stale then fresh images across a lost connection;
//! - [`distributor`]: the distributor's server (cache, entitlements, fan-out to TCP clients)
//!   around `peregrine_md::distributor`'s core;
//! - [`tls`]: TLS for the distributor's clients (server and consumer sides, mutual TLS).
#![forbid(unsafe_code)]

pub mod backbone;
pub mod consumer;
pub mod distributor;
pub mod provider;
/// TLS (defined with the transport, whose `tcp://` uses it too).
pub use peregrine_transport::tls;

pub use backbone::{Sealing, DEFAULT_BACKBONE, DEFAULT_SERVICE};
pub use consumer::{ConnectOptions, Consumer, ConsumerError, Event, WarmStandby};
pub use distributor::{DistributorError, DistributorServer, DistributorSettings};
/// The context every API here opens its publishers and subscribers in (its configuration
/// applies to the backbone's URIs).
pub use peregrine::Context;
pub use provider::{Provider, ProviderError, ProviderOptions};
