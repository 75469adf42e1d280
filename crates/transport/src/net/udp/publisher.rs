//! [`UdpPublisher`]: a stream's sender on `udp://` or `mcast://`, its control socket (STATUS,
//! NAK, JOIN and LEAVE from subscribers) and its repair.

use super::send::{
    gso_batch_datagrams, map_send_error, open_datagram, send_batch_to, send_frame, to_all,
    Outbound, Sockets,
};
use super::socket::{bind_error, check_iface, line_b_socket, offload, set_buffer, sock_err};
use super::{CONTROL_INTERVAL_NS, NET_MAX_MESSAGE_LEN, RECEIVER_TIMEOUT_NS};
use crate::error::{OfferError, OpenError};
use crate::net::config::NetConfig;
use crate::net::xdp::{XdpTx, FRAME_SIZE};
use crate::net::{now_ns, sys};
use crate::uri::Scheme;
use crate::PublisherCounters;
use peregrine_proto::auth::AuthReject;
use peregrine_proto::lossgen::{Direction, LossCounters};
use peregrine_proto::receiver_table::{ReceiverTable, StatusOutcome, TableConfig};
use peregrine_proto::sender::{Batch, Packing, Sender, SenderConfig, SenderStats};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::header::FrameType;
use peregrine_wire::nak::{NakFrame, NakRepr};
use peregrine_wire::packet::HEADERS_LEN;
use peregrine_wire::status::{StatusFrame, StatusRepr};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;

/// The publisher of one stream over UDP unicast or multicast.
#[derive(Debug)]
pub struct UdpPublisher {
    cfg: NetConfig,
    uri: String,
    sock: Sockets,
    sender: Sender,
    table: ReceiverTable,
    /// Where batches go: the receivers (unicast) or the group (multicast).
    dests: Vec<SocketAddr>,
    gso: bool,
    now_ns: u64,
    next_control_ns: u64,
    offers: u32,
    control_buf: Box<[u8; 2048]>,
    local: SocketAddrV4,
    closed: bool,
    out: Outbound,
    /// STATUS frames that failed to parse.
    pub bad_control_frames: u64,
    /// Datagrams dropped by `auth=`, by [`AuthReject::index`].
    auth_rejected: [u64; AuthReject::NAMES.len()],
}

