//! AUTH (0x0A): the message authentication code that ends every datagram of a transport
//! configured with a pre-shared key (`auth=` on `udp://` and `mcast://`).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |  common header (16 bytes, type 0x0A, flags: the MAC; the      |  0
//! |  session_id field carries the key id)                         |
//! +---------------------------------------------------------------+
//! |                                                               | 16
//! |                        tag (16 bytes)                         |
//! |                                                               |
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! The frame is always the last of its datagram, at an 8-byte aligned offset (the frames before
//! it are followed by zero padding up to it, as frames sharing a buffer always are). The tag is
//! the first 16 bytes of a MAC under the key over every byte of the datagram before the tag: the
//! frames, the padding, and the AUTH frame's own first 16 bytes, so the key id, the flags (which
//! MAC) and the frame length are covered too. The key id names the key (the first four bytes of
//! SHA-256 of the key, little-endian), so a receiver tells a datagram signed with another key
//! from a forged one. Computing and checking tags is `peregrine_proto::auth`'s; this module is
//! the layout.
//!
//! The frame length is fixed at [`AUTH_LEN`] (32) bytes. One flag is defined:
//! [`FLAG_BLAKE3`] says the MAC is BLAKE3 (keyed with a key derived from the pre-shared key);
//! without it the MAC is HMAC-SHA256. Any other flag is rejected.

use crate::header::{check_exact_len, emit_header, field as hfield, FrameType, Header};
use crate::{read_u32, WireError};

/// Field ranges of the AUTH frame after the common header.
pub mod field {
    use crate::Field;
    pub const TAG: Field = 16..32;
}

/// Bytes of a tag.
pub const TAG_LEN: usize = 16;

/// The AUTH flag saying the tag is BLAKE3's rather than HMAC-SHA256's.
pub const FLAG_BLAKE3: u16 = 0x0001;

/// Which MAC computed a tag (the AUTH frame's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mac {
    /// HMAC-SHA256 under the key (flags 0). Fast where the CPU has the SHA extensions.
    HmacSha256,
    /// BLAKE3 in keyed mode under a key derived from the pre-shared key ([`FLAG_BLAKE3`]).
    /// Several times faster than HMAC-SHA256 in software.
    #[default]
    Blake3,
}

impl Mac {
    /// Every MAC, in the order of [`name`](Self::name)s a user may give.
    pub const ALL: [Mac; 2] = [Mac::Blake3, Mac::HmacSha256];

    /// The AUTH frame's flags for this MAC.
    pub const fn flags(self) -> u16 {
        match self {
            Mac::HmacSha256 => 0,
            Mac::Blake3 => FLAG_BLAKE3,
        }
    }

    /// The MAC named by `flags`, if they are valid.
    pub const fn from_flags(flags: u16) -> Option<Mac> {
        match flags {
            0 => Some(Mac::HmacSha256),
            FLAG_BLAKE3 => Some(Mac::Blake3),
            _ => None,
        }
    }

