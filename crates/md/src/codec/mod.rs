//! The market data wire format, version 2 (docs/market-data.md, "Wire format").
//!
//! Every message starts with the 8-byte [header]; its type decides the rest. One module per
//! message type, each with:
//!
//! - a checked view `XxxView<T: AsRef<[u8]>>` whose `new_checked` validates the whole message
//!   once, so no accessor panics afterwards;
//! - a parsed form `XxxRepr` with `parse`, `emit` and `buffer_len`;
//! - golden vectors shared with other implementations in `docs/golden/md.json`.
//!
//! | type | module | message |
//! |------|--------|---------|
//! | 0x01 | [`refresh`] | REFRESH: an item's full image |
//! | 0x02 | [`update`] | UPDATE: the fields that changed |
//! | 0x03 | [`status`] | STATUS: an item's state, or the answer to a request |
//! | 0x10 | [`login`] | LOGIN |
//! | 0x11 | [`login_response`] | LOGIN_RESPONSE |
//! | 0x12 | [`open`] | OPEN: items by name or glob |
//! | 0x13 | [`close`] | CLOSE: what one OPEN opened |
//! | 0x14 | [`conflated`] | CONFLATED: the client fell behind; REFRESHes follow |
//! | 0x15 | [`ping`] | PING: liveness (version 2) |
//! | 0x16 | [`ping`] | PONG: the answer to a PING (version 2) |
//! | 0x17 | [`pause`] | PAUSE: a request, or all, conflated until resumed (version 2) |
//! | 0x18 | [`pause`] | RESUME (version 2) |
//! | 0x19 | [`directory`] | DIRECTORY: the services, up or down (version 2) |
//! | 0x1A | [`dictionary`] | DICTIONARY_REQUEST: a client asks for the field dictionary (version 2) |
//! | 0x1B | [`dictionary`] | DICTIONARY: the field dictionary, in parts (version 2) |
//! | 0x1C | [`post`] | POST: a contribution to an item, for its provider (version 2) |
//! | 0x1D | [`ack`] | ACK: a post accepted, or refused with a code and a reason (version 2) |
//! | 0x20 | [`image_request`] | IMAGE_REQUEST: the distributor asks the feed for images |
//!
//! [`fields`] encodes field lists. [`Message`] parses any message by type, and [`Messages`]
//! splits a TCP byte stream into messages. Parsing never allocates and never panics: every
//! rejection is an [`MdError`] with a stable [`name`](MdError::name).
//!
//! All integers are little-endian; nothing is aligned (messages follow each other on TCP with
//! nothing between them).
//!
//! ```
//! use peregrine_md::codec::{Message, UpdateRepr, FieldList};
//! use peregrine_md::model::{Field, Price, Value};
//!
//! let fields = [
//!     Field::new(22, Value::Price(Price { mantissa: 18921, exponent: -2 })), // BID
//!     Field::new(25, Value::Price(Price { mantissa: 18922, exponent: -2 })), // ASK
//!     Field::new(30, Value::Int(300)),                                       // BIDSIZE
//!     Field::new(31, Value::Int(500)),                                       // ASKSIZE
//! ];
//! let update = Message::Update(UpdateRepr {
//!     item_id: 7,
//!     timestamp_ns: 1_700_000_000_000_000_000,
//!     item_seq: 42,
//!     fields: FieldList::List(&fields),
//! });
//! let mut buf = vec![0u8; update.buffer_len()];
//! assert_eq!(update.emit(&mut buf), 72); // 24 + 4 × 12
//! assert_eq!(Message::parse(&buf).unwrap(), update);
//! ```

pub mod ack;
pub mod close;
pub mod conflated;
pub mod dictionary;
pub mod directory;
mod error;
pub mod fields;
pub mod header;
pub mod image_request;
pub mod login;
pub mod login_response;
mod message;
pub mod open;
pub mod pause;
pub mod ping;
pub mod post;
pub mod refresh;
pub mod status;
mod stream;
pub mod update;

