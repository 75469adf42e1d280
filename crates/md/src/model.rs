//! The market data model (docs/market-data.md, "Data model"): services, items, fields and their
//! typed values, item states, and the rules every name follows.
//!
//! These rules are shared by the codec (which rejects a message breaking them), the users file
//! (whose item patterns and services follow them) and the distributor.

use core::fmt;

/// Longest service name, in bytes.
pub const MAX_SERVICE_LEN: usize = 64;
/// Longest item name (or item pattern), in bytes.
pub const MAX_ITEM_NAME_LEN: usize = 128;
/// Longest user name, in bytes.
pub const MAX_USER_LEN: usize = 64;
/// Longest `string` field value, in bytes.
pub const MAX_STRING_LEN: usize = 255;
/// Field ids are 1 to this (the high bit of the u16 is reserved).
pub const MAX_FID: u16 = 32767;
/// Smallest decimal exponent of a price.
pub const MIN_EXPONENT: i8 = -12;
/// Largest decimal exponent of a price.
pub const MAX_EXPONENT: i8 = 6;

/// Why a name was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than `max` bytes.
    TooLong { len: usize, max: usize },
    /// A byte outside the name's alphabet.
    BadByte(u8),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NameError::Empty => write!(f, "is empty"),
            NameError::TooLong { len, max } => write!(f, "is {len} bytes long (at most {max})"),
            NameError::BadByte(b) if b.is_ascii_graphic() || b == b' ' => {
                write!(f, "holds the character '{}'", b as char)
            }
            NameError::BadByte(b) => write!(f, "holds the byte 0x{b:02x}"),
        }
    }
}

fn check_name(bytes: &[u8], max: usize, ok: impl Fn(u8) -> bool) -> Result<&str, NameError> {
    if bytes.is_empty() {
        return Err(NameError::Empty);
    }
    if bytes.len() > max {
        return Err(NameError::TooLong {
            len: bytes.len(),
            max,
        });
    }
    if let Some(&b) = bytes.iter().find(|&&b| !ok(b)) {
        return Err(NameError::BadByte(b));
    }
    // Every accepted byte is ASCII, so this cannot fail; no unwrap on a decoder's path.
    core::str::from_utf8(bytes).map_err(|_| NameError::BadByte(bytes[0]))
}

fn service_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn item_byte(b: u8) -> bool {
    b.is_ascii_graphic() && b != b'*' && b != b'?'
}

/// What a service name accepts, for error messages.
pub const SERVICE_ALPHABET: &str = "1 to 64 bytes of A-Z a-z 0-9 . _ -";
/// What an item name accepts, for error messages.
pub const ITEM_ALPHABET: &str = "1 to 128 bytes of printable ASCII without space, '*' or '?'";
/// What an item pattern accepts, for error messages.
pub const PATTERN_ALPHABET: &str =
    "1 to 128 bytes of printable ASCII without space ('*' and '?' make it a glob)";
/// What a user name accepts, for error messages.
pub const USER_ALPHABET: &str = "1 to 64 bytes of A-Z a-z 0-9 . _ -";

/// A service name: 1 to 64 bytes of `A-Z a-z 0-9 . _ -`.
pub fn check_service(bytes: &[u8]) -> Result<&str, NameError> {
    check_name(bytes, MAX_SERVICE_LEN, service_byte)
}

/// An item name: 1 to 128 bytes of printable ASCII without space, `*` or `?`.
pub fn check_item_name(bytes: &[u8]) -> Result<&str, NameError> {
    check_name(bytes, MAX_ITEM_NAME_LEN, item_byte)
}

/// An item pattern (an OPEN's names, the users file's `items`): an item name, or a glob where
/// `*` stands for any run of characters and `?` for one.
pub fn check_item_pattern(bytes: &[u8]) -> Result<&str, NameError> {
    check_name(bytes, MAX_ITEM_NAME_LEN, |b| b.is_ascii_graphic())
}

