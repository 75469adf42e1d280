//! The backbone's inputs: each service's feeds (one, or A/B) joining, leaving and losing
//! data, their REFRESH, UPDATE and STATUS applied to the cache, items and services going
//! stale, and the image requests that recover them.

use super::cache::{encode_status, ItemId, RefreshRefused, UpdateOutcome};
use super::client::ClientId;
use super::entitle::glob_match;
use super::errors::{BackboneError, Event, StaleCause};
use super::feeds::{FeedKey, RefreshVerdict, UpdateVerdict};
use super::{Distributor, ImageRequest, ServiceId, MAX_UNKNOWN_REQUESTS};
use crate::codec::header::Header;
use crate::codec::{
    FieldList, MdError, Message, MessageType, RefreshView, StatusRepr, StatusView, UpdateRepr,
    UpdateView,
};
use crate::model::ItemState;

impl Distributor {
    /// One message from the backbone of `service` (one Peregrine message: exactly one market
    /// data message), from its only feed: [`handle_feed_message`](Self::handle_feed_message)
    /// with feed 0.
    pub fn handle_backbone_message(&mut self, service: ServiceId, bytes: &[u8], now_ns: u64) {
        self.handle_feed_message(service, 0, bytes, now_ns);
    }

    /// One message from the backbone of `service`, sent by `feed` (the driver's name for it:
    /// its transport session). A feed heard for the first time is live from now.
    pub fn handle_feed_message(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        bytes: &[u8],
        now_ns: u64,
    ) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.backbone_messages += 1;
        let ty = match Header::new_checked(bytes).and_then(|h| {
            if usize::from(h.length()) != bytes.len() {
                return Err(MdError::BadLength {
                    length: h.length(),
                    reason: "a backbone message must be exactly one message",
                });
            }
            h.message_type()
        }) {
            Ok(ty) => ty,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        // A feed's message proves it live, though the transport may report its session after
        // the first messages: the directory says `up` before any of its data is passed on.
        if matches!(
            ty,
            MessageType::Update | MessageType::Refresh | MessageType::Status
        ) {
            self.feeds.join(service, feed);
            if !self.services[service.index()].up {
                self.set_up(service, true);
            }
        }
        match ty {
            MessageType::Update => self.on_update(service, feed, bytes, now_ns),
            MessageType::Refresh => self.on_refresh(service, feed, bytes),
            MessageType::Status => self.on_feed_status(service, feed, bytes),
            MessageType::Ack => match Message::parse(bytes) {
                Ok(Message::Ack(ack)) => self.on_backbone_ack(service, &ack),
                Ok(_) => unreachable!("the header said ACK"),
                Err(e) => self.backbone_rejected(service, BackboneError::Malformed(e)),
            },
            other => self.backbone_rejected(service, BackboneError::NotFromFeeds(other)),
        }
        self.reap();
    }

    /// The backbone of `service` lost messages the transport could not repair: every item
    /// goes stale to its watchers and every image is asked for. ([`feed_lost`](Self::feed_lost)
    /// with feed 0.)
    pub fn handle_backbone_loss(&mut self, service: ServiceId, now_ns: u64) {
        self.feed_lost(service, 0, now_ns);
    }

    /// `feed` of `service` lost messages the transport could not repair. Covered (nothing
    /// goes stale) when another feed is live and had no loss within `feed_loss_overlap_ns`;
    /// otherwise every item goes stale to its watchers and every image is asked for.
    pub fn feed_lost(&mut self, service: ServiceId, feed: FeedKey, now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.backbone_losses += 1;
        if self
            .feeds
            .lost(service, feed, now_ns, self.config.feed_loss_overlap_ns)
        {
            self.counters.feed_losses_covered += 1;
            return;
        }
        self.service_stale(service, StaleCause::BackboneLoss);
        self.request_image(service, feed, None, now_ns, true);
        self.reap();
    }

