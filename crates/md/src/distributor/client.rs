//! The distributor's model of one client connection: its login, its open requests, its
//! watchlist, and its output queue as the driver last reported it.

use super::cache::ItemId;
use super::entitle::SlowPolicy;
use super::ServiceId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// A client connection, as the distributor names it. Ids are not reused: a stale id (a
/// connection already gone) is ignored by every input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub(crate) u64);

impl ClientId {
    /// The id as a number, for logs.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Where a connection is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Login {
    /// Connected at `since_ns`; only a LOGIN is accepted.
    Awaiting { since_ns: u64 },
    /// Its LOGIN's token is being checked against a slow hash (off the driver's loop): `user`
    /// logs in if it matches (`None`: an unknown user, refused either way). What it sends
    /// meanwhile waits.
    Verifying { since_ns: u64, user: Option<usize> },
    /// Logged in as the users file's user `user`.
    LoggedIn { user: usize },
    /// The distributor decided to close it; inputs are ignored until the driver reports it
    /// closed.
    Closing,
}

/// One OPEN that stays open: what it asked for and what it opened.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub service: ServiceId,
    /// Globs: they also follow items that appear later.
    pub globs: Vec<Box<str>>,
    /// Exact names the user may see, kept so that one not yet in the cache is opened when its
    /// REFRESH arrives.
    pub exact: Vec<Box<str>>,
    /// Items this request opened (each counted once in the client's watchlist refcount).
    pub items: Vec<ItemId>,
    /// The fields asked for (`None`: all).
    pub view: Option<super::view::View>,
}

impl Request {
    pub fn pattern_count(&self) -> usize {
        self.globs.len() + self.exact.len()
    }
}

/// The liveness of a client logged in with version 2: its PINGs and what it was last heard.
#[derive(Debug, Clone)]
pub(crate) struct Liveness {
    /// The interval agreed at login.
    pub interval_ns: u64,
    pub next_ping_ns: u64,
    /// When bytes were last read from it (its login at first).
    pub last_heard_ns: u64,
    /// The payload (send time) of the last PING, until its PONG.
    pub outstanding: Option<u64>,
    /// The last PING's round trip.
    pub rtt_ns: Option<u64>,
}

impl Liveness {
    pub fn new(interval_ns: u64, now_ns: u64) -> Liveness {
        Liveness {
            interval_ns,
            next_ping_ns: now_ns.saturating_add(interval_ns),
            last_heard_ns: now_ns,
            outstanding: None,
            rtt_ns: None,
        }
    }

    pub fn silent_for(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.last_heard_ns)
    }

    /// The next PING, or the moment its silence closes it, whichever is first.
    pub fn next_deadline(&self) -> u64 {
        self.next_ping_ns
            .min(self.last_heard_ns.saturating_add(3 * self.interval_ns))
    }
}

/// A conflating client: what it missed since its queue passed the bound.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conflation {
    /// Watched items that changed (bounded by the watchlist), in id order.
    pub changed: BTreeSet<ItemId>,
    /// Updates not queued since the last CONFLATED.
    pub updates_dropped: u64,
}

