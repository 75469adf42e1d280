//! Bare-socket ping-pong: the baseline for Peregrine's own overhead over udp, mcast and tcp.
//!
//! The same method as [`crate::measure::pingpong`] (half round trip, TSC clock, each ping carrying its
//! 8-byte number, the echo checked byte for byte) with nothing but a socket on each side:
//! - `udp`: the pong binds the ping URI's address, the ping binds the pong URI's address and
//!   sends to the ping URI; the pong echoes to the sender.
//! - `mcast`: the pong joins the ping URI's group and port, the ping joins the pong URI's
//!   (a different port); each sends to the other's group:port, on the loopback interface.
//! - `tcp`: the shape of Peregrine's TCP transport, two one-way connections: the pong side listens
//!   on both URIs' addresses (two ports of its host), the ping side connects to both, sends pings
//!   on the first and reads echoes on the second; the reverse direction of each carries only
//!   ACKs, as a subscriber's connection does. (A single connection that carries both ways lets
//!   each echo carry the ACK of its ping; sockperf's row measures that shape.) `TCP_NODELAY` on
//!   every socket, and every message is exactly `size` bytes.
//!
//! `busy_poll` makes the sockets non-blocking and polls them in a spin loop; otherwise a receive
//! blocks. At the end the ping sends a stop message (udp/mcast: an empty datagram, answered by an
//! empty one; tcp: a write shutdown, answered by the pong closing). Every wait for the other side
//! gives up after [`PEER_TIMEOUT`] with an error naming what it waited for.

use crate::clock::Clock;
use crate::helper::protocol::{say_ready, say_result, EchoReport, Helper, Role};
use crate::measure::floor::with_cpu;
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use peregrine::Scheme;
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long either side waits for the other before giving up.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// The group of local multicast runs ([`local_uris`]).
pub const MCAST_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 2);
/// Multicast is sent and joined on the loopback interface.
const MCAST_IFACE: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// The largest TCP message accepted (an arbitrary bound against typos).
pub const MAX_TCP_MESSAGE: usize = 16 << 20;
/// How long the ping waits for the answer to each stop datagram, and how many it sends.
const STOP_WAIT: Duration = Duration::from_millis(200);
const STOP_TRIES: u32 = 5;

/// Settings of a raw-socket ping-pong run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RawConfig {
    /// `udp`, `mcast` or `tcp`.
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    pub count: u64,
    pub warmup_count: u64,
    pub cpus: CpuPair,
    /// Non-blocking sockets polled in a spin loop (`--idle spin`) instead of blocking receives
    /// (`--idle block`).
    pub busy_poll: bool,
}

/// One end of a raw run, as given by `--ping-uri` / `--pong-uri`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `udp://IP:PORT`
    Udp(SocketAddrV4),
    /// `mcast://GROUP:PORT`, on the loopback interface.
    Mcast(SocketAddrV4),
    /// `tcp://IP:PORT`
    Tcp(SocketAddrV4),
}

impl Endpoint {
    /// Parses `udp://IP:PORT`, `mcast://GROUP:PORT` or `tcp://IP:PORT` (IPv4, port not 0).
    pub fn parse(uri: &str) -> Result<Endpoint, BenchError> {
        let bad = |why: &str| {
            BenchError::Config(format!(
                "'{uri}' is not accepted: {why} (give udp://IP:PORT, mcast://GROUP:PORT or tcp://IP:PORT, for example udp://127.0.0.1:40000)"
            ))
        };
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| bad("it has no scheme"))?;
        let addr: SocketAddrV4 = rest
            .parse()
            .map_err(|_| bad("the address is not IPv4-address:port"))?;
        if addr.port() == 0 {
            return Err(bad("port 0 names no port"));
        }
        let multicast = addr.ip().is_multicast();
        match scheme.parse::<Scheme>() {
            Ok(Scheme::Udp | Scheme::Tcp) if multicast => {
                Err(bad("a multicast address needs mcast://"))
            }
            Ok(Scheme::Mcast) if !multicast => Err(bad(
                "mcast:// needs a multicast group (224.0.0.0 to 239.255.255.255)",
            )),
            Ok(Scheme::Udp) => Ok(Endpoint::Udp(addr)),
            Ok(Scheme::Tcp) => Ok(Endpoint::Tcp(addr)),
            Ok(Scheme::Mcast) => Ok(Endpoint::Mcast(addr)),
            _ => Err(bad("unknown scheme")),
        }
    }

    pub fn addr(&self) -> SocketAddrV4 {
        match *self {
            Endpoint::Udp(a) | Endpoint::Mcast(a) | Endpoint::Tcp(a) => a,
        }
    }

    /// `udp`, `mcast` or `tcp`: the transport and URI scheme.
    pub fn scheme(&self) -> Scheme {
        match self {
            Endpoint::Udp(_) => Scheme::Udp,
            Endpoint::Mcast(_) => Scheme::Mcast,
            Endpoint::Tcp(_) => Scheme::Tcp,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.addr())
    }
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &RawConfig) -> Result<(), BenchError> {
    let max = match cfg.transport {
        Scheme::Udp | Scheme::Mcast => MAX_DATAGRAM,
        Scheme::Tcp => MAX_TCP_MESSAGE,
        t => {
            return Err(BenchError::Config(format!(
                "--transport {t} is not accepted with --raw: give udp, mcast or tcp"
            )))
        }
    };
    if cfg.size < 8 || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted for a raw {} ping-pong: give 8 to {max} bytes (each ping carries its 8-byte number)",
            cfg.size, cfg.transport
        )));
    }
    if cfg.count == 0 {
        return Err(BenchError::Config(
            "--count 0 is not accepted: give at least 1 sample".into(),
        ));
    }
    Ok(())
}

