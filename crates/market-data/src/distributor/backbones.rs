//! The service backbones: one subscriber per service on `md.<service>` polled in batches,
//! its messages, losses and feed sessions handed to the core, and the request publisher of
//! each service.

use super::settings::WriteMode;
use super::{DistributorServer, BACKBONE_BATCH};
use peregrine::{Publisher, Subscriber, SubscriberEvent};
use peregrine_md::distributor::ServiceId;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Instant;

/// The backbone of one service.
pub(super) struct Backbone {
    pub(super) service: ServiceId,
    pub(super) name: String,
    pub(super) sub: Subscriber,
    /// Registered in the poll: readiness wakes the loop.
    pub(super) has_fd: bool,
    /// Feed sessions heard and not yet gone.
    pub(super) sessions: BTreeSet<u32>,
    /// The last time a message arrived.
    pub(super) last_message: Instant,
    /// The last poll returned a full batch: poll again without waiting.
    pub(super) more: bool,
    pub(super) requests: Publisher,
    pub(super) requests_refused: u64,
}

impl DistributorServer {
    pub(super) fn poll_backbones(&mut self) {
        for i in 0..self.backbones.len() {
            let mut arena = std::mem::take(&mut self.arena);
            let mut spans = std::mem::take(&mut self.spans);
            arena.clear();
            spans.clear();
            let b = &mut self.backbones[i];
            let n = b.sub.poll(
                &mut |m| {
                    spans.push((arena.len(), m.payload.len(), m.session_id));
                    arena.extend_from_slice(m.payload);
                },
                BACKBONE_BATCH,
            );
            b.more = n == BACKBONE_BATCH;
            let service = b.service;
            if n > 0 {
                b.last_message = Instant::now();
            }
            let now = self.now_ns();
            for &(at, len, feed) in &spans {
                // Each feed session is a feed of its own: two providers of one service are
                // arbitrated by item_seq (A/B feeds).
                self.core
                    .handle_feed_message(service, feed, &arena[at..at + len], now);
                self.drain_core();
            }
            if self.s.mode == WriteMode::Latency && !spans.is_empty() {
                // What arrived together is written together, at once: one write per client
                // per batch. Writing each update on its own would make the batch's last
                // update wait for a system call per update before it.
                self.write_dirty(false);
            }
            self.arena = arena;
            self.spans = spans;
            while let Some(ev) = self.backbones[i].sub.next_event() {
                self.backbone_event(i, ev);
            }
            self.backbones[i].requests.do_work();
        }
    }

    pub(super) fn backbone_event(&mut self, i: usize, ev: SubscriberEvent) {
        let now = self.now_ns();
        let b = &mut self.backbones[i];
        let service = b.service;
        let name = b.name.clone();
        match ev {
            SubscriberEvent::Connected {
                session_id,
                first_sequence,
            } => {
                b.sessions.insert(session_id);
                // Joined at the session's first message: the feed's own start-up images
                // arrive in order (and a loss would be reported), so none is asked for.
                let from_start = first_sequence == 0;
                let what = if from_start {
                    "from its first message; taking its images as they come".to_string()
                } else {
                    format!("at sequence {first_sequence}; asking for every image")
                };
                self.say(
                    format!("backbone {name}: feed session {session_id:08x} found {what}"),
                    json!({"event": "feed_found", "service": name, "session": session_id,
                           "first_sequence": first_sequence, "images_asked": !from_start}),
                );
                self.core.feed_joined(service, session_id, from_start, now);
            }
            SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            } => {
                let covered_before = self.core.counters().feed_losses_covered;
                self.core.feed_lost(service, session_id, now);
                let covered = self.core.counters().feed_losses_covered > covered_before;
                let what = if covered {
                    "another feed session carries what it held"
                } else {
                    "items stale until their images come again"
                };
                self.say(
                    format!("backbone {name}: LOST {count} message(s) from seq {from_sequence} of session {session_id:08x}: {what}"),
                    json!({"event": "backbone_loss", "service": name, "session": session_id, "from_sequence": from_sequence, "count": count, "covered": covered}),
                );
            }
            SubscriberEvent::PublisherClosed { session_id }
            | SubscriberEvent::PublisherDied { session_id } => {
                b.sessions.remove(&session_id);
                let left = b.sessions.len();
                let what = if left > 0 {
                    format!("{left} other feed session(s) carry its items")
                } else {
                    "its items are stale".to_string()
                };
                self.say(
                    format!("backbone {name}: feed session {session_id:08x} gone; {what}"),
                    json!({"event": "feed_gone", "service": name, "session": session_id, "feeds_left": left}),
                );
                self.core.feed_left(service, session_id, now);
            }
            _ => {}
        }
        self.drain_core();
    }
}
