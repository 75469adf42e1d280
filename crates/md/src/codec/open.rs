//! OPEN (0x12): a client opens items by name or glob.
//!
//! ```text
//!  0  header (item_id 0; flags: 0x01 SNAPSHOT, 0x02 VIEW)
//!  8  u32 request_id     chosen by the client, not 0; CLOSE and the answers name it
//! 12  u8  service_len    1 to 64
//! 13  u8  reserved (0)
//! 14  u16 count          1 or more patterns
//! 16  service, then `count` patterns, each a u8 length (1 to 128) and its bytes, exactly to
//!     `length`; with VIEW, after the patterns: u16 view_count (1 to 1024) and that many u16
//!     field ids (1 to 32767, none twice), exactly to `length`
//! ```
//!
//! A pattern holding `*` or `?` is a glob over the service's item names; otherwise it is an
//! item name. With `SNAPSHOT` (version 2) the request asks for the images only: the
//! distributor answers as for any OPEN, then closes the request with a STATUS `closed`
//! carrying its id and no name, and keeps nothing of it. With `VIEW` (version 2) the request
//! asks for the listed fields only.

use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u16, read_u32, write_u16, write_u32, MdError};
use crate::model::{check_item_pattern, check_service, MAX_ITEM_NAME_LEN, MAX_SERVICE_LEN};

/// Field ranges of OPEN after the header.
pub mod field {
    use crate::codec::Range;
    pub const REQUEST_ID: Range = 8..12;
    pub const SERVICE_LEN: usize = 12;
    pub const RESERVED: usize = 13;
    pub const COUNT: Range = 14..16;
    /// Start of the service bytes; the patterns follow.
    pub const SERVICE: usize = 16;
}

/// Length of the fixed part of an OPEN.
pub const OPEN_HEADER_LEN: usize = field::SERVICE;

/// The flags of OPEN.
pub mod open_flags {
    /// The images only: the request is closed once answered (version 2).
    pub const SNAPSHOT: u8 = 0x01;
    /// A view (the listed fields only) follows the patterns (version 2).
    pub const VIEW: u8 = 0x02;
    /// Every bit OPEN defines.
    pub const ALL: u8 = SNAPSHOT | VIEW;
}

/// The most field ids a view lists.
pub const MAX_VIEW_FIELDS: usize = 1024;

/// The field ids of a view: as they lie in a parsed OPEN (u16 little-endian each), or a slice a
/// sender built. Two are equal when they list the same ids in the same order.
#[derive(Debug, Clone, Copy)]
pub enum ViewList<'a> {
    /// Checked ids as they lie in an OPEN (only the codec makes one).
    Wire(&'a [u8]),
    List(&'a [u16]),
}

impl<'a> ViewList<'a> {
    pub fn len(&self) -> usize {
        match self {
            ViewList::Wire(b) => b.len() / 2,
            ViewList::List(l) => l.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = u16> + 'a {
        let (wire, list): (&'a [u8], &'a [u16]) = match *self {
            ViewList::Wire(b) => (b, &[]),
            ViewList::List(l) => (&[], l),
        };
        wire.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .chain(list.iter().copied())
    }
}

impl PartialEq for ViewList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for ViewList<'_> {}

/// Checks view ids: 1 to [`MAX_VIEW_FIELDS`] of them, each 1 to 32767, none twice.
fn check_view(ids: impl Iterator<Item = u16>) -> Result<usize, MdError> {
    let mut seen = [0u64; 512];
    let mut n = 0;
    for fid in ids {
        if fid == 0 || fid > crate::model::MAX_FID {
            return Err(MdError::BadField {
                field: "open.view_fid",
                value: fid.into(),
            });
        }
        let (word, bit) = (usize::from(fid) / 64, fid % 64);
        if seen[word] & (1 << bit) != 0 {
            return Err(MdError::BadField {
                field: "open.view_fid",
                value: fid.into(),
            });
        }
        seen[word] |= 1 << bit;
        n += 1;
    }
    if n == 0 || n > MAX_VIEW_FIELDS {
        return Err(MdError::BadField {
            field: "open.view_count",
            value: n as u64,
        });
    }
    Ok(n)
}

const RULES: TypeRules = TypeRules {
    ty: MessageType::Open,
    fixed_len: OPEN_HEADER_LEN,
    flags: open_flags::ALL,
    item_id: ItemIdRule::Zero,
    flags_field: "open.flags",
    item_id_field: "open.item_id",
};

/// The patterns of an OPEN: as they lie in a parsed message, or a slice a sender built. Two
/// lists are equal when they hold the same patterns in the same order.
#[derive(Debug, Clone, Copy)]
pub enum PatternList<'a> {
    /// `count` checked patterns, each a length byte and its bytes (only the codec makes one).
    Wire(WirePatterns<'a>),
    List(&'a [&'a str]),
}

/// Checked patterns as they lie in an OPEN.
#[derive(Debug, Clone, Copy)]
pub struct WirePatterns<'a> {
    count: u16,
    bytes: &'a [u8],
}

