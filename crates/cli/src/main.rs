//! `peregrine`: the command-line front end.
//!
//! Flags are defined once, here, with clap; their values are validated into the benchmark
//! configurations, and every rejected value is named together with what is accepted.

mod topics;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use peregrine::{IdleKind, SlowSubscriberPolicy};
use peregrine_bench::clock::Clock;
use peregrine_bench::floor::FloorConfig;
use peregrine_bench::load::{LoadConfig, Method};
use peregrine_bench::output::{format_rate, Printer, ResultLine};
use peregrine_bench::pacer::default_ping_every;
use peregrine_bench::pingpong::PingPongConfig;
use peregrine_bench::raw::RawConfig;
use peregrine_bench::results::ResultsFolder;
use peregrine_bench::sockperf::SockperfConfig;
use peregrine_bench::stats::LatencyRecorder;
use peregrine_bench::stats::Summary;
use peregrine_bench::sweep::{load_cell, rate_label, search_max};
use peregrine_bench::throughput::ThroughputConfig;
use peregrine_bench::CpuPair;
use peregrine_report::model::{Cell, Scenario as CellKind};
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
    /// Every run writes a results folder and renders its report.
    Bench(BenchArgs),
    /// Render a results folder from its saved data: text tables, SVG and PNG charts, and one
    /// self-contained HTML page.
    Report(ReportArgs),
    /// Publish on a topic found by name (no URI): prints what it sends with --print and a
    /// rate line every second.
    Pub(topics::PubArgs),
    /// Subscribe to a topic, a glob (md.eq.*) or with --regex a regular expression: prints
    /// what it receives with --print, sources as they come and go, and a rate line every second.
    Sub(topics::SubArgs),
    /// Relay topic resolution between hosts where multicast does not reach; clients name it
    /// with PEREGRINE_RESOLVER_DAEMON=HOST:PORT.
    Resolverd(topics::ResolverdArgs),
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// The results folder (it holds results.json).
    dir: PathBuf,
}

#[derive(Args, Debug)]
struct BenchArgs {
    #[command(subcommand)]
    scenario: Option<Scenario>,
    /// Print one JSON object per result line instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// The results folder to write (a new one; default: a dated folder under
    /// $PEREGRINE_RESULTS, else ./peregrine-results).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// The machine's floor: a cache-line ping-pong between two processes on two cores.
    Floor(FloorArgs),
    /// Half round trip over a transport between two processes, with its ratio to the floor.
    Pingpong(PingPongArgs),
    /// One publisher, N subscriber processes: messages per second, every sequence checked.
    Throughput(ThroughputArgs),
    /// Load with pings at a requested rate (lbmpubload's method): latency from the actual and
    /// from the scheduled send time, achieved rate, loss, CPU time of each side.
    Load(LoadArgs),
    /// The size x rate matrix of load runs, printed as the seeds' "Full Results" tables.
    Sweep(SweepArgs),
    /// The highest rate each size sustains with no loss and no refusals, searched up and down.
    Max(MaxArgs),
    /// One-way latency from timestamps embedded by the publisher (the RMDS method), over a
    /// list of update rates.
    Latency(LatencyArgs),
    /// Topic resolution traffic: packets, advertisements and bytes per second on the resolver
    /// group while one context advertises N topics, and how long a wildcard subscriber takes
    /// to learn them all (prints its table; writes no results folder).
    Resolver(ResolverTrafficArgs),
}

#[derive(Args, Debug)]
struct ResolverTrafficArgs {
    /// Topics advertised.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    topics: u32,
    /// Seconds to run (the initial phase lasts 5 s).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(2..=600))]
    seconds: u32,
    /// A multicast group of the run's own (loopback).
    #[arg(long, default_value = "239.255.90.200:14499")]
    group: std::net::SocketAddrV4,
    /// Advertisements per second at most (0: unlimited).
    #[arg(long, default_value_t = 20_000)]
    max_advertisements_per_s: u64,
}

