//! The flags of the market data commands: `peregrine feed`, `peregrine distributor` and
//! `peregrine client` (docs/market-data.md, "The drivers").

use super::shared::StopAfter;
use super::values;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use peregrine_market_data::backbone::{DEFAULT_BACKBONE, DEFAULT_SERVICE};
pub use peregrine_market_data::distributor::{WriteMode, DEFAULT_LISTEN};

#[derive(Args, Debug)]
#[command(mut_arg("seconds", |a| a.alias("duration").help(
    "Stop after this many seconds of UPDATEs, counted from when the start-up images are out \
     (default: run until interrupted; `--duration` is an older spelling)")))]
pub struct FeedArgs {
    /// The items to publish synthetic quotes of: `sample` (4000 built-in symbols, AAA.O to
    /// FXV.T, the lines of crates/md/items/sample.txt), `sample:N` (the first N of 17576), or
    /// a file with one item name per line (blank lines and lines starting with # are
    /// skipped; a file named sample is ./sample).
    #[arg(
        long,
        value_parser = parse_item_list,
        required_unless_present = "ticks",
        conflicts_with = "ticks",
        requires = "rate"
    )]
    pub items: Option<ItemList>,
    /// UPDATEs per second over all items (k and m suffixes: 10k, 1.5m), with --items.
    #[arg(long, value_parser = values::parse_rate, conflicts_with = "ticks")]
    pub rate: Option<f64>,
    /// Replay recorded ticks instead: a CSV of time,service,item,FIELD=value... (the first
    /// tick of an item is its image, later ones its updates; docs/market-data.md), or
    /// `sample` (the built-in crates/md/ticks/sample.csv: 300 ticks of 10 items). Published at
    /// the recorded pace, or --speed times it.
    #[arg(long, value_parser = parse_tick_source)]
    pub ticks: Option<TickSource>,
    /// With --ticks: replay N times faster than recorded (0.5 is half speed), or `max`: as
    /// fast as the backbone takes them.
    #[arg(long, value_parser = parse_speed, requires = "ticks")]
    pub speed: Option<f64>,
    /// The backbone to publish on (the topic is md.<service>).
    #[arg(long, default_value = DEFAULT_BACKBONE)]
    pub backbone: String,
    /// Where the distributors' image requests come from (topic md.<service>.req; default:
    /// the backbone's address with the port + 1).
    #[arg(long)]
    pub requests: Option<String>,
    /// The service the items belong to.
    #[arg(long, default_value = DEFAULT_SERVICE, value_parser = values::parse_service)]
    pub service: String,
    /// Seed of the item popularity draws and price moves (the same seed, the same sequence).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Zipf exponent of item popularity: the k-th most popular item is drawn with a weight
    /// of 1/k^s (0: every item alike).
    #[arg(long, default_value_t = 1.0, value_parser = values::parse_zipf)]
    pub zipf: f64,
    #[command(flatten)]
    pub stop: StopAfter,
    /// Size of each UPDATE in bytes: 72 is a plain quote (BID, ASK, BIDSIZE, ASKSIZE); 60, or
    /// 64 to 16384, are made with fewer fields or padding strings (docs/market-data.md).
    #[arg(long, default_value_t = 72)]
    pub size: usize,
    /// At exit, write one line per item to this file: `NAME LAST_SEQ`, the item_seq of the
    /// last message sent for it (what a client that missed nothing saw last).
    #[arg(long)]
    pub items_out: Option<PathBuf>,
    /// What to do with clients' posts to the feed's items: refuse them (the default: a feed
    /// replays a source, it takes no contributions), publish them (each post's fields go out
    /// as an update of its item, or a refresh for a full image, and the poster is told
    /// "accepted"), or ignore them (never answered: the distributor tells the poster
    /// "timeout"; for testing clients).
    #[arg(long, value_enum, default_value_t = PostPolicy::Refuse)]
    pub posts: PostPolicy,
    /// Print a JSON object per statistics line (and at the end) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Publish as one feed of an A/B pair: update N (of every item in turn) is due N/rate
    /// seconds after the Unix epoch and is numbered and drawn from N and --seed alone, so that
    /// feeds started with the same --items, --rate and --seed publish the same stream, and a
    /// distributor takes each update from whichever comes first. Either may be stopped and
    /// started again at any time: it resumes at the clock's update. Plain 72-byte quotes.
    #[arg(long, requires = "items", conflicts_with_all = ["ticks", "zipf"])]
    pub ab: bool,
}

/// `peregrine post`: one contribution to an item, answered by its provider.
#[derive(Args, Debug)]
pub struct PostArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// The service of the item.
    #[arg(long, default_value = DEFAULT_SERVICE, value_parser = values::parse_service)]
    pub service: String,
    /// Post a full image (a new item) instead of an update.
    #[arg(long)]
    pub refresh: bool,
    /// A field dictionary to read the fields by (default: the distributor's, downloaded at
    /// login; a local one must agree with it).
    #[arg(long, value_name = "FILE")]
    pub dictionary: Option<PathBuf>,
    /// Print the answer as a JSON object.
    #[arg(long)]
    pub json: bool,
    /// The item to post to.
    pub item: String,
    /// The fields: NAME=VALUE as the dictionary types them (BID=189.25, TRDTIM_1=2026-11-28T10:00:00Z).
    #[arg(required = true, value_name = "NAME=VALUE")]
    pub fields: Vec<String>,
}

