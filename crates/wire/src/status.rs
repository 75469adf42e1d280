//! STATUS (0x08): a unicast receiver joins, keeps itself registered with, or leaves a publisher,
//! and reports its position.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |     common header (16 bytes, type 0x08, flags JOIN, LEAVE)    |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                     receiver_id (u32)                         | 20
//! +---------------------------------------------------------------+
//! |                    next_sequence (u64)                        | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                        window (u32)                           | 32
//! +---------------------------------------------------------------+
//! |                      reserved (zero)                          | 36
//! +---------------------------------------------------------------+
//! ```
//!
//! Sent by a network receiver to a publisher:
//!
//! - with flag [`JOIN`](status_flags::JOIN) to register as a unicast receiver of the stream (or
//!   to register again): the publisher adds it and answers with a HEARTBEAT;
//! - with no flag, periodically, to stay registered and report its position (a keepalive);
//! - with flag [`LEAVE`](status_flags::LEAVE) when it goes away: the publisher removes it.
//!
//! Fields:
//!
//! - The common header's `session_id` is the publisher session the receiver addresses. It may be
//!   0 ("not known yet") only together with JOIN.
//! - `receiver_id` is the receiver's random, non-zero id.
//! - `next_sequence` is the next sequence number the receiver expects (0 on a JOIN before any
//!   DATA was seen).
//! - `window` is how many more DATA frames (sequence numbers) the receiver can accept beyond
//!   `next_sequence`: the publisher's flow-control limit is the lowest `next_sequence + window`
//!   of its receivers. 0 means the receiver does not hold the publisher back.
//!
//! The frame length is fixed at [`STATUS_LEN`] (40) bytes. At most one of JOIN and LEAVE is set,
//! and no other flag bit.

use crate::header::{
    check_exact_len, emit_header, field as hfield, status_flags, FrameType, Header,
};
use crate::{read_u32, read_u64, write_u32, write_u64, WireError};

/// Field ranges of the STATUS frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const RECEIVER_ID: Field = 20..24;
    pub const NEXT_SEQUENCE: Field = 24..32;
    pub const WINDOW: Field = 32..36;
    pub const RESERVED: Field = 36..40;
}

/// The length of every STATUS frame.
pub const STATUS_LEN: usize = field::RESERVED.end;

/// A checked view of a STATUS frame.
#[derive(Debug, Clone, Copy)]
pub struct StatusFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> StatusFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        StatusFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = StatusFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks, in this order: the common header and type STATUS; `frame_length == 40`
    /// ([`WireError::BadLength`]); only defined flags, and not both JOIN and LEAVE
    /// (`status.flags`); the reserved field zero (`status.reserved`); `receiver_id != 0`
    /// (`status.receiver_id`); `session_id == 0` only with JOIN (`status.session_id`).
    pub fn check(&self) -> Result<(), WireError> {
        check_exact_len(self.buffer.as_ref(), FrameType::Status, STATUS_LEN)?;
        let fl = self.flags();
        let both = status_flags::JOIN | status_flags::LEAVE;
        if fl & !status_flags::ALL != 0 || fl & both == both {
            return Err(WireError::BadField {
                field: "status.flags",
                value: fl.into(),
            });
        }
        crate::check_zero("status.reserved", self.reserved().into())?;
        if self.receiver_id() == 0 {
            return Err(WireError::BadField {
                field: "status.receiver_id",
                value: 0,
            });
        }
        if self.session_id() == 0 && fl & status_flags::JOIN == 0 {
            return Err(WireError::BadField {
                field: "status.session_id",
                value: 0,
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn flags(&self) -> u16 {
        Header::new_unchecked(self.buffer.as_ref()).flags()
    }
    /// Whether flag JOIN is set.
    pub fn is_join(&self) -> bool {
        self.flags() & status_flags::JOIN != 0
    }
    /// Whether flag LEAVE is set.
    pub fn is_leave(&self) -> bool {
        self.flags() & status_flags::LEAVE != 0
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn stream_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::STREAM_ID)
    }
    pub fn receiver_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RECEIVER_ID)
    }
    pub fn next_sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::NEXT_SEQUENCE)
    }
    pub fn window(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::WINDOW)
    }
    pub fn reserved(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESERVED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> StatusFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    pub fn set_receiver_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RECEIVER_ID, v)
    }
    pub fn set_next_sequence(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::NEXT_SEQUENCE, v)
    }
    pub fn set_window(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::WINDOW, v)
    }
    /// Writes zero into the reserved field.
    pub fn clear_reserved(&mut self) {
        write_u32(self.buffer.as_mut(), field::RESERVED, 0)
    }
}

