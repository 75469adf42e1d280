//! The kernel's neighbour table (IPv4 address → Ethernet address) read over rtnetlink: the
//! xdp driver addresses its frames itself, so it asks the kernel which MAC a peer has. The
//! request and the parsing are sans-I/O ([`dump_request`], [`parse`]); [`NeighSocket`] does
//! the socket part.

use std::io;
use std::net::Ipv4Addr;

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NLMSG_HDR_LEN: usize = 16;
const NDMSG_LEN: usize = 12;
/// Entry states whose address can be used: REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT
/// (a STALE entry's address is still the peer's; the kernel re-checks it on its own traffic).
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// One usable entry of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub addr: Ipv4Addr,
    pub mac: [u8; 6],
}

/// The RTM_GETNEIGH dump request for IPv4 entries, sequence number `seq`.
pub fn dump_request(seq: u32) -> [u8; NLMSG_HDR_LEN + NDMSG_LEN] {
    let mut b = [0u8; NLMSG_HDR_LEN + NDMSG_LEN];
    b[0..4].copy_from_slice(&((NLMSG_HDR_LEN + NDMSG_LEN) as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    b[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    b[16] = libc::AF_INET as u8;
    b
}

/// What one received buffer of the dump held.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More messages follow.
    More,
    /// The dump ended.
    Done,
}

/// Reads the messages of one received buffer, appending usable IPv4 entries to `out`.
/// Malformed messages end the read with an error; nothing in `buf` can make it panic.
pub fn parse(buf: &[u8], out: &mut Vec<Neighbour>) -> io::Result<Parsed> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink: {what}"));
    let u16_at = |b: &[u8], o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let mut off = 0;
    while off + NLMSG_HDR_LEN <= buf.len() {
        let h = &buf[off..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len < NLMSG_HDR_LEN || len > h.len() {
            return Err(bad("a message length beyond the buffer"));
        }
        let kind = u16_at(h, 4);
        let body = &h[NLMSG_HDR_LEN..len];
        match kind {
            NLMSG_DONE => return Ok(Parsed::Done),
            NLMSG_ERROR => {
                let errno = body
                    .get(..4)
                    .map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
                    .ok_or_else(|| bad("a short error message"))?;
                return Err(io::Error::from_raw_os_error(-errno));
            }
            RTM_NEWNEIGH if body.len() >= NDMSG_LEN => {
                let family = body[0];
                let ifindex = i32::from_ne_bytes([body[4], body[5], body[6], body[7]]) as u32;
                let state = u16_at(body, 8);
                let (mut dst, mut mac) = (None, None);
                let mut a = NDMSG_LEN;
                while a + 4 <= body.len() {
                    let alen = u16_at(body, a) as usize;
                    let atype = u16_at(body, a + 2) & 0x3fff;
                    if alen < 4 || a + alen > body.len() {
                        return Err(bad("an attribute length beyond its message"));
                    }
                    let data = &body[a + 4..a + alen];
                    match (atype, data.len()) {
                        (NDA_DST, 4) => {
                            dst = Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]))
                        }
                        (NDA_LLADDR, 6) => {
                            mac = Some([data[0], data[1], data[2], data[3], data[4], data[5]])
                        }
                        _ => {}
                    }
                    a += alen.next_multiple_of(4);
                }
                if let (true, true, Some(addr), Some(mac)) = (
                    family == libc::AF_INET as u8,
                    state & NUD_USABLE != 0,
                    dst,
                    mac,
                ) {
                    out.push(Neighbour { ifindex, addr, mac });
                }
            }
            _ => {}
        }
        off += len.next_multiple_of(4);
    }
    Ok(Parsed::More)
}

/// An rtnetlink socket for reading the neighbour table. Opened where the interface is: the
/// socket belongs to the network namespace of the thread that opened it, wherever it is used.
#[derive(Debug)]
pub struct NeighSocket {
    fd: std::os::fd::OwnedFd,
    seq: u32,
}

impl NeighSocket {
    pub fn open() -> io::Result<NeighSocket> {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: plain socket(2) call; a non-negative result is a new descriptor we own.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(NeighSocket { fd, seq: 0 })
    }

