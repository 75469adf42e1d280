//! Posting: a contribution to an item of a service, answered by exactly one `Ack` event.

use super::{ConsumerCore, ConsumerError, Event, Phase};
use crate::codec::{AckCode, AckRepr, FieldList, Message, PostRepr};
use crate::model::{check_item_name, check_service, Field};

impl ConsumerCore {
    /// Posts `fields` to `item` of `service` (`refresh`: a full image, for a new item; else an
    /// update); returns the post's id, which its `Ack` event carries. Only while logged in
    /// with version 2: a post is not kept for a later connection (its answer could not be
    /// told apart from a duplicate's).
    pub fn post(
        &mut self,
        service: &str,
        item: &str,
        fields: &[Field<'_>],
        refresh: bool,
    ) -> Result<u32, ConsumerError> {
        if self.phase != Phase::LoggedIn || self.version < 2 {
            return Err(ConsumerError::NotLoggedIn);
        }
        check_service(service.as_bytes()).map_err(|why| ConsumerError::BadService {
            service: service.to_string(),
            why,
        })?;
        check_item_name(item.as_bytes()).map_err(|why| ConsumerError::BadPost {
            why: format!("item {item:?}: {why}; give {}", crate::model::ITEM_ALPHABET),
        })?;
        if fields.is_empty() {
            return Err(ConsumerError::BadPost {
                why: "a post carries at least one field".into(),
            });
        }
        self.next_post = self.next_post.checked_add(1).unwrap_or(1);
        let repr = PostRepr {
            refresh,
            origin: 0,
            post_id: self.next_post,
            service,
            name: item,
            user: "",
            fields: FieldList::List(fields),
        };
        repr.check()
            .map_err(|e| ConsumerError::BadPost { why: e.to_string() })?;
        Message::Post(repr).emit_to_vec(&mut self.out);
        self.posts.insert(self.next_post, item.into());
        Ok(self.next_post)
    }

    /// Posts waiting for their answer.
    pub fn posts_in_flight(&self) -> usize {
        self.posts.len()
    }

    pub(super) fn on_ack(&mut self, a: &AckRepr<'_>, on_event: &mut dyn FnMut(Event<'_>)) {
        // An answer to no post of this connection (answered already) is ignored.
        if let Some(item) = self.posts.remove(&a.post_id) {
            on_event(Event::Ack {
                post_id: a.post_id,
                item: &item,
                code: a.code,
                text: a.text,
            });
        }
    }

    /// The connection broke: every post in flight is answered `timeout`.
    pub(super) fn posts_lost(&mut self, reason: &str, on_event: &mut dyn FnMut(Event<'_>)) {
        let text = format!(
            "connection to the distributor lost ({reason}) before the answer: the post may \
             or may not have reached its provider"
        );
        for (post_id, item) in std::mem::take(&mut self.posts) {
            on_event(Event::Ack {
                post_id,
                item: &item,
                code: AckCode::Timeout,
                text: &text,
            });
        }
    }
}
