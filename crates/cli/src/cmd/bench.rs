//! `peregrine bench`: the flags become a [`Scenario`] of `peregrine-bench`, which measures,
//! prints and writes the results folder; `--role` runs one side of a measurement started by
//! hand (two hosts, or two terminals).

use crate::flags::bench::{
    BenchArgs, Common, EchoArgs, FanoutArgs, FloorArgs, LatencyArgs, LoadArgs, MaxArgs,
    PingPongArgs, RecordArgs, ResolverTrafficArgs, Role, Scenario as Flags, SweepArgs,
    ThroughputArgs,
};
use crate::flags::shared::{Cpus, Timing};
use crate::flags::values::BenchTransport;
use anyhow::{bail, Context as _, Result};
use peregrine::{IdleKind, Scheme};
use peregrine_bench::measure::floor::{FloorConfig, FloorPong};
use peregrine_bench::measure::load::Method;
use peregrine_bench::measure::pingpong::{PingPongConfig, StreamMode};
use peregrine_bench::measure::throughput::ThroughputConfig;
use peregrine_bench::scenario::echo::EchoPlan;
use peregrine_bench::scenario::latency::PingPongPlan;
use peregrine_bench::scenario::paced::{EmbeddedPlan, MaxPlan, Pacing, SweepPlan};
use peregrine_bench::scenario::{self, RunOptions, Scenario};
use peregrine_bench::CpuPair;
use std::path::PathBuf;
use std::time::Duration;

pub fn run(b: BenchArgs) -> Result<()> {
    let scenario = match b.scenario {
        None => Scenario::Suite,
        Some(Flags::Resolver(a)) => return resolver_traffic(&a, b.json),
        Some(Flags::Record(a)) => return record(&a, b.json),
        Some(Flags::Floor(a)) => match floor(a)? {
            Some(cfg) => Scenario::Floor(cfg),
            None => return Ok(()),
        },
        Some(Flags::Pingpong(a)) if a.netns => Scenario::Bypass(bypass(&a)?),
        Some(Flags::Throughput(a)) if a.netns => Scenario::BypassThroughput(bypass_throughput(&a)?),
        Some(Flags::Pingpong(a)) => match pingpong(a, b.json)? {
            Some(plan) => Scenario::Pingpong(plan),
            None => return Ok(()),
        },
        Some(Flags::Echo(a)) => Scenario::Echo(echo(a)?),
        Some(Flags::Throughput(a)) => match throughput(a, b.json)? {
            Some(cfg) => Scenario::Throughput(cfg),
            None => return Ok(()),
        },
        Some(Flags::Load(a)) if a.netns => Scenario::BypassLoad(bypass_load(&a)?),
        Some(Flags::Load(a)) => Scenario::Load(load(a)?),
        Some(Flags::Sweep(a)) => Scenario::Sweep(sweep(a)),
        Some(Flags::Max(a)) => Scenario::Max(max(a)),
        Some(Flags::Latency(a)) => Scenario::Latency(embedded(a)?),
        Some(Flags::Fanout(a)) => fanout(a)?,
        Some(Flags::Failover(a)) => {
            let cfg = peregrine_bench::failover::FailoverConfig {
                transport: Scheme::Udp,
                rate: a.rate,
                size: a.size,
                kills: a.kills,
                window_ms: a.window_ms,
                cpus: a.cpus.pair(),
            };
            let md = peregrine_bench::failover::MdFailoverConfig {
                rate: a.feed_rate,
                items: a.items as usize,
                kills: a.kills,
            };
            Scenario::Failover(peregrine_bench::scenario::failover::FailoverPlan {
                transports: a.transports.transport,
                cfg,
                paths: a.paths,
                distributors: a.distributors.then_some(md.clone()),
                feeds: a.feeds.then_some(md),
            })
        }
        Some(Flags::Jitter(a)) => {
            let cpus = a.cpus.unwrap_or_else(|| {
                let p = CpuPair::default_pair();
                if p.a == p.b {
                    vec![p.a]
                } else {
                    vec![p.a, p.b]
                }
            });
            let cfg = peregrine_bench::jitter::JitterConfig {
                cpus,
                seconds: a.seconds,
            };
            cfg.validate()?;
            Scenario::Jitter(cfg)
        }
    };
    scenario::run(
        scenario,
        RunOptions {
            json: b.json,
            out: b.out,
            command_line: std::env::args().collect(),
            exe: exe()?,
        },
    )?;
    Ok(())
}

