//! Counters another process can read: each context (and the distributor, resolverd) publishes
//! its counters into a file of shared memory of its own, which `peregrine stat` reads.
//!
//! ## Where
//!
//! In the user's segment directory (`/dev/shm/peregrine-UID/`, or under `$PEREGRINE_SHM_DIR`;
//! mode 0700, see [`crate::ipc::dir`]), one file per context named
//! `counters.PID.LABEL.N`: the process id, the process's label (`peregrine-pub`, or the
//! program's name; see [`set_process_label`]) and the context's number in the process. Each file
//! is mode 0600, and held with an exclusive `flock` by its creator for as long as the creator
//! lives: a file nobody holds belongs to a dead process. Publishers creating a shared-memory
//! segment remove such files; a reader reports them, and removes them only when asked
//! ([`DeadFiles`]; `peregrine stat --clean`).
//!
//! ## Layout (version 2; all integers little-endian, the host's order on every Linux target
//! Peregrine builds for)
//!
//! A header of [`HEADER_LEN`] bytes, then `capacity` records of [`RECORD_LEN`] bytes each.
//!
//! | offset | size | header field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `PGRNSTAT` ([`MAGIC`]) |
//! | 8 | 4 | version ([`VERSION`]) |
//! | 12 | 4 | header length (256) |
//! | 16 | 4 | record length (2816) |
//! | 20 | 4 | capacity: records the file has room for |
//! | 24 | 4 | pid of the creator |
//! | 28 | 4 | records claimed so far (a high-water mark; readers look at no record beyond it) |
//! | 32 | 8 | creation time, ns since the Unix epoch |
//! | 40 | 4 | records refused because the file was full (their counters stay private) |
//! | 44 | 4 | length of the process label |
//! | 64 | 128 | process label (UTF-8) |
//!
//! | offset | size | record field |
//! | --- | --- | --- |
//! | 0 | 4 | state: 0 free, 1 being written, 2 live, 3 closed ([`RecordState`]) |
//! | 4 | 4 | generation: incremented each time the slot is claimed |
//! | 8 | 4 | type ([`RecordType`]: 1 publisher, 2 subscriber, 3 resolver, 4 relay, 5 distributor, 6 consumer) |
//! | 12 | 4 | number of values (at most [`MAX_VALUES`]) |
//! | 16 | 4 | length of the label |
//! | 24 | 232 | label: `key=value` pairs separated by `\n` (`topic`, `uri`, `session`...) |
//! | 256 | 32 x 64 | one descriptor per value: a kind byte (1 counter, 2 gauge), then its name, NUL-padded |
//! | 2304 | 8 x 64 | the values |
//!
//! The names travel with the values, so a reader needs no schema and a writer can add a counter
//! without a new version, up to [`MAX_VALUES`] a record (version 1 held 48; the distributor
//! outgrew them).
//!
//! ## Writing and reading
//!
//! A writer claims a record by storing state 1 and a new generation, writes the type, label and
//! descriptors and zeroes the values, then publishes it with a release store of state 2. Values
//! are written by their one owning thread with plain relaxed stores (a load and a store: no
//! locked instruction, no system call), on cache lines of this file that nothing on the data path
//! touches. Closing stores state 3; the slot may be claimed again later.
//!
//! A reader copies a live record with atomic loads of its 8-byte words, then loads the state
//! and generation again: if either changed, the record was closed or reused while it was read
//! and is skipped (it is a seqlock). Values are read with relaxed loads: each value is exact,
//! and values of one record may be a few operations apart.

#![allow(unsafe_code)]

mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use reader::{
    read_segment, scan, DeadFiles, ProcessCounters, RecordSnapshot, Scan, SegmentProblem, Value,
};
pub use writer::{set_process_label, CountersFile, Record};

/// `PGRNSTAT`, the first 8 bytes of every counters file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PGRNSTAT");
/// The layout version this code writes and reads.
pub const VERSION: u32 = 2;
/// Bytes of the header.
pub const HEADER_LEN: usize = 256;
/// Bytes of one record.
pub const RECORD_LEN: usize = 2816;
/// Values one record holds at most.
pub const MAX_VALUES: usize = 64;
/// Bytes of one value descriptor (kind byte and name).
pub const DESCRIPTOR_LEN: usize = 32;
/// Longest value name.
pub const MAX_NAME_LEN: usize = DESCRIPTOR_LEN - 1;
/// Longest record label.
pub const MAX_LABEL_LEN: usize = 232;
/// Longest process label.
pub const MAX_PROCESS_LABEL_LEN: usize = 128;
/// Records a context's file has room for (the file is sparse: pages of unused records take no
/// memory).
pub const DEFAULT_CAPACITY: u32 = 4096;
/// The file name prefix of counters files in the segment directory.
pub const FILE_PREFIX: &str = "counters.";

