//! The binary protocol to the client's JSON: each message for every stream that asked for
//! its item, an update shared by all the WebSocket clients it goes to encoded once.

use super::{ItemStreams, JsonSession, Shared};
use crate::codec::{AckCode, FieldList, LoginResult, Message};
use crate::dictionary::{Dictionary, Utc};
use crate::model::{ItemState, Value};
use serde_json::Value as Json;
use std::fmt::Write as _;

/// `{"ID":stream` and the message's `tail`: what each client adds to a shared encoding, once
/// per message and client (no `fmt` machinery on this path).
fn write_one(out: &mut String, stream: u32, tail: &str) {
    out.reserve(18 + tail.len());
    out.push_str("{\"ID\":");
    out.push_str(itoa::Buffer::new().format(stream));
    out.push_str(tail);
}

/// Writes one JSON message, or an array of several, into a client's text.
struct Writer<'o> {
    out: &'o mut String,
    from: usize,
    n: usize,
}

impl<'o> Writer<'o> {
    fn new(out: &'o mut String) -> Self {
        let from = out.len();
        Writer { out, from, n: 0 }
    }

    fn next(&mut self) {
        if self.n > 0 {
            self.out.push(',');
        }
        self.n += 1;
    }

    /// A REFRESH or UPDATE: the stream's ID, then the message's `tail`.
    fn one(&mut self, stream: u32, tail: &str) {
        self.next();
        write_one(self.out, stream, tail);
    }

    fn status(&mut self, stream: u32, state: ItemState, text: &str) {
        self.next();
        write_status(self.out, stream, state, text);
    }

    /// How many messages were written (an array of them when several).
    fn done(self) -> usize {
        if self.n > 1 {
            self.out.insert(self.from, '[');
            self.out.push(']');
        }
        self.n
    }
}

/// A JSON string literal of `s`.
fn json_str(s: &str) -> String {
    Json::String(s.to_string()).to_string()
}

fn write_status(out: &mut String, stream: u32, state: ItemState, text: &str) {
    let (stream_state, data, code) = match state {
        ItemState::Ok => ("Open", "Ok", None),
        ItemState::Stale => ("Open", "Suspect", None),
        ItemState::Closed => ("Closed", "Suspect", None),
        ItemState::NotEntitled => ("Closed", "Suspect", Some("NotEntitled")),
        ItemState::NotFound => ("Open", "Suspect", Some("NotFound")),
        ItemState::Rejected => ("Closed", "Suspect", Some("UsageError")),
    };
    let _ = write!(
        out,
        "{{\"ID\":{stream},\"Type\":\"Status\",\"State\":{{\"Stream\":\"{stream_state}\",\"Data\":\"{data}\""
    );
    if let Some(c) = code {
        let _ = write!(out, ",\"Code\":\"{c}\"");
    }
    let _ = write!(out, ",\"Text\":{}}}}}", json_str(text));
}

/// The `NakCode` of tr_json2 for an ACK code.
pub fn nak_code(c: AckCode) -> &'static str {
    match c {
        AckCode::Accepted => "None",
        AckCode::Refused => "DeniedBySrc",
        AckCode::NotEntitled => "AccessDenied",
        AckCode::ServiceDown => "SourceDown",
        AckCode::UnknownService => "SourceUnknown",
        AckCode::Busy => "NoResources",
        AckCode::Timeout => "NoResponse",
        AckCode::Invalid => "InvalidContent",
    }
}

/// The fields as a JSON object by dictionary name (`#FID` for an id it does not know): prices
/// as numbers with every digit of the decimal, ints and enum codes as numbers, times as ISO
/// 8601 UTC strings, strings as strings.
pub fn fields_json(dict: &Dictionary, fields: &FieldList<'_>) -> String {
    let mut s = String::with_capacity(16 * fields.count() + 2);
    write_fields(dict, fields, &mut s);
    s
}

fn write_fields(dict: &Dictionary, fields: &FieldList<'_>, s: &mut String) {
    s.push('{');
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        match dict.get(f.fid) {
            Some(d) => {
                s.push('"');
                s.push_str(&d.name);
                s.push('"');
            }
            None => {
                let _ = write!(s, "\"#{}\"", f.fid);
            }
        }
        s.push(':');
        let _ = match f.value {
            Value::Int(v) => write!(s, "{v}"),
            Value::Price(p) => write!(s, "{p}"),
            Value::TimeNs(t) => write!(s, "\"{}\"", Utc(t)),
            Value::Enum(c) => write!(s, "{c}"),
            Value::Str(v) => write!(s, "{}", json_str(v)),
        };
    }
    s.push('}');
}

