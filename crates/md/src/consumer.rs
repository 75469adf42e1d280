//! The consumer's session core (RTSDK's consumer), sans-I/O: login, requests and their
//! re-opening after a reconnection, each item's `item_seq` tally, and the reconnection
//! schedule. The driver (`peregrine_market_data::Consumer`) owns the TCP connection and the
//! clock.
//!
//! The driver calls, in this order for one connection:
//!
//! 1. [`ConsumerCore::connected`] when a connection is up: a LOGIN (version 2, asking for the
//!    configured ping interval) is queued;
//! 2. [`ConsumerCore::handle_bytes`] with every byte read: messages are decoded in place and
//!    handed to the caller's handler as [`Event`]s borrowing the read buffer (no copy); the
//!    login's answer queues an OPEN for every open request; a PING is answered with a PONG;
//! 3. [`ConsumerCore::transmit`] / [`ConsumerCore::transmitted`]: the bytes to write;
//! 4. [`ConsumerCore::handle_timeout`] at [`ConsumerCore::poll_timeout`] while logged in: a
//!    PING every interval agreed at login, and [`ConsumerError::Silent`] when the distributor
//!    sent nothing for three intervals (a stopped process, a half-open connection): the
//!    driver then closes the connection as a lost one;
//! 5. [`ConsumerCore::connection_lost`] when it breaks: every item the application had as
//!    `ok` gets a STATUS `stale` event first (never a silent gap), and the next attempt is
//!    scheduled ([`ConsumerCore::poll_timeout`]) with a back-off of 50 ms doubling to 2 s,
//!    moving through the distributors' addresses in turn.
//!
//! After a version 2 login the core asks for the distributor's field dictionary (unless
//! configured not to) and checks it against the application's own, if it gave one
//! ([`ConsumerConfig::dictionary`]): a field of another type ends the session with
//! [`ConsumerError::DictionaryMismatch`] naming it. Posts ([`ConsumerCore::post`]) are answered
//! by `Ack` events, exactly one per post: the distributor's, or the core's own `timeout` for
//! those in flight when the connection breaks.
//!
//! A refused login ends the session: the core stops scheduling attempts. A distributor that
//! speaks only version 1 answers the version 2 LOGIN with `unsupported version`: the core
//! logs in again at once with version 1, without liveness.

use crate::codec::open::MAX_VIEW_FIELDS;
use crate::codec::AckCode;
use crate::codec::{
    open_flags, refresh_flags, CloseRepr, FieldList, LoginRepr, LoginResult, MdError, Message,
    Messages, OpenRepr, PatternList, PauseRepr, PingRepr, ViewList, MAX_MESSAGE_LEN, MIN_VERSION,
    VERSION,
};
use crate::dictionary::{Dictionary, DictionaryMismatch};
use crate::model::{check_item_pattern, check_service, check_user, ItemState, NameError};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::fmt;

/// How a consumer logs in and reconnects; [`ConsumerConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub user: String,
    pub token: Vec<u8>,
    /// How many distributor addresses the driver has (attempts go through them in turn).
    pub addresses: usize,
    /// The first reconnection delay, doubled after each failed attempt (50 ms).
    pub first_backoff_ns: u64,
    /// The longest reconnection delay (2 s).
    pub max_backoff_ns: u64,
    /// The ping interval to ask the distributor for (0: the distributor's default, 5 s
    /// unless configured); the distributor takes the nearest it allows and says which. A
    /// distributor silent for three intervals is taken as lost.
    pub ping_interval_ns: u64,
    /// How long a LOGIN may wait for its answer before the connection is given up (10 s).
    pub login_timeout_ns: u64,
    /// Ask for the distributor's field dictionary after each login (true).
    pub download_dictionary: bool,
    /// The application's own dictionary, if it has one: the downloaded one must give each
    /// field they both know the same type.
    pub dictionary: Option<Dictionary>,
}

impl ConsumerConfig {
    pub fn new(user: &str, token: &[u8], addresses: usize) -> Self {
        ConsumerConfig {
            user: user.to_string(),
            token: token.to_vec(),
            addresses: addresses.max(1),
            first_backoff_ns: 50_000_000,
            max_backoff_ns: 2_000_000_000,
            ping_interval_ns: 0,
            login_timeout_ns: 10_000_000_000,
            download_dictionary: true,
            dictionary: None,
        }
    }
}

