//! The resolver's sockets (the protocol is `peregrine_proto::resolver`): a UDP multicast group
//! that every context joins (the default; loopback multicast on one host), or a
//! `peregrine resolverd` daemon that relays between registered clients, for networks without
//! multicast. Also the daemon's own socket loop, [`Daemon`].
//!
//! Towards a daemon the socket proves its address without the resolver knowing: every datagram
//! it sends starts with a COOKIE frame echoing the daemon's last cookie (all zero before the
//! first), and a COOKIE the daemon sends back (a challenge, or a fresh cookie at the turn of a
//! minute) is taken in [`ResolverSocket::recv`], which then sends the last datagram again with
//! it (`peregrine_proto::resolverd`).

use crate::error::OpenError;
use crate::net::sys;
use peregrine_proto::resolverd::{
    cookie_answer, cookie_frame, forwarded, Relay, RelayConfig, RelayCounters, Verdict,
};
use peregrine_wire::cookie::{COOKIE_BYTES, COOKIE_LEN};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// The default resolver group: administratively scoped (239/8), port 14400.
pub const DEFAULT_GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 90, 1), 14400);
/// The default port of `peregrine resolverd`.
pub const DEFAULT_DAEMON_PORT: u16 = 14401;
/// Largest resolver datagram received.
pub const MAX_DATAGRAM: usize = 65536;

/// How a context reaches the other contexts' resolvers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResolverPath {
    /// Join `group` on the interface `iface`, send to it with `ttl` hops.
    Multicast {
        group: SocketAddrV4,
        iface: Ipv4Addr,
        ttl: u32,
    },
    /// Register with the daemon at `daemon`, sending from `iface`.
    Daemon {
        daemon: SocketAddrV4,
        iface: Ipv4Addr,
    },
}

fn sock_err(what: String, source: io::Error) -> OpenError {
    OpenError::Socket {
        uri: "resolver".into(),
        what,
        source,
    }
}

/// One context's resolver socket: non-blocking, sends to the group or to the daemon.
#[derive(Debug)]
pub struct ResolverSocket {
    sock: UdpSocket,
    dest: SocketAddr,
    daemon: bool,
    /// The daemon's cookie for this socket's address (zero: none yet).
    cookie: [u8; COOKIE_BYTES],
    /// The last datagram sent to the daemon, without its COOKIE frame: sent again when a
    /// challenge comes back for it.
    last: Vec<u8>,
    /// Datagram buffer: a COOKIE frame, then what the resolver sends.
    out: Vec<u8>,
    /// Send failures (each is also one datagram the peers did not get; the resolver's
    /// schedule sends it again).
    pub send_errors: u64,
    /// Cookies the daemon sent (challenges and refreshes).
    pub cookies_received: u64,
}

impl ResolverSocket {
    pub fn open(path: &ResolverPath) -> Result<Self, OpenError> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| sock_err("cannot create a UDP socket".into(), e))?;
        let _ = sock.set_recv_buffer_size(4 << 20);
        let dest = match *path {
            ResolverPath::Multicast { group, iface, ttl } => {
                if !group.ip().is_multicast() {
                    return Err(sock_err(
                        format!("{group} is not a multicast group (give one in 224.0.0.0/4, e.g. {DEFAULT_GROUP})"),
                        io::ErrorKind::InvalidInput.into(),
                    ));
                }
                sock.set_reuse_address(true)
                    .map_err(|e| sock_err("cannot set SO_REUSEADDR".into(), e))?;
                sock.bind(&SockAddr::from(group))
                    .map_err(|e| sock_err(format!("cannot bind the resolver group {group}"), e))?;
                sock.join_multicast_v4(group.ip(), &iface).map_err(|e| {
                    sock_err(
                        format!("cannot join the resolver group {} on {iface} (is {iface} an address of this host?)", group.ip()),
                        e,
                    )
                })?;
                sock.set_multicast_if_v4(&iface)
                    .map_err(|e| sock_err(format!("cannot send multicast from {iface}"), e))?;
                sock.set_multicast_loop_v4(true)
                    .map_err(|e| sock_err("cannot enable multicast loopback".into(), e))?;
                sock.set_multicast_ttl_v4(ttl)
                    .map_err(|e| sock_err(format!("cannot set multicast ttl {ttl}"), e))?;
                SocketAddr::V4(group)
            }
            ResolverPath::Daemon { daemon, iface } => {
                let bind = SocketAddrV4::new(iface, 0);
                sock.bind(&SockAddr::from(bind))
                    .map_err(|e| sock_err(format!("cannot bind {bind} to reach resolverd"), e))?;
                // Connected: only the daemon's datagrams are accepted.
                sock.connect(&SockAddr::from(daemon))
                    .map_err(|e| sock_err(format!("cannot reach resolverd at {daemon}"), e))?;
                SocketAddr::V4(daemon)
            }
        };
        sock.set_nonblocking(true)
            .map_err(|e| sock_err("cannot make the socket non-blocking".into(), e))?;
        Ok(ResolverSocket {
            sock: sock.into(),
            dest,
            daemon: matches!(path, ResolverPath::Daemon { .. }),
            cookie: [0; COOKIE_BYTES],
            last: Vec::new(),
            out: Vec::new(),
            send_errors: 0,
            cookies_received: 0,
        })
    }

    /// Whether this socket talks to a daemon (which needs keepalives).
    pub fn is_daemon(&self) -> bool {
        self.daemon
    }

    /// Sends one datagram (to a daemon: after the COOKIE frame); a failure is counted (the
    /// schedule repeats everything it sends).
    pub fn send(&mut self, datagram: &[u8]) {
        let r = if self.daemon {
            self.last.clear();
            self.last.extend_from_slice(datagram);
            self.send_last()
        } else {
            self.sock.send_to(datagram, self.dest).map(drop)
        };
        if r.is_err() {
            self.send_errors += 1;
        }
    }

    fn send_last(&mut self) -> io::Result<()> {
        self.out.clear();
        self.out.extend_from_slice(&cookie_frame(&self.cookie));
        self.out.extend_from_slice(&self.last);
        self.sock.send(&self.out).map(drop)
    }

    /// Receives one datagram for the resolver if one is waiting. A cookie from the daemon is
    /// kept (and the last datagram sent again with it), not returned.
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            match self.sock.recv(buf) {
                Ok(n) => {
                    if self.daemon {
                        if let Some(c) = cookie_answer(&buf[..n]) {
                            self.cookies_received += 1;
                            if c != self.cookie {
                                self.cookie = c;
                                if !self.last.is_empty() && self.send_last().is_err() {
                                    self.send_errors += 1;
                                }
                            }
                            continue;
                        }
                    }
                    return Some(n);
                }
                // ECONNREFUSED: the daemon is not (yet) there; keep going.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
        }
    }

    /// Whether the daemon has given this socket a cookie (it is registered, or about to be).
    pub fn has_cookie(&self) -> bool {
        self.cookie != [0; COOKIE_BYTES]
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// This host's identity for topic resolution: the kernel's boot id and the network namespace.
/// Two contexts with the same id can share memory segments; a network namespace is treated as
/// a host of its own, so containers and the namespaces of the multi-host tests use the network.
pub fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let boot: String = boot
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(12)
        .collect();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| {
            p.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_digit())
                .collect::<String>()
        })
        .unwrap_or_default();
    format!(
        "{}-{}",
        if boot.is_empty() { "0" } else { &boot },
        if netns.is_empty() { "0" } else { &netns }
    )
}

