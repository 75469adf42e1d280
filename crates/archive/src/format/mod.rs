//! The on-disk format of a recording (docs/recording.md): a segment file starts with a
//! [`segment_header`] and holds [`record`]s, 8-byte aligned, until an all-zero record header
//! (the end of what was written) or the end of the file. Little-endian throughout. Checked
//! views and parse/emit, no I/O.

pub mod index;
pub mod positions;
pub mod record;
pub mod replay;
pub mod segment_header;

use std::fmt;
use std::ops::Range;

/// Why bytes are not a valid header or record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// Fewer bytes than the layout needs.
    Truncated { needed: usize, got: usize },
    /// The segment file does not start with the recording magic.
    BadMagic,
    /// A version this reader does not know.
    UnsupportedVersion(u16),
    /// A field with a value the format does not allow.
    BadField { field: &'static str, value: u64 },
    /// The checksum does not match the bytes.
    BadChecksum { stored: u32, computed: u32 },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Truncated { needed, got } => {
                write!(f, "truncated: {got} bytes where {needed} are needed")
            }
            FormatError::BadMagic => {
                write!(f, "bad magic: not a Peregrine segment file or replay frame")
            }
            FormatError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "segment format version {v} is not one this build reads (1)"
                )
            }
            FormatError::BadField { field, value } => write!(f, "{field} = {value} is not valid"),
            FormatError::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:08x}, computed {computed:08x} (damaged or torn)"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

pub(crate) type Field = Range<usize>;

pub(crate) fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_le_bytes(b[f].try_into().expect("2 bytes"))
}
pub(crate) fn read_u32(b: &[u8], f: Field) -> u32 {
    u32::from_le_bytes(b[f].try_into().expect("4 bytes"))
}
pub(crate) fn read_u64(b: &[u8], f: Field) -> u64 {
    u64::from_le_bytes(b[f].try_into().expect("8 bytes"))
}
pub(crate) fn write_u16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn write_u32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn write_u64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_le_bytes());
}

/// `n` rounded up to a multiple of 8.
pub const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// CRC-32 (IEEE) of `first` with `skip` (its 4-byte checksum field) read as zeros, then of
/// `rest`.
pub(crate) fn crc32(first: &[u8], skip: Field, rest: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&first[..skip.start]);
    h.update(&[0u8; 4][..skip.len()]);
    h.update(&first[skip.end..]);
    h.update(rest);
    h.finalize()
}