#[derive(Args, Debug)]
struct LoadArgs {
    /// Transport: ipc, udp, mcast or tcp (loopback unless --uri says otherwise).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// The load stream's URI (the publisher binds it).
    #[arg(long)]
    uri: Option<String>,
    /// Message size in bytes (at least 8; 16 with --embedded).
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Messages per second (suffixes k, m: 100k, 1.5m).
    #[arg(long, default_value = "100k", value_parser = parse_rate)]
    rate: f64,
    /// One ping per this many messages (default: about 5000 pings per second).
    #[arg(long)]
    ping_every: Option<u64>,
    /// The measured interval, in seconds.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Seconds at the rate before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup_seconds: f64,
    /// What the subscriber does when there is nothing to read: spin, yield, backoff or block.
    #[arg(long, default_value = "spin", value_parser = parse_idle)]
    idle: IdleKind,
    /// (helper processes) the measuring side's clock and its calibration.
    #[arg(long, hide = true)]
    clock: Option<String>,
    /// (helper processes) embedded-timestamp mode.
    #[arg(long, hide = true)]
    embedded: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct SweepArgs {
    /// Transports, comma-separated: ipc, udp, mcast, tcp.
    #[arg(long, value_delimiter = ',', default_value = "ipc,udp")]
    transports: Vec<String>,
    /// Message sizes in bytes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "32,128,256,512,1024,1472,2048"
    )]
    sizes: Vec<usize>,
    /// Rates in messages per second, comma-separated (suffixes k, m).
    #[arg(long, value_delimiter = ',', default_value = "10k,100k,250k,500k,1m,1.5m,2m", value_parser = parse_rate)]
    rates: Vec<f64>,
    /// The measured interval of each cell, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Seconds at the rate before measuring, in each cell.
    #[arg(long, default_value_t = 0.5)]
    warmup_seconds: f64,
    /// One ping per this many messages (default: about 5000 pings per second).
    #[arg(long)]
    ping_every: Option<u64>,
    /// Two CPUs, `A,B`: publisher on A, subscriber on B.
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<CpuPair>,
}

#[derive(Args, Debug)]
struct MaxArgs {
    /// Transports, comma-separated: ipc, udp, mcast, tcp.
    #[arg(long, value_delimiter = ',', default_value = "ipc,udp")]
    transports: Vec<String>,
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "32,256,1024")]
    sizes: Vec<usize>,
    /// The first rate tried (suffixes k, m).
    #[arg(long, default_value = "1m", value_parser = parse_rate)]
    start_rate: f64,
    /// The highest rate tried (suffixes k, m).
    #[arg(long, default_value = "200m", value_parser = parse_rate)]
    max_rate: f64,
    /// The measured interval of each probe, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Seconds at the rate before measuring, in each probe.
    #[arg(long, default_value_t = 0.5)]
    warmup_seconds: f64,
    /// Two CPUs, `A,B`: publisher on A, subscriber on B.
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<CpuPair>,
}

#[derive(Args, Debug)]
struct LatencyArgs {
    /// Embedded timestamps: the publisher writes each message's send time, the subscriber on
    /// the same host reads it (the only method of this command; ping-pong is `bench pingpong`).
    #[arg(long)]
    embedded: bool,
    /// Transport: ipc, udp, mcast or tcp.
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// Message size in bytes (at least 16).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Update rates, comma-separated (suffixes k, m).
    #[arg(long, value_delimiter = ',', default_value = "1k,10k,50k,100k,250k,500k,1m", value_parser = parse_rate)]
    rates: Vec<f64>,
    /// The measured interval of each rate, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Seconds at the rate before measuring.
    #[arg(long, default_value_t = 0.5)]
    warmup_seconds: f64,
    /// What the subscriber does when there is nothing to read: spin, yield, backoff or block.
    #[arg(long, default_value = "spin", value_parser = parse_idle)]
    idle: IdleKind,
    /// Two CPUs, `A,B`: subscriber on A, publisher on B.
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<CpuPair>,
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

/// `100000`, `100k`, `1.5m`, `2M`: messages per second.
fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * mult >= 1.0 && v * mult <= 1e9 => Ok(v * mult),
        _ => Err(format!(
            "'{s}' is not a rate: give messages per second from 1 to 1g, with an optional k or m, for example 100k or 1.5m"
        )),
    }
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
        Command::Report(r) => {
            let rendered = peregrine_report::render(&r.dir)?;
            print!("{}", rendered.text);
            println!();
            println!("report: {}", rendered.html_path.display());
            Ok(())
        }
        Command::Pub(a) => topics::publish(a),
        Command::Sub(a) => topics::subscribe(a),
        Command::Resolverd(a) => topics::resolverd(a),
    }
}

