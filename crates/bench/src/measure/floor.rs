//! The machine's floor: one cache line bounced between two processes on two cores.
//!
//! The ping side writes an odd number into a shared 64-bit word and spins until the pong side
//! answers with the next even number; half the round trip is one cache-line transfer, the least
//! any shared-memory transport can cost. Every other latency is reported as a ratio to it.
#![allow(unsafe_code)]

use crate::clock::Clock;
use crate::helper::protocol::{say_ready, say_result, Helper, Role};
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use peregrine_transport::ipc::dir::PrivateFile;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Settings of a floor run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FloorConfig {
    pub count: u64,
    pub warmup_count: u64,
    pub cpus: CpuPair,
}

/// The pong side of a floor run: the shared line's name and the CPUs (it runs on `cpus.b`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FloorPong {
    pub name: String,
    pub cpus: CpuPair,
}

impl Role for FloorPong {
    const TAG: &'static str = "floor_pong";
    const WHAT: &'static str = "floor pong";
}

/// What the pong side reports at exit.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct FloorPongReport {
    pub cpu_s: f64,
}

/// The value that ends a floor pong process.
pub(crate) const STOP: u64 = u64::MAX;
/// The value that ends one burst answered inside another benchmark's pong (see [`answer`]).
const LEAVE: u64 = u64::MAX - 1;

/// Bytes of the shared file and of its mapping.
const LINE_FILE_LEN: u64 = 4096;

/// The shared page of a floor: word 0 is the floor's line; the floor under load uses two more
/// lines of the same page ([`crate::measure::load`]), each 128 bytes apart from the others so that no
/// adjacent-line prefetch couples them.
pub(crate) struct Line {
    // Field order: unmapped before the file is closed and its name removed.
    map: memmap2::MmapRaw,
    _file: PrivateFile,
}

impl Line {
    /// Creates (ping side) or opens (pong side) the line `name` in the user's segment
    /// directory, with its checks: owner, mode, no links, length checked on the descriptor.
    pub(crate) fn open(name: &str, create: bool) -> Result<Line, BenchError> {
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

    /// The floor's word.
    pub(crate) fn word(&self) -> &AtomicU64 {
        self.word_at(0)
    }

    /// Word `index` (8 bytes each) of the page.
    pub(crate) fn word_at(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < LINE_FILE_LEN as usize / 8,
            "word {index} is past the page"
        );
        let p = self.map.as_mut_ptr();
        debug_assert!(p as usize % 8 == 0);
        // SAFETY: the mapping is LINE_FILE_LEN bytes of a file at least that long (checked on
        // its descriptor; only this user's processes can open it to shrink it), shared, and
        // lives as long as `self`; it is page-aligned and `index` is within it (asserted), so
        // the word is in bounds and 8-byte aligned as `AtomicU64` requires; every process
        // accesses the page's words only atomically.
        unsafe { AtomicU64::from_ptr(p.add(index * 8).cast()) }
    }
}

/// Runs the floor: spawns the pong process with `exe`, pins itself, measures.
pub fn run(cfg: &FloorConfig, exe: &Path, clock: &Clock) -> Result<LatencyRecorder, BenchError> {
    let name = crate::run_name("floor");
    let line = Line::open(&name, true)?;
    let helper = Helper::start(
        exe,
        &FloorPong {
            name,
            cpus: cfg.cpus,
        },
    )?;
    let mut next = 0;
    let rec = with_cpu(cfg.cpus.a, || {
        let rec = burst(&line, cfg.count, cfg.warmup_count, clock, &mut next, false);
        line.word().store(STOP, Ordering::Release);
        rec
    })?;
    helper.finish::<FloorPongReport>()?;
    Ok(rec)
}

