//! The application's messages: REFRESH, UPDATE and STATUS checked against the dictionary and
//! the item's numbering, encoded as [`Prepared`](super::Prepared), and committed once sent.

use super::config::ProvideError;
use super::{Prepared, PreparedKind, ProvidedItem, ProviderCore};
use crate::codec::fields::{merge_fields, WireFields};
use crate::codec::header::MAX_MESSAGE_LEN;
use crate::codec::{
    FieldList, Message, RefreshRepr, RefreshView, StatusRepr, UpdateRepr, UpdateView,
};
use crate::model::{check_item_name, Field, ItemState};

/// Marks a [`Prepared`](super::Prepared) REFRESH of an item that does not exist yet.
const NEW_ITEM: usize = 1 << (usize::BITS - 1);

impl ProviderCore {
    pub(super) fn check_fields(
        &self,
        item: &str,
        fields: &[Field<'_>],
    ) -> Result<(), ProvideError> {
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
    pub(super) fn encode(
        out: &mut Vec<u8>,
        item: &str,
        message: Message<'_>,
    ) -> Result<(), ProvideError> {
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
    pub(super) fn check_seq(&self, index: usize, given: u32) -> Result<u32, ProvideError> {
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

    pub(super) fn refresh_numbered(
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

    pub(super) fn update_numbered(
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
}
