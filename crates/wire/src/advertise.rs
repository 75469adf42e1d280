//! ADVERTISE (0x05): topic resolution, publisher side. "Topic `topic` is published by session
//! `session_id` as stream `stream_id`, reachable at `uri`, for the next `ttl_ms` milliseconds."
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |          common header (16 bytes, type 0x05, flags 0)         |  0
//! +---------------------------------------------------------------+
//! |                      stream_id (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                       ttl_ms (u32)                            | 20
//! +-------------------------------+-------------------------------+
//! |        topic_len (u16)        |         uri_len (u16)         | 24
//! +-------------------------------+-------------------------------+
//! |                      reserved (zero)                          | 28
//! +---------------------------------------------------------------+
//! |                  topic (topic_len bytes, UTF-8)               | 32
//! +---------------------------------------------------------------+
//! |                    uri (uri_len bytes, UTF-8)                 |
//! +---------------------------------------------------------------+
//! ```
//!
//! - `session_id` (common header) and `stream_id` name the publisher's stream.
//! - `ttl_ms` is how long the advertisement stays valid after it is received; a publisher
//!   re-advertises well before it runs out. 0 withdraws the advertisement at once.
//! - `topic` and `uri` are UTF-8 without NUL bytes, 1 to [`MAX_TOPIC_LEN`] and 1 to
//!   [`MAX_URI_LEN`] bytes; `frame_length` is exactly `32 + topic_len + uri_len` (the text is not
//!   NUL-terminated; padding to the next frame is not part of the frame).

use crate::header::{check_control, emit_header, field as hfield, FrameType};
use crate::{read_u16, read_u32, write_u16, write_u32, WireError};

/// Field ranges of the ADVERTISE frame after the common header.
pub mod field {
    use crate::Field;
    pub const STREAM_ID: Field = 16..20;
    pub const TTL_MS: Field = 20..24;
    pub const TOPIC_LEN: Field = 24..26;
    pub const URI_LEN: Field = 26..28;
    pub const RESERVED: Field = 28..32;
    /// Start of the topic bytes; the URI follows them.
    pub const TOPIC: usize = 32;
}

/// Length of the fixed part of an ADVERTISE frame.
pub const ADVERTISE_HEADER_LEN: usize = field::TOPIC;
/// Longest topic name, in bytes.
pub const MAX_TOPIC_LEN: usize = 1024;
/// Longest transport URI, in bytes.
pub const MAX_URI_LEN: usize = 1024;

/// Checks a topic name as receivers do: 1 to [`MAX_TOPIC_LEN`] bytes, no NUL. Publishers call
/// this before advertising so they never emit a frame that is rejected.
pub fn check_topic(topic: &str) -> Result<(), WireError> {
    crate::check_text_len("advertise.topic_len", topic.len(), MAX_TOPIC_LEN)?;
    crate::check_text("advertise.topic", topic.as_bytes()).map(|_| ())
}

/// Checks a transport URI as receivers do: 1 to [`MAX_URI_LEN`] bytes, no NUL.
pub fn check_uri(uri: &str) -> Result<(), WireError> {
    crate::check_text_len("advertise.uri_len", uri.len(), MAX_URI_LEN)?;
    crate::check_text("advertise.uri", uri.as_bytes()).map(|_| ())
}