/// The ping side of `warmup + count` cache-line round trips on `line`, recording the last
/// `count` half round trips. `next` numbers the round trips and carries over from one burst
/// to the next on the same line, so the other side never sees a value twice.
///
/// With `two_lines`, the answer comes back on a second line ([`ANSWER_WORD`]) instead of the
/// first: the shape of any two-stream design (a ping log and a pong log), where each side
/// writes one line and spins on the other's.
pub(crate) fn burst(
    line: &Line,
    count: u64,
    warmup: u64,
    clock: &Clock,
    next: &mut u64,
    two_lines: bool,
) -> LatencyRecorder {
    let word = line.word();
    let answer = if two_lines {
        line.word_at(ANSWER_WORD)
    } else {
        word
    };
    let flag = if two_lines { TWO_LINES } else { 0 };
    let mut rec = LatencyRecorder::new();
    for i in 0..warmup + count {
        let ping = (2 * *next + 1) | flag;
        *next += 1;
        let t0 = clock.now();
        word.store(ping, Ordering::Release);
        while answer.load(Ordering::Acquire) != ping + 1 {
            std::hint::spin_loop();
        }
        let t1 = clock.now();
        if i >= warmup {
            rec.record(clock.ticks_to_ns(t1 - t0) / 2.0);
        }
    }
    rec
}

/// The word of the second line a two-line burst is answered on (256 bytes from the first).
pub(crate) const ANSWER_WORD: usize = 32;
/// The flag of a ping to be answered on the second line.
const TWO_LINES: u64 = 1 << 62;

/// Ends a burst answered by [`answer`] inside another benchmark's pong.
pub(crate) fn leave(word: &AtomicU64) {
    word.store(LEAVE, Ordering::Release);
}

/// The pong side: answers every odd number with the next even one (on the second line when
/// the ping asks for two lines) until told to stop ([`STOP`], or [`LEAVE`] when answering a
/// burst inside another pong).
pub(crate) fn answer(line: &Line) {
    let word = line.word();
    let second = line.word_at(ANSWER_WORD);
    let mut last = 0;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == STOP || v == LEAVE {
            break;
        }
        if v != last && v & 1 == 1 {
            if v & TWO_LINES != 0 {
                last = v;
                second.store(v + 1, Ordering::Release);
            } else {
                last = v + 1;
                word.store(last, Ordering::Release);
            }
        }
        std::hint::spin_loop();
    }
}

/// The pong process of a floor run.
pub fn pong(p: &FloorPong) -> Result<(), BenchError> {
    let line = Line::open(&p.name, false)?;
    peregrine_agent::pin_to_cpu(p.cpus.b)?;
    say_ready();
    answer(&line);
    say_result(&FloorPongReport {
        cpu_s: crate::cpu_seconds_self(),
    });
    Ok(())
}

/// Floors that differ by more than this factor are in different machine modes: on this
/// guest the floor flips between about 50 and 280 ns within seconds (docs/benchmarks.md).
pub const FLOOR_MOVED_RATIO: f64 = 1.3;

/// Whether floors measured at two moments are in different machine modes.
pub fn floor_moved(a_ns: f64, b_ns: f64) -> bool {
    let (lo, hi) = if a_ns <= b_ns {
        (a_ns, b_ns)
    } else {
        (b_ns, a_ns)
    };
    lo <= 0.0 || hi / lo > FLOOR_MOVED_RATIO
}

/// A ping-pong's floor of the moment: short floor bursts between blocks of pings, so that
/// each block is compared with the floor measured just before and just after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FloorMoments {
    /// The median of each burst, in order: one before the first block, one after each block.
    pub bursts_ns: Vec<f64>,
    /// The median of each block of pings, in order (`bursts_ns.len() - 1` of them).
    pub blocks_ns: Vec<f64>,
    /// The median of each burst's two-line part (see `floor::burst`), in the same order.
    pub two_line_bursts_ns: Vec<f64>,
}

impl FloorMoments {
    /// The median of the bursts' medians: the run's floor.
    pub fn floor_ns(&self) -> f64 {
        median(&self.bursts_ns)
    }

    /// The median of the two-line parts: the floor of a design with one line each way.
    pub fn two_line_floor_ns(&self) -> f64 {
        median(&self.two_line_bursts_ns)
    }

    /// The largest burst over the smallest.
    pub fn spread(&self) -> f64 {
        let lo = self.bursts_ns.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.bursts_ns.iter().copied().fold(0.0, f64::max);
        if lo > 0.0 && lo.is_finite() {
            hi / lo
        } else {
            f64::INFINITY
        }
    }

