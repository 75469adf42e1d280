//! One-way latency from embedded timestamps: a publisher helper paces the stream and writes
//! each send time into the message; this process records arrival minus that time.

use super::publish::paced_publish;
use super::receive::{subscribe_loop, SequenceCheck};
use super::{uris, validate, LoadConfig, LoadResult, PubReport, MEASURED, NUMBER};
use crate::clock::Clock;
use crate::helper::protocol::{say_ready_with, say_result, Helper, Role};
use crate::measure::floor::with_cpu;
use crate::stats::LatencyRecorder;
use crate::BenchError;
use peregrine::{Publisher, Scheme};
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn run_embedded(
    cfg: &LoadConfig,
    exe: &Path,
    clock: &Clock,
) -> Result<LoadResult, BenchError> {
    let cpu_before = crate::cpu_seconds_self();
    let ctx = crate::measure::pingpong::context()?;
    let (load_uri, _) = uris(cfg);
    // The publisher binds: with udp://...:0 its helper tells the port on its ready line.
    let helper = Helper::start(
        exe,
        &EmbeddedPublisher {
            cfg: LoadConfig {
                uri: Some(load_uri.clone()),
                ..cfg.clone()
            },
            clock: *clock,
        },
    )?;
    let uri = if helper.ready_info.is_empty() {
        load_uri
    } else {
        helper.ready_info.clone()
    };
    let mut sub = ctx.subscriber("bench.load", &uri, cfg.idle)?;
    let mut latency = LatencyRecorder::new();
    let mut check = SequenceCheck::default();
    let mut corrupt = 0u64;
    with_cpu(cfg.cpus.a, || {
        subscribe_loop(&mut sub, cfg.connect_timeout, |payload| {
            let now = clock.now();
            let Some(head) = payload.get(..16) else {
                corrupt += 1;
                return;
            };
            let word = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
            let sent = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
            check.see(word & NUMBER);
            if payload.len() != cfg.size {
                corrupt += 1;
            }
            if word & MEASURED != 0 {
                latency.record(clock.ticks_to_ns(now.wrapping_sub(sent)));
            }
        })
    })??;
    let subscriber_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let report: PubReport = helper.finish()?;
    if corrupt > 0 {
        return Err(BenchError::Child(format!(
            "{corrupt} messages arrived corrupted: this is a bug, please report it"
        )));
    }
    let s = report.stats;
    Ok(LoadResult {
        sent: s.measured_sent,
        sent_total: s.sent_total,
        seconds: s.measured_seconds(),
        achieved_msgs_per_s: s.achieved_msgs_per_s(),
        received: check.received,
        lost: s
            .sent_total
            .saturating_sub(check.received - check.duplicates),
        duplicates: check.duplicates,
        out_of_order: check.out_of_order,
        refused: s.refused,
        pings: 0,
        pings_unanswered: 0,
        latency_from_schedule: LatencyRecorder::new(),
        latency,
        batches: s.batches,
        max_batch: s.max_batch,
        sleeps: s.sleeps,
        publisher_cpu_s: report.cpu_s,
        subscriber_cpu_s,
        stalls_publisher: s.stalls.clone(),
        stalls_subscriber: None,
        // The subscriber's loop does not count its stalls in this mode.
        untouched: None,
    })
}

/// The embedded-timestamp publisher, as a helper: paces the stream and writes the send time,
/// read with the measuring side's `clock`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EmbeddedPublisher {
    pub cfg: LoadConfig,
    pub clock: Clock,
}

impl Role for EmbeddedPublisher {
    const TAG: &'static str = "embedded_publisher";
    const WHAT: &'static str = "embedded-timestamp publisher";
}

/// The publisher process of an embedded-timestamp run: paces the stream and writes each
/// message's send time (clock ticks) into it.
pub fn publish_embedded(cfg: &LoadConfig, clock: &Clock) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = crate::measure::pingpong::context()?;
    let load_uri = cfg.uri.clone().unwrap_or_else(|| uris(cfg).0);
    let mut publ = ctx.publisher("bench.load", &load_uri)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready_with(if cfg.transport == Scheme::Ipc {
        ""
    } else {
        publ.uri()
    });
    let start = Instant::now();
    while publ.subscriber_count() == 0 {
        publ.do_work();
        if start.elapsed() > cfg.connect_timeout {
            return Err(BenchError::Child(format!(
                "no subscriber within {} s",
                cfg.connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(20) {
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = clock.now();
    let stats = paced_publish(
        &mut publ,
        clock,
        t0,
        cfg,
        None,
        |buf, word| {
            buf[..8].copy_from_slice(&word.to_le_bytes());
            buf[8..16].copy_from_slice(&clock.now().to_le_bytes());
        },
        |_, _, _| {},
        |publ: &mut Publisher| {
            publ.do_work();
        },
    )?;
    publ.close();
    say_result(&PubReport {
        stats,
        cpu_s: crate::cpu_seconds_self(),
    });
    Ok(())
}
