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

use crate::tls::{read_plain, write_pending, ClientTls};
use peregrine_md::consumer::{ConsumerConfig, ConsumerCore, ConsumerCounters};
use peregrine_md::dictionary::Dictionary;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

pub use any::AnyConsumer;
pub use peregrine_md::consumer::{ConsumerError as SessionError, Event};
pub use standby::WarmStandby;

pub mod any;
pub mod standby;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`Consumer::connect`] waits for the first login.
const FIRST_LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a consumer call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerError {
    /// An address that does not resolve.
    Address { address: String, error: io::Error },
    /// A bad argument, a refused login, or a distributor that broke the protocol.
    Session(SessionError),
    /// No distributor of the list accepted a connection and a login in time.
    NoDistributor { addresses: String, last: String },
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::Address { address, error } => write!(
                f,
                "distributor address {address:?}: {error}; give HOST:PORT, for example \
                 127.0.0.1:14500"
            ),
            ConsumerError::Session(e) => e.fmt(f),
            ConsumerError::NoDistributor { addresses, last } => write!(
                f,
                "no distributor of {addresses} accepted a connection and a login (tried for up \
                 to {FIRST_LOGIN_TIMEOUT:?}; last: {last}); is one running there?"
            ),
        }
    }
}

impl std::error::Error for ConsumerError {}

impl From<SessionError> for ConsumerError {
    fn from(e: SessionError) -> Self {
        ConsumerError::Session(e)
    }
}

/// How a consumer connects (plaintext TCP unless `tls` is set).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// TLS: the CA that the distributor's certificate must chain to, and this consumer's own
    /// certificate when its user logs in by it.
    pub tls: Option<ClientTls>,
    /// The context whose counters file carries this consumer's counters for `peregrine stat`
    /// (a record of type `consumer`). `None`: a file of the consumer's own, removed when the
    /// consumer is dropped. A process with many consumers gives them one context.
    pub context: Option<peregrine::Context>,
    /// The ping interval to ask the distributor for (`None`: the distributor's default). The
    /// distributor takes the nearest it allows; each side pings at it, and a side silent for
    /// three intervals is taken as gone (the consumer then reconnects).
    pub ping_interval: Option<Duration>,
    /// The application's own field dictionary. The distributor's is downloaded at each login
    /// and must give every field both know the same type: one that does not ends the session
    /// with an error naming the field. `None`: the distributor's is taken as it is.
    pub dictionary: Option<Dictionary>,
    /// Do not download the distributor's dictionary: read fields by `dictionary` (or the
    /// built-in one) alone.
    pub no_dictionary_download: bool,
}

impl ConnectOptions {
    /// Plaintext TCP (loopback distributors, or ones that allow plaintext logins).
    pub fn plain() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// TLS with `tls`.
    pub fn tls(tls: ClientTls) -> ConnectOptions {
        ConnectOptions {
            tls: Some(tls),
            ..ConnectOptions::default()
        }
    }

    /// The same, with the application's own dictionary, checked against the distributor's.
    pub fn with_dictionary(mut self, dictionary: Dictionary) -> ConnectOptions {
        self.dictionary = Some(dictionary);
        self
    }

    /// The same, without downloading the distributor's dictionary.
    pub fn without_dictionary_download(mut self) -> ConnectOptions {
        self.no_dictionary_download = true;
        self
    }

    /// The same, asking for a ping interval of `interval`.
    pub fn with_ping_interval(mut self, interval: Duration) -> ConnectOptions {
        self.ping_interval = Some(interval);
        self
    }

