//! Peregrine's benchmark harness.
//!
//! Every scenario runs the same library code users run, in separate processes pinned to CPUs,
//! and reports the columns of the reports it follows (docs/benchmarks.md): samples, Min, Avg, Median, 99th, 99.9th,
//! 99.99th, Max and Std Dev, as a table in microseconds and as JSON lines in nanoseconds.
//!
//! - [`measure`]: the two-process measurements: the machine's floor (a cache-line ping-pong),
//!   ping-pong over a transport, the same over bare sockets, throughput, and paced load with
//!   pings or embedded timestamps.
//! - [`ceiling`]: what the bare mechanism under a transport moves in the same run (an SPSC ring,
//!   bare UDP sockets with and without GSO/GRO, a bare TCP connection): throughput's baseline.
//! - [`helper`]: how a measurement starts its other side as a process, and which sides exist.
//! - [`scenario`]: the suite's cells, composed from the measurements.
//! - [`sockperf`]: the peer baseline, `sockperf` ping-pong over loopback, parsed into the columns.
//! - [`jitter`]: the machine's jitter floor, a thread per CPU spinning on the clock.
//! - [`fanout`]: market data fan-out through a distribution tier (Peregrine's distributor, or
//!   nats-server), its rate search and its exact accounting of every client's updates.
#![deny(unsafe_code)]

pub mod ceiling;
pub mod clock;
pub mod failover;
pub mod fanout;
pub mod helper;
pub mod jitter;
pub mod measure;
pub mod netns;
pub mod output;
pub mod pacer;
pub mod record;
pub mod resolver_traffic;
pub mod results;
pub mod scenario;
pub mod sockperf;
pub mod stats;
pub mod sweep;

use std::fmt;

/// Why a benchmark could not run.
#[derive(Debug)]
pub enum BenchError {
    /// A configuration value is invalid; the text names it and what is accepted.
    Config(String),
    /// Creating a publisher or subscriber failed.
    Open(peregrine::OpenError),
    /// A helper process failed or misbehaved.
    Child(String),
    Io(std::io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Config(s) => f.write_str(s),
            BenchError::Open(e) => e.fmt(f),
            BenchError::Child(s) => write!(f, "benchmark helper process: {s}"),
            BenchError::Io(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for BenchError {}
impl From<peregrine::OpenError> for BenchError {
    fn from(e: peregrine::OpenError) -> Self {
        BenchError::Open(e)
    }
}
impl From<std::io::Error> for BenchError {
    fn from(e: std::io::Error) -> Self {
        BenchError::Io(e)
    }
}

/// The two CPUs the two sides of a benchmark are pinned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuPair {
    pub a: usize,
    pub b: usize,
}

impl CpuPair {
    /// Parses `A,B`, checking both CPUs are ones this process may use.
    pub fn parse(text: &str) -> Result<CpuPair, BenchError> {
        let allowed = peregrine_agent::allowed_cpus();
        let bad = || {
            BenchError::Config(format!(
                "--cpus {text} is not accepted: give two CPU numbers separated by a comma, from the allowed set {allowed:?}, for example --cpus {},{}",
                allowed.first().unwrap_or(&0),
                allowed.get(1).unwrap_or(&0)
            ))
        };
        let (a, b) = text.split_once(',').ok_or_else(bad)?;
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if !allowed.contains(&a) || !allowed.contains(&b) {
            return Err(bad());
        }
        if a == b {
            // Both sides spinning on one CPU measure the scheduler, not the machine.
            return Err(BenchError::Config(format!(
                "--cpus {text} is not accepted: the two sides need two different CPUs (both busy-poll), for example --cpus {},{}",
                allowed.first().unwrap_or(&0),
                allowed.get(1).unwrap_or(&1)
            )));
        }
        Ok(CpuPair { a, b })
    }

    /// The first two allowed CPUs (or the only one, twice, on a 1-CPU machine).
    pub fn default_pair() -> CpuPair {
        let allowed = peregrine_agent::allowed_cpus();
        let a = allowed.first().copied().unwrap_or(0);
        let b = allowed.get(1).copied().unwrap_or(a);
        CpuPair { a, b }
    }

    pub fn to_arg(self) -> String {
        format!("{},{}", self.a, self.b)
    }
}

/// `v` rounded to 3 decimals (figures kept in results and JSON lines).
pub(crate) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A name unique to this run, for shared-memory segments.
pub fn run_name(kind: &str) -> String {
    format!(
        "bench-{kind}-{}-{:04x}",
        std::process::id(),
        peregrine_agent::monotonic_ns() & 0xffff
    )
}

/// CPU seconds (user + system) this process has used so far.
pub fn cpu_seconds_self() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// A setting the helper specs carry by its name (the library's enums know no serde).
pub(crate) trait ByName: Sized {
    fn name(&self) -> &'static str;
    fn from_name(name: &str) -> Result<Self, String>;
}

impl ByName for peregrine::IdleKind {
    fn name(&self) -> &'static str {
        peregrine::IdleKind::name(*self)
    }
    fn from_name(name: &str) -> Result<Self, String> {
        name.parse()
            .map_err(|e: peregrine_agent::UnknownIdleKind| e.to_string())
    }
}

impl ByName for peregrine::Scheme {
    fn name(&self) -> &'static str {
        peregrine::Scheme::name(*self)
    }
    fn from_name(name: &str) -> Result<Self, String> {
        name.parse()
            .map_err(|e: peregrine::UnknownScheme| e.to_string())
    }
}

impl ByName for peregrine::SlowSubscriberPolicy {
    fn name(&self) -> &'static str {
        peregrine::SlowSubscriberPolicy::name(*self)
    }
    fn from_name(name: &str) -> Result<Self, String> {
        parse_policy(name)
    }
}

/// `#[serde(with = "crate::by_name")]`: a [`ByName`] setting as its name.
pub(crate) mod by_name {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: super::ByName, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }
    pub fn deserialize<'de, T: super::ByName, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        T::from_name(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `backpressure` or `overwrite`.
pub fn parse_policy(name: &str) -> Result<peregrine::SlowSubscriberPolicy, String> {
    use peregrine::SlowSubscriberPolicy as P;
    [P::BackPressure, P::Overwrite]
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| format!("'{name}' is not a policy: use backpressure or overwrite"))
}
