//! UDP unicast (`udp://HOST:PORT`) and multicast (`mcast://GROUP:PORT`) drivers.
//!
//! See the [parent module](super) for who binds what. The publisher's socket sends batches
//! (one UDP GSO send per batch and destination when the kernel supports it, else one send per
//! datagram) and receives STATUS frames; the subscriber's socket receives with `recvfrom` or
//! `recvmmsg` (32 datagrams per call, non-blocking), with UDP_GRO when the kernel has it (a GSO
//! batch then arrives in one buffer on loopback), and sends STATUS frames back.

use super::auth::Sealer;
use super::config::NetConfig;
use super::{now_ns, sys};
use crate::error::{OfferError, OpenError};
use crate::uri::Scheme;
use crate::{Message, PublisherCounters, SubscriberCounters, SubscriberEvent};
use peregrine_proto::auth::AuthReject;
use peregrine_proto::join::JoinBackoff;
use peregrine_proto::lossgen::{Direction, LossCounters, LossGenerator};
use peregrine_proto::receiver::{NakConfig, Progress, Receiver, ReceiverConfig, ReceiverStats};
use peregrine_proto::receiver_table::{ReceiverTable, StatusOutcome, TableConfig};
use peregrine_proto::sender::{Batch, Packing, SendError, Sender, SenderConfig, SenderStats};
use peregrine_wire::auth::AUTH_LEN;
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::header::FrameType;
use peregrine_wire::nak::{NakFrame, NakRepr};
use peregrine_wire::status::{StatusFrame, StatusRepr};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

/// Largest message on the network transports (the receivers' reassembly limit).
pub const NET_MAX_MESSAGE_LEN: usize = 64 << 20;

/// How often a publisher reads STATUS and NAK frames while it only offers (a non-blocking
/// receive call each time: about 1% of a busy publisher's time).
const CONTROL_INTERVAL_NS: u64 = 100_000;
/// Receivers silent for this long are dropped by a publisher.
const RECEIVER_TIMEOUT_NS: u64 = 2_000_000_000;

fn sock_err(uri: &str, what: impl Into<String>, source: io::Error) -> OpenError {
    OpenError::Socket {
        uri: uri.to_string(),
        what: what.into(),
        source,
    }
}

/// Explains a bind failure in the user's terms.
fn bind_error(uri: &str, addr: SocketAddrV4, e: io::Error) -> OpenError {
    let what = match e.raw_os_error() {
        Some(libc::EADDRINUSE) => format!(
            "cannot bind {addr}: the port is in use (another publisher on this address? choose another port)"
        ),
        Some(libc::EADDRNOTAVAIL) => format!(
            "cannot bind {addr}: {} is not an address of this host (give one of its interface addresses)",
            addr.ip()
        ),
        Some(libc::EACCES) => format!("cannot bind {addr}: ports below 1024 need privileges"),
        _ => format!("cannot bind {addr}"),
    };
    sock_err(uri, what, e)
}

/// Sets a socket buffer, forcing past the sysctl limit when allowed; returns the size the
/// kernel reports (which counts its own overhead, so about twice what was asked).
pub fn set_buffer(sock: &Socket, receive: bool, bytes: usize) -> usize {
    if sys::set_buffer_force(sock, receive, bytes).is_err() {
        let _ = if receive {
            sock.set_recv_buffer_size(bytes)
        } else {
            sock.set_send_buffer_size(bytes)
        };
    }
    if receive {
        sock.recv_buffer_size().unwrap_or(0)
    } else {
        sock.send_buffer_size().unwrap_or(0)
    }
}

/// Checks that `iface` is an address of this host (by binding to it).
fn check_iface(uri: &str, iface: Ipv4Addr) -> Result<(), OpenError> {
    UdpSocket::bind(SocketAddrV4::new(iface, 0)).map(drop).map_err(|e| {
        sock_err(
            uri,
            format!(
                "iface={iface} is not an address of this host's interfaces (give the IPv4 address of the interface to use, for example iface=127.0.0.1)"
            ),
            e,
        )
    })
}

