//! Appending to a recording: [`RecordingWriter`].

use crate::format::align8;
use crate::format::index::{IndexEntry, INDEX_EVERY};
use crate::format::record::{parse_record, RecordRepr, RECORD_HEADER_LEN};
use crate::format::segment_header::{SegmentHeaderRepr, MAX_TOPIC_LEN};
use crate::{segments, ArchiveError};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The stream a recording holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMeta {
    pub topic: String,
    pub session_id: u32,
    pub stream_id: u32,
}

impl fmt::Display for StreamMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic '{}' session {:08x} stream {}",
            self.topic.escape_debug(),
            self.session_id,
            self.stream_id
        )
    }
}

/// When appended records are made durable (forced to the disk with `fdatasync`).
///
/// Whatever the policy, records are written to the file (so a process killed keeps them;
/// only the machine stopping loses what was not forced) at least at every
/// [`poll`](RecordingWriter::poll), every full buffer, and every segment's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Never forced: the kernel writes them back when it chooses.
    None,
    /// Forced at most this many milliseconds after they were appended (at a `poll`).
    Interval { ms: u64 },
    /// Forced before `append` returns.
    Each,
}

impl FromStr for Durability {
    type Err = ArchiveError;
    fn from_str(s: &str) -> Result<Self, ArchiveError> {
        let bad = || {
            ArchiveError::Config(format!(
                "fsync={s} is not accepted: give none, each, or interval:MS with MS from 1 to 60000 (for example interval:100)"
            ))
        };
        match s {
            "none" => Ok(Durability::None),
            "each" => Ok(Durability::Each),
            _ => {
                let ms = s
                    .strip_prefix("interval:")
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|ms| (1..=60_000).contains(ms))
                    .ok_or_else(bad)?;
                Ok(Durability::Interval { ms })
            }
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::None => f.write_str("none"),
            Durability::Interval { ms } => write!(f, "interval:{ms}"),
            Durability::Each => f.write_str("each"),
        }
    }
}

/// How a writer stores a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Bytes per segment file (a multiple of 4096, 64 KiB to 1 GiB). A recording that exists
    /// keeps its own.
    pub segment_len: u64,
    pub durability: Durability,
    /// Records gathered before a write to the file.
    pub buffer_bytes: usize,
    /// Segments kept: the oldest are removed past these bounds (the one being written never).
    pub retention: Retention,
}

/// How much of a recording is kept. A segment goes when the recording's segments take more
/// than `max_bytes` (counted at their full length), or when its newest record is older than
/// `max_age_ns` (the next segment was started before then). `None`: no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_bytes: Option<u64>,
    pub max_age_ns: Option<u64>,
}

impl Default for WriterOptions {
    /// 64 MiB segments, forced every 100 ms, written in 256 KiB, kept for ever.
    fn default() -> Self {
        WriterOptions {
            segment_len: 64 << 20,
            durability: Durability::Interval { ms: 100 },
            buffer_bytes: 256 << 10,
            retention: Retention::default(),
        }
    }
}

impl WriterOptions {
    /// Checks the settings, with the fix in the message.
    pub fn validate(&self) -> Result<(), ArchiveError> {
        if !(64 << 10..=1 << 30).contains(&self.segment_len) || self.segment_len % 4096 != 0 {
            return Err(ArchiveError::Config(format!(
                "segment length {} is not accepted: give a multiple of 4096 bytes from 64k to 1g, for example 64m",
                self.segment_len
            )));
        }
        if let Some(b) = self.retention.max_bytes {
            if b < 2 * self.segment_len {
                return Err(ArchiveError::Config(format!(
                    "retention of {b} bytes is not accepted: keep at least two segments ({} bytes), or raise it",
                    2 * self.segment_len
                )));
            }
        }
        if self.retention.max_age_ns == Some(0) {
            return Err(ArchiveError::Config(
                "a retention age of 0 is not accepted: give at least 1 second".into(),
            ));
        }
        if !(1..=64 << 20).contains(&self.buffer_bytes) {
            return Err(ArchiveError::Config(format!(
                "write buffer {} is not accepted: give 1 byte to 64m",
                self.buffer_bytes
            )));
        }
        Ok(())
    }
}

