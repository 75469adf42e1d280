//! The reader's side: finding the counters files of live processes, copying their records
//! consistently, removing the files of dead processes, and reporting files that are not what
//! they should be (truncated, foreign, of another version) without trusting a byte of them.

use super::*;
use crate::error::OpenError;
use crate::ipc::dir::{DirSpec, SegmentDir};
use crate::ipc::sigbus::Mapping;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// One value of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub name: String,
    pub kind: ValueKind,
    pub value: u64,
}

/// A consistent copy of one live record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSnapshot {
    /// The slot in the file; with `generation`, identifies the record while it lives.
    pub index: u32,
    pub generation: u32,
    pub kind: RecordType,
    /// `key=value` pairs, in the writer's order.
    pub labels: Vec<(String, String)>,
    pub values: Vec<Value>,
}

impl RecordSnapshot {
    /// The label `key`, if the record has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value named `name`, if the record has it.
    pub fn value(&self, name: &str) -> Option<u64> {
        self.values.iter().find(|v| v.name == name).map(|v| v.value)
    }
}

/// What one live process's counters file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessCounters {
    /// The file's name in the segment directory.
    pub file: String,
    pub pid: u32,
    /// The process's label (`peregrine-pub`, a program name).
    pub label: String,
    /// When the file was created, ns since the Unix epoch.
    pub start_unix_ns: u64,
    pub capacity: u32,
    /// Records the file had no room for.
    pub refused: u32,
    pub records: Vec<RecordSnapshot>,
    /// Records skipped because they break the layout (each says which and why).
    pub problems: Vec<String>,
}

/// A file that could not be read as counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentProblem {
    pub file: String,
    pub problem: String,
}

impl std::fmt::Display for SegmentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.problem)
    }
}

/// Everything one look at the segment directory found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub dir: PathBuf,
    /// Live processes, by file name.
    pub processes: Vec<ProcessCounters>,
    /// Files held by a live process that are not valid counters files.
    pub problems: Vec<SegmentProblem>,
    /// Files of dead processes (nobody holds their lock) left in place
    /// ([`DeadFiles::Report`]).
    pub dead: Vec<String>,
    /// Files of dead processes removed by this scan ([`DeadFiles::Remove`]).
    pub removed_dead: Vec<String>,
}

/// What a scan does with the counters files of dead processes (a process that exits without
/// closing its context, or is killed, leaves its file behind; the next publisher to create a
/// shared-memory segment removes them too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadFiles {
    /// Lists them in [`Scan::dead`]: reading changes nothing.
    Report,
    /// Removes them, listing them in [`Scan::removed_dead`].
    Remove,
}

/// Reads every counters file in the segment directory `spec` names (the user's by default);
/// the files of dead processes are listed or removed as `dead` says. A directory that does
/// not exist yet holds nothing.
pub fn scan(spec: &DirSpec, dead: DeadFiles) -> Result<Scan, OpenError> {
    let base = match &spec.base {
        Some(b) => b.clone(),
        None => crate::ipc::dir::base_dir()?,
    };
    let name = match spec.group {
        None => format!("peregrine-{}", crate::ipc::dir::current_user()),
        Some(g) => format!("peregrine-group-{g}"),
    };
    let mut out = Scan {
        dir: base.join(&name),
        ..Scan::default()
    };
    if std::fs::symlink_metadata(&out.dir).is_err() {
        return Ok(out);
    }
    let dir = SegmentDir::open(spec)?;
    let mut names: Vec<String> = dir
        .entries()?
        .into_iter()
        .filter(|n| n.starts_with(FILE_PREFIX))
        .collect();
    names.sort();
    for name in names {
        let file = match dir.open_segment(&name) {
            Ok(Some(f)) => f,
            Ok(None) => continue, // removed since the listing
            Err(e) => {
                out.problems.push(SegmentProblem {
                    file: name,
                    problem: e.to_string(),
                });
                continue;
            }
        };
        if !crate::ipc::segment::held_exclusively(&file) {
            // Its creator died (the lock went with it): remove it if asked, if the name still
            // is it.
            match dead {
                DeadFiles::Report => out.dead.push(name),
                DeadFiles::Remove => {
                    if dir.names(&name, &file) && dir.unlink(&name).is_ok() {
                        out.removed_dead.push(name);
                    }
                }
            }
            continue;
        }
        match read_segment(&file) {
            Ok(Some(mut p)) => {
                p.file = name;
                out.processes.push(p);
            }
            Ok(None) => {} // being created
            Err(problem) => out.problems.push(SegmentProblem {
                file: name,
                problem,
            }),
        }
    }
    Ok(out)
}

/// Reads one counters file (open read-write: mappings are shared). `Ok(None)` while its
/// creator has not finished writing the header (no magic yet); `Err` says what is wrong.
pub fn read_segment(file: &File) -> Result<Option<ProcessCounters>, String> {
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?
        .len();
    if len < HEADER_LEN as u64 {
        return Err(format!(
            "truncated: {len} bytes, shorter than the {HEADER_LEN}-byte header"
        ));
    }
    let map_len = usize::try_from(len).map_err(|_| format!("{len} bytes is too large"))?;
    let map = Mapping::new(file, map_len).map_err(|e| format!("cannot map it: {e}"))?;
    let view = View { map: &map };
    let out = parse(&view, len);
    if map.damaged() {
        return Err("truncated while being read".into());
    }
    out
}

/// Atomic word loads from a mapping (a registered one: a truncation under us reads zeros).
struct View<'a> {
    map: &'a Mapping,
}