    /// Every feed of `service` went away (its session ended or died): every item goes stale
    /// to its watchers, and the feeds' item ids are forgotten.
    pub fn feed_gone(&mut self, service: ServiceId, _now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        self.counters.feeds_gone += 1;
        self.feeds.leave_all(service);
        self.set_up(service, false);
        self.service_stale(service, StaleCause::FeedGone);
        self.services[service.index()].unknown_requested.clear();
        self.reap();
    }

    /// `feed` of `service` went away (its session ended or died). The last one: as
    /// [`feed_gone`](Self::feed_gone). Otherwise the items no other feed has an ok route to go
    /// stale (and their images are asked for), and when every remaining feed had a loss
    /// within `feed_loss_overlap_ns`, the whole service does: what the gone feed carried of
    /// their losses is gone with it.
    pub fn feed_left(&mut self, service: ServiceId, feed: FeedKey, now_ns: u64) {
        if service.index() >= self.services.len() {
            return;
        }
        let Some(items) = self.feeds.leave(service, feed) else {
            return;
        };
        if self.feeds.count(service) == 0 {
            return self.feed_gone(service, now_ns);
        }
        self.counters.feeds_gone += 1;
        // Gaps that waited for the gone feed: judged now.
        self.expire_gaps(now_ns, true);
        if self
            .feeds
            .all_lossy(service, now_ns, self.config.feed_loss_overlap_ns)
        {
            self.service_stale(service, StaleCause::BackboneLoss);
            self.request_image(service, feed, None, now_ns, true);
            return self.reap();
        }
        let orphans: Vec<ItemId> = items
            .into_iter()
            .filter(|&item| {
                !self.feeds.other_ok(service, feed, item)
                    && self
                        .cache
                        .get(item)
                        .is_some_and(|i| i.state == ItemState::Ok)
            })
            .collect();
        for &item in &orphans {
            self.went_stale(item, "its feed went away: waiting for another");
        }
        if !orphans.is_empty() {
            self.request_image(service, feed, None, now_ns, false);
        }
        self.reap();
    }

    /// A feed of `service` appeared (at start, or after [`feed_gone`](Self::feed_gone)):
    /// [`feed_joined`](Self::feed_joined) with feed 0.
    pub fn feed_back(&mut self, service: ServiceId, from_start: bool, now_ns: u64) {
        self.feed_joined(service, 0, from_start, now_ns);
    }

    /// `feed` of `service` appeared.
    ///
    /// `from_start`: the backbone delivers the feed's session from its first message (the
    /// transport's `Connected { first_sequence: 0 }`), so every image the feed has published
    /// reaches the cache in order, and any loss after it is reported by
    /// [`feed_lost`](Self::feed_lost): nothing is asked for, and a feed that sends its images
    /// at start-up sends each once. Otherwise (the session was joined in its middle) every
    /// image is asked for. Either way an UPDATE of an item without an image asks for that
    /// item's.
    pub fn feed_joined(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        from_start: bool,
        now_ns: u64,
    ) {
        if service.index() >= self.services.len() {
            return;
        }
        self.feeds.join(service, feed);
        self.set_up(service, true);
        if from_start {
            self.counters.feeds_joined_at_start += 1;
            return;
        }
        self.request_image(service, feed, None, now_ns, true);
    }