    /// The same, with the consumer's counters in `context`'s counters file.
    pub fn with_context(mut self, context: &peregrine::Context) -> ConnectOptions {
        self.context = Some(context.clone());
        self
    }
}

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

    /// Posts `fields` to `item` of `service` (`refresh`: a full image, for a new item; else
    /// an update); returns the post's id. Exactly one `Ack` event with that id answers it:
    /// the provider's accept or refusal, the distributor's refusal (`not-entitled`,
    /// `service-down`, ...), or `timeout`. Only while logged in (version 2).
    pub fn post(
        &mut self,
        service: &str,
        item: &str,
        fields: &[peregrine_md::model::Field<'_>],
        refresh: bool,
    ) -> Result<u32, ConsumerError> {
        let id = self.core.post(service, item, fields, refresh)?;
        self.flush_out();
        Ok(id)
    }

    /// [`post`](Self::post) with fields named as the dictionary names them, values read from
    /// text as their types say (`BID=189.25`).
    pub fn post_named(
        &mut self,
        service: &str,
        item: &str,
        fields: &[(&str, &str)],
        refresh: bool,
    ) -> Result<u32, ConsumerError> {
        let mut owned = Vec::with_capacity(fields.len());
        for (name, text) in fields {
            let (fid, v) = self
                .dictionary()
                .parse_value(name, text)
                .map_err(|why| ConsumerError::Session(SessionError::BadPost { why }))?;
            owned.push((fid, v));
        }
        let list: Vec<peregrine_md::model::Field<'_>> = owned
            .iter()
            .map(|(fid, v)| peregrine_md::model::Field::new(*fid, v.as_value()))
            .collect();
        self.post(service, item, &list, refresh)
    }

    /// Opens `patterns` (names and globs) of `service`; returns the request's id. Its images
    /// and updates arrive through [`poll`](Self::poll).
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, None)
    }

    /// What [`open`](Self::open), [`open_view`](Self::open_view),
    /// [`snapshot`](Self::snapshot) and [`snapshot_view`](Self::snapshot_view) do: `snapshot`
    /// for the images only, `view` the field names (`None`: every field).
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        snapshot: bool,
        view: Option<&[&str]>,
    ) -> Result<u32, ConsumerError> {
        let fids = view.map(|v| self.view_ids(v)).transpose()?;
        let id = self
            .core
            .request(service, patterns, snapshot, fids.as_deref())?;
        self.flush_out();
        Ok(id)
    }

    /// [`open`](Self::open) for the fields named `view` only (names of the consumer's
    /// dictionary, or `#FID`): REFRESHes carry those fields, and an UPDATE that changes none
    /// of them is not sent. Two requests holding one item each get their own events with
    /// their own fields (`request` says whose).
    pub fn open_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[&str],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, Some(view))
    }

    /// [`open_view`](Self::open_view) by field ids.
    pub fn open_view_ids(
        &mut self,
        service: &str,
        patterns: &[&str],
        fids: &[u16],
    ) -> Result<u32, ConsumerError> {
        let id = self.core.request(service, patterns, false, Some(fids))?;
        self.flush_out();
        Ok(id)
    }

    /// [`snapshot`](Self::snapshot) of the fields named `view` only.
    pub fn snapshot_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[&str],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, Some(view))
    }

    /// Field names (or `#FID`) to ids through the dictionary.
    fn view_ids(&self, view: &[&str]) -> Result<Vec<u16>, ConsumerError> {
        view.iter()
            .map(|name| {
                let by_id = name.strip_prefix('#').and_then(|n| n.parse::<u16>().ok());
                by_id
                    .or_else(|| self.dictionary.by_name(name).map(|d| d.fid))
                    .ok_or_else(|| {
                        ConsumerError::Session(SessionError::BadRequest {
                            why: format!(
                                "field {name:?} of the view is not in the dictionary: give a \
                                 field name (BID, ASK, ...) or #FID"
                            ),
                        })
                    })
            })
            .collect()
    }

    /// Asks for the images of `patterns` of `service` only; returns the request's id. Each
    /// item comes as an `Event::Refresh` with `snapshot` set (or a `Status`), then a `Status`
    /// `closed` with an empty item and this request id ends it.
    pub fn snapshot(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, None)
    }

    /// Pauses a request (0: every request open now): the distributor keeps its items' latest
    /// state only, until [`resume`](Self::resume); kept across reconnections.
    pub fn pause(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.pause(request)?;
        self.flush_out();
        Ok(())
    }

    /// Resumes a paused request (0: every one): a `Refresh` flagged `conflated` (or a
    /// `Status`) per item that changed meanwhile, then its updates again.
    pub fn resume(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.resume(request)?;
        self.flush_out();
        Ok(())
    }

    /// Closes a request.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.close(request)?;
        self.flush_out();
        Ok(())
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

    /// [`poll`](Self::poll) but for the counters.
    fn poll_connection(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        let events = std::cell::Cell::new(0usize);
        let mut count = |e: Event<'_>| {
            events.set(events.get() + 1);
            handler(e);
        };
        let end = Instant::now() + timeout;
        let mut spin_until: Option<Instant> = None;
        // The first wait of a call blocks in the read itself; later ones in poll(2).
        let mut waited = false;
        let mut read_tried = false;
        loop {
            if self.stream.is_none() {
                if let Some(e) = &self.stopped {
                    return Err(ConsumerError::Session(e.clone()));
                }
                if self.core.is_refused() {
                    return Err(ConsumerError::Session(SessionError::LoginRefused {
                        result: peregrine_md::codec::LoginResult::Denied,
                        text: self.last_error.clone(),
                    }));
                }
                let due = self.core.poll_timeout().unwrap_or(0);
                let now = self.now_ns();
                if now >= due {
                    self.try_connect(&mut count);
                } else {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() || events.get() > 0 {
                        return Ok(events.get());
                    }
                    std::thread::sleep(Duration::from_nanos(due - now).min(left));
                }
                if events.get() > 0 {
                    return Ok(events.get());
                }
                continue;
            }
            self.check_timers(&mut count);
            if self.stream.is_none() {
                if events.get() > 0 {
                    return Ok(events.get());
                }
                continue;
            }
            if !self.core.transmit().is_empty()
                || self.session.as_ref().is_some_and(|t| t.wants_write())
            {
                self.flush_out();
            }
            // The socket looked empty (a short read, or EAGAIN): hand back what was read, spin
            // (busy-poll), or wait for data. A short read is taken as empty without a failing
            // read to prove it, and the first wait of a call is the read itself, blocking
            // under SO_RCVTIMEO: one system call per wake-up, as a plain blocking reader has
            // (a wrong guess costs nothing: the read returns at once).
            let mut wait = false;
            if self.drained {
                let now = Instant::now();
                let spinning = !self.busy_poll.is_zero()
                    && (events.get() > 0 || spin_until.is_some())
                    && now < *spin_until.get_or_insert(now + self.busy_poll);
                if !spinning {
                    if events.get() > 0 || (now >= end && read_tried) {
                        return Ok(events.get());
                    }
                    if now >= end {
                        // A call with no time left (an event loop's, after the socket turned
                        // readable) still reads once, without waiting.
                    } else if waited {
                        self.wait_readable(self.wait_cap(end - now));
                    } else {
                        wait = true;
                        waited = true;
                    }
                } else {
                    std::hint::spin_loop();
                }
                self.drained = false;
            }
            let cap = self.wait_cap(end.saturating_duration_since(Instant::now()));
            let r = self.read(if wait { Some(cap) } else { None });
            read_tried = true;
            match r {
                Ok(0) => self.lost("the distributor closed the connection", &mut count),
                Ok(n) => {
                    let now = self.now_ns();
                    let result = self.core.handle_bytes(&self.read_buf[..n], now, &mut count);
                    match result {
                        Ok(()) => self.flush_out(),
                        Err(SessionError::LoginRefused { result, text }) => {
                            self.stream = None;
                            self.last_error = text.clone();
                            return Err(SessionError::LoginRefused { result, text }.into());
                        }
                        Err(e @ SessionError::DictionaryMismatch(_)) => {
                            self.stream = None;
                            self.session = None;
                            self.last_error = e.to_string();
                            self.stopped = Some(e.clone());
                            return Err(e.into());
                        }
                        Err(e) => self.lost(&e.to_string(), &mut count),
                    }
                    self.drained = n < self.read_buf.len();
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained = true,
                Err(e) => {
                    // TLS refused: a certificate that does not verify, a refused one of ours.
                    if self.session.is_some() && e.kind() == io::ErrorKind::InvalidData {
                        self.tls_refusals += 1;
                    }
                    self.lost(&e.to_string(), &mut count)
                }
            }
            if self.stream.is_none() && events.get() > 0 {
                return Ok(events.get());
            }
        }
    }

    /// One read: blocking up to `wait` (SO_RCVTIMEO, set only when it changes), or without
    /// waiting (`MSG_DONTWAIT`).
    fn read(&mut self, wait: Option<Duration>) -> io::Result<usize> {
        let Some(s) = &self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let flags = match wait {
            Some(t) => {
                // SO_RCVTIMEO of 0 means forever: at least a millisecond.
                let t = t.max(Duration::from_millis(1));
                if self.read_timeout != Some(t) {
                    s.set_read_timeout(Some(t))?;
                    self.read_timeout = Some(t);
                }
                rustix::net::RecvFlags::empty()
            }
            None => rustix::net::RecvFlags::DONTWAIT,
        };
        match &mut self.session {
            None => match rustix::net::recv(s, &mut self.read_buf[..], flags) {
                Ok((n, _)) => Ok(n),
                // SO_RCVTIMEO ran out: as empty as EAGAIN.
                Err(e) => Err(io::Error::from(e)),
            },
            Some(tls) => {
                let mut socket = Socket { stream: s, flags };
                read_plain(tls, &mut socket, &mut self.read_buf)
            }
        }
    }

    /// Sleeps in `poll(2)` until the socket is readable or `timeout` passed.
    fn wait_readable(&self, timeout: Duration) {
        let Some(s) = &self.stream else { return };
        let mut fds = [rustix::event::PollFd::new(s, rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }

    fn try_connect(&mut self, handler: &mut dyn FnMut(Event<'_>)) {
        let addr = self.addresses[self.core.address()];
        let session = match &self.tls {
            None => Ok(None),
            Some(tls) => tls
                .connect(&self.hosts[self.core.address()])
                .map(|c| Some(rustls::Connection::Client(c))),
        };
        let connected = match session {
            Ok(session) => TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map(|s| (s, session))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match connected {
            Ok((s, session)) => {
                let _ = s.set_nodelay(true);
                self.read_timeout = None;
                self.stream = Some(s);
                self.session = session;
                self.drained = false;
                let now = self.now_ns();
                self.core.connected(now);
                self.flush_out();
            }
            Err(e) => {
                self.last_error = format!("{addr}: {e}");
                let now = self.now_ns();
                let reason = format!("cannot connect to {addr}: {e}");
                self.core.connect_failed(now, &reason, handler);
            }
        }
    }

    fn lost(&mut self, reason: &str, handler: &mut dyn FnMut(Event<'_>)) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.session = None;
        self.last_error = reason.to_string();
        let now = self.now_ns();
        self.core.connection_lost(now, reason, handler);
    }

    /// Writes what the core queued (LOGIN, OPENs, CLOSEs), as much as the socket takes now;
    /// the rest on the next call. A failed write shows as a lost connection on the next read.
    fn flush_out(&mut self) {
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        if let Some(tls) = &mut self.session {
            // What the core queued is small (LOGIN, OPENs, CLOSEs): rustls takes it whole and
            // holds its records until the socket does.
            let out = self.core.transmit();
            if !out.is_empty() {
                let n = tls.writer().write(out).unwrap_or(0);
                self.core.transmitted(n);
            }
            let mut socket = Socket {
                stream: s,
                flags: rustix::net::RecvFlags::DONTWAIT,
            };
            if let Err(e) = write_pending(tls, &mut socket) {
                if e.kind() != io::ErrorKind::WouldBlock {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
            return;
        }
        loop {
            let out = self.core.transmit();
            if out.is_empty() {
                return;
            }
            match rustix::net::send(&*s, out, rustix::net::SendFlags::DONTWAIT)
                .map_err(io::Error::from)
            {
                Ok(0) => return,
                Ok(n) => self.core.transmitted(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
        }
    }
}

/// The consumer's socket as rustls reads and writes it: the first read with `flags` (a wait
/// under SO_RCVTIMEO, or none), every later one without waiting; writes never wait.
struct Socket<'a> {
    stream: &'a TcpStream,
    flags: rustix::net::RecvFlags,
}

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let flags = std::mem::replace(&mut self.flags, rustix::net::RecvFlags::DONTWAIT);
        rustix::net::recv(self.stream, buf, flags)
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.stream, buf, rustix::net::SendFlags::DONTWAIT)
            .map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