impl UdpPublisher {
    /// Binds the publisher of stream `stream_id` as `cfg` says.
    pub fn create(
        cfg: &NetConfig,
        uri: &str,
        session_id: u32,
        stream_id: u32,
    ) -> Result<Self, OpenError> {
        let mcast = cfg.scheme == Scheme::Mcast;
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| sock_err(uri, "cannot create a UDP socket", e))?;
        let bind = if mcast {
            let iface = cfg.iface.unwrap_or(Ipv4Addr::LOCALHOST);
            check_iface(uri, iface)?;
            SocketAddrV4::new(iface, 0)
        } else {
            cfg.addr
        };
        sock.bind(&SockAddr::from(bind))
            .map_err(|e| bind_error(uri, bind, e))?;
        if mcast {
            let iface = cfg.iface.unwrap_or(Ipv4Addr::LOCALHOST);
            sock.set_multicast_if_v4(&iface)
                .map_err(|e| sock_err(uri, format!("cannot send multicast on iface={iface}"), e))?;
            sock.set_multicast_ttl_v4(cfg.ttl)
                .map_err(|e| sock_err(uri, "cannot set the multicast TTL", e))?;
            sock.set_multicast_loop_v4(cfg.loopback)
                .map_err(|e| sock_err(uri, "cannot set multicast loopback", e))?;
        }
        set_buffer(&sock, false, cfg.sndbuf);
        set_buffer(&sock, true, 1 << 20);
        let _ = sys::set_pmtu_do(&sock);
        sock.set_nonblocking(true)
            .map_err(|e| sock_err(uri, "cannot make the socket non-blocking", e))?;
        let gso = offload(uri, "UDP GSO", cfg.gso, || {
            sys::set_udp_segment(&sock, cfg.segment_len)
        });
        let local = match sock.local_addr().ok().and_then(|a| a.as_socket_ipv4()) {
            Some(a) => a,
            None => bind,
        };
        let (line_b, gso) = match (cfg.iface_b, cfg.path_b) {
            (Some(iface), Some(group)) => {
                let (b, b_gso) = line_b_socket(cfg, uri, iface)?;
                // One batch goes to both lines: GSO only if both sockets take it.
                (Some((b, group.into())), gso && b_gso)
            }
            _ => (None, gso),
        };
        let sock = Sockets {
            main: sock.into(),
            line_b,
        };
        let sender = Sender::new(SenderConfig {
            mode: cfg.mode,
            retain_bytes: cfg.retain_bytes,
            retain_age_ns: cfg.retain_age_ns,
            rate_bytes_per_s: cfg.rate_bytes_per_s,
            retransmit_rate_bytes_per_s: cfg.retransmit_rate_bytes_per_s,
            // Whole datagrams as they leave (sealed ones are larger) within one GSO send.
            max_batch_len: gso_batch_datagrams(cfg.segment_len) * cfg.sender_segment_len(),
            ..SenderConfig::new(
                session_id,
                stream_id,
                Packing::Datagrams,
                cfg.sender_segment_len(),
            )
        });
        let mut out = Outbound::new(cfg);
        if let Some(x) = &cfg.xdp {
            let xdp_err = |error| OpenError::Xdp {
                uri: uri.to_string(),
                error,
            };
            let max = FRAME_SIZE as usize - HEADERS_LEN;
            if cfg.segment_len > max {
                return Err(OpenError::Uri(crate::uri::UriError {
                    uri: uri.to_string(),
                    problem: format!(
                        "datagram={} is too large for xdp= (a frame of {FRAME_SIZE} bytes carries at most {max}): give datagram={} or less",
                        cfg.segment_len,
                        max - max % 8
                    ),
                }));
            }
            let ttl = if mcast { cfg.ttl.min(255) as u8 } else { 64 };
            out.xdp = Some(Box::new(XdpTx::open(x, local, ttl).map_err(xdp_err)?));
        }
        Ok(UdpPublisher {
            cfg: cfg.clone(),
            uri: uri.to_string(),
            sock,
            sender,
            table: ReceiverTable::new(TableConfig {
                timeout_ns: RECEIVER_TIMEOUT_NS.max(cfg.timeout_ns / 2),
                flow_timeout_ns: cfg.flow_timeout_ns,
                ..TableConfig::new(stream_id)
            }),
            // Multicast: the group, and the B line's group when two paths carry the stream.
            dests: if mcast {
                std::iter::once(cfg.addr)
                    .chain(cfg.path_b)
                    .map(SocketAddr::V4)
                    .collect()
            } else {
                Vec::new()
            },
            gso,
            now_ns: now_ns(),
            next_control_ns: 0,
            offers: 0,
            control_buf: Box::new([0; 2048]),
            local,
            closed: false,
            out,
            bad_control_frames: 0,
            auth_rejected: [0; AuthReject::NAMES.len()],
        })
    }

    /// The address the publisher's socket is bound to (for `udp://…:0`, the port it got).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }
    /// The URI subscribers use (with the bound port for `udp://…:0`).
    pub fn uri(&self) -> &str {
        &self.uri
    }
    /// Whether batches leave as one GSO send.
    pub fn gso(&self) -> bool {
        self.gso
    }
    /// The kernel bypass's send side, with `xdp=`.
    pub fn xdp(&self) -> Option<&XdpTx> {
        self.out.xdp.as_deref()
    }
    pub fn sender_stats(&self) -> SenderStats {
        self.sender.stats()
    }

    /// Publishes one message (see [`Sender::offer`]); never blocks for long (a full socket
    /// send buffer is waited out, it drains at wire speed).
    #[inline]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        self.offer_inner(payload.len(), |b| b.copy_from_slice(payload), Some(payload))
    }

    /// Publishes a message of `len` bytes written in place by `fill`.
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
        let clock_read = self.sender.pending_len() == 0 || self.offers & 63 == 0;
        if clock_read {
            self.now_ns = now_ns();
        }
        let frames = self.sender.frames_for(len);
        if self.sender.next_sequence() + frames > self.sender.limit() {
            // Flow control: read the receivers' latest windows before refusing, and tell the
            // table who keeps this offer waiting (one of them for `flow_timeout_ms` at most).
            self.now_ns = now_ns();
            self.poll_control();
            let wanted = self.sender.next_sequence() + frames;
            if wanted > self.sender.limit() && self.table.on_refused(self.now_ns, wanted) {
                self.sender
                    .set_limit(self.table.limit().unwrap_or(u64::MAX));
            }
        }
        let Self {
            sender,
            sock,
            dests,
            gso,
            out,
            now_ns,
            ..
        } = self;
        let r = {
            let mut sink = to_all(sock, gso, out, dests);
            match whole {
                Some(payload) => sender.offer(payload, *now_ns, &mut sink),
                None => sender.offer_with(len, *now_ns, &mut sink, fill),
            }
            .map_err(map_send_error)
        };
        // STATUS frames are read after the message left, not before: in urgent mode (a
        // ping-pong's) the interval's receive system call came before one send in ten or so,
        // on the message's own latency. A JOIN read here takes effect from the next message,
        // as it would have had it come a moment later. Flow control above still reads them
        // before it refuses.
        if clock_read && self.now_ns >= self.next_control_ns {
            self.poll_control();
        }
        r
    }

    /// Sends whatever is batched.
    pub fn flush(&mut self) -> Result<(), OfferError> {
        self.now_ns = now_ns();
        let Self {
            sender,
            sock,
            dests,
            gso,
            out,
            now_ns,
            ..
        } = self;
        let mut sink = to_all(sock, gso, out, dests);
        sender.flush(*now_ns, &mut sink).map_err(map_send_error)
    }

    /// The duty cycle: sends a batch whose interval passed, a heartbeat when one is due, and
    /// reads STATUS frames. Returns the work done (0 when there was nothing to do).
    pub fn do_work(&mut self) -> usize {
        self.now_ns = now_ns();
        // STATUS frames are read at most every CONTROL_INTERVAL_NS here (a receive system call per
        // idle spin would delay the next offer); flow control reads them at once when it holds.
        let mut work = 0;
        if self.now_ns >= self.next_control_ns {
            work += self.poll_control();
        }
        let Self {
            sender,
            sock,
            dests,
            gso,
            out,
            now_ns,
            ..
        } = self;
        let pending = sender.pending_len();
        let polled = sender.poll(*now_ns, &mut to_all(sock, gso, out, dests));
        if let Ok(outcome) = polled {
            if pending > 0 && sender.pending_len() == 0 {
                work += 1;
            }
            if outcome.heartbeat_due {
                let hb = sender.heartbeat();
                for &to in dests.iter() {
                    send_frame(sock.to(to), out, &hb, Some(to));
                }
                sender.heartbeat_sent(*now_ns);
            }
        }
        work
    }

    /// Reads STATUS frames: joins, keep-alives, windows, leaves. Returns how many were read.
    fn poll_control(&mut self) -> usize {
        self.next_control_ns = self.now_ns + CONTROL_INTERVAL_NS;
        let mut n = 0;
        let mut changed = false;
        // Line B's socket too: a receiver on line B only answers there.
        let mut line = 0;
        while n < 256 {
            let sock = match (line, &self.sock.line_b) {
                (0, _) => &self.sock.main,
                (1, Some((b, _))) => b,
                _ => break,
            };
            let (len, from) = match sock.recv_from(&mut self.control_buf[..]) {
                Ok(x) => x,
                Err(_) => {
                    line += 1;
                    continue;
                }
            };
            n += 1;
            let bytes = &self.control_buf[..len];
            if let Some(l) = self.out.loss.as_mut() {
                if l.drop_datagram(Direction::Receive, bytes) {
                    continue;
                }
            }
            // Under auth=, nothing unsigned is read: the frame is what precedes the AUTH frame.
            let Some(frame) = open_datagram(&self.cfg, &mut self.auth_rejected, bytes) else {
                continue;
            };
            let len = frame.len();
            let bytes = &self.control_buf[..len];
            if bytes.get(7) == Some(&(FrameType::Nak as u8)) {
                self.answer_nak(len, from);
                continue;
            }
            let repr = match StatusFrame::new_checked(bytes).and_then(|f| StatusRepr::parse(&f)) {
                Ok(r) => r,
                Err(_) => {
                    self.bad_control_frames += 1;
                    continue;
                }
            };
            let cfg = self.sender.config();
            match self.table.on_status(
                from,
                &repr,
                cfg.session_id,
                self.sender.sent_next_sequence(),
                self.now_ns,
            ) {
                StatusOutcome::Joined | StatusOutcome::Rejoined => {
                    changed = true;
                    // A receiver that (re)joins may be another host on the same address: its
                    // Ethernet address is read again before the next datagram to it.
                    if let (Some(x), SocketAddr::V4(v4)) = (self.out.xdp.as_mut(), from) {
                        x.forget(*v4.ip());
                    }
                    // Tell it the session and the position at once (multicast: on every path).
                    let hb = self.sender.heartbeat();
                    if self.cfg.scheme == Scheme::Mcast {
                        for &to in &self.dests {
                            send_frame(self.sock.to(to), &mut self.out, &hb, Some(to));
                        }
                    } else {
                        send_frame(&self.sock.main, &mut self.out, &hb, Some(from));
                    }
                }
                StatusOutcome::Left => changed = true,
                StatusOutcome::Updated | StatusOutcome::Ignored => {}
            }
        }
        if self
            .table
            .poll(self.now_ns, self.sender.sent_next_sequence())
        {
            changed = true;
        }
        if changed && self.cfg.scheme == Scheme::Udp {
            // Sorted, not searched: a full table of 1024 costs n log n, not n squared.
            self.dests.clear();
            self.dests.extend(self.table.addrs());
            self.dests.sort_unstable();
            self.dests.dedup();
        }
        self.sender
            .set_limit(self.table.limit().unwrap_or(u64::MAX));
        n
    }

    /// Answers the NAK in `control_buf[..len]` from `from`: the retained frames go to the
    /// asking receiver (unicast) or to the group, where they also answer the NAKs other
    /// receivers suppressed (multicast).
    fn answer_nak(&mut self, len: usize, from: SocketAddr) {
        let Ok(nak) =
            NakFrame::new_checked(&self.control_buf[..len]).and_then(|f| NakRepr::parse(&f))
        else {
            self.bad_control_frames += 1;
            return;
        };
        let cfg = self.sender.config();
        if nak.session_id != cfg.session_id || nak.stream_id != cfg.stream_id {
            self.bad_control_frames += 1;
            return;
        }
        let ranges: Vec<(u64, u64)> = nak
            .ranges
            .iter()
            .map(|r| (r.start, u64::from(r.count)))
            .collect();
        let Self {
            sender,
            sock,
            gso,
            out,
            now_ns,
            dests,
            cfg,
            ..
        } = self;
        // Multicast: to the group (and the B line's), where the repair also answers the NAKs
        // other receivers held back; unicast: to the receiver that asked.
        if cfg.scheme == Scheme::Mcast {
            let _ = sender.on_nak(ranges, *now_ns, &mut to_all(sock, gso, out, dests));
        } else {
            let mut sink =
                |b: Batch<'_>| -> io::Result<()> { send_batch_to(sock, gso, out, &b, from) };
            let _ = sender.on_nak(ranges, *now_ns, &mut sink);
        }
    }

    pub fn max_message_len(&self) -> usize {
        NET_MAX_MESSAGE_LEN
    }
    /// Receivers that registered (STATUS) and have not left or gone silent.
    pub fn subscriber_count(&self) -> usize {
        self.table.len()
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
            subscribers_reaped: self.table.timed_out,
            flow_dropped: self.table.flow_dropped,
            joins_refused: self.table.joins_refused,
            rate_limited: s.rate_limited,
            naks_received: s.naks_received,
            retransmitted: s.retransmitted,
            retransmit_unavailable: s.nak_unavailable,
            retransmit_refused: s.nak_lingering + s.nak_capped + s.nak_rate_limited + s.nak_future,
        }
    }
    /// What the loss generator saw and dropped (`None`: no loss generator).
    pub fn loss_counters(&self) -> Option<LossCounters> {
        self.out.loss.as_ref().map(|l| l.counters())
    }
    /// Batches some destination refused while another took them (a receiver's or a
    /// multicast line's send failed: that receiver repairs by NAK, or the other line carried
    /// the batch).
    pub fn partial_send_errors(&self) -> u64 {
        self.out.partial_send_errors
    }
    /// Datagrams `auth=` dropped, by kind: [`AuthReject::NAMES`] (`missing`, `wrong_key`,
    /// `bad_tag`).
    pub fn auth_rejected(&self) -> [u64; AuthReject::NAMES.len()] {
        self.auth_rejected
    }

    /// Sends what is batched, lingers (answering NAKs, sending heartbeats that announce the
    /// last sequence) until every receiver confirmed the last message or `linger_ms` passed,
    /// then sends a BYE to every receiver; later offers fail with `Closed`.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        let _ = self.flush();
        let last = self.sender.next_sequence();
        self.now_ns = now_ns();
        let deadline_ns = self.now_ns + self.cfg.linger_ns;
        if self.cfg.retain_bytes > 0 {
            loop {
                // Read every STATUS and NAK that woke us, answer, send due heartbeats.
                self.next_control_ns = 0;
                self.do_work();
                if self.table.lowest_next().is_none_or(|n| n >= last) || self.now_ns >= deadline_ns
                {
                    break;
                }
                let fds: Vec<i32> = std::iter::once(&self.sock.main)
                    .chain(self.sock.line_b.as_ref().map(|(b, _)| b))
                    .map(|s| s.as_raw_fd())
                    .collect();
                sys::wait_readable(&fds, 1);
            }
        }
        let mut bye = [0u8; BYE_LEN];
        let cfg = self.sender.config();
        ByeRepr {
            session_id: cfg.session_id,
            stream_id: cfg.stream_id,
            final_next_sequence: self.sender.next_sequence(),
        }
        .emit(&mut ByeFrame::new_unchecked(&mut bye[..]));
        for &to in &self.dests {
            send_frame(self.sock.to(to), &mut self.out, &bye, Some(to));
        }
        self.closed = true;
    }
}

impl Drop for UdpPublisher {
    fn drop(&mut self) {
        self.close();
    }
}
