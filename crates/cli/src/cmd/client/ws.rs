//! `peregrine client --websocket`: the same client over the distributor's WebSocket JSON API
//! (`--websocket ADDR` on the distributor). The JSON messages become the consumer's events, so
//! printing, counting, `item_seq` checks, latency (from `ProviderTimeNs`) and `--items-out`
//! are the binary client's. One connection: a lost one ends the run with an error.

use super::Client;
use anyhow::{bail, Context as _, Result};
use peregrine_market_data::consumer::Event;
use peregrine_md::codec::FieldList;
use peregrine_md::model::{Field, ItemState, OwnedValue};
use serde_json::{json, Value};
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
            let v: Value = serde_json::from_str(frame.as_str())
                .with_context(|| format!("a frame that is not JSON: {frame}"))?;
            let msgs = match v {
                Value::Array(list) => list,
                one => vec![one],
            };
            for m in msgs {
                match m["Type"].as_str().unwrap_or("") {
                    "Ping" => send(&mut ws, json!({"Type": "Pong"}))?,
                    "Error" => bail!("the distributor refused a message: {}", m["Text"]),
                    "Refresh" if m["Domain"] == "Login" => {
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
                    "Status" if m["Domain"] == "Login" => {
                        bail!("login refused: {}", m["State"]["Text"])
                    }
                    t @ ("Refresh" | "Update") => {
                        let id = m["ID"].as_u64().unwrap_or(0);
                        if t == "Refresh" {
                            if let Some(n) = m["Key"]["Name"].as_str() {
                                names.insert(id, n.to_string());
                            }
                        }
                        // A glob's stream carries many items: its updates name theirs.
                        let Some(item) = m["Key"]["Name"]
                            .as_str()
                            .map(str::to_string)
                            .or_else(|| names.get(&id).cloned())
                        else {
                            continue;
                        };
                        // Fields are only printed: read them only for --print.
                        let owned = if self.a.print {
                            self.fields_of(&m["Fields"])
                        } else {
                            Vec::new()
                        };
                        let fields: Vec<Field<'_>> = owned
                            .iter()
                            .map(|(fid, v)| Field::new(*fid, v.as_value()))
                            .collect();
                        let seq = m["SeqNumber"].as_u64().unwrap_or(0) as u32;
                        let ts = m["ProviderTimeNs"].as_u64().unwrap_or(0);
                        let e = if t == "Refresh" {
                            Event::Refresh {
                                request: u32::try_from(id).unwrap_or(0),
                                item: &item,
                                item_seq: seq,
                                timestamp_ns: ts,
                                solicited: m["Solicited"] != false,
                                conflated: false,
                                snapshot: false,
                                fields: FieldList::List(&fields),
                            }
                        } else {
                            Event::Update {
                                request: u32::try_from(id).unwrap_or(0),
                                item: &item,
                                item_seq: seq,
                                timestamp_ns: ts,
                                fields: FieldList::List(&fields),
                            }
                        };
                        self.on_event(e)?;
                    }
                    "Status" => {
                        let id = m["ID"].as_u64().unwrap_or(0);
                        let st = &m["State"];
                        let state = match (st["Code"].as_str(), st["Stream"].as_str()) {
                            (Some("NotEntitled"), _) => ItemState::NotEntitled,
                            (Some("NotFound"), _) => ItemState::NotFound,
                            (Some("UsageError"), _) => ItemState::Rejected,
                            (_, Some("Closed")) => ItemState::Closed,
                            _ if st["Data"] == "Ok" => ItemState::Ok,
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
                            text: st["Text"].as_str().unwrap_or(""),
                            request: id as u32,
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
    fn fields_of(&self, fields: &Value) -> Vec<(u16, OwnedValue)> {
        let Some(map) = fields.as_object() else {
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