/// Why a consumer call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerError {
    BadUser {
        user: String,
        why: NameError,
    },
    /// A token of 1 to 255 bytes.
    BadToken,
    BadService {
        service: String,
        why: NameError,
    },
    BadPattern {
        pattern: String,
        why: NameError,
    },
    /// A request of no pattern, or one whose patterns do not fit in one OPEN (64 KiB).
    BadRequest {
        why: String,
    },
    /// No open request has this id.
    UnknownRequest {
        request: u32,
    },
    /// The distributor refused the login (the session is over).
    LoginRefused {
        result: LoginResult,
        text: String,
    },
    /// The distributor sent something this consumer cannot read: the connection must close.
    Protocol {
        error: String,
    },
    /// Nothing came from the distributor for three ping intervals: the connection must close
    /// (and a new one is tried).
    Silent {
        silent_ms: u64,
        interval_ms: u64,
    },
    /// The LOGIN was not answered in time: the connection must close (and a new one is
    /// tried).
    LoginTimeout {
        waited_ms: u64,
    },
    /// The distributor's dictionary gives a field another type than the application's (the
    /// session is over: fields would be misread).
    DictionaryMismatch(DictionaryMismatch),
    /// Posting needs a login with version 2 (posts are not queued while disconnected).
    NotLoggedIn,
    /// A post that cannot be sent: a bad name, no field, over 64 KiB.
    BadPost {
        why: String,
    },
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::BadUser { user, why } => write!(
                f,
                "user {user:?}: {why}; give {}",
                crate::model::USER_ALPHABET
            ),
            ConsumerError::BadToken => f.write_str("the token must be 1 to 255 bytes"),
            ConsumerError::BadService { service, why } => write!(
                f,
                "service {service:?}: {why}; give {}",
                crate::model::SERVICE_ALPHABET
            ),
            ConsumerError::BadPattern { pattern, why } => write!(
                f,
                "item {pattern:?}: {why}; give {}",
                crate::model::PATTERN_ALPHABET
            ),
            ConsumerError::BadRequest { why } => f.write_str(why),
            ConsumerError::UnknownRequest { request } => {
                write!(f, "request {request} is not open")
            }
            ConsumerError::LoginRefused { result, text } => {
                write!(f, "login refused ({result:?}): {text}")
            }
            ConsumerError::Protocol { error } => {
                write!(
                    f,
                    "the distributor sent a stream this consumer cannot read: {error}"
                )
            }
            ConsumerError::Silent {
                silent_ms,
                interval_ms,
            } => write!(
                f,
                "nothing from the distributor for {silent_ms} ms (three ping intervals of \
                 {interval_ms} ms): a stopped process or a broken path"
            ),
            ConsumerError::LoginTimeout { waited_ms } => write!(
                f,
                "the distributor did not answer the LOGIN in {waited_ms} ms: a stopped \
                 process, or not a Peregrine distributor"
            ),
            ConsumerError::DictionaryMismatch(m) => m.fmt(f),
            ConsumerError::NotLoggedIn => f.write_str(
                "not logged in (or the distributor speaks version 1): posts are sent only \
                 while logged in; try again after the login",
            ),
            ConsumerError::BadPost { why } => write!(f, "post not sent: {why}"),
        }
    }
}

impl std::error::Error for ConsumerError {}

/// How the text of the `stale` statuses a lost connection gives every item begins.
pub const CONNECTION_LOST: &str = "connection to the distributor lost";