pub use ack::{AckCode, AckRepr, AckView};
pub use close::{CloseRepr, CloseView};
pub use conflated::{ConflatedRepr, ConflatedView};
pub use dictionary::{
    encode_dictionary, DefList, DictEntry, DictionaryRepr, DictionaryRequestRepr,
    DictionaryRequestView, DictionaryView, EnumValues,
};
pub use directory::{DirectoryRepr, DirectoryView, EntryList, ServiceEntry};
pub use error::MdError;
pub use fields::{FieldIter, FieldList};
pub use header::{Header, MessageType, HEADER_LEN, MAX_MESSAGE_LEN};
pub use image_request::{ImageRequestRepr, ImageRequestView};
pub use login::{LoginRepr, LoginView, MAGIC};
pub use login_response::{LoginResponseRepr, LoginResponseView, LoginResult};
pub use message::Message;
pub use open::{open_flags, OpenRepr, OpenView, PatternIter, PatternList, ViewList};
pub use pause::{PauseKind, PauseRepr, PauseView, PAUSE_LEN};
pub use ping::{PingKind, PingRepr, PingView, PING_LEN};
pub use post::{post_flags, PostRepr, PostView};
pub use refresh::{refresh_flags, RefreshRepr, RefreshView};
pub use status::{StatusRepr, StatusView};
pub use stream::Messages;
pub use update::{UpdateRepr, UpdateView};

use crate::model::NameError;

/// The newest protocol version this build speaks (LOGIN carries it). Version 2 added the
/// request model: liveness (a LOGIN asks for a ping interval, LOGIN_RESPONSE says the one
/// taken, PING and PONG), snapshots, views, PAUSE and RESUME, the DIRECTORY, the dictionary
/// download and posting.
pub const VERSION: u16 = 2;
/// The oldest version this build still speaks: a version 1 LOGIN is answered as before, and
/// nothing of version 2 is ever sent on its connection.
pub const MIN_VERSION: u16 = 1;

/// A byte range of a field inside a message.
pub type Range = core::ops::Range<usize>;

#[inline]
pub(crate) fn read_u16(b: &[u8], f: Range) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_le_bytes(a)
}
#[inline]
pub(crate) fn read_u32(b: &[u8], f: Range) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_le_bytes(a)
}
#[inline]
pub(crate) fn read_u64(b: &[u8], f: Range) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_le_bytes(a)
}
#[inline]
pub(crate) fn write_u16(b: &mut [u8], f: Range, v: u16) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn write_u32(b: &mut [u8], f: Range, v: u32) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn write_u64(b: &mut [u8], f: Range, v: u64) {
    b[f].copy_from_slice(&v.to_le_bytes());
}

/// Maps a name check's error to the codec's: a length out of range is a `BadField` on the
/// length field, a byte outside the alphabet a `BadText` on the text field.
pub(crate) fn name_error(
    len_field: &'static str,
    text_field: &'static str,
    e: NameError,
) -> MdError {
    match e {
        NameError::Empty => MdError::BadField {
            field: len_field,
            value: 0,
        },
        NameError::TooLong { len, .. } => MdError::BadField {
            field: len_field,
            value: len as u64,
        },
        NameError::BadByte(_) => MdError::BadText { field: text_field },
    }
}

/// Checks free text (a STATUS or LOGIN_RESPONSE text): UTF-8.
pub(crate) fn check_utf8<'a>(field: &'static str, bytes: &'a [u8]) -> Result<&'a str, MdError> {
    core::str::from_utf8(bytes).map_err(|_| MdError::BadText { field })
}

/// Rejects a non-zero reserved field.
#[inline]
pub(crate) fn check_zero(field: &'static str, value: u64) -> Result<(), MdError> {
    if value != 0 {
        return Err(MdError::BadField { field, value });
    }
    Ok(())
}

/// Rejects a text longer than its u8 length field can say; `emit` panics on such a text, so
/// a sender checks first.
pub(crate) fn check_len_u8(field: &'static str, len: usize, max: usize) -> Result<(), MdError> {
    if len > max {
        return Err(MdError::BadField {
            field,
            value: len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_util {
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Mostly zero, sometimes anything: reserved fields and lengths are then often valid.
    fn biased_byte() -> impl Strategy<Value = u8> {
        prop_oneof![3 => Just(0u8), 1 => any::<u8>()]
    }

    /// Arbitrary bytes: fully random, or a header of type `ty` with `length` usually the
    /// buffer's, followed by a zero-biased body.
    pub fn arbitrary_message(ty: u8) -> BoxedStrategy<Vec<u8>> {
        let raw = vec(any::<u8>(), 0..200);
        let typed = (
            vec(biased_byte(), 0..200),
            any::<bool>(),
            any::<u16>(),
            any::<u32>(),
        )
            .prop_map(move |(body, exact, len, item)| {
                let length = if exact { (8 + body.len()) as u16 } else { len };
                let mut b = Vec::with_capacity(8 + body.len());
                b.extend_from_slice(&length.to_le_bytes());
                b.push(ty);
                b.push(0);
                b.extend_from_slice(&(item & 0xff).to_le_bytes());
                b.extend_from_slice(&body);
                b
            });
        prop_oneof![1 => raw, 4 => typed].boxed()
    }
}
