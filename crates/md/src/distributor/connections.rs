//! The client connections' inputs: a connection made, identified by its certificate, read,
//! drained and closed; the users file replaced under live clients; each message of a client
//! routed to its handler; a client closed and its state freed.

use super::cache::ItemId;
use super::client::{ClientId, ClientLink, Login};
use super::entitle::Users;
use super::errors::{ClientError, Event, TooManyClients};
use super::throttle::address_group;
use super::{entitle, view, Disconnect, DisconnectReason, Distributor};
use crate::codec::header::MAX_MESSAGE_LEN;
use crate::codec::{MdError, Message, MessageType, Messages};
use crate::model::ItemState;
use std::collections::HashMap;
use std::sync::Arc;

impl Distributor {
    /// A client connected over `link`: it must send LOGIN within the login timeout. Refused
    /// when its address has `max_clients_per_address` connections; when
    /// `max_pending_clients` connections are waiting to log in, the oldest of them is
    /// disconnected ([`poll_disconnect`](Self::poll_disconnect)) to make room.
    pub fn client_connected(
        &mut self,
        now_ns: u64,
        link: ClientLink,
    ) -> Result<ClientId, TooManyClients> {
        let from_address = self
            .clients
            .per_address
            .get(&address_group(link.peer))
            .copied()
            .unwrap_or(0);
        if from_address as usize >= self.config.max_clients_per_address {
            self.counters.clients_refused += 1;
            return Err(TooManyClients {
                max: self.config.max_clients_per_address,
                peer: link.peer,
            });
        }
        while self.clients.pending_len >= self.config.max_pending_clients {
            let Some(oldest) = self.clients.oldest_pending() else {
                break;
            };
            self.counters.pending_evicted += 1;
            self.refuse_client(
                oldest,
                ClientError::Evicted {
                    max: self.config.max_pending_clients,
                },
            );
            // Its slot is given back now, not when the driver closes it.
            self.reap();
        }
        self.counters.clients_connected += 1;
        Ok(self.clients.insert(now_ns, self.config.slow, link))
    }

