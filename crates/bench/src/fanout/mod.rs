//! The market data fan-out benchmark (seed 003's "Producer 50/50" and its Table 2): a feed, a
//! distribution tier and N client processes, each client watching items of which a fraction is
//! shared by every client; the feed's update rate raised until an update is lost, a client
//! lags or the tier refuses. The same clients, watchlists, updates and rate search run through
//! Peregrine ([`peregrine`]: `peregrine feed`, `peregrine distributor`, `peregrine client`) or
//! through NATS ([`nats`]: `nats-server`, with a subject per item).
//!
//! This module holds what does not touch a process: the watchlists, the accounting of what
//! each client received against what the feed sent ([`account`]), the verdict of a probe, and
//! the pooled latency of several clients. Every probe is checked exactly: each client's last
//! `item_seq` of every watched item must be the feed's last, its count of updates must be the
//! difference, and nothing it did not watch may reach it.

pub mod attack;
pub mod nats;
pub mod peregrine;
pub(crate) mod process;

use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The distribution tier under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// `peregrine feed` on the reliable multicast backbone, `peregrine distributor`, and
    /// `peregrine client` over TCP.
    Peregrine,
    /// `nats-server` on loopback: the feed publishes each update on the item's subject, each
    /// client subscribes to its items' subjects.
    Nats,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Peregrine => "peregrine",
            System::Nats => "nats",
        }
    }
}

/// How the distributor writes to clients (NATS has one way: its own).
pub use peregrine_md::distributor::WriteMode;

/// The shape of one fan-out probe: who watches what, the update size, how long.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FanoutConfig {
    pub clients: usize,
    /// Items on each client's watchlist.
    pub items_per_client: usize,
    /// The fraction of each client's items that every client watches (0 to 1).
    pub overlap: f64,
    /// UPDATE size in bytes (docs/market-data.md; 74 is the seed's).
    pub size: usize,
    pub mode: WriteMode,
    /// Seconds of updates in each probe.
    pub seconds: f64,
    /// Latency (and the lag bound) counts from this long after each client's first update:
    /// the images of the start travel with the first updates.
    pub warmup_seconds: f64,
    /// A client lags when an update reaches it later than this after the feed sent it.
    pub max_lag_ms: f64,
    /// Seed of the feed's item draws.
    pub seed: u64,
    /// How long clients keep reading without blocking after data (both systems' clients
    /// alike; 0: they block). On a machine with few cores a spinning client takes the core
    /// the tier needs.
    pub client_busy_poll_us: u64,
    /// Pin the tier (distributor, or nats-server) to `cpus.b`, and the feed and the clients
    /// to `cpus.a` (both systems alike), as seed 003 bound each process to its cores.
    pub pin: Option<crate::CpuPair>,
    /// Payload bytes per backbone datagram (the `datagram` parameter of the feed's and the
    /// distributor's multicast URI; loopback's MTU is 65 536).
    pub backbone_datagram: usize,
    /// The backbone sealed with the user's key (the default of the market data tier), or
    /// `auth=none`: what sealing costs is the ratio of the two.
    #[serde(default = "sealed_by_default")]
    pub backbone_sealed: bool,
    /// Clients connect over TLS (certificates made for the run): what TLS costs is the ratio
    /// to a plaintext run.
    #[serde(default)]
    pub client_tls: bool,
    /// Clients speak the WebSocket JSON API (`peregrine client --websocket` to the
    /// distributor's `--websocket` port) instead of the binary protocol: what JSON costs is
    /// the ratio to a binary run.
    #[serde(default)]
    pub client_websocket: bool,
    /// An attack on the distributor run during every probe (Peregrine only).
    #[serde(default)]
    pub attack: Option<attack::Attack>,
}

fn sealed_by_default() -> bool {
    true
}

/// The default `backbone_datagram` on loopback: a few updates of the default size per
/// system call fewer than the 1472 of a 1500-byte MTU; at 200 K updates/s this took the feed
/// from 0.5 to 0.3 of a core, and the mean latency from 0.5 ms to 0.12 ms.
pub const LOOPBACK_DATAGRAM: usize = 8192;

impl FanoutConfig {
    pub const MAX_CLIENTS: usize = 512;

