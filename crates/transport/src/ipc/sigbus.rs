//! Surviving a segment truncated under us: a process-wide `SIGBUS` handler for segment mappings.
//!
//! A file mapping faults with `SIGBUS` (`BUS_ADRERR`) on an access to a page beyond the file's
//! end. Any process that can open a segment read-write can shrink it (`ftruncate`) while others
//! have it mapped, and the next access of the publisher or a subscriber would kill that process
//! without a word. Checking the size before mapping does not help against a truncation after it.
//!
//! So every segment mapping is registered here (`Mapping`), and the handler, on a `SIGBUS`
//! raised by the kernel for an address inside a registered mapping, maps anonymous zero pages
//! over the rest of that mapping (`mmap` with `MAP_FIXED`), so that the access completes (it
//! reads zeros, or writes into a private page), and flags the mapping as *damaged*. The cold
//! paths of the publisher and the subscriber read the flag (a relaxed load of process-local
//! memory) and turn it into an error naming the file: [`OfferError::SegmentDamaged`] and
//! [`SubscriberEvent::SegmentDamaged`]. The hot paths do not change.
//!
//! Any other `SIGBUS` (outside our mappings, another code such as a hardware memory error, or
//! one sent with `kill`) goes to the handler that was installed before ours (Rust's runtime
//! installs one that reports stack overflows), or gets the default action (the process ends
//! with `SIGBUS`), exactly as without this module.
//!
//! ## Async-signal-safety
//!
//! The handler only loads and stores atomics in statics (no locks, no allocation, nothing that
//! another thread could hold), and makes system calls through libc's thin wrappers (`mmap`,
//! `sigaction`, `raise`), which on Linux are one system call each with no user-space state.
//! It saves and restores `errno`. The registry is a fixed array of slots written only outside
//! the handler; a slot is claimed with a compare-and-swap on its start address, made visible
//! by a release store of its end, and released end first, then start, *before* the mapping is
//! unmapped: so the handler can never match an address range that is no longer ours (a
//! mapping reusing the addresses is made only after `munmap` returned).
//!
//! ## What is not covered
//!
//! - A fault inside a system call (`futex`, or `write(2)` from a payload in the log) is not a
//!   signal: the call fails with `EFAULT`. The next access from user space then faults and is
//!   handled as above.
//! - A program that installs its own `SIGBUS` handler after the first segment is mapped, without
//!   chaining to ours, gets the old behaviour back.
//! - If the handler's `mmap` fails (the address space or memory is exhausted), the fault goes to
//!   the previous handler or the default action.
//!
//! [`OfferError::SegmentDamaged`]: crate::OfferError::SegmentDamaged
//! [`SubscriberEvent::SegmentDamaged`]: crate::SubscriberEvent::SegmentDamaged

use std::cell::UnsafeCell;
use std::fs::File;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// How many segment mappings one process can have at once.
pub const MAX_MAPPINGS: usize = 4096;

/// `si_code` of a `SIGBUS` for an access to a nonexistent part of a mapped object (Linux
/// `BUS_ADRERR`; not exported by the libc crate for Linux).
const BUS_ADRERR: libc::c_int = 2;

struct Slot {
    /// First address of the mapping, 0 while the slot is free.
    start: AtomicUsize,
    /// One past the last address (page-aligned), 0 while the slot is being set up or released.
    end: AtomicUsize,
    /// Set by the handler after it mapped zero pages into this mapping.
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the array initialiser of `SLOTS`
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    damaged: AtomicBool::new(false),
};
static SLOTS: [Slot; MAX_MAPPINGS] = [FREE; MAX_MAPPINGS];

/// How many faults the handler turned into zero pages (for tests and diagnostics).
static REPAIRED_FAULTS: AtomicUsize = AtomicUsize::new(0);

/// The `SIGBUS` action that was in place before ours, written once (under `INSTALL`) before
/// `PREVIOUS_SET` is set with release ordering, and only read after it is seen set.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);
// SAFETY: written once, before `PREVIOUS_SET` is published (release), read only after it is
// observed (acquire); never written again.
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));
static PREVIOUS_SET: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);

/// How many faults in segment mappings this process survived.
pub fn repaired_faults() -> usize {
    REPAIRED_FAULTS.load(Ordering::Relaxed)
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf only reads a configuration value.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE_SIZE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: `sigaction` with a zeroed struct filled as documented: our handler has the
        // three-argument form that SA_SIGINFO announces; the previous action is written into
        // PREVIOUS, which nothing reads before PREVIOUS_SET is set below.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let previous = (*PREVIOUS.0.get()).as_mut_ptr();
            if libc::sigaction(libc::SIGBUS, &action, previous) == 0 {
                PREVIOUS_SET.store(true, Ordering::Release);
            }
        }
    });
}

