//! The helper processes of a benchmark: this same binary started again as
//! `peregrine helper SPEC`, where SPEC is one [`HelperSpec`] as JSON.
//!
//! Every side a benchmark starts (the floor's pong, the ping-pong's pong, the bare-socket pong,
//! the throughput subscribers, the load reflector and the embedded-timestamp publisher) is one
//! variant of [`HelperSpec`], carrying the same typed configuration the measuring side runs
//! with, so no argument list is built or parsed by hand.
//!
//! Protocol on the helper's stdout: one line `ready` (or `ready INFO`, e.g. the URI it bound)
//! once it is set up, then at exit one JSON line with what it measured. Its stderr passes
//! through to ours.

use crate::clock::Clock;
use crate::floor::FloorPong;
use crate::load::LoadConfig;
use crate::pingpong::PingPongConfig;
use crate::raw::RawConfig;
use crate::throughput::ThroughputConfig;
use crate::BenchError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The name of the (hidden) command line word that starts a helper: `peregrine helper SPEC`.
pub const HELPER_COMMAND: &str = "helper";

/// One helper process: which side it plays and with what settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HelperSpec {
    /// The floor's pong: answers on the shared cache line.
    FloorPong(FloorPong),
    /// The ping-pong's pong side: echoes every ping.
    Pong(PingPongConfig),
    /// The bare-socket pong side.
    RawPong {
        cfg: RawConfig,
        ping_uri: String,
        pong_uri: String,
    },
    /// A throughput subscriber (`uri`: the stream as the publisher bound it).
    ThroughputSubscriber { cfg: ThroughputConfig, uri: String },
    /// The load run's subscriber: discards the load, reflects the pings (and counts its loop's
    /// stalls with the measuring side's `clock`).
    LoadReflector { cfg: LoadConfig, clock: Clock },
    /// The floor under load's reflector, on the shared page `line`.
    CacheLineReflector {
        cfg: LoadConfig,
        line: String,
        clock: Clock,
    },
    /// The embedded-timestamp publisher: paces the stream and writes the send time, read with
    /// the measuring side's `clock`.
    EmbeddedPublisher { cfg: LoadConfig, clock: Clock },
    /// The fan-out benchmark's feed through NATS.
    NatsFeed(crate::fanout::nats::NatsFeedSpec),
    /// A fan-out client through NATS.
    NatsClient(crate::fanout::nats::NatsClientSpec),
    /// A failover group's member: publishes on the run's schedule until it is killed.
    FailoverMember(crate::failover::MemberSpec),
    /// The A/B paths case's publisher: sends on both lines until it is killed.
    PathsPublisher(crate::failover::paths::PathsSpec),
}

impl HelperSpec {
    /// Plays this side, in the helper process.
    pub fn serve(self) -> Result<(), BenchError> {
        match self {
            HelperSpec::FloorPong(p) => crate::floor::pong(&p),
            HelperSpec::Pong(cfg) => crate::pingpong::pong(&cfg),
            HelperSpec::RawPong {
                cfg,
                ping_uri,
                pong_uri,
            } => crate::raw::pong(&cfg, &ping_uri, &pong_uri),
            HelperSpec::ThroughputSubscriber { cfg, uri } => {
                crate::throughput::subscribe(&cfg, &uri)
            }
            HelperSpec::LoadReflector { cfg, clock } => crate::load::reflect(&cfg, &clock),
            HelperSpec::CacheLineReflector { cfg, line, clock } => {
                crate::load::reflect_cache_line(&cfg, &line, &clock)
            }
            HelperSpec::EmbeddedPublisher { cfg, clock } => {
                crate::load::publish_embedded(&cfg, &clock)
            }
            HelperSpec::NatsFeed(spec) => crate::fanout::nats::feed(&spec),
            HelperSpec::NatsClient(spec) => crate::fanout::nats::client(&spec),
            HelperSpec::FailoverMember(spec) => crate::failover::member(&spec),
            HelperSpec::PathsPublisher(spec) => crate::failover::paths::publish(&spec),
        }
    }

    /// A short description for error messages.
    fn what(&self) -> &'static str {
        match self {
            HelperSpec::FloorPong(_) => "floor pong",
            HelperSpec::Pong(_) => "ping-pong pong side",
            HelperSpec::RawPong { .. } => "bare-socket pong side",
            HelperSpec::ThroughputSubscriber { .. } => "throughput subscriber",
            HelperSpec::LoadReflector { .. } => "load reflector",
            HelperSpec::CacheLineReflector { .. } => "cache-line reflector",
            HelperSpec::EmbeddedPublisher { .. } => "embedded-timestamp publisher",
            HelperSpec::NatsFeed(_) => "NATS feed",
            HelperSpec::NatsClient(_) => "NATS client",
            HelperSpec::FailoverMember(_) => "failover group member",
            HelperSpec::PathsPublisher(_) => "A/B paths publisher",
        }
    }
}

/// Reads a helper's spec from its command line argument and plays it.
pub fn serve_spec(json: &str) -> Result<(), BenchError> {
    let spec: HelperSpec = serde_json::from_str(json).map_err(|e| {
        BenchError::Config(format!(
            "`peregrine {HELPER_COMMAND}` takes the JSON settings a benchmark gives its helper processes (it is not meant to be run by hand): {e}"
        ))
    })?;
    spec.serve()
}

/// A running helper process.
#[derive(Debug)]
pub struct Helper {
    child: Child,
    out: BufReader<ChildStdout>,
    what: String,
    /// What followed `ready` on the helper's first line (empty if nothing).
    pub ready_info: String,
}

