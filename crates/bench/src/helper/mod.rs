//! The helper processes of a benchmark: this same binary started again as
//! `peregrine helper SPEC` to play one side of a measurement.
//!
//! - [`protocol`]: starting a helper and hearing from it (the parent's [`protocol::Helper`],
//!   the child's `ready` and result lines), and the [`protocol::Role`] each side implements.
//! - [`registry`]: which roles exist and what plays each ([`registry::HelperSpec`]).

pub mod protocol;
pub mod registry;