/// A shared read-write mapping of the first `len` bytes of a file, registered with the
/// `SIGBUS` handler for its whole life (it is unregistered before it is unmapped).
#[derive(Debug)]
pub(crate) struct Mapping {
    // Field order matters: the slot is released (Drop of `Registration`) before the mapping
    // is unmapped (Drop of `map`).
    registration: Registration,
    map: memmap2::MmapRaw,
}

#[derive(Debug)]
struct Registration(usize);

impl Drop for Registration {
    fn drop(&mut self) {
        let slot = &SLOTS[self.0];
        slot.end.store(0, Ordering::Release);
        slot.start.store(0, Ordering::Release);
    }
}

impl Mapping {
    /// Maps `len` bytes of `file` (which must be open read-write) and registers the mapping.
    pub fn new(file: &File, len: usize) -> std::io::Result<Mapping> {
        Self::map(file, len, false)
    }

    /// Like [`new`](Self::new), with every page of the mapping faulted in now
    /// (`MAP_POPULATE`), so that the data path never takes a page fault: a reader's first
    /// touch of each page otherwise costs a minor fault of a few microseconds (on the 2-core
    /// test guest, a ping over a 16 MiB log met one every 64 messages of the reflected
    /// stream: about 1.5% of the pings of a load run).
    pub fn populated(file: &File, len: usize) -> std::io::Result<Mapping> {
        Self::map(file, len, true)
    }

    fn map(file: &File, len: usize, populate: bool) -> std::io::Result<Mapping> {
        install();
        let mut options = memmap2::MmapOptions::new();
        options.len(len);
        if populate {
            options.populate();
        }
        let map = options.map_raw(file)?;
        let start = map.as_mut_ptr() as usize;
        let page = PAGE_SIZE.load(Ordering::Relaxed);
        let end = start + len.div_ceil(page) * page;
        let index = SLOTS
            .iter()
            .position(|s| {
                s.start
                    .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "this process already maps {MAX_MAPPINGS} shared-memory segments"
                ))
            })?;
        let slot = &SLOTS[index];
        slot.damaged.store(false, Ordering::Relaxed);
        slot.end.store(end, Ordering::Release);
        Ok(Mapping {
            registration: Registration(index),
            map,
        })
    }

    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True once the handler had to replace pages of this mapping: the file was truncated
    /// under it. A relaxed load of process-local memory.
    #[inline]
    pub fn damaged(&self) -> bool {
        SLOTS[self.registration.0].damaged.load(Ordering::Relaxed)
    }
}

/// The handler. See the module documentation for why each step is async-signal-safe.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: `__errno_location` returns this thread's errno; saved here, restored below, so
    // the interrupted code does not see the handler's system calls.
    let errno = unsafe { *libc::__errno_location() };
    let mut fault = None;
    if !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; `si_addr` is the
        // faulting address for the SIGBUS codes the kernel raises for a fault (BUS_ADRERR).
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        if code == BUS_ADRERR {
            fault = Some(addr);
        }
    }
    if let Some(addr) = fault {
        if repair(addr) {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return;
        }
    }
    // SAFETY: not ours: hand the signal to the previous action, as if we were not installed.
    unsafe { chain(sig, info, context) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Maps zero pages from the page of `addr` to the end of the registered mapping holding it,
/// and flags that mapping damaged. False when `addr` is in none of ours, or `mmap` failed.
fn repair(addr: usize) -> bool {
    let page = PAGE_SIZE.load(Ordering::Relaxed);
    for slot in &SLOTS {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start {
            continue;
        }
        let end = slot.end.load(Ordering::Acquire);
        if addr >= end {
            continue;
        }
        let from = addr & !(page - 1);
        // SAFETY: [from, end) lies inside a mapping that is ours and still mapped (it is
        // unregistered before it is unmapped, and the faulting thread is using it); replacing
        // its pages with private zero pages is what the handler is for: no Rust object other
        // than the mapping's own bytes lives there. `mmap` is a single system call.
        let p = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                end - from,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        slot.damaged.store(true, Ordering::Relaxed);
        REPAIRED_FAULTS.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    false
}

/// Passes a signal that is not ours to the action installed before ours.
///
/// # Safety
/// Only from the signal handler, with the arguments it received.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    if PREVIOUS_SET.load(Ordering::Acquire) {
        // SAFETY: written before PREVIOUS_SET was published, never written again.
        let previous = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
        let handler = previous.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: SA_SIGINFO says the previous handler has the three-argument form.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, context);
            } else {
                // SAFETY: without SA_SIGINFO the handler has the one-argument form.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // The default action (a SIGBUS cannot usefully be ignored): restore it, then let the
    // signal take effect. A fault raised by the kernel happens again when the instruction is
    // re-executed on return; a signal sent by a process is raised again (it stays pending
    // while this handler runs, and ends the process when it returns).
    // SAFETY: `sigaction` and `raise` are async-signal-safe; the struct is zeroed (SIG_DFL).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        let from_kernel = !info.is_null() && (*info).si_code > 0;
        if !from_kernel {
            libc::raise(libc::SIGBUS);
        }
    }
}
