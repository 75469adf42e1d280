//! `peregrine`: the command-line front end.
//!
//! Flags are defined once, here, with clap; their values are validated into the benchmark
//! configurations, and every rejected value is named together with what is accepted.

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use peregrine::{IdleKind, SlowSubscriberPolicy};
use peregrine_bench::clock::Clock;
use peregrine_bench::floor::FloorConfig;
use peregrine_bench::output::{Printer, ResultLine};
use peregrine_bench::pingpong::PingPongConfig;
use peregrine_bench::raw::RawConfig;
use peregrine_bench::sockperf::SockperfConfig;
use peregrine_bench::stats::Summary;
use peregrine_bench::throughput::ThroughputConfig;
use peregrine_bench::CpuPair;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "peregrine",
    version,
    about = "Peregrine: low-latency publish/subscribe for trading and market data"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure latency and throughput on this machine (no subcommand: the default suite).
    Bench(BenchArgs),
}

#[derive(Args, Debug)]
struct BenchArgs {
    #[command(subcommand)]
    scenario: Option<Scenario>,
    /// Print one JSON object per result line instead of tables.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// The machine's floor: a cache-line ping-pong between two processes on two cores.
    Floor(FloorArgs),
    /// Half round trip over a transport between two processes, with its ratio to the floor.
    Pingpong(PingPongArgs),
    /// One publisher, N subscriber processes: messages per second, every sequence checked.
    Throughput(ThroughputArgs),
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Two CPUs, `A,B`: the measuring side runs on A, the other on B (default: the first two).
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<CpuPair>,
    /// Run one side only (the other side is started by hand with the same --name).
    #[arg(long, value_enum)]
    role: Option<Role>,
    /// Name of the shared-memory segments, to pair sides started by hand.
    #[arg(long)]
    name: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    Ping,
    Pong,
    Pub,
    Sub,
}

#[derive(Args, Debug)]
struct FloorArgs {
    /// Measured round trips.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// Round trips before measuring.
    #[arg(long, default_value_t = 100_000)]
    warmup: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct PingPongArgs {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless --ping-uri and
    /// --pong-uri say otherwise).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// URI of the ping stream (ping side publishes, pong side subscribes), e.g.
    /// udp://10.0.0.1:40001: for two hosts, give the same --ping-uri and --pong-uri to both
    /// sides. `mode=urgent` is added unless the URI names a mode.
    #[arg(long)]
    ping_uri: Option<String>,
    /// URI of the pong stream (pong side publishes, ping side subscribes).
    #[arg(long)]
    pong_uri: Option<String>,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Measured round trips.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// Round trips before measuring.
    #[arg(long, default_value_t = 100_000)]
    warmup: u64,
    /// What a side does when there is nothing to read: spin, yield, backoff or block.
    #[arg(long, default_value = "spin", value_parser = parse_idle)]
    idle: IdleKind,
    /// Do not measure the floor first (no ratio column). The floor of ipc is the cache-line
    /// ping-pong; the floor of udp, mcast and tcp is the bare-socket ping-pong (--raw).
    #[arg(long)]
    no_floor: bool,
    /// Only the bare-socket ping-pong (udp, mcast, tcp): the baseline of Peregrine's overhead.
    #[arg(long)]
    raw: bool,
    /// Also run another implementation's ping-pong with the same size, transport, busy-poll
    /// mode and CPUs, and print its row and the ratios: `sockperf` (the Debian package).
    #[arg(long, value_parser = ["sockperf"])]
    compare: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct ThroughputArgs {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless --uri says otherwise).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// The stream's URI, for sides started by hand or on two hosts (the publisher binds it).
    #[arg(long)]
    uri: Option<String>,
    /// Message size in bytes.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// How long to publish.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Publish exactly this many messages instead of for --seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Subscriber processes.
    #[arg(long, default_value_t = 1)]
    subscribers: u32,
    /// What happens when a subscriber falls a whole log behind: backpressure or overwrite.
    #[arg(long, default_value = "backpressure", value_parser = parse_policy)]
    policy: SlowSubscriberPolicy,
    /// Log size in bytes, a power of two from 64k to 4g (suffixes k, m, g).
    #[arg(long, default_value = "16m", value_parser = parse_capacity)]
    capacity: u64,
    /// What subscribers do when there is nothing to read: spin, yield, backoff or block.
    #[arg(long, default_value = "spin", value_parser = parse_idle)]
    idle: IdleKind,
    /// udp, mcast: each subscriber drops this fraction of the datagrams it receives (a seeded
    /// loss generator) and repairs them by NAK, e.g. 1%.
    #[arg(long)]
    loss: Option<String>,
    #[command(flatten)]
    common: Common,
}

fn parse_cpus(s: &str) -> Result<CpuPair, String> {
    CpuPair::parse(s).map_err(|e| e.to_string())
}
fn parse_idle(s: &str) -> Result<IdleKind, String> {
    s.parse::<IdleKind>().map_err(|e| e.to_string())
}
fn parse_policy(s: &str) -> Result<SlowSubscriberPolicy, String> {
    match s {
        "backpressure" => Ok(SlowSubscriberPolicy::BackPressure),
        "overwrite" => Ok(SlowSubscriberPolicy::Overwrite),
        _ => Err(format!(
            "'{s}' is not a policy: use backpressure or overwrite"
        )),
    }
}
fn parse_capacity(s: &str) -> Result<u64, String> {
    peregrine::parse_bytes(s)
        .filter(|c| c.is_power_of_two() && (64 << 10..=1 << 32).contains(c))
        .ok_or_else(|| {
            format!("'{s}' is not accepted: give a power of two from 64k to 4g, for example 16m")
        })
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Bench(b) => bench(b),
    }
}

