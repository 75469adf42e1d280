//! `bench echo` (seed 004, the Reflex report): the half round trip of messages sent in normal
//! (batched) and urgent mode, per transport, mode and size, with the plain ping-pong of the
//! same transport and size measured in the same run as its reference.
//!
//! Both sides run an application's event loop: the sender offers a message (no flush), then
//! polls its subscriber for the echo and runs its publisher's duty cycle (`do_work`) on every
//! empty poll ([`DutyCycle::EveryEmptyPoll`]); the echo side ([`crate::measure::pingpong::pong`]) offers
//! each echo and runs its duty cycle on every empty poll too. In urgent mode a message leaves
//! in its `offer`; in normal mode it leaves when the oldest message of its batch has waited the
//! stream's `batch_interval_us`, which the duty cycle checks: each of the two legs waits about
//! one batch interval. `ipc` has no send modes: both modes run the same path, and its cells
//! say so.

use super::latency::{latency_cell, pingpong_cell, pingpong_config};
use super::{progress, Session};
use crate::measure::pingpong::{DutyCycle, PingPongConfig, PingPongResult, StreamMode};
use crate::stats::Summary;
use crate::{round3, BenchError, CpuPair};
use peregrine::Scheme;
use peregrine_proto::sender::SendMode;
use peregrine_report::model::{Cell, Scenario};

/// Measured round trips of an urgent-mode cell and of the ping-pong reference when `--count`
/// is not given (each round trip costs about 20 us on loopback TCP and UDP).
pub const DEFAULT_COUNT: u64 = 50_000;

/// Measured round trips of a normal-mode cell when `--count` is not given: each round trip
/// waits about two batch intervals (about 220 us with the default 100 us), so the default run
/// of three transports, two modes and two sizes (18 measurements) takes about 20 s, within
/// 30 s.
pub const DEFAULT_NORMAL_COUNT: u64 = 10_000;

/// What the cells of `ipc` say: it has no send modes.
pub const IPC_NOTE: &str = "ipc has no send modes: normal and urgent run the same path (a message is visible to the subscriber as soon as it is offered)";

/// `bench echo`: the transports, modes and sizes to measure, and how.
#[derive(Debug, Clone)]
pub struct EchoPlan {
    pub transports: Vec<Scheme>,
    pub modes: Vec<StreamMode>,
    pub sizes: Vec<usize>,
    /// Measured round trips of every cell, the ping-pong references included; `None`:
    /// [`DEFAULT_COUNT`], and [`DEFAULT_NORMAL_COUNT`] in normal mode.
    pub count: Option<u64>,
    /// The sender runs on `a`, the echo side on `b`.
    pub cpus: CpuPair,
}

impl EchoPlan {
    /// Checks the settings, naming any value that is not accepted and the fix.
    pub fn validate(&self) -> Result<(), BenchError> {
        let transports: Vec<&str> = self.transports.iter().map(|t| t.name()).collect();
        let modes: Vec<&str> = self.modes.iter().map(|m| m.name()).collect();
        let sizes: Vec<String> = self.sizes.iter().map(|s| s.to_string()).collect();
        let sizes: Vec<&str> = sizes.iter().map(String::as_str).collect();
        for (flag, list, what) in [
            (
                "--transport",
                &transports,
                "one or more of ipc, udp, mcast, tcp, for example tcp,udp,ipc",
            ),
            (
                "--modes",
                &modes,
                "normal, urgent or both, for example normal,urgent",
            ),
            ("--sizes", &sizes, "sizes in bytes, for example 28,1460"),
        ] {
            if list.is_empty() {
                return Err(BenchError::Config(format!(
                    "{flag} is empty: give {what}, comma-separated"
                )));
            }
            if let Some(twice) = list
                .iter()
                .enumerate()
                .find_map(|(i, v)| list[..i].contains(v).then_some(v))
            {
                return Err(BenchError::Config(format!(
                    "{flag} lists {twice} twice: give each value once"
                )));
            }
        }
        if self.count == Some(0) {
            return Err(BenchError::Config(
                "--count 0 is not accepted: give at least 1 round trip".into(),
            ));
        }
        for &transport in &self.transports {
            let max = if transport == Scheme::Ipc {
                peregrine::ipc_max_message_len(peregrine::IPC_DEFAULT_CAPACITY)
            } else {
                1 << 20
            };
            if let Some(size) = self.sizes.iter().find(|&&s| s < 8 || s > max) {
                return Err(BenchError::Config(format!(
                    "--sizes {size} is not accepted on {transport}: give sizes of 8 to {max} bytes (each message carries its 8-byte number)"
                )));
            }
        }
        for &transport in &self.transports {
            for &size in &self.sizes {
                for &mode in &self.modes {
                    crate::measure::pingpong::validate(&self.config(transport, size, mode))?;
                }
            }
        }
        Ok(())
    }

