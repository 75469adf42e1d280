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
//! - `sequence` numbers the DATA frames of a stream (a `session_id`, `stream_id` pair) from 0
//!   with no gaps; fragments of one message take consecutive sequence numbers. A retransmission
//!   (flag RETRANSMIT) repeats the original frame's sequence, fields and payload. In the shared-memory log it is also the commit word: the
//!   writer stores it last, with release ordering, so a reader that sees the sequence it expects
//!   sees the whole frame.
//!
//! A PAD frame has the same fixed part; its payload is filler that receivers skip. It must carry
//! flags 0, `stream_id` 0 and `message_length` 0; its `sequence` is the sequence number the next
//! DATA frame of the session will carry (a PAD frame does not consume a sequence number).

use crate::header::{check_typed, emit_header, field as hfield, flags, FrameType, Header};
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

/// The fixed part of a DATA or PAD frame as four 8-byte words, for code that moves whole aligned
/// words rather than fields: the shared-memory log writes a header with four 8-byte stores and
/// commits the frame with the last one, the sequence.
///
/// A word's value is its eight bytes read as a little-endian `u64` (on a little-endian host,
/// exactly what an aligned 8-byte load gives). Offsets and shifts come from the field ranges of
/// [`header::field`](crate::header::field) and [`field`](super::field), so they cannot drift
/// from the byte layout.
pub mod words {
    use super::field;
    use crate::header::{field as hfield, FrameType, MAGIC, VERSION};

    /// Byte offset of the word holding `frame_length`, magic, version and frame type.
    pub const LENGTH_TYPE: usize = hfield::FRAME_LENGTH.start;
    /// Byte offset of the word holding flags, the reserved field and `session_id`.
    pub const FLAGS_SESSION: usize = hfield::FLAGS.start;
    /// Byte offset of the word holding `stream_id` and `message_length`.
    pub const STREAM_LENGTH: usize = field::STREAM_ID.start;
    /// Byte offset of the `sequence` word (the value is the sequence itself).
    pub const SEQUENCE: usize = field::SEQUENCE.start;

    /// `value` shifted to byte `at` of the word that starts at byte `word`.
    const fn place(value: u64, at: usize, word: usize) -> u64 {
        value << (8 * (at - word))
    }

    /// The word at [`LENGTH_TYPE`]: magic and version of this build, the frame type and
    /// `frame_length`. With constant `frame_type` it folds to one OR with a constant.
    #[inline]
    pub const fn length_type(frame_length: u32, frame_type: FrameType) -> u64 {
        place(frame_length as u64, hfield::FRAME_LENGTH.start, LENGTH_TYPE)
            | place(MAGIC as u64, hfield::MAGIC.start, LENGTH_TYPE)
            | place(VERSION as u64, hfield::VERSION, LENGTH_TYPE)
            | place(frame_type as u64, hfield::FRAME_TYPE, LENGTH_TYPE)
    }

    /// The word at [`FLAGS_SESSION`]: flags, a zero reserved field and `session_id`.
    #[inline]
    pub const fn flags_session(flags: u16, session_id: u32) -> u64 {
        place(flags as u64, hfield::FLAGS.start, FLAGS_SESSION)
            | place(session_id as u64, hfield::SESSION_ID.start, FLAGS_SESSION)
    }

    /// The word at [`STREAM_LENGTH`]: `stream_id` and `message_length`.
    #[inline]
    pub const fn stream_length(stream_id: u32, message_length: u32) -> u64 {
        place(stream_id as u64, field::STREAM_ID.start, STREAM_LENGTH)
            | place(
                message_length as u64,
                field::MESSAGE_LENGTH.start,
                STREAM_LENGTH,
            )
    }

    /// `frame_length` of a [`length_type`] word.
    #[inline]
    pub const fn frame_length(length_type: u64) -> u32 {
        (length_type >> (8 * (hfield::FRAME_LENGTH.start - LENGTH_TYPE))) as u32
    }

    /// The frame type byte of a [`length_type`] word.
    #[inline]
    pub const fn frame_type(length_type: u64) -> u8 {
        (length_type >> (8 * (hfield::FRAME_TYPE - LENGTH_TYPE))) as u8
    }

