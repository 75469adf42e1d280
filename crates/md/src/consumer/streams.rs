//! Streams: which of the application's requests an item's REFRESHes and UPDATEs go to, each
//! cut to the fields that request asked for.
//!
//! The distributor sends a consumer each item once, with the union of the views of the
//! requests holding it (every field when one has none). The core hands each request holding
//! the item its own `Refresh` and `Update` events (`request` names it), in request-id order:
//!
//! - one request holds the item: the fields as they came (the distributor cut them to its
//!   view already);
//! - several hold it: each gets the fields of its own view (all of them without a view); an
//!   UPDATE that changes none of a request's fields is not delivered to it;
//! - a paused request gets nothing while another request holding the item flows (the
//!   distributor sends its items an image when it resumes). When every holder is paused, what
//!   was in flight at the pause still comes to them.
//!
//! Which requests hold an item is found by matching the item's name against the requests'
//! patterns (as the distributor matches them), once per item and again only after a request
//! was opened, closed, paused or resumed.

use super::Request;
use crate::codec::FieldList;
use crate::distributor::glob_match;
use crate::model::Field;
use std::collections::BTreeMap;

/// One request's stream of an item.
#[derive(Debug, Clone)]
pub(super) struct Stream {
    pub request: u32,
    pub paused: bool,
    /// The field ids it asked for (`None`: all).
    pub view: Option<Box<[u16]>>,
}

/// The item's streams as of one generation of the requests.
#[derive(Debug, Clone, Default)]
pub(super) struct Streams {
    list: Vec<Stream>,
    /// The requests' generation `list` was found at (0: never).
    generation: u64,
}

/// Whether request `r` holds `service`'s item `name`.
fn holds(r: &Request, service: &str, name: &str) -> bool {
    *r.service == *service
        && r.patterns
            .iter()
            .any(|p| glob_match(p.as_bytes(), name.as_bytes()))
}

impl Streams {
    /// The streams of a live item, found again if the requests changed since.
    pub fn get(
        &mut self,
        requests: &BTreeMap<u32, Request>,
        generation: u64,
        service: &str,
        name: &str,
    ) -> &[Stream] {
        if self.generation != generation {
            self.generation = generation;
            self.list.clear();
            self.list.extend(
                requests
                    .iter()
                    .filter(|(_, r)| !r.snapshot && holds(r, service, name))
                    .map(|(&request, r)| Stream {
                        request,
                        paused: r.paused,
                        view: r.view.as_deref().map(Into::into),
                    }),
            );
        }
        &self.list
    }
}

/// The snapshot request a snapshot's image answers: the oldest open one holding the item (the
/// distributor answers snapshot requests in the order they came, each image cut to its
/// request's view).
pub(super) fn snapshot_of(
    requests: &BTreeMap<u32, Request>,
    service: &str,
    name: &str,
) -> Option<u32> {
    requests
        .iter()
        .find(|(_, r)| r.snapshot && holds(r, service, name))
        .map(|(&id, _)| id)
}

/// Hands `fields` to each stream of `streams` that takes them (see the module's
/// documentation): `emit(request, fields)`. `update`: an UPDATE (not sent to a stream none of
/// whose fields it changes).
pub(super) fn deliver<'a>(
    streams: &[Stream],
    fields: FieldList<'a>,
    update: bool,
    mut emit: impl FnMut(u32, FieldList<'_>),
) {
    if let [one] = streams {
        emit(one.request, fields);
        return;
    }
    let all_paused = streams.iter().all(|s| s.paused);
    let mut cut: Vec<Field<'a>> = Vec::new();
    for s in streams {
        if s.paused && !all_paused {
            continue;
        }
        match &s.view {
            None => emit(s.request, fields),
            Some(view) => {
                let mine = fields.cut_to(view, &mut cut);
                if !(update && mine.count() == 0) {
                    emit(s.request, mine);
                }
            }
        }
    }
}
