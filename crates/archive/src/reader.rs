//! Reading a recording back: [`RecordingReader`] and its [`Cursor`].

use crate::format::record::{parse_record, RecordKind, RecordRepr, RECORD_HEADER_LEN};
use crate::format::segment_header::SegmentHeaderRepr;
use crate::format::FormatError;
use crate::writer::next_good_record;
use crate::{segments, ArchiveError, StreamMeta};
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A recording opened for reading.
#[derive(Debug)]
pub struct RecordingReader {
    dir: PathBuf,
    segments: Vec<(u64, PathBuf)>,
    meta: StreamMeta,
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
        Ok(Cursor::new(self, seg, Start::Sequence(sequence)))
    }

    /// A cursor from the first message received at `receive_ns` or later.
    pub fn from_time(&self, receive_ns: u64) -> Result<Cursor<'_>, ArchiveError> {
        let seg = self.segment_for(|r| r.receive_ns <= receive_ns)?;
        Ok(Cursor::new(self, seg, Start::Time(receive_ns)))
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

/// Where a cursor starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    First,
    Sequence(u64),
    Time(u64),
}

/// Reads a recording's entries in order: see [`next_entry`](Self::next_entry).
#[derive(Debug)]
pub struct Cursor<'a> {
    reader: &'a RecordingReader,
    start: Start,
    /// The segment being read, its bytes, and where the next record is.
    seg: usize,
    data: Vec<u8>,
    loaded: bool,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(reader: &'a RecordingReader, seg: usize, start: Start) -> Self {
        Cursor {
            reader,
            start,
            seg,
            data: Vec::new(),
            loaded: false,
            at: 0,
        }
    }

    /// The next entry: a message, or a damaged record (reported once, then skipped); `None` at
    /// the end of what is written.
    pub fn next_entry(&mut self) -> Option<Result<Entry<'_>, ArchiveError>> {
        let range: Range<usize>;
        let (sequence, receive_ns);
        loop {
            if !self.loaded {
                let (_, path) = self.reader.segments.get(self.seg)?;
                match load(path, &mut self.data) {
                    Ok(header_len) => self.at = header_len,
                    Err(e) => {
                        // Reported once; the next call goes on with the next segment.
                        self.seg += 1;
                        return Some(Err(e));
                    }
                }
                self.loaded = true;
            }
            if self.at + RECORD_HEADER_LEN > self.data.len() {
                self.next_segment();
                continue;
            }
            let rest = &self.data[self.at..];
            if rest[..RECORD_HEADER_LEN].iter().all(|&b| b == 0) {
                // Nothing written from here: the end, unless a good record follows (zeros
                // where records were: damage).
                match next_good_record(&self.data, self.at) {
                    Some(next) => {
                        let d = self.damage(FormatError::BadField {
                            field: "record.kind",
                            value: 0,
                        });
                        self.at = next;
                        return Some(Ok(Entry::Damaged(d)));
                    }
                    None => {
                        self.next_segment();
                        continue;
                    }
                }
            }
            match parse_record(rest) {
                Ok((r, payload)) => {
                    let from = self.at + RECORD_HEADER_LEN;
                    self.at += r.span();
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
                    range = from..from + payload.len();
                    (sequence, receive_ns) = (r.sequence, r.receive_ns);
                    break;
                }
                Err(error) => {
                    let d = self.damage(error);
                    match next_good_record(&self.data, self.at) {
                        Some(next) => self.at = next,
                        None => self.next_segment(),
                    }
                    return Some(Ok(Entry::Damaged(d)));
                }
            }
        }
        Some(Ok(Entry::Message {
            sequence,
            receive_ns,
            payload: &self.data[range],
        }))
    }

    fn damage(&self, error: FormatError) -> Damage {
        Damage {
            path: self.reader.segments[self.seg].1.clone(),
            offset: self.at as u64,
            error,
        }
    }

    fn next_segment(&mut self) {
        self.seg += 1;
        self.loaded = false;
    }
}

/// Reads segment `path` whole into `data`; returns where its first record is.
fn load(path: &Path, data: &mut Vec<u8>) -> Result<usize, ArchiveError> {
    data.clear();
    File::open(path)
        .and_then(|mut f| {
            // Room for the whole file at once: no growing copy.
            let len = f.metadata()?.len();
            data.reserve(usize::try_from(len).unwrap_or(0));
            f.read_to_end(data)
        })
        .map_err(|e| ArchiveError::io(path, "read", e))?;
    let h = SegmentHeaderRepr::parse(data).map_err(|error| ArchiveError::BadSegment {
        path: path.to_path_buf(),
        error,
    })?;
    Ok(h.header_len())
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