impl JsonSession {
    /// One binary message the core queued for this client, as one JSON text appended to `out`
    /// (nothing for what a JSON client is not sent: DIRECTORY, DICTIONARY, CONFLATED): a
    /// message, or an array of them (a group STATUS makes one Status per stream). `shared`:
    /// the message's [`Shared`] encoding, kept by a caller that sends the same message to
    /// several JSON clients, so that a REFRESH or UPDATE is encoded once, and each client only
    /// adds its stream ID. Returns how many JSON messages it holds.
    pub fn to_client(
        &mut self,
        msg: &[u8],
        shared: Option<&mut Shared>,
        out: &mut String,
    ) -> usize {
        let mut own = Shared::default();
        let shared = shared.unwrap_or(&mut own);
        // An UPDATE another client's session encoded already (so parsed and checked): only
        // its item id is read here, not the whole message again.
        if let Some(n) = self.shared_update(msg, shared, out) {
            return n;
        }
        let Ok(m) = Message::parse(msg) else {
            return 0;
        };
        match m {
            Message::LoginResponse(r) => {
                let (id, user) = self.login.clone().unwrap_or((1, String::new()));
                let user = json_str(&user);
                if r.result == LoginResult::Accepted {
                    let ping = r.ping_interval_ms.map_or(String::new(), |ms| {
                        format!(
                            ",\"Elements\":{{\"PingTimeout\":{}}}",
                            // In u64: three times a u32 interval can pass u32::MAX.
                            (3 * u64::from(ms)).div_ceil(1000)
                        )
                    });
                    let _ = write!(
                        out,
                        "{{\"ID\":{id},\"Type\":\"Refresh\",\"Domain\":\"Login\",\"Key\":{{\"Name\":{user}}},\"State\":{{\"Stream\":\"Open\",\"Data\":\"Ok\",\"Text\":\"Login accepted\"}}{ping}}}"
                    );
                } else {
                    let _ = write!(
                        out,
                        "{{\"ID\":{id},\"Type\":\"Status\",\"Domain\":\"Login\",\"Key\":{{\"Name\":{user}}},\"State\":{{\"Stream\":\"Closed\",\"Data\":\"Suspect\",\"Code\":\"NotEntitled\",\"Text\":{}}}}}",
                        json_str(&format!("{}: {}", r.result.name(), r.text))
                    );
                }
                1
            }
            Message::Refresh(r) => {
                let snapshot = r.flags & crate::codec::refresh_flags::SNAPSHOT != 0;
                let solicited = r.flags & crate::codec::refresh_flags::SOLICITED != 0;
                // Found again at every image: a stream opened since holds the item too.
                let streams: Vec<(u32, bool)> = if snapshot {
                    Vec::new()
                } else {
                    self.find_streams(r.item_id, r.service, r.name).to_vec()
                };
                let dict = &*self.dict;
                let tail = |fields: &FieldList<'_>| {
                    format!(
                        ",\"Type\":\"Refresh\",\"Key\":{{\"Service\":{},\"Name\":{}}},\"State\":{{\"Stream\":\"{}\",\"Data\":\"Ok\"}}{},\"SeqNumber\":{},\"ProviderTimeNs\":{},\"Fields\":{}}}",
                        json_str(r.service),
                        json_str(r.name),
                        if snapshot { "NonStreaming" } else { "Open" },
                        if solicited { "" } else { ",\"Solicited\":false" },
                        r.item_seq,
                        r.timestamp_ns,
                        fields_json(dict, fields),
                    )
                };
                if snapshot {
                    let stream = self.snapshot_stream(r.service, r.name).unwrap_or(0);
                    let tail = shared.tails[0].get_or_insert_with(|| tail(&r.fields));
                    write_one(out, stream, tail);
                    return 1;
                }
                let views = streams
                    .iter()
                    .map(|&(st, _)| self.view_of(st, streams.len()));
                let mut w = Writer::new(out);
                for ((stream, _), view) in streams.iter().zip(views) {
                    match view {
                        None => {
                            let tail = shared.tails[0].get_or_insert_with(|| tail(&r.fields));
                            w.one(*stream, tail);
                        }
                        Some(view) => {
                            w.one(*stream, &tail(&r.fields.cut_to(view, &mut Vec::new())))
                        }
                    }
                }
                w.done()
            }
            Message::Update(u) => {
                let Some(it) = self.items.get(&u.item_id) else {
                    return 0;
                };
                let dict = &*self.dict;
                let tail = |fields: &FieldList<'_>, glob: bool| {
                    let key = if glob {
                        format!(",\"Key\":{{\"Name\":{}}}", json_str(&it.name))
                    } else {
                        String::new()
                    };
                    format!(
                        ",\"Type\":\"Update\",\"UpdateType\":\"Quote\"{key},\"SeqNumber\":{},\"ProviderTimeNs\":{},\"Fields\":{}}}",
                        u.item_seq,
                        u.timestamp_ns,
                        fields_json(dict, fields)
                    )
                };
                let mut w = Writer::new(out);
                for &(stream, glob) in &it.streams {
                    match self.view_of(stream, it.streams.len()) {
                        // A glob's stream says which item; the tail with the Key is shared too.
                        None => {
                            let tail = shared.tails[usize::from(glob)]
                                .get_or_insert_with(|| tail(&u.fields, glob));
                            w.one(stream, tail);
                        }
                        Some(view) => {
                            let mut list = Vec::new();
                            let fields = u.fields.cut_to(view, &mut list);
                            if fields.count() > 0 {
                                w.one(stream, &tail(&fields, glob));
                            }
                        }
                    }
                }
                w.done()
            }
            Message::Status(s) if s.item_id == 0 && s.request_id == 0 && s.name == "*" => {
                // A whole service: one Status per stream of its items.
                let mut streams: Vec<u32> = self
                    .items
                    .values()
                    .filter(|it| it.service == s.service)
                    .flat_map(|it| it.streams.iter().map(|&(st, _)| st))
                    .collect();
                streams.sort_unstable();
                streams.dedup();
                let mut w = Writer::new(out);
                for st in streams {
                    w.status(st, s.state, s.text);
                }
                w.done()
            }
            Message::Status(s) => {
                let streams: Vec<u32> = if s.request_id != 0 {
                    vec![s.request_id]
                } else {
                    self.items.get(&s.item_id).map_or(Vec::new(), |it| {
                        it.streams.iter().map(|&(st, _)| st).collect()
                    })
                };
                let mut w = Writer::new(out);
                for &st in &streams {
                    w.status(st, s.state, s.text);
                }
                if matches!(s.state, ItemState::Closed | ItemState::NotEntitled)
                    && s.item_id == 0
                    && s.name.is_empty()
                {
                    for st in streams {
                        self.forget_stream(st);
                    }
                }
                w.done()
            }
            Message::Ping(p) => {
                self.ping_payload = p.payload;
                out.push_str("{\"Type\":\"Ping\"}");
                1
            }
            Message::Pong(_) => {
                out.push_str("{\"Type\":\"Pong\"}");
                1
            }
            Message::Ack(a) => {
                let Some((id, post_id)) = self.posts.remove(&a.post_id) else {
                    return 0;
                };
                let _ = write!(out, "{{\"ID\":{id},\"Type\":\"Ack\",\"AckID\":{post_id}");
                if !a.code.is_accepted() {
                    let _ = write!(
                        out,
                        ",\"NakCode\":\"{}\",\"Text\":{}",
                        nak_code(a.code),
                        json_str(a.text)
                    );
                }
                out.push('}');
                1
            }
            _ => 0,
        }
    }

    /// An UPDATE whose JSON `shared` holds already for this client's one stream of the item:
    /// appended with the client's stream ID. `None`: not such a message (or not encoded yet,
    /// or the item has several streams here).
    pub(super) fn shared_update(
        &self,
        msg: &[u8],
        shared: &Shared,
        out: &mut String,
    ) -> Option<usize> {
        let h = crate::codec::Header::new_checked(msg).ok()?;
        if h.message_type().ok()? != crate::codec::MessageType::Update {
            return None;
        }
        let Some(it) = self.items.get(&h.item_id()) else {
            return Some(0); // not an item of this client's
        };
        let [(stream, glob)] = it.streams[..] else {
            return None; // several streams hold it: each is cut to its view
        };
        let tail = shared.tails[usize::from(glob)].as_deref()?;
        write_one(out, stream, tail);
        Some(1)
    }

    /// The view a stream's messages are cut to: `None` when it takes them as they come (it
    /// has no view, or it is the item's only stream: the core cut them to its view).
    pub(super) fn view_of(&self, stream: u32, of: usize) -> Option<&[u16]> {
        if of == 1 {
            return None;
        }
        self.streams.get(&stream)?.view.as_deref()
    }

    /// The live streams holding `service`'s item `name` (id `item_id`), found again: its exact
    /// names' streams, and the globs' that match it, by ID.
    pub(super) fn find_streams(
        &mut self,
        item_id: u32,
        service: &str,
        name: &str,
    ) -> &[(u32, bool)] {
        let mut streams: Vec<(u32, bool)> = self
            .exact
            .get(&(service.to_string(), name.to_string()))
            .map_or(Vec::new(), |l| l.iter().map(|&s| (s, false)).collect());
        streams.extend(
            self.globs
                .iter()
                .filter(|id| {
                    self.streams.get(id).is_some_and(|st| {
                        st.service == service
                            && crate::distributor::glob_match(
                                st.pattern.as_bytes(),
                                name.as_bytes(),
                            )
                    })
                })
                .map(|&id| (id, true)),
        );
        streams.sort_unstable();
        if streams.is_empty() {
            self.items.remove(&item_id);
            return &[];
        }
        let it = self.items.entry(item_id).or_insert_with(|| ItemStreams {
            service: service.to_string(),
            name: name.into(),
            streams: Vec::new(),
        });
        it.streams = streams;
        &it.streams
    }

    /// The snapshot stream a snapshot's image answers: the oldest open one holding the item
    /// (the core answers them in the order they came).
    pub(super) fn snapshot_stream(&self, service: &str, name: &str) -> Option<u32> {
        self.streams
            .iter()
            .find(|(_, st)| {
                st.snapshot
                    && st.service == service
                    && crate::distributor::glob_match(st.pattern.as_bytes(), name.as_bytes())
            })
            .map(|(&id, _)| id)
    }
}
