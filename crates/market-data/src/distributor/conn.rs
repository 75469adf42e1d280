//! One client connection of the distributor: its socket, its TLS session when the listener
//! has one, and its output queue (the user-space buffer in front of the socket, which the core
//! counts and bounds; under TLS at most [`TLS_BUFFER_LIMIT`] more bytes wait in rustls).

use crate::tls::{read_plain, write_pending, TLS_BUFFER_LIMIT};
use mio::net::TcpStream;
use peregrine_md::distributor::ClientId;
use std::io::{self, Read, Write};
use std::time::Instant;

/// Bytes waiting to be written, in order: a buffer and how much of it was written. The
/// distributor's core bounds it (`max_queue_bytes`); its memory is given back once it
/// drains after a burst.
#[derive(Debug, Default)]
pub struct OutQueue {
    buf: Vec<u8>,
    head: usize,
}

/// Capacity an empty queue keeps; more is given back to the allocator.
const KEEP_CAPACITY: usize = 64 << 10;

impl OutQueue {
    pub fn len(&self) -> usize {
        self.buf.len() - self.head
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn push(&mut self, bytes: &[u8]) {
        self.tail().extend_from_slice(bytes);
    }
    /// The buffer to append to in place (what `write` appends lands behind the queued bytes).
    pub fn tail(&mut self) -> &mut Vec<u8> {
        if self.head > 0 && self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        }
        &mut self.buf
    }
    pub fn front(&self) -> &[u8] {
        &self.buf[self.head..]
    }
    /// `n` bytes of the front were written.
    pub fn consume(&mut self, n: usize) {
        self.head += n;
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(KEEP_CAPACITY);
            }
        } else if self.head >= KEEP_CAPACITY && self.head * 2 >= self.buf.len() {
            // Mostly written: move the rest to the front (at most as many bytes as were
            // written since the last move, so amortised O(1) per byte).
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }
    /// Bytes held, for the footprint.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

/// A client connection.
#[derive(Debug)]
pub struct Conn {
    pub stream: TcpStream,
    /// The TLS session, on a TLS listener.
    pub tls: Option<Box<rustls::Connection>>,
    /// The TLS handshake finished and the core was told the client's certificate.
    pub identified: bool,
    /// The client's address, for the log.
    pub peer: std::net::SocketAddr,
    /// The core's id; `None` once the core is done with it (closing).
    pub client: Option<ClientId>,
    pub out: OutQueue,
    /// In the list of queues with bytes not yet handed to the socket.
    pub dirty: bool,
    /// The socket refused a write: wait for it to turn writable.
    pub blocked: bool,
    /// Closing after its last answer: written, then the write side shut, then read to EOF,
    /// until this deadline at most.
    pub linger_until: Option<Instant>,
    pub write_shut: bool,
    /// The WebSocket JSON layer, for a connection of the WebSocket listener.
    pub ws: Option<Box<super::websocket::WsLayer>>,
}

/// What a write attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum Wrote {
    /// Everything queued was written, or the socket is full (`blocked` set).
    Ok,
    /// The connection failed.
    Failed(io::ErrorKind),
}

impl Conn {
    pub fn new(
        stream: TcpStream,
        tls: Option<rustls::ServerConnection>,
        client: ClientId,
        peer: std::net::SocketAddr,
    ) -> Conn {
        Conn {
            stream,
            identified: tls.is_none(),
            tls: tls.map(|t| Box::new(rustls::Connection::Server(t))),
            peer,
            client: Some(client),
            out: OutQueue::default(),
            dirty: false,
            blocked: false,
            linger_until: None,
            write_shut: false,
            ws: None,
        }
    }

    /// Reads what the client sent (plaintext, under TLS): `Ok(0)` at its end, `WouldBlock`
    /// when nothing is ready; a TLS failure is `InvalidData` naming it.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => self.stream.read(buf),
            Some(tls) => read_plain(tls, &mut self.stream, buf),
        }
    }

    /// Under TLS, once the handshake is done (and once only): the subject of the client's
    /// certificate, or `Some(None)` when it showed none.
    pub fn newly_identified(&mut self) -> Option<Option<String>> {
        if self.identified {
            return None;
        }
        let tls = self.tls.as_ref()?;
        if tls.is_handshaking() {
            return None;
        }
        self.identified = true;
        Some(
            tls.peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| crate::tls::certificate_subject(leaf)),
        )
    }

    /// Writes as much of the queue as the socket takes now.
    pub fn write_out(&mut self) -> Wrote {
        if self.tls.is_some() {
            return self.write_out_tls();
        }
        while !self.out.is_empty() {
            match self.stream.write(self.out.front()) {
                Ok(0) => return Wrote::Failed(io::ErrorKind::WriteZero),
                Ok(n) => self.out.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Wrote::Ok;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Wrote::Failed(e.kind()),
            }
        }
        self.shut_if_lingering();
        Wrote::Ok
    }

    fn shut_if_lingering(&mut self) {
        if self.linger_until.is_some() && !self.write_shut {
            if let Some(tls) = &mut self.tls {
                tls.send_close_notify();
                let _ = write_pending(tls, &mut self.stream);
            }
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
            self.write_shut = true;
        }
    }

    /// [`write_out`](Self::write_out) through rustls: the queue's bytes go into the session
    /// as far as its buffer limit lets them, and the session's records to the socket.
    fn write_out_tls(&mut self) -> Wrote {
        let Some(tls) = self.tls.as_mut() else {
            return Wrote::Ok;
        };
        loop {
            match write_pending(tls, &mut self.stream) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Wrote::Ok;
                }
                Err(e) => return Wrote::Failed(e.kind()),
            }
            if self.out.is_empty() {
                break;
            }
            // Plaintext written before the handshake ends waits in rustls (bounded by the
            // limit too) and leaves once it does.
            let take = self.out.len().min(TLS_BUFFER_LIMIT);
            match tls.writer().write(&self.out.front()[..take]) {
                Ok(0) => {
                    if !tls.wants_write() {
                        // Full, and nothing can leave before the handshake: wait for input.
                        return Wrote::Ok;
                    }
                }
                Ok(n) => self.out.consume(n),
                Err(e) => return Wrote::Failed(e.kind()),
            }
        }
        self.shut_if_lingering();
        Wrote::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_keeps_order_and_gives_memory_back_when_drained() {
        let mut q = OutQueue::default();
        q.push(&[1; 100_000]);
        q.push(&[2; 100_000]);
        q.consume(150_000);
        assert_eq!(q.len(), 50_000);
        assert!(q.front().iter().all(|&b| b == 2));
        q.push(&[3; 10]);
        q.consume(50_000);
        assert_eq!(q.front(), &[3; 10]);
        q.consume(10);
        assert!(q.is_empty() && q.capacity() <= KEEP_CAPACITY);
    }
}
