//! TCP driver (`tcp://HOST:PORT`): the publisher listens, subscribers connect.
//!
//! The stream carries the same frames as a datagram, back to back at 8-byte aligned offsets
//! (docs/protocol.md §1); messages longer than `frame` are fragmented. A new connection first
//! gets a HEARTBEAT (session and position), then every batch from the next one on.
//!
//! **Slow subscribers.** Each connection has a user-space queue for what the socket did not
//! take. When a queue passes `max_pending` bytes, `slow=backpressure` makes `offer` refuse
//! (nothing is dropped; the other subscribers wait too) and `slow=disconnect` drops that
//! connection (its subscriber reconnects and is told exactly what it lost). Back-pressure has a
//! bound: a connection that made offers wait and whose socket took nothing for
//! `flow_timeout_ms` (a subscriber that stopped: SIGSTOP, a hung host, one that connects and
//! never reads) is dropped as `slow=disconnect` would (counted in `flow_dropped`). A subscriber
//! that reads, however much slower than the publisher, is making progress: it is
//! back-pressured, never dropped, and loses nothing.
//!
//! **TLS** (`tls_cert`, `tls_key`, `tls_ca`, `tls_server_name`; [`crate::tls`]): the same
//! stream inside a TLS session. The publisher's queue holds plaintext; rustls takes at most
//! [`crate::tls::TLS_BUFFER_LIMIT`] of it ahead of the socket, so the slow-subscriber bounds
//! count what they did. A handshake that fails (another CA, a name, an expired certificate,
//! no client certificate where one is required) drops the connection and is counted
//! (`tls_refused` on either side); the subscriber retries with back-off, keeps the reason
//! (`TcpSubscriber::last_tls_error`) and tells it as a `SubscriberEvent::AttachFailed` (once
//! per reason), which reaches applications through the API, C and Python like any event.

use super::config::{NetConfig, SlowPolicy};
use super::now_ns;
use super::sys;
use super::udp::NET_MAX_MESSAGE_LEN;
use crate::error::{OfferError, OpenError};
use crate::tls::{read_plain, write_pending, TLS_BUFFER_LIMIT};
use crate::{Message, PublisherCounters, SubscriberCounters, SubscriberEvent};
use peregrine_proto::join::JoinBackoff;
use peregrine_proto::receiver::{LateJoin, Progress, Receiver, ReceiverConfig};
use peregrine_proto::sender::{Batch, Packing, SendError, Sender, SenderConfig};
use peregrine_wire::align_frame;
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::header::{HEADER_LEN, MAGIC, VERSION};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

const CONTROL_INTERVAL_NS: u64 = 1_000_000;

fn sock_err(uri: &str, what: impl Into<String>, source: io::Error) -> OpenError {
    OpenError::Socket {
        uri: uri.to_string(),
        what: what.into(),
        source,
    }
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// The TLS session, with `tls_cert` on the URI.
    tls: Option<Box<rustls::Connection>>,
    /// Bytes the socket has not taken yet, from `pending_at` on.
    pending: Vec<u8>,
    pending_at: usize,
    dead: bool,
    /// Bytes the socket (or the TLS session) has taken since the connection began: its
    /// subscriber's progress.
    taken: u64,
    /// Since when its queue has been past `max_pending` while offers were refused with no
    /// progress, and `taken` then.
    stall: Option<Stall>,
}

/// A connection holding offers back without taking anything (see [`Conn::stall`]).
#[derive(Debug, Clone, Copy)]
struct Stall {
    since_ns: u64,
    taken: u64,
}

impl Conn {
    fn queued(&self) -> usize {
        self.pending.len() - self.pending_at
    }

