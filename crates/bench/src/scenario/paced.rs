//! Paced scenarios, made of [`crate::measure::load`] runs: load with pings at one rate, the size x rate
//! sweep ("CPU-bound after N"), the maximum sustainable rate, and one-way latency from
//! embedded timestamps over a list of update rates.

use super::{progress, Session};
use crate::measure::floor::FloorConfig;
use crate::measure::load::{LoadConfig, LoadResult, Method};
use crate::output::format_rate;
use crate::pacer::default_ping_every;
use crate::sweep::{rate_label, search_max};
use crate::{round3, BenchError, CpuPair};
use peregrine::{IdleKind, Scheme};
use peregrine_report::model::{Cell, Detail, PacedDetail, Scenario};
use std::collections::BTreeMap;
use std::time::Duration;

/// The settings every paced cell of a sweep, search or latency list shares.
#[derive(Debug, Clone)]
pub struct Pacing {
    /// The measured interval of each cell, and the warm-up before it, in seconds.
    pub seconds: f64,
    pub warmup_seconds: f64,
    /// One ping per this many messages (default: about 5000 pings per second).
    pub ping_every: Option<u64>,
    pub cpus: CpuPair,
    pub idle: IdleKind,
}

impl Pacing {
    /// The load run of one cell.
    pub fn cell(&self, transport: Scheme, size: usize, rate: f64, method: Method) -> LoadConfig {
        LoadConfig {
            transport,
            size,
            rate_msgs_per_s: rate,
            ping_every: match method {
                Method::Pings | Method::CacheLine => {
                    self.ping_every.unwrap_or_else(|| default_ping_every(rate))
                }
                Method::Embedded => 1,
            },
            seconds: self.seconds,
            warmup_seconds: self.warmup_seconds,
            cpus: self.cpus,
            idle: self.idle,
            method,
            name: crate::run_name("ld"),
            connect_timeout: Duration::from_secs(20),
            uri: None,
            reflect_uri: None,
            sub_netns: None,
        }
    }
}

/// A sweep's matrix.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub transports: Vec<Scheme>,
    pub sizes: Vec<usize>,
    pub rates: Vec<f64>,
    pub pacing: Pacing,
}

impl SweepPlan {
    /// The rates in increasing order, once each.
    fn rates(&self) -> Vec<f64> {
        sorted(&self.rates)
    }

    /// Checks every cell's settings before the first runs.
    pub fn validate(&self) -> Result<(), BenchError> {
        for t in &self.transports {
            for &size in &self.sizes {
                for rate in self.rates() {
                    crate::measure::load::validate(&self.pacing.cell(
                        *t,
                        size,
                        rate,
                        Method::Pings,
                    ))?;
                }
            }
        }
        Ok(())
    }
}

/// The maximum-rate search of each transport and size.
#[derive(Debug, Clone)]
pub struct MaxPlan {
    pub transports: Vec<Scheme>,
    pub sizes: Vec<usize>,
    pub start_rate: f64,
    pub max_rate: f64,
    pub pacing: Pacing,
}

impl MaxPlan {
    /// The lowest rate the search goes down to.
    pub const FLOOR_MSGS_PER_S: f64 = 1_000.0;
    /// How close the highest rate that held and the lowest that did not must come.
    pub const TOLERANCE: f64 = 0.05;

    pub fn validate(&self) -> Result<(), BenchError> {
        for t in &self.transports {
            for &size in &self.sizes {
                crate::measure::load::validate(&self.pacing.cell(
                    *t,
                    size,
                    self.start_rate,
                    Method::Pings,
                ))?;
            }
        }
        if self.max_rate < self.start_rate {
            return Err(BenchError::Config(format!(
                "--max-rate {} is not accepted: give at least --start-rate ({})",
                format_rate(self.max_rate),
                format_rate(self.start_rate)
            )));
        }
        Ok(())
    }
}

