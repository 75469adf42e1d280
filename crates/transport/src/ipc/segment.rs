//! Creating, opening, validating and reclaiming shared-memory segments.
//!
//! A segment is a file `NAME` in the user's segment directory (`/dev/shm/peregrine-UID/`, mode
//! 0700, see [`dir`](super::dir); `$PEREGRINE_SHM_DIR` replaces `/dev/shm`), mode 0600, mapped
//! shared by the publisher and its subscribers. Only the user's own processes (and root) can
//! open it. They can always write the shared memory they map: a process of the same user can
//! corrupt what its subscribers read, or stop its publisher; Peregrine only makes sure that it
//! cannot crash them or make them read outside the segment (every field read from a segment is
//! checked before use, and a truncation is survived, see [`sigbus`](super::sigbus)).
//!
//! The publisher holds an exclusive `flock` on its segment for as long as it lives; the kernel
//! drops the lock when the process dies, however it dies. So:
//! - a new publisher that can take a *shared* lock of an existing segment knows its owner is
//!   dead, and replaces it atomically (`rename` of a fully initialised file over the old name);
//!   creators take turns (an exclusive `flock` on the segment directory, which only its owner
//!   can open), so no two reclaim at once;
//! - every creation also removes the other segments of the directory whose owner died (and the
//!   leftovers of creations that died half-way), after marking them closed: a subscriber still
//!   reading one keeps its mapping, drains it and detaches;
//! - a subscriber that can take a shared lock knows the publisher is gone (and a reclaim in
//!   progress, holding only a shared lock, does not make a dead segment look alive).
//!
//! A segment only becomes visible under its name once it is completely initialised (it is built
//! under a temporary name and then `link`ed or `rename`d into place), so an opener never sees a
//! half-written descriptor. Sizes are checked on the open descriptor (`fstat`) before anything
//! is mapped, and only the checked length is mapped.

use super::dir::{validate_name, DirSpec, SegmentDir, TEMP_PREFIX};
use super::layout::*;
use super::sigbus::Mapping;
use super::SlowSubscriberPolicy;
use crate::error::OpenError;
use rustix::fs::{flock, FlockOperation};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The segment directory of this user: `$PEREGRINE_SHM_DIR` (or `/dev/shm`) +
/// `/peregrine-UID`, created if missing, checked (owner, mode 0700, not a link).
pub fn shm_dir() -> Result<PathBuf, OpenError> {
    Ok(SegmentDir::open(&DirSpec::default())?.path().to_path_buf())
}

/// What a publisher asks for when it creates a segment.
#[derive(Debug, Clone)]
pub(crate) struct SegmentSpec {
    pub name: String,
    pub capacity: u64,
    pub max_subscribers: u32,
    pub policy: SlowSubscriberPolicy,
    pub session_id: u32,
    pub stream_id: u32,
    pub topic: String,
    pub dir: DirSpec,
    /// 0 for a session's first log, one more for each successor (layout invariant 6).
    pub generation: u32,
    /// The sequence of the log's first message (its tail's sequence at creation).
    pub first_sequence: u64,
}

/// What creating a segment found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Created {
    /// A dead publisher's segment (or any file not held by a live publisher) was under the
    /// name and was replaced.
    pub replaced_stale: bool,
    /// Other files of the directory removed because their owner died.
    pub removed_stale: usize,
}

/// A mapped segment. All access to shared memory goes through the accessors below, which check
/// bounds and alignment, so the rest of the crate needs no pointer arithmetic of its own.
///
/// Crate-private: the publisher and its subscribers rely on the protocol of [`layout`] (a
/// subscriber in back-pressure mode hands out `&[u8]` into the log), so no code outside this
/// crate may write the segment's words.
///
/// The descriptor's values are read once, checked, and kept here: nothing re-reads them from
/// shared memory, where another process could have changed them since.
///
/// [`layout`]: super::layout
#[derive(Debug)]
pub(crate) struct Segment {
    map: Mapping,
    file: File,
    dir: SegmentDir,
    name: String,
    path: PathBuf,
    pub(crate) log_offset: usize,
    pub(crate) capacity: u64,
    pub(crate) max_subscribers: u32,
    pub(crate) max_message: u32,
    pub(crate) policy: SlowSubscriberPolicy,
    pub(crate) session_id: u32,
    pub(crate) generation: u32,
    pub(crate) first_sequence: u64,
}