    /// Bytes wait for the socket (queued, or encrypted in the TLS session).
    fn has_output(&self) -> bool {
        self.queued() > 0 || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes `bytes` after anything queued; queues what the socket does not take.
    fn send(&mut self, bytes: &[u8]) {
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
    fn drain(&mut self) {
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
fn to_all(
    conns: &mut [Conn],
) -> impl FnMut(Batch<'_>) -> Result<(), std::convert::Infallible> + '_ {
    move |b| {
        for c in conns.iter_mut() {
            c.send(b.bytes);
        }
        Ok(())
    }
}

/// The publisher of one stream over TCP.
#[derive(Debug)]
pub struct TcpPublisher {
    cfg: NetConfig,
    uri: String,
    listener: TcpListener,
    conns: Vec<Conn>,
    sender: Sender,
    now_ns: u64,
    next_control_ns: u64,
    offers: u32,
    local: SocketAddrV4,
    closed: bool,
    /// Connections dropped by `slow=disconnect`, by a write error, or for holding the
    /// publisher back past `flow_timeout_ms`.
    pub disconnected: u64,
    /// Connections whose TLS handshake failed (or that broke TLS later).
    pub tls_refused: u64,
    /// Connections dropped for holding the publisher back past `flow_timeout_ms`.
    pub flow_dropped: u64,
}

impl TcpPublisher {
    pub fn create(
        cfg: &NetConfig,
        uri: &str,
        session_id: u32,
        stream_id: u32,
    ) -> Result<Self, OpenError> {
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| sock_err(uri, "cannot create a TCP socket", e))?;
        // A restarted publisher can listen again while old connections sit in TIME_WAIT.
        let _ = sock.set_reuse_address(true);
        sock.bind(&SockAddr::from(cfg.addr)).map_err(|e| {
            let what = match e.raw_os_error() {
                Some(libc::EADDRINUSE) => format!(
                    "cannot listen on {}: the port is in use (another publisher? choose another port)",
                    cfg.addr
                ),
                Some(libc::EADDRNOTAVAIL) => format!(
                    "cannot listen on {}: {} is not an address of this host",
                    cfg.addr,
                    cfg.addr.ip()
                ),
                _ => format!("cannot listen on {}", cfg.addr),
            };
            sock_err(uri, what, e)
        })?;
        sock.listen(128)
            .map_err(|e| sock_err(uri, format!("cannot listen on {}", cfg.addr), e))?;
        sock.set_nonblocking(true)
            .map_err(|e| sock_err(uri, "cannot make the socket non-blocking", e))?;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket_ipv4())
            .unwrap_or(cfg.addr);
        let sender = Sender::new(SenderConfig {
            mode: cfg.mode,
            max_batch_len: 256 << 10,
            ..SenderConfig::new(session_id, stream_id, Packing::Stream, cfg.segment_len)
        });
        Ok(TcpPublisher {
            cfg: cfg.clone(),
            uri: uri.to_string(),
            listener: sock.into(),
            conns: Vec::new(),
            sender,
            now_ns: now_ns(),
            next_control_ns: 0,
            offers: 0,
            local,
            closed: false,
            disconnected: 0,
            flow_dropped: 0,
            tls_refused: 0,
        })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }
    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        self.offer_inner(payload.len(), |b| b.copy_from_slice(payload), Some(payload))
    }

    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        self.offer_inner(len, fill, None)
    }

    /// `offer` passes its slice as `whole`, so a fragmented message is cut from it directly
    /// (`offer_with` has to fill a temporary buffer first).
    #[inline]
    fn offer_inner<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
        whole: Option<&[u8]>,
    ) -> Result<u64, OfferError> {
        if self.closed {
            return Err(OfferError::Closed);
        }
        if len > NET_MAX_MESSAGE_LEN {
            return Err(OfferError::TooLarge {
                len,
                max: NET_MAX_MESSAGE_LEN,
            });
        }
        self.offers = self.offers.wrapping_add(1);
        if self.sender.pending_len() == 0 || self.offers & 63 == 0 {
            self.now_ns = now_ns();
            if self.now_ns >= self.next_control_ns {
                // New subscribers join between batches: send what is batched (at most once a
                // millisecond), so a steady stream of offers never starves them.
                self.send_pending();
                self.control();
            }
        }
        if self.conns.iter().any(|c| c.queued() > self.cfg.max_pending) {
            for c in &mut self.conns {
                c.drain();
            }
            match self.cfg.slow {
                SlowPolicy::BackPressure => {
                    if self.conns.iter().any(|c| c.queued() > self.cfg.max_pending) {
                        // Refused. A connection past the limit that has taken nothing for
                        // `flow_timeout_ms` is stalled: it ends (its subscriber reconnects and
                        // is told what it missed). One that takes bytes, however slowly, is
                        // making progress: it holds the publisher back, as TCP itself would,
                        // and is never dropped for it (`slow=disconnect` is for publishers that
                        // must not wait).
                        self.now_ns = now_ns();
                        let (now, max) = (self.now_ns, self.cfg.max_pending);
                        for c in &mut self.conns {
                            if c.queued() <= max {
                                continue;
                            }
                            match c.stall {
                                Some(s) if s.taken == c.taken => {
                                    if now.saturating_sub(s.since_ns) >= self.cfg.flow_timeout_ns {
                                        c.dead = true;
                                        self.flow_dropped += 1;
                                    }
                                }
                                // First refusal, or progress since the clock started: the
                                // clock starts again.
                                _ => {
                                    c.stall = Some(Stall {
                                        since_ns: now,
                                        taken: c.taken,
                                    })
                                }
                            }
                        }
                        self.reap();
                    }
                    if self.conns.iter().any(|c| c.queued() > self.cfg.max_pending) {
                        self.sender.note_back_pressure();
                        return Err(OfferError::BackPressured);
                    }
                }
                SlowPolicy::Disconnect => {
                    let max = self.cfg.max_pending;
                    for c in &mut self.conns {
                        if c.queued() > max {
                            c.dead = true;
                        }
                    }
                    self.reap();
                }
            }
        }
        let Self {
            sender,
            conns,
            now_ns,
            ..
        } = self;
        let mut sink = to_all(conns);
        match whole {
            Some(payload) => sender.offer(payload, *now_ns, &mut sink),
            None => sender.offer_with(len, *now_ns, &mut sink, fill),
        }
        .map_err(|e| match e {
            SendError::TooLarge { len, max } => OfferError::TooLarge { len, max },
            SendError::BackPressured => OfferError::BackPressured,
            SendError::Sink(never) => match never {},
        })
    }

