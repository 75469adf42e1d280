//! The cache: the last image of every item, built from the feed's REFRESHes only.
//!
//! Items are named by (service, name) and get the distributor's own item id, stable for the
//! life of the cache (ids are never reused: an item closed by the feed keeps its id and its
//! watchers, and a later REFRESH reopens it). A feed's id of an item is only a route from the
//! backbone to the item, kept by `feeds.rs` per feed session.
//!
//! The image is kept encoded, as the field list of a REFRESH, so that answering an OPEN or
//! sending a REFRESH copies it whole. An UPDATE overwrites its fields in place when each one
//! has the same encoded length as the field it replaces (the usual price tick), and rebuilds
//! the image into a scratch buffer otherwise.
//!
//! Memory: at most `max_items` items, each image at most one REFRESH (64 KiB).

use super::ServiceId;
use crate::codec::fields::{merge_fields, WireFields};
use crate::codec::header::MAX_MESSAGE_LEN;
use crate::codec::refresh::{emit_names, fields_offset, RefreshView};
use crate::codec::{MessageType, StatusRepr, StatusView};
use crate::model::ItemState;
use std::collections::BTreeMap;

/// The distributor's id of an item: what clients see in `item_id`. Never 0.
pub type ItemId = u32;

/// One item of the cache.
#[derive(Debug, Clone)]
pub struct Item {
    pub service: ServiceId,
    pub name: Box<str>,
    /// `Ok` (the image is current), `Stale` (it is not to be trusted until a REFRESH) or
    /// `Closed` (the feed closed the item; no image).
    pub state: ItemState,
    /// The feed's `item_seq` of the last REFRESH or UPDATE applied.
    pub item_seq: u32,
    /// The feed's `timestamp_ns` of the last REFRESH or UPDATE applied.
    pub timestamp_ns: u64,
    /// When the distributor last asked the feed for this item's image.
    pub image_requested_at_ns: Option<u64>,
    image: Vec<u8>,
    field_count: u16,
}

impl Item {
    /// The encoded fields of the image.
    pub fn image(&self) -> &[u8] {
        &self.image
    }
    pub fn field_count(&self) -> u16 {
        self.field_count
    }
    /// Bytes of a REFRESH of this item, whose service's name is `service_len` bytes.
    pub fn refresh_len(&self, service_len: usize) -> usize {
        fields_offset(service_len, self.name.len()) + self.image.len()
    }
}

/// What applying an UPDATE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// Merged into the image: forward it.
    Applied(ItemId),
    /// The item has no current image (stale or closed): not forwarded; ask for its image.
    NoImage(ItemId),
    /// `item_seq` is not the previous one + 1: an update was missed. The item is now stale.
    SequenceGap {
        item: ItemId,
        expected: u32,
        found: u32,
    },
    /// The merged image would not fit in one REFRESH. The item is now stale.
    ImageTooLarge(ItemId),
}

/// Why a REFRESH was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshRefused {
    /// A new item, and the cache already holds `max_items`.
    CacheFull,
}

/// Items by (service, name), with their images.
#[derive(Debug)]
pub struct Cache {
    max_items: usize,
    /// Service names, by [`ServiceId`].
    services: Vec<Box<str>>,
    /// Item `id` is at index `id - 1`.
    items: Vec<Item>,
    /// Per service: items by name (ordered, so a glob answers in name order).
    by_name: Vec<BTreeMap<Box<str>, ItemId>>,
    scratch: Vec<u8>,
}

