//! The application's requests: OPEN (names, globs, views, snapshots), CLOSE, PAUSE and
//! RESUME, each kept to be opened again after a reconnection.

use super::config::ConsumerError;
use super::{ConsumerCore, Phase, Request};
use crate::codec::open::MAX_VIEW_FIELDS;
use crate::codec::{
    open_flags, CloseRepr, Message, OpenRepr, PatternList, PauseRepr, ViewList, MAX_MESSAGE_LEN,
};
use crate::model::{check_item_pattern, check_service};

impl ConsumerCore {
    /// Opens `patterns` (names and globs) of `service`; returns the request's id. Sent now
    /// when logged in, else at login.
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, None)
    }

    /// [`open`](Self::open) for the fields `view` (field ids) only: REFRESHes carry those
    /// fields, and an UPDATE that changes none of them is not sent (so `item_seq` may skip:
    /// no `Gap` is reported for such items). Two requests holding one item each get their own
    /// `Refresh` and `Update` events, with their own fields (a request without a view: every
    /// field): the distributor sends the union, and the core cuts it per request.
    pub fn open_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[u16],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, Some(view))
    }

    /// Asks for the images of `patterns` of `service` only (a snapshot); returns the
    /// request's id. Each item comes as a `Refresh` with `snapshot` set (or a `Status`), then a
    /// `Status` `closed` with no item and this request id ends it; nothing more of it comes.
    /// A snapshot not answered when the connection breaks is asked again after the next
    /// login.
    pub fn snapshot(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, None)
    }

    /// [`snapshot`](Self::snapshot) of the fields `view` only.
    pub fn snapshot_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[u16],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, Some(view))
    }

    /// What [`open`](Self::open), [`open_view`](Self::open_view),
    /// [`snapshot`](Self::snapshot) and [`snapshot_view`](Self::snapshot_view) do: `snapshot`
    /// for the images only, `view` the field ids (`None`: every field).
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        snapshot: bool,
        view: Option<&[u16]>,
    ) -> Result<u32, ConsumerError> {
        if let Some(v) = view {
            let mut ids = v.to_vec();
            ids.sort_unstable();
            ids.dedup();
            if v.is_empty() || v.len() > MAX_VIEW_FIELDS || ids.len() != v.len() {
                return Err(ConsumerError::BadRequest {
                    why: format!(
                        "a view of {} field ids: give 1 to {MAX_VIEW_FIELDS}, none twice",
                        v.len()
                    ),
                });
            }
            if let Some(&bad) = v.iter().find(|&&f| f == 0 || f > crate::model::MAX_FID) {
                return Err(ConsumerError::BadRequest {
                    why: format!(
                        "field id {bad} in a view: give 1 to {}",
                        crate::model::MAX_FID
                    ),
                });
            }
        }
        check_service(service.as_bytes()).map_err(|why| ConsumerError::BadService {
            service: service.to_string(),
            why,
        })?;
        if patterns.is_empty() {
            return Err(ConsumerError::BadRequest {
                why: "a request names at least one item or glob".into(),
            });
        }
        let mut len = 16 + service.len() + view.map_or(0, |v| 2 + 2 * v.len());
        for p in patterns {
            check_item_pattern(p.as_bytes()).map_err(|why| ConsumerError::BadPattern {
                pattern: p.to_string(),
                why,
            })?;
            len += 1 + p.len();
        }
        if len > MAX_MESSAGE_LEN || patterns.len() > usize::from(u16::MAX) {
            return Err(ConsumerError::BadRequest {
                why: format!(
                    "a request of {} patterns takes {len} bytes, over one message's \
                     {MAX_MESSAGE_LEN}: open them in several requests",
                    patterns.len()
                ),
            });
        }
        let id = self.next_request;
        self.next_request = self.next_request.checked_add(1).unwrap_or(1);
        self.generation += 1;
        self.requests.insert(
            id,
            Request {
                service: service.to_string(),
                patterns: patterns.iter().map(|p| p.to_string()).collect(),
                snapshot,
                paused: false,
                view: view.map(<[u16]>::to_vec),
            },
        );
        if self.phase == Phase::LoggedIn {
            self.emit_open(id);
        }
        Ok(id)
    }

    /// Closes a request: what it alone opened stops.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        let Some(r) = self.requests.remove(&request) else {
            return Err(ConsumerError::UnknownRequest { request });
        };
        self.generation += 1;
        // A snapshot holds nothing at the distributor: forgetting it is enough.
        if self.phase == Phase::LoggedIn && !r.snapshot {
            Message::Close(CloseRepr {
                request_id: request,
            })
            .emit_to_vec(&mut self.out);
        }
        Ok(())
    }

    /// Pauses a request (0: every request open now): the distributor keeps its items' latest
    /// state only until [`resume`](Self::resume). Kept across reconnections.
    pub fn pause(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.set_paused(request, true)
    }

    /// Resumes a paused request (0: every paused request): one `Refresh` (flagged
    /// `conflated`) or `Status` per item that changed meanwhile, then its updates again.
    pub fn resume(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.set_paused(request, false)
    }

    pub(super) fn set_paused(&mut self, request: u32, paused: bool) -> Result<(), ConsumerError> {
        self.generation += 1;
        if request == 0 {
            for r in self.requests.values_mut() {
                r.paused = paused;
            }
        } else {
            let Some(r) = self.requests.get_mut(&request) else {
                return Err(ConsumerError::UnknownRequest { request });
            };
            r.paused = paused;
        }
        if self.phase == Phase::LoggedIn {
            let m = PauseRepr {
                request_id: request,
            };
            let m = if paused {
                Message::Pause(m)
            } else {
                Message::Resume(m)
            };
            m.emit_to_vec(&mut self.out);
        }
        Ok(())
    }

    pub(super) fn emit_open(&mut self, id: u32) {
        let r = &self.requests[&id];
        let patterns: Vec<&str> = r.patterns.iter().map(String::as_str).collect();
        Message::Open(OpenRepr {
            flags: if r.snapshot { open_flags::SNAPSHOT } else { 0 },
            request_id: id,
            service: &r.service,
            patterns: PatternList::List(&patterns),
            view: r.view.as_deref().map(ViewList::List),
        })
        .emit_to_vec(&mut self.out);
        if r.paused {
            Message::Pause(PauseRepr { request_id: id }).emit_to_vec(&mut self.out);
        }
    }
}
