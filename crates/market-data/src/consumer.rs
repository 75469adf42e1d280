//! The consumer API (RTSDK's consumer): an application's view of the items it requested from
//! a distributor, as typed events.
//!
//! A thin driver over `peregrine_md::consumer::ConsumerCore` (sans-I/O): this module owns the
//! TCP connection and the clock. No thread of its own: [`Consumer::poll`] reads, decodes in
//! place and hands each [`Event`] to the application's handler, borrowing the bytes just read
//! (no copy). When the connection breaks it reports every item it had as `stale`, reconnects
//! with back-off (through the list of distributors in turn), logs in again and re-opens every
//! open request, so the application sees fresh REFRESHes after: never a silent gap.
//! [`WarmStandby`] keeps a second login open on another distributor, its requests paused, so
//! that failing over is a RESUME rather than a reconnection.
//!
//! Over TLS ([`ConnectOptions::tls`], [`crate::tls::ClientTls`]) the distributor's
//! certificate is checked against the CA given and the host connected to; a certificate that
//! does not verify fails the connection with the reason (an unknown issuer, an expired
//! certificate, another name), as any lost connection does.
//!
//! ```no_run
//! use peregrine_market_data::consumer::{Consumer, Event};
//! use std::time::Duration;
//!
//! let mut cons = Consumer::connect(&["127.0.0.1:14500"], "alice", b"secret")?;
//! cons.open("FEED1", &["AAA.O", "MSFT.*"])?;
//! let bid = cons.dictionary().by_name("BID").unwrap().fid;
//! loop {
//!     cons.poll(Duration::from_secs(1), &mut |e| match e {
//!         Event::Refresh { item, fields, .. } | Event::Update { item, fields, .. } => {
//!             if let Some(v) = fields.get(bid) {
//!                 println!("{item} BID {v:?}");
//!             }
//!         }
//!         Event::Status { item, state, text, .. } => println!("{item} {} {text}", state.name()),
//!         _ => {}
//!     })?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::tls::ClientTls;
use peregrine_md::consumer::{ConsumerConfig, ConsumerCore, ConsumerCounters};
use peregrine_md::dictionary::Dictionary;
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

pub use any::AnyConsumer;
pub use peregrine_md::consumer::{ConsumerError as SessionError, Event};
pub use standby::WarmStandby;

pub mod any;
mod connection;
mod error;
mod options;
mod requests;
pub mod standby;

pub use error::ConsumerError;
pub use options::ConnectOptions;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`Consumer::connect`] waits for the first login.
const FIRST_LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Gauges after the consumer's counters in its `peregrine stat` record: 1 while logged in,
/// the requests open, and the last PING's round trip to the distributor in microseconds (0
/// before one is timed).
pub const CONSUMER_GAUGES: [&str; 3] = ["connected", "requests", "rtt_us"];

/// A consumer connected to one distributor of a list: see the module's documentation.
#[derive(Debug)]
pub struct Consumer {
    core: ConsumerCore,
    addresses: Vec<SocketAddr>,
    /// The host part of each address as given (the name a TLS certificate is checked against).
    hosts: Vec<String>,
    tls: Option<ClientTls>,
    /// The connection: reads and writes pass `MSG_DONTWAIT` but for a call's first wait.
    stream: Option<TcpStream>,
    /// The connection's TLS session, under TLS.
    session: Option<rustls::Connection>,
    epoch: Instant,
    read_buf: Vec<u8>,
    /// The application's dictionary (or the built-in one): fields are read by it until the
    /// distributor's arrives.
    dictionary: Dictionary,
    /// What ended the session for good (a refused login, dictionaries that disagree).
    stopped: Option<SessionError>,
    last_error: String,
    /// After data arrives, keep reading without blocking this long.
    busy_poll: Duration,
    /// The socket's SO_RCVTIMEO as last set.
    read_timeout: Option<Duration>,
    /// The last read found the socket empty (or read less than asked): wait before reading.
    drained: bool,
    /// Connections that failed their TLS handshake (a certificate that does not verify).
    tls_refusals: usize,
    /// The counters and gauges for `peregrine stat`, written at the end of every `poll`.
    stat: peregrine::stat::Record,
}

impl Consumer {
    /// Connects to the first distributor of `addresses` that accepts, logs in as `user` with
    /// `token`, and returns once logged in and the distributor's dictionary downloaded (or
    /// with the reason none did within 10 s, or the field on which the dictionaries
    /// disagree).
    pub fn connect<A: AsRef<str>>(
        addresses: &[A],
        user: &str,
        token: &[u8],
    ) -> Result<Consumer, ConsumerError> {
        Consumer::connect_with(addresses, user, token, ConnectOptions::default())
    }

