//! A record: one message of the recorded stream, or the padding that ends a segment.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                          crc32 (u32)                          |  0
//! +---------------------------------------------------------------+
//! |                         length (u32)                          |  4
//! +---------------+---------------+-------------------------------+
//! |  kind (u8)    |  flags (0)    |        reserved (zero)        |  8
//! +---------------+---------------+-------------------------------+
//! |                        reserved (zero)                        | 12
//! +---------------------------------------------------------------+
//! |                        sequence (u64)                         | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                       receive_ns (u64)                        | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |              length bytes of message, then zeros to 8         | 32
//! ```
//!
//! - `kind` 1 is a message: `sequence` is its sequence in the stream, `receive_ns` when the
//!   recorder received it (nanoseconds since the Unix epoch). `crc32` is the CRC-32 (IEEE) of
//!   every byte after it to the message's end (header bytes 4 to 32, then the message): one
//!   contiguous run, hashed in one pass.
//! - `kind` 2 is padding: the rest of the segment holds nothing (a message that did not fit
//!   went to the next segment). `length` is the bytes after the header, `sequence` and
//!   `receive_ns` zero, and `crc32` covers header bytes 4 to 32.
//! - 32 zero bytes where a header would start: nothing was written from here on.
//!
//! The next record starts at `32 + length` rounded up to 8.

use super::{align8, read_u32, read_u64, write_u32, write_u64, FormatError};

/// Field ranges of the record header.
pub mod field {
    use crate::format::Field;
    pub const CRC32: Field = 0..4;
    pub const LENGTH: Field = 4..8;
    pub const KIND: usize = 8;
    pub const FLAGS: usize = 9;
    pub const RESERVED_1: Field = 10..12;
    pub const RESERVED_2: Field = 12..16;
    pub const SEQUENCE: Field = 16..24;
    pub const RECEIVE_NS: Field = 24..32;
}

/// The length of a record header.
pub const RECORD_HEADER_LEN: usize = 32;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    Message = 1,
    Padding = 2,
}

/// A checked view of a record header (and, with [`parse_record`], its payload).
#[derive(Debug, Clone, Copy)]
pub struct RecordHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RecordHeader<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        RecordHeader { buffer }
    }

    /// Wraps `buffer` after [`check_header`](Self::check_header): 32 bytes at least, a known
    /// kind, zero flags and reserved fields. The checksum needs the payload:
    /// [`parse_record`] checks a whole record.
    pub fn new_checked(buffer: T) -> Result<Self, FormatError> {
        let r = RecordHeader { buffer };
        r.check_header()?;
        Ok(r)
    }

    /// The fixed fields alone.
    pub fn check_header(&self) -> Result<(), FormatError> {
        let b = self.buffer.as_ref();
        if b.len() < RECORD_HEADER_LEN {
            return Err(FormatError::Truncated {
                needed: RECORD_HEADER_LEN,
                got: b.len(),
            });
        }
        let kind = self.kind_byte();
        if !matches!(kind, 1 | 2) {
            return Err(FormatError::BadField {
                field: "record.kind",
                value: kind.into(),
            });
        }
        for (name, value) in [
            ("record.flags", u64::from(b[field::FLAGS])),
            (
                "record.reserved",
                u64::from(u16::from_le_bytes([b[10], b[11]])),
            ),
            ("record.reserved", u64::from(read_u32(b, field::RESERVED_2))),
        ] {
            if value != 0 {
                return Err(FormatError::BadField { field: name, value });
            }
        }
        if kind == RecordKind::Padding as u8 && (self.sequence() != 0 || self.receive_ns() != 0) {
            return Err(FormatError::BadField {
                field: "record.sequence",
                value: self.sequence(),
            });
        }
        Ok(())
    }

    /// 32 zero bytes: nothing was written here.
    pub fn is_end(&self) -> bool {
        self.buffer.as_ref()[..RECORD_HEADER_LEN]
            .iter()
            .all(|&b| b == 0)
    }

    fn kind_byte(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }
    /// The kind (of a checked header).
    pub fn kind(&self) -> RecordKind {
        match self.kind_byte() {
            1 => RecordKind::Message,
            _ => RecordKind::Padding,
        }
    }
    pub fn length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::LENGTH)
    }
    pub fn crc32(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::CRC32)
    }
    pub fn sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SEQUENCE)
    }
    pub fn receive_ns(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::RECEIVE_NS)
    }
    /// Bytes from this record's start to the next one's.
    pub fn span(&self) -> usize {
        RECORD_HEADER_LEN + align8(self.length() as usize)
    }
}

/// A record's fields, to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRepr {
    pub kind: RecordKind,
    pub length: u32,
    pub sequence: u64,
    pub receive_ns: u64,
}

impl RecordRepr {
    /// A message record's fields.
    pub fn message(sequence: u64, receive_ns: u64, len: usize) -> RecordRepr {
        RecordRepr {
            kind: RecordKind::Message,
            length: len as u32,
            sequence,
            receive_ns,
        }
    }

