//! QUERY (0x06): topic resolution, subscriber side. "Which publishers have topics matching
//! `pattern`?" Publishers that match answer with ADVERTISE frames.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |          common header (16 bytes, type 0x06, flags 0)         |  0
//! +---------------+---------------+-------------------------------+
//! | pattern_kind  | reserved (0)  |        pattern_len (u16)      | 16
//! +---------------+---------------+-------------------------------+
//! |                       query_id (u32)                          | 20
//! +---------------------------------------------------------------+
//! |                pattern (pattern_len bytes, UTF-8)             | 24
//! +---------------------------------------------------------------+
//! ```
//!
//! - `session_id` (common header) is the querying context's id; `query_id` lets it match
//!   answers to the query and is chosen by the querier.
//! - `pattern_kind`: 0 exact topic name, 1 glob (shell-style: `*` matches any run of characters,
//!   `?` exactly one), 2 regular expression that must match the whole topic name. Other values
//!   are rejected. The wire layer only carries the pattern; the resolver evaluates it.
//! - `pattern` follows the same rules as a topic: UTF-8 without NUL, 1 to
//!   [`MAX_PATTERN_LEN`] bytes; `frame_length` is exactly `24 + pattern_len`.

use crate::header::{check_control, emit_header, field as hfield, FrameType};
use crate::{read_u16, read_u32, write_u16, write_u32, WireError};

/// Field ranges of the QUERY frame after the common header.
pub mod field {
    use crate::Field;
    pub const PATTERN_KIND: usize = 16;
    pub const RESERVED: usize = 17;
    pub const PATTERN_LEN: Field = 18..20;
    pub const QUERY_ID: Field = 20..24;
    /// Start of the pattern bytes.
    pub const PATTERN: usize = 24;
}

/// Length of the fixed part of a QUERY frame.
pub const QUERY_HEADER_LEN: usize = field::PATTERN;
/// Longest pattern, in bytes (the same limit as a topic name).
pub const MAX_PATTERN_LEN: usize = crate::advertise::MAX_TOPIC_LEN;

/// How a QUERY's pattern is matched against topic names.
// Not #[non_exhaustive]: protocol version 1 fixes the kinds (other bytes are rejected), and the
// resolver must match each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PatternKind {
    /// The pattern is a topic name.
    Exact = 0,
    /// Shell-style: `*` matches any run of characters, `?` exactly one.
    Glob = 1,
    /// A regular expression that must match the whole topic name.
    Regex = 2,
}

impl PatternKind {
    /// Decodes the `pattern_kind` byte.
    pub const fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => PatternKind::Exact,
            1 => PatternKind::Glob,
            2 => PatternKind::Regex,
            other => {
                return Err(WireError::BadField {
                    field: "query.pattern_kind",
                    value: other as u64,
                })
            }
        })
    }

    /// The name used in `docs/golden/frames.json`: `"exact"`, `"glob"` or `"regex"`.
    pub const fn name(self) -> &'static str {
        match self {
            PatternKind::Exact => "exact",
            PatternKind::Glob => "glob",
            PatternKind::Regex => "regex",
        }
    }
}

/// Checks a pattern as receivers do: 1 to [`MAX_PATTERN_LEN`] bytes, no NUL. (Whether a glob or
/// regex is well-formed is up to the publisher that evaluates it.)
pub fn check_pattern(pattern: &str) -> Result<(), WireError> {
    crate::check_text_len("query.pattern_len", pattern.len(), MAX_PATTERN_LEN)?;
    crate::check_text("query.pattern", pattern.as_bytes()).map(|_| ())
}

/// A checked view of a QUERY frame.
#[derive(Debug, Clone, Copy)]
pub struct QueryFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> QueryFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        QueryFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = QueryFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks, in this order: the common header, type QUERY, flags 0, `frame_length >= 24`,
    /// reserved zero, a known `pattern_kind`, `1 <= pattern_len <= 1024`,
    /// `frame_length == 24 + pattern_len`, then the pattern is UTF-8 without NUL.
    pub fn check(&self) -> Result<(), WireError> {
        self.check_layout()?;
        crate::check_text("query.pattern", self.pattern_bytes())?;
        Ok(())
    }

    /// Everything [`check`](Self::check) does but the text content.
    fn check_layout(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let len = check_control(b, FrameType::Query, QUERY_HEADER_LEN, "query.flags")?;
        crate::check_zero("query.reserved", self.reserved().into())?;
        PatternKind::from_u8(self.pattern_kind_raw())?;
        let pattern_len = self.pattern_len() as usize;
        crate::check_text_len("query.pattern_len", pattern_len, MAX_PATTERN_LEN)?;
        if len != QUERY_HEADER_LEN + pattern_len {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "a QUERY's frame_length must be 24 + pattern_len",
            });
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
    pub fn pattern_kind_raw(&self) -> u8 {
        self.buffer.as_ref()[field::PATTERN_KIND]
    }
    /// The pattern kind; always `Ok` on a checked frame.
    pub fn pattern_kind(&self) -> Result<PatternKind, WireError> {
        PatternKind::from_u8(self.pattern_kind_raw())
    }
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    pub fn pattern_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PATTERN_LEN)
    }
    pub fn query_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::QUERY_ID)
    }
    /// The pattern's bytes (checked UTF-8 on a checked frame).
    pub fn pattern_bytes(&self) -> &[u8] {
        let end = field::PATTERN + self.pattern_len() as usize;
        &self.buffer.as_ref()[field::PATTERN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryFrame<T> {
    /// Writes the pattern kind and a zero reserved byte.
    pub fn set_pattern_kind(&mut self, v: PatternKind) {
        let b = self.buffer.as_mut();
        b[field::PATTERN_KIND] = v as u8;
        b[field::RESERVED] = 0;
    }
    pub fn set_query_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::QUERY_ID, v)
    }
    /// Writes `pattern_len` and the pattern.
    ///
    /// # Panics
    /// If the pattern is longer than 65535 bytes or the buffer is too short for it.
    pub fn set_pattern(&mut self, pattern: &str) {
        let len = u16::try_from(pattern.len()).expect("pattern longer than 65535 bytes");
        let b = self.buffer.as_mut();
        write_u16(b, field::PATTERN_LEN, len);
        b[field::PATTERN..field::PATTERN + pattern.len()].copy_from_slice(pattern.as_bytes());
    }
}

