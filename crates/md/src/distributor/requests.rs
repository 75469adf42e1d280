//! A client's requests: OPEN (names, globs, snapshots, views), CLOSE, PAUSE and RESUME, the
//! dictionary and the directory; its watchlist kept with the watcher lists, and each answer
//! queued for it.

use super::cache::{encode_status, truncate, ItemId};
use super::client::{Client, ClientId, Request};
use super::entitle::glob_match;
use super::errors::{Event, RequestRejection};
use super::fanout::{admit, Admit};
use super::{view, DisconnectReason, Distributor, ServiceId};
use crate::codec::refresh::refresh_flags;
use crate::codec::{
    open_flags, DirectoryRepr, EntryList, Message, OpenRepr, ServiceEntry, StatusRepr,
};
use crate::model::{is_glob, ItemState};
use std::sync::Arc;

/// Removes one request's hold on `item`; the client stops watching it when none is left.
fn unwatch(c: &mut Client, item: ItemId, watchers: &mut [Vec<ClientId>]) {
    let Some(n) = c.watched.get_mut(&item) else {
        return;
    };
    *n -= 1;
    if *n > 0 {
        return;
    }
    c.watched.remove(&item);
    if let Some(conf) = c.conflation.as_mut() {
        conf.changed.remove(&item);
    }
    if let Some(w) = watchers.get_mut(item as usize - 1) {
        if let Some(at) = w.iter().position(|&x| x == c.id) {
            w.swap_remove(at);
        }
    }
}

impl Distributor {
    /// Answers one name of a request (or the request, with `name` empty) with a STATUS.
    pub(super) fn send_request_status(
        &mut self,
        id: ClientId,
        request_id: u32,
        service: &str,
        name: &str,
        state: ItemState,
        text: &str,
    ) {
        let from = self.outbox.buffer().len();
        encode_status(
            &StatusRepr {
                item_id: 0,
                request_id,
                state,
                service,
                name,
                text: truncate(text, 255),
            },
            self.outbox.buffer(),
        );
        self.queue_control(id, from);
    }

    pub(super) fn reject_request(
        &mut self,
        id: ClientId,
        request_id: u32,
        name: &str,
        why: RequestRejection,
    ) {
        self.counters.requests_rejected += 1;
        self.send_request_status(
            id,
            request_id,
            "",
            name,
            ItemState::Rejected,
            &why.to_string(),
        );
    }

    /// Queues the bytes from `from` to the end of the outbox to one client: an answer that is
    /// not conflated, so a client past its bound is disconnected instead.
    pub(super) fn queue_control(&mut self, id: ClientId, from: usize) {
        let len = self.outbox.buffer().len() - from;
        let max = self.config.max_queue_bytes;
        let Some(c) = self.clients.get_mut(id) else {
            self.outbox.buffer().truncate(from);
            return;
        };
        if c.closing() || c.queued_bytes.saturating_add(len) > max {
            let slow = !c.closing();
            self.outbox.buffer().truncate(from);
            if slow {
                self.counters.slow_disconnects += 1;
                self.push_event(Event::SlowDisconnect { client: id });
                self.close_client(id, DisconnectReason::Slow);
            }
            return;
        }
        c.queued_bytes += len;
        self.counters.bytes_queued += len as u64;
        self.outbox.send_to(from, id);
    }

    /// Queues the bytes from `from` to the end of the outbox, a message about `item`, to one
    /// client: conflated (remembered, not queued) when the client is behind.
    pub(super) fn queue_item(&mut self, id: ClientId, item: ItemId, from: usize) {
        let len = self.outbox.buffer().len() - from;
        let admit = match self.clients.get_mut(id) {
            Some(c) => admit(
                c,
                len,
                item,
                false,
                self.config.max_queue_bytes,
                &mut self.counters,
                &mut self.events,
            ),
            None => Admit::Skip,
        };
        match admit {
            Admit::Queue => self.outbox.send_to(from, id),
            Admit::Skip => self.outbox.buffer().truncate(from),
            Admit::Close => {
                self.outbox.buffer().truncate(from);
                self.close_client(id, DisconnectReason::Slow);
            }
        }
    }