/// Both URIs for a run on this machine, with ports the kernel found free (bound to port 0 and
/// released, so another process could still take one before the run does): `(ping, pong)`.
pub fn local_uris(transport: Scheme) -> Result<(String, String), BenchError> {
    let two_udp_ports = || -> io::Result<(u16, u16)> {
        // Both held at once, so they differ.
        let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        Ok((a.local_addr()?.port(), b.local_addr()?.port()))
    };
    let ctx = |e| io_ctx("cannot find a free port on 127.0.0.1")(e);
    match transport {
        Scheme::Udp => {
            let (p, q) = two_udp_ports().map_err(ctx)?;
            Ok((
                format!("udp://127.0.0.1:{p}"),
                format!("udp://127.0.0.1:{q}"),
            ))
        }
        Scheme::Mcast => {
            let (p, q) = two_udp_ports().map_err(ctx)?;
            Ok((
                format!("mcast://{MCAST_GROUP}:{p}"),
                format!("mcast://{MCAST_GROUP}:{q}"),
            ))
        }
        Scheme::Tcp => {
            // Both held at once, so they differ.
            let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ctx)?;
            let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ctx)?;
            let (p, q) = (
                a.local_addr().map_err(ctx)?.port(),
                b.local_addr().map_err(ctx)?.port(),
            );
            Ok((
                format!("tcp://127.0.0.1:{p}"),
                format!("tcp://127.0.0.1:{q}"),
            ))
        }
        t => Err(BenchError::Config(format!(
            "--transport {t} is not accepted with --raw: give udp, mcast or tcp"
        ))),
    }
}

/// Parses both URIs, checking they are of `cfg.transport`.
fn endpoints(
    cfg: &RawConfig,
    ping_uri: &str,
    pong_uri: &str,
) -> Result<(Endpoint, Endpoint), BenchError> {
    let ping = Endpoint::parse(ping_uri)?;
    let pong = Endpoint::parse(pong_uri)?;
    for (flag, e) in [("--ping-uri", ping), ("--pong-uri", pong)] {
        if e.scheme() != cfg.transport {
            return Err(BenchError::Config(format!(
                "{flag} {e} does not match --transport {}: give a {}:// URI",
                cfg.transport, cfg.transport
            )));
        }
    }
    Ok((ping, pong))
}

/// Runs both sides: spawns the pong process with `exe`, then pings from this one (on `cpus.a`).
pub fn run(cfg: &RawConfig, exe: &Path, clock: &Clock) -> Result<LatencyRecorder, BenchError> {
    validate(cfg)?;
    let (ping_uri, pong_uri) = local_uris(cfg.transport)?;
    let (ping_ep, pong_ep) = endpoints(cfg, &ping_uri, &pong_uri)?;
    let helper = Helper::start(
        exe,
        &RawPong {
            cfg: cfg.clone(),
            ping_uri: ping_uri.clone(),
            pong_uri: pong_uri.clone(),
        },
    )?;
    let mut link = PingLink::open(cfg, ping_ep, pong_ep, PEER_TIMEOUT)?;
    let mut rec = LatencyRecorder::new();
    with_cpu(cfg.cpus.a, || {
        ping_loop(cfg, clock, &mut link, |ns| rec.record(ns))
    })??;
    link.stop()?;
    let r: EchoReport = helper.finish()?;
    let sent = cfg.warmup_count + cfg.count;
    if r.echoed != sent {
        return Err(BenchError::Child(format!(
            "the raw {} pong side reports {} echoes of the {sent} pings sent",
            cfg.transport, r.echoed
        )));
    }
    Ok(rec)
}

