//! Sending batches: one UDP GSO send per batch and destination when the kernel takes it,
//! else one send a datagram (for good after the first refusal), to one peer or to all.

use super::socket::fallback;
use crate::error::OfferError;
use crate::net::auth::Sealer;
use crate::net::config::NetConfig;
use crate::net::sys;
use crate::net::xdp::XdpTx;
use peregrine_proto::auth::AuthReject;
use peregrine_proto::lossgen::{Direction, LossGenerator};
use peregrine_proto::sender::{Batch, SendError};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// The most bytes one GSO send carries (the UDP length field's limit, less headers, rounded
/// down).
pub(super) const MAX_GSO_BYTES: usize = 65_000;
/// The most datagrams one GSO send carries: the kernel refuses more (EINVAL) than its
/// `UDP_MAX_SEGMENTS`, 64 before Linux 6.0-era kernels raised it to 128. Without this bound a
/// stream of small datagrams (`datagram=` under 1,016 bytes) had every batch refused and fell
/// back to one send per datagram.
pub(super) const MAX_GSO_SEGMENTS: usize = 64;

/// Datagrams of `segment_len` bytes that one GSO send carries: as many as fit in
/// `MAX_GSO_BYTES` (65,000), and no more than `MAX_GSO_SEGMENTS` (64).
pub fn gso_batch_datagrams(segment_len: usize) -> usize {
    (MAX_GSO_BYTES / segment_len).clamp(1, MAX_GSO_SEGMENTS)
}

/// What every datagram a driver sends passes through: the test loss generator (`loss=`,
/// `PEREGRINE_LOSS`), which may drop it, and the sealer of `auth=`, which ends it with an AUTH
/// frame. Both are off by default.
#[derive(Debug)]
pub(super) struct Outbound {
    pub(super) loss: Option<Box<LossGenerator>>,
    pub(super) seal: Option<Box<Sealer>>,
    /// Batches one destination refused while another took them (see [`to_all`]).
    pub(super) partial_send_errors: u64,
    /// A publisher's kernel bypass (`xdp=`): datagrams to a peer whose Ethernet address is
    /// known leave through its ring, the rest through the socket.
    pub(super) xdp: Option<Box<XdpTx>>,
}

impl Outbound {
    pub(super) fn new(cfg: &NetConfig) -> Self {
        Outbound {
            loss: cfg.loss.map(|c| Box::new(LossGenerator::new(c))),
            seal: cfg
                .auth
                .as_deref()
                .map(|k| Box::new(Sealer::new(k.clone()))),
            partial_send_errors: 0,
            xdp: None,
        }
    }
}

/// What a driver does with a datagram it received under `auth=`: the frames to read, or the
/// reason it is dropped (counted by kind).
pub(super) fn open_datagram<'a>(
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
pub(super) fn send_batch(
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
pub(super) fn send_retrying(sock: &UdpSocket, bytes: &[u8], to: SocketAddr) -> io::Result<()> {
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
pub(super) fn to_all<'a>(
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
            xdp,
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
            if let (Some(x), SocketAddr::V4(v4)) = (xdp.as_mut(), to) {
                match x.send(b.datagrams(), v4, loss) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => {
                        failures += 1;
                        first_error.get_or_insert(e);
                        continue;
                    }
                }
            }
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
pub(super) fn send_batch_to(
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
pub(super) fn send_frame(
    sock: &UdpSocket,
    out: &mut Outbound,
    frame: &[u8],
    to: Option<SocketAddr>,
) {
    let Outbound {
        loss, seal, xdp, ..
    } = out;
    let frame = match seal.as_mut() {
        Some(s) => s.one(frame),
        None => frame,
    };
    if let (Some(x), Some(SocketAddr::V4(v4))) = (xdp.as_mut(), to) {
        // Through the ring like the data it follows (a heartbeat or BYE must not overtake
        // it through the kernel); best effort like the socket's.
        if let Ok(true) = x.send(std::iter::once(frame), v4, loss) {
            return;
        }
    }
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
pub(super) struct Sockets {
    pub(super) main: UdpSocket,
    /// Line B's socket and group.
    pub(super) line_b: Option<(UdpSocket, SocketAddr)>,
}

impl Sockets {
    /// The socket that sends to `dest`.
    #[inline]
    pub(super) fn to(&self, dest: SocketAddr) -> &UdpSocket {
        match &self.line_b {
            Some((s, b)) if *b == dest => s,
            _ => &self.main,
        }
    }
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