/// What the application receives. Names and fields borrow the bytes just read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// Logged in (after every (re)connection); every open request was sent again.
    LoggedIn { address: usize },
    /// The item's full image, for `request`: an item several requests hold comes once per
    /// request, each with the fields of its own view (see [`ConsumerCore::request`]).
    /// `solicited`: it answers a request (else the provider sent a new image); `conflated`: it
    /// replaces updates dropped while the consumer was slow or paused; `snapshot`: it answers
    /// the snapshot request `request` (no update follows for it).
    Refresh {
        request: u32,
        item: &'a str,
        item_seq: u32,
        timestamp_ns: u64,
        solicited: bool,
        conflated: bool,
        snapshot: bool,
        fields: FieldList<'a>,
    },
    /// The fields that changed, for `request` (as for `Refresh`; not sent to a request none
    /// of whose fields it changes).
    Update {
        request: u32,
        item: &'a str,
        item_seq: u32,
        timestamp_ns: u64,
        fields: FieldList<'a>,
    },
    /// The item's state (`stale`, `closed`, `not-entitled`, `not-found`, `rejected`), from the
    /// distributor, or `stale` from the consumer itself when the connection was lost.
    Status {
        item: &'a str,
        state: ItemState,
        text: &'a str,
        /// The request it answers (0: none).
        request: u32,
    },
    /// An UPDATE whose `item_seq` does not follow the item's last message: updates were missed
    /// without a STATUS saying so (a distributor never lets this happen; it is reported, not
    /// skipped). The update itself follows as an `Update` event.
    Gap {
        item: &'a str,
        expected: u32,
        got: u32,
    },
    /// The consumer fell behind; `items` REFRESHes (flagged conflated) follow.
    Conflated { items: u32, updates_dropped: u32 },
    /// A service of the distributor's directory, after each login (every service) and when
    /// its state changes: `up` while a provider of it is live, `may_open` if this user may
    /// open it.
    Service {
        service: &'a str,
        up: bool,
        may_open: bool,
    },
    /// Not connected: the connection broke (items were reported stale just before), or an
    /// attempt to connect failed. A new attempt follows after the back-off.
    Disconnected { reason: &'a str },
    /// The distributor's field dictionary arrived whole (also [`ConsumerCore::dictionary`]),
    /// and agrees with the application's own.
    Dictionary { dictionary: &'a Dictionary },
    /// The answer to a post: `code` accepted, or why not (`text`). `timeout` also answers a
    /// post in flight when the connection broke (it may or may not have reached its
    /// provider).
    Ack {
        post_id: u32,
        item: &'a str,
        code: AckCode,
        text: &'a str,
    },
}

#[derive(Debug, Clone)]
struct Request {
    service: String,
    patterns: Vec<String>,
    /// The images only: forgotten once its closing STATUS comes.
    snapshot: bool,
    /// Paused: paused again after each (re)connection's OPEN.
    paused: bool,
    /// The fields asked for (`None`: all).
    view: Option<Vec<u16>>,
}

#[derive(Debug, Clone)]
struct ItemView {
    name: Box<str>,
    /// Its service (a group STATUS names the service, not the items).
    service: Box<str>,
    /// The item_seq of its last REFRESH or UPDATE; `None` while it is not ok.
    seq: Option<u32>,
    /// Its last REFRESH was cut to a view: UPDATEs outside it are not sent, so `item_seq`
    /// may skip values (not a gap).
    viewed: bool,
    /// The requests holding it.
    streams: Streams,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No connection; the next attempt at this time.
    Waiting {
        attempt_at_ns: u64,
    },
    /// Connected; LOGIN sent at `since_ns`, its answer awaited.
    LoggingIn {
        since_ns: u64,
    },
    LoggedIn,
    /// The login was refused: no more attempts.
    Refused,
}

/// What the consumer counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerCounters {
    pub messages: u64,
    pub refreshes: u64,
    pub updates: u64,
    pub statuses: u64,
    pub conflated: u64,
    pub gaps: u64,
    /// UPDATEs of an item with no image (never refreshed, or last said stale).
    pub updates_without_image: u64,
    pub connections: u64,
    pub disconnections: u64,
    /// PINGs sent to the distributor.
    pub pings_sent: u64,
    /// PONGs received.
    pub pongs_received: u64,
    /// Connections given up because the distributor was silent for three ping intervals.
    pub silences: u64,
}

impl ConsumerCounters {
    /// The counters' names (the fields'), in the stable order of [`values`](Self::values).
    pub const NAMES: [&'static str; 12] = [
        "messages",
        "refreshes",
        "updates",
        "statuses",
        "conflated",
        "gaps",
        "updates_without_image",
        "connections",
        "disconnections",
        "pings_sent",
        "pongs_received",
        "silences",
    ];

