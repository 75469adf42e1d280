//! The distributor (the P2PS role): the point-to-point server of the market data tier. A
//! thin, single-threaded socket loop (mio: epoll readiness) around
//! `peregrine_md::distributor::Distributor`, the sans-I/O core that decides everything:
//!
//! - client sockets: accepted, read into `handle_client_bytes`, written from the core's
//!   `poll_transmit` (the same bytes appended to every listed client's queue: the core
//!   encoded them once), closed on `poll_disconnect` (after writing the answer saying why when
//!   `flush()`), reported with `client_drained` after every write;
//! - the backbone, one subscriber per service on `md.<service>`: its messages go to
//!   `handle_backbone_message`; the transport's `Lost` (a loss it could not repair) to
//!   `handle_backbone_loss`; a feed session that ends or dies to `feed_gone`, one that
//!   appears to `feed_back`;
//! - image requests from `poll_image_request` and posts from `poll_post_forward`, published
//!   on `md.<service>.req`;
//! - with `--websocket ADDR`, a second listener whose clients speak the WebSocket JSON API
//!   (`websocket.rs`: the upgrade, the frames and the quote board page; the JSON of each
//!   REFRESH and UPDATE is encoded once for all the WebSocket clients it goes to) and are, to
//!   the core, clients like any other;
//! - write modes: `throughput` hands the queues to the sockets every `flush_interval_ms` (or
//!   at once for a queue past `flush_bytes`), `latency` after each message (TCP_NODELAY in
//!   both: the coalescing is the queues').
//!
//! [`DistributorServer::bind`] opens the listener and the backbone; [`DistributorServer::run`]
//! serves until its `stop` says so. [`DistributorServer::reload_flag`] (SIGHUP in
//! `peregrine distributor`) reloads the users file on the next turn without dropping anyone
//! (`peregrine_md::distributor::Distributor::replace_users`); a file that fails validation
//! is refused whole and the old one kept. Refusals are logged one line each up to 20 per
//! 10 s, then summarised (`audit.rs`). What it has to say (its start, events, statistics lines,
//! the final counters) goes to the output set with [`DistributorServer::set_output`] as
//! [`Line`]s, each as text for people and as JSON; `peregrine distributor` prints them.

mod audit;
mod conn;
mod settings;
mod verifier;
pub mod websocket;

use crate::backbone::{self, backbone_topic, request_topic, BackboneError, Sealing};
use conn::{Conn, Wrote};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use peregrine::{Context, IdleKind, OfferError, OpenError, Publisher, Subscriber, SubscriberEvent};
use peregrine_md::distributor::{
    ClientId, ClientLink, Counters, Disconnect, Distributor, Event, ServiceId, Users,
};
use peregrine_proto::rate::TokenBucket;
use serde_json::json;
pub use settings::{
    DistributorSettings, SettingsError, SettingsOverrides, TlsFiles, WriteMode, DEFAULT_LISTEN,
};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(usize::MAX);
/// The login verifier's wake-ups (between the clients' slots and the backbones' tokens).
const VERIFIER: Token = Token(usize::MAX / 2);
/// The WebSocket listener.
const WS_LISTENER: Token = Token(usize::MAX / 2 + 1);
/// Backbone subscriber `i` is `Token(BACKBONE_BASE - i)`.
const BACKBONE_BASE: usize = usize::MAX - 1;
/// Bytes read from a client per read call.
const READ_CHUNK: usize = 64 << 10;
/// Reads per client per readiness event; a client with more waiting is read again on the
/// next turn, so one busy client cannot starve the others.
const READS_PER_TURN: usize = 4;
/// Backbone messages handled per subscriber per poll call.
const BACKBONE_BATCH: usize = 256;
/// How long a connection being closed after its answer may take to read it.
const LINGER: Duration = Duration::from_secs(1);
/// While the backbone is active, its subscriber is polled at least this often (loss repair
/// runs in `poll`: NAK delays are tens to hundreds of microseconds, retries 2 ms).
const BACKBONE_ACTIVE_TICK: Duration = Duration::from_millis(1);
/// While it is quiet, this often (keep-alives, session timeouts).
const BACKBONE_IDLE_TICK: Duration = Duration::from_millis(20);
/// How often login deadlines are checked (the loop wakes at least every BACKBONE_IDLE_TICK).
const LOGIN_CHECK: Duration = Duration::from_millis(100);
/// Connections accepted per turn of the loop at most: a flood of connections (each one TLS
/// set-up, a slot, a registration) is taken a few at a time between the turns that read the
/// backbone and write to clients, so it delays the updates of logged-in clients by a bounded
/// amount instead of by the whole backlog.
const ACCEPTS_PER_TURN: usize = 16;

/// The bucket of `max_accepts_per_s` (0: no limit): bursts of a tenth of a second's, at least
/// one turn's.
fn accept_bucket(per_s: u64) -> TokenBucket {
    TokenBucket::new(per_s, (per_s / 10).max(ACCEPTS_PER_TURN as u64), 0)
}

/// Why a distributor could not start or had to stop.
#[derive(Debug)]
#[non_exhaustive]
pub enum DistributorError {
    /// The listening socket could not be opened.
    Listen { addr: SocketAddr, error: io::Error },
    /// The settings were refused by the core.
    Settings(String),
    /// The backbone or request URI is unusable.
    Backbone(BackboneError),
    /// A backbone subscriber or request publisher could not be opened.
    Open { what: String, error: OpenError },
    /// epoll failed.
    Poll(io::Error),
    /// The TLS certificate, key or client CA could not be used.
    Tls(crate::tls::TlsError),
}

