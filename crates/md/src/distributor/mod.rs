//! The distributor's sans-I/O core: the cache, the users, every client's login, requests,
//! watchlist and queue, and the decisions of the fan-out. No socket, no clock: the driver
//! (`peregrine distributor`) reads sockets and the clock and calls the inputs below, then
//! drains the outputs.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the core's state, its getters and its outputs, in the order below |
//! | `config.rs` | [`DistributorConfig`], checked before start, and [`WriteMode`] |
//! | `connections.rs` | client inputs: connected, bytes read, drained, closed; users replaced |
//! | `login.rs` | LOGIN checked (the slow hash as a [`Verification`]), answered, refused |
//! | `liveness.rs` | version 2 PINGs and PONGs, the silence that closes a client |
//! | `requests.rs` | OPEN, CLOSE, PAUSE, RESUME, dictionary and directory; the watchlists |
//! | `backbone.rs` | the feeds' inputs: REFRESH, UPDATE, STATUS, loss, joins; image requests |
//! | `fanout.rs` | one message, many watchers: queue admission, conflation and its recovery |
//! | `slots.rs` | client ids and the counts the connection limits are checked against |
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

mod backbone;
pub mod cache;
mod client;
mod config;
mod connections;
pub mod counters;
pub mod entitle;
mod errors;
mod fanout;
pub mod feeds;
mod liveness;
mod login;
mod outbox;
mod post;
mod requests;
mod slots;
#[cfg(test)]
mod tests;
pub mod throttle;
pub mod view;

pub use cache::{Cache, Item, ItemId};
pub use client::{ClientId, ClientLink, ClientStats};
pub use config::{DistributorConfig, WriteMode, MIN_PING_INTERVAL_NS, MIN_QUEUE_BYTES};
pub use counters::Counters;
pub use entitle::{glob_match, LoginCheck, SlowPolicy, User, Users};
pub use errors::{
    BackboneError, ClientError, ConfigError, Event, RequestRejection, StaleCause, TooManyClients,
};
pub use login::Verification;
pub use outbox::Transmit;
pub use post::PostForward;

use crate::codec::image_request::IMAGE_REQUEST_LEN;
use crate::codec::ImageRequestRepr;
use client::Login;
use feeds::Feeds;
use outbox::Outbox;
use slots::Clients;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use throttle::LoginThrottle;

/// A service the distributor carries: an index into [`DistributorConfig::services`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub(crate) u16);

impl ServiceId {
    pub fn index(self) -> usize {
        self.0.into()
    }
}

/// Events kept for the driver; past this, new ones are counted and dropped.
const MAX_EVENTS: usize = 4096;

/// Feed ids without an item whose image was asked for, per service; past this, the
/// distributor asks for every image instead.
const MAX_UNKNOWN_REQUESTS: usize = 4096;

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
