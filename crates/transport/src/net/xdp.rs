//! Kernel bypass for `udp://` and `mcast://` with `xdp=IFNAME`: the stream's data leaves and
//! arrives through an AF_XDP socket whose rings live in this process's memory, polled without a
//! system call per packet, instead of through the kernel's UDP stack.
//!
//! What changes is only where datagrams go in and out; the frames on the wire are the same as
//! `udp://`'s, so an xdp publisher and a kernel `udp` subscriber (or the reverse) interoperate,
//! and NAK repair, flow control, `auth=`, topic resolution and counters are unchanged (they are
//! `peregrine_proto`'s and the UDP driver's). The pieces:
//!
//! - [`program`]: a steering program of a few dozen instructions, built here and loaded with
//!   [`bpf`], that redirects to our socket only the packets of the streams this process
//!   subscribed to (by destination address and UDP port) and passes everything else to the
//!   kernel. It is attached as a BPF link: when the process exits, however it dies, the kernel
//!   detaches it.
//! - [`XdpPort`]: the interface queue's socket and UMEM (the frames' memory), shared by the
//!   process's xdp publishers and subscribers on that interface.
//! - [`XdpRx`]: a subscriber's receive side: frames from the receive ring, their Ethernet,
//!   IPv4 and UDP headers checked by [`peregrine_wire::packet`], the payload handed to the
//!   protocol in place.
//! - [`XdpTx`]: a publisher's send side: headers built by [`peregrine_wire::packet`] in front
//!   of each datagram in a UMEM frame, the peer's Ethernet address from the kernel's neighbour
//!   table ([`neigh`]) or the multicast group's.
//!
//! The control traffic (STATUS, NAK, JOIN) still goes through the kernel socket each driver
//! keeps, and so does data to a peer whose Ethernet address the kernel does not know yet (it
//! resolves it) or that is not on the interface's link (routed): those sends are counted.

// The system calls, rings and shared memory of AF_XDP and BPF: each `unsafe` says why it holds.
#![allow(unsafe_code)]

pub mod bpf;
pub mod iface;
pub mod neigh;
mod port;
pub mod program;
mod rx;
mod tx;

pub use port::{Attached, XdpDrops, XdpPort, FRAME_SIZE};
pub use rx::XdpRx;
pub use tx::XdpTx;

use std::fmt;
use std::io;

/// How the steering program is attached (`xdp_mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native when the driver has it, else generic with a warning.
    #[default]
    Auto,
    /// The driver's own hook, or an error.
    Native,
    /// The kernel's generic hook.
    Generic,
}

/// The `xdp=` parameters of a `udp://` or `mcast://` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface (`xdp=IFNAME`).
    pub iface: String,
    /// `xdp_mode=auto|native|generic`.
    pub mode: XdpMode,
    /// The receive queue bound (`xdp_queue=`, 0 by default): on a NIC with several queues,
    /// steer the stream's packets to it (`ethtool -N`), or the others reach the kernel.
    pub queue: u32,
    /// UMEM frames of [`FRAME_SIZE`] bytes (`xdp_frames=`, a power of two), half for
    /// receiving, half for sending.
    pub frames: u32,
}

impl XdpConfig {
    pub const DEFAULT_FRAMES: u32 = 4096;
    pub fn new(iface: &str) -> Self {
        XdpConfig {
            iface: iface.to_string(),
            mode: XdpMode::Auto,
            queue: 0,
            frames: Self::DEFAULT_FRAMES,
        }
    }
}

