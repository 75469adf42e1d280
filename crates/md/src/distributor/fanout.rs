//! The fan-out: a message written once to the outbox and listed for each watcher whose queue
//! admits it, a slow client conflated or disconnected by its policy, and a conflated client
//! brought back with the images of what changed.

use super::cache::ItemId;
use super::client::{Client, ClientId, Conflation, Login};
use super::counters::Counters;
use super::entitle::SlowPolicy;
use super::errors::Event;
use super::outbox::Outbox;
use super::{push_event, view, Disconnect, DisconnectReason, Distributor};
use crate::codec::conflated::CONFLATED_LEN;
use crate::codec::refresh::refresh_flags;
use crate::codec::status::STATUS_HEADER_LEN;
use crate::codec::{ConflatedRepr, ConflatedView, MessageType};
use crate::model::ItemState;
use std::collections::VecDeque;

/// Whether a message for one item may go into a client's queue.
pub(super) enum Admit {
    Queue,
    /// Not queued: the client conflates (the item is remembered), or is closing.
    Skip,
    /// Not queued: the client passed its bound and its policy is `disconnect`.
    Close,
}

/// Decides whether a message of `len` bytes about `item` goes into the client's queue, and
/// counts it there. `update`: it is an UPDATE (counted as dropped when not queued).
pub(super) fn admit(
    c: &mut Client,
    len: usize,
    item: ItemId,
    update: bool,
    max_queue: usize,
    counters: &mut Counters,
    events: &mut VecDeque<Event>,
) -> Admit {
    if c.closing() || c.user().is_none() {
        return Admit::Skip;
    }
    if c.is_paused(item) {
        c.paused_changed.insert(item);
        if update {
            counters.updates_paused += 1;
        }
        return Admit::Skip;
    }
    if c.conflation.is_none() && c.queued_bytes.saturating_add(len) > max_queue {
        match c.slow {
            SlowPolicy::Conflate => {
                c.conflation = Some(Conflation::default());
                c.conflations += 1;
                counters.conflations += 1;
                push_event(events, counters, Event::Conflating { client: c.id });
            }
            SlowPolicy::Disconnect => {
                counters.slow_disconnects += 1;
                push_event(events, counters, Event::SlowDisconnect { client: c.id });
                return Admit::Close;
            }
        }
    }
    if let Some(conf) = c.conflation.as_mut() {
        conf.changed.insert(item);
        if update {
            conf.updates_dropped += 1;
            c.updates_dropped += 1;
            counters.updates_conflated += 1;
        }
        return Admit::Skip;
    }
    // Sent now (another, unpaused request holds it): no image is owed for it on resume.
    if !c.paused_changed.is_empty() {
        c.paused_changed.remove(&item);
    }
    c.queued_bytes += len;
    counters.bytes_queued += len as u64;
    Admit::Queue
}

/// What a fan-out writes to, apart from the client: borrowed field by field so that the
/// distributor's watcher lists stay borrowed meanwhile.
struct FanOut<'a> {
    outbox: &'a mut Outbox,
    counters: &'a mut Counters,
    events: &'a mut VecDeque<Event>,
    disconnects: &'a mut VecDeque<Disconnect>,
    to_reap: &'a mut Vec<ClientId>,
}

impl FanOut<'_> {
    /// Lists client `c` on `record` (a message of `len` bytes about `item`), unless it
    /// conflates, or closes it when it is past its bound with policy `disconnect`.
    fn add(
        &mut self,
        c: &mut Client,
        record: usize,
        len: usize,
        item: ItemId,
        update: bool,
        max_queue: usize,
    ) {
        match admit(c, len, item, update, max_queue, self.counters, self.events) {
            Admit::Queue => {
                if update {
                    c.updates_sent += 1;
                    self.counters.updates_sent += 1;
                }
                self.outbox.add_recipient(record, c.id);
            }
            Admit::Skip => {}
            Admit::Close => {
                c.login = Login::Closing;
                self.disconnects.push_back(Disconnect {
                    client: c.id,
                    reason: DisconnectReason::Slow,
                });
                self.to_reap.push(c.id);
            }
        }
    }
}

