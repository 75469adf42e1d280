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
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`DistributorServer`]: bind, the loop, and the core's outputs drained |
//! | `clients.rs` | client sockets: accepted, read, written, closed with a linger |
//! | `conn.rs` | one connection: its TLS or WebSocket layer and its queue |
//! | `fd_table.rs` | the descriptor table grown at start, not under a flood |
//! | `backbones.rs` | each service's backbone subscriber and request publisher |
//! | `lines.rs` | what it says: start, events, statistics, the `peregrine stat` record |
//! | `audit.rs` | refusals logged, then summarised |
//! | `verifier.rs` | token checks off the loop |
//! | `settings.rs` | the configuration file, flags and their checks |
//! | `websocket.rs` | the WebSocket JSON API and the quote board page |

mod audit;
mod backbones;
mod clients;
mod conn;
mod fd_table;
mod lines;
mod settings;
mod verifier;
pub mod websocket;

use crate::backbone::{self, backbone_topic, request_topic, BackboneError, Sealing};
use backbones::Backbone;
use clients::Conns;
pub use lines::DISTRIBUTOR_GAUGES;
use lines::STAT_EVERY;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use peregrine::{Context, IdleKind, OfferError, OpenError};
use peregrine_md::distributor::{ClientId, Counters, Distributor, Users};
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
    /// The highest descriptor the table held without growing after [`fd_table::reserve`]
    /// (`None`: the reservation failed, and the table grows as connections come).
    fds_reserved: Option<usize>,
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
        // Every client the limits allow, those waiting to log in, and the process's own
        // descriptors: the table is grown now, not inside an `accept` under a flood.
        let fds_reserved = fd_table::reserve(
            &listener,
            64 + s.core.max_clients + s.core.max_pending_clients,
        )
        .ok();
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
            fds_reserved,
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
                if let Some(c) = self.conns.get_mut(tok) {
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
}
