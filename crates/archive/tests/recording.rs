//! Recordings written and read back through the file system: bit-exact across many segments,
//! from a sequence and a time, resumed after a writer closes, a torn tail cut on reopening,
//! a flipped byte reported with its file and offset while the rest still reads, a process
//! killed with SIGKILL keeping every record it had forced, and bad settings refused.

use peregrine_archive::format::align8;
use peregrine_archive::format::index::{parse_index, IndexEntry};
use peregrine_archive::format::record::RECORD_HEADER_LEN;
use peregrine_archive::{
    ArchiveError, Durability, Entry, RecordingReader, RecordingWriter, Retention, StreamMeta,
    WriterOptions,
};
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("archive-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn meta() -> StreamMeta {
    StreamMeta {
        topic: "orders.eu".into(),
        session_id: 0x00ab_cdef,
        stream_id: 7,
    }
}

/// Small segments: a few hundred messages fill one.
fn small() -> WriterOptions {
    WriterOptions {
        segment_len: 64 << 10,
        durability: Durability::None,
        buffer_bytes: 4096,
        retention: Retention::default(),
    }
}

/// Message `i`: a size between 0 and 499 bytes, each byte derived from `i`.
fn message(i: u64) -> Vec<u8> {
    let len = (i * 37 % 500) as usize;
    (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
}

const T0: u64 = 1_800_000_000_000_000_000;

fn write(d: &Path, range: std::ops::Range<u64>, opts: WriterOptions) -> RecordingWriter {
    let mut w = RecordingWriter::open(d, &meta(), opts, T0).unwrap();
    for i in range {
        w.append(i, T0 + i * 1000, &message(i)).unwrap();
    }
    w
}

/// A message as read: sequence, receive time, bytes.
type Read = (u64, u64, Vec<u8>);

/// Every entry of a cursor: the messages, and where the damaged records are.
fn read_all(c: &mut peregrine_archive::Cursor<'_>) -> (Vec<Read>, Vec<(PathBuf, u64)>) {
    let (mut msgs, mut damaged) = (Vec::new(), Vec::new());
    while let Some(e) = c.next_entry() {
        match e.unwrap() {
            Entry::Message {
                sequence,
                receive_ns,
                payload,
            } => msgs.push((sequence, receive_ns, payload.to_vec())),
            Entry::Damaged(d) => damaged.push((d.path, d.offset)),
        }
    }
    (msgs, damaged)
}

fn expected(range: std::ops::Range<u64>) -> Vec<(u64, u64, Vec<u8>)> {
    range.map(|i| (i, T0 + i * 1000, message(i))).collect()
}

#[test]
fn what_is_written_reads_back_bit_exact_across_segments_from_any_sequence_or_time() {
    let d = dir("exact");
    let w = write(&d, 0..5000, small());
    assert_eq!((w.meta(), w.appended()), (&meta(), 5000));
    let segment_len = w.segment_len();
    w.close().unwrap();
    let r = RecordingReader::open(&d).unwrap();
    assert_eq!(r.meta(), &meta());
    assert_eq!((r.dir(), r.segment_len()), (d.as_path(), segment_len));
    assert_eq!(segment_len, small().segment_len);
    assert!(r.segment_count() > 10, "{} segments", r.segment_count());
    let (msgs, damaged) = read_all(&mut r.cursor());
    assert!(damaged.is_empty(), "{damaged:?}");
    assert_eq!(msgs, expected(0..5000));
    for start in [0, 1, 777, 2500, 4999] {
        let (m, _) = read_all(&mut r.from_sequence(start).unwrap());
        assert_eq!(m, expected(start..5000), "from sequence {start}");
        let (m, _) = read_all(&mut r.from_time(T0 + start * 1000 - 1).unwrap());
        assert_eq!(m, expected(start..5000), "from time before {start}");
    }
    assert!(read_all(&mut r.from_sequence(5000).unwrap()).0.is_empty());
    assert_index_points_at_its_records(&d);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_closed_recording_is_resumed_where_it_ended() {
    let d = dir("resume");
    write(&d, 0..300, small()).close().unwrap();
    // Reopened, it knows where the recording stands: each sequence once, in order.
    let mut w = RecordingWriter::open(&d, &meta(), small(), T0).unwrap();
    assert_eq!(w.last_sequence(), Some(299));
    let e = w.append(299, T0, b"again").unwrap_err();
    assert!(
        matches!(
            e,
            ArchiveError::SequenceNotAfter {
                sequence: 299,
                last: 299
            }
        ),
        "{e}"
    );
    drop(w);
    let w = write(&d, 300..900, small());
    assert_eq!(w.recovery().torn, None);
    assert!(w.recovery().damaged.is_empty());
    w.close().unwrap();
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert!(damaged.is_empty());
    assert_eq!(msgs, expected(0..900));
    // Another stream's writer is refused the folder.
    let other = StreamMeta {
        session_id: 1,
        ..meta()
    };
    let e = RecordingWriter::open(&d, &other, small(), T0).unwrap_err();
    assert!(matches!(e, ArchiveError::OtherStream { .. }), "{e}");
    assert!(e.to_string().contains("session 00abcdef"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Every record on disk, walked by the layout of docs/recording.md alone: (file, offset,
/// kind, sequence).
fn records_on_disk(d: &Path) -> Vec<(PathBuf, u64, u8, u64)> {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    let mut out = Vec::new();
    for seg in segs {
        let bytes = std::fs::read(&seg).unwrap();
        // The header: 64 bytes and "orders.eu" padded to 16.
        let mut at = 64 + 16;
        while at + RECORD_HEADER_LEN <= bytes.len()
            && bytes[at..at + RECORD_HEADER_LEN] != [0u8; RECORD_HEADER_LEN]
        {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            let seq = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap());
            out.push((seg.clone(), at as u64, bytes[at + 8], seq));
            at += RECORD_HEADER_LEN + align8(len);
        }
    }
    out
}

/// The last segment and the offset of its last record.
fn last_record(d: &Path) -> (PathBuf, u64) {
    let (path, offset, _, _) = records_on_disk(d).pop().unwrap();
    (path, offset)
}

#[test]
fn a_torn_tail_is_cut_when_the_recording_is_opened_again_and_never_read() {
    let d = dir("torn");
    write(&d, 0..400, small()).close().unwrap();
    // The last record half written: its last 8 bytes never reached the file.
    let (path, offset) = last_record(&d);
    let mut bytes = std::fs::read(&path).unwrap();
    let len = u32::from_le_bytes(
        bytes[offset as usize + 4..offset as usize + 8]
            .try_into()
            .unwrap(),
    );
    let end = offset as usize + RECORD_HEADER_LEN + len as usize;
    assert!(len >= 8, "message 399 has {len} bytes");
    bytes[end - 8..end].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    // A reader sees it as damaged with nothing after it: reported, then the end.
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert_eq!(msgs, expected(0..399));
    assert_eq!(damaged, vec![(path.clone(), offset)]);
    // An index entry past the cut (as a writer killed mid-write may leave): recovery makes
    // the segment's index again from what it keeps.
    let idx = path.with_extension("idx");
    let mut ib = std::fs::read(&idx).unwrap();
    ib.extend_from_slice(
        &IndexEntry {
            sequence: 450,
            receive_ns: T0 + 450_000,
            offset: offset + 8,
        }
        .emit(),
    );
    std::fs::write(&idx, &ib).unwrap();
    // The writer cuts it, counts it, and appends where it was.
    let w = write(&d, 399..500, small());
    let (p, at, torn_bytes) = w.recovery().torn.clone().expect("a torn tail");
    assert_eq!((p, at), (path, offset));
    assert!(
        torn_bytes > 0 && torn_bytes <= u64::from(len) + 32,
        "{torn_bytes}"
    );
    w.close().unwrap();
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert!(damaged.is_empty(), "{damaged:?}");
    assert_eq!(msgs, expected(0..500));
    assert_index_points_at_its_records(&d);
    let _ = std::fs::remove_dir_all(&d);
}

/// Every entry of every segment's index names the message record at its offset.
fn assert_index_points_at_its_records(d: &Path) {
    let on_disk = records_on_disk(d);
    let mut entries = 0;
    for seg in on_disk
        .iter()
        .map(|r| r.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
    {
        for e in parse_index(&std::fs::read(seg.with_extension("idx")).unwrap()) {
            entries += 1;
            assert!(
                on_disk
                    .iter()
                    .any(|r| r.0 == seg && r.1 == e.offset && r.2 == 1 && r.3 == e.sequence),
                "{}: {e:?} points at no such record",
                seg.display()
            );
        }
    }
    assert!(entries > 0);
}

#[test]
fn a_flipped_byte_is_reported_with_its_file_and_offset_and_the_rest_still_reads() {
    let d = dir("flip");
    write(&d, 0..2000, small()).close().unwrap();
    let r = RecordingReader::open(&d).unwrap();
    // Message 700's payload, one byte flipped.
    let (path, offset) = records_on_disk(&d)
        .into_iter()
        .find(|r| r.2 == 1 && r.3 == 700)
        .map(|r| (r.0, r.1))
        .expect("message 700");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + RECORD_HEADER_LEN + 3] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let (msgs, damaged) = read_all(&mut r.cursor());
    assert_eq!(damaged, vec![(path, offset)]);
    let want: Vec<_> = expected(0..2000)
        .into_iter()
        .filter(|m| m.0 != 700)
        .collect();
    assert_eq!(msgs, want);
    // A writer opening it leaves the damage for readers to skip (it is not the tail).
    let w = RecordingWriter::open(&d, &meta(), small(), T0).unwrap();
    assert_eq!(w.recovery().torn, None);
    drop(w);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_settings_and_oversized_messages_are_refused_with_the_fix() {
    for (text, ok) in [
        ("none", Some(Durability::None)),
        ("each", Some(Durability::Each)),
        ("interval:100", Some(Durability::Interval { ms: 100 })),
        ("interval:0", None),
        ("interval:x", None),
        ("always", None),
    ] {
        match (text.parse::<Durability>(), ok) {
            (Ok(d), Some(want)) => {
                assert_eq!(d, want);
                assert_eq!(d.to_string(), text);
            }
            (Err(e), None) => assert!(e.to_string().contains("give none, each, or interval:MS")),
            (r, _) => panic!("{text}: {r:?}"),
        }
    }
    let d = dir("bad");
    let e = RecordingWriter::open(
        &d,
        &meta(),
        WriterOptions {
            segment_len: 10_000,
            ..WriterOptions::default()
        },
        T0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("segment length 10000"), "{e}");
    let mut w = RecordingWriter::open(&d, &meta(), small(), T0).unwrap();
    let max = w.max_message_len();
    assert_eq!(max, (64 << 10) - 80 - 32);
    let e = w.append(0, T0, &vec![0; max + 1]).unwrap_err();
    assert!(e.to_string().contains("at most 65424"), "{e}");
    // The largest fits, alone in a segment.
    w.append(0, T0, &vec![7; max]).unwrap();
    w.append(1, T0, b"next").unwrap();
    w.close().unwrap();
    let (msgs, _) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].2, vec![7; max]);
    let e = RecordingReader::open(&dir("empty")).unwrap_err();
    assert!(
        matches!(
            e,
            ArchiveError::Io { .. } | ArchiveError::NotARecording { .. }
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The child of the SIGKILL test: appends with `fsync=each`, printing each sequence once it
/// is forced, until it is killed.
#[test]
fn sigkill_child() {
    let Ok(d) = std::env::var("PEREGRINE_ARCHIVE_CHILD_DIR") else {
        return;
    };
    let opts = WriterOptions {
        durability: Durability::Each,
        ..small()
    };
    let mut w = RecordingWriter::open(Path::new(&d), &meta(), opts, T0).unwrap();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        w.append(i, T0 + i * 1000, &message(i)).unwrap();
        writeln!(out, "{i}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn a_writer_killed_with_sigkill_keeps_every_record_it_forced() {
    use std::io::BufRead;
    let d = dir("kill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("PEREGRINE_ARCHIVE_CHILD_DIR", &d)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut forced = None;
    // Kill it once it has forced 300 records (through a segment roll), mid-stream.
    for l in lines.by_ref() {
        if let Ok(i) = l.unwrap().trim().parse::<u64>() {
            forced = Some(i);
            if i >= 300 {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let forced = forced.expect("the child forced records");
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert!(damaged.len() <= 1, "at most a torn tail: {damaged:?}");
    assert!(
        msgs.len() as u64 > forced,
        "{} read, {forced} forced",
        msgs.len()
    );
    assert_eq!(msgs, expected(0..msgs.len() as u64));
    // Reopened: whatever was torn is cut, and appending carries on.
    let next = msgs.len() as u64;
    write(&d, next..next + 10, small()).close().unwrap();
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&d).unwrap().cursor());
    assert!(damaged.is_empty(), "{damaged:?}");
    assert_eq!(msgs, expected(0..next + 10));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_disk_stops_the_recording_naming_the_folder_and_what_was_written_still_reads() {
    if !peregrine_testkit::root("it mounts a small tmpfs to fill") {
        return;
    }
    let Some(mount) = peregrine_testkit::program("mount", "apt-get install mount") else {
        return;
    };
    let d = dir("full");
    std::fs::create_dir_all(&d).unwrap();
    let ok = std::process::Command::new(&mount)
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&d)
        .status()
        .unwrap();
    assert!(ok.success(), "mount -t tmpfs on {}", d.display());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _unmount = Unmount(d.clone());
    let rec = d.join("orders");
    let mut w = RecordingWriter::open(&rec, &meta(), small(), T0).unwrap();
    let mut appended = 0;
    let err = loop {
        match w.append(appended, T0 + appended * 1000, &message(appended)) {
            Ok(()) => appended += 1,
            Err(e) => break e,
        }
        assert!(appended < 1_000_000, "a 1 MiB file system never filled");
    };
    assert!(
        matches!(&err, ArchiveError::StorageFull { dir } if dir == &rec),
        "{err}"
    );
    assert!(
        err.to_string().contains(&rec.display().to_string()),
        "{err}"
    );
    // Stopped: every later call says why, and nothing more goes in.
    let again = w.append(appended, T0, b"x").unwrap_err();
    assert!(
        again
            .to_string()
            .contains("stopped after an earlier failure"),
        "{again}"
    );
    drop(w);
    let (msgs, damaged) = read_all(&mut RecordingReader::open(&rec).unwrap().cursor());
    assert!(damaged.is_empty(), "{damaged:?}");
    assert!(appended > 100, "{appended}");
    assert_eq!(msgs, expected(0..appended));
}

#[test]
fn records_across_read_windows_and_longer_than_a_window_read_back_exact() {
    // Segments of 4 MiB are read 1 MiB at a time: records straddle the windows' edges, and
    // one message is longer than a window.
    let d = dir("windows");
    let opts = WriterOptions {
        segment_len: 4 << 20,
        ..small()
    };
    let mut w = RecordingWriter::open(&d, &meta(), opts, T0).unwrap();
    let big: Vec<u8> = (0..1_500_000u32).map(|k| (k % 251) as u8).collect();
    let mut want = Vec::new();
    for i in 0..30_000u64 {
        let m = if i == 12_345 { big.clone() } else { message(i) };
        w.append(i, T0 + i * 1000, &m).unwrap();
        want.push((i, T0 + i * 1000, m));
    }
    w.close().unwrap();
    let r = RecordingReader::open(&d).unwrap();
    assert!(r.segment_count() >= 3, "{}", r.segment_count());
    let (msgs, damaged) = read_all(&mut r.cursor());
    assert!(damaged.is_empty(), "{damaged:?}");
    assert!(msgs == want, "read back differs");
    let (later, _) = read_all(&mut r.from_sequence(12_000).unwrap());
    assert!(later == want[12_000..], "from 12000 differs");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn retention_removes_the_oldest_segments_past_its_size_or_age_and_the_rest_reads() {
    // By size: four 64 KiB segments kept.
    let d = dir("retain-size");
    let opts = WriterOptions {
        retention: Retention {
            max_bytes: Some(256 << 10),
            max_age_ns: None,
        },
        ..small()
    };
    let w = write(&d, 0..5000, opts);
    assert!(w.retired() > 0);
    w.close().unwrap();
    let r = RecordingReader::open(&d).unwrap();
    assert_eq!(r.segment_count(), 4);
    let (msgs, damaged) = read_all(&mut r.cursor());
    assert!(damaged.is_empty());
    let first = msgs[0].0;
    assert!(first > 0);
    assert_eq!(
        msgs,
        expected(first..5000),
        "what is kept is the newest, whole"
    );

    // By age: messages 10 ms apart over 50 s; records older than 10 s go, a segment at a time.
    let d2 = dir("retain-age");
    let opts = WriterOptions {
        retention: Retention {
            max_bytes: None,
            max_age_ns: Some(10_000_000_000),
        },
        ..small()
    };
    let mut w = RecordingWriter::open(&d2, &meta(), opts, T0).unwrap();
    for i in 0..5000u64 {
        let t = T0 + i * 10_000_000;
        w.append(i, t, &message(i)).unwrap();
        w.poll(t).unwrap();
    }
    w.close().unwrap();
    let (msgs, _) = read_all(&mut RecordingReader::open(&d2).unwrap().cursor());
    let (first, last) = (msgs[0].1, msgs.last().unwrap().1);
    assert!(
        last - first >= 10_000_000_000,
        "at least the last 10 s are kept: {} s",
        (last - first) / 1_000_000_000
    );
    assert!(
        last - first < 12_000_000_000,
        "older segments went: {} s kept",
        (last - first) / 1_000_000_000
    );
    // A bound that keeps less than two segments is refused.
    let bad = WriterOptions {
        retention: Retention {
            max_bytes: Some(100 << 10),
            max_age_ns: None,
        },
        ..small()
    };
    let e = RecordingWriter::open(&dir("retain-bad"), &meta(), bad, T0).unwrap_err();
    assert!(e.to_string().contains("keep at least two segments"), "{e}");
    // A segment removed takes its index with it.
    for folder in [&d, &d2] {
        let count = |ext: &str| {
            std::fs::read_dir(folder)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == ext)
                })
                .count()
        };
        assert_eq!(count("idx"), count("seg"), "{}", folder.display());
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn a_paced_replay_takes_at_least_the_recorded_span_over_its_speed() {
    // 51 messages received 10 ms apart: 500 ms recorded, replayed at twice the speed. (A sleep
    // never ends early: the lower bound holds on any machine; no upper bound is asserted.)
    let d = dir("pace");
    let mut w = RecordingWriter::open(&d, &meta(), small(), T0).unwrap();
    for i in 0..=50u64 {
        w.append(i, T0 + i * 10_000_000, &message(i)).unwrap();
    }
    w.close().unwrap();
    let r = RecordingReader::open(&d).unwrap();
    let mut c = r.cursor();
    let mut pacer = peregrine_archive::Pacer::new(2.0);
    let t0 = std::time::Instant::now();
    let mut n = 0;
    while let Some(e) = c.next_entry() {
        if let Entry::Message { receive_ns, .. } = e.unwrap() {
            pacer.wait(receive_ns);
            n += 1;
        }
    }
    assert_eq!(n, 51);
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_recording_being_written_has_one_writer_and_its_unfinished_record_is_not_damage() {
    let d = dir("live");
    let mut w = write(&d, 0..100, small());
    w.flush().unwrap();
    // A second writer of the same recording (a second recorder of the folder) is refused
    // before it reads or cuts anything.
    let e = RecordingWriter::open(&d, &meta(), small(), T0).unwrap_err();
    assert!(matches!(e, ArchiveError::Busy { .. }), "{e}");
    assert!(e.to_string().contains("another process"), "{e}");
    // A record half written after the last one (what a reader can see while the writer's
    // write is under way), with a good record after it: while the writer holds the segment,
    // reading ends at it, with no damage; once the writer is gone, it is damage.
    let (path, offset) = last_record(&d);
    let span = records_on_disk(&d)
        .iter()
        .find(|r| r.0 == path && r.1 == offset)
        .map(|_| {
            let b = std::fs::read(&path).unwrap();
            let len = u32::from_le_bytes(
                b[offset as usize + 4..offset as usize + 8]
                    .try_into()
                    .unwrap(),
            );
            peregrine_archive::format::align8(RECORD_HEADER_LEN + len as usize) as u64
        })
        .unwrap();
    let end = offset + span;
    let mut bytes = std::fs::read(&path).unwrap();
    let good: Vec<u8> = bytes[offset as usize..end as usize].to_vec();
    // Torn: a header claiming 64 bytes, a payload of zeros (its CRC does not match); then a
    // copy of the last record, whole.
    bytes[end as usize..end as usize + 8].copy_from_slice(&[1, 2, 3, 4, 64, 0, 0, 0]);
    let after = end as usize + RECORD_HEADER_LEN + 64;
    bytes[after..after + good.len()].copy_from_slice(&good);
    std::fs::write(&path, &bytes).unwrap();
    let r = RecordingReader::open(&d).unwrap();
    let (msgs, damaged) = read_all(&mut r.cursor());
    assert_eq!(msgs, expected(0..100));
    assert!(damaged.is_empty(), "{damaged:?}");
    drop(w);
    let (_, damaged) = read_all(&mut r.cursor());
    assert_eq!(damaged, vec![(path, end)], "damage once nothing writes it");
    let _ = std::fs::remove_dir_all(&d);
}