    /// Hands the pending batch to the connections.
    fn send_pending(&mut self) {
        let Self {
            sender,
            conns,
            now_ns,
            ..
        } = self;
        let mut sink = to_all(conns);
        let _ = sender.flush(*now_ns, &mut sink);
    }

    pub fn flush(&mut self) -> Result<(), OfferError> {
        self.now_ns = now_ns();
        self.send_pending();
        Ok(())
    }

    /// The duty cycle: sends a batch whose interval passed, drains queues, accepts new
    /// subscribers, sends heartbeats while idle.
    pub fn do_work(&mut self) -> usize {
        self.now_ns = now_ns();
        let Self {
            sender,
            conns,
            now_ns,
            ..
        } = self;
        let mut work = 0;
        let polled = sender.poll(*now_ns, &mut to_all(conns));
        if let Ok(out) = polled {
            if out.heartbeat_due {
                let hb = sender.heartbeat();
                for c in conns.iter_mut() {
                    c.send(&hb);
                }
                sender.heartbeat_sent(*now_ns);
            }
        }
        for c in self.conns.iter_mut() {
            if c.has_output() {
                c.drain();
                work += 1;
            }
            // Under the limit again: no clock runs.
            if c.queued() <= self.cfg.max_pending {
                c.stall = None;
            }
        }
        if self.now_ns >= self.next_control_ns {
            self.send_pending();
            work += self.control();
        }
        work
    }

