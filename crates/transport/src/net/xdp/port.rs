//! [`XdpPort`]: one interface queue opened for AF_XDP by this process: the steering program
//! attached (as a BPF link, so it goes with the process), its two maps, the socket bound to
//! the queue, and the UMEM its frames live in. A process's xdp publishers and subscribers on
//! the same interface share one port (the kernel binds one socket per queue): the receive
//! half ([`super::XdpRx`]) and the send half ([`super::XdpTx`]) are taken by one each.

use super::bpf::{self, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use super::iface::{self, Interface};
use super::program::{self, STREAM_KEY_LEN};
use super::{XdpConfig, XdpError, XdpMode};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddrV4;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};
use xdpilone::{
    CompletionQueue, FillQueue, IfInfo, RingRx, RingTx, Socket, SocketConfig, Umem, UmemConfig,
};

/// Bytes of one UMEM frame: a whole Ethernet frame of the largest datagram fits, and two
/// frames share a page.
pub const FRAME_SIZE: u32 = 2048;

/// The ports this process has open, by network namespace, interface index and queue (a
/// thread may have moved into another namespace, where indexes mean other interfaces).
static PORTS: Mutex<Vec<(PortKey, Weak<XdpPort>)>> = Mutex::new(Vec::new());

/// Network namespace (its file's inode), interface index, queue.
type PortKey = (u64, u32, u32);

/// This thread's network namespace (the inode of its namespace file).
fn netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

/// The receive half: the fill ring (frames handed to the kernel) and the receive ring.
pub(super) struct RxParts {
    pub(super) fill: FillQueue,
    pub(super) rx: RingRx,
}

/// The send half: the send ring and the completion ring (frames the kernel is done with).
pub(super) struct TxParts {
    pub(super) tx: RingTx,
    pub(super) completion: CompletionQueue,
}

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attached {
    /// In the driver's own hook.
    Native,
    /// In the kernel's generic hook (after a socket buffer is built: slower, works on any
    /// interface).
    Generic,
}

/// One interface queue opened for AF_XDP (see the module's documentation).
pub struct XdpPort {
    pub(super) iface: Interface,
    pub(super) queue: u32,
    pub(super) attached: Attached,
    /// Whether the socket bound in zero-copy mode (the driver moves frames into the UMEM
    /// itself) rather than copy mode (the kernel copies each frame).
    pub(super) zero_copy: bool,
    /// Frames of the receive half: `0..rx_frames`; the send half has the rest.
    pub(super) rx_frames: u32,
    pub(super) frames: u32,
    streams: OwnedFd,
    xsks: OwnedFd,
    _link: OwnedFd,
    _prog: OwnedFd,
    halves: Mutex<(Option<RxParts>, Option<TxParts>)>,
    /// Keys of `streams` and how many subscribers asked for each.
    keys: Mutex<HashMap<[u8; STREAM_KEY_LEN], u32>>,
    _umem: Umem,
    /// A second descriptor of the AF_XDP socket, for its statistics.
    sock: OwnedFd,
    /// `area`'s first byte, taken from a unique borrow (frames are written through it).
    base: *mut u8,
    /// The frames' memory. Declared last: it outlives the rings and the socket that use it.
    _area: memmap2::MmapMut,
}

// SAFETY: the raw pointers inside (`Umem`'s area pointer, the rings' mappings) are only used
// through the halves, each taken by one owner (`&mut` access), and the UMEM frames are split
// between the halves (receive frames `0..rx_frames`, send frames after), so no two threads use
// the same frame or ring; `Umem` itself is not used after `open`.
unsafe impl Send for XdpPort {}
// SAFETY: see `Send`; the shared parts (`halves`, `keys`) are behind mutexes.
unsafe impl Sync for XdpPort {}

impl Drop for XdpPort {
    fn drop(&mut self) {
        // The socket map holds the socket: empty it now, so that the socket is released when
        // its descriptor closes below, not when the kernel frees the detached program later
        // (until then the queue would refuse a new socket).
        let _ = bpf::map_delete(&self.xsks, &self.queue.to_ne_bytes());
        // Frames the kernel could not hand to this socket, said once as it closes (the
        // protocol repaired those of a stream by NAK, but a tail under load is explained here).
        if let Ok(d) = self.drops() {
            if d.rx_dropped + d.rx_ring_full + d.rx_fill_ring_empty > 0 {
                tracing::warn!(
                    "xdp: {} queue {}: the kernel dropped {} frames for this socket, found its receive ring full {} times and its fill ring empty {} times; a larger xdp_frames, or a subscriber polling more often, avoids it",
                    self.iface.name,
                    self.queue,
                    d.rx_dropped,
                    d.rx_ring_full,
                    d.rx_fill_ring_empty
                );
            }
        }
    }
}

