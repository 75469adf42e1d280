//! STATUS (0x03): an item's state, or the answer to a request.
//!
//! ```text
//!  0  header (item_id: the item, or 0 when there is none; flags: none defined)
//!  8  u32 request_id     the OPEN it answers (0: unsolicited)
//! 12  u8  state          0 ok, 1 stale, 2 closed, 3 not-entitled, 4 not-found, 5 rejected
//! 13  u8  service_len    0 to 64
//! 14  u8  name_len       0 to 128
//! 15  u8  text_len       0 to 255
//! 16  service, name, text bytes; `length` is exactly 16 + the three lengths
//! ```
//!
//! The service and name are empty or follow their alphabets; the name may be a glob (the
//! answer to an OPEN's pattern). The text is UTF-8 for people.

use super::header::{
    check_typed, emit_header, field as hfield, ItemIdRule, MessageType, TypeRules,
};
use super::{read_u16, read_u32, write_u32, MdError};
use crate::model::{
    check_item_pattern, check_service, ItemState, MAX_ITEM_NAME_LEN, MAX_SERVICE_LEN,
};

/// Field ranges of STATUS after the header.
pub mod field {
    use crate::codec::Range;
    pub const REQUEST_ID: Range = 8..12;
    pub const STATE: usize = 12;
    pub const SERVICE_LEN: usize = 13;
    pub const NAME_LEN: usize = 14;
    pub const TEXT_LEN: usize = 15;
    /// Start of the service bytes; name and text follow.
    pub const TEXTS: usize = 16;
}

/// Length of the fixed part of a STATUS.
pub const STATUS_HEADER_LEN: usize = field::TEXTS;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Status,
    fixed_len: STATUS_HEADER_LEN,
    flags: 0,
    item_id: ItemIdRule::Any,
    flags_field: "status.flags",
    item_id_field: "status.item_id",
};

/// A checked view of a STATUS.
#[derive(Debug, Clone, Copy)]
pub struct StatusView<T: AsRef<[u8]>> {
    buffer: T,
}

struct Parts<'a> {
    state: ItemState,
    service: &'a str,
    name: &'a str,
    text: &'a str,
}

impl<T: AsRef<[u8]>> StatusView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        StatusView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = StatusView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type STATUS, `length >= 16`, flags 0, a known
    /// state, `service_len <= 64`, `name_len <= 128`, `length == 16 + the three lengths`, the
    /// service's and name's alphabets, the text is UTF-8.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks a STATUS and returns its state and texts.
fn parts(b: &[u8]) -> Result<Parts<'_>, MdError> {
    let len = check_typed(b, &RULES)?;
    let state = ItemState::from_u8(b[field::STATE]).ok_or(MdError::BadField {
        field: "status.state",
        value: b[field::STATE].into(),
    })?;
    let (sl, nl, tl) = (
        usize::from(b[field::SERVICE_LEN]),
        usize::from(b[field::NAME_LEN]),
        usize::from(b[field::TEXT_LEN]),
    );
    super::check_len_u8("status.service_len", sl, MAX_SERVICE_LEN)?;
    super::check_len_u8("status.name_len", nl, MAX_ITEM_NAME_LEN)?;
    if len != STATUS_HEADER_LEN + sl + nl + tl {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "a STATUS's length must be 16 + service_len + name_len + text_len",
        });
    }
    let (name_at, text_at) = (field::TEXTS + sl, field::TEXTS + sl + nl);
    let service =
        optional(check_service, &b[field::TEXTS..name_at]).map_err(|_| MdError::BadText {
            field: "status.service",
        })?;
    let name =
        optional(check_item_pattern, &b[name_at..text_at]).map_err(|_| MdError::BadText {
            field: "status.name",
        })?;
    let text = super::check_utf8("status.text", &b[text_at..len])?;
    Ok(Parts {
        state,
        service,
        name,
        text,
    })
}

