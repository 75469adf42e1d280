//! Any frame: parse by dispatching on the common header's type, emit whichever repr you hold.
//!
//! ```
//! use peregrine_wire::header::Frames;
//! use peregrine_wire::heartbeat::HeartbeatRepr;
//! use peregrine_wire::{align_frame, FrameRepr};
//!
//! // Two heartbeats packed in one datagram at 8-byte aligned offsets.
//! let a = FrameRepr::Heartbeat(HeartbeatRepr {
//!     session_id: 1,
//!     stream_id: 2,
//!     next_sequence: 10,
//!     oldest_retained: 0,
//! });
//! let mut datagram = vec![0u8; 2 * align_frame(a.buffer_len())];
//! let written = a.emit(&mut datagram);
//! a.emit(&mut datagram[align_frame(written)..]);
//!
//! for frame in Frames::new(&datagram) {
//!     let (_frame_type, bytes) = frame.unwrap();
//!     assert_eq!(FrameRepr::parse(bytes).unwrap(), a);
//! }
//! ```

use crate::advertise::{AdvertiseFrame, AdvertiseRepr};
use crate::auth::{AuthFrame, AuthRepr};
use crate::bye::{ByeFrame, ByeRepr};
use crate::cookie::{CookieFrame, CookieRepr};
use crate::data::{DataFrame, DataRepr, PadRepr};
use crate::header::{FrameType, Header};
use crate::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use crate::nak::{NakFrame, NakRepr};
use crate::query::{QueryFrame, QueryRepr};
use crate::status::{StatusFrame, StatusRepr};
use crate::WireError;

