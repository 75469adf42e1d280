//! The flags of `peregrine bench` and its scenarios.

use super::shared::{Cpus, Idle, Timing, Transport, Transports, WarmupCount};
use super::values;
use clap::{Args, Subcommand, ValueEnum};
use peregrine::SlowSubscriberPolicy;
use peregrine_bench::measure::pingpong::StreamMode;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Option<Scenario>,
    /// Print one JSON object per result line instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The results folder to write (a new one; default: a dated folder under
    /// $PEREGRINE_RESULTS, else ./peregrine-results).
    #[arg(long, global = true)]
    pub out: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Scenario {
    /// The machine's floor: a cache-line ping-pong between two processes on two cores.
    Floor(FloorArgs),
    /// Half round trip over a transport between two processes, with its ratio to the floor.
    Pingpong(PingPongArgs),
    /// Echo (seed 004, Reflex): the half round trip of messages sent in normal (batched) and
    /// urgent mode, per transport, mode and size, each against the ping-pong of the same
    /// transport and size measured in the same run. Both sides run an application's event
    /// loop: offer (no flush), then poll and run the publisher's duty cycle on every empty poll.
    Echo(EchoArgs),
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
    /// The machine's jitter floor (sysjitter's method): a thread per CPU spins reading the
    /// clock and counts the gaps the machine imposes (over 1, 10, 100 us and 1 ms per second,
    /// the largest, the fraction of time lost).
    Jitter(JitterArgs),
    /// Market data fan-out (seed 003's Producer 50/50): a feed, a distributor and N client
    /// processes whose watchlists share a fraction of their items; the feed rate is raised
    /// until an update is lost, a client lags or the distributor refuses, and the highest
    /// aggregate updates/s delivered is reported. With --latency, one-way latency feed to
    /// client over a list of update rates (seed 003's Table 2). --compare nats runs the same
    /// through nats-server.
    Fanout(FanoutArgs),
    /// Topic resolution traffic: packets, advertisements and bytes per second on the resolver
    /// group while one context advertises N topics, and how long a wildcard subscriber takes
    /// to learn them all (prints its table; writes no results folder).
    Resolver(ResolverTrafficArgs),
    /// Recording and replay against the disk itself: a recording written as fast as it
    /// takes messages against plain appends of the same bytes (forced alike), and replayed
    /// against reading the same files sequentially, per message size (prints its table;
    /// writes no results folder).
    Record(RecordArgs),
    /// A failover group under kills: two member processes publish one application-sequenced
    /// stream at a steady rate, this process subscribes to the group, and the member whose
    /// copies are being delivered is killed with SIGKILL --kills times (restarted each time):
    /// the gap each kill left, and every sequence checked (lost, duplicated, out of order).
    Failover(FailoverArgs),
}