impl Segment {
    pub fn path(&self) -> &Path {
        &self.path
    }

    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// True once the file was truncated under this mapping (see [`sigbus`](super::sigbus)): a
    /// relaxed load of process-local memory, for cold paths.
    #[inline]
    pub fn damaged(&self) -> bool {
        self.map.damaged()
    }

    /// A 64-bit atomic at byte `offset` of the segment.
    #[inline]
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: in bounds and 8-byte aligned (the mapping is page-aligned), checked above; the
        // memory lives as long as `self`; every process accesses these words only atomically.
        unsafe { AtomicU64::from_ptr(self.base().add(offset).cast()) }
    }

    /// The 64-bit atomic at byte `OFFSET` of the segment's header page, where the publisher's
    /// per-message words are (the claim position, the tail seqlock): as [`u64_at`](Self::u64_at)
    /// without its bounds check, which the constant offset makes a compile-time one.
    #[inline(always)]
    pub fn header_u64<const OFFSET: usize>(&self) -> &AtomicU64 {
        const { assert!(OFFSET % 8 == 0 && OFFSET + 8 <= SLOTS) };
        debug_assert!(SLOTS <= self.map.len());
        // SAFETY: every mapping covers `log_offset + capacity` bytes (checked when the segment
        // was created or opened) and `log_offset >= SLOTS`, so the header page is in bounds;
        // `OFFSET` is 8-byte aligned (asserted at compile time) in a page-aligned mapping; the
        // memory lives as long as `self`; every process accesses these words only atomically.
        unsafe { AtomicU64::from_ptr(self.base().add(OFFSET).cast()) }
    }

    /// [`header_u64`](Self::header_u64) for a 32-bit atomic.
    #[inline(always)]
    pub fn header_u32<const OFFSET: usize>(&self) -> &AtomicU32 {
        const { assert!(OFFSET % 4 == 0 && OFFSET + 4 <= SLOTS) };
        debug_assert!(SLOTS <= self.map.len());
        // SAFETY: as in `header_u64`, for a 4-byte aligned word.
        unsafe { AtomicU32::from_ptr(self.base().add(OFFSET).cast()) }
    }

    /// A 32-bit atomic at byte `offset` of the segment.
    #[inline]
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.map.len());
        // SAFETY: as in `u64_at`, for a 4-byte aligned word.
        unsafe { AtomicU32::from_ptr(self.base().add(offset).cast()) }
    }

    /// Pointer to the start of the log and its capacity. The log is page-aligned (the mapping
    /// is, and `log_offset` is a multiple of [`PAGE`]), so every line and every commit word in
    /// it is aligned as its offset is.
    #[inline]
    pub fn log(&self) -> (*mut u8, u64) {
        debug_assert!(self.log_offset % PAGE == 0);
        debug_assert!(self.log_offset as u64 + self.capacity <= self.map.len() as u64);
        // SAFETY: `log_offset + capacity <= map.len()` was checked when the segment was
        // created or opened (the mapping is exactly the checked length).
        (unsafe { self.base().add(self.log_offset) }, self.capacity)
    }

    /// Offset of slot `index`, which must be below `max_subscribers` (the checked value).
    pub fn slot_offset(&self, index: u32) -> usize {
        assert!(index < self.max_subscribers);
        SLOTS + index as usize * SLOT_SIZE
    }

    fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.map.len());
        let mut v = vec![0u8; len];
        // SAFETY: in bounds (checked); the topic area is written before the segment is linked
        // into place and never again by its publisher (another process that changes it only
        // changes the bytes we copy).
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(offset), v.as_mut_ptr(), len) };
        v
    }

    pub fn topic(&self) -> String {
        let len = (self.u32_at(TOPIC_LEN).load(Ordering::Relaxed) as usize).min(MAX_TOPIC_LEN);
        String::from_utf8_lossy(&self.read_bytes(TOPIC, len)).into_owned()
    }

    pub fn policy(&self) -> SlowSubscriberPolicy {
        self.policy
    }

    /// True while some process (the publisher) holds the exclusive lock.
    pub fn publisher_alive(&self) -> bool {
        held_exclusively(&self.file)
    }

    /// Creates segment `spec.name`, replacing a segment whose publisher died, and removes the
    /// other dead publishers' segments of the directory. Fails with [`OpenError::InUse`] when
    /// a live publisher owns the name.
    pub fn create(spec: &SegmentSpec) -> Result<(Segment, Created), OpenError> {
        validate_name(&spec.name).map_err(OpenError::InvalidName)?;
        let dir = SegmentDir::open(&spec.dir)?;
        let path = dir.file_path(&spec.name);
        let io_err = |op: &'static str, p: &Path, e: io::Error| OpenError::Io {
            op,
            path: p.to_path_buf(),
            source: e,
        };
        // Creators take turns, for the few system calls of a creation (the lock goes with
        // `_turn`). A reclaim is then never raced by another, so it can test the old owner
        // with a *shared* lock: a subscriber testing the same file at the same moment still
        // finds it as dead as it is. (An exclusive lock there is indistinguishable from a
        // live publisher's: a subscriber would attach to the dead segment just before it is
        // marked closed and replaced, and end without a message.)
        let _turn = dir.turn()?;
        let mut created = Created {
            removed_stale: remove_dead(&dir, &spec.name),
            ..Created::default()
        };
        for _attempt in 0..8 {
            // 1. Is there something under this name, and is it a live publisher's segment?
            //    Anything else (a dead publisher's segment, an empty or foreign file, a link)
            //    is replaced.
            let stale = match dir.open_segment(&spec.name) {
                Ok(Some(f)) => {
                    if held_exclusively(&f) {
                        return Err(OpenError::InUse {
                            name: spec.name.clone(),
                            pid: peek_pid(&f),
                        });
                    }
                    // No exclusive lock: its owner is dead, and no other creator can act now.
                    // Mark it closed, so subscribers still attached to it learn it has ended.
                    mark_closed(&f);
                    true
                }
                Ok(None) => false,
                Err(OpenError::Refused { .. }) => true,
                Err(e) => return Err(e),
            };
            // 2. Build the new segment under a private name.
            let (seg, tmp) = Segment::build(&dir, spec, &path)?;
            let cleanup = |e: OpenError| {
                let _ = dir.unlink(&tmp);
                e
            };
            // 3. Make it visible, atomically.
            let published = if stale {
                dir.rename(&tmp, &spec.name).map(|_| true)
            } else {
                match dir.link(&tmp, &spec.name) {
                    Ok(()) => {
                        let _ = dir.unlink(&tmp);
                        Ok(true)
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let _ = dir.unlink(&tmp);
                        Ok(false) // something appeared under the name meanwhile: look again
                    }
                    Err(e) => Err(e),
                }
            };
            match published {
                Ok(true) => {
                    created.replaced_stale = stale;
                    return Ok((seg, created));
                }
                Ok(false) => continue,
                Err(e) => return Err(cleanup(io_err("rename", &path, e))),
            }
        }
        Err(OpenError::InUse {
            name: spec.name.clone(),
            pid: None,
        })
    }

    /// Builds and initialises a segment for `spec` under a temporary name of `dir` (returned
    /// with it), exclusively locked; `path` is where it will be published.
    fn build(
        dir: &SegmentDir,
        spec: &SegmentSpec,
        path: &Path,
    ) -> Result<(Segment, String), OpenError> {
        let io_err = |op: &'static str, p: &Path, e: io::Error| OpenError::Io {
            op,
            path: p.to_path_buf(),
            source: e,
        };
        let (file, tmp) = dir.create_temp(&spec.name)?;
        let tmp_path = dir.file_path(&tmp);
        let cleanup = |e: OpenError| {
            let _ = dir.unlink(&tmp);
            e
        };
        let log_offset = log_offset(spec.max_subscribers);
        let total = log_offset as u64 + spec.capacity;
        file.set_len(total)
            .map_err(|e| cleanup(io_err("resize", &tmp_path, e)))?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| cleanup(io_err("lock", &tmp_path, e.into())))?;
        let map = Mapping::new(&file, total as usize)
            .map_err(|e| cleanup(io_err("map", &tmp_path, e)))?;
        let seg = Segment {
            map,
            file,
            dir: dir
                .try_clone()
                .map_err(|e| cleanup(io_err("dup", dir.path(), e)))?,
            name: spec.name.clone(),
            path: path.to_path_buf(),
            log_offset,
            capacity: spec.capacity,
            max_subscribers: spec.max_subscribers,
            max_message: max_message_for(spec.capacity) as u32,
            policy: spec.policy,
            session_id: spec.session_id,
            generation: spec.generation,
            first_sequence: spec.first_sequence,
        };
        seg.init(spec);
        Ok((seg, tmp))
    }

    /// Creates the successor of `self`, this process's own live segment (layout invariant 6):
    /// a segment for `spec` (the same name and session, the next generation) that `prepare`
    /// fills in (the reserved slots) before it replaces `self` under the name, atomically.
    /// `self` is left as it was: the caller then marks it closed, naming its successor.
    pub fn create_successor(
        &self,
        spec: &SegmentSpec,
        prepare: impl FnOnce(&Segment),
    ) -> Result<Segment, OpenError> {
        debug_assert_eq!(spec.name, self.name);
        // One try: a creation takes milliseconds, and this runs on the publisher's data path.
        let _turn = self.dir.turn_within(0)?;
        let (seg, tmp) = Segment::build(&self.dir, spec, &self.path)?;
        prepare(&seg);
        self.dir.rename(&tmp, &spec.name).map_err(|e| {
            let _ = self.dir.unlink(&tmp);
            OpenError::Io {
                op: "rename",
                path: self.path.clone(),
                source: e,
            }
        })?;
        Ok(seg)
    }

    fn init(&self, spec: &SegmentSpec) {
        let r = Ordering::Relaxed;
        self.u32_at(VERSION).store(LAYOUT_VERSION, r);
        self.u32_at(LOG_OFFSET).store(self.log_offset as u32, r);
        self.u64_at(CAPACITY).store(spec.capacity, r);
        self.u32_at(MAX_MESSAGE).store(self.max_message, r);
        self.u32_at(POLICY).store(spec.policy.code(), r);
        self.u32_at(SESSION_ID).store(spec.session_id, r);
        self.u32_at(STREAM_ID).store(spec.stream_id, r);
        self.u32_at(PUBLISHER_PID).store(std::process::id(), r);
        self.u32_at(MAX_SUBSCRIBERS).store(spec.max_subscribers, r);
        self.u64_at(PUBLISHER_START_TICKS)
            .store(process_start_ticks(std::process::id()).unwrap_or(0), r);
        let topic = spec.topic.as_bytes();
        assert!(topic.len() <= MAX_TOPIC_LEN);
        // SAFETY: the topic area [TOPIC, TOPIC + MAX_TOPIC_LEN) lies in the first page; nobody
        // else has this file yet (it is not linked under its name).
        unsafe {
            std::ptr::copy_nonoverlapping(topic.as_ptr(), self.base().add(TOPIC), topic.len())
        };
        self.u32_at(TOPIC_LEN).store(topic.len() as u32, r);
        self.u32_at(GENERATION).store(spec.generation, r);
        self.u64_at(FIRST_SEQUENCE).store(spec.first_sequence, r);
        let (log, capacity) = self.log();
        // Invariant 2 of `layout`: every line starts uncommitted. This also faults in every page
        // of the log now rather than on the data path.
        for line in (0..capacity as usize).step_by(FRAME_ALIGN) {
            // SAFETY: `line + COMMIT_WORD` is in bounds and 8-byte aligned (the log is
            // page-aligned, lines are FRAME_ALIGN bytes); nobody else maps the file yet.
            unsafe { AtomicU64::from_ptr(log.add(line + COMMIT_WORD).cast()) }
                .store(UNCOMMITTED, r);
        }
        self.u64_at(TAIL_POSITION).store(0, r);
        self.u64_at(TAIL_SEQUENCE).store(spec.first_sequence, r);
        self.u64_at(MAGIC).store(SEGMENT_MAGIC, Ordering::Release);
    }

    /// Opens segment `name` for a subscriber. `Ok(None)` when there is no segment under the
    /// name yet, or only one whose publisher is gone. Every descriptor field is checked here,
    /// on a copy read once, before anything depends on it.
    pub fn open(name: &str, spec: &DirSpec) -> Result<Option<Segment>, OpenError> {
        validate_name(name).map_err(OpenError::InvalidName)?;
        let dir = SegmentDir::open(spec)?;
        let path = dir.file_path(name);
        let io_err = |op: &'static str, e: io::Error| OpenError::Io {
            op,
            path: path.clone(),
            source: e,
        };
        let Some(file) = dir.open_segment(name)? else {
            return Ok(None);
        };
        let bad = |what: String| OpenError::Incompatible {
            path: path.clone(),
            what,
        };
        // The descriptor, read from the descriptor of the file (no mapping yet).
        let size = file.metadata().map_err(|e| io_err("stat", e))?.len();
        if size < PAGE as u64 {
            return Err(bad(format!(
                "file is {size} bytes, smaller than a segment descriptor"
            )));
        }
        let mut head = [0u8; DESCRIPTOR_LEN];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| io_err("read", e))?;
        let d = Descriptor::parse(&head);
        d.check(size).map_err(bad)?;
        let log_off = log_offset(d.max_subscribers);
        // Populated: a subscriber reads each page of the log for the first time on the data
        // path otherwise. (The publisher faults its pages in when it cleans the log.)
        let map = Mapping::populated(&file, log_off + d.capacity as usize)
            .map_err(|e| io_err("map", e))?;
        let seg = Segment {
            map,
            file,
            dir,
            name: name.to_string(),
            path: path.clone(),
            log_offset: log_off,
            capacity: d.capacity,
            max_subscribers: d.max_subscribers,
            max_message: d.max_message,
            policy: d.policy,
            session_id: d.session_id,
            generation: d.generation,
            first_sequence: d.first_sequence,
        };
        if seg.damaged() {
            return Err(bad(
                "the file was truncated while it was being opened".into()
            ));
        }
        if seg.u32_at(CLOSED).load(Ordering::Acquire) != 0 || !seg.publisher_alive() {
            return Ok(None);
        }
        Ok(Some(seg))
    }

    /// How long ago the segment was created: since its file's last status change, which is
    /// the `rename` that published it (on tmpfs, writes through the mapping do not change
    /// it). `None` if that cannot be read or lies in the future.
    pub fn age_ns(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata().ok()?;
        let changed_ns =
            u64::try_from(m.ctime()).ok()? * 1_000_000_000 + u64::try_from(m.ctime_nsec()).ok()?;
        let now_ns = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_nanos(),
        )
        .ok()?;
        now_ns.checked_sub(changed_ns)
    }

    #[cfg(test)]
    pub(crate) fn release_lock_for_tests(&self) {
        let _ = flock(&self.file, FlockOperation::Unlock);
    }

    /// Removes the name if it still refers to this segment (a newer publisher may own it).
    pub fn unlink_if_ours(&self) {
        if self.dir.names(&self.name, &self.file) {
            let _ = self.dir.unlink(&self.name);
        }
    }
}

