//! What `peregrine bench` runs: each [`Scenario`] measures, prints its results as they come,
//! and records them as cells of one results folder, whose report is rendered at the end.
//!
//! The modules below the scenarios ([`crate::measure::floor`], [`crate::measure::pingpong`], [`crate::measure::load`], ...)
//! measure one thing between two processes; a scenario puts measurements together (a floor
//! before a ping-pong, a sweep of load runs, the default suite) and turns each into a
//! [`Cell`] of the report's model.
//!
//! - [`latency`]: the floor, the bare-socket ping-pong, the ping-pong (with its floor and the
//!   sockperf comparison);
//! - [`echo`]: the half round trip in normal (batched) and urgent mode, against the ping-pong
//!   (Reflex);
//! - [`throughput`]: unpaced throughput;
//! - [`paced`]: load with pings, the size x rate sweep, the maximum search, embedded
//!   timestamps;
//! - [`fanout`]: market data fan-out through a distribution tier, and its latency table;
//! - [`failover`]: a failover group's members killed in turn under a steady stream;
//! - [`suite`]: the default suite.

pub mod bypass;
pub mod echo;
pub mod failover;
pub mod fanout;
pub mod jitter;
pub mod latency;
pub mod paced;
pub mod suite;
pub mod throughput;

use crate::clock::Clock;
use crate::output::Printer;
use crate::results::ResultsFolder;
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use peregrine_report::model::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One `peregrine bench` measurement, with its settings validated by its module.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Scenario {
    /// The default suite.
    Suite,
    Floor(crate::measure::floor::FloorConfig),
    Pingpong(latency::PingPongPlan),
    /// Echo in normal and urgent mode, with the ping-pong of each transport and size.
    Echo(echo::EchoPlan),
    Throughput(crate::measure::throughput::ThroughputConfig),
    Load(crate::measure::load::LoadConfig),
    Sweep(paced::SweepPlan),
    Max(paced::MaxPlan),
    Latency(paced::EmbeddedPlan),
    Fanout(fanout::FanoutPlan),
    MdLatency(fanout::MdLatencyPlan),
    Jitter(crate::jitter::JitterConfig),
    Failover(failover::FailoverPlan),
    /// The ping-pong across a veth pair through the kernel, AF_XDP and sockperf.
    Bypass(bypass::BypassConfig),
    /// Unpaced throughput across a veth pair through the kernel and AF_XDP.
    BypassThroughput(bypass::BypassThroughput),
    /// Load with pings across a veth pair through the kernel, AF_XDP and sockperf.
    BypassLoad(bypass::BypassLoad),
}

impl Scenario {
    /// The results folder's name suffix.
    fn label(&self) -> &'static str {
        match self {
            Scenario::Suite => "suite",
            Scenario::Floor(_) => "floor",
            Scenario::Pingpong(_) => "pingpong",
            Scenario::Echo(_) => "echo",
            Scenario::Throughput(_) => "throughput",
            Scenario::Load(_) => "load",
            Scenario::Sweep(_) => "sweep",
            Scenario::Max(_) => "max",
            Scenario::Latency(_) => "latency",
            Scenario::Fanout(_) => "fanout",
            Scenario::MdLatency(_) => "fanout-latency",
            Scenario::Jitter(_) => "jitter",
            Scenario::Failover(_) => "failover",
            Scenario::Bypass(_) => "bypass",
            Scenario::BypassThroughput(_) => "bypass-throughput",
            Scenario::BypassLoad(_) => "bypass-load",
        }
    }

    /// The CPUs its two sides run on (recorded with the machine).
    fn cpus(&self) -> CpuPair {
        match self {
            Scenario::Suite => CpuPair::default_pair(),
            Scenario::Floor(c) => c.cpus,
            Scenario::Pingpong(p) => p.cfg.cpus,
            Scenario::Echo(p) => p.cpus,
            Scenario::Throughput(c) => c.cpus.unwrap_or_else(CpuPair::default_pair),
            Scenario::Load(c) => c.cpus,
            Scenario::Sweep(p) => p.pacing.cpus,
            Scenario::Max(p) => p.pacing.cpus,
            Scenario::Latency(p) => p.pacing.cpus,
            // Not pinned: the feed, the tier and N clients share every CPU.
            Scenario::Fanout(_) | Scenario::MdLatency(_) => CpuPair::default_pair(),
            Scenario::Failover(p) => p.cfg.cpus,
            Scenario::Bypass(c) => c.cpus,
            Scenario::BypassThroughput(c) => c.cpus,
            Scenario::BypassLoad(c) => c.cpus,
            Scenario::Jitter(c) => CpuPair {
                a: c.cpus[0],
                b: *c.cpus.get(1).unwrap_or(&c.cpus[0]),
            },
        }
    }

    /// Whether the run ends with the seeds' tables (the scenarios that make them).
    fn prints_tables(&self) -> bool {
        matches!(
            self,
            Scenario::Suite
                | Scenario::Echo(_)
                | Scenario::Load(_)
                | Scenario::Sweep(_)
                | Scenario::Max(_)
                | Scenario::Latency(_)
                | Scenario::Fanout(_)
                | Scenario::MdLatency(_)
                | Scenario::Jitter(_)
                | Scenario::Failover(_)
                | Scenario::Bypass(_)
                | Scenario::BypassLoad(_)
        )
    }
}