/// `peregrine feed --posts`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostPolicy {
    Refuse,
    Publish,
    Ignore,
}

/// Every flag but `--config`, `--hash-token` and `--json` can also be set in the config file
/// (the flag wins); the defaults apply to what neither sets.
#[derive(Args, Debug)]
pub struct DistributorArgs {
    /// Address and port to accept clients on (port 0: any free port, printed at start).
    /// Default 127.0.0.1:14500.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Also serve the WebSocket JSON API (tr_json2 messages) and the live quote board page
    /// on this address and port (over TLS with --tls-cert). Default: none.
    #[arg(long, value_name = "ADDR")]
    pub websocket: Option<SocketAddr>,
    /// The users file (TOML: each user's token SHA-256 and item globs).
    #[arg(long)]
    pub users: Option<PathBuf>,
    /// The backbone to subscribe to (one topic md.<service> per service). Default
    /// mcast://239.255.90.1:40900.
    #[arg(long)]
    pub backbone: Option<String>,
    /// Where to publish image requests (topic md.<service>.req; default: the backbone's
    /// address with the port + 1).
    #[arg(long)]
    pub requests: Option<String>,
    /// A service to carry (repeat for several). Default FEED1.
    #[arg(long = "service", value_parser = values::parse_service)]
    pub services: Vec<String>,
    /// throughput: writes coalesced under --flush-interval-ms (or 64 KiB); latency: updates
    /// written as soon as they arrive. Default throughput.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<WriteMode>,
    /// Throughput mode: how often client buffers are written (1 to 1000 ms). Default 20.
    #[arg(long)]
    pub flush_interval_ms: Option<u64>,
    /// Bound of each client's output queue in bytes (k, m suffixes). Default 4m.
    #[arg(long, value_parser = values::parse_size)]
    pub max_queue_bytes: Option<u64>,
    /// What happens to a client past its bound: conflate or disconnect (a user's `slow` in
    /// the users file wins). Default conflate.
    #[arg(long)]
    pub slow: Option<String>,
    /// Logged-in client connections at most. Default 1024.
    #[arg(long)]
    pub max_clients: Option<u64>,
    /// Serve clients over TLS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key (mode 0600, owned by you or root).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Ask clients for a certificate and check it against this PEM CA (users with
    /// `cert_subject` in the users file log in by it).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Accept logins over plaintext from other hosts (their tokens cross the network in the
    /// clear): only on a network you trust.
    #[arg(long)]
    pub allow_plaintext_logins: bool,
    /// The field dictionary clients download and posts are checked against (default: the
    /// built-in one).
    #[arg(long, value_name = "FILE")]
    pub dictionary: Option<PathBuf>,
    /// A TOML file setting any of the above (and more: docs/market-data.md); flags win.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the Argon2id hash (a PHC string, salted) of the token read from standard input,
    /// for `token_argon2` in the users file, and exit.
    #[arg(long)]
    pub hash_token: bool,
    /// Print statistics and the final counters as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// How a market data client reaches and logs in to a distributor (`client`, `post`).
#[derive(Args, Debug)]
pub struct ConnectArgs {
    /// The distributor's address, or several separated by commas (A,B): the client uses the
    /// first that accepts and moves to the next when it is lost.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub connect: String,
    /// The user to log in as.
    #[arg(long, value_parser = values::parse_user)]
    pub user: String,
    /// The user's token (default: the environment variable PEREGRINE_MD_TOKEN, which keeps
    /// it out of the process list).
    #[arg(long)]
    pub token: Option<String>,
    /// Connect over TLS, checking the distributor's certificate against this PEM CA.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Present this PEM client certificate (with --tls-key; for users with `cert_subject`).
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's PEM private key (mode 0600).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Check the distributor's certificate against this name instead of --connect's host.
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_server_name: Option<String>,
}

#[derive(Args, Debug)]
#[command(mut_arg("seconds", |a| a.help("Exit after this many seconds")))]
pub struct ClientArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// The watchlist: one item name or glob (`AAA.*`) per line.
    #[arg(long)]
    pub watch: PathBuf,
    /// The service of the watched items.
    #[arg(long, default_value = DEFAULT_SERVICE, value_parser = values::parse_service)]
    pub service: String,
    /// Print one line per message: REFRESH <item> <fields>, UPDATE <item> <fields>,
    /// STATUS <item> <state> (the statistics lines then go to standard error).
    #[arg(long)]
    pub print: bool,
    /// Exit after this many item messages (REFRESH, UPDATE, STATUS).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    #[command(flatten)]
    pub stop: StopAfter,
    /// Statistics lines and the summary as JSON objects.
    #[arg(long)]
    pub json: bool,
    /// A field dictionary to print fields with (default: the built-in one).
    #[arg(long)]
    pub dictionary: Option<PathBuf>,
    /// Record latency only for UPDATEs that arrive this many seconds after the first (a
    /// warm-up: the images of a fresh connection travel with the first updates).
    #[arg(long, default_value_t = 0.0, value_parser = values::parse_warmup)]
    pub latency_after_s: f64,
    /// At exit, write one line per item received to this file: `NAME FIRST_SEQ LAST_SEQ
    /// UPDATES REFRESHES` (the item_seq of its first REFRESH and of its last REFRESH or
    /// UPDATE, how many UPDATEs came and how many REFRESHes after the first), to check
    /// against the feed's `--items-out`.
    #[arg(long)]
    pub items_out: Option<PathBuf>,
    /// After data arrives, keep reading without blocking (a busy core) this many
    /// microseconds before sleeping in a blocking read: lower latency, more CPU (0 to
    /// 1000000; 0: always block).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub busy_poll_us: u64,
    /// The liveness interval to ask the distributor for, in milliseconds (default: the
    /// distributor's, 5000 unless configured; it takes the nearest its bounds allow). Each
    /// side pings at it; a distributor silent for three intervals is given up and the next
    /// one of --connect is tried.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3_600_000))]
    pub ping_interval_ms: Option<u32>,
    /// Ask for the images of the watchlist only (snapshot requests), print or count them, and
    /// exit once every one is answered.
    #[arg(long)]
    pub snapshot: bool,
    /// Ask for these fields only (a view): names of the dictionary or #FID, comma-separated
    /// (BID,ASK). An update that changes none of them is not sent.
    #[arg(long, value_delimiter = ',')]
    pub view: Vec<String>,
    /// Speak the WebSocket JSON API to the distributor's --websocket address (given as
    /// --connect) instead of the binary protocol: one connection, no reconnection, no TLS.
    #[arg(long, conflicts_with_all = ["snapshot", "tls_ca"])]
    pub websocket: bool,
    /// Warm standby: --connect names two distributors, A,B; the client logs in to both, its
    /// watchlist open on A and open but paused on B, and when A's connection is lost B is
    /// resumed (a refresh of each item that changed, then its updates): no reconnection.
    #[arg(long, conflicts_with_all = ["snapshot", "websocket"])]
    pub warm_standby: bool,
}