fn resolver_traffic(a: &ResolverTrafficArgs, json: bool) -> Result<()> {
    use peregrine_bench::resolver_traffic::{run, TrafficConfig};
    if !a.group.ip().is_multicast() {
        bail!(
            "--group {}: give a multicast GROUP:PORT, for example 239.255.90.200:14499",
            a.group
        );
    }
    let mut resolver = peregrine_proto::resolver::ResolverConfig::new(1);
    resolver.max_advertisements_per_s = a.max_advertisements_per_s;
    let cfg = TrafficConfig {
        topics: a.topics,
        seconds: a.seconds,
        group: a.group,
        resolver,
    };
    eprintln!(
        "advertising {} topics for {} s on {} ...",
        a.topics, a.seconds, a.group
    );
    let r = run(&cfg).map_err(anyhow::Error::msg)?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "Resolver traffic, {} topics (one publishing context, loopback multicast)",
        r.topics
    );
    println!();
    println!("| second | packets | advertisements | queries | bytes |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for s in &r.per_second {
        println!(
            "| {} | {} | {} | {} | {} |",
            s.second, s.datagrams, s.advertisements, s.queries, s.bytes
        );
    }
    println!();
    println!(
        "initial phase: {:.0} packets/s on average, {} at peak",
        r.initial_packets_per_s, r.initial_peak_packets_per_s
    );
    println!(
        "sustain phase: {:.0} packets/s, {:.0} advertisements/s, {:.1} KB/s",
        r.sustain_packets_per_s,
        r.sustain_advertisements_per_s,
        r.sustain_bytes_per_s / 1e3
    );
    match r.resolved_all_s {
        Some(t) => println!(
            "a wildcard subscriber knew all {} topics after {t:.2} s",
            r.topics
        ),
        None => println!(
            "a wildcard subscriber knew {} of {} topics at the end",
            r.resolved, r.topics
        ),
    }
    println!("subscriber rejected {} frames", r.subscriber_rejected);
    Ok(())
}

fn exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find this program's own path to start helper processes")
}

fn connect_timeout(common: &Common) -> Duration {
    // Sides started by hand may be started far apart.
    Duration::from_secs(if common.role.is_some() { 120 } else { 20 })
}

/// Where a run's cells go: its results folder (none for helper processes).
struct Recorder {
    folder: Option<ResultsFolder>,
}

impl Recorder {
    fn add(
        &mut self,
        cell: Cell,
        from_send: Option<&LatencyRecorder>,
        from_schedule: Option<&LatencyRecorder>,
    ) -> Result<()> {
        if let Some(f) = &mut self.folder {
            f.add(cell, from_send, from_schedule)?;
        }
        Ok(())
    }
}