    /// The feeds of `service` live now (the driver's keys).
    pub fn feeds_of(&self, service: ServiceId) -> impl Iterator<Item = FeedKey> + '_ {
        self.feeds.keys(service)
    }

    pub(super) fn backbone_rejected(&mut self, service: ServiceId, error: BackboneError) {
        self.counters.backbone_rejected += 1;
        self.push_event(Event::BackboneRejected { service, error });
    }

    pub(super) fn on_update(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        bytes: &[u8],
        now_ns: u64,
    ) {
        let update = match UpdateRepr::parse(&UpdateView::new_unchecked(bytes)) {
            Ok(u) => u,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        let FieldList::Wire(fields) = update.fields else {
            return; // a parsed UPDATE's fields are always the wire's
        };
        let feed_id = update.item_id;
        let item =
            match self
                .feeds
                .judge_update(service, feed, feed_id, update.item_seq, &self.cache)
            {
                UpdateVerdict::Apply(item) => item,
                UpdateVerdict::Unknown => {
                    self.counters.updates_without_image += 1;
                    return self.request_image(service, feed, Some(feed_id), now_ns, false);
                }
                UpdateVerdict::Duplicate(_) => {
                    self.counters.updates_duplicate += 1;
                    return;
                }
                UpdateVerdict::Ahead { item, needed } => {
                    self.counters.updates_ahead += 1;
                    let deadline = now_ns.saturating_add(self.config.feed_gap_window_ns);
                    self.feeds.wait_for(item, needed, deadline);
                    return;
                }
            };
        let outcome = self
            .cache
            .apply_update(item, update.item_seq, update.timestamp_ns, fields);
        let item = match outcome {
            UpdateOutcome::Applied(item) => item,
            UpdateOutcome::NoImage(_) => {
                self.counters.updates_without_image += 1;
                return self.request_image(service, feed, Some(feed_id), now_ns, false);
            }
            UpdateOutcome::SequenceGap {
                item,
                expected,
                found,
            } => {
                self.counters.sequence_gaps += 1;
                let text = format!("missed an update (item_seq {found}, expected {expected})");
                self.went_stale(item, &text);
                return self.request_image(service, feed, Some(feed_id), now_ns, false);
            }
            UpdateOutcome::ImageTooLarge(item) => {
                self.went_stale(item, "the image no longer fits in one REFRESH");
                return;
            }
        };
        self.counters.updates_applied += 1;
        // Decoded once: the bytes are copied once, re-stamped once, and the same slice is
        // listed with every watcher.
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.extend_from_slice(bytes);
        Header::new_unchecked(&mut buf[from..]).set_item_id(item);
        self.fan_out(item, from, true);
    }

    pub(super) fn on_refresh(&mut self, service: ServiceId, feed: FeedKey, bytes: &[u8]) {
        let view = match RefreshView::new_checked(bytes) {
            Ok(v) => v,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        if view.service_bytes() != self.service_name(service).as_bytes() {
            return self.backbone_rejected(service, BackboneError::WrongService);
        }
        // The image the watchers already have (a provider answering an image request with
        // the image as of the last message applied): nothing is sent to them.
        let name = core::str::from_utf8(view.name_bytes()).unwrap_or("");
        let known = self.cache.by_name(service, name);
        let repeated = known.and_then(|id| self.cache.get(id)).is_some_and(|i| {
            i.state == ItemState::Ok
                && i.item_seq == view.item_seq()
                && i.image() == view.field_bytes()
        });
        if let Some(item) = known.filter(|_| !repeated) {
            let verdict = self.feeds.judge_refresh(
                service,
                feed,
                item,
                view.item_seq(),
                view.field_bytes(),
                &self.cache,
            );
            if verdict != RefreshVerdict::Apply {
                // Another feed is as far: this feed is given its route, the image stays.
                self.feeds
                    .set_route(service, feed, view.item_id(), item, view.item_seq());
                self.counters.refreshes_behind += 1;
                if let RefreshVerdict::Disagrees { item_seq } = verdict {
                    self.counters.feed_disagreements += 1;
                    self.push_event(Event::FeedsDisagree {
                        service,
                        item: name.to_string(),
                        item_seq,
                    });
                }
                return;
            }
        }
        let (item, new) = match self.cache.apply_refresh(service, &view) {
            Ok(r) => r,
            Err(RefreshRefused::CacheFull) => {
                self.counters.cache_full += 1;
                return;
            }
        };
        if !self
            .feeds
            .set_route(service, feed, view.item_id(), item, view.item_seq())
        {
            self.counters.routes_refused += 1;
        }
        self.counters.refreshes_applied += 1;
        if repeated {
            return;
        }
        if new {
            self.watchers.push(Vec::new());
            self.open_new_item(service, item);
        }
        let from = self.outbox.buffer().len();
        self.cache.encode_refresh(item, 0, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// A new item: every open request of its service whose glob or exact name matches it (and
    /// whose user may see it) opens it.
    pub(super) fn open_new_item(&mut self, service: ServiceId, item: ItemId) {
        let Some(name) = self.cache.get(item).map(|i| i.name.clone()) else {
            return;
        };
        let mut matches = Vec::new();
        for c in self.clients.iter() {
            let Some(user) = c.user().and_then(|u| self.users.get(u)) else {
                continue;
            };
            if !user.may_see_item(&name) {
                continue;
            }
            for (&rid, r) in &c.requests {
                let hit = r.service == service
                    && (r.exact.iter().any(|e| **e == *name)
                        || r.globs
                            .iter()
                            .any(|g| glob_match(g.as_bytes(), name.as_bytes())));
                if hit {
                    matches.push((c.id, rid));
                }
            }
        }
        for (id, rid) in matches {
            self.watch(id, rid, item);
        }
    }

    pub(super) fn on_feed_status(&mut self, service: ServiceId, feed: FeedKey, bytes: &[u8]) {
        let status = match StatusRepr::parse(&StatusView::new_unchecked(bytes)) {
            Ok(s) => s,
            Err(e) => return self.backbone_rejected(service, BackboneError::Malformed(e)),
        };
        let Some(item) = self
            .feeds
            .route(service, feed, status.item_id)
            .map(|r| r.item)
        else {
            return self.backbone_rejected(service, BackboneError::UnknownItem(status.item_id));
        };
        let state = match status.state {
            ItemState::Ok | ItemState::Stale | ItemState::Closed => status.state,
            ItemState::NotFound => ItemState::Closed,
            other => return self.backbone_rejected(service, BackboneError::BadState(other)),
        };
        if state != ItemState::Ok {
            self.feeds.set_ok(service, feed, status.item_id, false);
            if self.feeds.other_ok(service, feed, item) {
                // Another feed carries the item: this feed's word holds for its route only.
                self.counters.statuses_covered += 1;
                return;
            }
        }
        let old = self.cache.get(item).map(|i| i.state);
        match state {
            // Only a REFRESH brings an image back: an `ok` from the feed is passed on while
            // the item is ok, and changes nothing.
            ItemState::Ok if old != Some(ItemState::Ok) => return,
            ItemState::Ok => {}
            ItemState::Stale if old != Some(ItemState::Ok) => return,
            _ => {
                if state == ItemState::Stale {
                    self.counters.items_stale += 1;
                }
                self.cache.set_state(item, state);
            }
        }
        let from = self.outbox.buffer().len();
        self.cache
            .encode_status(item, 0, state, status.text, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// Makes an ok item stale and tells its watchers.
    /// Items that waited for an update another feed never sent (deadline passed, or `all`:
    /// a feed left) go stale and their images are asked for.
    pub(super) fn expire_gaps(&mut self, now_ns: u64, all: bool) {
        for (item, needed) in self.feeds.expired(now_ns, all, &self.cache) {
            self.counters.sequence_gaps += 1;
            let text = format!("missed an update (item_seq {needed}): no feed sent it");
            self.went_stale(item, &text);
            let Some(service) = self.cache.get(item).map(|i| i.service) else {
                continue;
            };
            // Asked of the first feed that routes it (the request goes to every feed).
            let route = self
                .feeds
                .keys(service)
                .find_map(|k| Some((k, self.feeds.feed_id_of(service, k, item)?)));
            if let Some((feed, fid)) = route {
                self.request_image(service, feed, Some(fid), now_ns, false);
            } else {
                self.request_image(service, 0, None, now_ns, false);
            }
        }
    }

    pub(super) fn went_stale(&mut self, item: ItemId, text: &str) {
        if self.cache.set_state(item, ItemState::Stale).is_none() {
            return;
        }
        self.counters.items_stale += 1;
        let from = self.outbox.buffer().len();
        self.cache
            .encode_status(item, 0, ItemState::Stale, text, self.outbox.buffer());
        self.fan_out(item, from, false);
    }

    /// A service goes up or down: each version 2 client is sent the change.
    pub(super) fn set_up(&mut self, service: ServiceId, up: bool) {
        if std::mem::replace(&mut self.services[service.index()].up, up) == up {
            return;
        }
        let v2: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|c| c.version >= 2 && c.user().is_some() && !c.closing())
            .map(|c| c.id)
            .collect();
        for id in v2 {
            self.send_directory(id, Some(service));
        }
    }

    pub(super) fn service_stale(&mut self, service: ServiceId, cause: StaleCause) {
        let ok: Vec<ItemId> = self
            .cache
            .items_of(service)
            .map(|(_, id)| id)
            .filter(|&id| self.cache.get(id).is_some_and(|i| i.state == ItemState::Ok))
            .collect();
        let text = match cause {
            StaleCause::BackboneLoss => "backbone loss: waiting for a fresh image",
            StaleCause::FeedGone => "the feed went away: waiting for it to come back",
        };
        // Version 2 clients get one group STATUS for the service instead of one per item.
        self.grouping = true;
        for &item in &ok {
            self.went_stale(item, text);
        }
        self.grouping = false;
        let mut grouped = std::mem::take(&mut self.grouped);
        grouped.sort_unstable();
        grouped.dedup();
        let name = self.service_name(service).to_string();
        for id in grouped.drain(..) {
            let from = self.outbox.buffer().len();
            encode_status(
                &StatusRepr {
                    item_id: 0,
                    request_id: 0,
                    state: ItemState::Stale,
                    service: &name,
                    name: "*",
                    text,
                },
                self.outbox.buffer(),
            );
            self.counters.group_statuses += 1;
            self.queue_control(id, from);
        }
        self.grouped = grouped;
        self.push_event(Event::ServiceStale {
            service,
            items: ok.len(),
            cause,
        });
    }

    /// Asks the feed of `service` for the image of `feed_id` (`None`: every item), unless it
    /// was asked for less than `image_retry_ns` ago (`force` asks anyway).
    pub(super) fn request_image(
        &mut self,
        service: ServiceId,
        feed: FeedKey,
        feed_id: Option<u32>,
        now_ns: u64,
        force: bool,
    ) {
        let retry = self.config.image_retry_ns;
        let recent = |at: Option<u64>| at.is_some_and(|t| now_ns.saturating_sub(t) < retry);
        let svc = &mut self.services[service.index()];
        if !force && recent(svc.all_requested_at_ns) {
            return;
        }
        let item_id = match feed_id {
            None => {
                svc.all_requested_at_ns = Some(now_ns);
                svc.unknown_requested.clear();
                0
            }
            Some(fid) => match self.feeds.route(service, feed, fid).map(|r| r.item) {
                Some(item) => {
                    if recent(self.cache.get(item).and_then(|i| i.image_requested_at_ns)) {
                        return;
                    }
                    self.cache.set_image_requested(item, now_ns);
                    fid
                }
                None => {
                    if recent(svc.unknown_requested.get(&fid).copied()) {
                        return;
                    }
                    if svc.unknown_requested.len() >= MAX_UNKNOWN_REQUESTS {
                        svc.unknown_requested
                            .retain(|_, &mut at| now_ns.saturating_sub(at) < retry);
                    }
                    if svc.unknown_requested.len() >= MAX_UNKNOWN_REQUESTS {
                        // Too many unknown items at once: one request for everything.
                        return self.request_image(service, feed, None, now_ns, false);
                    }
                    svc.unknown_requested.insert(fid, now_ns);
                    fid
                }
            },
        };
        self.next_request_id = self.next_request_id.wrapping_add(1);
        self.counters.image_requests += 1;
        self.image_requests.push_back(ImageRequest {
            service,
            feed_item_id: item_id,
            request_id: self.next_request_id,
        });
    }
}
