//! Creating, opening, validating and reclaiming shared-memory segments.
//!
//! A segment is a file `peregrine-NAME` in the shared-memory directory (`/dev/shm`, or
//! `$PEREGRINE_SHM_DIR`), mode 0600, mapped shared by the publisher and its subscribers. The
//! publisher holds an exclusive `flock` on it for as long as it lives; the kernel drops the lock
//! when the process dies, however it dies. So:
//! - a new publisher that can take a shared lock of an existing segment knows its owner is
//!   dead, and replaces it atomically (`rename` of a fully initialised file over the old name);
//!   creators take turns (an exclusive `flock` on the directory), so no two reclaim at once;
//! - a subscriber that can take a shared lock knows the publisher is gone (and a reclaim in
//!   progress, holding only a shared lock, does not make a dead segment look alive).
//!
//! A segment only becomes visible under its name once it is completely initialised (it is built
//! under a temporary name and then `link`ed or `rename`d into place), so an opener never sees a
//! half-written descriptor.

use super::layout::*;
use super::SlowSubscriberPolicy;
use crate::error::OpenError;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Where segments live: `$PEREGRINE_SHM_DIR`, else `/dev/shm`.
pub fn shm_dir() -> PathBuf {
    std::env::var_os("PEREGRINE_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// How long a creator waits for its turn before giving up (a creation takes milliseconds;
/// only a creator stopped mid-way, e.g. by SIGSTOP, holds the turn longer).
const CREATORS_TURN_WAIT_MS: u64 = 5_000;

/// Takes the creators' lock on the segment directory: an exclusive `flock` on the directory
/// itself, released when the returned file is dropped (or its process dies).
fn creators_turn(dir: &Path) -> Result<File, OpenError> {
    use rustix::fs::{flock, FlockOperation};
    let io_err = |op: &'static str, e: io::Error| OpenError::Io {
        op,
        path: dir.to_path_buf(),
        source: e,
    };
    let lock = File::open(dir).map_err(|e| io_err("open the directory", e))?;
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(CREATORS_TURN_WAIT_MS);
    loop {
        match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(lock),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(io_err(
                "lock (another process has been creating a segment for over 5 s; is it stopped?)",
                io::ErrorKind::WouldBlock.into(),
            )),
            Err(e) => return Err(io_err("lock", e.into())),
        }
    }
}

/// The file of segment `name`.
pub fn segment_path(name: &str) -> PathBuf {
    shm_dir().join(format!("peregrine-{name}"))
}

/// Checks a segment name: 1 to 200 characters of `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 200 {
        return Err(format!(
            "segment name '{name}' must be 1 to 200 characters long"
        ));
    }
    if name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "segment name '{name}' may only use letters, digits, '.', '_' and '-' and must not start with '.'"
        ));
    }
    Ok(())
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
}

/// A mapped segment. All access to shared memory goes through the accessors below, which check
/// bounds and alignment, so the rest of the crate needs no pointer arithmetic of its own.
///
/// Crate-private: the publisher and its subscribers rely on the protocol of [`layout`] (a
/// subscriber in back-pressure mode hands out `&[u8]` into the log), so no code outside this
/// crate may write the segment's words.
///
/// [`layout`]: super::layout
#[derive(Debug)]
pub(crate) struct Segment {
    map: memmap2::MmapRaw,
    file: File,
    path: PathBuf,
    pub(crate) log_offset: usize,
    pub(crate) capacity: u64,
}

