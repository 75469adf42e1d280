//! The few socket calls the standard library and socket2 do not offer: `recvmmsg` into a ring
//! of buffers, UDP GSO (`UDP_SEGMENT`) and GRO, path-MTU discovery, and `poll` for blocking receive.
//!
//! Hand-rolled on `libc` because these are the hot path (one `recvmmsg` per poll, one GSO send
//! per batch) and the crates in the field either lack them (socket2) or allocate per call.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};

/// Datagrams read per `recvmmsg`.
pub const RECV_BATCH: usize = 32;
/// `recvmmsg` calls in a row that fill every buffer (a backlog of this many times
/// [`RECV_BATCH`] datagrams, read) before UDP_GRO is turned on.
pub const GRO_AFTER_FULL_BATCHES: u32 = 4;
/// Largest UDP payload (each receive buffer holds one).
pub const MAX_DATAGRAM: usize = 65_536;

/// Buffers for `recvmmsg`: `RECV_BATCH` datagrams of up to `MAX_DATAGRAM` bytes.
///
/// Adaptive: while datagrams arrive one at a time (a ping-pong, a low rate) it reads with one
/// `recvfrom`, the cheapest empty poll; once a read finds more than one datagram waiting it
/// switches to `recvmmsg` (32 per call) until the queue runs dry again.
///
/// UDP GRO is adaptive too, when allowed: off at first, because reading with it takes
/// `recvmsg` (its control message), which costs about 100 ns more than `recvfrom` per call on
/// a KVM guest, empty or not. Once [`GRO_AFTER_FULL_BATCHES`] reads in a row filled every
/// buffer, [`gro_wanted`](Self::gro_wanted) says so and the driver turns it on for good: a
/// socket that has fallen behind is read for throughput. It is never turned off: a datagram
/// coalesced just before would then be read without the size of its parts.
///
/// **Invariant.** The kernel writes through pointers that `new` stores once: each header in
/// `bufs.hdrs` points at `bufs.iov`, `bufs.addrs` and `bufs.ctrl`, and each iovec at its slice of
/// `bufs.storage`. All of these live in heap allocations that the ring owns privately and never
/// moves, replaces or resizes (`bufs` is a `Box` no method gives away, `storage` a boxed slice),
/// so moving a `RecvRing` moves only the owning pointer and every stored pointer stays valid.
pub(crate) struct RecvRing {
    bufs: Box<Buffers>,
    /// UDP_GRO is on: read with `recvmsg` (control messages) rather than `recvfrom`.
    gro: bool,
    /// UDP_GRO may be turned on (asked for, and the kernel has it) and is not yet.
    gro_allowed: bool,
    /// `recvmmsg` calls in a row that filled every buffer.
    full_batches: u32,
    /// Use `recvmmsg` (the last read found a backlog).
    batch: bool,
    /// Datagrams received by the last `recv`.
    count: usize,
}

/// The ring's arrays, in one heap allocation that never moves (see the invariant of
/// [`RecvRing`]); the kernel writes `addrs`, `hdrs`, `ctrl` and `storage`.
struct Buffers {
    /// Buffer `i` starts at `i * MAX_DATAGRAM` (8-byte aligned since the slice is of u64).
    storage: Box<[u64]>,
    addrs: [libc::sockaddr_in; RECV_BATCH],
    iov: [libc::iovec; RECV_BATCH],
    hdrs: [libc::mmsghdr; RECV_BATCH],
    /// Control-message space per datagram (the UDP_GRO segment size).
    ctrl: [[u64; 8]; RECV_BATCH],
    /// Bytes in each buffer after the last receive.
    lens: [usize; RECV_BATCH],
    /// Segment size of each buffer: with UDP_GRO one buffer may hold several datagrams of this
    /// size (the last may be shorter); otherwise its whole length.
    segs: [usize; RECV_BATCH],
}

// SAFETY: the raw pointers (in the iovecs and message headers) point only into heap
// allocations this ring owns privately and never moves (the invariant above); nothing ties them
// to a thread, and the kernel writes through them only during a receive call made with
// `&mut self`. So a ring may move to another thread with its owner (a subscriber handed to a
// Python or C thread). Not `Sync`: every use takes `&mut self`.
unsafe impl Send for RecvRing {}

impl std::fmt::Debug for RecvRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing")
            .field("count", &self.count)
            .finish()
    }
}

