//! Handles: the values the C API gives out for contexts, publishers, subscribers, and market
//! data providers and consumers.
//!
//! A handle is not an address. It encodes a slot of a process-wide table, the slot's generation
//! and the object's kind: `generation << 32 | index << 3 | kind`. Every call decodes it and
//! checks all three before touching the object, so a handle that was freed (or freed twice),
//! one of another kind, or any other value gives `PG_ERROR_BAD_HANDLE` instead of a crash.
//!
//! Hand-written rather than a crate's slab: the lookup is on the path of every `offer` and
//! `poll`, and here it is three loads from lines only the calling thread writes, with no lock
//! and no read-modify-write. Creation and freeing take a mutex.
//!
//! Invariants:
//! 1. A slot's `object` is non-null exactly while a live object owns the slot, and its `tag`
//!    then holds `generation << 32 | kind << 1 | poisoned`. The generation changes (under
//!    `ALLOC`) every time the slot is freed, before the slot is reused, so a handle of an
//!    earlier generation never matches again (until the 32-bit generation wraps: 4 billion
//!    frees of one slot). One load and one comparison check a handle's generation and kind
//!    and that the object is not poisoned.
//! 2. Chunks of slots are allocated once and never freed: a pointer read from `TABLE` stays
//!    valid for the life of the process.
//! 3. The object behind a live slot is used by one thread at a time (the caller's promise in
//!    the header); freeing it while another thread uses it is the caller's error, as for any
//!    C library.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the handle encoding needs 64-bit pointers");

/// The kinds of objects, in the three low bits of a handle (never 0: no handle is NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Context = 1,
    Publisher = 2,
    Subscriber = 3,
    MdProvider = 4,
    MdConsumer = 5,
    FailoverSubscriber = 6,
    // (7 is the last kind three bits hold: another needs KIND_BITS raised.)
    MergingSubscriber = 7,
}

/// Bits of a handle that hold its kind.
const KIND_BITS: u32 = 3;

const CHUNK_SLOTS: usize = 1024;
const CHUNKS: usize = 4096;
/// Handles alive at once, at most.
pub(crate) const MAX_HANDLES: usize = CHUNK_SLOTS * CHUNKS;

#[derive(Debug)]
struct Slot {
    /// `generation << 32 | kind << 1 | poisoned` (invariant 1). Poisoned: an internal error (a
    /// caught panic) left the object in an unknown state, and every later call but the free
    /// fails.
    tag: AtomicU64,
    object: AtomicPtr<()>,
}

const POISONED: u64 = 1;

/// The tag of a live, unpoisoned object of `kind` in a slot of `generation`.
fn tag(generation: u32, kind: Kind) -> u64 {
    (generation as u64) << 32 | (kind as u64) << 1
}

static TABLE: [AtomicPtr<Slot>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

#[derive(Debug)]
struct Alloc {
    /// Slots never used yet start here.
    next: usize,
    free: Vec<usize>,
}

static ALLOC: Mutex<Alloc> = Mutex::new(Alloc {
    next: 0,
    free: Vec::new(),
});

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandleError {
    Null,
    /// Not a handle of this kind that is alive.
    Bad,
    Poisoned,
    /// Every slot is taken.
    Full,
}

fn slot(index: usize) -> Option<&'static Slot> {
    let chunk = TABLE.get(index / CHUNK_SLOTS)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: a non-null chunk pointer points to CHUNK_SLOTS initialised slots that are never
    // freed (invariant 2), and `index % CHUNK_SLOTS` is within them.
    Some(unsafe { &*chunk.add(index % CHUNK_SLOTS) })
}

/// The slot a handle names and the tag it expects there.
fn decode(handle: usize, kind: Kind) -> Result<(&'static Slot, u64), HandleError> {
    if handle == 0 {
        return Err(HandleError::Null);
    }
    let h = handle as u64;
    if (h & ((1 << KIND_BITS) - 1)) as u8 != kind as u8 {
        return Err(HandleError::Bad);
    }
    let index = ((h & 0xffff_ffff) >> KIND_BITS) as usize;
    let generation = (h >> 32) as u32;
    let slot = slot(index).ok_or(HandleError::Bad)?;
    Ok((slot, tag(generation, kind)))
}

/// Moves `object` into a free slot; returns its handle.
pub(crate) fn insert<T>(kind: Kind, object: Box<T>) -> Result<usize, HandleError> {
    let mut alloc = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let index = match alloc.free.pop() {
        Some(i) => i,
        None => {
            if alloc.next >= MAX_HANDLES {
                return Err(HandleError::Full);
            }
            let i = alloc.next;
            if i % CHUNK_SLOTS == 0 {
                let chunk: Box<[Slot]> = (0..CHUNK_SLOTS)
                    .map(|_| Slot {
                        // Generation 1, no kind: matches no handle.
                        tag: AtomicU64::new(1 << 32),
                        object: AtomicPtr::new(std::ptr::null_mut()),
                    })
                    .collect();
                // Leaked on purpose: chunks live as long as the process (invariant 2).
                TABLE[i / CHUNK_SLOTS].store(Box::leak(chunk).as_mut_ptr(), Ordering::Release);
            }
            alloc.next += 1;
            i
        }
    };
    let slot = slot(index).expect("allocated above");
    let generation = (slot.tag.load(Ordering::Relaxed) >> 32) as u32;
    slot.object
        .store(Box::into_raw(object).cast(), Ordering::Relaxed);
    // Release: a thread that sees the tag sees the object.
    slot.tag.store(tag(generation, kind), Ordering::Release);
    Ok(((generation as u64) << 32 | (index as u64) << KIND_BITS | kind as u64) as usize)
}

