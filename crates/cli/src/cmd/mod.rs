//! One module per command: each turns its validated flags into the library's calls.
//!
//! - [`bench`]: `peregrine bench` (the measuring itself is `peregrine-bench`'s);
//! - [`report`]: `peregrine report DIR`;
//! - [`publish`], [`subscribe`], [`resolverd`]: publishing and subscribing by topic name from
//!   the shell (the roles of Ultra Messaging's lbmsrc/lbmrcv and `nats pub`/`nats sub`), and
//!   the resolver daemon for networks without multicast (lbmrd).

pub mod bench;
pub mod publish;
pub mod report;
pub mod resolverd;
pub mod subscribe;

use anyhow::{Context as _, Result};
use peregrine::Context;

/// The context of a topic command, from the environment (`PEREGRINE_CONFIG`, `PEREGRINE_*`).
pub(crate) fn context() -> Result<Context> {
    Context::from_env().context("invalid configuration (PEREGRINE_CONFIG, PEREGRINE_* variables)")
}

/// A payload as printable text: ASCII as is, anything else escaped, cut at 80 characters.
pub(crate) fn shown(payload: &[u8]) -> String {
    let text: String = payload
        .iter()
        .take(80)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if payload.len() > 80 {
        format!("{text}...")
    } else {
        text
    }
}