fn exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find this program's own path to start helper processes")
}

fn connect_timeout(common: &Common) -> Duration {
    // Sides started by hand may be started far apart.
    Duration::from_secs(if common.role.is_some() { 120 } else { 20 })
}

fn cpus(common: &Common) -> CpuPair {
    common.cpus.pair()
}

/// `bench floor`, or its pong side (`--role pong`); `None` when a role ran.
fn floor(a: FloorArgs) -> Result<Option<FloorConfig>> {
    let cpus = cpus(&a.common);
    match a.common.role {
        Some(Role::Pong) => {
            let name = a.common.name.context("--role pong needs --name")?;
            peregrine_bench::measure::floor::pong(&FloorPong { name, cpus })?;
            Ok(None)
        }
        Some(r) => bail!("--role {r:?} is not a floor role: the floor has --role pong only (its ping side is `peregrine bench floor`)"),
        None => Ok(Some(FloorConfig {
            count: a.count,
            warmup_count: a.warmup.warmup_count,
            cpus,
        })),
    }
}

/// `bench pingpong`, or one of its sides (`--role ping|pong`); `None` when a role ran.
fn pingpong(a: PingPongArgs, json: bool) -> Result<Option<PingPongPlan>> {
    let transport = kernel_scheme(a.transport, "--ping-uri and --pong-uri")?;
    let role = a.common.role;
    let cfg = PingPongConfig {
        transport,
        size: a.size,
        count: a.count,
        warmup_count: a.warmup.warmup_count,
        cpus: cpus(&a.common),
        idle: a.idle.idle,
        name: a
            .common
            .name
            .clone()
            .unwrap_or_else(|| peregrine_bench::run_name("pp")),
        connect_timeout: connect_timeout(&a.common),
        ping_uri: a.ping_uri.clone(),
        pong_uri: a.pong_uri.clone(),
        // Floor bursts between blocks of pings, unless no floor is wanted.
        floor_every: if a.no_floor {
            0
        } else {
            peregrine_bench::measure::pingpong::default_floor_every(a.count)
        },
        floor_line: None,
        mode: StreamMode::Urgent,
        group: a.group,
        pong_netns: None,
    };
    peregrine_bench::measure::pingpong::validate(&cfg)?;
    let net = cfg.transport != Scheme::Ipc;
    if role == Some(Role::Ping) && !net && a.common.name.is_none() {
        bail!("--role ping needs --name NAME, the same as the pong side's");
    }
    if let Some(role) = role {
        if net && (cfg.ping_uri.is_none() || cfg.pong_uri.is_none()) {
            bail!(
                "--role {role:?} over {} needs --ping-uri and --pong-uri, the same on both sides (each side binds the address of the stream it publishes)",
                cfg.transport
            );
        }
    }
    let plan = PingPongPlan {
        floor: !a.no_floor,
        raw_only: a.raw,
        compare_sockperf: a.compare.is_some(),
        cfg,
    };
    match role {
        None => return Ok(Some(plan)),
        Some(Role::Pub | Role::Sub) => {
            bail!(
                "--role {role:?} is not a ping-pong role: use --role ping or --role pong",
                role = role.expect("a role")
            )
        }
        Some(_) if a.compare.is_some() => {
            bail!("--compare runs both sides itself on this host: drop --role")
        }
        Some(Role::Pong) if a.raw => {
            peregrine_bench::measure::raw::validate(&plan.raw_config())?;
            let (ping, pong) = (plan.cfg.ping_uri.as_deref(), plan.cfg.pong_uri.as_deref());
            peregrine_bench::measure::raw::pong(
                &plan.raw_config(),
                ping.unwrap_or_default(),
                pong.unwrap_or_default(),
            )?;
        }
        Some(_) if a.raw => bail!("--raw runs both sides itself on this host: drop --role"),
        Some(Role::Pong) => peregrine_bench::measure::pingpong::pong(&plan.cfg)?,
        Some(Role::Ping) => scenario::latency::ping_role(&plan.cfg, json)?,
    }
    Ok(None)
}

