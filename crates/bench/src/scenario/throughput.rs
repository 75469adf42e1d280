//! Unpaced throughput: one publisher as fast as it can, N subscriber processes, every sequence
//! number checked; on udp and mcast with the loss-repair figures.

use super::Session;
use crate::ceiling::{Ceiling, CeilingConfig, CeilingKind};
use crate::measure::throughput::{ThroughputConfig, ThroughputResult};
use crate::output::{Printer, ResultLine};
use crate::{round3, BenchError, CpuPair};
use peregrine::{Scheme, SlowSubscriberPolicy};
use peregrine_report::model::{Cell, Scenario, Settings};
use peregrine_wire::failover::FAILOVER_HEADER_LEN;
use std::time::Duration;

/// `bench throughput`: runs, prints and records one throughput cell, with the ceilings of
/// the same run beside it.
pub fn run(cfg: &ThroughputConfig, s: &mut Session) -> Result<(), BenchError> {
    let r = crate::measure::throughput::run(cfg, s.exe())?;
    let ceilings = ceilings(cfg, &r)?;
    let mut cell = throughput_cell(cfg, &r)?;
    add_ceilings(&mut cell, &ceilings);
    s.show_and_record(cell, None, None)
}

/// The longest a ceiling runs: long enough for a steady rate, short enough that the suite's
/// four throughput runs add seconds, not minutes.
const CEILING_MAX: Duration = Duration::from_secs(2);

/// The ceilings of a local run with one subscriber, measured right after it between the same
/// two CPUs for as long as it published (at most 2 s). A stream on another host
/// (`--uri`) or with several subscribers has none: its bare counterpart is not two sockets or
/// one ring.
pub fn ceilings(cfg: &ThroughputConfig, r: &ThroughputResult) -> Result<Vec<Ceiling>, BenchError> {
    let allowed = peregrine_agent::allowed_cpus();
    let cpus = match (cfg.cpus, allowed.as_slice()) {
        (Some(c), _) => c,
        (None, [a, b, ..]) => CpuPair { a: *a, b: *b },
        _ => return Ok(Vec::new()),
    };
    if cfg.uri.is_some() || cfg.subscribers != 1 {
        return Ok(Vec::new());
    }
    let published = if r.publisher_msgs_per_s > 0.0 {
        Duration::from_secs_f64(r.sent as f64 / r.publisher_msgs_per_s)
    } else {
        Duration::ZERO
    };
    crate::ceiling::measure(&CeilingConfig {
        transport: cfg.transport,
        size: cfg.size + if cfg.group { FAILOVER_HEADER_LEN } else { 0 },
        capacity: cfg.capacity,
        cpus,
        duration: published.clamp(Duration::from_millis(50), CEILING_MAX),
    })
}

/// The ceilings into the cell: the transport's reference ceiling (the ring, the TCP
/// connection, or on udp and mcast the sockets with GSO) as `ceiling`, `ceiling_msgs_per_s` and
/// `x_ceiling`; on udp and mcast also the sockets without offload (`ceiling_plain_*`,
/// `x_ceiling_plain`) and with GSO and GRO (`ceiling_gro_*`, `x_ceiling_gro`), and for each the
/// share of datagrams the kernel dropped (bare sockets have no flow control).
pub fn add_ceilings(cell: &mut Cell, ceilings: &[Ceiling]) {
    let rate = cell.rate_achieved_msgs_per_s.unwrap_or(0.0);
    let x = |c: &Ceiling| {
        if c.msgs_per_s > 0.0 {
            round3(rate / c.msgs_per_s)
        } else {
            0.0
        }
    };
    let dropped_pct = |c: &Ceiling| round3(100.0 * (1.0 - c.read as f64 / c.written.max(1) as f64));
    let t = cell.detail.throughput_mut();
    let mut d = Record(&mut t.settings);
    for c in ceilings {
        let (name, datagrams) = match c.kind {
            CeilingKind::Ring | CeilingKind::Stream => ("ceiling", false),
            CeilingKind::SocketsGso => ("ceiling", true),
            CeilingKind::Sockets => ("ceiling_plain", true),
            CeilingKind::SocketsGsoGro => ("ceiling_gro", true),
        };
        if name == "ceiling" {
            // The reference ceiling: the report's columns.
            t.ceiling = Some(c.kind.describe().to_string());
            t.x_ceiling = Some(x(c));
            t.ceiling_msgs_per_s = Some(c.msgs_per_s.round());
        } else {
            d.set(&format!("x_{name}"), x(c));
            d.set(&format!("{name}_msgs_per_s"), c.msgs_per_s.round());
        }
        if datagrams {
            d.set(&format!("{name}_dropped_pct"), dropped_pct(c));
        }
        if let Some(why) = &c.offload_refused {
            d.set("ceiling_offload_refused", why.as_str());
        }
    }
}

