//! The header: the first 8 bytes of every message.
//!
//! ```text
//!  0               2       3       4                               8
//! +---------------+-------+-------+-------------------------------+
//! | length (u16)  | type  | flags |         item_id (u32)         |
//! +---------------+-------+-------+-------------------------------+
//! ```
//!
//! `length` counts the whole message, header included (8 to 65 535 bytes), and comes first so a
//! TCP reader frames the stream by reading two bytes ([`Messages`](super::Messages)). `flags`
//! are defined per type; undefined bits must be zero. `item_id` names the item (0: none): the
//! feed's id on the backbone, the distributor's to clients.

use super::{read_u16, read_u32, write_u16, write_u32, MdError};

/// Field ranges of the header.
pub mod field {
    use crate::codec::Range;
    pub const LENGTH: Range = 0..2;
    pub const TYPE: usize = 2;
    pub const FLAGS: usize = 3;
    pub const ITEM_ID: Range = 4..8;
}

/// Length of the header in bytes.
pub const HEADER_LEN: usize = 8;
/// Longest message: `length` is a u16.
pub const MAX_MESSAGE_LEN: usize = u16::MAX as usize;

/// The message types of version 2 (PING, PONG, PAUSE, RESUME and DIRECTORY are new in it;
/// the rest are version 1's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// An item's full image (feed → distributor → client).
    Refresh = 0x01,
    /// The fields of an item that changed (feed → distributor → client).
    Update = 0x02,
    /// An item's state, or the answer to a request (feed → distributor → client).
    Status = 0x03,
    /// A client logs in (client → distributor).
    Login = 0x10,
    /// Accepted or refused (distributor → client).
    LoginResponse = 0x11,
    /// A client opens items by name or glob (client → distributor).
    Open = 0x12,
    /// A client closes what one OPEN opened (client → distributor).
    Close = 0x13,
    /// The client's queue was conflated; REFRESHes follow (distributor → client).
    Conflated = 0x14,
    /// Liveness: answered by a PONG (both ways, version 2).
    Ping = 0x15,
    /// The answer to a PING (both ways, version 2).
    Pong = 0x16,
    /// A client pauses a request, or all (client → distributor, version 2).
    Pause = 0x17,
    /// A client resumes a request, or all (client → distributor, version 2).
    Resume = 0x18,
    /// The services, their state and whether the client may open them (distributor →
    /// client, version 2).
    Directory = 0x19,
    /// A client asks for the field dictionary (client → distributor, version 2).
    DictionaryRequest = 0x1A,
    /// The field dictionary, in parts (distributor → client, version 2).
    Dictionary = 0x1B,
    /// A contribution to an item (client → distributor → provider, version 2).
    Post = 0x1C,
    /// A post accepted or refused (provider → distributor → client, version 2).
    Ack = 0x1D,
    /// The distributor asks the feed for images (distributor → feed).
    ImageRequest = 0x20,
}

impl MessageType {
    pub const ALL: [MessageType; 18] = [
        MessageType::Refresh,
        MessageType::Update,
        MessageType::Status,
        MessageType::Login,
        MessageType::LoginResponse,
        MessageType::Open,
        MessageType::Close,
        MessageType::Conflated,
        MessageType::Ping,
        MessageType::Pong,
        MessageType::Pause,
        MessageType::Resume,
        MessageType::Directory,
        MessageType::DictionaryRequest,
        MessageType::Dictionary,
        MessageType::Post,
        MessageType::Ack,
        MessageType::ImageRequest,
    ];

    /// The name in docs/market-data.md and docs/golden/md.json, e.g. `"LOGIN_RESPONSE"`.
    pub const fn name(self) -> &'static str {
        match self {
            MessageType::Refresh => "REFRESH",
            MessageType::Update => "UPDATE",
            MessageType::Status => "STATUS",
            MessageType::Login => "LOGIN",
            MessageType::LoginResponse => "LOGIN_RESPONSE",
            MessageType::Open => "OPEN",
            MessageType::Close => "CLOSE",
            MessageType::Conflated => "CONFLATED",
            MessageType::Ping => "PING",
            MessageType::Pong => "PONG",
            MessageType::Pause => "PAUSE",
            MessageType::Resume => "RESUME",
            MessageType::Directory => "DIRECTORY",
            MessageType::DictionaryRequest => "DICTIONARY_REQUEST",
            MessageType::Dictionary => "DICTIONARY",
            MessageType::Post => "POST",
            MessageType::Ack => "ACK",
            MessageType::ImageRequest => "IMAGE_REQUEST",
        }
    }

    /// Decodes a type byte.
    pub const fn from_u8(b: u8) -> Result<Self, MdError> {
        Ok(match b {
            0x01 => MessageType::Refresh,
            0x02 => MessageType::Update,
            0x03 => MessageType::Status,
            0x10 => MessageType::Login,
            0x11 => MessageType::LoginResponse,
            0x12 => MessageType::Open,
            0x13 => MessageType::Close,
            0x14 => MessageType::Conflated,
            0x15 => MessageType::Ping,
            0x16 => MessageType::Pong,
            0x17 => MessageType::Pause,
            0x18 => MessageType::Resume,
            0x19 => MessageType::Directory,
            0x1a => MessageType::DictionaryRequest,
            0x1b => MessageType::Dictionary,
            0x1c => MessageType::Post,
            0x1d => MessageType::Ack,
            0x20 => MessageType::ImageRequest,
            other => return Err(MdError::UnknownType(other)),
        })
    }
}

