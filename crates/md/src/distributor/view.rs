//! Views: a request may ask for some fields only. Per client and item the distributor keeps
//! the views of the requests holding the item; the client is sent their union, or every field
//! when one of its requests holding the item has no view. REFRESHes and UPDATEs for a viewing
//! client are re-encoded with the viewed fields only, once per distinct view (not once per
//! client); an UPDATE that changes none of them is not sent.

use super::cache::ItemId;
use crate::codec::refresh::refresh_flags;
use crate::codec::{FieldList, Message};
use crate::model::Field;
use std::collections::HashMap;
use std::sync::Arc;

/// A view: field ids, sorted, none twice.
pub type View = Arc<[u16]>;

/// Makes a view of field ids in any order.
pub fn view_of(ids: impl Iterator<Item = u16>) -> View {
    let mut v: Vec<u16> = ids.collect();
    v.sort_unstable();
    v.dedup();
    v.into()
}

/// The views of the requests of one client holding one item.
#[derive(Debug, Clone, Default)]
pub(crate) struct ViewHold {
    /// One per holding request with a view.
    pub views: Vec<View>,
    /// What the client is sent: `None` for every field.
    pub effective: Option<View>,
}

/// A client's views, by item: only items held by at least one request with a view.
#[derive(Debug, Clone, Default)]
pub(crate) struct Views {
    holds: HashMap<ItemId, ViewHold>,
}

impl Views {
    pub fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }

    /// The fields the client is sent of `item` (`None`: all).
    pub fn effective(&self, item: ItemId) -> Option<&View> {
        if self.holds.is_empty() {
            return None;
        }
        self.holds.get(&item)?.effective.as_ref()
    }

    /// A request holding `item` with `view` was added (`holders`: the requests holding it
    /// now, this one included). Returns whether the client's fields of it changed.
    pub fn add(&mut self, item: ItemId, view: Option<&View>, holders: u32) -> bool {
        if view.is_none() && !self.holds.contains_key(&item) {
            return false;
        }
        let h = self.holds.entry(item).or_default();
        if let Some(v) = view {
            h.views.push(v.clone());
        }
        Self::recompute(h, holders)
    }

    /// A request holding `item` with `view` let it go (`holders`: the requests holding it
    /// now). Returns whether the client's fields of it changed.
    pub fn remove(&mut self, item: ItemId, view: Option<&View>, holders: u32) -> bool {
        let Some(h) = self.holds.get_mut(&item) else {
            return false;
        };
        if let Some(v) = view {
            if let Some(at) = h.views.iter().position(|x| Arc::ptr_eq(x, v) || **x == **v) {
                h.views.swap_remove(at);
            }
        }
        if h.views.is_empty() {
            let had = h.effective.is_some();
            self.holds.remove(&item);
            return had;
        }
        Self::recompute(h, holders)
    }

    fn recompute(h: &mut ViewHold, holders: u32) -> bool {
        let effective = if holders as usize > h.views.len() {
            None
        } else if h.views.len() == 1 {
            Some(h.views[0].clone())
        } else {
            Some(view_of(h.views.iter().flat_map(|v| v.iter().copied())))
        };
        let changed = match (&h.effective, &effective) {
            (None, None) => false,
            (Some(a), Some(b)) => **a != **b,
            _ => true,
        };
        h.effective = effective;
        changed
    }
}

/// Appends `message` (a REFRESH or UPDATE) to `out` with the fields of `view` only, a REFRESH
/// flagged VIEW. Returns false, appending nothing, for an UPDATE that changes none of them;
/// any other message is appended as it is.
pub(crate) fn filtered(message: &[u8], view: &[u16], out: &mut Vec<u8>) -> bool {
    let keep = |f: &Field<'_>| view.binary_search(&f.fid).is_ok();
    match Message::parse(message) {
        Ok(Message::Update(mut u)) => {
            let fields: Vec<Field<'_>> = u.fields.iter().filter(keep).collect();
            if fields.is_empty() {
                return false;
            }
            u.fields = FieldList::List(&fields);
            Message::Update(u).emit_to_vec(out);
        }
        Ok(Message::Refresh(mut r)) => {
            let fields: Vec<Field<'_>> = r.fields.iter().filter(keep).collect();
            r.fields = FieldList::List(&fields);
            r.flags |= refresh_flags::VIEW;
            Message::Refresh(r).emit_to_vec(out);
        }
        _ => out.extend_from_slice(message),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::UpdateRepr;
    use crate::model::Value;

    #[test]
    fn the_union_is_sent_unless_a_holder_has_no_view() {
        let mut v = Views::default();
        let bid: View = view_of([22].into_iter());
        let ask: View = view_of([25, 22].into_iter());
        assert!(v.add(7, Some(&bid), 1));
        assert_eq!(v.effective(7).map(|x| &x[..]), Some(&[22][..]));
        assert!(v.add(7, Some(&ask), 2));
        assert_eq!(v.effective(7).map(|x| &x[..]), Some(&[22, 25][..]));
        assert!(v.add(7, None, 3), "a request with no view: every field");
        assert_eq!(v.effective(7), None);
        assert!(v.remove(7, None, 2));
        assert!(v.remove(7, Some(&ask), 1));
        assert_eq!(v.effective(7).map(|x| &x[..]), Some(&[22][..]));
        assert!(v.remove(7, Some(&bid), 0));
        assert!(v.is_empty());
    }

    #[test]
    fn an_update_is_cut_to_the_view_or_not_sent() {
        let fields = [
            Field::new(22, Value::Int(1)),
            Field::new(25, Value::Int(2)),
            Field::new(30, Value::Int(3)),
        ];
        let mut b = Vec::new();
        Message::Update(UpdateRepr {
            item_id: 1,
            timestamp_ns: 5,
            item_seq: 9,
            fields: FieldList::List(&fields),
        })
        .emit_to_vec(&mut b);
        let mut out = Vec::new();
        assert!(filtered(&b, &[25, 30], &mut out));
        let Ok(Message::Update(u)) = Message::parse(&out) else {
            panic!("an UPDATE");
        };
        assert_eq!(u.fields.iter().map(|f| f.fid).collect::<Vec<_>>(), [25, 30]);
        assert_eq!((u.item_seq, u.timestamp_ns), (9, 5));
        let mut none = Vec::new();
        assert!(!filtered(&b, &[31], &mut none));
        assert!(none.is_empty());
    }
}
