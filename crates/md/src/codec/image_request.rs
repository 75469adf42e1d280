//! IMAGE_REQUEST (0x20): the distributor asks the feed for images.
//!
//! ```text
//!  0  header (item_id: the feed's id of the item, or 0 for every item; flags: none defined)
//!  8  u32 request_id     the distributor's, for its logs
//! ```
//!
//! 12 bytes, published on the service's request topic (`md.<service>.req`). The feed answers
//! with REFRESHes flagged SOLICITED on the backbone.

use super::header::{
    check_fixed, emit_header, field as hfield, ItemIdRule, MessageType, TypeRules,
};
use super::{read_u32, write_u32, MdError};

/// Field ranges of IMAGE_REQUEST after the header.
pub mod field {
    use crate::codec::Range;
    pub const REQUEST_ID: Range = 8..12;
}

/// The length of every IMAGE_REQUEST.
pub const IMAGE_REQUEST_LEN: usize = field::REQUEST_ID.end;

const RULES: TypeRules = TypeRules {
    ty: MessageType::ImageRequest,
    fixed_len: IMAGE_REQUEST_LEN,
    flags: 0,
    item_id: ItemIdRule::Any,
    flags_field: "image_request.flags",
    item_id_field: "image_request.item_id",
};

/// A checked view of an IMAGE_REQUEST.
#[derive(Debug, Clone, Copy)]
pub struct ImageRequestView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImageRequestView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        ImageRequestView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = ImageRequestView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, type IMAGE_REQUEST, `length == 12`, flags 0.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), &RULES)
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn item_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::ITEM_ID)
    }
    pub fn request_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQUEST_ID)
    }
}

/// The parsed form of an IMAGE_REQUEST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageRequestRepr {
    /// The feed's id of the item; 0 asks for every item.
    pub item_id: u32,
    pub request_id: u32,
}

impl ImageRequestRepr {
    /// Parses an IMAGE_REQUEST, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &ImageRequestView<&T>) -> Result<Self, MdError> {
        view.check()?;
        Ok(ImageRequestRepr {
            item_id: view.item_id(),
            request_id: view.request_id(),
        })
    }

    /// Bytes `emit` writes: 12.
    pub const fn buffer_len(&self) -> usize {
        IMAGE_REQUEST_LEN
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut ImageRequestView<T>) {
        let b = view.buffer.as_mut();
        emit_header(
            b,
            MessageType::ImageRequest,
            0,
            self.item_id,
            IMAGE_REQUEST_LEN,
        );
        write_u32(b, field::REQUEST_ID, self.request_id);
    }

    /// The encoded message, ready to publish.
    pub fn to_bytes(&self) -> [u8; IMAGE_REQUEST_LEN] {
        let mut b = [0u8; IMAGE_REQUEST_LEN];
        self.emit(&mut ImageRequestView::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_item_zero_for_every_item() {
        let repr = ImageRequestRepr {
            item_id: 0,
            request_id: 9,
        };
        let buf = repr.to_bytes();
        assert_eq!(buf, [12, 0, 0x20, 0, 0, 0, 0, 0, 9, 0, 0, 0]);
        let view = ImageRequestView::new_checked(&buf[..]).unwrap();
        assert_eq!(ImageRequestRepr::parse(&view).unwrap(), repr);
    }
}