impl RecvRing {
    /// A ring whose message headers point into its own heap buffers (see the type's invariant).
    /// `gro_allowed`: UDP_GRO may be turned on once a backlog lasts (it is off on the socket
    /// now).
    pub(crate) fn new(gro_allowed: bool) -> Self {
        // SAFETY: sockaddr_in is plain old data; all zeroes is a valid value.
        let addrs = unsafe { zeroed() };
        // SAFETY: iovec is plain old data (a null pointer and a zero length).
        let iov = unsafe { zeroed() };
        // SAFETY: mmsghdr is plain old data (null pointers and zero lengths).
        let hdrs = unsafe { zeroed() };
        let mut bufs = Box::new(Buffers {
            storage: vec![0u64; RECV_BATCH * MAX_DATAGRAM / 8].into_boxed_slice(),
            addrs,
            iov,
            hdrs,
            ctrl: [[0; 8]; RECV_BATCH],
            lens: [0; RECV_BATCH],
            segs: [0; RECV_BATCH],
        });
        // Every pointer below is taken from `b`, i.e. from inside the boxed allocation, and
        // stays valid for as long as the box lives (the invariant of `RecvRing`).
        let b = &mut *bufs;
        let base = b.storage.as_mut_ptr().cast::<u8>();
        for i in 0..RECV_BATCH {
            // SAFETY: `storage` holds RECV_BATCH * MAX_DATAGRAM bytes, so the offset is inside.
            b.iov[i].iov_base = unsafe { base.add(i * MAX_DATAGRAM) }.cast();
            b.iov[i].iov_len = MAX_DATAGRAM;
            let iov: *mut libc::iovec = &mut b.iov[i];
            let name: *mut libc::sockaddr_in = &mut b.addrs[i];
            b.hdrs[i].msg_hdr.msg_iov = iov;
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name = name.cast();
            // Read by the kernel only while `msg_controllen` is not 0 (`reset`, with GRO on).
            let ctrl: *mut [u64; 8] = &mut b.ctrl[i];
            b.hdrs[i].msg_hdr.msg_control = ctrl.cast();
        }
        RecvRing {
            bufs,
            gro: false,
            gro_allowed,
            full_batches: 0,
            batch: false,
            count: 0,
        }
    }

    /// Whether the driver should turn UDP_GRO on now ([`gro_on`](Self::gro_on) once the
    /// socket took it, [`gro_refused`](Self::gro_refused) if it did not).
    #[inline]
    pub(crate) fn gro_wanted(&self) -> bool {
        self.gro_allowed && self.full_batches >= GRO_AFTER_FULL_BATCHES
    }

    /// The socket has UDP_GRO on from now: read its control messages.
    pub(crate) fn gro_on(&mut self) {
        self.gro = true;
        self.gro_allowed = false;
    }

    /// The socket refused UDP_GRO: do not ask again.
    pub(crate) fn gro_refused(&mut self) {
        self.gro_allowed = false;
    }

    /// Whether UDP_GRO is on (the reads carry its control message).
    pub(crate) fn gro(&self) -> bool {
        self.gro
    }

    /// Datagrams received by the last `recv`.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The segment size of buffer `i`: the datagrams it holds are this long (the last may be
    /// shorter).
    pub(crate) fn segment(&self, i: usize) -> usize {
        self.bufs.segs[i]
    }

    /// Resets the in/out lengths of header `i` before a receive.
    fn reset(&mut self, i: usize) {
        let h = &mut self.bufs.hdrs[i].msg_hdr;
        h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if self.gro {
            h.msg_controllen = size_of::<[u64; 8]>() as _;
        }
    }

