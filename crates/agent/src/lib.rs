//! Idle strategies, the clock the drivers read, and CPU pinning.
//!
//! A duty-cycle loop (an application's own `poll` loop, or a driver's `do_work`) does a bounded
//! amount of work per pass and reports how much; an [`IdleStrategy`] decides what to do when
//! there was none: spin, yield the CPU, back off with growing pauses, or block until a peer
//! wakes it. The choice trades latency for CPU: on this
//! project's 2-core reference machine a busy-spinning receiver answers in ~0.15 us, a blocked one
//! needs ~30 us to be woken (a hypervisor cost), and uses no CPU while idle.
//!
//! Blocking needs the help of the thing being waited on (a shared-memory segment's futex word,
//! a socket waited on with `poll(2)`): that is the [`Wake`] trait, implemented by transports.
//!
//! ```
//! use peregrine_agent::{Idle, IdleKind, IdleStrategy, NoWake};
//! let mut idle = Idle::new(IdleKind::Backoff);
//! let mut polls = 0;
//! while polls < 10 {
//!     let work = 0; // e.g. subscriber.poll(...)
//!     idle.idle(work, &mut NoWake);
//!     polls += 1;
//! }
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What a [`Blocking`] idle strategy needs from the thing it waits on.
///
/// The protocol closes the lost-wake-up race: `prepare_wait` announces a sleeper (after which
/// every producer commit wakes it), the caller polls once more, and only then `wait` sleeps,
/// returning at once if anything was committed since `prepare_wait`.
pub trait Wake {
    /// Announce that this consumer may sleep soon.
    fn prepare_wait(&mut self);
    /// Sleep until woken by a commit after `prepare_wait`, or until `timeout_ns` passed.
    fn wait(&mut self, timeout_ns: u64);
    /// Withdraw the announcement (work was found).
    fn cancel_wait(&mut self);
}

/// A [`Wake`] with nothing to wait on: `wait` sleeps for the timeout.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWake;

impl Wake for NoWake {
    fn prepare_wait(&mut self) {}
    fn wait(&mut self, timeout_ns: u64) {
        std::thread::sleep(Duration::from_nanos(timeout_ns));
    }
    fn cancel_wait(&mut self) {}
}

/// What to do after a duty cycle, given how much work it did.
pub trait IdleStrategy {
    /// Called after every duty cycle with its work count; idles only when `work_count == 0`.
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, wake: &mut W);
    /// Forget any back-off state.
    fn reset(&mut self);
}

/// Spin with a CPU pause hint: lowest latency, one full core.
#[derive(Debug, Default, Clone, Copy)]
pub struct BusySpin;

impl IdleStrategy for BusySpin {
    #[inline]
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, _wake: &mut W) {
        if work_count == 0 {
            std::hint::spin_loop();
        }
    }
    fn reset(&mut self) {}
}

/// `sched_yield` when idle: lets another runnable thread in, otherwise still a full core.
#[derive(Debug, Default, Clone, Copy)]
pub struct YieldIdle;

impl IdleStrategy for YieldIdle {
    #[inline]
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, _wake: &mut W) {
        if work_count == 0 {
            std::thread::yield_now();
        }
    }
    fn reset(&mut self) {}
}

/// Spin, then yield, then sleep with exponentially growing pauses (Aeron's BackoffIdleStrategy).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub max_spins: u32,
    pub max_yields: u32,
    pub min_park_ns: u64,
    pub max_park_ns: u64,
    spins: u32,
    yields: u32,
    park_ns: u64,
}

impl Backoff {
    pub const fn new(max_spins: u32, max_yields: u32, min_park_ns: u64, max_park_ns: u64) -> Self {
        Backoff {
            max_spins,
            max_yields,
            min_park_ns,
            max_park_ns,
            spins: 0,
            yields: 0,
            park_ns: min_park_ns,
        }
    }
}

impl Default for Backoff {
    /// 10 000 spins, 100 yields, then pauses from 1 us to 1 ms.
    fn default() -> Self {
        Backoff::new(10_000, 100, 1_000, 1_000_000)
    }
}

impl IdleStrategy for Backoff {
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, _wake: &mut W) {
        if work_count > 0 {
            self.reset();
        } else if self.spins < self.max_spins {
            self.spins += 1;
            std::hint::spin_loop();
        } else if self.yields < self.max_yields {
            self.yields += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_nanos(self.park_ns));
            self.park_ns = (self.park_ns * 2).min(self.max_park_ns);
        }
    }
    fn reset(&mut self) {
        self.spins = 0;
        self.yields = 0;
        self.park_ns = self.min_park_ns;
    }
}

