//! REFRESH (0x01): an item's full image, with its service and name.
//!
//! ```text
//!  0  header (item_id: the item, not 0; flags below)
//!  8  u64 timestamp_ns
//! 16  u32 item_seq
//! 20  u16 field_count
//! 22  u8  service_len    1 to 64
//! 23  u8  name_len       1 to 128
//! 24  service bytes, then name bytes, then zero padding so the fields start at a multiple of
//!     8 from the start of the message
//!  …  fields, exactly to `length`
//! ```
//!
//! A REFRESH replaces everything known of the item: a client that receives one knows the item
//! is `ok` with exactly these fields.

use super::fields::WireFields;
use super::header::{
    check_typed, emit_header, field as hfield, ItemIdRule, MessageType, TypeRules,
};
use super::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64, FieldList, MdError};
use crate::model::{check_item_name, check_service, MAX_ITEM_NAME_LEN, MAX_SERVICE_LEN};

/// Field ranges of REFRESH after the header.
pub mod field {
    use crate::codec::Range;
    pub const TIMESTAMP_NS: Range = 8..16;
    pub const ITEM_SEQ: Range = 16..20;
    pub const FIELD_COUNT: Range = 20..22;
    pub const SERVICE_LEN: usize = 22;
    pub const NAME_LEN: usize = 23;
    /// Start of the service bytes; the name follows them.
    pub const NAMES: usize = 24;
}

/// The flag bits of REFRESH.
pub mod refresh_flags {
    /// Answers a request: the client's OPEN, or (on the backbone) an IMAGE_REQUEST.
    pub const SOLICITED: u8 = 0x01;
    /// Sent after the client's queue was conflated: replaces every update it missed.
    pub const CONFLATED: u8 = 0x02;
    /// Answers a snapshot request (OPEN flagged SNAPSHOT, version 2): no UPDATE follows for
    /// it (unless another request of the client watches the item).
    pub const SNAPSHOT: u8 = 0x04;
    /// The fields are cut to the client's view (version 2): an UPDATE that changes none of
    /// them is not sent, so `item_seq` may jump from one UPDATE to the next.
    pub const VIEW: u8 = 0x08;
    /// Every bit REFRESH defines.
    pub const ALL: u8 = SOLICITED | CONFLATED | SNAPSHOT | VIEW;
}

/// Length of the fixed part of a REFRESH.
pub const REFRESH_HEADER_LEN: usize = field::NAMES;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Refresh,
    fixed_len: REFRESH_HEADER_LEN,
    flags: refresh_flags::ALL,
    item_id: ItemIdRule::NonZero,
    flags_field: "refresh.flags",
    item_id_field: "refresh.item_id",
};

/// Where the fields start for names of these lengths: after the names, padded to 8.
pub const fn fields_offset(service_len: usize, name_len: usize) -> usize {
    (REFRESH_HEADER_LEN + service_len + name_len + 7) & !7
}

/// A checked view of a REFRESH.
#[derive(Debug, Clone, Copy)]
pub struct RefreshView<T: AsRef<[u8]>> {
    buffer: T,
}

/// What [`RefreshView::check`] found: the names and the fields.
struct Parts<'a> {
    service: &'a str,
    name: &'a str,
    fields: WireFields<'a>,
}

