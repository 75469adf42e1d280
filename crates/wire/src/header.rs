//! The common header: the first 16 bytes of every frame.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                  frame_length (u32, bytes)                    |  0
//! +-------------------------------+---------------+---------------+
//! |        magic 0x4750 "PG"      |   version 1   |  frame_type   |  4
//! +-------------------------------+---------------+---------------+
//! |            flags              |        reserved (zero)        |  8
//! +-------------------------------+-------------------------------+
//! |                      session_id (u32)                         | 12
//! +---------------------------------------------------------------+
//! ```
//!
//! `frame_length` counts the whole frame including this header and excluding any alignment
//! padding that follows it (frames sharing a buffer start at multiples of
//! [`FRAME_ALIGNMENT`](crate::FRAME_ALIGNMENT)). It comes first so that a TCP reader can frame
//! the stream by reading four bytes.

use crate::{read_u16, read_u32, write_u16, write_u32, WireError};

/// Field ranges of the common header.
pub mod field {
    use crate::Field;
    pub const FRAME_LENGTH: Field = 0..4;
    pub const MAGIC: Field = 4..6;
    pub const VERSION: usize = 6;
    pub const FRAME_TYPE: usize = 7;
    pub const FLAGS: Field = 8..10;
    pub const RESERVED: Field = 10..12;
    pub const SESSION_ID: Field = 12..16;
}

/// Length of the common header in bytes.
pub const HEADER_LEN: usize = 16;
/// `"PG"` read as a little-endian u16: bytes `0x50 0x47`.
pub const MAGIC: u16 = 0x4750;
/// The protocol version this build emits and accepts.
pub const VERSION: u8 = 1;

/// Flag bits of the `flags` field of DATA frames. Only DATA and STATUS define flags in
/// version 1 (STATUS's are in [`status_flags`]); PAD and every other control frame (HEARTBEAT,
/// NAK, ADVERTISE, QUERY, BYE) must carry flags 0, and undefined bits are rejected.
pub mod flags {
    /// First fragment of a message (an unfragmented message has BEGIN and END).
    pub const BEGIN: u16 = 0x0001;
    /// Last fragment of a message.
    pub const END: u16 = 0x0002;
    /// Sent in urgent mode: the sender flushed right after this frame.
    pub const URGENT: u16 = 0x0004;
    /// A retransmission answering a NAK (DATA only).
    pub const RETRANSMIT: u16 = 0x0008;
    /// Every flag bit this version defines; others must be zero.
    pub const ALL: u16 = BEGIN | END | URGENT | RETRANSMIT;
}

/// Flag bits of the `flags` field of STATUS frames (see [`status`](crate::status)). At most one
/// of them is set; a STATUS frame with neither is a keepalive.
pub mod status_flags {
    /// The receiver wants to (re)join: the publisher adds it and answers with a HEARTBEAT.
    pub const JOIN: u16 = 0x0001;
    /// The receiver is leaving: the publisher removes it.
    pub const LEAVE: u16 = 0x0002;
    /// Every flag bit STATUS defines; others must be zero.
    pub const ALL: u16 = JOIN | LEAVE;
}

/// The frame types of protocol version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Application payload (or a fragment of it) with a sequence number.
    Data = 0x01,
    /// Filler with the DATA layout, skipped by receivers (end of a shared-memory log lap).
    Pad = 0x02,
    /// The session's next sequence number while the sender is idle, so tail loss is detected.
    Heartbeat = 0x03,
    /// Ranges of missing sequence numbers, receiver to sender.
    Nak = 0x04,
    /// Topic resolution: a publisher's (topic, transport URI, session).
    Advertise = 0x05,
    /// Topic resolution: a subscriber asks for topics matching a pattern.
    Query = 0x06,
    /// The session ends; carries the final next sequence number.
    Bye = 0x07,
    /// A unicast receiver joins, keeps itself registered with, or leaves a publisher, reporting
    /// its position.
    Status = 0x08,
    /// Proof of a source address between a resolver client and resolverd.
    Cookie = 0x09,
    /// The message authentication code ending a datagram of a keyed transport (`auth=`).
    Auth = 0x0A,
}