/// `bench pingpong --netns`: udp through the kernel, through AF_XDP and sockperf across a veth
/// pair, size by size; every value checked before anything runs.
fn bypass(a: &PingPongArgs) -> Result<peregrine_bench::scenario::bypass::BypassConfig> {
    use peregrine_bench::scenario::bypass::{self, BypassConfig};
    netns_only(
        a.transport,
        "runs both sides itself on a veth pair it creates",
        &[
            (a.common.role.is_some(), "--role"),
            (a.raw, "--raw"),
            (a.group, "--group"),
            (
                a.ping_uri.is_some() || a.pong_uri.is_some(),
                "--ping-uri/--pong-uri",
            ),
        ],
    )?;
    let cfg = BypassConfig {
        sizes: a
            .sizes
            .clone()
            .unwrap_or_else(|| bypass::DEFAULT_SIZES.to_vec()),
        count: a.count,
        warmup_count: a.warmup.warmup_count,
        cpus: cpus(&a.common),
        // sockperf's row is part of the comparison wherever it is installed.
        sockperf: true,
        exe: exe()?,
    };
    bypass::validate(&cfg)?;
    Ok(cfg)
}

/// The scheme of a run without `--netns`: `--transport xdp` is refused, naming `--netns` and
/// `xdp=IFNAME` in the run's URI flags (`uri_flags`) for one's own hosts.
fn kernel_scheme(transport: BenchTransport, uri_flags: &str) -> Result<Scheme> {
    match transport {
        BenchTransport::Xdp => bail!(
            "--transport xdp needs an interface to bypass the kernel on: add --netns (a veth pair between two namespaces this run creates), or between your own hosts use --transport udp with xdp=IFNAME in {uri_flags}"
        ),
        BenchTransport::Scheme(s) => Ok(s),
    }
}

/// What `--netns` accepts: `--transport xdp` (or udp), and none of the flags in `given` that
/// name another setup (`what` the comparison does instead).
fn netns_only(transport: BenchTransport, what: &str, given: &[(bool, &str)]) -> Result<()> {
    if !matches!(
        transport,
        BenchTransport::Xdp | BenchTransport::Scheme(Scheme::Udp)
    ) {
        bail!(
            "--netns compares udp through the kernel with udp through AF_XDP: use --transport xdp (or udp), not {}",
            transport.name()
        );
    }
    if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
        bail!("--netns {what}: drop {flag}");
    }
    Ok(())
}

