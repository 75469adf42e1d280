//! Ping-pong: half round trip over a transport between two processes (sockperf's and Reflex's
//! method). The ping side stamps a send, waits for the echo, and records (RTT / 2). Each ping
//! carries its number in its first 8 bytes (sizes of 8 bytes and more) and the echo is checked.

use crate::clock::Clock;
use crate::floor::with_cpu;
use crate::proc::{say_ready, say_result, Helper};
use crate::stats::{LatencyRecorder, Summary};
use crate::{BenchError, CpuPair};
use peregrine::{Context, IdleKind, OfferError, Publisher, Subscriber};
use std::path::Path;
use std::time::{Duration, Instant};

/// Settings of a ping-pong run.
#[derive(Debug, Clone)]
pub struct PingPongConfig {
    pub transport: String,
    pub size: usize,
    pub count: u64,
    pub warmup: u64,
    pub cpus: CpuPair,
    pub idle: IdleKind,
    /// Base of the two segment names (`NAME-ping`, `NAME-pong`).
    pub name: String,
    /// How long to wait for the other side (longer when the sides are started by hand).
    pub connect_timeout: Duration,
}

/// What a ping-pong run measured.
#[derive(Debug, Clone)]
pub struct PingPongResult {
    pub summary: Summary,
    pub ping_cpu_s: f64,
    pub pong_cpu_s: Option<f64>,
}

fn uris(cfg: &PingPongConfig) -> (String, String) {
    (
        format!("ipc://{}-ping", cfg.name),
        format!("ipc://{}-pong", cfg.name),
    )
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &PingPongConfig) -> Result<(), BenchError> {
    if cfg.transport != "ipc" {
        return Err(BenchError::Config(format!(
            "--transport {} is not available yet: this build supports --transport ipc",
            cfg.transport
        )));
    }
    // Ping-pong uses the default log capacity.
    let max = peregrine::ipc_max_message_len(peregrine::IPC_DEFAULT_CAPACITY);
    if cfg.size < 8 || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted for ping-pong: give 8 to {max} bytes (each ping carries its 8-byte number)",
            cfg.size
        )));
    }
    if cfg.count == 0 {
        return Err(BenchError::Config(
            "--count 0 is not accepted: give at least 1 sample".into(),
        ));
    }
    Ok(())
}

/// Runs both sides: spawns the pong process with `exe`, then pings from this one.
pub fn run(cfg: &PingPongConfig, exe: &Path, clock: &Clock) -> Result<PingPongResult, BenchError> {
    validate(cfg)?;
    let cpu_before = crate::cpu_seconds_self();
    let ctx = Context::new();
    let (ping_uri, pong_uri) = uris(cfg);
    let publ = ctx.publisher("bench.ping", &ping_uri)?;
    let args: Vec<String> = [
        "bench",
        "pingpong",
        "--role",
        "pong",
        "--transport",
        &cfg.transport,
        "--name",
        &cfg.name,
        "--size",
        &cfg.size.to_string(),
        "--cpus",
        &cfg.cpus.to_arg(),
        "--idle",
        cfg.idle.name(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let helper = Helper::start(exe, &args)?;
    let sub = ctx.subscriber("bench.pong", &pong_uri, cfg.idle)?;
    let summary = ping_loop(cfg, clock, publ, sub)?;
    let ping_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let r = helper.finish()?;
    Ok(PingPongResult {
        summary,
        ping_cpu_s,
        pong_cpu_s: r["cpu_s"].as_f64(),
    })
}

/// The ping side alone (`--role ping`): the pong side runs elsewhere with the same `--name`.
pub fn ping(cfg: &PingPongConfig, clock: &Clock) -> Result<PingPongResult, BenchError> {
    validate(cfg)?;
    let ctx = Context::new();
    let (ping_uri, pong_uri) = uris(cfg);
    let publ = ctx.publisher("bench.ping", &ping_uri)?;
    let sub = ctx.subscriber("bench.pong", &pong_uri, cfg.idle)?;
    let summary = ping_loop(cfg, clock, publ, sub)?;
    Ok(PingPongResult {
        summary,
        ping_cpu_s: crate::cpu_seconds_self(),
        pong_cpu_s: None,
    })
}

fn wait_connected(
    publ: &Publisher,
    sub: &mut Subscriber,
    timeout: Duration,
    who: &str,
) -> Result<(), BenchError> {
    let start = Instant::now();
    while publ.subscriber_count() == 0 || !sub.is_connected() {
        sub.poll(&mut |_m| {}, 1);
        if start.elapsed() > timeout {
            return Err(BenchError::Child(format!(
                "the {who} side did not connect within {} s (is it running with the same --name?)",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn ping_loop(
    cfg: &PingPongConfig,
    clock: &Clock,
    mut publ: Publisher,
    mut sub: Subscriber,
) -> Result<Summary, BenchError> {
    wait_connected(&publ, &mut sub, cfg.connect_timeout, "pong")?;
    let mut buf = vec![0u8; cfg.size];
    let mut rec = LatencyRecorder::new();
    let result = with_cpu(cfg.cpus.a, || -> Result<(), BenchError> {
        for i in 0..cfg.warmup + cfg.count {
            buf[..8].copy_from_slice(&i.to_le_bytes());
            let t0 = clock.now();
            loop {
                match publ.offer(&buf) {
                    Ok(_) => break,
                    Err(OfferError::BackPressured) => std::hint::spin_loop(),
                    Err(e) => return Err(BenchError::Child(format!("offer failed: {e}"))),
                }
            }
            let mut echoed = None;
            loop {
                let n = sub.poll(
                    &mut |m| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&m.payload[..8]);
                        echoed = Some((u64::from_le_bytes(b), m.payload.len()));
                    },
                    1,
                );
                if n > 0 {
                    break;
                }
                sub.idle(0);
                if !sub.is_connected() {
                    return Err(BenchError::Child("the pong side went away".into()));
                }
            }
            let t1 = clock.now();
            sub.idle(1);
            if echoed != Some((i, cfg.size)) {
                return Err(BenchError::Child(format!(
                    "ping {i} of {} bytes was echoed as {echoed:?}",
                    cfg.size
                )));
            }
            if i >= cfg.warmup {
                rec.record(clock.ticks_to_ns(t1 - t0) / 2.0);
            }
        }
        Ok(())
    })?;
    result?;
    Ok(rec.summary())
}

/// The pong side: echoes every ping until the ping side closes.
pub fn pong(cfg: &PingPongConfig) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = Context::new();
    let (ping_uri, pong_uri) = uris(cfg);
    let mut publ = ctx.publisher("bench.pong", &pong_uri)?;
    let mut sub = ctx.subscriber("bench.ping", &ping_uri, cfg.idle)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    let start = Instant::now();
    while !sub.is_connected() {
        sub.poll(&mut |_m| {}, 1);
        if start.elapsed() > cfg.connect_timeout {
            return Err(BenchError::Child("the ping side never appeared".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    say_ready();
    let mut failed = None;
    loop {
        let n = sub.poll(
            &mut |m| loop {
                match publ.offer(m.payload) {
                    Ok(_) => break,
                    Err(OfferError::BackPressured) => std::hint::spin_loop(),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            },
            16,
        );
        if let Some(e) = failed {
            return Err(BenchError::Child(format!("echo failed: {e}")));
        }
        if n == 0 && !sub.is_connected() {
            break;
        }
        sub.idle(n);
    }
    say_result(
        &serde_json::json!({ "cpu_s": crate::cpu_seconds_self(), "echoed": sub.counters().messages }),
    );
    Ok(())
}