    /// True when byte range `f` lies inside the word starting at `word`.
    const fn within(f: core::ops::Range<usize>, word: usize) -> bool {
        word % 8 == 0 && f.start >= word && f.end <= word + 8
    }

    // Each field lies inside the word that carries it, and the words tile the fixed part.
    const _: () = assert!(within(hfield::FRAME_LENGTH, LENGTH_TYPE));
    const _: () = assert!(within(hfield::MAGIC, LENGTH_TYPE));
    const _: () = assert!(within(hfield::VERSION..hfield::VERSION + 1, LENGTH_TYPE));
    const _: () = assert!(within(
        hfield::FRAME_TYPE..hfield::FRAME_TYPE + 1,
        LENGTH_TYPE
    ));
    const _: () = assert!(within(hfield::FLAGS, FLAGS_SESSION));
    const _: () = assert!(within(hfield::RESERVED, FLAGS_SESSION));
    const _: () = assert!(within(hfield::SESSION_ID, FLAGS_SESSION));
    const _: () = assert!(within(field::STREAM_ID, STREAM_LENGTH));
    const _: () = assert!(within(field::MESSAGE_LENGTH, STREAM_LENGTH));
    const _: () = assert!(within(field::SEQUENCE, SEQUENCE) && SEQUENCE + 8 == field::PAYLOAD);
    const _: () = assert!(
        FLAGS_SESSION == LENGTH_TYPE + 8
            && STREAM_LENGTH == FLAGS_SESSION + 8
            && SEQUENCE == STREAM_LENGTH + 8
    );
}

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

    /// Checks, in this order: the common header ([`Header::check`]); the type is DATA or PAD
    /// ([`WireError::WrongFrameType`] otherwise); `frame_length >= 32`. For PAD: flags,
    /// `stream_id` and `message_length` are zero. For DATA: only defined flag bits are set,
    /// `message_length <= MAX_MESSAGE_LEN`, an unfragmented frame (BEGIN|END) carries exactly
    /// `message_length` payload bytes and a fragment carries at most that many.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let ty = Header::new_checked(b)?.frame_type_raw();
        let expected = if ty == FrameType::Pad as u8 {
            FrameType::Pad
        } else {
            FrameType::Data
        };
        check_typed(b, expected, DATA_HEADER_LEN)?;
        self.check_body()
    }

    /// The checks of [`check`](Self::check) after the common header, for a frame whose header
    /// was already checked ([`Header::check`], e.g. by [`Frames`](crate::header::Frames)) and
    /// whose type is DATA or PAD: a receiver's fast path checks the header once, not twice.
    /// On a buffer whose header was not checked it may panic (a short buffer) or accept a frame
    /// `check` rejects; it never reads past `frame_length`.
    #[inline]
    pub fn check_body(&self) -> Result<(), WireError> {
        let len = self.frame_length() as usize;
        if len < DATA_HEADER_LEN {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "smaller than the fixed part of this frame type",
            });
        }
        let expected = if self.is_pad() {
            FrameType::Pad
        } else {
            FrameType::Data
        };
        let fl = self.flags();
        let payload_len = (len - DATA_HEADER_LEN) as u64;
        let msg_len = self.message_length() as u64;
        if expected == FrameType::Pad {
            if fl != 0 {
                return Err(WireError::BadField {
                    field: "pad.flags",
                    value: fl.into(),
                });
            }
            crate::check_zero("pad.stream_id", self.stream_id().into())?;
            crate::check_zero("pad.message_length", msg_len)?;
            return Ok(());
        }
        if fl & !flags::ALL != 0 {
            return Err(WireError::BadField {
                field: "data.flags",
                value: fl.into(),
            });
        }
        if msg_len > MAX_MESSAGE_LEN as u64 {
            return Err(WireError::BadField {
                field: "data.message_length",
                value: msg_len,
            });
        }
        let whole = flags::BEGIN | flags::END;
        if fl & whole == whole && msg_len != payload_len {
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
    /// Parses a DATA frame (checking it first, so an unchecked view is fine). A PAD frame is
    /// rejected with [`WireError::WrongFrameType`]: use [`PadRepr::parse`] for it. The payload
    /// borrows the frame's buffer.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &DataFrame<&'a T>) -> Result<Self, WireError> {
        frame.check()?;
        Self::parse_checked_header(frame)
    }

    /// [`parse`](Self::parse) for a frame whose common header was already checked (see
    /// [`DataFrame::check_body`]).
    // Inlined: a receiver calls it once per frame, and returning the repr through memory from
    // a call cost more than the checks.
    #[inline]
    pub fn parse_checked_header<T: AsRef<[u8]> + ?Sized>(
        frame: &DataFrame<&'a T>,
    ) -> Result<Self, WireError> {
        frame.check_body()?;
        if frame.is_pad() {
            return Err(WireError::WrongFrameType {
                expected: FrameType::Data as u8,
                found: FrameType::Pad as u8,
            });
        }
        let buffer: &'a [u8] = frame.buffer.as_ref();
        Ok(DataRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            sequence: frame.sequence(),
            message_length: frame.message_length(),
            flags: frame.flags(),
            payload: &buffer[field::PAYLOAD..frame.frame_length() as usize],
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.len()
    }

    /// Writes the frame into `frame`: every byte of the first
    /// [`buffer_len`](Self::buffer_len), nothing after them. It writes the fields as given; a
    /// repr that breaks the rules of [`DataFrame::check`] gives a frame receivers reject.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut DataFrame<T>) {
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Data,
            self.flags,
            self.session_id,
            self.buffer_len(),
        );
        frame.set_stream_id(self.stream_id);
        frame.set_message_length(self.message_length);
        frame.set_sequence(self.sequence);
        frame.payload_mut().copy_from_slice(self.payload);
    }
}