/// Why an xdp port could not be opened or used.
#[derive(Debug)]
pub enum XdpError {
    /// Not root, or without CAP_NET_ADMIN and CAP_BPF.
    NotPermitted { what: String, source: io::Error },
    /// No interface has this name.
    NoInterface {
        name: String,
        available: Vec<String>,
    },
    /// `xdp_mode=native` and the driver has no native hook.
    NoNativeMode { name: String, source: io::Error },
    /// Another program or socket holds the interface or queue.
    Busy { name: String, what: String },
    /// The verifier refused the steering program (a bug of ours: its log is kept).
    Refused { log: String, source: io::Error },
    /// The UMEM could not be allocated or registered.
    Umem { bytes: usize, source: io::Error },
    /// The interface has no IPv4 address to send from.
    NoAddress { name: String },
    /// This process already uses the half asked for (one xdp subscriber and one xdp publisher
    /// per interface and process).
    HalfInUse { name: String, half: &'static str },
    /// Another system call failed.
    Sys { what: String, source: io::Error },
}

/// The capabilities xdp= needs that the `CapEff:` line of a `/proc/PID/status` text lacks:
/// CAP_NET_ADMIN (bit 12) and CAP_BPF (bit 39; before Linux 5.8, CAP_SYS_ADMIN, bit 21, stands
/// in for it and is accepted). None when the line is missing or malformed.
fn lacking_capabilities(status: &str) -> Option<Vec<&'static str>> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let eff = u64::from_str_radix(hex, 16).ok()?;
    let has = |bit: u32| eff & (1u64 << bit) != 0;
    let mut lacking = Vec::new();
    if !has(12) {
        lacking.push("CAP_NET_ADMIN");
    }
    if !has(39) && !has(21) {
        lacking.push("CAP_BPF");
    }
    Some(lacking)
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XdpError::NotPermitted { what, source } => {
                let lacking = std::fs::read_to_string("/proc/self/status")
                    .ok()
                    .and_then(|s| lacking_capabilities(&s));
                write!(
                    f,
                    "{what}: {source} (xdp= needs root, or CAP_NET_ADMIN and CAP_BPF; running as uid {}",
                    rustix::process::geteuid().as_raw()
                )?;
                match lacking {
                    Some(l) if !l.is_empty() => write!(f, " without {})", l.join(" and ")),
                    _ => write!(f, ")"),
                }
            }
            XdpError::NoInterface { name, available } => write!(
                f,
                "xdp={name}: no interface has that name (this namespace has: {})",
                available.join(", ")
            ),
            XdpError::NoNativeMode { name, source } => write!(
                f,
                "xdp={name}: its driver has no native XDP ({source}); use xdp_mode=generic or xdp_mode=auto"
            ),
            XdpError::Busy { name, what } => write!(f, "xdp={name}: {what}"),
            XdpError::Refused { log, source } => write!(
                f,
                "the kernel refused Peregrine's steering program ({source}); please report this with the verifier's log:\n{log}"
            ),
            XdpError::Umem { bytes, source } => write!(
                f,
                "cannot allocate or register {bytes} bytes of AF_XDP frames ({source}); lower xdp_frames= or raise the locked-memory limit (ulimit -l)"
            ),
            XdpError::NoAddress { name } => write!(
                f,
                "xdp={name}: the interface has no IPv4 address to send from (give it one, or use the interface the stream's address is on)"
            ),
            XdpError::HalfInUse { name, half } => write!(
                f,
                "xdp={name}: this process already has an xdp {half} on that interface and queue (one xdp publisher and one xdp subscriber per interface queue and process; use another xdp_queue= or a kernel udp:// stream)"
            ),
            XdpError::Sys { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for XdpError {}

#[cfg(test)]
mod tests {
    use super::lacking_capabilities;

    #[test]
    fn the_capabilities_missing_are_read_from_the_status_line() {
        let status = |eff: &str| format!("Name:\tpg\nCapInh:\t0000000000000000\nCapEff:\t{eff}\n");
        // Root: everything.
        assert_eq!(
            lacking_capabilities(&status("000001ffffffffff")),
            Some(vec![])
        );
        // Neither.
        assert_eq!(
            lacking_capabilities(&status("0000000000000000")),
            Some(vec!["CAP_NET_ADMIN", "CAP_BPF"])
        );
        // CAP_NET_ADMIN (bit 12) alone, then with CAP_SYS_ADMIN (bit 21) standing in for
        // CAP_BPF on older kernels, then with CAP_BPF (bit 39).
        assert_eq!(
            lacking_capabilities(&status("0000000000001000")),
            Some(vec!["CAP_BPF"])
        );
        assert_eq!(
            lacking_capabilities(&status("0000000000201000")),
            Some(vec![])
        );
        assert_eq!(
            lacking_capabilities(&status("0000008000001000")),
            Some(vec![])
        );
        assert_eq!(
            lacking_capabilities(&status("0000008000000000")),
            Some(vec!["CAP_NET_ADMIN"])
        );
        // No line, or not hexadecimal.
        assert_eq!(lacking_capabilities("Name:\tpg\n"), None);
        assert_eq!(lacking_capabilities(&status("zz")), None);
    }
}
