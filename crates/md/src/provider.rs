//! The provider's core (RTSDK's non-interactive provider), sans-I/O: the items one service
//! publishes, each with its last image and its `item_seq`, and the answers to the
//! distributors' IMAGE_REQUESTs, so that an application only publishes changes.
//!
//! No socket, no clock: the driver (`peregrine_market_data::Provider`) owns the backbone
//! publisher and the request subscriber and calls this core. Every message goes out in two
//! steps, so that a message the transport refuses (back-pressure) changes nothing:
//!
//! 1. `prepare_refresh`, `prepare_update` or `prepare_status` checks the input and encodes the
//!    message into the core's buffer ([`ProviderCore::message`]); a bad input is an error
//!    naming the value, and nothing is kept;
//! 2. once the driver's `offer` took the bytes, `commit` applies it: the item's image is set
//!    (REFRESH) or merged (UPDATE), its `item_seq` advances. A solicited REFRESH (an answer to
//!    an image request) is the image as of the item's last message: it carries that
//!    message's `item_seq` and does not advance it.
//!
//! Posts (a client's contribution, forwarded by a distributor on the request topic) are kept
//! for the application ([`ProviderCore::poll_post`]), which answers each with an ACK
//! ([`ProviderCore::ack`]): see `provider/post.rs`.
//!
//! Image requests ([`ProviderCore::handle_request`]) only queue items; the driver sends
//! the queued REFRESHes a few at a time ([`ProviderCore::prepare_solicited`]) between its own
//! messages. They are coalesced and bounded, so that no number of requests makes the provider
//! send more than one full cycle of images at a time:
//!
//! - an item already queued is not queued again, and a REFRESH the application publishes for a
//!   queued item answers the request (one image, not two);
//! - a request for every item while a full cycle is still being sent is absorbed;
//! - full cycles start at most once per `full_cycle_interval_ns` (1 s), and one item is
//!   answered at most once per `item_interval_ns` (100 ms): a request within either is
//!   remembered and served when the interval ends ([`ProviderCore::poll_timeout`]), never
//!   dropped.
//!
//! ```
//! use peregrine_md::provider::{ProviderCore, ProviderConfig};
//! use peregrine_md::model::{Field, Price, Value};
//!
//! let mut p = ProviderCore::new(ProviderConfig::new("FEED1")).unwrap();
//! let bid = |m| Field::new(22, Value::Price(Price { mantissa: m, exponent: -2 }));
//! let t = p.prepare_refresh("AAA.O", &[bid(18921), Field::new(30, Value::Int(300))], 1).unwrap();
//! assert_eq!(p.message()[2], 0x01); // a REFRESH, ready to offer on md.FEED1
//! p.commit(t);
//! let t = p.prepare_update("AAA.O", &[bid(18923)], 2).unwrap();
//! p.commit(t);
//! assert_eq!(p.item_seq("AAA.O"), Some(2)); // the next message's item_seq
//! assert!(p.prepare_update("MSFT.O", &[bid(1)], 3).is_err()); // no refresh yet
//! ```