/// Block on the [`Wake`] source: no CPU while idle, a wake-up costs a futex or `poll(2)` round
/// (about 30 us across cores on a KVM guest).
#[derive(Debug, Clone, Copy)]
pub struct Blocking {
    /// Longest single sleep; the caller gets control back at least this often (for liveness
    /// checks such as a dead publisher).
    pub max_wait_ns: u64,
    armed: bool,
}

impl Blocking {
    pub const fn new(max_wait_ns: u64) -> Self {
        Blocking {
            max_wait_ns,
            armed: false,
        }
    }
}

impl Default for Blocking {
    /// Sleeps at most 100 ms at a time.
    fn default() -> Self {
        Blocking::new(100_000_000)
    }
}

impl IdleStrategy for Blocking {
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, wake: &mut W) {
        if work_count > 0 {
            if self.armed {
                wake.cancel_wait();
                self.armed = false;
            }
        } else if !self.armed {
            // First empty cycle: announce, and let the caller poll once more before sleeping.
            wake.prepare_wait();
            self.armed = true;
        } else {
            wake.wait(self.max_wait_ns);
        }
    }
    fn reset(&mut self) {
        self.armed = false;
    }
}

/// The idle strategies by name, for configuration and command lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IdleKind {
    #[default]
    Spin,
    Yield,
    Backoff,
    Block,
}

impl IdleKind {
    pub const ALL: [IdleKind; 4] = [
        IdleKind::Spin,
        IdleKind::Yield,
        IdleKind::Backoff,
        IdleKind::Block,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            IdleKind::Spin => "spin",
            IdleKind::Yield => "yield",
            IdleKind::Backoff => "backoff",
            IdleKind::Block => "block",
        }
    }
}

impl fmt::Display for IdleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An idle strategy name that is not one of `spin`, `yield`, `backoff`, `block`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownIdleKind(pub String);

impl fmt::Display for UnknownIdleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown idle strategy '{}': use one of spin, yield, backoff, block",
            self.0
        )
    }
}
impl std::error::Error for UnknownIdleKind {}

impl FromStr for IdleKind {
    type Err = UnknownIdleKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdleKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownIdleKind(s.to_string()))
    }
}

/// One of the four strategies, chosen at run time (static dispatch through a `match`).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Idle {
    Spin(BusySpin),
    Yield(YieldIdle),
    Backoff(Backoff),
    Block(Blocking),
}

impl Idle {
    pub fn new(kind: IdleKind) -> Self {
        match kind {
            IdleKind::Spin => Idle::Spin(BusySpin),
            IdleKind::Yield => Idle::Yield(YieldIdle),
            IdleKind::Backoff => Idle::Backoff(Backoff::default()),
            IdleKind::Block => Idle::Block(Blocking::default()),
        }
    }
    pub fn kind(&self) -> IdleKind {
        match self {
            Idle::Spin(_) => IdleKind::Spin,
            Idle::Yield(_) => IdleKind::Yield,
            Idle::Backoff(_) => IdleKind::Backoff,
            Idle::Block(_) => IdleKind::Block,
        }
    }
}

impl IdleStrategy for Idle {
    #[inline]
    fn idle<W: Wake + ?Sized>(&mut self, work_count: usize, wake: &mut W) {
        match self {
            Idle::Spin(s) => s.idle(work_count, wake),
            Idle::Yield(s) => s.idle(work_count, wake),
            Idle::Backoff(s) => s.idle(work_count, wake),
            Idle::Block(s) => s.idle(work_count, wake),
        }
    }
    fn reset(&mut self) {
        match self {
            Idle::Spin(s) => s.reset(),
            Idle::Yield(s) => s.reset(),
            Idle::Backoff(s) => s.reset(),
            Idle::Block(s) => s.reset(),
        }
    }
}

/// Reading a socket by busy-polling after data: once data arrives, keep reading without
/// blocking for `busy`, then block again (a wake-up from a blocking read costs tens of
/// microseconds on a VM; a spin costs a core). Each method returns the blocking mode to set on
/// the socket when it changes: `Some(true)` for non-blocking, `Some(false)` for blocking.
#[derive(Debug, Clone)]
pub struct SpinThenBlock {
    busy: std::time::Duration,
    spinning: bool,
    last_data: std::time::Instant,
}