impl Helper {
    /// Starts `exe helper SPEC` and waits for its `ready` line.
    pub fn start(exe: &std::path::Path, spec: &HelperSpec) -> Result<Helper, BenchError> {
        let what = format!("{} ({})", spec.what(), exe.display());
        let json = serde_json::to_string(spec).expect("helper specs serialise");
        let mut child = Command::new(exe)
            .args([HELPER_COMMAND, &json])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Child(format!("could not start the {what}: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut h = Helper {
            child,
            out,
            what,
            ready_info: String::new(),
        };
        let line = h.read_line()?;
        let line = line.trim();
        if let Some(info) = line.strip_prefix("ready ") {
            h.ready_info = info.trim().to_string();
        } else if line != "ready" {
            return Err(BenchError::Child(format!(
                "the {} said '{line}' instead of 'ready'",
                h.what
            )));
        }
        Ok(h)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the helper SIGKILL (no chance to close anything) without waiting for it to end
    /// (dropping the helper reaps it).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    fn read_line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        let n = self.out.read_line(&mut line)?;
        if n == 0 {
            let status = self.child.wait()?;
            return Err(BenchError::Child(format!(
                "the {} exited ({status}) before answering",
                self.what
            )));
        }
        Ok(line)
    }

    /// Waits for the helper's result line and its exit.
    pub fn finish<T: DeserializeOwned>(mut self) -> Result<T, BenchError> {
        let line = self.read_line()?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(BenchError::Child(format!(
                "the {} failed: {status}",
                self.what
            )));
        }
        serde_json::from_str(line.trim()).map_err(|e| {
            BenchError::Child(format!(
                "the {} printed an unreadable result '{}': {e}",
                self.what,
                line.trim()
            ))
        })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // A helper still running here means the benchmark failed: do not leave it spinning.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What an echoing side (a pong) reports at exit.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct EchoReport {
    pub cpu_s: f64,
    pub echoed: u64,
}

/// Announces readiness to the parent (the helper side of the protocol).
pub fn say_ready() {
    say_ready_with("");
}

/// Announces readiness with information for the parent (e.g. the URI bound).
pub fn say_ready_with(info: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = if info.is_empty() {
        writeln!(o, "ready")
    } else {
        writeln!(o, "ready {info}")
    };
    let _ = o.flush();
}

/// Prints the helper's result line.
pub fn say_result(v: &impl Serialize) {
    use std::io::Write;
    let line = serde_json::to_string(v).expect("helper results serialise");
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Method;
    use crate::CpuPair;
    use peregrine::{IdleKind, SlowSubscriberPolicy};
    use std::time::Duration;

    /// Every setting a helper needs survives the trip through its command line.
    #[test]
    fn a_spec_reaches_the_helper_with_every_setting() {
        let cpus = CpuPair { a: 0, b: 1 };
        let load = LoadConfig {
            transport: peregrine::Scheme::Udp,
            size: 64,
            rate_msgs_per_s: 250_000.0,
            ping_every: 50,
            seconds: 1.5,
            warmup_seconds: 0.25,
            cpus,
            idle: IdleKind::Backoff,
            method: Method::Embedded,
            name: "bench-ld-1".into(),
            connect_timeout: Duration::from_millis(20_500),
            uri: Some("udp://127.0.0.1:4000?mode=urgent".into()),
        };
        let clock = Clock::from_arg("tsc:0.3846").unwrap();
        let spec = HelperSpec::EmbeddedPublisher {
            cfg: load.clone(),
            clock,
        };
        let back: HelperSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        let HelperSpec::EmbeddedPublisher { cfg, clock: c } = back else {
            panic!("another variant came back: {back:?}")
        };
        assert_eq!(format!("{cfg:?}"), format!("{load:?}"));
        assert_eq!(c.to_arg(), clock.to_arg());

        let tp = ThroughputConfig {
            transport: peregrine::Scheme::Ipc,
            size: 32,
            seconds: 2.0,
            count: Some(7),
            subscribers: 3,
            policy: SlowSubscriberPolicy::Overwrite,
            capacity: 1 << 20,
            cpus: None,
            name: "bench-tp-1".into(),
            connect_timeout: Duration::from_secs(20),
            idle: IdleKind::Block,
            uri: None,
            loss: Some("1%".into()),
            group: true,
        };
        let spec = HelperSpec::ThroughputSubscriber {
            cfg: tp.clone(),
            uri: "ipc://bench-tp-1".into(),
        };
        let json = serde_json::to_string(&spec).unwrap();
        let back: HelperSpec = serde_json::from_str(&json).unwrap();
        let HelperSpec::ThroughputSubscriber { cfg, uri } = back else {
            panic!("another variant came back: {back:?}")
        };
        assert_eq!(format!("{cfg:?}"), format!("{tp:?}"));
        assert_eq!(uri, "ipc://bench-tp-1");
        assert!(json.contains("\"policy\":\"overwrite\"") && json.contains("\"idle\":\"block\""));
    }

    #[test]
    fn a_bad_spec_is_refused_with_what_the_command_is_for() {
        let e = serve_spec("{\"pong\": 3}").unwrap_err().to_string();
        assert!(e.contains("not meant to be run by hand"), "{e}");
        let e = serve_spec(r#"{"floor_pong":{"name":"x","cpus":{"a":0,"b":1}}, "idle":"sprint"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("peregrine helper"), "{e}");
    }
}
