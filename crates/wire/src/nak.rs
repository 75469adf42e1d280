//! NAK (0x04): a receiver asks the sender to retransmit ranges of missing sequence numbers.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |          common header (16 bytes, type 0x04, flags 0)         |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                     receiver_id (u32)                         | 20
//! +-------------------------------+-------------------------------+
//! |      range_count (u16)        |        reserved (zero)        | 24
//! +-------------------------------+-------------------------------+
//! |                      reserved (zero)                          | 28
//! +---------------------------------------------------------------+
//! |                      range 0: start (u64)                     | 32
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                      range 0: count (u32)                     | 40
//! +---------------------------------------------------------------+
//! |                      range 0: reserved (zero)                 | 44
//! +---------------------------------------------------------------+
//! |            ranges 1 .. range_count - 1, 16 bytes each         | 48
//! ```
//!
//! - The common header's `session_id` is the session of the stream that lost frames (the
//!   sender's), so the sender can match the NAK to its stream.
//! - `receiver_id` identifies the receiver asking, so a sender can count and rate-limit NAKs per
//!   receiver.
//! - `range_count` is 1 to [`MAX_NAK_RANGES`]; `frame_length` is exactly
//!   `32 + 16 * range_count`.
//! - Each range asks for sequence numbers `start .. start + count` (end exclusive): `count >= 1`
//!   and `start + count` does not overflow a u64. Senders list ranges in ascending order without
//!   overlap; receivers of a NAK must not rely on it.

use crate::header::{check_control, emit_header, field as hfield, FrameType};
use crate::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64, WireError};
use core::fmt;

/// Field ranges of the NAK frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const RECEIVER_ID: Field = 20..24;
    pub const RANGE_COUNT: Field = 24..26;
    pub const RESERVED_16: Field = 26..28;
    pub const RESERVED_32: Field = 28..32;
    /// Start of the first range.
    pub const RANGES: usize = 32;

    /// Field ranges inside one 16-byte range entry, relative to the entry's start.
    pub mod range {
        use crate::Field;
        pub const START: Field = 0..8;
        pub const COUNT: Field = 8..12;
        pub const RESERVED: Field = 12..16;
    }
}

/// Length of the fixed part of a NAK frame, before the ranges.
pub const NAK_HEADER_LEN: usize = field::RANGES;
/// Length of one range entry.
pub const NAK_RANGE_LEN: usize = 16;
/// Most ranges one NAK frame may carry.
pub const MAX_NAK_RANGES: usize = 64;

/// The frame length of a NAK carrying `range_count` ranges.
pub const fn nak_len(range_count: usize) -> usize {
    NAK_HEADER_LEN + NAK_RANGE_LEN * range_count
}

/// Missing sequence numbers `start .. start + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NakRange {
    /// First missing sequence number.
    pub start: u64,
    /// How many consecutive sequence numbers are missing, at least 1.
    pub count: u32,
}

impl NakRange {
    /// One past the last missing sequence number, or `None` if that overflows (a range that
    /// `check` accepted never does).
    pub const fn end(&self) -> Option<u64> {
        self.start.checked_add(self.count as u64)
    }

    /// Whether `sequence` is in the range.
    pub const fn contains(&self, sequence: u64) -> bool {
        sequence >= self.start && sequence - self.start < self.count as u64
    }

    /// Checks `count >= 1` and that the end does not overflow.
    pub const fn check(&self) -> Result<(), WireError> {
        if self.count == 0 {
            return Err(WireError::BadField {
                field: "nak.range.count",
                value: 0,
            });
        }
        if self.end().is_none() {
            return Err(WireError::BadField {
                field: "nak.range.start",
                value: self.start,
            });
        }
        Ok(())
    }
}

/// Decodes the range entry at the start of `entry` (at least 16 bytes).
fn read_range(entry: &[u8]) -> NakRange {
    NakRange {
        start: read_u64(entry, field::range::START),
        count: read_u32(entry, field::range::COUNT),
    }
}

