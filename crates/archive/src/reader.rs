//! Reading a recording back: [`RecordingReader`] and its [`Cursor`].

use crate::format::index::{parse_index, IndexEntry};
use crate::format::record::{parse_record, RecordKind, RecordRepr, RECORD_HEADER_LEN};
use crate::format::segment_header::SegmentHeaderRepr;
use crate::format::FormatError;
use crate::writer::next_good_record;
use crate::{segments, ArchiveError, StreamMeta};
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A recording opened for reading.
#[derive(Debug)]
pub struct RecordingReader {
    dir: PathBuf,
    segments: Vec<(u64, PathBuf)>,
    meta: StreamMeta,
    segment_len: u64,
}

/// A record that failed its checks: where it is and why. Reading carries on with the next
/// good record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub path: PathBuf,
    pub offset: u64,
    pub error: FormatError,
}

/// What a cursor reads next.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// A message as recorded.
    Message {
        sequence: u64,
        receive_ns: u64,
        payload: &'a [u8],
    },
    /// A damaged record, skipped.
    Damaged(Damage),
}

impl RecordingReader {
    /// Opens the recording in `dir`.
    pub fn open(dir: &Path) -> Result<RecordingReader, ArchiveError> {
        let segments = segments::list(dir)?;
        let Some((_, first)) = segments.first() else {
            return Err(ArchiveError::NotARecording {
                dir: dir.to_path_buf(),
            });
        };
        let header = read_header(first)?;
        Ok(RecordingReader {
            dir: dir.to_path_buf(),
            segment_len: header.segment_len,
            meta: StreamMeta {
                topic: header.topic,
                session_id: header.session_id,
                stream_id: header.stream_id,
            },
            segments,
        })
    }

    pub fn meta(&self) -> &StreamMeta {
        &self.meta
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The length of the recording's segment files.
    pub fn segment_len(&self) -> u64 {
        self.segment_len
    }
    /// The segment files, by position.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// A cursor from the first record.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor::new(self, 0, Start::First)
    }

    /// A cursor from the first message whose sequence is `sequence` or later.
    pub fn from_sequence(&self, sequence: u64) -> Result<Cursor<'_>, ArchiveError> {
        let seg = self.segment_for(|r| r.sequence <= sequence)?;
        let mut c = Cursor::new(self, seg, Start::Sequence(sequence));
        c.hint = self.index_entry(seg, |e| e.sequence <= sequence);
        Ok(c)
    }

    /// A cursor from the first message received at `receive_ns` or later.
    pub fn from_time(&self, receive_ns: u64) -> Result<Cursor<'_>, ArchiveError> {
        let seg = self.segment_for(|r| r.receive_ns <= receive_ns)?;
        let mut c = Cursor::new(self, seg, Start::Time(receive_ns));
        // (Receive times may repeat: the entry before the first at the time.)
        c.hint = self.index_entry(seg, |e| e.receive_ns < receive_ns);
        Ok(c)
    }

    /// The last entry of segment `seg`'s index that `before` holds for (entries are in
    /// order, so those it holds for come first); none without an index.
    fn index_entry(&self, seg: usize, before: impl Fn(&IndexEntry) -> bool) -> Option<IndexEntry> {
        let bytes = std::fs::read(segments::index_path(&self.segments.get(seg)?.1)).ok()?;
        let entries = parse_index(&bytes);
        let n = entries.partition_point(before);
        n.checked_sub(1).map(|i| entries[i])
    }

    /// The last segment whose first message satisfies `before` (the first segment if none
    /// does): segments hold messages in order, so the place sought is in it or after.
    fn segment_for(&self, before: impl Fn(&RecordRepr) -> bool) -> Result<usize, ArchiveError> {
        let (mut lo, mut hi) = (0, self.segments.len());
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            match first_message(&self.segments[mid].1)? {
                Some(r) if before(&r) => lo = mid,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }
}

/// What [`Cursor::resync`] found.
enum Resync {
    /// Moved to the next good record; zeros skipped are damage.
    Skipped(Option<Damage>),
    /// Nothing good after the place: the next segment.
    End,
}

/// Where a cursor starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    First,
    Sequence(u64),
    Time(u64),
}

/// Bytes a cursor reads from a segment at a time (more when one record is longer): the
/// window stays in the CPU's caches while its records are checked.
const WINDOW: usize = 1 << 20;

