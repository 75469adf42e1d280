//! [`TcpPublisher`]: the listener, a HEARTBEAT to each new connection, every batch to every
//! connection, and the slow-subscriber rules.

use super::conn::{to_all, Conn, Stall};
use super::{sock_err, CONTROL_INTERVAL_NS};
use crate::error::{OfferError, OpenError};
use crate::net::config::{NetConfig, SlowPolicy};
use crate::net::udp::NET_MAX_MESSAGE_LEN;
use crate::net::{now_ns, sys};
use crate::tls::read_plain;
use crate::PublisherCounters;
use peregrine_proto::sender::{Packing, SendError, Sender, SenderConfig};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read};
use std::net::{SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;

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
    /// Set by the general offer when it leaves no connection past `max_pending` and the
    /// publisher open, cleared by everything else that may change a queue: while it holds,
    /// an offer that needs nothing but writing into the batch takes the inline path.
    clear_to_batch: bool,
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
            clear_to_batch: false,
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

    #[inline(always)]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        self.offer_inner(payload.len(), |b| b.copy_from_slice(payload), Some(payload))
    }

    #[inline(always)]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        self.offer_inner(len, fill, None)
    }

    /// `offer` passes its slice as `whole`, so a fragmented message is cut from it directly
    /// (`offer_with` has to fill a temporary buffer first).
    ///
    /// The common case is inline in the caller's loop: no connection past its limit, no clock
    /// to read (it is read every 64 sequence numbers), and a message that only needs writing
    /// into the batch ([`Sender::offer_in_batch`]). Everything else is out of line. With both
    /// calls (the API's and this one) out of line, a TCP publisher of 32-byte messages spent
    /// about 13 ns an offer outside the kernel, nearly as long as its `send` took (15 ns a
    /// message).
    #[inline(always)]
    fn offer_inner<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
        whole: Option<&[u8]>,
    ) -> Result<u64, OfferError> {
        // The clock is read when the next sequence is a multiple of 64 (the general path), or
        // when a batch begins: at least every 64 messages of one frame. The sender's own count
        // serves, rather than a counter of offers to load, add to and store each time.
        let fill = if self.clear_to_batch
            && clock_not_due(self.sender.next_sequence())
            && len <= NET_MAX_MESSAGE_LEN
        {
            match self.sender.offer_in_batch(len, fill) {
                Ok(sequence) => return Ok(sequence),
                Err(fill) => fill,
            }
        } else {
            fill
        };
        self.offer_general(len, fill, whole)
    }

    /// Everything but the inline case; it says afterwards whether the next offer may take it.
    #[inline(never)]
    fn offer_general<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
        whole: Option<&[u8]>,
    ) -> Result<u64, OfferError> {
        let r = self.offer_checked(len, fill, whole);
        let max = self.cfg.max_pending;
        self.clear_to_batch = !self.closed && self.conns.iter().all(|c| c.queued() <= max);
        r
    }

    /// The checks (closed, size, the clock, the connections' queues), then the sender.
    #[inline(always)]
    fn offer_checked<F: FnOnce(&mut [u8])>(
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
        if self.sender.pending_len() == 0 || !clock_not_due(self.sender.next_sequence()) {
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
        self.clear_to_batch = false;
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
        self.clear_to_batch = false;
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
        self.clear_to_batch = false;
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
        self.clear_to_batch = false;
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
        self.clear_to_batch = false;
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

/// Whether an offer whose message would take sequence `next` may skip reading the clock: all
/// but one sequence number in 64.
#[inline(always)]
fn clock_not_due(next: u64) -> bool {
    next & 63 != 0
}

impl Drop for TcpPublisher {
    fn drop(&mut self) {
        self.close();
    }
}