    /// Whether the machine changed mode during the run: two bursts differ by more than
    /// [`FLOOR_MOVED_RATIO`].
    pub fn moved(&self) -> bool {
        self.spread() > FLOOR_MOVED_RATIO
    }

    /// Each block's median over the floor of its moment (the mean of the bursts before and
    /// after it), for the blocks whose two bursts agree ([`floor_moved`] is false): a block
    /// whose floor moved is in no one mode, and is left out.
    pub fn same_moment_ratios(&self) -> Vec<f64> {
        self.ratios_to(&self.bursts_ns)
    }

    /// Each block's median over the mean of `floors` before and after it (one per burst), for
    /// the blocks whose one-line bursts agree.
    fn ratios_to(&self, floors: &[f64]) -> Vec<f64> {
        self.blocks_ns
            .iter()
            .zip(self.bursts_ns.windows(2))
            .zip(floors.windows(2))
            .filter(|((_, f), _)| !floor_moved(f[0], f[1]))
            .map(|((b, _), t)| b / ((t[0] + t[1]) / 2.0))
            .collect()
    }

    /// The median of [`same_moment_ratios`](Self::same_moment_ratios), when any block had a
    /// steady floor.
    pub fn median_x_floor(&self) -> Option<f64> {
        median_of_some(&self.same_moment_ratios())
    }

    /// Like [`median_x_floor`](Self::median_x_floor), against the two-line floor of the same
    /// moments (blocks whose one-line floor held).
    pub fn median_x_two_line_floor(&self) -> Option<f64> {
        median_of_some(&self.ratios_to(&self.two_line_bursts_ns))
    }
}

fn median_of_some(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| median(v))
}

/// The median of `v` (the mean of the middle two of an even count); 0 when empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Runs `f` with the calling thread pinned to `cpu`, then restores its previous affinity.
pub fn with_cpu<T>(cpu: usize, f: impl FnOnce() -> T) -> Result<T, BenchError> {
    let before = rustix::thread::sched_getaffinity(None).map_err(std::io::Error::from)?;
    peregrine_agent::pin_to_cpu(cpu)?;
    let r = f();
    rustix::thread::sched_setaffinity(None, &before).map_err(std::io::Error::from)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_compared_with_the_floor_around_it_and_left_out_when_the_floor_moved() {
        let m = FloorMoments {
            // Fast, fast, slow, slow: the second block straddles the flip.
            bursts_ns: vec![50.0, 60.0, 190.0, 180.0],
            blocks_ns: vec![88.0, 150.0, 259.0],
            two_line_bursts_ns: vec![60.0, 60.0, 170.0, 170.0],
        };
        assert_eq!(m.same_moment_ratios(), vec![88.0 / 55.0, 259.0 / 185.0]);
        assert_eq!(
            m.median_x_floor(),
            Some((88.0 / 55.0 + 259.0 / 185.0) / 2.0)
        );
        assert_eq!(
            m.median_x_two_line_floor(),
            Some((88.0 / 60.0 + 259.0 / 170.0) / 2.0)
        );
        assert!(m.moved());
        assert_eq!(m.spread(), 190.0 / 50.0);
        assert_eq!(m.floor_ns(), (60.0 + 180.0) / 2.0);
    }

    #[test]
    fn a_steady_floor_keeps_every_block() {
        let m = FloorMoments {
            bursts_ns: vec![60.0, 65.0, 60.0],
            blocks_ns: vec![100.0, 110.0],
            two_line_bursts_ns: vec![],
        };
        assert!(!m.moved());
        assert_eq!(m.same_moment_ratios().len(), 2);
        assert_eq!(m.median_x_two_line_floor(), None);
        assert!(!floor_moved(60.0, 78.0) && floor_moved(60.0, 78.1) && floor_moved(0.0, 1.0));
    }

    #[test]
    fn no_block_with_a_steady_floor_gives_no_ratio() {
        let m = FloorMoments {
            bursts_ns: vec![50.0, 190.0],
            blocks_ns: vec![120.0],
            two_line_bursts_ns: vec![55.0, 170.0],
        };
        assert_eq!(m.median_x_floor(), None);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