/// A checked view of a NAK frame.
#[derive(Debug, Clone, Copy)]
pub struct NakFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NakFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        NakFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = NakFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks, in this order: the common header, type NAK, flags 0, `frame_length >= 32`, both
    /// reserved fields zero, `1 <= range_count <= 64`, `frame_length == 32 + 16 * range_count`,
    /// then for each range: reserved zero, `count >= 1`, `start + count` without overflow.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let len = check_control(b, FrameType::Nak, NAK_HEADER_LEN, "nak.flags")?;
        crate::check_zero("nak.reserved", read_u16(b, field::RESERVED_16).into())?;
        crate::check_zero("nak.reserved", read_u32(b, field::RESERVED_32).into())?;
        let n = self.range_count() as usize;
        if n == 0 || n > MAX_NAK_RANGES {
            return Err(WireError::BadField {
                field: "nak.range_count",
                value: n as u64,
            });
        }
        if len != nak_len(n) {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "a NAK's frame_length must be 32 + 16 * range_count",
            });
        }
        for entry in b[NAK_HEADER_LEN..len].chunks_exact(NAK_RANGE_LEN) {
            crate::check_zero(
                "nak.range.reserved",
                read_u32(entry, field::range::RESERVED).into(),
            )?;
            read_range(entry).check()?;
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn frame_length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::FRAME_LENGTH)
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
    pub fn range_count(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::RANGE_COUNT)
    }
    /// The range entries' bytes: `16 * range_count` of them on a checked frame.
    pub fn range_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[NAK_HEADER_LEN..self.frame_length() as usize]
    }
    /// The ranges, decoded lazily (no allocation).
    pub fn ranges(&self) -> NakRangeIter<'_> {
        NakRangeIter::Wire(self.range_bytes().chunks_exact(NAK_RANGE_LEN))
    }
    /// Range number `index`, or `None` past the last one.
    pub fn range(&self, index: usize) -> Option<NakRange> {
        self.range_bytes()
            .chunks_exact(NAK_RANGE_LEN)
            .nth(index)
            .map(read_range)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NakFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    pub fn set_receiver_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RECEIVER_ID, v)
    }
    pub fn set_range_count(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::RANGE_COUNT, v)
    }
    /// Writes zero into both reserved fields of the fixed part.
    pub fn clear_reserved(&mut self) {
        let b = self.buffer.as_mut();
        write_u16(b, field::RESERVED_16, 0);
        write_u32(b, field::RESERVED_32, 0);
    }
    /// Writes range entry number `index` (with a zero reserved field).
    ///
    /// # Panics
    /// If the buffer does not reach the end of that entry.
    pub fn set_range(&mut self, index: usize, range: NakRange) {
        let at = NAK_HEADER_LEN + index * NAK_RANGE_LEN;
        let entry = &mut self.buffer.as_mut()[at..at + NAK_RANGE_LEN];
        write_u64(entry, field::range::START, range.start);
        write_u32(entry, field::range::COUNT, range.count);
        write_u32(entry, field::range::RESERVED, 0);
    }
}

/// The ranges of a NAK: either borrowed from a parsed frame's bytes or from a slice to emit.
/// Either way there is no allocation; compare, iterate and emit them alike.
#[derive(Clone, Copy)]
pub struct NakRanges<'a>(RangesInner<'a>);

#[derive(Clone, Copy)]
enum RangesInner<'a> {
    /// `16 * n` bytes of checked range entries.
    Wire(&'a [u8]),
    Slice(&'a [NakRange]),
}

impl<'a> NakRanges<'a> {
    /// Ranges to emit: 1 to [`MAX_NAK_RANGES`] of them, each passing [`NakRange::check`]. The
    /// errors are those a receiver would report for the emitted frame.
    pub fn new(ranges: &'a [NakRange]) -> Result<Self, WireError> {
        if ranges.is_empty() || ranges.len() > MAX_NAK_RANGES {
            return Err(WireError::BadField {
                field: "nak.range_count",
                value: ranges.len() as u64,
            });
        }
        for r in ranges {
            r.check()?;
        }
        Ok(NakRanges(RangesInner::Slice(ranges)))
    }

    /// How many ranges there are (1 to [`MAX_NAK_RANGES`]).
    pub const fn len(&self) -> usize {
        match self.0 {
            RangesInner::Wire(b) => b.len() / NAK_RANGE_LEN,
            RangesInner::Slice(s) => s.len(),
        }
    }

    /// Always false for ranges that were checked; provided for API symmetry.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> NakRangeIter<'a> {
        match self.0 {
            RangesInner::Wire(b) => NakRangeIter::Wire(b.chunks_exact(NAK_RANGE_LEN)),
            RangesInner::Slice(s) => NakRangeIter::Slice(s.iter()),
        }
    }

    /// How many sequence numbers the ranges ask for in total.
    pub fn total_count(&self) -> u64 {
        self.iter().map(|r| r.count as u64).sum()
    }
}

