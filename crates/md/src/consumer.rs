//! The consumer's session core (RTSDK's consumer), sans-I/O: login, requests and their
//! re-opening after a reconnection, each item's `item_seq` tally, and the reconnection
//! schedule. The driver (`peregrine_market_data::Consumer`) owns the TCP connection and the
//! clock.
//!
//! The driver calls, in this order for one connection:
//!
//! 1. [`ConsumerCore::connected`] when a connection is up: a LOGIN is queued;
//! 2. [`ConsumerCore::handle_bytes`] with every byte read: messages are decoded in place and
//!    handed to the caller's handler as [`Event`]s borrowing the read buffer (no copy); the
//!    login's answer queues an OPEN for every open request;
//! 3. [`ConsumerCore::transmit`] / [`ConsumerCore::transmitted`]: the bytes to write;
//! 4. [`ConsumerCore::connection_lost`] when it breaks: every item the application had as
//!    `ok` gets a STATUS `stale` event first (never a silent gap), and the next attempt is
//!    scheduled ([`ConsumerCore::poll_timeout`]) with a back-off of 50 ms doubling to 2 s,
//!    moving through the distributors' addresses in turn.
//!
//! A refused login ends the session: the core stops scheduling attempts.

use crate::codec::{
    refresh_flags, CloseRepr, FieldList, LoginRepr, LoginResult, MdError, Message, Messages,
    OpenRepr, PatternList, MAX_MESSAGE_LEN,
};
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
}

impl ConsumerConfig {
    pub fn new(user: &str, token: &[u8], addresses: usize) -> Self {
        ConsumerConfig {
            user: user.to_string(),
            token: token.to_vec(),
            addresses: addresses.max(1),
            first_backoff_ns: 50_000_000,
            max_backoff_ns: 2_000_000_000,
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
        }
    }
}

impl std::error::Error for ConsumerError {}

