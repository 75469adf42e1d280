//! The sockets of the UDP drivers: opened and bound with errors naming the URI, their buffers,
//! the interface check, line B's socket, and the kernel offloads asked for with a fallback
//! reported once.

use crate::error::OpenError;
use crate::net::config::NetConfig;
use crate::net::sys;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

pub(super) fn sock_err(uri: &str, what: impl Into<String>, source: io::Error) -> OpenError {
    OpenError::Socket {
        uri: uri.to_string(),
        what: what.into(),
        source,
    }
}

/// Explains a bind failure in the user's terms.
pub(super) fn bind_error(uri: &str, addr: SocketAddrV4, e: io::Error) -> OpenError {
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
pub(super) fn check_iface(uri: &str, iface: Ipv4Addr) -> Result<(), OpenError> {
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
pub(super) fn line_b_socket(
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
pub(super) fn offload(
    uri: &str,
    what: &str,
    wanted: bool,
    set: impl FnOnce() -> io::Result<()>,
) -> bool {
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
pub(super) fn fallback(what: &str) -> &'static str {
    if what.contains("GRO") {
        "each datagram is read on its own"
    } else {
        "each datagram is sent on its own"
    }
}
