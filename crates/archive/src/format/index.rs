//! A segment's index (`NNNNNNNNNNNNNNNNNNNN.idx` beside its `.seg`): where some of its records
//! start, so that a read from a sequence or a time starts near it instead of at the
//! segment's first record. One entry about every [`INDEX_EVERY`] bytes of records (and the
//! segment's first record), in order:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                        sequence (u64)                         |  0
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                       receive_ns (u64)                        |  8
//! |                                                               |
//! +---------------------------------------------------------------+
//! |              offset (u64) of the record in the segment        | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |           crc32 (u32) of bytes 0 to 24     |  reserved (zero) | 24
//! +---------------------------------------------------------------+
//! ```
//!
//! The index is a hint: a reader checks the record an entry points to (its checksum, its
//! sequence) and reads from the segment's start when it does not match. Entries are written
//! after the records they point to; the file is not forced (a torn or missing index only
//! costs a longer read).

use super::{read_u32, read_u64, write_u32, write_u64, FormatError};

/// Bytes of records between two entries.
pub const INDEX_EVERY: u64 = 64 << 10;
pub const ENTRY_LEN: usize = 32;

/// One entry: the record at `offset` holds message `sequence`, received at `receive_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub sequence: u64,
    pub receive_ns: u64,
    pub offset: u64,
}

impl IndexEntry {
    pub fn emit(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        write_u64(&mut b, 0..8, self.sequence);
        write_u64(&mut b, 8..16, self.receive_ns);
        write_u64(&mut b, 16..24, self.offset);
        let crc = crc32fast::hash(&b[..24]);
        write_u32(&mut b, 24..28, crc);
        b
    }

    pub fn parse(b: &[u8]) -> Result<IndexEntry, FormatError> {
        if b.len() < ENTRY_LEN {
            return Err(FormatError::Truncated {
                needed: ENTRY_LEN,
                got: b.len(),
            });
        }
        let stored = read_u32(b, 24..28);
        let computed = crc32fast::hash(&b[..24]);
        if stored != computed {
            return Err(FormatError::BadChecksum { stored, computed });
        }
        if read_u32(b, 28..32) != 0 {
            return Err(FormatError::BadField {
                field: "index.reserved",
                value: read_u32(b, 28..32).into(),
            });
        }
        Ok(IndexEntry {
            sequence: read_u64(b, 0..8),
            receive_ns: read_u64(b, 8..16),
            offset: read_u64(b, 16..24),
        })
    }
}

/// The entries of an index file's bytes, up to the first that is not valid or not after
/// the one before it (a torn or damaged end).
pub fn parse_index(bytes: &[u8]) -> Vec<IndexEntry> {
    let mut out: Vec<IndexEntry> = Vec::with_capacity(bytes.len() / ENTRY_LEN);
    for chunk in bytes.chunks_exact(ENTRY_LEN) {
        let Ok(e) = IndexEntry::parse(chunk) else {
            break;
        };
        if out.last().is_some_and(|p| {
            e.offset <= p.offset || e.sequence <= p.sequence || e.receive_ns < p.receive_ns
        }) {
            break;
        }
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_a_bad_or_unordered_one_ends_the_index() {
        let a = IndexEntry {
            sequence: 7,
            receive_ns: 100,
            offset: 72,
        };
        let b = IndexEntry {
            sequence: 900,
            receive_ns: 100,
            offset: 65_600,
        };
        assert_eq!(IndexEntry::parse(&a.emit()), Ok(a));
        let mut bytes = [a.emit(), b.emit(), a.emit()].concat();
        assert_eq!(parse_index(&bytes), vec![a, b], "out of order: the end");
        bytes[40] ^= 1;
        assert_eq!(parse_index(&bytes), vec![a], "damaged: the end");
        assert_eq!(parse_index(&bytes[..50]), vec![a], "torn: the end");
    }
}