/// One-way latency from embedded timestamps over a list of update rates.
#[derive(Debug, Clone)]
pub struct EmbeddedPlan {
    pub transport: Scheme,
    pub size: usize,
    pub rates: Vec<f64>,
    pub pacing: Pacing,
}

impl EmbeddedPlan {
    pub fn validate(&self) -> Result<(), BenchError> {
        for rate in sorted(&self.rates) {
            crate::measure::load::validate(&self.pacing.cell(
                self.transport,
                self.size,
                rate,
                Method::Embedded,
            ))?;
        }
        Ok(())
    }
}

fn sorted(rates: &[f64]) -> Vec<f64> {
    let mut r = rates.to_vec();
    r.sort_by(f64::total_cmp);
    r.dedup();
    r
}

/// `bench load`: one load run, with the machine's floor under the same schedule before it.
pub fn load(cfg: &LoadConfig, s: &mut Session) -> Result<(), BenchError> {
    crate::measure::load::validate(cfg)?;
    let bar = progress(1, true);
    paced_cell(cfg, Scenario::Load, s, &bar)?;
    Ok(())
}

/// Round trips of the short cache-line floor measured around each load cell, and the ones not
/// kept before them.
const FLOOR_PROBE: u64 = 20_000;
const FLOOR_PROBE_WARMUP: u64 = 2_000;

/// The cache-line floor's median now: a short floor run on the cell's CPUs.
fn floor_probe(cpus: CpuPair, s: &Session) -> Result<f64, BenchError> {
    let r = crate::measure::floor::run(
        &FloorConfig {
            count: FLOOR_PROBE,
            warmup_count: FLOOR_PROBE_WARMUP,
            cpus,
        },
        s.exe(),
        s.clock(),
    )?;
    Ok(r.summary().median_ns)
}

/// Round trips of the unloaded ping-pong measured just before each load cell (the cell's
/// `x unloaded` reference), after a tenth as many not kept: a fraction of a second on every
/// transport, and enough for a median.
const UNLOADED_PINGS: u64 = 50_000;

/// The median half round trip of a plain ping-pong of the cell's transport and size on its
/// CPUs, now: what the cell's pings would take without the load. None when the cell runs on a
/// URI of the user's (`--uri`: a ping-pong there would need the other host's side).
fn unloaded_median(cfg: &LoadConfig, s: &Session) -> Result<Option<f64>, BenchError> {
    if cfg.uri.is_some() {
        return Ok(None);
    }
    let mut pp = super::latency::pingpong_config(cfg.transport, cfg.size, UNLOADED_PINGS, cfg.cpus);
    // The cache-line floors measured around the cell cover it.
    pp.floor_every = 0;
    pp.idle = cfg.idle;
    let r = crate::measure::pingpong::run(&pp, s.exe(), s.clock())?;
    Ok(Some(r.summary.median_ns))
}

/// The floor under load of a load cell: the same rate, pings and CPUs, on one cache line, for
/// at most a second (its 99.9th percentile rests on about 5,000 pings).
fn floor_under_load_config(cfg: &LoadConfig) -> LoadConfig {
    LoadConfig {
        method: Method::CacheLine,
        seconds: cfg.seconds.min(1.0),
        warmup_seconds: cfg.warmup_seconds.min(0.2),
        name: crate::run_name("fl"),
        ..cfg.clone()
    }
}