impl PartialEq for NakRanges<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}
impl Eq for NakRanges<'_> {}

impl fmt::Debug for NakRanges<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for NakRanges<'a> {
    type Item = NakRange;
    type IntoIter = NakRangeIter<'a>;
    fn into_iter(self) -> NakRangeIter<'a> {
        self.iter()
    }
}

/// Iterator over the ranges of a NAK.
#[derive(Debug, Clone)]
pub enum NakRangeIter<'a> {
    /// Decoding range entries from frame bytes.
    Wire(core::slice::ChunksExact<'a, u8>),
    /// Walking a slice given to [`NakRanges::new`].
    Slice(core::slice::Iter<'a, NakRange>),
}

impl Iterator for NakRangeIter<'_> {
    type Item = NakRange;
    fn next(&mut self) -> Option<NakRange> {
        match self {
            NakRangeIter::Wire(c) => c.next().map(read_range),
            NakRangeIter::Slice(s) => s.next().copied(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            NakRangeIter::Wire(c) => c.size_hint(),
            NakRangeIter::Slice(s) => s.size_hint(),
        }
    }
}

impl ExactSizeIterator for NakRangeIter<'_> {}

/// The parsed form of a NAK frame. The ranges borrow the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NakRepr<'a> {
    /// The session of the stream that lost frames.
    pub session_id: u32,
    pub stream_id: u32,
    /// The receiver asking for retransmission.
    pub receiver_id: u32,
    pub ranges: NakRanges<'a>,
}