#[derive(Debug)]
pub(crate) struct Client {
    pub id: ClientId,
    pub login: Login,
    /// The start of a message not yet complete (less than 64 KiB).
    pub inbuf: Vec<u8>,
    /// Bytes in the client's queue: the driver's last report plus what was queued since.
    pub queued_bytes: usize,
    pub slow: SlowPolicy,
    pub conflation: Option<Conflation>,
    pub requests: BTreeMap<u32, Request>,
    /// Patterns held by `requests`.
    pub patterns: usize,
    /// Watched items and how many requests opened each.
    pub watched: HashMap<ItemId, u32>,
    pub updates_sent: u64,
    pub updates_dropped: u64,
    pub conflations: u64,
    /// How it is connected (address, TLS), as the driver said.
    pub link: ClientLink,
    /// The subject of the client certificate it presented over TLS, normalised
    /// ([`normalize_subject`](super::entitle::normalize_subject)).
    pub cert_subject: Option<Box<str>>,
    /// It holds a slot of `max_pending_clients` (until it logs in or goes).
    pub pending: bool,
    /// The user its LOGIN named, for the log of a refusal.
    pub login_name: Option<Box<str>>,
    /// It holds a slot of `max_clients` and of its user's `max_clients_per_user`.
    pub counted_user: Option<usize>,
    /// The ping interval its LOGIN asked for (0: the default; version 2 only).
    pub asked_ping_ms: u32,
    /// The protocol version of its LOGIN (1 before one): version 2 clients are sent the
    /// directory and group statuses.
    pub version: u16,
    /// Logged in with version 2: its PINGs and silence.
    pub liveness: Option<Liveness>,
    /// Its paused requests.
    pub paused: BTreeSet<u32>,
    /// Per watched item, how many of its paused requests hold it: an item every holder of
    /// which is paused is not sent (it equals the item's count in `watched`).
    pub paused_holds: HashMap<ItemId, u32>,
    /// Paused items that changed: their state is sent on resume.
    pub paused_changed: BTreeSet<ItemId>,
    /// The fields it is sent of items its requests hold with views.
    pub views: super::view::Views,
}

/// How a client is connected: what the driver tells the core at
/// [`client_connected`](super::Distributor::client_connected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientLink {
    /// The client's address (connection limits and login throttling count by it).
    pub peer: IpAddr,
    /// The connection is TLS (tokens do not cross the network in the clear).
    pub tls: bool,
}

impl ClientLink {
    /// A plaintext connection from `peer`.
    pub fn plain(peer: IpAddr) -> ClientLink {
        ClientLink { peer, tls: false }
    }
}

impl Client {
    pub fn new(id: ClientId, now_ns: u64, slow: SlowPolicy, link: ClientLink) -> Client {
        Client {
            link,
            cert_subject: None,
            pending: true,
            login_name: None,
            counted_user: None,
            asked_ping_ms: 0,
            version: 1,
            liveness: None,
            paused: BTreeSet::new(),
            paused_holds: HashMap::new(),
            paused_changed: BTreeSet::new(),
            views: Default::default(),
            id,
            login: Login::Awaiting { since_ns: now_ns },
            inbuf: Vec::new(),
            queued_bytes: 0,
            slow,
            conflation: None,
            requests: BTreeMap::new(),
            patterns: 0,
            watched: HashMap::new(),
            updates_sent: 0,
            updates_dropped: 0,
            conflations: 0,
        }
    }

    pub fn user(&self) -> Option<usize> {
        match self.login {
            Login::LoggedIn { user } => Some(user),
            _ => None,
        }
    }

    pub fn closing(&self) -> bool {
        self.login == Login::Closing
    }

    pub fn verifying(&self) -> bool {
        matches!(self.login, Login::Verifying { .. })
    }

    /// Every request holding `item` is paused.
    pub fn is_paused(&self, item: ItemId) -> bool {
        !self.paused.is_empty()
            && self
                .paused_holds
                .get(&item)
                .is_some_and(|&p| Some(&p) == self.watched.get(&item))
    }

    /// Request `rid` holds `item` no more (it is closed or lost the item): its paused hold
    /// goes with it.
    pub fn release_pause(&mut self, rid: u32, item: ItemId) {
        if !self.paused.contains(&rid) {
            return;
        }
        if let Some(n) = self.paused_holds.get_mut(&item) {
            *n -= 1;
            if *n == 0 {
                self.paused_holds.remove(&item);
                self.paused_changed.remove(&item);
            }
        }
    }
}

/// What a driver can read about one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStats {
    /// The user it logged in as.
    pub user: Option<String>,
    /// Bytes in its queue, as the distributor counts them.
    pub queued_bytes: usize,
    pub conflating: bool,
    /// Items it watches.
    pub watched: usize,
    /// Requests it has open.
    pub requests: usize,
    pub updates_sent: u64,
    pub updates_dropped: u64,
    pub conflations: u64,
    /// The ping interval agreed at login (`None`: a version 1 client, no liveness).
    pub ping_interval_ms: Option<u64>,
    /// Its last PING's round trip, once one was answered.
    pub rtt_ns: Option<u64>,
}
