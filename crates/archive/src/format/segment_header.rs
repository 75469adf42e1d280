//! The header that starts every segment file of a recording.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                    magic "PGRECORD" (8 bytes)                 |  0
//! |                                                               |
//! +-------------------------------+-------------------------------+
//! |        version (u16, 1)       |      header_len (u16)         |  8
//! +-------------------------------+-------------------------------+
//! |                          crc32 (u32)                          | 12
//! +---------------------------------------------------------------+
//! |                       segment_len (u64)                       | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                      base_position (u64)                      | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                       session_id (u32)                        | 32
//! +---------------------------------------------------------------+
//! |                        stream_id (u32)                        | 36
//! +---------------------------------------------------------------+
//! |                       created_ns (u64)                        | 40
//! |                                                               |
//! +-------------------------------+-------------------------------+
//! |       topic_len (u16)         |   reserved (zero, 14 bytes)   | 48
//! +-------------------------------+                               |
//! |                                                               |
//! +---------------------------------------------------------------+
//! |         topic (UTF-8, topic_len bytes), zeros to 8            | 64
//! ```
//!
//! `header_len` is 64 plus `topic_len` rounded up to 8: the first record starts there.
//! `segment_len` is the file's size (every segment of a recording has the same);
//! `base_position` is the segment's place in the recording (segment index x `segment_len`,
//! also its file name). `crc32` is the CRC-32 (IEEE) of the `header_len` bytes with `crc32`
//! read as zero. `created_ns`: when the segment was started, nanoseconds since the Unix epoch.

use super::FormatError;
use super::{align8, crc32, read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};

/// The first 8 bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"PGRECORD";
/// The version this build writes and reads.
pub const VERSION: u16 = 1;
/// The header's length without its topic.
pub const FIXED_LEN: usize = 64;
/// The longest topic a header holds.
pub const MAX_TOPIC_LEN: usize = 1024;

/// Field ranges of the segment header.
pub mod field {
    use crate::format::Field;
    pub const MAGIC: Field = 0..8;
    pub const VERSION: Field = 8..10;
    pub const HEADER_LEN: Field = 10..12;
    pub const CRC32: Field = 12..16;
    pub const SEGMENT_LEN: Field = 16..24;
    pub const BASE_POSITION: Field = 24..32;
    pub const SESSION_ID: Field = 32..36;
    pub const STREAM_ID: Field = 36..40;
    pub const CREATED_NS: Field = 40..48;
    pub const TOPIC_LEN: Field = 48..50;
    pub const RESERVED: Field = 50..64;
}

/// A segment header's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeaderRepr {
    pub segment_len: u64,
    pub base_position: u64,
    pub session_id: u32,
    pub stream_id: u32,
    pub created_ns: u64,
    pub topic: String,
}

impl SegmentHeaderRepr {
    /// Bytes the header takes: where the first record starts.
    pub fn header_len(&self) -> usize {
        FIXED_LEN + align8(self.topic.len())
    }

    /// The header's bytes.
    pub fn emit(&self) -> Vec<u8> {
        assert!(
            self.topic.len() <= MAX_TOPIC_LEN,
            "a topic of {} bytes (checked by the writer)",
            self.topic.len()
        );
        let len = self.header_len();
        let mut b = vec![0u8; len];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        write_u16(&mut b, field::VERSION, VERSION);
        write_u16(&mut b, field::HEADER_LEN, len as u16);
        write_u64(&mut b, field::SEGMENT_LEN, self.segment_len);
        write_u64(&mut b, field::BASE_POSITION, self.base_position);
        write_u32(&mut b, field::SESSION_ID, self.session_id);
        write_u32(&mut b, field::STREAM_ID, self.stream_id);
        write_u64(&mut b, field::CREATED_NS, self.created_ns);
        write_u16(&mut b, field::TOPIC_LEN, self.topic.len() as u16);
        b[FIXED_LEN..FIXED_LEN + self.topic.len()].copy_from_slice(self.topic.as_bytes());
        let c = crc32(&b, field::CRC32, &[]);
        write_u32(&mut b, field::CRC32, c);
        b
    }

    /// Parses and checks a header at the start of `b`: magic, version, lengths, reserved
    /// bytes, the topic's UTF-8 and the checksum.
    pub fn parse(b: &[u8]) -> Result<SegmentHeaderRepr, FormatError> {
        if b.len() < FIXED_LEN {
            return Err(FormatError::Truncated {
                needed: FIXED_LEN,
                got: b.len(),
            });
        }
        if b[field::MAGIC] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = read_u16(b, field::VERSION);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let topic_len = read_u16(b, field::TOPIC_LEN) as usize;
        let header_len = read_u16(b, field::HEADER_LEN) as usize;
        if topic_len > MAX_TOPIC_LEN {
            return Err(FormatError::BadField {
                field: "segment.topic_len",
                value: topic_len as u64,
            });
        }
        if header_len != FIXED_LEN + align8(topic_len) {
            return Err(FormatError::BadField {
                field: "segment.header_len",
                value: header_len as u64,
            });
        }
        if b.len() < header_len {
            return Err(FormatError::Truncated {
                needed: header_len,
                got: b.len(),
            });
        }
        let stored = read_u32(b, field::CRC32);
        let computed = crc32(&b[..header_len], field::CRC32, &[]);
        if stored != computed {
            return Err(FormatError::BadChecksum { stored, computed });
        }
        if b[field::RESERVED].iter().any(|&x| x != 0)
            || b[FIXED_LEN + topic_len..header_len].iter().any(|&x| x != 0)
        {
            return Err(FormatError::BadField {
                field: "segment.reserved",
                value: 1,
            });
        }
        let topic = std::str::from_utf8(&b[FIXED_LEN..FIXED_LEN + topic_len])
            .map_err(|e| FormatError::BadField {
                field: "segment.topic",
                value: e.valid_up_to() as u64,
            })?
            .to_string();
        let segment_len = read_u64(b, field::SEGMENT_LEN);
        if segment_len < (header_len + super::record::RECORD_HEADER_LEN) as u64
            || segment_len % 8 != 0
        {
            return Err(FormatError::BadField {
                field: "segment.segment_len",
                value: segment_len,
            });
        }
        Ok(SegmentHeaderRepr {
            segment_len,
            base_position: read_u64(b, field::BASE_POSITION),
            session_id: read_u32(b, field::SESSION_ID),
            stream_id: read_u32(b, field::STREAM_ID),
            created_ns: read_u64(b, field::CREATED_NS),
            topic,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> SegmentHeaderRepr {
        SegmentHeaderRepr {
            segment_len: 1 << 20,
            base_position: 3 << 20,
            session_id: 0xdead_beef,
            stream_id: 7,
            created_ns: 1_800_000_000_000_000_000,
            topic: "orders.eu".into(),
        }
    }

    #[test]
    fn a_header_round_trips_and_a_flipped_bit_is_found() {
        let b = repr().emit();
        assert_eq!(b.len(), 80);
        assert_eq!(SegmentHeaderRepr::parse(&b).unwrap(), repr());
        for bit in 0..b.len() * 8 {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                SegmentHeaderRepr::parse(&bad).is_err(),
                "bit {bit} flipped went unseen"
            );
        }
    }

    #[test]
    fn another_file_or_version_is_named() {
        assert_eq!(
            SegmentHeaderRepr::parse(&[0u8; 64]),
            Err(FormatError::BadMagic)
        );
        let mut b = repr().emit();
        b[8] = 2;
        assert_eq!(
            SegmentHeaderRepr::parse(&b),
            Err(FormatError::UnsupportedVersion(2))
        );
    }
}