/// The fixed part of a DATA frame (common header, stream id, message length, sequence) for a
/// payload of `payload_len` bytes: the first [`DATA_HEADER_LEN`] bytes [`DataRepr::emit`]
/// writes, built as one value so that a sender's per-message path stores it whole instead of
/// field by field through a view.
#[inline]
pub fn data_header(
    flags: u16,
    session_id: u32,
    stream_id: u32,
    message_length: u32,
    payload_len: usize,
    sequence: u64,
) -> [u8; DATA_HEADER_LEN] {
    let frame_length = (DATA_HEADER_LEN + payload_len) as u32;
    let w = [
        words::length_type(frame_length, FrameType::Data),
        words::flags_session(flags, session_id),
        words::stream_length(stream_id, message_length),
        sequence,
    ];
    let mut out = [0u8; DATA_HEADER_LEN];
    for (chunk, w) in out.chunks_exact_mut(8).zip(w) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Writes a PAD frame of `frame_length` bytes (at least [`DATA_HEADER_LEN`]) into `buffer`.
/// Only the fixed part is written; the filler bytes are left as they are (in a shared-memory
/// log they are never read). `sequence` is the sequence number the next DATA frame will carry.
///
/// # Panics
/// If `buffer` is shorter than [`DATA_HEADER_LEN`].
pub fn emit_pad(buffer: &mut [u8], session_id: u32, sequence: u64, frame_length: u32) {
    emit_header(buffer, FrameType::Pad, 0, session_id, frame_length as usize);
    let mut f = DataFrame::new_unchecked(&mut buffer[..DATA_HEADER_LEN]);
    f.set_stream_id(0);
    f.set_message_length(0);
    f.set_sequence(sequence);
}

/// The parsed form of a PAD frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadRepr {
    pub session_id: u32,
    /// The sequence number the next DATA frame of the session will carry.
    pub sequence: u64,
    /// The whole frame's length, filler included (at least [`DATA_HEADER_LEN`]).
    pub frame_length: u32,
}