/// The parsed form of any frame of protocol version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRepr<'a> {
    Data(DataRepr<'a>),
    Pad(PadRepr),
    Heartbeat(HeartbeatRepr),
    Nak(NakRepr<'a>),
    Advertise(AdvertiseRepr<'a>),
    Query(QueryRepr<'a>),
    Bye(ByeRepr),
    Status(StatusRepr),
    Cookie(CookieRepr),
    Auth(AuthRepr),
}

impl<'a> FrameRepr<'a> {
    /// Parses the frame at the start of `buffer` (which may hold more bytes after it): checks
    /// the common header, then the frame as its type requires. Never panics.
    pub fn parse(buffer: &'a [u8]) -> Result<Self, WireError> {
        let frame_type = Header::new_checked(buffer)?.frame_type()?;
        Ok(match frame_type {
            FrameType::Data => FrameRepr::Data(DataRepr::parse(&DataFrame::new_unchecked(buffer))?),
            FrameType::Pad => FrameRepr::Pad(PadRepr::parse(&DataFrame::new_unchecked(buffer))?),
            FrameType::Heartbeat => FrameRepr::Heartbeat(HeartbeatRepr::parse(
                &HeartbeatFrame::new_unchecked(buffer),
            )?),
            FrameType::Nak => FrameRepr::Nak(NakRepr::parse(&NakFrame::new_unchecked(buffer))?),
            FrameType::Advertise => FrameRepr::Advertise(AdvertiseRepr::parse(
                &AdvertiseFrame::new_unchecked(buffer),
            )?),
            FrameType::Query => {
                FrameRepr::Query(QueryRepr::parse(&QueryFrame::new_unchecked(buffer))?)
            }
            FrameType::Bye => FrameRepr::Bye(ByeRepr::parse(&ByeFrame::new_unchecked(buffer))?),
            FrameType::Status => {
                FrameRepr::Status(StatusRepr::parse(&StatusFrame::new_unchecked(buffer))?)
            }
            FrameType::Cookie => {
                FrameRepr::Cookie(CookieRepr::parse(&CookieFrame::new_unchecked(buffer))?)
            }
            FrameType::Auth => FrameRepr::Auth(AuthRepr::parse(&AuthFrame::new_unchecked(buffer))?),
        })
    }

    pub const fn frame_type(&self) -> FrameType {
        match self {
            FrameRepr::Data(_) => FrameType::Data,
            FrameRepr::Pad(_) => FrameType::Pad,
            FrameRepr::Heartbeat(_) => FrameType::Heartbeat,
            FrameRepr::Nak(_) => FrameType::Nak,
            FrameRepr::Advertise(_) => FrameType::Advertise,
            FrameRepr::Query(_) => FrameType::Query,
            FrameRepr::Bye(_) => FrameType::Bye,
            FrameRepr::Status(_) => FrameType::Status,
            FrameRepr::Cookie(_) => FrameType::Cookie,
            FrameRepr::Auth(_) => FrameType::Auth,
        }
    }

    /// The common header's `session_id`.
    pub const fn session_id(&self) -> u32 {
        match self {
            FrameRepr::Data(r) => r.session_id,
            FrameRepr::Pad(r) => r.session_id,
            FrameRepr::Heartbeat(r) => r.session_id,
            FrameRepr::Nak(r) => r.session_id,
            FrameRepr::Advertise(r) => r.session_id,
            FrameRepr::Query(r) => r.session_id,
            FrameRepr::Bye(r) => r.session_id,
            FrameRepr::Status(r) => r.session_id,
            FrameRepr::Cookie(_) => 0,
            FrameRepr::Auth(_) => 0,
        }
    }

    /// Bytes `emit` writes (the frame's `frame_length`, without alignment padding).
    pub const fn buffer_len(&self) -> usize {
        match self {
            FrameRepr::Data(r) => r.buffer_len(),
            FrameRepr::Pad(r) => r.buffer_len(),
            FrameRepr::Heartbeat(r) => r.buffer_len(),
            FrameRepr::Nak(r) => r.buffer_len(),
            FrameRepr::Advertise(r) => r.buffer_len(),
            FrameRepr::Query(r) => r.buffer_len(),
            FrameRepr::Bye(r) => r.buffer_len(),
            FrameRepr::Status(r) => r.buffer_len(),
            FrameRepr::Cookie(r) => r.buffer_len(),
            FrameRepr::Auth(r) => r.buffer_len(),
        }
    }

    /// Writes the frame at the start of `buffer` and returns its length. To pack several
    /// frames, start the next one at [`align_frame`](crate::align_frame) of that length (and
    /// zero the padding in between).
    ///
    /// # Panics
    /// If `buffer` is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buffer: &mut [u8]) -> usize {
        let buffer = &mut buffer[..self.buffer_len()];
        match self {
            FrameRepr::Data(r) => r.emit(&mut DataFrame::new_unchecked(buffer)),
            FrameRepr::Pad(r) => r.emit(&mut DataFrame::new_unchecked(buffer)),
            FrameRepr::Heartbeat(r) => r.emit(&mut HeartbeatFrame::new_unchecked(buffer)),
            FrameRepr::Nak(r) => r.emit(&mut NakFrame::new_unchecked(buffer)),
            FrameRepr::Advertise(r) => r.emit(&mut AdvertiseFrame::new_unchecked(buffer)),
            FrameRepr::Query(r) => r.emit(&mut QueryFrame::new_unchecked(buffer)),
            FrameRepr::Bye(r) => r.emit(&mut ByeFrame::new_unchecked(buffer)),
            FrameRepr::Status(r) => r.emit(&mut StatusFrame::new_unchecked(buffer)),
            FrameRepr::Cookie(r) => r.emit(&mut CookieFrame::new_unchecked(buffer)),
            FrameRepr::Auth(r) => r.emit(&mut AuthFrame::new_unchecked(buffer)),
        }
        self.buffer_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{flags, status_flags, Frames};
    use crate::nak::{NakRange, NakRanges};
    use crate::query::PatternKind;
    use crate::{align_frame, FRAME_ALIGNMENT};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    const RANGES: [NakRange; 1] = [NakRange { start: 3, count: 2 }];

    fn samples() -> [FrameRepr<'static>; 10] {
        [
            FrameRepr::Data(DataRepr {
                session_id: 1,
                stream_id: 2,
                sequence: 3,
                message_length: 5,
                flags: flags::BEGIN | flags::END,
                payload: b"hello",
            }),
            FrameRepr::Pad(PadRepr {
                session_id: 1,
                sequence: 4,
                frame_length: 40,
            }),
            FrameRepr::Heartbeat(HeartbeatRepr {
                session_id: 1,
                stream_id: 2,
                next_sequence: 4,
                oldest_retained: 0,
            }),
            FrameRepr::Nak(NakRepr {
                session_id: 1,
                stream_id: 2,
                receiver_id: 9,
                ranges: NakRanges::new(&RANGES).unwrap(),
            }),
            FrameRepr::Advertise(AdvertiseRepr {
                session_id: 1,
                stream_id: 2,
                ttl_ms: 1000,
                topic: "t",
                uri: "shm://t",
            }),
            FrameRepr::Query(QueryRepr {
                session_id: 5,
                query_id: 6,
                kind: PatternKind::Exact,
                pattern: "t",
            }),
            FrameRepr::Bye(ByeRepr {
                session_id: 1,
                stream_id: 2,
                final_next_sequence: 4,
            }),
            FrameRepr::Status(StatusRepr {
                session_id: 0,
                stream_id: 2,
                receiver_id: 9,
                next_sequence: 0,
                window: 4096,
                flags: status_flags::JOIN,
            }),
            FrameRepr::Cookie(CookieRepr { cookie: [7; 16] }),
            FrameRepr::Auth(crate::auth::AuthRepr {
                mac: crate::auth::Mac::Blake3,
                key_id: 9,
                tag: [3; 16],
            }),
        ]
    }

    /// Packs `reprs` at aligned offsets with zero padding, as a sender does.
    fn pack(reprs: &[FrameRepr<'_>]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut offsets = Vec::new();
        for r in reprs {
            let at = buf.len();
            offsets.push(at);
            buf.resize(at + align_frame(r.buffer_len()), 0);
            r.emit(&mut buf[at..]);
        }
        (buf, offsets)
    }

    #[test]
    fn every_type_round_trips_through_the_generic_repr() {
        for repr in samples() {
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            assert_eq!(repr.emit(&mut buf), repr.buffer_len());
            let parsed = FrameRepr::parse(&buf).unwrap();
            assert_eq!(parsed, repr);
            assert_eq!(parsed.frame_type(), repr.frame_type());
            assert_eq!(parsed.session_id(), repr.session_id());
        }
    }

    #[test]
    fn frames_iterates_three_frames_at_aligned_offsets() {
        let reprs = [samples()[0], samples()[2], samples()[3]];
        let (buf, offsets) = pack(&reprs);
        assert_eq!(offsets, [0, 40, 80]); // 37 -> 40, 40 -> 40, 48
        assert!(offsets.iter().all(|o| o % FRAME_ALIGNMENT == 0));
        let mut frames = Frames::new(&buf);
        for repr in &reprs {
            let (ty, bytes) = frames.next().unwrap().unwrap();
            assert_eq!(ty, repr.frame_type());
            assert_eq!(bytes.len(), repr.buffer_len());
            assert_eq!(&FrameRepr::parse(bytes).unwrap(), repr);
        }
        assert!(frames.next().is_none());
    }

    #[test]
    fn frames_stops_at_a_corrupt_frame() {
        let reprs = [samples()[0], samples()[2], samples()[6], samples()[5]];
        let (mut buf, offsets) = pack(&reprs);
        buf[offsets[2] + 4] ^= 0xff; // the BYE's magic
        let mut frames = Frames::new(&buf);
        assert_eq!(frames.next().unwrap().unwrap().0, FrameType::Data);
        assert_eq!(frames.next().unwrap().unwrap().0, FrameType::Heartbeat);
        assert!(matches!(
            frames.next(),
            Some(Err(WireError::BadMagic(0x47af)))
        ));
        assert_eq!(frames.remaining().len(), buf.len() - offsets[2]);
        assert!(
            frames.next().is_none(),
            "nothing after the corrupt frame is yielded"
        );
    }

    #[test]
    fn frames_reports_a_truncated_last_frame() {
        let reprs = [samples()[2], samples()[6]];
        let (buf, offsets) = pack(&reprs);
        let cut = &buf[..offsets[1] + 20];
        let mut frames = Frames::new(cut);
        assert!(frames.next().unwrap().is_ok());
        assert_eq!(
            frames.next().unwrap().unwrap_err(),
            WireError::Truncated {
                needed: 32,
                available: 20
            }
        );
        assert!(frames.next().is_none());
    }

    #[test]
    fn frames_accepts_an_unpadded_last_frame() {
        let data = samples()[0];
        let (buf, _) = pack(&[data, data]);
        let unpadded = &buf[..40 + data.buffer_len()];
        assert_eq!(Frames::new(unpadded).filter(|f| f.is_ok()).count(), 2);
    }

    #[test]
    fn unknown_type_and_version_are_errors() {
        let mut buf = vec![0u8; 40];
        samples()[2].emit(&mut buf);
        buf[7] = 0x7f;
        assert_eq!(
            FrameRepr::parse(&buf).unwrap_err(),
            WireError::UnknownFrameType(0x7f)
        );
        assert_eq!(
            Frames::new(&buf).next().unwrap().unwrap_err(),
            WireError::UnknownFrameType(0x7f)
        );
        // 0x0A (AUTH) is the last type version 1 defines.
        buf[7] = 0x0b;
        assert_eq!(
            FrameRepr::parse(&buf).unwrap_err(),
            WireError::UnknownFrameType(0x0b)
        );
        buf[7] = 0x03;
        buf[6] = 2;
        assert_eq!(
            FrameRepr::parse(&buf).unwrap_err(),
            WireError::UnsupportedVersion(2)
        );
    }

    #[test]
    fn error_names_are_stable() {
        assert_eq!(WireError::BadMagic(0).name(), "BadMagic");
        assert_eq!(WireError::BadText { field: "x" }.index(), 7);
        assert_eq!(WireError::NAMES.len(), WireError::KINDS);
        for (i, name) in WireError::NAMES.iter().enumerate() {
            assert!(!name.is_empty(), "{i}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            for frame in Frames::new(&bytes) {
                let Ok((ty, frame)) = frame else { break };
                if let Ok(repr) = FrameRepr::parse(frame) {
                    prop_assert_eq!(repr.frame_type(), ty);
                }
            }
        }

        #[test]
        fn packed_frames_survive_mutation(
            picks in proptest::collection::vec(0usize..8, 1..6),
            at in any::<usize>(),
            x in 1u8..,
        ) {
            let reprs: Vec<_> = picks.iter().map(|&i| samples()[i]).collect();
            let (mut buf, _) = pack(&reprs);
            let i = at % buf.len();
            buf[i] ^= x;
            let mut seen = 0;
            for frame in Frames::new(&buf) {
                let Ok((_, frame)) = frame else { break };
                if let Ok(repr) = FrameRepr::parse(frame) {
                    let mut out = vec![0u8; repr.buffer_len()];
                    repr.emit(&mut out);
                    if repr.frame_type() != FrameType::Pad {
                        prop_assert_eq!(&out[..], frame);
                    }
                }
                seen += 1;
            }
            prop_assert!(seen <= buf.len() / crate::HEADER_LEN);
        }
    }
}