/// A user name: 1 to 64 bytes of `A-Z a-z 0-9 . _ -`.
pub fn check_user(bytes: &[u8]) -> Result<&str, NameError> {
    check_name(bytes, MAX_USER_LEN, service_byte)
}

/// True if `pattern` holds a glob character.
pub fn is_glob(pattern: &str) -> bool {
    pattern.bytes().any(|b| b == b'*' || b == b'?')
}

/// A fixed-point decimal: `mantissa × 10^exponent`, so 189.21 is `Price { mantissa: 18921,
/// exponent: -2 }`. The exponent is -12 to 6 on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Price {
    pub mantissa: i64,
    pub exponent: i8,
}

impl fmt::Display for Price {
    /// Plain decimal notation, every digit the mantissa holds: `189.21`, `-0.005`, `5000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.mantissa.unsigned_abs();
        let sign = if self.mantissa < 0 { "-" } else { "" };
        if self.exponent >= 0 {
            write!(f, "{sign}{digits}")?;
            for _ in 0..self.exponent {
                f.write_str("0")?;
            }
            return Ok(());
        }
        let scale = u32::from(self.exponent.unsigned_abs());
        // 10^12 fits easily; a larger negative exponent is invalid on the wire but printed all
        // the same rather than panicking.
        let Some(div) = 10u64.checked_pow(scale) else {
            return write!(f, "{sign}{digits}e{}", self.exponent);
        };
        write!(
            f,
            "{sign}{}.{:0width$}",
            digits / div,
            digits % div,
            width = scale as usize
        )
    }
}

impl Price {
    /// A plain decimal (`189.21`, `-0.005`, `5000`, `+1.5`) exactly: the digits become the
    /// mantissa and the places after the point the (negative) exponent, trailing zeros kept
    /// (`1.50` is 150e-2). `None` for anything else, or a value the wire cannot carry (more
    /// than 12 places, a mantissa past i64).
    pub fn parse_decimal(text: &str) -> Option<Price> {
        let (neg, digits) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
            || frac.len() > usize::from(MIN_EXPONENT.unsigned_abs())
        {
            return None;
        }
        let mut m: i64 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            m = m.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
        }
        Some(Price {
            mantissa: if neg { -m } else { m },
            exponent: -(frac.len() as i8),
        })
    }
}

/// The value of one field. The kinds and their encodings are in `codec::fields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value<'a> {
    /// A signed integer (sizes, volumes, counts).
    Int(i64),
    /// A fixed-point decimal.
    Price(Price),
    /// Nanoseconds since the Unix epoch.
    TimeNs(u64),
    /// An enumerated code; the dictionary may name its values.
    Enum(u16),
    /// 0 to 255 bytes of UTF-8.
    Str(&'a str),
}

/// A field value that owns its string: what a parsed text (a tick file, a binding's input)
/// holds. [`as_value`](Self::as_value) lends it as a [`Value`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OwnedValue {
    Int(i64),
    Price(Price),
    TimeNs(u64),
    Enum(u16),
    Str(String),
}

impl OwnedValue {
    pub fn as_value(&self) -> Value<'_> {
        match self {
            OwnedValue::Int(v) => Value::Int(*v),
            OwnedValue::Price(p) => Value::Price(*p),
            OwnedValue::TimeNs(t) => Value::TimeNs(*t),
            OwnedValue::Enum(e) => Value::Enum(*e),
            OwnedValue::Str(s) => Value::Str(s),
        }
    }
}

/// The kind of a field value: its type in the dictionary and its `kind` byte on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Int = 1,
    Price = 2,
    Time = 3,
    Enum = 4,
    String = 5,
}

impl Kind {
    /// Every kind, in wire order.
    pub const ALL: [Kind; 5] = [Kind::Int, Kind::Price, Kind::Time, Kind::Enum, Kind::String];

