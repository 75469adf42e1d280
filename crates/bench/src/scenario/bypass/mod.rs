//! The seeds' comparison, "UDP through the kernel vs kernel bypass", on the user's machine:
//! the same measurement over a veth pair between two network namespaces this run creates
//! ([`crate::netns::VethPair`]), through the kernel's UDP stack (`udp`), through Peregrine's
//! AF_XDP path (`xdp`: the same URIs with `xdp=`), and (ping-pong and load) sockperf over the
//! same pair where it is installed. The paths run one after the other on one pair, so their
//! cells are measured seconds apart; compare cells of one run only.
//!
//! **Files.** `pingpong.rs`: the ping-pong, size by size (the seeds' table); `load.rs`: load
//! with pings at one rate; `throughput.rs`: unpaced throughput. Each runs its paths on one
//! veth pair it creates and drops.

mod load;
mod pingpong;
mod throughput;

pub use load::{load, load_in, BypassLoad, BypassLoadCell, PATH};
pub use pingpong::{pingpong, run, validate, BypassConfig, BypassRow, DEFAULT_SIZES};
pub use throughput::{throughput, throughput_in, BypassThroughput};

use crate::{BenchError, CpuPair};
use pingpong::record_row;

/// A path the comparison measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Peregrine through the kernel's UDP stack.
    Kernel,
    /// Peregrine through AF_XDP (`xdp=`).
    Xdp,
    /// sockperf's ping-pong over the same pair (busy-polling, through the kernel).
    Sockperf,
}

impl Path {
    /// The `transport` its results carry.
    pub fn name(self) -> &'static str {
        match self {
            Path::Kernel => "udp",
            Path::Xdp => "xdp",
            Path::Sockperf => "sockperf",
        }
    }
}

/// The default suite's part: the 64-byte rows of the three paths when this process runs as
/// root (one line saying why not otherwise), recorded with the run's other cells.
pub fn suite(s: &mut crate::scenario::Session, cpus: CpuPair) -> Result<(), BenchError> {
    if !rustix::process::geteuid().is_root() {
        if !s.out.json {
            println!("kernel bypass (xdp) skipped: it creates network namespaces and loads an XDP program, which needs root (peregrine bench pingpong --transport xdp --netns)");
        }
        return Ok(());
    }
    let cfg = BypassConfig {
        sizes: vec![64],
        count: 200_000,
        warmup_count: 20_000,
        cpus,
        sockperf: true,
        exe: s.exe().to_path_buf(),
    };
    if !s.out.json {
        println!("kernel bypass: udp through the kernel, through AF_XDP, and sockperf, across a veth pair (peregrine bench pingpong --transport xdp --netns)");
    }
    let mut recorded = Ok(());
    run(&cfg, |r| {
        if recorded.is_ok() {
            recorded = record_row(r, s);
        }
    })?;
    recorded
}