    /// Accepts connections (only between batches, so a new subscriber starts on a frame
    /// boundary) and reaps dead ones.
    fn control(&mut self) -> usize {
        self.next_control_ns = self.now_ns + CONTROL_INTERVAL_NS;
        let mut n = 0;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    n += 1;
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    if sys::set_buffer_force(&stream, false, self.cfg.sndbuf).is_err() {
                        let _ =
                            socket2::SockRef::from(&stream).set_send_buffer_size(self.cfg.sndbuf);
                    }
                    let tls = match self.cfg.tls.as_ref().and_then(|t| t.server.as_ref()) {
                        Some(server) => match server.accept() {
                            Ok(session) => Some(Box::new(rustls::Connection::Server(session))),
                            Err(_) => continue,
                        },
                        None => None,
                    };
                    let mut c = Conn {
                        stream,
                        tls,
                        pending: Vec::new(),
                        pending_at: 0,
                        dead: false,
                        taken: 0,
                        stall: None,
                    };
                    c.send(&self.sender.heartbeat());
                    self.conns.push(c);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        // Detect subscribers that closed: a readable socket with EOF (subscribers never send
        // data; under TLS their handshake and alerts come this way).
        let mut probe = [0u8; 64];
        for c in &mut self.conns {
            let read = match &mut c.tls {
                None => c.stream.read(&mut probe),
                Some(tls) => read_plain(tls, &mut c.stream, &mut probe),
            };
            match read {
                Ok(0) => c.dead = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        self.tls_refused += 1;
                    }
                    c.dead = true;
                }
            }
        }
        self.reap();
        n
    }

    fn reap(&mut self) {
        let before = self.conns.len();
        self.conns.retain(|c| !c.dead);
        self.disconnected += (before - self.conns.len()) as u64;
    }

    pub fn max_message_len(&self) -> usize {
        NET_MAX_MESSAGE_LEN
    }
    pub fn subscriber_count(&self) -> usize {
        self.conns.len()
    }
    pub fn session_id(&self) -> u32 {
        self.sender.config().session_id
    }
    pub fn counters(&self) -> PublisherCounters {
        let s = self.sender.stats();
        PublisherCounters {
            messages: s.messages,
            bytes: s.bytes,
            back_pressured: s.back_pressured,
            subscribers_reaped: self.disconnected,
            flow_dropped: self.flow_dropped,
            ..PublisherCounters::default()
        }
    }

    /// Sends what is batched and a BYE, then waits up to a second for the queues to drain.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        let _ = self.flush();
        let mut bye = [0u8; BYE_LEN];
        let cfg = self.sender.config();
        ByeRepr {
            session_id: cfg.session_id,
            stream_id: cfg.stream_id,
            final_next_sequence: self.sender.next_sequence(),
        }
        .emit(&mut ByeFrame::new_unchecked(&mut bye[..]));
        for c in &mut self.conns {
            c.send(&bye);
        }
        let deadline = now_ns() + 1_000_000_000;
        while self.conns.iter().any(|c| c.has_output() && !c.dead) && now_ns() < deadline {
            for c in &mut self.conns {
                c.drain();
                if c.has_output() {
                    sys::wait_writable(c.stream.as_raw_fd(), 10);
                }
            }
        }
        self.closed = true;
    }
}

impl Drop for TcpPublisher {
    fn drop(&mut self) {
        self.close();
    }
}

