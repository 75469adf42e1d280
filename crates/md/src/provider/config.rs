//! A provider's settings ([`ProviderConfig`]), why a message is refused ([`ProvideError`]) and
//! its counters.

use crate::codec::header::MAX_MESSAGE_LEN;
use crate::codec::MdError;
use crate::dictionary::Dictionary;
use crate::model::{Kind, NameError};
use std::fmt;

/// How a provider behaves; [`ProviderConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The service its items belong to.
    pub service: String,
    /// The dictionary fields are checked against: a field it knows must have its type.
    pub dictionary: Dictionary,
    /// Items at most (1 000 000).
    pub max_items: usize,
    /// Full image cycles (answers to a request for every item) start at most this often
    /// (1 s, as often as a distributor asks).
    pub full_cycle_interval_ns: u64,
    /// One item's image is sent in answer to requests at most once per this interval
    /// (100 ms): a request within it is served when it ends.
    pub item_interval_ns: u64,
    /// Posts kept for the application at most (1024): past it a post is answered `busy`.
    pub max_pending_posts: usize,
}

impl ProviderConfig {
    /// The defaults for `service`, with the built-in dictionary.
    pub fn new(service: &str) -> Self {
        ProviderConfig {
            service: service.to_string(),
            dictionary: Dictionary::builtin(),
            max_items: 1_000_000,
            full_cycle_interval_ns: 1_000_000_000,
            item_interval_ns: 100_000_000,
            max_pending_posts: 1024,
        }
    }
}

/// Why a message was not prepared. Nothing was encoded or kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProvideError {
    /// The service name breaks the model's alphabet.
    BadService { service: String, why: NameError },
    /// The item name breaks the model's alphabet.
    BadItemName { item: String, why: NameError },
    /// An UPDATE of an item that has no image (never refreshed, or closed).
    UpdateBeforeRefresh { item: String },
    /// A field the dictionary types differently.
    FieldType {
        item: String,
        fid: u16,
        name: String,
        expected: Kind,
        given: Kind,
    },
    /// A field name the dictionary does not have.
    UnknownField { name: String },
    /// Fields the codec would reject (a fid twice, an exponent out of range, ...).
    BadFields { item: String, error: MdError },
    /// The message would exceed 65 535 bytes.
    TooLarge { item: String, len: usize },
    /// A STATUS that is not `stale` or `closed` (the only states a provider sends), or a text
    /// over 255 bytes.
    BadStatus { item: String, why: &'static str },
    /// `max_items` items exist already.
    TooManyItems { max: usize },
    /// A numbered message whose `item_seq` is not after the item's last one.
    SeqNotAfter { item: String, last: u32, given: u32 },
}

impl fmt::Display for ProvideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProvideError::BadService { service, why } => write!(
                f,
                "service {service:?}: {why}; give {}",
                crate::model::SERVICE_ALPHABET
            ),
            ProvideError::BadItemName { item, why } => write!(
                f,
                "item {item:?}: {why}; give {}",
                crate::model::ITEM_ALPHABET
            ),
            ProvideError::UpdateBeforeRefresh { item } => write!(
                f,
                "item {item}: an update before the item's first refresh (or after it was \
                 closed); publish a refresh with its full image first"
            ),
            ProvideError::FieldType {
                item,
                fid,
                name,
                expected,
                given,
            } => write!(
                f,
                "item {item}: field {name} (fid {fid}) is a {} in the dictionary, not a {}; \
                 give a {} value",
                expected.name(),
                given.name(),
                expected.name()
            ),
            ProvideError::UnknownField { name } => write!(
                f,
                "field {name:?} is not in the dictionary; give a field name it has, or the \
                 field's id"
            ),
            ProvideError::BadFields { item, error } => write!(f, "item {item}: {error}"),
            ProvideError::TooLarge { item, len } => write!(
                f,
                "item {item}: the message would be {len} bytes, over {MAX_MESSAGE_LEN}; send \
                 fewer or shorter fields"
            ),
            ProvideError::BadStatus { item, why } => write!(f, "item {item}: {why}"),
            ProvideError::TooManyItems { max } => write!(
                f,
                "{max} items already: a provider publishes at most max_items items"
            ),
            ProvideError::SeqNotAfter { item, last, given } => write!(
                f,
                "item {item}: item_seq {given} is not after the last one sent ({last}); \
                 number each item's messages upwards (wrapping at 2^32)"
            ),
        }
    }
}

impl std::error::Error for ProvideError {}

/// What the provider counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderCounters {
    pub refreshes: u64,
    /// REFRESHes that answered an image request (flag SOLICITED).
    pub solicited_refreshes: u64,
    pub updates: u64,
    pub statuses: u64,
    pub image_requests: u64,
    /// Requests that queued nothing new: the item (or every item) was already queued, or a
    /// full cycle was in flight or had started within `full_cycle_interval_ns`.
    pub requests_coalesced: u64,
    /// Requests for an id this provider never gave (not answered).
    pub unknown_requests: u64,
    /// Request-topic messages that are neither a valid IMAGE_REQUEST nor a valid POST of
    /// this service.
    pub bad_requests: u64,
    /// POSTs received (kept for the application, or answered `busy`).
    pub posts: u64,
    /// Posts the application accepted.
    pub posts_accepted: u64,
    /// Posts refused (by the application, or `busy` when `max_pending_posts` were waiting).
    pub posts_refused: u64,
}

impl ProviderCounters {
    /// Each counter's name and value, in a stable order (the names are the fields').
    pub fn values(&self) -> [(&'static str, u64); 11] {
        [
            ("refreshes", self.refreshes),
            ("solicited_refreshes", self.solicited_refreshes),
            ("updates", self.updates),
            ("statuses", self.statuses),
            ("image_requests", self.image_requests),
            ("requests_coalesced", self.requests_coalesced),
            ("unknown_requests", self.unknown_requests),
            ("bad_requests", self.bad_requests),
            ("posts", self.posts),
            ("posts_accepted", self.posts_accepted),
            ("posts_refused", self.posts_refused),
        ]
    }
}
