//! The pong side: each ping echoed back as it came, until the ping side stops.

use super::socket::{
    io_ctx, is_timeout, mcast_socket, read_full, recv_dgram, send_dgram, set_mode_tcp,
    set_mode_udp, write_full,
};
use super::{Endpoint, MAX_DATAGRAM, MCAST_IFACE};
use crate::BenchError;
use std::io;
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// The pong side's socket.
#[derive(Debug)]
pub(super) enum PongSide {
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
    pub(super) fn open(ping: Endpoint, pong: Endpoint) -> Result<PongSide, BenchError> {
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
    pub(super) fn echo(
        self,
        size: usize,
        busy: bool,
        timeout: Duration,
    ) -> Result<u64, BenchError> {
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
pub(super) fn accept_within(
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
