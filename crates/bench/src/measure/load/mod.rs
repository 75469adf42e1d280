//! Load with pings (Ultra Messaging's lbmpubload / lbmsubload), and one-way latency from
//! embedded timestamps (the RMDS method).
//!
//! **Load with pings.** This process publishes a stream at a requested rate, paced by
//! [`crate::pacer`]. About one message in `ping_every` is a *ping*; the subscriber process
//! discards the load, checks every message's number, and reflects each ping on a second stream,
//! which this process reads between batches. Latency is half the round trip from the ping's
//! actual send time, and, in a second distribution, the time the ping waited behind the
//! schedule (its actual minus its scheduled send time) plus half the round trip: that one is
//! corrected for coordinated omission, since a sender that falls behind delays every ping
//! it has not yet sent.
//!
//! The outer loop's sleep (when the next message is more than 1 ms away) is spent reading
//! reflected pings: in lbmpubload a context thread reads them; here the one thread does both,
//! so the run needs exactly two busy threads on a 2-core machine.
//!
//! **Embedded timestamps.** The roles swap: a publisher process paces the stream and writes the
//! time of each send into the message; this process subscribes and records, for every message,
//! its arrival time minus the time written in it. Both processes read the same TSC (invariant
//! and synchronised across cores: checked before the TSC is chosen, see [`crate::clock`]), and
//! the publisher converts with this process's calibration, passed on its command line.
//!
//! Message layout (little-endian): word 0 is the message number with [`PING`] and
//! [`MEASURED`] flags in its top bits (MEASURED: sent after the warm-up); in embedded mode,
//! word 1 is the send time in clock ticks.
//!
//! **Files.** `mod.rs`: the settings, the result and the dispatch by method; `publish.rs`:
//! the paced publisher; `receive.rs`: the checked receiving loop; `book.rs`: the pings' times
//! and the result; `pings.rs`, `cache_line.rs` and `embedded.rs`: one method each.

mod book;
mod cache_line;
mod embedded;
mod pings;
mod publish;
mod receive;
#[cfg(test)]
mod tests;

pub use cache_line::{reflect_cache_line, CacheLineReflector};
pub use embedded::{publish_embedded, EmbeddedPublisher};
pub use pings::{reflect, LoadReflector};
pub use publish::PacedStats;
pub use receive::SequenceCheck;

use crate::clock::Clock;
use crate::jitter::CpuJitter;
use crate::stats::{LatencyRecorder, Summary};
use crate::{BenchError, CpuPair};
use cache_line::run_cache_line;
use embedded::run_embedded;
use peregrine::{IdleKind, Scheme};
use pings::run_pings;
use std::path::Path;
use std::time::Duration;

/// Word 0's flag: this message is a ping, to be reflected.
pub const PING: u64 = 1 << 63;
/// Word 0's flag: this message was scheduled after the warm-up (it counts).
pub const MEASURED: u64 = 1 << 62;
const NUMBER: u64 = MEASURED - 1;

/// Which measurement a load run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Pings reflected by the subscriber: RTT / 2.
    Pings,
    /// Every message carries its send time: one-way latency read by the subscriber.
    Embedded,
    /// The floor under load: the same pacer and ping picker, but each message is a store to
    /// one shared cache line (its number, and the ping's number when it is a ping) and the
    /// reflector answers pings on a second line. No transport: what the machine allows
    /// under the schedule.
    CacheLine,
}

/// Settings of a load run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoadConfig {
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    pub rate_msgs_per_s: f64,
    /// One ping per this many messages ([`Method::Pings`]).
    pub ping_every: u64,
    /// The measured interval, after the warm-up.
    pub seconds: f64,
    pub warmup_seconds: f64,
    pub cpus: CpuPair,
    /// What the subscriber does when there is nothing to read.
    #[serde(with = "crate::by_name")]
    pub idle: IdleKind,
    pub method: Method,
    pub name: String,
    pub connect_timeout: Duration,
    /// The load stream's URI (default: loopback, from `transport` and `name`).
    pub uri: Option<String>,
    /// The reflected stream's URI, bound by the reflector (default: loopback, `mode=urgent`).
    #[serde(default)]
    pub reflect_uri: Option<String>,
    /// The network namespace the reflector process runs in ([`Method::Pings`]; `bench load
    /// --netns`, see [`crate::netns`]); this process stays where it was called.
    #[serde(default)]
    pub sub_netns: Option<String>,
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Messages published in the measured interval, and in all.
    pub sent: u64,
    pub sent_total: u64,
    /// The measured interval's length and the rate achieved in it.
    pub seconds: f64,
    pub achieved_msgs_per_s: f64,
    /// Messages the subscriber received (all, warm-up included), never received, received
    /// twice, and received out of order.
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Offers refused by back-pressure in the measured interval (each retried).
    pub refused: u64,
    /// Latency from the actual send time (RTT / 2, or one-way), and from the scheduled one.
    pub latency: LatencyRecorder,
    pub latency_from_schedule: LatencyRecorder,
    /// Pings sent in the measured interval, and pings whose reflection never came back.
    pub pings: u64,
    pub pings_unanswered: u64,
    /// Application batches (inner loops), the largest, and outer-loop sleeps.
    pub batches: u64,
    pub max_batch: u64,
    pub sleeps: u64,
    pub publisher_cpu_s: f64,
    pub subscriber_cpu_s: f64,
    /// The stalls the two spinning loops saw over the measured interval (the machine's jitter
    /// over the same interval), when counted.
    pub stalls_publisher: Option<CpuJitter>,
    pub stalls_subscriber: Option<CpuJitter>,
    /// The pings no stall of either loop overlapped (from their send to their reflection's
    /// arrival), and how many a stall did: the tail apart from the machine's. None when the
    /// stalls or the pings were not all kept (more than [`jitter::MAX_SPANS`] stalls in a loop,
    /// more than 2,097,152 pings).
    ///
    /// [`jitter::MAX_SPANS`]: crate::jitter::MAX_SPANS
    pub untouched: Option<Untouched>,
}