impl<'a> PatternList<'a> {
    pub fn count(&self) -> usize {
        match self {
            PatternList::Wire(w) => w.count.into(),
            PatternList::List(l) => l.len(),
        }
    }
    pub fn iter(&self) -> PatternIter<'a> {
        match *self {
            PatternList::Wire(w) => PatternIter::Wire(w.bytes),
            PatternList::List(l) => PatternIter::List(l.iter()),
        }
    }
    /// Bytes the patterns take when encoded.
    pub fn encoded_len(&self) -> usize {
        match self {
            PatternList::Wire(w) => w.bytes.len(),
            PatternList::List(l) => l.iter().map(|p| 1 + p.len()).sum(),
        }
    }
}

impl PartialEq for PatternList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.count() == other.count() && self.iter().eq(other.iter())
    }
}
impl Eq for PatternList<'_> {}

/// Iterates the patterns of a [`PatternList`].
#[derive(Debug, Clone)]
pub enum PatternIter<'a> {
    Wire(&'a [u8]),
    List(core::slice::Iter<'a, &'a str>),
}

impl<'a> Iterator for PatternIter<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        match self {
            PatternIter::Wire(rest) => {
                let (&len, tail) = rest.split_first()?;
                let (p, tail) = tail.split_at_checked(usize::from(len))?;
                *rest = tail;
                check_item_pattern(p).ok()
            }
            PatternIter::List(l) => l.next().copied(),
        }
    }
}

/// A checked view of an OPEN.
#[derive(Debug, Clone, Copy)]
pub struct OpenView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> OpenView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        OpenView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = OpenView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type OPEN, `length >= 16`, no flag but SNAPSHOT and
    /// VIEW, `item_id` 0,
    /// `request_id != 0`, `1 <= service_len <= 64`, reserved 0, `count >= 1`, the service fits
    /// and follows its alphabet, then each pattern: its length byte fits, 1 to 128, its bytes
    /// fit, its alphabet; then that no byte follows the last pattern.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks an OPEN and returns its service, patterns and view.
fn parts(b: &[u8]) -> Result<(&str, WirePatterns<'_>, Option<ViewList<'_>>), MdError> {
    let view = OpenView::new_unchecked(b);
    let len = check_typed(b, &RULES)?;
    if view.request_id() == 0 {
        return Err(MdError::BadField {
            field: "open.request_id",
            value: 0,
        });
    }
    let sl = usize::from(b[field::SERVICE_LEN]);
    if sl == 0 || sl > MAX_SERVICE_LEN {
        return Err(MdError::BadField {
            field: "open.service_len",
            value: sl as u64,
        });
    }
    super::check_zero("open.reserved", b[field::RESERVED].into())?;
    let count = view.count();
    if count == 0 {
        return Err(MdError::BadField {
            field: "open.count",
            value: 0,
        });
    }
    let overrun = MdError::BadLength {
        length: len as u16,
        reason: "the service and patterns run past the end of the message",
    };
    let patterns_at = field::SERVICE + sl;
    if patterns_at > len {
        return Err(overrun);
    }
    let service = check_service(&b[field::SERVICE..patterns_at])
        .map_err(|e| super::name_error("open.service_len", "open.service", e))?;
    let mut rest = &b[patterns_at..len];
    for _ in 0..count {
        let Some((&pl, tail)) = rest.split_first() else {
            return Err(overrun);
        };
        if pl == 0 || usize::from(pl) > MAX_ITEM_NAME_LEN {
            return Err(MdError::BadField {
                field: "open.pattern_len",
                value: pl.into(),
            });
        }
        let Some((p, tail)) = tail.split_at_checked(usize::from(pl)) else {
            return Err(overrun);
        };
        check_item_pattern(p).map_err(|_| MdError::BadText {
            field: "open.pattern",
        })?;
        rest = tail;
    }
    let patterns = &b[patterns_at..len - rest.len()];
    let view = if b[crate::codec::header::field::FLAGS] & open_flags::VIEW != 0 {
        let Some((n, ids)) = rest.split_first_chunk::<2>() else {
            return Err(overrun);
        };
        let n = usize::from(u16::from_le_bytes(*n));
        if n == 0 || n > MAX_VIEW_FIELDS {
            return Err(MdError::BadField {
                field: "open.view_count",
                value: n as u64,
            });
        }
        if ids.len() != 2 * n {
            return Err(MdError::BadLength {
                length: len as u16,
                reason: "a view's field ids must exactly fill the rest of the OPEN",
            });
        }
        let view = ViewList::Wire(ids);
        check_view(view.iter())?;
        Some(view)
    } else {
        if !rest.is_empty() {
            return Err(MdError::BadLength {
                length: len as u16,
                reason: "bytes follow the last pattern",
            });
        }
        None
    };
    Ok((
        service,
        WirePatterns {
            count,
            bytes: patterns,
        },
        view,
    ))
}

impl<T: AsRef<[u8]>> OpenView<T> {
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn request_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQUEST_ID)
    }
    pub fn count(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::COUNT)
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[crate::codec::header::field::FLAGS]
    }
}

