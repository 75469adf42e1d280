//! The owner's side: creating a counters file, claiming records, writing values.

use super::*;
use crate::error::OpenError;
use crate::ipc::dir::PrivateFile;
use crate::ipc::sigbus::Mapping;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

static PROCESS_LABEL: Mutex<Option<String>> = Mutex::new(None);
static NEXT_FILE: AtomicU32 = AtomicU32::new(0);

/// Names this process in the counters files it creates from now on (`peregrine stat` shows it
/// next to the pid). The default is the program's name. Letters, digits, `-` and `_` are kept,
/// anything else becomes `_`; at most 64 characters.
pub fn set_process_label(label: &str) {
    *PROCESS_LABEL.lock().expect("label lock") = Some(label.to_string());
}

fn process_label() -> String {
    if let Some(l) = PROCESS_LABEL.lock().expect("label lock").clone() {
        return l;
    }
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "process".into())
}

/// A label as a file name part.
fn file_safe(label: &str) -> String {
    let s: String = label
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "process".into()
    } else {
        s
    }
}

/// One context's counters file, held (and locked) while any of its records lives.
#[derive(Debug)]
pub struct CountersFile {
    map: Mapping,
    file: PrivateFile,
    capacity: u32,
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    high: u32,
    free: Vec<u32>,
}

impl CountersFile {
    /// Creates this context's file in the user's segment directory, with room for `capacity`
    /// records.
    pub fn create(capacity: u32) -> Result<Arc<CountersFile>, OpenError> {
        let capacity = capacity.clamp(1, 1 << 20);
        let label = process_label();
        let name = format!(
            "{FILE_PREFIX}{}.{}.{}",
            std::process::id(),
            file_safe(&label),
            NEXT_FILE.fetch_add(1, Ordering::Relaxed)
        );
        let len = HEADER_LEN as u64 + capacity as u64 * RECORD_LEN as u64;
        let file = PrivateFile::create(&name, len)?;
        let map = Mapping::new(&file.file, len as usize).map_err(|e| OpenError::Io {
            op: "map",
            path: file.path.clone(),
            source: e,
        })?;
        let f = CountersFile {
            map,
            file,
            capacity,
            slots: Mutex::default(),
        };
        f.u32_at(H_VERSION).store(VERSION, Ordering::Relaxed);
        f.u32_at(H_HEADER_LEN)
            .store(HEADER_LEN as u32, Ordering::Relaxed);
        f.u32_at(H_RECORD_LEN)
            .store(RECORD_LEN as u32, Ordering::Relaxed);
        f.u32_at(H_CAPACITY).store(capacity, Ordering::Relaxed);
        f.u32_at(H_PID).store(std::process::id(), Ordering::Relaxed);
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        f.u64_at(H_START_NS).store(now_ns, Ordering::Relaxed);
        let label = truncate(&label, MAX_PROCESS_LABEL_LEN);
        f.write_bytes(H_LABEL, label.as_bytes());
        f.u32_at(H_LABEL_LEN)
            .store(label.len() as u32, Ordering::Relaxed);
        // Last: a reader that sees the magic sees everything above.
        f.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
        Ok(Arc::new(f))
    }

    /// Where the file is.
    pub fn path(&self) -> &std::path::Path {
        &self.file.path
    }

