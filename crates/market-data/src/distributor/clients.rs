//! The client sockets: accepted (both listeners, within the accept rate), read into the
//! core, written from their queues, closed after their answer with a linger, and the slab of
//! connections by token.

use super::conn::{Conn, Wrote};
use super::settings::WriteMode;
use super::{websocket, DistributorServer, ACCEPTS_PER_TURN, LINGER, READS_PER_TURN};
use mio::{Interest, Token};
use peregrine_md::distributor::{ClientLink, Disconnect};
use serde_json::json;
use std::io;
use std::time::{Duration, Instant};

/// Client connections by token: a slab (a token is an index; freed indices are reused).
#[derive(Default)]
pub(super) struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
}

impl Conns {
    pub(super) fn get(&self, t: Token) -> Option<&Conn> {
        self.slots.get(t.0)?.as_ref()
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = &Conn> {
        self.slots.iter().flatten()
    }
    pub(super) fn get_mut(&mut self, t: Token) -> Option<&mut Conn> {
        self.slots.get_mut(t.0)?.as_mut()
    }
    pub(super) fn insert(&mut self, c: Conn) -> Token {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(c);
                Token(i)
            }
            None => {
                self.slots.push(Some(c));
                Token(self.slots.len() - 1)
            }
        }
    }
    pub(super) fn remove(&mut self, t: Token) -> Option<Conn> {
        let c = self.slots.get_mut(t.0)?.take()?;
        self.free.push(t.0);
        Some(c)
    }
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl DistributorServer {
    /// Accepts up to [`ACCEPTS_PER_TURN`] connections; `accept_more` says whether the
    /// listener may hold more.
    /// Accepts connections of the binary listener, or (`websocket`) of the WebSocket one.
    pub(super) fn accept(&mut self, websocket: bool) {
        if websocket {
            self.ws_accept_more = false;
        } else {
            self.accept_more = false;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            let now_ns = self.now_ns();
            if !self.accepts.try_take(1, now_ns) {
                // Over the rate: the rest wait in the backlog until a token is back.
                let wait = self.accepts.next_ready_ns(1, now_ns).saturating_sub(now_ns);
                self.accept_resume_at = Some(Instant::now() + Duration::from_nanos(wait));
                return;
            }
            let accepted = match (&self.ws_listener, websocket) {
                (Some((l, _)), true) => l.accept(),
                (None, true) => return,
                (_, false) => self.listener.accept(),
            };
            let (stream, peer) = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: the connection waits in the backlog; say it once
                    // per hundred.
                    if self.accept_errors % 100 == 0 {
                        self.say(
                            format!("accept failed: {e} (raise the open files limit, or lower max_clients)"),
                            json!({"event": "accept_failed", "error": e.to_string()}),
                        );
                    }
                    self.accept_errors += 1;
                    return;
                }
            };
            let link = ClientLink {
                peer: peer.ip(),
                tls: self.tls.is_some(),
            };
            let session = match self.tls.as_ref().map(|t| t.accept()).transpose() {
                Ok(s) => s,
                Err(e) => {
                    self.say(
                        format!("cannot start TLS for {peer}: {e}"),
                        json!({"event": "tls_failed", "peer": peer.to_string(), "error": e.to_string()}),
                    );
                    continue;
                }
            };
            let id = match self.core.client_connected(self.now_ns(), link) {
                Ok(id) => id,
                Err(e) => {
                    if self.refusals.admit(
                        Instant::now(),
                        "connection_refused",
                        &peer.ip().to_string(),
                    ) {
                        self.say(
                            format!("connection from {peer} refused: {e}"),
                            json!({"event": "client_refused", "peer": peer.to_string(), "error": e.to_string()}),
                        );
                    }
                    continue; // dropped: closed
                }
            };
            // Both modes: throughput mode coalesces in its own queues, under its flush
            // interval; Nagle would only hold the tail of each flush back for an ACK (up to a
            // delayed ACK's 40 ms).
            let _ = stream.set_nodelay(true);
            if let Some(n) = self.s.client_sndbuf {
                let _ = socket2::SockRef::from(&stream).set_send_buffer_size(n);
            }
            let mut conn = Conn::new(stream, session, id, peer);
            if websocket {
                let session = peregrine_md::json::JsonSession::new(
                    self.core.config().dictionary.clone(),
                    &self.s.core.services[0],
                );
                conn.ws = Some(Box::new(websocket::WsLayer::new(session)));
            }
            let tok = self.conns.insert(conn);
            let c = self.conns.get_mut(tok).expect("just inserted");
            if let Err(e) = self.poll.registry().register(
                &mut c.stream,
                tok,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.say(
                    format!("cannot watch a client socket: {e}"),
                    json!({"event": "register_failed", "error": e.to_string()}),
                );
                self.conns.remove(tok);
                self.core.client_closed(id);
                continue;
            }
            self.by_client.insert(id, tok);
        }
        if websocket {
            self.ws_accept_more = true;
        } else {
            self.accept_more = true;
        }
    }

    /// Reads what a client sent and hands it to the core.
    pub(super) fn read(&mut self, tok: Token) {
        for _ in 0..READS_PER_TURN {
            let Some(c) = self.conns.get_mut(tok) else {
                return;
            };
            let read = c.read(&mut self.read_buf);
            if let Some(subject) = c.newly_identified() {
                // The handshake just ended: the core learns the certificate before any byte.
                if let (Some(id), Some(subject)) = (c.client, subject) {
                    self.core.client_identified(id, &subject);
                }
            }
            let n = match read {
                Ok(0) => return self.close(tok),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A handshake answer the socket did not take yet.
                    if c.tls.as_ref().is_some_and(|t| t.wants_write()) {
                        self.write(tok);
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let peer = c.peer;
                    if e.kind() == io::ErrorKind::InvalidData
                        && self.refusals.admit(
                            Instant::now(),
                            "tls_refused",
                            &peer.ip().to_string(),
                        )
                    {
                        self.say(
                            format!("client {peer} refused: {e}"),
                            json!({"event": "tls_refused", "peer": peer.to_string(), "error": e.to_string()}),
                        );
                    }
                    return self.close(tok);
                }
            };
            let now = self.now_ns();
            let Some(c) = self.conns.get_mut(tok) else {
                return;
            };
            // A connection closing after its answer: what it still sends is discarded.
            if let Some(id) = c.client {
                if let Some(ws) = c.ws.as_mut() {
                    // WebSocket: frames of JSON in, binary messages for the core out.
                    let mut to_core = Vec::new();
                    let mut to_socket = Vec::new();
                    let step = ws.input(&self.read_buf[..n], &mut to_core, &mut to_socket);
                    if !to_socket.is_empty() {
                        c.out.push(&to_socket);
                        if !c.dirty {
                            c.dirty = true;
                            self.dirty.push(tok);
                        }
                    }
                    if !to_core.is_empty() {
                        self.core.handle_client_bytes(id, &to_core, now);
                        self.drain_core();
                    }
                    if step == websocket::Step::Close {
                        // Its answer (the page, an error) is written, then it is closed.
                        self.by_client.remove(&id);
                        self.core.client_closed(id);
                        self.drain_core();
                        if let Some(c) = self.conns.get_mut(tok) {
                            c.client = None;
                            let until = Instant::now() + LINGER;
                            c.linger_until = Some(until);
                            self.lingering.push_back((until, tok));
                        }
                        self.write(tok);
                        return;
                    }
                } else {
                    self.core.handle_client_bytes(id, &self.read_buf[..n], now);
                    self.drain_core();
                }
            }
        }
        self.read_again.push(tok);
    }

    /// The core closed a client: its answer is written first when `flush()` says so.
    pub(super) fn disconnect(&mut self, d: Disconnect) {
        let Some(tok) = self.by_client.remove(&d.client) else {
            return;
        };
        self.core.client_closed(d.client);
        let Some(c) = self.conns.get_mut(tok) else {
            return;
        };
        c.client = None;
        if d.flush() {
            if let Some(ws) = c.ws.as_mut() {
                let mut close = Vec::new();
                ws.close(&mut close);
                c.out.push(&close);
            }
            let until = Instant::now() + LINGER;
            c.linger_until = Some(until);
            self.lingering.push_back((until, tok));
            if !c.blocked && c.write_out() != Wrote::Ok {
                self.close(tok);
            }
        } else {
            self.close(tok);
        }
    }

    /// Drops a connection (the socket closes); tells the core if it still knew it.
    pub(super) fn close(&mut self, tok: Token) {
        let Some(mut c) = self.conns.remove(tok) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.stream);
        if let Some(id) = c.client {
            self.by_client.remove(&id);
            self.core.client_closed(id);
            self.drain_core();
        }
    }

    pub(super) fn expire_lingering(&mut self, now: Instant) {
        while let Some(&(until, tok)) = self.lingering.front() {
            if until > now {
                return;
            }
            self.lingering.pop_front();
            // The token may have been closed meanwhile, or given to a newer connection (with
            // its own entry further back).
            if self
                .conns
                .get_mut(tok)
                .and_then(|c| c.linger_until)
                .is_some_and(|d| d <= now)
            {
                self.close(tok);
            }
        }
    }

    /// Hands a connection's queue to its socket and tells the core what is left.
    pub(super) fn write(&mut self, tok: Token) {
        let Some(c) = self.conns.get_mut(tok) else {
            return;
        };
        c.dirty = false;
        if c.blocked {
            return; // the writable event will come
        }
        if let Wrote::Failed(_) = c.write_out() {
            return self.close(tok);
        }
        if let Some(id) = c.client {
            let left = c.out.len();
            self.core.client_drained(id, left);
            self.drain_core();
        }
    }

    /// Writes the queues that are due: all of them in latency mode or at a flush tick, else
    /// those past `flush_bytes` (and closing connections).
    pub(super) fn write_dirty(&mut self, flush_all: bool) {
        let latency = self.s.mode == WriteMode::Latency;
        let mut kept = Vec::new();
        // Writing reports drains to the core, which may queue more (a conflated client's
        // images): a few rounds, the rest waits for the next turn.
        for _ in 0..4 {
            if self.dirty.is_empty() {
                break;
            }
            for tok in std::mem::take(&mut self.dirty) {
                let Some(c) = self.conns.get_mut(tok) else {
                    continue;
                };
                let due = flush_all
                    || latency
                    || c.out.len() >= self.s.flush_bytes
                    || c.linger_until.is_some();
                if due {
                    self.write(tok);
                } else {
                    kept.push(tok);
                }
            }
        }
        self.dirty.append(&mut kept);
    }
}