/// Line B's send socket on `iface` (`b_iface=`): bound there, multicast leaving by it; and
/// whether it takes GSO sends.
fn line_b_socket(
    cfg: &NetConfig,
    uri: &str,
    iface: Ipv4Addr,
) -> Result<(UdpSocket, bool), OpenError> {
    let b_err = |what: String, e| sock_err(uri, format!("line B (b_iface={iface}): {what}"), e);
    if let Err(e) = UdpSocket::bind(SocketAddrV4::new(iface, 0)) {
        return Err(b_err(
            "not an address of this host's interfaces (give the IPv4 address of the interface line B leaves by)".into(),
            e,
        ));
    }
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| b_err("cannot create a UDP socket".into(), e))?;
    let bind = SocketAddrV4::new(iface, 0);
    sock.bind(&SockAddr::from(bind))
        .map_err(|e| bind_error(uri, bind, e))?;
    sock.set_multicast_if_v4(&iface)
        .map_err(|e| b_err("cannot send multicast on it".into(), e))?;
    sock.set_multicast_ttl_v4(cfg.ttl)
        .map_err(|e| b_err("cannot set the multicast TTL".into(), e))?;
    sock.set_multicast_loop_v4(cfg.loopback)
        .map_err(|e| b_err("cannot set multicast loopback".into(), e))?;
    set_buffer(&sock, false, cfg.sndbuf);
    set_buffer(&sock, true, 1 << 20);
    let _ = sys::set_pmtu_do(&sock);
    sock.set_nonblocking(true)
        .map_err(|e| b_err("cannot make the socket non-blocking".into(), e))?;
    let gso = offload(uri, "UDP GSO on line B", cfg.gso, || {
        sys::set_udp_segment(&sock, cfg.segment_len)
    });
    Ok((sock.into(), gso))
}

/// Whether the kernel took an offload (UDP GSO, UDP GRO) the configuration asks for: a refusal
/// is said once, for this socket, as a warning naming what the stream falls back to.
fn offload(uri: &str, what: &str, wanted: bool, set: impl FnOnce() -> io::Result<()>) -> bool {
    if !wanted {
        return false;
    }
    match set() {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("{uri}: the kernel refused {what} ({e}): {}", fallback(what));
            false
        }
    }
}

/// What a stream does without `what`.
fn fallback(what: &str) -> &'static str {
    if what.contains("GRO") {
        "each datagram is read on its own"
    } else {
        "each datagram is sent on its own"
    }
}

/// The most bytes one GSO send carries (the UDP length field's limit, less headers, rounded
/// down).
const MAX_GSO_BYTES: usize = 65_000;
/// The most datagrams one GSO send carries: the kernel refuses more (EINVAL) than its
/// `UDP_MAX_SEGMENTS`, 64 before Linux 6.0-era kernels raised it to 128. Without this bound a
/// stream of small datagrams (`datagram=` under 1,016 bytes) had every batch refused and fell
/// back to one send per datagram.
const MAX_GSO_SEGMENTS: usize = 64;

/// Datagrams of `segment_len` bytes that one GSO send carries: as many as fit in
/// [`MAX_GSO_BYTES`], and no more than [`MAX_GSO_SEGMENTS`].
pub fn gso_batch_datagrams(segment_len: usize) -> usize {
    (MAX_GSO_BYTES / segment_len).clamp(1, MAX_GSO_SEGMENTS)
}

/// What every datagram a driver sends passes through: the test loss generator (`loss=`,
/// `PEREGRINE_LOSS`), which may drop it, and the sealer of `auth=`, which ends it with an AUTH
/// frame. Both are off by default.
#[derive(Debug)]
struct Outbound {
    loss: Option<Box<LossGenerator>>,
    seal: Option<Box<Sealer>>,
    /// Batches one destination refused while another took them (see [`to_all`]).
    partial_send_errors: u64,
}

