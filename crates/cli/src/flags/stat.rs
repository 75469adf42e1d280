//! `peregrine stat`: the counters of every live Peregrine process of this user.

use super::shared::StopAfter;
use clap::Args;
use std::net::SocketAddr;

#[derive(Args, Debug)]
#[command(mut_arg("seconds", |a| a.requires("serve")
    .help("With --serve: stop after this many seconds (default: until Ctrl-C or SIGTERM)")))]
pub struct StatArgs {
    /// Redraw every --interval-ms (like AeronStat), with each counter's rate since the last
    /// refresh. Stop with Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Print JSON: one document, or with --watch one per refresh, one per line.
    #[arg(long)]
    pub json: bool,
    /// Show only the records whose type, labels (topic, URI, session...), process label or pid
    /// contain this text.
    #[arg(long, value_parser = non_empty)]
    pub filter: Option<String>,
    /// Show every value; by default values at 0 are left out, but for the main ones
    /// (messages, bytes, gaps, lost...).
    #[arg(long)]
    pub all: bool,
    /// Serve the counters in the Prometheus text format over HTTP at ADDR (`/metrics`), e.g.
    /// 127.0.0.1:9464. Runs until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["watch", "json"])]
    pub serve: Option<SocketAddr>,
    /// Milliseconds between refreshes with --watch.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub interval_ms: u64,
    /// With --watch: stop after this many refreshes (default: until Ctrl-C).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), requires = "watch")]
    pub count: Option<u64>,
    /// Remove the counters files of dead processes (a process killed, or one that exited
    /// without closing its context, leaves its file behind). Without it they are only listed.
    #[arg(long)]
    pub clean: bool,
    #[command(flatten)]
    pub stop: StopAfter,
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("--filter '' matches everything: give a text to look for, or leave --filter out".into())
    } else {
        Ok(s.to_string())
    }
}
