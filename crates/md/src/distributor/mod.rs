//! The distributor's sans-I/O core: the cache, the users, every client's login, requests,
//! watchlist and queue, and the decisions of the fan-out. No socket, no clock: the driver
//! (`peregrine distributor`) reads sockets and the clock and calls the inputs below, then
//! drains the outputs.
//!
//! | file | what |
//! | --- | --- |
//! | [`cache`] | items by (service, name) with stable ids, their images and states |
//! | [`entitle`] | the users file, the login check, item globs |
//! | [`feeds`] | each service's feeds (A/B): their routes to items, and the arbitration |
//! | `client.rs` | one client: login, requests, watchlist, queue and conflation state |
//! | `outbox.rs` | the bytes for clients, each written once with its recipients |
//! | `post.rs` | posts: checked, forwarded to the provider, answered with one ACK |
//! | [`counters`] | the counters, with stable names |
//! | `errors.rs` | why something was refused, events |
//! | [`throttle`] | failed-login delays per address and per user |
//! | `tests.rs` | the protocol tests, on a virtual clock |
//!
//! # Using it
//!
//! Inputs (`now_ns` is the driver's monotonic clock):
//!
//! - [`client_connected`](Distributor::client_connected) /
//!   [`client_closed`](Distributor::client_closed): a TCP connection came or went;
//!   [`client_identified`](Distributor::client_identified): its TLS handshake showed a client
//!   certificate (before any of its bytes).
//! - [`handle_client_bytes`](Distributor::handle_client_bytes): bytes read from a client, in
//!   any chunks (partial messages are kept).
//! - [`client_drained`](Distributor::client_drained): how many bytes the client's queue holds
//!   now (after a write); drives conflation recovery.
//! - [`handle_backbone_message`](Distributor::handle_backbone_message): one message from the
//!   service's backbone topic.
//! - [`handle_backbone_loss`](Distributor::handle_backbone_loss),
//!   [`feed_gone`](Distributor::feed_gone), [`feed_back`](Distributor::feed_back): the
//!   transport's loss and session events for the backbone.
//! - With two or more feeds of a service (A/B feeds, [`feeds`]), the same inputs named by
//!   feed: [`handle_feed_message`](Distributor::handle_feed_message),
//!   [`feed_lost`](Distributor::feed_lost), [`feed_left`](Distributor::feed_left),
//!   [`feed_joined`](Distributor::feed_joined).
//! - [`handle_timeout`](Distributor::handle_timeout) at
//!   [`poll_timeout`](Distributor::poll_timeout): login deadlines, posts whose provider did
//!   not answer in time, and for clients logged in with version 2 their PINGs and the silence
//!   that closes them.
//!
//! After each input, drain the outputs in this order:
//!
//! 1. [`poll_transmit`](Distributor::poll_transmit) until `None`: append each transmit's
//!    bytes to the queue of each client it lists (the distributor already counted them in
//!    the client's queue). The same bytes go to every watcher of an update.
//! 2. [`poll_image_request`](Distributor::poll_image_request) and
//!    [`poll_post_forward`](Distributor::poll_post_forward): publish on the service's request
//!    topic.
//! 3. [`poll_disconnect`](Distributor::poll_disconnect): close the connection, after writing
//!    its queue if [`Disconnect::flush`] says so (a refusal must reach the client; a slow
//!    client's backlog need not).
//! 4. [`poll_event`](Distributor::poll_event): for logs.
//!
//! A client id the distributor already disconnected is ignored by every input.

pub mod cache;
mod client;
pub mod counters;
pub mod entitle;
mod errors;
pub mod feeds;
mod outbox;
mod post;
#[cfg(test)]
mod tests;
pub mod throttle;
pub mod view;

pub use cache::{Cache, Item, ItemId};
pub use client::{ClientId, ClientLink, ClientStats};
pub use counters::Counters;
pub use entitle::{glob_match, LoginCheck, SlowPolicy, User, Users};
pub use errors::{
    BackboneError, ClientError, ConfigError, Event, RequestRejection, StaleCause, TooManyClients,
};
pub use outbox::Transmit;
pub use post::PostForward;

use crate::codec::conflated::CONFLATED_LEN;
use crate::codec::header::{Header, MAX_MESSAGE_LEN};
use crate::codec::image_request::IMAGE_REQUEST_LEN;
use crate::codec::ping::{PingKind, PingRepr, PING_LEN};
use crate::codec::refresh::refresh_flags;
use crate::codec::status::STATUS_HEADER_LEN;
use crate::codec::{
    open_flags, ConflatedRepr, ConflatedView, DirectoryRepr, EntryList, FieldList,
    ImageRequestRepr, LoginResponseRepr, LoginResponseView, LoginResult, MdError, Message,
    MessageType, Messages, OpenRepr, RefreshView, ServiceEntry, StatusRepr, StatusView, UpdateRepr,
    UpdateView,
};
use crate::dictionary::Dictionary;
use crate::model::{check_service, is_glob, ItemState};
use cache::{encode_status, truncate, RefreshRefused, UpdateOutcome};
use client::{Client, Conflation, Liveness, Login, Request};
use feeds::{FeedKey, Feeds, RefreshVerdict, UpdateVerdict};
use outbox::Outbox;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use throttle::{address_group, LoginThrottle};

/// A service the distributor carries: an index into [`DistributorConfig::services`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub(crate) u16);

impl ServiceId {
    pub fn index(self) -> usize {
        self.0.into()
    }
}

/// The smallest `max_queue_bytes`: a conflated client that drained below half of it can
/// always be sent a CONFLATED and the largest image.
pub const MIN_QUEUE_BYTES: usize = 2 * (MAX_MESSAGE_LEN + CONFLATED_LEN);

/// Events kept for the driver; past this, new ones are counted and dropped.
const MAX_EVENTS: usize = 4096;

/// Feed ids without an item whose image was asked for, per service; past this, the
/// distributor asks for every image instead.
const MAX_UNKNOWN_REQUESTS: usize = 4096;

/// How a distributor's driver writes to its clients (the core is the same for both). One
/// definition for the distributor, its command's `--mode` and `peregrine bench fanout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Writes to each client coalesced under a flush interval (or 64 KiB): the report's
    /// `timedWrites`.
    #[default]
    Throughput,
    /// Updates written as soon as they arrive, those that arrived together in one write.
    Latency,
}

impl WriteMode {
    pub const fn name(self) -> &'static str {
        match self {
            WriteMode::Throughput => "throughput",
            WriteMode::Latency => "latency",
        }
    }

    /// By name, or what is accepted.
    pub fn from_name(s: &str) -> Result<WriteMode, String> {
        match s {
            "throughput" => Ok(WriteMode::Throughput),
            "latency" => Ok(WriteMode::Latency),
            _ => Err(
                "throughput (writes coalesced under flush_interval_ms) or latency (each \
                      update written at once, TCP_NODELAY)"
                    .into(),
            ),
        }
    }
}

/// The distributor's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributorConfig {
    /// The services carried (each has its backbone topic `md.<service>`).
    pub services: Vec<String>,
    /// Items the cache holds at most; REFRESHes of new items past it are refused and counted.
    pub max_items: usize,
    /// Logged-in clients at most.
    pub max_clients: usize,
    /// Connections not logged in yet, at most, kept apart from the logged-in ones: past it the
    /// oldest is closed, so connections that never log in cannot keep honest ones out.
    pub max_pending_clients: usize,
    /// Connections (pending and logged in) from one address (IPv6: one /64) at most.
    pub max_clients_per_address: usize,
    /// Logged-in connections of one user at most.
    pub max_clients_per_user: usize,
    /// Accept LOGINs over plaintext from addresses other than loopback (their tokens cross the
    /// network in the clear): off unless the operator says so for a trusted network.
    pub allow_plaintext_logins: bool,
    /// Bound of each client's output queue, in bytes.
    pub max_queue_bytes: usize,
    /// What happens to a client past its bound (a user's `slow` overrides it).
    pub slow: SlowPolicy,
    /// Open requests per client.
    pub max_requests_per_client: usize,
    /// Names and globs held open per client.
    pub max_patterns_per_client: usize,
    /// Globs held open per client (each costs a pass over its service's items when opened,
    /// and a match against every new item): 256.
    pub max_globs_per_client: usize,
    /// Items watched per client.
    pub max_watch_per_client: usize,
    /// A connection that has not logged in after this long is refused.
    pub login_timeout_ns: u64,
    /// An image asked for is not asked for again before this long.
    pub image_retry_ns: u64,
    /// The oldest protocol version a LOGIN may use (2): version 1 clients have no liveness, so
    /// an idle one would hold its slot for ever; 1 accepts them.
    pub min_client_version: u16,
    /// The ping interval of a client that logs in with version 2 and asks for none (5 s).
    pub ping_interval_ns: u64,
    /// The shortest and longest intervals a client may ask for (1 s and 60 s): an interval
    /// asked for outside them is taken as the nearest. A client silent for three intervals is
    /// closed, so the longest bounds how long a dead one holds its slot.
    pub min_ping_interval_ns: u64,
    pub max_ping_interval_ns: u64,
    /// The field dictionary served to clients (DICTIONARY) and that posts' field types are
    /// checked against: the built-in one unless configured.
    pub dictionary: Arc<Dictionary>,
    /// How long a post forwarded to a provider may wait for its ACK before the client is
    /// told `timeout` (5 s).
    pub post_timeout_ns: u64,
    /// Posts of one connection waiting for their answer, at most (past it: `busy`).
    pub max_posts_per_client: usize,
    /// This distributor's id on the backbone: the `origin` of the posts it forwards, so that
    /// it takes only the ACKs of its own posts. Not 0; distributors of one backbone must not
    /// share one (the driver draws it at random).
    pub origin: u64,
    /// A/B feeds: how long an item waits for another feed to deliver the update one feed
    /// skipped ahead of (100 ms), before it goes stale and its image is asked for.
    pub feed_gap_window_ns: u64,
    /// A/B feeds: a feed's loss is covered by another live feed that had no loss within this
    /// long (5 s); otherwise the service goes stale and every image is asked for.
    pub feed_loss_overlap_ns: u64,
}

/// The shortest ping interval a distributor may be configured to allow.
pub const MIN_PING_INTERVAL_NS: u64 = 10_000_000;

impl DistributorConfig {
    /// Defaults for `services`: 1 M items, 1024 logged-in clients (256 more waiting to log in,
    /// 256 per address, 128 per user), 4 MiB queues that conflate, 10 s to log in, image
    /// requests repeated after 1 s, no plaintext logins but from loopback.
    pub fn new(services: &[&str]) -> Self {
        DistributorConfig {
            services: services.iter().map(|s| s.to_string()).collect(),
            max_items: 1_000_000,
            max_clients: 1024,
            max_pending_clients: 256,
            max_clients_per_address: 256,
            max_clients_per_user: 128,
            allow_plaintext_logins: false,
            max_queue_bytes: 4 << 20,
            slow: SlowPolicy::Conflate,
            max_requests_per_client: 1024,
            max_patterns_per_client: 10_000,
            max_globs_per_client: 256,
            max_watch_per_client: 100_000,
            login_timeout_ns: 10_000_000_000,
            image_retry_ns: 1_000_000_000,
            min_client_version: 2,
            ping_interval_ns: 5_000_000_000,
            min_ping_interval_ns: 1_000_000_000,
            max_ping_interval_ns: 60_000_000_000,
            dictionary: Arc::new(Dictionary::builtin()),
            post_timeout_ns: 5_000_000_000,
            max_posts_per_client: 256,
            origin: 1,
            feed_gap_window_ns: 100_000_000,
            feed_loss_overlap_ns: 5_000_000_000,
        }
    }