    /// Each counter's name and value, in the order of [`NAMES`](Self::NAMES).
    pub fn values(&self) -> [(&'static str, u64); 12] {
        let v = [
            self.messages,
            self.refreshes,
            self.updates,
            self.statuses,
            self.conflated,
            self.gaps,
            self.updates_without_image,
            self.connections,
            self.disconnections,
            self.pings_sent,
            self.pongs_received,
            self.silences,
        ];
        std::array::from_fn(|i| (Self::NAMES[i], v[i]))
    }
}

/// One consumer's session: see the module's documentation.
#[derive(Debug)]
pub struct ConsumerCore {
    config: ConsumerConfig,
    phase: Phase,
    backoff_ns: u64,
    /// The address of the current (or next) attempt.
    address: usize,
    requests: BTreeMap<u32, Request>,
    /// Changes when a request is opened, closed, paused or resumed: items find their streams
    /// again.
    generation: u64,
    next_request: u32,
    /// By the distributor's item id (FxHash: looked up per message).
    items: FxHashMap<u32, ItemView>,
    /// Bytes read that do not yet make a whole message.
    partial: Vec<u8>,
    out: Vec<u8>,
    counters: ConsumerCounters,
    /// The version to log in with: 2, or 1 once a distributor refused 2.
    version: u16,
    /// Log in again at once, at the same address (after an `unsupported version`).
    retry_now: bool,
    /// Liveness agreed at this connection's login (version 2).
    liveness: Option<Liveness>,
    /// The last PING's round trip (kept across connections until a new one is timed).
    rtt_ns: Option<u64>,
    /// The distributor's directory as last told: service → (up, may open).
    directory: BTreeMap<String, (bool, bool)>,
    /// The distributor's dictionary, once downloaded whole.
    dictionary: Option<Dictionary>,
    /// The dictionary being downloaded: what came so far, and the next part's number.
    download: Option<(Dictionary, u16)>,
    /// Posts waiting for their ACK: id → item.
    posts: BTreeMap<u32, Box<str>>,
    next_post: u32,
}

/// The consumer's side of liveness on one connection.
#[derive(Debug, Clone, Copy)]
struct Liveness {
    interval_ns: u64,
    next_ping_ns: u64,
    last_heard_ns: u64,
    /// The payload of the PING not yet answered.
    outstanding: Option<u64>,
}

impl ConsumerCore {
    /// A consumer that may connect at once.
    pub fn new(config: ConsumerConfig) -> Result<Self, ConsumerError> {
        check_user(config.user.as_bytes()).map_err(|why| ConsumerError::BadUser {
            user: config.user.clone(),
            why,
        })?;
        if config.token.is_empty() || config.token.len() > 255 {
            return Err(ConsumerError::BadToken);
        }
        let backoff_ns = config.first_backoff_ns;
        Ok(ConsumerCore {
            config,
            phase: Phase::Waiting { attempt_at_ns: 0 },
            backoff_ns,
            address: 0,
            requests: BTreeMap::new(),
            generation: 1,
            next_request: 1,
            items: FxHashMap::default(),
            partial: Vec::new(),
            out: Vec::new(),
            counters: ConsumerCounters::default(),
            version: VERSION,
            retry_now: false,
            liveness: None,
            rtt_ns: None,
            directory: BTreeMap::new(),
            dictionary: None,
            download: None,
            posts: BTreeMap::new(),
            next_post: 0,
        })
    }

    pub fn counters(&self) -> ConsumerCounters {
        self.counters
    }

    pub fn is_logged_in(&self) -> bool {
        self.phase == Phase::LoggedIn
    }

    /// Requests open now (they are re-opened on each new connection).
    pub fn open_requests(&self) -> usize {
        self.requests.len()
    }

    /// The login was refused: the driver stops.
    pub fn is_refused(&self) -> bool {
        self.phase == Phase::Refused
    }

    /// Which address to try now (an index into the driver's list).
    pub fn address(&self) -> usize {
        self.address
    }