    /// Replaces the users file (a reload) without dropping anyone: each logged-in client is
    /// checked against its user's new entitlements. A user no longer in the file is logged out
    /// (STATUS `rejected`, then closed); an item the user may no longer see, or every item of
    /// a service it may no longer open, is answered STATUS `not-entitled` on each request that
    /// held it and is sent no more (an exact name it may no longer see is dropped from its
    /// request, a glob stays and matches only what the user may see). The user's `slow` policy
    /// is taken from the new file. Returns how many clients lost something (or were logged
    /// out); each gets an [`Event::Revoked`] or an [`Event::ProtocolError`].
    pub fn replace_users(&mut self, users: Arc<Users>) -> usize {
        let old = std::mem::replace(&mut self.users, users);
        // Every client holding a logged-in slot: the logged in, and any closing (its slot is
        // kept until it goes, under its user's new index).
        let counted: Vec<(ClientId, usize, bool)> = self
            .clients
            .iter()
            .filter_map(|c| c.counted_user.map(|u| (c.id, u, c.closing())))
            .collect();
        // A login being checked names its user by the old file's index: the new file's, by
        // name (none if the user was removed: the check then fails).
        let verifying: Vec<(ClientId, usize)> = self
            .clients
            .iter()
            .filter_map(|c| match c.login {
                Login::Verifying {
                    user: Some(old_index),
                    ..
                } => Some((c.id, old_index)),
                _ => None,
            })
            .collect();
        for (id, old_index) in verifying {
            let new = old
                .get(old_index)
                .and_then(|u| self.users.index_of(&u.name));
            if let Some(c) = self.clients.get_mut(id) {
                if let Login::Verifying { user, .. } = &mut c.login {
                    *user = new;
                }
            }
        }
        let mut touched = 0;
        let mut per_user: HashMap<usize, u32> = HashMap::new();
        for (id, old_index, closing) in counted {
            if closing {
                let new = old
                    .get(old_index)
                    .and_then(|u| self.users.index_of(&u.name));
                if let Some(c) = self.clients.get_mut(id) {
                    c.counted_user = new;
                }
                match new {
                    Some(index) => *per_user.entry(index).or_default() += 1,
                    None => self.clients.logged_in -= 1,
                }
                continue;
            }
            let Some(name) = old.get(old_index).map(|u| u.name.clone()) else {
                continue;
            };
            let Some(index) = self.users.index_of(&name) else {
                touched += 1;
                // Logged out: its logged-in slot goes now (its user's count is rebuilt below).
                if let Some(c) = self.clients.get_mut(id) {
                    c.counted_user = None;
                    self.clients.logged_in -= 1;
                }
                self.refuse_client(id, ClientError::UserRemoved);
                continue;
            };
            *per_user.entry(index).or_default() += 1;
            let users = Arc::clone(&self.users);
            let user = users.get(index).expect("index_of gave it");
            let slow = user.slow.unwrap_or(self.config.slow);
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            c.login = Login::LoggedIn { user: index };
            c.counted_user = Some(index);
            c.slow = slow;
            // What the client may no longer have: whole requests (their service), and items.
            let mut dropped_requests = Vec::new();
            let mut revoked: Vec<(u32, ItemId)> = Vec::new();
            for (&rid, r) in c.requests.iter_mut() {
                let service = self.cache.service_name(r.service);
                if !user.may_open_service(service) {
                    dropped_requests.push(rid);
                    revoked.extend(r.items.iter().map(|&i| (rid, i)));
                    continue;
                }
                let cache = &self.cache;
                r.items.retain(|&item| {
                    let keep = cache.get(item).is_some_and(|i| user.may_see_item(&i.name));
                    if !keep {
                        revoked.push((rid, item));
                    }
                    keep
                });
                r.exact.retain(|e| user.may_see_item(e));
            }
            if revoked.is_empty() && dropped_requests.is_empty() {
                continue;
            }
            touched += 1;
            let views: Vec<Option<view::View>> = revoked
                .iter()
                .map(|(rid, _)| c.requests.get(rid).and_then(|r| r.view.clone()))
                .collect();
            for (&(rid, item), view) in revoked.iter().zip(&views) {
                self.release(id, rid, item, view.as_ref(), false);
            }
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            for &rid in &dropped_requests {
                if let Some(r) = c.requests.remove(&rid) {
                    c.patterns -= r.pattern_count();
                }
                c.paused.remove(&rid);
            }
            let text = format!("user {name}'s entitlements changed: no longer entitled");
            for &(rid, item) in &revoked {
                self.counters.not_entitled += 1;
                let from = self.outbox.buffer().len();
                self.cache.encode_status(
                    item,
                    rid,
                    ItemState::NotEntitled,
                    &text,
                    self.outbox.buffer(),
                );
                self.queue_control(id, from);
            }
            self.push_event(Event::Revoked {
                client: id,
                user: name,
                items: revoked.len(),
                requests: dropped_requests.len(),
            });
        }
        self.clients.per_user = per_user;
        self.reap();
        touched
    }

    /// The client's TLS handshake showed a certificate with this subject (as
    /// `CN=alice,O=Desk`): users of the users file with `cert_subject` log in by it. Call it
    /// before handing any of the client's bytes.
    pub fn client_identified(&mut self, client: ClientId, subject: &str) {
        if let Some(c) = self.clients.get_mut(client) {
            c.cert_subject = Some(entitle::normalize_subject(subject).into());
        }
    }

    /// The client's connection is gone (closed by the peer, or by the driver after a
    /// [`Disconnect`]): forget it.
    pub fn client_closed(&mut self, client: ClientId) {
        self.remove_client(client);
    }

