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

pub use config::{ConsumerConfig, ConsumerError};
pub use event::{ConsumerCounters, Event, CONNECTION_LOST};

use crate::codec::{LoginRepr, Message, PingRepr, VERSION};
use crate::dictionary::Dictionary;
use crate::model::{check_user, ItemState};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

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
}

mod config;
mod dictionary;
mod event;
mod post;
mod receive;
mod requests;
mod streams;
use streams::Streams;

#[cfg(test)]
mod tests;