impl<T: AsRef<[u8]>> RefreshView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        RefreshView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = RefreshView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type REFRESH, `length >= 24`, flags (SOLICITED,
    /// CONFLATED), `item_id != 0`, `1 <= service_len <= 64`, `1 <= name_len <= 128`, the names
    /// and padding fit, the service's and name's alphabets, zero padding, then the fields.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks a REFRESH and returns its names and fields.
fn parts(b: &[u8]) -> Result<Parts<'_>, MdError> {
    let view = RefreshView::new_unchecked(b);
    let len = check_typed(b, &RULES)?;
    let service_len = usize::from(view.service_len());
    let name_len = usize::from(view.name_len());
    if service_len == 0 || service_len > MAX_SERVICE_LEN {
        return Err(MdError::BadField {
            field: "refresh.service_len",
            value: service_len as u64,
        });
    }
    if name_len == 0 || name_len > MAX_ITEM_NAME_LEN {
        return Err(MdError::BadField {
            field: "refresh.name_len",
            value: name_len as u64,
        });
    }
    let at = fields_offset(service_len, name_len);
    if at > len {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "the names and their padding run past the end of the message",
        });
    }
    let name_at = field::NAMES + service_len;
    let service = check_service(&b[field::NAMES..name_at])
        .map_err(|e| super::name_error("refresh.service_len", "refresh.service", e))?;
    let name = check_item_name(&b[name_at..name_at + name_len])
        .map_err(|e| super::name_error("refresh.name_len", "refresh.name", e))?;
    if let Some(&p) = b[name_at + name_len..at].iter().find(|&&p| p != 0) {
        return Err(MdError::BadField {
            field: "refresh.padding",
            value: p.into(),
        });
    }
    let fields = WireFields::new(view.field_count(), &b[at..len], len as u16)?;
    Ok(Parts {
        service,
        name,
        fields,
    })
}

impl<T: AsRef<[u8]>> RefreshView<T> {
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn length(&self) -> u16 {
        read_u16(self.buffer.as_ref(), hfield::LENGTH)
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[hfield::FLAGS]
    }
    pub fn item_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::ITEM_ID)
    }
    pub fn timestamp_ns(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TIMESTAMP_NS)
    }
    pub fn item_seq(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ITEM_SEQ)
    }
    pub fn field_count(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FIELD_COUNT)
    }
    pub fn service_len(&self) -> u8 {
        self.buffer.as_ref()[field::SERVICE_LEN]
    }
    pub fn name_len(&self) -> u8 {
        self.buffer.as_ref()[field::NAME_LEN]
    }
    /// The service's bytes (checked on a checked view).
    pub fn service_bytes(&self) -> &[u8] {
        let end = field::NAMES + usize::from(self.service_len());
        &self.buffer.as_ref()[field::NAMES..end]
    }
    /// The name's bytes (checked on a checked view).
    pub fn name_bytes(&self) -> &[u8] {
        let at = field::NAMES + usize::from(self.service_len());
        &self.buffer.as_ref()[at..at + usize::from(self.name_len())]
    }
    /// The encoded fields (on a checked view: exactly `field_count` valid fields).
    pub fn field_bytes(&self) -> &[u8] {
        let at = fields_offset(self.service_len().into(), self.name_len().into());
        &self.buffer.as_ref()[at..usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RefreshView<T> {
    pub fn set_item_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), hfield::ITEM_ID, v)
    }
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[hfield::FLAGS] = v
    }
}

/// The parsed form of a REFRESH; names and fields borrow the message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshRepr<'a> {
    pub item_id: u32,
    /// [`refresh_flags`].
    pub flags: u8,
    pub timestamp_ns: u64,
    pub item_seq: u32,
    pub service: &'a str,
    pub name: &'a str,
    pub fields: FieldList<'a>,
}

impl<'a> RefreshRepr<'a> {
    /// Parses a REFRESH, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &RefreshView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let parts = parts(buffer)?;
        Ok(RefreshRepr {
            item_id: view.item_id(),
            flags: view.flags(),
            timestamp_ns: view.timestamp_ns(),
            item_seq: view.item_seq(),
            service: parts.service,
            name: parts.name,
            fields: FieldList::Wire(parts.fields),
        })
    }

    /// Checks what a receiver would reject (see [`RefreshView::check`]).
    pub fn check(&self) -> Result<(), MdError> {
        if self.item_id == 0 {
            return Err(MdError::BadField {
                field: "refresh.item_id",
                value: 0,
            });
        }
        if self.flags & !refresh_flags::ALL != 0 {
            return Err(MdError::BadField {
                field: "refresh.flags",
                value: self.flags.into(),
            });
        }
        check_service(self.service.as_bytes())
            .map_err(|e| super::name_error("refresh.service_len", "refresh.service", e))?;
        check_item_name(self.name.as_bytes())
            .map_err(|e| super::name_error("refresh.name_len", "refresh.name", e))?;
        self.fields.check()?;
        if self.buffer_len() > super::MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "refresh.length",
                value: self.buffer_len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        fields_offset(self.service.len(), self.name.len()) + self.fields.encoded_len()
    }

    /// Writes every byte of the message, padding included.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), the message would be
    /// longer than 65 535 bytes, or a name or string longer than its length byte allows.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut RefreshView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Refresh, self.flags, self.item_id, len);
        write_u64(b, field::TIMESTAMP_NS, self.timestamp_ns);
        write_u32(b, field::ITEM_SEQ, self.item_seq);
        let count = u16::try_from(self.fields.count()).expect("at most 65535 fields");
        write_u16(b, field::FIELD_COUNT, count);
        let at = emit_names(b, self.service, self.name);
        self.fields.emit(&mut b[at..len]);
    }
}

