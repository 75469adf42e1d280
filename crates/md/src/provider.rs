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

use crate::codec::fields::{merge_fields, WireFields};
use crate::codec::header::MAX_MESSAGE_LEN;
use crate::codec::{
    refresh_flags, FieldList, ImageRequestRepr, ImageRequestView, MdError, Message, RefreshRepr,
    RefreshView, StatusRepr, UpdateRepr, UpdateView,
};
use crate::dictionary::Dictionary;
use crate::model::{check_item_name, check_service, Field, ItemState, Kind, NameError};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
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

    fn check_fields(&self, item: &str, fields: &[Field<'_>]) -> Result<(), ProvideError> {
        FieldList::List(fields)
            .check()
            .map_err(|error| ProvideError::BadFields {
                item: item.to_string(),
                error,
            })?;
        for f in fields {
            let known = self.kinds.get(usize::from(f.fid)).copied().unwrap_or(0);
            if known == 0 || known == f.value.kind() as u8 {
                continue;
            }
            if let Some(def) = self.config.dictionary.get(f.fid) {
                if def.kind != f.value.kind() {
                    return Err(ProvideError::FieldType {
                        item: item.to_string(),
                        fid: f.fid,
                        name: def.name.clone(),
                        expected: def.kind,
                        given: f.value.kind(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Encodes `message` into `out` (the core's buffer, passed apart from the rest of the
    /// core so that the message may borrow the service's name).
    fn encode(out: &mut Vec<u8>, item: &str, message: Message<'_>) -> Result<(), ProvideError> {
        let len = message.buffer_len();
        if len > MAX_MESSAGE_LEN {
            return Err(ProvideError::TooLarge {
                item: item.to_string(),
                len,
            });
        }
        out.clear();
        message.emit_to_vec(out);
        Ok(())
    }

    /// Encodes a REFRESH of `item` (new or known) with exactly `fields`: its full image.
    pub fn prepare_refresh(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
    ) -> Result<Prepared, ProvideError> {
        self.refresh_numbered(item, fields, timestamp_ns, None)
    }

    /// [`prepare_refresh`](Self::prepare_refresh) numbered `item_seq` by the application
    /// (the upstream's numbering, so that two providers fed the same stream number alike: A/B
    /// feeds). It must be after the item's last message's; the next message follows it.
    pub fn prepare_refresh_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
        item_seq: u32,
    ) -> Result<Prepared, ProvideError> {
        self.refresh_numbered(item, fields, timestamp_ns, Some(item_seq))
    }

    /// [`prepare_update`](Self::prepare_update) numbered `item_seq` by the application (see
    /// [`prepare_refresh_numbered`](Self::prepare_refresh_numbered)). A number past the next
    /// one tells distributors that updates were missed (the item goes stale until refreshed).
    pub fn prepare_update_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
        item_seq: u32,
    ) -> Result<Prepared, ProvideError> {
        self.update_numbered(item, fields, timestamp_ns, Some(item_seq))
    }

    /// `given`, if after the last `item_seq` sent of the item at `index`.
    fn check_seq(&self, index: usize, given: u32) -> Result<u32, ProvideError> {
        let it = &self.items[index];
        let last = it.seq.wrapping_sub(1);
        if (given.wrapping_sub(last) as i32) <= 0 {
            return Err(ProvideError::SeqNotAfter {
                item: it.name.to_string(),
                last,
                given,
            });
        }
        Ok(given)
    }

    fn refresh_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
        numbered: Option<u32>,
    ) -> Result<Prepared, ProvideError> {
        check_item_name(item.as_bytes()).map_err(|why| ProvideError::BadItemName {
            item: item.to_string(),
            why,
        })?;
        self.check_fields(item, fields)?;
        let (index, id, seq) = match self.by_name.get(item) {
            Some(&i) => (i, i as u32 + 1, self.items[i].seq),
            None if self.items.len() >= self.config.max_items.min(u32::MAX as usize - 1) => {
                return Err(ProvideError::TooManyItems {
                    max: self.config.max_items,
                })
            }
            None => (usize::MAX, self.items.len() as u32 + 1, 0),
        };
        let seq = match numbered {
            Some(given) if index != usize::MAX => self.check_seq(index, given)?,
            Some(given) => given,
            None => seq,
        };
        Self::encode(
            &mut self.out,
            item,
            Message::Refresh(RefreshRepr {
                item_id: id,
                flags: 0,
                timestamp_ns,
                item_seq: seq,
                service: &self.config.service,
                name: item,
                fields: FieldList::List(fields),
            }),
        )?;
        let item = if index == usize::MAX {
            // A new item: created at commit. Its index is the next one, and stays so until
            // then (only a commit adds items).
            self.items.len() | NEW_ITEM
        } else {
            index
        };
        Ok(Prepared {
            item,
            kind: PreparedKind::Refresh { solicited: false },
            seq,
        })
    }

    /// Encodes an UPDATE of `item`'s changed `fields`.
    pub fn prepare_update(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
    ) -> Result<Prepared, ProvideError> {
        self.update_numbered(item, fields, timestamp_ns, None)
    }

    fn update_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        timestamp_ns: u64,
        numbered: Option<u32>,
    ) -> Result<Prepared, ProvideError> {
        let index = match self.by_name.get(item) {
            Some(&i) if self.items[i].has_image => i,
            _ => {
                check_item_name(item.as_bytes()).map_err(|why| ProvideError::BadItemName {
                    item: item.to_string(),
                    why,
                })?;
                return Err(ProvideError::UpdateBeforeRefresh {
                    item: item.to_string(),
                });
            }
        };
        self.check_fields(item, fields)?;
        let seq = match numbered {
            Some(given) => self.check_seq(index, given)?,
            None => self.items[index].seq,
        };
        Self::encode(
            &mut self.out,
            item,
            Message::Update(UpdateRepr {
                item_id: index as u32 + 1,
                timestamp_ns,
                item_seq: seq,
                fields: FieldList::List(fields),
            }),
        )?;
        Ok(Prepared {
            item: index,
            kind: PreparedKind::Update,
            seq,
        })
    }

    /// Encodes a STATUS of a known item: `stale` (its image is not to be trusted until the
    /// next REFRESH) or `closed` (no more of it; a later REFRESH reopens it).
    pub fn prepare_status(
        &mut self,
        item: &str,
        state: ItemState,
        text: &str,
    ) -> Result<Prepared, ProvideError> {
        if !matches!(state, ItemState::Stale | ItemState::Closed) {
            return Err(ProvideError::BadStatus {
                item: item.to_string(),
                why: "a provider sends STATUS stale or closed; ok is a REFRESH",
            });
        }
        if text.len() > 255 {
            return Err(ProvideError::BadStatus {
                item: item.to_string(),
                why: "a STATUS text is at most 255 bytes",
            });
        }
        let Some(&index) = self.by_name.get(item) else {
            check_item_name(item.as_bytes()).map_err(|why| ProvideError::BadItemName {
                item: item.to_string(),
                why,
            })?;
            return Err(ProvideError::UpdateBeforeRefresh {
                item: item.to_string(),
            });
        };
        Self::encode(
            &mut self.out,
            item,
            Message::Status(StatusRepr {
                item_id: index as u32 + 1,
                request_id: 0,
                state,
                service: &self.config.service,
                name: item,
                text,
            }),
        )?;
        Ok(Prepared {
            item: index,
            kind: PreparedKind::Status(state),
            seq: 0,
        })
    }

    /// The message prepared last was sent: apply it. `prepared` must come from the last
    /// `prepare_*` call (a stale one is ignored by debug assertion's standards: it would apply
    /// another message's bytes).
    pub fn commit(&mut self, prepared: Prepared) {
        let index = if prepared.item & NEW_ITEM != 0 {
            let index = prepared.item & !NEW_ITEM;
            debug_assert_eq!(index, self.items.len(), "a stale Prepared");
            let view = RefreshView::new_unchecked(&self.out[..]);
            let name: Box<str> = String::from_utf8_lossy(view.name_bytes()).into();
            self.by_name.insert(name.clone(), index);
            self.items.push(ProvidedItem {
                name,
                seq: 0,
                image: Vec::new(),
                field_count: 0,
                has_image: false,
                queued: false,
                deferred: false,
                answered_ns: None,
            });
            index
        } else {
            prepared.item
        };
        let it = &mut self.items[index];
        match prepared.kind {
            PreparedKind::Refresh { solicited } => {
                let view = RefreshView::new_unchecked(&self.out[..]);
                it.image.clear();
                it.image.extend_from_slice(view.field_bytes());
                it.field_count = view.field_count();
                it.has_image = true;
                if !solicited {
                    it.seq = prepared.seq.wrapping_add(1);
                }
                // Any REFRESH answers a queued request: one image, not two.
                it.queued = false;
                self.counters.refreshes += 1;
                if solicited {
                    self.counters.solicited_refreshes += 1;
                }
            }
            PreparedKind::Update => {
                let view = UpdateView::new_unchecked(&self.out[..]);
                let fields = WireFields::new(view.field_count(), view.field_bytes(), view.length())
                    .expect("the core encoded these fields after checking them");
                if !merge_fields(
                    &mut it.image,
                    &mut it.field_count,
                    fields,
                    &mut self.scratch,
                    MAX_MESSAGE_LEN,
                ) {
                    // The image would outgrow a REFRESH: it can no longer be answered whole,
                    // so the next request is answered when the application refreshes.
                    it.has_image = false;
                }
                it.seq = prepared.seq.wrapping_add(1);
                self.counters.updates += 1;
            }
            PreparedKind::Status(state) => {
                if state == ItemState::Closed {
                    it.has_image = false;
                }
                self.counters.statuses += 1;
            }
        }
    }

    /// A message from the request topic (`md.<service>.req`): an IMAGE_REQUEST, or a POST
    /// (kept for [`poll_post`](Self::poll_post)). Anything else is counted in `bad_requests`.
    pub fn handle_request(&mut self, bytes: &[u8], now_ns: u64) {
        match crate::codec::Header::new_checked(bytes).and_then(|h| h.message_type()) {
            Ok(crate::codec::MessageType::Post) => self.on_post(bytes),
            _ => self.on_image_request(bytes, now_ns),
        }
    }

    /// An IMAGE_REQUEST for one item (its feed id) or for every item (0). Queues what it asks
    /// for, coalesced.
    fn on_image_request(&mut self, bytes: &[u8], now_ns: u64) {
        let Ok(r) = ImageRequestRepr::parse(&ImageRequestView::new_unchecked(bytes)) else {
            self.counters.bad_requests += 1;
            return;
        };
        self.counters.image_requests += 1;
        if r.item_id == 0 {
            self.request_full_cycle(now_ns);
            return;
        }
        let index = r.item_id as usize - 1;
        if index >= self.items.len() {
            self.counters.unknown_requests += 1;
            return;
        }
        let it = &mut self.items[index];
        let too_soon = it
            .answered_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < self.config.item_interval_ns);
        if too_soon && !it.queued && it.has_image {
            self.counters.requests_coalesced += 1;
            if !it.deferred {
                it.deferred = true;
                self.deferred_items.push(index);
                let release = it.answered_ns.unwrap_or(now_ns) + self.config.item_interval_ns;
                self.release_items_ns =
                    Some(self.release_items_ns.map_or(release, |r| r.max(release)));
            }
            return;
        }
        if !self.queue_item(index) {
            self.counters.requests_coalesced += 1;
        }
    }

    fn request_full_cycle(&mut self, now_ns: u64) {
        let in_flight = self.full_cycle_left > 0;
        let too_soon = self
            .last_full_cycle_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < self.config.full_cycle_interval_ns);
        if in_flight || too_soon {
            self.counters.requests_coalesced += 1;
            // A request that arrives once the cycle in flight has passed some items must
            // still see them all: served when the interval ends.
            self.deferred_full_cycle = true;
            return;
        }
        self.start_full_cycle(now_ns);
    }

    fn start_full_cycle(&mut self, now_ns: u64) {
        self.last_full_cycle_ns = Some(now_ns);
        self.deferred_full_cycle = false;
        // Items already queued keep their place; the cycle is the rest, after them.
        for i in 0..self.items.len() {
            self.queue_item(i);
        }
        // The cycle is in flight until the queue, as it is now, has drained.
        self.full_cycle_left = self.queue.len();
    }

    /// Queues a solicited REFRESH of item `index`; false if it was queued already or has no
    /// image to send.
    fn queue_item(&mut self, index: usize) -> bool {
        let it = &mut self.items[index];
        if it.queued || !it.has_image {
            return false;
        }
        it.queued = true;
        self.queue.push_back(index);
        true
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run: a deferred full cycle's start.
    pub fn poll_timeout(&self) -> Option<u64> {
        let full = match (self.deferred_full_cycle, self.last_full_cycle_ns) {
            (true, Some(t)) => Some(t + self.config.full_cycle_interval_ns),
            _ => None,
        };
        match (full, self.release_items_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts a deferred full cycle, and queues the deferred items, when their time has come.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if self.release_items_ns.is_some_and(|t| now_ns >= t) {
            self.release_items_ns = None;
            for index in std::mem::take(&mut self.deferred_items) {
                self.items[index].deferred = false;
                self.queue_item(index);
            }
        }
        let full_due = self.deferred_full_cycle
            && self
                .last_full_cycle_ns
                .is_some_and(|t| now_ns >= t + self.config.full_cycle_interval_ns);
        if self.full_cycle_left == 0 && full_due {
            self.start_full_cycle(now_ns);
        }
    }

    /// Encodes the next queued solicited REFRESH, if any, stamped `now_ns`: offer
    /// [`message`](Self::message), then [`commit`](Self::commit) it.
    pub fn prepare_solicited(&mut self, now_ns: u64) -> Option<Prepared> {
        let timestamp_ns = now_ns;
        while let Some(&index) = self.queue.front() {
            let it = &self.items[index];
            if !it.queued || !it.has_image {
                // Answered by the application's own REFRESH, or closed since.
                self.items[index].queued = false;
                self.pop_queue();
                continue;
            }
            let fields = WireFields::trusted(it.field_count, &it.image);
            self.out.clear();
            // The image as of the item's last message: it carries that message's item_seq and
            // takes none of its own, so a distributor that already has this image sees
            // nothing new (and tells its watchers nothing), and the next UPDATE still follows
            // by one.
            Message::Refresh(RefreshRepr {
                item_id: index as u32 + 1,
                flags: refresh_flags::SOLICITED,
                timestamp_ns,
                item_seq: it.seq.wrapping_sub(1),
                service: &self.config.service,
                name: &it.name,
                fields: FieldList::Wire(fields),
            })
            .emit_to_vec(&mut self.out);
            self.items[index].answered_ns = Some(timestamp_ns);
            self.pop_queue();
            return Some(Prepared {
                item: index,
                kind: PreparedKind::Refresh { solicited: true },
                seq: self.items[index].seq.wrapping_sub(1),
            });
        }
        None
    }

    fn pop_queue(&mut self) {
        self.queue.pop_front();
        self.full_cycle_left = self.full_cycle_left.saturating_sub(1);
    }

    /// A solicited REFRESH that was prepared but could not be sent goes back to the front of
    /// the queue.
    pub fn requeue(&mut self, prepared: Prepared) {
        if let PreparedKind::Refresh { solicited: true } = prepared.kind {
            self.queue.push_front(prepared.item);
            if self.full_cycle_left > 0 {
                self.full_cycle_left += 1;
            }
        }
    }
}

/// Marks a [`Prepared`] REFRESH of an item that does not exist yet.
const NEW_ITEM: usize = 1 << (usize::BITS - 1);

mod post;
pub use post::Post;

#[cfg(test)]
mod tests;