    /// Reads the UDP_GRO segment size of buffer `i` from its control messages.
    fn read_segment(&mut self, i: usize) {
        let len = self.bufs.lens[i];
        self.bufs.segs[i] = len.max(1);
        if !self.gro {
            return;
        }
        let h: *const libc::msghdr = &self.bufs.hdrs[i].msg_hdr;
        // SAFETY: `h` is a header the kernel just filled: its control pointer is `bufs.ctrl[i]`
        // (set by `new`, valid by the type's invariant) and its control length the part of it
        // the kernel wrote; the CMSG_* functions stay within that length.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let seg = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    if seg > 0 {
                        self.bufs.segs[i] = seg as usize;
                    }
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
    }

    /// Datagram `i` of the last receive and its source.
    pub(crate) fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        let bytes = as_bytes(&self.bufs.storage);
        let start = i * MAX_DATAGRAM;
        let a = &self.bufs.addrs[i];
        let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port)));
        (&bytes[start..start + self.bufs.lens[i]], addr)
    }

    /// Reads the datagrams waiting, up to `RECV_BATCH`, without blocking. Returns how many
    /// (0: none waiting).
    pub(crate) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        if !self.batch {
            let n = if self.gro {
                self.reset(0);
                // SAFETY: header 0 points at iovec 0 (buffer 0 of `storage`), `addrs[0]` and
                // `ctrl[0]`, all in the ring's unmoving heap buffers (the type's invariant), with
                // the lengths it states.
                unsafe { libc::recvmsg(fd, &mut self.bufs.hdrs[0].msg_hdr, libc::MSG_DONTWAIT) }
            } else {
                let b = &mut *self.bufs;
                let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
                // SAFETY: buffer 0 is the first MAX_DATAGRAM bytes of `storage`; `addrs[0]` is a
                // live sockaddr_in of the stated length. Both pointers are fresh borrows, valid
                // for the call.
                unsafe {
                    libc::recvfrom(
                        fd,
                        b.storage.as_mut_ptr().cast(),
                        MAX_DATAGRAM,
                        libc::MSG_DONTWAIT,
                        (&mut b.addrs[0] as *mut libc::sockaddr_in).cast(),
                        &mut len,
                    )
                }
            };
            if n < 0 {
                return Self::empty_or_error();
            }
            self.bufs.lens[0] = n as usize;
            self.read_segment(0);
            self.count = 1;
            // Another datagram behind this one? Read the next ones in batches.
            self.batch = true;
            return Ok(1);
        }
        for i in 0..RECV_BATCH {
            self.reset(i);
        }
        // SAFETY: `new` pointed the headers at the iovecs, addresses and control buffers of
        // `bufs`, and the iovecs at `storage`, with the lengths they state; those allocations
        // have not moved since (the type's invariant).
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.bufs.hdrs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.batch = false;
            return Self::empty_or_error();
        }
        let n = n as usize;
        for i in 0..n {
            // A datagram longer than MAX_DATAGRAM cannot exist (UDP's own limit).
            self.bufs.lens[i] = (self.bufs.hdrs[i].msg_len as usize).min(MAX_DATAGRAM);
            self.read_segment(i);
        }
        // A short batch means the queue is drained: back to single reads.
        self.batch = n == RECV_BATCH;
        self.full_batches = if self.batch {
            self.full_batches.saturating_add(1)
        } else {
            0
        };
        self.count = n;
        Ok(n)
    }

    /// The result of a failed receive: nothing waiting is `Ok(0)`. Matched on the raw errno
    /// rather than `ErrorKind` (whose mapping is a call on every empty poll).
    fn empty_or_error() -> io::Result<usize> {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // EWOULDBLOCK is EAGAIN on Linux.
            Some(libc::EAGAIN | libc::EINTR) => Ok(0),
            // An ICMP error for an earlier send on a connected socket: not a receive error.
            Some(libc::ECONNREFUSED) => Ok(0),
            _ => Err(e),
        }
    }
}

fn as_bytes(v: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and any byte pattern is a valid u8; the length is exact.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 8) }
}

const UDP_GRO: libc::c_int = 104;

/// Sets `UDP_GRO`: the kernel may hand over several datagrams of one sender in one buffer (on
/// loopback, a whole GSO send without splitting it), with their size in a control message.
pub fn set_udp_gro(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1)
}

/// Whether this kernel takes `UDP_GRO`, asked of a socket of its own: the socket a subscriber
/// reads must not have it on before its reads carry the control message.
pub fn probe_udp_gro() -> io::Result<()> {
    // Not bound: no port taken, and no address needed (a namespace's loopback may be down).
    let probe = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    set_udp_gro(&probe)
}

/// Sets `UDP_SEGMENT` (generic segmentation offload) on the socket: a send of more than
/// `segment_len` bytes leaves as several datagrams of `segment_len` (the last may be shorter).
pub fn set_udp_segment(sock: &impl AsRawFd, segment_len: usize) -> io::Result<()> {
    const UDP_SEGMENT: libc::c_int = 103;
    let v: libc::c_int = segment_len as libc::c_int;
    setsockopt_int(sock.as_raw_fd(), libc::SOL_UDP, UDP_SEGMENT, v)
}