/// Writes `service_len`, `name_len`, both names and the padding; returns where the fields
/// start. The distributor's cache uses it to build a REFRESH from its image.
///
/// # Panics
/// If a name is longer than 255 bytes or `buffer` too short.
pub fn emit_names(b: &mut [u8], service: &str, name: &str) -> usize {
    b[field::SERVICE_LEN] = u8::try_from(service.len()).expect("service name of at most 255 bytes");
    b[field::NAME_LEN] = u8::try_from(name.len()).expect("item name of at most 255 bytes");
    let name_at = field::NAMES + service.len();
    b[field::NAMES..name_at].copy_from_slice(service.as_bytes());
    b[name_at..name_at + name.len()].copy_from_slice(name.as_bytes());
    let at = fields_offset(service.len(), name.len());
    b[name_at + name.len()..at].fill(0);
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use crate::model::{Field, Price, Value};
    use proptest::prelude::*;

    const FIELDS: [Field<'static>; 3] = [
        Field::new(
            22,
            Value::Price(Price {
                mantissa: 18921,
                exponent: -2,
            }),
        ),
        Field::new(15, Value::Enum(840)),
        Field::new(3, Value::Str("APPLE INC")),
    ];

    fn golden_repr() -> RefreshRepr<'static> {
        RefreshRepr {
            item_id: 9,
            flags: refresh_flags::SOLICITED,
            timestamp_ns: 5,
            item_seq: 1,
            service: "FEED1",
            name: "AAPL.O",
            fields: FieldList::List(&FIELDS),
        }
    }

    #[test]
    fn names_are_padded_to_eight_and_every_byte_is_written() {
        let repr = golden_repr();
        // 24 + 5 + 6 = 35 -> 40; fields 12 + 6 + 13 = 31
        assert_eq!(repr.buffer_len(), 71);
        let mut buf = [0xa5u8; 71];
        repr.emit(&mut RefreshView::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[24..40], b"FEED1AAPL.O\0\0\0\0\0");
        let view = RefreshView::new_checked(&buf[..]).unwrap();
        assert_eq!(view.service_bytes(), b"FEED1");
        assert_eq!(view.name_bytes(), b"AAPL.O");
        assert_eq!(RefreshRepr::parse(&view).unwrap(), repr);
    }

    #[test]
    fn rejects_padding_that_is_not_zero_and_a_name_with_a_star() {
        let mut buf = vec![0u8; golden_repr().buffer_len()];
        golden_repr().emit(&mut RefreshView::new_unchecked(&mut buf[..]));
        let mut bad = buf.clone();
        bad[36] = 1;
        assert_eq!(
            RefreshView::new_checked(&bad[..]).unwrap_err(),
            MdError::BadField {
                field: "refresh.padding",
                value: 1
            }
        );
        let mut bad = buf.clone();
        bad[30] = b'*';
        assert_eq!(
            RefreshView::new_checked(&bad[..]).unwrap_err(),
            MdError::BadText {
                field: "refresh.name"
            }
        );
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(view) = RefreshView::new_checked(bytes) {
            let repr = RefreshRepr::parse(&view).unwrap();
            prop_assert!(repr.check().is_ok());
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut RefreshView::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x01)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_refreshes_never_panic(at in 0usize..71, x in 1u8.., cut in 0usize..=71) {
            let mut buf = vec![0u8; 71];
            golden_repr().emit(&mut RefreshView::new_unchecked(&mut buf[..]));
            buf[at] ^= x;
            buf.truncate(cut);
            assert_canonical(&buf)?;
        }
    }
}