use crate::dictionary::Dictionary;
use crate::model::{check_service, Field, ItemState};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// A prepared message, for [`ProviderCore::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "commit the message once it was sent, or nothing is kept"]
pub struct Prepared {
    /// Index into the items (the feed id minus 1), or `usize::MAX` for a new item.
    item: usize,
    kind: PreparedKind,
    /// The `item_seq` the message carries.
    seq: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreparedKind {
    Refresh { solicited: bool },
    Update,
    Status(ItemState),
}

#[derive(Debug, Clone)]
struct ProvidedItem {
    name: Box<str>,
    /// The `item_seq` of the next REFRESH or UPDATE.
    seq: u32,
    /// The encoded fields of the image; meaningful while `has_image`.
    image: Vec<u8>,
    field_count: u16,
    has_image: bool,
    /// A solicited REFRESH of it is queued.
    queued: bool,
    /// It was asked for within `item_interval_ns` of its last solicited image: queued when
    /// the deferred items are released.
    deferred: bool,
    /// When its last solicited image was sent.
    answered_ns: Option<u64>,
}

/// The provider's state for one service: see the module's documentation.
#[derive(Debug)]
pub struct ProviderCore {
    config: ProviderConfig,
    /// The dictionary's type of each field id (`Kind as u8`, 0: a field it does not know): a
    /// check per field of every update, so an array, not a tree.
    kinds: Box<[u8]>,
    items: Vec<ProvidedItem>,
    /// By name (FxHash: looked up on every update; the names are the application's own).
    by_name: FxHashMap<Box<str>, usize>,
    /// Items with a solicited REFRESH queued, in request order (an item whose flag is no
    /// longer set was answered otherwise and is skipped).
    queue: VecDeque<usize>,
    /// How many of `queue`'s first entries belong to the full cycle in flight.
    full_cycle_left: usize,
    last_full_cycle_ns: Option<u64>,
    /// A request for every item arrived within the interval: served at its end.
    deferred_full_cycle: bool,
    /// Items asked for too soon after their last answer, and when they are released.
    deferred_items: Vec<usize>,
    release_items_ns: Option<u64>,
    out: Vec<u8>,
    scratch: Vec<u8>,
    counters: ProviderCounters,
    /// Posts not yet taken by the application.
    posts: VecDeque<post::Post>,
    /// Encoded ACKs not yet sent (the driver sends them between its messages).
    acks: VecDeque<Vec<u8>>,
}

impl ProviderCore {
    pub fn new(config: ProviderConfig) -> Result<Self, ProvideError> {
        check_service(config.service.as_bytes()).map_err(|why| ProvideError::BadService {
            service: config.service.clone(),
            why,
        })?;
        let mut kinds = vec![0u8; usize::from(crate::model::MAX_FID) + 1].into_boxed_slice();
        for d in config.dictionary.iter() {
            kinds[usize::from(d.fid)] = d.kind as u8;
        }
        Ok(ProviderCore {
            kinds,
            config,
            items: Vec::new(),
            by_name: FxHashMap::default(),
            queue: VecDeque::new(),
            full_cycle_left: 0,
            last_full_cycle_ns: None,
            deferred_full_cycle: false,
            deferred_items: Vec::new(),
            release_items_ns: None,
            out: Vec::with_capacity(512),
            scratch: Vec::new(),
            counters: ProviderCounters::default(),
            posts: VecDeque::new(),
            acks: VecDeque::new(),
        })
    }

    pub fn service(&self) -> &str {
        &self.config.service
    }

    pub fn dictionary(&self) -> &Dictionary {
        &self.config.dictionary
    }

    /// The message the last `prepare_*` encoded: offer it on the backbone.
    pub fn message(&self) -> &[u8] {
        &self.out
    }

    pub fn counters(&self) -> ProviderCounters {
        self.counters
    }

    /// The `item_seq` the item's next REFRESH or UPDATE will carry (`None`: unknown item).
    pub fn item_seq(&self, item: &str) -> Option<u32> {
        self.by_name.get(item).map(|&i| self.items[i].seq)
    }

    /// Every item: its name and the `item_seq` of the last message sent of it (`None`: none).
    pub fn items(&self) -> impl Iterator<Item = (&str, Option<u32>)> + '_ {
        self.items
            .iter()
            .map(|it| (&*it.name, it.seq.checked_sub(1)))
    }

    /// Items at most, as configured.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Solicited REFRESHes queued.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Fields by dictionary name, as the bindings and the tick files give them.
    pub fn fields_by_name<'v>(
        dictionary: &Dictionary,
        named: &[(&str, crate::model::Value<'v>)],
    ) -> Result<Vec<Field<'v>>, ProvideError> {
        named
            .iter()
            .map(|(name, value)| {
                dictionary
                    .by_name(name)
                    .map(|d| Field::new(d.fid, *value))
                    .ok_or_else(|| ProvideError::UnknownField {
                        name: name.to_string(),
                    })
            })
            .collect()
    }
}

mod config;
mod images;
mod post;
mod publish;

pub use config::{ProvideError, ProviderConfig, ProviderCounters};
pub use post::Post;

#[cfg(test)]
mod tests;
