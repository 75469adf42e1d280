//! The WebSocket JSON API's messages, sans-I/O: one client's session translated between the
//! JSON messages of the Refinitiv WebSocket API (`tr_json2`: `Type` Login / Refresh / Update /
//! Status / Ping / Pong / Post / Ack / Close, `Key.Name`, `Key.Service`, `View`, `Fields` by
//! name) and the binary client protocol the distributor's core speaks. The core sees a
//! WebSocket client as any other (the same login, entitlements, queues and slow-consumer
//! policy); the driver puts this translation between the core and the socket.
//!
//! - [`JsonSession::from_client`]: one text frame (a message, or an array of them) becomes
//!   binary messages for the core, or an [`JsonError`] naming what is wrong (the driver
//!   answers `{"Type":"Error","Text":...}` and closes).
//! - [`JsonSession::to_client`]: one binary message the core queued for the client becomes a
//!   JSON message (or nothing: what a JSON client is not sent). The fields of a REFRESH or
//!   UPDATE are encoded by [`fields_json`]; a driver that sends the same UPDATE to many
//!   clients encodes them once and passes them in.
//!
//! How it maps (docs/market-data.md, "WebSocket JSON", lists every difference):
//!
//! | JSON from the client | binary |
//! | --- | --- |
//! | `{"ID":1,"Domain":"Login","Key":{"Name":"alice","Elements":{"AuthenticationToken":"s3cret"}}}` | LOGIN (version 2) |
//! | `{"ID":2,"Key":{"Service":"FEED1","Name":"AAA.O"},"View":["BID"],"Streaming":false}` | OPEN (request id = ID; `View` and `Streaming` as flags) |
//! | `{"ID":3,"Key":{"Name":["A.O","B.O"]}}` | one OPEN per name, ids 4, 5 (a batch's streams are ID + 1, + 2, ...) |
//! | `{"ID":6,"Key":{"Name":"MSFT.*"}}` | a glob: one stream for every item it matches; its updates carry `Key.Name` |
//! | `{"ID":2,"Type":"Close"}` | CLOSE |
//! | `{"ID":1,"Type":"Post","Key":{...},"PostID":7,"Message":{"Type":"Update","Fields":{...}}}` | POST |
//! | `{"Type":"Ping"}` / `{"Type":"Pong"}` | PING / PONG |
//!
//! Prices go out as JSON numbers written with every digit of the decimal (`189.20`), times as
//! ISO 8601 UTC strings, enums as their codes, and come in as numbers or strings read by the
//! field's type in the dictionary. Refreshes and updates carry `SeqNumber` (the item's
//! `item_seq`) and, a Peregrine extension, `ProviderTimeNs` (the provider's CLOCK_MONOTONIC when
//! it sent the message: one-way latency on one host).

use crate::codec::{
    open_flags, AckCode, FieldList, LoginRepr, LoginResult, Message, Messages, OpenRepr,
    PatternList, PostRepr, ViewList,
};
use crate::dictionary::{Dictionary, Utc};
use crate::model::{is_glob, ItemState, OwnedValue, Value};
use rustc_hash::FxHashMap;
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

/// A REFRESH or UPDATE as JSON, made once for every JSON client it goes to: the text after
/// its stream ID (`tails[0]`; for an UPDATE on a glob's stream, which names its item,
/// `tails[1]`). A driver keeps one per message of the bytes it hands several sessions.
#[derive(Debug, Default, Clone)]
pub struct Shared {
    tails: [Option<String>; 2],
}

/// A JSON message the session cannot take: the text says what and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(pub String);

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonError {}

fn err<T>(text: impl Into<String>) -> Result<T, JsonError> {
    Err(JsonError(text.into()))
}

/// Names in one batch request, at most.
pub const MAX_BATCH: usize = 1000;

/// A stream a JSON client opened.
#[derive(Debug)]
struct JsonStream {
    service: String,
    /// Its item's name, or its glob.
    pattern: String,
    /// The field ids it asked for (`None`: all).
    view: Option<Box<[u16]>>,
    /// `"Streaming":false`: one image, then its closing Status.
    snapshot: bool,
}

/// An item a JSON client is sent, and the live streams holding it, each given its own
/// messages with the fields of its own view (the core sends the union of their views).
#[derive(Debug)]
struct ItemStreams {
    service: String,
    name: Box<str>,
    /// (stream ID, whether it is a glob's: its updates then name their item), by ID.
    streams: Vec<(u32, bool)>,
}

