//! Two network namespaces joined by a veth pair, for measuring a path between two "hosts" on
//! one machine (the kernel-bypass comparison, `bench pingpong --netns`). The interface has the
//! same name in both namespaces ([`VETH`]), so one URI (`...?xdp=pgb0`) serves both sides, and
//! one queue each way, so every packet reaches the queue an AF_XDP socket binds. Needs root and
//! `ip` (iproute2); removed on drop.

use crate::BenchError;
use std::net::Ipv4Addr;
use std::process::Command;

/// The interface's name in both namespaces.
pub const VETH: &str = "pgb0";

/// Two namespaces, `a` (10.201.N.1) and `b` (10.201.N.2), joined by [`VETH`].
#[derive(Debug)]
pub struct VethPair {
    pub a: String,
    pub b: String,
    pub addr_a: Ipv4Addr,
    pub addr_b: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), BenchError> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        BenchError::Config(format!(
            "--netns needs iproute2's `ip` (apt-get install iproute2): {e}"
        ))
    })?;
    if !out.status.success() {
        return Err(BenchError::Config(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl VethPair {
    /// Creates the pair; a clear error when not root or `ip` is missing.
    pub fn create() -> Result<VethPair, BenchError> {
        if !rustix::process::geteuid().is_root() {
            return Err(BenchError::Config(format!(
                "--netns creates network namespaces and a veth pair: run as root (uid {} here), or drop --netns",
                rustix::process::geteuid().as_raw()
            )));
        }
        let id = std::process::id() % 100_000;
        let n = (id % 250) as u8 + 1;
        let pair = VethPair {
            a: format!("pgb{id}a"),
            b: format!("pgb{id}b"),
            addr_a: Ipv4Addr::new(10, 201, n, 1),
            addr_b: Ipv4Addr::new(10, 201, n, 2),
        };
        for ns in [&pair.a, &pair.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&["netns", "add", ns])?;
        }
        let (ta, tb) = (format!("pgb{id}x"), format!("pgb{id}y"));
        ip(&[
            "link",
            "add",
            &ta,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "type",
            "veth",
            "peer",
            "name",
            &tb,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
        ])?;
        for (ns, dev, addr) in [(&pair.a, &ta, pair.addr_a), (&pair.b, &tb, pair.addr_b)] {
            ip(&["link", "set", dev, "netns", ns])?;
            ip(&["-n", ns, "link", "set", dev, "name", VETH])?;
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", VETH])?;
            ip(&["-n", ns, "link", "set", VETH, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }
}

/// Runs `f` on a thread moved into network namespace `ns`: the sockets it opens live there
/// (and keep working wherever they are used).
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, BenchError> {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path)
                .map_err(|e| BenchError::Config(format!("network namespace {path}: {e}")))?;
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| {
                BenchError::Config(format!("cannot enter network namespace {path}: {e}"))
            })?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