    /// Checks every setting; the error names the flag, the value and what is accepted.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |s: String| Err(BenchError::Config(s));
        if !(1..=Self::MAX_CLIENTS).contains(&self.clients) {
            return bad(format!(
                "--clients {} is not accepted: give 1 to {}",
                self.clients,
                Self::MAX_CLIENTS
            ));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(format!(
                "--overlap {} is not accepted: give a fraction from 0 to 1 (or a percentage, 50%)",
                self.overlap
            ));
        }
        if self.items_per_client == 0 {
            return bad("--items 0 is not accepted: give at least 1 item per client".into());
        }
        if self.client_websocket && self.client_tls {
            return bad(
                "--client-websocket with --client-tls is not accepted: the test client speaks \
                 WebSocket without TLS; give one of them"
                    .into(),
            );
        }
        peregrine_md::quotes::UpdateLayout::for_size(self.size)
            .map_err(|e| BenchError::Config(format!("--size {}: {e}", self.size)))?;
        if !(0.0..=60.0).contains(&self.warmup_seconds) || self.warmup_seconds >= self.seconds {
            return bad(format!(
                "--warmup-seconds {} is not accepted: give 0 to 60 seconds, less than --seconds {}",
                self.warmup_seconds, self.seconds
            ));
        }
        if !(0.5..=600.0).contains(&self.seconds) {
            return bad(format!(
                "--seconds {} is not accepted: give 0.5 to 600 seconds of updates per probe",
                self.seconds
            ));
        }
        Watchlists::new(self.clients, self.items_per_client, self.overlap)?;
        Ok(())
    }
}

/// The clients' watchlists: `shared` items every client watches, then each client's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watchlists {
    /// Every watched item, the feed's item list: the shared ones first.
    pub items: Vec<String>,
    /// How many of `items` (the first) every client watches.
    pub shared: usize,
    /// Each client's own items: `items[own.0..own.1]`.
    own: Vec<(usize, usize)>,
}

impl Watchlists {
    /// `clients` watchlists of `per_client` items, `round(overlap x per_client)` of them shared
    /// by all, named with [`peregrine_md::quotes::sample_item_name`].
    pub fn new(clients: usize, per_client: usize, overlap: f64) -> Result<Watchlists, BenchError> {
        let shared = (overlap * per_client as f64).round() as usize;
        let own = per_client - shared;
        let total = shared + clients * own;
        let max = peregrine_md::quotes::SAMPLE_NAMES;
        if total > max {
            return Err(BenchError::Config(format!(
                "--clients {clients} --items {per_client} --overlap {overlap} needs {total} distinct items; \
                 the sample names give {max}: give fewer clients or items, or more overlap"
            )));
        }
        Ok(Watchlists {
            items: (0..total)
                .map(peregrine_md::quotes::sample_item_name)
                .collect(),
            shared,
            own: (0..clients)
                .map(|k| (shared + k * own, shared + (k + 1) * own))
                .collect(),
        })
    }

    /// Client `k`'s items: the shared ones, then its own.
    pub fn of(&self, k: usize) -> impl Iterator<Item = &str> {
        let (a, b) = self.own[k];
        self.items[..self.shared]
            .iter()
            .chain(&self.items[a..b])
            .map(String::as_str)
    }

    /// Writes client `k`'s watchlist file (one name per line).
    pub fn write(&self, k: usize, path: &Path) -> std::io::Result<()> {
        let mut text = String::new();
        for name in self.of(k) {
            text.push_str(name);
            text.push('\n');
        }
        std::fs::write(path, text)
    }

    /// Writes the feed's item file.
    pub fn write_items(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.items.join("\n") + "\n")
    }
}

/// What a feed's `--items-out` says: each item's last `item_seq` sent (`None`: nothing sent).
pub type FeedItems = HashMap<String, Option<u32>>;

/// One line of a client's `--items-out`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientItem {
    pub name: String,
    /// The item_seq the client started from (its first REFRESH; 0 through NATS, where the
    /// feed numbers updates from 1).
    pub first_seq: u32,
    pub last_seq: u32,
    pub updates: u64,
    /// REFRESHes after the first (each takes an `item_seq` too).
    pub refreshes: u64,
}

/// Reads a feed's `--items-out` (`NAME LAST_SEQ`, `-` for none).
pub fn read_feed_items(path: &Path) -> Result<FeedItems, BenchError> {
    let text = read(path)?;
    let mut out = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let bad = || {
            BenchError::Child(format!(
                "{} line {}: '{line}' is not NAME LAST_SEQ",
                path.display(),
                n + 1
            ))
        };
        let mut w = line.split_whitespace();
        let (Some(name), Some(last), None) = (w.next(), w.next(), w.next()) else {
            return Err(bad());
        };
        let last = match last {
            "-" => None,
            v => Some(v.parse().map_err(|_| bad())?),
        };
        out.insert(name.to_string(), last);
    }
    Ok(out)
}