impl Outbound {
    fn new(cfg: &NetConfig) -> Self {
        Outbound {
            loss: cfg.loss.map(|c| Box::new(LossGenerator::new(c))),
            seal: cfg
                .auth
                .as_deref()
                .map(|k| Box::new(Sealer::new(k.clone()))),
            partial_send_errors: 0,
        }
    }
}

/// What a driver does with a datagram it received under `auth=`: the frames to read, or the
/// reason it is dropped (counted by kind).
fn open_datagram<'a>(
    cfg: &NetConfig,
    rejected: &mut [u64; AuthReject::NAMES.len()],
    datagram: &'a [u8],
) -> Option<&'a [u8]> {
    let Some(key) = &cfg.auth else {
        return Some(datagram);
    };
    match key.open(datagram) {
        Ok(frames) => Some(frames),
        Err(r) => {
            rejected[r.index()] += 1;
            None
        }
    }
}

/// Sends one batch to one destination: a GSO send, or one send per datagram (always so with a
/// loss generator, which drops datagram by datagram).
fn send_batch(
    sock: &UdpSocket,
    gso: &mut bool,
    loss: &mut Option<Box<LossGenerator>>,
    batch: &Batch<'_>,
    to: SocketAddr,
) -> io::Result<()> {
    if let Some(l) = loss.as_mut() {
        for d in batch.datagrams() {
            if !l.drop_datagram(Direction::Send, d) {
                send_retrying(sock, d, to)?;
            }
        }
        return Ok(());
    }
    if *gso && batch.segments() > 1 {
        match send_retrying(sock, batch.bytes, to) {
            Ok(()) => return Ok(()),
            // The kernel or the route refuses GSO (EIO: no checksum offload, EINVAL: too many
            // segments): fall back for good.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) => {
                // Said once: the flag stays off for this publisher.
                tracing::warn!(
                    "the route to {to} refused a UDP GSO send ({e}): {}",
                    fallback("GSO")
                );
                *gso = false;
            }
            Err(e) => return Err(e),
        }
    }
    for d in batch.datagrams() {
        send_retrying(sock, d, to)?;
    }
    Ok(())
}

