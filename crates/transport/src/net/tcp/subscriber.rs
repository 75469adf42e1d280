//! [`TcpSubscriber`]: a connection to the publisher (TLS when asked), re-made with back-off
//! and told what it lost, frames read from the stream into the receiver.

use super::sock_err;
use crate::error::OpenError;
use crate::net::config::NetConfig;
use crate::net::udp::NET_MAX_MESSAGE_LEN;
use crate::net::{now_ns, sys};
use crate::tls::{read_plain, write_pending};
use crate::{Message, SubscriberCounters, SubscriberEvent};
use peregrine_proto::join::JoinBackoff;
use peregrine_proto::receiver::{LateJoin, Progress, Receiver, ReceiverConfig};
use peregrine_wire::align_frame;
use peregrine_wire::header::{HEADER_LEN, MAGIC, VERSION};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

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
