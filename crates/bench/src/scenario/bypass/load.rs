//! The comparison under load (`bench load --transport xdp --netns`): a paced stream with pings
//! (Ultra Messaging's lbmpubload / lbmsubload, seed 001's method at 100,000 msgs/s) across the
//! pair, through the kernel and through AF_XDP, and sockperf's ping-pong at the same rate over
//! the same pair where it is installed.

use super::Path;
use crate::clock::Clock;
use crate::measure::load::{self, LoadConfig, Method};
use crate::netns::{in_namespace, VethPair, VETH};
use crate::sockperf::{self, SockperfAcross, SockperfConfig};
use crate::{BenchError, CpuPair};
use peregrine::{IdleKind, Scheme};
use peregrine_report::model::{Cell, Latency, Scenario};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

/// The `path` the cells carry: the report titles their tables with it.
pub const PATH: &str = "veth pair";

/// Settings of the comparison under load.
#[derive(Debug, Clone)]
pub struct BypassLoad {
    /// Message sizes, 8 to 1440 bytes each (one message per datagram at most): the paths run
    /// size by size.
    pub sizes: Vec<usize>,
    pub rate_msgs_per_s: f64,
    /// One ping per this many messages (default: about 5000 pings per second).
    pub ping_every: Option<u64>,
    /// The measured interval, after the warm-up, in seconds.
    pub seconds: f64,
    pub warmup_seconds: f64,
    /// The publisher on `a` (namespace one), the reflector on `b` (namespace two).
    pub cpus: CpuPair,
    /// Also sockperf (when installed).
    pub sockperf: bool,
    /// This program, to start the reflector.
    pub exe: PathBuf,
}

impl BypassLoad {
    /// The load run of one of Peregrine's paths at `size` across a pair given as `(a, b,
    /// namespace of b)`: the publisher on address `a` in this namespace, the reflector on `b`
    /// in its own (loopback stands in for the pair before it exists, to check the settings).
    fn config(
        &self,
        path: Path,
        size: usize,
        across: Option<(Ipv4Addr, Ipv4Addr, &str)>,
    ) -> LoadConfig {
        let (a, b) = match across {
            Some((a, b, _)) => (a, b),
            None => (Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST),
        };
        let xdp = |sep: char| {
            if path == Path::Xdp {
                format!("{sep}xdp={VETH}")
            } else {
                String::new()
            }
        };
        LoadConfig {
            transport: Scheme::Udp,
            size,
            rate_msgs_per_s: self.rate_msgs_per_s,
            ping_every: self
                .ping_every
                .unwrap_or_else(|| crate::pacer::default_ping_every(self.rate_msgs_per_s)),
            seconds: self.seconds,
            warmup_seconds: self.warmup_seconds,
            cpus: self.cpus,
            idle: IdleKind::Spin,
            method: Method::Pings,
            name: crate::run_name("bl"),
            connect_timeout: Duration::from_secs(20),
            // The load stream keeps udp's defaults (batching); the reflected one is urgent.
            uri: Some(format!("udp://{a}:40021{}", xdp('?'))),
            reflect_uri: Some(format!("udp://{b}:40022?mode=urgent{}", xdp('&'))),
            sub_netns: across.map(|(_, _, ns)| ns.to_string()),
        }
    }

    /// Checks every value before anything runs.
    pub fn validate(&self) -> Result<(), BenchError> {
        let Some(&first) = self.sizes.first() else {
            return Err(BenchError::Config(
                "--sizes is empty: give message sizes from 8 to 1440, for example --sizes 32,256"
                    .into(),
            ));
        };
        if let Some(&s) = self.sizes.iter().find(|&&s| !(8..=1440).contains(&s)) {
            return Err(BenchError::Config(format!(
                "--size {s} is not accepted across the veth pair: give 8 to 1440 bytes (a message in one datagram)"
            )));
        }
        load::validate(&self.config(Path::Kernel, first, None))
    }