fn bench(b: BenchArgs) -> Result<()> {
    let mut out = Printer::new(b.json);
    if let Some(Scenario::Resolver(a)) = &b.scenario {
        return resolver_traffic(a, b.json);
    }
    let (role, cpus, label) = match &b.scenario {
        None => (false, None, "suite"),
        Some(Scenario::Floor(a)) => (a.common.role.is_some(), a.common.cpus, "floor"),
        Some(Scenario::Pingpong(a)) => (a.common.role.is_some(), a.common.cpus, "pingpong"),
        Some(Scenario::Throughput(a)) => (a.common.role.is_some(), a.common.cpus, "throughput"),
        Some(Scenario::Load(a)) => (a.common.role.is_some(), a.common.cpus, "load"),
        Some(Scenario::Sweep(a)) => (false, a.cpus, "sweep"),
        Some(Scenario::Max(a)) => (false, a.cpus, "max"),
        Some(Scenario::Latency(a)) => (false, a.cpus, "latency"),
        Some(Scenario::Resolver(_)) => unreachable!("handled above"),
    };
    if role {
        return bench_scenario(b.scenario, &mut out, &mut Recorder { folder: None });
    }
    let clock = Clock::calibrate(Duration::from_millis(50));
    let folder = ResultsFolder::create(
        b.out.as_deref(),
        label,
        std::env::args().collect(),
        &clock,
        cpus.unwrap_or_else(CpuPair::default_pair),
    )?;
    let dir = folder.dir().to_path_buf();
    let mut rec = Recorder {
        folder: Some(folder),
    };
    // The seeds' tables are the output of the scenarios that make them.
    let tables = matches!(
        b.scenario,
        None | Some(
            Scenario::Load(_) | Scenario::Sweep(_) | Scenario::Max(_) | Scenario::Latency(_)
        )
    );
    let result = bench_scenario(b.scenario, &mut out, &mut rec);
    let measured = rec
        .folder
        .as_ref()
        .is_some_and(|f| !f.results().cells.is_empty());
    if !measured {
        // Nothing was measured (a rejected flag, a failure before the first cell).
        let _ = std::fs::remove_dir_all(&dir);
        return result;
    }
    match peregrine_report::render(&dir) {
        Ok(r) => {
            if tables && !out.json {
                println!();
                print!("{}", r.text);
            }
            let say = format!(
                "results: {}\nreport:  {}",
                dir.display(),
                r.html_path.display()
            );
            if out.json {
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

fn bench_scenario(scenario: Option<Scenario>, out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    match scenario {
        None => default_suite(out, rec),
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
                    let r = run_floor(a.count, a.warmup, cpus, &clock)?;
                    let line = floor_line(&r.summary(), cpus);
                    out.print(&line);
                    rec.add(latency_cell(CellKind::Floor, &line, &r), Some(&r), None)
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
                raw_measured(&raw_cfg, &clock, out, rec)?;
                return Ok(());
            }
            let floor = if a.no_floor || a.common.role.is_some() {
                None
            } else if net {
                peregrine_bench::raw::validate(&raw_cfg)?;
                Some(raw_measured(&raw_cfg, &clock, out, rec)?)
            } else {
                Some(floor_measured(
                    a.count.min(1_000_000),
                    a.warmup.min(100_000),
                    cfg.cpus,
                    &clock,
                    out,
                    rec,
                )?)
            };
            let (mut ours, samples) = pingpong(&cfg, a.common.role, floor.as_ref(), &clock)?;
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
                // sockperf's own samples are not ours to log: its figures go with our cell.
                let mut cell = latency_cell(CellKind::Pingpong, &ours, &samples);
                for (k, v) in [
                    ("sockperf_median_ns", theirs.median_ns),
                    ("sockperf_p99_ns", theirs.p99_ns),
                    ("sockperf_p999_ns", theirs.p999_ns),
                    ("sockperf_mean_ns", theirs.mean_ns),
                ] {
                    cell.detail.insert(k.into(), round3(v).into());
                }
                cell.detail
                    .insert("sockperf_client".into(), client.clone().into());
                rec.add(cell, Some(&samples), None)?;
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
                if a.common.role.is_none() {
                    rec.add(
                        latency_cell(CellKind::Pingpong, &ours, &samples),
                        Some(&samples),
                        None,
                    )?;
                }
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
                    let line = throughput(&cfg)?;
                    out.print(&line);
                    rec.add(throughput_cell(&line), None, None)
                }
            }
        }
        Some(Scenario::Load(a)) => load_command(a, out, rec),
        Some(Scenario::Sweep(a)) => {
            let clock = Clock::calibrate(Duration::from_millis(50));
            let plan = SweepPlan {
                transports: a.transports,
                sizes: a.sizes,
                rates: a.rates,
                seconds: a.seconds,
                warmup_seconds: a.warmup_seconds,
                ping_every: a.ping_every,
                cpus: a.cpus.unwrap_or_else(CpuPair::default_pair),
            };
            sweep(&plan, &clock, out, rec)
        }
        Some(Scenario::Max(a)) => max_command(a, out, rec),
        Some(Scenario::Latency(a)) => embedded_command(a, out, rec),
        Some(Scenario::Resolver(_)) => unreachable!("bench() runs it before any results folder"),
    }
}

