//! The failover header: what a member of a failover group puts in front of each message.
//!
//! Two or more publishers of one topic form a *failover group* when they publish the same
//! application-sequenced stream: the application numbers its messages (a matching engine's or a
//! feed handler's own sequence) and every member sends message N with the same number. A
//! subscriber of the group delivers each number once, from whichever member's copy comes first
//! (`peregrine_proto::failover`). The number travels at the front of the message, inside the
//! DATA payload, so every transport carries it unchanged and the frames stay those of
//! `docs/protocol.md`:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                  magic "PGFO" (0x4f464750)                    |  0
//! +---------------------------------------------------------------+
//! |                        group_id (u32)                         |  4
//! +---------------------------------------------------------------+
//! |                                                               |  8
//! |                      sequence (u64)                           |
//! +---------------------------------------------------------------+
//! |                application message ...                        | 16
//! ```
//!
//! `group_id` is [`group_id`] of the group's name (32-bit FNV-1a), so a subscriber can tell a
//! member of its group from a publisher of the same topic in another group; the magic tells it
//! from a plain publisher. Little-endian like every Peregrine field.

use crate::{read_u32, read_u64, write_u32, write_u64, WireError};

/// Field ranges of the failover header.
pub mod field {
    use crate::Field;
    pub const MAGIC: Field = 0..4;
    pub const GROUP_ID: Field = 4..8;
    pub const SEQUENCE: Field = 8..16;
    pub const MESSAGE: usize = 16;
}

/// Bytes the header adds in front of each message.
pub const FAILOVER_HEADER_LEN: usize = field::MESSAGE;

/// "PGFO" read as a little-endian u32.
pub const FAILOVER_MAGIC: u32 = u32::from_le_bytes(*b"PGFO");

/// The group id of a failover group's name: 32-bit FNV-1a of its UTF-8 bytes.
pub const fn group_id(name: &str) -> u32 {
    let b = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < b.len() {
        h = (h ^ b[i] as u32).wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

/// A checked view of a message carrying the failover header.
#[derive(Debug, Clone, Copy)]
pub struct FailoverMessage<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FailoverMessage<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        FailoverMessage { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let m = FailoverMessage { buffer };
        m.check()?;
        Ok(m)
    }

    /// At least [`FAILOVER_HEADER_LEN`] bytes (`Truncated`) and the magic (`BadField`
    /// `failover.magic`). Any group id and sequence are valid.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < FAILOVER_HEADER_LEN {
            return Err(WireError::Truncated {
                needed: FAILOVER_HEADER_LEN,
                available: b.len(),
            });
        }
        let magic = read_u32(b, field::MAGIC);
        if magic != FAILOVER_MAGIC {
            return Err(WireError::BadField {
                field: "failover.magic",
                value: magic.into(),
            });
        }
        Ok(())
    }

    pub fn group_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::GROUP_ID)
    }
    pub fn sequence(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SEQUENCE)
    }
    /// The application's message after the header.
    pub fn message(&self) -> &[u8] {
        &self.buffer.as_ref()[field::MESSAGE..]
    }
}

/// The failover header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverRepr {
    pub group_id: u32,
    pub sequence: u64,
}

impl FailoverRepr {
    /// Checks `buffer` and returns the header's fields and the message after it.
    pub fn parse(buffer: &[u8]) -> Result<(FailoverRepr, &[u8]), WireError> {
        let m = FailoverMessage::new_checked(buffer)?;
        let repr = FailoverRepr {
            group_id: m.group_id(),
            sequence: m.sequence(),
        };
        Ok((repr, &buffer[field::MESSAGE..]))
    }

    /// Writes the header into the first [`FAILOVER_HEADER_LEN`] bytes of `buffer` (the
    /// message goes after it). Panics if `buffer` is shorter.
    pub fn emit(&self, buffer: &mut [u8]) {
        let b = &mut buffer[..FAILOVER_HEADER_LEN];
        write_u32(b, field::MAGIC, FAILOVER_MAGIC);
        write_u32(b, field::GROUP_ID, self.group_id);
        write_u64(b, field::SEQUENCE, self.sequence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    // From Python's struct module, not this file's encoder:
    //   b"PGFO" + struct.pack("<IQ", fnv1a32(b"quotes-a"), 0x0102030405060708) + b"hi"
    // with fnv1a32 written out in Python (offset 0x811c9dc5, prime 0x01000193).
    #[rustfmt::skip]
    static GOLDEN: [u8; 18] = [
        0x50, 0x47, 0x46, 0x4f, // magic "PGFO"
        0xf6, 0xea, 0x5d, 0x86, // group_id fnv1a32("quotes-a") = 0x865deaf6
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // sequence 0x0102030405060708
        0x68, 0x69, // message "hi"
    ];

    #[test]
    fn group_id_is_fnv1a_of_the_name() {
        assert_eq!(group_id("quotes-a"), 0x865d_eaf6);
        assert_eq!(group_id(""), 0x811c_9dc5);
    }

    #[test]
    fn parses_golden_bytes() {
        let (repr, msg) = FailoverRepr::parse(&GOLDEN).unwrap();
        assert_eq!(
            repr,
            FailoverRepr {
                group_id: 0x865d_eaf6,
                sequence: 0x0102_0304_0506_0708
            }
        );
        assert_eq!(msg, b"hi");
    }

    #[test]
    fn emit_writes_every_header_byte() {
        let mut buf = [0xa5u8; 18];
        buf[16..].copy_from_slice(b"hi");
        FailoverRepr {
            group_id: group_id("quotes-a"),
            sequence: 0x0102_0304_0506_0708,
        }
        .emit(&mut buf);
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn an_empty_message_is_valid() {
        let (repr, msg) = FailoverRepr::parse(&GOLDEN[..16]).unwrap();
        assert_eq!(repr.sequence, 0x0102_0304_0506_0708);
        assert!(msg.is_empty());
    }

    #[test]
    fn rejects_short_buffers_and_a_plain_message() {
        assert_eq!(
            FailoverRepr::parse(&GOLDEN[..15]).unwrap_err(),
            WireError::Truncated {
                needed: 16,
                available: 15
            }
        );
        let plain = b"#17.............................";
        assert_eq!(
            FailoverRepr::parse(plain).unwrap_err(),
            WireError::BadField {
                field: "failover.magic",
                value: u32::from_le_bytes(*b"#17.").into()
            }
        );
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_rejected_and_round_trip(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            match FailoverRepr::parse(&data) {
                Ok((repr, msg)) => {
                    let mut out: Vec<u8> = std::vec![0; FAILOVER_HEADER_LEN];
                    repr.emit(&mut out);
                    out.extend_from_slice(msg);
                    prop_assert_eq!(out, data);
                }
                Err(e) => {
                    let expected = matches!(e, WireError::Truncated { .. } | WireError::BadField { .. });
                    prop_assert!(expected, "{:?}", e);
                }
            }
        }
    }
}
