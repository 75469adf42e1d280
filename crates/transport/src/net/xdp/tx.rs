//! [`XdpTx`]: a publisher's send side on an [`XdpPort`]: each datagram copied into a UMEM
//! frame behind Ethernet, IPv4 and UDP headers built here, the frames put on the send ring in
//! one batch and the kernel woken once per batch.

use super::neigh::NeighSocket;
use super::port::{TxParts, XdpPort, FRAME_SIZE};
use super::{XdpConfig, XdpError};
use peregrine_proto::lossgen::{Direction, LossGenerator};
use peregrine_wire::packet::{ethernet::multicast_mac, UdpPacketRepr, HEADERS_LEN};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use xdpilone::xdp::XdpDesc;

/// How long a peer without a neighbour entry is sent to through the kernel before the table is
/// read again.
const NEIGH_RETRY_NS: u64 = 50_000_000;
/// How long a send waits for the kernel to finish with frames before it fails.
const FRAMES_TIMEOUT_NS: u64 = 1_000_000_000;

/// A publisher's send side (see the module's documentation).
pub struct XdpTx {
    port: Arc<XdpPort>,
    parts: Option<TxParts>,
    /// Send frames not on the send ring.
    free: Vec<u64>,
    /// Descriptors of the batch being built.
    pending: Vec<XdpDesc>,
    src: SocketAddrV4,
    ttl: u8,
    ident: u16,
    /// Peers' Ethernet addresses, and peers without one until a time.
    macs: Vec<(Ipv4Addr, [u8; 6])>,
    unknown: Vec<(Ipv4Addr, u64)>,
    neigh: NeighSocket,
    /// Datagrams sent through the ring.
    pub sent: u64,
    /// Datagrams to a peer whose Ethernet address was not known, left to the kernel's socket.
    pub via_kernel: u64,
}

// SAFETY: the ring pointers inside `parts` are used only through `&mut self`; the UMEM frames
// it writes are the send half's, which no other object touches (see `XdpPort`).
unsafe impl Send for XdpTx {}

impl std::fmt::Debug for XdpTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpTx")
            .field("port", &self.port)
            .field("src", &self.src)
            .field("sent", &self.sent)
            .field("via_kernel", &self.via_kernel)
            .finish()
    }
}

impl XdpTx {
    /// Takes the send half of `cfg`'s port; datagrams leave from `src` (an unspecified address
    /// is replaced by the interface's first IPv4 address) with `ttl`.
    pub fn open(cfg: &XdpConfig, src: SocketAddrV4, ttl: u8) -> Result<XdpTx, XdpError> {
        let port = XdpPort::get(cfg)?;
        let ip = if src.ip().is_unspecified() {
            *port
                .iface
                .addrs
                .first()
                .ok_or_else(|| XdpError::NoAddress {
                    name: cfg.iface.clone(),
                })?
        } else {
            *src.ip()
        };
        let parts = port.take_tx().ok_or_else(|| XdpError::HalfInUse {
            name: cfg.iface.clone(),
            half: "publisher",
        })?;
        let neigh = NeighSocket::open().map_err(|e| XdpError::Sys {
            what: "cannot open an rtnetlink socket to read the neighbour table".into(),
            source: e,
        })?;
        let free = (port.rx_frames..port.frames)
            .map(|i| u64::from(i) * u64::from(FRAME_SIZE))
            .collect();
        Ok(XdpTx {
            port,
            parts: Some(parts),
            free,
            pending: Vec::with_capacity(64),
            src: SocketAddrV4::new(ip, src.port()),
            ttl,
            ident: 0,
            macs: Vec::new(),
            unknown: Vec::new(),
            neigh,
            sent: 0,
            via_kernel: 0,
        })
    }

    pub fn port(&self) -> &XdpPort {
        &self.port
    }

    /// The largest datagram a frame carries.
    pub fn max_datagram(&self) -> usize {
        FRAME_SIZE as usize - HEADERS_LEN
    }

    /// `to`'s Ethernet address: the group's for multicast, else the kernel's neighbour entry
    /// (read again at most every 50 ms while there is none).
    fn mac_for(&mut self, to: Ipv4Addr) -> Option<[u8; 6]> {
        if to.is_multicast() {
            return Some(multicast_mac(to));
        }
        if let Some(&(_, m)) = self.macs.iter().find(|(a, _)| *a == to) {
            return Some(m);
        }
        // The clock is read only here, on a miss: a known peer costs no clock read per send.
        let now_ns = peregrine_agent::monotonic_ns();
        if self
            .unknown
            .iter()
            .any(|&(a, until)| a == to && now_ns < until)
        {
            return None;
        }
        self.unknown.retain(|&(a, _)| a != to);
        match self.neigh.lookup(self.port.iface.index, to) {
            Ok(Some(m)) => {
                self.macs.push((to, m));
                Some(m)
            }
            _ => {
                self.unknown.push((to, now_ns + NEIGH_RETRY_NS));
                None
            }
        }
    }