impl std::fmt::Debug for XdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpPort")
            .field("iface", &self.iface.name)
            .field("queue", &self.queue)
            .field("attached", &self.attached)
            .field("zero_copy", &self.zero_copy)
            .finish()
    }
}

/// `SOL_XDP`'s `XDP_OPTIONS` and its zero-copy flag, and `XDP_STATISTICS`
/// (`include/uapi/linux/if_xdp.h`).
const SOL_XDP: libc::c_int = 283;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// A value `getsockopt(SOL_XDP, ...)` fills in.
///
/// # Safety
/// Implementors are integers, or `repr(C)` structs of integers laid out as the kernel's
/// struct for the option: any bytes the kernel writes make a valid value.
unsafe trait XdpSockOpt: Default {}
// SAFETY: an integer; any bit pattern is valid.
unsafe impl XdpSockOpt for u32 {}
// SAFETY: `repr(C)`, six u64s, as `struct xdp_statistics`.
unsafe impl XdpSockOpt for XdpDrops {}

/// The bound socket's option `name` of level `SOL_XDP`.
fn xdp_sockopt<T: XdpSockOpt>(fd: std::os::fd::RawFd, name: libc::c_int) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live local of `len` bytes, and any bytes the kernel writes into it (at
    // most `len`) make a valid `T` (`XdpSockOpt`'s contract).
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, name, (&mut v as *mut T).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// What the kernel counted against an AF_XDP socket (`struct xdp_statistics`, Linux 5.9 and
/// later; earlier kernels fill the first three).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct XdpDrops {
    /// Frames the kernel dropped for this socket (`rx_dropped`).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Times a frame found the receive ring full: the reader fell behind (`rx_ring_full`).
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty (`rx_fill_ring_empty_descs`).
    pub rx_fill_ring_empty: u64,
    /// Times the kernel found the send ring empty when woken (`tx_ring_empty_descs`).
    pub tx_ring_empty: u64,
}

fn errno_is(e: &io::Error, codes: &[i32]) -> bool {
    e.raw_os_error().is_some_and(|c| codes.contains(&c))
}

fn not_permitted(e: &io::Error) -> bool {
    errno_is(e, &[libc::EPERM, libc::EACCES])
}

/// A failed system call as an error; a refused permission says so (root, capabilities).
fn sys_error(what: String, source: io::Error) -> XdpError {
    if not_permitted(&source) {
        XdpError::NotPermitted { what, source }
    } else {
        XdpError::Sys { what, source }
    }
}