impl std::fmt::Display for DistributorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DistributorError::Listen { addr, error } => write!(
                f,
                "cannot listen on {addr} ({error}): is another distributor there? choose \
                 another address or port"
            ),
            DistributorError::Settings(e) => f.write_str(e),
            DistributorError::Backbone(e) => e.fmt(f),
            DistributorError::Open { what, error } => write!(f, "{what}: {error}"),
            DistributorError::Poll(e) => write!(f, "waiting for sockets (epoll): {e}"),
            DistributorError::Tls(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DistributorError {}

/// One thing the distributor says: a line for people and the same as a JSON object.
#[derive(Debug, Clone)]
pub struct Line {
    pub text: String,
    pub json: serde_json::Value,
}

/// Where [`Line`]s go.
pub type Output = Box<dyn FnMut(&Line) + Send>;

/// The backbone of one service.
struct Backbone {
    service: ServiceId,
    name: String,
    sub: Subscriber,
    /// Registered in the poll: readiness wakes the loop.
    has_fd: bool,
    /// Feed sessions heard and not yet gone.
    sessions: BTreeSet<u32>,
    /// The last time a message arrived.
    last_message: Instant,
    /// The last poll returned a full batch: poll again without waiting.
    more: bool,
    requests: Publisher,
    requests_refused: u64,
}

/// Client connections by token: a slab (a token is an index; freed indices are reused).
#[derive(Default)]
struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
}

impl Conns {
    fn get_mut(&mut self, t: Token) -> Option<&mut Conn> {
        self.slots.get_mut(t.0)?.as_mut()
    }
    fn insert(&mut self, c: Conn) -> Token {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(c);
                Token(i)
            }
            None => {
                self.slots.push(Some(c));
                Token(self.slots.len() - 1)
            }
        }
    }
    fn remove(&mut self, t: Token) -> Option<Conn> {
        let c = self.slots.get_mut(t.0)?.take()?;
        self.free.push(t.0);
        Some(c)
    }
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

pub struct DistributorServer {
    /// How the backbone is sealed, for the start line.
    sealing: Sealing,
    s: DistributorSettings,
    output: Output,
    core: Distributor,
    poll: Poll,
    listener: TcpListener,
    local_addr: std::net::SocketAddr,
    /// The WebSocket JSON listener and its address.
    ws_listener: Option<(TcpListener, SocketAddr)>,
    /// The WebSocket listener may hold more connections than the last turn accepted.
    ws_accept_more: bool,
    /// TLS on the listener, when its certificate and key are set.
    tls: Option<crate::tls::ServerTls>,
    conns: Conns,
    by_client: HashMap<ClientId, Token>,
    backbones: Vec<Backbone>,
    /// Queues with bytes the sockets were not handed yet.
    dirty: Vec<Token>,
    /// Connections with more to read than one turn read.
    read_again: Vec<Token>,
    /// Connections closing after their answer, with their deadlines, oldest first (every one
    /// lingers `LINGER`): a turn of the loop looks at the expired ones only, however many
    /// linger (a flood of evicted connections made it look at hundreds a turn).
    lingering: VecDeque<(Instant, Token)>,
    /// Backbone messages of one poll, copied out of the transport's buffer.
    arena: Vec<u8>,
    /// Each message of a batch: where it is in the arena, its length, its feed session.
    spans: Vec<(usize, usize, u32)>,
    read_buf: Vec<u8>,
    start: Instant,
    next_flush: Instant,
    accept_errors: u64,
    /// The listener may hold more connections than the last turn accepted
    /// ([`ACCEPTS_PER_TURN`]): accept again next turn, without waiting.
    accept_more: bool,
    /// New connections a second (`max_accepts_per_s`), both listeners together: past it they
    /// wait in the kernel's backlog (a flood of connections then costs the flooder its
    /// connect timeouts, not this loop a turn per connection).
    accepts: TokenBucket,
    /// When the bucket has a connection's worth again, if a listener was left with some.
    accept_resume_at: Option<Instant>,
    /// The distributor's counters and gauges for `peregrine stat`.
    stat: peregrine::stat::Record,
    /// Set (by a signal handler): reload the users file on the next turn.
    reload: Arc<std::sync::atomic::AtomicBool>,
    refusals: audit::Refusals,
    /// Argon2 token checks, off the loop.
    verifier: verifier::Verifier,
}

/// How often the distributor writes its values for `peregrine stat`.
const STAT_EVERY: Duration = Duration::from_millis(100);
/// Gauges after the distributor's counters in its `peregrine stat` record.
/// `rtt_mean_us` and `rtt_max_us`: the last PING round trip of each client that answered
/// one (protocol version 2), their mean and the largest.
pub const DISTRIBUTOR_GAUGES: [&str; 6] = [
    "clients",
    "items",
    "queued_bytes",
    "largest_queue_bytes",
    "rtt_mean_us",
    "rtt_max_us",
];
// The counters and gauges fit one record of the counters file (checked when it compiles).
const _: () = assert!(
    Counters::NAMES.len() + DISTRIBUTOR_GAUGES.len() <= peregrine_transport::stat::MAX_VALUES
);

