//! The one error type of the wire layer: why a byte buffer is not a valid frame.

use core::fmt;

/// Why a buffer was rejected. Every decoder returns one of these instead of panicking; the
/// receiving side counts them per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer is shorter than the fixed part of the frame or than its `frame_length`.
    Truncated { needed: usize, available: usize },
    /// The magic number is not `0x4750` ("PG").
    BadMagic(u16),
    /// A protocol version this implementation does not speak.
    UnsupportedVersion(u8),
    /// A frame type this implementation does not know.
    UnknownFrameType(u8),
    /// The frame has a different type from the one the caller asked to decode.
    WrongFrameType { expected: u8, found: u8 },
    /// `frame_length` is smaller than the frame's fixed part or inconsistent with its contents.
    BadLength {
        frame_length: u32,
        reason: &'static str,
    },
    /// A field that must be zero (reserved) or within a range is not; flags outside those the
    /// frame type defines are reported here too.
    BadField { field: &'static str, value: u64 },
    /// A text field (topic, URI, pattern) is not valid UTF-8 or contains a NUL byte. (An empty or
    /// over-long text is a [`BadField`](Self::BadField) on its length field.)
    BadText { field: &'static str },
}

impl WireError {
    /// How many kinds of error there are: [`index`](Self::index) is below this.
    pub const KINDS: usize = 8;

    /// The variant's names, indexed by [`index`](Self::index). Stable: they name the errors in
    /// `docs/golden/frames.json` and in counter dumps.
    pub const NAMES: [&'static str; Self::KINDS] = [
        "Truncated",
        "BadMagic",
        "UnsupportedVersion",
        "UnknownFrameType",
        "WrongFrameType",
        "BadLength",
        "BadField",
        "BadText",
    ];

    /// A stable small index per variant, for an array of rejection counters.
    pub const fn index(&self) -> usize {
        match self {
            WireError::Truncated { .. } => 0,
            WireError::BadMagic(_) => 1,
            WireError::UnsupportedVersion(_) => 2,
            WireError::UnknownFrameType(_) => 3,
            WireError::WrongFrameType { .. } => 4,
            WireError::BadLength { .. } => 5,
            WireError::BadField { .. } => 6,
            WireError::BadText { .. } => 7,
        }
    }

    /// The variant's name, e.g. `"BadMagic"`.
    pub const fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// The field a [`BadField`](Self::BadField) or [`BadText`](Self::BadText) error is about,
    /// e.g. `"nak.range_count"`.
    pub const fn field(&self) -> Option<&'static str> {
        match self {
            WireError::BadField { field, .. } | WireError::BadText { field } => Some(field),
            _ => None,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated { needed, available } => {
                write!(
                    f,
                    "frame truncated: needs {needed} bytes, {available} available"
                )
            }
            WireError::BadMagic(m) => write!(f, "bad magic 0x{m:04x} (expected 0x4750)"),
            WireError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "unsupported protocol version {v} (this build speaks version {})",
                    crate::VERSION
                )
            }
            WireError::UnknownFrameType(t) => write!(f, "unknown frame type 0x{t:02x}"),
            WireError::WrongFrameType { expected, found } => {
                write!(
                    f,
                    "frame type 0x{found:02x} where 0x{expected:02x} was expected"
                )
            }
            WireError::BadLength {
                frame_length,
                reason,
            } => {
                write!(f, "bad frame_length {frame_length}: {reason}")
            }
            WireError::BadField { field, value } => {
                write!(
                    f,
                    "field {field} has invalid value {value} (see docs/protocol.md)"
                )
            }
            WireError::BadText { field } => {
                write!(
                    f,
                    "field {field} is not valid UTF-8 text or contains a NUL byte"
                )
            }
        }
    }
}

impl core::error::Error for WireError {}