/// The parsed form of a STATUS frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusRepr {
    /// The publisher session addressed; 0 ("not known yet") only with JOIN.
    pub session_id: u32,
    pub stream_id: u32,
    /// The receiver's random id, non-zero.
    pub receiver_id: u32,
    /// The next sequence number the receiver expects.
    pub next_sequence: u64,
    /// Bytes the receiver can accept beyond `next_sequence`; 0 when not reported.
    pub window: u32,
    /// 0 (keepalive), [`status_flags::JOIN`] or [`status_flags::LEAVE`].
    pub flags: u16,
}

impl StatusRepr {
    /// Parses a STATUS frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &StatusFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        Ok(StatusRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            receiver_id: frame.receiver_id(),
            next_sequence: frame.next_sequence(),
            window: frame.window(),
            flags: frame.flags(),
        })
    }

    /// Bytes `emit` writes: always [`STATUS_LEN`].
    pub const fn buffer_len(&self) -> usize {
        STATUS_LEN
    }

    /// Writes every byte of the frame. The fields are written as they are: emitting a repr that
    /// breaks a rule of [`StatusFrame::check`] (e.g. `receiver_id` 0) gives a frame receivers
    /// reject.
    ///
    /// # Panics
    /// If the buffer is shorter than [`STATUS_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut StatusFrame<T>) {
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Status,
            self.flags,
            self.session_id,
            STATUS_LEN,
        );
        frame.set_stream_id(self.stream_id);
        frame.set_receiver_id(self.receiver_id);
        frame.set_next_sequence(self.next_sequence);
        frame.set_window(self.window);
        frame.clear_reserved();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use status_flags::{JOIN, LEAVE};
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 40] = [
        0x28, 0x00, 0x00, 0x00, // frame_length 40
        0x50, 0x47, 0x01, 0x08, // magic, version 1, STATUS
        0x00, 0x00, 0x00, 0x00, // flags (keepalive), reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0xef, 0xbe, 0xad, 0xde, // receiver_id 0xdeadbeef
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // next_sequence 42
        0x00, 0x00, 0x01, 0x00, // window 65536
        0x00, 0x00, 0x00, 0x00, // reserved
    ];

    #[rustfmt::skip]
    static GOLDEN_JOIN: [u8; 40] = [
        0x28, 0x00, 0x00, 0x00, // frame_length 40
        0x50, 0x47, 0x01, 0x08, // magic, version 1, STATUS
        0x01, 0x00, 0x00, 0x00, // flags JOIN, reserved
        0x00, 0x00, 0x00, 0x00, // session_id 0: not known yet
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0xef, 0xbe, 0xad, 0xde, // receiver_id 0xdeadbeef
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // next_sequence 0
        0x00, 0x00, 0x00, 0x00, // window 0: not reported
        0x00, 0x00, 0x00, 0x00, // reserved
    ];

    fn golden_repr() -> StatusRepr {
        StatusRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            receiver_id: 0xdead_beef,
            next_sequence: 42,
            window: 65536,
            flags: 0,
        }
    }

    fn golden_join_repr() -> StatusRepr {
        StatusRepr {
            session_id: 0,
            stream_id: 7,
            receiver_id: 0xdead_beef,
            next_sequence: 0,
            window: 0,
            flags: JOIN,
        }
    }

    fn bad_field(bytes: &[u8]) -> (&'static str, u64) {
        match StatusFrame::new_checked(bytes).unwrap_err() {
            WireError::BadField { field, value } => (field, value),
            other => panic!("expected BadField, got {other:?}"),
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = StatusFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.receiver_id(), 0xdead_beef);
        assert_eq!(frame.window(), 65536);
        assert!(!frame.is_join() && !frame.is_leave());
        assert_eq!(StatusRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn parses_golden_join_with_session_zero() {
        let frame = StatusFrame::new_checked(&GOLDEN_JOIN[..]).unwrap();
        assert!(frame.is_join() && !frame.is_leave());
        assert_eq!(StatusRepr::parse(&frame).unwrap(), golden_join_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 40];
        golden_repr().emit(&mut StatusFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
        let mut buf = [0xa5u8; 40];
        golden_join_repr().emit(&mut StatusFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN_JOIN);
    }

    #[test]
    fn emit_leaves_bytes_after_the_frame_alone() {
        let mut buf = [0xa5u8; 48];
        golden_repr().emit(&mut StatusFrame::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..40], &GOLDEN[..]);
        assert_eq!(&buf[40..], &[0xa5; 8]);
    }

    #[test]
    fn accepts_leave_and_join_with_a_known_session() {
        for fl in [JOIN, LEAVE] {
            let mut buf = GOLDEN;
            buf[8] = fl as u8;
            let repr = StatusRepr::parse(&StatusFrame::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(
                repr,
                StatusRepr {
                    flags: fl,
                    ..golden_repr()
                }
            );
        }
    }

    #[test]
    fn rejects_length_other_than_40() {
        let mut longer = [0u8; 48];
        longer[..40].copy_from_slice(&GOLDEN);
        longer[0] = 48;
        assert!(matches!(
            StatusFrame::new_checked(&longer[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 48,
                ..
            }
        ));
        let mut shorter = GOLDEN;
        shorter[0] = 32;
        assert!(matches!(
            StatusFrame::new_checked(&shorter[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 32,
                ..
            }
        ));
    }

    #[test]
    fn rejects_truncated_buffer() {
        assert_eq!(
            StatusFrame::new_checked(&GOLDEN[..39]).unwrap_err(),
            WireError::Truncated {
                needed: 40,
                available: 39
            }
        );
    }

    #[test]
    fn rejects_undefined_flags() {
        let mut buf = GOLDEN;
        buf[8] = 0x04;
        assert_eq!(bad_field(&buf), ("status.flags", 4));
        let mut buf = GOLDEN;
        buf[9] = 0x80;
        assert_eq!(bad_field(&buf), ("status.flags", 0x8000));
        let mut buf = GOLDEN_JOIN;
        buf[8] = 0x09; // JOIN and an undefined bit
        assert_eq!(bad_field(&buf), ("status.flags", 9));
    }

    #[test]
    fn rejects_join_and_leave_together() {
        let mut buf = GOLDEN;
        buf[8] = (JOIN | LEAVE) as u8;
        assert_eq!(bad_field(&buf), ("status.flags", 3));
    }

    #[test]
    fn rejects_nonzero_reserved() {
        let mut buf = GOLDEN;
        buf[39] = 0x80;
        assert_eq!(bad_field(&buf), ("status.reserved", 0x8000_0000));
    }

    #[test]
    fn rejects_receiver_id_zero() {
        let mut buf = GOLDEN;
        buf[20..24].fill(0);
        assert_eq!(bad_field(&buf), ("status.receiver_id", 0));
        let mut buf = GOLDEN_JOIN;
        buf[20..24].fill(0);
        assert_eq!(bad_field(&buf), ("status.receiver_id", 0));
    }

    #[test]
    fn rejects_session_zero_without_join() {
        let mut keepalive = GOLDEN;
        keepalive[12..16].fill(0);
        assert_eq!(bad_field(&keepalive), ("status.session_id", 0));
        let mut leave = keepalive;
        leave[8] = LEAVE as u8;
        assert_eq!(bad_field(&leave), ("status.session_id", 0));
    }

    #[test]
    fn rejects_other_frame_types() {
        let mut buf = GOLDEN;
        buf[7] = FrameType::Heartbeat as u8;
        assert_eq!(
            StatusFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::WrongFrameType {
                expected: 0x08,
                found: 0x03
            }
        );
    }

    #[test]
    fn parse_checks_an_unchecked_view() {
        let frame = StatusFrame::new_unchecked(&GOLDEN[..20]);
        assert_eq!(
            StatusRepr::parse(&frame).unwrap_err(),
            WireError::Truncated {
                needed: 40,
                available: 20
            }
        );
    }

    prop_compose! {
        fn any_repr()(
            flags in prop_oneof![Just(0), Just(JOIN), Just(LEAVE)],
            session_id in prop_oneof![1 => Just(0u32), 3 => any::<u32>()],
            stream_id: u32,
            receiver_id in 1u32..,
            next_sequence: u64,
            window: u32,
        ) -> StatusRepr {
            StatusRepr {
                // Session 0 ("not known yet") only with JOIN.
                session_id: if flags == JOIN { session_id } else { session_id.max(1) },
                stream_id,
                receiver_id,
                next_sequence,
                window,
                flags,
            }
        }
    }

    /// Parses `bytes` and, if they are a STATUS frame, checks that re-emitting gives them back.
    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = StatusFrame::new_checked(bytes) {
            let repr = StatusRepr::parse(&frame).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut StatusFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..STATUS_LEN]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(repr in any_repr()) {
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut StatusFrame::new_unchecked(&mut buf[..]));
            let frame = StatusFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(StatusRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Status)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(repr in any_repr(), m in mutations()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut StatusFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
