//! The ping-pong comparison (`bench pingpong --transport xdp --netns`): for each size, the
//! three paths one after the other.

use super::Path;
use crate::clock::Clock;
use crate::measure::pingpong::{self, PingPongConfig, StreamMode};
use crate::netns::{in_namespace, VethPair, VETH};
use crate::sockperf::{self, SockperfAcross, SockperfConfig};
use crate::stats::{LatencyRecorder, Summary};
use crate::{BenchError, CpuPair};
use peregrine::{IdleKind, Scheme};
use std::path::PathBuf;
use std::time::Duration;

/// Settings of a comparison.
#[derive(Debug, Clone)]
pub struct BypassConfig {
    /// Message sizes, 12 to 1472 bytes (one row each).
    pub sizes: Vec<usize>,
    pub count: u64,
    pub warmup_count: u64,
    pub cpus: CpuPair,
    /// Also sockperf (when installed).
    pub sockperf: bool,
    /// This program, to start the pong side.
    pub exe: PathBuf,
}

/// One path at one size.
#[derive(Debug, Clone)]
pub struct BypassRow {
    pub path: Path,
    /// The row's size.
    pub size: usize,
    /// What this path sent: the row's size, except sockperf's 12-byte row (its smallest
    /// message is 14 bytes).
    pub bytes: usize,
    pub latency: Summary,
    /// The samples, for Peregrine's paths (sockperf keeps its own).
    pub recorder: Option<LatencyRecorder>,
}

/// The sizes of the seeds' tables.
pub const DEFAULT_SIZES: [usize; 6] = [12, 64, 256, 512, 1024, 1472];

/// Checks every value before anything runs.
pub fn validate(cfg: &BypassConfig) -> Result<(), BenchError> {
    if cfg.sizes.is_empty() {
        return Err(BenchError::Config(
            "--sizes is empty: give message sizes from 12 to 1472, for example --sizes 12,64,1472"
                .into(),
        ));
    }
    if let Some(&s) = cfg.sizes.iter().find(|&&s| !(12..=1472).contains(&s)) {
        return Err(BenchError::Config(format!(
            "--sizes: {s} is not accepted across the veth pair: give sizes from 12 to 1472 bytes (one datagram each, as in the seeds' tables)"
        )));
    }
    Ok(())
}