/// The descriptor line of a segment, as read from a file that may hold anything.
#[derive(Debug, Clone, Copy)]
struct Descriptor {
    magic: u64,
    version: u32,
    log_offset: u32,
    capacity: u64,
    max_message: u32,
    policy_code: u32,
    session_id: u32,
    max_subscribers: u32,
    topic_len: u32,
    policy: SlowSubscriberPolicy,
    generation: u32,
    first_sequence: u64,
}

impl Descriptor {
    fn parse(b: &[u8; DESCRIPTOR_LEN]) -> Descriptor {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let policy_code = u32_at(POLICY);
        Descriptor {
            magic: u64_at(MAGIC),
            version: u32_at(VERSION),
            log_offset: u32_at(LOG_OFFSET),
            capacity: u64_at(CAPACITY),
            max_message: u32_at(MAX_MESSAGE),
            policy_code,
            session_id: u32_at(SESSION_ID),
            max_subscribers: u32_at(MAX_SUBSCRIBERS),
            topic_len: u32_at(TOPIC_LEN),
            policy: SlowSubscriberPolicy::from_code(policy_code).unwrap_or_default(),
            generation: u32_at(GENERATION),
            first_sequence: u64_at(FIRST_SEQUENCE),
        }
    }

    /// Checks every field against what this build writes, and the file's `size`.
    fn check(&self, size: u64) -> Result<(), String> {
        if self.magic != SEGMENT_MAGIC {
            return Err("not a Peregrine segment (bad magic)".into());
        }
        if self.version != LAYOUT_VERSION {
            return Err(format!(
                "layout version {}, this build reads version {LAYOUT_VERSION}",
                self.version
            ));
        }
        let capacity = self.capacity;
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(format!(
                "log capacity {capacity} is not a power of two in range"
            ));
        }
        let max_subs = self.max_subscribers;
        if max_subs == 0
            || max_subs > MAX_SUBSCRIBERS_LIMIT
            || self.log_offset as usize != log_offset(max_subs)
        {
            return Err(format!(
                "subscriber table of {max_subs} slots at log offset {}",
                self.log_offset
            ));
        }
        if (self.log_offset as u64).saturating_add(capacity) > size {
            return Err(format!(
                "file is {size} bytes, too small for a {capacity}-byte log"
            ));
        }
        if SlowSubscriberPolicy::from_code(self.policy_code).is_none() {
            return Err("unknown slow-subscriber policy".into());
        }
        if self.max_message as u64 != max_message_for(capacity) {
            return Err("maximum message length inconsistent with capacity".into());
        }
        if self.topic_len as usize > MAX_TOPIC_LEN {
            return Err("topic name longer than 1024 bytes".into());
        }
        if self.first_sequence >= 1 << 62 {
            return Err("first sequence beyond what a publisher reaches".into());
        }
        Ok(())
    }
}