fn exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find this program's own path to start helper processes")
}

fn connect_timeout(common: &Common) -> Duration {
    // Sides started by hand may be started far apart.
    Duration::from_secs(if common.role.is_some() { 120 } else { 20 })
}

fn bench(b: BenchArgs) -> Result<()> {
    let mut out = Printer::new(b.json);
    match b.scenario {
        None => default_suite(&mut out),
        Some(Scenario::Floor(a)) => {
            let cpus = a.common.cpus.unwrap_or_else(CpuPair::default_pair);
            match a.common.role {
                Some(Role::Pong) => {
                    let name = a.common.name.context("--role pong needs --name")?;
                    Ok(peregrine_bench::floor::pong(&name, cpus)?)
                }
                Some(r) => bail!("--role {r:?} is not a floor role: the floor has --role pong only (its ping side is `peregrine bench floor`)"),
                None => {
                    let clock = Clock::calibrate(Duration::from_millis(50));
                    let s = run_floor(a.count, a.warmup, cpus, &clock)?;
                    out.print(&floor_line(&s, cpus));
                    Ok(())
                }
            }
        }
        Some(Scenario::Pingpong(a)) => {
            let cfg = PingPongConfig {
                transport: a.transport.clone(),
                size: a.size,
                count: a.count,
                warmup: a.warmup,
                cpus: a.common.cpus.unwrap_or_else(CpuPair::default_pair),
                idle: a.idle,
                name: a
                    .common
                    .name
                    .clone()
                    .unwrap_or_else(|| peregrine_bench::run_name("pp")),
                connect_timeout: connect_timeout(&a.common),
                ping_uri: a.ping_uri.clone(),
                pong_uri: a.pong_uri.clone(),
            };
            peregrine_bench::pingpong::validate(&cfg)?;
            if a.common.role == Some(Role::Ping)
                && cfg.transport == "ipc"
                && a.common.name.is_none()
            {
                bail!("--role ping needs --name NAME, the same as the pong side's");
            }
            if let Some(role) = a.common.role {
                if cfg.transport != "ipc" && (cfg.ping_uri.is_none() || cfg.pong_uri.is_none()) {
                    bail!(
                        "--role {role:?} over {} needs --ping-uri and --pong-uri, the same on both sides (each side binds the address of the stream it publishes)",
                        cfg.transport
                    );
                }
            }
            let net = cfg.transport != "ipc";
            if (a.raw || a.compare.is_some()) && !net {
                bail!(
                    "--raw and --compare apply to the network transports: give --transport udp, mcast or tcp (the floor of ipc is `peregrine bench floor`)"
                );
            }
            let raw_cfg = RawConfig {
                transport: cfg.transport.clone(),
                size: cfg.size,
                count: cfg.count,
                warmup: cfg.warmup,
                cpus: cfg.cpus,
                busy_poll: cfg.idle != IdleKind::Block,
            };
            if a.common.role == Some(Role::Pong) {
                if a.raw {
                    let (ping, pong) = (cfg.ping_uri.as_deref(), cfg.pong_uri.as_deref());
                    return Ok(peregrine_bench::raw::pong(
                        &raw_cfg,
                        ping.unwrap_or_default(),
                        pong.unwrap_or_default(),
                    )?);
                }
                return Ok(peregrine_bench::pingpong::pong(&cfg)?);
            }
            if matches!(a.common.role, Some(Role::Pub | Role::Sub)) {
                bail!(
                    "--role {:?} is not a ping-pong role: use --role ping or --role pong",
                    a.common.role.unwrap()
                );
            }
            if a.raw && a.common.role.is_some() {
                bail!("--raw runs both sides itself on this host: drop --role");
            }
            let sockperf_cfg = match &a.compare {
                Some(_) => {
                    if peregrine_bench::sockperf::available().is_none() {
                        bail!("--compare sockperf needs the sockperf program: install it with `apt-get install sockperf`");
                    }
                    let c = SockperfConfig {
                        transport: cfg.transport.clone(),
                        size: cfg.size,
                        cpus: cfg.cpus,
                        busy_poll: cfg.idle != IdleKind::Block,
                        seconds: 3,
                        port: peregrine_bench::sockperf::free_port(&cfg.transport)?,
                    };
                    peregrine_bench::sockperf::validate(&c)?;
                    Some(c)
                }
                None => None,
            };
            let clock = Clock::calibrate(Duration::from_millis(50));
            if a.raw {
                peregrine_bench::raw::validate(&raw_cfg)?;
                let s = peregrine_bench::raw::run(&raw_cfg, &exe()?, &clock)?;
                out.print(&raw_line(&raw_cfg, &s));
                return Ok(());
            }
            let floor = if a.no_floor || a.common.role.is_some() {
                None
            } else if net {
                peregrine_bench::raw::validate(&raw_cfg)?;
                let s = peregrine_bench::raw::run(&raw_cfg, &exe()?, &clock)?;
                out.print(&raw_line(&raw_cfg, &s));
                Some(s)
            } else {
                let s = run_floor(
                    a.count.min(1_000_000),
                    a.warmup.min(100_000),
                    cfg.cpus,
                    &clock,
                )?;
                out.print(&floor_line(&s, cfg.cpus));
                Some(s)
            };
            let mut ours = pingpong(&cfg, a.common.role, floor.as_ref(), &clock)?;
            if let Some(sc) = sockperf_cfg {
                let theirs = peregrine_bench::sockperf::run(&sc)?;
                let (server, client) = peregrine_bench::sockperf::command_lines(&sc);
                let line = ResultLine::latency("sockperf", &cfg.transport, cfg.size, &theirs)
                    .detail("server", server)
                    .detail("client", client.clone());
                if let (Some(m), Some(p)) = (ours.median_ns, ours.p999_ns) {
                    ours = ours
                        .detail("median_x_sockperf", round3(m / theirs.median_ns))
                        .detail("p999_x_sockperf", round3(p / theirs.p999_ns));
                }
                out.print(&ours);
                out.print(&line);
                if !out.json {
                    if let (Some(m), Some(p)) = (ours.median_ns, ours.p999_ns) {
                        println!(
                            "peregrine / sockperf: median {:.2}x, 99.9th {:.2}x   (sockperf: {client})",
                            m / theirs.median_ns,
                            p / theirs.p999_ns
                        );
                    }
                }
            } else {
                out.print(&ours);
            }
            Ok(())
        }
        Some(Scenario::Throughput(a)) => {
            let cfg = ThroughputConfig {
                transport: a.transport.clone(),
                size: a.size,
                seconds: a.seconds,
                count: a.count,
                subscribers: a.subscribers,
                policy: a.policy,
                capacity: a.capacity,
                cpus: Some(a.common.cpus.unwrap_or_else(CpuPair::default_pair)),
                name: a
                    .common
                    .name
                    .clone()
                    .unwrap_or_else(|| peregrine_bench::run_name("tp")),
                connect_timeout: connect_timeout(&a.common),
                idle: a.idle,
                uri: a.uri.clone(),
                loss: a.loss.clone(),
            };
            if a.common.role.is_some() && a.common.name.is_none() {
                bail!("--role needs --name NAME, the same on the publisher and subscriber sides");
            }
            match a.common.role {
                Some(Role::Sub) => Ok(peregrine_bench::throughput::subscribe_role(&cfg)?),
                Some(Role::Pub) => {
                    let (sent, refused, rate) = peregrine_bench::throughput::publish_role(&cfg)?;
                    let line = ResultLine {
                        kind: "throughput-pub",
                        transport: cfg.transport.clone(),
                        size_bytes: cfg.size,
                        samples: sent,
                        msgs_per_s: Some(rate),
                        bytes_per_s: Some(rate * cfg.size as f64),
                        ..Default::default()
                    }
                    .detail("refused", refused)
                    .detail("policy", cfg.policy.name());
                    out.print(&line);
                    Ok(())
                }
                Some(r) => {
                    bail!("--role {r:?} is not a throughput role: use --role pub or --role sub")
                }
                None => {
                    out.print(&throughput(&cfg)?);
                    Ok(())
                }
            }
        }
    }
}

