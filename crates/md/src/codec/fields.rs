//! Field lists: the body of REFRESH and UPDATE.
//!
//! ```text
//!  0       2       3       4
//! +-------+-------+-------+---------------------+
//! |  fid  | kind  |  aux  | value               |
//! +-------+-------+-------+---------------------+
//! ```
//!
//! | kind | value | aux |
//! | --- | --- | --- |
//! | 1 `int` | i64, 8 bytes | 0 |
//! | 2 `price` | i64 mantissa, 8 bytes | decimal exponent as i8, -12 to 6 |
//! | 3 `time` | u64 ns since the epoch, 8 bytes | 0 |
//! | 4 `enum` | u16, 2 bytes | 0 |
//! | 5 `string` | `aux` bytes of UTF-8 | length, 0 to 255 |
//!
//! A list is valid when its `count` fields exactly fill the rest of the message, every fid is 1
//! to 32767, every kind is known, every `aux` is in range, strings are UTF-8, and no fid
//! appears twice. So an int, price or time field is 12 bytes, an enum 6, a string 4 + length.

use super::MdError;
use crate::model::{
    Field, Kind, Price, Value, MAX_EXPONENT, MAX_FID, MAX_STRING_LEN, MIN_EXPONENT,
};

/// Bytes before a field's value: fid (u16), kind, aux.
pub const FIELD_HEADER_LEN: usize = 4;

/// A validated field list as it lies in a message: `count` fields in `bytes`. Only the codec
/// makes one, after [`check_fields`], so iterating it cannot fail.
#[derive(Debug, Clone, Copy)]
pub struct WireFields<'a> {
    count: u16,
    bytes: &'a [u8],
}

impl<'a> WireFields<'a> {
    /// Checks `count` fields that exactly fill `bytes`. `length` is the message's, for errors.
    pub fn new(count: u16, bytes: &'a [u8], length: u16) -> Result<Self, MdError> {
        check_fields(count, bytes, length)?;
        Ok(WireFields { count, bytes })
    }

    /// Fields this crate encoded itself (or checked before): not checked again. Iterating a
    /// list that is not valid stops early rather than panicking.
    pub(crate) fn trusted(count: u16, bytes: &'a [u8]) -> Self {
        WireFields { count, bytes }
    }
    pub fn count(&self) -> u16 {
        self.count
    }
    /// The encoded fields.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Each field's id and its whole encoding (header and value), in order.
    pub fn raw(&self) -> RawFields<'a> {
        RawFields { rest: self.bytes }
    }
}

/// The fields of a REFRESH or UPDATE: either as they lie in a parsed message, or a slice a
/// sender built. Two lists are equal when they hold the same fields in the same order.
#[derive(Debug, Clone, Copy)]
pub enum FieldList<'a> {
    Wire(WireFields<'a>),
    List(&'a [Field<'a>]),
}

impl<'a> FieldList<'a> {
    pub fn count(&self) -> usize {
        match self {
            FieldList::Wire(w) => w.count.into(),
            FieldList::List(l) => l.len(),
        }
    }