impl<T: AsRef<[u8]>> StatusView<T> {
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn length(&self) -> u16 {
        read_u16(self.buffer.as_ref(), hfield::LENGTH)
    }
    pub fn item_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::ITEM_ID)
    }
    pub fn request_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQUEST_ID)
    }
    pub fn state_raw(&self) -> u8 {
        self.buffer.as_ref()[field::STATE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> StatusView<T> {
    pub fn set_item_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), hfield::ITEM_ID, v)
    }
}

/// An empty text, or one `check` accepts.
fn optional(
    check: fn(&[u8]) -> Result<&str, crate::model::NameError>,
    bytes: &[u8],
) -> Result<&str, crate::model::NameError> {
    if bytes.is_empty() {
        Ok("")
    } else {
        check(bytes)
    }
}

/// The parsed form of a STATUS; the texts borrow the message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRepr<'a> {
    /// The item (0 when the answer is about no item the client knows).
    pub item_id: u32,
    /// The OPEN it answers; 0 when unsolicited.
    pub request_id: u32,
    pub state: ItemState,
    /// Empty, or the item's service.
    pub service: &'a str,
    /// Empty, or the item's name (a glob when it answers an OPEN's pattern).
    pub name: &'a str,
    /// Why, for people.
    pub text: &'a str,
}

impl<'a> StatusRepr<'a> {
    /// Parses a STATUS, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &StatusView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let p = parts(buffer)?;
        Ok(StatusRepr {
            item_id: view.item_id(),
            request_id: view.request_id(),
            state: p.state,
            service: p.service,
            name: p.name,
            text: p.text,
        })
    }

    /// Checks what a receiver would reject: names outside their alphabets, a text over 255
    /// bytes.
    pub fn check(&self) -> Result<(), MdError> {
        optional(check_service, self.service.as_bytes())
            .map_err(|e| super::name_error("status.service_len", "status.service", e))?;
        optional(check_item_pattern, self.name.as_bytes())
            .map_err(|e| super::name_error("status.name_len", "status.name", e))?;
        super::check_len_u8("status.text_len", self.text.len(), 255)
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        STATUS_HEADER_LEN + self.service.len() + self.name.len() + self.text.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or a text longer than
    /// 255 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut StatusView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Status, 0, self.item_id, len);
        write_u32(b, field::REQUEST_ID, self.request_id);
        b[field::STATE] = self.state as u8;
        let mut at = field::TEXTS;
        for (len_at, text) in [
            (field::SERVICE_LEN, self.service),
            (field::NAME_LEN, self.name),
            (field::TEXT_LEN, self.text),
        ] {
            b[len_at] = u8::try_from(text.len()).expect("a STATUS text of at most 255 bytes");
            b[at..at + text.len()].copy_from_slice(text.as_bytes());
            at += text.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[rustfmt::skip]
    static GOLDEN: [u8; 37] = [
        0x25, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, // length 37, STATUS, flags 0, item 0
        0x05, 0x00, 0x00, 0x00, 0x03, 0x05, 0x06, 0x0a, // request 5, not-entitled, 5, 6, 10
        b'F', b'E', b'E', b'D', b'1',
        b'M', b'S', b'F', b'T', b'.', b'O',
        b'n', b'o', b't', b' ', b'y', b'o', b'u', b'r', b's', b'!',
    ];

    fn golden_repr() -> StatusRepr<'static> {
        StatusRepr {
            item_id: 0,
            request_id: 5,
            state: ItemState::NotEntitled,
            service: "FEED1",
            name: "MSFT.O",
            text: "not yours!",
        }
    }

    #[test]
    fn parses_and_emits_golden_bytes() {
        let view = StatusView::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(StatusRepr::parse(&view).unwrap(), golden_repr());
        let mut buf = [0xa5u8; 37];
        golden_repr().emit(&mut StatusView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_an_unknown_state_and_a_length_mismatch() {
        let mut buf = GOLDEN;
        buf[12] = 6;
        assert_eq!(
            StatusView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "status.state",
                value: 6
            }
        );
        let mut buf = GOLDEN;
        buf[15] = 9;
        assert!(matches!(
            StatusView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadLength { length: 37, .. }
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x03)) {
            if let Ok(view) = StatusView::new_checked(&bytes[..]) {
                let repr = StatusRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut StatusView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