    /// sockperf's ping-pong at the load's rate: every message answered, so its figure is a
    /// paced ping-pong, not a ping among unanswered load.
    fn sockperf_config(&self, size: usize, across: SockperfAcross) -> SockperfConfig {
        SockperfConfig {
            transport: Scheme::Udp,
            size: size.max(sockperf::MIN_SIZE),
            cpus: self.cpus,
            busy_poll: true,
            // Its run time includes its 400 ms warm-up.
            seconds: (self.seconds + self.warmup_seconds + 0.4).ceil().max(1.0) as u32,
            port: 40023,
            across: Some(across),
            mps: Some(self.rate_msgs_per_s.round().max(1.0) as u64),
        }
    }
}

/// One path's cell under load, with its latency samples (Peregrine's paths).
#[derive(Debug, Clone)]
pub struct BypassLoadCell {
    pub path: Path,
    /// The row's size (sockperf's cell of a size under 14 bytes sends 14).
    pub size: usize,
    pub cell: Cell,
    pub result: Option<load::LoadResult>,
}

/// Runs the paths one after the other on one pair, calling `each` with every cell as it is
/// measured. The cells are load cells (`Scenario::Load`) of transports `udp`, `xdp` and
/// `sockperf`, with the path [`PATH`] and the setting `netns`.
pub fn load(
    cfg: &BypassLoad,
    clock: &Clock,
    mut each: impl FnMut(&BypassLoadCell) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    cfg.validate()?;
    let pair = VethPair::create()?;
    let sockperf = cfg.sockperf && sockperf::available().is_some();
    if cfg.sockperf && !sockperf {
        tracing::warn!(
            "sockperf is not installed: its cell is left out (apt-get install sockperf)"
        );
    }
    for &size in &cfg.sizes {
        for path in [Path::Kernel, Path::Xdp] {
            let lc = cfg.config(path, size, Some((pair.addr_a, pair.addr_b, &pair.b)));
            let r = in_namespace(&pair.a, || load::run(&lc, &cfg.exe, clock))??;
            let mut cell = crate::scenario::paced::load_cell(&lc, &r, Scenario::Load);
            mark(&mut cell, path, size, cfg.rate_msgs_per_s);
            each(&BypassLoadCell {
                path,
                size,
                cell,
                result: Some(r),
            })?;
        }
        if sockperf {
            let sc = cfg.sockperf_config(
                size,
                SockperfAcross {
                    server_ns: pair.b.clone(),
                    client_ns: pair.a.clone(),
                    server_addr: pair.addr_b,
                },
            );
            let latency = sockperf::run(&sc)?;
            let mut cell = Cell {
                scenario: Some(Scenario::Load),
                transport: Path::Sockperf.name().into(),
                size_bytes: sc.size,
                rate_requested_msgs_per_s: Some(cfg.rate_msgs_per_s),
                latency: Some(latency),
                ..Default::default()
            };
            mark(&mut cell, Path::Sockperf, size, cfg.rate_msgs_per_s);
            cell.detail.paced_mut().settings.insert(
                "method".into(),
                "sockperf ping-pong --mps (every message answered)".into(),
            );
            each(&BypassLoadCell {
                path: Path::Sockperf,
                size,
                cell,
                result: None,
            })?;
        }
    }
    Ok(())
}

/// Names a cell by its path, row size and rate, and marks it as measured across the pair.
fn mark(cell: &mut Cell, path: Path, size: usize, rate: f64) {
    cell.transport = path.name().into();
    cell.id = format!(
        "load-{}-{size}B-{}-netns",
        path.name(),
        crate::sweep::rate_label(rate)
    );
    let d = cell.detail.paced_mut();
    d.path = Some(PATH.into());
    d.settings.insert("netns".into(), true.into());
    d.settings.insert("row_size".into(), size.into());
}

