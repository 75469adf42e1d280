//! The throughput comparison (`bench throughput --transport xdp --netns`): one publisher and
//! one subscriber across the pair, through the kernel and through AF_XDP.

use super::Path;
use crate::netns::{in_namespace, VethPair, VETH};
use crate::{BenchError, CpuPair};
use peregrine::{IdleKind, Scheme};
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the throughput comparison (`bench throughput --transport xdp --netns`).
#[derive(Debug, Clone)]
pub struct BypassThroughput {
    pub size: usize,
    pub seconds: f64,
    /// The publisher on `a`, the subscriber on `b`.
    pub cpus: CpuPair,
    pub exe: PathBuf,
}

impl BypassThroughput {
    /// Checks every value before anything runs.
    pub fn validate(&self) -> Result<(), BenchError> {
        if !(8..=1440).contains(&self.size) {
            return Err(BenchError::Config(format!(
                "--size {} is not accepted across the veth pair: give 8 to 1440 bytes (a message in one datagram)",
                self.size
            )));
        }
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(BenchError::Config(format!(
                "--seconds {} is not accepted: give more than 0 and at most 3600",
                self.seconds
            )));
        }
        Ok(())
    }
}

/// Unpaced throughput of one publisher and one subscriber across the veth pair, through the
/// kernel (`udp`) and through AF_XDP (`xdp`), every message checked by the subscriber; `each`
/// gets every cell as it is measured. No ceiling: the bare sockets of the ceilings run on
/// loopback, not across the pair.
pub fn throughput(
    cfg: &BypassThroughput,
    mut each: impl FnMut(&peregrine_report::model::Cell),
) -> Result<Vec<peregrine_report::model::Cell>, BenchError> {
    use crate::measure::throughput::{self as tp, ThroughputConfig};
    cfg.validate()?;
    let pair = VethPair::create()?;
    let mut cells = Vec::new();
    for path in [Path::Kernel, Path::Xdp] {
        let extra = if path == Path::Xdp {
            format!("?xdp={VETH}")
        } else {
            String::new()
        };
        let tc = ThroughputConfig {
            transport: Scheme::Udp,
            size: cfg.size,
            seconds: cfg.seconds,
            count: None,
            subscribers: 1,
            policy: peregrine::SlowSubscriberPolicy::BackPressure,
            capacity: peregrine::IPC_DEFAULT_CAPACITY,
            cpus: Some(cfg.cpus),
            name: crate::run_name("bt"),
            connect_timeout: Duration::from_secs(20),
            idle: IdleKind::Spin,
            uri: Some(format!("udp://{}:40011{extra}", pair.addr_a)),
            loss: None,
            group: false,
            sub_netns: Some(pair.b.clone()),
        };
        tp::validate(&tc)?;
        let r = in_namespace(&pair.a, || tp::run(&tc, &cfg.exe))??;
        let mut cell = crate::scenario::throughput::throughput_cell(&tc, &r)?;
        cell.transport = path.name().into();
        cell.id = format!("throughput-{}-{}B-netns", path.name(), cfg.size);
        cell.detail
            .throughput_mut()
            .settings
            .insert("netns".into(), true.into());
        each(&cell);
        cells.push(cell);
    }
    Ok(cells)
}

/// `bench throughput --transport xdp --netns`: both cells shown and recorded, then xdp's
/// ratio to the kernel path.
pub fn throughput_in(
    cfg: &BypassThroughput,
    s: &mut crate::scenario::Session,
) -> Result<(), BenchError> {
    let mut recorded = Ok(());
    let cells = throughput(cfg, |c| {
        if recorded.is_ok() {
            recorded = s.show_and_record(c.clone(), None, None);
        }
    })?;
    recorded?;
    let rate = |p: Path| {
        cells
            .iter()
            .find(|c| c.transport == p.name())
            .and_then(|c| c.rate_achieved_msgs_per_s)
    };
    if let (false, Some(x), Some(k)) = (s.out.json, rate(Path::Xdp), rate(Path::Kernel)) {
        println!(
            "xdp / udp through the kernel, same pair, same run: {:.2}x",
            x / k
        );
    }
    Ok(())
}
