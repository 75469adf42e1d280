//! What a consumer hands its application: [`Event`]s borrowing the read buffer, and its
//! [`ConsumerCounters`].

use crate::codec::{AckCode, FieldList};
use crate::dictionary::Dictionary;
use crate::model::ItemState;

/// How the text of the `stale` statuses a lost connection gives every item begins.
pub const CONNECTION_LOST: &str = "connection to the distributor lost";

/// What the application receives. Names and fields borrow the bytes just read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// Logged in (after every (re)connection); every open request was sent again.
    LoggedIn { address: usize },
    /// The item's full image, for `request`: an item several requests hold comes once per
    /// request, each with the fields of its own view (see [`ConsumerCore::request`](super::ConsumerCore::request)).
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
    /// The distributor's field dictionary arrived whole (also [`ConsumerCore::dictionary`](super::ConsumerCore::dictionary)),
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