#[derive(Args, Debug)]
#[command(
    mut_arg("transport", |a| a.default_value("udp")
        .help("The transports the members publish on, comma-separated (ipc, udp, tcp)")),
    mut_arg("cpus", |a| a.help("CPUs A,B: the subscriber spins on A, both members run on B")),
)]
pub struct FailoverArgs {
    #[command(flatten)]
    pub transports: Transports,
    /// Messages per second of the stream (k and m suffixes).
    #[arg(long, default_value = "100k", value_parser = values::parse_rate)]
    pub rate: f64,
    /// Bytes per message (8 to 65000).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// How many times the leading member is killed.
    #[arg(long, default_value_t = 20)]
    pub kills: u32,
    /// The subscriber's window for a missing sequence, in milliseconds.
    #[arg(long, default_value_t = 100, value_parser = values::parse_window_ms)]
    pub window_ms: u64,
    #[command(flatten)]
    pub cpus: Cpus,
    /// Also the A/B paths: one publisher sending each datagram on two multicast groups
    /// (`mcast://A:PORT?b=B`) at --rate, this process subscribing to both, and line A cut
    /// --kills times by an nft rule in a network namespace of the run's own (needs root, ip
    /// and nft).
    #[arg(long)]
    pub paths: bool,
    /// Also the distributor pair (cold): a feed, two distributors and a consumer of both; the
    /// distributor it uses is killed --kills times.
    #[arg(long)]
    pub distributors: bool,
    /// Also the A/B feed pair: two `peregrine feed --ab` of one stream, a distributor and a
    /// consumer; the feeds are killed in turn --kills times.
    #[arg(long)]
    pub feeds: bool,
    /// The feed's updates per second in the distributor pair and A/B feed cases (k and m
    /// suffixes).
    #[arg(long, default_value = "10k", value_parser = values::parse_rate)]
    pub feed_rate: f64,
    /// Items of the feed in the distributor pair and A/B feed cases.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub items: u64,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Message sizes in bytes, comma-separated (8 to 1m).
    #[arg(long, value_delimiter = ',', default_value = "32,1024", value_parser = values::parse_size)]
    pub size: Vec<u64>,
    /// Bytes of records written per size and run (k, m, g suffixes).
    #[arg(long, default_value = "512m", value_parser = values::parse_size)]
    pub bytes: u64,
    /// When records are forced to the disk: none, each or interval:MS.
    #[arg(long, default_value = "interval:100")]
    pub fsync: String,
    /// The folder to write in (on the disk to measure; made and removed): default a folder
    /// of the run's own under the system's temporary folder.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Runs per size (the median is shown).
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
}

