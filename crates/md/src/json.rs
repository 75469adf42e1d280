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

use crate::codec::Messages;
use crate::dictionary::Dictionary;
use rustc_hash::FxHashMap;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
}

/// Splits `bytes` (what the core queued for one client) into whole messages.
pub fn messages(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    Messages::new(bytes).filter_map(|m| m.ok().map(|(_, b)| b))
}

mod from_client;
#[cfg(test)]
mod tests;
mod to_client;

pub use to_client::{fields_json, nak_code};