    /// The name used by the dictionary file: `int`, `price`, `time`, `enum`, `string`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Price => "price",
            Kind::Time => "time",
            Kind::Enum => "enum",
            Kind::String => "string",
        }
    }

    /// The kind of a wire `kind` byte.
    pub const fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Int,
            2 => Kind::Price,
            3 => Kind::Time,
            4 => Kind::Enum,
            5 => Kind::String,
            _ => return None,
        })
    }
}

impl Value<'_> {
    /// A price `mantissa × 10^exponent`: `Value::price(18921, -2)` is 189.21.
    pub const fn price(mantissa: i64, exponent: i8) -> Value<'static> {
        Value::Price(Price { mantissa, exponent })
    }

    pub const fn kind(&self) -> Kind {
        match self {
            Value::Int(_) => Kind::Int,
            Value::Price(_) => Kind::Price,
            Value::TimeNs(_) => Kind::Time,
            Value::Enum(_) => Kind::Enum,
            Value::Str(_) => Kind::String,
        }
    }
}

/// One field: its id (1 to 32767; the dictionary names it) and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field<'a> {
    pub fid: u16,
    pub value: Value<'a>,
}

impl<'a> Field<'a> {
    pub const fn new(fid: u16, value: Value<'a>) -> Self {
        Field { fid, value }
    }
}

/// The state of an item's stream, as STATUS carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ItemState {
    /// The image is current.
    Ok = 0,
    /// The image can no longer be trusted; a REFRESH will bring it back.
    Stale = 1,
    /// The feed closed the item.
    Closed = 2,
    /// The user may not see this item or service.
    NotEntitled = 3,
    /// The service does not carry this item (yet).
    NotFound = 4,
    /// A request (or, with request id 0, the connection's last message) was refused; the text
    /// says why.
    Rejected = 5,
}

impl ItemState {
    pub const ALL: [ItemState; 6] = [
        ItemState::Ok,
        ItemState::Stale,
        ItemState::Closed,
        ItemState::NotEntitled,
        ItemState::NotFound,
        ItemState::Rejected,
    ];

    pub const fn from_u8(b: u8) -> Option<ItemState> {
        Some(match b {
            0 => ItemState::Ok,
            1 => ItemState::Stale,
            2 => ItemState::Closed,
            3 => ItemState::NotEntitled,
            4 => ItemState::NotFound,
            5 => ItemState::Rejected,
            _ => return None,
        })
    }

    /// The name in docs/market-data.md and docs/golden/md.json: `ok`, `stale`, ...
    pub const fn name(self) -> &'static str {
        match self {
            ItemState::Ok => "ok",
            ItemState::Stale => "stale",
            ItemState::Closed => "closed",
            ItemState::NotEntitled => "not-entitled",
            ItemState::NotFound => "not-found",
            ItemState::Rejected => "rejected",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_prints_plain_decimals() {
        let p = |mantissa, exponent| Price { mantissa, exponent }.to_string();
        assert_eq!(p(18921, -2), "189.21");
        assert_eq!(p(-5, -3), "-0.005");
        assert_eq!(p(5, 3), "5000");
        assert_eq!(p(0, -2), "0.00");
        assert_eq!(p(i64::MIN, -12), "-9223372.036854775808");
        assert_eq!(p(7, 0), "7");
    }

    #[test]
    fn names_follow_their_alphabets() {
        assert_eq!(check_service(b"FEED1"), Ok("FEED1"));
        assert_eq!(check_service(b"FEED 1"), Err(NameError::BadByte(b' ')));
        assert_eq!(check_service(b""), Err(NameError::Empty));
        assert_eq!(check_item_name(b"EUR="), Ok("EUR="));
        assert_eq!(check_item_name(b"AAA.*"), Err(NameError::BadByte(b'*')));
        assert_eq!(check_item_pattern(b"AAA.*"), Ok("AAA.*"));
        assert_eq!(
            check_item_name(&[b'A'; 129]),
            Err(NameError::TooLong { len: 129, max: 128 })
        );
        assert_eq!(check_user(b"alice"), Ok("alice"));
        assert!(is_glob("A?C") && !is_glob("ABC"));
    }
}
