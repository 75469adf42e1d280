//! The four `bpf(2)` commands the xdp driver needs: creating a map, writing and deleting one
//! of its entries, loading a program (with the verifier's log on refusal) and attaching it to
//! an interface as a BPF link.
//!
//! Written against the system call rather than through a BPF library: the steering program is
//! a few dozen instructions built in [`super::program`], so an ELF loader (aya, libbpf) would
//! bring a toolchain for programs we do not compile. The attribute layouts are `union bpf_attr`'s
//! from `include/uapi/linux/bpf.h`; the kernel requires every byte past the fields it reads to be
//! zero, so each call starts from a zeroed buffer.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;

/// `BPF_MAP_TYPE_HASH`.
pub const MAP_HASH: u32 = 1;
/// `BPF_MAP_TYPE_XSKMAP`: queue index to AF_XDP socket.
pub const MAP_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`, the attach type of an XDP link.
const ATTACH_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: the generic hook, after the kernel built its socket buffer.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver's own (native) hook.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Room for every attribute this module writes (the largest, PROG_LOAD's, ends at byte 72).
const ATTR_LEN: usize = 128;

/// A zeroed `union bpf_attr` with little helpers to place fields at their offsets.
struct Attr([u8; ATTR_LEN]);

impl Attr {
    fn new() -> Self {
        Attr([0; ATTR_LEN])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(&mut self, off: usize, name: &str) -> &mut Self {
        // BPF_OBJ_NAME_LEN is 16 with the NUL: alphanumerics, '_' and '.'.
        let n = name.len().min(15);
        self.0[off..off + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
    /// Runs command `cmd` with this attribute; returns the kernel's non-negative result.
    fn call(&mut self, cmd: libc::c_long) -> io::Result<i64> {
        // SAFETY: `self.0` is a live, writable buffer of ATTR_LEN bytes, the size passed; every
        // pointer stored in it (by the callers below) points at memory that outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                ATTR_LEN as libc::c_uint,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }
    fn call_fd(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        let fd = self.call(cmd)?;
        // SAFETY: the commands called this way return a new file descriptor that nothing else
        // owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
}

/// Creates a map; `name` shows in `bpftool map`.
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, map_type)
        .u32(4, key_size)
        .u32(8, value_size)
        .u32(12, max_entries)
        .name(28, name)
        .call_fd(BPF_MAP_CREATE)
}

/// Writes `key` → `value` into the map (`BPF_ANY`: created or replaced).
pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64)
        .call(BPF_MAP_UPDATE_ELEM)
        .map(drop)
}

/// Removes `key` from the map.
pub fn map_delete(map: &OwnedFd, key: &[u8]) -> io::Result<()> {
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .call(BPF_MAP_DELETE_ELEM)
        .map(drop)
}

/// A program the kernel refused, with what its verifier said.
#[derive(Debug)]
pub struct LoadError {
    pub source: io::Error,
    /// The verifier's log (empty when the refusal came before verification).
    pub log: String,
}

/// Loads an XDP program of encoded instructions (8 bytes each, see [`super::program`]).
pub fn prog_load_xdp(insns: &[u64], name: &str) -> Result<OwnedFd, LoadError> {
    let license = CString::new("Dual MIT/GPL").expect("no NUL");
    let load = |log: &mut [u8], level: u32| {
        Attr::new()
            .u32(0, PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, level)
            .u32(28, log.len() as u32)
            .u64(
                32,
                if log.is_empty() {
                    0
                } else {
                    log.as_mut_ptr() as u64
                },
            )
            .name(48, name)
            .u32(68, ATTACH_XDP)
            .call_fd(BPF_PROG_LOAD)
    };
    match load(&mut [], 0) {
        Ok(fd) => Ok(fd),
        Err(source) => {
            // Again with the log on, to say why.
            let mut log = vec![0u8; 64 * 1024];
            let _ = load(&mut log, 1);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(LoadError {
                source,
                log: String::from_utf8_lossy(&log[..end]).into_owned(),
            })
        }
    }
}

/// Attaches an XDP program to interface `ifindex` as a BPF link with `flags`
/// ([`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`]). The program stays attached while the
/// returned descriptor is open: when the process exits, however it dies, the kernel closes it
/// and detaches the program, so no dead process leaves an interface steering packets nowhere.
pub fn link_create_xdp(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, ATTACH_XDP)
        .u32(12, flags)
        .call_fd(BPF_LINK_CREATE)
}
