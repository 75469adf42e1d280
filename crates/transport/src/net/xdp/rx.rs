//! [`XdpRx`]: a subscriber's receive side on an [`XdpPort`]: frames from the receive ring,
//! checked, their payloads handed out in place, and the frames given back to the kernel on
//! the next receive.

use super::port::{RxParts, XdpPort, FRAME_SIZE};
use super::{XdpConfig, XdpError};
use peregrine_wire::packet;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::Arc;

/// Frames read from the receive ring per [`XdpRx::recv`].
const BATCH: u32 = 32;

/// One datagram of the last receive: where its payload is in the UMEM, and its source.
#[derive(Debug, Clone, Copy)]
struct Got {
    offset: usize,
    len: usize,
    src: SocketAddr,
}

/// A subscriber's receive side (see the module's documentation).
pub struct XdpRx {
    port: Arc<XdpPort>,
    parts: Option<RxParts>,
    /// The destinations steered here (removed from the program's map on drop).
    dsts: Vec<SocketAddrV4>,
    /// Frames handed out by the last receive, given back to the kernel on the next.
    held: Vec<u64>,
    got: Vec<Got>,
    /// Frames whose headers failed the checks, or addressed to a destination not ours.
    pub rejected: u64,
    /// Frames received through the ring.
    pub received: u64,
    /// Frames whose UDP checksum a sending kernel left for a NIC to finish and none did (a
    /// local virtual device such as a veth pair): accepted, as the kernel accepts them.
    pub offload_checksums: u64,
}

// SAFETY: the ring pointers inside `parts` are used only through `&mut self`; the UMEM frames
// it reads are the receive half's, which no other object touches (see `XdpPort`).
unsafe impl Send for XdpRx {}

impl std::fmt::Debug for XdpRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpRx")
            .field("port", &self.port)
            .field("dsts", &self.dsts)
            .field("received", &self.received)
            .field("rejected", &self.rejected)
            .field("offload_checksums", &self.offload_checksums)
            .finish()
    }
}

impl XdpRx {
    /// Takes the receive half of `cfg`'s port and steers packets addressed to each of `dsts`
    /// there.
    pub fn open(cfg: &XdpConfig, dsts: &[SocketAddrV4]) -> Result<XdpRx, XdpError> {
        let port = XdpPort::get(cfg)?;
        let parts = port.take_rx().ok_or_else(|| XdpError::HalfInUse {
            name: cfg.iface.clone(),
            half: "subscriber",
        })?;
        let mut rx = XdpRx {
            port,
            parts: Some(parts),
            dsts: Vec::new(),
            held: Vec::with_capacity(BATCH as usize),
            got: Vec::with_capacity(BATCH as usize),
            rejected: 0,
            received: 0,
            offload_checksums: 0,
        };
        for &d in dsts {
            rx.port.add_stream(d)?;
            rx.dsts.push(d);
        }
        Ok(rx)
    }

    /// Frames the receive ring holds.
    pub fn ring_frames(&self) -> u32 {
        self.port.rx_frames
    }

    pub fn port(&self) -> &XdpPort {
        &self.port
    }

    /// The descriptor that turns readable when the receive ring has frames (for a blocking
    /// wait).
    pub fn fd(&self) -> RawFd {
        self.parts.as_ref().map_or(-1, |p| p.rx.as_raw_fd())
    }

    /// Gives the frames of the last receive back to the kernel, then reads up to 32 new ones
    /// without blocking. Returns how many datagrams passed the checks ([`get`](Self::get)
    /// reads them).
    pub fn recv(&mut self) -> usize {
        let Some(parts) = self.parts.as_mut() else {
            return 0;
        };
        self.got.clear();
        if !self.held.is_empty() {
            let mut w = parts.fill.fill(self.held.len() as u32);
            // The fill ring has room for every receive frame, so all of them fit.
            let n = w.insert(self.held.iter().copied());
            w.commit();
            self.held.drain(..n as usize);
        }
        let base = self.port.base();
        let mut r = parts.rx.receive(BATCH);
        while let Some(desc) = r.read() {
            self.received += 1;
            let frame = desc.addr - desc.addr % u64::from(FRAME_SIZE);
            self.held.push(frame);
            let (addr, len) = (desc.addr as usize, desc.len as usize);
            if addr + len > (self.port.rx_frames * FRAME_SIZE) as usize {
                // Not a receive frame: the kernel never gives one, so a corrupt descriptor.
                self.rejected += 1;
                continue;
            }
            // SAFETY: the kernel gave this frame to us through the receive ring (its contents
            // are written before the ring's producer index, which `read` observed with acquire
            // order) and it stays ours until `held` returns it to the fill ring on the next
            // call; it lies inside the UMEM's receive half (checked above).
            let bytes = unsafe { std::slice::from_raw_parts(base.add(addr), len) };
            match packet::parse_allowing_offload(bytes) {
                Ok((p, partial)) if self.dsts.contains(&p.dst) => {
                    self.offload_checksums += u64::from(partial);
                    let offset = addr + (p.payload.as_ptr() as usize - bytes.as_ptr() as usize);
                    self.got.push(Got {
                        offset,
                        len: p.payload.len(),
                        src: SocketAddr::V4(p.src),
                    });
                }
                _ => self.rejected += 1,
            }
        }
        r.release();
        drop(r);
        if self.got.is_empty() && parts.fill.needs_wakeup() {
            parts.fill.wake();
        }
        self.got.len()
    }

    /// Datagrams of the last receive.
    pub fn count(&self) -> usize {
        self.got.len()
    }

    /// Datagram `i` of the last receive and its source.
    pub fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        let g = self.got[i];
        // SAFETY: `g` was checked to lie inside a frame of the last receive, which stays ours
        // (in `held`) until the next `recv` takes `&mut self`.
        let bytes = unsafe { std::slice::from_raw_parts(self.port.base().add(g.offset), g.len) };
        (bytes, g.src)
    }
}

impl Drop for XdpRx {
    fn drop(&mut self) {
        for &d in &self.dsts {
            self.port.remove_stream(d);
        }
        if let Some(mut parts) = self.parts.take() {
            let mut w = parts.fill.fill(self.held.len() as u32);
            w.insert(self.held.drain(..));
            w.commit();
            drop(w);
            self.port.give_back_rx(parts);
        }
    }
}