    pub fn iter(&self) -> FieldIter<'a> {
        match *self {
            FieldList::Wire(w) => FieldIter::Wire(w.raw()),
            FieldList::List(l) => FieldIter::List(l.iter()),
        }
    }

    /// The first field with id `fid`.
    pub fn get(&self, fid: u16) -> Option<Value<'a>> {
        self.iter().find(|f| f.fid == fid).map(|f| f.value)
    }

    /// The fields whose ids `view` holds, in their order, gathered into `list` (emptied
    /// first): what a stream with that view is handed of a message cut to a wider one.
    pub fn cut_to<'l>(&self, view: &[u16], list: &'l mut Vec<Field<'a>>) -> FieldList<'l>
    where
        'a: 'l,
    {
        list.clear();
        list.extend(self.iter().filter(|f| view.contains(&f.fid)));
        FieldList::List(list)
    }

    /// Bytes the fields take when encoded.
    pub fn encoded_len(&self) -> usize {
        match self {
            FieldList::Wire(w) => w.bytes.len(),
            FieldList::List(l) => l.iter().map(|f| encoded_len(&f.value)).sum(),
        }
    }

    /// Checks the fields as a receiver would: at most 65 535 of them, fids 1 to 32767 and
    /// distinct, exponents -12 to 6, strings at most 255 bytes. `emit` writes whatever it is
    /// given, so a sender checks untrusted fields first.
    pub fn check(&self) -> Result<(), MdError> {
        let FieldList::List(list) = self else {
            return Ok(()); // checked when parsed
        };
        if list.len() > usize::from(u16::MAX) {
            return Err(MdError::BadField {
                field: "field_count",
                value: list.len() as u64,
            });
        }
        let mut seen = FidSet::new(list.len());
        for f in list.iter() {
            check_fid(f.fid)?;
            match f.value {
                Value::Price(p) if !(MIN_EXPONENT..=MAX_EXPONENT).contains(&p.exponent) => {
                    return Err(MdError::BadField {
                        field: "field.exponent",
                        value: u64::from(p.exponent as u8),
                    })
                }
                Value::Str(s) => super::check_len_u8("field.string_len", s.len(), MAX_STRING_LEN)?,
                _ => {}
            }
            if !seen.insert(f.fid) {
                return Err(MdError::BadField {
                    field: "field.fid_repeated",
                    value: f.fid.into(),
                });
            }
        }
        Ok(())
    }

    /// Writes the fields at the start of `buffer`; returns the bytes written.
    ///
    /// # Panics
    /// If `buffer` is shorter than [`encoded_len`](Self::encoded_len) or a string is longer
    /// than 255 bytes.
    pub fn emit(&self, buffer: &mut [u8]) -> usize {
        match self {
            FieldList::Wire(w) => {
                buffer[..w.bytes.len()].copy_from_slice(w.bytes);
                w.bytes.len()
            }
            FieldList::List(l) => l
                .iter()
                .fold(0, |at, f| at + emit_field(f, &mut buffer[at..])),
        }
    }
}

impl PartialEq for FieldList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.count() == other.count() && self.iter().eq(other.iter())
    }
}
impl Eq for FieldList<'_> {}

/// Bytes one field takes when encoded.
pub const fn encoded_len(value: &Value<'_>) -> usize {
    FIELD_HEADER_LEN
        + match value {
            Value::Int(_) | Value::Price(_) | Value::TimeNs(_) => 8,
            Value::Enum(_) => 2,
            Value::Str(s) => s.len(),
        }
}

/// Writes one field; returns its length.
///
/// # Panics
/// If `buffer` is too short or a string is longer than 255 bytes.
pub fn emit_field(field: &Field<'_>, buffer: &mut [u8]) -> usize {
    let (aux, len) = match field.value {
        Value::Price(p) => (p.exponent as u8, 8),
        Value::Str(s) => (
            u8::try_from(s.len()).expect("a string field is at most 255 bytes"),
            s.len(),
        ),
        Value::Enum(_) => (0, 2),
        Value::Int(_) | Value::TimeNs(_) => (0, 8),
    };
    buffer[0..2].copy_from_slice(&field.fid.to_le_bytes());
    buffer[2] = field.value.kind() as u8;
    buffer[3] = aux;
    let v = &mut buffer[FIELD_HEADER_LEN..FIELD_HEADER_LEN + len];
    match field.value {
        Value::Int(i) => v.copy_from_slice(&i.to_le_bytes()),
        Value::Price(p) => v.copy_from_slice(&p.mantissa.to_le_bytes()),
        Value::TimeNs(t) => v.copy_from_slice(&t.to_le_bytes()),
        Value::Enum(e) => v.copy_from_slice(&e.to_le_bytes()),
        Value::Str(s) => v.copy_from_slice(s.as_bytes()),
    }
    FIELD_HEADER_LEN + len
}

/// Iterates the fields of a [`FieldList`].
#[derive(Debug, Clone)]
pub enum FieldIter<'a> {
    Wire(RawFields<'a>),
    List(core::slice::Iter<'a, Field<'a>>),
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = Field<'a>;
    fn next(&mut self) -> Option<Field<'a>> {
        match self {
            FieldIter::Wire(raw) => raw.next().and_then(|(_, b)| decode_field(b)),
            FieldIter::List(l) => l.next().copied(),
        }
    }
}