    /// [`connect`](Self::connect) with `options` (TLS).
    pub fn connect_with<A: AsRef<str>>(
        addresses: &[A],
        user: &str,
        token: &[u8],
        options: ConnectOptions,
    ) -> Result<Consumer, ConsumerError> {
        let mut c = Consumer::new_with(addresses, user, token, options)?;
        let end = Instant::now() + FIRST_LOGIN_TIMEOUT;
        while !c.core.is_logged_in() || c.core.dictionary_pending() {
            let now = Instant::now();
            // Every distributor refused the handshake (its certificate does not verify, or it
            // refused ours): trying again for the rest of the time would change nothing.
            if now >= end || c.tls_refusals >= c.addresses.len() {
                return Err(ConsumerError::NoDistributor {
                    addresses: c
                        .addresses
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    last: c.last_error.clone(),
                });
            }
            c.poll(end - now, &mut |_| {})?;
        }
        Ok(c)
    }

    /// A consumer of `addresses` that connects on its first [`poll`](Self::poll) and keeps
    /// trying (with back-off, reporting each failure as a `Disconnected` event) until one
    /// accepts: for an application that starts before its distributor.
    pub fn new<A: AsRef<str>>(
        addresses: &[A],
        user: &str,
        token: &[u8],
    ) -> Result<Consumer, ConsumerError> {
        Consumer::new_with(addresses, user, token, ConnectOptions::default())
    }