/// The parsed form of an OPEN; service and patterns borrow the message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRepr<'a> {
    /// Not 0.
    pub request_id: u32,
    /// [`open_flags`]: `SNAPSHOT` or 0.
    pub flags: u8,
    pub service: &'a str,
    pub patterns: PatternList<'a>,
    /// The fields asked for (flag VIEW); `None`: all of them.
    pub view: Option<ViewList<'a>>,
}

impl<'a> OpenRepr<'a> {
    /// Parses an OPEN, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &OpenView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let (service, patterns, fields) = parts(buffer)?;
        Ok(OpenRepr {
            request_id: view.request_id(),
            flags: view.flags() & !open_flags::VIEW,
            service,
            patterns: PatternList::Wire(patterns),
            view: fields,
        })
    }

    /// Checks what a receiver would reject.
    pub fn check(&self) -> Result<(), MdError> {
        if self.request_id == 0 {
            return Err(MdError::BadField {
                field: "open.request_id",
                value: 0,
            });
        }
        if let Some(v) = &self.view {
            check_view(v.iter())?;
        }
        // VIEW is said by `view`, not by `flags`.
        if self.flags & !open_flags::SNAPSHOT != 0 {
            return Err(MdError::BadField {
                field: "open.flags",
                value: self.flags.into(),
            });
        }
        check_service(self.service.as_bytes())
            .map_err(|e| super::name_error("open.service_len", "open.service", e))?;
        let count = self.patterns.count();
        if count == 0 || count > usize::from(u16::MAX) {
            return Err(MdError::BadField {
                field: "open.count",
                value: count as u64,
            });
        }
        for p in self.patterns.iter() {
            check_item_pattern(p.as_bytes())
                .map_err(|e| super::name_error("open.pattern_len", "open.pattern", e))?;
        }
        if self.buffer_len() > super::MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "open.length",
                value: self.buffer_len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        OPEN_HEADER_LEN
            + self.service.len()
            + self.patterns.encoded_len()
            + self.view.map_or(0, |v| 2 + 2 * v.len())
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or a length does not
    /// fit its field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut OpenView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        let flags = if self.view.is_some() {
            self.flags | open_flags::VIEW
        } else {
            self.flags
        };
        emit_header(b, MessageType::Open, flags, 0, len);
        write_u32(b, field::REQUEST_ID, self.request_id);
        b[field::SERVICE_LEN] =
            u8::try_from(self.service.len()).expect("service of at most 255 bytes");
        b[field::RESERVED] = 0;
        let count = u16::try_from(self.patterns.count()).expect("at most 65535 patterns");
        write_u16(b, field::COUNT, count);
        let mut at = field::SERVICE + self.service.len();
        b[field::SERVICE..at].copy_from_slice(self.service.as_bytes());
        match self.patterns {
            PatternList::Wire(w) => b[at..at + w.bytes.len()].copy_from_slice(w.bytes),
            PatternList::List(l) => {
                for p in l {
                    b[at] = u8::try_from(p.len()).expect("a pattern of at most 255 bytes");
                    b[at + 1..at + 1 + p.len()].copy_from_slice(p.as_bytes());
                    at += 1 + p.len();
                }
            }
        }
        if let Some(v) = self.view {
            let at = len - 2 - 2 * v.len();
            let n = u16::try_from(v.len()).expect("at most 65535 view fields");
            b[at..at + 2].copy_from_slice(&n.to_le_bytes());
            for (i, fid) in v.iter().enumerate() {
                b[at + 2 + 2 * i..at + 4 + 2 * i].copy_from_slice(&fid.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[rustfmt::skip]
    static GOLDEN: [u8; 34] = [
        0x22, 0x00, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, // length 34, OPEN
        0x07, 0x00, 0x00, 0x00, 0x05, 0x00, 0x02, 0x00, // request 7, service 5, reserved, 2 patterns
        b'F', b'E', b'E', b'D', b'1',
        0x06, b'M', b'S', b'F', b'T', b'.', b'O',
        0x05, b'A', b'A', b'A', b'.', b'*',
    ];

    #[test]
    fn parses_and_emits_golden_bytes() {
        let repr = OpenRepr {
            request_id: 7,
            flags: 0,
            service: "FEED1",
            patterns: PatternList::List(&["MSFT.O", "AAA.*"]),
            view: None,
        };
        let view = OpenView::new_checked(&GOLDEN[..]).unwrap();
        let parsed = OpenRepr::parse(&view).unwrap();
        assert_eq!(parsed, repr);
        assert_eq!(
            parsed.patterns.iter().collect::<Vec<_>>(),
            ["MSFT.O", "AAA.*"]
        );
        let mut buf = [0xa5u8; 34];
        repr.emit(&mut OpenView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_request_zero_and_a_pattern_with_a_space() {
        let mut buf = GOLDEN;
        buf[8] = 0;
        assert_eq!(
            OpenView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "open.request_id",
                value: 0
            }
        );
        let mut buf = GOLDEN;
        buf[25] = b' ';
        assert_eq!(
            OpenView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadText {
                field: "open.pattern"
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x12)) {
            if let Ok(view) = OpenView::new_checked(&bytes[..]) {
                let repr = OpenRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                prop_assert_eq!(repr.patterns.iter().count(), repr.patterns.count());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut OpenView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