impl Distributor {
    /// Lists every watcher of `item` that may take the message written at `from` (to the end
    /// of the outbox) as its recipient.
    pub(super) fn fan_out(&mut self, item: ItemId, from: usize, update: bool) {
        let len = self.outbox.buffer().len() - from;
        let record = self.outbox.begin(from);
        let Some(watchers) = self.watchers.get(item as usize - 1) else {
            return self.outbox.finish(record);
        };
        // A REFRESH or UPDATE goes to clients with a view of the item as its own encoding,
        // once per distinct view (below).
        let ty = self.outbox.buffer().get(from + 2).copied();
        let cuttable =
            ty == Some(MessageType::Update as u8) || ty == Some(MessageType::Refresh as u8);
        let mut viewing: Vec<(view::View, Vec<ClientId>)> = Vec::new();
        for &id in watchers {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            if self.grouping && c.version >= 2 {
                // Told by one group STATUS (service_stale).
                self.grouped.push(id);
                continue;
            }
            if cuttable && !c.views.is_empty() {
                if let Some(v) = c.views.effective(item) {
                    match viewing.iter_mut().find(|(w, _)| **w == **v) {
                        Some((_, ids)) => ids.push(id),
                        None => viewing.push((v.clone(), vec![id])),
                    }
                    continue;
                }
            }
            let mut out = FanOut {
                outbox: &mut self.outbox,
                counters: &mut self.counters,
                events: &mut self.events,
                disconnects: &mut self.disconnects,
                to_reap: &mut self.to_reap,
            };
            out.add(c, record, len, item, update, self.config.max_queue_bytes);
        }
        if viewing.is_empty() {
            return self.outbox.finish(record);
        }
        let message = self.outbox.buffer()[from..from + len].to_vec();
        self.outbox.finish(record);
        for (v, ids) in viewing {
            let at = self.outbox.buffer().len();
            if !view::filtered(&message, &v, self.outbox.buffer()) {
                // An UPDATE that changes none of the viewed fields.
                self.counters.updates_outside_views += ids.len() as u64;
                continue;
            }
            let len = self.outbox.buffer().len() - at;
            let record = self.outbox.begin(at);
            for id in ids {
                let Some(c) = self.clients.get_mut(id) else {
                    continue;
                };
                let mut out = FanOut {
                    outbox: &mut self.outbox,
                    counters: &mut self.counters,
                    events: &mut self.events,
                    disconnects: &mut self.disconnects,
                    to_reap: &mut self.to_reap,
                };
                out.add(c, record, len, item, update, self.config.max_queue_bytes);
            }
            self.outbox.finish(record);
        }
    }

    /// Sends a conflated client CONFLATED and the images of as many changed items as fit in
    /// its queue; it stops conflating once every changed item was sent.
    pub(super) fn recover(&mut self, id: ClientId) {
        let max = self.config.max_queue_bytes;
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        let Some(conf) = c.conflation.as_mut() else {
            return;
        };
        let mut budget = max.saturating_sub(c.queued_bytes + CONFLATED_LEN);
        let mut chosen = Vec::new();
        for &item in &conf.changed {
            let Some(it) = self.cache.get(item) else {
                continue;
            };
            let service_len = self.cache.service_name(it.service).len();
            let len = if it.state == ItemState::Ok {
                it.refresh_len(service_len)
            } else {
                STATUS_HEADER_LEN + service_len + it.name.len()
            };
            if len > budget {
                break;
            }
            budget -= len;
            chosen.push(item);
        }
        if chosen.is_empty() {
            return;
        }
        let dropped = u32::try_from(conf.updates_dropped).unwrap_or(u32::MAX);
        conf.updates_dropped = 0;
        for item in &chosen {
            conf.changed.remove(item);
        }
        let caught_up = conf.changed.is_empty();
        if caught_up {
            c.conflation = None;
        }
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.resize(from + CONFLATED_LEN, 0);
        ConflatedRepr {
            items: chosen.len() as u32,
            updates_dropped: dropped,
        }
        .emit(&mut ConflatedView::new_unchecked(&mut buf[from..]));
        for &item in &chosen {
            let state = self.cache.get(item).map_or(ItemState::Closed, |i| i.state);
            if state == ItemState::Ok {
                self.cache
                    .encode_refresh(item, refresh_flags::CONFLATED, self.outbox.buffer());
            } else {
                self.cache
                    .encode_status(item, 0, state, "", self.outbox.buffer());
            }
        }
        let len = self.outbox.buffer().len() - from;
        if let Some(c) = self.clients.get_mut(id) {
            c.queued_bytes += len;
        }
        self.counters.bytes_queued += len as u64;
        self.counters.conflated_images += chosen.len() as u64;
        self.outbox.send_to(from, id);
        if caught_up {
            self.push_event(Event::CaughtUp { client: id });
        }
    }
}