    /// The padding that fills `span` bytes (at least a header, a multiple of 8).
    pub fn padding(span: usize) -> RecordRepr {
        debug_assert!(span >= RECORD_HEADER_LEN && span % 8 == 0);
        RecordRepr {
            kind: RecordKind::Padding,
            length: (span - RECORD_HEADER_LEN) as u32,
            sequence: 0,
            receive_ns: 0,
        }
    }

    /// Bytes from the record's start to the next one's.
    pub fn span(&self) -> usize {
        RECORD_HEADER_LEN + align8(self.length as usize)
    }

    /// The header's fields but the checksum.
    #[inline]
    fn emit_fields(&self, h: &mut [u8]) {
        write_u32(h, field::LENGTH, self.length);
        h[field::KIND] = self.kind as u8;
        h[field::FLAGS] = 0;
        h[field::RESERVED_1].fill(0);
        write_u32(h, field::RESERVED_2, 0);
        write_u64(h, field::SEQUENCE, self.sequence);
        write_u64(h, field::RECEIVE_NS, self.receive_ns);
    }

    /// Writes the header into `out[..32]` with the checksum of it and `payload` (the message;
    /// empty for padding, whose filler the caller leaves zero).
    pub fn emit(&self, out: &mut [u8], payload: &[u8]) {
        let h = &mut out[..RECORD_HEADER_LEN];
        self.emit_fields(h);
        let mut c = crc32fast::Hasher::new();
        c.update(&h[field::CRC32.end..]);
        c.update(payload);
        write_u32(h, field::CRC32, c.finalize());
    }

    /// Appends the whole record (header, message, zeros to 8) to `out`: each byte written
    /// once.
    #[inline]
    pub fn append(&self, out: &mut Vec<u8>, payload: &[u8]) {
        let at = out.len();
        out.reserve(self.span());
        out.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
        out.extend_from_slice(payload);
        out.resize(at + self.span(), 0);
        let r = &mut out[at..at + RECORD_HEADER_LEN + payload.len()];
        self.emit_fields(r);
        // One pass over the contiguous header rest and message.
        let c = crc32fast::hash(&r[field::CRC32.end..]);
        write_u32(r, field::CRC32, c);
    }

    /// Parses a checked header.
    pub fn parse<T: AsRef<[u8]>>(h: &RecordHeader<T>) -> RecordRepr {
        RecordRepr {
            kind: h.kind(),
            length: h.length(),
            sequence: h.sequence(),
            receive_ns: h.receive_ns(),
        }
    }
}

/// Checks a whole record at the start of `bytes` (header, fields, length within `bytes`,
/// checksum): its parsed header and payload.
pub fn parse_record(bytes: &[u8]) -> Result<(RecordRepr, &[u8]), FormatError> {
    let h = RecordHeader::new_checked(bytes)?;
    let len = h.length() as usize;
    let payload_end = RECORD_HEADER_LEN + len;
    let covered_end = match h.kind() {
        RecordKind::Message => {
            if bytes.len() < payload_end {
                return Err(FormatError::Truncated {
                    needed: payload_end,
                    got: bytes.len(),
                });
            }
            payload_end
        }
        RecordKind::Padding => RECORD_HEADER_LEN,
    };
    // One pass over the contiguous run the checksum covers.
    let computed = crc32fast::hash(&bytes[field::CRC32.end..covered_end]);
    let stored = h.crc32();
    if stored != computed {
        return Err(FormatError::BadChecksum { stored, computed });
    }
    Ok((
        RecordRepr::parse(&h),
        &bytes[RECORD_HEADER_LEN..covered_end.max(RECORD_HEADER_LEN)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_message_round_trips_and_any_flipped_bit_is_found() {
        let mut out = Vec::new();
        let r = RecordRepr::message(42, 1_700_000_000_123_456_789, 5);
        r.append(&mut out, b"hello");
        assert_eq!(out.len(), 40);
        let (back, payload) = parse_record(&out).unwrap();
        assert_eq!((back, payload), (r, &b"hello"[..]));
        for bit in 0..(32 + 5) * 8 {
            let mut bad = out.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(parse_record(&bad).is_err(), "bit {bit} flipped went unseen");
        }
    }

    #[test]
    fn zeros_are_the_end_and_padding_spans_the_rest() {
        let zeros = [0u8; 32];
        assert!(RecordHeader::new_unchecked(&zeros[..]).is_end());
        assert_eq!(
            RecordHeader::new_checked(&zeros[..]).unwrap_err(),
            FormatError::BadField {
                field: "record.kind",
                value: 0
            }
        );
        let mut pad = vec![0u8; 64];
        RecordRepr::padding(64).emit(&mut pad, &[]);
        let (p, payload) = parse_record(&pad[..32]).unwrap();
        assert_eq!(
            (p.kind, p.length, p.span(), payload.len()),
            (RecordKind::Padding, 32, 64, 0)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_record(&bytes);
        }

        #[test]
        fn any_message_round_trips(seq: u64, t: u64, payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            let r = RecordRepr::message(seq, t, payload.len());
            r.append(&mut out, &payload);
            prop_assert_eq!(out.len() % 8, 0);
            let (back, p) = parse_record(&out).unwrap();
            prop_assert_eq!(back, r);
            prop_assert_eq!(p, &payload[..]);
        }
    }
}
