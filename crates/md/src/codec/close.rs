//! CLOSE (0x13): a client closes what one OPEN opened.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u32 request_id     the OPEN's, not 0
//! ```
//!
//! 12 bytes. Items that another of the client's requests still opened stay open.

use super::header::{check_fixed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u32, write_u32, MdError};

/// Field ranges of CLOSE after the header.
pub mod field {
    use crate::codec::Range;
    pub const REQUEST_ID: Range = 8..12;
}

/// The length of every CLOSE.
pub const CLOSE_LEN: usize = field::REQUEST_ID.end;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Close,
    fixed_len: CLOSE_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "close.flags",
    item_id_field: "close.item_id",
};

/// A checked view of a CLOSE.
#[derive(Debug, Clone, Copy)]
pub struct CloseView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CloseView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        CloseView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = CloseView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, type CLOSE, `length == 12`, flags 0, `item_id` 0, `request_id != 0`.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), &RULES)?;
        if self.request_id() == 0 {
            return Err(MdError::BadField {
                field: "close.request_id",
                value: 0,
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn request_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQUEST_ID)
    }
}

/// The parsed form of a CLOSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseRepr {
    /// The OPEN to close; not 0.
    pub request_id: u32,
}

impl CloseRepr {
    /// Parses a CLOSE, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &CloseView<&T>) -> Result<Self, MdError> {
        view.check()?;
        Ok(CloseRepr {
            request_id: view.request_id(),
        })
    }

    /// Bytes `emit` writes: 12.
    pub const fn buffer_len(&self) -> usize {
        CLOSE_LEN
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut CloseView<T>) {
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Close, 0, 0, CLOSE_LEN);
        write_u32(b, field::REQUEST_ID, self.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_has_a_fixed_length() {
        let mut buf = [0xa5u8; 12];
        CloseRepr { request_id: 3 }.emit(&mut CloseView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [12, 0, 0x13, 0, 0, 0, 0, 0, 3, 0, 0, 0]);
        let view = CloseView::new_checked(&buf[..]).unwrap();
        assert_eq!(
            CloseRepr::parse(&view).unwrap(),
            CloseRepr { request_id: 3 }
        );
        let mut long = [0u8; 16];
        long[..12].copy_from_slice(&buf);
        long[0] = 16;
        assert!(matches!(
            CloseView::new_checked(&long[..]).unwrap_err(),
            MdError::BadLength { length: 16, .. }
        ));
    }
}
