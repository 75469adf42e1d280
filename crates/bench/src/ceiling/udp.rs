//! The UDP ceiling: bare sockets on loopback moving datagrams of the size Peregrine sends
//! (1,472 bytes by default), with the socket buffers Peregrine asks for (its defaults: 16 MiB
//! to receive, 4 MiB to send), unicast or to a multicast group joined on the loopback interface.
//!
//! Without offload the writer makes one `send` per datagram and the reader one `recv` per
//! datagram. With GSO the writer sets UDP GSO and sends the batch Peregrine sends in one call
//! ([`udp::gso_batch_datagrams`]). With GRO too the reader sets UDP GRO and
//! reads up to 64 KiB at a time (on loopback a whole GSO send arrives as one). Nothing paces the writer (bare sockets have no flow control): the
//! reader's rate is the ceiling, and what the kernel dropped is reported beside it.

use super::{Ceiling, CeilingConfig, CeilingKind, Reads, WireShape};
use crate::BenchError;
use peregrine::Scheme;
use peregrine_transport::net::{sys, udp, NetConfig};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The group of the multicast ceiling (the bare ping-pong uses 239.255.77.2).
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 3);
/// How long the reader waits for a datagram once the writer is done.
const DRAIN: Duration = Duration::from_millis(100);

/// Which offloads a socket ceiling uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    None,
    /// UDP GSO on the writer.
    Gso,
    /// UDP GSO on the writer and UDP GRO on the reader.
    GsoGro,
}

/// Runs one UDP ceiling.
pub fn measure(cfg: &CeilingConfig, offload: Offload) -> Result<Ceiling, BenchError> {
    // Peregrine's settings for the transport on loopback: datagram size and socket buffers.
    let net = super::loopback_defaults(cfg.transport)?;
    let shape = WireShape::new(cfg.size, net.segment_len);
    let dgram = shape.segment_len;
    let io_err = |what: &'static str| move |e: io::Error| BenchError::Io(io_ctx(what, e));
    let (rx, dest) =
        reader_socket(cfg.transport, &net).map_err(io_err("the ceiling's reader socket"))?;
    let tx = writer_socket(cfg.transport, &net).map_err(io_err("the ceiling's writer socket"))?;
    let mut refused = Vec::new();
    if offload == Offload::GsoGro {
        if let Err(e) = sys::set_udp_gro(&rx) {
            refused.push(format!("UDP_GRO: {e}"));
        }
    }
    let per_send = if offload != Offload::None {
        match sys::set_udp_segment(&tx, dgram) {
            Ok(()) => udp::gso_batch_datagrams(dgram),
            Err(e) => {
                refused.push(format!("UDP_SEGMENT: {e}"));
                1
            }
        }
    } else {
        1
    };
    let rx: UdpSocket = rx.into();
    let tx: UdpSocket = tx.into();
    rx.set_read_timeout(Some(DRAIN))
        .map_err(io_err("the ceiling's reader socket"))?;
    tx.connect(dest)
        .map_err(io_err("the ceiling's writer socket"))?;
    let done = AtomicBool::new(false);
    let (sent, read) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
            let mut buf = vec![0u8; 65_536];
            let mut reads = Reads::default();
            loop {
                match rx.recv(&mut buf) {
                    // With GRO a read holds several datagrams: count them.
                    Ok(n) => reads.saw(n.div_ceil(dgram) as u64),
                    Err(e) if is_timeout(&e) => {
                        if done.load(Ordering::Acquire) {
                            break;
                        }
                    }
                    Err(e) => return Err(BenchError::Io(io_ctx("the ceiling's reader", e))),
                }
            }
            Ok(reads)
        });
        let writer = s.spawn(|| {
            peregrine_agent::pin_to_cpu(cfg.cpus.a)?;
            let buf = vec![0x5au8; per_send * dgram];
            let mut bytes = 0u64;
            let t0 = Instant::now();
            'run: loop {
                for _ in 0..64 {
                    match tx.send(&buf) {
                        Ok(n) => bytes += n as u64,
                        // The send buffer is full (ENOBUFS on loopback): try again.
                        Err(e) if e.raw_os_error() == Some(libc_enobufs()) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            return Err(BenchError::Io(io_ctx("the ceiling's writer", e)));
                        }
                    }
                }
                if t0.elapsed() >= cfg.duration {
                    break 'run;
                }
            }
            Ok(bytes)
        });
        let sent = writer.join().expect("the ceiling's writer does not panic");
        done.store(true, Ordering::Release);
        let read = reader.join().expect("the ceiling's reader does not panic");
        Ok::<_, BenchError>((sent?, read?))
    })?;
    Ok(Ceiling {
        kind: match offload {
            Offload::None => CeilingKind::Sockets,
            Offload::Gso => CeilingKind::SocketsGso,
            Offload::GsoGro => CeilingKind::SocketsGsoGro,
        },
        msgs_per_s: shape.msgs_in_segments(read.rate(1.0)),
        written: sent.div_ceil(dgram as u64),
        read: read.total,
        offload_refused: (!refused.is_empty()).then(|| refused.join("; ")),
    })
}

/// The reader's socket and where the writer sends: a free loopback port, or the multicast
/// group on a free port, joined on the loopback interface.
fn reader_socket(transport: Scheme, net: &NetConfig) -> io::Result<(Socket, SocketAddrV4)> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    udp::set_buffer(&s, true, net.rcvbuf);
    if transport == Scheme::Mcast {
        // A free port: the one the kernel gives a unicast socket, bound again on the group.
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let at = SocketAddrV4::new(GROUP, port);
        s.set_reuse_address(true)?;
        s.bind(&SockAddr::from(at))?;
        s.join_multicast_v4(&GROUP, &Ipv4Addr::LOCALHOST)?;
        return Ok((s, at));
    }
    s.bind(&SockAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))?;
    let at = s
        .local_addr()?
        .as_socket_ipv4()
        .ok_or_else(|| io::Error::other("the reader's socket has no IPv4 address"))?;
    Ok((s, at))
}

fn writer_socket(transport: Scheme, net: &NetConfig) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    udp::set_buffer(&s, false, net.sndbuf);
    if transport == Scheme::Mcast {
        s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST)?;
        s.set_multicast_loop_v4(true)?;
        s.set_multicast_ttl_v4(1)?;
    }
    s.bind(&SockAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))?;
    Ok(s)
}

fn libc_enobufs() -> i32 {
    rustix::io::Errno::NOBUFS.raw_os_error()
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn io_ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(transport: Scheme) -> CeilingConfig {
        CeilingConfig {
            transport,
            size: 32,
            capacity: 0,
            cpus: super::super::test_cpus(),
            duration: Duration::from_millis(50),
        }
    }

    #[test]
    fn the_socket_ceilings_count_what_the_reader_received_of_what_was_sent() {
        for transport in [Scheme::Udp, Scheme::Mcast] {
            for offload in [Offload::None, Offload::Gso, Offload::GsoGro] {
                let c = measure(&cfg(transport), offload).unwrap();
                assert!(c.read > 0, "{transport} {offload:?}: {c:?}");
                assert!(c.read <= c.written, "{transport} {offload:?}: {c:?}");
            }
        }
    }
}