/// Reads a client's `--items-out` (`NAME FIRST_SEQ LAST_SEQ UPDATES REFRESHES`).
pub fn read_client_items(path: &Path) -> Result<Vec<ClientItem>, BenchError> {
    let text = read(path)?;
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let bad = || {
                BenchError::Child(format!(
                    "{} line {}: '{line}' is not NAME FIRST_SEQ LAST_SEQ UPDATES REFRESHES",
                    path.display(),
                    n + 1
                ))
            };
            let w: Vec<&str> = line.split_whitespace().collect();
            let [name, first, last, updates, refreshes] = w[..] else {
                return Err(bad());
            };
            Ok(ClientItem {
                name: name.to_string(),
                first_seq: first.parse().map_err(|_| bad())?,
                last_seq: last.parse().map_err(|_| bad())?,
                updates: updates.parse().map_err(|_| bad())?,
                refreshes: refreshes.parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

fn read(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|e| {
        BenchError::Child(format!(
            "cannot read {} (written by a process of the probe at its exit): {e}",
            path.display()
        ))
    })
}

/// One client's received items checked against the feed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    /// Messages (UPDATEs, and REFRESHes asked for again) the feed sent for the watched items
    /// after the client's starting point.
    pub expected: u64,
    /// UPDATEs the client received of its watched items.
    pub delivered: u64,
    /// Watched-item UPDATEs the feed sent that had not reached the client when it stopped
    /// (its last `item_seq` short of the feed's), plus whole watched items it never got.
    pub undelivered: u64,
    /// Items it received but did not watch.
    pub foreign: u64,
    /// Items whose count of UPDATEs and later REFRESHes is not the difference of its first
    /// and last `item_seq`: messages went missing in between.
    pub inconsistent: u64,
}

/// Checks what one client received (`got`) of its watchlist (`watch`) against the feed.
pub fn account<'a>(
    watch: impl IntoIterator<Item = &'a str>,
    feed: &FeedItems,
    got: &[ClientItem],
) -> Account {
    let by_name: HashMap<&str, &ClientItem> = got.iter().map(|g| (g.name.as_str(), g)).collect();
    let mut watched = std::collections::HashSet::new();
    let mut a = Account::default();
    for name in watch {
        watched.insert(name);
        let sent = feed.get(name).copied().flatten();
        match (by_name.get(name), sent) {
            (Some(g), Some(last)) => {
                a.expected += u64::from(last.wrapping_sub(g.first_seq));
                a.delivered += g.updates;
                a.undelivered += u64::from(last.wrapping_sub(g.last_seq));
                if u64::from(g.last_seq.wrapping_sub(g.first_seq)) != g.updates + g.refreshes {
                    a.inconsistent += 1;
                }
            }
            // The feed sent nothing of it: nothing may have arrived.
            (Some(g), None) => {
                a.delivered += g.updates;
                a.inconsistent += u64::from(g.updates > 0);
            }
            // Never received: every message the feed sent of it, from item_seq 0.
            (None, Some(last)) => {
                a.expected += u64::from(last);
                a.undelivered += u64::from(last) + 1;
            }
            (None, None) => {}
        }
    }
    a.foreign = got
        .iter()
        .filter(|g| !watched.contains(g.name.as_str()))
        .count() as u64;
    a
}

/// Latency statistics of one process, or pooled over several, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    pub points: u64,
}

impl LatencyStats {
    /// The statistics of the union of the samples: the pooled mean and (population)
    /// variance, the extremes.
    pub fn pool(parts: &[LatencyStats]) -> LatencyStats {
        let parts: Vec<&LatencyStats> = parts.iter().filter(|p| p.points > 0).collect();
        let n: u64 = parts.iter().map(|p| p.points).sum();
        if n == 0 {
            return LatencyStats::default();
        }
        let mean = parts
            .iter()
            .map(|p| p.mean_ns * p.points as f64)
            .sum::<f64>()
            / n as f64;
        let var = parts
            .iter()
            .map(|p| p.points as f64 * (p.stddev_ns.powi(2) + (p.mean_ns - mean).powi(2)))
            .sum::<f64>()
            / n as f64;
        LatencyStats {
            mean_ns: mean,
            stddev_ns: var.sqrt(),
            min_ns: parts.iter().map(|p| p.min_ns).fold(f64::INFINITY, f64::min),
            max_ns: parts.iter().map(|p| p.max_ns).fold(0.0, f64::max),
            points: n,
        }
    }
}

/// What every client process reports at its exit (the Peregrine client's summary and the
/// NATS client's result carry these keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientReport {
    pub updates: u64,
    /// Updates whose item_seq did not follow the item's previous one.
    pub gaps: u64,
    /// Conflations (Peregrine: the distributor's CONFLATED messages).
    pub conflated: u64,
    /// Times the connection was lost (Peregrine: reconnections; NATS: the server closed it,
    /// as it does to a slow consumer).
    pub disconnects: u64,
    pub latency: LatencyStats,
    pub cpu_s: f64,
}