/// What opening an existing recording found in its last segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Good records found in the last segment.
    pub records: u64,
    /// A torn tail cut: the file and offset where it started and its bytes.
    pub torn: Option<(PathBuf, u64, u64)>,
    /// Damaged records before good ones (left in place, skipped by readers): file, offset.
    pub damaged: Vec<(PathBuf, u64)>,
}

/// Appends one stream's messages to its recording folder: see the crate's documentation.
#[derive(Debug)]
pub struct RecordingWriter {
    dir: PathBuf,
    meta: StreamMeta,
    opts: WriterOptions,
    segment_len: u64,
    header_len: u64,
    file: File,
    path: PathBuf,
    base: u64,
    /// Where the next record goes in the current segment.
    end: u64,
    /// Where `buf` goes in the current segment (all before it is written to the file).
    written_to: u64,
    buf: Vec<u8>,
    /// Written to the file but not yet forced.
    unforced: bool,
    last_force_ns: u64,
    stopped: Option<String>,
    recovery: Recovery,
    appended: u64,
    /// The sequence of the last message recorded (found by recovery, then appended).
    last_sequence: Option<u64>,
    /// The recording's segments, oldest first: base position, file, when started.
    segments: std::collections::VecDeque<(u64, PathBuf, u64)>,
    retired: u64,
    /// The current segment's index: its file, the entries not yet written to it, and the
    /// offset from which the next record gets an entry.
    index: Index,
}

/// A segment's index being written (format::index).
#[derive(Debug)]
struct Index {
    file: Option<File>,
    pending: Vec<u8>,
    next_at: u64,
}

impl Index {
    /// The index of segment `segment`, replaced by `entries`; the next entry from `next_at`.
    /// Without a file (it could not be made) the recording goes on unindexed there.
    fn start(segment: &Path, entries: &[IndexEntry], next_at: u64) -> Index {
        let path = segments::index_path(segment);
        let file = File::create(&path)
            .and_then(|mut f| {
                let bytes: Vec<u8> = entries.iter().flat_map(|e| e.emit()).collect();
                f.write_all(&bytes).map(|()| f)
            })
            .map_err(|e| tracing::warn!("{}: no index ({e}): reads scan it", path.display()))
            .ok();
        Index {
            file,
            pending: Vec::new(),
            next_at,
        }
    }

    /// Notes the record about to be appended at `offset`.
    #[inline]
    fn note(&mut self, sequence: u64, receive_ns: u64, offset: u64) {
        if offset >= self.next_at {
            self.pending.extend_from_slice(
                &IndexEntry {
                    sequence,
                    receive_ns,
                    offset,
                }
                .emit(),
            );
            self.next_at = offset + INDEX_EVERY;
        }
    }

    /// Writes the entries noted (after the records they point to are in the file).
    fn write_out(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            if let Err(e) = f.write_all(&self.pending) {
                tracing::warn!("a segment index not written ({e}): reads scan the segment");
                self.file = None;
            }
        }
        self.pending.clear();
    }
}