    /// The measured round trips of a cell in `mode`.
    pub fn count(&self, mode: StreamMode) -> u64 {
        match (self.count, mode) {
            (Some(n), _) => n,
            (None, StreamMode::Urgent) => DEFAULT_COUNT,
            (None, StreamMode::Normal) => DEFAULT_NORMAL_COUNT,
        }
    }

    /// The settings of one echo cell: the ping-pong's, with both streams in `mode` (and no
    /// floor bursts: the ping-pong reference measures the floor).
    pub fn config(&self, transport: Scheme, size: usize, mode: StreamMode) -> PingPongConfig {
        PingPongConfig {
            mode,
            name: crate::run_name("echo"),
            floor_every: 0,
            ..pingpong_config(transport, size, self.count(mode), self.cpus)
        }
    }

    /// The ping-pong reference of a transport and size (urgent, as `bench pingpong`).
    pub fn reference(&self, transport: Scheme, size: usize) -> PingPongConfig {
        pingpong_config(transport, size, self.count(StreamMode::Urgent), self.cpus)
    }

    /// How many measurements the run makes: per transport and size, the ping-pong and one
    /// echo per mode.
    pub fn runs(&self) -> u64 {
        (self.transports.len() * self.sizes.len() * (1 + self.modes.len())) as u64
    }
}

