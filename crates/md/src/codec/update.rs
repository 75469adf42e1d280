//! UPDATE (0x02): the fields of an item that changed.
//!
//! ```text
//!  0  header (item_id: the item, not 0; flags: none defined)
//!  8  u64 timestamp_ns   when the feed sent it
//! 16  u32 item_seq       per item, +1 for every REFRESH or UPDATE the feed sends for it
//! 20  u16 field_count
//! 22  u16 reserved (0)
//! 24  fields, exactly to `length`
//! ```
//!
//! A level-1 update of four 12-byte fields (BID, ASK, BIDSIZE, ASKSIZE) is 72 bytes.

use super::fields::WireFields;
use super::header::{
    check_typed, emit_header, field as hfield, ItemIdRule, MessageType, TypeRules,
};
use super::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64, FieldList, MdError};

/// Field ranges of UPDATE after the header.
pub mod field {
    use crate::codec::Range;
    pub const TIMESTAMP_NS: Range = 8..16;
    pub const ITEM_SEQ: Range = 16..20;
    pub const FIELD_COUNT: Range = 20..22;
    pub const RESERVED: Range = 22..24;
    pub const FIELDS: usize = 24;
}

/// Length of the fixed part of an UPDATE.
pub const UPDATE_HEADER_LEN: usize = field::FIELDS;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Update,
    fixed_len: UPDATE_HEADER_LEN,
    flags: 0,
    item_id: ItemIdRule::NonZero,
    flags_field: "update.flags",
    item_id_field: "update.item_id",
};

/// A checked view of an UPDATE.
#[derive(Debug, Clone, Copy)]
pub struct UpdateView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UpdateView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        UpdateView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = UpdateView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type UPDATE, `length >= 24`, flags 0, `item_id != 0`,
    /// reserved 0, then the field list (docs/market-data.md, "Field lists").
    pub fn check(&self) -> Result<(), MdError> {
        wire_fields(self.buffer.as_ref()).map(|_| ())
    }

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
    pub fn timestamp_ns(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TIMESTAMP_NS)
    }
    pub fn item_seq(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ITEM_SEQ)
    }
    pub fn field_count(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FIELD_COUNT)
    }
    pub fn reserved(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::RESERVED)
    }
    /// The encoded fields (on a checked view: exactly `field_count` valid fields).
    pub fn field_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[field::FIELDS..usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UpdateView<T> {
    pub fn set_item_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), hfield::ITEM_ID, v)
    }
}

/// Checks an UPDATE and returns its fields.
fn wire_fields(b: &[u8]) -> Result<WireFields<'_>, MdError> {
    let len = check_typed(b, &RULES)?;
    let v = UpdateView::new_unchecked(b);
    super::check_zero("update.reserved", v.reserved().into())?;
    WireFields::new(v.field_count(), &b[field::FIELDS..len], len as u16)
}

/// The parsed form of an UPDATE; the fields borrow the message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateRepr<'a> {
    pub item_id: u32,
    /// When the feed sent it (the feed's clock: one-way latency is measured on one host).
    pub timestamp_ns: u64,
    /// Per item, +1 for every REFRESH or UPDATE of it.
    pub item_seq: u32,
    pub fields: FieldList<'a>,
}

