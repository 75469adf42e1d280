//! Posting: a client's POST checked, forwarded to the service's provider, and answered with
//! exactly one ACK.
//!
//! ```text
//! client ── POST(post_id P) ──► distributor ── POST(origin O, post_id D, user) ──► provider
//!                                   │ (md.<service>.req)                              │
//! client ◄── ACK(P, code) ──────────┘◄────────── ACK(origin O, post_id D, code) ──────┘
//!                                                 (md.<service>)
//! ```
//!
//! The distributor answers a post itself, and never forwards it, when the user may not post
//! to the item (`post` globs of the users file: none by default), the service is unknown or
//! down, a field's type disagrees with the distributor's dictionary, or the client has
//! `max_posts_per_client` posts in flight. Otherwise it renames the post (its own id `D`, its
//! `origin`, the user's name) and keeps it pending until the provider's ACK comes back on the
//! backbone (every distributor of the backbone sees it; only the one whose `origin` it names
//! takes it) or `post_timeout_ns` passes, when the client is told `timeout`. A late ACK
//! finds nothing pending and is counted.

use super::{ClientId, Distributor, Event, ServiceId};
use crate::codec::{AckCode, AckRepr, FieldList, Message, PostRepr};
use std::collections::{HashMap, VecDeque};

/// A post forwarded to a provider, waiting for its ACK.
#[derive(Debug, Clone)]
struct Pending {
    client: ClientId,
    /// The client's id for it.
    client_post_id: u32,
    service: ServiceId,
    item: Box<str>,
}

/// A POST for the provider of `service`, to publish on its request topic `md.<service>.req`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostForward {
    pub service: ServiceId,
    pub bytes: Vec<u8>,
}

/// The posts in flight.
#[derive(Debug, Default)]
pub(super) struct Posts {
    next_id: u32,
    pending: HashMap<u32, Pending>,
    /// Post ids by deadline (one timeout for all: the order of forwarding).
    deadlines: VecDeque<(u64, u32)>,
    per_client: HashMap<ClientId, u32>,
    pub(super) forwards: VecDeque<PostForward>,
}

impl Posts {
    /// The earliest deadline of a post in flight.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        self.deadlines.front().map(|&(t, _)| t)
    }

    pub(super) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// A fresh id: not 0, not pending.
    fn fresh_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            if self.next_id != 0 && !self.pending.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }

    fn take(&mut self, id: u32) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        if let Some(n) = self.per_client.get_mut(&p.client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&p.client);
            }
        }
        Some(p)
    }
}

impl Distributor {
    /// A client's POST.
    pub(super) fn on_post(&mut self, id: ClientId, post: &PostRepr<'_>, now_ns: u64) {
        self.counters.posts += 1;
        // The users file is shared (an `Arc`): held here while the core changes, not copied.
        let users = self.users.clone();
        let Some(user) = self
            .clients
            .get(id)
            .and_then(|c| c.user())
            .and_then(|u| users.get(u))
        else {
            return;
        };
        let refuse = |code: AckCode, text: String| Some((code, text));
        let service = self.service_id(post.service);
        let refusal = if post.origin != 0 || !post.user.is_empty() {
            refuse(
                AckCode::Invalid,
                "a client's POST has origin 0 and no user: the distributor sets them".into(),
            )
        } else if service.is_none() {
            refuse(
                AckCode::UnknownService,
                format!("this distributor carries no service {}", post.service),
            )
        } else if !user.may_post(post.service, post.name) {
            refuse(
                AckCode::NotEntitled,
                format!(
                    "user {} may not post to {} of {}",
                    user.name, post.name, post.service
                ),
            )
        } else if !self.services[service.expect("checked").index()].up {
            refuse(
                AckCode::ServiceDown,
                format!("no provider of {} is live", post.service),
            )
        } else if let Some(why) = self.wrong_field_type(&post.fields) {
            refuse(AckCode::Invalid, why)
        } else if self.posts.per_client.get(&id).copied().unwrap_or(0) as usize
            >= self.config.max_posts_per_client
        {
            refuse(
                AckCode::Busy,
                format!(
                    "{} posts of this connection are waiting for their answer: wait for one",
                    self.config.max_posts_per_client
                ),
            )
        } else {
            None
        };
        if let Some((code, text)) = refusal {
            self.counters.posts_refused += 1;
            self.answer_post(id, post.post_id, code, &text);
            self.push_event(Event::Posted {
                client: id,
                user: user.name.clone(),
                service: post.service.to_string(),
                item: post.name.to_string(),
                code,
            });
            return;
        }
        let service = service.expect("checked");
        let post_id = self.posts.fresh_id();
        let mut bytes = Vec::with_capacity(post.buffer_len() + user.name.len());
        let forward = PostRepr {
            origin: self.config.origin,
            post_id,
            user: &user.name,
            ..*post
        };
        if forward.check().is_err() {
            // Only the length can fail: the user's name made it longer than 64 KiB.
            self.counters.posts_refused += 1;
            return self.answer_post(
                id,
                post.post_id,
                AckCode::Invalid,
                "the post is too long to forward: send fewer fields",
            );
        }
        Message::Post(forward).emit_to_vec(&mut bytes);
        let deadline_ns = now_ns.saturating_add(self.config.post_timeout_ns);
        self.posts.pending.insert(
            post_id,
            Pending {
                client: id,
                client_post_id: post.post_id,
                service,
                item: post.name.into(),
            },
        );
        self.posts.deadlines.push_back((deadline_ns, post_id));
        *self.posts.per_client.entry(id).or_insert(0) += 1;
        self.posts
            .forwards
            .push_back(PostForward { service, bytes });
        self.counters.posts_forwarded += 1;
    }