/// `--mode`: throughput or latency.
pub(crate) fn parse_mode(s: &str) -> Result<WriteMode, String> {
    WriteMode::from_name(s)
}

/// `--items`: the built-in sample names, or a file of names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemList {
    /// The first N names of `peregrine_md::quotes::sample_items`.
    Sample(usize),
    File(PathBuf),
}

impl std::fmt::Display for ItemList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemList::Sample(n) => write!(f, "sample:{n}"),
            ItemList::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// `sample`, `sample:N` (1 to 17576) or a file's path.
fn parse_item_list(s: &str) -> Result<ItemList, String> {
    use peregrine_md::quotes::{SAMPLE_ITEMS, SAMPLE_NAMES};
    if s == "sample" {
        return Ok(ItemList::Sample(SAMPLE_ITEMS));
    }
    if let Some(n) = s.strip_prefix("sample:") {
        return match n.parse::<usize>() {
            Ok(n) if (1..=SAMPLE_NAMES).contains(&n) => Ok(ItemList::Sample(n)),
            _ => Err(format!(
                "{s} is not accepted: give sample:N with N from 1 to {SAMPLE_NAMES} (the \
                 built-in names), or a file's path (./{s} for a file of that name)"
            )),
        };
    }
    if s.is_empty() {
        return Err("give sample, sample:N or a file of item names".into());
    }
    Ok(ItemList::File(PathBuf::from(s)))
}

/// `--ticks`: the built-in sample ticks, or a file of ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TickSource {
    /// `peregrine_md::ticks::SAMPLE`.
    Sample,
    File(PathBuf),
}

impl std::fmt::Display for TickSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TickSource::Sample => f.write_str("sample"),
            TickSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// `sample` or a file's path.
fn parse_tick_source(s: &str) -> Result<TickSource, String> {
    match s {
        "sample" => Ok(TickSource::Sample),
        "" => Err("give sample or a file of ticks (time,service,item,FIELD=value...)".into()),
        _ => Ok(TickSource::File(PathBuf::from(s))),
    }
}

/// `--speed`: a factor over the recorded pace (more than 0, at most 1e6), or `max` (infinite).
fn parse_speed(s: &str) -> Result<f64, String> {
    if s == "max" {
        return Ok(f64::INFINITY);
    }
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!(
            "{s} is not accepted: give a factor over the recorded pace, more than 0 and at \
             most 1000000 (2: twice as fast), or max"
        )),
    }
}