/// What the application receives. Names and fields borrow the bytes just read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// Logged in (after every (re)connection); every open request was sent again.
    LoggedIn { address: usize },
    /// The item's full image. `solicited`: it answers a request (else the provider sent a new
    /// image); `conflated`: it replaces updates dropped while the consumer was slow.
    Refresh {
        item: &'a str,
        item_seq: u32,
        timestamp_ns: u64,
        solicited: bool,
        conflated: bool,
        fields: FieldList<'a>,
    },
    /// The fields that changed.
    Update {
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
    /// Not connected: the connection broke (items were reported stale just before), or an
    /// attempt to connect failed. A new attempt follows after the back-off.
    Disconnected { reason: &'a str },
}

#[derive(Debug, Clone)]
struct Request {
    service: String,
    patterns: Vec<String>,
}

#[derive(Debug, Clone)]
struct ItemView {
    name: Box<str>,
    /// The item_seq of its last REFRESH or UPDATE; `None` while it is not ok.
    seq: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No connection; the next attempt at this time.
    Waiting {
        attempt_at_ns: u64,
    },
    /// Connected; LOGIN sent, its answer awaited.
    LoggingIn,
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
}

impl ConsumerCounters {
    /// The counters' names (the fields'), in the stable order of [`values`](Self::values).
    pub const NAMES: [&'static str; 9] = [
        "messages",
        "refreshes",
        "updates",
        "statuses",
        "conflated",
        "gaps",
        "updates_without_image",
        "connections",
        "disconnections",
    ];

    /// Each counter's name and value, in the order of [`NAMES`](Self::NAMES).
    pub fn values(&self) -> [(&'static str, u64); 9] {
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
    next_request: u32,
    /// By the distributor's item id (FxHash: looked up per message).
    items: FxHashMap<u32, ItemView>,
    /// Bytes read that do not yet make a whole message.
    partial: Vec<u8>,
    out: Vec<u8>,
    counters: ConsumerCounters,
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
            next_request: 1,
            items: FxHashMap::default(),
            partial: Vec::new(),
            out: Vec::new(),
            counters: ConsumerCounters::default(),
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

    /// When the driver should try to connect (`None`: connected, or refused).
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { attempt_at_ns } => Some(attempt_at_ns),
            _ => None,
        }
    }

    /// Opens `patterns` (names and globs) of `service`; returns the request's id. Sent now
    /// when logged in, else at login.
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        check_service(service.as_bytes()).map_err(|why| ConsumerError::BadService {
            service: service.to_string(),
            why,
        })?;
        if patterns.is_empty() {
            return Err(ConsumerError::BadRequest {
                why: "a request names at least one item or glob".into(),
            });
        }
        let mut len = 16 + service.len();
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
        self.requests.insert(
            id,
            Request {
                service: service.to_string(),
                patterns: patterns.iter().map(|p| p.to_string()).collect(),
            },
        );
        if self.phase == Phase::LoggedIn {
            self.emit_open(id);
        }
        Ok(id)
    }

    /// Closes a request: what it alone opened stops.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        if self.requests.remove(&request).is_none() {
            return Err(ConsumerError::UnknownRequest { request });
        }
        if self.phase == Phase::LoggedIn {
            Message::Close(CloseRepr {
                request_id: request,
            })
            .emit_to_vec(&mut self.out);
        }
        Ok(())
    }

    fn emit_open(&mut self, id: u32) {
        let r = &self.requests[&id];
        let patterns: Vec<&str> = r.patterns.iter().map(String::as_str).collect();
        Message::Open(OpenRepr {
            request_id: id,
            service: &r.service,
            patterns: PatternList::List(&patterns),
        })
        .emit_to_vec(&mut self.out);
    }

    /// A connection to [`address`](Self::address) is up: LOGIN is queued.
    pub fn connected(&mut self) {
        self.partial.clear();
        self.out.clear();
        self.items.clear();
        Message::Login(LoginRepr {
            user: &self.config.user,
            token: &self.config.token,
        })
        .emit_to_vec(&mut self.out);
        self.phase = Phase::LoggingIn;
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
        if self.phase == Phase::Refused {
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
        let text = format!("connection to the distributor lost ({reason}): reconnecting");
        for n in &names {
            on_event(Event::Status {
                item: n,
                state: ItemState::Stale,
                text: &text,
                request: 0,
            });
        }
        self.counters.disconnections += 1;
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
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if self.partial.is_empty() {
            let rest = self.handle_messages(bytes, on_event)?;
            self.partial.extend_from_slice(rest);
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        let r = self.handle_messages(&buf, on_event).map(|rest| rest.len());
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
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<&'b [u8], ConsumerError> {
        let mut msgs = Messages::new(bytes);
        for m in msgs.by_ref() {
            let (_, b) = m.map_err(protocol)?;
            let msg = Message::parse(b).map_err(protocol)?;
            self.handle_message(msg, on_event)?;
        }
        Ok(msgs.remaining())
    }

    fn handle_message(
        &mut self,
        msg: Message<'_>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if self.phase == Phase::LoggingIn {
            let Message::LoginResponse(r) = msg else {
                return Err(ConsumerError::Protocol {
                    error: format!("LOGIN answered with {:?}", msg.message_type()),
                });
            };
            if r.result != LoginResult::Accepted {
                self.phase = Phase::Refused;
                return Err(ConsumerError::LoginRefused {
                    result: r.result,
                    text: r.text.to_string(),
                });
            }
            self.phase = Phase::LoggedIn;
            self.backoff_ns = self.config.first_backoff_ns;
            self.counters.connections += 1;
            let ids: Vec<u32> = self.requests.keys().copied().collect();
            for id in ids {
                self.emit_open(id);
            }
            on_event(Event::LoggedIn {
                address: self.address,
            });
            return Ok(());
        }
        self.counters.messages += 1;
        match msg {
            Message::Refresh(r) => {
                self.counters.refreshes += 1;
                let v = self.items.entry(r.item_id).or_insert_with(|| ItemView {
                    name: r.name.into(),
                    seq: None,
                });
                v.seq = Some(r.item_seq);
                on_event(Event::Refresh {
                    item: r.name,
                    item_seq: r.item_seq,
                    timestamp_ns: r.timestamp_ns,
                    solicited: r.flags & refresh_flags::SOLICITED != 0,
                    conflated: r.flags & refresh_flags::CONFLATED != 0,
                    fields: r.fields,
                });
            }
            Message::Update(u) => {
                self.counters.updates += 1;
                let Some(v) = self.items.get_mut(&u.item_id) else {
                    self.counters.updates_without_image += 1;
                    return Ok(());
                };
                match v.seq {
                    Some(s) if u.item_seq != s.wrapping_add(1) => {
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
                on_event(Event::Update {
                    item: &v.name,
                    item_seq: u.item_seq,
                    timestamp_ns: u.timestamp_ns,
                    fields: u.fields,
                });
            }
            Message::Status(s) => {
                self.counters.statuses += 1;
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

#[cfg(test)]
mod tests;