fn run_floor(count: u64, warmup: u64, cpus: CpuPair, clock: &Clock) -> Result<LatencyRecorder> {
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

/// Runs the floor, prints and records it; returns its summary.
fn floor_measured(
    count: u64,
    warmup: u64,
    cpus: CpuPair,
    clock: &Clock,
    out: &mut Printer,
    rec: &mut Recorder,
) -> Result<Summary> {
    let r = run_floor(count, warmup, cpus, clock)?;
    let s = r.summary();
    let line = floor_line(&s, cpus);
    out.print(&line);
    rec.add(latency_cell(CellKind::Floor, &line, &r), Some(&r), None)?;
    Ok(s)
}

/// Runs the bare-socket ping-pong, prints and records it; returns its summary.
fn raw_measured(
    cfg: &RawConfig,
    clock: &Clock,
    out: &mut Printer,
    rec: &mut Recorder,
) -> Result<Summary> {
    let r = peregrine_bench::raw::run(cfg, &exe()?, clock)?;
    let s = r.summary();
    let line = raw_line(cfg, &s);
    out.print(&line);
    rec.add(latency_cell(CellKind::Raw, &line, &r), Some(&r), None)?;
    Ok(s)
}

/// A latency result line as a results cell (CPU seconds from its `*_cpu_s` details).
fn latency_cell(kind: CellKind, line: &ResultLine, samples: &LatencyRecorder) -> Cell {
    let s = samples.summary();
    let mut detail = line.detail.clone();
    let mut cpu_s = std::collections::BTreeMap::new();
    detail.retain(|k, v| match (k.strip_suffix("_cpu_s"), v.as_f64()) {
        (Some(role), Some(secs)) => {
            cpu_s.insert(role.to_string(), secs);
            false
        }
        _ => true,
    });
    if let Some(x) = line.median_x_floor {
        detail.insert("median_x_floor".into(), round3(x).into());
    }
    Cell {
        id: format!("{}-{}-{}B", line.kind, line.transport, line.size_bytes),
        scenario: Some(kind),
        transport: line.transport.clone(),
        size_bytes: line.size_bytes,
        sent: s.samples,
        received: s.samples,
        latency: Some(s),
        cpu_s,
        detail,
        ..Default::default()
    }
}

/// A throughput result line as a results cell.
fn throughput_cell(line: &ResultLine) -> Cell {
    let mut detail = line.detail.clone();
    let mut cpu_s = std::collections::BTreeMap::new();
    if let Some(p) = detail.remove("pub_cpu_s").and_then(|v| v.as_f64()) {
        cpu_s.insert("publisher".to_string(), p);
    }
    let refused = detail.get("refused").and_then(|v| v.as_u64()).unwrap_or(0);
    let lost = line.lost.unwrap_or(0);
    Cell {
        id: format!("throughput-{}-{}B", line.transport, line.size_bytes),
        scenario: Some(CellKind::Throughput),
        transport: line.transport.clone(),
        size_bytes: line.size_bytes,
        rate_achieved_msgs_per_s: line.msgs_per_s,
        sent: line.samples,
        lost,
        refused,
        cpu_s,
        detail,
        ..Default::default()
    }
}

fn pingpong(
    cfg: &PingPongConfig,
    role: Option<Role>,
    floor: Option<&Summary>,
    clock: &Clock,
) -> Result<(ResultLine, LatencyRecorder)> {
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
    Ok((line, r.recorder))
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

/// `peregrine bench` with no subcommand: the floor, IPC ping-pong at 32 and 256 bytes, UDP
/// ping-pong at 32 bytes against the bare-socket ping-pong, a short IPC and UDP load sweep
/// (32, 256 and 1024 bytes at 100K, 500K and 1M msgs/s), and IPC and UDP throughput. About
/// a minute and a half on 2 cores.
fn default_suite(out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    let cpus = CpuPair::default_pair();
    let clock = Clock::calibrate(Duration::from_millis(50));
    if !out.json {
        print_machine(&clock, cpus);
    }
    let floor = floor_measured(1_000_000, 100_000, cpus, &clock, out, rec)?;
    let pp = |transport: &str, size: usize, count: u64| PingPongConfig {
        transport: transport.into(),
        size,
        count,
        warmup: count / 10,
        cpus,
        idle: IdleKind::Spin,
        name: peregrine_bench::run_name("pp"),
        connect_timeout: Duration::from_secs(20),
        ping_uri: None,
        pong_uri: None,
    };
    for size in [32, 256] {
        let (line, samples) = pingpong(&pp("ipc", size, 1_000_000), None, Some(&floor), &clock)?;
        out.print(&line);
        rec.add(
            latency_cell(CellKind::Pingpong, &line, &samples),
            Some(&samples),
            None,
        )?;
    }
    // UDP on loopback: the bare-socket ping-pong is the floor of the network path.
    let raw_cfg = RawConfig {
        transport: "udp".into(),
        size: 32,
        count: 200_000,
        warmup: 20_000,
        cpus,
        busy_poll: true,
    };
    let raw = raw_measured(&raw_cfg, &clock, out, rec)?;
    let (line, samples) = pingpong(&pp("udp", 32, 200_000), None, Some(&raw), &clock)?;
    out.print(&line);
    rec.add(
        latency_cell(CellKind::Pingpong, &line, &samples),
        Some(&samples),
        None,
    )?;
    let plan = SweepPlan {
        transports: vec!["ipc".into(), "udp".into()],
        sizes: vec![32, 256, 1024],
        rates: vec![100_000.0, 500_000.0, 1_000_000.0],
        seconds: 2.0,
        warmup_seconds: 0.5,
        ping_every: None,
        cpus,
    };
    sweep(&plan, &clock, out, rec)?;
    for (transport, size) in [("ipc", 32), ("ipc", 256), ("udp", 32), ("udp", 256)] {
        let cfg = ThroughputConfig {
            transport: transport.into(),
            size,
            seconds: 2.0,
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
        let line = throughput(&cfg)?;
        out.print(&line);
        rec.add(throughput_cell(&line), None, None)?;
    }
    Ok(())
}

/// A load run's settings from the command line's.
#[allow(clippy::too_many_arguments)]
fn load_config(
    transport: &str,
    size: usize,
    rate: f64,
    ping_every: Option<u64>,
    seconds: f64,
    warmup_seconds: f64,
    cpus: CpuPair,
    idle: IdleKind,
    method: Method,
) -> LoadConfig {
    LoadConfig {
        transport: transport.to_string(),
        size,
        rate_msgs_per_s: rate,
        ping_every: match method {
            Method::Pings => ping_every.unwrap_or_else(|| default_ping_every(rate)),
            Method::Embedded => 1,
        },
        seconds,
        warmup_seconds,
        cpus,
        idle,
        method,
        name: peregrine_bench::run_name("ld"),
        connect_timeout: Duration::from_secs(20),
        uri: None,
    }
}

/// `bench load`: one load run, or one side of it (`--role`).
fn load_command(a: LoadArgs, out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    let method = if a.embedded {
        Method::Embedded
    } else {
        Method::Pings
    };
    let mut cfg = load_config(
        &a.transport,
        a.size,
        a.rate,
        a.ping_every,
        a.seconds,
        a.warmup_seconds,
        a.common.cpus.unwrap_or_else(CpuPair::default_pair),
        a.idle,
        method,
    );
    cfg.uri = a.uri.clone();
    cfg.connect_timeout = connect_timeout(&a.common);
    if let Some(n) = &a.common.name {
        cfg.name = n.clone();
    }
    peregrine_bench::load::validate(&cfg)?;
    match a.common.role {
        Some(Role::Sub) => Ok(peregrine_bench::load::subscribe_role(&cfg)?),
        Some(Role::Pub) => {
            let spec = a.clock.as_deref().unwrap_or("");
            let clock = Clock::from_arg(spec).with_context(|| {
                format!("--clock '{spec}' is not accepted: the publisher of an embedded-timestamp run takes its clock from the measuring side (tsc:NS_PER_TICK or raw)")
            })?;
            Ok(peregrine_bench::load::publish_role(&cfg, &clock)?)
        }
        Some(r) => bail!("--role {r:?} is not a load role: use --role pub or --role sub"),
        None => {
            if a.embedded {
                bail!("--embedded is the one-way method of `peregrine bench latency --embedded`");
            }
            let clock = Clock::calibrate(Duration::from_millis(50));
            let r = peregrine_bench::load::run(&cfg, &exe()?, &clock)?;
            let cell = load_cell(&cfg, &r, CellKind::Load);
            print_cell(out, &cell);
            rec.add(cell, Some(&r.latency), Some(&r.latency_from_schedule))
        }
    }
}

/// A sweep's matrix.
#[derive(Debug)]
struct SweepPlan {
    transports: Vec<String>,
    sizes: Vec<usize>,
    rates: Vec<f64>,
    seconds: f64,
    warmup_seconds: f64,
    ping_every: Option<u64>,
    cpus: CpuPair,
}

fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} runs, about {eta} left  {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}

/// Runs the sweep: per transport and size, rates in increasing order until one is not
/// sustained (the size is "CPU-bound after" the last one that was).
fn sweep(plan: &SweepPlan, clock: &Clock, out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    let mut rates = plan.rates.clone();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let cfg = |t: &str, size: usize, rate: f64| {
        load_config(
            t,
            size,
            rate,
            plan.ping_every,
            plan.seconds,
            plan.warmup_seconds,
            plan.cpus,
            IdleKind::Spin,
            Method::Pings,
        )
    };
    // Every cell's settings are checked before the first runs.
    for t in &plan.transports {
        for &size in &plan.sizes {
            for &rate in &rates {
                peregrine_bench::load::validate(&cfg(t, size, rate))?;
            }
        }
    }
    let cells = (plan.transports.len() * plan.sizes.len() * rates.len()) as u64;
    let bar = progress(cells);
    if out.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    for t in &plan.transports {
        for &size in &plan.sizes {
            for (k, &rate) in rates.iter().enumerate() {
                bar.set_message(format!("{t} {size}B at {} msgs/s", rate_label(rate)));
                let c = cfg(t, size, rate);
                let r = peregrine_bench::load::run(&c, &exe()?, clock)?;
                let cell = load_cell(&c, &r, CellKind::Load);
                let held = cell.sustained == Some(true);
                bar.suspend(|| print_cell(out, &cell));
                rec.add(cell, Some(&r.latency), Some(&r.latency_from_schedule))?;
                bar.inc(1);
                if !held {
                    // Higher rates of this size are not tried.
                    let skipped = (rates.len() - k - 1) as u64;
                    bar.set_length(bar.length().unwrap_or(cells) - skipped);
                    break;
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// `bench max`: the maximum sustainable rate of each transport and size.
fn max_command(a: MaxArgs, out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    let clock = Clock::calibrate(Duration::from_millis(50));
    let cpus = a.cpus.unwrap_or_else(CpuPair::default_pair);
    let cfg = |t: &str, size: usize, rate: f64| {
        load_config(
            t,
            size,
            rate,
            None,
            a.seconds,
            a.warmup_seconds,
            cpus,
            IdleKind::Spin,
            Method::Pings,
        )
    };
    for t in &a.transports {
        for &size in &a.sizes {
            peregrine_bench::load::validate(&cfg(t, size, a.start_rate))?;
        }
    }
    const FLOOR_MSGS_PER_S: f64 = 1_000.0;
    if a.max_rate < a.start_rate {
        bail!(
            "--max-rate {} is not accepted: give at least --start-rate ({})",
            format_rate(a.max_rate),
            format_rate(a.start_rate)
        );
    }
    let bar = progress(0);
    if out.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    for t in &a.transports {
        for &size in &a.sizes {
            let mut probes = 0u64;
            let best = search_max(
                a.start_rate,
                FLOOR_MSGS_PER_S.min(a.start_rate),
                a.max_rate,
                0.05,
                |rate| -> Result<bool> {
                    bar.set_message(format!("{t} {size}B: trying {} msgs/s", rate_label(rate)));
                    bar.inc_length(1);
                    let c = cfg(t, size, rate);
                    let r = peregrine_bench::load::run(&c, &exe()?, &clock)?;
                    let cell = load_cell(&c, &r, CellKind::MaxProbe);
                    let held = cell.sustained == Some(true);
                    bar.suspend(|| print_cell(out, &cell));
                    rec.add(cell, Some(&r.latency), Some(&r.latency_from_schedule))?;
                    bar.inc(1);
                    probes += 1;
                    Ok(held)
                },
            )?;
            let mut detail = serde_json::Map::new();
            detail.insert("probes".into(), probes.into());
            detail.insert("tolerance".into(), 0.05.into());
            let cell = Cell {
                id: format!("max-{t}-{size}B"),
                scenario: Some(CellKind::Max),
                transport: t.clone(),
                size_bytes: size,
                rate_achieved_msgs_per_s: best,
                sustained: Some(best.is_some()),
                detail,
                ..Default::default()
            };
            bar.suspend(|| match best {
                Some(r) if !out.json => println!(
                    "max       {t:<9} {size:>6}  {} msgs/s ({:.1} MB/s) held for {} s with no loss and no refusals ({probes} probes)",
                    format_rate(r),
                    r * size as f64 / 1e6,
                    a.seconds
                ),
                None if !out.json => println!(
                    "max       {t:<9} {size:>6}  not even {} msgs/s held",
                    format_rate(FLOOR_MSGS_PER_S)
                ),
                _ => println!("{}", serde_json::to_string(&cell).expect("cells serialise")),
            });
            rec.add(cell, None, None)?;
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// `bench latency --embedded`: one-way latency at each update rate.
fn embedded_command(a: LatencyArgs, out: &mut Printer, rec: &mut Recorder) -> Result<()> {
    if !a.embedded {
        bail!("`peregrine bench latency` measures one-way latency from embedded timestamps: add --embedded (for the half round trip, use `peregrine bench pingpong`)");
    }
    let clock = Clock::calibrate(Duration::from_millis(50));
    let cpus = a.cpus.unwrap_or_else(CpuPair::default_pair);
    let mut rates = a.rates.clone();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let cfg = |rate: f64| {
        load_config(
            &a.transport,
            a.size,
            rate,
            None,
            a.seconds,
            a.warmup_seconds,
            cpus,
            a.idle,
            Method::Embedded,
        )
    };
    for &rate in &rates {
        peregrine_bench::load::validate(&cfg(rate))?;
    }
    let bar = progress(rates.len() as u64);
    if out.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    for &rate in &rates {
        bar.set_message(format!("{} updates/s", rate_label(rate)));
        let c = cfg(rate);
        let r = peregrine_bench::load::run(&c, &exe()?, &clock)?;
        let cell = load_cell(&c, &r, CellKind::Embedded);
        bar.suspend(|| print_cell(out, &cell));
        rec.add(cell, Some(&r.latency), None)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// One line per paced cell as it completes (the tables follow at the end of the run).
fn print_cell(out: &Printer, c: &Cell) {
    if out.json {
        println!("{}", serde_json::to_string(c).expect("cells serialise"));
        return;
    }
    let us = |v: f64| format!("{:.2}", v / 1e3);
    let req = c.rate_requested_msgs_per_s.unwrap_or(0.0);
    let got = c.rate_achieved_msgs_per_s.unwrap_or(0.0);
    let mut line = format!(
        "{:<9} {:<5} {:>5}B {:>5}/s  achieved {} ({:.1}%)  lost {} dup {} ooo {} refused {}",
        c.id.split('-').next().unwrap_or(""),
        c.transport,
        c.size_bytes,
        rate_label(req),
        format_rate(got),
        100.0 * got / req.max(1.0),
        c.lost,
        c.duplicates,
        c.out_of_order,
        c.refused,
    );
    if let Some(l) = &c.latency {
        line += &format!(
            "  | us: median {} 99.9th {} max {}",
            us(l.median_ns),
            us(l.p999_ns),
            us(l.max_ns)
        );
    }
    if let Some(l) = &c.latency_from_schedule {
        line += &format!(
            "  | from schedule: median {} 99.9th {}",
            us(l.median_ns),
            us(l.p999_ns)
        );
    }
    line += &format!(
        "  | cpu s: {}",
        c.cpu_s
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if c.sustained == Some(false) {
        line += "  NOT SUSTAINED";
    }
    println!("{line}");
}

/// The suite's header: what `results.json` records of the machine.
fn print_machine(clock: &Clock, cpus: CpuPair) {
    let m = peregrine_bench::results::machine(clock, cpus);
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
