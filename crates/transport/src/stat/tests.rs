use super::*;
use crate::ipc::dir::DirSpec;
use proptest::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_str().unwrap().to_string()
}

fn mine(scan: &Scan, path: &Path) -> ProcessCounters {
    let name = file_name(path);
    scan.processes
        .iter()
        .find(|p| p.file == name)
        .unwrap_or_else(|| panic!("{name} not in the scan: {scan:?}"))
        .clone()
}

const PUB_VALUES: &[(ValueKind, &str)] = &[
    (ValueKind::Counter, "messages"),
    (ValueKind::Counter, "bytes"),
    (ValueKind::Gauge, "subscribers"),
];

#[test]
fn a_reader_sees_what_the_owner_wrote_with_labels_kinds_and_names() {
    let f = CountersFile::create(16).unwrap();
    let r = f.record(
        RecordType::Publisher,
        &[("topic", "md.eq.AAPL"), ("uri", "ipc://x?capacity=1m")],
        PUB_VALUES,
    );
    assert!(r.is_shared());
    r.add(0, 3);
    r.add(1, 96);
    r.set(2, 2);
    let scan = scan(&DirSpec::default(), DeadFiles::Report).unwrap();
    let p = mine(&scan, f.path());
    assert_eq!(p.pid, std::process::id());
    assert_eq!(p.capacity, 16);
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert_eq!(p.records.len(), 1);
    let rec = &p.records[0];
    assert_eq!(rec.kind, RecordType::Publisher);
    assert_eq!(rec.label("topic"), Some("md.eq.AAPL"));
    assert_eq!(rec.label("uri"), Some("ipc://x?capacity=1m"));
    assert_eq!(
        rec.values,
        vec![
            Value {
                name: "messages".into(),
                kind: ValueKind::Counter,
                value: 3
            },
            Value {
                name: "bytes".into(),
                kind: ValueKind::Counter,
                value: 96
            },
            Value {
                name: "subscribers".into(),
                kind: ValueKind::Gauge,
                value: 2
            },
        ]
    );
}

#[test]
fn closed_records_disappear_and_a_reused_slot_gets_a_new_generation() {
    let f = CountersFile::create(4).unwrap();
    let a = f.record(RecordType::Subscriber, &[("topic", "a")], PUB_VALUES);
    let b = f.record(RecordType::Subscriber, &[("topic", "b")], PUB_VALUES);
    let before = mine(
        &scan(&DirSpec::default(), DeadFiles::Report).unwrap(),
        f.path(),
    );
    let gen_a = before.records[0].generation;
    assert_eq!(before.records.len(), 2);
    drop(a);
    let after = mine(
        &scan(&DirSpec::default(), DeadFiles::Report).unwrap(),
        f.path(),
    );
    assert_eq!(after.records.len(), 1);
    assert_eq!(after.records[0].label("topic"), Some("b"));
    let c = f.record(RecordType::Subscriber, &[("topic", "c")], PUB_VALUES);
    let again = mine(
        &scan(&DirSpec::default(), DeadFiles::Report).unwrap(),
        f.path(),
    );
    let rc = again
        .records
        .iter()
        .find(|r| r.label("topic") == Some("c"))
        .unwrap();
    assert_eq!(rc.index, 0, "the freed slot is reused");
    assert_eq!(rc.generation, gen_a + 1);
    drop((b, c));
}

#[test]
fn a_full_file_keeps_the_extra_records_private_and_counts_them() {
    let f = CountersFile::create(2).unwrap();
    let _a = f.record(RecordType::Publisher, &[], PUB_VALUES);
    let _b = f.record(RecordType::Publisher, &[], PUB_VALUES);
    let c = f.record(RecordType::Publisher, &[], PUB_VALUES);
    assert!(!c.is_shared());
    c.add(0, 5);
    assert_eq!(c.get(0), 5, "a private record still counts");
    let p = mine(
        &scan(&DirSpec::default(), DeadFiles::Report).unwrap(),
        f.path(),
    );
    assert_eq!((p.records.len(), p.refused), (2, 1));
}

#[test]
fn labels_lose_control_characters_and_are_cut_to_fit() {
    let f = CountersFile::create(2).unwrap();
    let long = "x".repeat(400);
    let _r = f.record(
        RecordType::Publisher,
        &[("topic", "a\nb=c"), ("uri", &long)],
        PUB_VALUES,
    );
    let p = mine(
        &scan(&DirSpec::default(), DeadFiles::Report).unwrap(),
        f.path(),
    );
    let rec = &p.records[0];
    assert_eq!(rec.label("topic"), Some("a?b=c"));
    let uri = rec.label("uri").unwrap();
    assert!(uri.len() < 232 && uri.bytes().all(|b| b == b'x'), "{uri}");
}

/// A file in the segment directory under `name` holding `bytes`, locked like a live
/// creator's (or not), built under a temporary name and the creators' turn so that no
/// concurrent cleanup takes it for a dead one's before it is locked.
fn plant(name: &str, bytes: &[u8], locked: bool) -> (PathBuf, std::fs::File) {
    plant_in(&DirSpec::default(), name, bytes, locked)
}

