//! The distributors' image requests: one item's, or a full refresh cycle (one in flight at a
//! time, rate-limited), answered with solicited REFRESHes as the backbone takes them.

use super::{Prepared, PreparedKind, ProviderCore};
use crate::codec::fields::WireFields;
use crate::codec::{
    refresh_flags, FieldList, ImageRequestRepr, ImageRequestView, Message, RefreshRepr,
};

impl ProviderCore {
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
    pub(super) fn on_image_request(&mut self, bytes: &[u8], now_ns: u64) {
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

    pub(super) fn request_full_cycle(&mut self, now_ns: u64) {
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

    pub(super) fn start_full_cycle(&mut self, now_ns: u64) {
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
    pub(super) fn queue_item(&mut self, index: usize) -> bool {
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

    pub(super) fn pop_queue(&mut self) {
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