/// `send_to`, waiting while the socket's send buffer is full (it drains at wire speed).
fn send_retrying(sock: &UdpSocket, bytes: &[u8], to: SocketAddr) -> io::Result<()> {
    loop {
        match sock.send_to(bytes, to) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::wait_writable(sock.as_raw_fd(), 1);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // An ICMP error for an earlier datagram (a receiver went away): not this send's.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// The sink that sends a batch to every destination (sealed once, under `auth=`). A
/// destination that refuses the send (a local firewall's EPERM, an unreachable network) does
/// not keep the batch from the others: it is counted, and that receiver repairs by NAK (or the
/// other multicast line carries it). Only when every destination refused is the send an error.
fn to_all<'a>(
    sock: &'a Sockets,
    gso: &'a mut bool,
    out: &'a mut Outbound,
    dests: &'a [SocketAddr],
) -> impl FnMut(Batch<'_>) -> io::Result<()> + 'a {
    move |b| {
        let Outbound {
            loss,
            seal,
            partial_send_errors,
        } = out;
        let sealed;
        let b = match seal.as_mut() {
            Some(s) => {
                sealed = s.batch(&b);
                &sealed
            }
            None => &b,
        };
        let (mut first_error, mut failures) = (None, 0);
        for &to in dests {
            if let Err(e) = send_batch(sock.to(to), gso, loss, b, to) {
                failures += 1;
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => Ok(()),
            Some(_) if failures < dests.len() => {
                *partial_send_errors += 1;
                Ok(())
            }
            Some(e) => Err(e),
        }
    }
}

/// Sends one batch to one destination, sealed under `auth=`.
fn send_batch_to(
    sock: &Sockets,
    gso: &mut bool,
    out: &mut Outbound,
    batch: &Batch<'_>,
    to: SocketAddr,
) -> io::Result<()> {
    to_all(sock, gso, out, &[to])(*batch)
}

/// Sends a control frame (HEARTBEAT, BYE, NAK, STATUS) unless the loss generator drops it,
/// sealed under `auth=`.
fn send_frame(sock: &UdpSocket, out: &mut Outbound, frame: &[u8], to: Option<SocketAddr>) {
    let Outbound { loss, seal, .. } = out;
    let frame = match seal.as_mut() {
        Some(s) => s.one(frame),
        None => frame,
    };
    if let Some(l) = loss.as_mut() {
        if l.drop_datagram(Direction::Send, frame) {
            return;
        }
    }
    // Best effort: a lost control frame is sent again by its timer.
    let _ = match to {
        Some(to) => send_retrying(sock, frame, to),
        None => sock.send(frame).map(drop),
    };
}

pub(super) fn map_send_error(e: SendError<io::Error>) -> OfferError {
    match e {
        SendError::TooLarge { len, max } => OfferError::TooLarge { len, max },
        SendError::BackPressured => OfferError::BackPressured,
        SendError::Sink(e) => OfferError::Send {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        },
    }
}

/// The publisher's sockets: one for every destination, and with `b_iface=` line B's own,
/// bound on that interface.
#[derive(Debug)]
struct Sockets {
    main: UdpSocket,
    /// Line B's socket and group.
    line_b: Option<(UdpSocket, SocketAddr)>,
}

impl Sockets {
    /// The socket that sends to `dest`.
    #[inline]
    fn to(&self, dest: SocketAddr) -> &UdpSocket {
        match &self.line_b {
            Some((s, b)) if *b == dest => s,
            _ => &self.main,
        }
    }
}

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
            out: Outbound::new(cfg),
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
        if self.sender.pending_len() == 0 || self.offers & 63 == 0 {
            self.now_ns = now_ns();
            if self.now_ns >= self.next_control_ns {
                self.poll_control();
            }
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
        let mut sink = to_all(sock, gso, out, dests);
        match whole {
            Some(payload) => sender.offer(payload, *now_ns, &mut sink),
            None => sender.offer_with(len, *now_ns, &mut sink, fill),
        }
        .map_err(map_send_error)
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

/// The subscriber of one stream over UDP unicast or multicast.
#[derive(Debug)]
pub struct UdpSubscriber {
    cfg: NetConfig,
    sock: UdpSocket,
    ring: sys::RecvRing,
    /// Next datagram of the ring to process and the byte offset in it.
    cursor: Option<(usize, usize)>,
    receiver: Receiver,
    /// Unicast: the publisher's address (JOIN frames go there until it answers, backing off).
    target: Option<SocketAddr>,
    join: JoinBackoff,
    now_ns: u64,
    polls: u32,
    rcvbuf_actual: usize,
    out: Outbound,
    /// The last poll delivered messages (data is streaming in).
    busy: bool,
    /// Datagrams dropped by `auth=`, by [`AuthReject::index`].
    auth_rejected: [u64; AuthReject::NAMES.len()],
}

impl UdpSubscriber {
    pub fn new(cfg: &NetConfig, uri: &str, stream_id: u32) -> Result<Self, OpenError> {
        let mcast = cfg.scheme == Scheme::Mcast;
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| sock_err(uri, "cannot create a UDP socket", e))?;
        let rcvbuf_actual = set_buffer(&sock, true, cfg.rcvbuf);
        set_buffer(&sock, false, 1 << 20);
        if mcast {
            let iface = cfg.iface.unwrap_or(Ipv4Addr::LOCALHOST);
            check_iface(uri, iface)?;
            sock.set_reuse_address(true)
                .map_err(|e| sock_err(uri, "cannot set SO_REUSEADDR", e))?;
            // Binding to the group (not INADDR_ANY) keeps other groups on this port out. With a
            // B line the socket takes both groups, so it binds the port on any address (a
            // datagram of another group on this port is still checked frame by frame, and
            // sessions by their source).
            let bind = match cfg.path_b {
                None => cfg.addr,
                Some(_) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, cfg.addr.port()),
            };
            sock.bind(&SockAddr::from(bind))
                .map_err(|e| bind_error(uri, bind, e))?;
            if cfg.path_b.is_some() {
                // Only the groups this socket joined, not every group another socket of the
                // host joined on this port.
                sock.set_multicast_all_v4(false)
                    .map_err(|e| sock_err(uri, "cannot set IP_MULTICAST_ALL", e))?;
            }
            // Line B on its own interface when `b_iface=` names one.
            if let Some(b) = cfg.iface_b {
                check_iface(uri, b)?;
            }
            let lines = std::iter::once((cfg.addr, iface))
                .chain(cfg.path_b.map(|g| (g, cfg.iface_b.unwrap_or(iface))));
            for (group, iface) in lines {
                sock.join_multicast_v4(group.ip(), &iface).map_err(|e| {
                    sock_err(
                        uri,
                        format!("cannot join group {} on iface={iface}", group.ip()),
                        e,
                    )
                })?;
            }
            sock.set_multicast_if_v4(&iface)
                .map_err(|e| sock_err(uri, format!("cannot use iface={iface}"), e))?;
        } else {
            let bind = SocketAddrV4::new(cfg.iface.unwrap_or(Ipv4Addr::UNSPECIFIED), 0);
            if let Some(iface) = cfg.iface {
                check_iface(uri, iface)?;
            }
            sock.bind(&SockAddr::from(bind))
                .map_err(|e| bind_error(uri, bind, e))?;
            sock.connect(&SockAddr::from(cfg.addr)).map_err(|e| {
                sock_err(
                    uri,
                    format!("cannot reach the publisher's address {}", cfg.addr),
                    e,
                )
            })?;
        }
        sock.set_nonblocking(true)
            .map_err(|e| sock_err(uri, "cannot make the socket non-blocking", e))?;
        let gro = offload(uri, "UDP GRO", cfg.gro, || sys::set_udp_gro(&sock));
        let receiver_id = loop {
            let r = crate::random_u32();
            if r != 0 {
                break r;
            }
        };
        let rcfg = ReceiverConfig {
            nak: cfg.nak.then(|| NakConfig::new(mcast)),
            session_timeout_ns: cfg.timeout_ns,
            window_frames: cfg.window(rcvbuf_actual).0,
            window_bytes: cfg.window(rcvbuf_actual).1,
            max_message_len: NET_MAX_MESSAGE_LEN,
            late_join: cfg.late_join,
            // Line B, when the publisher sends it from another interface (`b_iface=` on its
            // side), comes from another address.
            second_source: cfg.path_b.is_some(),
            ..ReceiverConfig::new(stream_id, receiver_id)
        };
        Ok(UdpSubscriber {
            cfg: cfg.clone(),
            sock: sock.into(),
            ring: sys::RecvRing::new(gro),
            cursor: None,
            receiver: Receiver::new(rcfg),
            target: if mcast {
                None
            } else {
                Some(SocketAddr::V4(cfg.addr))
            },
            join: JoinBackoff::new(cfg.join, now_ns()),
            now_ns: now_ns(),
            polls: 0,
            rcvbuf_actual,
            out: Outbound::new(cfg),
            busy: false,
            auth_rejected: [0; AuthReject::NAMES.len()],
        })
    }

    /// The socket this subscriber receives on, for a driver that waits on many sources in
    /// its own `epoll` (the market data distributor): it turns readable when datagrams
    /// arrive. `poll` must still be called at least every few milliseconds while a session is
    /// live (NAK timers, STATUS keep-alives), and until it returns less than its limit after
    /// a wake-up (the socket is read in batches). Valid for the subscriber's life.
    pub fn readable_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }

    /// The receive buffer the kernel granted (bytes, as it reports them).
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf_actual
    }
    pub fn receiver_stats(&self) -> ReceiverStats {
        self.receiver.stats()
    }
    /// JOINs sent since the publisher last answered (0 while connected).
    pub fn joins_unanswered(&self) -> u64 {
        self.join.unanswered
    }

    /// Delivers up to `limit` messages; never blocks.
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let mut n = 0;
        while n < limit {
            let Some((i, off)) = self.cursor else {
                match self.ring.recv(self.sock.as_raw_fd()) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        // While data streams in, the idle poll that reads the clock does not
                        // come: read it per receive call (a batch of datagrams), so that gaps
                        // are stamped and NAKs timed on the current time. After an idle poll
                        // (a latency run's case) the clock was just read.
                        if self.busy {
                            self.now_ns = now_ns();
                        }
                        self.cursor = Some((0, 0));
                        continue;
                    }
                }
            };
            // A buffer holds one datagram, or with UDP_GRO several of `segment` bytes each.
            let (buf, src) = self.ring.get(i);
            let seg = self.ring.segment(i);
            let start = off - off % seg;
            let end = (start + seg).min(buf.len());
            // The datagram's frames: under auth= those before its AUTH frame, which is checked
            // when the datagram is first reached (a resumed one was checked then).
            let mut frames_end = end;
            if off == start {
                let dropped = self
                    .out
                    .loss
                    .as_mut()
                    .is_some_and(|l| l.drop_datagram(Direction::Receive, &buf[start..end]));
                let opened = if dropped {
                    None
                } else {
                    open_datagram(&self.cfg, &mut self.auth_rejected, &buf[start..end])
                };
                match opened {
                    Some(frames) => frames_end = start + frames.len(),
                    None => {
                        self.cursor = if end < buf.len() {
                            Some((i, end))
                        } else if i + 1 < self.ring.count() {
                            Some((i + 1, 0))
                        } else {
                            None
                        };
                        continue;
                    }
                }
            } else if self.cfg.auth.is_some() {
                frames_end = end - AUTH_LEN;
            }
            let (k, p) = self.receiver.on_datagram(
                &buf[start..frames_end],
                off - start,
                src,
                self.now_ns,
                handler,
                limit - n,
            );
            n += k;
            self.cursor = match p {
                Progress::Resume(o) => Some((i, start + o)),
                Progress::Done if end < buf.len() => Some((i, end)),
                Progress::Done if i + 1 < self.ring.count() => Some((i + 1, 0)),
                Progress::Done => None,
            };
        }
        self.polls = self.polls.wrapping_add(1);
        self.busy = n > 0;
        if n == 0 || self.polls & 1023 == 0 {
            self.now_ns = now_ns();
            self.timers();
            n += self.repair(handler);
        } else {
            if self.cfg.window != Some(0) {
                self.send_status();
            }
            if self.receiver.is_repairing() {
                n += self.repair(handler);
            }
        }
        n
    }

    /// Sends the NAKs that are due (to the publisher; on multicast also to the group, so other
    /// subscribers missing the same frames hold theirs back), and delivers what giving up a gap
    /// unblocked.
    fn repair<F: FnMut(Message<'_>)>(&mut self, handler: &mut F) -> usize {
        let group = (self.cfg.scheme == Scheme::Mcast).then_some(SocketAddr::V4(self.cfg.addr));
        let Self {
            receiver,
            sock,
            target,
            now_ns,
            out,
            ..
        } = self;
        receiver.poll_repair(*now_ns, handler, &mut |to: SocketAddr, frame: &[u8]| {
            send_frame(sock, out, frame, target.is_none().then_some(to));
            if let Some(g) = group {
                send_frame(sock, out, frame, Some(g));
            }
        })
    }

    fn send_status(&mut self) {
        let Self {
            receiver,
            sock,
            target,
            now_ns,
            out,
            ..
        } = self;
        receiver.poll(*now_ns, &mut |to: SocketAddr, frame: &[u8]| {
            send_frame(sock, out, frame, target.is_none().then_some(to));
        });
    }

    fn timers(&mut self) {
        self.send_status();
        if let Some(to) = self.target {
            if self.receiver.is_connected() {
                self.join.answered(self.now_ns);
            } else if self.join.poll(self.now_ns) {
                let join = self.receiver.join_frame();
                send_frame(&self.sock, &mut self.out, &join, Some(to));
            }
        }
    }

    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        self.receiver.next_event()
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
    /// What the loss generator saw and dropped (`None`: no loss generator).
    pub fn loss_counters(&self) -> Option<LossCounters> {
        self.out.loss.as_ref().map(|l| l.counters())
    }
    /// Datagrams `auth=` dropped, by kind: [`AuthReject::NAMES`] (`missing`, `wrong_key`,
    /// `bad_tag`).
    pub fn auth_rejected(&self) -> [u64; AuthReject::NAMES.len()] {
        self.auth_rejected
    }
    /// Starts recording how long each repaired frame was missing (gap detected to frame
    /// received), for benchmarks.
    pub fn record_recovery(&mut self) {
        self.receiver.record_recovery();
    }
    /// The recovery times recorded since the last call, in nanoseconds.
    pub fn take_recovery_ns(&mut self) -> Vec<u64> {
        self.receiver.take_recovery_ns()
    }
}