/// Each field's id and whole encoding. Stops (rather than panics) at bytes that are not a
/// field, though a [`WireFields`] never holds such bytes.
#[derive(Debug, Clone)]
pub struct RawFields<'a> {
    rest: &'a [u8],
}

impl<'a> RawFields<'a> {
    /// Raw fields of bytes that [`check_fields`] accepted.
    pub fn new(bytes: &'a [u8]) -> Self {
        RawFields { rest: bytes }
    }
}

impl<'a> Iterator for RawFields<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<(u16, &'a [u8])> {
        let len = field_len(self.rest).ok()?;
        let (field, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        Some((u16::from_le_bytes([field[0], field[1]]), field))
    }
}

/// The whole length of the field at the start of `b` from its header, or why it has none.
fn field_len(b: &[u8]) -> Result<usize, &'static str> {
    let [_, _, kind, aux, ..] = *b else {
        return Err("a field header runs past the end of the message");
    };
    let value = match Kind::from_u8(kind) {
        Some(Kind::Int | Kind::Price | Kind::Time) => 8,
        Some(Kind::Enum) => 2,
        Some(Kind::String) => usize::from(aux),
        None => return Err("unknown kind"),
    };
    Ok(FIELD_HEADER_LEN + value)
}

/// Decodes one whole field (as [`RawFields`] yields it).
fn decode_field(b: &[u8]) -> Option<Field<'_>> {
    let fid = u16::from_le_bytes([*b.first()?, *b.get(1)?]);
    let kind = Kind::from_u8(*b.get(2)?)?;
    let aux = *b.get(3)?;
    let v = b.get(FIELD_HEADER_LEN..)?;
    let eight = || -> Option<[u8; 8]> { v.get(..8)?.try_into().ok() };
    let value = match kind {
        Kind::Int => Value::Int(i64::from_le_bytes(eight()?)),
        Kind::Price => Value::Price(Price {
            mantissa: i64::from_le_bytes(eight()?),
            exponent: aux as i8,
        }),
        Kind::Time => Value::TimeNs(u64::from_le_bytes(eight()?)),
        Kind::Enum => Value::Enum(u16::from_le_bytes(v.get(..2)?.try_into().ok()?)),
        Kind::String => Value::Str(core::str::from_utf8(v.get(..usize::from(aux))?).ok()?),
    };
    Some(Field { fid, value })
}

fn check_fid(fid: u16) -> Result<(), MdError> {
    if fid == 0 || fid > MAX_FID {
        return Err(MdError::BadField {
            field: "field.fid",
            value: fid.into(),
        });
    }
    Ok(())
}