impl<'a> UpdateRepr<'a> {
    /// Parses an UPDATE, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &UpdateView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let fields = wire_fields(buffer)?;
        Ok(UpdateRepr {
            item_id: view.item_id(),
            timestamp_ns: view.timestamp_ns(),
            item_seq: view.item_seq(),
            fields: FieldList::Wire(fields),
        })
    }

    /// Checks what a receiver would reject: item id 0, invalid fields, a message over 65 535
    /// bytes.
    pub fn check(&self) -> Result<(), MdError> {
        if self.item_id == 0 {
            return Err(MdError::BadField {
                field: "update.item_id",
                value: 0,
            });
        }
        self.fields.check()?;
        if self.buffer_len() > super::MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "update.length",
                value: self.buffer_len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes `emit` writes: 24 + the fields.
    pub fn buffer_len(&self) -> usize {
        UPDATE_HEADER_LEN + self.fields.encoded_len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), the message would be
    /// longer than 65 535 bytes, or a string field longer than 255.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut UpdateView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Update, 0, self.item_id, len);
        write_u64(b, field::TIMESTAMP_NS, self.timestamp_ns);
        write_u32(b, field::ITEM_SEQ, self.item_seq);
        let count = u16::try_from(self.fields.count()).expect("at most 65535 fields");
        write_u16(b, field::FIELD_COUNT, count);
        write_u16(b, field::RESERVED, 0);
        self.fields.emit(&mut b[field::FIELDS..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use crate::model::{Field, Price, Value};
    use proptest::prelude::*;

    #[rustfmt::skip]
    static GOLDEN: [u8; 72] = [
        0x48, 0x00, 0x02, 0x00, 0x07, 0x00, 0x00, 0x00, // length 72, UPDATE, flags 0, item 7
        0x00, 0x00, 0x2a, 0x36, 0xfe, 0x9c, 0x97, 0x17, // timestamp_ns 1_700_000_000_000_000_000
        0x2a, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // item_seq 42, 4 fields, reserved
        0x16, 0x00, 0x02, 0xfe, 0xe9, 0x49, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // BID 189.21
        0x19, 0x00, 0x02, 0xfe, 0xea, 0x49, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ASK 189.22
        0x1e, 0x00, 0x01, 0x00, 0x2c, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // BIDSIZE 300
        0x1f, 0x00, 0x01, 0x00, 0xf4, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ASKSIZE 500
    ];

    const FIELDS: [Field<'static>; 4] = [
        Field::new(
            22,
            Value::Price(Price {
                mantissa: 18921,
                exponent: -2,
            }),
        ),
        Field::new(
            25,
            Value::Price(Price {
                mantissa: 18922,
                exponent: -2,
            }),
        ),
        Field::new(30, Value::Int(300)),
        Field::new(31, Value::Int(500)),
    ];

    fn golden_repr() -> UpdateRepr<'static> {
        UpdateRepr {
            item_id: 7,
            timestamp_ns: 1_700_000_000_000_000_000,
            item_seq: 42,
            fields: FieldList::List(&FIELDS),
        }
    }

    #[test]
    fn a_level_1_update_of_four_fields_is_72_bytes() {
        assert_eq!(golden_repr().buffer_len(), 72);
    }

    #[test]
    fn parses_golden_bytes() {
        let view = UpdateView::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(view.field_count(), 4);
        let repr = UpdateRepr::parse(&view).unwrap();
        assert_eq!(repr, golden_repr());
        assert_eq!(
            repr.fields.get(25),
            Some(Value::Price(Price {
                mantissa: 18922,
                exponent: -2
            }))
        );
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 72];
        golden_repr().emit(&mut UpdateView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_a_repeated_fid_and_trailing_bytes() {
        let mut buf = GOLDEN;
        buf[48] = 0x16; // ASKSIZE becomes a second BID
        assert_eq!(
            UpdateView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "field.fid_repeated",
                value: 22
            }
        );
        let mut buf = GOLDEN;
        buf[20] = 3; // three fields announced, four present
        assert!(matches!(
            UpdateView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadLength { length: 72, .. }
        ));
    }

    #[test]
    fn a_long_list_detects_a_repeated_fid_too() {
        let fields: Vec<Field<'_>> = (1..=100)
            .map(|fid| Field::new(fid, Value::Enum(fid)))
            .chain([Field::new(77, Value::Int(1))])
            .collect();
        let repr = UpdateRepr {
            fields: FieldList::List(&fields),
            ..golden_repr()
        };
        let err = MdError::BadField {
            field: "field.fid_repeated",
            value: 77,
        };
        assert_eq!(repr.check().unwrap_err(), err);
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut UpdateView::new_unchecked(&mut buf[..]));
        assert_eq!(UpdateView::new_checked(&buf[..]).unwrap_err(), err);
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(view) = UpdateView::new_checked(bytes) {
            let repr = UpdateRepr::parse(&view).unwrap();
            prop_assert!(repr.check().is_ok());
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut UpdateView::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x02)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_updates_never_panic(at in 0usize..72, x in 1u8.., cut in 0usize..=72) {
            let mut buf = GOLDEN.to_vec();
            buf[at] ^= x;
            buf.truncate(cut);
            assert_canonical(&buf)?;
        }
    }
}