fn run_floor(count: u64, warmup: u64, cpus: CpuPair, clock: &Clock) -> Result<Summary> {
    Ok(peregrine_bench::floor::run(
        &FloorConfig {
            count,
            warmup,
            cpus,
        },
        &exe()?,
        clock,
    )?)
}

fn raw_line(cfg: &RawConfig, s: &Summary) -> ResultLine {
    ResultLine::latency("raw", &cfg.transport, cfg.size, s)
        .detail("cpus", cfg.cpus.to_arg())
        .detail("busy_poll", cfg.busy_poll)
}

fn floor_line(s: &Summary, cpus: CpuPair) -> ResultLine {
    ResultLine::latency("floor", "cacheline", 8, s).detail("cpus", cpus.to_arg())
}

fn pingpong(
    cfg: &PingPongConfig,
    role: Option<Role>,
    floor: Option<&Summary>,
    clock: &Clock,
) -> Result<ResultLine> {
    let r = if role == Some(Role::Ping) {
        peregrine_bench::pingpong::ping(cfg, clock)?
    } else {
        peregrine_bench::pingpong::run(cfg, &exe()?, clock)?
    };
    let mut line = ResultLine::latency("pingpong", &cfg.transport, cfg.size, &r.summary)
        .detail("idle", cfg.idle.name())
        .detail("cpus", cfg.cpus.to_arg())
        .detail("ping_cpu_s", round3(r.ping_cpu_s));
    if let Some(p) = r.pong_cpu_s {
        line = line.detail("pong_cpu_s", round3(p));
    }
    if cfg.idle == IdleKind::Block {
        line = line.detail(
            "note",
            if cfg.transport == "ipc" {
                "blocking receive: each message wakes a sleeping process (futex), which costs ~30 us across cores on a KVM guest"
            } else {
                "blocking receive: each message wakes a process sleeping in poll(2), which costs ~30 us across cores on a KVM guest"
            },
        );
    }
    if let Some(f) = floor {
        line.against_floor(f);
    }
    Ok(line)
}

