//! [`UdpSubscriber`]: a stream's receiver on `udp://` or `mcast://` (`recvmmsg` and UDP_GRO
//! where the kernel has them, GRO once a backlog lasts), its NAKs and STATUS frames, and its
//! blocking wait.

use super::send::{open_datagram, send_frame, Outbound};
use super::socket::{bind_error, check_iface, offload, set_buffer, sock_err};
use super::NET_MAX_MESSAGE_LEN;
use crate::error::OpenError;
use crate::net::config::NetConfig;
use crate::net::xdp::XdpRx;
use crate::net::{now_ns, sys};
use crate::uri::Scheme;
use crate::{Message, SubscriberCounters, SubscriberEvent};
use peregrine_proto::auth::AuthReject;
use peregrine_proto::join::JoinBackoff;
use peregrine_proto::lossgen::{Direction, LossCounters};
use peregrine_proto::receiver::{NakConfig, Progress, Receiver, ReceiverConfig, ReceiverStats};
use peregrine_wire::auth::AUTH_LEN;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

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
    out: Outbound,
    /// The last poll delivered messages (data is streaming in).
    busy: bool,
    /// When the timers next have work that only time brings (STATUS keep-alive, a session's
    /// timeout, a JOIN); 0 once a datagram came since they last ran. An empty poll before
    /// then skips them.
    next_timers_ns: u64,
    /// Datagrams dropped by `auth=`, by [`AuthReject::index`].
    auth_rejected: [u64; AuthReject::NAMES.len()],
    /// The kernel bypass's receive side (`xdp=`), and whether the datagrams being read came
    /// from it (else from the socket, which still gets what the steering program passes).
    xdp: Option<Box<XdpRx>>,
    from_xdp: bool,
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
        // Asked of a socket of its own: this one turns GRO on only once a backlog lasts
        // (`RecvRing`), as reading with it costs every poll a `recvmsg`.
        let gro = offload(uri, "UDP GRO", cfg.gro, sys::probe_udp_gro);
        let xdp = match &cfg.xdp {
            None => None,
            Some(x) => {
                // What the publisher sends to: the group(s), or this socket's own address.
                let dsts: Vec<SocketAddrV4> = if mcast {
                    std::iter::once(cfg.addr).chain(cfg.path_b).collect()
                } else {
                    let local = sock
                        .local_addr()
                        .ok()
                        .and_then(|a| a.as_socket_ipv4())
                        .ok_or_else(|| {
                            sock_err(
                                uri,
                                "cannot read the socket's address",
                                std::io::Error::other("not IPv4"),
                            )
                        })?;
                    vec![local]
                };
                let rx = XdpRx::open(x, &dsts).map_err(|error| OpenError::Xdp {
                    uri: uri.to_string(),
                    error,
                })?;
                Some(Box::new(rx))
            }
        };
        // With xdp=, the receive ring bounds what may be in flight, in datagrams: half of it,
        // announced in frames as the datagrams carry them, unless `window=` says otherwise.
        let (window, window_datagrams) = match (&xdp, cfg.window) {
            (Some(x), None) => ((0, 0), x.ring_frames() / 2),
            _ => (cfg.window(rcvbuf_actual), 0),
        };
        let receiver_id = loop {
            let r = crate::random_u32();
            if r != 0 {
                break r;
            }
        };
        let rcfg = ReceiverConfig {
            nak: cfg.nak.then(|| NakConfig::new(mcast)),
            session_timeout_ns: cfg.timeout_ns,
            window_frames: window.0,
            window_bytes: window.1,
            window_datagrams,
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
            out: Outbound::new(cfg),
            busy: false,
            next_timers_ns: 0,
            auth_rejected: [0; AuthReject::NAMES.len()],
            xdp,
            from_xdp: false,
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

    /// The kernel bypass's receive side, with `xdp=`.
    pub fn xdp(&self) -> Option<&XdpRx> {
        self.xdp.as_deref()
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
                // With xdp=, the ring first; the socket (what the program passed to the kernel:
                // a queue without our socket, a stream's first packets) every 256th empty poll.
                let got = match self.xdp.as_mut().map(|x| x.recv()) {
                    Some(n) if n > 0 => {
                        self.from_xdp = true;
                        Ok(n)
                    }
                    Some(_) if self.polls & 255 != 0 => Ok(0),
                    _ => {
                        self.from_xdp = false;
                        self.ring.recv(self.sock.as_raw_fd())
                    }
                };
                match got {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        // What a datagram brings (a session, a HEARTBEAT to confirm, a
                        // sender's new address) is for the timers at the next poll that runs
                        // them, whether this one delivers or not.
                        self.next_timers_ns = 0;
                        if self.ring.gro_wanted() {
                            self.turn_gro_on();
                        }
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
            let (buf, src, seg, count) = match self.xdp.as_deref() {
                Some(x) if self.from_xdp => {
                    let (buf, src) = x.get(i);
                    (buf, src, buf.len().max(1), x.count())
                }
                _ => {
                    let (buf, src) = self.ring.get(i);
                    (buf, src, self.ring.segment(i), self.ring.count())
                }
            };
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
                        } else if i + 1 < count {
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
                Progress::Done if i + 1 < count => Some((i + 1, 0)),
                Progress::Done => None,
            };
        }
        self.polls = self.polls.wrapping_add(1);
        self.busy = n > 0;
        if n == 0 || self.polls & 1023 == 0 {
            self.now_ns = now_ns();
            // A waiting subscriber polls millions of times a second, and a message that arrives
            // during an empty poll's own work waits for it: the timers run when they are due,
            // or after datagrams came (`next_timers_ns` is then 0), not on every poll.
            if self.now_ns >= self.next_timers_ns {
                self.timers();
            }
            if self.receiver.is_repairing() {
                let k = self.repair(handler);
                if k > 0 {
                    // Delivery moved: a window update may be due at the next poll.
                    self.next_timers_ns = 0;
                    n += k;
                }
            }
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

    /// Turns UDP_GRO on, for good, once the ring found a lasting backlog.
    #[cold]
    fn turn_gro_on(&mut self) {
        match sys::set_udp_gro(&self.sock) {
            Ok(()) => {
                self.ring.gro_on();
                tracing::debug!(
                    "{}://{}: a backlog lasted, UDP GRO turned on",
                    self.cfg.scheme,
                    self.cfg.addr
                );
            }
            Err(e) => {
                self.ring.gro_refused();
                tracing::warn!(
                    "{}://{}: the kernel refused UDP GRO ({e}): {}",
                    self.cfg.scheme,
                    self.cfg.addr,
                    super::socket::fallback("GRO")
                );
            }
        }
    }

    /// Whether UDP GRO is on for this subscriber's socket: with `gro=1` (the default) it is
    /// turned on once datagrams have queued up for a while (four reads in a row found 32 or
    /// more waiting), and stays on.
    pub fn gro_active(&self) -> bool {
        self.ring.gro()
    }

    fn timers(&mut self) {
        self.send_status();
        let mut next = self.receiver.next_timer_ns();
        if let Some(to) = self.target {
            if self.receiver.is_connected() {
                self.join.answered(self.now_ns);
            } else {
                if self.join.poll(self.now_ns) {
                    let join = self.receiver.join_frame();
                    send_frame(&self.sock, &mut self.out, &join, Some(to));
                }
                next = next.min(self.join.next_ns());
            }
        }
        self.next_timers_ns = next;
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
        match self.xdp.as_deref() {
            Some(x) => sys::wait_readable(&[self.sock.as_raw_fd(), x.fd()], ms),
            None => sys::wait_readable(&[self.sock.as_raw_fd()], ms),
        }
    }
    fn cancel_wait(&mut self) {}
}
