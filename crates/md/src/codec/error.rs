//! The one error type of the codec: why bytes are not a valid market data message.

use core::fmt;

/// Why a message was rejected. Every decoder returns one of these instead of panicking; the
/// distributor counts them per variant and tells the client which one it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MdError {
    /// Fewer bytes than the header, the message's fixed part or its `length` need.
    Truncated { needed: usize, available: usize },
    /// `length` is below the 8-byte header or disagrees with the message's contents.
    BadLength { length: u16, reason: &'static str },
    /// A message type this implementation does not know.
    UnknownType(u8),
    /// The message has a different type from the one the caller asked to decode.
    WrongType { expected: u8, found: u8 },
    /// A field out of its range: a reserved field or undefined flag bit that is not zero, a
    /// length, count, kind, exponent or state the spec does not allow, a field id twice.
    BadField { field: &'static str, value: u64 },
    /// A text field breaks its alphabet (names) or is not UTF-8 (strings, texts).
    BadText { field: &'static str },
    /// A LOGIN whose magic is not `"PGMD"`: not a Peregrine market data client.
    BadMagic(u32),
    /// A LOGIN of a protocol version this implementation does not speak.
    UnsupportedVersion(u16),
}

impl MdError {
    /// How many kinds of error there are: [`index`](Self::index) is below this.
    pub const KINDS: usize = 8;

    /// The variant's names, indexed by [`index`](Self::index). Stable: they name the errors in
    /// `docs/golden/md.json` and in counters.
    pub const NAMES: [&'static str; Self::KINDS] = [
        "Truncated",
        "BadLength",
        "UnknownType",
        "WrongType",
        "BadField",
        "BadText",
        "BadMagic",
        "UnsupportedVersion",
    ];

    /// A stable small index per variant, for an array of rejection counters.
    pub const fn index(&self) -> usize {
        match self {
            MdError::Truncated { .. } => 0,
            MdError::BadLength { .. } => 1,
            MdError::UnknownType(_) => 2,
            MdError::WrongType { .. } => 3,
            MdError::BadField { .. } => 4,
            MdError::BadText { .. } => 5,
            MdError::BadMagic(_) => 6,
            MdError::UnsupportedVersion(_) => 7,
        }
    }

    /// The variant's name, e.g. `"BadField"`.
    pub const fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// The field a [`BadField`](Self::BadField) or [`BadText`](Self::BadText) is about, e.g.
    /// `"update.reserved"`.
    pub const fn field(&self) -> Option<&'static str> {
        match self {
            MdError::BadField { field, .. } | MdError::BadText { field } => Some(field),
            _ => None,
        }
    }
}

impl fmt::Display for MdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MdError::Truncated { needed, available } => write!(
                f,
                "message truncated: needs {needed} bytes, {available} available"
            ),
            MdError::BadLength { length, reason } => write!(f, "bad length {length}: {reason}"),
            MdError::UnknownType(t) => write!(f, "unknown message type 0x{t:02x}"),
            MdError::WrongType { expected, found } => write!(
                f,
                "message type 0x{found:02x} where 0x{expected:02x} was expected"
            ),
            MdError::BadField { field, value } => write!(
                f,
                "field {field} has invalid value {value} (see docs/market-data.md)"
            ),
            MdError::BadText { field } => write!(
                f,
                "field {field} breaks its alphabet or is not UTF-8 (see docs/market-data.md)"
            ),
            MdError::BadMagic(m) => write!(
                f,
                "LOGIN magic 0x{m:08x} is not \"PGMD\": not a Peregrine market data client"
            ),
            MdError::UnsupportedVersion(v) => write!(
                f,
                "protocol version {v} is not supported (this build speaks versions {} to {})",
                super::MIN_VERSION,
                super::VERSION
            ),
        }
    }
}

impl std::error::Error for MdError {}