impl View<'_> {
    fn word(&self, offset: usize) -> u64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: in bounds, 8-byte aligned (page-aligned mapping); the mapping outlives the
        // view; the writer accesses the same words atomically.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
            .load(Ordering::Relaxed)
    }

    /// `len` bytes from `offset` (both multiples of 8), word by word.
    fn bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        (0..len / 8)
            .flat_map(|i| self.word(offset + 8 * i).to_le_bytes())
            .collect()
    }
}

fn lo(w: u64) -> u32 {
    w as u32
}
fn hi(w: u64) -> u32 {
    (w >> 32) as u32
}

fn parse(v: &View<'_>, len: u64) -> Result<Option<ProcessCounters>, String> {
    let magic = v.word(H_MAGIC);
    std::sync::atomic::fence(Ordering::Acquire);
    if magic == 0 {
        return Ok(None);
    }
    if magic != MAGIC {
        return Err(format!(
            "not a counters file: magic {magic:#018x}, not {MAGIC:#018x} (PGRNSTAT)"
        ));
    }
    let w8 = v.word(H_VERSION);
    let (version, header_len) = (lo(w8), hi(w8));
    if version != VERSION {
        return Err(format!(
            "layout version {version}; this peregrine reads version {VERSION}: read it with the peregrine of the release that wrote it"
        ));
    }
    let w16 = v.word(H_RECORD_LEN);
    let (record_len, capacity) = (lo(w16), hi(w16));
    if header_len as usize != HEADER_LEN || record_len as usize != RECORD_LEN {
        return Err(format!(
            "header length {header_len} and record length {record_len}, not {HEADER_LEN} and {RECORD_LEN} as version {VERSION} says"
        ));
    }
    let need = HEADER_LEN as u64 + capacity as u64 * RECORD_LEN as u64;
    if need > len {
        return Err(format!(
            "truncated: {capacity} records need {need} bytes, the file has {len}"
        ));
    }
    let w24 = v.word(H_PID);
    let (pid, high) = (lo(w24), hi(w24));
    if high > capacity {
        return Err(format!(
            "{high} records claimed, more than its capacity of {capacity}"
        ));
    }
    let start_unix_ns = v.word(H_START_NS);
    let w40 = v.word(H_REFUSED);
    let (refused, label_len) = (lo(w40), hi(w40) as usize);
    if label_len > MAX_PROCESS_LABEL_LEN {
        return Err(format!(
            "process label of {label_len} bytes, longer than {MAX_PROCESS_LABEL_LEN}"
        ));
    }
    let label =
        String::from_utf8_lossy(&v.bytes(H_LABEL, MAX_PROCESS_LABEL_LEN)[..label_len]).into_owned();
    let mut p = ProcessCounters {
        file: String::new(),
        pid,
        label,
        start_unix_ns,
        capacity,
        refused,
        records: Vec::new(),
        problems: Vec::new(),
    };
    for index in 0..high {
        match parse_record(v, index) {
            Ok(Some(r)) => p.records.push(r),
            Ok(None) => {}
            Err(e) => p.problems.push(format!("record {index}: {e}")),
        }
    }
    Ok(Some(p))
}

/// A live record's consistent copy; `None` for free, closed, or changing records.
fn parse_record(v: &View<'_>, index: u32) -> Result<Option<RecordSnapshot>, String> {
    let base = HEADER_LEN + index as usize * RECORD_LEN;
    let head = v.word(base + R_STATE);
    std::sync::atomic::fence(Ordering::Acquire);
    if lo(head) != RecordState::Live as u32 {
        return Ok(None);
    }
    let copy = v.bytes(base, RECORD_LEN);
    std::sync::atomic::fence(Ordering::Acquire);
    if v.word(base + R_STATE) != head {
        return Ok(None); // closed or reclaimed while copied
    }
    let u32_at = |o: usize| u32::from_le_bytes(copy[o..o + 4].try_into().expect("4 bytes"));
    let kind = RecordType::from_code(u32_at(R_TYPE));
    let count = u32_at(R_COUNT) as usize;
    if count > MAX_VALUES {
        return Err(format!("{count} values, more than {MAX_VALUES}"));
    }
    let label_len = u32_at(R_LABEL_LEN) as usize;
    if label_len > MAX_LABEL_LEN {
        return Err(format!(
            "label of {label_len} bytes, longer than {MAX_LABEL_LEN}"
        ));
    }
    let label = String::from_utf8_lossy(&copy[R_LABEL..R_LABEL + label_len]).into_owned();
    let labels = label
        .split('\n')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut values = Vec::with_capacity(count);
    for i in 0..count {
        let d = &copy[R_DESCRIPTORS + i * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN];
        let Some(k) = ValueKind::from_code(d[0]) else {
            return Err(format!("value {i} has kind {}, not 1 or 2", d[0]));
        };
        let name_len = d[1..].iter().position(|&b| b == 0).unwrap_or(MAX_NAME_LEN);
        let name = std::str::from_utf8(&d[1..1 + name_len])
            .ok()
            .filter(|n| valid_value_name(n))
            .ok_or_else(|| format!("value {i} has no valid name"))?;
        let o = R_VALUES + 8 * i;
        values.push(Value {
            name: name.to_string(),
            kind: k,
            value: u64::from_le_bytes(copy[o..o + 8].try_into().expect("8 bytes")),
        });
    }
    Ok(Some(RecordSnapshot {
        index,
        generation: hi(head),
        kind,
        labels,
        values,
    }))
}