/// True while a process holds `file`'s exclusive lock (its publisher is alive, or a creator is
/// building it). Probing with a *shared* lock keeps a dead segment looking dead to everyone
/// probing it at the same moment.
pub(crate) fn held_exclusively(file: &File) -> bool {
    match flock(file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = flock(file, FlockOperation::Unlock);
            false
        }
        Err(_) => true,
    }
}

/// Sets the `closed` flag of a dead segment, if it is one (any file may lie under a name).
fn mark_closed(f: &File) {
    if f.metadata().map_or(true, |m| m.len() < PAGE as u64) {
        return;
    }
    // A registered mapping: a truncation after the size check is survived.
    let Ok(map) = Mapping::new(f, PAGE) else {
        return;
    };
    // SAFETY: the mapping is one page, page-aligned; MAGIC and CLOSED are 8- and 4-byte
    // aligned offsets in it (so aligned addresses), accessed atomically by every process.
    let (magic, closed) = unsafe {
        (
            AtomicU64::from_ptr(map.as_mut_ptr().add(MAGIC).cast()),
            AtomicU32::from_ptr(map.as_mut_ptr().add(CLOSED).cast()),
        )
    };
    if magic.load(Ordering::Acquire) == SEGMENT_MAGIC {
        closed.store(1, Ordering::Release);
    }
}