#[derive(Args, Debug)]
pub struct ResolverTrafficArgs {
    /// Topics advertised.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub topics: u32,
    /// Seconds to run (the initial phase lasts 5 s).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(2..=600))]
    pub seconds: u32,
    /// A multicast group of the run's own (loopback).
    #[arg(long, default_value = "239.255.90.200:14499")]
    pub group: std::net::SocketAddrV4,
    /// Advertisements per second at most (0: unlimited).
    #[arg(long, default_value_t = 20_000)]
    pub max_advertisements_per_s: u64,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("seconds", |a| a.default_value("3")),
    mut_arg("warmup_seconds", |a| a.default_value("1")),
    mut_arg("idle", |a| a.help("What the subscriber does when there is nothing to read: spin, yield, backoff or block")),
    mut_arg("cpus", |a| a.help("Two CPUs, `A,B`: publisher on A, subscriber on B (default: the first two)")),
)]
pub struct LoadArgs {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless --uri says
    /// otherwise), or xdp: udp through AF_XDP (kernel bypass), measured with --netns beside
    /// the kernel's udp.
    #[arg(long, default_value = "ipc", value_parser = values::parse_bench_transport)]
    pub transport: values::BenchTransport,
    /// Across a veth pair between two network namespaces this run creates (root): the load
    /// through the kernel's udp, the same through AF_XDP (xdp=), and sockperf's ping-pong at
    /// the same rate over the pair when installed, one row each. --transport udp or xdp.
    #[arg(long)]
    pub netns: bool,
    /// With --netns: message sizes, comma-separated, 8 to 1440 (default: --size), the paths
    /// run size by size.
    #[arg(long, value_delimiter = ',', requires = "netns", value_parser = values::parse_message_size)]
    pub sizes: Option<Vec<usize>>,
    /// The load stream's URI (the publisher binds it).
    #[arg(long)]
    pub uri: Option<String>,
    /// Message size in bytes (at least 8; 16 with --embedded).
    #[arg(long, default_value_t = 32)]
    pub size: usize,
    /// Messages per second (suffixes k, m: 100k, 1.5m).
    #[arg(long, default_value = "100k", value_parser = values::parse_rate)]
    pub rate: f64,
    /// One ping per this many messages (default: about 5000 pings per second).
    #[arg(long)]
    pub ping_every: Option<u64>,
    #[command(flatten)]
    pub timing: Timing,
    #[command(flatten)]
    pub idle: Idle,
    #[command(flatten)]
    pub cpus: Cpus,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("cpus", |a| a.help("Two CPUs, `A,B`: publisher on A, subscriber on B")),
)]
pub struct SweepArgs {
    #[command(flatten)]
    pub transports: Transports,
    /// Message sizes in bytes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "32,128,256,512,1024,1472,2048"
    )]
    pub sizes: Vec<usize>,
    /// Rates in messages per second, comma-separated (suffixes k, m).
    #[arg(long, value_delimiter = ',', default_value = "10k,100k,250k,500k,1m,1.5m,2m", value_parser = values::parse_rate)]
    pub rates: Vec<f64>,
    #[command(flatten)]
    pub timing: Timing,
    /// One ping per this many messages (default: about 5000 pings per second).
    #[arg(long)]
    pub ping_every: Option<u64>,
    #[command(flatten)]
    pub cpus: Cpus,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("cpus", |a| a.help("Two CPUs, `A,B`: publisher on A, subscriber on B")),
)]
pub struct MaxArgs {
    #[command(flatten)]
    pub transports: Transports,
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "32,256,1024")]
    pub sizes: Vec<usize>,
    /// The first rate tried (suffixes k, m).
    #[arg(long, default_value = "1m", value_parser = values::parse_rate)]
    pub start_rate: f64,
    /// The highest rate tried (suffixes k, m).
    #[arg(long, default_value = "200m", value_parser = values::parse_rate)]
    pub max_rate: f64,
    #[command(flatten)]
    pub timing: Timing,
    #[command(flatten)]
    pub cpus: Cpus,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("idle", |a| a.help("What the subscriber does when there is nothing to read: spin, yield, backoff or block")),
    mut_arg("cpus", |a| a.help("Two CPUs, `A,B`: subscriber on A, publisher on B")),
)]
pub struct LatencyArgs {
    /// Embedded timestamps: the publisher writes each message's send time, the subscriber on
    /// the same host reads it (the only method of this command; ping-pong is `bench pingpong`).
    #[arg(long)]
    pub embedded: bool,
    #[command(flatten)]
    pub transport: Transport,
    /// Message size in bytes (at least 16).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Update rates, comma-separated (suffixes k, m).
    #[arg(long, value_delimiter = ',', default_value = "1k,10k,50k,100k,250k,500k,1m", value_parser = values::parse_rate)]
    pub rates: Vec<f64>,
    #[command(flatten)]
    pub timing: Timing,
    #[command(flatten)]
    pub idle: Idle,
    #[command(flatten)]
    pub cpus: Cpus,
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    #[command(flatten)]
    pub cpus: Cpus,
    /// Run one side only (the other side is started by hand with the same --name).
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Name of the shared-memory segments, to pair sides started by hand.
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Ping,
    Pong,
    Pub,
    Sub,
}