/// A checked view of an ADVERTISE frame.
#[derive(Debug, Clone, Copy)]
pub struct AdvertiseFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AdvertiseFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        AdvertiseFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = AdvertiseFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks, in this order: the common header, type ADVERTISE, flags 0, `frame_length >= 32`,
    /// reserved zero, `1 <= topic_len <= 1024`, `1 <= uri_len <= 1024`,
    /// `frame_length == 32 + topic_len + uri_len`, then topic and URI are UTF-8 without NUL.
    pub fn check(&self) -> Result<(), WireError> {
        self.check_layout()?;
        crate::check_text("advertise.topic", self.topic_bytes())?;
        crate::check_text("advertise.uri", self.uri_bytes())?;
        Ok(())
    }

    /// Everything [`check`](Self::check) does but the text content.
    fn check_layout(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let len = check_control(
            b,
            FrameType::Advertise,
            ADVERTISE_HEADER_LEN,
            "advertise.flags",
        )?;
        crate::check_zero("advertise.reserved", self.reserved().into())?;
        let topic_len = self.topic_len() as usize;
        let uri_len = self.uri_len() as usize;
        crate::check_text_len("advertise.topic_len", topic_len, MAX_TOPIC_LEN)?;
        crate::check_text_len("advertise.uri_len", uri_len, MAX_URI_LEN)?;
        if len != ADVERTISE_HEADER_LEN + topic_len + uri_len {
            return Err(WireError::BadLength {
                frame_length: len as u32,
                reason: "an ADVERTISE's frame_length must be 32 + topic_len + uri_len",
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn frame_length(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::FRAME_LENGTH)
    }
    pub fn session_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), hfield::SESSION_ID)
    }
    pub fn stream_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::STREAM_ID)
    }
    pub fn ttl_ms(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::TTL_MS)
    }
    pub fn topic_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TOPIC_LEN)
    }
    pub fn uri_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URI_LEN)
    }
    pub fn reserved(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESERVED)
    }
    /// The topic's bytes (checked UTF-8 on a checked frame).
    pub fn topic_bytes(&self) -> &[u8] {
        let end = field::TOPIC + self.topic_len() as usize;
        &self.buffer.as_ref()[field::TOPIC..end]
    }
    /// The URI's bytes (checked UTF-8 on a checked frame).
    pub fn uri_bytes(&self) -> &[u8] {
        let start = field::TOPIC + self.topic_len() as usize;
        &self.buffer.as_ref()[start..start + self.uri_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AdvertiseFrame<T> {
    pub fn set_stream_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::STREAM_ID, v)
    }
    pub fn set_ttl_ms(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::TTL_MS, v)
    }
    /// Writes zero into the reserved field.
    pub fn clear_reserved(&mut self) {
        write_u32(self.buffer.as_mut(), field::RESERVED, 0)
    }
    /// Writes `topic_len`, `uri_len` and both texts.
    ///
    /// # Panics
    /// If a text is longer than 65535 bytes or the buffer is too short for both.
    pub fn set_topic_and_uri(&mut self, topic: &str, uri: &str) {
        let topic_len = u16::try_from(topic.len()).expect("topic longer than 65535 bytes");
        let uri_len = u16::try_from(uri.len()).expect("uri longer than 65535 bytes");
        let b = self.buffer.as_mut();
        write_u16(b, field::TOPIC_LEN, topic_len);
        write_u16(b, field::URI_LEN, uri_len);
        let uri_at = field::TOPIC + topic.len();
        b[field::TOPIC..uri_at].copy_from_slice(topic.as_bytes());
        b[uri_at..uri_at + uri.len()].copy_from_slice(uri.as_bytes());
    }
}

/// The parsed form of an ADVERTISE frame; the texts borrow the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdvertiseRepr<'a> {
    /// The publisher's session.
    pub session_id: u32,
    pub stream_id: u32,
    /// How long the advertisement is valid after it is received; 0 withdraws it.
    pub ttl_ms: u32,
    pub topic: &'a str,
    /// Where to reach the publisher, e.g. `udp://239.1.2.3:40456` or `shm://orders`.
    pub uri: &'a str,
}

