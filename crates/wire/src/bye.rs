//! BYE (0x07): a stream of the session ends.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |          common header (16 bytes, type 0x07, flags 0)         |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                      reserved (zero)                          | 20
//! +---------------------------------------------------------------+
//! |                 final_next_sequence (u64)                     | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! `final_next_sequence` is the sequence number the stream's next DATA frame would have carried:
//! every frame below it was sent, none at or above it will be. A receiver that has not yet
//! delivered everything below it still recovers the missing frames (NAKs are answered for as
//! long as the sender retains them) before it reports the end of the stream.
//!
//! The frame length is fixed at [`BYE_LEN`] (32) bytes and no flag is defined.

use crate::header::{check_fixed, emit_header, field as hfield, FrameType};
use crate::{read_u32, read_u64, write_u32, write_u64, WireError};

/// Field ranges of the BYE frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const RESERVED: Field = 20..24;
    pub const FINAL_NEXT_SEQUENCE: Field = 24..32;
}

/// The length of every BYE frame.
pub const BYE_LEN: usize = field::FINAL_NEXT_SEQUENCE.end;

/// A checked view of a BYE frame.
#[derive(Debug, Clone, Copy)]
pub struct ByeFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ByeFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        ByeFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = ByeFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks the common header, type BYE, flags 0, `frame_length == 32` and the reserved
    /// field zero.
    pub fn check(&self) -> Result<(), WireError> {
        check_fixed(self.buffer.as_ref(), FrameType::Bye, BYE_LEN, "bye.flags")?;
        crate::check_zero("bye.reserved", self.reserved().into())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn stream_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::STREAM_ID)
    }
    pub fn reserved(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESERVED)
    }
    pub fn final_next_sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::FINAL_NEXT_SEQUENCE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ByeFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    /// Writes zero into the reserved field.
    pub fn clear_reserved(&mut self) {
        write_u32(self.buffer.as_mut(), field::RESERVED, 0)
    }
    pub fn set_final_next_sequence(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::FINAL_NEXT_SEQUENCE, v)
    }
}

/// The parsed form of a BYE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByeRepr {
    pub session_id: u32,
    pub stream_id: u32,
    /// One past the last sequence number the stream used.
    pub final_next_sequence: u64,
}

impl ByeRepr {
    /// Parses a BYE frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &ByeFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        Ok(ByeRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            final_next_sequence: frame.final_next_sequence(),
        })
    }

    /// Bytes `emit` writes: always [`BYE_LEN`].
    pub const fn buffer_len(&self) -> usize {
        BYE_LEN
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`BYE_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut ByeFrame<T>) {
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Bye,
            0,
            self.session_id,
            BYE_LEN,
        );
        frame.set_stream_id(self.stream_id);
        frame.clear_reserved();
        frame.set_final_next_sequence(self.final_next_sequence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 32] = [
        0x20, 0x00, 0x00, 0x00, // frame_length 32
        0x50, 0x47, 0x01, 0x07, // magic, version 1, BYE
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0x00, 0x00, 0x00, 0x00, // reserved
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // final_next_sequence 256
    ];

    fn golden_repr() -> ByeRepr {
        ByeRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            final_next_sequence: 256,
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = ByeFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.final_next_sequence(), 256);
        assert_eq!(ByeRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 32];
        golden_repr().emit(&mut ByeFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_nonzero_reserved() {
        let mut buf = GOLDEN;
        buf[23] = 0x80;
        assert_eq!(
            ByeFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "bye.reserved",
                value: 0x8000_0000
            }
        );
    }

    #[test]
    fn rejects_any_flag() {
        let mut buf = GOLDEN;
        buf[9] = 0x80;
        assert_eq!(
            ByeFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "bye.flags",
                value: 0x8000
            }
        );
    }

    #[test]
    fn rejects_length_other_than_32() {
        let mut buf = [0u8; 40];
        buf[..32].copy_from_slice(&GOLDEN);
        buf[0] = 40;
        assert!(matches!(
            ByeFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 40,
                ..
            }
        ));
        buf[0] = 24;
        assert!(matches!(
            ByeFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 24,
                ..
            }
        ));
    }

    #[test]
    fn parse_checks_an_unchecked_view() {
        let frame = ByeFrame::new_unchecked(&GOLDEN[..20]);
        assert_eq!(
            ByeRepr::parse(&frame).unwrap_err(),
            WireError::Truncated {
                needed: 32,
                available: 20
            }
        );
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = ByeFrame::new_checked(bytes) {
            let repr = ByeRepr::parse(&frame).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut ByeFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..BYE_LEN]);
        }
        Ok(())
    }

    prop_compose! {
        fn any_repr()(session_id: u32, stream_id: u32, final_next_sequence: u64) -> ByeRepr {
            ByeRepr { session_id, stream_id, final_next_sequence }
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(repr in any_repr()) {
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut ByeFrame::new_unchecked(&mut buf[..]));
            let frame = ByeFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(ByeRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Bye)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(repr in any_repr(), m in mutations()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut ByeFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
