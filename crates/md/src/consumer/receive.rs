//! The distributor's bytes: split into messages, each message applied to the session and
//! handed to the application as an [`Event`](super::Event).

use super::config::ConsumerError;
use super::event::Event;
use super::streams::Streams;
use super::{streams, ConsumerCore, ItemView, Liveness, Phase};
use crate::codec::{
    refresh_flags, FieldList, LoginResult, MdError, Message, Messages, MIN_VERSION, VERSION,
};
use crate::model::ItemState;

fn protocol(e: MdError) -> ConsumerError {
    ConsumerError::Protocol {
        error: e.to_string(),
    }
}

impl ConsumerCore {
    /// Bytes read from the connection: whole messages become events (borrowing `bytes` when
    /// no partial message was pending). An error means the connection must be closed (and
    /// [`connection_lost`](Self::connection_lost) called), or for `LoginRefused`, the end.
    pub fn handle_bytes(
        &mut self,
        bytes: &[u8],
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if let Some(l) = &mut self.liveness {
            if !bytes.is_empty() {
                l.last_heard_ns = l.last_heard_ns.max(now_ns);
            }
        }
        if self.partial.is_empty() {
            let rest = self.handle_messages(bytes, now_ns, on_event)?;
            self.partial.extend_from_slice(rest);
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        let r = self
            .handle_messages(&buf, now_ns, on_event)
            .map(|rest| rest.len());
        match r {
            Ok(left) => {
                let from = buf.len() - left;
                buf.drain(..from);
                self.partial = buf;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Handles the whole messages of `bytes`; returns what is left of a partial one.
    pub(super) fn handle_messages<'b>(
        &mut self,
        bytes: &'b [u8],
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<&'b [u8], ConsumerError> {
        let mut msgs = Messages::new(bytes);
        for m in msgs.by_ref() {
            let (_, b) = m.map_err(protocol)?;
            let msg = Message::parse(b).map_err(protocol)?;
            self.handle_message(msg, now_ns, on_event)?;
        }
        Ok(msgs.remaining())
    }

    pub(super) fn handle_message(
        &mut self,
        msg: Message<'_>,
        now_ns: u64,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        if matches!(self.phase, Phase::LoggingIn { .. }) {
            let Message::LoginResponse(r) = msg else {
                return Err(ConsumerError::Protocol {
                    error: format!("LOGIN answered with {:?}", msg.message_type()),
                });
            };
            if r.result == LoginResult::UnsupportedVersion && self.version > MIN_VERSION {
                // A distributor of an older version: log in again at once with the oldest.
                self.version = MIN_VERSION;
                self.retry_now = true;
                return Err(ConsumerError::Protocol {
                    error: format!(
                        "the distributor does not speak version {VERSION} ({}): logging in \
                         again with version {MIN_VERSION}, without liveness",
                        r.text
                    ),
                });
            }
            if r.result != LoginResult::Accepted {
                self.phase = Phase::Refused;
                return Err(ConsumerError::LoginRefused {
                    result: r.result,
                    text: r.text.to_string(),
                });
            }
            self.phase = Phase::LoggedIn;
            self.liveness = r.ping_interval_ms.map(|ms| {
                let interval_ns = u64::from(ms) * 1_000_000;
                Liveness {
                    interval_ns,
                    next_ping_ns: now_ns.saturating_add(interval_ns),
                    last_heard_ns: now_ns,
                    outstanding: None,
                }
            });
            self.backoff_ns = self.config.first_backoff_ns;
            self.counters.connections += 1;
            if self.version >= 2 && self.config.download_dictionary {
                self.request_dictionary();
            }
            let ids: Vec<u32> = self.requests.keys().copied().collect();
            for id in ids {
                self.emit_open(id);
            }
            on_event(Event::LoggedIn {
                address: self.address,
            });
            return Ok(());
        }
        match msg {
            Message::Ping(p) => {
                Message::Pong(p).emit_to_vec(&mut self.out);
                return Ok(());
            }
            Message::Pong(p) => {
                self.counters.pongs_received += 1;
                if let Some(l) = &mut self.liveness {
                    if l.outstanding == Some(p.payload) {
                        l.outstanding = None;
                        self.rtt_ns = Some(now_ns.saturating_sub(p.payload));
                    }
                }
                return Ok(());
            }
            _ => {}
        }
        self.counters.messages += 1;
        match msg {
            Message::Refresh(r) => {
                self.counters.refreshes += 1;
                let snapshot = r.flags & refresh_flags::SNAPSHOT != 0;
                let solicited = r.flags & refresh_flags::SOLICITED != 0;
                let conflated = r.flags & refresh_flags::CONFLATED != 0;
                let mut refresh = |request: u32, fields: FieldList<'_>| {
                    on_event(Event::Refresh {
                        request,
                        item: r.name,
                        item_seq: r.item_seq,
                        timestamp_ns: r.timestamp_ns,
                        solicited,
                        conflated,
                        snapshot,
                        fields,
                    })
                };
                // A snapshot's image is not a watched item's: it is not made `ok` (nor
                // reported stale when the connection breaks).
                if snapshot {
                    let request =
                        streams::snapshot_of(&self.requests, r.service, r.name).unwrap_or(0);
                    refresh(request, r.fields);
                } else {
                    let v = self.items.entry(r.item_id).or_insert_with(|| ItemView {
                        name: r.name.into(),
                        service: r.service.into(),
                        seq: None,
                        viewed: false,
                        streams: Streams::default(),
                    });
                    v.seq = Some(r.item_seq);
                    v.viewed = r.flags & refresh_flags::VIEW != 0;
                    let list = v
                        .streams
                        .get(&self.requests, self.generation, r.service, r.name);
                    streams::deliver(list, r.fields, false, refresh);
                }
            }
            Message::Update(u) => {
                self.counters.updates += 1;
                let Some(v) = self.items.get_mut(&u.item_id) else {
                    self.counters.updates_without_image += 1;
                    return Ok(());
                };
                match v.seq {
                    Some(s) if u.item_seq != s.wrapping_add(1) && !v.viewed => {
                        self.counters.gaps += 1;
                        on_event(Event::Gap {
                            item: &v.name,
                            expected: s.wrapping_add(1),
                            got: u.item_seq,
                        });
                    }
                    Some(_) => {}
                    None => self.counters.updates_without_image += 1,
                }
                v.seq = Some(u.item_seq);
                let list = v
                    .streams
                    .get(&self.requests, self.generation, &v.service, &v.name);
                streams::deliver(list, u.fields, true, |request, fields| {
                    on_event(Event::Update {
                        request,
                        item: &v.name,
                        item_seq: u.item_seq,
                        timestamp_ns: u.timestamp_ns,
                        fields,
                    })
                });
            }
            Message::Directory(d) => {
                if d.complete {
                    self.directory.clear();
                }
                for e in d.services.iter() {
                    self.directory.insert(e.name.to_string(), (e.up, e.open));
                    on_event(Event::Service {
                        service: e.name,
                        up: e.up,
                        may_open: e.open,
                    });
                }
            }
            // A group status: every item of the service (that this consumer has) is in it. (A
            // request's answer for its pattern `*` carries the request's id: not one.)
            Message::Status(s)
                if s.item_id == 0
                    && s.request_id == 0
                    && s.name == "*"
                    && !s.service.is_empty() =>
            {
                self.counters.statuses += 1;
                let mut names: Vec<&str> = Vec::new();
                for v in self.items.values_mut() {
                    if *v.service == *s.service && v.seq.is_some() {
                        if s.state != ItemState::Ok {
                            v.seq = None;
                        }
                        names.push(&v.name);
                    }
                }
                names.sort_unstable();
                for item in names {
                    on_event(Event::Status {
                        item,
                        state: s.state,
                        text: s.text,
                        request: 0,
                    });
                }
            }
            Message::Status(s) => {
                self.counters.statuses += 1;
                // The end of a snapshot (or its refusal): it is over.
                if s.item_id == 0
                    && s.name.is_empty()
                    && matches!(s.state, ItemState::Closed | ItemState::Rejected)
                    && self.requests.get(&s.request_id).is_some_and(|r| r.snapshot)
                {
                    self.requests.remove(&s.request_id);
                    self.generation += 1;
                }
                let known = self.items.get_mut(&s.item_id);
                let name: &str = match known {
                    Some(v) => {
                        if s.state != ItemState::Ok {
                            v.seq = None;
                        }
                        if s.name.is_empty() {
                            &v.name
                        } else {
                            s.name
                        }
                    }
                    None => s.name,
                };
                on_event(Event::Status {
                    item: name,
                    state: s.state,
                    text: s.text,
                    request: s.request_id,
                });
            }
            Message::Dictionary(d) => self.on_dictionary(&d, on_event)?,
            Message::Ack(a) => self.on_ack(&a, on_event),
            Message::Conflated(c) => {
                self.counters.conflated += 1;
                on_event(Event::Conflated {
                    items: c.items,
                    updates_dropped: c.updates_dropped,
                });
            }
            other => {
                return Err(ConsumerError::Protocol {
                    error: format!("a {:?} sent to a consumer", other.message_type()),
                })
            }
        }
        Ok(())
    }
}