/// A checked view of the header of a message in a byte buffer.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking it; accessors may panic if it is shorter than 8 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps a buffer after [`check`](Self::check); no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let h = Header { buffer };
        h.check()?;
        Ok(h)
    }

    /// Checks what every message shares, in this order: 8 bytes for the header, `length >= 8`,
    /// a known type, and `length` bytes available.
    pub fn check(&self) -> Result<(), MdError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(MdError::Truncated {
                needed: HEADER_LEN,
                available: b.len(),
            });
        }
        let len = self.length();
        if usize::from(len) < HEADER_LEN {
            return Err(MdError::BadLength {
                length: len,
                reason: "smaller than the 8-byte header",
            });
        }
        MessageType::from_u8(self.type_raw())?;
        if usize::from(len) > b.len() {
            return Err(MdError::Truncated {
                needed: len.into(),
                available: b.len(),
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn length(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }
    pub fn type_raw(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// The message type; an unknown type byte is [`MdError::UnknownType`].
    pub fn message_type(&self) -> Result<MessageType, MdError> {
        MessageType::from_u8(self.type_raw())
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn item_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ITEM_ID)
    }
    /// The message's bytes (exactly `length` of them) on a checked header.
    pub fn message_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v
    }
    /// Re-stamps the item id: the distributor does this once per update before fanning the
    /// same bytes out to every watcher.
    pub fn set_item_id(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::ITEM_ID, v)
    }
}

/// What a message type requires of the header's `item_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemIdRule {
    /// Any value.
    Any,
    /// Not 0: the message is about one item.
    NonZero,
    /// 0: the message is about no item.
    Zero,
}

/// What one message type's decoder checks in the header before its own fields.
pub(crate) struct TypeRules {
    pub ty: MessageType,
    /// The fixed part: `length` is at least this.
    pub fixed_len: usize,
    /// The flag bits the type defines.
    pub flags: u8,
    pub item_id: ItemIdRule,
    /// Field names for errors: `"<type>.flags"` and `"<type>.item_id"`.
    pub flags_field: &'static str,
    pub item_id_field: &'static str,
}

/// Checks the header of `buffer` for a message of `rules.ty`. Returns its length, which is at
/// least `rules.fixed_len` and at most `buffer.len()`.
pub(crate) fn check_typed(buffer: &[u8], rules: &TypeRules) -> Result<usize, MdError> {
    let h = Header::new_checked(buffer)?;
    let found = h.type_raw();
    if found != rules.ty as u8 {
        return Err(MdError::WrongType {
            expected: rules.ty as u8,
            found,
        });
    }
    let len = usize::from(h.length());
    if len < rules.fixed_len {
        return Err(MdError::BadLength {
            length: h.length(),
            reason: "smaller than the fixed part of this message type",
        });
    }
    if h.flags() & !rules.flags != 0 {
        return Err(MdError::BadField {
            field: rules.flags_field,
            value: h.flags().into(),
        });
    }
    let item_id = h.item_id();
    let ok = match rules.item_id {
        ItemIdRule::Any => true,
        ItemIdRule::NonZero => item_id != 0,
        ItemIdRule::Zero => item_id == 0,
    };
    if !ok {
        return Err(MdError::BadField {
            field: rules.item_id_field,
            value: item_id.into(),
        });
    }
    Ok(len)
}

/// [`check_typed`] for a type whose length is fixed.
pub(crate) fn check_fixed(buffer: &[u8], rules: &TypeRules) -> Result<(), MdError> {
    let len = check_typed(buffer, rules)?;
    if len != rules.fixed_len {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "this message type has a fixed length",
        });
    }
    Ok(())
}

/// Writes a complete header at the start of `buffer`.
///
/// # Panics
/// If `length` exceeds 65 535 (every `buffer_len` of a checked repr fits) or `buffer` is
/// shorter than 8 bytes.
pub(crate) fn emit_header(
    buffer: &mut [u8],
    ty: MessageType,
    flags: u8,
    item_id: u32,
    length: usize,
) {
    let length = u16::try_from(length).expect("a message is at most 65535 bytes");
    write_u16(buffer, field::LENGTH, length);
    buffer[field::TYPE] = ty as u8;
    buffer[field::FLAGS] = flags;
    write_u32(buffer, field::ITEM_ID, item_id);
}