/// `bench throughput --netns`: udp through the kernel and through AF_XDP across a veth pair,
/// one row each.
fn bypass_throughput(
    a: &ThroughputArgs,
) -> Result<peregrine_bench::scenario::bypass::BypassThroughput> {
    use peregrine_bench::scenario::bypass::BypassThroughput;
    netns_only(
        a.transport,
        "runs one publisher and one subscriber itself on a veth pair it creates",
        &[
            (a.common.role.is_some(), "--role"),
            (a.uri.is_some(), "--uri"),
            (a.subscribers != 1, "--subscribers"),
            (a.loss.is_some(), "--loss"),
            (a.group, "--group"),
            (a.count.is_some(), "--count"),
        ],
    )?;
    let cfg = BypassThroughput {
        size: a.size,
        seconds: a.seconds,
        cpus: cpus(&a.common),
        exe: exe()?,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// `bench load --netns`: the load through the kernel's udp and through AF_XDP across a veth
/// pair, and sockperf at the same rate; every value checked before anything runs.
fn bypass_load(a: &LoadArgs) -> Result<peregrine_bench::scenario::bypass::BypassLoad> {
    netns_only(
        a.transport,
        "runs the publisher and the reflector itself on a veth pair it creates",
        &[
            (a.uri.is_some(), "--uri"),
            (a.idle.idle != IdleKind::Spin, "--idle"),
        ],
    )?;
    let cfg = peregrine_bench::scenario::bypass::BypassLoad {
        sizes: a.sizes.clone().unwrap_or_else(|| vec![a.size]),
        rate_msgs_per_s: a.rate,
        ping_every: a.ping_every,
        seconds: a.timing.seconds,
        warmup_seconds: a.timing.warmup_seconds,
        cpus: a.cpus.pair(),
        sockperf: true,
        exe: exe()?,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// `bench echo`: every value checked before anything runs.
fn echo(a: EchoArgs) -> Result<EchoPlan> {
    let plan = EchoPlan {
        transports: a.transports.transport,
        modes: a.modes,
        sizes: a.sizes,
        count: a.count,
        cpus: a.cpus.pair(),
    };
    plan.validate()?;
    Ok(plan)
}

/// `bench throughput`, or one of its sides (`--role pub|sub`); `None` when a role ran.
fn throughput(a: ThroughputArgs, json: bool) -> Result<Option<ThroughputConfig>> {
    let transport = kernel_scheme(a.transport, "--uri")?;
    let cfg = ThroughputConfig {
        transport,
        size: a.size,
        seconds: a.seconds,
        count: a.count,
        subscribers: a.subscribers,
        policy: a.policy,
        capacity: a.capacity,
        cpus: Some(cpus(&a.common)),
        name: a
            .common
            .name
            .clone()
            .unwrap_or_else(|| peregrine_bench::run_name("tp")),
        connect_timeout: connect_timeout(&a.common),
        idle: a.idle.idle,
        uri: a.uri.clone(),
        loss: a.loss.clone(),
        group: a.group,
        sub_netns: None,
    };
    if a.common.role.is_some() && a.common.name.is_none() {
        bail!("--role needs --name NAME, the same on the publisher and subscriber sides");
    }
    match a.common.role {
        None => return Ok(Some(cfg)),
        Some(Role::Sub) => peregrine_bench::measure::throughput::subscribe_role(&cfg)?,
        Some(Role::Pub) => scenario::throughput::publish_role(&cfg, json)?,
        Some(r) => bail!("--role {r:?} is not a throughput role: use --role pub or --role sub"),
    }
    Ok(None)
}

fn load(a: LoadArgs) -> Result<peregrine_bench::measure::load::LoadConfig> {
    let pacing = Pacing {
        seconds: a.timing.seconds,
        warmup_seconds: a.timing.warmup_seconds,
        ping_every: a.ping_every,
        cpus: a.cpus.pair(),
        idle: a.idle.idle,
    };
    let transport = kernel_scheme(a.transport, "--uri")?;
    let mut cfg = pacing.cell(transport, a.size, a.rate, Method::Pings);
    cfg.uri = a.uri;
    peregrine_bench::measure::load::validate(&cfg)?;
    Ok(cfg)
}

/// The pacing of the sweep and the search: a spinning subscriber.
fn spinning(timing: Timing, ping_every: Option<u64>, cpus: Cpus) -> Pacing {
    Pacing {
        seconds: timing.seconds,
        warmup_seconds: timing.warmup_seconds,
        ping_every,
        cpus: cpus.pair(),
        idle: IdleKind::Spin,
    }
}

fn sweep(a: SweepArgs) -> SweepPlan {
    SweepPlan {
        transports: a.transports.transport,
        sizes: a.sizes,
        rates: a.rates,
        pacing: spinning(a.timing, a.ping_every, a.cpus),
    }
}

fn max(a: MaxArgs) -> MaxPlan {
    MaxPlan {
        transports: a.transports.transport,
        sizes: a.sizes,
        start_rate: a.start_rate,
        max_rate: a.max_rate,
        pacing: spinning(a.timing, None, a.cpus),
    }
}

fn embedded(a: LatencyArgs) -> Result<EmbeddedPlan> {
    if !a.embedded {
        bail!("`peregrine bench latency` measures one-way latency from embedded timestamps: add --embedded (for the half round trip, use `peregrine bench pingpong`)");
    }
    Ok(EmbeddedPlan {
        transport: a.transport.transport,
        size: a.size,
        rates: a.rates,
        pacing: Pacing {
            seconds: a.timing.seconds,
            warmup_seconds: a.timing.warmup_seconds,
            ping_every: None,
            cpus: a.cpus.pair(),
            idle: a.idle.idle,
        },
    })
}

/// `bench resolver`: prints its table; writes no results folder.
/// `bench record`: prints its table (or one JSON object per size).
fn record(a: &RecordArgs, json: bool) -> Result<()> {
    use peregrine_bench::record::{run, table, RecordBenchConfig};
    let durability = a
        .fsync
        .parse()
        .map_err(|e: peregrine_archive::ArchiveError| anyhow::anyhow!("--fsync {e}"))?;
    let cfg = RecordBenchConfig {
        sizes: a.size.iter().map(|s| *s as usize).collect(),
        bytes: a.bytes,
        durability,
        dir: a.dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("peregrine-bench-record-{}", std::process::id()))
        }),
        runs: a.runs,
    };
    let rows = run(&cfg)?;
    let export = peregrine_bench::record::run_export(&cfg)?;
    if json {
        for r in &rows {
            let mut v = serde_json::to_value(r)?;
            v["kind"] = "record".into();
            println!("{v}");
        }
        let mut v = serde_json::to_value(&export)?;
        v["kind"] = "export".into();
        println!("{v}");
    } else {
        print!("{}", table(&rows, &cfg));
        print!("{}", peregrine_bench::record::export_line(&export));
    }
    Ok(())
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
    } else {
        print!("{}", r.table());
    }
    Ok(())
}