impl Segment {
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// A 64-bit atomic at byte `offset` of the segment.
    #[inline]
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: in bounds and 8-byte aligned (the mapping is page-aligned), checked above; the
        // memory lives as long as `self`; every process accesses these words only atomically.
        unsafe { AtomicU64::from_ptr(self.base().add(offset).cast()) }
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
        // SAFETY: `log_offset + capacity <= map.len()` was checked when the segment was
        // created or opened.
        (unsafe { self.base().add(self.log_offset) }, self.capacity)
    }

    pub fn slot_offset(&self, index: u32) -> usize {
        SLOTS + index as usize * SLOT_SIZE
    }

    fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.map.len());
        let mut v = vec![0u8; len];
        // SAFETY: in bounds (checked); the topic area is written before the segment is linked
        // into place and never again, so nothing writes it concurrently.
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(offset), v.as_mut_ptr(), len) };
        v
    }

    pub fn topic(&self) -> String {
        let len = (self.u32_at(TOPIC_LEN).load(Ordering::Relaxed) as usize).min(MAX_TOPIC_LEN);
        String::from_utf8_lossy(&self.read_bytes(TOPIC, len)).into_owned()
    }

    pub fn policy(&self) -> SlowSubscriberPolicy {
        SlowSubscriberPolicy::from_code(self.u32_at(POLICY).load(Ordering::Relaxed))
            .unwrap_or_default()
    }

    /// True while some process (the publisher) holds the exclusive lock.
    pub fn publisher_alive(&self) -> bool {
        use rustix::fs::{flock, FlockOperation};
        match flock(&self.file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                let _ = flock(&self.file, FlockOperation::Unlock);
                false
            }
            Err(_) => true,
        }
    }

    /// Creates segment `spec.name`, replacing a segment whose publisher died. Fails with
    /// [`OpenError::InUse`] when a live publisher owns the name.
    pub fn create(spec: &SegmentSpec) -> Result<(Segment, bool), OpenError> {
        validate_name(&spec.name).map_err(OpenError::InvalidName)?;
        let path = segment_path(&spec.name);
        let dir = shm_dir();
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
        let _turn = creators_turn(&dir)?;
        for _attempt in 0..8 {
            // 1. Is there a segment under this name, and is its owner alive?
            let stale = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) => {
                    use rustix::fs::{flock, FlockOperation};
                    if flock(&f, FlockOperation::NonBlockingLockShared).is_err() {
                        let pid = Segment::peek_pid(&f);
                        return Err(OpenError::InUse {
                            name: spec.name.clone(),
                            pid,
                        });
                    }
                    // No exclusive lock: its owner is dead, and no other creator can act now.
                    // Mark it closed, so subscribers still attached to it learn it has ended.
                    Segment::mark_closed(&f);
                    Some(f)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_err("open", &path, e)),
            };
            // 2. Build the new segment under a private name.
            let tmp = dir.join(format!(
                ".peregrine-{}.{}.{:08x}",
                spec.name,
                std::process::id(),
                crate::random_u32()
            ));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| io_err("create", &tmp, e))?;
            let cleanup = |e: OpenError| {
                let _ = std::fs::remove_file(&tmp);
                e
            };
            // The mode given to open() is filtered by the umask; make it exactly 0600.
            rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(0o600))
                .map_err(|e| cleanup(io_err("chmod", &tmp, e.into())))?;
            let log_offset = log_offset(spec.max_subscribers);
            let total = log_offset as u64 + spec.capacity;
            file.set_len(total)
                .map_err(|e| cleanup(io_err("resize", &tmp, e)))?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .map_err(|e| cleanup(io_err("lock", &tmp, e.into())))?;
            let map = memmap2::MmapOptions::new()
                .map_raw(&file)
                .map_err(|e| cleanup(io_err("map", &tmp, e)))?;
            let seg = Segment {
                map,
                file,
                path: path.clone(),
                log_offset,
                capacity: spec.capacity,
            };
            seg.init(spec);
            // 3. Make it visible, atomically.
            let published = match &stale {
                Some(_) => std::fs::rename(&tmp, &path).map(|_| true),
                None => match std::fs::hard_link(&tmp, &path) {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&tmp);
                        Ok(true)
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let _ = std::fs::remove_file(&tmp);
                        Ok(false) // another publisher won the race: look again
                    }
                    Err(e) => Err(e),
                },
            };
            match published {
                Ok(true) => return Ok((seg, stale.is_some())),
                Ok(false) => continue,
                Err(e) => return Err(cleanup(io_err("rename", &path, e))),
            }
        }
        Err(OpenError::InUse {
            name: spec.name.clone(),
            pid: None,
        })
    }

    fn mark_closed(f: &File) {
        // Any file may lie under the name: touching a mapping beyond its end would fault.
        if f.metadata().map_or(true, |m| m.size() < PAGE as u64) {
            return;
        }
        let Ok(map) = memmap2::MmapOptions::new().len(PAGE).map_raw(f) else {
            return;
        };
        // SAFETY: the mapping is one page of a file at least that long, page-aligned; MAGIC and
        // CLOSED are 8- and 4-byte aligned offsets in it (so aligned addresses), accessed
        // atomically by every process.
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

    fn peek_pid(f: &File) -> Option<u32> {
        if f.metadata().ok()?.size() < PAGE as u64 {
            return None;
        }
        let map = memmap2::MmapOptions::new()
            .len(PAGE)
            .map_raw_read_only(f)
            .ok()?;
        let mut b = [0u8; 4];
        // SAFETY: the mapping is one page of a file at least that long; the pid word is at a
        // fixed offset in it and is written once before the segment becomes visible.
        unsafe {
            std::ptr::copy_nonoverlapping(map.as_ptr().add(PUBLISHER_PID), b.as_mut_ptr(), 4)
        };
        Some(u32::from_le_bytes(b))
    }

    fn init(&self, spec: &SegmentSpec) {
        let r = Ordering::Relaxed;
        self.u32_at(VERSION).store(LAYOUT_VERSION, r);
        self.u32_at(LOG_OFFSET).store(self.log_offset as u32, r);
        self.u64_at(CAPACITY).store(spec.capacity, r);
        self.u32_at(MAX_MESSAGE)
            .store(max_message_for(spec.capacity) as u32, r);
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
        self.u64_at(TAIL_SEQUENCE).store(0, r);
        self.u64_at(MAGIC).store(SEGMENT_MAGIC, Ordering::Release);
    }

    /// Opens segment `name` for a subscriber. `Ok(None)` when there is no segment under the
    /// name yet, or only one whose publisher is gone.
    pub fn open(name: &str) -> Result<Option<Segment>, OpenError> {
        validate_name(name).map_err(OpenError::InvalidName)?;
        let path = segment_path(name);
        let io_err = |op: &'static str, e: io::Error| OpenError::Io {
            op,
            path: path.clone(),
            source: e,
        };
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("open", e)),
        };
        let size = file.metadata().map_err(|e| io_err("stat", e))?.size();
        let bad = |what: String| OpenError::Incompatible {
            path: path.clone(),
            what,
        };
        if size < PAGE as u64 {
            return Err(bad(format!(
                "file is {size} bytes, smaller than a segment descriptor"
            )));
        }
        let map = memmap2::MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| io_err("map", e))?;
        let mut seg = Segment {
            map,
            file,
            path: path.clone(),
            log_offset: 0,
            capacity: 0,
        };
        if seg.u64_at(MAGIC).load(Ordering::Acquire) != SEGMENT_MAGIC {
            return Err(bad("not a Peregrine segment (bad magic)".into()));
        }
        let version = seg.u32_at(VERSION).load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {version}, this build reads version {LAYOUT_VERSION}"
            )));
        }
        let capacity = seg.u64_at(CAPACITY).load(Ordering::Relaxed);
        let max_subs = seg.u32_at(MAX_SUBSCRIBERS).load(Ordering::Relaxed);
        let log_off = seg.u32_at(LOG_OFFSET).load(Ordering::Relaxed) as usize;
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(bad(format!(
                "log capacity {capacity} is not a power of two in range"
            )));
        }
        if max_subs == 0 || max_subs > MAX_SUBSCRIBERS_LIMIT || log_off != log_offset(max_subs) {
            return Err(bad(format!(
                "subscriber table of {max_subs} slots at log offset {log_off}"
            )));
        }
        if (log_off as u64).saturating_add(capacity) > size {
            return Err(bad(format!(
                "file is {size} bytes, too small for a {capacity}-byte log"
            )));
        }
        if SlowSubscriberPolicy::from_code(seg.u32_at(POLICY).load(Ordering::Relaxed)).is_none() {
            return Err(bad("unknown slow-subscriber policy".into()));
        }
        if seg.u32_at(MAX_MESSAGE).load(Ordering::Relaxed) as u64 != max_message_for(capacity) {
            return Err(bad(
                "maximum message length inconsistent with capacity".into()
            ));
        }
        if seg.u32_at(TOPIC_LEN).load(Ordering::Relaxed) as usize > MAX_TOPIC_LEN {
            return Err(bad("topic name longer than 1024 bytes".into()));
        }
        seg.log_offset = log_off;
        seg.capacity = capacity;
        if seg.u32_at(CLOSED).load(Ordering::Acquire) != 0 || !seg.publisher_alive() {
            return Ok(None);
        }
        Ok(Some(seg))
    }

    /// Removes the name if it still refers to this segment (a newer publisher may own it).
    pub fn unlink_if_ours(&self) {
        if let (Ok(mine), Ok(named)) = (self.file.metadata(), std::fs::metadata(&self.path)) {
            if mine.ino() == named.ino() && mine.dev() == named.dev() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
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