/// The subscriber of one stream over TCP. It connects (and reconnects) to the publisher.
#[derive(Debug)]
pub struct TcpSubscriber {
    cfg: NetConfig,
    uri: String,
    /// Connected, or connecting (non-blocking connect in progress).
    stream: Option<(Socket, bool)>,
    /// The connection's TLS session, with `tls_ca` on the URI (boxed: a session is several
    /// KiB, and most subscribers have none).
    tls: Option<Box<rustls::Connection>>,
    buf: Vec<u8>,
    /// Valid bytes in `buf` from `start` to `end`.
    start: usize,
    end: usize,
    /// Where the frames already checked as complete end (`start..checked`): a poll that
    /// delivers only `limit` messages leaves the rest checked, and the next one goes on from
    /// here instead of checking them again (with a full buffer that was most of the time).
    checked: usize,
    receiver: Receiver,
    /// Connects to a publisher that does not answer back off (a forged advertisement can name
    /// anybody's address).
    join: JoinBackoff,
    now_ns: u64,
    polls: u32,
    /// Connections lost because the stream broke the framing rules.
    pub corrupt_streams: u64,
    /// Connections whose TLS handshake failed, and the last reason.
    pub tls_refused: u64,
    last_tls_error: Option<String>,
    /// A failed handshake's `AttachFailed`, not handed out yet (one per change of reason: a
    /// handshake that keeps failing for one reason is told once).
    tls_event: Option<SubscriberEvent>,
}

impl TcpSubscriber {
    pub fn new(cfg: &NetConfig, uri: &str, stream_id: u32) -> Result<Self, OpenError> {
        let rcfg = ReceiverConfig {
            // The connection tells when the publisher goes; silence is not death on TCP.
            session_timeout_ns: u64::MAX / 4,
            max_message_len: NET_MAX_MESSAGE_LEN,
            // The connection vouches for its frames (no one else can put a frame in it), and a
            // reconnection after `slow=disconnect` legitimately jumps as far as the publisher
            // went in between. Late join needs NAKs, which TCP does not use.
            max_jump_frames: u64::MAX,
            late_join: LateJoin::None,
            ..ReceiverConfig::new(stream_id, crate::random_u32() | 1)
        };
        let mut s = TcpSubscriber {
            cfg: cfg.clone(),
            uri: uri.to_string(),
            stream: None,
            tls: None,
            buf: vec![0; (cfg.segment_len * 2).max(256 << 10)],
            start: 0,
            end: 0,
            checked: 0,
            receiver: Receiver::new(rcfg),
            join: JoinBackoff::new(cfg.join, now_ns()),
            now_ns: now_ns(),
            polls: 0,
            corrupt_streams: 0,
            tls_refused: 0,
            last_tls_error: None,
            tls_event: None,
        };
        if cfg.tls.is_some() && s.client_tls().is_none() {
            return Err(sock_err(
                uri,
                "a TLS subscriber needs tls_ca (the CA the publisher's certificate must chain to)",
                io::ErrorKind::InvalidInput.into(),
            ));
        }
        s.join.poll(s.now_ns);
        s.connect()?;
        Ok(s)
    }

    fn client_tls(&self) -> Option<&crate::tls::ClientTls> {
        self.cfg.tls.as_ref().and_then(|t| t.client.as_ref())
    }

    /// Why the last TLS handshake failed, if one did (the subscriber keeps retrying).
    pub fn last_tls_error(&self) -> Option<&str> {
        self.last_tls_error.as_deref()
    }