impl Cache {
    /// A cache for the services named `services` (a [`ServiceId`] is an index in it).
    pub fn new(services: &[String], max_items: usize) -> Cache {
        Cache {
            max_items,
            services: services.iter().map(|s| s.as_str().into()).collect(),
            items: Vec::new(),
            by_name: vec![BTreeMap::new(); services.len()],
            scratch: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, id: ItemId) -> Option<&Item> {
        self.items.get((id as usize).wrapping_sub(1))
    }

    fn get_mut(&mut self, id: ItemId) -> Option<&mut Item> {
        self.items.get_mut((id as usize).wrapping_sub(1))
    }

    pub fn by_name(&self, service: ServiceId, name: &str) -> Option<ItemId> {
        self.by_name.get(service.index())?.get(name).copied()
    }

    /// The items of a service, by name.
    pub fn items_of(&self, service: ServiceId) -> impl Iterator<Item = (&str, ItemId)> + '_ {
        self.by_name
            .get(service.index())
            .into_iter()
            .flat_map(|m| m.iter().map(|(n, &id)| (&**n, id)))
    }

    /// Applies a checked REFRESH from a feed of `service`: the item (created if new) gets its
    /// image replaced and state `ok`. Returns the item and whether it is new.
    pub fn apply_refresh<T: AsRef<[u8]>>(
        &mut self,
        service: ServiceId,
        refresh: &RefreshView<T>,
    ) -> Result<(ItemId, bool), RefreshRefused> {
        let s = service.index();
        let name = core::str::from_utf8(refresh.name_bytes()).unwrap_or("");
        let (id, new) = match self.by_name[s].get(name) {
            Some(&id) => (id, false),
            None => {
                if self.items.len() >= self.max_items {
                    return Err(RefreshRefused::CacheFull);
                }
                let id = self.items.len() as ItemId + 1;
                self.items.push(Item {
                    service,
                    name: name.into(),
                    state: ItemState::Ok,
                    item_seq: 0,
                    timestamp_ns: 0,
                    image_requested_at_ns: None,
                    image: Vec::new(),
                    field_count: 0,
                });
                self.by_name[s].insert(name.into(), id);
                (id, true)
            }
        };
        let item = &mut self.items[id as usize - 1];
        item.state = ItemState::Ok;
        item.item_seq = refresh.item_seq();
        item.timestamp_ns = refresh.timestamp_ns();
        item.image_requested_at_ns = None;
        item.image.clear();
        item.image.extend_from_slice(refresh.field_bytes());
        item.field_count = refresh.field_count();
        Ok((id, new))
    }

    /// Applies a checked UPDATE of item `id` (see [`UpdateOutcome`]).
    pub fn apply_update(
        &mut self,
        id: ItemId,
        item_seq: u32,
        timestamp_ns: u64,
        fields: WireFields<'_>,
    ) -> UpdateOutcome {
        let Some(service) = self.get(id).map(|i| i.service) else {
            return UpdateOutcome::NoImage(id);
        };
        let service_len = self.service_name(service).len();
        let item = &mut self.items[id as usize - 1];
        let max_image = MAX_MESSAGE_LEN - fields_offset(service_len, item.name.len());
        if item.state != ItemState::Ok {
            return UpdateOutcome::NoImage(id);
        }
        let expected = item.item_seq.wrapping_add(1);
        if item_seq != expected {
            item.state = ItemState::Stale;
            return UpdateOutcome::SequenceGap {
                item: id,
                expected,
                found: item_seq,
            };
        }
        if !merge_fields(
            &mut item.image,
            &mut item.field_count,
            fields,
            &mut self.scratch,
            max_image,
        ) {
            item.state = ItemState::Stale;
            return UpdateOutcome::ImageTooLarge(id);
        }
        item.item_seq = item_seq;
        item.timestamp_ns = timestamp_ns;
        UpdateOutcome::Applied(id)
    }

    /// The name of a service.
    pub fn service_name(&self, service: ServiceId) -> &str {
        self.services.get(service.index()).map_or("", |s| s)
    }

    /// Sets an item's state from the feed's STATUS or from the distributor's own judgement
    /// (`Stale`, `Closed`; `Closed` drops the image). Returns the previous state.
    pub fn set_state(&mut self, id: ItemId, state: ItemState) -> Option<ItemState> {
        let item = self.get_mut(id)?;
        let old = item.state;
        item.state = state;
        if state == ItemState::Closed {
            item.image = Vec::new();
            item.field_count = 0;
        }
        Some(old)
    }