#[derive(Args, Debug)]
pub struct FloorArgs {
    /// Measured round trips.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    #[command(flatten)]
    pub warmup: WarmupCount,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("idle", |a| a.help("What a side does when there is nothing to read: spin, yield, backoff or block")),
)]
pub struct PingPongArgs {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless a URI flag says
    /// otherwise), or xdp: udp through AF_XDP (kernel bypass), measured with --netns beside
    /// the kernel's udp.
    #[arg(long, default_value = "ipc", value_parser = values::parse_bench_transport)]
    pub transport: values::BenchTransport,
    /// Across a veth pair between two network namespaces this run creates (root): udp through
    /// the kernel, the same through AF_XDP (xdp=), and sockperf over the pair when installed,
    /// one row each for every size of --sizes (the seeds' "UDP through the kernel vs kernel
    /// bypass" table). --transport udp or xdp.
    #[arg(long)]
    pub netns: bool,
    /// With --netns: message sizes, comma-separated, 12 to 1472 (default: 12,64,256,512,1024,1472;
    /// --size is not used).
    #[arg(long, value_delimiter = ',', requires = "netns", value_parser = values::parse_message_size)]
    pub sizes: Option<Vec<usize>>,
    /// URI of the ping stream (ping side publishes, pong side subscribes), e.g.
    /// udp://10.0.0.1:40001: for two hosts, give the same --ping-uri and --pong-uri to both
    /// sides. `mode=urgent` is added unless the URI names a mode.
    #[arg(long)]
    pub ping_uri: Option<String>,
    /// URI of the pong stream (pong side publishes, ping side subscribes).
    #[arg(long)]
    pub pong_uri: Option<String>,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value_t = 32)]
    pub size: usize,
    /// Measured round trips.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    #[command(flatten)]
    pub warmup: WarmupCount,
    #[command(flatten)]
    pub idle: Idle,
    /// Do not measure the floor (no ratio column). The floor of ipc is the cache-line
    /// ping-pong, measured first and in short bursts between blocks of pings, so each block is
    /// compared with the floor of its own moment; the floor of udp, mcast and tcp is the
    /// bare-socket ping-pong (--raw), and the cache-line bursts flag a machine mode change.
    #[arg(long)]
    pub no_floor: bool,
    /// Only the bare-socket ping-pong (udp, mcast, tcp): the baseline of Peregrine's overhead.
    #[arg(long)]
    pub raw: bool,
    /// Also run another implementation's ping-pong with the same size, transport, busy-poll
    /// mode and CPUs, and print its row and the ratios: `sockperf` (the Debian package).
    #[arg(long, value_parser = ["sockperf"])]
    pub compare: Option<String>,
    /// The pings go through a failover group of one member: each carries the group's 16-byte
    /// header and the pong side's subscriber arbitrates them (what a failover subscriber costs
    /// when nothing fails; compare with the same run without it).
    #[arg(long, conflicts_with = "raw")]
    pub group: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("transport", |a| a.default_value("tcp,udp,ipc").help(
        "Transports, comma-separated: ipc, udp, mcast, tcp (loopback). ipc has no send modes: \
         both modes run the same path there, and the report says so")),
    mut_arg("cpus", |a| a.help("Two CPUs, `A,B`: the sender runs on A, the echo side on B (default: the first two)")),
)]
pub struct EchoArgs {
    #[command(flatten)]
    pub transports: Transports,
    /// Send modes of both streams, comma-separated: normal (batched: a message leaves when the
    /// oldest of its batch waited the URI's batch_interval_us, 100 us by default) and urgent
    /// (every message leaves at once).
    #[arg(long, value_delimiter = ',', default_value = "normal,urgent", value_parser = values::parse_mode)]
    pub modes: Vec<StreamMode>,
    /// Message sizes in bytes, comma-separated (at least 8: each message carries its number).
    #[arg(long, value_delimiter = ',', default_value = "28,1460", value_parser = values::parse_message_size)]
    pub sizes: Vec<usize>,
    /// Measured round trips of every cell and of the ping-pong references (default: 50000,
    /// and 10000 in normal mode, whose round trip waits about two batch intervals, ~220 us;
    /// `bench pingpong`'s 1000000 would take minutes per cell: the default run takes about
    /// 20 s on loopback). A tenth as many run first as warm-up.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    #[command(flatten)]
    pub cpus: Cpus,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("idle", |a| a.help("What subscribers do when there is nothing to read: spin, yield, backoff or block")),
)]
pub struct ThroughputArgs {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless a URI flag says
    /// otherwise), or xdp: udp through AF_XDP (kernel bypass), measured with --netns beside
    /// the kernel's udp.
    #[arg(long, default_value = "ipc", value_parser = values::parse_bench_transport)]
    pub transport: values::BenchTransport,
    /// Across a veth pair between two network namespaces this run creates (root): udp through
    /// the kernel and the same through AF_XDP (xdp=), one row each. --transport udp or xdp.
    #[arg(long)]
    pub netns: bool,
    /// The stream's URI, for sides started by hand or on two hosts (the publisher binds it).
    #[arg(long)]
    pub uri: Option<String>,
    /// Message size in bytes.
    #[arg(long, default_value_t = 32)]
    pub size: usize,
    /// How long to publish, in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Publish exactly this many messages instead of for --seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Subscriber processes.
    #[arg(long, default_value_t = 1)]
    pub subscribers: u32,
    /// What happens when a subscriber falls a whole log behind: backpressure or overwrite.
    #[arg(long, default_value = "backpressure", value_parser = values::parse_policy)]
    pub policy: SlowSubscriberPolicy,
    /// Log size in bytes, a power of two from 64k to 4g (suffixes k, m, g).
    #[arg(long, default_value = "16m", value_parser = values::parse_capacity)]
    pub capacity: u64,
    #[command(flatten)]
    pub idle: Idle,
    /// udp, mcast: each subscriber drops this fraction of the datagrams it receives (a seeded
    /// loss generator) and repairs them by NAK, e.g. 1%.
    #[arg(long)]
    pub loss: Option<String>,
    /// Every message goes through a failover group of one member: it carries the group's
    /// 16-byte header and the subscribers arbitrate (what a failover subscriber costs when
    /// nothing fails; compare with the same run without it).
    #[arg(long)]
    pub group: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("seconds", |a| a.default_value("3").help("Seconds of updates in each probe")),
    mut_arg("warmup_seconds", |a| a.help(
        "Latency and the lag bound count from this long after each client's first update (the \
         start's images travel with the first updates); every update is still checked. \
         (`--warmup-s` is an older spelling.)")),
)]
pub struct FanoutArgs {
    /// Client processes (default 16; 1 with --latency).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=512))]
    pub clients: Option<u64>,
    /// Items on each client's watchlist.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=17_576))]
    pub items: u64,
    /// The fraction of each client's items every client watches: 0.5 or 50%.
    #[arg(long, default_value = "50%", value_parser = values::parse_fraction)]
    pub overlap: f64,
    /// UPDATE size in bytes (60, or 64 to 16384; 74 is the seed's).
    #[arg(long, default_value_t = 74)]
    pub size: usize,
    /// How the distributor writes to clients (default throughput; latency with --latency:
    /// what arrives together is written at once, and it busy-polls 200 us after backbone data).
    #[arg(long, value_parser = super::md::parse_mode)]
    pub mode: Option<super::md::WriteMode>,
    /// One-way latency over a list of update rates (seed 003's Table 2) instead of the rate
    /// search.
    #[arg(long)]
    pub latency: bool,
    /// With --latency: feed update rates, comma-separated (suffixes k, m); the run stops after
    /// the first one not sustained.
    #[arg(long, value_delimiter = ',', value_parser = values::parse_rate)]
    pub rates: Option<Vec<f64>>,
    /// Also run the same clients, watchlists, updates and rates through another system and
    /// print the ratio: `nats` (nats-server, the Debian package).
    #[arg(long, value_parser = ["nats"])]
    pub compare: Option<String>,
    #[command(flatten)]
    pub timing: Timing,
    /// The first feed rate the search tries (suffixes k, m).
    #[arg(long, default_value = "100k", value_parser = values::parse_rate)]
    pub start_rate: f64,
    /// The highest feed rate the search tries.
    #[arg(long, default_value = "20m", value_parser = values::parse_rate)]
    pub max_rate: f64,
    /// A client lags when an update reaches it later than this after the feed sent it.
    #[arg(long, default_value_t = 100.0)]
    pub max_lag_ms: f64,
    /// Seed of the feed's item draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Clients of both systems keep reading without blocking this long after data (0: they
    /// block; on 2 cores a spinning client takes the core the tier needs).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub client_busy_poll_us: u64,
    /// Pin the tier (distributor or nats-server) to CPU B and the feed and clients to CPU A,
    /// `A,B` (default with --latency: the first two CPUs; `none` for no pinning, the default of
    /// the throughput search).
    #[arg(long)]
    pub pin: Option<String>,
    /// Payload bytes per backbone datagram (the multicast URI's `datagram`; 1472 fits a
    /// 1500-byte MTU, loopback's is 65536).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(512..=65_000))]
    pub backbone_datagram: u64,
    /// The backbone sealed with the user's key (`key`, the default of the market data tier) or
    /// not (`none`, the lab opt-out): run both to see what authentication costs.
    #[arg(long, default_value = "key", value_parser = ["key", "none"])]
    pub backbone_auth: String,
    /// Clients connect to the distributor over TLS (a CA and certificate made for the run):
    /// run with and without to see what TLS costs.
    #[arg(long)]
    pub client_tls: bool,
    /// Clients speak the WebSocket JSON API to the distributor's --websocket port instead of
    /// the binary protocol: run with and without to see what JSON costs.
    #[arg(long, conflicts_with = "client_tls")]
    pub client_websocket: bool,
    /// Attack the distributor during every probe, from the bench process: `logins` (wrong
    /// tokens, one connection each), `slots` (connections that never log in) or `globs` (OPENs
    /// of 1,000 globs from a logged-in connection); compare with a run without.
    #[arg(long, value_parser = ["logins", "slots", "globs"])]
    pub attack: Option<String>,
}

