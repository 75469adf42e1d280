//! Round-trip scenarios: the machine's floor, the bare-socket ping-pong, and the ping-pong over
//! a Peregrine transport with its ratio to the floor of the same run and, on request, the
//! same ping-pong measured by sockperf.

use super::Session;
use crate::clock::Clock;
use crate::measure::floor::FloorConfig;
use crate::measure::pingpong::{PingPongConfig, PingPongResult, StreamMode};
use crate::measure::raw::RawConfig;
use crate::output::{Printer, ResultLine};
use crate::sockperf::SockperfConfig;
use crate::stats::{LatencyRecorder, Summary};
use crate::{round3, BenchError, CpuPair};
use peregrine::{IdleKind, Scheme};
use peregrine_report::model::{Cell, Scenario};
use std::collections::BTreeMap;
use std::time::Duration;

/// `bench pingpong`: the ping-pong, what it is compared with, and whether to run only the floor.
#[derive(Debug, Clone)]
pub struct PingPongPlan {
    pub cfg: PingPongConfig,
    /// Measure the floor first (the cache-line ping-pong for `ipc`, the bare-socket ping-pong
    /// of the same transport otherwise) and print the ratio to it.
    pub floor: bool,
    /// Only the bare-socket ping-pong (network transports).
    pub raw_only: bool,
    /// Also run sockperf's ping-pong with the same settings.
    pub compare_sockperf: bool,
}

impl PingPongPlan {
    /// Checks the settings, naming any value that is not accepted.
    pub fn validate(&self) -> Result<(), BenchError> {
        crate::measure::pingpong::validate(&self.cfg)?;
        let net = self.cfg.transport != Scheme::Ipc;
        if (self.raw_only || self.compare_sockperf) && !net {
            return Err(BenchError::Config(
                "--raw and --compare apply to the network transports: give --transport udp, mcast or tcp (the floor of ipc is `peregrine bench floor`)".into(),
            ));
        }
        if net && (self.raw_only || self.floor) {
            crate::measure::raw::validate(&self.raw_config())?;
        }
        if self.compare_sockperf && crate::sockperf::available().is_none() {
            return Err(BenchError::Config(
                "--compare sockperf needs the sockperf program: install it with `apt-get install sockperf`".into(),
            ));
        }
        Ok(())
    }

    /// The bare-socket ping-pong of the same transport, size, count and CPUs.
    pub fn raw_config(&self) -> RawConfig {
        raw_config_of(&self.cfg)
    }

    fn sockperf_config(&self, port: u16) -> SockperfConfig {
        SockperfConfig {
            transport: self.cfg.transport,
            size: self.cfg.size,
            cpus: self.cfg.cpus,
            busy_poll: self.cfg.idle != IdleKind::Block,
            seconds: 3,
            port,
            across: None,
            mps: None,
        }
    }
}

fn raw_config_of(cfg: &PingPongConfig) -> RawConfig {
    RawConfig {
        transport: cfg.transport,
        size: cfg.size,
        count: cfg.count,
        warmup_count: cfg.warmup_count,
        cpus: cfg.cpus,
        busy_poll: cfg.idle != IdleKind::Block,
    }
}

/// Runs the floor, prints and records it; returns its summary.
pub fn floor(cfg: &FloorConfig, s: &mut Session) -> Result<Summary, BenchError> {
    let r = crate::measure::floor::run(cfg, s.exe(), s.clock())?;
    let cell = floor_cell(cfg.cpus, &r);
    let summary = r.summary();
    s.show_and_record(cell, Some(&r), None)?;
    Ok(summary)
}

fn floor_cell(cpus: CpuPair, r: &LatencyRecorder) -> Cell {
    let mut cell = latency_cell(Scenario::Floor, "cacheline", 8, r);
    let d = &mut cell.detail.latency_mut().settings;
    d.insert("cpus".into(), cpus.to_arg().into());
    cell
}

