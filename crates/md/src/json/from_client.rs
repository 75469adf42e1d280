//! The client's JSON to the binary protocol: LOGIN, REQUEST (names, globs, views, snapshots),
//! CLOSE, POST, each checked and refused with a message naming what is wrong.

use super::{err, JsonError, JsonSession, JsonStream, MAX_BATCH};
use crate::codec::{
    open_flags, FieldList, LoginRepr, Message, OpenRepr, PatternList, PostRepr, ViewList,
};
use crate::model::{is_glob, OwnedValue};
use serde_json::{Map, Value as Json};

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

impl JsonSession {
    pub(super) fn message(&mut self, m: &Json, out: &mut Vec<u8>) -> Result<(), JsonError> {
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

    pub(super) fn login(
        &mut self,
        m: &Map<String, Json>,
        out: &mut Vec<u8>,
    ) -> Result<(), JsonError> {
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

    pub(super) fn request(
        &mut self,
        m: &Map<String, Json>,
        out: &mut Vec<u8>,
    ) -> Result<(), JsonError> {
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
    pub(super) fn forget_stream(&mut self, id: u32) {
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

    pub(super) fn post(
        &mut self,
        m: &Map<String, Json>,
        out: &mut Vec<u8>,
    ) -> Result<(), JsonError> {
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
    pub(super) fn fields_in(&self, v: Option<&Json>) -> Result<Vec<(u16, OwnedValue)>, JsonError> {
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
}