    /// The name a configuration uses (`mac=blake3`, `mac=hmac-sha256`).
    pub const fn name(self) -> &'static str {
        match self {
            Mac::HmacSha256 => "hmac-sha256",
            Mac::Blake3 => "blake3",
        }
    }

    /// The MAC called `name`, as [`name`](Self::name) spells it.
    pub fn from_name(name: &str) -> Option<Mac> {
        Mac::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The length of every AUTH frame.
pub const AUTH_LEN: usize = field::TAG.end;

/// A checked view of an AUTH frame.
#[derive(Debug, Clone, Copy)]
pub struct AuthFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AuthFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        AuthFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = AuthFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks the common header, type AUTH, `frame_length == 32` and flags naming a [`Mac`].
    pub fn check(&self) -> Result<(), WireError> {
        check_exact_len(self.buffer.as_ref(), FrameType::Auth, AUTH_LEN)?;
        let flags = Header::new_unchecked(self.buffer.as_ref()).flags();
        if Mac::from_flags(flags).is_none() {
            return Err(WireError::BadField {
                field: "auth.flags",
                value: flags.into(),
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The MAC the tag was computed with (HMAC-SHA256 for flags this version does not know;
    /// [`check`](Self::check) rejects those).
    pub fn mac(&self) -> Mac {
        Mac::from_flags(Header::new_unchecked(self.buffer.as_ref()).flags())
            .unwrap_or(Mac::HmacSha256)
    }
    /// The key id (the common header's `session_id` field).
    pub fn key_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn tag(&self) -> [u8; TAG_LEN] {
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&self.buffer.as_ref()[field::TAG]);
        t
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AuthFrame<T> {
    pub fn set_tag(&mut self, v: &[u8; TAG_LEN]) {
        self.buffer.as_mut()[field::TAG].copy_from_slice(v)
    }
}

/// The parsed form of an AUTH frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthRepr {
    pub mac: Mac,
    pub key_id: u32,
    pub tag: [u8; TAG_LEN],
}

impl AuthRepr {
    /// Parses an AUTH frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &AuthFrame<&T>) -> Result<Self, WireError> {
        frame.check()?;
        Ok(AuthRepr {
            mac: frame.mac(),
            key_id: frame.key_id(),
            tag: frame.tag(),
        })
    }

    /// Bytes `emit` writes: always [`AUTH_LEN`].
    pub const fn buffer_len(&self) -> usize {
        AUTH_LEN
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`AUTH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut AuthFrame<T>) {
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Auth,
            self.mac.flags(),
            self.key_id,
            AUTH_LEN,
        );
        frame.set_tag(&self.tag);
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
        0x50, 0x47, 0x01, 0x0a, // magic, version 1, AUTH
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x78, 0x56, 0x34, 0x12, // key id 0x12345678
        0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, // tag
        0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f,
    ];

    fn golden_repr() -> AuthRepr {
        AuthRepr {
            mac: Mac::HmacSha256,
            key_id: 0x1234_5678,
            tag: [
                0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d,
                0x1e, 0x0f,
            ],
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = AuthFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.key_id(), 0x1234_5678);
        assert_eq!(AuthRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 32];
        golden_repr().emit(&mut AuthFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn the_blake3_flag_names_the_mac() {
        let mut buf = GOLDEN;
        buf[8] = 1;
        let frame = AuthFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(frame.mac(), Mac::Blake3);
        let repr = AuthRepr::parse(&frame).unwrap();
        assert_eq!(repr.mac, Mac::Blake3);
        let mut out = [0u8; 32];
        repr.emit(&mut AuthFrame::new_unchecked(&mut out[..]));
        assert_eq!(out, buf);
        for m in Mac::ALL {
            assert_eq!(Mac::from_name(m.name()), Some(m));
            assert_eq!(Mac::from_flags(m.flags()), Some(m));
        }
        assert_eq!(Mac::from_name("sha1"), None);
    }

    #[test]
    fn rejects_unknown_flags_and_a_length_other_than_32() {
        for flags in [2u16, 3, 0x100, 0x8000] {
            let mut buf = GOLDEN;
            buf[8..10].copy_from_slice(&flags.to_le_bytes());
            assert_eq!(
                AuthFrame::new_checked(&buf[..]).unwrap_err(),
                WireError::BadField {
                    field: "auth.flags",
                    value: flags.into()
                }
            );
        }
        let mut long = [0u8; 40];
        long[..32].copy_from_slice(&GOLDEN);
        long[0] = 40;
        assert!(matches!(
            AuthFrame::new_checked(&long[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 40,
                ..
            }
        ));
        assert_eq!(
            AuthRepr::parse(&AuthFrame::new_unchecked(&GOLDEN[..31])).unwrap_err(),
            WireError::Truncated {
                needed: 32,
                available: 31
            }
        );
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = AuthFrame::new_checked(bytes) {
            let repr = AuthRepr::parse(&frame).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut AuthFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..AUTH_LEN]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(blake3: bool, key_id: u32, tag: [u8; 16]) {
            let mac = if blake3 { Mac::Blake3 } else { Mac::HmacSha256 };
            let repr = AuthRepr { mac, key_id, tag };
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut AuthFrame::new_unchecked(&mut buf[..]));
            let frame = AuthFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(AuthRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Auth)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(blake3: bool, key_id: u32, tag: [u8; 16], m in mutations()) {
            let mac = if blake3 { Mac::Blake3 } else { Mac::HmacSha256 };
            let repr = AuthRepr { mac, key_id, tag };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut AuthFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