/// `bench load --transport xdp --netns`: every cell shown and recorded as it is measured, then
/// the ratios to the kernel path.
pub fn load_in(cfg: &BypassLoad, s: &mut crate::scenario::Session) -> Result<(), BenchError> {
    let clock = *s.clock();
    // Each cell's path, row size and latency, for the ratios.
    let mut seen: Vec<(Path, usize, Option<Latency>)> = Vec::new();
    load(cfg, &clock, |c| {
        seen.push((c.path, c.size, c.cell.latency));
        let r = c.result.as_ref();
        s.show_and_record(
            c.cell.clone(),
            r.map(|r| &r.latency),
            r.map(|r| &r.latency_from_schedule),
        )
    })?;
    if s.out.json {
        return Ok(());
    }
    println!();
    println!(
        "Under load across a veth pair: ratios to udp through the kernel, same size, same run"
    );
    for &size in &cfg.sizes {
        let latency = |p: Path| {
            seen.iter()
                .find(|c| c.0 == p && c.1 == size)
                .and_then(|c| c.2)
        };
        let Some(k) = latency(Path::Kernel) else {
            continue;
        };
        for p in [Path::Xdp, Path::Sockperf] {
            if let Some(l) = latency(p) {
                println!(
                    "{size:>5} B {:>9}: median {:.2}x, 99.9th {:.2}x",
                    p.name(),
                    l.median_ns / k.median_ns,
                    l.p999_ns / k.p999_ns
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(size: usize, rate: f64) -> BypassLoad {
        BypassLoad {
            sizes: vec![32, size],
            rate_msgs_per_s: rate,
            ping_every: None,
            seconds: 1.0,
            warmup_seconds: 0.5,
            cpus: CpuPair { a: 0, b: 1 },
            sockperf: false,
            exe: PathBuf::from("peregrine"),
        }
    }

    #[test]
    fn sizes_and_rates_are_checked_before_anything_runs() {
        assert!(config(32, 100_000.0).validate().is_ok());
        for (size, rate, names) in [
            (4, 1e5, "--size 4"),
            (1441, 1e5, "--size 1441"),
            (32, 0.0, "--rate 0"),
        ] {
            let e = config(size, rate).validate().unwrap_err().to_string();
            assert!(e.contains(names), "{size} {rate}: {e}");
        }
        let mut none = config(32, 1e5);
        none.sizes.clear();
        let e = none.validate().unwrap_err().to_string();
        assert!(e.contains("--sizes is empty"), "{e}");
    }

    #[test]
    fn the_xdp_path_puts_xdp_on_both_streams_and_the_reflector_in_the_other_namespace() {
        let across = ([10, 1, 0, 1].into(), [10, 1, 0, 2].into(), "pgb-b");
        let cfg = config(64, 100_000.0);
        let x = cfg.config(Path::Xdp, 64, Some(across));
        assert_eq!(x.uri.as_deref(), Some("udp://10.1.0.1:40021?xdp=pgb0"));
        assert_eq!(
            x.reflect_uri.as_deref(),
            Some("udp://10.1.0.2:40022?mode=urgent&xdp=pgb0")
        );
        assert_eq!(x.sub_netns.as_deref(), Some("pgb-b"));
        assert_eq!(x.ping_every, 20);
        let k = cfg.config(Path::Kernel, 64, Some(across));
        assert_eq!(k.uri.as_deref(), Some("udp://10.1.0.1:40021"));
        assert_eq!(
            k.reflect_uri.as_deref(),
            Some("udp://10.1.0.2:40022?mode=urgent")
        );
        let sp = cfg.sockperf_config(
            64,
            SockperfAcross {
                server_ns: "pgb-b".into(),
                client_ns: "pgb-a".into(),
                server_addr: across.1,
            },
        );
        assert_eq!(sp.mps, Some(100_000));
        assert_eq!(sp.seconds, 2);
        assert!(sockperf::validate(&sp).is_ok());
    }
}
