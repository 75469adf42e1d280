//! The distributor pair case of `bench failover` (cold failover): a feed on a backbone of the
//! run's own, two `peregrine distributor` processes on it, and a consumer in this process
//! given both addresses (`peregrine_market_data::consumer::Consumer`). The distributor the
//! consumer is logged in to is killed with SIGKILL, again and again (restarted on its own
//! port each time, so the list stays valid). Per kill: the time from the kill to the first
//! update after the consumer logged in to the other one, whether every item was reported
//! stale in between, and whether every item was re-imaged (a fresh REFRESH) after.

use super::md::{distributor, free_port, poll_until, MdFailoverConfig, Setup, TOKEN, USER};
use crate::fanout::process::Proc;
use crate::BenchError;
use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_md::model::ItemState;
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one kill cost the consumer.
#[derive(Debug, Clone, Serialize)]
pub struct DistributorKill {
    /// From the kill to the first UPDATE after the consumer logged in again.
    pub first_update_ns: u64,
    /// From the kill to every item re-imaged (a REFRESH after the new login).
    pub all_reimaged_ns: u64,
    /// Items reported stale between the kill and the new login.
    pub stale: usize,
    pub reimaged: usize,
}

/// What the case measured.
#[derive(Debug, Clone, Serialize)]
pub struct DistributorPairResult {
    pub items: usize,
    pub rate: f64,
    pub kills: Vec<DistributorKill>,
    pub seconds: f64,
}

impl DistributorPairResult {
    fn sorted(&self, f: fn(&DistributorKill) -> u64) -> Vec<u64> {
        let mut v: Vec<u64> = self.kills.iter().map(f).collect();
        v.sort_unstable();
        v
    }
    pub fn first_update_median_ns(&self) -> u64 {
        let v = self.sorted(|k| k.first_update_ns);
        v.get(v.len() / 2).copied().unwrap_or(0)
    }
    pub fn first_update_max_ns(&self) -> u64 {
        self.sorted(|k| k.first_update_ns)
            .last()
            .copied()
            .unwrap_or(0)
    }
    /// Kills after which some item was not reported stale, or not re-imaged.
    pub fn incomplete(&self) -> usize {
        self.kills
            .iter()
            .filter(|k| k.stale < self.items || k.reimaged < self.items)
            .count()
    }
}

/// Runs the case.
pub fn measure(cfg: &MdFailoverConfig, exe: &Path) -> Result<DistributorPairResult, BenchError> {
    let Setup {
        dir: _dir,
        path: d,
        backbone,
    } = Setup::new(cfg)?;
    let ports = [free_port()?, free_port()?];
    let mut dists = [
        Some(distributor(exe, &d, ports[0], &backbone, "throughput")?),
        Some(distributor(exe, &d, ports[1], &backbone, "throughput")?),
    ];
    let mut feed = {
        let mut c = Command::new(exe);
        c.arg("feed")
            .arg("--items")
            .arg(d.join("items.txt"))
            .args(["--rate", &format!("{}", cfg.rate), "--zipf", "0"])
            .args(["--backbone", &backbone, "--json", "--duration", "3600"]);
        Proc::spawn(c, "peregrine feed")?
    };
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut consumer = Consumer::connect(&addrs, USER, TOKEN.as_bytes())
        .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    consumer
        .open(peregrine_market_data::backbone::DEFAULT_SERVICE, &["*"])
        .map_err(|e| BenchError::Child(format!("consumer open: {e}")))?;
    let started = Instant::now();
    // Warm up: every item imaged, and updates flowing.
    let mut imaged = HashSet::new();
    poll_until(&mut consumer, "every item's image", &mut |e| {
        if let Event::Refresh { item, .. } = e {
            imaged.insert(item.to_string());
        }
        imaged.len() == cfg.items
    })?;
    let mut kills = Vec::new();
    // The killed processes, reaped at the end: waiting for one's exit would stop the consumer.
    let mut killed = Vec::new();
    for _ in 0..cfg.kills {
        let current = consumer
            .distributor()
            .ok_or_else(|| BenchError::Child("the consumer is not connected".into()))?;
        let i = ports
            .iter()
            .position(|&p| p == current.port())
            .ok_or_else(|| BenchError::Child(format!("connected to {current}, not one of ours")))?;
        let t0 = Instant::now();
        if let Some(mut p) = dists[i].take() {
            p.kill();
            killed.push(p);
        }
        let (mut stale, mut reimaged) = (HashSet::new(), HashSet::new());
        let (mut logged_in, mut first_update, mut all) = (false, None, None);
        poll_until(
            &mut consumer,
            "every item re-imaged after the kill",
            &mut |e| {
                match e {
                    Event::Status { item, state, .. }
                        if *state == ItemState::Stale && !logged_in =>
                    {
                        stale.insert(item.to_string());
                    }
                    Event::LoggedIn { .. } => logged_in = true,
                    Event::Refresh { item, .. } if logged_in => {
                        reimaged.insert(item.to_string());
                        if reimaged.len() == cfg.items && all.is_none() {
                            all = Some(t0.elapsed());
                        }
                    }
                    Event::Update { .. } if logged_in && first_update.is_none() => {
                        first_update = Some(t0.elapsed());
                    }
                    _ => {}
                }
                all.is_some() && first_update.is_some()
            },
        )?;
        kills.push(DistributorKill {
            first_update_ns: first_update.map_or(0, |d| d.as_nanos() as u64),
            all_reimaged_ns: all.map_or(0, |d| d.as_nanos() as u64),
            stale: stale.len(),
            reimaged: reimaged.len(),
        });
        // The killed one comes back on its port: the next kill fails over to it.
        dists[i] = Some(distributor(exe, &d, ports[i], &backbone, "throughput")?);
        let settle = Instant::now() + Duration::from_millis(300);
        while Instant::now() < settle {
            consumer
                .poll(Duration::from_millis(1), &mut |_| {})
                .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    feed.kill();
    for p in dists.iter_mut().flatten() {
        p.kill();
    }
    Ok(DistributorPairResult {
        items: cfg.items,
        rate: cfg.rate,
        kills,
        seconds,
    })
}
