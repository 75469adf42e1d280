//! Posts to a provider: a client's contribution to an item of the provider's service,
//! forwarded by a distributor on the request topic. The application takes each
//! ([`ProviderCore::poll_post`]), decides, and answers it once ([`ProviderCore::ack`]): the
//! ACK goes back on the backbone to the distributor that forwarded it, which tells the client.
//! Whether and how an accepted post is published is the application's call (the usual case:
//! it publishes the post's fields as an update of the item).
//!
//! At most `max_pending_posts` wait for the application; a post past them is answered `busy`
//! at once, so a provider that never looks at its posts still answers every one.

use super::ProviderCore;
use crate::codec::fields::WireFields;
use crate::codec::{AckCode, AckRepr, FieldList, Message, PostRepr, PostView};
use crate::model::Field;

/// A post waiting for the application's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    /// The distributor that forwarded it (its ACK goes there).
    pub origin: u64,
    /// The distributor's id for it.
    pub post_id: u32,
    /// The user who posted it (as the distributor's users file names it).
    pub user: String,
    pub item: String,
    /// A full image (a new item, or a new image of one); else the fields that changed.
    pub refresh: bool,
    field_count: u16,
    field_bytes: Vec<u8>,
}

impl Post {
    /// The posted fields (checked by the codec when the post arrived).
    pub fn fields(&self) -> FieldList<'_> {
        FieldList::Wire(WireFields::trusted(self.field_count, &self.field_bytes))
    }

    /// The posted fields as a list, for [`ProviderCore::prepare_update`] and its kin.
    pub fn field_list(&self) -> Vec<Field<'_>> {
        self.fields().iter().collect()
    }
}

impl ProviderCore {
    /// A POST from the request topic: kept for the application, or answered `busy`.
    pub(super) fn on_post(&mut self, bytes: &[u8]) {
        let Ok(p) = PostRepr::parse(&PostView::new_unchecked(bytes)) else {
            self.counters.bad_requests += 1;
            return;
        };
        if p.origin == 0 || p.service != self.config.service {
            // Not forwarded by a distributor, or for another service on a shared topic.
            self.counters.bad_requests += 1;
            return;
        }
        self.counters.posts += 1;
        let FieldList::Wire(fields) = p.fields else {
            unreachable!("a parsed POST's fields are on the wire")
        };
        let post = Post {
            origin: p.origin,
            post_id: p.post_id,
            user: p.user.to_string(),
            item: p.name.to_string(),
            refresh: p.refresh,
            field_count: fields.count(),
            field_bytes: fields.bytes().to_vec(),
        };
        if self.posts.len() >= self.config.max_pending_posts {
            let text = format!(
                "the provider has {} posts waiting for its application",
                self.config.max_pending_posts
            );
            self.ack(&post, AckCode::Busy, &text);
            return;
        }
        self.posts.push_back(post);
    }

    /// The next post for the application to answer with [`ack`](Self::ack).
    pub fn poll_post(&mut self) -> Option<Post> {
        self.posts.pop_front()
    }

    /// Posts waiting for the application.
    pub fn pending_posts(&self) -> usize {
        self.posts.len()
    }

    /// Answers `post`: `AckCode::Accepted`, or a refusal (usually `Refused` or `Invalid`)
    /// with why, at most 255 bytes (longer text is cut at a character boundary). The ACK is
    /// queued for the driver ([`poll_ack`](Self::poll_ack)).
    pub fn ack(&mut self, post: &Post, code: AckCode, text: &str) {
        if code.is_accepted() {
            self.counters.posts_accepted += 1;
        } else {
            self.counters.posts_refused += 1;
        }
        let mut cut = text.len().min(255);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut b = Vec::with_capacity(22 + cut);
        Message::Ack(AckRepr {
            origin: post.origin,
            post_id: post.post_id,
            code,
            text: &text[..cut],
        })
        .emit_to_vec(&mut b);
        self.acks.push_back(b);
    }

    /// The next ACK to publish on the backbone; [`ack_sent`](Self::ack_sent) once the
    /// transport took it.
    pub fn poll_ack(&self) -> Option<&[u8]> {
        self.acks.front().map(Vec::as_slice)
    }

    /// The ACK of [`poll_ack`](Self::poll_ack) was sent.
    pub fn ack_sent(&mut self) {
        self.acks.pop_front();
    }
}