/// Reads a recording's entries in order: see [`next_entry`](Self::next_entry).
#[derive(Debug)]
pub struct Cursor<'a> {
    reader: &'a RecordingReader,
    start: Start,
    /// The segment being read (its file: None until opened), its length.
    seg: usize,
    file: Option<File>,
    seg_len: u64,
    /// `window` holds the segment's bytes from `win_at`; the next record is at `at`.
    window: Vec<u8>,
    win_at: u64,
    /// The segment open is held by a writer: it is being written.
    live: bool,
    at: u64,
    /// Where the first segment's index says to start (checked when it is opened).
    hint: Option<IndexEntry>,
    /// Records parsed so far (those skipped to reach the start included).
    parsed: u64,
}

impl<'a> Cursor<'a> {
    fn new(reader: &'a RecordingReader, seg: usize, start: Start) -> Self {
        Cursor {
            reader,
            start,
            seg,
            file: None,
            seg_len: 0,
            window: Vec::new(),
            win_at: 0,
            live: false,
            hint: None,
            parsed: 0,
            at: 0,
        }
    }

    /// The next entry: a message, or a damaged record (reported once, then skipped); `None` at
    /// the end of what is written.
    pub fn next_entry(&mut self) -> Option<Result<Entry<'_>, ArchiveError>> {
        let range: Range<usize>;
        let (sequence, receive_ns);
        loop {
            if self.file.is_none() {
                let (_, path) = self.reader.segments.get(self.seg)?;
                if let Err(e) = self.open_segment(&path.clone()) {
                    // Reported once; the next call goes on with the next segment.
                    self.seg += 1;
                    return Some(Err(e));
                }
            }
            if self.at + RECORD_HEADER_LEN as u64 > self.seg_len {
                self.next_segment();
                continue;
            }
            if let Err(e) = self.fill(RECORD_HEADER_LEN) {
                self.next_segment();
                return Some(Err(e));
            }
            let off = (self.at - self.win_at) as usize;
            let Some(header) = self.window.get(off..off + RECORD_HEADER_LEN) else {
                // The file is shorter than it said (cut while being read): its end.
                self.next_segment();
                continue;
            };
            if header.iter().all(|&b| b == 0) {
                // Nothing written from here: the end, unless a good record follows (zeros
                // where records were: damage).
                match self.resync() {
                    Ok(Resync::Skipped(Some(d))) => return Some(Ok(Entry::Damaged(d))),
                    Ok(_) => continue,
                    Err(e) => return Some(Err(e)),
                }
            }
            // The whole record in the window (a length past the segment is left to the
            // checks: they find the record damaged).
            let len = u64::from(u32::from_le_bytes(
                header[4..8].try_into().expect("4 bytes"),
            ));
            let want = (RECORD_HEADER_LEN as u64 + len).min(self.seg_len - self.at);
            if let Err(e) = self.fill(want as usize) {
                self.next_segment();
                return Some(Err(e));
            }
            let off = (self.at - self.win_at) as usize;
            match parse_record(&self.window[off..]) {
                Ok((r, payload)) => {
                    self.parsed += 1;
                    let from = off + RECORD_HEADER_LEN;
                    let plen = payload.len();
                    self.at += r.span() as u64;
                    if r.kind == RecordKind::Padding {
                        self.next_segment();
                        continue;
                    }
                    let wanted = match self.start {
                        Start::First => true,
                        Start::Sequence(s) => r.sequence >= s,
                        Start::Time(t) => r.receive_ns >= t,
                    };
                    if !wanted {
                        continue;
                    }
                    // Every later message is wanted too.
                    self.start = Start::First;
                    range = from..from + plen;
                    (sequence, receive_ns) = (r.sequence, r.receive_ns);
                    break;
                }
                Err(error) => {
                    let d = self.damage(error);
                    if self.live {
                        // A segment being written ends at a record not yet whole.
                        self.next_segment();
                        continue;
                    }
                    return match self.resync() {
                        Ok(_) => Some(Ok(Entry::Damaged(d))),
                        Err(e) => Some(Err(e)),
                    };
                }
            }
        }
        Some(Ok(Entry::Message {
            sequence,
            receive_ns,
            payload: &self.window[range],
        }))
    }

    fn damage(&self, error: FormatError) -> Damage {
        Damage {
            path: self.reader.segments[self.seg].1.clone(),
            offset: self.at,
            error,
        }
    }

    /// After a bad record (or zeros) at `at`: moves to the next good record of the segment
    /// (reading to its end to find it), or to the next segment when there is none. Zeros
    /// with a good record after them are damage: returned.
    ///
    /// A segment a writer holds (it is being written) ends here instead, with no damage: a
    /// read can see a later page of the file written before an earlier one (each page is
    /// copied on its own), so a record being written can look torn, or like zeros, with good
    /// records after it. Read again later, it is whole.
    fn resync(&mut self) -> Result<Resync, ArchiveError> {
        if self.live {
            self.next_segment();
            return Ok(Resync::End);
        }
        let zeros = {
            let off = (self.at - self.win_at) as usize;
            self.window
                .get(off..off + RECORD_HEADER_LEN)
                .is_some_and(|h| h.iter().all(|&b| b == 0))
        };
        self.fill((self.seg_len - self.at) as usize)?;
        let off = (self.at - self.win_at) as usize;
        match next_good_record(&self.window[off..], 0) {
            Some(next) => {
                let d = zeros.then(|| {
                    self.damage(FormatError::BadField {
                        field: "record.kind",
                        value: 0,
                    })
                });
                self.at += next as u64;
                Ok(Resync::Skipped(d))
            }
            None => {
                self.next_segment();
                Ok(Resync::End)
            }
        }
    }

    fn open_segment(&mut self, path: &Path) -> Result<(), ArchiveError> {
        let file = File::open(path).map_err(|e| ArchiveError::io(path, "open", e))?;
        self.live = crate::writer::is_being_written(&file);
        let len = file
            .metadata()
            .map_err(|e| ArchiveError::io(path, "read", e))?
            .len();
        self.file = Some(file);
        self.seg_len = len;
        self.window.clear();
        self.win_at = 0;
        self.at = 0;
        let header = self.fill(64 + 1024).and_then(|()| {
            SegmentHeaderRepr::parse(&self.window).map_err(|error| ArchiveError::BadSegment {
                path: path.to_path_buf(),
                error,
            })
        });
        match header {
            Ok(h) => {
                self.at = h.header_len() as u64;
                if let Some(e) = self.hint.take() {
                    self.start_at_hint(e)?;
                }
                Ok(())
            }
            Err(e) => {
                self.file = None;
                Err(e)
            }
        }
    }

    /// Starts at the record index entry `e` points to, when it is there: a message record,
    /// whole, of the entry's sequence (otherwise the index is stale: from the segment's
    /// first record, as without one).
    fn start_at_hint(&mut self, e: IndexEntry) -> Result<(), ArchiveError> {
        let first = self.at;
        if e.offset <= first || e.offset + RECORD_HEADER_LEN as u64 > self.seg_len {
            return Ok(());
        }
        self.at = e.offset;
        self.fill(RECORD_HEADER_LEN)?;
        let off = (self.at - self.win_at) as usize;
        let len = self.window.get(off + 4..off + 8).map_or(0, |l| {
            u32::from_le_bytes(l.try_into().expect("4 bytes")) as u64
        });
        self.fill((RECORD_HEADER_LEN as u64 + len).min(self.seg_len - self.at) as usize)?;
        let off = (self.at - self.win_at) as usize;
        let good = matches!(
            parse_record(&self.window[off..]),
            Ok((r, _)) if r.kind == RecordKind::Message && r.sequence == e.sequence
        );
        if !good {
            self.at = first;
        }
        Ok(())
    }

    /// Makes the window hold `need` bytes from `at` (fewer at the segment's end), reading
    /// at least [`WINDOW`] bytes when it reads.
    fn fill(&mut self, need: usize) -> Result<(), ArchiveError> {
        let end = (self.at + need as u64).min(self.seg_len);
        if self.at >= self.win_at && end <= self.win_at + self.window.len() as u64 {
            return Ok(());
        }
        let want = ((end - self.at) as usize)
            .max(WINDOW)
            .min((self.seg_len - self.at) as usize);
        self.window.resize(want, 0);
        let path = &self.reader.segments[self.seg].1;
        let file = self.file.as_ref().expect("open");
        let mut got = 0;
        while got < want {
            match file.read_at(&mut self.window[got..], self.at + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ArchiveError::io(path, "read", e)),
            }
        }
        self.window.truncate(got);
        self.win_at = self.at;
        Ok(())
    }

    fn next_segment(&mut self) {
        self.seg += 1;
        self.file = None;
        self.live = false;
    }
}