impl std::fmt::Debug for DistributorServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributorServer")
            .field("listen", &self.local_addr)
            .field("services", &self.s.core.services)
            .field("clients", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl DistributorServer {
    /// Opens the listener, the backbone subscribers and the request publishers of `s`'s
    /// services, in `ctx` (its configuration applies to the backbone URIs).
    pub fn bind(
        ctx: &Context,
        s: DistributorSettings,
        users: Users,
    ) -> Result<DistributorServer, DistributorError> {
        let services: Vec<&str> = s.core.services.iter().map(String::as_str).collect();
        let mut config = s.core.clone();
        // The origin of this distributor's posts on the backbone: drawn at random, so that
        // distributors sharing a backbone take only the ACKs of their own posts.
        let mut origin = [0u8; 8];
        while u64::from_le_bytes(origin) == 0 {
            getrandom::fill(&mut origin).map_err(|e| {
                DistributorError::Settings(format!("drawing the distributor's origin id: {e}"))
            })?;
        }
        config.origin = u64::from_le_bytes(origin);
        let core = Distributor::new(config, Arc::new(users))
            .map_err(|e| DistributorError::Settings(e.to_string()))?;
        let poll = Poll::new().map_err(DistributorError::Poll)?;
        let listen_error = |error| DistributorError::Listen {
            addr: s.listen,
            error,
        };
        let tls = match &s.tls {
            Some(t) => Some(
                crate::tls::ServerTls::load(&t.cert, &t.key, t.client_ca.as_deref())
                    .map_err(DistributorError::Tls)?,
            ),
            None => None,
        };
        let waker =
            Arc::new(mio::Waker::new(poll.registry(), VERIFIER).map_err(DistributorError::Poll)?);
        let verifier = verifier::Verifier::start(waker).map_err(DistributorError::Poll)?;
        let mut listener = TcpListener::bind(s.listen).map_err(listen_error)?;
        let local_addr = listener.local_addr().map_err(listen_error)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(DistributorError::Poll)?;
        let ws_listener = match s.websocket {
            None => None,
            Some(addr) => {
                let error = |error| DistributorError::Listen { addr, error };
                let mut l = TcpListener::bind(addr).map_err(error)?;
                let local = l.local_addr().map_err(error)?;
                poll.registry()
                    .register(&mut l, WS_LISTENER, Interest::READABLE)
                    .map_err(DistributorError::Poll)?;
                Some((l, local))
            }
        };
        // Sealed by default (peregrine_market_data::backbone): forged frames are dropped
        // before anything reads them.
        let (backbone_uri, sealing) =
            backbone::seal(ctx, &s.backbone).map_err(DistributorError::Backbone)?;
        let (requests_uri, _) =
            backbone::seal(ctx, &s.requests).map_err(DistributorError::Backbone)?;
        let mut backbones = Vec::new();
        for (i, name) in services.iter().enumerate() {
            let service = core.service_id(name).expect("a configured service");
            let topic = backbone_topic(name);
            let sub = ctx
                .subscriber(&topic, &backbone_uri, IdleKind::Backoff)
                .map_err(|error| DistributorError::Open {
                    what: format!("subscribing to {topic} on backbone {}", s.backbone),
                    error,
                })?;
            let has_fd = match sub.readable_fd() {
                Some(fd) => {
                    poll.registry()
                        .register(
                            &mut mio::unix::SourceFd(&fd),
                            Token(BACKBONE_BASE - i),
                            Interest::READABLE,
                        )
                        .map_err(DistributorError::Poll)?;
                    true
                }
                None => false,
            };
            let rtopic = request_topic(name);
            let requests =
                ctx.publisher(&rtopic, &requests_uri)
                    .map_err(|error| DistributorError::Open {
                        what: format!("publishing {rtopic} on requests {}", s.requests),
                        error,
                    })?;
            backbones.push(Backbone {
                service,
                name: name.to_string(),
                sub,
                has_fd,
                sessions: BTreeSet::new(),
                last_message: Instant::now(),
                more: false,
                requests,
                requests_refused: 0,
            });
        }
        let start = Instant::now();
        let listen = local_addr.to_string();
        let stat = ctx.counters_record(
            peregrine::stat::RecordType::Distributor,
            &[("listen", &listen), ("services", &services.join(","))],
            &peregrine::stat::descriptors(Counters::NAMES, &DISTRIBUTOR_GAUGES),
        );
        let max_accepts_per_s = s.max_accepts_per_s;
        Ok(DistributorServer {
            sealing,
            output: Box::new(|l: &Line| tracing::info!("{}", l.text)),
            stat,
            next_flush: start + Duration::from_millis(s.flush_interval_ms),
            s,
            core,
            poll,
            listener,
            local_addr,
            ws_listener,
            ws_accept_more: false,
            tls,
            conns: Conns::default(),
            by_client: HashMap::new(),
            backbones,
            dirty: Vec::new(),
            read_again: Vec::new(),
            lingering: VecDeque::new(),
            arena: Vec::new(),
            spans: Vec::new(),
            read_buf: vec![0; READ_CHUNK],
            start,
            accept_errors: 0,
            accept_more: false,
            accepts: accept_bucket(max_accepts_per_s),
            accept_resume_at: None,
            reload: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            refusals: audit::Refusals::new(start),
            verifier,
        })
    }

    /// A flag that, once set (from a signal handler: `signal_hook::flag::register(SIGHUP,
    /// flag)`), makes [`run`](Self::run) reload the users file on its next turn.
    pub fn reload_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.reload)
    }

    /// Reads the users file again and applies it to every logged-in client
    /// (`Distributor::replace_users`: revoked items answered `not-entitled`, removed users
    /// logged out). A file that does not load or validate is refused whole: the old one stays,
    /// and the error says why. Returns how many clients lost something.
    pub fn reload_users(&mut self) -> Result<usize, peregrine_md::LoadError> {
        let users = Users::load(&self.s.users)?;
        let count = users.len();
        let touched = self.core.replace_users(Arc::new(users));
        self.drain_core();
        let file = self.s.users.display().to_string();
        self.say(
            format!("users reloaded from {file}: {count} users; {touched} logged-in clients lost entitlements or were logged out"),
            json!({"event": "users_reloaded", "file": file, "users": count, "clients_changed": touched}),
        );
        self.warn_if_users_file_exposed();
        Ok(touched)
    }

    /// A users file others can read holds token hashes they could attack offline: said at
    /// start and on each reload, with the fix.
    fn warn_if_users_file_exposed(&mut self) {
        for w in self.core.users().warnings() {
            let file = self.s.users.display().to_string();
            self.say(
                format!("WARNING: {file}: {w}"),
                json!({"event": "users_file_warning", "file": file, "warning": w}),
            );
        }
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(&self.s.users) else {
            return;
        };
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            let file = self.s.users.display().to_string();
            self.say(
                format!("WARNING: the users file {file} is readable by others (mode {mode:o}) and holds token hashes: chmod 600 {file}"),
                json!({"event": "users_file_exposed", "file": file, "mode": format!("{mode:o}")}),
            );
        }
    }

    /// Where its lines go (by default, to `tracing` at level info).
    pub fn set_output(&mut self, output: Output) {
        self.output = output;
    }

    /// The address it listens on (with its port when port 0 was asked for).
    /// The WebSocket listener's address (`None`: no `--websocket`).
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        self.ws_listener.as_ref().map(|(_, a)| *a)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// How the backbone is sealed.
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    pub fn counters(&self) -> &Counters {
        self.core.counters()
    }

    fn say(&mut self, text: String, json: serde_json::Value) {
        (self.output)(&Line { text, json });
    }

    /// How clients connect: TLS (with or without client certificates) or plaintext, and
    /// whether plaintext logins from other hosts are allowed.
    pub fn describe_clients(&self) -> String {
        let mut t = match (&self.tls, &self.s.tls) {
            (Some(tls), Some(files)) if tls.verifies_clients() => format!(
                "clients over TLS (certificate {}; client certificates checked against {})",
                files.cert.display(),
                files
                    .client_ca
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
            (Some(_), Some(files)) => {
                format!("clients over TLS (certificate {})", files.cert.display())
            }
            _ => "clients over plaintext TCP".to_string(),
        };
        if self.tls.is_none() {
            if self.s.core.allow_plaintext_logins {
                t.push_str(
                    ", WARNING: plaintext logins from other hosts ALLOWED (allow_plaintext_logins): their tokens cross the network in the clear",
                );
            } else {
                t.push_str(
                    ", logins from loopback only (give tls_cert and tls_key for other hosts)",
                );
            }
        }
        t
    }

    /// Says where it listens and how, with the process's open files limit.
    pub fn say_started(&mut self, nofile: u64) {
        let services = self.s.core.services.join(",");
        let clients = self.describe_clients();
        self.say(
            format!(
                "listening on {}{} ({} mode, services {services}, backbone {}, image requests on {}, {} users, open files limit {nofile}); {clients}; {}",
                self.local_addr,
                self.websocket_addr().map_or(String::new(), |a| format!(
                    ", WebSocket JSON and the quote board on {a}"
                )),
                self.s.mode.name(),
                self.s.backbone,
                self.s.requests,
                self.s.users.display(),
                self.sealing.describe(),
            ),
            json!({"listening": self.local_addr.to_string(), "mode": self.s.mode.name(),
                   "services": self.s.core.services, "backbone": self.s.backbone,
                   "requests": self.s.requests, "open_files_limit": nofile,
                   "backbone_auth": self.sealing.describe(), "clients": clients,
                   "tls": self.tls.is_some(),
                   "websocket": self.websocket_addr().map(|a| a.to_string()),
                   "allow_plaintext_logins": self.s.core.allow_plaintext_logins}),
        );
        self.warn_if_users_file_exposed();
    }

    /// Says its final counters (`signal`: what stopped it).
    pub fn say_done(&mut self, signal: Option<&str>) {
        let c = self.core.counters();
        let f = self.core.footprint();
        let counters: serde_json::Map<String, serde_json::Value> =
            c.values().map(|(k, v)| (k.to_string(), v.into())).collect();
        let refused: u64 = self.backbones.iter().map(|b| b.requests_refused).sum();
        let text = {
            let mut t = format!(
                "done{}: {:.1} s, {} clients connected now, {} items cached\n",
                signal
                    .map(|s| format!(" (stopped by {s})"))
                    .unwrap_or_default(),
                self.start.elapsed().as_secs_f64(),
                f.clients,
                f.items
            );
            for (k, v) in c.values() {
                t.push_str(&format!("  {k:<24} {v}\n"));
            }
            t.push_str(&format!("  {:<24} {refused}", "image_requests_refused"));
            t
        };
        self.say(
            text,
            json!({"done": true, "signal": signal, "counters": counters,
                   "image_requests_refused": refused, "accept_errors": self.accept_errors,
                   "clients": f.clients, "items": f.items, "rss_kib": rss_kib(),
                   "cpu_s": cpu_seconds_self()}),
        );
    }

    fn now_ns(&self) -> u64 {
        peregrine_agent::monotonic_ns()
    }

    /// Serves until `stop` returns true (it is asked on every turn of the loop, at least every
    /// 20 ms), then writes what is queued once and closes the request publishers.
    pub fn run(&mut self, stop: &dyn Fn() -> bool) -> Result<(), DistributorError> {
        let mut events = Events::with_capacity(1024);
        let mut next_stats = (self.s.stats_every_s > 0)
            .then(|| Instant::now() + Duration::from_secs(self.s.stats_every_s));
        let mut last_counters = self.core.counters().clone();
        let mut last_stats = Instant::now();
        let mut next_login_check = Instant::now();
        let mut next_stat = Instant::now();
        while !stop() {
            if self
                .reload
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                if let Err(e) = self.reload_users() {
                    let file = self.s.users.display().to_string();
                    self.say(
                        format!("users file {file} refused, the old one is kept: {e}"),
                        json!({"event": "users_reload_refused", "file": file, "error": e.to_string()}),
                    );
                }
            }
            let timeout = self.timeout(next_stats);
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(DistributorError::Poll(e)),
            }
            for ev in events.iter() {
                match ev.token() {
                    // Accepted below: at most ACCEPTS_PER_TURN a turn.
                    LISTENER => self.accept_more = true,
                    WS_LISTENER => self.ws_accept_more = true,
                    VERIFIER => {
                        // Results are taken below, every turn.
                    }
                    Token(t) if t > BACKBONE_BASE - self.backbones.len() && t <= BACKBONE_BASE => {
                        // Polled below, every turn.
                    }
                    tok => {
                        if ev.is_writable() {
                            if let Some(c) = self.conns.get_mut(tok) {
                                c.blocked = false;
                            }
                            self.write(tok);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.read(tok);
                        }
                    }
                }
            }
            if self.accept_resume_at.is_some_and(|at| Instant::now() >= at) {
                self.accept_resume_at = None;
                self.accept_more = true;
                self.ws_accept_more = self.ws_listener.is_some();
            }
            if self.accept_more {
                self.accept(false);
            }
            if self.ws_accept_more {
                self.accept(true);
            }
            for tok in std::mem::take(&mut self.read_again) {
                self.read(tok);
            }
            while let Some((client, matched)) = self.verifier.next_result() {
                let now = self.now_ns();
                self.core.verification_done(client, matched, now);
                self.drain_core();
            }
            self.poll_backbones();
            let now = Instant::now();
            if let Some((text, value)) = self.refusals.summary(now) {
                self.say(text, value);
            }
            // Login deadlines: `poll_timeout` looks at every client, so it is asked at most
            // every LOGIN_CHECK, not on every turn of a loop that may turn 100 000 times a
            // second.
            if now >= next_login_check {
                next_login_check = now + LOGIN_CHECK;
                if self.core.poll_timeout().is_some_and(|t| t <= self.now_ns()) {
                    self.core.handle_timeout(self.now_ns());
                    self.drain_core();
                }
            }
            let flush_all = now >= self.next_flush;
            if flush_all {
                self.next_flush = now + Duration::from_millis(self.s.flush_interval_ms);
            }
            self.write_dirty(flush_all);
            self.expire_lingering(now);
            if now >= next_stat {
                next_stat = now + STAT_EVERY;
                self.publish_counters();
            }
            if let Some(at) = next_stats {
                if now >= at {
                    self.stats(&last_counters, now - last_stats);
                    last_counters = self.core.counters().clone();
                    last_stats = now;
                    next_stats = Some(now + Duration::from_secs(self.s.stats_every_s));
                }
            }
        }
        // Hand what is queued to the sockets once before leaving.
        self.write_dirty(true);
        self.publish_counters();
        for b in &mut self.backbones {
            b.requests.close();
        }
        Ok(())
    }

    /// How long the loop may wait for readiness.
    fn timeout(&self, next_stats: Option<Instant>) -> Duration {
        if !self.read_again.is_empty() || self.accept_more || self.backbones.iter().any(|b| b.more)
        {
            return Duration::ZERO;
        }
        let now = Instant::now();
        // Busy-polling: while the backbone delivered within the last busy_poll_us, look again
        // at once instead of sleeping in epoll (a wake-up costs tens of microseconds).
        let busy = Duration::from_micros(self.s.busy_poll_us);
        if !busy.is_zero()
            && self
                .backbones
                .iter()
                .any(|b| now.duration_since(b.last_message) < busy)
        {
            return Duration::ZERO;
        }
        let mut until = now + BACKBONE_IDLE_TICK;
        for b in &self.backbones {
            if !b.has_fd || now.duration_since(b.last_message) < Duration::from_millis(100) {
                until = until.min(now + BACKBONE_ACTIVE_TICK);
            }
        }
        if self.s.mode == WriteMode::Throughput && !self.dirty.is_empty() {
            until = until.min(self.next_flush);
        }
        if let Some(at) = self.accept_resume_at {
            until = until.min(at);
        }
        if let Some(t) = next_stats {
            until = until.min(t);
        }
        if let Some(&(d, _)) = self.lingering.front() {
            until = until.min(d);
        }
        until.saturating_duration_since(now)
    }

    /// Accepts up to [`ACCEPTS_PER_TURN`] connections; `accept_more` says whether the
    /// listener may hold more.
    /// Accepts connections of the binary listener, or (`websocket`) of the WebSocket one.
    fn accept(&mut self, websocket: bool) {
        if websocket {
            self.ws_accept_more = false;
        } else {
            self.accept_more = false;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            let now_ns = self.now_ns();
            if !self.accepts.try_take(1, now_ns) {
                // Over the rate: the rest wait in the backlog until a token is back.
                let wait = self.accepts.next_ready_ns(1, now_ns).saturating_sub(now_ns);
                self.accept_resume_at = Some(Instant::now() + Duration::from_nanos(wait));
                return;
            }
            let accepted = match (&self.ws_listener, websocket) {
                (Some((l, _)), true) => l.accept(),
                (None, true) => return,
                (_, false) => self.listener.accept(),
            };
            let (stream, peer) = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: the connection waits in the backlog; say it once
                    // per hundred.
                    if self.accept_errors % 100 == 0 {
                        self.say(
                            format!("accept failed: {e} (raise the open files limit, or lower max_clients)"),
                            json!({"event": "accept_failed", "error": e.to_string()}),
                        );
                    }
                    self.accept_errors += 1;
                    return;
                }
            };
            let link = ClientLink {
                peer: peer.ip(),
                tls: self.tls.is_some(),
            };
            let session = match self.tls.as_ref().map(|t| t.accept()).transpose() {
                Ok(s) => s,
                Err(e) => {
                    self.say(
                        format!("cannot start TLS for {peer}: {e}"),
                        json!({"event": "tls_failed", "peer": peer.to_string(), "error": e.to_string()}),
                    );
                    continue;
                }
            };
            let id = match self.core.client_connected(self.now_ns(), link) {
                Ok(id) => id,
                Err(e) => {
                    if self.refusals.admit(
                        Instant::now(),
                        "connection_refused",
                        &peer.ip().to_string(),
                    ) {
                        self.say(
                            format!("connection from {peer} refused: {e}"),
                            json!({"event": "client_refused", "peer": peer.to_string(), "error": e.to_string()}),
                        );
                    }
                    continue; // dropped: closed
                }
            };
            // Both modes: throughput mode coalesces in its own queues, under its flush
            // interval; Nagle would only hold the tail of each flush back for an ACK (up to a
            // delayed ACK's 40 ms).
            let _ = stream.set_nodelay(true);
            if let Some(n) = self.s.client_sndbuf {
                let _ = socket2::SockRef::from(&stream).set_send_buffer_size(n);
            }
            let mut conn = Conn::new(stream, session, id, peer);
            if websocket {
                let session = peregrine_md::json::JsonSession::new(
                    self.core.config().dictionary.clone(),
                    &self.s.core.services[0],
                );
                conn.ws = Some(Box::new(websocket::WsLayer::new(session)));
            }
            let tok = self.conns.insert(conn);
            let c = self.conns.get_mut(tok).expect("just inserted");
            if let Err(e) = self.poll.registry().register(
                &mut c.stream,
                tok,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.say(
                    format!("cannot watch a client socket: {e}"),
                    json!({"event": "register_failed", "error": e.to_string()}),
                );
                self.conns.remove(tok);
                self.core.client_closed(id);
                continue;
            }
            self.by_client.insert(id, tok);
        }
        if websocket {
            self.ws_accept_more = true;
        } else {
            self.accept_more = true;
        }
    }

    /// Reads what a client sent and hands it to the core.
    fn read(&mut self, tok: Token) {
        for _ in 0..READS_PER_TURN {
            let Some(c) = self.conns.get_mut(tok) else {
                return;
            };
            let read = c.read(&mut self.read_buf);
            if let Some(subject) = c.newly_identified() {
                // The handshake just ended: the core learns the certificate before any byte.
                if let (Some(id), Some(subject)) = (c.client, subject) {
                    self.core.client_identified(id, &subject);
                }
            }
            let n = match read {
                Ok(0) => return self.close(tok),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A handshake answer the socket did not take yet.
                    if c.tls.as_ref().is_some_and(|t| t.wants_write()) {
                        self.write(tok);
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let peer = c.peer;
                    if e.kind() == io::ErrorKind::InvalidData
                        && self.refusals.admit(
                            Instant::now(),
                            "tls_refused",
                            &peer.ip().to_string(),
                        )
                    {
                        self.say(
                            format!("client {peer} refused: {e}"),
                            json!({"event": "tls_refused", "peer": peer.to_string(), "error": e.to_string()}),
                        );
                    }
                    return self.close(tok);
                }
            };
            let now = self.now_ns();
            let Some(c) = self.conns.get_mut(tok) else {
                return;
            };
            // A connection closing after its answer: what it still sends is discarded.
            if let Some(id) = c.client {
                if let Some(ws) = c.ws.as_mut() {
                    // WebSocket: frames of JSON in, binary messages for the core out.
                    let mut to_core = Vec::new();
                    let mut to_socket = Vec::new();
                    let step = ws.input(&self.read_buf[..n], &mut to_core, &mut to_socket);
                    if !to_socket.is_empty() {
                        c.out.push(&to_socket);
                        if !c.dirty {
                            c.dirty = true;
                            self.dirty.push(tok);
                        }
                    }
                    if !to_core.is_empty() {
                        self.core.handle_client_bytes(id, &to_core, now);
                        self.drain_core();
                    }
                    if step == websocket::Step::Close {
                        // Its answer (the page, an error) is written, then it is closed.
                        self.by_client.remove(&id);
                        self.core.client_closed(id);
                        self.drain_core();
                        if let Some(c) = self.conns.get_mut(tok) {
                            c.client = None;
                            let until = Instant::now() + LINGER;
                            c.linger_until = Some(until);
                            self.lingering.push_back((until, tok));
                        }
                        self.write(tok);
                        return;
                    }
                } else {
                    self.core.handle_client_bytes(id, &self.read_buf[..n], now);
                    self.drain_core();
                }
            }
        }
        self.read_again.push(tok);
    }

    /// Drains the core's outputs, in the order its documentation gives.
    fn drain_core(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            // The JSON of each REFRESH and UPDATE, made once for every WebSocket client these
            // bytes go to (a view's clients share bytes of their own); each client adds its
            // stream ID.
            let mut shared: Option<Vec<peregrine_md::json::Shared>> = None;
            for id in t.clients {
                let Some(&tok) = self.by_client.get(id) else {
                    continue;
                };
                if let Some(c) = self.conns.slots.get_mut(tok.0).and_then(|c| c.as_mut()) {
                    match c.ws.as_mut() {
                        None => c.out.push(t.bytes),
                        Some(ws) => {
                            let shared = shared.get_or_insert_with(|| {
                                peregrine_md::json::messages(t.bytes)
                                    .map(|_| peregrine_md::json::Shared::default())
                                    .collect()
                            });
                            ws.output(t.bytes, shared, c.out.tail());
                        }
                    }
                    if !c.dirty {
                        c.dirty = true;
                        self.dirty.push(tok);
                    }
                }
            }
        }
        while let Some(r) = self.core.poll_image_request() {
            let b = &mut self.backbones[r.service.index()];
            match b.requests.offer(&r.to_bytes()) {
                Ok(_) => {
                    let _ = b.requests.flush();
                }
                // The core asks again after image_retry_ms.
                Err(OfferError::BackPressured) | Err(_) => b.requests_refused += 1,
            }
        }
        while let Some(f) = self.core.poll_post_forward() {
            let b = &mut self.backbones[f.service.index()];
            match b.requests.offer(&f.bytes) {
                Ok(_) => {
                    let _ = b.requests.flush();
                }
                // Not sent: the core answers the client `timeout` when the post's time is up.
                Err(_) => b.requests_refused += 1,
            }
        }
        while let Some(v) = self.core.poll_verification() {
            self.verifier.submit(v);
        }
        while let Some(d) = self.core.poll_disconnect() {
            self.disconnect(d);
        }
        while let Some(e) = self.core.poll_event() {
            self.log_event(e);
        }
    }

    /// A client as the log names it: its user (once logged in) and its address.
    fn who(&self, c: ClientId) -> (String, String) {
        let user = self
            .core
            .client_stats(c)
            .and_then(|s| s.user)
            .unwrap_or_else(|| "(not logged in)".to_string());
        let peer = self
            .by_client
            .get(&c)
            .and_then(|t| self.conns.slots.get(t.0)?.as_ref())
            .map_or_else(|| "-".to_string(), |conn| conn.peer.to_string());
        (user, peer)
    }

    fn log_event(&mut self, e: Event) {
        let client = |id: ClientId| id.get();
        let (text, value) = match &e {
            Event::LoggedIn { client: c, user } => {
                let (_, peer) = self.who(*c);
                (
                    format!("{user} logged in from {peer} (client {})", client(*c)),
                    json!({"event": "logged_in", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::LoginDenied {
                client: c,
                user,
                peer,
                error,
            } => {
                let peer = peer.to_string();
                if !self.refusals.admit(Instant::now(), "login_denied", &peer) {
                    return;
                }
                let who = user.as_deref().unwrap_or("(no login)");
                (
                    format!(
                        "a login as {who} from {peer} refused (client {}): {error}",
                        client(*c)
                    ),
                    json!({"event": "login_denied", "client": client(*c), "user": user, "peer": peer, "error": error.to_string()}),
                )
            }
            Event::Revoked {
                client: c,
                user,
                items,
                requests,
            } => {
                let (_, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}): entitlements revoked by the reload: {items} items not-entitled ({requests} requests of a service closed)",
                        client(*c)
                    ),
                    json!({"event": "revoked", "client": client(*c), "user": user, "peer": peer, "items": items, "requests": requests}),
                )
            }
            Event::ProtocolError {
                client: c,
                user,
                peer,
                error,
            } => {
                let user = user.as_deref().unwrap_or("(not logged in)");
                (
                    format!("{user} from {peer} (client {}) closed: {error}", client(*c)),
                    json!({"event": "protocol_error", "client": client(*c), "user": user, "peer": peer.to_string(), "error": error.to_string()}),
                )
            }
            Event::Conflating { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) is behind: conflating",
                        client(*c)
                    ),
                    json!({"event": "conflating", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::CaughtUp { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!("{user} from {peer} (client {}) caught up", client(*c)),
                    json!({"event": "caught_up", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::Silent {
                client: c,
                user,
                peer,
                silent_ms,
            } => {
                let who = user.as_deref().unwrap_or("(no login)");
                (
                    format!(
                        "{who} from {peer} (client {}) closed: nothing read from it for \
                         {silent_ms} ms (three ping intervals)",
                        client(*c)
                    ),
                    json!({"event": "silent", "client": client(*c), "user": user, "peer": peer.to_string(), "silent_ms": silent_ms}),
                )
            }
            Event::Posted {
                client: c,
                user,
                service,
                item,
                code,
            } => {
                let (_, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) posted to {item} of {service}: {code}",
                        client(*c)
                    ),
                    json!({"event": "posted", "client": client(*c), "user": user, "peer": peer, "service": service, "item": item, "code": code.name()}),
                )
            }
            Event::SlowDisconnect { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) disconnected: its queue passed max_queue_bytes",
                        client(*c)
                    ),
                    json!({"event": "slow_disconnect", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::FeedsDisagree {
                service,
                item,
                item_seq,
            } => (
                format!(
                    "backbone {}: feeds disagree on {item} at item_seq {item_seq} (another image): they are not fed the same stream; the first image stays",
                    self.service_name(*service)
                ),
                json!({"event": "feeds_disagree", "service": self.service_name(*service), "item": item, "item_seq": item_seq}),
            ),
            Event::BackboneRejected { service, error } => (
                format!("backbone {}: dropped: {error}", self.service_name(*service)),
                json!({"event": "backbone_rejected", "service": self.service_name(*service), "error": error.to_string()}),
            ),
            Event::ServiceStale {
                service,
                items,
                cause,
            } => (
                format!(
                    "service {}: {items} items stale ({cause:?}); asking the feed for every image",
                    self.service_name(*service)
                ),
                json!({"event": "service_stale", "service": self.service_name(*service), "items": items, "cause": format!("{cause:?}")}),
            ),
        };
        self.say(text, value);
    }

    fn service_name(&self, s: ServiceId) -> &str {
        self.backbones
            .get(s.index())
            .map_or("?", |b| b.name.as_str())
    }

    /// The core closed a client: its answer is written first when `flush()` says so.
    fn disconnect(&mut self, d: Disconnect) {
        let Some(tok) = self.by_client.remove(&d.client) else {
            return;
        };
        self.core.client_closed(d.client);
        let Some(c) = self.conns.get_mut(tok) else {
            return;
        };
        c.client = None;
        if d.flush() {
            if let Some(ws) = c.ws.as_mut() {
                let mut close = Vec::new();
                ws.close(&mut close);
                c.out.push(&close);
            }
            let until = Instant::now() + LINGER;
            c.linger_until = Some(until);
            self.lingering.push_back((until, tok));
            if !c.blocked && c.write_out() != Wrote::Ok {
                self.close(tok);
            }
        } else {
            self.close(tok);
        }
    }

    /// Drops a connection (the socket closes); tells the core if it still knew it.
    fn close(&mut self, tok: Token) {
        let Some(mut c) = self.conns.remove(tok) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.stream);
        if let Some(id) = c.client {
            self.by_client.remove(&id);
            self.core.client_closed(id);
            self.drain_core();
        }
    }

    fn expire_lingering(&mut self, now: Instant) {
        while let Some(&(until, tok)) = self.lingering.front() {
            if until > now {
                return;
            }
            self.lingering.pop_front();
            // The token may have been closed meanwhile, or given to a newer connection (with
            // its own entry further back).
            if self
                .conns
                .get_mut(tok)
                .and_then(|c| c.linger_until)
                .is_some_and(|d| d <= now)
            {
                self.close(tok);
            }
        }
    }

    /// Hands a connection's queue to its socket and tells the core what is left.
    fn write(&mut self, tok: Token) {
        let Some(c) = self.conns.get_mut(tok) else {
            return;
        };
        c.dirty = false;
        if c.blocked {
            return; // the writable event will come
        }
        if let Wrote::Failed(_) = c.write_out() {
            return self.close(tok);
        }
        if let Some(id) = c.client {
            let left = c.out.len();
            self.core.client_drained(id, left);
            self.drain_core();
        }
    }

    /// Writes the queues that are due: all of them in latency mode or at a flush tick, else
    /// those past `flush_bytes` (and closing connections).
    fn write_dirty(&mut self, flush_all: bool) {
        let latency = self.s.mode == WriteMode::Latency;
        let mut kept = Vec::new();
        // Writing reports drains to the core, which may queue more (a conflated client's
        // images): a few rounds, the rest waits for the next turn.
        for _ in 0..4 {
            if self.dirty.is_empty() {
                break;
            }
            for tok in std::mem::take(&mut self.dirty) {
                let Some(c) = self.conns.get_mut(tok) else {
                    continue;
                };
                let due = flush_all
                    || latency
                    || c.out.len() >= self.s.flush_bytes
                    || c.linger_until.is_some();
                if due {
                    self.write(tok);
                } else {
                    kept.push(tok);
                }
            }
        }
        self.dirty.append(&mut kept);
    }

    fn poll_backbones(&mut self) {
        for i in 0..self.backbones.len() {
            let mut arena = std::mem::take(&mut self.arena);
            let mut spans = std::mem::take(&mut self.spans);
            arena.clear();
            spans.clear();
            let b = &mut self.backbones[i];
            let n = b.sub.poll(
                &mut |m| {
                    spans.push((arena.len(), m.payload.len(), m.session_id));
                    arena.extend_from_slice(m.payload);
                },
                BACKBONE_BATCH,
            );
            b.more = n == BACKBONE_BATCH;
            let service = b.service;
            if n > 0 {
                b.last_message = Instant::now();
            }
            let now = self.now_ns();
            for &(at, len, feed) in &spans {
                // Each feed session is a feed of its own: two providers of one service are
                // arbitrated by item_seq (A/B feeds).
                self.core
                    .handle_feed_message(service, feed, &arena[at..at + len], now);
                self.drain_core();
            }
            if self.s.mode == WriteMode::Latency && !spans.is_empty() {
                // What arrived together is written together, at once: one write per client
                // per batch. Writing each update on its own would make the batch's last
                // update wait for a system call per update before it.
                self.write_dirty(false);
            }
            self.arena = arena;
            self.spans = spans;
            while let Some(ev) = self.backbones[i].sub.next_event() {
                self.backbone_event(i, ev);
            }
            self.backbones[i].requests.do_work();
        }
    }

    fn backbone_event(&mut self, i: usize, ev: SubscriberEvent) {
        let now = self.now_ns();
        let b = &mut self.backbones[i];
        let service = b.service;
        let name = b.name.clone();
        match ev {
            SubscriberEvent::Connected {
                session_id,
                first_sequence,
            } => {
                b.sessions.insert(session_id);
                // Joined at the session's first message: the feed's own start-up images
                // arrive in order (and a loss would be reported), so none is asked for.
                let from_start = first_sequence == 0;
                let what = if from_start {
                    "from its first message; taking its images as they come".to_string()
                } else {
                    format!("at sequence {first_sequence}; asking for every image")
                };
                self.say(
                    format!("backbone {name}: feed session {session_id:08x} found {what}"),
                    json!({"event": "feed_found", "service": name, "session": session_id,
                           "first_sequence": first_sequence, "images_asked": !from_start}),
                );
                self.core.feed_joined(service, session_id, from_start, now);
            }
            SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            } => {
                let covered_before = self.core.counters().feed_losses_covered;
                self.core.feed_lost(service, session_id, now);
                let covered = self.core.counters().feed_losses_covered > covered_before;
                let what = if covered {
                    "another feed session carries what it held"
                } else {
                    "items stale until their images come again"
                };
                self.say(
                    format!("backbone {name}: LOST {count} message(s) from seq {from_sequence} of session {session_id:08x}: {what}"),
                    json!({"event": "backbone_loss", "service": name, "session": session_id, "from_sequence": from_sequence, "count": count, "covered": covered}),
                );
            }
            SubscriberEvent::PublisherClosed { session_id }
            | SubscriberEvent::PublisherDied { session_id } => {
                b.sessions.remove(&session_id);
                let left = b.sessions.len();
                let what = if left > 0 {
                    format!("{left} other feed session(s) carry its items")
                } else {
                    "its items are stale".to_string()
                };
                self.say(
                    format!("backbone {name}: feed session {session_id:08x} gone; {what}"),
                    json!({"event": "feed_gone", "service": name, "session": session_id, "feeds_left": left}),
                );
                self.core.feed_left(service, session_id, now);
            }
            _ => {}
        }
        self.drain_core();
    }

    /// Writes the counters and gauges for `peregrine stat`.
    fn publish_counters(&self) {
        let c = self.core.counters();
        let n = Counters::NAMES.len();
        self.stat.set_all(c.values().map(|(_, v)| v));
        let queues = self.conns.slots.iter().flatten().map(|c| c.out.len());
        let (queued, largest) = queues.fold((0, 0), |(sum, max), q| (sum + q, max.max(q)));
        self.stat.set(n, self.conns.len() as u64);
        self.stat.set(n + 1, self.core.footprint().items as u64);
        self.stat.set(n + 2, queued as u64);
        self.stat.set(n + 3, largest as u64);
        let rtt = self.core.round_trips();
        self.stat.set(n + 4, rtt.mean_ns / 1_000);
        self.stat.set(n + 5, rtt.max_ns / 1_000);
    }

    fn stats(&mut self, last: &Counters, over: Duration) {
        let c = self.core.counters();
        let f = self.core.footprint();
        let secs = over.as_secs_f64().max(1e-9);
        let per_s = |now: u64, then: u64| ((now - then) as f64 / secs).round();
        let queued: usize = self.conns.slots.iter().flatten().map(|c| c.out.len()).sum();
        let held: usize = self
            .conns
            .slots
            .iter()
            .flatten()
            .map(|c| c.out.capacity())
            .sum();
        let rss = rss_kib();
        self.say(
            format!(
                "[distributor {:.1}s] {} clients, {} items, {:.0} updates/s in, {:.0} sent/s, queued {} B ({} B held), conflating {}, RSS {} KiB",
                self.start.elapsed().as_secs_f64(),
                self.conns.len(),
                f.items,
                per_s(c.updates_applied, last.updates_applied),
                per_s(c.updates_sent, last.updates_sent),
                queued,
                held,
                c.conflations - last.conflations,
                rss.unwrap_or(0)
            ),
            json!({"t": (self.start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                   "clients": self.conns.len(), "items": f.items,
                   "updates_in_per_s": per_s(c.updates_applied, last.updates_applied),
                   "updates_sent_per_s": per_s(c.updates_sent, last.updates_sent),
                   "queued_bytes": queued, "queue_capacity_bytes": held,
                   "conflations": c.conflations, "slow_disconnects": c.slow_disconnects,
                   "rss_kib": rss}),
        );
    }
}

/// This process's resident set (VmRSS of /proc/self/status), in KiB.
/// CPU seconds this process used.
fn cpu_seconds_self() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
