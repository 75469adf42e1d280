//! The distributor pair case of `bench failover` (cold failover): a feed on a backbone of the
//! run's own, two `peregrine distributor` processes on it, and a consumer in this process
//! given both addresses (`peregrine_market_data::consumer::Consumer`). The distributor the
//! consumer is logged in to is killed with SIGKILL, again and again (restarted on its own
//! port each time, so the list stays valid). Per kill: the time from the kill to the first
//! update after the consumer logged in to the other one, whether every item was reported
//! stale in between, and whether every item was re-imaged (a fresh REFRESH) after.

use super::md::{distributor, free_port, poll_until, MdFailoverConfig, Polls, Setup, TOKEN, USER};
use crate::fanout::process::Proc;
use crate::BenchError;
use peregrine_market_data::consumer::{
    ConnectOptions, Consumer, ConsumerError, Event, WarmStandby,
};
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
    /// `cold` (a consumer of both: reconnects) or `warm` (a warm standby pair: resumes).
    pub mode: &'static str,
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
    /// Kills that did not go as the mode promises: cold, some item not reported stale or
    /// not re-imaged; warm, some item reported stale.
    pub fn incomplete(&self) -> usize {
        self.kills
            .iter()
            .filter(|k| match self.mode {
                "warm" => k.stale > 0,
                _ => k.stale < self.items || k.reimaged < self.items,
            })
            .count()
    }
}

/// The consumer of the case: a consumer given both addresses (cold), or a warm standby pair.
enum Pair {
    Cold(Box<Consumer>),
    Warm(Box<WarmStandby>),
}

impl Pair {
    fn polls(&mut self) -> &mut dyn Polls {
        match self {
            Pair::Cold(c) => c.as_mut(),
            Pair::Warm(w) => w.as_mut(),
        }
    }

    /// The distributor delivering now.
    fn current(&self) -> Option<std::net::SocketAddr> {
        match self {
            Pair::Cold(c) => c.distributor(),
            Pair::Warm(w) => w.active_distributor(),
        }
    }

    /// What the consumer is waiting for, for an error.
    fn state(&self, items: usize) -> String {
        match self {
            Pair::Cold(c) => format!("logged in: {}", c.is_logged_in()),
            Pair::Warm(w) => format!(
                "active {:?}, standby {:?}, standing by {}, standby images {} of {items}",
                w.active_distributor(),
                w.standby_distributor(),
                w.standing_by(),
                w.standby_items()
            ),
        }
    }

    /// Ready for the next kill: every item imaged (cold), and the standby logged in with
    /// every item (warm).
    fn ready(&self, items: usize) -> bool {
        match self {
            Pair::Cold(c) => c.is_logged_in(),
            Pair::Warm(w) => w.standing_by() && w.standby_items() == items,
        }
    }
}