impl FrameType {
    /// The name used in `docs/protocol.md` and `docs/golden/frames.json`, e.g. `"HEARTBEAT"`.
    pub const fn name(self) -> &'static str {
        match self {
            FrameType::Data => "DATA",
            FrameType::Pad => "PAD",
            FrameType::Heartbeat => "HEARTBEAT",
            FrameType::Nak => "NAK",
            FrameType::Advertise => "ADVERTISE",
            FrameType::Query => "QUERY",
            FrameType::Bye => "BYE",
            FrameType::Status => "STATUS",
            FrameType::Cookie => "COOKIE",
            FrameType::Auth => "AUTH",
        }
    }

    /// Decodes a frame type byte.
    pub const fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0x01 => FrameType::Data,
            0x02 => FrameType::Pad,
            0x03 => FrameType::Heartbeat,
            0x04 => FrameType::Nak,
            0x05 => FrameType::Advertise,
            0x06 => FrameType::Query,
            0x07 => FrameType::Bye,
            0x08 => FrameType::Status,
            0x09 => FrameType::Cookie,
            0x0A => FrameType::Auth,
            other => return Err(WireError::UnknownFrameType(other)),
        })
    }
}

/// A checked view of the common header of a frame in a byte buffer.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking it; accessors may panic if it is shorter than
    /// [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps a buffer after [`check`](Self::check); no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let h = Header { buffer };
        h.check()?;
        Ok(h)
    }

    /// Validates what every frame shares: enough bytes for the header and for `frame_length`,
    /// the magic, the version, a known frame type, and a zero reserved field.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                needed: HEADER_LEN,
                available: b.len(),
            });
        }
        if self.magic() != MAGIC {
            return Err(WireError::BadMagic(self.magic()));
        }
        if self.version() != VERSION {
            return Err(WireError::UnsupportedVersion(self.version()));
        }
        FrameType::from_u8(self.frame_type_raw())?;
        let len = self.frame_length();
        if (len as usize) < HEADER_LEN {
            return Err(WireError::BadLength {
                frame_length: len,
                reason: "smaller than the 16-byte common header",
            });
        }
        if (len as usize) > b.len() {
            return Err(WireError::Truncated {
                needed: len as usize,
                available: b.len(),
            });
        }
        let reserved = read_u16(b, field::RESERVED);
        if reserved != 0 {
            return Err(WireError::BadField {
                field: "header.reserved",
                value: reserved.into(),
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn frame_length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::FRAME_LENGTH)
    }
    pub fn magic(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::MAGIC)
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    pub fn frame_type_raw(&self) -> u8 {
        self.buffer.as_ref()[field::FRAME_TYPE]
    }
    /// The frame type; an unknown type byte maps to [`WireError::UnknownFrameType`].
    pub fn frame_type(&self) -> Result<FrameType, WireError> {
        FrameType::from_u8(self.frame_type_raw())
    }
    pub fn flags(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FLAGS)
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SESSION_ID)
    }
    /// The bytes of the frame (exactly `frame_length` of them) on a checked header.
    pub fn frame_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.frame_length() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    pub fn set_frame_length(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::FRAME_LENGTH, v)
    }
    pub fn set_flags(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::FLAGS, v)
    }
    pub fn set_session_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::SESSION_ID, v)
    }
    /// Writes magic, version, frame type, flags, a zero reserved field and the session id.
    pub fn fill(&mut self, frame_type: FrameType, flags: u16, session_id: u32) {
        let b = self.buffer.as_mut();
        write_u16(b, field::MAGIC, MAGIC);
        b[field::VERSION] = VERSION;
        b[field::FRAME_TYPE] = frame_type as u8;
        write_u16(b, field::FLAGS, flags);
        write_u16(b, field::RESERVED, 0);
        write_u32(b, field::SESSION_ID, session_id);
    }
}