/// Runs one paced cell, prints and records it; returns whether it held its rate.
///
/// A load cell (`Scenario::Load`) is measured with its floors and its unloaded reference: the
/// cache-line floor now, the floor under load (the same schedule on one cache line), the floor
/// again, a plain ping-pong of the cell's transport and size, the cell, and the floor once
/// more. The cell carries its ratios to the floor under load (`median_x_floor`,
/// `p999_x_floor`) and to the ping-pong (`median_x_unloaded`), and is flagged (`floor_moved`)
/// when the floors around it disagree: then the ratios compare two machine modes.
fn paced_cell(
    cfg: &LoadConfig,
    scenario: Scenario,
    s: &mut Session,
    bar: &indicatif::ProgressBar,
) -> Result<bool, BenchError> {
    let with_floor = scenario == Scenario::Load;
    let mut floors = Vec::new();
    // The floor under load's latency and that of its unstalled pings, and the unloaded median.
    let mut under_load = None;
    let mut unloaded = None;
    if with_floor {
        floors.push(floor_probe(cfg.cpus, s)?);
        let fcfg = floor_under_load_config(cfg);
        let r = crate::measure::load::run(&fcfg, s.exe(), s.clock())?;
        floors.push(floor_probe(cfg.cpus, s)?);
        let mut cell = load_cell(&fcfg, &r, Scenario::FloorLoad);
        cell.transport = "cacheline".into();
        cell.size_bytes = 8;
        cell.id = format!("floorload-{}", load_cell_id(cfg, "load"));
        cell.detail.paced_mut().for_cell = Some(load_cell_id(cfg, "load"));
        insert_floors(&mut cell, &floors[..2]);
        bar.suspend(|| s.out.paced(&cell));
        under_load = Some((r.latency.summary(), r.unstalled()));
        s.record(cell, Some(&r.latency), Some(&r.latency_from_schedule))?;
        unloaded = unloaded_median(cfg, s)?;
    }
    let r = crate::measure::load::run(cfg, s.exe(), s.clock())?;
    let mut cell = load_cell(cfg, &r, scenario);
    if with_floor {
        floors.push(floor_probe(cfg.cpus, s)?);
        insert_floors(&mut cell, &floors[1..]);
        let d = cell.detail.paced_mut();
        // The floors on both sides of the floor under load count too: the ratio spans it.
        d.floor_moved = Some(
            floors
                .windows(2)
                .any(|w| crate::measure::floor::floor_moved(w[0], w[1])),
        );
        if let (Some((f, f_unstalled)), Some(l)) = (under_load, r.latency.nonempty_summary()) {
            d.floor_load_median_ns = Some(round3(f.median_ns));
            d.floor_load_p999_ns = Some(round3(f.p999_ns));
            d.median_x_floor = ratio(l.median_ns, f.median_ns);
            d.p999_x_floor = ratio(l.p999_ns, f.p999_ns);
            if let (Some(fu), Some(lu)) = (f_unstalled, r.unstalled()) {
                d.unstalled_p999_x_floor = ratio(lu.p999_ns, fu.p999_ns);
            }
            if let Some(u) = unloaded {
                d.unloaded_median_ns = Some(round3(u));
                d.median_x_unloaded = ratio(l.median_ns, u);
            }
        }
    }
    let held = cell.sustained == Some(true);
    bar.suspend(|| s.out.paced(&cell));
    let from_schedule = (scenario != Scenario::Embedded).then_some(&r.latency_from_schedule);
    s.record(cell, Some(&r.latency), from_schedule)?;
    bar.inc(1);
    Ok(held)
}

/// `a / b`, when `b` is a positive quantity to divide by.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| round3(a / b))
}

/// The floors measured before and after a cell, and whether they disagree.
fn insert_floors(cell: &mut Cell, floors: &[f64]) {
    let (before, after) = (floors[0], floors[floors.len() - 1]);
    let d = cell.detail.paced_mut();
    d.floor_before_ns = Some(round3(before));
    d.floor_after_ns = Some(round3(after));
    d.floor_moved = Some(crate::measure::floor::floor_moved(before, after));
}

