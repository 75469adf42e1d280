//! COOKIE (0x09): proof of a source address, between a resolver client and `peregrine
//! resolverd` (docs/resolution.md).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |     common header (16 bytes, type 0x09, flags 0, session 0)   |  0
//! +---------------------------------------------------------------+
//! |                                                               | 16
//! |                      cookie (16 bytes)                        |
//! |                                                               |
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! Every datagram a client sends to the daemon starts with a COOKIE frame carrying the last
//! cookie the daemon gave it (all zero before the first). The daemon answers a datagram whose
//! cookie is not valid for its source address with one COOKIE frame holding a valid one, and
//! relays nothing; the cookie is a keyed hash of the address and a coarse time, so the daemon
//! keeps no state for a source until it has proved it receives at its address (the role of
//! QUIC's Retry token and DTLS's HelloVerifyRequest). The answer is never larger than the
//! datagram that caused it, which starts with a COOKIE frame.
//!
//! The frame length is fixed at [`COOKIE_LEN`] (32) bytes; no flag is defined and the common
//! header's `session_id` is zero. The cookie's bytes mean nothing to anyone but the daemon that
//! made them.

use crate::header::{check_fixed, emit_header, field as hfield, FrameType};
use crate::{read_u32, WireError};

/// Field ranges of the COOKIE frame after the common header.
pub mod field {
    use crate::Field;
    pub const COOKIE: Field = 16..32;
}

/// Bytes of a cookie.
pub const COOKIE_BYTES: usize = 16;

/// The length of every COOKIE frame.
pub const COOKIE_LEN: usize = field::COOKIE.end;

/// A checked view of a COOKIE frame.
#[derive(Debug, Clone, Copy)]
pub struct CookieFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CookieFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        CookieFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = CookieFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks the common header, type COOKIE, flags 0, `frame_length == 32` and
    /// `session_id == 0`.
    pub fn check(&self) -> Result<(), WireError> {
        check_fixed(
            self.buffer.as_ref(),
            FrameType::Cookie,
            COOKIE_LEN,
            "cookie.flags",
        )?;
        crate::check_zero("cookie.session_id", self.session_id().into())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn cookie(&self) -> [u8; COOKIE_BYTES] {
        let mut c = [0u8; COOKIE_BYTES];
        c.copy_from_slice(&self.buffer.as_ref()[field::COOKIE]);
        c
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CookieFrame<T> {
    pub fn set_cookie(&mut self, v: &[u8; COOKIE_BYTES]) {
        self.buffer.as_mut()[field::COOKIE].copy_from_slice(v)
    }
}

/// The parsed form of a COOKIE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CookieRepr {
    pub cookie: [u8; COOKIE_BYTES],
}

impl CookieRepr {
    /// Parses a COOKIE frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &CookieFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        Ok(CookieRepr {
            cookie: frame.cookie(),
        })
    }

    /// Bytes `emit` writes: always [`COOKIE_LEN`].
    pub const fn buffer_len(&self) -> usize {
        COOKIE_LEN
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`COOKIE_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut CookieFrame<T>) {
        emit_header(frame.buffer.as_mut(), FrameType::Cookie, 0, 0, COOKIE_LEN);
        frame.set_cookie(&self.cookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 32] = [
        0x20, 0x00, 0x00, 0x00, // frame_length 32
        0x50, 0x47, 0x01, 0x09, // magic, version 1, COOKIE
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x00, 0x00, 0x00, 0x00, // session_id 0
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, // cookie
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    ];

    fn golden_repr() -> CookieRepr {
        CookieRepr {
            cookie: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = CookieFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.cookie()[15], 15);
        assert_eq!(CookieRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 32];
        golden_repr().emit(&mut CookieFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_a_session_id_and_any_flag() {
        let mut buf = GOLDEN;
        buf[12] = 1;
        assert_eq!(
            CookieFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "cookie.session_id",
                value: 1
            }
        );
        let mut buf = GOLDEN;
        buf[8] = 1;
        assert_eq!(
            CookieFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "cookie.flags",
                value: 1
            }
        );
    }

    #[test]
    fn rejects_length_other_than_32() {
        let mut buf = [0u8; 40];
        buf[..32].copy_from_slice(&GOLDEN);
        buf[0] = 40;
        assert!(matches!(
            CookieFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 40,
                ..
            }
        ));
        assert_eq!(
            CookieRepr::parse(&CookieFrame::new_unchecked(&GOLDEN[..31])).unwrap_err(),
            WireError::Truncated {
                needed: 32,
                available: 31
            }
        );
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = CookieFrame::new_checked(bytes) {
            let repr = CookieRepr::parse(&frame).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut CookieFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..COOKIE_LEN]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(cookie: [u8; 16]) {
            let repr = CookieRepr { cookie };
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut CookieFrame::new_unchecked(&mut buf[..]));
            let frame = CookieFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(CookieRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Cookie)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(cookie: [u8; 16], m in mutations()) {
            let repr = CookieRepr { cookie };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut CookieFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