/// Checks the common header of `buffer` and that it is of type `expected`; shared by the frame
/// modules. Returns the frame length, which is at least `fixed_len`.
pub(crate) fn check_typed(
    buffer: &[u8],
    expected: FrameType,
    fixed_len: usize,
) -> Result<usize, WireError> {
    let h = Header::new_checked(buffer)?;
    let found = h.frame_type_raw();
    if found != expected as u8 {
        return Err(WireError::WrongFrameType {
            expected: expected as u8,
            found,
        });
    }
    let len = h.frame_length() as usize;
    if len < fixed_len {
        return Err(WireError::BadLength {
            frame_length: len as u32,
            reason: "smaller than the fixed part of this frame type",
        });
    }
    Ok(len)
}

/// [`check_typed`] for the control frames without flags (every type but DATA, PAD and STATUS):
/// no flag is defined for them in version 1, so `flags` must be zero. `flags_field` names the field in the error.
pub(crate) fn check_control(
    buffer: &[u8],
    expected: FrameType,
    fixed_len: usize,
    flags_field: &'static str,
) -> Result<usize, WireError> {
    let len = check_typed(buffer, expected, fixed_len)?;
    let flags = Header::new_unchecked(buffer).flags();
    crate::check_zero(flags_field, flags.into())?;
    Ok(len)
}

/// [`check_typed`] for a frame type whose length is fixed: `frame_length` must be exactly
/// `len`. Flags are left to the caller (for frame types that define some).
pub(crate) fn check_exact_len(
    buffer: &[u8],
    expected: FrameType,
    len: usize,
) -> Result<(), WireError> {
    let found = check_typed(buffer, expected, len)?;
    if found != len {
        return Err(WireError::BadLength {
            frame_length: found as u32,
            reason: "this frame type has a fixed length",
        });
    }
    Ok(())
}

/// [`check_control`] for a frame type whose length is fixed: `frame_length` must be exactly
/// `len`.
pub(crate) fn check_fixed(
    buffer: &[u8],
    expected: FrameType,
    len: usize,
    flags_field: &'static str,
) -> Result<(), WireError> {
    let found = check_control(buffer, expected, len, flags_field)?;
    if found != len {
        return Err(WireError::BadLength {
            frame_length: found as u32,
            reason: "this frame type has a fixed length",
        });
    }
    Ok(())
}

/// Writes a complete common header at the start of `buffer`.
pub(crate) fn emit_header(
    buffer: &mut [u8],
    frame_type: FrameType,
    flags: u16,
    session_id: u32,
    frame_length: usize,
) {
    let mut h = Header::new_unchecked(&mut buffer[..HEADER_LEN]);
    h.set_frame_length(frame_length as u32);
    h.fill(frame_type, flags, session_id);
}

/// Splits a buffer holding several frames (each at an 8-byte aligned offset) into frames.
/// Stops at the first invalid frame and yields its error, so a receiver counts it and drops the
/// rest of the datagram.
///
/// Only the common header of each frame is checked here; parse each yielded frame with its
/// module's `new_checked` or with [`FrameRepr::parse`](crate::FrameRepr::parse). The padding
/// between frames is skipped without being inspected (senders write zeros).
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Frames<'a> {
    pub fn new(buffer: &'a [u8]) -> Self {
        Frames {
            rest: buffer,
            failed: false,
        }
    }

    /// The bytes not yet consumed (after an error: starting at the frame that failed).
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<(FrameType, &'a [u8]), WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match Header::new_checked(self.rest) {
            Ok(h) => {
                let len = h.frame_length() as usize;
                let ty = match h.frame_type() {
                    Ok(t) => t,
                    Err(e) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                };
                let frame = &self.rest[..len];
                let next = crate::align_frame(len).min(self.rest.len());
                self.rest = &self.rest[next..];
                Some(Ok((ty, frame)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