    /// When the driver should act: try to connect (not connected), or call
    /// [`handle_timeout`](Self::handle_timeout) (logged in with liveness). `None`: nothing to
    /// do before the next input (or refused).
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { attempt_at_ns } => Some(attempt_at_ns),
            Phase::LoggingIn { since_ns } => {
                Some(since_ns.saturating_add(self.config.login_timeout_ns))
            }
            Phase::LoggedIn => self.liveness.map(|l| {
                l.next_ping_ns
                    .min(l.last_heard_ns.saturating_add(3 * l.interval_ns))
            }),
            _ => None,
        }
    }

    /// The interval agreed with the distributor at this connection's login, in nanoseconds
    /// (`None`: not logged in, or a version 1 distributor: no liveness).
    pub fn ping_interval_ns(&self) -> Option<u64> {
        self.liveness.map(|l| l.interval_ns)
    }

    /// The last round trip of a PING to the distributor.
    pub fn rtt_ns(&self) -> Option<u64> {
        self.rtt_ns
    }

    /// The distributor's services as its DIRECTORY last said: each name, whether a provider of
    /// it is live, and whether this user may open it (empty before a version 2 login).
    pub fn services(&self) -> impl Iterator<Item = (&str, bool, bool)> {
        self.directory
            .iter()
            .map(|(name, &(up, may_open))| (name.as_str(), up, may_open))
    }

    /// The protocol version the next LOGIN uses.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// While logged in: sends a PING when the interval passed; returns
    /// [`ConsumerError::Silent`] when nothing was read for three intervals (or
    /// [`ConsumerError::LoginTimeout`] while a LOGIN waits too long), after which the driver
    /// closes the connection and calls [`connection_lost`](Self::connection_lost).
    pub fn handle_timeout(&mut self, now_ns: u64) -> Result<(), ConsumerError> {
        if let Phase::LoggingIn { since_ns } = self.phase {
            let waited = now_ns.saturating_sub(since_ns);
            if waited >= self.config.login_timeout_ns {
                return Err(ConsumerError::LoginTimeout {
                    waited_ms: waited / 1_000_000,
                });
            }
        }
        if self.phase != Phase::LoggedIn {
            return Ok(());
        }
        let Some(l) = &mut self.liveness else {
            return Ok(());
        };
        let silent = now_ns.saturating_sub(l.last_heard_ns);
        if silent >= 3 * l.interval_ns {
            self.counters.silences += 1;
            return Err(ConsumerError::Silent {
                silent_ms: silent / 1_000_000,
                interval_ms: l.interval_ns / 1_000_000,
            });
        }
        if now_ns >= l.next_ping_ns {
            l.next_ping_ns = now_ns.saturating_add(l.interval_ns);
            // Its send time: the PONG carries it back to time the round trip.
            l.outstanding = Some(now_ns);
            Message::Ping(PingRepr { payload: now_ns }).emit_to_vec(&mut self.out);
            self.counters.pings_sent += 1;
        }
        Ok(())
    }

    /// Opens `patterns` (names and globs) of `service`; returns the request's id. Sent now
    /// when logged in, else at login.
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, None)
    }

    /// [`open`](Self::open) for the fields `view` (field ids) only: REFRESHes carry those
    /// fields, and an UPDATE that changes none of them is not sent (so `item_seq` may skip:
    /// no `Gap` is reported for such items). Two requests holding one item each get their own
    /// `Refresh` and `Update` events, with their own fields (a request without a view: every
    /// field): the distributor sends the union, and the core cuts it per request.
    pub fn open_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[u16],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, Some(view))
    }

    /// Asks for the images of `patterns` of `service` only (a snapshot); returns the
    /// request's id. Each item comes as a `Refresh` with `snapshot` set (or a `Status`), then a
    /// `Status` `closed` with no item and this request id ends it; nothing more of it comes.
    /// A snapshot not answered when the connection breaks is asked again after the next
    /// login.
    pub fn snapshot(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, None)
    }

    /// [`snapshot`](Self::snapshot) of the fields `view` only.
    pub fn snapshot_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[u16],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, Some(view))
    }

    /// What [`open`](Self::open), [`open_view`](Self::open_view),
    /// [`snapshot`](Self::snapshot) and [`snapshot_view`](Self::snapshot_view) do: `snapshot`
    /// for the images only, `view` the field ids (`None`: every field).
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        snapshot: bool,
        view: Option<&[u16]>,
    ) -> Result<u32, ConsumerError> {
        if let Some(v) = view {
            let mut ids = v.to_vec();
            ids.sort_unstable();
            ids.dedup();
            if v.is_empty() || v.len() > MAX_VIEW_FIELDS || ids.len() != v.len() {
                return Err(ConsumerError::BadRequest {
                    why: format!(
                        "a view of {} field ids: give 1 to {MAX_VIEW_FIELDS}, none twice",
                        v.len()
                    ),
                });
            }
            if let Some(&bad) = v.iter().find(|&&f| f == 0 || f > crate::model::MAX_FID) {
                return Err(ConsumerError::BadRequest {
                    why: format!(
                        "field id {bad} in a view: give 1 to {}",
                        crate::model::MAX_FID
                    ),
                });
            }
        }
        check_service(service.as_bytes()).map_err(|why| ConsumerError::BadService {
            service: service.to_string(),
            why,
        })?;
        if patterns.is_empty() {
            return Err(ConsumerError::BadRequest {
                why: "a request names at least one item or glob".into(),
            });
        }
        let mut len = 16 + service.len() + view.map_or(0, |v| 2 + 2 * v.len());
        for p in patterns {
            check_item_pattern(p.as_bytes()).map_err(|why| ConsumerError::BadPattern {
                pattern: p.to_string(),
                why,
            })?;
            len += 1 + p.len();
        }
        if len > MAX_MESSAGE_LEN || patterns.len() > usize::from(u16::MAX) {
            return Err(ConsumerError::BadRequest {
                why: format!(
                    "a request of {} patterns takes {len} bytes, over one message's \
                     {MAX_MESSAGE_LEN}: open them in several requests",
                    patterns.len()
                ),
            });
        }
        let id = self.next_request;
        self.next_request = self.next_request.checked_add(1).unwrap_or(1);
        self.generation += 1;
        self.requests.insert(
            id,
            Request {
                service: service.to_string(),
                patterns: patterns.iter().map(|p| p.to_string()).collect(),
                snapshot,
                paused: false,
                view: view.map(<[u16]>::to_vec),
            },
        );
        if self.phase == Phase::LoggedIn {
            self.emit_open(id);
        }
        Ok(id)
    }

    /// Closes a request: what it alone opened stops.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        let Some(r) = self.requests.remove(&request) else {
            return Err(ConsumerError::UnknownRequest { request });
        };
        self.generation += 1;
        // A snapshot holds nothing at the distributor: forgetting it is enough.
        if self.phase == Phase::LoggedIn && !r.snapshot {
            Message::Close(CloseRepr {
                request_id: request,
            })
            .emit_to_vec(&mut self.out);
        }
        Ok(())
    }

    /// Pauses a request (0: every request open now): the distributor keeps its items' latest
    /// state only until [`resume`](Self::resume). Kept across reconnections.
    pub fn pause(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.set_paused(request, true)
    }

    /// Resumes a paused request (0: every paused request): one `Refresh` (flagged
    /// `conflated`) or `Status` per item that changed meanwhile, then its updates again.
    pub fn resume(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.set_paused(request, false)
    }

    fn set_paused(&mut self, request: u32, paused: bool) -> Result<(), ConsumerError> {
        self.generation += 1;
        if request == 0 {
            for r in self.requests.values_mut() {
                r.paused = paused;
            }
        } else {
            let Some(r) = self.requests.get_mut(&request) else {
                return Err(ConsumerError::UnknownRequest { request });
            };
            r.paused = paused;
        }
        if self.phase == Phase::LoggedIn {
            let m = PauseRepr {
                request_id: request,
            };
            let m = if paused {
                Message::Pause(m)
            } else {
                Message::Resume(m)
            };
            m.emit_to_vec(&mut self.out);
        }
        Ok(())
    }

    fn emit_open(&mut self, id: u32) {
        let r = &self.requests[&id];
        let patterns: Vec<&str> = r.patterns.iter().map(String::as_str).collect();
        Message::Open(OpenRepr {
            flags: if r.snapshot { open_flags::SNAPSHOT } else { 0 },
            request_id: id,
            service: &r.service,
            patterns: PatternList::List(&patterns),
            view: r.view.as_deref().map(ViewList::List),
        })
        .emit_to_vec(&mut self.out);
        if r.paused {
            Message::Pause(PauseRepr { request_id: id }).emit_to_vec(&mut self.out);
        }
    }

    /// A connection to [`address`](Self::address) is up: LOGIN is queued.
    pub fn connected(&mut self, now_ns: u64) {
        self.partial.clear();
        self.out.clear();
        self.items.clear();
        self.liveness = None;
        let asked_ms = self.config.ping_interval_ns.div_ceil(1_000_000);
        Message::Login(LoginRepr {
            version: self.version,
            user: &self.config.user,
            token: &self.config.token,
            ping_interval_ms: if self.version >= 2 {
                u32::try_from(asked_ms).unwrap_or(u32::MAX)
            } else {
                0
            },
        })
        .emit_to_vec(&mut self.out);
        self.phase = Phase::LoggingIn { since_ns: now_ns };
    }

    /// An attempt to connect failed: `Disconnected` with the reason, and the next attempt is
    /// scheduled.
    pub fn connect_failed(
        &mut self,
        now_ns: u64,
        reason: &str,
        on_event: &mut dyn FnMut(Event<'_>),
    ) {
        on_event(Event::Disconnected { reason });
        self.schedule(now_ns);
    }

    fn schedule(&mut self, now_ns: u64) {
        self.liveness = None;
        if self.phase == Phase::Refused {
            return;
        }
        if std::mem::take(&mut self.retry_now) {
            // The same distributor again, with an older version: no back-off.
            self.phase = Phase::Waiting {
                attempt_at_ns: now_ns,
            };
            return;
        }
        self.phase = Phase::Waiting {
            attempt_at_ns: now_ns + self.backoff_ns,
        };
        self.backoff_ns = (self.backoff_ns * 2).min(self.config.max_backoff_ns);
        self.address = (self.address + 1) % self.config.addresses;
    }

    /// Bytes to write to the connection.
    pub fn transmit(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of [`transmit`](Self::transmit) were written.
    pub fn transmitted(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// The connection broke (or the driver closed it): every item that was ok is reported
    /// stale, then `Disconnected`, and the next attempt is scheduled.
    pub fn connection_lost(
        &mut self,
        now_ns: u64,
        reason: &str,
        on_event: &mut dyn FnMut(Event<'_>),
    ) {
        let mut names: Vec<Box<str>> = self
            .items
            .drain()
            .filter(|(_, v)| v.seq.is_some())
            .map(|(_, v)| v.name)
            .collect();
        names.sort();
        let text = format!("{CONNECTION_LOST} ({reason}): reconnecting");
        for n in &names {
            on_event(Event::Status {
                item: n,
                state: ItemState::Stale,
                text: &text,
                request: 0,
            });
        }
        self.counters.disconnections += 1;
        self.posts_lost(reason, on_event);
        self.download = None;
        on_event(Event::Disconnected { reason });
        self.partial.clear();
        self.out.clear();
        self.schedule(now_ns);
    }

    /// Bytes read from the connection: whole messages become events (borrowing `bytes` when
    /// no partial message was pending). An error means the connection must be closed (and
    /// [`connection_lost`](Self::connection_lost) called), or for `LoginRefused`, the end.
    pub fn handle_bytes(
        &mut self,
        bytes: &[u8],
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if let Some(l) = &mut self.liveness {
            if !bytes.is_empty() {
                l.last_heard_ns = l.last_heard_ns.max(now_ns);
            }
        }
        if self.partial.is_empty() {
            let rest = self.handle_messages(bytes, now_ns, on_event)?;
            self.partial.extend_from_slice(rest);
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        let r = self
            .handle_messages(&buf, now_ns, on_event)
            .map(|rest| rest.len());
        match r {
            Ok(left) => {
                let from = buf.len() - left;
                buf.drain(..from);
                self.partial = buf;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Handles the whole messages of `bytes`; returns what is left of a partial one.
    fn handle_messages<'b>(
        &mut self,
        bytes: &'b [u8],
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<&'b [u8], ConsumerError> {
        let mut msgs = Messages::new(bytes);
        for m in msgs.by_ref() {
            let (_, b) = m.map_err(protocol)?;
            let msg = Message::parse(b).map_err(protocol)?;
            self.handle_message(msg, now_ns, on_event)?;
        }
        Ok(msgs.remaining())
    }

    fn handle_message(
        &mut self,
        msg: Message<'_>,
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if matches!(self.phase, Phase::LoggingIn { .. }) {
            let Message::LoginResponse(r) = msg else {
                return Err(ConsumerError::Protocol {
                    error: format!("LOGIN answered with {:?}", msg.message_type()),
                });
            };
            if r.result == LoginResult::UnsupportedVersion && self.version > MIN_VERSION {
                // A distributor of an older version: log in again at once with the oldest.
                self.version = MIN_VERSION;
                self.retry_now = true;
                return Err(ConsumerError::Protocol {
                    error: format!(
                        "the distributor does not speak version {VERSION} ({}): logging in \
                         again with version {MIN_VERSION}, without liveness",
                        r.text
                    ),
                });
            }
            if r.result != LoginResult::Accepted {
                self.phase = Phase::Refused;
                return Err(ConsumerError::LoginRefused {
                    result: r.result,
                    text: r.text.to_string(),
                });
            }
            self.phase = Phase::LoggedIn;
            self.liveness = r.ping_interval_ms.map(|ms| {
                let interval_ns = u64::from(ms) * 1_000_000;
                Liveness {
                    interval_ns,
                    next_ping_ns: now_ns.saturating_add(interval_ns),
                    last_heard_ns: now_ns,
                    outstanding: None,
                }
            });
            self.backoff_ns = self.config.first_backoff_ns;
            self.counters.connections += 1;
            if self.version >= 2 && self.config.download_dictionary {
                self.request_dictionary();
            }
            let ids: Vec<u32> = self.requests.keys().copied().collect();
            for id in ids {
                self.emit_open(id);
            }
            on_event(Event::LoggedIn {
                address: self.address,
            });
            return Ok(());
        }
        match msg {
            Message::Ping(p) => {
                Message::Pong(p).emit_to_vec(&mut self.out);
                return Ok(());
            }
            Message::Pong(p) => {
                self.counters.pongs_received += 1;
                if let Some(l) = &mut self.liveness {
                    if l.outstanding == Some(p.payload) {
                        l.outstanding = None;
                        self.rtt_ns = Some(now_ns.saturating_sub(p.payload));
                    }
                }
                return Ok(());
            }
            _ => {}
        }
        self.counters.messages += 1;
        match msg {
            Message::Refresh(r) => {
                self.counters.refreshes += 1;
                let snapshot = r.flags & refresh_flags::SNAPSHOT != 0;
                let solicited = r.flags & refresh_flags::SOLICITED != 0;
                let conflated = r.flags & refresh_flags::CONFLATED != 0;
                let mut refresh = |request: u32, fields: FieldList<'_>| {
                    on_event(Event::Refresh {
                        request,
                        item: r.name,
                        item_seq: r.item_seq,
                        timestamp_ns: r.timestamp_ns,
                        solicited,
                        conflated,
                        snapshot,
                        fields,
                    })
                };
                // A snapshot's image is not a watched item's: it is not made `ok` (nor
                // reported stale when the connection breaks).
                if snapshot {
                    let request =
                        streams::snapshot_of(&self.requests, r.service, r.name).unwrap_or(0);
                    refresh(request, r.fields);
                } else {
                    let v = self.items.entry(r.item_id).or_insert_with(|| ItemView {
                        name: r.name.into(),
                        service: r.service.into(),
                        seq: None,
                        viewed: false,
                        streams: Streams::default(),
                    });
                    v.seq = Some(r.item_seq);
                    v.viewed = r.flags & refresh_flags::VIEW != 0;
                    let list = v
                        .streams
                        .get(&self.requests, self.generation, r.service, r.name);
                    streams::deliver(list, r.fields, false, refresh);
                }
            }
            Message::Update(u) => {
                self.counters.updates += 1;
                let Some(v) = self.items.get_mut(&u.item_id) else {
                    self.counters.updates_without_image += 1;
                    return Ok(());
                };
                match v.seq {
                    Some(s) if u.item_seq != s.wrapping_add(1) && !v.viewed => {
                        self.counters.gaps += 1;
                        on_event(Event::Gap {
                            item: &v.name,
                            expected: s.wrapping_add(1),
                            got: u.item_seq,
                        });
                    }
                    Some(_) => {}
                    None => self.counters.updates_without_image += 1,
                }
                v.seq = Some(u.item_seq);
                let list = v
                    .streams
                    .get(&self.requests, self.generation, &v.service, &v.name);
                streams::deliver(list, u.fields, true, |request, fields| {
                    on_event(Event::Update {
                        request,
                        item: &v.name,
                        item_seq: u.item_seq,
                        timestamp_ns: u.timestamp_ns,
                        fields,
                    })
                });
            }
            Message::Directory(d) => {
                if d.complete {
                    self.directory.clear();
                }
                for e in d.services.iter() {
                    self.directory.insert(e.name.to_string(), (e.up, e.open));
                    on_event(Event::Service {
                        service: e.name,
                        up: e.up,
                        may_open: e.open,
                    });
                }
            }
            // A group status: every item of the service (that this consumer has) is in it. (A
            // request's answer for its pattern `*` carries the request's id: not one.)
            Message::Status(s)
                if s.item_id == 0
                    && s.request_id == 0
                    && s.name == "*"
                    && !s.service.is_empty() =>
            {
                self.counters.statuses += 1;
                let mut names: Vec<&str> = Vec::new();
                for v in self.items.values_mut() {
                    if *v.service == *s.service && v.seq.is_some() {
                        if s.state != ItemState::Ok {
                            v.seq = None;
                        }
                        names.push(&v.name);
                    }
                }
                names.sort_unstable();
                for item in names {
                    on_event(Event::Status {
                        item,
                        state: s.state,
                        text: s.text,
                        request: 0,
                    });
                }
            }
            Message::Status(s) => {
                self.counters.statuses += 1;
                // The end of a snapshot (or its refusal): it is over.
                if s.item_id == 0
                    && s.name.is_empty()
                    && matches!(s.state, ItemState::Closed | ItemState::Rejected)
                    && self.requests.get(&s.request_id).is_some_and(|r| r.snapshot)
                {
                    self.requests.remove(&s.request_id);
                    self.generation += 1;
                }
                let known = self.items.get_mut(&s.item_id);
                let name: &str = match known {
                    Some(v) => {
                        if s.state != ItemState::Ok {
                            v.seq = None;
                        }
                        if s.name.is_empty() {
                            &v.name
                        } else {
                            s.name
                        }
                    }
                    None => s.name,
                };
                on_event(Event::Status {
                    item: name,
                    state: s.state,
                    text: s.text,
                    request: s.request_id,
                });
            }
            Message::Dictionary(d) => self.on_dictionary(&d, on_event)?,
            Message::Ack(a) => self.on_ack(&a, on_event),
            Message::Conflated(c) => {
                self.counters.conflated += 1;
                on_event(Event::Conflated {
                    items: c.items,
                    updates_dropped: c.updates_dropped,
                });
            }
            other => {
                return Err(ConsumerError::Protocol {
                    error: format!("a {:?} sent to a consumer", other.message_type()),
                })
            }
        }
        Ok(())
    }
}

fn protocol(e: MdError) -> ConsumerError {
    ConsumerError::Protocol {
        error: e.to_string(),
    }
}

mod dictionary;
mod post;
mod streams;
use streams::Streams;

#[cfg(test)]
mod tests;
