//! One module per command: each turns its validated flags into the library's calls.
//!
//! - [`bench`]: `peregrine bench` (the measuring itself is `peregrine-bench`'s);
//! - [`report`]: `peregrine report DIR`;
//! - [`publish`], [`subscribe`], [`resolverd`]: publishing and subscribing by topic name from
//!   the shell (the roles of Ultra Messaging's lbmsrc/lbmrcv and `nats pub`/`nats sub`), and
//!   the resolver daemon for networks without multicast (lbmrd);
//! - [`feed`], [`distributor`], [`client`], [`post`]: the market data tier's commands (the
//!   roles of RMDS's publisher, P2PS, rmdstestclient and a contribution tool), thin drivers
//!   over `peregrine-market-data`'s provider, distributor and consumer; `md` holds what they
//!   share (list files, the open files limit, the clients' connection set-up).

pub mod bench;
pub mod client;
pub mod distributor;
pub mod feed;
mod md;
pub mod post;
pub mod publish;
pub mod record;
pub mod replay;
pub mod report;
pub mod resolverd;
pub mod stat;
pub mod subscribe;

use anyhow::{Context as _, Result};
use peregrine::Context;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Tells the commands that run until interrupted (`pub`, `sub`, `resolverd`) that SIGINT,
/// SIGTERM or SIGHUP arrived, so they stop and close cleanly (a publisher's shared-memory
/// segment is removed). The handlers, from `signal-hook`, only store to an atomic; a second
/// SIGINT or SIGTERM while closing ends the process at once.
#[derive(Debug, Clone)]
pub(crate) struct Stop {
    signal: Arc<AtomicUsize>,
}

impl Stop {
    pub fn install() -> Result<Stop> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        Stop::install_for(&[SIGINT, SIGTERM, SIGHUP])
    }

    /// Stops on these signals only (a daemon that gives SIGHUP another meaning).
    pub fn install_for(signals: &[i32]) -> Result<Stop> {
        let signal = Arc::new(AtomicUsize::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        for &sig in signals {
            // Order matters: the second signal's check runs before the flag is set again.
            signal_hook::flag::register_conditional_shutdown(sig, 1, stopping.clone())
                .context("installing a signal handler")?;
            signal_hook::flag::register(sig, stopping.clone())
                .context("installing a signal handler")?;
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
                .context("installing a signal handler")?;
        }
        Ok(Stop { signal })
    }

    /// The signal that asked to stop, if one did.
    pub fn requested(&self) -> Option<&'static str> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        match self.signal.load(Ordering::Relaxed) as i32 {
            0 => None,
            SIGINT => Some("SIGINT"),
            SIGTERM => Some("SIGTERM"),
            SIGHUP => Some("SIGHUP"),
            _ => Some("a signal"),
        }
    }
}

/// The context of a topic command, from the environment (`PEREGRINE_CONFIG`, `PEREGRINE_*`).
pub(crate) fn context() -> Result<Context> {
    Context::from_env().context("invalid configuration (PEREGRINE_CONFIG, PEREGRINE_* variables)")
}

/// Text another process chose (a topic name, a URI, a reason built from them) as it may be
/// printed on a terminal: control characters (escape sequences among them) are escaped as
/// `\u{1b}`, everything else is kept.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A message as `sub --print` (and `replay --print`) prints it:
/// `TOPIC session=S seq=N len=L: TEXT`.
pub(crate) fn message_line(topic: &str, session_id: u32, sequence: u64, payload: &[u8]) -> String {
    format!(
        "{} session={session_id:08x} seq={sequence} len={}: {}",
        printable(topic),
        payload.len(),
        shown(payload)
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escape_sequences_in_names_and_payloads_are_printed_escaped() {
        let hostile = "md.\x1b[2J\x1b]0;owned\x07AAPL\r\n";
        let p = printable(hostile);
        assert!(!p.chars().any(char::is_control), "{p:?}");
        assert_eq!(p, "md.\\u{1b}[2J\\u{1b}]0;owned\\u{7}AAPL\\r\\n");
        assert_eq!(printable("md.eq.Zürich"), "md.eq.Zürich");
        let s = shown(b"bid\x1b[31m 1\n");
        assert!(!s.chars().any(char::is_control), "{s:?}");
    }
}