/// One JSON client's session.
#[derive(Debug)]
pub struct JsonSession {
    dict: Arc<Dictionary>,
    default_service: String,
    /// The login's ID and user, once sent.
    login: Option<(u32, String)>,
    /// Open streams by ID (snapshots' until their closing Status).
    streams: BTreeMap<u32, JsonStream>,
    /// Live streams of exact names: (service, name) → their IDs.
    exact: HashMap<(String, String), Vec<u32>>,
    /// Live streams of globs.
    globs: BTreeSet<u32>,
    /// Items seen: the core's item id → the streams holding it (FxHash: looked up per
    /// message).
    items: FxHashMap<u32, ItemStreams>,
    /// Posts in flight: the binary post id → (the JSON message's ID, its PostID).
    posts: HashMap<u32, (u32, Json)>,
    next_post: u32,
    /// The payload of the core's last PING, for the client's Pong.
    ping_payload: u64,
}

impl JsonSession {
    /// A session reading fields by `dict`; requests without `Key.Service` ask for
    /// `default_service`.
    pub fn new(dict: Arc<Dictionary>, default_service: &str) -> JsonSession {
        JsonSession {
            dict,
            default_service: default_service.to_string(),
            login: None,
            streams: BTreeMap::new(),
            exact: HashMap::new(),
            globs: BTreeSet::new(),
            items: FxHashMap::default(),
            posts: HashMap::new(),
            next_post: 0,
            ping_payload: 0,
        }
    }

    /// One text frame from the client: a message or an array of messages. The binary
    /// messages they make are appended to `out`; on an error `out` may hold those of the
    /// messages before the bad one.
    pub fn from_client(&mut self, text: &str, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let v: Json = serde_json::from_str(text).map_err(|e| {
            JsonError(format!(
                "not JSON ({e}): send a JSON message or an array of them"
            ))
        })?;
        match v {
            Json::Array(list) => {
                for m in &list {
                    self.message(m, out)?;
                }
                Ok(())
            }
            m => self.message(&m, out),
        }
    }

    fn message(&mut self, m: &Json, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let Some(m) = m.as_object() else {
            return err("a message is a JSON object");
        };
        let ty = match m.get("Type") {
            None => "Request",
            Some(Json::String(t)) => t.as_str(),
            Some(other) => return err(format!("Type {other} is not a string")),
        };
        let domain = match m.get("Domain") {
            None => "MarketPrice",
            Some(Json::String(d)) => d.as_str(),
            Some(other) => return err(format!("Domain {other} is not a string")),
        };
        match ty {
            "Ping" => {
                Message::Ping(crate::codec::PingRepr { payload: 0 }).emit_to_vec(out);
                return Ok(());
            }
            "Pong" => {
                Message::Pong(crate::codec::PingRepr {
                    payload: self.ping_payload,
                })
                .emit_to_vec(out);
                return Ok(());
            }
            _ => {}
        }
        if domain == "Login" {
            if ty != "Request" {
                return err(format!(
                    "a Login message of Type {ty}: send the Login request"
                ));
            }
            return self.login(m, out);
        }
        if self.login.is_none() {
            return err("log in first: {\"ID\":1,\"Domain\":\"Login\",\"Key\":{\"Name\":\"USER\",\"Elements\":{\"AuthenticationToken\":\"TOKEN\"}}}");
        }
        if domain != "MarketPrice" {
            return err(format!(
                "Domain {domain} is not served: MarketPrice (the default) and Login"
            ));
        }
        match ty {
            "Request" => self.request(m, out),
            "Close" => {
                let id = stream_id(m)?;
                self.forget_stream(id);
                Message::Close(crate::codec::CloseRepr { request_id: id }).emit_to_vec(out);
                Ok(())
            }
            "Post" => self.post(m, out),
            other => err(format!(
                "Type {other} is not accepted: Request (the default), Close, Post, Ping or Pong"
            )),
        }
    }