impl RecordingWriter {
    /// Opens the recording of `meta` in `dir` (made if missing) to append to it: a new one,
    /// or an existing one of the same stream after recovering its last segment.
    pub fn open(
        dir: &Path,
        meta: &StreamMeta,
        opts: WriterOptions,
        now_ns: u64,
    ) -> Result<RecordingWriter, ArchiveError> {
        opts.validate()?;
        if meta.topic.len() > MAX_TOPIC_LEN {
            return Err(ArchiveError::Config(format!(
                "a topic of {} bytes does not fit a segment header (at most {MAX_TOPIC_LEN})",
                meta.topic.len()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(dir, "create folder", e))?;
        let existing = segments::list(dir)?;
        let header = SegmentHeaderRepr {
            segment_len: opts.segment_len,
            base_position: 0,
            session_id: meta.session_id,
            stream_id: meta.stream_id,
            created_ns: now_ns,
            topic: meta.topic.clone(),
        };
        let mut w = match existing.last() {
            None => {
                let (file, path) = create_segment(dir, &header)?;
                let segments_path0 = path.clone();
                let segments = [(0, path.clone(), now_ns)].into_iter().collect();
                RecordingWriter {
                    dir: dir.to_path_buf(),
                    meta: meta.clone(),
                    opts,
                    segment_len: opts.segment_len,
                    header_len: header.header_len() as u64,
                    file,
                    path,
                    base: 0,
                    end: header.header_len() as u64,
                    written_to: header.header_len() as u64,
                    buf: Vec::with_capacity(opts.buffer_bytes + RECORD_HEADER_LEN),
                    unforced: false,
                    last_force_ns: now_ns,
                    stopped: None,
                    recovery: Recovery::default(),
                    appended: 0,
                    last_sequence: None,
                    segments,
                    retired: 0,
                    index: Index::start(&segments_path0, &[], header.header_len() as u64),
                }
            }
            Some((base, path)) => {
                let mut w = Self::recover(dir, meta, opts, *base, path, now_ns)?;
                for (b, p) in &existing {
                    let created = read_created_ns(p).unwrap_or(0);
                    w.segments.push_back((*b, p.clone(), created));
                }
                // A last segment started but given no message yet: the one before has it.
                if w.last_sequence.is_none() && existing.len() >= 2 {
                    w.last_sequence = last_message_sequence(&existing[existing.len() - 2].1);
                }
                w
            }
        };
        w.retire(now_ns);
        if opts.durability != Durability::None {
            w.force_folder()?;
        }
        Ok(w)
    }

    /// Opens the last segment of an existing recording: checks it is this stream's, finds
    /// the end of its good records, cuts a torn tail.
    fn recover(
        dir: &Path,
        meta: &StreamMeta,
        opts: WriterOptions,
        base: u64,
        path: &Path,
        now_ns: u64,
    ) -> Result<RecordingWriter, ArchiveError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| ArchiveError::io(path, "open", e))?;
        // Before anything is read or cut: another writer of it would be corrupted.
        hold(&file, path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| ArchiveError::io(path, "read", e))?;
        let header =
            SegmentHeaderRepr::parse(&bytes).map_err(|error| ArchiveError::BadSegment {
                path: path.to_path_buf(),
                error,
            })?;
        let found = StreamMeta {
            topic: header.topic.clone(),
            session_id: header.session_id,
            stream_id: header.stream_id,
        };
        if &found != meta {
            return Err(ArchiveError::OtherStream {
                dir: dir.to_path_buf(),
                found: found.to_string(),
            });
        }
        let segment_len = header.segment_len;
        let mut recovery = Recovery::default();
        let mut last_sequence = None;
        let mut at = header.header_len();
        // The segment's index, made again from what this scan finds (an index written past
        // a cut tail must not point there).
        let mut entries: Vec<IndexEntry> = Vec::new();
        let mut next_index_at = at as u64;
        let end = loop {
            if at + RECORD_HEADER_LEN > bytes.len() {
                break bytes.len().min(segment_len as usize);
            }
            let rest = &bytes[at..];
            if rest[..RECORD_HEADER_LEN].iter().all(|&b| b == 0) {
                break at;
            }
            match parse_record(rest) {
                Ok((r, _)) => {
                    if r.kind == crate::format::record::RecordKind::Message {
                        recovery.records += 1;
                        last_sequence = Some(r.sequence);
                        if at as u64 >= next_index_at {
                            entries.push(IndexEntry {
                                sequence: r.sequence,
                                receive_ns: r.receive_ns,
                                offset: at as u64,
                            });
                            next_index_at = at as u64 + INDEX_EVERY;
                        }
                    }
                    at += r.span();
                }
                Err(_) => match next_good_record(&bytes, at) {
                    Some(next) => {
                        recovery.damaged.push((path.to_path_buf(), at as u64));
                        at = next;
                    }
                    None => {
                        // Nothing good after it: a torn tail. Cut it (the file keeps its
                        // length: zeros from here).
                        let last = bytes.iter().rposition(|&b| b != 0).map_or(at, |i| i + 1);
                        recovery.torn = Some((path.to_path_buf(), at as u64, (last - at) as u64));
                        tracing::warn!(
                            "{}: a torn record at offset {at} ({} bytes) cut",
                            path.display(),
                            last - at
                        );
                        file.set_len(at as u64)
                            .and_then(|()| file.set_len(segment_len))
                            .and_then(|()| file.sync_data())
                            .map_err(|e| ArchiveError::io(path, "cut the torn tail of", e))?;
                        break at;
                    }
                },
            }
        };
        for (p, off) in &recovery.damaged {
            tracing::warn!(
                "{}: a damaged record at offset {off} (readers skip it)",
                p.display()
            );
        }
        Ok(RecordingWriter {
            dir: dir.to_path_buf(),
            meta: meta.clone(),
            opts,
            segment_len,
            header_len: header.header_len() as u64,
            file,
            path: path.to_path_buf(),
            base,
            end: end as u64,
            written_to: end as u64,
            buf: Vec::with_capacity(opts.buffer_bytes + RECORD_HEADER_LEN),
            unforced: false,
            last_force_ns: now_ns,
            stopped: None,
            recovery,
            appended: 0,
            last_sequence,
            segments: std::collections::VecDeque::new(),
            retired: 0,
            index: Index::start(path, &entries, next_index_at),
        })
    }

    /// Segments removed by the retention bounds since this writer opened.
    pub fn retired(&self) -> u64 {
        self.retired
    }

    /// Removes the oldest segments past the retention bounds (never the one being written).
    fn retire(&mut self, now_ns: u64) {
        let r = self.opts.retention;
        while self.segments.len() > 1 {
            let over_size = r
                .max_bytes
                .is_some_and(|max| self.segments.len() as u64 * self.segment_len > max);
            // The oldest's newest record is older than when the next was started.
            let too_old = r
                .max_age_ns
                .is_some_and(|age| self.segments[1].2.saturating_add(age) < now_ns);
            if !(over_size || too_old) {
                break;
            }
            let (_, path, _) = self.segments.pop_front().expect("two or more");
            let _ = std::fs::remove_file(segments::index_path(&path));
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    self.retired += 1;
                    tracing::info!("{}: removed by the retention bounds", path.display());
                }
                Err(e) => {
                    tracing::warn!("{}: not removed by retention: {e}", path.display());
                    break;
                }
            }
        }
    }

    /// What opening found (all zero for a new recording).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }
    pub fn meta(&self) -> &StreamMeta {
        &self.meta
    }
    pub fn segment_len(&self) -> u64 {
        self.segment_len
    }
    /// Messages appended by this writer.
    pub fn appended(&self) -> u64 {
        self.appended
    }
    /// The sequence of the last message recorded (by this writer, or before it opened).
    pub fn last_sequence(&self) -> Option<u64> {
        self.last_sequence
    }
    /// The longest message a segment holds.
    pub fn max_message_len(&self) -> usize {
        (self.segment_len - self.header_len) as usize - RECORD_HEADER_LEN
    }

    /// Appends message `sequence`, received at `receive_ns` (nanoseconds since the Unix
    /// epoch). With [`Durability::Each`] it is on the disk when this returns.
    pub fn append(
        &mut self,
        sequence: u64,
        receive_ns: u64,
        payload: &[u8],
    ) -> Result<(), ArchiveError> {
        self.check_running()?;
        if let Some(last) = self.last_sequence.filter(|l| sequence <= *l) {
            return Err(ArchiveError::SequenceNotAfter { sequence, last });
        }
        if payload.len() > self.max_message_len() {
            return Err(ArchiveError::TooLarge {
                len: payload.len(),
                max: self.max_message_len(),
            });
        }
        let span = (RECORD_HEADER_LEN + align8(payload.len())) as u64;
        if self.end + span > self.segment_len {
            self.roll(receive_ns)?;
        }
        self.index.note(sequence, receive_ns, self.end);
        RecordRepr::message(sequence, receive_ns, payload.len()).append(&mut self.buf, payload);
        self.end += span;
        self.appended += 1;
        self.last_sequence = Some(sequence);
        match self.opts.durability {
            Durability::Each => self.force(receive_ns),
            _ if self.buf.len() >= self.opts.buffer_bytes => self.write_out(),
            _ => Ok(()),
        }
    }

    /// The writer's timer: writes what is gathered to the file, and forces it when the
    /// interval has passed. Call it when idle and at least every interval.
    pub fn poll(&mut self, now_ns: u64) -> Result<(), ArchiveError> {
        self.check_running()?;
        match self.opts.durability {
            Durability::Interval { ms }
                if now_ns.saturating_sub(self.last_force_ns) >= ms * 1_000_000 =>
            {
                self.force(now_ns)?
            }
            _ => self.write_out()?,
        }
        if self.opts.retention.max_age_ns.is_some() {
            self.retire(now_ns);
        }
        Ok(())
    }

    /// Writes everything appended to the file (a process killed after this loses none of it).
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        self.check_running()?;
        self.write_out()
    }

    /// Writes and forces everything appended, whatever the policy, and closes.
    pub fn close(mut self) -> Result<(), ArchiveError> {
        self.check_running()?;
        self.force(0)
    }

    fn check_running(&self) -> Result<(), ArchiveError> {
        match &self.stopped {
            None => Ok(()),
            Some(reason) => Err(ArchiveError::Stopped {
                dir: self.dir.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// A failed write or force: nothing more is appended (what is in the file stays
    /// readable; a torn record is cut when the recording is opened again).
    fn stop(&mut self, e: ArchiveError) -> ArchiveError {
        self.stopped = Some(e.to_string());
        tracing::error!("{e}");
        e
    }

    fn write_out(&mut self) -> Result<(), ArchiveError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all_at(&self.buf, self.written_to) {
            let e = ArchiveError::io(&self.path, "write", e);
            return Err(self.stop(e));
        }
        self.written_to += self.buf.len() as u64;
        self.buf.clear();
        self.unforced = true;
        self.index.write_out();
        Ok(())
    }

    fn force(&mut self, now_ns: u64) -> Result<(), ArchiveError> {
        self.write_out()?;
        if self.unforced {
            if let Err(e) = self.file.sync_data() {
                let e = ArchiveError::io(&self.path, "fsync", e);
                return Err(self.stop(e));
            }
            self.unforced = false;
        }
        self.last_force_ns = self.last_force_ns.max(now_ns);
        Ok(())
    }

    /// Fsyncs the folder, so a new segment's name survives the machine stopping.
    fn force_folder(&mut self) -> Result<(), ArchiveError> {
        let r = File::open(&self.dir).and_then(|d| d.sync_all());
        r.map_err(|e| {
            let e = ArchiveError::io(&self.dir, "fsync folder", e);
            self.stop(e)
        })
    }

    /// Ends the current segment (padding its rest) and starts the next.
    fn roll(&mut self, now_ns: u64) -> Result<(), ArchiveError> {
        let rest = (self.segment_len - self.end) as usize;
        if rest >= RECORD_HEADER_LEN {
            // The header alone: the file is zeros after it already.
            let at = self.buf.len();
            self.buf.resize(at + RECORD_HEADER_LEN, 0);
            RecordRepr::padding(rest).emit(&mut self.buf[at..], &[]);
        }
        if self.opts.durability == Durability::None {
            self.write_out()?;
        } else {
            self.force(now_ns)?;
        }
        let header = SegmentHeaderRepr {
            segment_len: self.segment_len,
            base_position: self.base + self.segment_len,
            session_id: self.meta.session_id,
            stream_id: self.meta.stream_id,
            created_ns: now_ns,
            topic: self.meta.topic.clone(),
        };
        let (file, path) = match create_segment(&self.dir, &header) {
            Ok(x) => x,
            Err(e) => return Err(self.stop(e)),
        };
        self.file = file;
        self.index = Index::start(&path, &[], self.header_len);
        self.segments
            .push_back((header.base_position, path.clone(), now_ns));
        self.path = path;
        self.base = header.base_position;
        self.end = self.header_len;
        self.written_to = self.header_len;
        if self.opts.durability != Durability::None {
            self.force_folder()?;
        }
        self.retire(now_ns);
        Ok(())
    }
}

/// The sequence of the last good message of segment `path`.
fn last_message_sequence(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut at = SegmentHeaderRepr::parse(&bytes).ok()?.header_len();
    let mut last = None;
    while at + RECORD_HEADER_LEN <= bytes.len() {
        match parse_record(&bytes[at..]) {
            Ok((r, _)) => {
                if r.kind == crate::format::record::RecordKind::Message {
                    last = Some(r.sequence);
                }
                at += r.span();
            }
            Err(_) => match next_good_record(&bytes, at) {
                Some(n) => at = n,
                None => break,
            },
        }
    }
    last
}

/// When segment `path` was started (its header's `created_ns`).
fn read_created_ns(path: &Path) -> Option<u64> {
    let mut b = [0u8; 64];
    File::open(path).ok()?.read_exact(&mut b).ok()?;
    Some(u64::from_le_bytes(b[40..48].try_into().ok()?))
}

impl Drop for RecordingWriter {
    /// Writes what is gathered (forced as the policy says; nothing more is appended).
    fn drop(&mut self) {
        if self.stopped.is_none() {
            let _ = match self.opts.durability {
                Durability::None => self.write_out(),
                _ => self.force(0),
            };
        }
    }
}

/// Marks `file` (a segment this process writes) as being written: an exclusive lock on it,
/// held while it is open, which readers test with [`is_being_written`] (a record being
/// written is not damage) and a second writer finds taken. Released when the file is closed,
/// or the process ends however it ends.
fn hold(file: &File, path: &Path) -> Result<(), ArchiveError> {
    // A reader takes the shared lock only for the instant of its test: taken for 50 ms, the
    // lock is a writer's.
    for _ in 0..50 {
        match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
            Err(e) => return Err(ArchiveError::io(path, "lock", e.into())),
        }
    }
    Err(ArchiveError::Busy {
        path: path.to_path_buf(),
    })
}

/// True when a writer holds segment `file` (see [`hold`]).
pub(crate) fn is_being_written(file: &File) -> bool {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock);
            false
        }
        Err(e) => e == rustix::io::Errno::WOULDBLOCK,
    }
}