/// Runs the sweep: per transport and size, rates in increasing order until one is not
/// sustained (the size is "CPU-bound after" the last one that was).
pub fn sweep(plan: &SweepPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.validate()?;
    let rates = plan.rates();
    let cells = (plan.transports.len() * plan.sizes.len() * rates.len()) as u64;
    let bar = progress(cells, s.out.json);
    for t in &plan.transports {
        for &size in &plan.sizes {
            for (k, &rate) in rates.iter().enumerate() {
                bar.set_message(format!("{t} {size}B at {} msgs/s", rate_label(rate)));
                let cfg = plan.pacing.cell(*t, size, rate, Method::Pings);
                if !paced_cell(&cfg, Scenario::Load, s, &bar)? {
                    // Higher rates of this size are not tried.
                    let skipped = (rates.len() - k - 1) as u64;
                    bar.set_length(bar.length().unwrap_or(cells) - skipped);
                    break;
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// `bench max`: the maximum sustainable rate of each transport and size.
pub fn max(plan: &MaxPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.validate()?;
    let bar = progress(0, s.out.json);
    for t in &plan.transports {
        for &size in &plan.sizes {
            let mut probes = 0u64;
            let best = search_max(
                plan.start_rate,
                MaxPlan::FLOOR_MSGS_PER_S.min(plan.start_rate),
                plan.max_rate,
                MaxPlan::TOLERANCE,
                |rate| -> Result<bool, BenchError> {
                    bar.set_message(format!("{t} {size}B: trying {} msgs/s", rate_label(rate)));
                    bar.inc_length(1);
                    probes += 1;
                    let cfg = plan.pacing.cell(*t, size, rate, Method::Pings);
                    paced_cell(&cfg, Scenario::MaxProbe, s, &bar)
                },
            )?;
            let mut detail = PacedDetail::default();
            detail.settings.insert("probes".into(), probes.into());
            detail
                .settings
                .insert("tolerance".into(), MaxPlan::TOLERANCE.into());
            let cell = Cell {
                id: format!("max-{t}-{size}B"),
                scenario: Some(Scenario::Max),
                transport: t.name().to_string(),
                size_bytes: size,
                rate_achieved_msgs_per_s: best,
                sustained: Some(best.is_some()),
                detail: Detail::Paced(detail),
                ..Default::default()
            };
            let json = s.out.json;
            bar.suspend(|| match best {
                _ if json => println!("{}", serde_json::to_string(&cell).expect("cells serialise")),
                Some(r) => println!(
                    "max       {t:<9} {size:>6}  {} msgs/s ({:.1} MB/s) held for {} s with no loss and no refusals ({probes} probes)",
                    format_rate(r),
                    r * size as f64 / 1e6,
                    plan.pacing.seconds
                ),
                None => println!(
                    "max       {t:<9} {size:>6}  not even {} msgs/s held",
                    format_rate(MaxPlan::FLOOR_MSGS_PER_S)
                ),
            });
            s.record(cell, None, None)?;
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// `bench latency --embedded`: one-way latency at each update rate.
pub fn embedded(plan: &EmbeddedPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.validate()?;
    let rates = sorted(&plan.rates);
    let bar = progress(rates.len() as u64, s.out.json);
    for rate in rates {
        bar.set_message(format!("{} updates/s", rate_label(rate)));
        let cfg = plan
            .pacing
            .cell(plan.transport, plan.size, rate, Method::Embedded);
        paced_cell(&cfg, Scenario::Embedded, s, &bar)?;
    }
    bar.finish_and_clear();
    Ok(())
}

/// `load-ipc-32B-1M`.
fn load_cell_id(cfg: &LoadConfig, kind: &str) -> String {
    format!(
        "{kind}-{}-{}B-{}",
        cfg.transport,
        cfg.size,
        rate_label(cfg.rate_msgs_per_s)
    )
}

/// A load run as a results cell. `scenario` is `Load`, `MaxProbe` or `Embedded`.
pub fn load_cell(cfg: &LoadConfig, r: &LoadResult, scenario: Scenario) -> Cell {
    let mut cpu_s = BTreeMap::new();
    cpu_s.insert("publisher".to_string(), round3(r.publisher_cpu_s));
    cpu_s.insert("subscriber".to_string(), round3(r.subscriber_cpu_s));
    let sustained =
        r.sustained(cfg.rate_msgs_per_s) && (scenario != Scenario::MaxProbe || r.refused == 0);
    let kind = match scenario {
        Scenario::Embedded => "embedded",
        Scenario::MaxProbe => "max-probe",
        Scenario::FloorLoad => "floorload",
        _ => "load",
    };
    let mut paced = PacedDetail::default();
    if cfg.transport != Scheme::Ipc && cfg.method != Method::CacheLine {
        // The report titles a transport with its path when all its cells share one.
        let path = if cfg.uri.is_none() {
            "loopback"
        } else {
            "given URI"
        };
        paced.path = Some(path.into());
    }
    let detail = &mut paced.settings;
    detail.insert("idle".into(), cfg.idle.name().into());
    detail.insert("cpus".into(), cfg.cpus.to_arg().into());
    detail.insert("warmup_seconds".into(), cfg.warmup_seconds.into());
    detail.insert("batches".into(), r.batches.into());
    detail.insert("max_batch".into(), r.max_batch.into());
    detail.insert("sleeps".into(), r.sleeps.into());
    detail.insert("sent_total".into(), r.sent_total.into());
    if scenario != Scenario::Embedded {
        detail.insert("ping_every".into(), cfg.ping_every.into());
        detail.insert("pings".into(), r.pings.into());
        detail.insert("pings_unanswered".into(), r.pings_unanswered.into());
    }
    for (side, st) in [
        ("publisher", &r.stalls_publisher),
        ("subscriber", &r.stalls_subscriber),
    ] {
        if let Some(j) = st {
            let mut line = super::jitter::cell(j).detail.to_map();
            line.insert("seconds".into(), round3(j.seconds).into());
            detail.insert(format!("stalls_{side}"), line.into());
        }
    }
    // Both loops together: stalls of 100 us or more per second, and the largest.
    let sides: Vec<&crate::jitter::CpuJitter> = [&r.stalls_publisher, &r.stalls_subscriber]
        .into_iter()
        .flatten()
        .collect();
    if !sides.is_empty() {
        let per_s: f64 = sides.iter().map(|j| j.per_s(2)).sum();
        let largest = sides.iter().map(|j| j.largest_gap_ns).fold(0.0, f64::max);
        paced.stalls_over_100us_per_s = Some(round3(per_s));
        paced.largest_stall_ns = Some(round3(largest));
    }
    // The tail apart from the machine's: the pings no stall of either loop overlapped.
    if let Some(u) = &r.untouched {
        paced.pings_stalled = Some(u.touched);
    }
    if let Some(l) = r.unstalled() {
        paced.unstalled_median_ns = Some(round3(l.median_ns));
        paced.unstalled_p999_ns = Some(round3(l.p999_ns));
        paced.unstalled_max_ns = Some(round3(l.max_ns));
    }
    let lat = r.latency.summary();
    let sched = r.latency_from_schedule.summary();
    Cell {
        id: load_cell_id(cfg, kind),
        scenario: Some(scenario),
        system: None,
        transport: cfg.transport.name().to_string(),
        size_bytes: cfg.size,
        rate_requested_msgs_per_s: Some(cfg.rate_msgs_per_s),
        rate_achieved_msgs_per_s: Some(r.achieved_msgs_per_s),
        seconds: r.seconds,
        sent: r.sent,
        received: r.received,
        lost: r.lost,
        duplicates: r.duplicates,
        out_of_order: r.out_of_order,
        refused: r.refused,
        sustained: Some(sustained),
        latency: (lat.samples > 0).then_some(lat),
        latency_from_schedule: (sched.samples > 0).then_some(sched),
        cpu_s,
        hdr_log: None,
        detail: Detail::Paced(paced),
    }
}