    /// The first field whose type disagrees with the dictionary, as a reason.
    fn wrong_field_type(&self, fields: &FieldList<'_>) -> Option<String> {
        fields.iter().find_map(|f| {
            let def = self.config.dictionary.get(f.fid)?;
            let kind = f.value.kind();
            (kind != def.kind).then(|| {
                format!(
                    "field {} (id {}) is a {}, not a {}",
                    def.name,
                    f.fid,
                    def.kind.name(),
                    kind.name()
                )
            })
        })
    }

    /// A provider's ACK from the backbone of `service`.
    pub(super) fn on_backbone_ack(&mut self, service: ServiceId, ack: &AckRepr<'_>) {
        if ack.origin != self.config.origin {
            // Another distributor's post.
            return;
        }
        match self.posts.pending.get(&ack.post_id) {
            Some(p) if p.service == service => {}
            _ => {
                self.counters.acks_unmatched += 1;
                return;
            }
        }
        let p = self.posts.take(ack.post_id).expect("pending");
        if ack.code.is_accepted() {
            self.counters.posts_accepted += 1;
        } else {
            self.counters.posts_nacked += 1;
        }
        self.finish_post(p, ack.code, ack.text);
    }

    /// Answers the posts whose provider did not within the timeout.
    pub(super) fn expire_posts(&mut self, now_ns: u64) {
        while let Some(&(deadline, post_id)) = self.posts.deadlines.front() {
            if deadline > now_ns {
                break;
            }
            self.posts.deadlines.pop_front();
            let Some(p) = self.posts.take(post_id) else {
                continue; // answered already
            };
            self.counters.posts_timed_out += 1;
            let text = format!(
                "no answer from the provider of {} within {} ms",
                self.service_name(p.service),
                self.config.post_timeout_ns / 1_000_000
            );
            self.finish_post(p, AckCode::Timeout, &text);
        }
        // Answered ones at the front cost nothing more to keep; drop them as they come.
        while let Some(&(_, post_id)) = self.posts.deadlines.front() {
            if self.posts.pending.contains_key(&post_id) {
                break;
            }
            self.posts.deadlines.pop_front();
        }
    }

    fn finish_post(&mut self, p: Pending, code: AckCode, text: &str) {
        self.answer_post(p.client, p.client_post_id, code, text);
        if let Some(user) = self
            .clients
            .get(p.client)
            .and_then(|c| c.user())
            .and_then(|u| self.users.get(u))
            .map(|u| u.name.clone())
        {
            self.push_event(Event::Posted {
                client: p.client,
                user,
                service: self.service_name(p.service).to_string(),
                item: p.item.to_string(),
                code,
            });
        }
    }

    /// Queues an ACK to a client (gone clients are skipped).
    fn answer_post(&mut self, id: ClientId, post_id: u32, code: AckCode, text: &str) {
        let from = self.outbox.buffer().len();
        Message::Ack(AckRepr {
            origin: 0,
            post_id,
            code,
            text: super::cache::truncate(text, 255),
        })
        .emit_to_vec(self.outbox.buffer());
        self.queue_control(id, from);
    }

    /// The next POST to publish on its service's request topic.
    pub fn poll_post_forward(&mut self) -> Option<PostForward> {
        self.posts.forwards.pop_front()
    }

    /// Posts forwarded and not answered yet.
    pub fn posts_in_flight(&self) -> usize {
        self.posts.in_flight()
    }
}
