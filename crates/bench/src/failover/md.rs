//! What the market data cases of `bench failover` share: their settings, a work folder with
//! the items and users files and a backbone of the run's own, a distributor process, and
//! polling a consumer until it saw something.

use crate::fanout::peregrine::Workdir;
use crate::fanout::process::Proc;
use crate::BenchError;
use peregrine_market_data::consumer::{Consumer, ConsumerError, Event, WarmStandby};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub(super) const USER: &str = "bench";
pub(super) const TOKEN: &str = "bench-failover";

/// Settings of the market data cases (the distributor pair, the A/B feed pair).
#[derive(Debug, Clone)]
pub struct MdFailoverConfig {
    /// Updates per second a feed publishes, spread over `items`.
    pub rate: f64,
    pub items: usize,
    pub kills: u32,
}

/// A case's work folder: `items.txt` (the items `FO0000.X`...), `users.toml` (the user
/// `bench`, every item), and the backbone URI.
pub(super) struct Setup {
    pub dir: Workdir,
    pub path: PathBuf,
    pub backbone: String,
}

impl Setup {
    pub fn new(cfg: &MdFailoverConfig) -> Result<Setup, BenchError> {
        let dir = Workdir::new("failover")?;
        let path = dir.path.clone();
        let items: Vec<String> = (0..cfg.items).map(|i| format!("FO{i:04}.X")).collect();
        std::fs::write(path.join("items.txt"), items.join("\n") + "\n")?;
        let token_hash = {
            use sha2::{Digest, Sha256};
            hex::encode(Sha256::digest(TOKEN.as_bytes()))
        };
        std::fs::write(
            path.join("users.toml"),
            format!("[users.{USER}]\ntoken_sha256 = \"{token_hash}\"\nitems = [\"*\"]\n"),
        )?;
        let pid = std::process::id();
        let backbone = format!(
            "mcast://239.255.98.{}:{}?auth=none",
            1 + pid % 250,
            45_000 + pid % 5000
        );
        Ok(Setup {
            dir,
            path,
            backbone,
        })
    }
}

pub(super) fn free_port() -> Result<u16, BenchError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A `peregrine distributor` on `port` in write `mode` (`latency`, `throughput`), once it
/// listens.
pub(super) fn distributor(
    exe: &Path,
    dir: &Path,
    port: u16,
    backbone: &str,
    mode: &str,
) -> Result<Proc, BenchError> {
    let mut c = Command::new(exe);
    c.arg("distributor")
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--backbone",
            backbone,
            "--mode",
            mode,
        ])
        .arg("--users")
        .arg(dir.join("users.toml"))
        .arg("--json");
    let mut p = Proc::spawn(c, format!("peregrine distributor on port {port}"))?;
    p.wait_line(
        |l| l.contains("\"listening\""),
        Duration::from_secs(20),
        "'listening' line",
    )?;
    Ok(p)
}

/// A consumer the cases poll: one login, or a warm standby pair.
pub(super) trait Polls {
    fn poll_events(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError>;
}

impl Polls for Consumer {
    fn poll_events(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        self.poll(timeout, handler)
    }
}

impl Polls for WarmStandby {
    fn poll_events(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        self.poll(timeout, handler)
    }
}

/// Polls `consumer` until `on` says done (or 30 s: an error naming `what`), handing it every
/// event (those of the poll that made it done too: none is dropped).
pub(super) fn poll_until(
    consumer: &mut dyn Polls,
    what: &str,
    on: &mut dyn FnMut(&Event<'_>) -> bool,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = false;
    while !done {
        if Instant::now() > deadline {
            return Err(BenchError::Child(format!(
                "the consumer did not see {what} within 30 s"
            )));
        }
        consumer
            .poll_events(Duration::from_millis(1), &mut |e| done |= on(&e))
            .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    }
    Ok(())
}