/// The bare-socket pong side, as a helper.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RawPong {
    pub cfg: RawConfig,
    pub ping_uri: String,
    pub pong_uri: String,
}

impl Role for RawPong {
    const TAG: &'static str = "raw_pong";
    const WHAT: &'static str = "bare-socket pong side";
}

/// The echo side (`--raw --role pong`): sets up its sockets, says ready, echoes until told to
/// stop, then prints `{"cpu_s": .., "echoed": ..}`.
pub fn pong(cfg: &RawConfig, ping_addr: &str, pong_addr: &str) -> Result<(), BenchError> {
    validate(cfg)?;
    let (ping_ep, pong_ep) = endpoints(cfg, ping_addr, pong_addr)?;
    let side = PongSide::open(ping_ep, pong_ep)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready();
    let echoed = side.echo(cfg.size, cfg.busy_poll, PEER_TIMEOUT)?;
    say_result(&EchoReport {
        cpu_s: crate::cpu_seconds_self(),
        echoed,
    });
    Ok(())
}

/// Adds what was being done to an I/O error, keeping its kind.
fn io_ctx(what: impl fmt::Display) -> impl FnOnce(io::Error) -> BenchError {
    move |e| BenchError::Io(io::Error::new(e.kind(), format!("{what}: {e}")))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Counts spins and, every few thousand, checks whether `limit` has passed since the first
/// check (so the hot loop reads no clock).
struct Patience {
    spins: u32,
    since: Option<Instant>,
    limit: Duration,
}

impl Patience {
    fn new(limit: Duration) -> Self {
        Patience {
            spins: 0,
            since: None,
            limit,
        }
    }

    #[inline]
    fn exhausted(&mut self) -> bool {
        self.spins = self.spins.wrapping_add(1);
        if self.spins & 0xfff != 0 {
            return false;
        }
        self.since.get_or_insert_with(Instant::now).elapsed() > self.limit
    }
}

/// Sets the socket up for the mode: non-blocking, or blocking with `timeout` on every call.
fn set_mode_udp(sock: &UdpSocket, busy: bool, timeout: Duration) -> io::Result<()> {
    sock.set_nonblocking(busy)?;
    if !busy {
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
    }
    Ok(())
}

fn set_mode_tcp(s: &TcpStream, busy: bool, timeout: Duration) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_nonblocking(busy)?;
    if !busy {
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
    }
    Ok(())
}

