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
}

impl Request {
    pub fn pattern_count(&self) -> usize {
        self.globs.len() + self.exact.len()
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
}