/// Checks `count` fields that exactly fill `bytes`, in this order per field: the header fits,
/// the fid, the kind, `aux`, the value fits, a string is UTF-8, the fid is new; then that no
/// byte follows the last field.
pub fn check_fields(count: u16, bytes: &[u8], length: u16) -> Result<(), MdError> {
    let mut rest = bytes;
    let mut seen = FidSet::new(count.into());
    let overrun = MdError::BadLength {
        length,
        reason: "the fields run past the end of the message",
    };
    for _ in 0..count {
        let [f0, f1, kind, aux, ..] = *rest else {
            return Err(overrun);
        };
        let fid = u16::from_le_bytes([f0, f1]);
        check_fid(fid)?;
        let bad_aux = |field| MdError::BadField {
            field,
            value: aux.into(),
        };
        match Kind::from_u8(kind) {
            None => {
                return Err(MdError::BadField {
                    field: "field.kind",
                    value: kind.into(),
                })
            }
            Some(Kind::Price) => {
                if !(MIN_EXPONENT..=MAX_EXPONENT).contains(&(aux as i8)) {
                    return Err(bad_aux("field.exponent"));
                }
            }
            Some(Kind::String) => {}
            Some(_) if aux != 0 => return Err(bad_aux("field.aux")),
            Some(_) => {}
        }
        let len = field_len(rest).map_err(|_| overrun)?;
        let Some((field, tail)) = rest.split_at_checked(len) else {
            return Err(overrun);
        };
        if kind == Kind::String as u8 {
            super::check_utf8("field.string", &field[FIELD_HEADER_LEN..])?;
        }
        if !seen.insert(fid) {
            return Err(MdError::BadField {
                field: "field.fid_repeated",
                value: fid.into(),
            });
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(MdError::BadLength {
            length,
            reason: "bytes follow the last field",
        });
    }
    Ok(())
}

/// The fids seen so far in one list, without allocating: a short list (the usual update) is
/// compared pairwise, a long one marks a 32768-bit set, so a hostile list of thousands of
/// fields costs linear time.
#[allow(clippy::large_enum_variant)] // 4 KiB on the stack: parsing does not allocate
enum FidSet {
    Few { fids: [u16; 32], len: usize },
    Many([u64; 512]),
}

impl FidSet {
    fn new(count: usize) -> Self {
        if count <= 32 {
            FidSet::Few {
                fids: [0; 32],
                len: 0,
            }
        } else {
            FidSet::Many([0; 512])
        }
    }

    /// False if `fid` was there already.
    fn insert(&mut self, fid: u16) -> bool {
        match self {
            FidSet::Few { fids, len } => {
                if fids[..*len].contains(&fid) {
                    return false;
                }
                if let Some(slot) = fids.get_mut(*len) {
                    *slot = fid;
                    *len += 1;
                    true
                } else {
                    // More fields than announced cannot happen (the caller sized the set);
                    // refusing is the safe answer.
                    false
                }
            }
            FidSet::Many(bits) => {
                let (word, bit) = (usize::from(fid / 64) % 512, fid % 64);
                let had = bits[word] & (1 << bit) != 0;
                bits[word] |= 1 << bit;
                !had
            }
        }
    }
}

/// Merges an UPDATE's fields into an image (the encoded field list of a REFRESH, `field_count`
/// fields): each field of the update replaces the image's field of the same id, in place when
/// both have the same encoded length (the usual price tick), and fields the image lacks are
/// appended. False if the result would exceed `max_image` bytes or 65 535 fields (the image is
/// then unchanged). Shared by the distributor's cache and the provider's images.
pub fn merge_fields(
    image: &mut Vec<u8>,
    field_count: &mut u16,
    update: WireFields<'_>,
    scratch: &mut Vec<u8>,
    max_image: usize,
) -> bool {
    let find = |image: &[u8], fid: u16| -> Option<(usize, usize)> {
        let mut at = 0;
        for (f, raw) in RawFields::new(image) {
            if f == fid {
                return Some((at, raw.len()));
            }
            at += raw.len();
        }
        None
    };
    // The usual tick: the update's fields are some of the image's, in the image's order, each
    // with the same encoded length. One pass over the image replaces them in place.
    {
        let mut next = update.raw().peekable();
        let mut at = 0;
        let mut spans: [(usize, usize); 16] = [(0, 0); 16];
        let mut n = 0;
        for (fid, raw) in RawFields::new(image) {
            match next.peek() {
                Some(&(f, new)) if f == fid => {
                    if new.len() != raw.len() || n == spans.len() {
                        break;
                    }
                    spans[n] = (at, new.len());
                    n += 1;
                    next.next();
                }
                Some(_) => {}
                None => break,
            }
            at += raw.len();
        }
        if next.peek().is_none() {
            for ((at, len), (_, new)) in spans[..n].iter().zip(update.raw()) {
                image[*at..*at + *len].copy_from_slice(new);
            }
            return true;
        }
    }
    let in_place = update
        .raw()
        .all(|(fid, raw)| find(image, fid).is_some_and(|(_, len)| len == raw.len()));
    if in_place {
        for (fid, raw) in update.raw() {
            if let Some((at, len)) = find(image, fid) {
                image[at..at + len].copy_from_slice(raw);
            }
        }
        return true;
    }
    scratch.clear();
    let mut count = 0usize;
    for (fid, raw) in RawFields::new(image) {
        let new = update
            .raw()
            .find(|&(f, _)| f == fid)
            .map_or(raw, |(_, r)| r);
        scratch.extend_from_slice(new);
        count += 1;
    }
    for (fid, raw) in update.raw() {
        if find(image, fid).is_none() {
            scratch.extend_from_slice(raw);
            count += 1;
        }
    }
    if scratch.len() > max_image || count > usize::from(u16::MAX) {
        return false;
    }
    core::mem::swap(image, scratch);
    *field_count = count as u16;
    true
}
