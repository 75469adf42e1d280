//! PAUSE (0x17) and RESUME (0x18): a client pauses or resumes one request, or all of them
//! (version 2).
//!
//! ```text
//!  0  header (item_id 0; flags: none defined)
//!  8  u32 request_id     the request (0: every request open now)
//! ```
//!
//! 12 bytes each. While paused, the distributor keeps each of the request's items' latest
//! state only (an item another unpaused request of the client holds still flows); RESUME sends
//! one REFRESH (flagged CONFLATED) or STATUS per item that changed meanwhile, then the updates
//! again. A request id that is not open is answered with STATUS `rejected`.

use super::header::{check_fixed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u32, write_u32, MdError};

/// Field ranges of PAUSE and RESUME after the header.
pub mod field {
    use crate::codec::Range;
    pub const REQUEST_ID: Range = 8..12;
}

/// The length of every PAUSE and RESUME.
pub const PAUSE_LEN: usize = field::REQUEST_ID.end;

const PAUSE_RULES: TypeRules = TypeRules {
    ty: MessageType::Pause,
    fixed_len: PAUSE_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "pause.flags",
    item_id_field: "pause.item_id",
};

const RESUME_RULES: TypeRules = TypeRules {
    ty: MessageType::Resume,
    fixed_len: PAUSE_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "resume.flags",
    item_id_field: "resume.item_id",
};

/// Which of the two messages: they share one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseKind {
    Pause,
    Resume,
}

impl PauseKind {
    const fn rules(self) -> &'static TypeRules {
        match self {
            PauseKind::Pause => &PAUSE_RULES,
            PauseKind::Resume => &RESUME_RULES,
        }
    }
    pub const fn message_type(self) -> MessageType {
        self.rules().ty
    }
}

/// A checked view of a PAUSE or a RESUME.
#[derive(Debug, Clone, Copy)]
pub struct PauseView<T: AsRef<[u8]>> {
    buffer: T,
    kind: PauseKind,
}

impl<T: AsRef<[u8]>> PauseView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T, kind: PauseKind) -> Self {
        PauseView { buffer, kind }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T, kind: PauseKind) -> Result<Self, MdError> {
        let v = PauseView { buffer, kind };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, the type (`kind`'s), `length == 12`, flags 0, `item_id` 0.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), self.kind.rules())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn request_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REQUEST_ID)
    }
}

/// The parsed form of a PAUSE or a RESUME.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PauseRepr {
    /// The request; 0 for every request open now.
    pub request_id: u32,
}

impl PauseRepr {
    /// Parses a PAUSE or RESUME (the view's kind), checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PauseView<&T>) -> Result<Self, MdError> {
        view.check()?;
        Ok(PauseRepr {
            request_id: view.request_id(),
        })
    }

    /// Bytes `emit` writes: 12.
    pub const fn buffer_len(&self) -> usize {
        PAUSE_LEN
    }

    /// Writes every byte of the message, as the view's kind.
    ///
    /// # Panics
    /// If the buffer is shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut PauseView<T>) {
        let ty = view.kind.message_type();
        let b = view.buffer.as_mut();
        emit_header(b, ty, 0, 0, PAUSE_LEN);
        write_u32(b, field::REQUEST_ID, self.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_tells_pause_from_resume() {
        let mut b = [0xa5u8; 12];
        PauseRepr { request_id: 7 }
            .emit(&mut PauseView::new_unchecked(&mut b[..], PauseKind::Pause));
        assert_eq!(b, [12, 0, 0x17, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
        let view = PauseView::new_checked(&b[..], PauseKind::Pause).unwrap();
        assert_eq!(
            PauseRepr::parse(&view).unwrap(),
            PauseRepr { request_id: 7 }
        );
        assert_eq!(
            PauseView::new_checked(&b[..], PauseKind::Resume).unwrap_err(),
            MdError::WrongType {
                expected: 0x18,
                found: 0x17
            }
        );
        PauseRepr { request_id: 0 }
            .emit(&mut PauseView::new_unchecked(&mut b[..], PauseKind::Resume));
        assert_eq!(
            b,
            [12, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            "0: every request"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x17), resume in any::<bool>()) {
            let mut bytes = bytes;
            let kind = if resume && bytes.len() > 2 {
                bytes[2] = 0x18;
                PauseKind::Resume
            } else {
                PauseKind::Pause
            };
            if let Ok(view) = PauseView::new_checked(&bytes[..], kind) {
                let repr = PauseRepr::parse(&view).unwrap();
                let mut out = [0u8; PAUSE_LEN];
                repr.emit(&mut PauseView::new_unchecked(&mut out[..], kind));
                prop_assert_eq!(&out[..], &bytes[..PAUSE_LEN]);
            }
        }
    }
}
