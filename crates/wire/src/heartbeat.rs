//! HEARTBEAT (0x03): where a stream's sequence numbers stand while the sender is idle.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |          common header (16 bytes, type 0x03, flags 0)         |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                      reserved (zero)                          | 20
//! +---------------------------------------------------------------+
//! |                    next_sequence (u64)                        | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                   oldest_retained (u64)                       | 32
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! - `next_sequence` is the sequence number the next DATA frame of the stream will carry. A
//!   receiver whose own next expected sequence is lower has lost the tail of the stream and
//!   NAKs the missing range, even though no later DATA frame revealed the gap.
//! - `oldest_retained` is the lowest sequence number the sender can still retransmit; it equals
//!   `next_sequence` when the sender retains nothing. A receiver missing anything below it
//!   knows the loss is unrecoverable and does not NAK it. `oldest_retained <= next_sequence`.
//!
//! The frame length is fixed at [`HEARTBEAT_LEN`] (40) bytes and no flag is defined.

use crate::header::{check_fixed, emit_header, field as hfield, FrameType};
use crate::{read_u32, read_u64, write_u32, write_u64, WireError};

/// Field ranges of the HEARTBEAT frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const RESERVED: Field = 20..24;
    pub const NEXT_SEQUENCE: Field = 24..32;
    pub const OLDEST_RETAINED: Field = 32..40;
}

/// The length of every HEARTBEAT frame.
pub const HEARTBEAT_LEN: usize = field::OLDEST_RETAINED.end;

/// A checked view of a HEARTBEAT frame.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> HeartbeatFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        HeartbeatFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = HeartbeatFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks the common header, type HEARTBEAT, flags 0, `frame_length == 40`, the reserved
    /// field zero and `oldest_retained <= next_sequence`.
    pub fn check(&self) -> Result<(), WireError> {
        check_fixed(
            self.buffer.as_ref(),
            FrameType::Heartbeat,
            HEARTBEAT_LEN,
            "heartbeat.flags",
        )?;
        crate::check_zero("heartbeat.reserved", self.reserved().into())?;
        if self.oldest_retained() > self.next_sequence() {
            return Err(WireError::BadField {
                field: "heartbeat.oldest_retained",
                value: self.oldest_retained(),
            });
        }
        Ok(())
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
    pub fn next_sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::NEXT_SEQUENCE)
    }
    pub fn oldest_retained(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::OLDEST_RETAINED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> HeartbeatFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    /// Writes zero into the reserved field.
    pub fn clear_reserved(&mut self) {
        write_u32(self.buffer.as_mut(), field::RESERVED, 0)
    }
    pub fn set_next_sequence(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::NEXT_SEQUENCE, v)
    }
    pub fn set_oldest_retained(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::OLDEST_RETAINED, v)
    }
}

/// The parsed form of a HEARTBEAT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeartbeatRepr {
    pub session_id: u32,
    pub stream_id: u32,
    /// The sequence number the next DATA frame will carry.
    pub next_sequence: u64,
    /// The lowest sequence number the sender can still retransmit (`<= next_sequence`).
    pub oldest_retained: u64,
}

impl HeartbeatRepr {
    /// Parses a HEARTBEAT frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &HeartbeatFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        Ok(HeartbeatRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            next_sequence: frame.next_sequence(),
            oldest_retained: frame.oldest_retained(),
        })
    }

    /// Bytes `emit` writes: always [`HEARTBEAT_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEARTBEAT_LEN
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEARTBEAT_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut HeartbeatFrame<T>) {
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Heartbeat,
            0,
            self.session_id,
            HEARTBEAT_LEN,
        );
        frame.set_stream_id(self.stream_id);
        frame.clear_reserved();
        frame.set_next_sequence(self.next_sequence);
        frame.set_oldest_retained(self.oldest_retained);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 40] = [
        0x28, 0x00, 0x00, 0x00, // frame_length 40
        0x50, 0x47, 0x01, 0x03, // magic, version 1, HEARTBEAT
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0x00, 0x00, 0x00, 0x00, // reserved
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // next_sequence 42
        0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // oldest_retained 10
    ];

    fn golden_repr() -> HeartbeatRepr {
        HeartbeatRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            next_sequence: 42,
            oldest_retained: 10,
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = HeartbeatFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.next_sequence(), 42);
        assert_eq!(HeartbeatRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 40];
        golden_repr().emit(&mut HeartbeatFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn emit_leaves_bytes_after_the_frame_alone() {
        let mut buf = [0xa5u8; 48];
        golden_repr().emit(&mut HeartbeatFrame::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..40], &GOLDEN[..]);
        assert_eq!(&buf[40..], &[0xa5; 8]);
    }

    #[test]
    fn rejects_nonzero_reserved() {
        let mut buf = GOLDEN;
        buf[21] = 1;
        assert_eq!(
            HeartbeatFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "heartbeat.reserved",
                value: 0x100
            }
        );
    }

    #[test]
    fn rejects_any_flag() {
        let mut buf = GOLDEN;
        buf[8] = crate::header::flags::URGENT as u8;
        assert_eq!(
            HeartbeatFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "heartbeat.flags",
                value: 4
            }
        );
    }

    #[test]
    fn rejects_oldest_retained_above_next_sequence() {
        let mut buf = GOLDEN;
        buf[32] = 43;
        assert_eq!(
            HeartbeatFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "heartbeat.oldest_retained",
                value: 43
            }
        );
    }

    #[test]
    fn accepts_oldest_retained_equal_to_next_sequence() {
        let mut buf = GOLDEN;
        buf[32] = 42;
        assert!(HeartbeatFrame::new_checked(&buf[..]).is_ok());
    }

    #[test]
    fn rejects_length_other_than_40() {
        let mut longer = [0u8; 48];
        longer[..40].copy_from_slice(&GOLDEN);
        longer[0] = 48;
        assert!(matches!(
            HeartbeatFrame::new_checked(&longer[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 48,
                ..
            }
        ));
        let mut shorter = GOLDEN;
        shorter[0] = 32;
        assert!(matches!(
            HeartbeatFrame::new_checked(&shorter[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 32,
                ..
            }
        ));
    }

    #[test]
    fn rejects_truncated_buffer() {
        assert_eq!(
            HeartbeatFrame::new_checked(&GOLDEN[..39]).unwrap_err(),
            WireError::Truncated {
                needed: 40,
                available: 39
            }
        );
    }

    #[test]
    fn rejects_other_frame_types() {
        let mut buf = GOLDEN;
        buf[7] = FrameType::Bye as u8;
        assert_eq!(
            HeartbeatFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::WrongFrameType {
                expected: 0x03,
                found: 0x07
            }
        );
    }

    prop_compose! {
        fn any_repr()(session_id: u32, stream_id: u32, a: u64, b: u64) -> HeartbeatRepr {
            HeartbeatRepr {
                session_id,
                stream_id,
                next_sequence: a.max(b),
                oldest_retained: a.min(b),
            }
        }
    }

    /// Parses `bytes` and, if they are a HEARTBEAT frame, checks that re-emitting gives them back.
    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = HeartbeatFrame::new_checked(bytes) {
            let repr = HeartbeatRepr::parse(&frame).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut HeartbeatFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..HEARTBEAT_LEN]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(repr in any_repr()) {
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut HeartbeatFrame::new_unchecked(&mut buf[..]));
            let frame = HeartbeatFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(HeartbeatRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Heartbeat)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(repr in any_repr(), m in mutations()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut HeartbeatFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
