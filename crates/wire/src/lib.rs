//! Peregrine wire format.
//!
//! Every unit on the wire (a datagram, a TCP stream, a shared-memory log) is a sequence of
//! *frames*. A frame starts with the 16-byte [common header](header) and its
//! [`FrameType`](header::FrameType) decides the rest. One module per frame type, each with:
//!
//! - a checked view `Frame<T: AsRef<[u8]>>` whose `new_checked` validates lengths once, so no
//!   accessor can panic afterwards;
//! - a parsed form `Repr` with `parse`, `emit` and `buffer_len`;
//! - golden byte vectors, shared with every other implementation through
//!   `docs/golden/frames.json`.
//!
//! All integers are little-endian and naturally aligned relative to the frame start. The layout
//! is documented in `docs/protocol.md`.
//!
//! ```
//! use peregrine_wire::data::{DataFrame, DataRepr};
//! use peregrine_wire::header::flags;
//!
//! let repr = DataRepr {
//!     session_id: 0x1234_5678,
//!     stream_id: 7,
//!     sequence: 42,
//!     message_length: 5,
//!     flags: flags::BEGIN | flags::END,
//!     payload: b"hello",
//! };
//! let mut buf = vec![0u8; repr.buffer_len()];
//! repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
//! let frame = DataFrame::new_checked(&buf[..]).unwrap();
//! assert_eq!(DataRepr::parse(&frame).unwrap(), repr);
//! ```
#![forbid(unsafe_code)]
#![no_std]

#[cfg(test)]
extern crate std;

pub mod data;
pub mod error;
pub mod header;

pub use error::WireError;
pub use header::{FrameType, Header, HEADER_LEN, MAGIC, VERSION};

/// A byte range of a field inside a frame.
pub type Field = core::ops::Range<usize>;

/// Frames are laid out back to back at this alignment when several share one datagram or log.
pub const FRAME_ALIGNMENT: usize = 8;

/// Rounds `len` up to the next multiple of [`FRAME_ALIGNMENT`].
#[inline]
pub const fn align_frame(len: usize) -> usize {
    (len + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

#[inline]
pub(crate) fn read_u16(b: &[u8], f: Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_le_bytes(a)
}
#[inline]
pub(crate) fn read_u32(b: &[u8], f: Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_le_bytes(a)
}
#[inline]
pub(crate) fn read_u64(b: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_le_bytes(a)
}
#[inline]
pub(crate) fn write_u16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn write_u32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn write_u64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