/// A receive: `Ok(None)` when nothing came within the timeout.
fn recv_dgram(
    sock: &UdpSocket,
    buf: &mut [u8],
    busy: bool,
    timeout: Duration,
) -> io::Result<Option<(usize, SocketAddr)>> {
    let mut p = Patience::new(timeout);
    loop {
        match sock.recv_from(buf) {
            Ok(r) => return Ok(Some(r)),
            Err(e) if is_timeout(&e) => {
                if !busy || p.exhausted() {
                    return Ok(None);
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A send of one datagram, retried while the send buffer is full.
fn send_dgram(sock: &UdpSocket, buf: &[u8], to: SocketAddrV4, timeout: Duration) -> io::Result<()> {
    let mut p = Patience::new(timeout);
    loop {
        match sock.send_to(buf, to) {
            Ok(n) if n == buf.len() => return Ok(()),
            Ok(n) => return Err(io::Error::other(format!("sent {n} of {} bytes", buf.len()))),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if p.exhausted() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the send buffer stayed full",
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads exactly `buf.len()` bytes: `Ok(Some(true))` when done, `Ok(Some(false))` at a clean end
/// of stream before the first byte, `Ok(None)` when nothing more came within the timeout.
/// After each read the socket leaves quick-ACK mode, as Peregrine's TCP subscriber does: on a
/// one-way connection every ACK is a segment of its own, and delayed ACKs are the best a bare
/// socket can do there (the floor must not be beaten by a socket option it lacks).
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    busy: bool,
    timeout: Duration,
) -> io::Result<Option<bool>> {
    let mut got = 0;
    let mut p = Patience::new(timeout);
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(Some(false)),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the stream ended inside a message ({got} of {} bytes)",
                        buf.len()
                    ),
                ))
            }
            Ok(n) => {
                got += n;
                let _ = SockRef::from(&*s).set_tcp_quickack(false);
            }
            Err(e) if is_timeout(&e) => {
                if !busy || p.exhausted() {
                    return Ok(None);
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(true))
}

fn write_full(s: &mut TcpStream, buf: &[u8], timeout: Duration) -> io::Result<()> {
    let mut sent = 0;
    let mut p = Patience::new(timeout);
    while sent < buf.len() {
        match s.write(&buf[sent..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(n) => sent += n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if p.exhausted() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer stopped reading",
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A UDP socket bound to `group:port` (shared with `SO_REUSEADDR`, as Peregrine's multicast
/// subscriber does), joined to the group and sending on the loopback interface.
fn mcast_socket(group: SocketAddrV4) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&SockAddr::from(group))?;
    s.join_multicast_v4(group.ip(), &MCAST_IFACE)?;
    s.set_multicast_if_v4(&MCAST_IFACE)?;
    // Peregrine's default (`loop=1`): local members receive what is sent.
    s.set_multicast_loop_v4(true)?;
    s.set_multicast_ttl_v4(1)?;
    Ok(s.into())
}

/// The ping side's socket.
#[derive(Debug)]
enum PingLink {
    Dgram {
        sock: UdpSocket,
        /// Where pings go.
        to: SocketAddrV4,
        /// What the socket receives on, for messages.
        local: Endpoint,
        busy: bool,
        timeout: Duration,
    },
    Stream {
        /// Pings go out on this connection (to the ping URI)...
        tx: TcpStream,
        /// ...and echoes come back on this one (from the pong URI).
        rx: TcpStream,
        ping: Endpoint,
        pong: Endpoint,
        busy: bool,
        timeout: Duration,
    },
}

impl PingLink {
    /// Opens the ping side once the pong side is ready (for tcp, it connects).
    fn open(
        cfg: &RawConfig,
        ping: Endpoint,
        pong: Endpoint,
        timeout: Duration,
    ) -> Result<PingLink, BenchError> {
        let busy = cfg.busy_poll;
        match (ping, pong) {
            (Endpoint::Udp(to), Endpoint::Udp(mine)) => {
                let sock = UdpSocket::bind(mine)
                    .map_err(io_ctx(format!("ping side: cannot bind {pong}")))?;
                // Connected: only the pong's datagrams are received.
                sock.connect(to)
                    .map_err(io_ctx(format!("ping side: cannot connect to {ping}")))?;
                set_mode_udp(&sock, busy, timeout).map_err(io_ctx("ping side: socket options"))?;
                Ok(PingLink::Dgram {
                    sock,
                    to,
                    local: pong,
                    busy,
                    timeout,
                })
            }
            (Endpoint::Mcast(to), Endpoint::Mcast(mine)) => {
                let sock = mcast_socket(mine).map_err(io_ctx(format!(
                    "ping side: cannot join {pong} on {MCAST_IFACE}"
                )))?;
                set_mode_udp(&sock, busy, timeout).map_err(io_ctx("ping side: socket options"))?;
                Ok(PingLink::Dgram {
                    sock,
                    to,
                    local: pong,
                    busy,
                    timeout,
                })
            }
            (Endpoint::Tcp(to), Endpoint::Tcp(from)) => {
                let connect = |addr: SocketAddrV4, e: Endpoint| {
                    let s = TcpStream::connect_timeout(&addr.into(), timeout)
                        .map_err(io_ctx(format!("ping side: cannot connect to {e}")))?;
                    set_mode_tcp(&s, busy, timeout).map_err(io_ctx("ping side: socket options"))?;
                    Ok::<_, BenchError>(s)
                };
                Ok(PingLink::Stream {
                    tx: connect(to, ping)?,
                    rx: connect(from, pong)?,
                    ping,
                    pong,
                    busy,
                    timeout,
                })
            }
            _ => Err(BenchError::Config(format!(
                "{ping} and {pong} are not of the same transport"
            ))),
        }
    }

    fn send(&mut self, buf: &[u8], i: u64) -> Result<(), BenchError> {
        match self {
            PingLink::Dgram {
                sock, to, timeout, ..
            } => send_dgram(sock, buf, *to, *timeout)
                .map_err(io_ctx(format!("ping {i}: cannot send to {to}"))),
            PingLink::Stream {
                tx, ping, timeout, ..
            } => write_full(tx, buf, *timeout)
                .map_err(io_ctx(format!("ping {i}: cannot send to {ping}"))),
        }
    }

    /// Receives the echo of ping `i` into `buf` (which, for tcp, is exactly the message size).
    fn recv(&mut self, buf: &mut [u8], i: u64) -> Result<usize, BenchError> {
        let timed_out = |what: &dyn fmt::Display, t: &Duration| {
            BenchError::Child(format!(
                "no echo of ping {i} within {} s (waited on {what} for the pong side's answer)",
                t.as_secs_f64()
            ))
        };
        match self {
            PingLink::Dgram {
                sock,
                local,
                busy,
                timeout,
                ..
            } => match recv_dgram(sock, buf, *busy, *timeout)
                .map_err(io_ctx(format!("ping {i}: cannot receive on {local}")))?
            {
                Some((n, _)) => Ok(n),
                None => Err(timed_out(local, timeout)),
            },
            PingLink::Stream {
                rx,
                pong,
                busy,
                timeout,
                ..
            } => match read_full(rx, buf, *busy, *timeout)
                .map_err(io_ctx(format!("ping {i}: cannot receive from {pong}")))?
            {
                Some(true) => Ok(buf.len()),
                Some(false) => Err(BenchError::Child(format!(
                    "the pong side closed {pong} before echoing ping {i}"
                ))),
                None => Err(timed_out(pong, timeout)),
            },
        }
    }

    /// Tells the pong side to stop and waits until it has (udp/mcast: its empty answer, which
    /// is sent again up to a few times should a datagram be lost; tcp: a write shutdown of the
    /// ping connection, answered by the pong side closing the echo connection).
    fn stop(self) -> Result<(), BenchError> {
        match self {
            PingLink::Dgram {
                sock, to, local, ..
            } => {
                // Blocking with a short timeout, whatever the mode was.
                sock.set_nonblocking(false)
                    .and_then(|_| sock.set_read_timeout(Some(STOP_WAIT)))
                    .map_err(io_ctx("ping side: socket options"))?;
                let mut buf = vec![0u8; MAX_DATAGRAM + 1];
                for _ in 0..STOP_TRIES {
                    match sock.send_to(&[], to) {
                        Ok(_) => {}
                        // The pong side is gone (an ICMP port unreachable came back).
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
                        Err(e) => return Err(io_ctx(format!("cannot send the stop to {to}"))(e)),
                    }
                    let deadline = Instant::now() + STOP_WAIT;
                    while Instant::now() < deadline {
                        match sock.recv_from(&mut buf) {
                            Ok((0, _)) => return Ok(()),
                            Ok(_) => {} // A late echo: not the answer.
                            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
                            Err(e) if is_timeout(&e) => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                return Err(io_ctx(format!(
                                    "cannot receive the stop's answer on {local}"
                                ))(e))
                            }
                        }
                    }
                }
                Err(BenchError::Child(format!(
                    "the pong side did not answer the stop message within {} x {} ms (waited on {local})",
                    STOP_TRIES,
                    STOP_WAIT.as_millis()
                )))
            }
            PingLink::Stream {
                tx,
                mut rx,
                ping,
                pong,
                timeout,
                ..
            } => {
                tx.shutdown(Shutdown::Write)
                    .map_err(io_ctx(format!("cannot shut down {ping}")))?;
                rx.set_nonblocking(false)
                    .and_then(|_| rx.set_read_timeout(Some(timeout)))
                    .map_err(io_ctx("ping side: socket options"))?;
                let mut buf = [0u8; 4096];
                loop {
                    match rx.read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(_) => {}
                        Err(e) if is_timeout(&e) => {
                            return Err(BenchError::Child(format!(
                                "the pong side did not close {pong} within {} s of the stop",
                                timeout.as_secs_f64()
                            )))
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // A reset is an end too.
                        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                        Err(e) => return Err(io_ctx(format!("cannot read {pong}"))(e)),
                    }
                }
            }
        }
    }
}

/// The ping payload: the number goes into the first 8 bytes, the rest is a fixed pattern.
fn payload(size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (j as u8).wrapping_mul(31) ^ 0xa5)
        .collect()
}

/// Sends `warmup + count` pings, checks every echo byte for byte and gives `record` the half
/// round trip of each after the warm-up, in nanoseconds.
fn ping_loop(
    cfg: &RawConfig,
    clock: &Clock,
    link: &mut PingLink,
    mut record: impl FnMut(f64),
) -> Result<(), BenchError> {
    let mut buf = payload(cfg.size);
    let datagram = matches!(link, PingLink::Dgram { .. });
    // Datagrams: room for more than the largest, so a wrong length is seen, never cut.
    let mut echo = vec![0u8; if datagram { MAX_DATAGRAM + 1 } else { cfg.size }];
    for i in 0..cfg.warmup_count + cfg.count {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        let t0 = clock.now();
        link.send(&buf, i)?;
        let n = link.recv(&mut echo, i)?;
        let t1 = clock.now();
        if echo[..n] != buf[..] {
            let mut num = [0u8; 8];
            let k = n.min(8);
            num[..k].copy_from_slice(&echo[..k]);
            return Err(BenchError::Child(format!(
                "ping {i} of {} bytes was echoed as {n} bytes starting with number {} and {}",
                cfg.size,
                u64::from_le_bytes(num),
                if n == cfg.size && echo[..8] == buf[..8] {
                    "a damaged payload"
                } else {
                    "differing contents"
                }
            )));
        }
        if i >= cfg.warmup_count {
            record(clock.ticks_to_ns(t1 - t0) / 2.0);
        }
    }
    Ok(())
}

/// The pong side's socket.
#[derive(Debug)]
enum PongSide {
    Dgram {
        sock: UdpSocket,
        local: Endpoint,
        /// Multicast: where echoes go; unicast: back to each sender.
        reply_to: Option<SocketAddrV4>,
    },
    Listeners {
        /// Where the pings' connection comes.
        pings: TcpListener,
        /// Where the echoes' connection comes.
        echoes: TcpListener,
        ping: Endpoint,
        pong: Endpoint,
    },
}

impl PongSide {
    /// Binds, joins or listens: everything before the pong side can say it is ready.
    fn open(ping: Endpoint, pong: Endpoint) -> Result<PongSide, BenchError> {
        match (ping, pong) {
            (Endpoint::Udp(mine), Endpoint::Udp(_)) => {
                let sock = UdpSocket::bind(mine)
                    .map_err(io_ctx(format!("pong side: cannot bind {ping}")))?;
                Ok(PongSide::Dgram {
                    sock,
                    local: ping,
                    reply_to: None,
                })
            }
            (Endpoint::Mcast(mine), Endpoint::Mcast(theirs)) => {
                if mine == theirs {
                    return Err(BenchError::Config(format!(
                        "--ping-uri and --pong-uri are both {ping}: mcast needs two ports (or groups)"
                    )));
                }
                let sock = mcast_socket(mine).map_err(io_ctx(format!(
                    "pong side: cannot join {ping} on {MCAST_IFACE}"
                )))?;
                Ok(PongSide::Dgram {
                    sock,
                    local: ping,
                    reply_to: Some(theirs),
                })
            }
            (Endpoint::Tcp(a), Endpoint::Tcp(b)) => {
                if a == b {
                    return Err(BenchError::Config(format!(
                        "--ping-uri and --pong-uri are both {ping}: tcp needs two ports, one connection each way"
                    )));
                }
                let listen = |addr: SocketAddrV4, e: Endpoint| {
                    TcpListener::bind(addr)
                        .map_err(io_ctx(format!("pong side: cannot listen on {e}")))
                };
                Ok(PongSide::Listeners {
                    pings: listen(a, ping)?,
                    echoes: listen(b, pong)?,
                    ping,
                    pong,
                })
            }
            _ => Err(BenchError::Config(format!(
                "{ping} and {pong} are not of the same transport"
            ))),
        }
    }

    /// Echoes every message until the stop; returns how many were echoed (the stop not counted).
    fn echo(self, size: usize, busy: bool, timeout: Duration) -> Result<u64, BenchError> {
        let idle = |on: &Endpoint| {
            BenchError::Child(format!(
                "pong side: no ping and no stop message within {} s (waited on {on})",
                timeout.as_secs_f64()
            ))
        };
        let mut echoed = 0u64;
        match self {
            PongSide::Dgram {
                sock,
                local,
                reply_to,
            } => {
                set_mode_udp(&sock, busy, timeout).map_err(io_ctx("pong side: socket options"))?;
                let mut buf = vec![0u8; MAX_DATAGRAM + 1];
                loop {
                    let (n, from) = recv_dgram(&sock, &mut buf, busy, timeout)
                        .map_err(io_ctx(format!("pong side: cannot receive on {local}")))?
                        .ok_or_else(|| idle(&local))?;
                    let to = match (reply_to, from) {
                        (Some(group), _) => group,
                        (None, SocketAddr::V4(a)) => a,
                        (None, SocketAddr::V6(a)) => {
                            return Err(BenchError::Child(format!(
                                "pong side: a datagram from IPv6 address {a} on {local}"
                            )))
                        }
                    };
                    send_dgram(&sock, &buf[..n], to, timeout)
                        .map_err(io_ctx(format!("pong side: cannot echo to {to}")))?;
                    if n == 0 {
                        break;
                    }
                    echoed += 1;
                }
            }
            PongSide::Listeners {
                pings,
                echoes,
                ping,
                pong,
            } => {
                let mut rx = accept_within(pings, ping, timeout)?;
                let mut tx = accept_within(echoes, pong, timeout)?;
                for s in [&rx, &tx] {
                    set_mode_tcp(s, busy, timeout).map_err(io_ctx("pong side: socket options"))?;
                }
                let mut buf = vec![0u8; size];
                loop {
                    match read_full(&mut rx, &mut buf, busy, timeout)
                        .map_err(io_ctx(format!("pong side: cannot receive on {ping}")))?
                    {
                        Some(true) => {}
                        Some(false) => break,
                        None => return Err(idle(&ping)),
                    }
                    write_full(&mut tx, &buf, timeout)
                        .map_err(io_ctx(format!("pong side: cannot echo on {pong}")))?;
                    echoed += 1;
                }
                // Dropping the echo connection closes it: the ping side's stop waits for that.
            }
        }
        Ok(echoed)
    }
}

/// The one connection `l` (on `local`) is waiting for, within `timeout`.
fn accept_within(
    l: TcpListener,
    local: Endpoint,
    timeout: Duration,
) -> Result<TcpStream, BenchError> {
    l.set_nonblocking(true)
        .map_err(io_ctx("pong side: socket options"))?;
    let start = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => return Ok(s),
            Err(e) if is_timeout(&e) => {
                if start.elapsed() > timeout {
                    return Err(BenchError::Child(format!(
                        "pong side: the ping side did not connect to {local} within {} s",
                        timeout.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_ctx(format!("pong side: cannot accept on {local}"))(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Source;

    /// A clock that needs no calibration: nothing here is timed.
    const CLOCK: Clock = Clock {
        source: Source::MonotonicRaw,
        ns_per_tick: 1.0,
    };

    fn config(transport: &str, size: usize, count: u64, busy_poll: bool) -> RawConfig {
        let transport: Scheme = transport.parse().unwrap();
        RawConfig {
            transport,
            size,
            count,
            warmup_count: 10,
            cpus: CpuPair { a: 0, b: 0 },
            busy_poll,
        }
    }

    /// Runs the pong side in a thread and pings it from this one; every echo is checked by
    /// `ping_loop`. Returns the samples recorded and the pong's echo count.
    fn echo_in_process(cfg: &RawConfig) -> (u64, u64) {
        validate(cfg).unwrap();
        let (ping_uri, pong_uri) = local_uris(cfg.transport).unwrap();
        let (ping, pong) = endpoints(cfg, &ping_uri, &pong_uri).unwrap();
        let side = PongSide::open(ping, pong).unwrap();
        let (size, busy) = (cfg.size, cfg.busy_poll);
        let t = Duration::from_secs(5);
        let echo = std::thread::spawn(move || side.echo(size, busy, t));
        let mut link = PingLink::open(cfg, ping, pong, t).unwrap();
        let mut samples = 0u64;
        ping_loop(cfg, &CLOCK, &mut link, |ns| {
            assert!(ns >= 0.0);
            samples += 1;
        })
        .unwrap();
        link.stop().unwrap();
        let echoed = echo.join().unwrap().unwrap();
        (samples, echoed)
    }

    #[test]
    fn udp_echo_in_process_is_intact() {
        let cfg = config("udp", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn tcp_echo_in_process_is_intact() {
        let cfg = config("tcp", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn tcp_carries_pings_and_echoes_on_two_one_way_connections() {
        let cfg = config("tcp", 64, 500, false);
        let (ping_uri, pong_uri) = local_uris(cfg.transport).unwrap();
        assert_ne!(ping_uri, pong_uri, "two ports");
        let (ping, pong) = endpoints(&cfg, &ping_uri, &pong_uri).unwrap();
        let side = PongSide::open(ping, pong).unwrap();
        let t = Duration::from_secs(5);
        let echo = std::thread::spawn(move || side.echo(64, false, t));
        let mut link = PingLink::open(&cfg, ping, pong, t).unwrap();
        ping_loop(&cfg, &CLOCK, &mut link, |_| {}).unwrap();
        let PingLink::Stream { tx, rx, .. } = &link else {
            panic!("tcp opens a stream link")
        };
        assert_eq!(tx.peer_addr().unwrap(), SocketAddr::V4(ping.addr()));
        assert_eq!(rx.peer_addr().unwrap(), SocketAddr::V4(pong.addr()));
        // Nothing ever came back on the pings' connection: the echoes took the other one.
        tx.set_nonblocking(true).unwrap();
        let err = (&*tx).read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        link.stop().unwrap();
        assert_eq!(echo.join().unwrap().unwrap(), 510);
        // One port for both ways is refused, naming the fix.
        let same = Endpoint::parse(&ping_uri).unwrap();
        let err = PongSide::open(same, same).err().unwrap().to_string();
        assert!(err.contains("tcp needs two ports"), "{err}");
    }

    #[test]
    fn mcast_echo_on_loopback_in_process_is_intact() {
        let cfg = config("mcast", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn busy_polled_and_edge_sizes_echo_intact() {
        for (t, size, busy) in [
            ("udp", 8, true),
            ("tcp", 8, true),
            ("udp", MAX_DATAGRAM, false),
            ("tcp", 300_000, true),
            ("tcp", 300_000, false),
        ] {
            let cfg = config(t, size, 200, busy);
            assert_eq!(
                echo_in_process(&cfg),
                (200, 210),
                "{t} {size} B busy={busy}"
            );
        }
    }

    #[test]
    fn a_damaged_echo_is_an_error() {
        let cfg = config("udp", 64, 5, false);
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let me = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (peer_addr, my_addr) = (peer.local_addr().unwrap(), me.local_addr().unwrap());
        drop(me);
        let bad = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let (n, from) = peer.recv_from(&mut buf).unwrap();
            buf[n - 1] ^= 1;
            peer.send_to(&buf[..n], from).unwrap();
        });
        let ping = Endpoint::parse(&format!("udp://{peer_addr}")).unwrap();
        let pong = Endpoint::parse(&format!("udp://{my_addr}")).unwrap();
        let mut link = PingLink::open(&cfg, ping, pong, Duration::from_secs(5)).unwrap();
        let e = ping_loop(&cfg, &CLOCK, &mut link, |_| {}).unwrap_err();
        assert!(e.to_string().contains("damaged payload"), "{e}");
        bad.join().unwrap();
    }

    #[test]
    fn a_silent_peer_is_a_timeout_naming_what_was_awaited() {
        let cfg = config("udp", 64, 5, true);
        let (ping_uri, pong_uri) = local_uris(Scheme::Udp).unwrap();
        let (ping, pong) = endpoints(&cfg, &ping_uri, &pong_uri).unwrap();
        let _silent = UdpSocket::bind(ping.addr()).unwrap();
        let mut link = PingLink::open(&cfg, ping, pong, Duration::from_millis(100)).unwrap();
        let e = ping_loop(&cfg, &CLOCK, &mut link, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("no echo of ping 0"), "{e}");
        assert!(e.contains(&pong_uri), "{e}");
    }

    #[test]
    fn uris_parse_and_print_back() {
        for uri in [
            "udp://127.0.0.1:4000",
            "tcp://127.0.0.1:4001",
            "mcast://239.255.77.2:4002",
        ] {
            assert_eq!(Endpoint::parse(uri).unwrap().to_string(), uri);
        }
        for (uri, why) in [
            ("127.0.0.1:4000", "no scheme"),
            ("udp://localhost:4000", "IPv4"),
            ("udp://127.0.0.1:0", "port 0"),
            ("udp://239.1.1.1:4000", "mcast://"),
            ("mcast://127.0.0.1:4000", "multicast group"),
            ("ipc://127.0.0.1:4000", "unknown scheme"),
        ] {
            let e = Endpoint::parse(uri).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(uri), "{uri}: {e}");
        }
    }

    #[test]
    fn validate_names_the_bad_value() {
        let e = validate(&config("ipc", 64, 1, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ipc"), "{e}");
        let e = validate(&config("udp", 70_000, 1, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("70000") && e.contains("65507"), "{e}");
        let e = endpoints(
            &config("udp", 64, 1, false),
            "tcp://127.0.0.1:1",
            "udp://127.0.0.1:2",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--ping-uri"), "{e}");
    }
}