fn throughput(cfg: &ThroughputConfig) -> Result<ResultLine> {
    let r = peregrine_bench::throughput::run(cfg, &exe()?)?;
    let rate = r.delivered_msgs_per_s();
    let bad: u64 = r
        .subscribers
        .iter()
        .map(|s| s.out_of_order + s.corrupt)
        .sum();
    if bad > 0 {
        bail!("{bad} messages arrived out of order or corrupted: this is a bug, please report it");
    }
    let reported_lost: u64 = r.subscribers.iter().map(|s| s.lost).sum();
    let mut line = ResultLine {
        kind: "throughput",
        transport: cfg.transport.clone(),
        size_bytes: cfg.size,
        samples: r.sent,
        msgs_per_s: Some(rate),
        bytes_per_s: Some(rate * cfg.size as f64),
        lost: Some(r.lost()),
        ..Default::default()
    }
    .detail("policy", cfg.policy.name())
    .detail("subscribers", cfg.subscribers)
    .detail("refused", r.refused)
    .detail("pub_cpu_s", round3(r.publisher_cpu_s));
    if cfg.policy == SlowSubscriberPolicy::Overwrite {
        line = line.detail("reported_lost", reported_lost);
    }
    if let Some(c) = cfg.cpus.filter(|_| cfg.subscribers == 1) {
        line = line.detail("cpus", c.to_arg());
    }
    if matches!(cfg.transport.as_str(), "udp" | "mcast") {
        // Loss repair, summed over subscribers; recovery times of the slowest one.
        let sum = |f: fn(&peregrine_bench::throughput::SubscriberReport) -> u64| -> u64 {
            r.subscribers.iter().map(f).sum()
        };
        let p = &r.publisher;
        let frames = p.messages.max(1) as f64;
        let worst = |i: usize| {
            r.subscribers
                .iter()
                .map(|s| s.recovery_ns[i])
                .max()
                .unwrap_or(0)
        };
        line = line
            .detail("loss", cfg.loss.clone().unwrap_or_else(|| "0".into()))
            .detail("dropped", sum(|s| s.dropped))
            .detail(
                "dropped_each",
                r.subscribers.iter().map(|s| s.dropped).collect::<Vec<_>>(),
            )
            .detail(
                "recovered_each",
                r.subscribers
                    .iter()
                    .map(|s| s.recovered)
                    .collect::<Vec<_>>(),
            )
            .detail("naks_sent", sum(|s| s.naks_sent))
            .detail("naks_received", p.naks_received)
            .detail("retransmitted", p.retransmitted)
            .detail(
                "retransmitted_pct_of_msgs",
                round3(100.0 * p.retransmitted as f64 / frames),
            )
            .detail("retransmit_unavailable", p.retransmit_unavailable)
            .detail("retransmit_refused", p.retransmit_refused)
            .detail("recovered", sum(|s| s.recovered))
            .detail("duplicates", sum(|s| s.duplicates))
            .detail("unrecoverable", reported_lost)
            .detail("recovery_p50_us", round3(worst(0) as f64 / 1e3))
            .detail("recovery_p99_us", round3(worst(1) as f64 / 1e3))
            .detail("recovery_p999_us", round3(worst(2) as f64 / 1e3))
            .detail("recovery_max_us", round3(worst(3) as f64 / 1e3));
    }
    Ok(line)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// `peregrine bench` with no subcommand: floor, IPC ping-pong at 32 and 256 bytes, UDP
/// ping-pong at 64 bytes against the bare-socket ping-pong, IPC and UDP throughput at 32 and
/// 256 bytes.
fn default_suite(out: &mut Printer) -> Result<()> {
    let cpus = CpuPair::default_pair();
    let clock = Clock::calibrate(Duration::from_millis(50));
    if !out.json {
        print_machine(&clock, cpus);
    }
    let floor = run_floor(1_000_000, 100_000, cpus, &clock)?;
    out.print(&floor_line(&floor, cpus));
    for size in [32, 256] {
        let cfg = PingPongConfig {
            transport: "ipc".into(),
            size,
            count: 1_000_000,
            warmup: 100_000,
            cpus,
            idle: IdleKind::Spin,
            name: peregrine_bench::run_name("pp"),
            connect_timeout: Duration::from_secs(20),
            ping_uri: None,
            pong_uri: None,
        };
        out.print(&pingpong(&cfg, None, Some(&floor), &clock)?);
    }
    // UDP on loopback: the bare-socket ping-pong is the floor of the network path.
    let raw_cfg = RawConfig {
        transport: "udp".into(),
        size: 64,
        count: 200_000,
        warmup: 20_000,
        cpus,
        busy_poll: true,
    };
    let raw = peregrine_bench::raw::run(&raw_cfg, &exe()?, &clock)?;
    out.print(&raw_line(&raw_cfg, &raw));
    let cfg = PingPongConfig {
        transport: "udp".into(),
        size: 64,
        count: 200_000,
        warmup: 20_000,
        cpus,
        idle: IdleKind::Spin,
        name: peregrine_bench::run_name("pp"),
        connect_timeout: Duration::from_secs(20),
        ping_uri: None,
        pong_uri: None,
    };
    out.print(&pingpong(&cfg, None, Some(&raw), &clock)?);
    for (transport, size) in [("ipc", 32), ("ipc", 256), ("udp", 32), ("udp", 256)] {
        let cfg = ThroughputConfig {
            transport: transport.into(),
            size,
            seconds: 3.0,
            count: None,
            subscribers: 1,
            policy: SlowSubscriberPolicy::BackPressure,
            capacity: peregrine::IPC_DEFAULT_CAPACITY,
            cpus: Some(cpus),
            name: peregrine_bench::run_name("tp"),
            connect_timeout: Duration::from_secs(20),
            idle: IdleKind::Spin,
            uri: None,
            loss: None,
        };
        out.print(&throughput(&cfg)?);
    }
    Ok(())
}

fn print_machine(clock: &Clock, cpus: CpuPair) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cs =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    println!("Peregrine {} benchmark", env!("CARGO_PKG_VERSION"));
    println!(
        "machine: {model}, {} CPUs allowed, kernel {}, clocksource {}",
        peregrine_agent_cpus(),
        kernel.trim(),
        cs.trim()
    );
    println!("clock:   {}", clock.describe());
    println!(
        "cpus:    measuring side on {}, other side on {}",
        cpus.a, cpus.b
    );
}

fn peregrine_agent_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