impl SpinThenBlock {
    /// `busy` zero: never spin.
    pub fn new(busy: std::time::Duration) -> SpinThenBlock {
        SpinThenBlock {
            busy,
            spinning: false,
            last_data: std::time::Instant::now(),
        }
    }

    /// Whether the socket is being read without blocking.
    pub fn spinning(&self) -> bool {
        self.spinning
    }

    /// A read returned data.
    pub fn data(&mut self) -> Option<bool> {
        if self.busy.is_zero() {
            return None;
        }
        self.last_data = std::time::Instant::now();
        (!self.spinning).then(|| {
            self.spinning = true;
            true
        })
    }

    /// A non-blocking read found nothing: back to blocking once `busy` has passed since data.
    pub fn nothing(&mut self) -> Option<bool> {
        (self.spinning && self.last_data.elapsed() > self.busy).then(|| {
            self.spinning = false;
            false
        })
    }

    /// Blocking again now, whatever the time (before a write that must not see `WouldBlock`).
    pub fn block(&mut self) -> Option<bool> {
        std::mem::take(&mut self.spinning).then_some(false)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (for drivers; protocol code takes time as an argument).
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("cpu {cpu} out of range"),
        ));
    }
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => vec![],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn spin_then_block_spins_after_data_and_blocks_after_the_busy_time() {
        let mut never = SpinThenBlock::new(std::time::Duration::ZERO);
        assert_eq!(never.data(), None);
        assert!(!never.spinning());
        // A busy time that cannot pass during the test: data switches to non-blocking once.
        let mut s = SpinThenBlock::new(std::time::Duration::from_secs(3600));
        assert_eq!(s.data(), Some(true));
        assert_eq!(s.data(), None, "already non-blocking");
        assert_eq!(s.nothing(), None, "within the busy time");
        assert_eq!(s.block(), Some(false));
        assert_eq!(s.block(), None);
        // One that has passed by the next read: back to blocking.
        let mut s = SpinThenBlock::new(std::time::Duration::from_nanos(1));
        assert_eq!(s.data(), Some(true));
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert_eq!(s.nothing(), Some(false));
        assert!(!s.spinning());
    }

    use super::*;

    #[derive(Default)]
    struct Recorder {
        log: Vec<&'static str>,
    }
    impl Wake for Recorder {
        fn prepare_wait(&mut self) {
            self.log.push("prepare");
        }
        fn wait(&mut self, _timeout_ns: u64) {
            self.log.push("wait");
        }
        fn cancel_wait(&mut self) {
            self.log.push("cancel");
        }
    }

    #[test]
    fn blocking_announces_before_it_sleeps_and_cancels_on_work() {
        let mut b = Blocking::default();
        let mut w = Recorder::default();
        b.idle(0, &mut w);
        b.idle(0, &mut w);
        b.idle(0, &mut w);
        b.idle(3, &mut w);
        b.idle(5, &mut w);
        assert_eq!(w.log, ["prepare", "wait", "wait", "cancel"]);
    }

    #[test]
    fn backoff_spins_then_yields_then_parks_with_growing_pauses() {
        let mut b = Backoff::new(2, 1, 10, 40);
        for _ in 0..3 {
            b.idle(0, &mut NoWake);
        }
        assert_eq!((b.spins, b.yields, b.park_ns), (2, 1, 10));
        b.idle(0, &mut NoWake);
        b.idle(0, &mut NoWake);
        b.idle(0, &mut NoWake);
        assert_eq!(b.park_ns, 40, "pause doubles up to max_park_ns");
        b.idle(1, &mut NoWake);
        assert_eq!(
            (b.spins, b.yields, b.park_ns),
            (0, 0, 10),
            "work resets the back-off"
        );
    }

    #[test]
    fn idle_kind_parses_names_and_rejects_others_with_the_accepted_list() {
        for k in IdleKind::ALL {
            assert_eq!(k.name().parse::<IdleKind>().unwrap(), k);
        }
        let e = "busy".parse::<IdleKind>().unwrap_err().to_string();
        assert!(
            e.contains("'busy'") && e.contains("spin, yield, backoff, block"),
            "{e}"
        );
    }

    #[test]
    fn pinning_to_an_allowed_cpu_succeeds_and_a_huge_one_fails() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        std::thread::spawn(move || {
            pin_to_cpu(cpus[0]).unwrap();
            assert_eq!(allowed_cpus(), vec![cpus[0]]);
            assert!(pin_to_cpu(100_000).is_err());
        })
        .join()
        .unwrap();
    }
}
