//! A durable subscriber's positions: where it stands in each stream of its topic. The same
//! frame is the file a recording folder keeps them in (`DIR/.durable/<name>`) and what the
//! replay protocol carries (docs/recording.md, "Durable subscribers").
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                        magic "PGRP"                           |  0
//! +-------------------------------+---------------+---------------+
//! |        version (u16, 1)       |    op (u8)    | reserved (0)  |  4
//! +-------------------------------+---------------+---------------+
//! |                      created_ns (u64)                         |  8
//! |                                                               |
//! +-------------------------------+-------------------------------+
//! |        name_len (u16)         |        topic_len (u16)        | 16
//! +-------------------------------+-------------------------------+
//! |                         count (u32)                           | 20
//! +---------------------------------------------------------------+
//! |                         crc32 (u32)                           | 24
//! +---------------------------------------------------------------+
//! |                        reserved (zero)                        | 28
//! +---------------------------------------------------------------+
//! | name, then topic (UTF-8), then zeros to a multiple of 8       | 32
//! +---------------------------------------------------------------+
//! | count entries of 16 bytes: session_id (u32), reserved (u32,   |
//! | zero), next (u64): the next sequence of that session to give  |
//! +---------------------------------------------------------------+
//! ```
//!
//! - `op` 1 asks a recorder for the positions of `name` (count 0); 2 answers it (or is the
//!   file); 3 asks a recorder to keep them (answered by the replay protocol's end frame).
//! - `created_ns`: when the durable name was first used (ns since the Unix epoch); streams
//!   that began after it and that it has no position for are read from their start.
//!   Zero in an answer: the name is new.
//! - `crc32`: CRC-32 (IEEE) of the whole frame with this field read as zeros.
//! - `name`: 1 to 128 bytes of letters, digits, `.`, `-` and `_`; `topic`: 1 to 1024 bytes.
//!   At most 65,536 entries, each session once.

use super::segment_header::MAX_TOPIC_LEN;
use super::{align8, crc32, read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use super::{Field, FormatError};

pub const MAGIC: [u8; 4] = *b"PGRP";
pub const VERSION: u16 = 1;
pub const FIXED_LEN: usize = 32;
pub const ENTRY_LEN: usize = 16;
pub const MAX_NAME_LEN: usize = 128;
pub const MAX_ENTRIES: usize = 65_536;

/// Field ranges of the fixed part.
pub mod field {
    use crate::format::Field;
    pub const MAGIC: Field = 0..4;
    pub const VERSION: Field = 4..6;
    pub const OP: usize = 6;
    pub const RESERVED_1: usize = 7;
    pub const CREATED_NS: Field = 8..16;
    pub const NAME_LEN: Field = 16..18;
    pub const TOPIC_LEN: Field = 18..20;
    pub const COUNT: Field = 20..24;
    pub const CRC32: Field = 24..28;
    pub const RESERVED_2: Field = 28..32;
}

/// What a positions frame asks or says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Load = 1,
    Positions = 2,
    Save = 3,
}

/// A positions frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionsRepr {
    pub op: Op,
    pub name: String,
    pub topic: String,
    pub created_ns: u64,
    /// (session, next sequence), by session.
    pub entries: Vec<(u32, u64)>,
}

/// Checks a durable name: 1 to 128 bytes of letters, digits, `.`, `-` and `_`, not
/// starting with `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    {
        return Err(format!(
            "durable name '{}' is not accepted: give 1 to {MAX_NAME_LEN} letters, digits, '.', '-' or '_', not starting with '.'",
            name.chars().take(80).collect::<String>()
        ));
    }
    Ok(())
}

impl PositionsRepr {
    /// The frame's length.
    pub fn len(&self) -> usize {
        FIXED_LEN + align8(self.name.len() + self.topic.len()) + self.entries.len() * ENTRY_LEN
    }

    /// Never empty: the fixed part alone is 32 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The frame. The caller checked the name, the topic and the entries' count.
    pub fn emit(&self) -> Vec<u8> {
        assert!(
            self.name.len() <= MAX_NAME_LEN
                && self.topic.len() <= MAX_TOPIC_LEN
                && self.entries.len() <= MAX_ENTRIES,
            "checked by the caller"
        );
        let mut b = vec![0u8; self.len()];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        write_u16(&mut b, field::VERSION, VERSION);
        b[field::OP] = self.op as u8;
        write_u64(&mut b, field::CREATED_NS, self.created_ns);
        write_u16(&mut b, field::NAME_LEN, self.name.len() as u16);
        write_u16(&mut b, field::TOPIC_LEN, self.topic.len() as u16);
        write_u32(&mut b, field::COUNT, self.entries.len() as u32);
        let n = self.name.len();
        b[FIXED_LEN..FIXED_LEN + n].copy_from_slice(self.name.as_bytes());
        b[FIXED_LEN + n..FIXED_LEN + n + self.topic.len()].copy_from_slice(self.topic.as_bytes());
        let mut at = FIXED_LEN + align8(n + self.topic.len());
        for (session, next) in &self.entries {
            write_u32(&mut b, at..at + 4, *session);
            write_u64(&mut b, at + 8..at + 16, *next);
            at += ENTRY_LEN;
        }
        let crc = crc32(&b, field::CRC32, &[]);
        write_u32(&mut b, field::CRC32, crc);
        b
    }

