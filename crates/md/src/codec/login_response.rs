//! LOGIN_RESPONSE (0x11): the distributor accepts or refuses a LOGIN.
//!
//! ```text
//!  0  header (item_id 0; flags: 0x01 LIVENESS)
//!  8  u8 result          0 accepted, 1 denied, 2 unsupported version
//!  9  u8 text_len
//!     without LIVENESS:
//! 10  text (UTF-8); `length` is exactly 10 + text_len
//!     with LIVENESS (the answer accepting a version 2 LOGIN):
//! 10  u32 ping_interval_ms  the interval both sides ping at (never 0)
//! 14  text (UTF-8); `length` is exactly 14 + text_len
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
    /// Start of the text without the LIVENESS flag.
    pub const TEXT: usize = 10;
    /// With the LIVENESS flag: the interval taken, then the text.
    pub const PING_INTERVAL_MS: crate::codec::Range = 10..14;
    pub const TEXT_LIVENESS: usize = 14;
}

/// The flags of LOGIN_RESPONSE.
pub mod flags {
    /// The login is accepted with liveness: the ping interval follows the text's length.
    pub const LIVENESS: u8 = 0x01;
}

/// Length of the fixed part of a LOGIN_RESPONSE.
pub const LOGIN_RESPONSE_HEADER_LEN: usize = field::TEXT;

const RULES: TypeRules = TypeRules {
    ty: MessageType::LoginResponse,
    fixed_len: LOGIN_RESPONSE_HEADER_LEN,
    flags: flags::LIVENESS,
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

    /// Checks, in this order: the header, type LOGIN_RESPONSE, `length >= 10`, no flag but
    /// LIVENESS, `item_id` 0, a known result, `length == 10 + text_len` (14 with LIVENESS),
    /// with LIVENESS: `result` accepted and an interval not 0; the text is UTF-8.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks a LOGIN_RESPONSE and returns its result, ping interval and text.
fn parts(b: &[u8]) -> Result<(LoginResult, Option<u32>, &str), MdError> {
    let len = check_typed(b, &RULES)?;
    let result = LoginResult::from_u8(b[field::RESULT]).ok_or(MdError::BadField {
        field: "login_response.result",
        value: b[field::RESULT].into(),
    })?;
    let liveness = b[crate::codec::header::field::FLAGS] & flags::LIVENESS != 0;
    let text_at = if liveness {
        field::TEXT_LIVENESS
    } else {
        field::TEXT
    };
    if len != text_at + usize::from(b[field::TEXT_LEN]) {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: if liveness {
                "a LOGIN_RESPONSE flagged LIVENESS has a length of 14 + text_len"
            } else {
                "a LOGIN_RESPONSE's length must be 10 + text_len"
            },
        });
    }
    let interval = if liveness {
        if result != LoginResult::Accepted {
            return Err(MdError::BadField {
                field: "login_response.flags",
                value: flags::LIVENESS.into(),
            });
        }
        let ms = super::read_u32(b, field::PING_INTERVAL_MS);
        if ms == 0 {
            return Err(MdError::BadField {
                field: "login_response.ping_interval_ms",
                value: 0,
            });
        }
        Some(ms)
    } else {
        None
    };
    let text = super::check_utf8("login_response.text", &b[text_at..len])?;
    Ok((result, interval, text))
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
    /// The ping interval both sides keep, in milliseconds: set (flag LIVENESS) on the
    /// acceptance of a version 2 LOGIN only.
    pub ping_interval_ms: Option<u32>,
    /// Why, for people (empty when accepted).
    pub text: &'a str,
}

impl<'a> LoginResponseRepr<'a> {
    /// Parses a LOGIN_RESPONSE, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        view: &LoginResponseView<&'a T>,
    ) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let (result, ping_interval_ms, text) = parts(buffer)?;
        Ok(LoginResponseRepr {
            result,
            ping_interval_ms,
            text,
        })
    }

    /// Checks what a receiver would reject: a text over 255 bytes, an interval of 0 or on a
    /// refusal.
    pub fn check(&self) -> Result<(), MdError> {
        match self.ping_interval_ms {
            Some(0) => {
                return Err(MdError::BadField {
                    field: "login_response.ping_interval_ms",
                    value: 0,
                })
            }
            Some(_) if self.result != LoginResult::Accepted => {
                return Err(MdError::BadField {
                    field: "login_response.flags",
                    value: flags::LIVENESS.into(),
                })
            }
            _ => {}
        }
        super::check_len_u8("login_response.text_len", self.text.len(), 255)
    }

    const fn text_at(&self) -> usize {
        if self.ping_interval_ms.is_some() {
            field::TEXT_LIVENESS
        } else {
            field::TEXT
        }
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        self.text_at() + self.text.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or the text longer than
    /// 255 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut LoginResponseView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        let flags = if self.ping_interval_ms.is_some() {
            flags::LIVENESS
        } else {
            0
        };
        emit_header(b, MessageType::LoginResponse, flags, 0, len);
        b[field::RESULT] = self.result as u8;
        b[field::TEXT_LEN] = u8::try_from(self.text.len()).expect("a text of at most 255 bytes");
        if let Some(ms) = self.ping_interval_ms {
            super::write_u32(b, field::PING_INTERVAL_MS, ms);
        }
        b[self.text_at()..len].copy_from_slice(self.text.as_bytes());
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
            ping_interval_ms: None,
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

    #[test]
    fn liveness_carries_the_interval_on_an_acceptance_only() {
        let repr = LoginResponseRepr {
            result: LoginResult::Accepted,
            ping_interval_ms: Some(5000),
            text: "",
        };
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut LoginResponseView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [14, 0, 0x11, 0x01, 0, 0, 0, 0, 0, 0, 0x88, 0x13, 0, 0]);
        let view = LoginResponseView::new_checked(&buf[..]).unwrap();
        assert_eq!(LoginResponseRepr::parse(&view).unwrap(), repr);
        buf[8] = 1; // denied, with an interval
        assert_eq!(
            LoginResponseView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "login_response.flags",
                value: 1
            }
        );
        buf[8] = 0;
        buf[10] = 0;
        buf[11] = 0;
        assert_eq!(
            LoginResponseView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadField {
                field: "login_response.ping_interval_ms",
                value: 0
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
