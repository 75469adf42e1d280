//! One subscriber's connection on the publisher's side: its queue of what the socket did not
//! take, written through TLS when there is a session, and how long it has made no progress.

use crate::tls::{write_pending, TLS_BUFFER_LIMIT};
use peregrine_proto::sender::Batch;
use std::io::{self, Write};
use std::net::TcpStream;

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// The TLS session, with `tls_cert` on the URI.
    pub(super) tls: Option<Box<rustls::Connection>>,
    /// Bytes the socket has not taken yet, from `pending_at` on.
    pub(super) pending: Vec<u8>,
    pub(super) pending_at: usize,
    pub(super) dead: bool,
    /// Bytes the socket (or the TLS session) has taken since the connection began: its
    /// subscriber's progress.
    pub(super) taken: u64,
    /// Since when its queue has been past `max_pending` while offers were refused with no
    /// progress, and `taken` then.
    pub(super) stall: Option<Stall>,
}

/// A connection holding offers back without taking anything (see [`Conn::stall`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Stall {
    pub(super) since_ns: u64,
    pub(super) taken: u64,
}

impl Conn {
    pub(super) fn queued(&self) -> usize {
        self.pending.len() - self.pending_at
    }

    /// Bytes wait for the socket (queued, or encrypted in the TLS session).
    pub(super) fn has_output(&self) -> bool {
        self.queued() > 0 || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes `bytes` after anything queued; queues what the socket does not take.
    pub(super) fn send(&mut self, bytes: &[u8]) {
        if self.dead {
            return;
        }
        if self.tls.is_some() {
            if self.queued() == 0 {
                self.pending.clear();
                self.pending_at = 0;
            }
            self.pending.extend_from_slice(bytes);
            self.drain();
            return;
        }
        self.drain();
        if self.queued() > 0 {
            self.pending.extend_from_slice(bytes);
            return;
        }
        let mut off = 0;
        while off < bytes.len() {
            match self.stream.write(&bytes[off..]) {
                Ok(0) => {
                    self.dead = true;
                    return;
                }
                Ok(n) => {
                    off += n;
                    self.taken += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.dead = true;
                    return;
                }
            }
        }
        if off < bytes.len() {
            self.pending.clear();
            self.pending_at = 0;
            self.pending.extend_from_slice(&bytes[off..]);
        }
    }

    /// Writes queued bytes while the socket takes them.
    pub(super) fn drain(&mut self) {
        if let Some(tls) = &mut self.tls {
            // Records first, then more plaintext into the session, until the socket is full.
            while !self.dead {
                match write_pending(tls, &mut self.stream) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(_) => {
                        self.dead = true;
                        return;
                    }
                }
                let queued = self.pending.len() - self.pending_at;
                if queued == 0 {
                    break;
                }
                let take = queued.min(TLS_BUFFER_LIMIT);
                let at = self.pending_at;
                match tls.writer().write(&self.pending[at..at + take]) {
                    // The session is full before its handshake ended: wait for it.
                    Ok(0) if !tls.wants_write() => return,
                    Ok(n) => {
                        self.pending_at += n;
                        self.taken += n as u64;
                    }
                    Err(_) => self.dead = true,
                }
            }
            if self.queued() == 0 {
                self.pending.clear();
                self.pending_at = 0;
            }
            return;
        }
        while self.queued() > 0 && !self.dead {
            match self.stream.write(&self.pending[self.pending_at..]) {
                Ok(0) => self.dead = true,
                Ok(n) => {
                    self.pending_at += n;
                    self.taken += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.dead = true,
            }
        }
        if self.queued() == 0 {
            self.pending.clear();
            self.pending_at = 0;
        }
    }
}

/// The sink that writes a batch to every connection. It cannot fail: a connection that fails
/// is marked dead and reaped, the others carry on.
pub(super) fn to_all(
    conns: &mut [Conn],
) -> impl FnMut(Batch<'_>) -> Result<(), std::convert::Infallible> + '_ {
    move |b| {
        for c in conns.iter_mut() {
            c.send(b.bytes);
        }
        Ok(())
    }
}
