//! PING (0x15) and PONG (0x16): liveness, both ways, on a connection logged in with version 2.
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u64 payload        PING: chosen by its sender (its clock, to time the round trip);
//!                        PONG: the payload of the PING it answers
//! ```
//!
//! 16 bytes each. Each side sends a PING every interval agreed at login (LOGIN version 2 asks
//! for one, LOGIN_RESPONSE says the one taken) and answers every PING with a PONG at once. A
//! side that has read nothing from the other for three intervals closes the connection: a
//! half-open connection or a stopped process is found within three intervals, whatever the
//! data flow.

use super::header::{check_fixed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u64, write_u64, MdError};

/// Field ranges of PING and PONG after the header.
pub mod field {
    use crate::codec::Range;
    pub const PAYLOAD: Range = 8..16;
}

/// The length of every PING and PONG.
pub const PING_LEN: usize = field::PAYLOAD.end;

const PING_RULES: TypeRules = TypeRules {
    ty: MessageType::Ping,
    fixed_len: PING_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "ping.flags",
    item_id_field: "ping.item_id",
};

const PONG_RULES: TypeRules = TypeRules {
    ty: MessageType::Pong,
    fixed_len: PING_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "pong.flags",
    item_id_field: "pong.item_id",
};

/// Which of the two messages: they share one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PingKind {
    Ping,
    Pong,
}

impl PingKind {
    const fn rules(self) -> &'static TypeRules {
        match self {
            PingKind::Ping => &PING_RULES,
            PingKind::Pong => &PONG_RULES,
        }
    }
    pub const fn message_type(self) -> MessageType {
        self.rules().ty
    }
}

/// A checked view of a PING or a PONG.
#[derive(Debug, Clone, Copy)]
pub struct PingView<T: AsRef<[u8]>> {
    buffer: T,
    kind: PingKind,
}

impl<T: AsRef<[u8]>> PingView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T, kind: PingKind) -> Self {
        PingView { buffer, kind }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T, kind: PingKind) -> Result<Self, MdError> {
        let v = PingView { buffer, kind };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, the type (`kind`'s), `length == 16`, flags 0, `item_id` 0.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), self.kind.rules())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn payload(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::PAYLOAD)
    }
}

/// The parsed form of a PING or a PONG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PingRepr {
    pub payload: u64,
}

impl PingRepr {
    /// Parses a PING or PONG (the view's kind), checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PingView<&T>) -> Result<Self, MdError> {
        view.check()?;
        Ok(PingRepr {
            payload: view.payload(),
        })
    }

    /// Bytes `emit` writes: 16.
    pub const fn buffer_len(&self) -> usize {
        PING_LEN
    }

    /// Writes every byte of the message, as the view's kind.
    ///
    /// # Panics
    /// If the buffer is shorter than 16 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut PingView<T>) {
        let ty = view.kind.message_type();
        let b = view.buffer.as_mut();
        emit_header(b, ty, 0, 0, PING_LEN);
        write_u64(b, field::PAYLOAD, self.payload);
    }

    /// The message as bytes.
    pub fn to_bytes(&self, kind: PingKind) -> [u8; PING_LEN] {
        let mut b = [0u8; PING_LEN];
        self.emit(&mut PingView::new_unchecked(&mut b[..], kind));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_tells_ping_from_pong() {
        let ping = PingRepr {
            payload: 0x0102_0304_0506_0708,
        }
        .to_bytes(PingKind::Ping);
        assert_eq!(
            ping,
            [16, 0, 0x15, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1],
            "little-endian payload after the header"
        );
        let view = PingView::new_checked(&ping[..], PingKind::Ping).unwrap();
        assert_eq!(view.payload(), 0x0102_0304_0506_0708);
        assert_eq!(
            PingView::new_checked(&ping[..], PingKind::Pong).unwrap_err(),
            MdError::WrongType {
                expected: 0x16,
                found: 0x15
            }
        );
        let mut pong = PingRepr { payload: 9 }.to_bytes(PingKind::Pong);
        assert_eq!(pong[2], 0x16);
        pong[4] = 1;
        assert_eq!(
            PingView::new_checked(&pong[..], PingKind::Pong).unwrap_err(),
            MdError::BadField {
                field: "pong.item_id",
                value: 1
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x15), pong in any::<bool>()) {
            let mut bytes = bytes;
            let kind = if pong && bytes.len() > 2 {
                bytes[2] = 0x16;
                PingKind::Pong
            } else {
                PingKind::Ping
            };
            if let Ok(view) = PingView::new_checked(&bytes[..], kind) {
                let repr = PingRepr::parse(&view).unwrap();
                prop_assert_eq!(&repr.to_bytes(kind)[..], &bytes[..PING_LEN]);
            }
        }
    }
}