/// Where a run's results go and how they are shown.
#[derive(Debug)]
pub struct Session {
    pub out: Printer,
    folder: ResultsFolder,
    clock: Clock,
    /// This program, started again for the helper processes.
    exe: PathBuf,
}

impl Session {
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Adds a cell to the results folder, with its samples (`from_schedule`: the corrected
    /// latency of a paced cell).
    pub fn record(
        &mut self,
        cell: Cell,
        from_send: Option<&LatencyRecorder>,
        from_schedule: Option<&LatencyRecorder>,
    ) -> Result<(), BenchError> {
        self.folder.add(cell, from_send, from_schedule)?;
        Ok(())
    }

    /// Prints a cell and adds it to the results folder.
    pub fn show_and_record(
        &mut self,
        cell: Cell,
        from_send: Option<&LatencyRecorder>,
        from_schedule: Option<&LatencyRecorder>,
    ) -> Result<(), BenchError> {
        self.out.cell(&cell);
        self.record(cell, from_send, from_schedule)
    }
}

/// How a run is started and shown.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// One JSON object per result instead of tables.
    pub json: bool,
    /// The results folder (default: a new dated folder, see [`crate::results::default_base`]).
    pub out: Option<PathBuf>,
    /// The command line, recorded in the folder.
    pub command_line: Vec<String>,
    /// This program, started again (`peregrine helper ...`) for the other side of each
    /// measurement.
    pub exe: PathBuf,
}

/// Runs a scenario into a new results folder and renders its report. The folder is removed
/// when nothing was measured (a rejected setting, a failure before the first cell).
pub fn run(scenario: Scenario, opts: RunOptions) -> Result<(), BenchError> {
    let clock = Clock::calibrate(Duration::from_millis(50));
    let folder = ResultsFolder::create(
        opts.out.as_deref(),
        scenario.label(),
        opts.command_line,
        &clock,
        scenario.cpus(),
    )?;
    let dir = folder.dir().to_path_buf();
    let tables = scenario.prints_tables();
    let mut session = Session {
        out: Printer::new(opts.json),
        folder,
        clock,
        exe: opts.exe,
    };
    let result = match scenario {
        Scenario::Suite => suite::run(&mut session),
        Scenario::Floor(cfg) => latency::floor(&cfg, &mut session).map(|_| ()),
        Scenario::Pingpong(plan) => latency::pingpong(&plan, &mut session),
        Scenario::Echo(plan) => echo::echo(&plan, &mut session),
        Scenario::Throughput(cfg) => throughput::run(&cfg, &mut session),
        Scenario::Load(cfg) => paced::load(&cfg, &mut session),
        Scenario::Sweep(plan) => paced::sweep(&plan, &mut session),
        Scenario::Max(plan) => paced::max(&plan, &mut session),
        Scenario::Latency(plan) => paced::embedded(&plan, &mut session),
        Scenario::Fanout(plan) => fanout::fanout(&plan, &mut session),
        Scenario::MdLatency(plan) => fanout::md_latency(&plan, &mut session),
        Scenario::Jitter(cfg) => jitter::run(&cfg, &mut session).map(drop),
        Scenario::Failover(plan) => failover::run(&plan, &mut session),
        Scenario::Bypass(cfg) => bypass::pingpong(&cfg, &mut session),
        Scenario::BypassThroughput(cfg) => bypass::throughput_in(&cfg, &mut session),
        Scenario::BypassLoad(cfg) => bypass::load_in(&cfg, &mut session),
    };
    if session.folder.results().cells.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return result;
    }
    let json = session.out.json;
    match peregrine_report::render(&dir) {
        Ok(r) => {
            if tables && !json {
                println!();
                print!("{}", r.text);
            }
            let say = format!(
                "results: {}\nreport:  {}",
                dir.display(),
                r.html_path.display()
            );
            if json {
                eprintln!("{say}");
            } else {
                println!();
                println!("{say}");
            }
        }
        Err(e) => eprintln!(
            "results: {} (the report could not be rendered: {e})",
            dir.display()
        ),
    }
    result
}

/// A progress bar for a run of `len` cells (hidden when printing JSON).
pub(crate) fn progress(len: u64, json: bool) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} runs, about {eta} left  {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    if json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}