/// `peregrine resolverd`'s socket loop around the sans-I/O [`Relay`].
#[derive(Debug)]
pub struct Daemon {
    sock: UdpSocket,
    relay: Relay,
    buf: Vec<u8>,
    pub send_errors: u64,
}

impl Daemon {
    /// Binds `listen` (port 0: any free port, see [`local_addr`](Self::local_addr)), with a
    /// random key for its cookies.
    pub fn bind(listen: SocketAddrV4, cfg: RelayConfig) -> Result<Self, OpenError> {
        let sock = UdpSocket::bind(listen)
            .map_err(|e| sock_err(format!("resolverd cannot bind {listen}"), e))?;
        sock.set_nonblocking(true)
            .map_err(|e| sock_err("cannot make the socket non-blocking".into(), e))?;
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| {
            sock_err(
                "resolverd cannot draw the random key of its cookies".into(),
                io::Error::other(e.to_string()),
            )
        })?;
        Ok(Daemon {
            sock,
            relay: Relay::new(cfg, secret),
            buf: vec![0; MAX_DATAGRAM],
            send_errors: 0,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.sock
            .local_addr()
            .expect("a bound socket has an address")
    }
    pub fn counters(&self) -> RelayCounters {
        self.relay.counters()
    }
    pub fn clients(&self) -> usize {
        self.relay.clients()
    }

    /// Relays what arrives for up to `timeout_ms`; returns the datagrams handled.
    pub fn run_once(&mut self, timeout_ms: i32) -> usize {
        sys::wait_readable(&[self.sock.as_raw_fd()], timeout_ms);
        let mut handled = 0;
        loop {
            let (n, from) = match self.sock.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => continue,
            };
            handled += 1;
            let now = crate::net::now_ns();
            let (forward, cookie) = match self.relay.on_datagram(from, &self.buf[..n], now) {
                Verdict::Forward { refresh_cookie } => (true, refresh_cookie),
                Verdict::Keepalive { refresh_cookie } => (false, refresh_cookie),
                Verdict::Challenge => (false, true),
                Verdict::Rejected => (false, false),
            };
            if cookie {
                // One COOKIE frame: never more than the datagram, which started with one.
                debug_assert!(n >= COOKIE_LEN);
                if self
                    .sock
                    .send_to(&self.relay.cookie_for(from, now), from)
                    .is_err()
                {
                    self.send_errors += 1;
                }
            }
            if forward {
                let dests: Vec<SocketAddr> = self.relay.destinations(from).collect();
                let payload = forwarded(&self.buf[..n]);
                for d in dests {
                    if self.sock.send_to(payload, d).is_err() {
                        self.send_errors += 1;
                    }
                }
            }
        }
        self.relay.handle_timeout(crate::net::now_ns());
        handled
    }
}
