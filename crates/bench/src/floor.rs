//! The machine's floor: one cache line bounced between two processes on two cores.
//!
//! The ping side writes an odd number into a shared 64-bit word and spins until the pong side
//! answers with the next even number; half the round trip is one cache-line transfer, the least
//! any shared-memory transport can cost. Every other latency is reported as a ratio to it.
#![allow(unsafe_code)]

use crate::clock::Clock;
use crate::helper::{say_ready, say_result, Helper, HelperSpec};
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use peregrine_transport::ipc::dir::PrivateFile;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Settings of a floor run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FloorConfig {
    pub count: u64,
    pub warmup: u64,
    pub cpus: CpuPair,
}

/// The pong side of a floor run: the shared line's name and the CPUs (it runs on `cpus.b`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FloorPong {
    pub name: String,
    pub cpus: CpuPair,
}

/// What the pong side reports at exit.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct FloorPongReport {
    pub cpu_s: f64,
}

const STOP: u64 = u64::MAX;

/// Bytes of the shared file and of its mapping.
const LINE_FILE_LEN: u64 = 4096;

struct Line {
    // Field order: unmapped before the file is closed and its name removed.
    map: memmap2::MmapRaw,
    _file: PrivateFile,
}

impl Line {
    /// Creates (ping side) or opens (pong side) the line `name` in the user's segment
    /// directory, with its checks: owner, mode, no links, length checked on the descriptor.
    fn open(name: &str, create: bool) -> Result<Line, BenchError> {
        let file = if create {
            PrivateFile::create(name, LINE_FILE_LEN)?
        } else {
            PrivateFile::open(name, LINE_FILE_LEN)?
        };
        let map = memmap2::MmapOptions::new()
            .len(LINE_FILE_LEN as usize)
            .map_raw(&file.file)?;
        Ok(Line { map, _file: file })
    }
    fn word(&self) -> &AtomicU64 {
        let p = self.map.as_mut_ptr();
        debug_assert!(p as usize % 8 == 0);
        // SAFETY: the mapping is LINE_FILE_LEN bytes of a file at least that long (checked on
        // its descriptor; only this user's processes can open it to shrink it), shared, and
        // lives as long as `self`; it is page-aligned, so its first word is 8-byte aligned as
        // `AtomicU64` requires; both processes access the word only atomically.
        unsafe { AtomicU64::from_ptr(p.cast()) }
    }
}

/// Runs the floor: spawns the pong process with `exe`, pins itself, measures.
pub fn run(cfg: &FloorConfig, exe: &Path, clock: &Clock) -> Result<LatencyRecorder, BenchError> {
    let name = crate::run_name("floor");
    let line = Line::open(&name, true)?;
    let helper = Helper::start(
        exe,
        &HelperSpec::FloorPong(FloorPong {
            name,
            cpus: cfg.cpus,
        }),
    )?;
    let word = line.word();
    let mut rec = LatencyRecorder::new();
    with_cpu(cfg.cpus.a, || {
        for i in 0..cfg.warmup + cfg.count {
            let ping = 2 * i + 1;
            let t0 = clock.now();
            word.store(ping, Ordering::Release);
            while word.load(Ordering::Acquire) != ping + 1 {
                std::hint::spin_loop();
            }
            let t1 = clock.now();
            if i >= cfg.warmup {
                rec.record(clock.ticks_to_ns(t1 - t0) / 2.0);
            }
        }
        word.store(STOP, Ordering::Release);
    })?;
    helper.finish::<FloorPongReport>()?;
    Ok(rec)
}

/// The pong side: answers every odd number with the next even one until told to stop.
pub fn pong(p: &FloorPong) -> Result<(), BenchError> {
    let line = Line::open(&p.name, false)?;
    peregrine_agent::pin_to_cpu(p.cpus.b)?;
    say_ready();
    let word = line.word();
    let mut last = 0;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == STOP {
            break;
        }
        if v != last && v & 1 == 1 {
            last = v + 1;
            word.store(last, Ordering::Release);
        }
        std::hint::spin_loop();
    }
    say_result(&FloorPongReport {
        cpu_s: crate::cpu_seconds_self(),
    });
    Ok(())
}

/// Runs `f` with the calling thread pinned to `cpu`, then restores its previous affinity.
pub fn with_cpu<T>(cpu: usize, f: impl FnOnce() -> T) -> Result<T, BenchError> {
    let before = rustix::thread::sched_getaffinity(None).map_err(std::io::Error::from)?;
    peregrine_agent::pin_to_cpu(cpu)?;
    let r = f();
    rustix::thread::sched_setaffinity(None, &before).map_err(std::io::Error::from)?;
    Ok(r)
}
