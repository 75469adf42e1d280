//! The ping side: its link (a UDP or multicast socket, or two one-way TCP connections), the
//! timed loop of round trips, and the stop that tells the pong side to finish.

use super::socket::{
    io_ctx, is_timeout, mcast_socket, read_full, recv_dgram, send_dgram, set_mode_tcp,
    set_mode_udp, write_full,
};
use super::{Endpoint, RawConfig, MAX_DATAGRAM, MCAST_IFACE, STOP_TRIES, STOP_WAIT};
use crate::clock::Clock;
use crate::BenchError;
use std::fmt;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// The ping side's socket.
#[derive(Debug)]
pub(super) enum PingLink {
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
    pub(super) fn open(
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

    pub(super) fn send(&mut self, buf: &[u8], i: u64) -> Result<(), BenchError> {
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
    pub(super) fn recv(&mut self, buf: &mut [u8], i: u64) -> Result<usize, BenchError> {
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
    pub(super) fn stop(self) -> Result<(), BenchError> {
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
pub(super) fn payload(size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (j as u8).wrapping_mul(31) ^ 0xa5)
        .collect()
}

/// Sends `warmup + count` pings, checks every echo byte for byte and gives `record` the half
/// round trip of each after the warm-up, in nanoseconds.
pub(super) fn ping_loop(
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