    /// The MAC of `addr` on interface `ifindex`, if the table has a usable entry.
    pub fn lookup(&mut self, ifindex: u32, addr: Ipv4Addr) -> io::Result<Option<[u8; 6]>> {
        Ok(self
            .dump()?
            .iter()
            .find(|n| n.ifindex == ifindex && n.addr == addr)
            .map(|n| n.mac))
    }

    /// Every usable IPv4 entry of the table.
    pub fn dump(&mut self) -> io::Result<Vec<Neighbour>> {
        use std::os::fd::AsRawFd;
        self.seq = self.seq.wrapping_add(1);
        // The kernel answers a request sent to it (pid 0) without binding first.
        let req = dump_request(self.seq);
        // SAFETY: `req` is a live buffer of the length passed.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: `buf` is a live, writable buffer of the length passed.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 || parse(&buf[..n as usize], &mut out)? == Parsed::Done {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RTM_NEWNEIGH message as the kernel sends it (`ip neigh` reads the same).
    fn newneigh(ifindex: i32, state: u16, dst: [u8; 4], mac: Option<[u8; 6]>) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDR_LEN];
        m[4..6].copy_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        let mut nd = [0u8; NDMSG_LEN];
        nd[0] = libc::AF_INET as u8;
        nd[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        nd[8..10].copy_from_slice(&state.to_ne_bytes());
        m.extend_from_slice(&nd);
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&NDA_DST.to_ne_bytes());
        m.extend_from_slice(&dst);
        if let Some(mac) = mac {
            m.extend_from_slice(&10u16.to_ne_bytes());
            m.extend_from_slice(&NDA_LLADDR.to_ne_bytes());
            m.extend_from_slice(&mac);
            m.extend_from_slice(&[0, 0]); // padding to 4
        }
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn usable_entries_are_read_and_the_rest_skipped() {
        let mac = [2, 0, 0, 0, 0, 7];
        let mut buf = newneigh(3, 0x04, [10, 0, 0, 2], Some(mac)); // STALE: usable
        buf.extend(newneigh(3, 0x01, [10, 0, 0, 3], None)); // INCOMPLETE
        buf.extend(newneigh(3, 0x20, [10, 0, 0, 4], Some(mac))); // FAILED
        let mut out = Vec::new();
        assert_eq!(parse(&buf, &mut out).unwrap(), Parsed::More);
        assert_eq!(
            out,
            [Neighbour {
                ifindex: 3,
                addr: Ipv4Addr::new(10, 0, 0, 2),
                mac
            }]
        );
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert_eq!(parse(&done, &mut out).unwrap(), Parsed::Done);
    }

    #[test]
    fn a_request_is_a_dump_of_ipv4_neighbours() {
        let r = dump_request(9);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 28);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETNEIGH);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), 0x301);
        assert_eq!(r[16], libc::AF_INET as u8);
    }

    #[test]
    fn malformed_lengths_are_errors_not_panics() {
        let good = newneigh(1, 0x02, [1, 2, 3, 4], Some([1; 6]));
        for cut in 0..good.len() {
            let mut out = Vec::new();
            let _ = parse(&good[..cut], &mut out);
        }
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse(&bad, &mut Vec::new()).is_err());
        let mut bad_attr = good;
        bad_attr[NLMSG_HDR_LEN + NDMSG_LEN..][..2].copy_from_slice(&200u16.to_ne_bytes());
        assert!(parse(&bad_attr, &mut Vec::new()).is_err());
        // Every byte value at every position: no panic.
        let base = newneigh(1, 0x02, [1, 2, 3, 4], Some([1; 6]));
        for i in 0..base.len() {
            for v in [0u8, 1, 3, 4, 0x7f, 0xff] {
                let mut m = base.clone();
                m[i] = v;
                let _ = parse(&m, &mut Vec::new());
            }
        }
    }

    #[test]
    fn the_kernel_answers_a_dump() {
        // Any host has a neighbour table, possibly empty: the dump must end cleanly.
        let mut s = NeighSocket::open().expect("an rtnetlink socket");
        s.dump().expect("an rtnetlink neighbour dump");
        s.dump().expect("a second dump on the same socket");
    }
}
