//! Peregrine wire format.
//!
//! Every unit on the wire (a datagram, a TCP stream, a shared-memory log) is a sequence of
//! *frames*. A frame starts with the 16-byte [common header](header) and its
//! [`header::FrameType`] decides the rest. One module per frame type, each with:
//!
//! - a checked view `XxxFrame<T: AsRef<[u8]>>` whose `new_checked` validates the whole frame
//!   once, so no accessor can panic afterwards (setters need `T: AsMut<[u8]>`);
//! - a parsed form `XxxRepr` with `parse`, `emit` and `buffer_len`;
//! - golden byte vectors, shared with every other implementation through
//!   `docs/golden/frames.json`.
//!
//! | type | module | frame |
//! |------|--------|-------|
//! | 0x01, 0x02 | [`data`] | DATA (payload or fragment) and PAD (filler) |
//! | 0x03 | [`heartbeat`] | HEARTBEAT: next sequence while idle, for tail-loss detection |
//! | 0x04 | [`nak`] | NAK: ranges of missing sequence numbers |
//! | 0x05 | [`advertise`] | ADVERTISE: topic resolution, publisher side |
//! | 0x06 | [`query`] | QUERY: topic resolution, subscriber side |
//! | 0x07 | [`bye`] | BYE: end of a stream |
//! | 0x08 | [`status`] | STATUS: a unicast receiver joins, keeps registered, reports its position, leaves |
//! | 0x09 | [`cookie`] | COOKIE: proof of a source address between a resolver client and resolverd |
//! | 0x0A | [`auth`] | AUTH: the message authentication code ending a datagram of a keyed transport |
//!
//! Not a frame: [`failover`] is the 16-byte header a failover group's members put in front of
//! each message, inside the DATA payload. Not Peregrine's either: [`packet`] holds the Ethernet
//! II, IPv4 and UDP headers that the xdp (AF_XDP, kernel bypass) driver writes and checks itself
//! around each datagram, since no kernel stack does it for raw Ethernet frames; they are
//! big-endian, as on any network.
//!
//! [`FrameRepr`] parses any frame by dispatching on its type, and [`header::Frames`] splits a
//! datagram or log holding several frames. Parsing never allocates and never panics: every
//! rejection is a [`WireError`], whose [`name`](WireError::name) and
//! [`index`](WireError::index) are stable so receivers can count rejections per kind.
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

pub mod advertise;
pub mod auth;
pub mod bye;
pub mod cookie;
pub mod data;
pub mod error;
pub mod failover;
pub mod frame;
pub mod header;
pub mod heartbeat;
pub mod nak;
pub mod packet;
pub mod query;
pub mod status;

#[cfg(test)]
mod test_util;

pub use error::WireError;
pub use frame::FrameRepr;
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

/// Checks the content of a text field (topic, URI, pattern) whose length was already checked:
/// valid UTF-8 without NUL bytes.
pub(crate) fn check_text<'a>(field: &'static str, bytes: &'a [u8]) -> Result<&'a str, WireError> {
    if bytes.contains(&0) {
        return Err(WireError::BadText { field });
    }
    core::str::from_utf8(bytes).map_err(|_| WireError::BadText { field })
}

/// Checks a text field's length: non-empty and at most `max` bytes.
pub(crate) fn check_text_len(field: &'static str, len: usize, max: usize) -> Result<(), WireError> {
    if len == 0 || len > max {
        return Err(WireError::BadField {
            field,
            value: len as u64,
        });
    }
    Ok(())
}

/// Rejects a non-zero reserved field.
#[inline]
pub(crate) fn check_zero(field: &'static str, value: u64) -> Result<(), WireError> {
    if value != 0 {
        return Err(WireError::BadField { field, value });
    }
    Ok(())
}