    /// Starts a non-blocking connect.
    fn connect(&mut self) -> Result<(), OpenError> {
        self.tls = match self.client_tls() {
            Some(tls) => Some(Box::new(rustls::Connection::Client(
                tls.connect(&self.cfg.addr.ip().to_string()).map_err(|e| {
                    sock_err(
                        &self.uri,
                        format!("TLS: {e}"),
                        io::ErrorKind::InvalidInput.into(),
                    )
                })?,
            ))),
            None => None,
        };
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| sock_err(&self.uri, "cannot create a TCP socket", e))?;
        sock.set_nonblocking(true)
            .map_err(|e| sock_err(&self.uri, "cannot make the socket non-blocking", e))?;
        let _ = sock.set_tcp_nodelay(true);
        if sys::set_buffer_force(&sock, true, self.cfg.rcvbuf).is_err() {
            let _ = sock.set_recv_buffer_size(self.cfg.rcvbuf);
        }
        match sock.connect(&SockAddr::from(self.cfg.addr)) {
            Ok(()) => self.stream = Some((sock, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                self.stream = Some((sock, false))
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => self.retry_later(),
            Err(e)
                if e.raw_os_error() == Some(libc::ENETUNREACH)
                    || e.raw_os_error() == Some(libc::EADDRNOTAVAIL) =>
            {
                return Err(sock_err(
                    &self.uri,
                    format!("cannot reach {}", self.cfg.addr),
                    e,
                ))
            }
            Err(_) => self.retry_later(),
        }
        Ok(())
    }

    /// The attempt failed: the next one comes when the backoff says.
    fn retry_later(&mut self) {
        self.stream = None;
    }

    fn lost_connection(&mut self) {
        self.tls = None;
        self.receiver.disconnected(SocketAddr::V4(self.cfg.addr));
        self.start = 0;
        self.end = 0;
        self.checked = 0;
        self.retry_later();
    }

    /// Delivers up to `limit` messages; never blocks.
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        self.polls = self.polls.wrapping_add(1);
        let mut n = self.deliver(handler, limit);
        if n < limit && self.read() {
            n += self.deliver(handler, limit - n);
        }
        if n == 0 || self.polls & 1023 == 0 {
            self.now_ns = now_ns();
            self.timers();
        }
        n
    }

    /// Delivers complete frames from the buffer.
    fn deliver<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        // Find the end of the last complete frame, checking each header enough to trust its
        // length; a stream that breaks framing cannot be resynchronised: reconnect.
        let mut at = self.checked.max(self.start);
        while self.end - at >= HEADER_LEN {
            let h = &self.buf[at..];
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let magic = u16::from_le_bytes([h[4], h[5]]);
            // The publisher's `frame` setting is at most 16 MiB.
            if magic != MAGIC || h[6] != VERSION || !(HEADER_LEN..=(16 << 20) + 64).contains(&len) {
                self.corrupt_streams += 1;
                self.lost_connection();
                return 0;
            }
            // The sender pads every frame on a stream to 8 bytes.
            let next = at + align_frame(len);
            if next > self.end {
                break;
            }
            at = next;
        }
        self.checked = at;
        if at == self.start {
            return 0;
        }
        let complete = at;
        let (n, p) = self.receiver.on_datagram(
            &self.buf[..complete],
            self.start,
            SocketAddr::V4(self.cfg.addr),
            self.now_ns,
            handler,
            limit,
        );
        self.start = match p {
            Progress::Resume(o) => o,
            Progress::Done => complete,
        };
        n
    }

    /// Reads what the socket has; returns whether anything arrived.
    fn read(&mut self) -> bool {
        let Some((sock, connected)) = &mut self.stream else {
            return false;
        };
        if !*connected {
            match sock.take_error() {
                Ok(Some(_)) | Err(_) => {
                    self.retry_later();
                    return false;
                }
                Ok(None) => {}
            }
            if sock.peer_addr().is_err() {
                return false; // still connecting
            }
            *connected = true;
            if let Some(tls) = &mut self.tls {
                // The ClientHello.
                let mut out: &Socket = sock;
                let _ = write_pending(tls, &mut out);
            }
        }
        // Compact, and grow to hold one whole frame.
        if self.start > 0
            && (self.start == self.end || self.buf.len() - self.end < self.buf.len() / 4)
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.checked -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let new_len = self.buf.len() * 2;
            self.buf.resize(new_len, 0);
        }
        let mut stream: &Socket = sock;
        let read = match &mut self.tls {
            None => stream.read(&mut self.buf[self.end..]),
            Some(tls) => read_plain(tls, &mut stream, &mut self.buf[self.end..]),
        };
        match read {
            Ok(0) => {
                self.lost_connection();
                false
            }
            Ok(k) => {
                self.end += k;
                // Delayed ACKs: this connection carries data one way, so every ACK is a pure
                // ACK segment, and the kernel's quick-ACK mode sends one per segment received,
                // in the receive path before the data reaches this read. Leaving quick-ACK mode
                // after each read (the kernel re-enters it by itself) cut the TCP ping-pong
                // median from about 12.3 to 9.8 us on loopback (6 paired runs of `peregrine
                // bench pingpong --transport tcp`; forcing quick ACKs instead: 13.3 us).
                let _ = sock.set_tcp_quickack(false);
                true
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                false
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    self.tls_refused += 1;
                    let reason = e.to_string();
                    if self.last_tls_error.as_deref() != Some(reason.as_str()) {
                        self.tls_event = Some(SubscriberEvent::AttachFailed {
                            reason: format!("{}: TLS handshake failed: {reason}", self.uri),
                        });
                    }
                    self.last_tls_error = Some(reason);
                }
                self.lost_connection();
                false
            }
        }
    }

    fn timers(&mut self) {
        if self.receiver.is_connected() {
            self.join.answered(self.now_ns);
        } else if self.stream.is_none() && self.join.poll(self.now_ns) {
            let _ = self.connect();
        }
        // Session timeouts (no heartbeat for `timeout_ms`); STATUS is not used on TCP.
        self.receiver.poll(self.now_ns, &mut |_, _| {});
    }

    /// The next event: the receiver's (connected, lost, publisher closed...), and
    /// `AttachFailed` when a TLS handshake fails (once per reason; the subscriber keeps
    /// retrying with back-off).
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        self.tls_event.take().or_else(|| self.receiver.next_event())
    }
    pub fn is_connected(&self) -> bool {
        self.receiver.is_connected()
    }
    pub fn counters(&self) -> SubscriberCounters {
        self.receiver.counters()
    }
    /// The counters of each session followed now, by session id.
    pub fn session_counters(&self) -> Vec<(u32, SubscriberCounters)> {
        self.receiver.session_counters().collect()
    }
}