/// What a probe's processes reported, before the verdict.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeRecord {
    pub rate_asked: f64,
    /// The feed's own rate over its update interval.
    pub feed_rate: f64,
    pub feed_updates: u64,
    pub feed_seconds: f64,
    /// Offers the feed's transport refused (Peregrine back-pressure; NATS: none, a full socket
    /// blocks the feed and shows as a lower `feed_rate`).
    pub refused: u64,
    pub clients: Vec<ClientReport>,
    pub accounts: Vec<Account>,
    /// Losses the distribution tier itself reported (Peregrine: backbone losses and sequence
    /// gaps; NATS: none are reported).
    pub tier_losses: u64,
    /// Clients the tier disconnected or conflated for being slow.
    pub tier_slow: u64,
    pub cpu_s: BTreeMap<String, f64>,
}

/// Why a probe did not hold its rate, or that it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Sustained,
    /// An update was lost: a client saw a gap, missed a watched item, got one it did not
    /// watch, or was disconnected; or the tier reported a loss.
    Lost,
    /// A client fell behind: conflated, or an update reached it later than the lag bound, or
    /// its queue had not drained when the probe ended.
    Lagging,
    /// The feed could not hold the rate (the tier refused it, or its socket stayed full).
    Refused,
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Sustained => "sustained",
            Verdict::Lost => "lost",
            Verdict::Lagging => "lagging",
            Verdict::Refused => "refused",
        }
    }
}

/// A probe's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub system: System,
    pub record: ProbeRecord,
    pub verdict: Verdict,
    /// What decided the verdict, for people (`client 3: 120 updates undelivered`).
    pub why: String,
    /// Updates delivered to clients per second, summed over clients.
    pub updates_per_s: f64,
    /// Updates lost (gaps, and undelivered updates of disconnected clients).
    pub lost: u64,
    pub latency: LatencyStats,
}

impl Probe {
    /// Judges a probe: lost before lagging before refused.
    pub fn judge(system: System, record: ProbeRecord, max_lag_ms: f64) -> Probe {
        let mut lost = record.tier_losses;
        let mut lost_why = Vec::new();
        let mut lag_why = Vec::new();
        if record.tier_losses > 0 {
            lost_why.push(format!(
                "the tier reported {} lost updates",
                record.tier_losses
            ));
        }
        for (k, (c, a)) in record.clients.iter().zip(&record.accounts).enumerate() {
            let dropped = c.disconnects > 0;
            let client_lost =
                c.gaps + a.inconsistent + a.foreign + if dropped { a.undelivered } else { 0 };
            if client_lost > 0 || dropped {
                lost += client_lost;
                lost_why.push(format!(
                    "client {k}: {} gaps, {} items short, {} foreign items, {} disconnects, {} undelivered",
                    c.gaps, a.inconsistent, a.foreign, c.disconnects, a.undelivered
                ));
            } else if a.undelivered > 0 {
                lag_why.push(format!(
                    "client {k}: {} updates not yet delivered when the probe ended",
                    a.undelivered
                ));
            } else if c.conflated > 0 {
                lag_why.push(format!("client {k}: conflated {} times", c.conflated));
            } else if c.latency.max_ns > max_lag_ms * 1e6 {
                lag_why.push(format!(
                    "client {k}: an update took {:.1} ms (lag bound {max_lag_ms} ms)",
                    c.latency.max_ns / 1e6
                ));
            }
        }
        if record.tier_slow > 0 {
            lag_why.push(format!(
                "the tier conflated or disconnected {} slow clients",
                record.tier_slow
            ));
        }
        let delivered: u64 = record.accounts.iter().map(|a| a.delivered).sum();
        let updates_per_s = if record.feed_seconds > 0.0 {
            delivered as f64 / record.feed_seconds
        } else {
            0.0
        };
        let (verdict, why) = if !lost_why.is_empty() {
            (Verdict::Lost, lost_why.join("; "))
        } else if !lag_why.is_empty() {
            (Verdict::Lagging, lag_why.join("; "))
        } else if record.feed_rate < 0.99 * record.rate_asked {
            (
                Verdict::Refused,
                format!(
                    "the feed sent {:.0} updates/s of the {:.0} asked ({} offers refused)",
                    record.feed_rate, record.rate_asked, record.refused
                ),
            )
        } else {
            (Verdict::Sustained, String::new())
        };
        let latency =
            LatencyStats::pool(&record.clients.iter().map(|c| c.latency).collect::<Vec<_>>());
        Probe {
            system,
            record,
            verdict,
            why,
            updates_per_s,
            lost,
            latency,
        }
    }

    pub fn sustained(&self) -> bool {
        self.verdict == Verdict::Sustained
    }
}

#[cfg(test)]
mod tests;