fn plant_in(spec: &DirSpec, name: &str, bytes: &[u8], locked: bool) -> (PathBuf, std::fs::File) {
    let dir = crate::ipc::dir::SegmentDir::open(spec).unwrap();
    let _turn = dir.turn().unwrap();
    let (mut f, temp) = dir.create_temp("plant").unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    f.write_all(bytes).unwrap();
    dir.rename(&temp, name).unwrap();
    if !locked {
        rustix::fs::flock(&f, rustix::fs::FlockOperation::Unlock).unwrap();
    }
    (dir.file_path(name), f)
}

fn valid_header(version: u32, capacity: u32) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_LEN + capacity as usize * RECORD_LEN];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    h[20..24].copy_from_slice(&capacity.to_le_bytes());
    h
}

#[test]
fn bad_files_of_live_processes_are_reported_not_crashed_on() {
    let tag = std::process::id();
    let mut random = vec![0u8; 5000];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in &mut random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut truncated = valid_header(VERSION, 8);
    truncated.truncate(HEADER_LEN + RECORD_LEN);
    let mut overclaimed = valid_header(VERSION, 1);
    overclaimed[28..32].copy_from_slice(&9u32.to_le_bytes());
    let mut bad_record = valid_header(VERSION, 1);
    bad_record[28..32].copy_from_slice(&1u32.to_le_bytes());
    bad_record[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2u32.to_le_bytes()); // live
    bad_record[HEADER_LEN + 12..HEADER_LEN + 16].copy_from_slice(&99u32.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("short", vec![1, 2, 3], "shorter than the 256-byte header"),
        ("random", random, "not a counters file"),
        ("version", valid_header(7, 1), "layout version 7"),
        ("truncated", truncated, "truncated: 8 records need"),
        ("overclaimed", overclaimed, "more than its capacity"),
    ];
    let mut held = Vec::new();
    for (what, bytes, _) in &cases {
        held.push(plant(
            &format!("{FILE_PREFIX}{tag}.bad-{what}.0"),
            bytes,
            true,
        ));
    }
    let (bad_path, _bad) = plant(
        &format!("{FILE_PREFIX}{tag}.bad-record.0"),
        &bad_record,
        true,
    );
    let scan = scan(&DirSpec::default(), DeadFiles::Report).unwrap();
    for (what, _, expect) in &cases {
        let name = format!("{FILE_PREFIX}{tag}.bad-{what}.0");
        let p = scan
            .problems
            .iter()
            .find(|p| p.file == name)
            .unwrap_or_else(|| panic!("{name} not reported: {:?}", scan.problems));
        assert!(p.problem.contains(expect), "{what}: {}", p.problem);
    }
    // A broken record is skipped and named; the file's other content is still read.
    let p = mine(&scan, &bad_path);
    assert!(p.records.is_empty());
    assert_eq!(
        p.problems,
        vec![format!("record 0: 99 values, more than {MAX_VALUES}")]
    );
    for (path, _) in held.iter().chain([(bad_path, _bad)].iter()) {
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn files_nobody_holds_are_reported_as_dead_and_removed_only_when_asked() {
    // A base directory of this test's own: no publisher of another test sweeps it.
    let base = std::env::temp_dir().join(format!("pg-stat-dead-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let spec = DirSpec {
        base: Some(base.clone()),
        group: None,
    };
    let name = format!("{FILE_PREFIX}{}.dead.0", std::process::id());
    let (path, f) = plant_in(&spec, &name, &valid_header(VERSION, 1), false);
    drop(f);
    let live = format!("{FILE_PREFIX}{}.live.0", std::process::id());
    let (live_path, _held) = plant_in(&spec, &live, &valid_header(VERSION, 1), true);

    let looked = scan(&spec, DeadFiles::Report).unwrap();
    assert_eq!(looked.dead, vec![name.clone()]);
    assert!(looked.removed_dead.is_empty());
    assert!(path.exists(), "a look removes nothing");
    assert!(!looked.processes.iter().any(|p| p.file == name));
    assert!(looked.processes.iter().any(|p| p.file == live));

    let cleaned = scan(&spec, DeadFiles::Remove).unwrap();
    assert_eq!(cleaned.removed_dead, vec![name.clone()]);
    assert!(cleaned.dead.is_empty());
    assert!(!path.exists(), "{name} still there");
    assert!(live_path.exists(), "a live process's file stays");
    drop(_held);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn dropping_the_file_removes_it() {
    let f = CountersFile::create(1).unwrap();
    let path = f.path().to_path_buf();
    assert!(path.exists());
    drop(f);
    assert!(!path.exists());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any bytes after a valid header: the reader returns records or problems, never panics.
    #[test]
    fn any_record_bytes_are_survived(
        body in proptest::collection::vec(any::<u8>(), RECORD_LEN * 2),
        high in 0u32..4,
        state_live in any::<bool>(),
    ) {
        let mut bytes = valid_header(VERSION, 2);
        bytes[28..32].copy_from_slice(&high.to_le_bytes());
        bytes[HEADER_LEN..].copy_from_slice(&body);
        if state_live {
            bytes[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2u32.to_le_bytes());
        }
        let name = format!("{FILE_PREFIX}{}.fuzz.{}", std::process::id(), high);
        let (path, f) = plant(&name, &bytes, true);
        let got = read_segment(&f);
        let _ = std::fs::remove_file(&path);
        if high > 2 {
            prop_assert!(got.is_err());
        } else {
            let p = got.unwrap().unwrap();
            prop_assert!(p.records.len() + p.problems.len() <= high as usize);
        }
    }
}