    pub(super) fn on_open(&mut self, id: ClientId, open: &OpenRepr<'_>, _now_ns: u64) {
        let Some(c) = self.clients.get(id) else {
            return;
        };
        let Some(user) = c.user() else { return };
        let rid = open.request_id;
        let count = open.patterns.count();
        // A snapshot is answered and closed at once: it holds no request slot.
        let snapshot = open.flags & open_flags::SNAPSHOT != 0;
        if c.requests.contains_key(&rid) {
            return self.reject_request(id, rid, "", RequestRejection::IdInUse(rid));
        }
        if !snapshot && c.requests.len() >= self.config.max_requests_per_client {
            let max = self.config.max_requests_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyRequests { max });
        }
        if c.patterns + count > self.config.max_patterns_per_client {
            let max = self.config.max_patterns_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyPatterns { max });
        }
        // Globs are bounded before any is matched: their cost is paid per item.
        let globs_open: usize = c.requests.values().map(|r| r.globs.len()).sum();
        let globs_asked = open.patterns.iter().filter(|p| is_glob(p)).count();
        if globs_open + globs_asked > self.config.max_globs_per_client {
            let max = self.config.max_globs_per_client;
            return self.reject_request(id, rid, "", RequestRejection::TooManyGlobs { max });
        }
        let users = Arc::clone(&self.users);
        let Some(user) = users.get(user) else { return };
        let Some(service) = self.service_id(open.service) else {
            for p in open.patterns.iter() {
                self.counters.not_found += 1;
                let text = format!(
                    "service {} is not carried by this distributor",
                    open.service
                );
                self.send_request_status(id, rid, open.service, p, ItemState::NotFound, &text);
            }
            if snapshot {
                self.snapshot_done(id, rid, open.service);
            }
            return;
        };
        if !user.may_open_service(open.service) {
            for p in open.patterns.iter() {
                self.counters.not_entitled += 1;
                let text = format!("user {} may not open service {}", user.name, open.service);
                self.send_request_status(id, rid, open.service, p, ItemState::NotEntitled, &text);
            }
            if snapshot {
                self.snapshot_done(id, rid, open.service);
            }
            return;
        }
        let mut request = Request {
            service,
            globs: Vec::new(),
            exact: Vec::new(),
            items: Vec::new(),
            view: open.view.map(|v| view::view_of(v.iter())),
        };
        let mut to_watch = Vec::new();
        for p in open.patterns.iter() {
            if is_glob(p) {
                // The same glob twice in one request is one glob.
                if !request.globs.iter().any(|g| **g == *p) {
                    request.globs.push(p.into());
                }
            } else if !user.may_see_item(p) {
                self.counters.not_entitled += 1;
                let text = format!("user {} may not see {p}", user.name);
                self.send_request_status(id, rid, open.service, p, ItemState::NotEntitled, &text);
            } else {
                request.exact.push(p.into());
                match self.cache.by_name(service, p) {
                    Some(item) => to_watch.push(item),
                    None => {
                        self.counters.not_found += 1;
                        let text = if snapshot {
                            "not in the cache"
                        } else {
                            "not in the cache yet: kept open, its REFRESH follows if the feed \
                             publishes it"
                        };
                        self.send_request_status(
                            id,
                            rid,
                            open.service,
                            p,
                            ItemState::NotFound,
                            text,
                        );
                    }
                }
            }
        }
        // One pass over the service's items for all the request's globs: each item is listed
        // once, whatever the number of globs matching it (memory bounded by the items, never
        // globs x items).
        if !request.globs.is_empty() {
            to_watch.extend(
                self.cache
                    .items_of(service)
                    .filter(|(name, _)| {
                        request
                            .globs
                            .iter()
                            .any(|g| glob_match(g.as_bytes(), name.as_bytes()))
                            && user.may_see_item(name)
                    })
                    .map(|(_, item)| item),
            );
        }
        to_watch.sort_unstable();
        to_watch.dedup();
        if snapshot {
            for item in to_watch {
                self.send_snapshot_image(id, item, rid, request.view.as_deref());
                if self.clients.get(id).is_none_or(Client::closing) {
                    return;
                }
            }
            return self.snapshot_done(id, rid, open.service);
        }
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.patterns += request.pattern_count();
        c.requests.insert(rid, request);
        self.counters.requests_opened += 1;
        for item in to_watch {
            if self.watch(id, rid, item) {
                self.send_image(id, item, rid, refresh_flags::SOLICITED);
            }
            if self.clients.get(id).is_none_or(Client::closing) {
                return;
            }
        }
    }

    pub(super) fn on_close(&mut self, id: ClientId, rid: u32) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let Some(request) = c.requests.remove(&rid) else {
            return self.reject_request(id, rid, "", RequestRejection::NoSuchRequest(rid));
        };
        c.patterns -= request.pattern_count();
        for &item in &request.items {
            self.release(id, rid, item, request.view.as_ref(), true);
        }
        if let Some(c) = self.clients.get_mut(id) {
            c.paused.remove(&rid);
        }
        self.counters.requests_closed += 1;
    }

    /// The requests a PAUSE (`pause`) or RESUME of `rid` changes: `rid` (0: every request)
    /// unless it is in that state already. `None` when the client is gone, or `rid` is not
    /// open (answered with STATUS `rejected`).
    pub(super) fn pause_targets(
        &mut self,
        id: ClientId,
        rid: u32,
        pause: bool,
    ) -> Option<Vec<u32>> {
        let c = self.clients.get(id)?;
        if rid != 0 && !c.requests.contains_key(&rid) {
            self.reject_request(id, rid, "", RequestRejection::NoSuchRequest(rid));
            return None;
        }
        let all: Vec<u32> = if rid == 0 {
            c.requests.keys().copied().collect()
        } else {
            vec![rid]
        };
        Some(
            all.into_iter()
                .filter(|r| c.paused.contains(r) != pause)
                .collect(),
        )
    }

    /// PAUSE: the request (0: every request open now) keeps its items' latest state only.
    pub(super) fn on_pause(&mut self, id: ClientId, rid: u32) {
        let Some(rids) = self.pause_targets(id, rid, true) else {
            return;
        };
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        for rid in rids {
            c.paused.insert(rid);
            self.counters.requests_paused += 1;
            for &item in &c.requests[&rid].items {
                *c.paused_holds.entry(item).or_default() += 1;
            }
        }
    }

    /// RESUME: the request (0: every paused one) flows again, after one image (REFRESH
    /// flagged CONFLATED, or a STATUS) per item that changed while paused, and per item that
    /// another request of the client kept flowing meanwhile (the consumer gave the paused
    /// request none of its updates).
    pub(super) fn on_resume(&mut self, id: ClientId, rid: u32) {
        let Some(rids) = self.pause_targets(id, rid, false) else {
            return;
        };
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        // Items another (not paused) request kept flowing, as they were before this RESUME.
        let mut flowed: Vec<ItemId> = rids
            .iter()
            .flat_map(|rid| c.requests[rid].items.iter().copied())
            .filter(|&item| c.paused_holds.contains_key(&item) && !c.is_paused(item))
            .collect();
        flowed.sort_unstable();
        let mut changed = Vec::new();
        for rid in rids {
            c.paused.remove(&rid);
            for &item in &c.requests[&rid].items {
                let Some(n) = c.paused_holds.get_mut(&item) else {
                    continue;
                };
                let flowed = flowed.binary_search(&item).is_ok();
                *n -= 1;
                if *n == 0 {
                    c.paused_holds.remove(&item);
                }
                if !c.is_paused(item) && (c.paused_changed.remove(&item) || flowed) {
                    changed.push(item);
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        for item in changed {
            self.counters.resumed_images += 1;
            self.send_image(id, item, 0, refresh_flags::CONFLATED);
            if self.clients.get(id).is_none_or(Client::closing) {
                return;
            }
        }
    }

    /// Adds `item` to what request `rid` of client `id` opened; false (and a STATUS
    /// `rejected`) if the watchlist is full.
    pub(super) fn watch(&mut self, id: ClientId, rid: u32, item: ItemId) -> bool {
        let max = self.config.max_watch_per_client;
        let Some(c) = self.clients.get_mut(id) else {
            return false;
        };
        let watching = c.watched.len();
        match c.watched.get_mut(&item) {
            Some(n) => *n += 1,
            None if watching >= max => {
                let name = self.cache.get(item).map_or("", |i| &i.name).to_string();
                self.reject_request(id, rid, &name, RequestRejection::WatchlistFull { max });
                return false;
            }
            None => {
                c.watched.insert(item, 1);
                if let Some(w) = self.watchers.get_mut(item as usize - 1) {
                    w.push(id);
                }
            }
        }
        if let Some(r) = c.requests.get_mut(&rid) {
            r.items.push(item);
        }
        if c.paused.contains(&rid) {
            *c.paused_holds.entry(item).or_default() += 1;
        }
        let holders = c.watched.get(&item).copied().unwrap_or(0);
        let view = c.requests.get(&rid).and_then(|r| r.view.clone());
        c.views.add(item, view.as_ref(), holders);
        true
    }

    /// Request `rid` of client `id` (with `view`) lets `item` go: its pause, its watch, its
    /// view. When what the client is sent of the item narrows to a view, a REFRESH flagged
    /// VIEW says so (its UPDATEs may skip `item_seq` values from now).
    /// `announce`: false when the item is being revoked (nothing more of it may be sent).
    pub(super) fn release(
        &mut self,
        id: ClientId,
        rid: u32,
        item: ItemId,
        view: Option<&view::View>,
        announce: bool,
    ) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.release_pause(rid, item);
        let before = c.views.effective(item).cloned();
        unwatch(c, item, &mut self.watchers);
        let holders = c.watched.get(&item).copied().unwrap_or(0);
        c.views.remove(item, view, holders);
        let narrowed =
            announce && holders > 0 && before.is_none() && c.views.effective(item).is_some();
        if narrowed {
            self.send_image(id, item, 0, 0);
        }
    }

    /// One image of a snapshot: a REFRESH flagged SOLICITED and SNAPSHOT, or a STATUS with the
    /// item's state. Not conflated (the item is not watched, so a conflation round would not
    /// bring it back): a client without room for it is disconnected as slow.
    pub(super) fn send_snapshot_image(
        &mut self,
        id: ClientId,
        item: ItemId,
        request_id: u32,
        fields: Option<&[u16]>,
    ) {
        let Some(state) = self.cache.get(item).map(|i| i.state) else {
            return;
        };
        let from = self.outbox.buffer().len();
        if state == ItemState::Ok {
            let flags = refresh_flags::SOLICITED | refresh_flags::SNAPSHOT;
            self.cache.encode_refresh(item, flags, self.outbox.buffer());
            if let Some(v) = fields {
                self.cut_to_view(from, v);
            }
        } else {
            self.cache
                .encode_status(item, request_id, state, "", self.outbox.buffer());
        }
        self.queue_control(id, from);
    }

    /// The end of a snapshot: STATUS `closed` with its request id and no name.
    pub(super) fn snapshot_done(&mut self, id: ClientId, rid: u32, service: &str) {
        self.counters.snapshots += 1;
        self.send_request_status(id, rid, service, "", ItemState::Closed, "snapshot complete");
    }

    /// Sends one client the current state of `item`: its image (a REFRESH with `flags`) if it
    /// is ok, else a STATUS with its state.
    pub(super) fn send_image(&mut self, id: ClientId, item: ItemId, request_id: u32, flags: u8) {
        let Some(state) = self.cache.get(item).map(|i| i.state) else {
            return;
        };
        let from = self.outbox.buffer().len();
        if state == ItemState::Ok {
            self.cache.encode_refresh(item, flags, self.outbox.buffer());
            let view = self
                .clients
                .get(id)
                .and_then(|c| c.views.effective(item))
                .cloned();
            if let Some(v) = view {
                self.cut_to_view(from, &v);
            }
        } else {
            self.cache
                .encode_status(item, request_id, state, "", self.outbox.buffer());
        }
        self.queue_item(id, item, from);
    }

    /// Re-encodes the REFRESH from `from` to the end of the outbox with the fields of `view`.
    pub(super) fn cut_to_view(&mut self, from: usize, view: &[u16]) {
        let message = self.outbox.buffer().split_off(from);
        view::filtered(&message, view, self.outbox.buffer());
    }

    /// Sends a client the dictionary, every part (they were encoded once).
    pub(super) fn on_dictionary_request(&mut self, id: ClientId) {
        self.counters.dictionaries_sent += 1;
        for i in 0..self.dictionary_parts.len() {
            let from = self.outbox.buffer().len();
            self.outbox
                .buffer()
                .extend_from_slice(&self.dictionary_parts[i]);
            self.queue_control(id, from);
        }
    }

    /// Sends a client the directory: every service (`None`), or one that changed.
    pub(super) fn send_directory(&mut self, id: ClientId, only: Option<ServiceId>) {
        let Some(user) = self
            .clients
            .get(id)
            .and_then(|c| c.user())
            .and_then(|u| self.users.get(u))
        else {
            return;
        };
        let entries: Vec<ServiceEntry<'_>> = self
            .config
            .services
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|s| s.index() == *i))
            .map(|(i, name)| ServiceEntry {
                name,
                up: self.services[i].up,
                open: user.may_open_service(name),
            })
            .collect();
        let repr = DirectoryRepr {
            complete: only.is_none(),
            services: EntryList::List(&entries),
        };
        let mut bytes = Vec::with_capacity(repr.buffer_len());
        Message::Directory(repr).emit_to_vec(&mut bytes);
        let from = self.outbox.buffer().len();
        self.outbox.buffer().extend_from_slice(&bytes);
        self.queue_control(id, from);
    }
}
