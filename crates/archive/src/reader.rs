//! Reading a recording back: [`RecordingReader`] and its [`Cursor`].

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
                Ok(())
            }
            Err(e) => {
                self.file = None;
                Err(e)
            }
        }
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