/// Runs the bare-socket ping-pong, prints and records it; returns its summary.
pub fn raw(cfg: &RawConfig, s: &mut Session) -> Result<Summary, BenchError> {
    crate::measure::raw::validate(cfg)?;
    let r = crate::measure::raw::run(cfg, s.exe(), s.clock())?;
    let mut cell = latency_cell(Scenario::Raw, cfg.transport.name(), cfg.size, &r);
    let d = &mut cell.detail.latency_mut().settings;
    d.insert("cpus".into(), cfg.cpus.to_arg().into());
    d.insert("busy_poll".into(), cfg.busy_poll.into());
    let summary = r.summary();
    s.show_and_record(cell, Some(&r), None)?;
    Ok(summary)
}

/// `bench pingpong`: the floor (unless turned off), the ping-pong with its ratio to it, and
/// sockperf's ping-pong with the ratios to it.
pub fn pingpong(plan: &PingPongPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.validate()?;
    let cfg = &plan.cfg;
    if plan.raw_only {
        raw(&plan.raw_config(), s)?;
        return Ok(());
    }
    // sockperf's settings (and a free port) are checked before anything runs, so a failure
    // shows before measuring.
    let sockperf = match plan.compare_sockperf {
        true => {
            let sc = plan.sockperf_config(crate::sockperf::free_port(cfg.transport)?);
            crate::sockperf::validate(&sc)?;
            Some(sc)
        }
        false => None,
    };
    let floor = match (plan.floor, cfg.transport == Scheme::Ipc) {
        (false, _) => None,
        (true, true) => Some(self::floor(
            &FloorConfig {
                count: cfg.count.min(1_000_000),
                warmup_count: cfg.warmup_count.min(100_000),
                cpus: cfg.cpus,
            },
            s,
        )?),
        (true, false) => Some(raw(&plan.raw_config(), s)?),
    };
    let r = crate::measure::pingpong::run(cfg, s.exe(), s.clock())?;
    let mut cell = pingpong_cell(cfg, &r, floor.as_ref());
    let Some(sc) = sockperf else {
        return s.show_and_record(cell, Some(&r.recorder), None);
    };
    let theirs = crate::sockperf::run(&sc)?;
    let (server, client) = crate::sockperf::command_lines(&sc);
    let ours = &r.summary;
    for (k, v) in [
        ("median_x_sockperf", ours.median_ns / theirs.median_ns),
        ("p999_x_sockperf", ours.p999_ns / theirs.p999_ns),
        ("sockperf_median_ns", theirs.median_ns),
        ("sockperf_p99_ns", theirs.p99_ns),
        ("sockperf_p999_ns", theirs.p999_ns),
        ("sockperf_mean_ns", theirs.mean_ns),
    ] {
        let d = &mut cell.detail.latency_mut().settings;
        d.insert(k.into(), round3(v).into());
    }
    let d = &mut cell.detail.latency_mut().settings;
    d.insert("sockperf_client".into(), client.clone().into());
    // sockperf's own samples are not ours to log: its figures go with our cell.
    s.show_and_record(cell, Some(&r.recorder), None)?;
    let line = ResultLine::latency("sockperf", cfg.transport.name(), cfg.size, &theirs)
        .detail("server", server)
        .detail("client", client.clone());
    s.out.print(&line);
    if !s.out.json {
        println!(
            "peregrine / sockperf: median {:.2}x, 99.9th {:.2}x   (sockperf: {client})",
            ours.median_ns / theirs.median_ns,
            ours.p999_ns / theirs.p999_ns
        );
    }
    Ok(())
}

/// The ping side alone (`--role ping`), its pong started by hand elsewhere: prints the
/// result; records nothing.
pub fn ping_role(cfg: &PingPongConfig, json: bool) -> Result<(), BenchError> {
    let clock = Clock::calibrate(Duration::from_millis(50));
    let r = crate::measure::pingpong::ping(cfg, &clock)?;
    Printer::new(json).cell(&pingpong_cell(cfg, &r, None));
    Ok(())
}

