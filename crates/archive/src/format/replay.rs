//! The replay protocol's own frames (docs/recording.md, "Replay over TCP"): the request a
//! client sends, and the end and error frames that close a server's answer. Between them the
//! server sends each recording as its files hold it: a segment header, records, 32 zero bytes.
//!
//! Request:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                        magic "PGRQ"                           |  0
//! +-------------------------------+---------------+---------------+
//! |        version (u16, 1)       |  from (u8)    | reserved (0)  |  4
//! +-------------------------------+---------------+---------------+
//! |                       position (u64)                          |  8
//! |                                                               |
//! +-------------------------------+-------------------------------+
//! |       topic_len (u16)         |        reserved (zero)        | 16
//! +-------------------------------+-------------------------------+
//! |                        reserved (zero)                        | 20
//! +---------------------------------------------------------------+
//! |                 topic (UTF-8, topic_len bytes)                | 24
//! ```
//!
//! `from` 0: every message (`position` zero); 1: from sequence `position` of each recording;
//! 2: from the first message received at `position` (ns since the Unix epoch) or later.
//!
//! End (16 bytes): magic "PGRZ", a reserved u32 (zero), the u64 count of messages sent.
//! Error: magic "PGRX", u16 length, a reserved u16 (zero), then `length` bytes of UTF-8 text.

use super::segment_header::MAX_TOPIC_LEN;
use super::{read_u16, read_u32, read_u64, write_u16, write_u64, FormatError};

pub const REQUEST_MAGIC: [u8; 4] = *b"PGRQ";
pub const END_MAGIC: [u8; 4] = *b"PGRZ";
pub const ERROR_MAGIC: [u8; 4] = *b"PGRX";
pub const VERSION: u16 = 1;
/// The request's length without its topic.
pub const REQUEST_FIXED_LEN: usize = 24;
pub const END_LEN: usize = 16;
/// The longest error text.
pub const MAX_ERROR_LEN: usize = 4096;

/// Where a replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Start,
    Sequence(u64),
    Time(u64),
}

/// A replay request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRepr {
    pub topic: String,
    pub from: From,
}

impl RequestRepr {
    pub fn emit(&self) -> Vec<u8> {
        assert!(self.topic.len() <= MAX_TOPIC_LEN, "checked by the client");
        let mut b = vec![0u8; REQUEST_FIXED_LEN + self.topic.len()];
        b[0..4].copy_from_slice(&REQUEST_MAGIC);
        write_u16(&mut b, 4..6, VERSION);
        let (kind, pos) = match self.from {
            From::Start => (0, 0),
            From::Sequence(s) => (1, s),
            From::Time(t) => (2, t),
        };
        b[6] = kind;
        write_u64(&mut b, 8..16, pos);
        write_u16(&mut b, 16..18, self.topic.len() as u16);
        b[REQUEST_FIXED_LEN..].copy_from_slice(self.topic.as_bytes());
        b
    }

    /// The topic's length from a request's fixed part (to read the rest), after checking it.
    pub fn topic_len(fixed: &[u8]) -> Result<usize, FormatError> {
        if fixed.len() < REQUEST_FIXED_LEN {
            return Err(FormatError::Truncated {
                needed: REQUEST_FIXED_LEN,
                got: fixed.len(),
            });
        }
        if fixed[0..4] != REQUEST_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = read_u16(fixed, 4..6);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let len = read_u16(fixed, 16..18) as usize;
        if len == 0 || len > MAX_TOPIC_LEN {
            return Err(FormatError::BadField {
                field: "request.topic_len",
                value: len as u64,
            });
        }
        Ok(len)
    }

    /// Parses a whole request.
    pub fn parse(b: &[u8]) -> Result<RequestRepr, FormatError> {
        let len = Self::topic_len(b)?;
        if b.len() < REQUEST_FIXED_LEN + len {
            return Err(FormatError::Truncated {
                needed: REQUEST_FIXED_LEN + len,
                got: b.len(),
            });
        }
        if b[7] != 0 || read_u16(b, 18..20) != 0 || read_u32(b, 20..24) != 0 {
            return Err(FormatError::BadField {
                field: "request.reserved",
                value: 1,
            });
        }
        let pos = read_u64(b, 8..16);
        let from = match b[6] {
            0 if pos == 0 => From::Start,
            1 => From::Sequence(pos),
            2 => From::Time(pos),
            v => {
                return Err(FormatError::BadField {
                    field: "request.from",
                    value: v.into(),
                })
            }
        };
        let topic = std::str::from_utf8(&b[REQUEST_FIXED_LEN..REQUEST_FIXED_LEN + len])
            .map_err(|e| FormatError::BadField {
                field: "request.topic",
                value: e.valid_up_to() as u64,
            })?
            .to_string();
        Ok(RequestRepr { topic, from })
    }
}

/// The end frame: `messages` were sent.
pub fn emit_end(messages: u64) -> [u8; END_LEN] {
    let mut b = [0u8; END_LEN];
    b[0..4].copy_from_slice(&END_MAGIC);
    write_u64(&mut b, 8..16, messages);
    b
}

/// The end frame's message count (after its magic was read).
pub fn parse_end(b: &[u8]) -> Result<u64, FormatError> {
    if b.len() < END_LEN {
        return Err(FormatError::Truncated {
            needed: END_LEN,
            got: b.len(),
        });
    }
    if b[0..4] != END_MAGIC {
        return Err(FormatError::BadMagic);
    }
    if read_u32(b, 4..8) != 0 {
        return Err(FormatError::BadField {
            field: "end.reserved",
            value: read_u32(b, 4..8).into(),
        });
    }
    Ok(read_u64(b, 8..16))
}

/// An error frame with `text` (cut to [`MAX_ERROR_LEN`] bytes at a character boundary).
pub fn emit_error(text: &str) -> Vec<u8> {
    let mut end = text.len().min(MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut b = vec![0u8; 8 + end];
    b[0..4].copy_from_slice(&ERROR_MAGIC);
    write_u16(&mut b, 4..6, end as u16);
    b[8..].copy_from_slice(&text.as_bytes()[..end]);
    b
}

/// The text's length from an error frame's first 8 bytes.
pub fn error_len(b: &[u8]) -> Result<usize, FormatError> {
    if b.len() < 8 {
        return Err(FormatError::Truncated {
            needed: 8,
            got: b.len(),
        });
    }
    if b[0..4] != ERROR_MAGIC {
        return Err(FormatError::BadMagic);
    }
    let len = read_u16(b, 4..6) as usize;
    if len > MAX_ERROR_LEN || read_u16(b, 6..8) != 0 {
        return Err(FormatError::BadField {
            field: "error.length",
            value: len as u64,
        });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_named() {
        for from in [From::Start, From::Sequence(7), From::Time(1 << 60)] {
            let r = RequestRepr {
                topic: "orders.eu".into(),
                from,
            };
            assert_eq!(RequestRepr::parse(&r.emit()), Ok(r));
        }
        let mut b = RequestRepr {
            topic: "t".into(),
            from: From::Start,
        }
        .emit();
        b[6] = 9;
        assert_eq!(
            RequestRepr::parse(&b),
            Err(FormatError::BadField {
                field: "request.from",
                value: 9
            })
        );
        assert_eq!(
            RequestRepr::parse(b"GET / HTTP/1.1\r\n\r\n......"),
            Err(FormatError::BadMagic)
        );
        assert_eq!(parse_end(&emit_end(42)), Ok(42));
        let e = emit_error("no recording of topic x");
        assert_eq!(error_len(&e), Ok(23));
        assert_eq!(&e[8..], b"no recording of topic x");
    }
}
