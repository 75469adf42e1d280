//! CONFLATED (0x14): the client fell behind by more than its queue bound.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u32 items            how many item messages follow (a REFRESH flagged CONFLATED per
//!                          changed item that is ok, a STATUS per one that is not)
//! 12  u32 updates_dropped  updates not sent since the previous CONFLATED (saturating)
//! ```
//!
//! 16 bytes.

use super::header::{check_fixed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u32, write_u32, MdError};

/// Field ranges of CONFLATED after the header.
pub mod field {
    use crate::codec::Range;
    pub const ITEMS: Range = 8..12;
    pub const UPDATES_DROPPED: Range = 12..16;
}

/// The length of every CONFLATED.
pub const CONFLATED_LEN: usize = field::UPDATES_DROPPED.end;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Conflated,
    fixed_len: CONFLATED_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "conflated.flags",
    item_id_field: "conflated.item_id",
};

/// A checked view of a CONFLATED.
#[derive(Debug, Clone, Copy)]
pub struct ConflatedView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ConflatedView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        ConflatedView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = ConflatedView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, type CONFLATED, `length == 16`, flags 0, `item_id` 0.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), &RULES)
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn items(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ITEMS)
    }
    pub fn updates_dropped(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::UPDATES_DROPPED)
    }
}

/// The parsed form of a CONFLATED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConflatedRepr {
    /// Item messages (REFRESH or STATUS) that follow.
    pub items: u32,
    /// Updates not sent since the previous CONFLATED.
    pub updates_dropped: u32,
}

impl ConflatedRepr {
    /// Parses a CONFLATED, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &ConflatedView<&T>) -> Result<Self, MdError> {
        view.check()?;
        Ok(ConflatedRepr {
            items: view.items(),
            updates_dropped: view.updates_dropped(),
        })
    }

    /// Bytes `emit` writes: 16.
    pub const fn buffer_len(&self) -> usize {
        CONFLATED_LEN
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than 16 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut ConflatedView<T>) {
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Conflated, 0, 0, CONFLATED_LEN);
        write_u32(b, field::ITEMS, self.items);
        write_u32(b, field::UPDATES_DROPPED, self.updates_dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_requires_item_zero() {
        let repr = ConflatedRepr {
            items: 2,
            updates_dropped: 300,
        };
        let mut buf = [0xa5u8; 16];
        repr.emit(&mut ConflatedView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [16, 0, 0x14, 0, 0, 0, 0, 0, 2, 0, 0, 0, 44, 1, 0, 0]);
        let view = ConflatedView::new_checked(&buf[..]).unwrap();
        assert_eq!(ConflatedRepr::parse(&view).unwrap(), repr);
        buf[4] = 1;
        assert_eq!(
            ConflatedView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "conflated.item_id",
                value: 1
            }
        );
    }
}