impl XdpPort {
    /// This process's port on `cfg`'s interface and queue, opened on first use.
    pub fn get(cfg: &XdpConfig) -> Result<Arc<XdpPort>, XdpError> {
        let iface = Interface::find(&cfg.iface)
            .map_err(|e| XdpError::Sys {
                what: "cannot read the interfaces".into(),
                source: e,
            })?
            .ok_or_else(|| XdpError::NoInterface {
                name: cfg.iface.clone(),
                available: iface::names(),
            })?;
        let mut ports = PORTS.lock().unwrap_or_else(|p| p.into_inner());
        ports.retain(|(_, w)| w.strong_count() > 0);
        let key = (netns(), iface.index, cfg.queue);
        if let Some(p) = ports
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(p);
        }
        let port = Arc::new(Self::open(iface, cfg)?);
        ports.push((key, Arc::downgrade(&port)));
        Ok(port)
    }

    fn open(iface: Interface, cfg: &XdpConfig) -> Result<XdpPort, XdpError> {
        let name = iface.name.clone();
        let sys = |what: &str| {
            let what = format!("{what} on {name}");
            move |e: io::Error| sys_error(what, e)
        };
        let streams = bpf::map_create(bpf::MAP_HASH, STREAM_KEY_LEN as u32, 4, 256, "pgn_streams")
            .map_err(sys("cannot create the streams map"))?;
        let xsks = bpf::map_create(bpf::MAP_XSKMAP, 4, 4, (cfg.queue + 1).max(64), "pgn_xsks")
            .map_err(sys("cannot create the socket map"))?;
        let insns = program::steering(streams.as_raw_fd(), xsks.as_raw_fd());
        let prog = bpf::prog_load_xdp(&insns, "pgn_steer").map_err(|e| {
            if not_permitted(&e.source) {
                XdpError::NotPermitted {
                    what: "cannot load the steering program".into(),
                    source: e.source,
                }
            } else {
                XdpError::Refused {
                    log: e.log,
                    source: e.source,
                }
            }
        })?;
        let (link, attached) = Self::attach(&prog, &iface, cfg.mode)?;

        // The UMEM: anonymous, page-aligned memory.
        let frames = cfg.frames;
        let rx_frames = frames / 2;
        let tx_frames = frames - rx_frames;
        let bytes = frames as usize * FRAME_SIZE as usize;
        let mut area =
            memmap2::MmapMut::map_anon(bytes).map_err(|e| XdpError::Umem { bytes, source: e })?;
        let base = area.as_mut_ptr();
        let ptr = NonNull::new(std::ptr::slice_from_raw_parts_mut(base, bytes))
            .expect("a mapping is not null");
        let umem_cfg = UmemConfig {
            fill_size: rx_frames,
            complete_size: tx_frames,
            frame_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
        };
        // SAFETY: `area` is a page-aligned anonymous mapping of `bytes` bytes that lives in the
        // returned port, after (declared below) every ring and socket that uses it.
        let umem = unsafe { Umem::new(umem_cfg, ptr) }.map_err(|e| XdpError::Umem {
            bytes,
            source: io::Error::from_raw_os_error(e.get_raw()),
        })?;
        let errno = |what: &str| {
            let what = format!("{what} on {name}");
            move |e: xdpilone::Errno| sys_error(what, io::Error::from_raw_os_error(e.get_raw()))
        };
        let mut info = IfInfo::invalid();
        info.from_ifindex(iface.index)
            .map_err(errno("cannot name the interface"))?;
        info.set_queue(cfg.queue);
        let sock =
            Socket::with_shared(&info, &umem).map_err(errno("cannot create an AF_XDP socket"))?;
        let device = umem
            .fq_cq(&sock)
            .map_err(errno("cannot map the fill and completion rings"))?;
        // Neither XDP_COPY nor XDP_ZEROCOPY: the kernel binds zero-copy where the driver has
        // it and copy mode elsewhere; XDP_OPTIONS says which it chose.
        let user = umem
            .rx_tx(
                &sock,
                &SocketConfig {
                    rx_size: NonZeroU32::new(rx_frames),
                    tx_size: NonZeroU32::new(tx_frames),
                    bind_flags: SocketConfig::XDP_BIND_NEED_WAKEUP,
                },
            )
            .map_err(errno("cannot size the receive and send rings"))?;
        // A socket of this queue closed a moment ago (by this process: another process's
        // would have kept its program attached, refused above) frees the queue in a kernel
        // work item after the close returns: wait for it, briefly.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut bound = umem.bind(&user);
        while bound.as_ref().is_err_and(|e| e.get_raw() == libc::EBUSY)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
            bound = umem.bind(&user);
        }
        if let Err(e) = bound {
            let e = io::Error::from_raw_os_error(e.get_raw());
            return Err(if errno_is(&e, &[libc::EBUSY]) {
                XdpError::Busy {
                    name: name.clone(),
                    what: format!("queue {} has an AF_XDP socket already", cfg.queue),
                }
            } else if errno_is(&e, &[libc::EINVAL]) && cfg.queue > 0 {
                XdpError::Sys {
                    what: format!(
                        "cannot bind to queue {} of {name} (has it that many queues?)",
                        cfg.queue
                    ),
                    source: e,
                }
            } else {
                sys_error(format!("cannot bind the AF_XDP socket on {name}"), e)
            });
        }
        let sock_fd = {
            // SAFETY: `user` owns the socket's descriptor, open for this whole block.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(user.as_raw_fd()) };
            fd.try_clone_to_owned()
                .map_err(|e| sys_error("cannot duplicate the AF_XDP socket".into(), e))?
        };
        let zero_copy = xdp_sockopt::<u32>(user.as_raw_fd(), XDP_OPTIONS)
            .is_ok_and(|o| o & XDP_OPTIONS_ZEROCOPY != 0);
        let rx = user
            .map_rx()
            .map_err(errno("cannot map the receive ring"))?;
        let tx = user.map_tx().map_err(errno("cannot map the send ring"))?;
        let (mut fill, completion) = device.into_parts();
        // Every receive frame goes to the kernel at once.
        {
            let mut w = fill.fill(rx_frames);
            let n = w.insert((0..rx_frames).map(|i| u64::from(i) * u64::from(FRAME_SIZE)));
            w.commit();
            debug_assert_eq!(n, rx_frames);
        }
        bpf::map_update(
            &xsks,
            &cfg.queue.to_ne_bytes(),
            &(user.as_raw_fd() as u32).to_ne_bytes(),
        )
        .map_err(sys("cannot enter the socket in the socket map"))?;
        tracing::info!(
            "xdp: {name} queue {} in {} mode, {} ({} frames of {FRAME_SIZE} bytes)",
            cfg.queue,
            match attached {
                Attached::Native => "native",
                Attached::Generic => "generic",
            },
            if zero_copy { "zero-copy" } else { "copy" },
            frames
        );
        Ok(XdpPort {
            iface,
            queue: cfg.queue,
            attached,
            zero_copy,
            rx_frames,
            frames,
            streams,
            xsks,
            _link: link,
            _prog: prog,
            halves: Mutex::new((Some(RxParts { fill, rx }), Some(TxParts { tx, completion }))),
            keys: Mutex::new(HashMap::new()),
            _umem: umem,
            sock: sock_fd,
            base,
            _area: area,
        })
    }

    /// Attaches the program as `mode` asks: native, generic, or native with a fallback to
    /// generic said once.
    fn attach(
        prog: &OwnedFd,
        iface: &Interface,
        mode: XdpMode,
    ) -> Result<(OwnedFd, Attached), XdpError> {
        let name = &iface.name;
        let fail = |e: io::Error, how: &str| {
            if errno_is(&e, &[libc::EBUSY, libc::EEXIST]) {
                XdpError::Busy { name: name.clone(), what: "another XDP program is attached (another process using xdp= on it? `ip link show` names it)".into() }
            } else {
                sys_error(
                    format!("cannot attach the program to {name} in {how} mode"),
                    e,
                )
            }
        };
        if mode != XdpMode::Generic {
            match bpf::link_create_xdp(prog, iface.index, XDP_FLAGS_DRV_MODE) {
                Ok(l) => return Ok((l, Attached::Native)),
                Err(e) if mode == XdpMode::Native => {
                    return Err(if errno_is(&e, &[libc::EOPNOTSUPP, libc::EINVAL]) {
                        XdpError::NoNativeMode {
                            name: name.clone(),
                            source: e,
                        }
                    } else {
                        fail(e, "native")
                    })
                }
                Err(e) if errno_is(&e, &[libc::EOPNOTSUPP, libc::EINVAL]) => {
                    tracing::warn!("xdp: {name}'s driver has no native XDP ({e}): generic mode (xdp_mode=generic says so without this warning)");
                }
                Err(e) => return Err(fail(e, "native")),
            }
        }
        bpf::link_create_xdp(prog, iface.index, XDP_FLAGS_SKB_MODE)
            .map(|l| (l, Attached::Generic))
            .map_err(|e| fail(e, "generic"))
    }

    /// Steers packets addressed to `dst` to this port's socket (counted: several subscribers
    /// may ask for the same destination).
    pub(super) fn add_stream(&self, dst: SocketAddrV4) -> Result<(), XdpError> {
        let key = program::stream_key(dst);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let n = keys.entry(key).or_insert(0);
        if *n == 0 {
            bpf::map_update(&self.streams, &key, &1u32.to_ne_bytes()).map_err(|e| {
                XdpError::Sys {
                    what: format!("cannot steer {dst} on {}", self.iface.name),
                    source: e,
                }
            })?;
        }
        *n += 1;
        Ok(())
    }

    /// Undoes one [`add_stream`](Self::add_stream).
    pub(super) fn remove_stream(&self, dst: SocketAddrV4) {
        let key = program::stream_key(dst);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&key);
                let _ = bpf::map_delete(&self.streams, &key);
            }
        }
    }

    pub(super) fn take_rx(&self) -> Option<RxParts> {
        self.halves
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .take()
    }
    pub(super) fn take_tx(&self) -> Option<TxParts> {
        self.halves
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .take()
    }
    pub(super) fn give_back_rx(&self, parts: RxParts) {
        self.halves.lock().unwrap_or_else(|p| p.into_inner()).0 = Some(parts);
    }
    pub(super) fn give_back_tx(&self, parts: TxParts) {
        self.halves.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(parts);
    }

    /// The start of the frames' memory.
    pub(super) fn base(&self) -> *mut u8 {
        self.base
    }
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
    pub fn attached(&self) -> Attached {
        self.attached
    }
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }
    /// What the kernel has counted against this port's socket so far (one system call).
    pub fn drops(&self) -> io::Result<XdpDrops> {
        xdp_sockopt(self.sock.as_raw_fd(), XDP_STATISTICS)
    }
}