/// Runs the plan: per transport and size, the ping-pong reference, then the echo in each
/// mode; prints and records every cell.
pub fn echo(plan: &EchoPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.validate()?;
    let bar = progress(plan.runs(), s.out.json);
    for &transport in &plan.transports {
        for &size in &plan.sizes {
            bar.set_message(format!("{transport} {size}B ping-pong"));
            let reference = plan.reference(transport, size);
            let pp = crate::measure::pingpong::run(&reference, s.exe(), s.clock())?;
            let cell = pingpong_cell(&reference, &pp, None);
            bar.suspend(|| s.out.cell(&cell));
            s.record(cell, Some(&pp.recorder), None)?;
            bar.inc(1);
            for &mode in &plan.modes {
                bar.set_message(format!("{transport} {size}B echo, {} mode", mode.name()));
                let cfg = plan.config(transport, size, mode);
                let r = crate::measure::pingpong::run_with(
                    &cfg,
                    s.exe(),
                    s.clock(),
                    DutyCycle::EveryEmptyPoll,
                )?;
                let cell = echo_cell(&cfg, &r, &pp.summary);
                bar.suspend(|| s.out.cell(&cell));
                s.record(cell, Some(&r.recorder), None)?;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// An echo as a results cell: `echo-<transport>-<mode>-<size>B`, with its mode, its median
/// over the ping-pong's (`pingpong`), and the streams' batch intervals in normal mode.
pub fn echo_cell(cfg: &PingPongConfig, r: &PingPongResult, pingpong: &Summary) -> Cell {
    let transport = cfg.transport.name();
    let mut cell = latency_cell(Scenario::Echo, transport, cfg.size, &r.recorder);
    cell.id = format!("echo-{transport}-{}-{}B", cfg.mode.name(), cfg.size);
    cell.cpu_s.insert("sender".into(), round3(r.ping_cpu_s));
    if let Some(p) = r.pong_cpu_s {
        cell.cpu_s.insert("echo".into(), round3(p));
    }
    let d = cell.detail.echo_mut();
    d.mode = Some(cfg.mode.name().into());
    d.settings.insert("idle".into(), cfg.idle.name().into());
    d.settings.insert("cpus".into(), cfg.cpus.to_arg().into());
    d.settings
        .insert("duty_cycle".into(), "every empty poll".into());
    if pingpong.median_ns > 0.0 {
        d.median_x_pingpong = Some(round3(r.summary.median_ns / pingpong.median_ns));
    }
    d.pingpong_median_ns = Some(round3(pingpong.median_ns));
    if cfg.transport == Scheme::Ipc {
        d.note = Some(IPC_NOTE.into());
    } else if cfg.mode == StreamMode::Normal {
        d.batch_interval_us = batch_interval_us(&r.ping_uri);
        d.echo_batch_interval_us = batch_interval_us(&r.pong_uri);
    }
    cell
}

/// The batch interval of a normal-mode network stream, microseconds, as the transport reads
/// it from `uri` (its `batch_interval_us`, else the transport's default); `None` for an
/// urgent or `ipc` stream, or a URI that does not parse.
pub fn batch_interval_us(uri: &str) -> Option<f64> {
    let parsed = peregrine_transport::Uri::parse(uri).ok()?;
    if parsed.scheme == Scheme::Ipc {
        return None;
    }
    match peregrine_transport::net::NetConfig::from_uri(&parsed)
        .ok()?
        .mode
    {
        SendMode::Normal {
            batch_interval_ns, ..
        } => Some(batch_interval_ns as f64 / 1000.0),
        SendMode::Urgent => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> EchoPlan {
        EchoPlan {
            transports: vec![Scheme::Udp, Scheme::Ipc],
            modes: StreamMode::ALL.to_vec(),
            sizes: vec![28, 1460],
            count: None,
            cpus: CpuPair { a: 0, b: 1 },
        }
    }

    fn refused(p: &EchoPlan) -> String {
        p.validate().expect_err("refused").to_string()
    }

    #[test]
    fn the_default_plan_is_accepted() {
        plan().validate().unwrap();
    }

    #[test]
    fn empty_lists_and_repeated_values_are_refused_naming_the_flag() {
        let mut p = plan();
        p.modes.clear();
        let e = refused(&p);
        assert!(
            e.contains("--modes is empty") && e.contains("normal,urgent"),
            "{e}"
        );
        let mut p = plan();
        p.transports.clear();
        assert!(refused(&p).contains("--transport is empty"));
        let mut p = plan();
        p.sizes.clear();
        assert!(refused(&p).contains("--sizes is empty"));
        let mut p = plan();
        p.modes = vec![StreamMode::Urgent, StreamMode::Urgent];
        let e = refused(&p);
        assert!(e.contains("--modes lists urgent twice"), "{e}");
        let mut p = plan();
        p.sizes = vec![28, 28];
        assert!(refused(&p).contains("--sizes lists 28 twice"));
    }

    #[test]
    fn sizes_outside_the_transport_limits_are_refused_with_the_range() {
        let mut p = plan();
        p.sizes = vec![28, 4];
        let e = refused(&p);
        assert!(e.contains("--sizes 4") && e.contains("8 to"), "{e}");
        let mut p = plan();
        p.transports = vec![Scheme::Tcp];
        p.sizes = vec![(1 << 20) + 1];
        let e = refused(&p);
        assert!(e.contains("on tcp") && e.contains("8 to 1048576"), "{e}");
        let mut p = plan();
        p.count = Some(0);
        assert!(refused(&p).contains("--count 0"));
    }

    #[test]
    fn normal_mode_runs_fewer_round_trips_unless_a_count_is_given() {
        let mut p = plan();
        assert_eq!(p.count(StreamMode::Urgent), DEFAULT_COUNT);
        assert_eq!(p.count(StreamMode::Normal), DEFAULT_NORMAL_COUNT);
        assert_eq!(p.reference(Scheme::Udp, 28).count, DEFAULT_COUNT);
        p.count = Some(2000);
        assert_eq!(p.count(StreamMode::Normal), 2000);
        assert_eq!(p.reference(Scheme::Udp, 28).count, 2000);
        assert_eq!(p.runs(), 2 * 2 * 3);
    }

    #[test]
    fn each_cell_puts_both_streams_in_its_mode() {
        let p = plan();
        let (ping, pong) =
            crate::measure::pingpong::uris(&p.config(Scheme::Udp, 28, StreamMode::Normal));
        // UDP keeps its default GRO: turned on only by a backlog, which a ping-pong never has.
        assert!(
            ping.contains("mode=normal") && !ping.contains("gro"),
            "{ping}"
        );
        assert!(
            pong.contains("mode=normal") && !pong.contains("gro"),
            "{pong}"
        );
        let (ping, _) =
            crate::measure::pingpong::uris(&p.config(Scheme::Tcp, 28, StreamMode::Urgent));
        assert!(
            ping.contains("mode=urgent") && !ping.contains("gro"),
            "{ping}"
        );
        let (ping, pong) =
            crate::measure::pingpong::uris(&p.config(Scheme::Ipc, 28, StreamMode::Normal));
        assert!(!ping.contains('?') && !pong.contains('?'), "{ping} {pong}");
        // The reference is the ping-pong as `bench pingpong` runs it.
        let (ping, _) = crate::measure::pingpong::uris(&p.reference(Scheme::Udp, 28));
        assert!(ping.contains("mode=urgent"), "{ping}");
    }

    #[test]
    fn the_batch_interval_is_read_as_the_transport_reads_it() {
        assert_eq!(
            batch_interval_us("udp://127.0.0.1:4000?mode=normal&gro=0"),
            Some(100.0)
        );
        assert_eq!(
            batch_interval_us("tcp://127.0.0.1:4000?mode=normal&batch_interval_us=250"),
            Some(250.0)
        );
        assert_eq!(batch_interval_us("udp://127.0.0.1:4000?mode=urgent"), None);
        assert_eq!(batch_interval_us("ipc://bench-echo-1-ping"), None);
    }

    fn result(median_ns: f64) -> PingPongResult {
        let mut recorder = crate::stats::LatencyRecorder::new();
        for _ in 0..10 {
            recorder.record(median_ns);
        }
        PingPongResult {
            summary: recorder.summary(),
            recorder,
            ping_cpu_s: 0.5,
            pong_cpu_s: Some(0.4),
            floor: None,
            ping_uri: "udp://127.0.0.1:40001?mode=normal&gro=0".into(),
            pong_uri: "udp://127.0.0.1:40002?mode=normal&gro=0&batch_interval_us=50".into(),
        }
    }

    #[test]
    fn an_echo_cell_carries_its_mode_ratio_and_batch_intervals() {
        let p = plan();
        let pingpong = result(10_000.0).summary;
        let cfg = p.config(Scheme::Udp, 28, StreamMode::Normal);
        let c = echo_cell(&cfg, &result(110_000.0), &pingpong);
        assert_eq!(c.id, "echo-udp-normal-28B");
        assert_eq!(c.scenario, Some(Scenario::Echo));
        assert_eq!(c.transport, "udp");
        let d = c.detail.echo().unwrap();
        assert_eq!(d.mode.as_deref(), Some("normal"));
        let ratio = d.median_x_pingpong.unwrap();
        assert!((ratio - 11.0).abs() < 0.05, "{ratio}");
        assert_eq!(d.batch_interval_us, Some(100.0));
        assert_eq!(d.echo_batch_interval_us, Some(50.0));
        assert_eq!(c.latency.unwrap().samples, 10);
        assert_eq!(c.cpu_s["sender"], 0.5);

        let cfg = p.config(Scheme::Ipc, 28, StreamMode::Normal);
        let c = echo_cell(&cfg, &result(300.0), &pingpong);
        assert_eq!(c.id, "echo-ipc-normal-28B");
        let d = c.detail.echo().unwrap();
        assert_eq!(d.note.as_deref(), Some(IPC_NOTE));
        assert_eq!(d.batch_interval_us, None);
    }
}
