//! LOGIN (0x10): a client logs in.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u32 magic          "PGMD" (bytes 0x50 0x47 0x4d 0x44)
//! 12  u16 version        1
//! 14  u8  user_len       1 to 64
//! 15  u8  token_len      1 to 255
//! 16  user, token bytes; `length` is exactly 16 + user_len + token_len
//! ```
//!
//! Magic and version come first and keep their place in every version, so a distributor can
//! tell a client of another version (and answer "unsupported version") from a stranger. The
//! token is opaque bytes; the distributor compares its SHA-256 with the users file's.

use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u16, read_u32, write_u16, write_u32, MdError};
use crate::model::{check_user, MAX_USER_LEN};

/// Field ranges of LOGIN after the header.
pub mod field {
    use crate::codec::Range;
    pub const MAGIC: Range = 8..12;
    pub const VERSION: Range = 12..14;
    pub const USER_LEN: usize = 14;
    pub const TOKEN_LEN: usize = 15;
    /// Start of the user's bytes; the token follows.
    pub const USER: usize = 16;
}

/// `"PGMD"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PGMD");
/// Length of the fixed part of a LOGIN.
pub const LOGIN_HEADER_LEN: usize = field::USER;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Login,
    fixed_len: LOGIN_HEADER_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "login.flags",
    item_id_field: "login.item_id",
};

/// A checked view of a LOGIN.
#[derive(Debug, Clone, Copy)]
pub struct LoginView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> LoginView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        LoginView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = LoginView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type LOGIN, `length >= 16`, flags 0, `item_id` 0,
    /// the magic, version 1, `1 <= user_len <= 64`, `token_len >= 1`,
    /// `length == 16 + user_len + token_len`, the user's alphabet.
    pub fn check(&self) -> Result<(), MdError> {
        user_and_token(self.buffer.as_ref()).map(|_| ())
    }
}

/// Checks a LOGIN and returns its user and token.
fn user_and_token(b: &[u8]) -> Result<(&str, &[u8]), MdError> {
    let view = LoginView::new_unchecked(b);
    let len = check_typed(b, &RULES)?;
    if view.magic() != MAGIC {
        return Err(MdError::BadMagic(view.magic()));
    }
    if view.version() != super::VERSION {
        return Err(MdError::UnsupportedVersion(view.version()));
    }
    let (ul, tl) = (usize::from(view.user_len()), usize::from(view.token_len()));
    if ul == 0 || ul > MAX_USER_LEN {
        return Err(MdError::BadField {
            field: "login.user_len",
            value: ul as u64,
        });
    }
    if tl == 0 {
        return Err(MdError::BadField {
            field: "login.token_len",
            value: 0,
        });
    }
    if len != LOGIN_HEADER_LEN + ul + tl {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "a LOGIN's length must be 16 + user_len + token_len",
        });
    }
    let token_at = field::USER + ul;
    let user = check_user(&b[field::USER..token_at])
        .map_err(|e| super::name_error("login.user_len", "login.user", e))?;
    Ok((user, &b[token_at..len]))
}

impl<T: AsRef<[u8]>> LoginView<T> {
    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn magic(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MAGIC)
    }
    pub fn version(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::VERSION)
    }
    pub fn user_len(&self) -> u8 {
        self.buffer.as_ref()[field::USER_LEN]
    }
    pub fn token_len(&self) -> u8 {
        self.buffer.as_ref()[field::TOKEN_LEN]
    }
}

/// The parsed form of a LOGIN (version 1, the only one this build speaks).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LoginRepr<'a> {
    pub user: &'a str,
    /// The secret: opaque bytes, 1 to 255 of them.
    pub token: &'a [u8],
}

/// Never prints the token.
impl core::fmt::Debug for LoginRepr<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LoginRepr")
            .field("user", &self.user)
            .field("token_len", &self.token.len())
            .finish()
    }
}

impl<'a> LoginRepr<'a> {
    /// Parses a LOGIN, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &LoginView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let (user, token) = user_and_token(buffer)?;
        Ok(LoginRepr { user, token })
    }

    /// Checks what a receiver would reject: the user's alphabet, a token of 0 or more than
    /// 255 bytes.
    pub fn check(&self) -> Result<(), MdError> {
        check_user(self.user.as_bytes())
            .map_err(|e| super::name_error("login.user_len", "login.user", e))?;
        if self.token.is_empty() {
            return Err(MdError::BadField {
                field: "login.token_len",
                value: 0,
            });
        }
        super::check_len_u8("login.token_len", self.token.len(), 255)
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        LOGIN_HEADER_LEN + self.user.len() + self.token.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or the user or token is
    /// longer than 255 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut LoginView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Login, 0, 0, len);
        write_u32(b, field::MAGIC, MAGIC);
        write_u16(b, field::VERSION, super::VERSION);
        b[field::USER_LEN] = u8::try_from(self.user.len()).expect("a user of at most 255 bytes");
        b[field::TOKEN_LEN] = u8::try_from(self.token.len()).expect("a token of at most 255 bytes");
        let token_at = field::USER + self.user.len();
        b[field::USER..token_at].copy_from_slice(self.user.as_bytes());
        b[token_at..len].copy_from_slice(self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[rustfmt::skip]
    static GOLDEN: [u8; 27] = [
        0x1b, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // length 27, LOGIN
        b'P', b'G', b'M', b'D', 0x01, 0x00, 0x05, 0x06, // magic, version 1, user 5, token 6
        b'a', b'l', b'i', b'c', b'e', b's', b'e', b'c', b'r', b'e', b't',
    ];

    #[test]
    fn parses_and_emits_golden_bytes() {
        let repr = LoginRepr {
            user: "alice",
            token: b"secret",
        };
        let view = LoginView::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(LoginRepr::parse(&view).unwrap(), repr);
        let mut buf = [0xa5u8; 27];
        repr.emit(&mut LoginView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
        assert!(!format!("{repr:?}").contains("secret"));
    }

    #[test]
    fn another_version_is_told_apart_from_a_stranger() {
        let mut buf = GOLDEN;
        buf[12] = 2;
        assert_eq!(
            LoginView::new_checked(&buf[..]).unwrap_err(),
            MdError::UnsupportedVersion(2)
        );
        buf[8] = b'X';
        assert_eq!(
            LoginView::new_checked(&buf[..]).unwrap_err(),
            MdError::BadMagic(u32::from_le_bytes(*b"XGMD"))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x10)) {
            if let Ok(view) = LoginView::new_checked(&bytes[..]) {
                let repr = LoginRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut LoginView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