#[derive(Args, Debug)]
pub struct JitterArgs {
    /// The CPUs to spin on, comma-separated, all at once (default: the first two allowed).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// How long each CPU spins.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::{EchoArgs, Scenario};
    use crate::flags::{Cli, Command};
    use clap::Parser;
    use peregrine::Scheme;
    use peregrine_bench::measure::pingpong::StreamMode;

    fn echo(args: &[&str]) -> Result<EchoArgs, String> {
        let argv = ["peregrine", "bench", "echo"].iter().chain(args);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Bench(b) => match b.scenario {
                Some(Scenario::Echo(a)) => Ok(a),
                other => panic!("not bench echo: {other:?}"),
            },
            _ => panic!("not bench"),
        }
    }

    #[test]
    fn echo_defaults_are_the_seed_s_runs_on_every_transport() {
        let a = echo(&[]).unwrap();
        assert_eq!(
            a.transports.transport,
            [Scheme::Tcp, Scheme::Udp, Scheme::Ipc]
        );
        assert_eq!(a.modes, [StreamMode::Normal, StreamMode::Urgent]);
        assert_eq!(a.sizes, [28, 1460]);
        assert_eq!(a.count, None);
        let a = echo(&["--transport", "udp", "--modes", "urgent", "--sizes", "64"]).unwrap();
        assert_eq!(
            (a.transports.transport, a.modes, a.sizes),
            (vec![Scheme::Udp], vec![StreamMode::Urgent], vec![64])
        );
    }

    #[test]
    fn a_bad_mode_is_named_with_the_modes_there_are() {
        let e = echo(&["--modes", "normal,fast"]).unwrap_err();
        assert!(e.contains("'fast' is not a send mode"), "{e}");
        assert!(e.contains("normal,urgent"), "{e}");
    }

    #[test]
    fn an_empty_list_or_a_stray_comma_says_so() {
        for args in [
            ["--modes", ""],
            ["--modes", "normal,"],
            ["--sizes", ""],
            ["--sizes", "28,,1460"],
        ] {
            let e = echo(&args).unwrap_err();
            assert!(
                e.contains("an empty list, or a stray comma"),
                "{args:?}: {e}"
            );
        }
        let e = echo(&["--transport", ""]).unwrap_err();
        assert!(e.contains("'' is not a transport"), "{e}");
    }

    #[test]
    fn a_bad_size_is_named_with_the_fix() {
        let e = echo(&["--sizes", "28,abc"]).unwrap_err();
        assert!(e.contains("'abc' is not a size in bytes"), "{e}");
        assert!(e.contains("28 or 1460"), "{e}");
        let e = echo(&["--sizes", "4"]).unwrap_err();
        assert!(
            e.contains("4 bytes is too small") && e.contains("at least 8"),
            "{e}"
        );
        let e = echo(&["--count", "0"]).unwrap_err();
        assert!(e.contains("--count") && e.contains('0'), "{e}");
    }
}
