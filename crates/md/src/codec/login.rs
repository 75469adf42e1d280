//! LOGIN (0x10): a client logs in.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u32 magic          "PGMD" (bytes 0x50 0x47 0x4d 0x44)
//! 12  u16 version        1 or 2
//! 14  u8  user_len       1 to 64
//! 15  u8  token_len      1 to 255
//!     version 1:
//! 16  user, token bytes; `length` is exactly 16 + user_len + token_len
//!     version 2:
//! 16  u32 ping_interval_ms  the liveness interval the client asks for (0: the distributor's
//!                           default); LOGIN_RESPONSE says the one taken
//! 20  user, token bytes; `length` is exactly 20 + user_len + token_len
//! ```
//!
//! Magic and version come first and keep their place in every version, so a distributor can
//! tell a client of another version (and answer "unsupported version") from a stranger. The
//! token is opaque bytes, checked against the users file's hash.

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
    /// Version 1: start of the user's bytes; the token follows.
    pub const USER: usize = 16;
    /// Version 2: the ping interval asked for.
    pub const PING_INTERVAL_MS: Range = 16..20;
    /// Version 2: start of the user's bytes; the token follows.
    pub const USER_V2: usize = 20;
}

/// `"PGMD"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PGMD");
/// Length of the fixed part of a LOGIN of version 1 (the shortest).
pub const LOGIN_HEADER_LEN: usize = field::USER;

/// Where the user's bytes start in a LOGIN of `version` (1 or 2).
const fn user_at(version: u16) -> usize {
    if version >= 2 {
        field::USER_V2
    } else {
        field::USER
    }
}

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
    /// the magic, version 1 or 2, `1 <= user_len <= 64`, `token_len >= 1`,
    /// `length == 16 (20 for version 2) + user_len + token_len`, the user's alphabet.
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
    let version = view.version();
    if !(super::MIN_VERSION..=super::VERSION).contains(&version) {
        return Err(MdError::UnsupportedVersion(version));
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
    let user_from = user_at(version);
    if len != user_from + ul + tl {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: if version >= 2 {
                "a version 2 LOGIN's length must be 20 + user_len + token_len"
            } else {
                "a LOGIN's length must be 16 + user_len + token_len"
            },
        });
    }
    let token_at = user_from + ul;
    let user = check_user(&b[user_from..token_at])
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
    /// The ping interval asked for (version 2; 0 for version 1, which has none).
    pub fn ping_interval_ms(&self) -> u32 {
        if self.version() >= 2 {
            read_u32(self.buffer.as_ref(), field::PING_INTERVAL_MS)
        } else {
            0
        }
    }
}

/// The parsed form of a LOGIN.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LoginRepr<'a> {
    /// 1, or 2 ([`VERSION`](super::VERSION)): version 2 agrees on a ping interval.
    pub version: u16,
    pub user: &'a str,
    /// The secret: opaque bytes, 1 to 255 of them.
    pub token: &'a [u8],
    /// Version 2: the liveness interval asked for, in milliseconds (0: the distributor's
    /// default). Must be 0 in version 1.
    pub ping_interval_ms: u32,
}

/// Never prints the token.
impl core::fmt::Debug for LoginRepr<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LoginRepr")
            .field("version", &self.version)
            .field("user", &self.user)
            .field("token_len", &self.token.len())
            .field("ping_interval_ms", &self.ping_interval_ms)
            .finish()
    }
}

impl<'a> LoginRepr<'a> {
    /// A LOGIN of this build's version ([`VERSION`](super::VERSION)) asking for the
    /// distributor's default ping interval.
    pub const fn new(user: &'a str, token: &'a [u8]) -> Self {
        LoginRepr {
            version: super::VERSION,
            user,
            token,
            ping_interval_ms: 0,
        }
    }

    /// Parses a LOGIN, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &LoginView<&'a T>) -> Result<Self, MdError> {
        let buffer: &'a [u8] = view.buffer.as_ref();
        let (user, token) = user_and_token(buffer)?;
        Ok(LoginRepr {
            version: view.version(),
            user,
            token,
            ping_interval_ms: view.ping_interval_ms(),
        })
    }

    /// Checks what a receiver would reject: a version other than 1 and 2, the user's alphabet,
    /// a token of 0 or more than 255 bytes; and what version 1 cannot say: a ping interval.
    pub fn check(&self) -> Result<(), MdError> {
        if !(super::MIN_VERSION..=super::VERSION).contains(&self.version) {
            return Err(MdError::UnsupportedVersion(self.version));
        }
        if self.version < 2 && self.ping_interval_ms != 0 {
            return Err(MdError::BadField {
                field: "login.ping_interval_ms",
                value: self.ping_interval_ms.into(),
            });
        }
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
        user_at(self.version) + self.user.len() + self.token.len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or the user or token is
    /// longer than 255 bytes. A version 1 LOGIN's `ping_interval_ms` is not written.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut LoginView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        emit_header(b, MessageType::Login, 0, 0, len);
        write_u32(b, field::MAGIC, MAGIC);
        write_u16(b, field::VERSION, self.version);
        b[field::USER_LEN] = u8::try_from(self.user.len()).expect("a user of at most 255 bytes");
        b[field::TOKEN_LEN] = u8::try_from(self.token.len()).expect("a token of at most 255 bytes");
        let user_from = user_at(self.version);
        if self.version >= 2 {
            write_u32(b, field::PING_INTERVAL_MS, self.ping_interval_ms);
        }
        let token_at = user_from + self.user.len();
        b[user_from..token_at].copy_from_slice(self.user.as_bytes());
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

    #[rustfmt::skip]
    static GOLDEN_V2: [u8; 31] = [
        0x1f, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // length 31, LOGIN
        b'P', b'G', b'M', b'D', 0x02, 0x00, 0x05, 0x06, // magic, version 2, user 5, token 6
        0x88, 0x13, 0x00, 0x00,                         // ping interval 5000 ms
        b'a', b'l', b'i', b'c', b'e', b's', b'e', b'c', b'r', b'e', b't',
    ];

    #[test]
    fn version_2_carries_a_ping_interval() {
        let repr = LoginRepr {
            version: 2,
            user: "alice",
            token: b"secret",
            ping_interval_ms: 5000,
        };
        let view = LoginView::new_checked(&GOLDEN_V2[..]).unwrap();
        assert_eq!(LoginRepr::parse(&view).unwrap(), repr);
        let mut buf = [0xa5u8; 31];
        repr.emit(&mut LoginView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN_V2);
        // A version 1 LOGIN cannot say an interval.
        let v1 = LoginRepr { version: 1, ..repr };
        assert_eq!(
            v1.check().unwrap_err(),
            MdError::BadField {
                field: "login.ping_interval_ms",
                value: 5000
            }
        );
        // The version 1 layout under a version 2 number is 4 bytes short.
        let mut short = GOLDEN;
        short[12] = 2;
        assert!(matches!(
            LoginView::new_checked(&short[..]).unwrap_err(),
            MdError::BadLength { length: 27, .. }
        ));
    }

    #[test]
    fn parses_and_emits_golden_bytes() {
        let repr = LoginRepr {
            version: 1,
            user: "alice",
            token: b"secret",
            ping_interval_ms: 0,
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
        buf[12] = 3;
        assert_eq!(
            LoginView::new_checked(&buf[..]).unwrap_err(),
            MdError::UnsupportedVersion(3)
        );
        buf[12] = 0;
        assert_eq!(
            LoginView::new_checked(&buf[..]).unwrap_err(),
            MdError::UnsupportedVersion(0)
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