    /// The interval taken for a client asking for `asked_ms` (0: the default), in ms.
    pub fn ping_interval_for(&self, asked_ms: u32) -> u32 {
        let asked = if asked_ms == 0 {
            self.ping_interval_ns
        } else {
            u64::from(asked_ms) * 1_000_000
        };
        let ns = asked.clamp(self.min_ping_interval_ns, self.max_ping_interval_ns);
        u32::try_from(ns / 1_000_000).unwrap_or(u32::MAX).max(1)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.services.is_empty() {
            return Err(ConfigError::NoService);
        }
        if self.services.len() > usize::from(u16::MAX) {
            return Err(ConfigError::Zero("services (at most 65535)"));
        }
        for (i, s) in self.services.iter().enumerate() {
            check_service(s.as_bytes()).map_err(|e| ConfigError::BadService {
                name: s.clone(),
                problem: e.to_string(),
            })?;
            if self.services[..i].contains(s) {
                return Err(ConfigError::DuplicateService(s.clone()));
            }
        }
        if self.max_queue_bytes < MIN_QUEUE_BYTES {
            return Err(ConfigError::QueueTooSmall {
                max_queue_bytes: self.max_queue_bytes,
                min: MIN_QUEUE_BYTES,
            });
        }
        for (name, v) in [
            ("max_items", self.max_items),
            ("max_clients", self.max_clients),
            ("max_pending_clients", self.max_pending_clients),
            ("max_clients_per_address", self.max_clients_per_address),
            ("max_clients_per_user", self.max_clients_per_user),
            ("max_requests_per_client", self.max_requests_per_client),
            ("max_patterns_per_client", self.max_patterns_per_client),
            ("max_globs_per_client", self.max_globs_per_client),
            ("max_watch_per_client", self.max_watch_per_client),
            ("max_posts_per_client", self.max_posts_per_client),
            ("origin", usize::from(self.origin != 0)),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        for (key, ns, max_ms) in [
            ("feed_gap_window_ms", self.feed_gap_window_ns, 60_000),
            ("feed_loss_overlap_ms", self.feed_loss_overlap_ns, 3_600_000),
        ] {
            if !(1_000_000..=max_ms * 1_000_000).contains(&ns) {
                return Err(ConfigError::FeedWindow {
                    key,
                    ms: ns / 1_000_000,
                    max_ms,
                });
            }
        }
        if !(1_000_000..=3_600_000_000_000).contains(&self.post_timeout_ns) {
            return Err(ConfigError::PostTimeout {
                ms: self.post_timeout_ns / 1_000_000,
            });
        }
        let dictionary_bytes: usize = self.dictionary.encode().iter().map(Vec::len).sum();
        if dictionary_bytes > self.max_queue_bytes / 2 {
            return Err(ConfigError::DictionaryTooLarge {
                bytes: dictionary_bytes,
                max_queue_bytes: self.max_queue_bytes,
            });
        }
        if !(crate::codec::MIN_VERSION..=crate::codec::VERSION).contains(&self.min_client_version) {
            return Err(ConfigError::MinClientVersion(self.min_client_version));
        }
        let (min, default, max) = (
            self.min_ping_interval_ns,
            self.ping_interval_ns,
            self.max_ping_interval_ns,
        );
        if min < MIN_PING_INTERVAL_NS
            || !(min..=max).contains(&default)
            || max > u64::from(u32::MAX) * 1_000_000
        {
            return Err(ConfigError::PingIntervals {
                min_ms: min / 1_000_000,
                default_ms: default / 1_000_000,
                max_ms: max / 1_000_000,
            });
        }
        Ok(())
    }
}

/// An image request for the feed of `service`, to publish on `md.<service>.req`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRequest {
    pub service: ServiceId,
    /// The feed's id of the item; 0 asks for every item.
    pub feed_item_id: u32,
    pub request_id: u32,
}

impl ImageRequest {
    /// The IMAGE_REQUEST message.
    pub fn to_bytes(&self) -> [u8; IMAGE_REQUEST_LEN] {
        ImageRequestRepr {
            item_id: self.feed_item_id,
            request_id: self.request_id,
        }
        .to_bytes()
    }
}

/// Why a client is disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// Refused at login (the LOGIN_RESPONSE saying why is queued).
    LoginDenied(ClientError),
    /// Broke the protocol after login (the STATUS `rejected` saying why is queued).
    Protocol(ClientError),
    /// Its queue passed the bound and its policy is `disconnect`, or an answer that cannot be
    /// conflated did not fit.
    Slow,
    /// Nothing was read from it for three ping intervals (a stopped process, a half-open
    /// connection): closed without a word, since it would not read one.
    Silent,
}

/// A connection to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect {
    pub client: ClientId,
    pub reason: DisconnectReason,
}

impl Disconnect {
    /// True if the queued bytes should be written before closing (an answer saying why).
    pub fn flush(&self) -> bool {
        !matches!(
            self.reason,
            DisconnectReason::Slow | DisconnectReason::Silent
        )
    }
}

/// The clients' PING round trips ([`Distributor::round_trips`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoundTrips {
    /// Clients with a round trip timed.
    pub clients: usize,
    pub mean_ns: u64,
    pub max_ns: u64,
}

/// What the distributor holds, for bounds checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footprint {
    pub clients: usize,
    pub items: usize,
    /// Bytes of every image in the cache.
    pub image_bytes: usize,
    /// Watch entries over all clients.
    pub watched: usize,
    /// Patterns held open over all clients.
    pub patterns: usize,
    /// Bytes of partial messages kept from clients.
    pub input_bytes: usize,
    /// Changed items remembered for conflating clients.
    pub conflated_items: usize,
    /// Bytes (and recipients) waiting in `poll_transmit`.
    pub outbox_bytes: usize,
    pub image_requests: usize,
    pub events: usize,
    /// Posts forwarded and waiting for their ACK.
    pub posts_in_flight: usize,
}

#[derive(Debug)]
struct Service {
    /// A feed of it is live (as the DIRECTORY says).
    up: bool,
    /// When every image was last asked for.
    all_requested_at_ns: Option<u64>,
    /// Feed ids naming no item whose image was asked for, and when.
    unknown_requested: HashMap<u32, u64>,
}

/// Client slots: a [`ClientId`] is a slot and that slot's generation.
#[derive(Debug, Default)]
struct Clients {
    slots: Vec<Option<Client>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    len: usize,
    /// Connections holding a pending slot, oldest first (ids of gone ones are skipped).
    pending: VecDeque<ClientId>,
    pending_len: usize,
    /// Logged-in connections (holding a `max_clients` slot).
    logged_in: usize,
    /// Connections per [`address_group`].
    per_address: HashMap<IpAddr, u32>,
    /// Logged-in connections per user (index in the users file).
    per_user: HashMap<usize, u32>,
}

impl Clients {
    fn get(&self, id: ClientId) -> Option<&Client> {
        let slot = (id.0 & 0xffff_ffff) as usize;
        let c = self.slots.get(slot)?.as_ref()?;
        (c.id == id).then_some(c)
    }
    fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        let slot = (id.0 & 0xffff_ffff) as usize;
        let c = self.slots.get_mut(slot)?.as_mut()?;
        (c.id == id).then_some(c)
    }
    fn insert(&mut self, now_ns: u64, slow: SlowPolicy, link: ClientLink) -> ClientId {
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        let id = ClientId((u64::from(self.generations[slot]) << 32) | slot as u64);
        self.slots[slot] = Some(Client::new(id, now_ns, slow, link));
        self.len += 1;
        // Ids at the front that logged in or went are dropped first, so the queue holds at
        // most the connections of one login timeout, not every connection ever made.
        let _ = self.oldest_pending();
        self.pending.push_back(id);
        self.pending_len += 1;
        *self
            .per_address
            .entry(address_group(link.peer))
            .or_default() += 1;
        id
    }
    fn remove(&mut self, id: ClientId) -> Option<Client> {
        self.get(id)?;
        let slot = (id.0 & 0xffff_ffff) as usize;
        self.free.push(slot as u32);
        self.len -= 1;
        let c = self.slots[slot].take()?;
        if c.pending {
            self.pending_len -= 1;
        }
        if let Some(u) = c.counted_user {
            self.logged_in -= 1;
            if let Some(n) = self.per_user.get_mut(&u) {
                *n -= 1;
                if *n == 0 {
                    self.per_user.remove(&u);
                }
            }
        }
        let group = address_group(c.link.peer);
        if let Some(n) = self.per_address.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&group);
            }
        }
        Some(c)
    }
    /// The client moves from a pending slot to a logged-in one as `user`.
    fn logged_in(&mut self, id: ClientId, user: usize) {
        let Some(c) = self.get_mut(id) else { return };
        let was_pending = std::mem::replace(&mut c.pending, false);
        c.counted_user = Some(user);
        if was_pending {
            self.pending_len -= 1;
        }
        self.logged_in += 1;
        *self.per_user.entry(user).or_default() += 1;
    }
    /// The oldest connection still waiting to log in.
    fn oldest_pending(&mut self) -> Option<ClientId> {
        while let Some(&id) = self.pending.front() {
            if self.get(id).is_some_and(|c| c.pending && !c.closing()) {
                return Some(id);
            }
            self.pending.pop_front();
        }
        None
    }
    fn iter(&self) -> impl Iterator<Item = &Client> {
        self.slots.iter().flatten()
    }
}

/// Whether a message for one item may go into a client's queue.
enum Admit {
    Queue,
    /// Not queued: the client conflates (the item is remembered), or is closing.
    Skip,
    /// Not queued: the client passed its bound and its policy is `disconnect`.
    Close,
}

/// The distributor's core. See the [module documentation](self) for the order of calls.
#[derive(Debug)]
pub struct Distributor {
    config: DistributorConfig,
    users: Arc<Users>,
    cache: Cache,
    /// Each service's feeds and their routes to the cache's items.
    feeds: Feeds,
    services: Vec<Service>,
    /// Per item (id - 1): the clients watching it, each once.
    watchers: Vec<Vec<ClientId>>,
    clients: Clients,
    outbox: Outbox,
    image_requests: VecDeque<ImageRequest>,
    disconnects: VecDeque<Disconnect>,
    /// Clients being disconnected: their state is freed when the current input returns.
    to_reap: Vec<ClientId>,
    events: VecDeque<Event>,
    counters: Counters,
    next_request_id: u32,
    throttle: LoginThrottle,
    verifications: VecDeque<Verification>,
    /// While a whole service goes stale: version 2 watchers are listed in `grouped` instead
    /// of being sent each item's STATUS.
    grouping: bool,
    grouped: Vec<ClientId>,
    /// The dictionary's DICTIONARY messages, encoded once.
    dictionary_parts: Vec<Vec<u8>>,
    posts: post::Posts,
}

/// A token to check against a slow hash, off the event loop: [`entitle::verify_token`]`(hash,
/// token)`, answered with [`Distributor::verification_done`].
pub struct Verification {
    pub client: ClientId,
    pub hash: Arc<str>,
    pub token: Vec<u8>,
}