    /// Records that the item's image was asked for at `now_ns`.
    pub fn set_image_requested(&mut self, id: ItemId, now_ns: u64) {
        if let Some(item) = self.get_mut(id) {
            item.image_requested_at_ns = Some(now_ns);
        }
    }

    /// Appends a REFRESH of item `id` (its image, the distributor's id) to `out`; returns its
    /// length, 0 if there is no such item.
    pub fn encode_refresh(&self, id: ItemId, flags: u8, out: &mut Vec<u8>) -> usize {
        let Some(item) = self.get(id) else { return 0 };
        let service = self.service_name(item.service);
        let len = item.refresh_len(service.len());
        let at = out.len();
        out.resize(at + len, 0);
        let b = &mut out[at..];
        crate::codec::header::emit_header(b, MessageType::Refresh, flags, id, len);
        b[8..16].copy_from_slice(&item.timestamp_ns.to_le_bytes());
        b[16..20].copy_from_slice(&item.item_seq.to_le_bytes());
        b[20..22].copy_from_slice(&item.field_count.to_le_bytes());
        let fields_at = emit_names(b, service, &item.name);
        b[fields_at..].copy_from_slice(&item.image);
        len
    }

    /// Appends a STATUS of item `id` in `state` to `out`; returns its length.
    pub fn encode_status(
        &self,
        id: ItemId,
        request_id: u32,
        state: ItemState,
        text: &str,
        out: &mut Vec<u8>,
    ) -> usize {
        let Some(item) = self.get(id) else { return 0 };
        encode_status(
            &StatusRepr {
                item_id: id,
                request_id,
                state,
                service: self.service_name(item.service),
                name: &item.name,
                text: truncate(text, 255),
            },
            out,
        )
    }

    /// What the cache holds, for bounds checks.
    pub fn image_bytes(&self) -> usize {
        self.items.iter().map(|i| i.image.capacity()).sum()
    }
}