    /// The whole frame's length from its fixed part, after checking it (to read the rest).
    pub fn frame_len(fixed: &[u8]) -> Result<usize, FormatError> {
        if fixed.len() < FIXED_LEN {
            return Err(FormatError::Truncated {
                needed: FIXED_LEN,
                got: fixed.len(),
            });
        }
        if fixed[field::MAGIC] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = read_u16(fixed, field::VERSION);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let bad = |field: &'static str, value: u64| Err(FormatError::BadField { field, value });
        let name_len = read_u16(fixed, field::NAME_LEN) as usize;
        if name_len == 0 || name_len > MAX_NAME_LEN {
            return bad("positions.name_len", name_len as u64);
        }
        let topic_len = read_u16(fixed, field::TOPIC_LEN) as usize;
        if topic_len == 0 || topic_len > MAX_TOPIC_LEN {
            return bad("positions.topic_len", topic_len as u64);
        }
        let count = read_u32(fixed, field::COUNT) as usize;
        if count > MAX_ENTRIES {
            return bad("positions.count", count as u64);
        }
        Ok(FIXED_LEN + align8(name_len + topic_len) + count * ENTRY_LEN)
    }

    /// Parses a whole frame (exactly its length), checking every field and the CRC.
    pub fn parse(b: &[u8]) -> Result<PositionsRepr, FormatError> {
        let len = Self::frame_len(b)?;
        if b.len() != len {
            return Err(FormatError::Truncated {
                needed: len,
                got: b.len(),
            });
        }
        let bad = |field: &'static str, value: u64| FormatError::BadField { field, value };
        let stored = read_u32(b, field::CRC32);
        let computed = crc32(b, field::CRC32, &[]);
        if stored != computed {
            return Err(FormatError::BadChecksum { stored, computed });
        }
        let op = match b[field::OP] {
            1 => Op::Load,
            2 => Op::Positions,
            3 => Op::Save,
            v => return Err(bad("positions.op", v.into())),
        };
        if b[field::RESERVED_1] != 0 || read_u32(b, field::RESERVED_2) != 0 {
            return Err(bad("positions.reserved", 1));
        }
        let name_len = read_u16(b, field::NAME_LEN) as usize;
        let topic_len = read_u16(b, field::TOPIC_LEN) as usize;
        let text = |f: Field, what: &'static str| {
            std::str::from_utf8(&b[f])
                .map(str::to_string)
                .map_err(|e| bad(what, e.valid_up_to() as u64))
        };
        let name = text(FIXED_LEN..FIXED_LEN + name_len, "positions.name")?;
        check_name(&name).map_err(|_| bad("positions.name", name_len as u64))?;
        let topic = text(
            FIXED_LEN + name_len..FIXED_LEN + name_len + topic_len,
            "positions.topic",
        )?;
        let entries_at = FIXED_LEN + align8(name_len + topic_len);
        if b[FIXED_LEN + name_len + topic_len..entries_at]
            .iter()
            .any(|&x| x != 0)
        {
            return Err(bad("positions.padding", 1));
        }
        let count = read_u32(b, field::COUNT) as usize;
        if op == Op::Load && count != 0 {
            return Err(bad("positions.count", count as u64));
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let at = entries_at + i * ENTRY_LEN;
            if read_u32(b, at + 4..at + 8) != 0 {
                return Err(bad("positions.entry.reserved", i as u64));
            }
            entries.push((read_u32(b, at..at + 4), read_u64(b, at + 8..at + 16)));
        }
        let mut sessions: Vec<u32> = entries.iter().map(|e| e.0).collect();
        sessions.sort_unstable();
        if sessions.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("positions.entry.session", 1));
        }
        Ok(PositionsRepr {
            op,
            name,
            topic,
            created_ns: read_u64(b, field::CREATED_NS),
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PositionsRepr {
        PositionsRepr {
            op: Op::Positions,
            name: "risk-1".into(),
            topic: "orders.eu".into(),
            created_ns: 1_795_924_800_000_000_000,
            entries: vec![(0x0a0b_0c0d, 42), (7, u64::MAX)],
        }
    }

    #[test]
    fn frames_round_trip_and_every_byte_is_checked() {
        let p = sample();
        let b = p.emit();
        assert_eq!(b.len(), 32 + 16 + 32);
        assert_eq!(PositionsRepr::frame_len(&b[..32]), Ok(b.len()));
        assert_eq!(PositionsRepr::parse(&b), Ok(p));
        // Any flipped bit: the checksum (or a field check before it) refuses it.
        for i in 0..b.len() {
            let mut x = b.clone();
            x[i] ^= 0x10;
            assert!(PositionsRepr::parse(&x).is_err(), "byte {i}");
        }
        assert!(PositionsRepr::parse(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn bad_names_repeated_sessions_and_loads_with_entries_are_refused() {
        for bad in ["", ".hidden", "a b", "x/y", &"n".repeat(129)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("desk.risk_1-a").is_ok());
        let mut p = sample();
        p.entries = vec![(1, 1), (1, 2)];
        assert_eq!(
            PositionsRepr::parse(&p.emit()),
            Err(FormatError::BadField {
                field: "positions.entry.session",
                value: 1
            })
        );
        let mut p = sample();
        p.op = Op::Load;
        assert!(PositionsRepr::parse(&p.emit()).is_err());
        p.entries.clear();
        assert!(PositionsRepr::parse(&p.emit()).is_ok());
    }
}