/// The latency of the pings no stall touched ([`LoadResult::untouched`]).
#[derive(Debug, Clone)]
pub struct Untouched {
    pub latency: LatencyRecorder,
    /// Pings a stall of either loop overlapped, left out of `latency`.
    pub touched: u64,
}

impl LoadResult {
    /// The latency of the pings no stall touched, when the stalls were kept and some were.
    pub fn unstalled(&self) -> Option<Summary> {
        self.untouched.as_ref()?.latency.nonempty_summary()
    }

    /// The rate held within 1% with nothing lost, duplicated or out of order.
    pub fn sustained(&self, rate_msgs_per_s: f64) -> bool {
        self.achieved_msgs_per_s >= 0.99 * rate_msgs_per_s
            && self.lost == 0
            && self.duplicates == 0
            && self.out_of_order == 0
            && self.pings_unanswered == 0
    }
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &LoadConfig) -> Result<(), BenchError> {
    crate::measure::pingpong::check_transport(cfg.transport, &[("--uri", &cfg.uri)])?;
    let min = match cfg.method {
        Method::Pings | Method::CacheLine => 8,
        Method::Embedded => 16,
    };
    let max = if cfg.transport == Scheme::Ipc {
        peregrine::ipc_max_message_len(peregrine::IPC_DEFAULT_CAPACITY)
    } else {
        1 << 20
    };
    if cfg.size < min || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted: give {min} to {max} bytes (each message carries its {}-byte header)",
            cfg.size,
            min
        )));
    }
    if !(cfg.rate_msgs_per_s.is_finite()
        && cfg.rate_msgs_per_s >= 1.0
        && cfg.rate_msgs_per_s <= 1e9)
    {
        return Err(BenchError::Config(format!(
            "--rate {} is not accepted: give 1 to 1g messages per second (suffixes k, m, g), for example --rate 1m",
            cfg.rate_msgs_per_s
        )));
    }
    if cfg.ping_every == 0 {
        return Err(BenchError::Config(
            "--ping-every 0 is not accepted: give 1 (every message) or more".into(),
        ));
    }
    if cfg.sub_netns.is_some() && cfg.method != Method::Pings {
        return Err(BenchError::Config(
            "a reflector in another network namespace is for load with pings only: drop the namespace, or measure with pings".into(),
        ));
    }
    if !(cfg.seconds > 0.0 && cfg.seconds <= 3600.0) {
        return Err(BenchError::Config(format!(
            "--seconds {} is not accepted: give more than 0 and at most 3600",
            cfg.seconds
        )));
    }
    if !(cfg.warmup_seconds >= 0.0 && cfg.warmup_seconds <= 600.0) {
        return Err(BenchError::Config(format!(
            "--warmup-seconds {} is not accepted: give 0 to 600",
            cfg.warmup_seconds
        )));
    }
    Ok(())
}

/// The load stream's URI and the reflected stream's (loopback defaults, or the configured
/// ones). The reflected stream is latency-critical (`mode=urgent`); the load stream keeps the
/// transport's defaults, batching included. Neither sets `gro`: a subscriber turns UDP GRO on
/// only once a backlog lasts, which the reflected stream's pings never build.
fn uris(cfg: &LoadConfig) -> (String, String) {
    match cfg.transport {
        Scheme::Ipc => (
            cfg.uri
                .clone()
                .unwrap_or_else(|| format!("ipc://{}-load", cfg.name)),
            format!("ipc://{}-reflect", cfg.name),
        ),
        t => {
            let load = cfg
                .uri
                .clone()
                .unwrap_or_else(|| crate::measure::pingpong::loopback_uri(t, &cfg.name, 0));
            let reflect = cfg.reflect_uri.clone().unwrap_or_else(|| {
                let mut reflect = crate::measure::pingpong::loopback_uri(t, &cfg.name, 1);
                reflect.push_str("?mode=urgent");
                reflect
            });
            (load, reflect)
        }
    }
}

/// What a subscriber process reports.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SubReport {
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub corrupt: u64,
    pub reflected: u64,
    pub cpu_s: f64,
    /// The reflector loop's stalls after the first measured message.
    #[serde(default)]
    pub stalls: Option<CpuJitter>,
}

/// What a paced publisher process reports (embedded mode).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PubReport {
    pub stats: PacedStats,
    pub cpu_s: f64,
}

/// Runs a load test: this process publishes (pings) or subscribes (embedded); the other side
/// is `exe` started with `--role`.
pub fn run(cfg: &LoadConfig, exe: &Path, clock: &Clock) -> Result<LoadResult, BenchError> {
    validate(cfg)?;
    match cfg.method {
        Method::Pings => run_pings(cfg, exe, clock),
        Method::Embedded => run_embedded(cfg, exe, clock),
        Method::CacheLine => run_cache_line(cfg, exe, clock),
    }
}