impl<'a> AdvertiseRepr<'a> {
    /// Parses an ADVERTISE frame, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        frame: &AdvertiseFrame<&'a T>,
    ) -> Result<Self, WireError> {
        frame.check_layout()?;
        let buffer: &'a [u8] = frame.buffer.as_ref();
        let uri_at = field::TOPIC + frame.topic_len() as usize;
        let uri_end = uri_at + frame.uri_len() as usize;
        Ok(AdvertiseRepr {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            ttl_ms: frame.ttl_ms(),
            topic: crate::check_text("advertise.topic", &buffer[field::TOPIC..uri_at])?,
            uri: crate::check_text("advertise.uri", &buffer[uri_at..uri_end])?,
        })
    }

    /// Checks the texts as a receiver would (see [`check_topic`], [`check_uri`]); `emit`
    /// writes whatever it is given, so a sender calls this on untrusted input first.
    pub fn check(&self) -> Result<(), WireError> {
        check_topic(self.topic)?;
        check_uri(self.uri)
    }

    /// Bytes `emit` writes: `32 + topic.len() + uri.len()`.
    pub const fn buffer_len(&self) -> usize {
        ADVERTISE_HEADER_LEN + self.topic.len() + self.uri.len()
    }

    /// Writes every byte of the frame.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) or a text is longer than
    /// 65535 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut AdvertiseFrame<T>) {
        let len = self.buffer_len();
        emit_header(
            frame.buffer.as_mut(),
            FrameType::Advertise,
            0,
            self.session_id,
            len,
        );
        frame.set_stream_id(self.stream_id);
        frame.set_ttl_ms(self.ttl_ms);
        frame.clear_reserved();
        frame.set_topic_and_uri(self.topic, self.uri);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{arbitrary_frame, mutate, mutations};
    use proptest::prelude::*;
    use std::string::String;
    use std::vec;

    #[rustfmt::skip]
    static GOLDEN: [u8; 58] = [
        0x3a, 0x00, 0x00, 0x00, // frame_length 58
        0x50, 0x47, 0x01, 0x05, // magic, version 1, ADVERTISE
        0x00, 0x00, 0x00, 0x00, // flags, reserved
        0x78, 0x56, 0x34, 0x12, // session_id 0x12345678
        0x07, 0x00, 0x00, 0x00, // stream_id 7
        0x88, 0x13, 0x00, 0x00, // ttl_ms 5000
        0x0a, 0x00, 0x10, 0x00, // topic_len 10, uri_len 16
        0x00, 0x00, 0x00, 0x00, // reserved
        b'p', b'x', b'.', b'e', b'u', b'r', b'u', b's', b'd', b'/', // "px.eurusd/"
        b'u', b'd', b'p', b':', b'/', b'/', b'1', b'0', // "udp://10"
        b'.', b'0', b'.', b'0', b'.', b'1', b':', b'9', // ".0.0.1:9"
    ];

    fn golden_repr() -> AdvertiseRepr<'static> {
        AdvertiseRepr {
            session_id: 0x1234_5678,
            stream_id: 7,
            ttl_ms: 5000,
            topic: "px.eurusd/",
            uri: "udp://10.0.0.1:9",
        }
    }

    #[test]
    fn parses_golden_bytes() {
        let frame = AdvertiseFrame::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(frame.topic_bytes(), b"px.eurusd/");
        assert_eq!(frame.uri_bytes(), b"udp://10.0.0.1:9");
        assert_eq!(AdvertiseRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_byte() {
        let mut buf = [0xa5u8; 58];
        golden_repr().emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn rejects_invalid_utf8_and_nul() {
        let mut buf = GOLDEN;
        buf[33] = 0xff;
        assert_eq!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadText {
                field: "advertise.topic"
            }
        );
        let mut buf = GOLDEN;
        buf[57] = 0;
        assert_eq!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadText {
                field: "advertise.uri"
            }
        );
    }

    #[test]
    fn rejects_empty_texts() {
        // topic_len 0, uri_len 26: same frame_length, same bytes.
        let mut buf = GOLDEN;
        buf[24] = 0;
        buf[26] = 26;
        assert_eq!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "advertise.topic_len",
                value: 0
            }
        );
        let mut buf = GOLDEN;
        buf[24] = 26;
        buf[26] = 0;
        assert_eq!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "advertise.uri_len",
                value: 0
            }
        );
    }

    #[test]
    fn enforces_text_limits() {
        let long = "t".repeat(MAX_TOPIC_LEN + 1);
        let repr = AdvertiseRepr {
            topic: &long,
            ..golden_repr()
        };
        assert_eq!(
            repr.check().unwrap_err(),
            WireError::BadField {
                field: "advertise.topic_len",
                value: 1025
            }
        );
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
        assert_eq!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadField {
                field: "advertise.topic_len",
                value: 1025
            }
        );
        let longest = AdvertiseRepr {
            topic: &long[..MAX_TOPIC_LEN],
            uri: &long[..MAX_URI_LEN],
            ..golden_repr()
        };
        assert!(longest.check().is_ok());
        let mut buf = vec![0u8; longest.buffer_len()];
        longest.emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
        let frame = AdvertiseFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(AdvertiseRepr::parse(&frame).unwrap(), longest);
    }

    #[test]
    fn rejects_length_mismatch() {
        let mut buf = [0u8; 64];
        buf[..58].copy_from_slice(&GOLDEN);
        buf[0] = 64; // six trailing bytes the lengths do not account for
        assert!(matches!(
            AdvertiseFrame::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength {
                frame_length: 64,
                ..
            }
        ));
    }

    #[test]
    fn check_topic_rejects_nul() {
        assert_eq!(
            check_topic("a\0b").unwrap_err(),
            WireError::BadText {
                field: "advertise.topic"
            }
        );
        assert!(check_topic("marchés/€").is_ok());
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(frame) = AdvertiseFrame::new_checked(bytes) {
            let repr = AdvertiseRepr::parse(&frame).unwrap();
            prop_assert!(repr.check().is_ok());
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut AdvertiseFrame::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    /// 1 to `max` bytes of UTF-8 without NUL.
    fn text(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>().prop_filter("no NUL", |c| *c != '\0'), 1..64)
            .prop_map(move |chars| {
                let mut s = String::new();
                for c in chars {
                    if s.len() + c.len_utf8() > max {
                        break;
                    }
                    s.push(c);
                }
                s
            })
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            session_id: u32,
            stream_id: u32,
            ttl_ms: u32,
            topic in text(MAX_TOPIC_LEN),
            uri in text(MAX_URI_LEN),
        ) {
            let repr = AdvertiseRepr { session_id, stream_id, ttl_ms, topic: &topic, uri: &uri };
            prop_assert!(repr.check().is_ok());
            let mut buf = vec![0xa5u8; repr.buffer_len()];
            repr.emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
            let frame = AdvertiseFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(AdvertiseRepr::parse(&frame).unwrap(), repr);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame(FrameType::Advertise)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_frames_never_panic(topic in text(40), uri in text(40), m in mutations()) {
            let repr = AdvertiseRepr { topic: &topic, uri: &uri, ..golden_repr() };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut AdvertiseFrame::new_unchecked(&mut buf[..]));
            mutate(&mut buf, &m);
            assert_canonical(&buf)?;
        }
    }
}