    /// Bytes read from a client, in any chunks.
    pub fn handle_client_bytes(&mut self, client: ClientId, bytes: &[u8], now_ns: u64) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        if c.closing() {
            return;
        }
        if let Some(l) = &mut c.liveness {
            if !bytes.is_empty() {
                l.last_heard_ns = l.last_heard_ns.max(now_ns);
            }
        }
        if c.verifying() {
            // Read once its login is answered; a client that sends more than a message's
            // worth meanwhile is refused.
            if c.inbuf.len() + bytes.len() > MAX_MESSAGE_LEN {
                return self.refuse_client(
                    client,
                    ClientError::InputBeforeLogin {
                        max: MAX_MESSAGE_LEN,
                    },
                );
            }
            c.inbuf.extend_from_slice(bytes);
            return;
        }
        let mut buf = core::mem::take(&mut c.inbuf);
        let input: &[u8] = if buf.is_empty() {
            bytes
        } else {
            buf.extend_from_slice(bytes);
            &buf
        };
        let mut messages = Messages::new(input);
        for m in messages.by_ref() {
            match m {
                Ok((ty, msg)) => self.on_client_message(client, ty, msg, now_ns),
                Err(e) => self.refuse_client(client, ClientError::Malformed(e)),
            }
            if self
                .clients
                .get(client)
                .is_none_or(|c| c.closing() || c.verifying())
            {
                break;
            }
        }
        let rest = messages.remaining().to_vec();
        buf.clear();
        if let Some(c) = self.clients.get_mut(client) {
            if !c.closing() {
                buf.extend_from_slice(&rest);
                c.inbuf = buf;
            }
        }
        self.reap();
    }

    /// The client's queue now holds `queued_bytes` (the driver's count after writing to the
    /// socket). A conflating client that drained below half its bound is sent CONFLATED and
    /// the images of what changed.
    pub fn client_drained(&mut self, client: ClientId, queued_bytes: usize) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        c.queued_bytes = queued_bytes;
        if c.conflation.is_some() && queued_bytes < self.config.max_queue_bytes / 2 {
            self.recover(client);
        }
        self.reap();
    }

    pub(super) fn on_client_message(
        &mut self,
        id: ClientId,
        ty: MessageType,
        bytes: &[u8],
        now_ns: u64,
    ) {
        self.counters.client_messages += 1;
        let Some(c) = self.clients.get(id) else {
            return;
        };
        let logged_in = c.user().is_some();
        let msg = match Message::parse(bytes) {
            Ok(m) => m,
            Err(MdError::UnsupportedVersion(v)) if !logged_in && ty == MessageType::Login => {
                return self.refuse_client(id, ClientError::UnsupportedVersion(v));
            }
            Err(e) => return self.refuse_client(id, ClientError::Malformed(e)),
        };
        match (logged_in, msg) {
            (false, Message::Login(login)) => {
                if login.version < self.config.min_client_version {
                    return self.refuse_client(
                        id,
                        ClientError::VersionRefused {
                            version: login.version,
                            min: self.config.min_client_version,
                        },
                    );
                }
                if let Some(c) = self.clients.get_mut(id) {
                    c.asked_ping_ms = login.ping_interval_ms;
                    c.version = login.version;
                }
                self.on_login(id, login.user, login.token, now_ns)
            }
            (false, other) => self.refuse_client(id, ClientError::LoginFirst(other.message_type())),
            (true, Message::Login(_)) => self.refuse_client(id, ClientError::AlreadyLoggedIn),
            (true, Message::Open(open)) => self.on_open(id, &open, now_ns),
            (true, Message::Close(close)) => self.on_close(id, close.request_id),
            (true, Message::Ping(ping)) => self.on_ping(id, ping.payload),
            (true, Message::Pause(p)) => self.on_pause(id, p.request_id),
            (true, Message::Resume(p)) => self.on_resume(id, p.request_id),
            (true, Message::Pong(pong)) => self.on_pong(id, pong.payload, now_ns),
            (true, Message::DictionaryRequest(_)) => self.on_dictionary_request(id),
            (true, Message::Post(post)) => self.on_post(id, &post, now_ns),
            (true, other) => {
                self.refuse_client(id, ClientError::NotFromClients(other.message_type()))
            }
        }
    }

    /// Marks a client closing and queues its [`Disconnect`]; its state goes at [`reap`].
    pub(super) fn close_client(&mut self, id: ClientId, reason: DisconnectReason) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        if c.closing() {
            return;
        }
        c.login = Login::Closing;
        self.disconnects
            .push_back(Disconnect { client: id, reason });
        self.to_reap.push(id);
    }

    /// Frees the state of the clients closed during the current input.
    pub(super) fn reap(&mut self) {
        for id in core::mem::take(&mut self.to_reap) {
            self.remove_client(id);
        }
    }

    pub(super) fn remove_client(&mut self, id: ClientId) {
        let Some(c) = self.clients.remove(id) else {
            return;
        };
        for &item in c.watched.keys() {
            if let Some(w) = self.watchers.get_mut(item as usize - 1) {
                if let Some(at) = w.iter().position(|&x| x == id) {
                    w.swap_remove(at);
                }
            }
        }
    }
}