    /// Forgets `to`'s Ethernet address: it is read from the neighbour table again before the
    /// next datagram to it (the publisher calls this when a receiver joins or rejoins, which a
    /// new host on the same address does).
    pub fn forget(&mut self, to: Ipv4Addr) {
        self.macs.retain(|(a, _)| *a != to);
    }

    /// Takes back the frames the kernel finished sending.
    fn reclaim(&mut self) {
        let Some(parts) = self.parts.as_mut() else {
            return;
        };
        let mut c = parts.completion.complete(u32::MAX);
        while let Some(addr) = c.read() {
            self.free.push(addr - addr % u64::from(FRAME_SIZE));
        }
        c.release();
    }

    /// Puts the batch built so far on the send ring and wakes the kernel when it asks.
    fn submit(&mut self) {
        let Some(parts) = self.parts.as_mut() else {
            return;
        };
        // The send ring has a slot for every send frame, so all of them fit; but a reservation
        // counts on the kernel's consumer position as last read, which may be behind: what did
        // not fit goes in the next round, after the position is read again.
        let mut done = 0;
        let mut rounds = 0;
        while done < self.pending.len() {
            let mut w = parts.tx.transmit((self.pending.len() - done) as u32);
            let n = w.insert(self.pending[done..].iter().copied()) as usize;
            w.commit();
            drop(w);
            done += n;
            if n == 0 {
                rounds += 1;
                assert!(
                    rounds < 1_000_000,
                    "the AF_XDP send ring stays full with every send frame accounted for"
                );
                parts.tx.wake();
                std::hint::spin_loop();
            }
        }
        self.pending.clear();
        // In copy mode one wake-up sends at most 32 frames (the kernel's TX_BATCH_SIZE): wake
        // it until the ring is drained, or stops draining (a full device queue: the next
        // submit wakes it again).
        let mut left = parts.tx.pending();
        while left > 0 && parts.tx.needs_wakeup() {
            parts.tx.wake();
            let now = parts.tx.pending();
            if now >= left {
                break;
            }
            left = now;
        }
    }

    /// A free send frame, waiting (and waking the kernel) while all are in flight.
    fn frame(&mut self) -> io::Result<u64> {
        if let Some(f) = self.free.pop() {
            return Ok(f);
        }
        let start = peregrine_agent::monotonic_ns();
        loop {
            self.submit();
            self.reclaim();
            if let Some(f) = self.free.pop() {
                return Ok(f);
            }
            if peregrine_agent::monotonic_ns() - start > FRAMES_TIMEOUT_NS {
                return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
            }
            std::hint::spin_loop();
        }
    }

    /// Sends `datagrams` to `to` through the ring, each unless the loss generator drops it.
    /// Returns `Ok(false)`, sending nothing, when `to`'s Ethernet address is not known: the
    /// caller sends through its kernel socket (which makes the kernel resolve it).
    pub fn send<'a>(
        &mut self,
        datagrams: impl Iterator<Item = &'a [u8]>,
        to: SocketAddrV4,
        loss: &mut Option<Box<LossGenerator>>,
    ) -> io::Result<bool> {
        let Some(dst_mac) = self.mac_for(*to.ip()) else {
            self.via_kernel += 1;
            return Ok(false);
        };
        self.reclaim();
        let base = self.port.base();
        for d in datagrams {
            if let Some(l) = loss.as_mut() {
                if l.drop_datagram(Direction::Send, d) {
                    continue;
                }
            }
            if d.len() > self.max_datagram() {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            let addr = self.frame()?;
            // SAFETY: `addr` is a send frame (in the UMEM's send half) that is free: not on the
            // send ring and not handed to the kernel, so only this object touches it until it
            // is submitted below; FRAME_SIZE bytes from it are inside the mapping.
            let frame = unsafe {
                std::slice::from_raw_parts_mut(base.add(addr as usize), FRAME_SIZE as usize)
            };
            frame[HEADERS_LEN..HEADERS_LEN + d.len()].copy_from_slice(d);
            self.ident = self.ident.wrapping_add(1);
            let len = UdpPacketRepr {
                src_mac: self.port.iface.mac,
                dst_mac,
                src: self.src,
                dst: to,
                ttl: self.ttl,
                ident: self.ident,
            }
            .emit(frame, d.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
            self.pending.push(XdpDesc {
                addr,
                len: len as u32,
                options: 0,
            });
            self.sent += 1;
            if self.pending.len() == self.pending.capacity() {
                self.submit();
            }
        }
        self.submit();
        Ok(true)
    }
}

impl Drop for XdpTx {
    fn drop(&mut self) {
        // Let the kernel finish what is on the ring before the half goes back.
        let start = peregrine_agent::monotonic_ns();
        let total = (self.port.frames - self.port.rx_frames) as usize;
        while self.free.len() < total && peregrine_agent::monotonic_ns() - start < 100_000_000 {
            self.submit();
            self.reclaim();
            std::hint::spin_loop();
        }
        // A half with frames still in the kernel's hands is not reused.
        if let Some(parts) = self.parts.take().filter(|_| self.free.len() == total) {
            self.port.give_back_tx(parts);
        }
    }
}
