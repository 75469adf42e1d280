//! ACK (0x1D): the answer to a [`POST`](super::post): accepted, or refused with a code and
//! a reason (provider → distributor → client, version 2).
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u64 origin      the POST's: on the backbone the distributor it came through; to a
//!                     client 0
//! 16  u32 post_id     the POST's (not 0)
//! 20  u8  code        0 accepted; anything else refuses it (a NACK), see `AckCode`
//! 21  u8  text_len    0 to 255
//! 22  text            UTF-8: why (empty when accepted)
//! ```
//!
//! Every POST gets exactly one ACK: the provider's answer, or the distributor's own when the
//! post never reached a provider (`not-entitled`, `unknown-service`, `service-down`, `busy`)
//! or no answer came within the distributor's post timeout (`timeout`).

use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u32, read_u64, write_u32, write_u64, MdError};
use core::fmt;

/// Field ranges of ACK after the header.
pub mod field {
    use crate::codec::Range;
    pub const ORIGIN: Range = 8..16;
    pub const POST_ID: Range = 16..20;
    pub const CODE: usize = 20;
    pub const TEXT_LEN: usize = 21;
    pub const TEXT: usize = 22;
}

/// Length of the fixed part of an ACK.
pub const ACK_HEADER_LEN: usize = field::TEXT;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Ack,
    fixed_len: ACK_HEADER_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "ack.flags",
    item_id_field: "ack.item_id",
};

/// What became of a post. Every code but `Accepted` is a NACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AckCode {
    /// The provider accepted it (whether and how it publishes it is its call).
    Accepted = 0,
    /// The provider refused it; the text says why.
    Refused = 1,
    /// The user may not post to this item (the users file's `post` globs).
    NotEntitled = 2,
    /// No provider of the service is live.
    ServiceDown = 3,
    /// The distributor carries no such service.
    UnknownService = 4,
    /// Too many posts in flight (the client's, or the provider's queue).
    Busy = 5,
    /// No answer from the provider within the distributor's post timeout.
    Timeout = 6,
    /// The post's content was refused (a field of the wrong type, ...).
    Invalid = 7,
}

impl AckCode {
    /// Every code, in wire order.
    pub const ALL: [AckCode; 8] = [
        AckCode::Accepted,
        AckCode::Refused,
        AckCode::NotEntitled,
        AckCode::ServiceDown,
        AckCode::UnknownService,
        AckCode::Busy,
        AckCode::Timeout,
        AckCode::Invalid,
    ];

    /// The stable name: `accepted`, `refused`, `not-entitled`, `service-down`,
    /// `unknown-service`, `busy`, `timeout`, `invalid`.
    pub const fn name(self) -> &'static str {
        match self {
            AckCode::Accepted => "accepted",
            AckCode::Refused => "refused",
            AckCode::NotEntitled => "not-entitled",
            AckCode::ServiceDown => "service-down",
            AckCode::UnknownService => "unknown-service",
            AckCode::Busy => "busy",
            AckCode::Timeout => "timeout",
            AckCode::Invalid => "invalid",
        }
    }

    pub const fn from_u8(b: u8) -> Option<AckCode> {
        if (b as usize) < AckCode::ALL.len() {
            Some(AckCode::ALL[b as usize])
        } else {
            None
        }
    }

    pub const fn is_accepted(self) -> bool {
        matches!(self, AckCode::Accepted)
    }
}

impl fmt::Display for AckCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A checked view of an ACK.
#[derive(Debug, Clone, Copy)]
pub struct AckView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AckView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        AckView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = AckView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, type ACK, `length >= 22`, flags 0, `item_id` 0, `post_id != 0`, a
    /// known code, `length == 22 + text_len`, and UTF-8 text.
    pub fn check(&self) -> Result<(), MdError> {
        text(self.buffer.as_ref()).map(|_| ())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

fn text(b: &[u8]) -> Result<&str, MdError> {
    let len = check_typed(b, &RULES)?;
    if read_u32(b, field::POST_ID) == 0 {
        return Err(MdError::BadField {
            field: "ack.post_id",
            value: 0,
        });
    }
    if AckCode::from_u8(b[field::CODE]).is_none() {
        return Err(MdError::BadField {
            field: "ack.code",
            value: b[field::CODE].into(),
        });
    }
    let text_len = usize::from(b[field::TEXT_LEN]);
    if len != ACK_HEADER_LEN + text_len {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "an ACK is 22 bytes and its text",
        });
    }
    super::check_utf8("ack.text", &b[field::TEXT..len])
}

/// The parsed form of an ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRepr<'a> {
    pub origin: u64,
    pub post_id: u32,
    pub code: AckCode,
    /// Why it was refused (empty when accepted).
    pub text: &'a str,
}

impl<'a> AckRepr<'a> {
    /// Parses an ACK, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &AckView<&'a T>) -> Result<Self, MdError> {
        let b: &'a [u8] = view.buffer.as_ref();
        let text = text(b)?;
        Ok(AckRepr {
            origin: read_u64(b, field::ORIGIN),
            post_id: read_u32(b, field::POST_ID),
            code: AckCode::from_u8(b[field::CODE]).expect("checked"),
            text,
        })
    }

    /// Checks what a receiver would reject: post id 0, a text over 255 bytes.
    pub fn check(&self) -> Result<(), MdError> {
        if self.post_id == 0 {
            return Err(MdError::BadField {
                field: "ack.post_id",
                value: 0,
            });
        }
        super::check_len_u8("ack.text_len", self.text.len(), 255)
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        ACK_HEADER_LEN + self.text.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or the text longer
    /// than 255 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut AckView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Ack, 0, 0, len);
        write_u64(b, field::ORIGIN, self.origin);
        write_u32(b, field::POST_ID, self.post_id);
        b[field::CODE] = self.code as u8;
        b[field::TEXT_LEN] = u8::try_from(self.text.len()).expect("a text of at most 255 bytes");
        b[field::TEXT..len].copy_from_slice(self.text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_rejects_an_unknown_code() {
        let repr = AckRepr {
            origin: 0,
            post_id: 3,
            code: AckCode::Refused,
            text: "halted",
        };
        let mut b = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut AckView::new_unchecked(&mut b[..]));
        assert_eq!(
            b,
            [
                28, 0, 0x1d, 0, 0, 0, 0, 0, // header
                0, 0, 0, 0, 0, 0, 0, 0, // origin
                3, 0, 0, 0, 1, 6, b'h', b'a', b'l', b't', b'e', b'd'
            ]
        );
        assert_eq!(
            AckRepr::parse(&AckView::new_checked(&b[..]).unwrap()).unwrap(),
            repr
        );
        b[20] = 8;
        assert_eq!(
            AckView::new_checked(&b[..]).unwrap_err(),
            MdError::BadField {
                field: "ack.code",
                value: 8
            }
        );
        for c in AckCode::ALL {
            assert_eq!(AckCode::from_u8(c as u8), Some(c));
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x1d)) {
            if let Ok(view) = AckView::new_checked(&bytes[..]) {
                let repr = AckRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut AckView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