/// Runs the comparison, calling `each` with every row as it is measured.
pub fn run(
    cfg: &BypassConfig,
    mut each: impl FnMut(&BypassRow),
) -> Result<Vec<BypassRow>, BenchError> {
    validate(cfg)?;
    let pair = VethPair::create()?;
    let sockperf = cfg.sockperf && sockperf::available().is_some();
    if cfg.sockperf && !sockperf {
        tracing::warn!(
            "sockperf is not installed: its rows are left out (apt-get install sockperf)"
        );
    }
    let clock = Clock::calibrate(Duration::from_millis(50));
    let mut rows = Vec::new();
    for &size in &cfg.sizes {
        let mut paths = vec![Path::Kernel, Path::Xdp];
        if sockperf {
            paths.push(Path::Sockperf);
        }
        for path in paths {
            let (latency, recorder) = match path {
                Path::Sockperf => (sockperf_across(&pair, cfg, size)?, None),
                _ => {
                    let r = peregrine_across(&pair, cfg, size, path == Path::Xdp, &clock)?;
                    (r.summary, Some(r.recorder))
                }
            };
            let bytes = match path {
                Path::Sockperf => size.max(sockperf::MIN_SIZE),
                _ => size,
            };
            let row = BypassRow {
                path,
                size,
                bytes,
                latency,
                recorder,
            };
            each(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Peregrine's ping-pong: the ping side on a thread in namespace `a`, the pong side a process
/// in `b`.
fn peregrine_across(
    pair: &VethPair,
    cfg: &BypassConfig,
    size: usize,
    xdp: bool,
    clock: &Clock,
) -> Result<pingpong::PingPongResult, BenchError> {
    let extra = if xdp {
        format!("&xdp={VETH}")
    } else {
        String::new()
    };
    let pp = PingPongConfig {
        transport: Scheme::Udp,
        size,
        count: cfg.count,
        warmup_count: cfg.warmup_count,
        cpus: cfg.cpus,
        idle: IdleKind::Spin,
        name: crate::run_name("bp"),
        connect_timeout: Duration::from_secs(20),
        ping_uri: Some(format!("udp://{}:40001?mode=urgent{extra}", pair.addr_a)),
        pong_uri: Some(format!("udp://{}:40002?mode=urgent{extra}", pair.addr_b)),
        floor_every: 0,
        floor_line: None,
        mode: StreamMode::Urgent,
        group: false,
        pong_netns: Some(pair.b.clone()),
    };
    pingpong::validate(&pp)?;
    in_namespace(&pair.a, || pingpong::run(&pp, &cfg.exe, clock))?
}

/// sockperf's ping-pong over the same pair: the server in `b`, the client in `a`.
fn sockperf_across(
    pair: &VethPair,
    cfg: &BypassConfig,
    size: usize,
) -> Result<Summary, BenchError> {
    sockperf::run(&SockperfConfig {
        transport: Scheme::Udp,
        size: size.max(sockperf::MIN_SIZE),
        cpus: cfg.cpus,
        busy_poll: true,
        seconds: 3,
        port: 40003,
        across: Some(SockperfAcross {
            server_ns: pair.b.clone(),
            client_ns: pair.a.clone(),
            server_addr: pair.addr_b,
        }),
        mps: None,
    })
}

/// `bench pingpong --transport xdp --netns`: every row shown and recorded as it is measured,
/// then the ratios to the kernel path.
pub fn pingpong(cfg: &BypassConfig, s: &mut crate::scenario::Session) -> Result<(), BenchError> {
    let mut recorded = Ok(());
    let rows = run(cfg, |r| {
        if recorded.is_ok() {
            recorded = record_row(r, s);
        }
    })?;
    recorded?;
    if !s.out.json {
        print_ratios(&cfg.sizes, &rows);
    }
    Ok(())
}

/// A row as a results cell: a ping-pong of its path's name, marked as measured across
/// namespaces (the report gives it no loopback floor and puts it in the bypass table) and with
/// the row it belongs to (sockperf's 12-byte row sends 14).
pub(super) fn record_row(
    r: &BypassRow,
    s: &mut crate::scenario::Session,
) -> Result<(), BenchError> {
    let mut cell = match &r.recorder {
        Some(rec) => crate::scenario::latency::latency_cell(
            peregrine_report::model::Scenario::Pingpong,
            r.path.name(),
            r.bytes,
            rec,
        ),
        None => peregrine_report::model::Cell {
            id: format!("pingpong-{}-{}B", r.path.name(), r.bytes),
            scenario: Some(peregrine_report::model::Scenario::Pingpong),
            transport: r.path.name().into(),
            size_bytes: r.bytes,
            latency: Some(r.latency),
            ..Default::default()
        },
    };
    cell.id = format!("{}-netns", cell.id);
    let settings = &mut cell.detail.latency_mut().settings;
    settings.insert("netns".into(), true.into());
    settings.insert("row_size".into(), r.size.into());
    s.show_and_record(cell, r.recorder.as_ref(), None)
}

/// The ratios of xdp and sockperf to the kernel path, size by size.
fn print_ratios(sizes: &[usize], rows: &[BypassRow]) {
    println!();
    println!(
        "Kernel bypass across a veth pair: ratios to udp through the kernel, same size, same run"
    );
    println!(
        "{:>6} {:>14} {:>14} {:>14} {:>14}",
        "size", "xdp median", "xdp 99.9th", "sockperf med", "sockperf 99.9"
    );
    for &size in sizes {
        let find = |p: Path| rows.iter().find(|r| r.size == size && r.path == p);
        let ratio = |p: Path, f: fn(&Summary) -> f64| match (find(p), find(Path::Kernel)) {
            (Some(x), Some(k)) if f(&k.latency) > 0.0 => {
                format!("{:.2}x", f(&x.latency) / f(&k.latency))
            }
            _ => "-".into(),
        };
        println!(
            "{:>6} {:>14} {:>14} {:>14} {:>14}",
            size,
            ratio(Path::Xdp, |l| l.median_ns),
            ratio(Path::Xdp, |l| l.p999_ns),
            ratio(Path::Sockperf, |l| l.median_ns),
            ratio(Path::Sockperf, |l| l.p999_ns),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sizes: Vec<usize>) -> BypassConfig {
        BypassConfig {
            sizes,
            count: 1000,
            warmup_count: 100,
            cpus: CpuPair { a: 0, b: 1 },
            sockperf: false,
            exe: PathBuf::from("peregrine"),
        }
    }

    #[test]
    fn sizes_outside_one_datagram_are_refused_with_the_range() {
        assert!(validate(&config(DEFAULT_SIZES.to_vec())).is_ok());
        for bad in [vec![], vec![8], vec![64, 1473]] {
            let e = validate(&config(bad.clone())).unwrap_err().to_string();
            assert!(e.contains("12") && e.contains("1472"), "{bad:?}: {e}");
        }
    }
}
