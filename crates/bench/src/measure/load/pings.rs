//! Load with pings through a transport: this process publishes at the rate and reads the
//! reflected pings; the reflector helper discards the load and reflects each ping.

use super::book::{ping_result, PingBook};
use super::publish::paced_publish;
use super::receive::{on_load_message, SequenceCheck};
use super::{uris, validate, LoadConfig, LoadResult, SubReport, NUMBER};
use crate::clock::Clock;
use crate::helper::protocol::{say_ready_with, say_result, Helper, Role};
use crate::jitter::LoopStalls;
use crate::measure::floor::with_cpu;
use crate::pacer::PingPicker;
use crate::BenchError;
use peregrine::{IdleKind, Scheme, Subscriber};
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn run_pings(
    cfg: &LoadConfig,
    exe: &Path,
    clock: &Clock,
) -> Result<LoadResult, BenchError> {
    let cpu_before = crate::cpu_seconds_self();
    let ctx = crate::measure::pingpong::context()?;
    let (load_uri, _) = uris(cfg);
    let mut publ = ctx.publisher("bench.load", &load_uri)?;
    let bound = publ.uri().to_string();
    let helper = Helper::start_in(
        exe,
        &LoadReflector {
            cfg: LoadConfig {
                uri: Some(bound.clone()),
                ..cfg.clone()
            },
            clock: *clock,
        },
        cfg.sub_netns.as_deref(),
    )?;
    let reflect_uri = if helper.ready_info.is_empty() {
        uris(cfg).1
    } else {
        helper.ready_info.clone()
    };
    let mut sub = ctx.subscriber("bench.reflect", &reflect_uri, IdleKind::Spin)?;
    // The reflector sends nothing before the first ping, so nothing can arrive early here.
    let early = crate::measure::pingpong::wait_connected(
        &mut publ,
        &mut sub,
        cfg.connect_timeout,
        "subscriber",
    )?;
    if !early.is_empty() {
        return Err(BenchError::Child(format!(
            "{} message(s) arrived on the reflect stream before the first ping",
            early.len()
        )));
    }
    // A network subscriber may still be learning the session (the heartbeat answering its
    // join): let it, so that it joins at message 0 rather than at a later position.
    let settle = Instant::now();
    while cfg.transport != Scheme::Ipc && settle.elapsed() < Duration::from_millis(20) {
        publ.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }

    let warmup_ns = (cfg.warmup_seconds * 1e9) as u64;
    let picker = PingPicker::new(cfg.ping_every, 0x5eed ^ cfg.rate_msgs_per_s as u64);
    let (stats, book) = with_cpu(cfg.cpus.a, || -> Result<_, BenchError> {
        let t0 = clock.now();
        // Both the sending side (`on_ping`) and the reading side (`service`) reach it.
        let book = RefCell::new(PingBook::new(t0));
        let reflect = |sub: &mut Subscriber| {
            sub.poll(
                &mut |m| {
                    let now = clock.now();
                    let mut book = book.borrow_mut();
                    match m.payload.get(..8) {
                        Some(word) => {
                            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                            book.reflected(word & NUMBER, now, clock);
                        }
                        None => {
                            book.bad_echo = Some(format!("a {}-byte reflection", m.payload.len()));
                        }
                    }
                },
                64,
            )
        };
        let stats = paced_publish(
            &mut publ,
            clock,
            t0,
            cfg,
            Some(picker),
            |buf, word| buf[..8].copy_from_slice(&word.to_le_bytes()),
            |i, sent_ticks, sched_ns| {
                if sched_ns >= warmup_ns {
                    book.borrow_mut().sent(i, sent_ticks, sched_ns);
                }
            },
            |publ| {
                if reflect(&mut sub) == 0 {
                    publ.do_work();
                }
            },
        )?;
        // The last pings' reflections.
        let wait = Instant::now();
        while !book.borrow().in_flight.is_empty() && wait.elapsed() < Duration::from_secs(2) {
            if reflect(&mut sub) == 0 {
                publ.do_work();
            }
        }
        Ok((stats, book.into_inner()))
    })??;
    if let Some(e) = book.bad_echo {
        return Err(BenchError::Child(format!(
            "the subscriber reflected {e}: this is a bug, please report it"
        )));
    }
    // Ends the session (a shared-memory publisher ends it when dropped): the subscriber
    // drains and reports.
    publ.close();
    drop(publ);
    let publisher_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let report: SubReport = helper.finish()?;
    if report.corrupt > 0 {
        return Err(BenchError::Child(format!(
            "{} messages arrived corrupted: this is a bug, please report it",
            report.corrupt
        )));
    }
    Ok(ping_result(stats, book, report, publisher_cpu_s))
}

/// The load run's subscriber, as a helper: discards the load, reflects the pings (and counts
/// its loop's stalls with the measuring side's `clock`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoadReflector {
    pub cfg: LoadConfig,
    pub clock: Clock,
}

impl Role for LoadReflector {
    const TAG: &'static str = "load_reflector";
    const WHAT: &'static str = "load reflector";
}

/// The subscriber process of a ping run: discards the load, reflects pings, and counts its
/// loop's stalls once measured messages come.
pub fn reflect(cfg: &LoadConfig, clock: &Clock) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = crate::measure::pingpong::context()?;
    let load_uri = cfg.uri.clone().unwrap_or_else(|| uris(cfg).0);
    let mut reflect = ctx.publisher("bench.reflect", &uris(cfg).1)?;
    let mut sub = ctx.subscriber("bench.load", &load_uri, cfg.idle)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready_with(if cfg.transport == Scheme::Ipc {
        ""
    } else {
        reflect.uri()
    });
    // Load messages and pings that arrived while this side still waited for its own
    // subscriber are handled first, in order.
    let early = crate::measure::pingpong::wait_connected(
        &mut reflect,
        &mut sub,
        cfg.connect_timeout,
        "publisher",
    )?;
    let mut r = SubReport::default();
    let mut check = SequenceCheck::default();
    let size = cfg.size;
    let measuring = Cell::new(false);
    let mut stalls = LoopStalls::new(clock);
    crate::measure::pingpong::serve(
        &mut reflect,
        &mut sub,
        &early,
        256,
        |reflect, payload| {
            if !measuring.get() && payload.get(7).is_some_and(|b| b & 0x40 != 0) {
                // MEASURED (bit 62 of word 0): the measured interval began.
                measuring.set(true);
            }
            on_load_message(payload, size, &mut r, &mut check, reflect)
        },
        || stalls.at(clock.now(), measuring.get()),
    )
    .map_err(|e| BenchError::Child(format!("reflecting a ping failed: {e}")))?;
    r.received = check.received;
    r.lost = check.gaps;
    r.duplicates = check.duplicates;
    r.out_of_order = check.out_of_order;
    r.cpu_s = crate::cpu_seconds_self();
    r.stalls = stalls.finish(cfg.cpus.b);
    say_result(&r);
    Ok(())
}
