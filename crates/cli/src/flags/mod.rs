//! Every flag of `peregrine`, defined once with clap: parsing, help and the value checks of
//! single flags come from these definitions (ripgrep's model). Turning them into the settings
//! of a run, with the checks that need several flags at once, is the job of [`crate::cmd`].

pub mod archive;
pub mod bench;
pub mod md;
pub mod shared;
pub mod stat;
pub mod topics;
pub mod values;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "peregrine",
    version,
    about = "Peregrine: low-latency publish/subscribe for trading and market data"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// What to log to standard error: a level (error, warn, info, debug, trace) or a filter
    /// in RUST_LOG's syntax (`peregrine=debug,warn`). Default: RUST_LOG, else warn.
    #[arg(long, global = true, value_parser = parse_log)]
    pub log: Option<String>,
}

/// A `--log` value: a level or an `EnvFilter` directive list, checked here so a typo is an
/// error naming it rather than a silent default.
fn parse_log(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| {
            format!("'{s}' is not a log filter ({e}): give error, warn, info, debug or trace, or directives like peregrine=debug,warn")
        })
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Measure latency and throughput on this machine (no subcommand: the default suite).
    /// Every run writes a results folder and renders its report.
    Bench(bench::BenchArgs),
    /// Render a results folder from its saved data: text tables, SVG and PNG charts, and one
    /// self-contained HTML page.
    Report(ReportArgs),
    /// Publish on a topic found by name (no URI): prints what it sends with --print and a
    /// rate line every second.
    Pub(topics::PubArgs),
    /// Subscribe to a topic, a glob (md.eq.*) or with --regex a regular expression: prints
    /// what it receives with --print, sources as they come and go, and a rate line every second.
    Sub(topics::SubArgs),
    /// Record topics (names or globs) into a folder: each stream in checksummed segment
    /// files, forced to the disk as --fsync says, resumed after a crash with a torn tail cut.
    Record(archive::RecordArgs),
    /// Replay a recorded topic from a folder `peregrine record` wrote, from a sequence or a
    /// time: --print shows each message as `peregrine sub --print` does.
    Replay(archive::ReplayArgs),
    /// Relay topic resolution between hosts where multicast does not reach; clients name it
    /// with PEREGRINE_RESOLVER_DAEMON=HOST:PORT.
    Resolverd(topics::ResolverdArgs),
    /// Market data feed: publishes UPDATEs of the items of a file onto the backbone at a
    /// rate, with Zipf-like popularity, and answers distributors' image requests.
    Feed(md::FeedArgs),
    /// Market data distributor: caches every item's image from the backbone and serves TCP
    /// clients their watchlists, with logins, entitlements and bounded queues.
    Distributor(md::DistributorArgs),
    /// Market data client: logs in to a distributor, opens a watchlist, counts updates and
    /// measures one-way latency; --print shows every message.
    Client(md::ClientArgs),
    /// Market data post: logs in to a distributor and posts fields to an item (a
    /// contribution its provider accepts or refuses); exits 0 only when accepted.
    Post(md::PostArgs),
    /// Show the counters of every live Peregrine process of this user (publishers,
    /// subscribers, resolvers, distributors, resolverd): once, with --watch every second, as
    /// JSON, or served to Prometheus with --serve ADDR.
    Stat(stat::StatArgs),
    /// (internal) One side of a benchmark, started by `peregrine bench` itself.
    #[command(hide = true)]
    Helper(HelperArgs),
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The results folder (it holds results.json).
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct HelperArgs {
    /// The helper's settings, as JSON.
    pub spec: String,
}
