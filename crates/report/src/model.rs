//! The results folder's data model: `results.json`, written by `peregrine bench`, read by
//! `peregrine report`. Everything a report shows comes from here (raw HdrHistogram logs sit
//! beside it for other tools).
//!
//! Layout of a results folder:
//! - `results.json`: one [`Results`] (machine, command line, every cell);
//! - `results.csv`: one row per cell (the same numbers, flat);
//! - `hdr/<cell id>.hlog`: each cell's latency samples as an HdrHistogram interval log (V2,
//!   compressed, base64), readable by HdrHistogram's log tools;
//! - `report.txt`, `report.html`, `charts/*.svg`, `charts/*.png`: rendered by `peregrine report`.
//!
//! Units are in the names: `_ns` nanoseconds, `_bytes` bytes, `msgs_per_s` messages per second.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod detail;
pub use detail::{
    Detail, EchoDetail, FailoverDetail, FanoutDetail, JitterDetail, LatencyDetail, PacedDetail,
    Settings, ThroughputDetail,
};

/// The version of this layout; readers reject other versions with a clear message, except
/// [`FORMAT_V1`], which they still read.
/// - 2: a cell's `detail` is typed, tagged by `kind` ([`Detail`]).
/// - 1: a cell's `detail` was a free map of the same keys.
pub const FORMAT_VERSION: u32 = 2;
/// The first layout, still read ([`Detail::from_v1`]).
pub const FORMAT_V1: u32 = 1;

/// One results folder's `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// [`FORMAT_VERSION`] when written.
    pub format: u32,
    pub peregrine_version: String,
    /// When the run started, UTC, `2026-11-22T10:31:07Z`.
    pub started_utc: String,
    /// The command line, program name first.
    pub command_line: Vec<String>,
    pub machine: Machine,
    /// In the order they ran.
    pub cells: Vec<Cell>,
}

/// The machine the run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs online, and the ones this process was allowed to use.
    pub cpus_online: usize,
    pub cpus_allowed: Vec<usize>,
    pub memory_bytes: u64,
    /// `uname -r`.
    pub kernel: String,
    /// The kernel's clock source (tsc, kvm-clock, ...).
    pub clocksource: String,
    /// The benchmark clock: "TSC (2.600 GHz, calibrated against CLOCK_MONOTONIC_RAW)".
    pub clock: String,
    /// The CPUs the two sides of each two-process scenario were pinned to, `A,B`.
    pub cpus_used: String,
}

/// What a cell measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// The cache-line ping-pong between two processes: the shared-memory floor.
    Floor,
    /// Bare-socket ping-pong: the network floor.
    Raw,
    /// Ping-pong over a Peregrine transport (half round trip).
    Pingpong,
    /// Echo (seed 004, Reflex): the half round trip between a sender and an echo process that
    /// each run an application's event loop (offer without flush, then poll and run the
    /// publisher's duty cycle on every empty poll), with both streams in one send mode:
    /// `detail.mode` ([`EchoDetail`]) is `normal` (batched) or `urgent`. `detail.median_x_pingpong` is the
    /// median over the ping-pong median of the same transport and size in the same run;
    /// `detail.batch_interval_us` the normal-mode batch interval of the sender's and
    /// `detail.echo_batch_interval_us` of the echo's stream (network transports).
    Echo,
    /// Load with pings at a requested rate (one cell of a sweep, or `bench load`).
    Load,
    /// The floor under load of the load cell `detail.for_cell`: the same pacer, rate, pings
    /// and CPUs, each message a store to one shared cache line and each ping answered on a
    /// second: what the machine allows under that schedule (`transport` is `cacheline`).
    FloorLoad,
    /// One step of the maximum-throughput search.
    MaxProbe,
    /// The result of the maximum-throughput search for one size: `rate_achieved_msgs_per_s` is
    /// the highest rate sustained.
    Max,
    /// One-way latency from embedded timestamps at a requested update rate.
    Embedded,
    /// Unpaced throughput (as fast as the publisher can).
    Throughput,
    /// One probe of the market data fan-out search: a feed rate through a distribution tier
    /// (`system`) to N clients; `rate_achieved_msgs_per_s` is the updates per second delivered
    /// to all clients together.
    FanoutProbe,
    /// The fan-out search's result for one system: its highest sustained probe.
    Fanout,
    /// One-way latency, feed to client through a distribution tier, at one update rate
    /// (seed 003's Table 2).
    MdLatency,
    /// The machine's jitter on one CPU (sysjitter's method): `detail` holds the gaps per
    /// second over 1 us, 10 us, 100 us and 1 ms, the largest gap and the fraction of time lost.
    Jitter,
    /// A failover group under kills (`bench failover`): two members publish one stream and
    /// the leader is killed with SIGKILL `detail.kills` times; `detail` holds the gap each kill
    /// left (`gap_median_ns`, `gap_max_ns`, `gaps_ns`), the stream's `interval_ns` and
    /// inter-delivery times, and what was `duplicated`, `out_of_order` or `corrupt`.
    Failover,
}

/// Latency statistics of one cell, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub samples: u64,
    pub min_ns: f64,
    pub mean_ns: f64,
    pub p1_ns: f64,
    pub p25_ns: f64,
    pub median_ns: f64,
    pub p75_ns: f64,
    pub p90_ns: f64,
    pub p99_ns: f64,
    pub p999_ns: f64,
    pub p9999_ns: f64,
    pub max_ns: f64,
    /// Population standard deviation.
    pub stddev_ns: f64,
}

/// One measurement: a (scenario, transport, size, rate) point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Unique in the folder and safe as a file name: `load-udp-32B-1000000`.
    pub id: String,
    pub scenario: Option<Scenario>,
    /// The system measured, when it is not Peregrine alone: `peregrine` or `nats` in the
    /// fan-out cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// `ipc`, `udp`, `mcast`, `tcp`; `cacheline` for the floor.
    pub transport: String,
    pub size_bytes: usize,
    /// The rate asked for (paced scenarios), messages per second.
    pub rate_requested_msgs_per_s: Option<f64>,
    /// The rate the publisher achieved over the measured interval (throughput scenarios: the
    /// slowest subscriber's receive rate).
    pub rate_achieved_msgs_per_s: Option<f64>,
    /// How long the measured interval lasted (warm-up excluded).
    pub seconds: f64,
    pub sent: u64,
    pub received: u64,
    /// Messages that never arrived.
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Offers refused by back-pressure (the publisher retried them).
    pub refused: u64,
    /// For paced scenarios: the rate held within 1% for the whole interval with nothing lost
    /// (`Max` probes also require no refusals).
    pub sustained: Option<bool>,
    /// Latency measured from each ping's actual send time (RTT / 2 for round trips; one-way for
    /// `Embedded`).
    pub latency: Option<Latency>,
    /// Latency measured from each ping's scheduled send time (corrected for coordinated
    /// omission): the time the ping waited to be sent, plus RTT / 2.
    pub latency_from_schedule: Option<Latency>,
    /// CPU seconds used by each process, by role: `publisher`, `subscriber`, `ping`, `pong`.
    pub cpu_s: BTreeMap<String, f64>,
    /// The cell's HdrHistogram log, relative to the folder (`hdr/<id>.hlog`).
    pub hdr_log: Option<String>,
    /// What the scenario keeps beyond these columns: its ratios, its ceiling, its verdict, its
    /// settings ([`Detail`], one kind per kind of scenario).
    #[serde(default)]
    pub detail: Detail,
}