impl PadRepr {
    /// Parses a PAD frame (checking it first). A DATA frame is rejected with
    /// [`WireError::WrongFrameType`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &DataFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        if !frame.is_pad() {
            return Err(WireError::WrongFrameType {
                expected: FrameType::Pad as u8,
                found: FrameType::Data as u8,
            });
        }
        Ok(PadRepr {
            session_id: frame.session_id(),
            sequence: frame.sequence(),
            frame_length: frame.frame_length(),
        })
    }

    /// Bytes `emit` writes: the whole frame.
    pub const fn buffer_len(&self) -> usize {
        self.frame_length as usize
    }

    /// Writes the PAD frame with zero filler (unlike [`emit_pad`], which leaves the filler
    /// untouched).
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or `frame_length` is
    /// below [`DATA_HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut DataFrame<T>) {
        let b = frame.buffer.as_mut();
        emit_pad(b, self.session_id, self.sequence, self.frame_length);
        b[DATA_HEADER_LEN..self.frame_length as usize].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::flags::{BEGIN, END, RETRANSMIT, URGENT};
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 37] = [
        0x25, 0x00, 0x00, 0x00, // frame_length 37
        0x50, 0x47, 0x01, 0x01, // magic, version 1, DATA
        0x03, 0x00, 0x00, 0x00, // flags BEGIN|END, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0x05, 0x00, 0x00, 0x00, // message_length 5
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sequence 42
        b'h', b'e', b'l', b'l', b'o',
    ];

    fn golden_repr() -> DataRepr<'static> {
        DataRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            sequence: 42,
            message_length: 5,
            flags: BEGIN | END,
            payload: b"hello",
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = DataFrame::new_checked(&GOLDEN[..]).unwrap();
        assert!(!frame.is_pad());
        assert_eq!(frame.payload(), b"hello");
        assert_eq!(DataRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 37];
        golden_repr().emit(&mut DataFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn the_fixed_part_as_one_value_matches_the_golden_frame() {
        let r = golden_repr();
        let h = data_header(
            r.flags,
            r.session_id,
            r.stream_id,
            5,
            r.payload.len(),
            r.sequence,
        );
        assert_eq!(h[..], GOLDEN[..DATA_HEADER_LEN]);
    }

    proptest! {
        #[test]
        fn the_fixed_part_as_one_value_is_what_emit_writes(
            flags in any::<u16>(), session_id in any::<u32>(), stream_id in any::<u32>(),
            message_length in any::<u32>(), payload_len in 0usize..70_000, sequence in any::<u64>(),
        ) {
            let payload = vec![0u8; payload_len];
            let mut buf = vec![0u8; DATA_HEADER_LEN + payload_len];
            DataRepr { session_id, stream_id, sequence, message_length, flags, payload: &payload }
                .emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            let h = data_header(flags, session_id, stream_id, message_length, payload_len, sequence);
            prop_assert_eq!(&h[..], &buf[..DATA_HEADER_LEN]);
        }
    }

    #[test]
    fn parse_borrows_from_the_buffer_not_the_view() {
        let payload: &[u8] = {
            let frame = DataFrame::new_unchecked(&GOLDEN[..]);
            DataRepr::parse(&frame).unwrap().payload
        };
        assert_eq!(payload, b"hello");
        // A `&Vec<u8>` works as well as a slice.
        let v: Vec<u8> = GOLDEN.to_vec();
        let frame = DataFrame::new_checked(&v).unwrap();
        assert_eq!(DataRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn accepts_fragments_and_flags() {
        let begin = DataRepr {
            flags: BEGIN,
            message_length: 1000,
            payload: &[7u8; 400],
            ..golden_repr()
        };
        let end = DataRepr {
            flags: END | URGENT | RETRANSMIT,
            sequence: 44,
            ..begin
        };
        for repr in [begin, end] {
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            assert_eq!(
                DataRepr::parse(&DataFrame::new_checked(&buf[..]).unwrap()),
                Ok(repr)
            );
        }
    }

    #[test]
    fn rejects_unfragmented_payload_not_matching_message_length() {
        let mut buf = GOLDEN;
        buf[20] = 6;
        assert!(matches!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 37,
                ..
            }
        ));
    }

    #[test]
    fn rejects_fragment_larger_than_message() {
        let mut buf = GOLDEN;
        buf[8] = BEGIN as u8;
        buf[20] = 4;
        assert!(matches!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 37,
                ..
            }
        ));
    }

    #[test]
    fn rejects_unknown_flags_and_huge_messages() {
        let mut buf = GOLDEN;
        buf[8] |= 0x10;
        assert_eq!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "data.flags",
                value: 0x13
            }
        );
        let mut buf = GOLDEN;
        buf[8] = BEGIN as u8;
        buf[20..24].copy_from_slice(&(MAX_MESSAGE_LEN + 1).to_le_bytes());
        assert_eq!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "data.message_length",
                value: (MAX_MESSAGE_LEN + 1).into()
            }
        );
    }

    #[test]
    fn rejects_frame_length_below_fixed_part() {
        let mut buf = GOLDEN;
        buf[0] = 24;
        assert!(matches!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 24,
                ..
            }
        ));
        buf[0] = 8;
        assert!(matches!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 8,
                ..
            }
        ));
    }

    #[test]
    fn rejects_other_frame_types() {
        let mut buf = GOLDEN;
        buf[7] = FrameType::Heartbeat as u8;
        assert_eq!(
            DataFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::WrongFrameType {
                expected: 0x01,
                found: 0x03
            }
        );
    }

    #[rustfmt::skip]
    static GOLDEN_PAD: [u8; 40] = [
        0x28, 0x00, 0x00, 0x00, // frame_length 40
        0x50, 0x47, 0x01, 0x02, // magic, version 1, PAD
        0x00, 0x00, 0x00, 0x00, // flags 0, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x00, 0x00, 0x00, 0x00, // stream_id 0
        0x00, 0x00, 0x00, 0x00, // message_length 0
        0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sequence 43 (of the next DATA)
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // filler
    ];

    #[test]
    fn pad_golden_bytes() {
        let frame = DataFrame::new_checked(&GOLDEN_PAD[..]).unwrap();
        assert!(frame.is_pad());
        let pad = PadRepr::parse(&frame).unwrap();
        assert_eq!(
            pad,
            PadRepr {
                session_id: 0x1234_5678,
                sequence: 43,
                frame_length: 40
            }
        );
        assert_eq!(
            DataRepr::parse(&frame).unwrap_err(),
            WireError::WrongFrameType {
                expected: 0x01,
                found: 0x02
            }
        );
        let mut buf = [0xa5u8; 40];
        pad.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN_PAD);
    }

    #[test]
    fn emit_pad_writes_only_the_fixed_part() {
        let mut buf = [0xa5u8; 48];
        emit_pad(&mut buf, 0x1234_5678, 43, 40);
        assert_eq!(&buf[..32], &GOLDEN_PAD[..32]);
        assert_eq!(&buf[32..], &[0xa5; 16]);
        let frame = DataFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(PadRepr::parse(&frame).unwrap().frame_length, 40);
    }

    /// Word `at` of `frame` read as a little-endian u64.
    fn word(frame: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(frame[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn header_words_are_the_golden_bytes() {
        use words::*;
        for (frame, ty, flags, stream_id, message_length, sequence) in [
            (&GOLDEN[..], FrameType::Data, BEGIN | END, 7, 5, 42),
            (&GOLDEN_PAD[..], FrameType::Pad, 0, 0, 0, 43),
        ] {
            let len = frame.len() as u32;
            let w = [
                length_type(len, ty),
                flags_session(flags, 0x1234_5678),
                stream_length(stream_id, message_length),
                sequence,
            ];
            assert_eq!(word(frame, LENGTH_TYPE), w[0]);
            assert_eq!(word(frame, FLAGS_SESSION), w[1]);
            assert_eq!(word(frame, STREAM_LENGTH), w[2]);
            assert_eq!(word(frame, SEQUENCE), w[3]);
            assert_eq!(frame_length(w[0]), len);
            assert_eq!(words::frame_type(w[0]), ty as u8);
            // Emitting the words over a 0xa5-filled buffer writes every byte of the fixed part.
            let mut buf = vec![0xa5u8; frame.len()];
            for (i, v) in w.iter().enumerate() {
                buf[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
            }
            buf[DATA_HEADER_LEN..].copy_from_slice(&frame[DATA_HEADER_LEN..]);
            assert_eq!(buf, frame);
        }
    }

    #[test]
    fn pad_rules() {
        for (at, field) in [
            (8, "pad.flags"),
            (16, "pad.stream_id"),
            (20, "pad.message_length"),
        ] {
            let mut buf = GOLDEN_PAD;
            buf[at] = 1;
            assert_eq!(
                DataFrame::new_checked(&buf[..]).unwrap_err().field(),
                Some(field)
            );
        }
        assert_eq!(
            PadRepr::parse(&DataFrame::new_unchecked(&GOLDEN[..])).unwrap_err(),
            WireError::WrongFrameType {
                expected: 0x02,
                found: 0x01
            }
        );
    }

    /// Parses `bytes` and, if they are a DATA or PAD frame, checks that re-emitting gives them
    /// back (for PAD: the fixed part; its filler is not represented).
    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        let Ok(frame) = DataFrame::new_checked(bytes) else {
            return Ok(());
        };
        let len = frame.frame_length() as usize;
        let mut out = vec![0u8; len];
        if frame.is_pad() {
            let repr = PadRepr::parse(&frame).unwrap();
            repr.emit(&mut DataFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..DATA_HEADER_LEN], &bytes[..DATA_HEADER_LEN]);
        } else {
            let repr = DataRepr::parse(&frame).unwrap();
            prop_assert_eq!(repr.buffer_len(), len);
            repr.emit(&mut DataFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..len]);
        }
        Ok(())
    }

    prop_compose! {
        fn any_repr(payload: Vec<u8>)(
            session_id: u32,
            stream_id: u32,
            sequence: u64,
            extra in 0u32..1000,
            flag_bits in 0u16..16,
        ) -> (u32, u32, u64, u32, u16) {
            let whole = BEGIN | END;
            let message_length = if flag_bits & whole == whole {
                payload.len() as u32
            } else {
                payload.len() as u32 + extra
            };
            (session_id, stream_id, sequence, message_length, flag_bits)
        }
    }

    fn any_data() -> impl Strategy<Value = (Vec<u8>, (u32, u32, u64, u32, u16))> {
        proptest::collection::vec(any::<u8>(), 0..200)
            .prop_flat_map(|p| (Just(p.clone()), any_repr(p)))
    }

    fn repr_of(payload: &[u8], f: (u32, u32, u64, u32, u16)) -> DataRepr<'_> {
        let (session_id, stream_id, sequence, message_length, flags) = f;
        DataRepr {
            session_id,
            stream_id,
            sequence,
            message_length,
            flags,
            payload,
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips((payload, f) in any_data()) {
            let repr = repr_of(&payload, f);
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            let frame = DataFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(DataRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn header_words_match_what_emit_writes((payload, f) in any_data()) {
            let repr = repr_of(&payload, f);
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            let len = buf.len() as u32;
            prop_assert_eq!(word(&buf, words::LENGTH_TYPE), words::length_type(len, FrameType::Data));
            prop_assert_eq!(word(&buf, words::FLAGS_SESSION), words::flags_session(repr.flags, repr.session_id));
            prop_assert_eq!(
                word(&buf, words::STREAM_LENGTH),
                words::stream_length(repr.stream_id, repr.message_length)
            );
            prop_assert_eq!(word(&buf, words::SEQUENCE), repr.sequence);
        }

        #[test]
        fn pad_round_trips(session_id: u32, sequence: u64, filler in 0u32..200) {
            let repr = PadRepr { session_id, sequence, frame_length: DATA_HEADER_LEN as u32 + filler };
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            prop_assert_eq!(PadRepr::parse(&DataFrame::new_checked(&buf[..]).unwrap()), Ok(repr));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Data)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn arbitrary_pad_bytes_never_panic(bytes in arbitrary_frame(FrameType::Pad)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic((payload, f) in any_data(), m in mutations()) {
            let repr = repr_of(&payload, f);
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut DataFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