/// The publisher side alone (`--role pub`), its subscribers started by hand: prints what it
/// sent.
pub fn publish_role(cfg: &ThroughputConfig, json: bool) -> Result<(), BenchError> {
    let (sent, refused, rate) = crate::measure::throughput::publish_role(cfg)?;
    let line = ResultLine {
        kind: "throughput-pub",
        transport: cfg.transport.name().to_string(),
        size_bytes: cfg.size,
        samples: sent,
        msgs_per_s: Some(rate),
        bytes_per_s: Some(rate * cfg.size as f64),
        ..Default::default()
    }
    .detail("refused", refused)
    .detail("policy", cfg.policy.name());
    Printer::new(json).print(&line);
    Ok(())
}

/// A throughput run as a results cell: the slowest subscriber's rate, what was lost, the
/// settings, and on udp and mcast the loss-repair figures (summed over subscribers; recovery
/// times of the slowest one). Fails when a message arrived out of order or corrupted.
pub fn throughput_cell(cfg: &ThroughputConfig, r: &ThroughputResult) -> Result<Cell, BenchError> {
    let bad: u64 = r
        .subscribers
        .iter()
        .map(|s| s.out_of_order + s.corrupt)
        .sum();
    if bad > 0 {
        return Err(BenchError::Child(format!(
            "{bad} messages arrived out of order or corrupted: this is a bug, please report it"
        )));
    }
    let reported_lost: u64 = r.subscribers.iter().map(|s| s.lost).sum();
    let mut cell = Cell {
        id: format!("throughput-{}-{}B", cfg.transport, cfg.size),
        scenario: Some(Scenario::Throughput),
        transport: cfg.transport.name().to_string(),
        size_bytes: cfg.size,
        rate_achieved_msgs_per_s: Some(r.delivered_msgs_per_s()),
        sent: r.sent,
        lost: r.lost(),
        refused: r.refused,
        ..Default::default()
    };
    cell.cpu_s
        .insert("publisher".into(), round3(r.publisher_cpu_s));
    let mut d = Record(&mut cell.detail.throughput_mut().settings);
    d.set("policy", cfg.policy.name());
    d.set("subscribers", cfg.subscribers);
    d.set("refused", r.refused);
    if cfg.group {
        d.set("failover_group", crate::measure::pingpong::GROUP);
    }
    if cfg.policy == SlowSubscriberPolicy::Overwrite {
        d.set("reported_lost", reported_lost);
    }
    if let Some(c) = cfg.cpus.filter(|_| cfg.subscribers == 1) {
        d.set("cpus", c.to_arg());
    }
    if matches!(cfg.transport, Scheme::Udp | Scheme::Mcast) {
        let sum = |f: fn(&crate::measure::throughput::SubscriberReport) -> u64| -> u64 {
            r.subscribers.iter().map(f).sum()
        };
        let p = &r.publisher;
        let frames = p.messages.max(1) as f64;
        let worst_us = |i: usize| {
            let ns = r.subscribers.iter().map(|s| s.recovery_ns[i]).max();
            round3(ns.unwrap_or(0) as f64 / 1e3)
        };
        d.set("loss", cfg.loss.clone().unwrap_or_else(|| "0".into()));
        d.set("dropped", sum(|s| s.dropped));
        d.set(
            "dropped_each",
            r.subscribers.iter().map(|s| s.dropped).collect::<Vec<_>>(),
        );
        d.set(
            "recovered_each",
            r.subscribers
                .iter()
                .map(|s| s.recovered)
                .collect::<Vec<_>>(),
        );
        d.set("naks_sent", sum(|s| s.naks_sent));
        d.set("naks_received", p.naks_received);
        d.set("retransmitted", p.retransmitted);
        d.set(
            "retransmitted_pct_of_msgs",
            round3(100.0 * p.retransmitted as f64 / frames),
        );
        d.set("retransmit_unavailable", p.retransmit_unavailable);
        d.set("retransmit_refused", p.retransmit_refused);
        d.set("flow_dropped", p.flow_dropped);
        d.set("recovered", sum(|s| s.recovered));
        d.set("duplicates", sum(|s| s.duplicates));
        d.set("unrecoverable", reported_lost);
        d.set("recovery_p50_us", worst_us(0));
        d.set("recovery_p99_us", worst_us(1));
        d.set("recovery_p999_us", worst_us(2));
        d.set("recovery_max_us", worst_us(3));
    }
    Ok(cell)
}

/// A cell's settings being filled in.
struct Record<'a>(&'a mut Settings);

impl Record<'_> {
    fn set(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.0.insert(key.to_string(), value.into());
    }
}
