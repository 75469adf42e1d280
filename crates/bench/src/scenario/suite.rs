//! `peregrine bench` with no subcommand: the floor, IPC ping-pong at 32 and 256 bytes, UDP
//! ping-pong at 32 bytes against the bare-socket ping-pong, as root the kernel-bypass comparison
//! at 64 bytes across a veth pair (kernel udp, xdp, sockperf), the machine's jitter on both CPUs
//! (2 s), a short IPC and UDP load sweep
//! (32, 256 and 1024 bytes at 100K, 500K and 1M msgs/s, each cell with its floor under load and
//! the cache-line floor measured around it), IPC and UDP throughput, and one short market data
//! fan-out probe (16 clients, 50% shared, 200K updates/s into the distributor for 2 s). About a
//! minute and a half on 2 cores. The ping-pongs measure the cache-line floor in bursts between
//! blocks of pings, so their ratios are to the floor of their own moment.

use super::latency::{self, pingpong_cell, pingpong_config};
use super::paced::{Pacing, SweepPlan};
use super::Session;
use crate::measure::floor::FloorConfig;
use crate::measure::raw::RawConfig;
use crate::measure::throughput::ThroughputConfig;
use crate::{BenchError, CpuPair};
use peregrine::{IdleKind, Scheme, SlowSubscriberPolicy};
use std::time::Duration;

/// Runs the default suite.
pub fn run(s: &mut Session) -> Result<(), BenchError> {
    let cpus = CpuPair::default_pair();
    if !s.out.json {
        print_machine(s, cpus);
    }
    let floor = latency::floor(
        &FloorConfig {
            count: 1_000_000,
            warmup_count: 100_000,
            cpus,
        },
        s,
    )?;
    for size in [32, 256] {
        let cfg = pingpong_config(Scheme::Ipc, size, 1_000_000, cpus);
        let r = crate::measure::pingpong::run(&cfg, s.exe(), s.clock())?;
        s.show_and_record(
            pingpong_cell(&cfg, &r, Some(&floor)),
            Some(&r.recorder),
            None,
        )?;
    }
    // UDP on loopback: the bare-socket ping-pong is the floor of the network path.
    let raw = latency::raw(
        &RawConfig {
            transport: Scheme::Udp,
            size: 32,
            count: 200_000,
            warmup_count: 20_000,
            cpus,
            busy_poll: true,
        },
        s,
    )?;
    let cfg = pingpong_config(Scheme::Udp, 32, 200_000, cpus);
    let r = crate::measure::pingpong::run(&cfg, s.exe(), s.clock())?;
    s.show_and_record(pingpong_cell(&cfg, &r, Some(&raw)), Some(&r.recorder), None)?;
    // UDP across a veth pair through the kernel and through AF_XDP (root only).
    super::bypass::suite(s, cpus)?;
    // The machine's own jitter, measured just before the load runs whose tails it bounds.
    super::jitter::run(
        &crate::jitter::JitterConfig {
            cpus: if cpus.a == cpus.b {
                vec![cpus.a]
            } else {
                vec![cpus.a, cpus.b]
            },
            seconds: 2.0,
        },
        s,
    )?;
    super::paced::sweep(
        &SweepPlan {
            transports: vec![Scheme::Ipc, Scheme::Udp],
            sizes: vec![32, 256, 1024],
            rates: vec![100_000.0, 500_000.0, 1_000_000.0],
            pacing: Pacing {
                seconds: 2.0,
                warmup_seconds: 0.5,
                ping_every: None,
                cpus,
                idle: IdleKind::Spin,
            },
        },
        s,
    )?;
    for (transport, size) in [
        (Scheme::Ipc, 32),
        (Scheme::Ipc, 256),
        (Scheme::Udp, 32),
        (Scheme::Udp, 256),
    ] {
        let cfg = ThroughputConfig {
            transport,
            size,
            seconds: 2.0,
            count: None,
            subscribers: 1,
            policy: SlowSubscriberPolicy::BackPressure,
            capacity: peregrine::IPC_DEFAULT_CAPACITY,
            cpus: Some(cpus),
            name: crate::run_name("tp"),
            connect_timeout: Duration::from_secs(20),
            idle: IdleKind::Spin,
            uri: None,
            loss: None,
            group: false,
            sub_netns: None,
        };
        super::throughput::run(&cfg, s)?;
    }
    let fanout = crate::fanout::FanoutConfig {
        clients: 16,
        items_per_client: 400,
        overlap: 0.5,
        size: 74,
        mode: crate::fanout::WriteMode::Throughput,
        seconds: 2.0,
        warmup_seconds: 0.5,
        max_lag_ms: 100.0,
        seed: 1,
        client_busy_poll_us: 0,
        pin: None,
        backbone_datagram: crate::fanout::LOOPBACK_DATAGRAM,
        backbone_sealed: true,
        client_tls: false,
        client_websocket: false,
        attack: None,
    };
    if !s.out.json {
        println!(
            "market data fan-out: feed, distributor and 16 clients, 400 items each, half shared, 74 B updates (the search: peregrine bench fanout)"
        );
    }
    super::fanout::suite_probe(&fanout, 200_000.0, s)?;
    Ok(())
}

/// The suite's header: what `results.json` records of the machine.
fn print_machine(s: &Session, cpus: CpuPair) {
    let m = crate::results::machine(s.clock(), cpus);
    println!("Peregrine {} benchmark", env!("CARGO_PKG_VERSION"));
    println!(
        "machine: {}, {} CPUs allowed, kernel {}, clocksource {}",
        m.cpu_model,
        m.cpus_allowed.len(),
        m.kernel,
        m.clocksource
    );
    println!("clock:   {}", m.clock);
    println!(
        "cpus:    measuring side on {}, other side on {}",
        cpus.a, cpus.b
    );
}
