//! Bare sockets as the ping-pong uses them: busy or blocking, each wait bounded, a whole
//! datagram or a whole message in and out, errors naming what was awaited.

use super::MCAST_IFACE;
use crate::BenchError;
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Adds what was being done to an I/O error, keeping its kind.
pub(super) fn io_ctx(what: impl fmt::Display) -> impl FnOnce(io::Error) -> BenchError {
    move |e| BenchError::Io(io::Error::new(e.kind(), format!("{what}: {e}")))
}

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Counts spins and, every few thousand, checks whether `limit` has passed since the first
/// check (so the hot loop reads no clock).
pub(super) struct Patience {
    spins: u32,
    since: Option<Instant>,
    limit: Duration,
}

impl Patience {
    pub(super) fn new(limit: Duration) -> Self {
        Patience {
            spins: 0,
            since: None,
            limit,
        }
    }

    #[inline]
    pub(super) fn exhausted(&mut self) -> bool {
        self.spins = self.spins.wrapping_add(1);
        if self.spins & 0xfff != 0 {
            return false;
        }
        self.since.get_or_insert_with(Instant::now).elapsed() > self.limit
    }
}

/// Sets the socket up for the mode: non-blocking, or blocking with `timeout` on every call.
pub(super) fn set_mode_udp(sock: &UdpSocket, busy: bool, timeout: Duration) -> io::Result<()> {
    sock.set_nonblocking(busy)?;
    if !busy {
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
    }
    Ok(())
}

pub(super) fn set_mode_tcp(s: &TcpStream, busy: bool, timeout: Duration) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_nonblocking(busy)?;
    if !busy {
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
    }
    Ok(())
}

/// A receive: `Ok(None)` when nothing came within the timeout.
pub(super) fn recv_dgram(
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
pub(super) fn send_dgram(
    sock: &UdpSocket,
    buf: &[u8],
    to: SocketAddrV4,
    timeout: Duration,
) -> io::Result<()> {
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
pub(super) fn read_full(
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

pub(super) fn write_full(s: &mut TcpStream, buf: &[u8], timeout: Duration) -> io::Result<()> {
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
pub(super) fn mcast_socket(group: SocketAddrV4) -> io::Result<UdpSocket> {
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