/// Appends an encoded STATUS to `out`; returns its length.
pub(crate) fn encode_status(repr: &StatusRepr<'_>, out: &mut Vec<u8>) -> usize {
    let len = repr.buffer_len();
    let at = out.len();
    out.resize(at + len, 0);
    repr.emit(&mut StatusView::new_unchecked(&mut out[at..]));
    len
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{FieldList, RefreshRepr, UpdateRepr, UpdateView};
    use crate::model::{Field, Price, Value};

    const S: ServiceId = ServiceId(0);

    fn refresh(feed_id: u32, name: &str, seq: u32, fields: &[Field<'_>]) -> Vec<u8> {
        let repr = RefreshRepr {
            item_id: feed_id,
            flags: 0,
            timestamp_ns: 1,
            item_seq: seq,
            service: "FEED1",
            name,
            fields: FieldList::List(fields),
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut RefreshView::new_unchecked(&mut b[..]));
        b
    }

    fn update(cache: &mut Cache, item: ItemId, seq: u32, fields: &[Field<'_>]) -> UpdateOutcome {
        let repr = UpdateRepr {
            item_id: item,
            timestamp_ns: 2,
            item_seq: seq,
            fields: FieldList::List(fields),
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut UpdateView::new_unchecked(&mut b[..]));
        let Ok(crate::codec::Message::Update(u)) = crate::codec::Message::parse(&b) else {
            panic!()
        };
        let FieldList::Wire(w) = u.fields else {
            panic!()
        };
        cache.apply_update(item, seq, 2, w)
    }

    fn price(m: i64) -> Value<'static> {
        Value::Price(Price {
            mantissa: m,
            exponent: -2,
        })
    }

    fn image_of(cache: &Cache, id: ItemId) -> Vec<(u16, String)> {
        let item = cache.get(id).unwrap();
        let mut out = Vec::new();
        cache.encode_refresh(id, 0, &mut out);
        let Ok(crate::codec::Message::Refresh(r)) = crate::codec::Message::parse(&out) else {
            panic!("cache encodes a valid REFRESH")
        };
        assert_eq!(r.item_id, id);
        assert_eq!(r.fields.count(), usize::from(item.field_count()));
        r.fields
            .iter()
            .map(|f| (f.fid, format!("{:?}", f.value)))
            .collect()
    }

    #[test]
    fn an_update_merges_in_place_or_appends_new_fields() {
        let mut cache = Cache::new(&["FEED1".into()], 10);
        let b = refresh(
            70,
            "AAPL.O",
            5,
            &[Field::new(22, price(100)), Field::new(25, price(101))],
        );
        let (id, new) = cache
            .apply_refresh(S, &RefreshView::new_checked(&b[..]).unwrap())
            .unwrap();
        assert!(new && id == 1);
        assert_eq!(
            update(&mut cache, 1, 6, &[Field::new(25, price(102))]),
            UpdateOutcome::Applied(1)
        );
        assert_eq!(
            update(
                &mut cache,
                1,
                7,
                &[Field::new(30, Value::Int(9)), Field::new(22, price(99))]
            ),
            UpdateOutcome::Applied(1)
        );
        assert_eq!(
            image_of(&cache, 1),
            [
                (22, format!("{:?}", price(99))),
                (25, format!("{:?}", price(102))),
                (30, "Int(9)".to_string())
            ]
        );
        // A string field of another length is rebuilt, not overwritten.
        update(&mut cache, 1, 8, &[Field::new(3, Value::Str("A"))]);
        update(&mut cache, 1, 9, &[Field::new(3, Value::Str("LONGER"))]);
        assert_eq!(image_of(&cache, 1)[3], (3, "Str(\"LONGER\")".to_string()));
    }

    #[test]
    fn an_update_for_an_unknown_stale_or_out_of_sequence_item_is_not_applied() {
        let mut cache = Cache::new(&["FEED1".into()], 10);
        assert_eq!(update(&mut cache, 1, 1, &[]), UpdateOutcome::NoImage(1));
        let b = refresh(70, "AAPL.O", 5, &[Field::new(22, price(100))]);
        cache
            .apply_refresh(S, &RefreshView::new_checked(&b[..]).unwrap())
            .unwrap();
        assert_eq!(
            update(&mut cache, 1, 7, &[Field::new(22, price(1))]),
            UpdateOutcome::SequenceGap {
                item: 1,
                expected: 6,
                found: 7
            }
        );
        assert_eq!(cache.get(1).unwrap().state, ItemState::Stale);
        assert_eq!(update(&mut cache, 1, 6, &[]), UpdateOutcome::NoImage(1));
        assert_eq!(image_of(&cache, 1)[0], (22, format!("{:?}", price(100))));
    }

    #[test]
    fn item_ids_are_stable_and_the_cache_is_bounded() {
        let mut cache = Cache::new(&["FEED1".into()], 2);
        for (feed_id, name) in [(1, "A"), (2, "B"), (1, "A")] {
            let b = refresh(feed_id, name, 1, &[]);
            cache
                .apply_refresh(S, &RefreshView::new_checked(&b[..]).unwrap())
                .unwrap();
        }
        assert_eq!(cache.len(), 2);
        let b = refresh(3, "C", 1, &[]);
        assert_eq!(
            cache.apply_refresh(S, &RefreshView::new_checked(&b[..]).unwrap()),
            Err(RefreshRefused::CacheFull)
        );
        // A restarted feed numbers B as 1: B keeps its distributor id.
        let b = refresh(1, "B", 1, &[]);
        let (id, new) = cache
            .apply_refresh(S, &RefreshView::new_checked(&b[..]).unwrap())
            .unwrap();
        assert_eq!((id, new), (2, false));
    }
}