/// The pid a segment's descriptor names, read from the file (any value is only displayed).
fn peek_pid(f: &File) -> Option<u32> {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, PUBLISHER_PID as u64).ok()?;
    Some(u32::from_le_bytes(b))
}

/// Removes the files of `dir` (but `except`) that no live process holds: segments whose
/// publisher died (marked closed first, for subscribers still reading them) and temporary
/// files of creations that died half-way. Called with the creators' turn held, so no creation
/// is in progress. Returns how many were removed.
fn remove_dead(dir: &SegmentDir, except: &str) -> usize {
    let Ok(names) = dir.entries() else {
        return 0;
    };
    let mut removed = 0;
    for name in names.iter().filter(|n| *n != except) {
        // Only regular files of ours (or our group's): never links, never someone else's.
        let Ok(Some(f)) = dir.open_segment(name) else {
            continue;
        };
        if held_exclusively(&f) {
            continue;
        }
        if !name.starts_with(TEMP_PREFIX) {
            mark_closed(&f);
        }
        // Counters files of dead processes go too, but are not counted as segments.
        if dir.names(name, &f)
            && dir.unlink(name).is_ok()
            && !name.starts_with(crate::stat::FILE_PREFIX)
        {
            removed += 1;
        }
    }
    removed
}

/// The start time of process `pid` in clock ticks since boot (field 22 of /proc/PID/stat): with
/// the pid it identifies a process even after the pid is reused.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True when process `pid`, started at `start_ticks`, still runs (a zombie, dead but not yet
/// reaped by its parent, counts as dead).
pub fn process_alive(pid: u32, start_ticks: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return false;
    }
    let ticks = fields.nth(18).and_then(|t| t.parse::<u64>().ok());
    start_ticks == 0 || ticks == Some(start_ticks)
}