/// The live object of `kind` behind `handle`.
///
/// # Safety
/// `T` must be the type inserted with `kind`, and the caller must not hold another reference
/// to the same object (invariant 3).
#[inline]
pub(crate) unsafe fn get<'a, T>(handle: usize, kind: Kind) -> Result<&'a mut T, HandleError> {
    let (slot, expected) = decode(handle, kind)?;
    let found = slot.tag.load(Ordering::Acquire);
    if found != expected {
        return Err(if found == expected | POISONED {
            HandleError::Poisoned
        } else {
            HandleError::Bad
        });
    }
    let object = slot.object.load(Ordering::Relaxed);
    if object.is_null() {
        return Err(HandleError::Bad);
    }
    // SAFETY: a non-null object of a slot whose tag matches is a live Box<T> of that kind
    // (invariant 1; the caller vouches for T), used by this thread alone.
    Ok(unsafe { &mut *object.cast::<T>() })
}

/// Marks the object behind `handle` as left in an unknown state by an internal error.
pub(crate) fn poison(handle: usize, kind: Kind) {
    if let Ok((slot, expected)) = decode(handle, kind) {
        let _ = slot.tag.compare_exchange(
            expected,
            expected | POISONED,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Takes the object out of its slot and frees the slot; the handle is dead from now on.
///
/// # Safety
/// `T` must be the type inserted with `kind`, and no other thread may be using the object.
pub(crate) unsafe fn remove<T>(handle: usize, kind: Kind) -> Result<Box<T>, HandleError> {
    let (slot, expected) = decode(handle, kind)?;
    let index = ((handle as u64 & 0xffff_ffff) >> KIND_BITS) as usize;
    let mut alloc = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    // A poisoned object can be freed.
    if slot.tag.load(Ordering::Acquire) & !POISONED != expected {
        return Err(HandleError::Bad);
    }
    let object = slot.object.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if object.is_null() {
        return Err(HandleError::Bad);
    }
    let generation = (expected >> 32) as u32;
    // The next generation, no kind: matches no handle until the slot is given out again.
    slot.tag.store(
        (generation.wrapping_add(1).max(1) as u64) << 32,
        Ordering::Release,
    );
    alloc.free.push(index);
    drop(alloc);
    // SAFETY: the object was a Box<T> (invariant 1; the caller vouches for T), and it is out of
    // the table now, so nobody else frees it.
    Ok(unsafe { Box::from_raw(object.cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_handle_is_refused_and_its_slot_gets_a_new_generation() {
        let h = insert(Kind::Publisher, Box::new(7u64)).unwrap();
        // SAFETY: inserted as a u64 publisher just above; used by this thread only.
        let live = unsafe { get::<u64>(h, Kind::Publisher) }.map(|v| *v);
        assert_eq!(live, Ok(7));
        // SAFETY: refused before anything is dereferenced (wrong kind).
        let wrong_kind = unsafe { get::<u64>(h, Kind::Subscriber) }.map(|v| *v);
        assert_eq!(wrong_kind, Err(HandleError::Bad));
        // SAFETY: as above.
        let removed = unsafe { remove::<u64>(h, Kind::Publisher) }.map(|v| *v);
        assert_eq!(removed, Ok(7));
        // SAFETY: refused: the slot's generation moved on.
        let stale = unsafe { get::<u64>(h, Kind::Publisher) }.map(|v| *v);
        assert_eq!(stale, Err(HandleError::Bad));
        // SAFETY: as above.
        let twice = unsafe { remove::<u64>(h, Kind::Publisher) }.map(|v| *v);
        assert_eq!(twice, Err(HandleError::Bad));
        let again = insert(Kind::Publisher, Box::new(8u64)).unwrap();
        assert_ne!(again, h, "a reused slot has a new generation");
        // SAFETY: refused: stale generation.
        let stale = unsafe { get::<u64>(h, Kind::Publisher) }.map(|v| *v);
        assert!(stale.is_err());
        // SAFETY: inserted just above as a u64 publisher.
        let removed = unsafe { remove::<u64>(again, Kind::Publisher) }.map(|v| *v);
        assert_eq!(removed, Ok(8));
    }

    #[test]
    fn any_value_is_refused_without_a_crash() {
        for h in [
            1usize,
            2,
            3,
            4,
            0xdead_beef,
            usize::MAX,
            1 << 40 | 2,
            0x1_0000_0ffe,
        ] {
            // SAFETY: none of these is a live handle: refused before anything is dereferenced.
            let r = unsafe { get::<u64>(h, Kind::Publisher) }.map(|v| *v);
            assert!(r.is_err(), "{h:#x}");
        }
        // SAFETY: NULL is refused as such.
        let null = unsafe { get::<u64>(0, Kind::Context) }.map(|v| *v);
        assert_eq!(null, Err(HandleError::Null));
    }

    #[test]
    fn a_poisoned_handle_is_refused_until_freed() {
        let h = insert(Kind::Context, Box::new(1u8)).unwrap();
        poison(h, Kind::Context);
        // SAFETY: inserted as a u8 context above.
        let poisoned = unsafe { get::<u8>(h, Kind::Context) }.map(|v| *v);
        assert_eq!(poisoned, Err(HandleError::Poisoned));
        // SAFETY: as above.
        let removed = unsafe { remove::<u8>(h, Kind::Context) }.map(|v| *v);
        assert_eq!(removed, Ok(1));
    }
}