impl peregrine_agent::Wake for TcpSubscriber {
    fn prepare_wait(&mut self) {}
    fn wait(&mut self, timeout_ns: u64) {
        let ms = timeout_ns.div_ceil(1_000_000).clamp(1, 100) as i32;
        match &self.stream {
            Some((s, _)) => sys::wait_readable(&[s.as_raw_fd()], ms),
            None => std::thread::sleep(std::time::Duration::from_millis(ms as u64)),
        }
    }
    fn cancel_wait(&mut self) {}
}

#[cfg(test)]
mod tests {
    use crate::{AnyPublisher, AnySubscriber, Uri};
    use std::time::{Duration, Instant};

    /// The subscriber's connection carries data one way: after a read it leaves quick-ACK mode
    /// (delayed ACKs), which the kernel reports through TCP_QUICKACK.
    #[test]
    fn the_subscriber_leaves_quick_ack_mode_after_each_read() {
        let mut publ =
            AnyPublisher::open(&Uri::parse("tcp://127.0.0.1:0").unwrap(), "t", 1, 7).unwrap();
        let bound = format!("tcp://{}", publ.local_addr().unwrap());
        let AnySubscriber::Tcp(mut sub) =
            AnySubscriber::open(&Uri::parse(&bound).unwrap(), "t", 1, false).unwrap()
        else {
            panic!("a tcp:// URI opens a TCP subscriber")
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = 0;
        while got == 0 {
            assert!(Instant::now() < deadline, "nothing arrived");
            publ.do_work();
            if publ.subscriber_count() > 0 {
                let _ = publ.offer(b"ping");
                let _ = publ.flush();
            }
            got += sub.poll(&mut |_| {}, 16);
            std::thread::sleep(Duration::from_millis(1));
        }
        let (sock, connected) = sub.stream.as_ref().expect("connected");
        assert!(*connected);
        assert!(!sock.tcp_quickack().unwrap(), "delayed ACKs after a read");
    }
}