fn read_header(path: &Path) -> Result<SegmentHeaderRepr, ArchiveError> {
    let mut b = vec![0u8; 64 + 1024];
    let n = read_prefix(path, &mut b)?;
    SegmentHeaderRepr::parse(&b[..n]).map_err(|error| ArchiveError::BadSegment {
        path: path.to_path_buf(),
        error,
    })
}

/// The first message record of segment `path` (None: it has none, or it is damaged).
fn first_message(path: &Path) -> Result<Option<RecordRepr>, ArchiveError> {
    let mut b = vec![0u8; 64 + 1024 + RECORD_HEADER_LEN];
    let n = read_prefix(path, &mut b)?;
    let h = SegmentHeaderRepr::parse(&b[..n]).map_err(|error| ArchiveError::BadSegment {
        path: path.to_path_buf(),
        error,
    })?;
    let at = h.header_len();
    let header = crate::format::record::RecordHeader::new_checked(&b[at..n]);
    Ok(match header {
        Ok(r) if r.kind() == RecordKind::Message => Some(RecordRepr::parse(&r)),
        _ => None,
    })
}

/// Reads up to `b.len()` bytes of the start of `path`.
fn read_prefix(path: &Path, b: &mut [u8]) -> Result<usize, ArchiveError> {
    let mut f = File::open(path).map_err(|e| ArchiveError::io(path, "open", e))?;
    let mut n = 0;
    while n < b.len() {
        match f.read(&mut b[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ArchiveError::io(path, "read", e)),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::index::INDEX_EVERY;
    use crate::{Durability, RecordingWriter, WriterOptions};

    fn recording(name: &str, n: u64) -> PathBuf {
        let d = std::env::temp_dir().join(format!("reader-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let meta = StreamMeta {
            topic: "t".into(),
            session_id: 1,
            stream_id: 1,
        };
        let opts = WriterOptions {
            segment_len: 1 << 20,
            durability: Durability::None,
            ..WriterOptions::default()
        };
        let mut w = RecordingWriter::open(&d, &meta, opts, 0).unwrap();
        for i in 0..n {
            w.append(i * 2, 1_000 + i * 10, &[i as u8; 100]).unwrap();
        }
        w.close().unwrap();
        d
    }

    /// The cursor's first message, and how many records it parsed to reach it.
    fn first(c: &mut Cursor<'_>) -> (u64, u64, u64) {
        let (s, t) = match c.next_entry().unwrap().unwrap() {
            Entry::Message {
                sequence,
                receive_ns,
                ..
            } => (sequence, receive_ns),
            Entry::Damaged(d) => panic!("{d:?}"),
        };
        (s, t, c.parsed)
    }

    /// More records than an index entry covers.
    fn per_segment_before(_: &RecordingReader) -> u64 {
        INDEX_EVERY / 136 + 2
    }

    #[test]
    fn a_read_from_a_sequence_or_a_time_starts_at_the_index_entry_before_it() {
        let d = recording("index", 20_000);
        let r = RecordingReader::open(&d).unwrap();
        assert!(r.segment_count() >= 2);
        for seg in &r.segments {
            let idx = parse_index(&std::fs::read(segments::index_path(&seg.1)).unwrap());
            assert!(idx.len() >= 10, "{} entries", idx.len());
        }
        for i in [0u64, 1, 777, 5_000, 9_999, 12_345, 19_999] {
            // From the sequence (or the one after a missing odd one), and the time.
            let (s, _, n) = first(&mut r.from_sequence(i * 2).unwrap());
            assert_eq!(s, i * 2);
            if i < 19_999 {
                let (s1, _, _) = first(&mut r.from_sequence(i * 2 + 1).unwrap());
                assert_eq!(s1, i * 2 + 2);
            } else {
                assert!(r.from_sequence(i * 2 + 1).unwrap().next_entry().is_none());
            }
            let (s2, t, n2) = first(&mut r.from_time(1_000 + i * 10).unwrap());
            assert_eq!((s2, t), (i * 2, 1_000 + i * 10));
            // The read started at the index entry before it: at most an entry's worth of
            // records parsed (records of 136 bytes), not the segment's records before it.
            let per_entry = INDEX_EVERY / 136 + 2;
            assert!(n <= per_entry && n2 <= per_entry, "{i}: {n} {n2}");
        }
        // A damaged index, or one that points elsewhere: the same messages, from the start.
        let seg = r.segments.last().unwrap().1.clone();
        let idx = segments::index_path(&seg);
        let mut bytes = std::fs::read(&idx).unwrap();
        let stale = IndexEntry {
            sequence: 39_000,
            receive_ns: 1,
            offset: 4096,
        };
        bytes[64..96].copy_from_slice(&stale.emit());
        std::fs::write(&idx, &bytes).unwrap();
        let (s, _, n) = first(&mut r.from_sequence(39_990).unwrap());
        assert_eq!(s, 39_990);
        assert!(n > per_segment_before(&r), "from the segment's start: {n}");
        std::fs::write(&idx, b"not an index").unwrap();
        let (s, _, n) = first(&mut r.from_sequence(39_990).unwrap());
        assert_eq!(s, 39_990);
        assert!(n > per_segment_before(&r), "from the segment's start: {n}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