    fn login(&mut self, m: &Map<String, Json>, out: &mut Vec<u8>) -> Result<(), JsonError> {
        if self.login.is_some() {
            return err("logged in already: one Login per connection");
        }
        let id = stream_id(m)?;
        let key = m
            .get("Key")
            .and_then(Json::as_object)
            .ok_or_else(|| JsonError("a Login needs Key.Name (the user)".into()))?;
        let user = key
            .get("Name")
            .and_then(Json::as_str)
            .ok_or_else(|| JsonError("a Login needs Key.Name (the user)".into()))?;
        let token = key
            .get("Elements")
            .and_then(|e| e.get("AuthenticationToken"))
            .and_then(Json::as_str)
            .ok_or_else(|| {
                JsonError(
                    "a Login needs Key.Elements.AuthenticationToken (the user's token)".into(),
                )
            })?;
        let repr = LoginRepr::new(user, token.as_bytes());
        Message::Login(repr)
            .check()
            .map_err(|e| JsonError(format!("Login: {e}")))?;
        Message::Login(repr).emit_to_vec(out);
        self.login = Some((id, user.to_string()));
        Ok(())
    }

    fn request(&mut self, m: &Map<String, Json>, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let id = stream_id(m)?;
        let (service, names) = key(m, &self.default_service)?;
        let snapshot = match m.get("Streaming") {
            None => false,
            Some(Json::Bool(b)) => !b,
            Some(other) => return err(format!("Streaming {other} is not true or false")),
        };
        let view: Option<Vec<u16>> = match m.get("View") {
            None => None,
            Some(Json::Array(list)) => Some(
                list.iter()
                    .map(|f| match f {
                        Json::String(name) => {
                            self.dict.by_name(name).map(|d| d.fid).ok_or_else(|| {
                                JsonError(format!("View: {name} is not a field of the dictionary"))
                            })
                        }
                        Json::Number(n) => n
                            .as_u64()
                            .and_then(|n| u16::try_from(n).ok())
                            .ok_or_else(|| JsonError(format!("View: {n} is not a field id"))),
                        other => err(format!("View: {other} is not a field name")),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(other) => return err(format!("View {other} is not a list of field names")),
        };
        // The VIEW flag follows from `view`.
        let flags = if snapshot { open_flags::SNAPSHOT } else { 0 };
        // A batch: one stream per name, IDs following the request's.
        let batch = names.len() > 1
            || matches!(
                m.get("Key").and_then(|k| k.get("Name")),
                Some(Json::Array(_))
            );
        for (i, name) in names.iter().enumerate() {
            let stream = if batch {
                id.checked_add(1 + i as u32)
                    .ok_or_else(|| JsonError("batch IDs past 2^32".into()))?
            } else {
                id
            };
            let patterns = [name.as_str()];
            let open = Message::Open(OpenRepr {
                flags,
                request_id: stream,
                service: &service,
                patterns: PatternList::List(&patterns),
                view: view.as_deref().map(ViewList::List),
            });
            open.check()
                .map_err(|e| JsonError(format!("Key.Name {name:?}: {e}")))?;
            open.emit_to_vec(out);
            if self.streams.contains_key(&stream) {
                continue; // the core refuses an ID in use: the stream open keeps it
            }
            if !snapshot {
                if is_glob(name) {
                    self.globs.insert(stream);
                } else {
                    self.exact
                        .entry((service.clone(), name.clone()))
                        .or_default()
                        .push(stream);
                }
            }
            self.streams.insert(
                stream,
                JsonStream {
                    service: service.clone(),
                    pattern: name.clone(),
                    view: view.as_deref().map(Into::into),
                    snapshot,
                },
            );
        }
        Ok(())
    }

    /// Stream `id` is closed: nothing more goes to it.
    fn forget_stream(&mut self, id: u32) {
        let Some(st) = self.streams.remove(&id) else {
            return;
        };
        if st.snapshot {
            return;
        }
        if !self.globs.remove(&id) {
            let key = (st.service, st.pattern);
            if let Some(list) = self.exact.get_mut(&key) {
                list.retain(|&s| s != id);
                if list.is_empty() {
                    self.exact.remove(&key);
                }
            }
        }
        self.items.retain(|_, it| {
            it.streams.retain(|&(s, _)| s != id);
            !it.streams.is_empty()
        });
    }

    fn post(&mut self, m: &Map<String, Json>, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let id = stream_id(m)?;
        let (service, names) = key(m, &self.default_service)?;
        let [name] = &names[..] else {
            return err("a Post names one item in Key.Name");
        };
        let post_id = m.get("PostID").cloned().unwrap_or(Json::Null);
        let inner = m.get("Message").and_then(Json::as_object).ok_or_else(|| {
            JsonError("a Post carries its Message (Type Update or Refresh, with Fields)".into())
        })?;
        let refresh = match inner.get("Type").and_then(Json::as_str) {
            Some("Update") | None => false,
            Some("Refresh") => true,
            Some(other) => {
                return err(format!(
                    "a posted Message of Type {other}: Update or Refresh"
                ))
            }
        };
        let fields = self.fields_in(inner.get("Fields"))?;
        let list: Vec<crate::model::Field<'_>> = fields
            .iter()
            .map(|(fid, v)| crate::model::Field::new(*fid, v.as_value()))
            .collect();
        self.next_post = self.next_post.checked_add(1).unwrap_or(1);
        let repr = PostRepr {
            refresh,
            origin: 0,
            post_id: self.next_post,
            service: &service,
            name,
            user: "",
            fields: FieldList::List(&list),
        };
        repr.check().map_err(|e| JsonError(format!("Post: {e}")))?;
        Message::Post(repr).emit_to_vec(out);
        self.posts.insert(self.next_post, (id, post_id));
        Ok(())
    }

    /// `Fields` of a posted message, read by the dictionary's types.
    fn fields_in(&self, v: Option<&Json>) -> Result<Vec<(u16, OwnedValue)>, JsonError> {
        let Some(Json::Object(fields)) = v else {
            return err("Fields: an object of field name to value");
        };
        let mut out = Vec::with_capacity(fields.len());
        for (name, value) in fields {
            let text = match value {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                other => return err(format!("Fields.{name} = {other}: a number or a string")),
            };
            out.push(self.dict.parse_value(name, &text).map_err(JsonError)?);
        }
        if out.is_empty() {
            return err("Fields: at least one field");
        }
        Ok(out)
    }

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
                            (3 * ms).div_ceil(1000)
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
    fn shared_update(&self, msg: &[u8], shared: &Shared, out: &mut String) -> Option<usize> {
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
    fn view_of(&self, stream: u32, of: usize) -> Option<&[u16]> {
        if of == 1 {
            return None;
        }
        self.streams.get(&stream)?.view.as_deref()
    }

    /// The live streams holding `service`'s item `name` (id `item_id`), found again: its exact
    /// names' streams, and the globs' that match it, by ID.
    fn find_streams(&mut self, item_id: u32, service: &str, name: &str) -> &[(u32, bool)] {
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
    fn snapshot_stream(&self, service: &str, name: &str) -> Option<u32> {
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

/// The request's or message's stream id: `ID`, a whole number from 1 to 2^32 - 1.
fn stream_id(m: &Map<String, Json>) -> Result<u32, JsonError> {
    match m.get("ID") {
        Some(Json::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n != 0)
            .ok_or_else(|| JsonError(format!("ID {n}: a whole number from 1 to 4294967295"))),
        Some(other) => err(format!("ID {other}: a whole number from 1 to 4294967295")),
        None => err("the message has no ID"),
    }
}

/// `Key.Service` (or the default) and `Key.Name` (one name, or a batch list).
fn key(m: &Map<String, Json>, default_service: &str) -> Result<(String, Vec<String>), JsonError> {
    let Some(key) = m.get("Key").and_then(Json::as_object) else {
        return err("the message needs a Key with a Name");
    };
    let service = match key.get("Service") {
        None => default_service.to_string(),
        Some(Json::String(s)) => s.clone(),
        Some(other) => return err(format!("Key.Service {other} is not a service name")),
    };
    let names = match key.get("Name") {
        Some(Json::String(n)) => vec![n.clone()],
        Some(Json::Array(list)) if !list.is_empty() && list.len() <= MAX_BATCH => list
            .iter()
            .map(|n| {
                n.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| JsonError(format!("Key.Name: {n} is not an item name")))
            })
            .collect::<Result<_, _>>()?,
        Some(Json::Array(list)) => {
            return err(format!(
                "Key.Name lists {} names: a batch of 1 to {MAX_BATCH}",
                list.len()
            ))
        }
        _ => return err("Key.Name: an item name, or a list of them"),
    };
    Ok((service, names))
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

/// Splits `bytes` (what the core queued for one client) into whole messages.
pub fn messages(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    Messages::new(bytes).filter_map(|m| m.ok().map(|(_, b)| b))
}

#[cfg(test)]
mod tests;