    /// [`new`](Self::new) with `options` (TLS).
    pub fn new_with<A: AsRef<str>>(
        addresses: &[A],
        user: &str,
        token: &[u8],
        options: ConnectOptions,
    ) -> Result<Consumer, ConsumerError> {
        let mut resolved = Vec::new();
        let mut hosts = Vec::new();
        for a in addresses {
            let a = a.as_ref();
            hosts.push(a.rsplit_once(':').map_or(a, |(h, _)| h).to_string());
            let addr = a
                .to_socket_addrs()
                .and_then(|mut it| {
                    it.next().ok_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, "resolves to no address")
                    })
                })
                .map_err(|error| ConsumerError::Address {
                    address: a.to_string(),
                    error,
                })?;
            resolved.push(addr);
        }
        if resolved.is_empty() {
            return Err(ConsumerError::Address {
                address: String::new(),
                error: io::Error::new(io::ErrorKind::InvalidInput, "no address given"),
            });
        }
        let mut config = ConsumerConfig::new(user, token, resolved.len());
        if let Some(interval) = options.ping_interval {
            config.ping_interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        }
        config.download_dictionary = !options.no_dictionary_download;
        config.dictionary = options.dictionary.clone();
        let core = ConsumerCore::new(config)?;
        let distributors: Vec<String> = addresses.iter().map(|a| a.as_ref().into()).collect();
        let stat = options.context.unwrap_or_default().counters_record(
            peregrine::stat::RecordType::Consumer,
            &[
                ("user", user),
                ("distributors", &distributors.join(",")),
                ("tls", if options.tls.is_some() { "yes" } else { "no" }),
            ],
            &peregrine::stat::descriptors(&ConsumerCounters::NAMES, &CONSUMER_GAUGES),
        );
        Ok(Consumer {
            core,
            addresses: resolved,
            hosts,
            tls: options.tls,
            stream: None,
            session: None,
            epoch: Instant::now(),
            read_buf: vec![0; 64 << 10],
            dictionary: options.dictionary.unwrap_or_else(Dictionary::builtin),
            stopped: None,
            last_error: String::new(),
            busy_poll: Duration::ZERO,
            read_timeout: None,
            drained: false,
            tls_refusals: 0,
            stat,
        })
    }

    /// After data arrives, keep reading without blocking this long before sleeping in
    /// `poll(2)` again: lower latency (no wake-up, tens of microseconds on a virtual machine),
    /// a busy core. Default 0.
    pub fn set_busy_poll(&mut self, d: Duration) {
        self.busy_poll = d;
    }

    /// The field dictionary for reading fields by name: the distributor's once downloaded,
    /// else the application's ([`ConnectOptions::dictionary`]) or the built-in one.
    pub fn dictionary(&self) -> &Dictionary {
        self.core.dictionary().unwrap_or(&self.dictionary)
    }

    /// The distributor's dictionary as downloaded at the last login (`None`: not yet, a
    /// version 1 distributor, or no download asked for).
    pub fn downloaded_dictionary(&self) -> Option<&Dictionary> {
        self.core.dictionary()
    }

    /// Reads fields by the names of this dictionary while none is downloaded.
    pub fn set_dictionary(&mut self, dictionary: Dictionary) {
        self.dictionary = dictionary;
    }

    pub fn counters(&self) -> ConsumerCounters {
        self.core.counters()
    }

    pub fn is_logged_in(&self) -> bool {
        self.core.is_logged_in()
    }

    /// The distributor connected to now.
    pub fn distributor(&self) -> Option<SocketAddr> {
        self.stream
            .as_ref()
            .map(|_| self.addresses[self.core.address()])
    }

    /// The current connection's socket, for an application's own event loop: wait for it to
    /// be readable, then call `poll` with a zero timeout. It changes on reconnection (and is
    /// `None` between connections): look it up again after a `LoggedIn` or `Disconnected`
    /// event, and call `poll` at least every 50 ms while it is `None`.
    pub fn readable_fd(&self) -> Option<RawFd> {
        self.stream.as_ref().map(|s| s.as_raw_fd())
    }

    /// [`readable_fd`](Self::readable_fd) as a borrowed descriptor, for Rust event loops
    /// (`poll`, mio's `SourceFd`).
    pub fn socket(&self) -> Option<BorrowedFd<'_>> {
        self.stream.as_ref().map(|s| s.as_fd())
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Waits up to `timeout` for messages and hands each to `handler`; returns how many events
    /// it handed (it returns as soon as a read produced some). Connects and reconnects when it
    /// is time. An error ends the session only for a refused login or a bad argument; a lost
    /// connection is an event, not an error.
    pub fn poll(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        let r = self.poll_connection(timeout, handler);
        self.publish_counters();
        r
    }

    /// Writes the counters and gauges for `peregrine stat`: a dozen relaxed stores into
    /// shared memory, no system call.
    fn publish_counters(&self) {
        let n = ConsumerCounters::NAMES.len();
        self.stat
            .set_all(self.core.counters().values().iter().map(|&(_, v)| v));
        self.stat.set(n, u64::from(self.core.is_logged_in()));
        self.stat.set(n + 1, self.core.open_requests() as u64);
        self.stat
            .set(n + 2, self.core.rtt_ns().map_or(0, |ns| ns / 1_000));
    }

    /// The last round trip of a PING to the distributor (`None` before one was timed, or
    /// with a distributor of protocol version 1).
    pub fn rtt(&self) -> Option<Duration> {
        self.core.rtt_ns().map(Duration::from_nanos)
    }

    /// The distributor's services as its directory last said (after the login `connect`
    /// waited for, and kept up to date by `poll`): each name, whether a provider of it is live,
    /// and whether this user may open it. `Event::Service` reports each change as it comes.
    pub fn services(&self) -> Vec<(String, bool, bool)> {
        self.core
            .services()
            .map(|(name, up, may_open)| (name.to_string(), up, may_open))
            .collect()
    }

    /// The ping interval agreed with the distributor at this connection's login (`None`: not
    /// logged in, or a version 1 distributor).
    pub fn ping_interval(&self) -> Option<Duration> {
        self.core.ping_interval_ns().map(Duration::from_nanos)
    }

    /// How long an application's own event loop may wait before calling [`poll`](Self::poll)
    /// even if the socket stays quiet: the next PING to send, the silence deadline, or the
    /// next connection attempt. `None`: only when the socket turns readable.
    pub fn next_timeout(&self) -> Option<Duration> {
        let at = self.core.poll_timeout()?;
        Some(Duration::from_nanos(at.saturating_sub(self.now_ns())))
    }

    /// Sends a PING that is due, or gives up a connection whose distributor is silent.
    fn check_timers(&mut self, handler: &mut dyn FnMut(Event<'_>)) {
        if self.stream.is_none() {
            return;
        }
        let now = self.now_ns();
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            match self.core.handle_timeout(now) {
                Ok(()) => self.flush_out(),
                Err(e) => self.lost(&e.to_string(), handler),
            }
        }
    }

    /// `left` of a call's time, cut to the next timer of the core.
    fn wait_cap(&self, left: Duration) -> Duration {
        match self.next_timeout() {
            Some(t) => left.min(t),
            None => left,
        }
    }
}
