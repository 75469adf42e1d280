//! LOGIN_RESPONSE (0x11): the distributor accepts or refuses a LOGIN.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u8 result          0 accepted, 1 denied, 2 unsupported version
//!  9  u8 text_len
//! 10  text (UTF-8); `length` is exactly 10 + text_len
//! ```
//!
//! Every answer the distributor gives before a client is logged in is a LOGIN_RESPONSE (the
//! client waits for one); after a refusal the connection is closed.

use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::MdError;

/// Field offsets of LOGIN_RESPONSE after the header.
pub mod field {
    pub const RESULT: usize = 8;
    pub const TEXT_LEN: usize = 9;
    pub const TEXT: usize = 10;
}

/// Length of the fixed part of a LOGIN_RESPONSE.
pub const LOGIN_RESPONSE_HEADER_LEN: usize = field::TEXT;

const RULES: TypeRules = TypeRules {
    ty: MessageType::LoginResponse,
    fixed_len: LOGIN_RESPONSE_HEADER_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "login_response.flags",
    item_id_field: "login_response.item_id",
};

/// The outcome of a LOGIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LoginResult {
    Accepted = 0,
    /// Unknown user, wrong token, a malformed or missing LOGIN: the text says which (never
    /// whether the user exists).
    Denied = 1,
    /// The LOGIN's version is not one this distributor speaks.
    UnsupportedVersion = 2,
}

impl LoginResult {
    pub const fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => LoginResult::Accepted,
            1 => LoginResult::Denied,
            2 => LoginResult::UnsupportedVersion,
            _ => return None,
        })
    }
    /// The name in docs/golden/md.json: `accepted`, `denied`, `unsupported-version`.
    pub const fn name(self) -> &'static str {
        match self {
            LoginResult::Accepted => "accepted",
            LoginResult::Denied => "denied",
            LoginResult::UnsupportedVersion => "unsupported-version",
        }
    }
}

/// A checked view of a LOGIN_RESPONSE.
#[derive(Debug, Clone, Copy)]
pub struct LoginResponseView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> LoginResponseView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        LoginResponseView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = LoginResponseView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type LOGIN_RESPONSE, `length >= 10`, flags 0,
    /// `item_id` 0, a known result, `length == 10 + text_len`, the text is UTF-8.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks a LOGIN_RESPONSE and returns its result and text.
fn parts(b: &[u8]) -> Result<(LoginResult, &str), MdError> {
    let len = check_typed(b, &RULES)?;
    let result = LoginResult::from_u8(b[field::RESULT]).ok_or(MdError::BadField {
        field: "login_response.result",
        value: b[field::RESULT].into(),
    })?;
    if len != LOGIN_RESPONSE_HEADER_LEN + usize::from(b[field::TEXT_LEN]) {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "a LOGIN_RESPONSE's length must be 10 + text_len",
        });
    }
    let text = super::check_utf8("login_response.text", &b[field::TEXT..len])?;
    Ok((result, text))
}

impl<T: AsRef<[u8]>> LoginResponseView<T> {
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn result_raw(&self) -> u8 {
        self.buffer.as_ref()[field::RESULT]
    }
}

/// The parsed form of a LOGIN_RESPONSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginResponseRepr<'a> {
    pub result: LoginResult,
    /// Why, for people (empty when accepted).
    pub text: &'a str,
}

impl<'a> LoginResponseRepr<'a> {
    /// Parses a LOGIN_RESPONSE, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        view: &LoginResponseView<&'a T>,
    ) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let (result, text) = parts(buffer)?;
        Ok(LoginResponseRepr { result, text })
    }

    /// Checks what a receiver would reject: a text over 255 bytes.
    pub fn check(&self) -> Result<(), MdError> {
        super::check_len_u8("login_response.text_len", self.text.len(), 255)
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        LOGIN_RESPONSE_HEADER_LEN + self.text.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or the text longer than
    /// 255 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut LoginResponseView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::LoginResponse, 0, 0, len);
        b[field::RESULT] = self.result as u8;
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
    fn round_trips_and_rejects_an_unknown_result() {
        let repr = LoginResponseRepr {
            result: LoginResult::Denied,
            text: "unknown user or wrong token",
        };
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut LoginResponseView::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..10], &[37, 0, 0x11, 0, 0, 0, 0, 0, 1, 27]);
        let view = LoginResponseView::new_checked(&buf[..]).unwrap();
        assert_eq!(LoginResponseRepr::parse(&view).unwrap(), repr);
        buf[8] = 3;
        assert_eq!(
            LoginResponseView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "login_response.result",
                value: 3
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x11)) {
            if let Ok(view) = LoginResponseView::new_checked(&bytes[..]) {
                let repr = LoginResponseRepr::parse(&view).unwrap();
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut LoginResponseView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