/// The default update rates of `bench fanout --latency`: seed 003's Table 2 from 1K, in
/// coarser steps past 100K.
pub const FANOUT_LATENCY_RATES: [f64; 12] = [
    1e3, 5e3, 10e3, 20e3, 50e3, 100e3, 150e3, 200e3, 300e3, 400e3, 500e3, 600e3,
];

fn fanout(a: FanoutArgs) -> Result<Scenario> {
    use peregrine_bench::fanout::{FanoutConfig, WriteMode};
    use peregrine_bench::scenario::fanout::{FanoutPlan, MdLatencyPlan};
    if a.rates.is_some() && !a.latency {
        bail!("--rates lists the update rates of --latency: add --latency, or drop --rates (the throughput search finds its rates itself from --start-rate)");
    }
    if !(a.max_lag_ms > 0.0 && a.max_lag_ms <= 60_000.0) {
        bail!(
            "--max-lag-ms {} is not accepted: give 1 to 60000 milliseconds",
            a.max_lag_ms
        );
    }
    let mode = match a.mode {
        Some(m) => m,
        None if a.latency => WriteMode::Latency,
        None => WriteMode::Throughput,
    };
    let cfg = FanoutConfig {
        clients: a.clients.unwrap_or(if a.latency { 1 } else { 16 }) as usize,
        items_per_client: a.items as usize,
        overlap: a.overlap,
        size: a.size,
        mode,
        seconds: a.timing.seconds,
        warmup_seconds: a.timing.warmup_seconds,
        max_lag_ms: a.max_lag_ms,
        seed: a.seed,
        client_busy_poll_us: a.client_busy_poll_us,
        pin: match a.pin.as_deref() {
            Some("none") => None,
            Some(p) => Some(
                peregrine_bench::CpuPair::parse(p)
                    .map_err(|e| anyhow::anyhow!("--pin: {e} (or --pin none)"))?,
            ),
            None if a.latency => Some(peregrine_bench::CpuPair::default_pair()),
            None => None,
        },
        backbone_datagram: a.backbone_datagram as usize,
        backbone_sealed: a.backbone_auth == "key",
        client_tls: a.client_tls,
        client_websocket: a.client_websocket,
        attack: a
            .attack
            .as_deref()
            .and_then(peregrine_bench::fanout::attack::Attack::from_name),
    };
    cfg.validate()?;
    let compare_nats = a.compare.is_some();
    Ok(if a.latency {
        Scenario::MdLatency(MdLatencyPlan {
            cfg,
            compare_nats,
            rates: a.rates.unwrap_or_else(|| FANOUT_LATENCY_RATES.to_vec()),
        })
    } else {
        Scenario::Fanout(FanoutPlan {
            cfg,
            compare_nats,
            start_rate: a.start_rate,
            max_rate: a.max_rate,
        })
    })
}