/// Runs the case: `warm` for a warm standby pair, else a cold consumer of both.
pub fn measure(
    cfg: &MdFailoverConfig,
    exe: &Path,
    warm: bool,
) -> Result<DistributorPairResult, BenchError> {
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
            .args(["--backbone", &backbone, "--json", "--seconds", "3600"]);
        Proc::spawn(c, "peregrine feed")?
    };
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let consumer_error = |e: ConsumerError| BenchError::Child(format!("consumer: {e}"));
    let service = peregrine_market_data::backbone::DEFAULT_SERVICE;
    let mut pair = if warm {
        let mut w = WarmStandby::connect(
            &addrs[0],
            &addrs[1],
            USER,
            TOKEN.as_bytes(),
            ConnectOptions::default(),
        )
        .map_err(consumer_error)?;
        w.open(service, &["*"]).map_err(consumer_error)?;
        Pair::Warm(Box::new(w))
    } else {
        let mut c = Consumer::connect(&addrs, USER, TOKEN.as_bytes()).map_err(consumer_error)?;
        c.open(service, &["*"]).map_err(consumer_error)?;
        Pair::Cold(Box::new(c))
    };
    let started = Instant::now();
    // Warm up: every item imaged, and updates flowing.
    let mut imaged = HashSet::new();
    poll_until(pair.polls(), "every item's image", &mut |e| {
        if let Event::Refresh { item, .. } = e {
            imaged.insert(item.to_string());
        }
        imaged.len() == cfg.items
    })?;
    settle(&mut pair, cfg.items)?;
    let mut kills = Vec::new();
    // The killed processes, reaped at the end: waiting for one's exit would stop the consumer.
    let mut killed = Vec::new();
    for _ in 0..cfg.kills {
        let current = pair
            .current()
            .ok_or_else(|| BenchError::Child("the consumer is not connected".into()))?;
        let i = ports
            .iter()
            .position(|&p| p == current.port())
            .ok_or_else(|| BenchError::Child(format!("connected to {current}, not one of ours")))?;
        // What arrived before the kill is not counted after it.
        pair.polls()
            .poll_events(Duration::ZERO, &mut |_| {})
            .map_err(consumer_error)?;
        let t0 = Instant::now();
        if let Some(mut p) = dists[i].take() {
            p.kill();
            killed.push(p);
        }
        let (mut stale, mut reimaged) = (HashSet::new(), HashSet::new());
        // Cold: from the new login on. Warm: from the lost connection's `Disconnected` on
        // (what its socket still held comes before it).
        let (mut over, mut first_update, mut all) = (false, None, None);
        let what = if warm {
            "an update from the standby after the kill"
        } else {
            "every item re-imaged after the kill"
        };
        poll_until(pair.polls(), what, &mut |e| {
            match e {
                Event::Status { item, state, .. } if *state == ItemState::Stale && !over => {
                    stale.insert(item.to_string());
                }
                Event::Status { item, state, .. } if *state == ItemState::Stale && warm => {
                    stale.insert(item.to_string());
                }
                Event::LoggedIn { .. } if !warm => over = true,
                Event::Disconnected { .. } if warm => over = true,
                Event::Refresh { item, .. } if over => {
                    reimaged.insert(item.to_string());
                    if reimaged.len() == cfg.items && all.is_none() {
                        all = Some(t0.elapsed());
                    }
                }
                Event::Update { .. } if over && first_update.is_none() => {
                    first_update = Some(t0.elapsed());
                }
                _ => {}
            }
            first_update.is_some() && (warm || all.is_some())
        })?;
        kills.push(DistributorKill {
            first_update_ns: first_update.map_or(0, |d| d.as_nanos() as u64),
            all_reimaged_ns: all.map_or(0, |d| d.as_nanos() as u64),
            stale: stale.len(),
            reimaged: reimaged.len(),
        });
        // The killed one comes back on its port: the next kill fails over to it.
        dists[i] = Some(distributor(exe, &d, ports[i], &backbone, "throughput")?);
        settle(&mut pair, cfg.items)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    feed.kill();
    for p in dists.iter_mut().flatten() {
        p.kill();
    }
    Ok(DistributorPairResult {
        mode: if warm { "warm" } else { "cold" },
        items: cfg.items,
        rate: cfg.rate,
        kills,
        seconds,
    })
}

/// Polls for 300 ms, and on until the pair is ready for the next kill (30 s at most).
fn settle(pair: &mut Pair, items: usize) -> Result<(), BenchError> {
    let least = Instant::now() + Duration::from_millis(300);
    let most = Instant::now() + Duration::from_secs(30);
    while Instant::now() < least || !pair.ready(items) {
        if Instant::now() > most {
            return Err(BenchError::Child(format!(
                "the consumer was not ready again within 30 s of a restart: {}",
                pair.state(items)
            )));
        }
        pair.polls()
            .poll_events(Duration::from_millis(1), &mut |_| {})
            .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    }
    Ok(())
}
