//! `peregrine client --websocket`: the same client over the distributor's WebSocket JSON API
//! (`--websocket ADDR` on the distributor). The JSON messages become the consumer's events, so
//! printing, counting, `item_seq` checks, latency (from `ProviderTimeNs`) and `--items-out`
//! are the binary client's. One connection: a lost one ends the run with an error.

use super::Client;
use anyhow::{bail, Context as _, Result};
use peregrine_market_data::consumer::Event;
use peregrine_md::codec::FieldList;
use peregrine_md::model::{Field, ItemState, OwnedValue};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::net::TcpStream;

impl Client {
    pub(super) fn run_ws(&mut self, token: &[u8]) -> Result<()> {
        let addr = self
            .a
            .conn
            .connect
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let stream = TcpStream::connect(&addr).with_context(|| format!("--connect {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(super::POLL_TIMEOUT))?;
        let (mut ws, _) = tungstenite::client(format!("ws://{addr}/ws"), stream)
            .map_err(|e| anyhow::anyhow!("--connect {addr}: the WebSocket upgrade: {e}"))?;
        let send = |ws: &mut tungstenite::WebSocket<TcpStream>, v: Value| -> Result<()> {
            ws.send(tungstenite::Message::text(v.to_string()))
                .map_err(|e| anyhow::anyhow!("writing to the distributor: {e}"))
        };
        send(
            &mut ws,
            json!({"ID": 1, "Domain": "Login", "Key": {"Name": self.a.conn.user,
                "Elements": {"AuthenticationToken": String::from_utf8_lossy(token)}}}),
        )?;
        // Stream ID -> the item of its last refresh (one stream per item but for globs).
        let mut names: HashMap<u64, String> = HashMap::new();
        while !self.stopping() {
            self.rate_line()?;
            self.batch_now_ns = None;
            let frame = match ws.read() {
                Ok(tungstenite::Message::Text(t)) => t,
                Ok(tungstenite::Message::Close(_)) => {
                    bail!("the distributor closed the connection")
                }
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    self.out.flush()?;
                    continue;
                }
                Err(e) => bail!("reading from the distributor: {e}"),
            };
            // One message or an array of them, each read into what the client uses of it,
            // borrowed from the frame (a `Value` tree per message cost more than the rest of
            // the client together).
            let text = frame.as_str();
            let msgs: Vec<Incoming<'_>> = if text.trim_start().starts_with('[') {
                serde_json::from_str(text)
            } else {
                serde_json::from_str(text).map(|m| vec![m])
            }
            .with_context(|| format!("a frame that is not the API's JSON: {text}"))?;
            for m in msgs {
                match &*m.ty {
                    "Ping" => send(&mut ws, json!({"Type": "Pong"}))?,
                    "Error" => bail!("the distributor refused a message: {}", m.text),
                    "Refresh" if m.domain == "Login" => {
                        self.on_event(Event::LoggedIn { address: 0 })?;
                        for (i, pattern) in self.watch.clone().iter().enumerate() {
                            let mut req = json!({"ID": i + 2,
                                "Key": {"Service": self.a.service, "Name": pattern}});
                            if !self.a.view.is_empty() {
                                req["View"] = json!(self.a.view);
                            }
                            send(&mut ws, req)?;
                        }
                    }
                    "Status" if m.domain == "Login" => {
                        bail!("login refused: {}", m.state.text)
                    }
                    t @ ("Refresh" | "Update") => {
                        let id = m.id;
                        if t == "Refresh" {
                            if let Some(n) = &m.key.name {
                                names.insert(id, n.to_string());
                            }
                        }
                        // A glob's stream carries many items: its updates name theirs.
                        let item: &str = match (&m.key.name, names.get(&id)) {
                            (Some(n), _) => n,
                            (None, Some(n)) => n,
                            (None, None) => continue,
                        };
                        // Fields are only printed: read them only for --print.
                        let owned = if self.a.print {
                            self.fields_of(m.fields)
                        } else {
                            Vec::new()
                        };
                        let fields: Vec<Field<'_>> = owned
                            .iter()
                            .map(|(fid, v)| Field::new(*fid, v.as_value()))
                            .collect();
                        let seq = m.seq as u32;
                        let request = u32::try_from(id).unwrap_or(0);
                        let e = if t == "Refresh" {
                            Event::Refresh {
                                request,
                                item,
                                item_seq: seq,
                                timestamp_ns: m.ts,
                                solicited: m.solicited != Some(false),
                                conflated: false,
                                snapshot: false,
                                fields: FieldList::List(&fields),
                            }
                        } else {
                            Event::Update {
                                request,
                                item,
                                item_seq: seq,
                                timestamp_ns: m.ts,
                                fields: FieldList::List(&fields),
                            }
                        };
                        self.on_event(e)?;
                    }
                    "Status" => {
                        let id = m.id;
                        let st = &m.state;
                        let state = match (st.code.as_deref(), &*st.stream) {
                            (Some("NotEntitled"), _) => ItemState::NotEntitled,
                            (Some("NotFound"), _) => ItemState::NotFound,
                            (Some("UsageError"), _) => ItemState::Rejected,
                            (_, "Closed") => ItemState::Closed,
                            _ if st.data == "Ok" => ItemState::Ok,
                            _ => ItemState::Stale,
                        };
                        let item = names
                            .get(&id)
                            .cloned()
                            .or_else(|| self.watch.get((id as usize).wrapping_sub(2)).cloned())
                            .unwrap_or_default();
                        self.on_event(Event::Status {
                            item: &item,
                            state,
                            text: &st.text,
                            request: u32::try_from(id).unwrap_or(0),
                        })?;
                    }
                    _ => {}
                }
            }
            self.out.flush()?;
        }
        let _ = ws.close(None);
        Ok(())
    }

    /// A message's `Fields` as typed values by the dictionary (what it does not know is left
    /// out: printing only).
    fn fields_of(&self, fields: Option<&RawValue>) -> Vec<(u16, OwnedValue)> {
        let Some(Ok(map)) =
            fields.map(|f| serde_json::from_str::<serde_json::Map<String, Value>>(f.get()))
        else {
            return Vec::new();
        };
        map.iter()
            .filter_map(|(name, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                self.dict.parse_value(name, &text).ok()
            })
            .collect()
    }
}

/// What the client reads of one JSON message from the distributor, borrowed from the frame
/// where it can be (a string with escapes is copied); what it does not name is skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Incoming<'a> {
    #[serde(rename = "ID")]
    id: u64,
    #[serde(rename = "Type", borrow)]
    ty: Cow<'a, str>,
    #[serde(rename = "Domain", borrow)]
    domain: Cow<'a, str>,
    #[serde(rename = "Key", borrow)]
    key: Key<'a>,
    #[serde(rename = "State", borrow)]
    state: State<'a>,
    #[serde(rename = "Text", borrow)]
    text: Cow<'a, str>,
    #[serde(rename = "SeqNumber")]
    seq: u64,
    #[serde(rename = "ProviderTimeNs")]
    ts: u64,
    #[serde(rename = "Solicited")]
    solicited: Option<bool>,
    /// Read only for --print.
    #[serde(rename = "Fields", borrow)]
    fields: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Key<'a> {
    #[serde(rename = "Name", borrow)]
    name: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct State<'a> {
    #[serde(rename = "Stream", borrow)]
    stream: Cow<'a, str>,
    #[serde(rename = "Data", borrow)]
    data: Cow<'a, str>,
    #[serde(rename = "Code", borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(rename = "Text", borrow)]
    text: Cow<'a, str>,
}
