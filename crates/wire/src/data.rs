//! DATA (0x01) and PAD (0x02) frames: application payload with a sequence number.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                 common header (16 bytes)                      |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                   message_length (u32)                        | 20
//! +---------------------------------------------------------------+
//! |                      sequence (u64)                           | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                 payload (frame_length - 32 bytes)             | 32
//! ```
//!
//! - `stream_id` identifies the topic within the session.
//! - `message_length` is the length of the whole application message: equal to the payload
//!   length when the frame carries a whole message (flags BEGIN|END); on the BEGIN fragment of a
//!   fragmented message it tells the receiver how much to reassemble, and every fragment repeats it.
//! - `sequence` numbers frames of a session from 0 with no gaps; fragments of one message take
//!   consecutive sequence numbers. In the shared-memory log it is also the commit word: the
//!   writer stores it last, with release ordering, so a reader that sees the sequence it expects
//!   sees the whole frame.
//!
//! A PAD frame has the same fixed part; its payload is filler that receivers skip. It must carry
//! flags 0 and `message_length` 0.

use crate::header::{check_typed, field as hfield, FrameType, Header, HEADER_LEN};
use crate::{read_u32, read_u64, write_u32, write_u64, WireError};

/// Field ranges of the DATA frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const MESSAGE_LENGTH: Field = 20..24;
    pub const SEQUENCE: Field = 24..32;
    pub const PAYLOAD: usize = 32;
}

/// Length of the fixed part of a DATA or PAD frame.
pub const DATA_HEADER_LEN: usize = field::PAYLOAD;

/// Largest message a session may carry (fragments included): 1 GiB, so lengths fit comfortably
/// in `u32` arithmetic.
pub const MAX_MESSAGE_LEN: u32 = 1 << 30;

/// A checked view of a DATA or PAD frame.
#[derive(Debug, Clone, Copy)]
pub struct DataFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DataFrame<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        DataFrame { buffer }
    }

    /// Wraps `buffer` after checking the common header, the frame type (DATA or PAD), the
    /// length and the flags, so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = DataFrame { buffer };
        f.check()?;
        Ok(f)
    }

    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let ty = Header::new_checked(b)?.frame_type_raw();
        let expected = if ty == FrameType::Pad as u8 { FrameType::Pad } else { FrameType::Data };
        let len = check_typed(b, expected, DATA_HEADER_LEN)?;
        let flags = self.flags();
        let payload_len = (len - DATA_HEADER_LEN) as u64;
        let msg_len = self.message_length() as u64;
        if expected == FrameType::Pad {
            if flags != 0 {
                return Err(WireError::BadField { field: "pad.flags", value: flags.into() });
            }
            if msg_len != 0 {
                return Err(WireError::BadField { field: "pad.message_length", value: msg_len });
            }
            return Ok(());
        }
        if flags & !crate::header::flags::ALL != 0 {
            return Err(WireError::BadField { field: "data.flags", value: flags.into() });
        }
        if msg_len > MAX_MESSAGE_LEN as u64 {
            return Err(WireError::BadField { field: "data.message_length", value: msg_len });
        }
        let whole = crate::header::flags::BEGIN | crate::header::flags::END;
        if flags & whole == whole && msg_len != payload_len {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "an unfragmented DATA frame's payload must equal message_length",
            });
        }
        if payload_len > msg_len {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "a fragment's payload exceeds message_length",
            });
        }
        Ok(())
    }

    pub fn is_pad(&self) -> bool {
        self.buffer.as_ref()[hfield::FRAME_TYPE] == FrameType::Pad as u8
    }
    pub fn frame_length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::FRAME_LENGTH)
    }
    pub fn flags(&self) -> u16 {
        Header::new_unchecked(self.buffer.as_ref()).flags()
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn stream_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::STREAM_ID)
    }
    pub fn message_length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MESSAGE_LENGTH)
    }
    pub fn sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SEQUENCE)
    }
    /// The payload: `frame_length - 32` bytes after the fixed part.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..self.frame_length() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    pub fn set_message_length(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::MESSAGE_LENGTH, v)
    }
    pub fn set_sequence(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::SEQUENCE, v)
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.frame_length() as usize;
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }
}

/// The parsed form of a DATA frame; the payload is borrowed, never copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    pub session_id: u32,
    pub stream_id: u32,
    pub sequence: u64,
    pub message_length: u32,
    pub flags: u16,
    pub payload: &'a [u8],
}

impl<'a> DataRepr<'a> {
    /// Parses a checked DATA frame (a PAD frame is rejected with `WrongFrameType`).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &'a DataFrame<&'a T>) -> Result<Self, WireError> {
        frame.check()?;
        if frame.is_pad() {
            return Err(WireError::WrongFrameType {
                expected: FrameType::Data as u8,
                found: FrameType::Pad as u8,
            });
        }
        Ok(DataRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            sequence: frame.sequence(),
            message_length: frame.message_length(),
            flags: frame.flags(),
            payload: frame.payload(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.len()
    }

    /// Writes the frame into `frame`, whose buffer must hold at least
    /// [`buffer_len`](Self::buffer_len) bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut DataFrame<T>) {
        let len = self.buffer_len();
        let b = frame.buffer.as_mut();
        let mut h = Header::new_unchecked(&mut b[..HEADER_LEN]);
        h.set_frame_length(len as u32);
        h.fill(FrameType::Data, self.flags, self.session_id);
        frame.set_stream_id(self.stream_id);
        frame.set_message_length(self.message_length);
        frame.set_sequence(self.sequence);
        frame.payload_mut().copy_from_slice(self.payload);
    }
}

/// Writes a PAD frame of `frame_length` bytes (at least [`DATA_HEADER_LEN`]) into `buffer`.
/// Only the fixed part is written; the filler bytes are left as they are.
pub fn emit_pad(buffer: &mut [u8], session_id: u32, sequence: u64, frame_length: u32) {
    let mut h = Header::new_unchecked(&mut buffer[..HEADER_LEN]);
    h.set_frame_length(frame_length);
    h.fill(FrameType::Pad, 0, session_id);
    let mut f = DataFrame::new_unchecked(&mut buffer[..DATA_HEADER_LEN]);
    f.set_stream_id(0);
    f.set_message_length(0);
    f.set_sequence(sequence);
}