impl<'a> NakRepr<'a> {
    /// Parses a NAK frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &NakFrame<&'a T>) -> Result<Self, WireError> {
        frame.check()?;
        let buffer: &'a [u8] = frame.buffer.as_ref();
        Ok(NakRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            receiver_id: frame.receiver_id(),
            ranges: NakRanges(RangesInner::Wire(
                &buffer[NAK_HEADER_LEN..frame.frame_length() as usize],
            )),
        })
    }

    /// Bytes `emit` writes: `32 + 16 * ranges.len()`.
    pub const fn buffer_len(&self) -> usize {
        nak_len(self.ranges.len())
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut NakFrame<T>) {
        let len = self.buffer_len();
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Nak,
            0,
            self.session_id,
            len,
        );
        frame.set_stream_id(self.stream_id);
        frame.set_receiver_id(self.receiver_id);
        frame.set_range_count(self.ranges.len() as u16);
        frame.clear_reserved();
        for (i, r) in self.ranges.iter().enumerate() {
            frame.set_range(i, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 64] = [
        0x40, 0x00, 0x00, 0x00, // frame_length 64
        0x50, 0x47, 0x01, 0x04, // magic, version 1, NAK
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0xef, 0xbe, 0xad, 0xde, // receiver_id 0xdeadbeef
        0x02, 0x00, 0x00, 0x00, // range_count 2, reserved
        0x00, 0x00, 0x00, 0x00, // reserved
        0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // start 10
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // count 3, reserved
        0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // start 1 << 32
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // count 1, reserved
    ];

    const GOLDEN_RANGES: [NakRange; 2] = [
        NakRange {
            start: 10,
            count: 3,
        },
        NakRange {
            start: 1 << 32,
            count: 1,
        },
    ];

    fn golden_repr() -> NakRepr<'static> {
        NakRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            receiver_id: 0xdead_beef,
            ranges: NakRanges::new(&GOLDEN_RANGES).unwrap(),
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = NakFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.range_count(), 2);
        assert_eq!(frame.ranges().collect::<Vec<_>>(), GOLDEN_RANGES);
        assert_eq!(frame.range(1), Some(GOLDEN_RANGES[1]));
        assert_eq!(frame.range(2), None);
        let repr = NakRepr::parse(&frame).unwrap();
        assert_eq!(repr, golden_repr());
        assert_eq!(repr.ranges.total_count(), 4);
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 64];
        golden_repr().emit(&mut NakFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn range_membership() {
        let r = NakRange {
            start: 10,
            count: 3,
        };
        assert!(!r.contains(9));
        assert!(r.contains(10) && r.contains(12));
        assert!(!r.contains(13));
        assert_eq!(r.end(), Some(13));
        assert_eq!(
            NakRange {
                start: u64::MAX,
                count: 1
            }
            .end(),
            None
        );
    }

    #[test]
    fn rejects_zero_count() {
        let mut buf = GOLDEN;
        buf[40] = 0;
        assert_eq!(
            NakFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "nak.range.count",
                value: 0
            }
        );
    }

    #[test]
    fn rejects_range_that_overflows() {
        let mut buf = GOLDEN;
        buf[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            NakFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "nak.range.start",
                value: u64::MAX
            }
        );
    }

    #[test]
    fn accepts_range_ending_exactly_at_u64_max() {
        let mut buf = GOLDEN;
        buf[48..56].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        let frame = NakFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(frame.range(1).unwrap().end(), Some(u64::MAX));
    }

    #[test]
    fn rejects_zero_and_too_many_ranges() {
        let mut buf = GOLDEN;
        buf[24] = 0;
        buf[0] = 32;
        assert_eq!(
            NakFrame::new_checked(&buf[..32]).unwrap_err(),
            WireError::BadField {
                field: "nak.range_count",
                value: 0
            }
        );
        let mut big = vec![0u8; nak_len(65)];
        let ranges = [NakRange { start: 0, count: 1 }; 64];
        let repr = NakRepr {
            ranges: NakRanges::new(&ranges).unwrap(),
            ..golden_repr()
        };
        repr.emit(&mut NakFrame::new_unchecked(&mut big[..]));
        assert!(NakFrame::new_checked(&big[..]).is_ok());
        big[0..4].copy_from_slice(&(nak_len(65) as u32).to_le_bytes());
        big[24] = 65;
        big[nak_len(64) + 8] = 1; // range 64's count
        assert_eq!(
            NakFrame::new_checked(&big[..]).unwrap_err(),
            WireError::BadField {
                field: "nak.range_count",
                value: 65
            }
        );
    }

    #[test]
    fn rejects_length_not_matching_range_count() {
        let mut buf = GOLDEN;
        buf[24] = 1;
        assert!(matches!(
            NakFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 64,
                ..
            }
        ));
        let mut buf = GOLDEN;
        buf[0] = 56; // frame_length not a whole number of ranges
        assert!(matches!(
            NakFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 56,
                ..
            }
        ));
    }

    #[test]
    fn rejects_nonzero_reserved_fields() {
        for (at, field) in [
            (26, "nak.reserved"),
            (31, "nak.reserved"),
            (60, "nak.range.reserved"),
        ] {
            let mut buf = GOLDEN;
            buf[at] = 1;
            let err = NakFrame::new_checked(&buf[..]).unwrap_err();
            assert_eq!(err.field(), Some(field), "byte {at}");
        }
    }

    #[test]
    fn ranges_new_validates_like_a_receiver() {
        assert_eq!(
            NakRanges::new(&[]).unwrap_err(),
            WireError::BadField {
                field: "nak.range_count",
                value: 0
            }
        );
        assert_eq!(
            NakRanges::new(&[NakRange { start: 5, count: 0 }]).unwrap_err(),
            WireError::BadField {
                field: "nak.range.count",
                value: 0
            }
        );
        assert_eq!(
            NakRanges::new(&[NakRange {
                start: u64::MAX,
                count: 1
            }])
            .unwrap_err(),
            WireError::BadField {
                field: "nak.range.start",
                value: u64::MAX
            }
        );
        assert!(NakRanges::new(&[NakRange { start: 0, count: 1 }; 65]).is_err());
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = NakFrame::new_checked(bytes) {
            let repr = NakRepr::parse(&frame).unwrap();
            prop_assert_eq!(repr.ranges.len(), frame.range_count() as usize);
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut NakFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    fn any_range() -> impl Strategy<Value = NakRange> {
        (any::<u64>(), 1u32..).prop_map(|(start, count)| NakRange {
            start: start.min(u64::MAX - count as u64),
            count,
        })
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            session_id: u32,
            stream_id: u32,
            receiver_id: u32,
            ranges in proptest::collection::vec(any_range(), 1..=MAX_NAK_RANGES),
        ) {
            let repr = NakRepr {
                session_id,
                stream_id,
                receiver_id,
                ranges: NakRanges::new(&ranges).unwrap(),
            };
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut NakFrame::new_unchecked(&mut buf[..]));
            let frame = NakFrame::new_checked(&buf[..]).unwrap();
            let parsed = NakRepr::parse(&frame).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(parsed.ranges.iter().collect::<Vec<_>>(), ranges);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Nak)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(
            ranges in proptest::collection::vec(any_range(), 1..4),
            m in mutations(),
        ) {
            let repr = NakRepr { ranges: NakRanges::new(&ranges).unwrap(), ..golden_repr() };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut NakFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