// Header offsets.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_HEADER_LEN: usize = 12;
pub(crate) const H_RECORD_LEN: usize = 16;
pub(crate) const H_CAPACITY: usize = 20;
pub(crate) const H_PID: usize = 24;
pub(crate) const H_HIGH: usize = 28;
pub(crate) const H_START_NS: usize = 32;
pub(crate) const H_REFUSED: usize = 40;
pub(crate) const H_LABEL_LEN: usize = 44;
pub(crate) const H_LABEL: usize = 64;

// Record offsets.
pub(crate) const R_STATE: usize = 0;
pub(crate) const R_GENERATION: usize = 4;
pub(crate) const R_TYPE: usize = 8;
pub(crate) const R_COUNT: usize = 12;
pub(crate) const R_LABEL_LEN: usize = 16;
pub(crate) const R_LABEL: usize = 24;
pub(crate) const R_DESCRIPTORS: usize = 256;
pub(crate) const R_VALUES: usize = R_DESCRIPTORS + DESCRIPTOR_LEN * MAX_VALUES;

const _: () = assert!(R_LABEL + MAX_LABEL_LEN == R_DESCRIPTORS);
// Readers load the header and the record head as 8-byte words of two 4-byte fields each.
const _: () = assert!(H_HEADER_LEN == H_VERSION + 4 && H_CAPACITY == H_RECORD_LEN + 4);
const _: () = assert!(H_HIGH == H_PID + 4 && H_LABEL_LEN == H_REFUSED + 4);
const _: () = assert!(R_GENERATION == R_STATE + 4 && R_STATE == 0);
const _: () = assert!(R_VALUES + 8 * MAX_VALUES == RECORD_LEN);
const _: () = assert!(R_VALUES % 64 == 0 && RECORD_LEN % 64 == 0 && HEADER_LEN % 64 == 0);
const _: () = assert!(H_LABEL + MAX_PROCESS_LABEL_LEN <= HEADER_LEN);

/// The state of a record slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RecordState {
    Free = 0,
    Writing = 1,
    Live = 2,
    Closed = 3,
}

/// What a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordType {
    Publisher,
    Subscriber,
    /// A context's topic resolver.
    Resolver,
    /// `peregrine resolverd`, the resolution relay.
    Relay,
    /// `peregrine distributor`, the market data distributor.
    Distributor,
    /// A market data consumer (`peregrine client`, or an application's `Consumer`).
    Consumer,
    /// A type this version does not know (a newer writer).
    Other(u32),
}

impl RecordType {
    pub fn code(self) -> u32 {
        match self {
            RecordType::Publisher => 1,
            RecordType::Subscriber => 2,
            RecordType::Resolver => 3,
            RecordType::Relay => 4,
            RecordType::Distributor => 5,
            RecordType::Consumer => 6,
            RecordType::Other(c) => c,
        }
    }

    pub fn from_code(code: u32) -> RecordType {
        match code {
            1 => RecordType::Publisher,
            2 => RecordType::Subscriber,
            3 => RecordType::Resolver,
            4 => RecordType::Relay,
            5 => RecordType::Distributor,
            6 => RecordType::Consumer,
            c => RecordType::Other(c),
        }
    }

    /// The stable name (`peregrine stat --json`, Prometheus metric names).
    pub fn name(self) -> &'static str {
        match self {
            RecordType::Publisher => "publisher",
            RecordType::Subscriber => "subscriber",
            RecordType::Resolver => "resolver",
            RecordType::Relay => "relay",
            RecordType::Distributor => "distributor",
            RecordType::Consumer => "consumer",
            RecordType::Other(_) => "other",
        }
    }
}

/// Whether a value only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    Counter,
    Gauge,
}

impl ValueKind {
    pub(crate) fn code(self) -> u8 {
        match self {
            ValueKind::Counter => 1,
            ValueKind::Gauge => 2,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<ValueKind> {
        match c {
            1 => Some(ValueKind::Counter),
            2 => Some(ValueKind::Gauge),
            _ => None,
        }
    }
}

/// True when `name` may name a value: 1 to [`MAX_NAME_LEN`] of `a-z`, `0-9` and `_`, starting
/// with a letter (so it can end a Prometheus metric name as it is).
pub fn valid_value_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}