/// A ping-pong as a results cell, with its ratios to `floor` when one was measured.
pub fn pingpong_cell(cfg: &PingPongConfig, r: &PingPongResult, floor: Option<&Summary>) -> Cell {
    let mut cell = latency_cell(
        Scenario::Pingpong,
        cfg.transport.name(),
        cfg.size,
        &r.recorder,
    );
    cell.cpu_s.insert("ping".into(), round3(r.ping_cpu_s));
    if let Some(p) = r.pong_cpu_s {
        cell.cpu_s.insert("pong".into(), round3(p));
    }
    let detail = cell.detail.latency_mut();
    let d = &mut detail.settings;
    d.insert("idle".into(), cfg.idle.name().into());
    if cfg.group {
        // The pings went through a failover group of one member (the header, the arbiter).
        d.insert(
            "failover_group".into(),
            crate::measure::pingpong::GROUP.into(),
        );
    }
    d.insert("cpus".into(), cfg.cpus.to_arg().into());
    if cfg.idle == IdleKind::Block {
        let waits = if cfg.transport == Scheme::Ipc {
            "a sleeping process (futex)"
        } else {
            "a process sleeping in poll(2)"
        };
        d.insert(
            "note".into(),
            format!("blocking receive: each message wakes {waits}, which costs ~30 us across cores on a KVM guest").into(),
        );
    }
    // The floor of the moment: cache-line bursts between blocks of pings.
    let moments = r.floor.as_ref().filter(|m| !m.bursts_ns.is_empty());
    if let Some(m) = moments {
        detail.floor_ns = Some(round3(m.floor_ns()));
        let d = &mut detail.settings;
        d.insert(
            "floor_bursts_ns".into(),
            m.bursts_ns
                .iter()
                .map(|v| round3(*v))
                .collect::<Vec<_>>()
                .into(),
        );
        d.insert("floor_spread".into(), round3(m.spread()).into());
        d.insert(
            "two_line_floor_ns".into(),
            round3(m.two_line_floor_ns()).into(),
        );
        d.insert(
            "blocks_steady_floor".into(),
            m.same_moment_ratios().len().into(),
        );
        d.insert("blocks".into(), m.blocks_ns.len().into());
        detail.median_x_two_line_floor = m.median_x_two_line_floor().map(round3);
        detail.floor_moved = Some(m.moved());
    }
    match (cfg.transport, moments) {
        // Shared memory's floor is the cache line: each block against the bursts around it.
        (Scheme::Ipc, Some(m)) => {
            detail.median_x_floor = m.median_x_floor().map(round3);
            if m.floor_ns() > 0.0 {
                detail.p99_x_floor = Some(round3(r.summary.p99_ns / m.floor_ns()));
            }
        }
        // A floor measured before the run (the bare-socket ping-pong for the network).
        _ => {
            if let Some(f) = floor.filter(|f| f.median_ns > 0.0) {
                detail.median_x_floor = Some(round3(r.summary.median_ns / f.median_ns));
                detail.p99_x_floor = Some(round3(r.summary.p99_ns / f.median_ns));
            }
        }
    }
    cell
}

/// A latency cell of `samples` (half round trips), its id `<scenario>-<transport>-<size>B`.
pub(super) fn latency_cell(
    kind: Scenario,
    transport: &str,
    size: usize,
    samples: &LatencyRecorder,
) -> Cell {
    let s = samples.summary();
    let label = match kind {
        Scenario::Floor => "floor",
        Scenario::Raw => "raw",
        Scenario::Echo => "echo",
        _ => "pingpong",
    };
    Cell {
        id: format!("{label}-{transport}-{size}B"),
        scenario: Some(kind),
        transport: transport.to_string(),
        size_bytes: size,
        sent: s.samples,
        received: s.samples,
        latency: Some(s),
        cpu_s: BTreeMap::new(),
        ..Default::default()
    }
}

/// The settings of the suite's and the sweep's ping-pongs: spin, no URI given.
pub(crate) fn pingpong_config(
    transport: Scheme,
    size: usize,
    count: u64,
    cpus: CpuPair,
) -> PingPongConfig {
    PingPongConfig {
        transport,
        size,
        count,
        warmup_count: count / 10,
        cpus,
        idle: IdleKind::Spin,
        name: crate::run_name("pp"),
        connect_timeout: Duration::from_secs(20),
        ping_uri: None,
        pong_uri: None,
        floor_every: crate::measure::pingpong::default_floor_every(count),
        floor_line: None,
        mode: StreamMode::Urgent,
        group: false,
        pong_netns: None,
    }
}