impl Drop for UdpSubscriber {
    fn drop(&mut self) {
        let Self {
            receiver,
            sock,
            target,
            out,
            ..
        } = self;
        receiver.leave(&mut |to: SocketAddr, frame: &[u8]| {
            send_frame(sock, out, frame, target.is_none().then_some(to));
        });
    }
}

impl peregrine_agent::Wake for UdpSubscriber {
    fn prepare_wait(&mut self) {}
    fn wait(&mut self, timeout_ns: u64) {
        if self.cursor.is_some() {
            return;
        }
        // Wake by the next NAK deadline (a gap found just before sleeping is asked for on
        // time, not after the whole wait), and at least every 100 ms for STATUS keep-alives
        // and timeouts.
        let timeout_ns = match self.receiver.next_repair_ns() {
            Some(at) => timeout_ns.min(at.saturating_sub(now_ns())),
            None => timeout_ns,
        };
        let ms = timeout_ns.div_ceil(1_000_000).clamp(1, 100) as i32;
        sys::wait_readable(&[self.sock.as_raw_fd()], ms);
    }
    fn cancel_wait(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A socket on loopback to receive what a test sends, with room for all of it.
    fn receiver() -> UdpSocket {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4 << 20)
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        rx
    }

    /// Receives `count` datagrams of `len` bytes, datagram `k` filled with byte `k`.
    fn expect(rx: &UdpSocket, count: usize, len: usize) {
        let mut buf = [0u8; 2048];
        for k in 0..count {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(n, len, "datagram {k}");
            assert!(buf[..n].iter().all(|&b| b == k as u8), "datagram {k}");
        }
    }

    #[test]
    fn a_gso_send_the_kernel_refuses_falls_back_to_one_send_a_datagram_for_good() {
        let rx = receiver();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        sys::set_udp_segment(&tx, 96).unwrap();
        let bytes: Vec<u8> = (0..130 * 96).map(|i| (i / 96) as u8).collect();
        // 10 datagrams in one send: the kernel takes it, and GSO stays on.
        let mut gso = true;
        let few = Batch {
            bytes: &bytes[..10 * 96],
            segment_len: 96,
        };
        send_batch(&tx, &mut gso, &mut None, &few, to).unwrap();
        assert!(gso);
        expect(&rx, 10, 96);
        // 130 in one send: more than any kernel takes (128 at most; EINVAL). The batch still
        // leaves, one datagram a send, and GSO is off for good. (130 small datagrams fit the
        // receive buffer an unprivileged process gets.)
        let many = Batch {
            bytes: &bytes,
            segment_len: 96,
        };
        send_batch(&tx, &mut gso, &mut None, &many, to).unwrap();
        assert!(!gso, "GSO off after the refusal");
        expect(&rx, 130, 96);
    }
}