    /// The 4-byte word at `offset` of the file.
    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.map.len());
        // SAFETY: in bounds and 4-byte aligned (the mapping is page-aligned); the mapping lives
        // as long as `self`; every process accesses the file's words atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: as in `u32_at`, 8-byte aligned.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    /// Writes `bytes` at `offset` (8-aligned) as whole words, zero-padded to a multiple of 8.
    fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.u64_at(offset + 8 * i)
                .store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
    }

    /// Claims a record: `labels` as `key=value` pairs, one value per descriptor, all zero.
    /// When the file is full, the record's values live in this process only (and the header
    /// counts it refused).
    pub fn record(
        self: &Arc<Self>,
        kind: RecordType,
        labels: &[(&str, &str)],
        values: &[(ValueKind, &str)],
    ) -> Record {
        assert!(values.len() <= MAX_VALUES, "too many values for one record");
        debug_assert!(values.iter().all(|(_, n)| valid_value_name(n)));
        let index = {
            let mut s = self.slots.lock().expect("slots lock");
            match s.free.pop() {
                Some(i) => Some(i),
                None if s.high < self.capacity => {
                    s.high += 1;
                    Some(s.high - 1)
                }
                None => None,
            }
        };
        let Some(index) = index else {
            self.u32_at(H_REFUSED).fetch_add(1, Ordering::Relaxed);
            return Record::detached(values.len());
        };
        let base = HEADER_LEN + index as usize * RECORD_LEN;
        let state = self.u32_at(base + R_STATE);
        state.store(RecordState::Writing as u32, Ordering::Relaxed);
        self.u32_at(base + R_GENERATION)
            .fetch_add(1, Ordering::Relaxed);
        // Readers that saw the old state must see Writing before any new byte.
        std::sync::atomic::fence(Ordering::Release);
        self.u32_at(base + R_TYPE)
            .store(kind.code(), Ordering::Relaxed);
        self.u32_at(base + R_COUNT)
            .store(values.len() as u32, Ordering::Relaxed);
        let label = encode_label(labels);
        let mut padded = [0u8; MAX_LABEL_LEN];
        padded[..label.len()].copy_from_slice(label.as_bytes());
        self.write_bytes(base + R_LABEL, &padded);
        self.u32_at(base + R_LABEL_LEN)
            .store(label.len() as u32, Ordering::Relaxed);
        for i in 0..MAX_VALUES {
            let mut d = [0u8; DESCRIPTOR_LEN];
            if let Some((k, name)) = values.get(i) {
                d[0] = k.code();
                let n = name.len().min(MAX_NAME_LEN);
                d[1..1 + n].copy_from_slice(&name.as_bytes()[..n]);
            }
            self.write_bytes(base + R_DESCRIPTORS + i * DESCRIPTOR_LEN, &d);
            self.u64_at(base + R_VALUES + 8 * i)
                .store(0, Ordering::Relaxed);
        }
        self.u32_at(H_HIGH).fetch_max(index + 1, Ordering::Release);
        state.store(RecordState::Live as u32, Ordering::Release);
        let values_ptr = NonNull::from(self.u64_at(base + R_VALUES));
        Record {
            values: values_ptr,
            count: values.len(),
            backing: Backing::File(self.clone(), index),
        }
    }

    fn release(&self, index: u32) {
        let base = HEADER_LEN + index as usize * RECORD_LEN;
        self.u32_at(base + R_STATE)
            .store(RecordState::Closed as u32, Ordering::Release);
        self.slots.lock().expect("slots lock").free.push(index);
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `key=value` pairs joined by `\n`, control characters in values replaced by `?`, cut to
/// [`MAX_LABEL_LEN`].
fn encode_label(labels: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (k, v) in labels {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(k);
        s.push('=');
        s.extend(v.chars().map(|c| if c.is_control() { '?' } else { c }));
    }
    truncate(&s, MAX_LABEL_LEN).to_string()
}

#[derive(Debug)]
enum Backing {
    File(Arc<CountersFile>, u32),
    /// No file (it could not be created, or it was full): the values live in this process.
    Local(#[allow(dead_code)] Box<[AtomicU64]>),
}

/// One publisher's (subscriber's, resolver's...) values, written by one thread with relaxed
/// stores. Dropping it closes the record.
#[derive(Debug)]
pub struct Record {
    /// The first value: in the file's mapping, or in the `Local` box.
    values: NonNull<AtomicU64>,
    count: usize,
    backing: Backing,
}

// SAFETY: `values` points into memory owned by `backing` (an `Arc` of the mapping, or a box),
// which moves with the record and is only ever accessed through atomics.
unsafe impl Send for Record {}
// SAFETY: as above; every access is atomic.
unsafe impl Sync for Record {}

impl Record {
    /// A record whose values stay in this process (no counters file).
    pub fn detached(count: usize) -> Record {
        let b: Box<[AtomicU64]> = (0..count.max(1)).map(|_| AtomicU64::new(0)).collect();
        Record {
            values: NonNull::from(&b[0]),
            count,
            backing: Backing::Local(b),
        }
    }

    /// True when other processes can read this record.
    pub fn is_shared(&self) -> bool {
        matches!(self.backing, Backing::File(..))
    }

    #[inline]
    fn values(&self) -> &[AtomicU64] {
        // SAFETY: `values` points at `count` (at least one allocated) consecutive atomics that
        // live as long as `backing` (see the type's invariant).
        unsafe { std::slice::from_raw_parts(self.values.as_ptr(), self.count) }
    }

    /// Adds `n` to value `i`: a relaxed load and store (only the owner writes).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        let v = &self.values()[i];
        v.store(v.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Sets value `i`.
    #[inline]
    pub fn set(&self, i: usize, value: u64) {
        self.values()[i].store(value, Ordering::Relaxed);
    }

    /// Sets the values from the first on, in order.
    pub fn set_all(&self, values: impl IntoIterator<Item = u64>) {
        for (slot, v) in self.values().iter().zip(values) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// Value `i` as written.
    pub fn get(&self, i: usize) -> u64 {
        self.values()[i].load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Backing::File(f, index) = &self.backing {
            f.release(*index);
        }
    }
}