/// Creates segment `header.base_position` in `dir`: its header written, its whole length
/// allocated (a full disk fails here, not in the middle of a record).
fn create_segment(dir: &Path, header: &SegmentHeaderRepr) -> Result<(File, PathBuf), ArchiveError> {
    let path = dir.join(segments::file_name(header.base_position));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| ArchiveError::io(&path, "create", e))?;
    hold(&file, &path)?;
    let made = (|| {
        // Blocks reserved where the file system can: a full disk fails here, not in the middle
        // of a record. Elsewhere a sparse file of the length.
        match rustix::fs::fallocate(
            &file,
            rustix::fs::FallocateFlags::empty(),
            0,
            header.segment_len,
        ) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::DQUOT => {
                return Err(ArchiveError::io(&path, "allocate", e.into()));
            }
            Err(_) => file
                .set_len(header.segment_len)
                .map_err(|e| ArchiveError::io(&path, "size", e))?,
        }
        file.write_all_at(&header.emit(), 0)
            .map_err(|e| ArchiveError::io(&path, "write", e))
    })();
    if let Err(e) = made {
        // No segment without its header: a reader would take the folder for damaged.
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok((file, path))
}

/// The offset of the next good record after a bad one at `at`, if any (8-byte steps).
pub(crate) fn next_good_record(bytes: &[u8], at: usize) -> Option<usize> {
    let mut k = at + 8;
    while k + RECORD_HEADER_LEN <= bytes.len() {
        if parse_record(&bytes[k..]).is_ok() {
            return Some(k);
        }
        k += 8;
    }
    None
}