/// Never prints the token.
impl std::fmt::Debug for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verification")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Distributor {
    pub fn new(config: DistributorConfig, users: Arc<Users>) -> Result<Distributor, ConfigError> {
        config.validate()?;
        Ok(Distributor {
            cache: Cache::new(&config.services, config.max_items),
            feeds: Feeds::new(config.services.len(), config.max_items),
            services: config
                .services
                .iter()
                .map(|_| Service {
                    up: false,
                    all_requested_at_ns: None,
                    unknown_requested: HashMap::new(),
                })
                .collect(),
            users,
            watchers: Vec::new(),
            clients: Clients::default(),
            outbox: Outbox::default(),
            image_requests: VecDeque::new(),
            disconnects: VecDeque::new(),
            to_reap: Vec::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            next_request_id: 0,
            throttle: LoginThrottle::default(),
            verifications: VecDeque::new(),
            grouping: false,
            grouped: Vec::new(),
            dictionary_parts: config.dictionary.encode(),
            posts: post::Posts::default(),
            config,
        })
    }

    // ---- getters ----------------------------------------------------------------------------

    /// The users file in force.
    pub fn users(&self) -> &Users {
        &self.users
    }

    pub fn config(&self) -> &DistributorConfig {
        &self.config
    }

    /// The id of a service the distributor carries.
    pub fn service_id(&self, name: &str) -> Option<ServiceId> {
        let i = self.config.services.iter().position(|s| s == name)?;
        Some(ServiceId(i as u16))
    }

    pub fn service_name(&self, service: ServiceId) -> &str {
        self.cache.service_name(service)
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn client_stats(&self, client: ClientId) -> Option<ClientStats> {
        let c = self.clients.get(client)?;
        Some(ClientStats {
            user: c
                .user()
                .and_then(|u| self.users.get(u))
                .map(|u| u.name.clone()),
            queued_bytes: c.queued_bytes,
            conflating: c.conflation.is_some(),
            watched: c.watched.len(),
            requests: c.requests.len(),
            updates_sent: c.updates_sent,
            updates_dropped: c.updates_dropped,
            conflations: c.conflations,
            ping_interval_ms: c.liveness.as_ref().map(|l| l.interval_ns / 1_000_000),
            rtt_ns: c.liveness.as_ref().and_then(|l| l.rtt_ns),
        })
    }

    /// What the distributor holds now.
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            clients: self.clients.len,
            items: self.cache.len(),
            image_bytes: self.cache.image_bytes(),
            outbox_bytes: self.outbox.len_bytes(),
            image_requests: self.image_requests.len()
                + self
                    .services
                    .iter()
                    .map(|s| s.unknown_requested.len())
                    .sum::<usize>(),
            events: self.events.len(),
            posts_in_flight: self.posts.in_flight(),
            ..Footprint::default()
        };
        for c in self.clients.iter() {
            f.watched += c.watched.len();
            f.patterns += c.patterns;
            f.input_bytes += c.inbuf.len();
            f.conflated_items += c.conflation.as_ref().map_or(0, |k| k.changed.len());
        }
        f
    }

    // ---- client inputs ----------------------------------------------------------------------

    /// A client connected over `link`: it must send LOGIN within the login timeout. Refused
    /// when its address has `max_clients_per_address` connections; when
    /// `max_pending_clients` connections are waiting to log in, the oldest of them is
    /// disconnected ([`poll_disconnect`](Self::poll_disconnect)) to make room.
    pub fn client_connected(
        &mut self,
        now_ns: u64,
        link: ClientLink,
    ) -> Result<ClientId, TooManyClients> {
        let from_address = self
            .clients
            .per_address
            .get(&address_group(link.peer))
            .copied()
            .unwrap_or(0);
        if from_address as usize >= self.config.max_clients_per_address {
            self.counters.clients_refused += 1;
            return Err(TooManyClients {
                max: self.config.max_clients_per_address,
                peer: link.peer,
            });
        }
        while self.clients.pending_len >= self.config.max_pending_clients {
            let Some(oldest) = self.clients.oldest_pending() else {
                break;
            };
            self.counters.pending_evicted += 1;
            self.refuse_client(
                oldest,
                ClientError::Evicted {
                    max: self.config.max_pending_clients,
                },
            );
            // Its slot is given back now, not when the driver closes it.
            self.reap();
        }
        self.counters.clients_connected += 1;
        Ok(self.clients.insert(now_ns, self.config.slow, link))
    }

    /// Replaces the users file (a reload) without dropping anyone: each logged-in client is
    /// checked against its user's new entitlements. A user no longer in the file is logged out
    /// (STATUS `rejected`, then closed); an item the user may no longer see, or every item of
    /// a service it may no longer open, is answered STATUS `not-entitled` on each request that
    /// held it and is sent no more (an exact name it may no longer see is dropped from its
    /// request, a glob stays and matches only what the user may see). The user's `slow` policy
    /// is taken from the new file. Returns how many clients lost something (or were logged
    /// out); each gets an [`Event::Revoked`] or an [`Event::ProtocolError`].
    pub fn replace_users(&mut self, users: Arc<Users>) -> usize {
        let old = std::mem::replace(&mut self.users, users);
        // Every client holding a logged-in slot: the logged in, and any closing (its slot is
        // kept until it goes, under its user's new index).
        let counted: Vec<(ClientId, usize, bool)> = self
            .clients
            .iter()
            .filter_map(|c| c.counted_user.map(|u| (c.id, u, c.closing())))
            .collect();
        // A login being checked names its user by the old file's index: the new file's, by
        // name (none if the user was removed: the check then fails).
        let verifying: Vec<(ClientId, usize)> = self
            .clients
            .iter()
            .filter_map(|c| match c.login {
                Login::Verifying {
                    user: Some(old_index),
                    ..
                } => Some((c.id, old_index)),
                _ => None,
            })
            .collect();
        for (id, old_index) in verifying {
            let new = old
                .get(old_index)
                .and_then(|u| self.users.index_of(&u.name));
            if let Some(c) = self.clients.get_mut(id) {
                if let Login::Verifying { user, .. } = &mut c.login {
                    *user = new;
                }
            }
        }
        let mut touched = 0;
        let mut per_user: HashMap<usize, u32> = HashMap::new();
        for (id, old_index, closing) in counted {
            if closing {
                let new = old
                    .get(old_index)
                    .and_then(|u| self.users.index_of(&u.name));
                if let Some(c) = self.clients.get_mut(id) {
                    c.counted_user = new;
                }
                match new {
                    Some(index) => *per_user.entry(index).or_default() += 1,
                    None => self.clients.logged_in -= 1,
                }
                continue;
            }
            let Some(name) = old.get(old_index).map(|u| u.name.clone()) else {
                continue;
            };
            let Some(index) = self.users.index_of(&name) else {
                touched += 1;
                // Logged out: its logged-in slot goes now (its user's count is rebuilt below).
                if let Some(c) = self.clients.get_mut(id) {
                    c.counted_user = None;
                    self.clients.logged_in -= 1;
                }
                self.refuse_client(id, ClientError::UserRemoved);
                continue;
            };
            *per_user.entry(index).or_default() += 1;
            let users = Arc::clone(&self.users);
            let user = users.get(index).expect("index_of gave it");
            let slow = user.slow.unwrap_or(self.config.slow);
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            c.login = Login::LoggedIn { user: index };
            c.counted_user = Some(index);
            c.slow = slow;
            // What the client may no longer have: whole requests (their service), and items.
            let mut dropped_requests = Vec::new();
            let mut revoked: Vec<(u32, ItemId)> = Vec::new();
            for (&rid, r) in c.requests.iter_mut() {
                let service = self.cache.service_name(r.service);
                if !user.may_open_service(service) {
                    dropped_requests.push(rid);
                    revoked.extend(r.items.iter().map(|&i| (rid, i)));
                    continue;
                }
                let cache = &self.cache;
                r.items.retain(|&item| {
                    let keep = cache.get(item).is_some_and(|i| user.may_see_item(&i.name));
                    if !keep {
                        revoked.push((rid, item));
                    }
                    keep
                });
                r.exact.retain(|e| user.may_see_item(e));
            }
            if revoked.is_empty() && dropped_requests.is_empty() {
                continue;
            }
            touched += 1;
            let views: Vec<Option<view::View>> = revoked
                .iter()
                .map(|(rid, _)| c.requests.get(rid).and_then(|r| r.view.clone()))
                .collect();
            for (&(rid, item), view) in revoked.iter().zip(&views) {
                self.release(id, rid, item, view.as_ref(), false);
            }
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            for &rid in &dropped_requests {
                if let Some(r) = c.requests.remove(&rid) {
                    c.patterns -= r.pattern_count();
                }
                c.paused.remove(&rid);
            }
            let text = format!("user {name}'s entitlements changed: no longer entitled");
            for &(rid, item) in &revoked {
                self.counters.not_entitled += 1;
                let from = self.outbox.buffer().len();
                self.cache.encode_status(
                    item,
                    rid,
                    ItemState::NotEntitled,
                    &text,
                    self.outbox.buffer(),
                );
                self.queue_control(id, from);
            }
            self.push_event(Event::Revoked {
                client: id,
                user: name,
                items: revoked.len(),
                requests: dropped_requests.len(),
            });
        }
        self.clients.per_user = per_user;
        self.reap();
        touched
    }

    /// The client's TLS handshake showed a certificate with this subject (as
    /// `CN=alice,O=Desk`): users of the users file with `cert_subject` log in by it. Call it
    /// before handing any of the client's bytes.
    pub fn client_identified(&mut self, client: ClientId, subject: &str) {
        if let Some(c) = self.clients.get_mut(client) {
            c.cert_subject = Some(entitle::normalize_subject(subject).into());
        }
    }

    /// The client's connection is gone (closed by the peer, or by the driver after a
    /// [`Disconnect`]): forget it.
    pub fn client_closed(&mut self, client: ClientId) {
        self.remove_client(client);
    }

    /// Bytes read from a client, in any chunks.
    pub fn handle_client_bytes(&mut self, client: ClientId, bytes: &[u8], now_ns: u64) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        if c.closing() {
            return;
        }
        if let Some(l) = &mut c.liveness {
            if !bytes.is_empty() {
                l.last_heard_ns = l.last_heard_ns.max(now_ns);
            }
        }
        if c.verifying() {
            // Read once its login is answered; a client that sends more than a message's
            // worth meanwhile is refused.
            if c.inbuf.len() + bytes.len() > MAX_MESSAGE_LEN {
                return self.refuse_client(
                    client,
                    ClientError::InputBeforeLogin {
                        max: MAX_MESSAGE_LEN,
                    },
                );
            }
            c.inbuf.extend_from_slice(bytes);
            return;
        }
        let mut buf = core::mem::take(&mut c.inbuf);
        let input: &[u8] = if buf.is_empty() {
            bytes
        } else {
            buf.extend_from_slice(bytes);
            &buf
        };
        let mut messages = Messages::new(input);
        for m in messages.by_ref() {
            match m {
                Ok((ty, msg)) => self.on_client_message(client, ty, msg, now_ns),
                Err(e) => self.refuse_client(client, ClientError::Malformed(e)),
            }
            if self
                .clients
                .get(client)
                .is_none_or(|c| c.closing() || c.verifying())
            {
                break;
            }
        }
        let rest = messages.remaining().to_vec();
        buf.clear();
        if let Some(c) = self.clients.get_mut(client) {
            if !c.closing() {
                buf.extend_from_slice(&rest);
                c.inbuf = buf;
            }
        }
        self.reap();
    }

    /// The client's queue now holds `queued_bytes` (the driver's count after writing to the
    /// socket). A conflating client that drained below half its bound is sent CONFLATED and
    /// the images of what changed.
    pub fn client_drained(&mut self, client: ClientId, queued_bytes: usize) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        c.queued_bytes = queued_bytes;
        if c.conflation.is_some() && queued_bytes < self.config.max_queue_bytes / 2 {
            self.recover(client);
        }
        self.reap();
    }

    /// Refuses clients that have not logged in within the login timeout; pings the clients
    /// logged in with version 2 whose interval passed, and closes those silent for three;
    /// makes stale the items that waited `feed_gap_window_ns` for an update no feed sent.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.keep_alive(now_ns);
        self.expire_posts(now_ns);
        self.expire_gaps(now_ns, false);
        let timeout = self.config.login_timeout_ns;
        let late: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|c| {
                matches!(c.login, Login::Awaiting { since_ns } | Login::Verifying { since_ns, .. } if now_ns.saturating_sub(since_ns) >= timeout)
            })
            .map(|c| c.id)
            .collect();
        for id in late {
            self.refuse_client(
                id,
                ClientError::LoginTimeout {
                    timeout_ms: timeout / 1_000_000,
                },
            );
        }
        self.reap();
    }

    /// When [`handle_timeout`](Self::handle_timeout) has something to do: the earliest login
    /// deadline, PING or silence deadline. It looks at every client: a driver asks it a few
    /// times a second, not on every turn of its loop.
    pub fn poll_timeout(&self) -> Option<u64> {
        let clients = self
            .clients
            .iter()
            .filter_map(|c| match (c.login, &c.liveness) {
                (Login::Awaiting { since_ns } | Login::Verifying { since_ns, .. }, _) => {
                    Some(since_ns.saturating_add(self.config.login_timeout_ns))
                }
                (Login::LoggedIn { .. }, Some(l)) => Some(l.next_deadline()),
                _ => None,
            })
            .min();
        [
            clients,
            self.posts.next_deadline(),
            self.feeds.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Pings and silence: see [`handle_timeout`](Self::handle_timeout).
    fn keep_alive(&mut self, now_ns: u64) {
        let mut silent = Vec::new();
        let mut ping = Vec::new();
        for c in self.clients.iter() {
            let (Some(l), Login::LoggedIn { .. }) = (&c.liveness, c.login) else {
                continue;
            };
            if l.silent_for(now_ns) >= 3 * l.interval_ns {
                silent.push((c.id, l.silent_for(now_ns)));
            } else if now_ns >= l.next_ping_ns {
                ping.push(c.id);
            }
        }
        for (id, silent_ns) in silent {
            self.counters.clients_silent += 1;
            let (user, peer) = match self.clients.get(id) {
                Some(c) => (c.login_name.as_deref().map(str::to_string), c.link.peer),
                None => continue,
            };
            self.push_event(Event::Silent {
                client: id,
                user,
                peer,
                silent_ms: silent_ns / 1_000_000,
            });
            self.close_client(id, DisconnectReason::Silent);
        }
        for id in ping {
            let Some(l) = self.clients.get_mut(id).and_then(|c| c.liveness.as_mut()) else {
                continue;
            };
            l.next_ping_ns = now_ns.saturating_add(l.interval_ns);
            // The payload is the send time, so the PONG times the round trip; a PING still
            // unanswered is replaced (its round trip is not timed).
            l.outstanding = Some(now_ns);
            if self.queue_liveness(id, PingKind::Ping, now_ns) {
                self.counters.pings_sent += 1;
            }
        }
    }

    /// A PING from a client: answered with a PONG at once.
    fn on_ping(&mut self, id: ClientId, payload: u64) {
        self.queue_liveness(id, PingKind::Pong, payload);
    }

    /// A PONG from a client: the round trip of the PING it answers, if it answers the last.
    fn on_pong(&mut self, id: ClientId, payload: u64, now_ns: u64) {
        self.counters.pongs_received += 1;
        let Some(l) = self.clients.get_mut(id).and_then(|c| c.liveness.as_mut()) else {
            return;
        };
        if l.outstanding == Some(payload) {
            l.outstanding = None;
            l.rtt_ns = Some(now_ns.saturating_sub(payload));
        }
    }

    /// Queues a PING or PONG to a client, unless its queue is past its bound: a client that
    /// is behind is not closed for a PING (it is alive: it reads; its own PINGs keep it).
    fn queue_liveness(&mut self, id: ClientId, kind: PingKind, payload: u64) -> bool {
        let max = self.config.max_queue_bytes;
        match self.clients.get(id) {
            Some(c) if !c.closing() && c.queued_bytes + PING_LEN <= max => {}
            _ => return false,
        }
        let from = self.outbox.buffer().len();
        self.outbox
            .buffer()
            .extend_from_slice(&PingRepr { payload }.to_bytes(kind));
        self.queue_control(id, from);
        true
    }

    /// The round trips of the clients with liveness whose last PING was answered.
    pub fn round_trips(&self) -> RoundTrips {
        let mut r = RoundTrips::default();
        let mut sum: u128 = 0;
        for rtt in self
            .clients
            .iter()
            .filter_map(|c| c.liveness.as_ref()?.rtt_ns)
        {
            r.clients += 1;
            sum += u128::from(rtt);
            r.max_ns = r.max_ns.max(rtt);
        }
        if r.clients > 0 {
            r.mean_ns = (sum / r.clients as u128) as u64;
        }
        r
    }

    // ---- backbone inputs --------------------------------------------------------------------

    /// One message from the backbone of `service` (one Peregrine message: exactly one market
    /// data message), from its only feed: [`handle_feed_message`](Self::handle_feed_message)
    /// with feed 0.
    pub fn handle_backbone_message(&mut self, service: ServiceId, bytes: &[u8], now_ns: u64) {
        self.handle_feed_message(service, 0, bytes, now_ns);
    }

    /// One message from the backbone of `service`, sent by `feed` (the driver's name for it:
    /// its transport session). A feed heard for the first time is live from now.
    pub fn handle_feed_message(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        bytes: &[u8],
        now_ns: u64,
    ) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.backbone_messages += 1;
        let ty = match Header::new_checked(bytes).and_then(|h| {
            if usize::from(h.length()) != bytes.len() {
                return Err(MdError::BadLength {
                    length: h.length(),
                    reason: "a backbone message must be exactly one message",
                });
            }
            h.message_type()
        }) {
            Ok(ty) => ty,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        // A feed's message proves it live, though the transport may report its session after
        // the first messages: the directory says `up` before any of its data is passed on.
        if matches!(
            ty,
            MessageType::Update | MessageType::Refresh | MessageType::Status
        ) {
            self.feeds.join(service, feed);
            if !self.services[service.index()].up {
                self.set_up(service, true);
            }
        }
        match ty {
            MessageType::Update => self.on_update(service, feed, bytes, now_ns),
            MessageType::Refresh => self.on_refresh(service, feed, bytes),
            MessageType::Status => self.on_feed_status(service, feed, bytes),
            MessageType::Ack => match Message::parse(bytes) {
                Ok(Message::Ack(ack)) => self.on_backbone_ack(service, &ack),
                Ok(_) => unreachable!("the header said ACK"),
                Err(e) => self.backbone_rejected(service, BackboneError::Malformed(e)),
            },
            other => self.backbone_rejected(service, BackboneError::NotFromFeeds(other)),
        }
        self.reap();
    }

    /// The backbone of `service` lost messages the transport could not repair: every item
    /// goes stale to its watchers and every image is asked for. ([`feed_lost`](Self::feed_lost)
    /// with feed 0.)
    pub fn handle_backbone_loss(&mut self, service: ServiceId, now_ns: u64) {
        self.feed_lost(service, 0, now_ns);
    }

    /// `feed` of `service` lost messages the transport could not repair. Covered (nothing
    /// goes stale) when another feed is live and had no loss within `feed_loss_overlap_ns`;
    /// otherwise every item goes stale to its watchers and every image is asked for.
    pub fn feed_lost(&mut self, service: ServiceId, feed: FeedKey, now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.backbone_losses += 1;
        if self
            .feeds
            .lost(service, feed, now_ns, self.config.feed_loss_overlap_ns)
        {
            self.counters.feed_losses_covered += 1;
            return;
        }
        self.service_stale(service, StaleCause::BackboneLoss);
        self.request_image(service, feed, None, now_ns, true);
        self.reap();
    }

    /// Every feed of `service` went away (its session ended or died): every item goes stale
    /// to its watchers, and the feeds' item ids are forgotten.
    pub fn feed_gone(&mut self, service: ServiceId, _now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.feeds_gone += 1;
        self.feeds.leave_all(service);
        self.set_up(service, false);
        self.service_stale(service, StaleCause::FeedGone);
        self.services[service.index()].unknown_requested.clear();
        self.reap();
    }

    /// `feed` of `service` went away (its session ended or died). The last one: as
    /// [`feed_gone`](Self::feed_gone). Otherwise the items no other feed has an ok route to go
    /// stale (and their images are asked for), and when every remaining feed had a loss
    /// within `feed_loss_overlap_ns`, the whole service does: what the gone feed carried of
    /// their losses is gone with it.
    pub fn feed_left(&mut self, service: ServiceId, feed: FeedKey, now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        let Some(items) = self.feeds.leave(service, feed) else {
            return;
        };
        if self.feeds.count(service) == 0 {
            return self.feed_gone(service, now_ns);
        }
        self.counters.feeds_gone += 1;
        // Gaps that waited for the gone feed: judged now.
        self.expire_gaps(now_ns, true);
        if self
            .feeds
            .all_lossy(service, now_ns, self.config.feed_loss_overlap_ns)
        {
            self.service_stale(service, StaleCause::BackboneLoss);
            self.request_image(service, feed, None, now_ns, true);
            return self.reap();
        }
        let orphans: Vec<ItemId> = items
            .into_iter()
            .filter(|&item| {
                !self.feeds.other_ok(service, feed, item)
                    && self
                        .cache
                        .get(item)
                        .is_some_and(|i| i.state == ItemState::Ok)
            })
            .collect();
        for &item in &orphans {
            self.went_stale(item, "its feed went away: waiting for another");
        }
        if !orphans.is_empty() {
            self.request_image(service, feed, None, now_ns, false);
        }
        self.reap();
    }

    /// A feed of `service` appeared (at start, or after [`feed_gone`](Self::feed_gone)):
    /// [`feed_joined`](Self::feed_joined) with feed 0.
    pub fn feed_back(&mut self, service: ServiceId, from_start: bool, now_ns: u64) {
        self.feed_joined(service, 0, from_start, now_ns);
    }

    /// `feed` of `service` appeared.
    ///
    /// `from_start`: the backbone delivers the feed's session from its first message (the
    /// transport's `Connected { first_sequence: 0 }`), so every image the feed has published
    /// reaches the cache in order, and any loss after it is reported by
    /// [`feed_lost`](Self::feed_lost): nothing is asked for, and a feed that sends its images
    /// at start-up sends each once. Otherwise (the session was joined in its middle) every
    /// image is asked for. Either way an UPDATE of an item without an image asks for that
    /// item's.
    pub fn feed_joined(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        from_start: bool,
        now_ns: u64,
    ) {
        if service.index() >= self.services.len() {
            return;
        }
        self.feeds.join(service, feed);
        self.set_up(service, true);
        if from_start {
            self.counters.feeds_joined_at_start += 1;
            return;
        }
        self.request_image(service, feed, None, now_ns, true);
    }

    /// The feeds of `service` live now (the driver's keys).
    pub fn feeds_of(&self, service: ServiceId) -> impl Iterator<Item = FeedKey> + '_ {
        self.feeds.keys(service)
    }

    // ---- outputs ----------------------------------------------------------------------------

    /// The next bytes to append to client queues.
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        self.outbox.poll()
    }

    /// The next image request to publish on the service's request topic.
    pub fn poll_image_request(&mut self) -> Option<ImageRequest> {
        self.image_requests.pop_front()
    }

    /// The next connection to close.
    pub fn poll_disconnect(&mut self) -> Option<Disconnect> {
        self.disconnects.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ---- clients ----------------------------------------------------------------------------

    fn on_client_message(&mut self, id: ClientId, ty: MessageType, bytes: &[u8], now_ns: u64) {
        self.counters.client_messages += 1;
        let Some(c) = self.clients.get(id) else {
            return;
        };
        let logged_in = c.user().is_some();
        let msg = match Message::parse(bytes) {
            Ok(m) => m,
            Err(MdError::UnsupportedVersion(v)) if !logged_in && ty == MessageType::Login => {
                return self.refuse_client(id, ClientError::UnsupportedVersion(v));
            }
            Err(e) => return self.refuse_client(id, ClientError::Malformed(e)),
        };
        match (logged_in, msg) {
            (false, Message::Login(login)) => {
                if login.version < self.config.min_client_version {
                    return self.refuse_client(
                        id,
                        ClientError::VersionRefused {
                            version: login.version,
                            min: self.config.min_client_version,
                        },
                    );
                }
                if let Some(c) = self.clients.get_mut(id) {
                    c.asked_ping_ms = login.ping_interval_ms;
                    c.version = login.version;
                }
                self.on_login(id, login.user, login.token, now_ns)
            }
            (false, other) => self.refuse_client(id, ClientError::LoginFirst(other.message_type())),
            (true, Message::Login(_)) => self.refuse_client(id, ClientError::AlreadyLoggedIn),
            (true, Message::Open(open)) => self.on_open(id, &open, now_ns),
            (true, Message::Close(close)) => self.on_close(id, close.request_id),
            (true, Message::Ping(ping)) => self.on_ping(id, ping.payload),
            (true, Message::Pause(p)) => self.on_pause(id, p.request_id),
            (true, Message::Resume(p)) => self.on_resume(id, p.request_id),
            (true, Message::Pong(pong)) => self.on_pong(id, pong.payload, now_ns),
            (true, Message::DictionaryRequest(_)) => self.on_dictionary_request(id),
            (true, Message::Post(post)) => self.on_post(id, &post, now_ns),
            (true, other) => {
                self.refuse_client(id, ClientError::NotFromClients(other.message_type()))
            }
        }
    }

    fn on_login(&mut self, id: ClientId, user_name: &str, token: &[u8], now_ns: u64) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.login_name = Some(user_name.into());
        let c = &*c;
        let link = c.link;
        if !link.tls && !link.peer.is_loopback() && !self.config.allow_plaintext_logins {
            return self.refuse_client(id, ClientError::PlaintextLogin);
        }
        if let Some(wait) = self.throttle.wait_ns(link.peer, user_name, now_ns) {
            self.counters.logins_throttled += 1;
            return self.refuse_client(
                id,
                ClientError::Throttled {
                    retry_ms: wait.div_ceil(1_000_000),
                },
            );
        }
        let subject = c.cert_subject.as_deref();
        let user = match self.users.login(user_name, token, subject) {
            LoginCheck::Accepted(user) => user,
            LoginCheck::Denied => return self.login_failed(id, now_ns),
            LoginCheck::Verify { user, hash } => {
                // A slow hash: checked off the driver's loop; what the client sends meanwhile
                // waits (`handle_client_bytes`).
                if let Some(c) = self.clients.get_mut(id) {
                    c.login = Login::Verifying {
                        since_ns: now_ns,
                        user,
                    };
                }
                self.verifications.push_back(Verification {
                    client: id,
                    hash,
                    token: token.to_vec(),
                });
                return;
            }
        };
        self.login_succeeded(id, user, now_ns);
    }

    /// The result of a [`Verification`] the driver ran: the client logs in, or is refused as
    /// a wrong token is; then what it sent after its LOGIN is read.
    pub fn verification_done(&mut self, client: ClientId, matched: bool, now_ns: u64) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        let Login::Verifying { since_ns, user } = c.login else {
            return;
        };
        // Back to waiting for the answer: a refusal below closes it, a login moves it on.
        c.login = Login::Awaiting { since_ns };
        match (matched, user) {
            (true, Some(user)) => self.login_succeeded(client, user, now_ns),
            _ => self.login_failed(client, now_ns),
        }
        self.reap();
        if self.clients.get(client).is_some_and(|c| !c.closing()) {
            self.handle_client_bytes(client, &[], now_ns);
        }
    }

    /// Slow token checks to run off the event loop ([`entitle::verify_token`]), each answered
    /// with [`verification_done`](Self::verification_done).
    pub fn poll_verification(&mut self) -> Option<Verification> {
        self.verifications.pop_front()
    }

    fn login_failed(&mut self, id: ClientId, now_ns: u64) {
        if let Some(c) = self.clients.get(id) {
            let peer = c.link.peer;
            let name = c.login_name.as_deref().unwrap_or("").to_string();
            self.throttle.failed(peer, &name, now_ns);
        }
        self.refuse_client(id, ClientError::BadCredentials);
    }

    fn login_succeeded(&mut self, id: ClientId, user: usize, now_ns: u64) {
        let user_name = match self.clients.get(id) {
            Some(c) => c.login_name.as_deref().unwrap_or("").to_string(),
            None => return,
        };
        self.throttle.succeeded(&user_name);
        if self.clients.logged_in >= self.config.max_clients {
            self.counters.clients_refused += 1;
            return self.refuse_client(
                id,
                ClientError::Full {
                    max: self.config.max_clients,
                },
            );
        }
        if self.clients.per_user.get(&user).copied().unwrap_or(0) as usize
            >= self.config.max_clients_per_user
        {
            self.counters.clients_refused += 1;
            return self.refuse_client(
                id,
                ClientError::UserLimit {
                    max: self.config.max_clients_per_user,
                },
            );
        }
        let slow = self
            .users
            .get(user)
            .and_then(|u| u.slow)
            .unwrap_or(self.config.slow);
        self.clients.logged_in(id, user);
        let mut ping_interval_ms = None;
        if let Some(c) = self.clients.get_mut(id) {
            c.login = Login::LoggedIn { user };
            c.slow = slow;
            if c.version >= 2 {
                let ms = self.config.ping_interval_for(c.asked_ping_ms);
                c.liveness = Some(Liveness::new(u64::from(ms) * 1_000_000, now_ns));
                ping_interval_ms = Some(ms);
            }
        }
        self.counters.logins_accepted += 1;
        self.send_login_response_with(id, LoginResult::Accepted, ping_interval_ms, "");
        if ping_interval_ms.is_some() {
            self.send_directory(id, None);
        }
        self.push_event(Event::LoggedIn {
            client: id,
            user: user_name,
        });
    }

    /// Answers a client that broke the protocol and closes it: a LOGIN_RESPONSE before login
    /// (the client waits for one), a STATUS `rejected` after.
    fn refuse_client(&mut self, id: ClientId, error: ClientError) {
        let Some(c) = self.clients.get(id) else {
            return;
        };
        if c.closing() {
            return;
        }
        let login_name = c.login_name.as_deref().map(str::to_string);
        let peer = c.link.peer;
        let text = error.to_string();
        if matches!(error, ClientError::Malformed(_)) {
            self.counters.malformed_messages += 1;
        }
        let reason = if c.user().is_some() {
            self.counters.protocol_errors += 1;
            let from = self.outbox.buffer().len();
            encode_status(
                &StatusRepr {
                    item_id: 0,
                    request_id: 0,
                    state: ItemState::Rejected,
                    service: "",
                    name: "",
                    text: truncate(&text, 255),
                },
                self.outbox.buffer(),
            );
            self.queue_control(id, from);
            self.push_event(Event::ProtocolError {
                client: id,
                user: login_name,
                peer,
                error,
            });
            DisconnectReason::Protocol(error)
        } else {
            self.counters.logins_denied += 1;
            let result = match error {
                ClientError::UnsupportedVersion(_) | ClientError::VersionRefused { .. } => {
                    LoginResult::UnsupportedVersion
                }
                _ => LoginResult::Denied,
            };
            self.send_login_response(id, result, &text);
            self.push_event(Event::LoginDenied {
                client: id,
                user: login_name,
                peer,
                error,
            });
            DisconnectReason::LoginDenied(error)
        };
        self.close_client(id, reason);
    }

    fn send_login_response(&mut self, id: ClientId, result: LoginResult, text: &str) {
        self.send_login_response_with(id, result, None, text)
    }

    fn send_login_response_with(
        &mut self,
        id: ClientId,
        result: LoginResult,
        ping_interval_ms: Option<u32>,
        text: &str,
    ) {
        let repr = LoginResponseRepr {
            result,
            ping_interval_ms,
            text: truncate(text, 255),
        };
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.resize(from + repr.buffer_len(), 0);
        repr.emit(&mut LoginResponseView::new_unchecked(&mut buf[from..]));
        self.queue_control(id, from);
    }

    /// Answers one name of a request (or the request, with `name` empty) with a STATUS.
    fn send_request_status(
        &mut self,
        id: ClientId,
        request_id: u32,
        service: &str,
        name: &str,
        state: ItemState,
        text: &str,
    ) {
        let from = self.outbox.buffer().len();
        encode_status(
            &StatusRepr {
                item_id: 0,
                request_id,
                state,
                service,
                name,
                text: truncate(text, 255),
            },
            self.outbox.buffer(),
        );
        self.queue_control(id, from);
    }

    fn reject_request(&mut self, id: ClientId, request_id: u32, name: &str, why: RequestRejection) {
        self.counters.requests_rejected += 1;
        self.send_request_status(
            id,
            request_id,
            "",
            name,
            ItemState::Rejected,
            &why.to_string(),
        );
    }

    /// Queues the bytes from `from` to the end of the outbox to one client: an answer that is
    /// not conflated, so a client past its bound is disconnected instead.
    fn queue_control(&mut self, id: ClientId, from: usize) {
        let len = self.outbox.buffer().len() - from;
        let max = self.config.max_queue_bytes;
        let Some(c) = self.clients.get_mut(id) else {
            self.outbox.buffer().truncate(from);
            return;
        };
        if c.closing() || c.queued_bytes.saturating_add(len) > max {
            let slow = !c.closing();
            self.outbox.buffer().truncate(from);
            if slow {
                self.counters.slow_disconnects += 1;
                self.push_event(Event::SlowDisconnect { client: id });
                self.close_client(id, DisconnectReason::Slow);
            }
            return;
        }
        c.queued_bytes += len;
        self.counters.bytes_queued += len as u64;
        self.outbox.send_to(from, id);
    }

    /// Queues the bytes from `from` to the end of the outbox, a message about `item`, to one
    /// client: conflated (remembered, not queued) when the client is behind.
    fn queue_item(&mut self, id: ClientId, item: ItemId, from: usize) {
        let len = self.outbox.buffer().len() - from;
        let admit = match self.clients.get_mut(id) {
            Some(c) => admit(
                c,
                len,
                item,
                false,
                self.config.max_queue_bytes,
                &mut self.counters,
                &mut self.events,
            ),
            None => Admit::Skip,
        };
        match admit {
            Admit::Queue => self.outbox.send_to(from, id),
            Admit::Skip => self.outbox.buffer().truncate(from),
            Admit::Close => {
                self.outbox.buffer().truncate(from);
                self.close_client(id, DisconnectReason::Slow);
            }
        }
    }

    fn on_open(&mut self, id: ClientId, open: &OpenRepr<'_>, _now_ns: u64) {
        let Some(c) = self.clients.get(id) else {
            return;
        };
        let Some(user) = c.user() else { return };
        let rid = open.request_id;
        let count = open.patterns.count();
        // A snapshot is answered and closed at once: it holds no request slot.
        let snapshot = open.flags & open_flags::SNAPSHOT != 0;
        if c.requests.contains_key(&rid) {
            return self.reject_request(id, rid, "", RequestRejection::IdInUse(rid));
        }
        if !snapshot && c.requests.len() >= self.config.max_requests_per_client {
            let max = self.config.max_requests_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyRequests { max });
        }
        if c.patterns + count > self.config.max_patterns_per_client {
            let max = self.config.max_patterns_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyPatterns { max });
        }
        // Globs are bounded before any is matched: their cost is paid per item.
        let globs_open: usize = c.requests.values().map(|r| r.globs.len()).sum();
        let globs_asked = open.patterns.iter().filter(|p| is_glob(p)).count();
        if globs_open + globs_asked > self.config.max_globs_per_client {
            let max = self.config.max_globs_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyGlobs { max });
        }
        let users = Arc::clone(&self.users);
        let Some(user) = users.get(user) else { return };
        let Some(service) = self.service_id(open.service) else {
            for p in open.patterns.iter() {
                self.counters.not_found += 1;
                let text = format!(
                    "service {} is not carried by this distributor",
                    open.service
                );
                self.send_request_status(id, rid, open.service, p, ItemState::NotFound, &text);
            }
            if snapshot {
                self.snapshot_done(id, rid, open.service);
            }
            return;
        };
        if !user.may_open_service(open.service) {
            for p in open.patterns.iter() {
                self.counters.not_entitled += 1;
                let text = format!("user {} may not open service {}", user.name, open.service);
                self.send_request_status(id, rid, open.service, p, ItemState::NotEntitled, &text);
            }
            if snapshot {
                self.snapshot_done(id, rid, open.service);
            }
            return;
        }
        let mut request = Request {
            service,
            globs: Vec::new(),
            exact: Vec::new(),
            items: Vec::new(),
            view: open.view.map(|v| view::view_of(v.iter())),
        };
        let mut to_watch = Vec::new();
        for p in open.patterns.iter() {
            if is_glob(p) {
                // The same glob twice in one request is one glob.
                if !request.globs.iter().any(|g| **g == *p) {
                    request.globs.push(p.into());
                }
            } else if !user.may_see_item(p) {
                self.counters.not_entitled += 1;
                let text = format!("user {} may not see {p}", user.name);
                self.send_request_status(id, rid, open.service, p, ItemState::NotEntitled, &text);
            } else {
                request.exact.push(p.into());
                match self.cache.by_name(service, p) {
                    Some(item) => to_watch.push(item),
                    None => {
                        self.counters.not_found += 1;
                        let text = if snapshot {
                            "not in the cache"
                        } else {
                            "not in the cache yet: kept open, its REFRESH follows if the feed \
                             publishes it"
                        };
                        self.send_request_status(
                            id,
                            rid,
                            open.service,
                            p,
                            ItemState::NotFound,
                            text,
                        );
                    }
                }
            }
        }
        // One pass over the service's items for all the request's globs: each item is listed
        // once, whatever the number of globs matching it (memory bounded by the items, never
        // globs x items).
        if !request.globs.is_empty() {
            to_watch.extend(
                self.cache
                    .items_of(service)
                    .filter(|(name, _)| {
                        request
                            .globs
                            .iter()
                            .any(|g| glob_match(g.as_bytes(), name.as_bytes()))
                            && user.may_see_item(name)
                    })
                    .map(|(_, item)| item),
            );
        }
        to_watch.sort_unstable();
        to_watch.dedup();
        if snapshot {
            for item in to_watch {
                self.send_snapshot_image(id, item, rid, request.view.as_deref());
                if self.clients.get(id).is_none_or(Client::closing) {
                    return;
                }
            }
            return self.snapshot_done(id, rid, open.service);
        }
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.patterns += request.pattern_count();
        c.requests.insert(rid, request);
        self.counters.requests_opened += 1;
        for item in to_watch {
            if self.watch(id, rid, item) {
                self.send_image(id, item, rid, refresh_flags::SOLICITED);
            }
            if self.clients.get(id).is_none_or(Client::closing) {
                return;
            }
        }
    }

    fn on_close(&mut self, id: ClientId, rid: u32) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let Some(request) = c.requests.remove(&rid) else {
            return self.reject_request(id, rid, "", RequestRejection::NoSuchRequest(rid));
        };
        c.patterns -= request.pattern_count();
        for &item in &request.items {
            self.release(id, rid, item, request.view.as_ref(), true);
        }
        if let Some(c) = self.clients.get_mut(id) {
            c.paused.remove(&rid);
        }
        self.counters.requests_closed += 1;
    }

    /// The requests a PAUSE (`pause`) or RESUME of `rid` changes: `rid` (0: every request)
    /// unless it is in that state already. `None` when the client is gone, or `rid` is not
    /// open (answered with STATUS `rejected`).
    fn pause_targets(&mut self, id: ClientId, rid: u32, pause: bool) -> Option<Vec<u32>> {
        let c = self.clients.get(id)?;
        if rid != 0 && !c.requests.contains_key(&rid) {
            self.reject_request(id, rid, "", RequestRejection::NoSuchRequest(rid));
            return None;
        }
        let all: Vec<u32> = if rid == 0 {
            c.requests.keys().copied().collect()
        } else {
            vec![rid]
        };
        Some(
            all.into_iter()
                .filter(|r| c.paused.contains(r) != pause)
                .collect(),
        )
    }

    /// PAUSE: the request (0: every request open now) keeps its items' latest state only.
    fn on_pause(&mut self, id: ClientId, rid: u32) {
        let Some(rids) = self.pause_targets(id, rid, true) else {
            return;
        };
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        for rid in rids {
            c.paused.insert(rid);
            self.counters.requests_paused += 1;
            for &item in &c.requests[&rid].items {
                *c.paused_holds.entry(item).or_default() += 1;
            }
        }
    }

    /// RESUME: the request (0: every paused one) flows again, after one image (REFRESH
    /// flagged CONFLATED, or a STATUS) per item that changed while paused, and per item that
    /// another request of the client kept flowing meanwhile (the consumer gave the paused
    /// request none of its updates).
    fn on_resume(&mut self, id: ClientId, rid: u32) {
        let Some(rids) = self.pause_targets(id, rid, false) else {
            return;
        };
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        // Items another (not paused) request kept flowing, as they were before this RESUME.
        let mut flowed: Vec<ItemId> = rids
            .iter()
            .flat_map(|rid| c.requests[rid].items.iter().copied())
            .filter(|&item| c.paused_holds.contains_key(&item) && !c.is_paused(item))
            .collect();
        flowed.sort_unstable();
        let mut changed = Vec::new();
        for rid in rids {
            c.paused.remove(&rid);
            for &item in &c.requests[&rid].items {
                let Some(n) = c.paused_holds.get_mut(&item) else {
                    continue;
                };
                let flowed = flowed.binary_search(&item).is_ok();
                *n -= 1;
                if *n == 0 {
                    c.paused_holds.remove(&item);
                }
                if !c.is_paused(item) && (c.paused_changed.remove(&item) || flowed) {
                    changed.push(item);
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        for item in changed {
            self.counters.resumed_images += 1;
            self.send_image(id, item, 0, refresh_flags::CONFLATED);
            if self.clients.get(id).is_none_or(Client::closing) {
                return;
            }
        }
    }

    /// Adds `item` to what request `rid` of client `id` opened; false (and a STATUS
    /// `rejected`) if the watchlist is full.
    fn watch(&mut self, id: ClientId, rid: u32, item: ItemId) -> bool {
        let max = self.config.max_watch_per_client;
        let Some(c) = self.clients.get_mut(id) else {
            return false;
        };
        let watching = c.watched.len();
        match c.watched.get_mut(&item) {
            Some(n) => *n += 1,
            None if watching >= max => {
                let name = self.cache.get(item).map_or("", |i| &i.name).to_string();
                self.reject_request(id, rid, &name, RequestRejection::WatchlistFull { max });
                return false;
            }
            None => {
                c.watched.insert(item, 1);
                if let Some(w) = self.watchers.get_mut(item as usize - 1) {
                    w.push(id);
                }
            }
        }
        if let Some(r) = c.requests.get_mut(&rid) {
            r.items.push(item);
        }
        if c.paused.contains(&rid) {
            *c.paused_holds.entry(item).or_default() += 1;
        }
        let holders = c.watched.get(&item).copied().unwrap_or(0);
        let view = c.requests.get(&rid).and_then(|r| r.view.clone());
        c.views.add(item, view.as_ref(), holders);
        true
    }

    /// Request `rid` of client `id` (with `view`) lets `item` go: its pause, its watch, its
    /// view. When what the client is sent of the item narrows to a view, a REFRESH flagged
    /// VIEW says so (its UPDATEs may skip `item_seq` values from now).
    /// `announce`: false when the item is being revoked (nothing more of it may be sent).
    fn release(
        &mut self,
        id: ClientId,
        rid: u32,
        item: ItemId,
        view: Option<&view::View>,
        announce: bool,
    ) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.release_pause(rid, item);
        let before = c.views.effective(item).cloned();
        unwatch(c, item, &mut self.watchers);
        let holders = c.watched.get(&item).copied().unwrap_or(0);
        c.views.remove(item, view, holders);
        let narrowed =
            announce && holders > 0 && before.is_none() && c.views.effective(item).is_some();
        if narrowed {
            self.send_image(id, item, 0, 0);
        }
    }

    /// One image of a snapshot: a REFRESH flagged SOLICITED and SNAPSHOT, or a STATUS with the
    /// item's state. Not conflated (the item is not watched, so a conflation round would not
    /// bring it back): a client without room for it is disconnected as slow.
    fn send_snapshot_image(
        &mut self,
        id: ClientId,
        item: ItemId,
        request_id: u32,
        fields: Option<&[u16]>,
    ) {
        let Some(state) = self.cache.get(item).map(|i| i.state) else {
            return;
        };
        let from = self.outbox.buffer().len();
        if state == ItemState::Ok {
            let flags = refresh_flags::SOLICITED | refresh_flags::SNAPSHOT;
            self.cache.encode_refresh(item, flags, self.outbox.buffer());
            if let Some(v) = fields {
                self.cut_to_view(from, v);
            }
        } else {
            self.cache
                .encode_status(item, request_id, state, "", self.outbox.buffer());
        }
        self.queue_control(id, from);
    }

    /// The end of a snapshot: STATUS `closed` with its request id and no name.
    fn snapshot_done(&mut self, id: ClientId, rid: u32, service: &str) {
        self.counters.snapshots += 1;
        self.send_request_status(id, rid, service, "", ItemState::Closed, "snapshot complete");
    }

    /// Sends one client the current state of `item`: its image (a REFRESH with `flags`) if it
    /// is ok, else a STATUS with its state.
    fn send_image(&mut self, id: ClientId, item: ItemId, request_id: u32, flags: u8) {
        let Some(state) = self.cache.get(item).map(|i| i.state) else {
            return;
        };
        let from = self.outbox.buffer().len();
        if state == ItemState::Ok {
            self.cache.encode_refresh(item, flags, self.outbox.buffer());
            let view = self
                .clients
                .get(id)
                .and_then(|c| c.views.effective(item))
                .cloned();
            if let Some(v) = view {
                self.cut_to_view(from, &v);
            }
        } else {
            self.cache
                .encode_status(item, request_id, state, "", self.outbox.buffer());
        }
        self.queue_item(id, item, from);
    }

    /// Re-encodes the REFRESH from `from` to the end of the outbox with the fields of `view`.
    fn cut_to_view(&mut self, from: usize, view: &[u16]) {
        let message = self.outbox.buffer().split_off(from);
        view::filtered(&message, view, self.outbox.buffer());
    }

    /// Marks a client closing and queues its [`Disconnect`]; its state goes at [`reap`].
    fn close_client(&mut self, id: ClientId, reason: DisconnectReason) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        if c.closing() {
            return;
        }
        c.login = Login::Closing;
        self.disconnects
            .push_back(Disconnect { client: id, reason });
        self.to_reap.push(id);
    }

    /// Frees the state of the clients closed during the current input.
    fn reap(&mut self) {
        for id in core::mem::take(&mut self.to_reap) {
            self.remove_client(id);
        }
    }

    fn remove_client(&mut self, id: ClientId) {
        let Some(c) = self.clients.remove(id) else {
            return;
        };
        for &item in c.watched.keys() {
            if let Some(w) = self.watchers.get_mut(item as usize - 1) {
                if let Some(at) = w.iter().position(|&x| x == id) {
                    w.swap_remove(at);
                }
            }
        }
    }

    /// Sends a conflated client CONFLATED and the images of as many changed items as fit in
    /// its queue; it stops conflating once every changed item was sent.
    fn recover(&mut self, id: ClientId) {
        let max = self.config.max_queue_bytes;
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let Some(conf) = c.conflation.as_mut() else {
            return;
        };
        let mut budget = max.saturating_sub(c.queued_bytes + CONFLATED_LEN);
        let mut chosen = Vec::new();
        for &item in &conf.changed {
            let Some(it) = self.cache.get(item) else {
                continue;
            };
            let service_len = self.cache.service_name(it.service).len();
            let len = if it.state == ItemState::Ok {
                it.refresh_len(service_len)
            } else {
                STATUS_HEADER_LEN + service_len + it.name.len()
            };
            if len > budget {
                break;
            }
            budget -= len;
            chosen.push(item);
        }
        if chosen.is_empty() {
            return;
        }
        let dropped = u32::try_from(conf.updates_dropped).unwrap_or(u32::MAX);
        conf.updates_dropped = 0;
        for item in &chosen {
            conf.changed.remove(item);
        }
        let caught_up = conf.changed.is_empty();
        if caught_up {
            c.conflation = None;
        }
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.resize(from + CONFLATED_LEN, 0);
        ConflatedRepr {
            items: chosen.len() as u32,
            updates_dropped: dropped,
        }
        .emit(&mut ConflatedView::new_unchecked(&mut buf[from..]));
        for &item in &chosen {
            let state = self.cache.get(item).map_or(ItemState::Closed, |i| i.state);
            if state == ItemState::Ok {
                self.cache
                    .encode_refresh(item, refresh_flags::CONFLATED, self.outbox.buffer());
            } else {
                self.cache
                    .encode_status(item, 0, state, "", self.outbox.buffer());
            }
        }
        let len = self.outbox.buffer().len() - from;
        if let Some(c) = self.clients.get_mut(id) {
            c.queued_bytes += len;
        }
        self.counters.bytes_queued += len as u64;
        self.counters.conflated_images += chosen.len() as u64;
        self.outbox.send_to(from, id);
        if caught_up {
            self.push_event(Event::CaughtUp { client: id });
        }
    }

    // ---- backbone ---------------------------------------------------------------------------

    fn backbone_rejected(&mut self, service: ServiceId, error: BackboneError) {
        self.counters.backbone_rejected += 1;
        self.push_event(Event::BackboneRejected { service, error });
    }

    fn on_update(&mut self, service: ServiceId, feed: FeedKey, bytes: &[u8], now_ns: u64) {
        let update = match UpdateRepr::parse(&UpdateView::new_unchecked(bytes)) {
            Ok(u) => u,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        let FieldList::Wire(fields) = update.fields else {
            return; // a parsed UPDATE's fields are always the wire's
        };
        let feed_id = update.item_id;
        let item =
            match self
                .feeds
                .judge_update(service, feed, feed_id, update.item_seq, &self.cache)
            {
                UpdateVerdict::Apply(item) => item,
                UpdateVerdict::Unknown => {
                    self.counters.updates_without_image += 1;
                    return self.request_image(service, feed, Some(feed_id), now_ns, false);
                }
                UpdateVerdict::Duplicate(_) => {
                    self.counters.updates_duplicate += 1;
                    return;
                }
                UpdateVerdict::Ahead { item, needed } => {
                    self.counters.updates_ahead += 1;
                    let deadline = now_ns.saturating_add(self.config.feed_gap_window_ns);
                    self.feeds.wait_for(item, needed, deadline);
                    return;
                }
            };
        let outcome = self
            .cache
            .apply_update(item, update.item_seq, update.timestamp_ns, fields);
        let item = match outcome {
            UpdateOutcome::Applied(item) => item,
            UpdateOutcome::NoImage(_) => {
                self.counters.updates_without_image += 1;
                return self.request_image(service, feed, Some(feed_id), now_ns, false);
            }
            UpdateOutcome::SequenceGap {
                item,
                expected,
                found,
            } => {
                self.counters.sequence_gaps += 1;
                let text = format!("missed an update (item_seq {found}, expected {expected})");
                self.went_stale(item, &text);
                return self.request_image(service, feed, Some(feed_id), now_ns, false);
            }
            UpdateOutcome::ImageTooLarge(item) => {
                self.went_stale(item, "the image no longer fits in one REFRESH");
                return;
            }
        };
        self.counters.updates_applied += 1;
        // Decoded once: the bytes are copied once, re-stamped once, and the same slice is
        // listed with every watcher.
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.extend_from_slice(bytes);
        Header::new_unchecked(&mut buf[from..]).set_item_id(item);
        self.fan_out(item, from, true);
    }

    fn on_refresh(&mut self, service: ServiceId, feed: FeedKey, bytes: &[u8]) {
        let view = match RefreshView::new_checked(bytes) {
            Ok(v) => v,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        if view.service_bytes() != self.service_name(service).as_bytes() {
            return self.backbone_rejected(service, BackboneError::WrongService);
        }
        // The image the watchers already have (a provider answering an image request with
        // the image as of the last message applied): nothing is sent to them.
        let name = core::str::from_utf8(view.name_bytes()).unwrap_or("");
        let known = self.cache.by_name(service, name);
        let repeated = known.and_then(|id| self.cache.get(id)).is_some_and(|i| {
            i.state == ItemState::Ok
                && i.item_seq == view.item_seq()
                && i.image() == view.field_bytes()
        });
        if let Some(item) = known.filter(|_| !repeated) {
            let verdict = self.feeds.judge_refresh(
                service,
                feed,
                item,
                view.item_seq(),
                view.field_bytes(),
                &self.cache,
            );
            if verdict != RefreshVerdict::Apply {
                // Another feed is as far: this feed is given its route, the image stays.
                self.feeds
                    .set_route(service, feed, view.item_id(), item, view.item_seq());
                self.counters.refreshes_behind += 1;
                if let RefreshVerdict::Disagrees { item_seq } = verdict {
                    self.counters.feed_disagreements += 1;
                    self.push_event(Event::FeedsDisagree {
                        service,
                        item: name.to_string(),
                        item_seq,
                    });
                }
                return;
            }
        }
        let (item, new) = match self.cache.apply_refresh(service, &view) {
            Ok(r) => r,
            Err(RefreshRefused::CacheFull) => {
                self.counters.cache_full += 1;
                return;
            }
        };
        if !self
            .feeds
            .set_route(service, feed, view.item_id(), item, view.item_seq())
        {
            self.counters.routes_refused += 1;
        }
        self.counters.refreshes_applied += 1;
        if repeated {
            return;
        }
        if new {
            self.watchers.push(Vec::new());
            self.open_new_item(service, item);
        }
        let from = self.outbox.buffer().len();
        self.cache.encode_refresh(item, 0, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// A new item: every open request of its service whose glob or exact name matches it (and
    /// whose user may see it) opens it.
    fn open_new_item(&mut self, service: ServiceId, item: ItemId) {
        let Some(name) = self.cache.get(item).map(|i| i.name.clone()) else {
            return;
        };
        let mut matches = Vec::new();
        for c in self.clients.iter() {
            let Some(user) = c.user().and_then(|u| self.users.get(u)) else {
                continue;
            };
            if !user.may_see_item(&name) {
                continue;
            }
            for (&rid, r) in &c.requests {
                let hit = r.service == service
                    && (r.exact.iter().any(|e| **e == *name)
                        || r.globs
                            .iter()
                            .any(|g| glob_match(g.as_bytes(), name.as_bytes())));
                if hit {
                    matches.push((c.id, rid));
                }
            }
        }
        for (id, rid) in matches {
            self.watch(id, rid, item);
        }
    }

    fn on_feed_status(&mut self, service: ServiceId, feed: FeedKey, bytes: &[u8]) {
        let status = match StatusRepr::parse(&StatusView::new_unchecked(bytes)) {
            Ok(s) => s,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        let Some(item) = self
            .feeds
            .route(service, feed, status.item_id)
            .map(|r| r.item)
        else {
            return self.backbone_rejected(service, BackboneError::UnknownItem(status.item_id));
        };
        let state = match status.state {
            ItemState::Ok | ItemState::Stale | ItemState::Closed => status.state,
            ItemState::NotFound => ItemState::Closed,
            other => return self.backbone_rejected(service, BackboneError::BadState(other)),
        };
        if state != ItemState::Ok {
            self.feeds.set_ok(service, feed, status.item_id, false);
            if self.feeds.other_ok(service, feed, item) {
                // Another feed carries the item: this feed's word holds for its route only.
                self.counters.statuses_covered += 1;
                return;
            }
        }
        let old = self.cache.get(item).map(|i| i.state);
        match state {
            // Only a REFRESH brings an image back: an `ok` from the feed is passed on while
            // the item is ok, and changes nothing.
            ItemState::Ok if old != Some(ItemState::Ok) => return,
            ItemState::Ok => {}
            ItemState::Stale if old != Some(ItemState::Ok) => return,
            _ => {
                if state == ItemState::Stale {
                    self.counters.items_stale += 1;
                }
                self.cache.set_state(item, state);
            }
        }
        let from = self.outbox.buffer().len();
        self.cache
            .encode_status(item, 0, state, status.text, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// Makes an ok item stale and tells its watchers.
    /// Items that waited for an update another feed never sent (deadline passed, or `all`:
    /// a feed left) go stale and their images are asked for.
    fn expire_gaps(&mut self, now_ns: u64, all: bool) {
        for (item, needed) in self.feeds.expired(now_ns, all, &self.cache) {
            self.counters.sequence_gaps += 1;
            let text = format!("missed an update (item_seq {needed}): no feed sent it");
            self.went_stale(item, &text);
            let Some(service) = self.cache.get(item).map(|i| i.service) else {
                continue;
            };
            // Asked of the first feed that routes it (the request goes to every feed).
            let route = self
                .feeds
                .keys(service)
                .find_map(|k| Some((k, self.feeds.feed_id_of(service, k, item)?)));
            if let Some((feed, fid)) = route {
                self.request_image(service, feed, Some(fid), now_ns, false);
            } else {
                self.request_image(service, 0, None, now_ns, false);
            }
        }
    }

    fn went_stale(&mut self, item: ItemId, text: &str) {
        if self.cache.set_state(item, ItemState::Stale).is_none() {
            return;
        }
        self.counters.items_stale += 1;
        let from = self.outbox.buffer().len();
        self.cache
            .encode_status(item, 0, ItemState::Stale, text, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// A service goes up or down: each version 2 client is sent the change.
    fn set_up(&mut self, service: ServiceId, up: bool) {
        if std::mem::replace(&mut self.services[service.index()].up, up) == up {
            return;
        }
        let v2: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|c| c.version >= 2 && c.user().is_some() && !c.closing())
            .map(|c| c.id)
            .collect();
        for id in v2 {
            self.send_directory(id, Some(service));
        }
    }

    /// Sends a client the dictionary, every part (they were encoded once).
    fn on_dictionary_request(&mut self, id: ClientId) {
        self.counters.dictionaries_sent += 1;
        for i in 0..self.dictionary_parts.len() {
            let from = self.outbox.buffer().len();
            self.outbox
                .buffer()
                .extend_from_slice(&self.dictionary_parts[i]);
            self.queue_control(id, from);
        }
    }

    /// Sends a client the directory: every service (`None`), or one that changed.
    fn send_directory(&mut self, id: ClientId, only: Option<ServiceId>) {
        let Some(user) = self
            .clients
            .get(id)
            .and_then(|c| c.user())
            .and_then(|u| self.users.get(u))
        else {
            return;
        };
        let entries: Vec<ServiceEntry<'_>> = self
            .config
            .services
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|s| s.index() == *i))
            .map(|(i, name)| ServiceEntry {
                name,
                up: self.services[i].up,
                open: user.may_open_service(name),
            })
            .collect();
        let repr = DirectoryRepr {
            complete: only.is_none(),
            services: EntryList::List(&entries),
        };
        let mut bytes = Vec::with_capacity(repr.buffer_len());
        Message::Directory(repr).emit_to_vec(&mut bytes);
        let from = self.outbox.buffer().len();
        self.outbox.buffer().extend_from_slice(&bytes);
        self.queue_control(id, from);
    }

    fn service_stale(&mut self, service: ServiceId, cause: StaleCause) {
        let ok: Vec<ItemId> = self
            .cache
            .items_of(service)
            .map(|(_, id)| id)
            .filter(|&id| self.cache.get(id).is_some_and(|i| i.state == ItemState::Ok))
            .collect();
        let text = match cause {
            StaleCause::BackboneLoss => "backbone loss: waiting for a fresh image",
            StaleCause::FeedGone => "the feed went away: waiting for it to come back",
        };
        // Version 2 clients get one group STATUS for the service instead of one per item.
        self.grouping = true;
        for &item in &ok {
            self.went_stale(item, text);
        }
        self.grouping = false;
        let mut grouped = std::mem::take(&mut self.grouped);
        grouped.sort_unstable();
        grouped.dedup();
        let name = self.service_name(service).to_string();
        for id in grouped.drain(..) {
            let from = self.outbox.buffer().len();
            encode_status(
                &StatusRepr {
                    item_id: 0,
                    request_id: 0,
                    state: ItemState::Stale,
                    service: &name,
                    name: "*",
                    text,
                },
                self.outbox.buffer(),
            );
            self.counters.group_statuses += 1;
            self.queue_control(id, from);
        }
        self.grouped = grouped;
        self.push_event(Event::ServiceStale {
            service,
            items: ok.len(),
            cause,
        });
    }

    /// Asks the feed of `service` for the image of `feed_id` (`None`: every item), unless it
    /// was asked for less than `image_retry_ns` ago (`force` asks anyway).
    fn request_image(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        feed_id: Option<u32>,
        now_ns: u64,
        force: bool,
    ) {
        let retry = self.config.image_retry_ns;
        let recent = |at: Option<u64>| at.is_some_and(|t| now_ns.saturating_sub(t) < retry);
        let svc = &mut self.services[service.index()];
        if !force && recent(svc.all_requested_at_ns) {
            return;
        }
        let item_id = match feed_id {
            None => {
                svc.all_requested_at_ns = Some(now_ns);
                svc.unknown_requested.clear();
                0
            }
            Some(fid) => match self.feeds.route(service, feed, fid).map(|r| r.item) {
                Some(item) => {
                    if recent(self.cache.get(item).and_then(|i| i.image_requested_at_ns)) {
                        return;
                    }
                    self.cache.set_image_requested(item, now_ns);
                    fid
                }
                None => {
                    if recent(svc.unknown_requested.get(&fid).copied()) {
                        return;
                    }
                    if svc.unknown_requested.len() >= MAX_UNKNOWN_REQUESTS {
                        svc.unknown_requested
                            .retain(|_, &mut at| now_ns.saturating_sub(at) < retry);
                    }
                    if svc.unknown_requested.len() >= MAX_UNKNOWN_REQUESTS {
                        // Too many unknown items at once: one request for everything.
                        return self.request_image(service, feed, None, now_ns, false);
                    }
                    svc.unknown_requested.insert(fid, now_ns);
                    fid
                }
            },
        };
        self.next_request_id = self.next_request_id.wrapping_add(1);
        self.counters.image_requests += 1;
        self.image_requests.push_back(ImageRequest {
            service,
            feed_item_id: item_id,
            request_id: self.next_request_id,
        });
    }

    /// Lists every watcher of `item` that may take the message written at `from` (to the end
    /// of the outbox) as its recipient.
    fn fan_out(&mut self, item: ItemId, from: usize, update: bool) {
        let len = self.outbox.buffer().len() - from;
        let record = self.outbox.begin(from);
        let Some(watchers) = self.watchers.get(item as usize - 1) else {
            return self.outbox.finish(record);
        };
        // A REFRESH or UPDATE goes to clients with a view of the item as its own encoding,
        // once per distinct view (below).
        let ty = self.outbox.buffer().get(from + 2).copied();
        let cuttable =
            ty == Some(MessageType::Update as u8) || ty == Some(MessageType::Refresh as u8);
        let mut viewing: Vec<(view::View, Vec<ClientId>)> = Vec::new();
        for &id in watchers {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            if self.grouping && c.version >= 2 {
                // Told by one group STATUS (service_stale).
                self.grouped.push(id);
                continue;
            }
            if cuttable && !c.views.is_empty() {
                if let Some(v) = c.views.effective(item) {
                    match viewing.iter_mut().find(|(w, _)| **w == **v) {
                        Some((_, ids)) => ids.push(id),
                        None => viewing.push((v.clone(), vec![id])),
                    }
                    continue;
                }
            }
            let mut out = FanOut {
                outbox: &mut self.outbox,
                counters: &mut self.counters,
                events: &mut self.events,
                disconnects: &mut self.disconnects,
                to_reap: &mut self.to_reap,
            };
            out.add(c, record, len, item, update, self.config.max_queue_bytes);
        }
        if viewing.is_empty() {
            return self.outbox.finish(record);
        }
        let message = self.outbox.buffer()[from..from + len].to_vec();
        self.outbox.finish(record);
        for (v, ids) in viewing {
            let at = self.outbox.buffer().len();
            if !view::filtered(&message, &v, self.outbox.buffer()) {
                // An UPDATE that changes none of the viewed fields.
                self.counters.updates_outside_views += ids.len() as u64;
                continue;
            }
            let len = self.outbox.buffer().len() - at;
            let record = self.outbox.begin(at);
            for id in ids {
                let Some(c) = self.clients.get_mut(id) else {
                    continue;
                };
                let mut out = FanOut {
                    outbox: &mut self.outbox,
                    counters: &mut self.counters,
                    events: &mut self.events,
                    disconnects: &mut self.disconnects,
                    to_reap: &mut self.to_reap,
                };
                out.add(c, record, len, item, update, self.config.max_queue_bytes);
            }
            self.outbox.finish(record);
        }
    }

    fn push_event(&mut self, event: Event) {
        push_event(&mut self.events, &mut self.counters, event);
    }
}

fn push_event(events: &mut VecDeque<Event>, counters: &mut Counters, event: Event) {
    if events.len() >= MAX_EVENTS {
        counters.events_dropped += 1;
    } else {
        events.push_back(event);
    }
}

/// Decides whether a message of `len` bytes about `item` goes into the client's queue, and
/// counts it there. `update`: it is an UPDATE (counted as dropped when not queued).
fn admit(
    c: &mut Client,
    len: usize,
    item: ItemId,
    update: bool,
    max_queue: usize,
    counters: &mut Counters,
    events: &mut VecDeque<Event>,
) -> Admit {
    if c.closing() || c.user().is_none() {
        return Admit::Skip;
    }
    if c.is_paused(item) {
        c.paused_changed.insert(item);
        if update {
            counters.updates_paused += 1;
        }
        return Admit::Skip;
    }
    if c.conflation.is_none() && c.queued_bytes.saturating_add(len) > max_queue {
        match c.slow {
            SlowPolicy::Conflate => {
                c.conflation = Some(Conflation::default());
                c.conflations += 1;
                counters.conflations += 1;
                push_event(events, counters, Event::Conflating { client: c.id });
            }
            SlowPolicy::Disconnect => {
                counters.slow_disconnects += 1;
                push_event(events, counters, Event::SlowDisconnect { client: c.id });
                return Admit::Close;
            }
        }
    }
    if let Some(conf) = c.conflation.as_mut() {
        conf.changed.insert(item);
        if update {
            conf.updates_dropped += 1;
            c.updates_dropped += 1;
            counters.updates_conflated += 1;
        }
        return Admit::Skip;
    }
    // Sent now (another, unpaused request holds it): no image is owed for it on resume.
    if !c.paused_changed.is_empty() {
        c.paused_changed.remove(&item);
    }
    c.queued_bytes += len;
    counters.bytes_queued += len as u64;
    Admit::Queue
}

/// What a fan-out writes to, apart from the client: borrowed field by field so that the
/// distributor's watcher lists stay borrowed meanwhile.
struct FanOut<'a> {
    outbox: &'a mut Outbox,
    counters: &'a mut Counters,
    events: &'a mut VecDeque<Event>,
    disconnects: &'a mut VecDeque<Disconnect>,
    to_reap: &'a mut Vec<ClientId>,
}

impl FanOut<'_> {
    /// Lists client `c` on `record` (a message of `len` bytes about `item`), unless it
    /// conflates, or closes it when it is past its bound with policy `disconnect`.
    fn add(
        &mut self,
        c: &mut Client,
        record: usize,
        len: usize,
        item: ItemId,
        update: bool,
        max_queue: usize,
    ) {
        match admit(c, len, item, update, max_queue, self.counters, self.events) {
            Admit::Queue => {
                if update {
                    c.updates_sent += 1;
                    self.counters.updates_sent += 1;
                }
                self.outbox.add_recipient(record, c.id);
            }
            Admit::Skip => {}
            Admit::Close => {
                c.login = Login::Closing;
                self.disconnects.push_back(Disconnect {
                    client: c.id,
                    reason: DisconnectReason::Slow,
                });
                self.to_reap.push(c.id);
            }
        }
    }
}

/// Removes one request's hold on `item`; the client stops watching it when none is left.
fn unwatch(c: &mut Client, item: ItemId, watchers: &mut [Vec<ClientId>]) {
    let Some(n) = c.watched.get_mut(&item) else {
        return;
    };
    *n -= 1;
    if *n > 0 {
        return;
    }
    c.watched.remove(&item);
    if let Some(conf) = c.conflation.as_mut() {
        conf.changed.remove(&item);
    }
    if let Some(w) = watchers.get_mut(item as usize - 1) {
        if let Some(at) = w.iter().position(|&x| x == c.id) {
            w.swap_remove(at);
        }
    }
}