/// Sets IP_MTU_DISCOVER to "do": datagrams larger than the path MTU fail with EMSGSIZE instead
/// of being fragmented by IP.
pub fn set_pmtu_do(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

/// `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` (beyond the sysctl maximum; needs CAP_NET_ADMIN).
pub fn set_buffer_force(sock: &impl AsRawFd, receive: bool, bytes: usize) -> io::Result<()> {
    let opt = if receive {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_SNDBUFFORCE
    };
    setsockopt_int(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        opt,
        bytes.min(i32::MAX as usize) as libc::c_int,
    )
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the stated size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passed (`poll(2)`).
pub fn wait_readable(fds: &[RawFd], timeout_ms: i32) {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a live array of `pfds.len()` pollfd structs.
    unsafe {
        libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms);
    }
}

/// Waits until `fd` is writable or `timeout_ms` passed.
pub fn wait_writable(fd: RawFd, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd.
    unsafe {
        libc::poll(&mut p, 1, timeout_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    /// A ring that has been moved twice since it was made: out of the function that built it
    /// and through a `Vec`, so nothing of it stays where `new` put it.
    fn moved_ring(gro: bool) -> RecvRing {
        let mut ring = RecvRing::new(gro);
        if gro {
            ring.gro_on();
        }
        let mut elsewhere = vec![ring];
        elsewhere.pop().unwrap()
    }

    fn loopback() -> UdpSocket {
        UdpSocket::bind("127.0.0.1:0").unwrap()
    }

    /// A received datagram: its bytes, its source and the segment size the ring reported.
    type Received = (Vec<u8>, SocketAddr, usize);

    /// Receives until `want` datagrams came (or 5 s passed); returns them and the size of every
    /// non-empty receive.
    fn receive(ring: &mut RecvRing, sock: &UdpSocket, want: usize) -> (Vec<Received>, Vec<usize>) {
        let (mut got, mut reads) = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < want && Instant::now() < deadline {
            let n = ring.recv(sock.as_raw_fd()).unwrap();
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            reads.push(n);
            for i in 0..n {
                let (bytes, src) = ring.get(i);
                got.push((bytes.to_vec(), src, ring.segment(i)));
            }
        }
        (got, reads)
    }

    #[test]
    fn a_moved_ring_still_receives_a_batch() {
        let mut ring = moved_ring(false);
        let rx = loopback();
        let (a, b) = (loopback(), loopback());
        let sent: Vec<(Vec<u8>, &UdpSocket)> = (0..6u8)
            .map(|i| {
                (
                    vec![i; 100 + usize::from(i) * 300],
                    if i % 2 == 0 { &a } else { &b },
                )
            })
            .collect();
        for (bytes, from) in &sent {
            from.send_to(bytes, rx.local_addr().unwrap()).unwrap();
        }
        let (got, reads) = receive(&mut ring, &rx, sent.len());
        assert_eq!(got.len(), sent.len());
        // The first read takes one datagram (recvfrom); finding more, the ring reads the rest
        // with recvmmsg.
        assert_eq!(reads[0], 1);
        assert!(reads.iter().any(|&n| n > 1), "no batch read: {reads:?}");
        for ((bytes, src, seg), (want, from)) in got.iter().zip(&sent) {
            assert_eq!(bytes, want);
            assert_eq!(*src, from.local_addr().unwrap());
            assert_eq!(*seg, want.len());
        }
    }

    #[test]
    fn a_moved_gro_ring_reads_segment_sizes_through_its_control_buffers() {
        let rx = loopback();
        let tx = loopback();
        if set_udp_gro(&rx).is_err() || set_udp_segment(&tx, 100).is_err() {
            peregrine_testkit::skip(
                "the kernel refused UDP_GRO or UDP_SEGMENT",
                "Linux 5.0 or later has both",
            );
            return;
        }
        let mut ring = moved_ring(true);
        let plain = loopback();
        // A GSO send of 250 bytes in segments of 100 reaches a GRO socket on loopback as one
        // buffer, with the segment size in a control message.
        let sent: Vec<(Vec<u8>, &UdpSocket, usize)> = vec![
            (vec![1; 250], &tx, 100),
            (vec![2; 40], &plain, 40),
            (vec![3; 250], &tx, 100),
        ];
        for (bytes, from, _) in &sent {
            from.send_to(bytes, rx.local_addr().unwrap()).unwrap();
        }
        let (got, reads) = receive(&mut ring, &rx, sent.len());
        assert_eq!(got.len(), sent.len(), "reads {reads:?}");
        assert_eq!(reads[0], 1);
        assert!(reads.iter().any(|&n| n > 1), "no batch read: {reads:?}");
        for ((bytes, src, seg), (want, from, want_seg)) in got.iter().zip(&sent) {
            assert_eq!(bytes, want);
            assert_eq!(*src, from.local_addr().unwrap());
            assert_eq!(seg, want_seg);
        }
    }

    #[test]
    fn gro_is_wanted_after_a_lasting_backlog_and_then_reads_coalesced_sends() {
        let rx = loopback();
        let tx = loopback();
        if probe_udp_gro().is_err() || set_udp_segment(&tx, 100).is_err() {
            peregrine_testkit::skip(
                "the kernel refused UDP_GRO or UDP_SEGMENT",
                "Linux 5.0 or later has both",
            );
            return;
        }
        let mut ring = moved_ring(false);
        ring.gro_allowed = true;
        // One datagram at a time never asks for GRO.
        let plain = loopback();
        for i in 0..200u8 {
            plain.send_to(&[i; 40], rx.local_addr().unwrap()).unwrap();
            let (got, _) = receive(&mut ring, &rx, 1);
            assert_eq!(got.len(), 1);
            assert!(!ring.gro_wanted(), "after datagram {i} read alone");
        }
        // A backlog: read in full batches; after GRO_AFTER_FULL_BATCHES of them, GRO is
        // wanted. Everything arrives whole and in order meanwhile.
        let backlog = 1 + RECV_BATCH * GRO_AFTER_FULL_BATCHES as usize + 10;
        // Room for the whole backlog, and reads from single mode (an empty read ends a batch).
        setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 20).unwrap();
        assert_eq!(ring.recv(rx.as_raw_fd()).unwrap(), 0);
        for i in 0..backlog {
            plain
                .send_to(&(i as u32).to_le_bytes(), rx.local_addr().unwrap())
                .unwrap();
        }
        let mut got = Vec::new();
        let mut wanted_at = None;
        while got.len() < backlog {
            let (more, _) = receive(&mut ring, &rx, 1);
            assert!(!more.is_empty(), "the backlog stopped at {}", got.len());
            got.extend(more.into_iter().map(|(b, _, seg)| (b, seg)));
            if ring.gro_wanted() && wanted_at.is_none() {
                wanted_at = Some(got.len());
            }
        }
        assert_eq!(
            wanted_at,
            Some(1 + RECV_BATCH * GRO_AFTER_FULL_BATCHES as usize),
            "wanted after the first datagram and four full batches"
        );
        let want: Vec<(Vec<u8>, usize)> = (0..backlog as u32)
            .map(|i| (i.to_le_bytes().to_vec(), 4))
            .collect();
        assert_eq!(got, want);
        // The driver turns it on: a GSO send now arrives in one buffer, cut by segment size.
        set_udp_gro(&rx).unwrap();
        ring.gro_on();
        assert!(ring.gro() && !ring.gro_wanted());
        tx.send_to(&[9; 250], rx.local_addr().unwrap()).unwrap();
        let (got, _) = receive(&mut ring, &rx, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].0.len(), got[0].2),
            (250, 100),
            "one buffer of 100-byte parts"
        );
    }

    #[test]
    fn a_refused_gro_is_not_wanted_again() {
        let rx = loopback();
        let mut ring = RecvRing::new(true);
        ring.full_batches = GRO_AFTER_FULL_BATCHES;
        assert!(ring.gro_wanted());
        ring.gro_refused();
        assert!(!ring.gro_wanted() && !ring.gro());
        // Still reads, without the control message.
        let tx = loopback();
        tx.send_to(&[5; 30], rx.local_addr().unwrap()).unwrap();
        let (got, _) = receive(&mut ring, &rx, 1);
        assert_eq!((got[0].0.len(), got[0].2), (30, 30));
    }
}
