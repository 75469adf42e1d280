//! Unpaced throughput: one publisher as fast as it can, N subscriber processes, every sequence
//! number checked; on udp and mcast with the loss-repair figures.

use super::Session;
use crate::output::{Printer, ResultLine};
use crate::throughput::{ThroughputConfig, ThroughputResult};
use crate::{round3, BenchError};
use peregrine::{Scheme, SlowSubscriberPolicy};
use peregrine_report::model::{Cell, Scenario};

/// `bench throughput`: runs, prints and records one throughput cell.
pub fn run(cfg: &ThroughputConfig, s: &mut Session) -> Result<(), BenchError> {
    let r = crate::throughput::run(cfg, s.exe())?;
    let cell = throughput_cell(cfg, &r)?;
    s.show_and_record(cell, None, None)
}

/// The publisher side alone (`--role pub`), its subscribers started by hand: prints what it
/// sent.
pub fn publish_role(cfg: &ThroughputConfig, json: bool) -> Result<(), BenchError> {
    let (sent, refused, rate) = crate::throughput::publish_role(cfg)?;
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
    let mut d = Detail(&mut cell.detail);
    d.set("policy", cfg.policy.name());
    d.set("subscribers", cfg.subscribers);
    d.set("refused", r.refused);
    if cfg.group {
        d.set("failover_group", crate::pingpong::GROUP);
    }
    if cfg.policy == SlowSubscriberPolicy::Overwrite {
        d.set("reported_lost", reported_lost);
    }
    if let Some(c) = cfg.cpus.filter(|_| cfg.subscribers == 1) {
        d.set("cpus", c.to_arg());
    }
    if matches!(cfg.transport, Scheme::Udp | Scheme::Mcast) {
        let sum = |f: fn(&crate::throughput::SubscriberReport) -> u64| -> u64 {
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

/// A cell's `detail` being filled in.
struct Detail<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Detail<'_> {
    fn set(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.0.insert(key.to_string(), value.into());
    }
}