/// The parsed form of a QUERY frame; the pattern borrows the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryRepr<'a> {
    /// The querying context's id.
    pub session_id: u32,
    /// Chosen by the querier to match answers to this query.
    pub query_id: u32,
    pub kind: PatternKind,
    pub pattern: &'a str,
}

impl<'a> QueryRepr<'a> {
    /// Parses a QUERY frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &QueryFrame<&'a T>) -> Result<Self, WireError> {
        frame.check_layout()?;
        let buffer: &'a [u8] = frame.buffer.as_ref();
        let end = field::PATTERN + frame.pattern_len() as usize;
        Ok(QueryRepr {
            session_id: frame.session_id(),
            query_id: frame.query_id(),
            kind: frame.pattern_kind()?,
            pattern: crate::check_text("query.pattern", &buffer[field::PATTERN..end])?,
        })
    }

    /// Checks the pattern as a receiver would (see [`check_pattern`]); `emit` writes whatever
    /// it is given.
    pub fn check(&self) -> Result<(), WireError> {
        check_pattern(self.pattern)
    }

    /// Bytes `emit` writes: `24 + pattern.len()`.
    pub const fn buffer_len(&self) -> usize {
        QUERY_HEADER_LEN + self.pattern.len()
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or the pattern is longer
    /// than 65535 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut QueryFrame<T>) {
        let len = self.buffer_len();
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Query,
            0,
            self.session_id,
            len,
        );
        frame.set_pattern_kind(self.kind);
        frame.set_query_id(self.query_id);
        frame.set_pattern(self.pattern);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::string::String;
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 32] = [
        0x20, 0x00, 0x00, 0x00, // frame_length 32
        0x50, 0x47, 0x01, 0x06, // magic, version 1, QUERY
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x01, 0x00, 0x00, 0x00, // session_id 1
        0x01, 0x00, 0x08, 0x00, // glob, reserved, pattern_len 8
        0x2a, 0x00, 0x00, 0x00, // query_id 42
        b'p', b'x', b'.', b'*', b'/', b'*', b'*', b'?', // "px.*/**?"
    ];

    fn golden_repr() -> QueryRepr<'static> {
        QueryRepr {
            session_id: 1,
            query_id: 42,
            kind: PatternKind::Glob,
            pattern: "px.*/**?",
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = QueryFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.pattern_kind(), Ok(PatternKind::Glob));
        assert_eq!(QueryRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 32];
        golden_repr().emit(&mut QueryFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_unknown_pattern_kind() {
        let mut buf = GOLDEN;
        buf[16] = 3;
        assert_eq!(
            QueryFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "query.pattern_kind",
                value: 3
            }
        );
    }

    #[test]
    fn rejects_nonzero_reserved() {
        let mut buf = GOLDEN;
        buf[17] = 9;
        assert_eq!(
            QueryFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "query.reserved",
                value: 9
            }
        );
    }

    #[test]
    fn rejects_nul_in_pattern() {
        let mut buf = GOLDEN;
        buf[31] = 0;
        assert_eq!(
            QueryFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadText {
                field: "query.pattern"
            }
        );
    }

    #[test]
    fn rejects_empty_pattern_and_length_mismatch() {
        let mut buf = GOLDEN;
        buf[18] = 0;
        assert_eq!(
            QueryFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "query.pattern_len",
                value: 0
            }
        );
        let mut buf = GOLDEN;
        buf[18] = 7;
        assert!(matches!(
            QueryFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 32,
                ..
            }
        ));
    }

    #[test]
    fn check_pattern_enforces_the_limit() {
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        assert_eq!(
            check_pattern(&long).unwrap_err(),
            WireError::BadField {
                field: "query.pattern_len",
                value: 1025
            }
        );
        assert!(check_pattern(&long[1..]).is_ok());
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = QueryFrame::new_checked(bytes) {
            let repr = QueryRepr::parse(&frame).unwrap();
            prop_assert!(repr.check().is_ok());
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut QueryFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    fn any_kind() -> impl Strategy<Value = PatternKind> {
        prop_oneof![
            Just(PatternKind::Exact),
            Just(PatternKind::Glob),
            Just(PatternKind::Regex)
        ]
    }

    fn pattern() -> impl Strategy<Value = String> {
        "[^\0]{1,300}".prop_filter("fits", |s| s.len() <= MAX_PATTERN_LEN)
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            session_id: u32,
            query_id: u32,
            kind in any_kind(),
            pattern in pattern(),
        ) {
            let repr = QueryRepr { session_id, query_id, kind, pattern: &pattern };
            prop_assert!(repr.check().is_ok());
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut QueryFrame::new_unchecked(&mut buf[..]));
            let frame = QueryFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(QueryRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Query)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(kind in any_kind(), pattern in "[^\0]{1,40}", m in mutations()) {
            let repr = QueryRepr { kind, pattern: &pattern, ..golden_repr() };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut QueryFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
