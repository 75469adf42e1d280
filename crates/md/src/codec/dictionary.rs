//! DICTIONARY_REQUEST (0x1A) and DICTIONARY (0x1B): a client asks for the distributor's field
//! dictionary and gets it in one or more parts (version 2).
//!
//! ```text
//! DICTIONARY_REQUEST
//!  0  header (item_id 0; flags: none defined): 8 bytes, nothing else
//!
//! DICTIONARY
//!  0  header (item_id 0; flags: 0x01 COMPLETE: the last part)
//!  8  u16 part           0 for the first part, then 1, 2, ...
//! 10  u16 count          fields in this part (0 only in the one part of an empty dictionary)
//! 12  `count` entries, fids increasing, exactly to `length`, each:
//!       u16 fid           1 to 32767
//!       u8  type          1 int, 2 price, 3 time, 4 enum, 5 string (as a field's kind)
//!       u8  name_len      1 to 32
//!       name bytes        A-Z 0-9 _
//!       u16 value_count   names of enum codes (0 but for enums)
//!       value_count values, codes increasing, each:
//!         u16 code
//!         u8  label_len   1 to 255
//!         label bytes     UTF-8
//! ```
//!
//! The parts follow each other with nothing between them; a dictionary is complete at the part
//! flagged COMPLETE. A part holds as many whole entries as fit in 64 KiB.

use super::header::{check_fixed, check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u16, write_u16, MdError, HEADER_LEN, MAX_MESSAGE_LEN};
use crate::model::{Kind, MAX_FID};
use std::collections::BTreeMap;

/// Field ranges of DICTIONARY after the header.
pub mod field {
    use crate::codec::Range;
    pub const PART: Range = 8..10;
    pub const COUNT: Range = 10..12;
    /// Start of the entries.
    pub const ENTRIES: usize = 12;
}

/// The flags of DICTIONARY.
pub mod dictionary_flags {
    /// The last part.
    pub const COMPLETE: u8 = 0x01;
}

/// Length of the fixed part of a DICTIONARY.
pub const DICTIONARY_HEADER_LEN: usize = field::ENTRIES;
/// Length of a DICTIONARY_REQUEST.
pub const DICTIONARY_REQUEST_LEN: usize = HEADER_LEN;
/// The longest entry a DICTIONARY can carry: one part of one field.
pub const MAX_ENTRY_LEN: usize = MAX_MESSAGE_LEN - DICTIONARY_HEADER_LEN;
/// Longest field name, in bytes.
pub const MAX_NAME_LEN: usize = 32;

const REQUEST_RULES: TypeRules = TypeRules {
    ty: MessageType::DictionaryRequest,
    fixed_len: DICTIONARY_REQUEST_LEN,
    flags: 0,
    item_id: ItemIdRule::Zero,
    flags_field: "dictionary_request.flags",
    item_id_field: "dictionary_request.item_id",
};

const RULES: TypeRules = TypeRules {
    ty: MessageType::Dictionary,
    fixed_len: DICTIONARY_HEADER_LEN,
    flags: dictionary_flags::COMPLETE,
    item_id: ItemIdRule::Zero,
    flags_field: "dictionary.flags",
    item_id_field: "dictionary.item_id",
};

/// A checked view of a DICTIONARY_REQUEST.
#[derive(Debug, Clone, Copy)]
pub struct DictionaryRequestView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DictionaryRequestView<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        DictionaryRequestView { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = DictionaryRequestView { buffer };
        v.check()?;
        Ok(v)
    }
    /// Checks the header, type DICTIONARY_REQUEST, `length == 8`, flags 0, `item_id` 0.
    pub fn check(&self) -> Result<(), MdError> {
        check_fixed(self.buffer.as_ref(), &REQUEST_RULES)
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The parsed form of a DICTIONARY_REQUEST (it has no field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DictionaryRequestRepr;

impl DictionaryRequestRepr {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        view: &DictionaryRequestView<&T>,
    ) -> Result<Self, MdError> {
        view.check()?;
        Ok(DictionaryRequestRepr)
    }
    /// Bytes `emit` writes: 8.
    pub const fn buffer_len(&self) -> usize {
        DICTIONARY_REQUEST_LEN
    }
    /// # Panics
    /// If the buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut DictionaryRequestView<T>) {
        emit_header(
            view.buffer.as_mut(),
            MessageType::DictionaryRequest,
            0,
            0,
            DICTIONARY_REQUEST_LEN,
        );
    }
}

/// The names of an enum field's codes: as they lie in a message, or a dictionary's.
#[derive(Debug, Clone, Copy)]
pub enum EnumValues<'a> {
    /// `count` checked values (only the codec makes one).
    Wire {
        count: u16,
        bytes: &'a [u8],
    },
    Map(&'a BTreeMap<u16, String>),
}

impl<'a> EnumValues<'a> {
    pub fn len(&self) -> usize {
        match self {
            EnumValues::Wire { count, .. } => usize::from(*count),
            EnumValues::Map(m) => m.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Each code and its name, codes increasing.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &'a str)> + 'a {
        let (mut rest, map) = match *self {
            EnumValues::Wire { bytes, .. } => (bytes, None),
            EnumValues::Map(m) => (&[][..], Some(m)),
        };
        let wire = std::iter::from_fn(move || {
            let (code, label, tail) = value(rest).ok()?;
            rest = tail;
            Some((code, label))
        });
        wire.chain(
            map.into_iter()
                .flat_map(|m| m.iter().map(|(c, l)| (*c, l.as_str()))),
        )
    }
    fn encoded_len(&self) -> usize {
        match self {
            EnumValues::Wire { bytes, .. } => bytes.len(),
            EnumValues::Map(m) => m.values().map(|l| 3 + l.len()).sum(),
        }
    }
}

impl PartialEq for EnumValues<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for EnumValues<'_> {}

/// One field of a DICTIONARY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictEntry<'a> {
    pub fid: u16,
    pub kind: Kind,
    pub name: &'a str,
    pub values: EnumValues<'a>,
}

impl<'a> DictEntry<'a> {
    /// Bytes this entry takes in a DICTIONARY.
    pub fn encoded_len(&self) -> usize {
        6 + self.name.len() + self.values.encoded_len()
    }
}

/// The entries of a DICTIONARY: as they lie in a parsed message, or a list a sender built.
#[derive(Debug, Clone, Copy)]
pub enum DefList<'a> {
    /// `count` checked entries (only the codec makes one).
    Wire {
        count: u16,
        bytes: &'a [u8],
    },
    List(&'a [DictEntry<'a>]),
}

impl<'a> DefList<'a> {
    pub fn len(&self) -> usize {
        match self {
            DefList::Wire { count, .. } => usize::from(*count),
            DefList::List(l) => l.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = DictEntry<'a>> + 'a {
        let (mut rest, list): (&'a [u8], &'a [DictEntry<'a>]) = match *self {
            DefList::Wire { bytes, .. } => (bytes, &[]),
            DefList::List(l) => (&[], l),
        };
        let wire = std::iter::from_fn(move || {
            let (e, tail) = entry(rest).ok()?;
            rest = tail;
            Some(e)
        });
        wire.chain(list.iter().copied())
    }
    fn encoded_len(&self) -> usize {
        match self {
            DefList::Wire { bytes, .. } => bytes.len(),
            DefList::List(l) => l.iter().map(DictEntry::encoded_len).sum(),
        }
    }
}

impl PartialEq for DefList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for DefList<'_> {}

const OVERRUN: MdError = MdError::BadLength {
    length: 0,
    reason: "a dictionary entry runs past the end of the message",
};

/// Decodes one enum value at the start of `b`.
fn value(b: &[u8]) -> Result<(u16, &str, &[u8]), MdError> {
    let Some((&[c0, c1, len], rest)) = b.split_first_chunk::<3>() else {
        return Err(OVERRUN);
    };
    let len = usize::from(len);
    if len == 0 {
        return Err(MdError::BadField {
            field: "dictionary.label_len",
            value: 0,
        });
    }
    let (label, rest) = rest.split_at_checked(len).ok_or(OVERRUN)?;
    let label = super::check_utf8("dictionary.label", label)?;
    Ok((u16::from_le_bytes([c0, c1]), label, rest))
}

/// Decodes and checks one entry at the start of `b`; returns it and what follows.
fn entry(b: &[u8]) -> Result<(DictEntry<'_>, &[u8]), MdError> {
    let Some((&[f0, f1, kind, len], rest)) = b.split_first_chunk::<4>() else {
        return Err(OVERRUN);
    };
    let fid = u16::from_le_bytes([f0, f1]);
    if fid == 0 || fid > MAX_FID {
        return Err(MdError::BadField {
            field: "dictionary.fid",
            value: fid.into(),
        });
    }
    let kind = Kind::from_u8(kind).ok_or(MdError::BadField {
        field: "dictionary.type",
        value: kind.into(),
    })?;
    let len = usize::from(len);
    if len == 0 || len > MAX_NAME_LEN {
        return Err(MdError::BadField {
            field: "dictionary.name_len",
            value: len as u64,
        });
    }
    let (name, rest) = rest.split_at_checked(len).ok_or(OVERRUN)?;
    if !name
        .iter()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
    {
        return Err(MdError::BadText {
            field: "dictionary.name",
        });
    }
    let name = core::str::from_utf8(name).expect("ASCII");
    let (count, rest) = rest.split_first_chunk::<2>().ok_or(OVERRUN)?;
    let count = u16::from_le_bytes(*count);
    if count != 0 && kind != Kind::Enum {
        return Err(MdError::BadField {
            field: "dictionary.value_count",
            value: count.into(),
        });
    }
    let start = rest;
    let mut tail = rest;
    let mut last: Option<u16> = None;
    for _ in 0..count {
        let (code, _, t) = value(tail)?;
        if last.is_some_and(|l| code <= l) {
            return Err(MdError::BadField {
                field: "dictionary.code",
                value: code.into(),
            });
        }
        last = Some(code);
        tail = t;
    }
    let used = start.len() - tail.len();
    Ok((
        DictEntry {
            fid,
            kind,
            name,
            values: EnumValues::Wire {
                count,
                bytes: &start[..used],
            },
        },
        tail,
    ))
}

/// Checks a DICTIONARY; returns its entries.
fn parts(b: &[u8]) -> Result<DefList<'_>, MdError> {
    let len = check_typed(b, &RULES)?;
    let count = read_u16(b, field::COUNT);
    let bytes = &b[field::ENTRIES..len];
    let mut rest = bytes;
    let mut last = 0u16;
    for _ in 0..count {
        let (e, tail) = entry(rest).map_err(|e| match e {
            MdError::BadLength { reason, .. } => MdError::BadLength {
                length: len as u16,
                reason,
            },
            other => other,
        })?;
        if e.fid <= last {
            return Err(MdError::BadField {
                field: "dictionary.fid",
                value: e.fid.into(),
            });
        }
        last = e.fid;
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "bytes follow the last dictionary entry",
        });
    }
    Ok(DefList::Wire { count, bytes })
}

/// A checked view of a DICTIONARY.
#[derive(Debug, Clone, Copy)]
pub struct DictionaryView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DictionaryView<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        DictionaryView { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = DictionaryView { buffer };
        v.check()?;
        Ok(v)
    }
    /// Checks the header, type DICTIONARY, `length >= 12`, no flag but COMPLETE, `item_id` 0,
    /// then each entry: a fid of 1 to 32767 above the previous one, a known type, a name of
    /// 1 to 32 bytes of `A-Z 0-9 _`, values only for enums, with increasing codes and labels
    /// of 1 to 255 bytes of UTF-8, all within `length`; then that nothing follows.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The parsed form of a DICTIONARY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictionaryRepr<'a> {
    /// The last part.
    pub complete: bool,
    pub part: u16,
    pub fields: DefList<'a>,
}

impl<'a> DictionaryRepr<'a> {
    /// Parses a DICTIONARY, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &DictionaryView<&'a T>) -> Result<Self, MdError> {
        let b: &'a [u8] = view.buffer.as_ref();
        let fields = parts(b)?;
        Ok(DictionaryRepr {
            complete: b[super::header::field::FLAGS] & dictionary_flags::COMPLETE != 0,
            part: read_u16(b, field::PART),
            fields,
        })
    }

    /// Checks what a receiver would reject: fids not increasing or out of range, a bad name
    /// or label, values on a field that is not an enum, a message over 64 KiB.
    pub fn check(&self) -> Result<(), MdError> {
        if self.fields.len() > usize::from(u16::MAX) || self.buffer_len() > MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "dictionary.length",
                value: self.buffer_len() as u64,
            });
        }
        let mut b = vec![0; self.buffer_len()];
        self.emit(&mut DictionaryView::new_unchecked(&mut b[..]));
        parts(&b).map(|_| ())
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        DICTIONARY_HEADER_LEN + self.fields.encoded_len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or a length does not
    /// fit its field (see [`check`](Self::check)).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut DictionaryView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        let flags = if self.complete {
            dictionary_flags::COMPLETE
        } else {
            0
        };
        emit_header(b, MessageType::Dictionary, flags, 0, len);
        write_u16(b, field::PART, self.part);
        let count = u16::try_from(self.fields.len()).expect("at most 65535 fields");
        write_u16(b, field::COUNT, count);
        let mut at = field::ENTRIES;
        for e in self.fields.iter() {
            at = emit_entry(b, at, &e);
        }
    }
}

fn emit_entry(b: &mut [u8], mut at: usize, e: &DictEntry<'_>) -> usize {
    b[at..at + 2].copy_from_slice(&e.fid.to_le_bytes());
    b[at + 2] = e.kind as u8;
    b[at + 3] = u8::try_from(e.name.len()).expect("a name of at most 255 bytes");
    at += 4;
    b[at..at + e.name.len()].copy_from_slice(e.name.as_bytes());
    at += e.name.len();
    let count = u16::try_from(e.values.len()).expect("at most 65535 values");
    b[at..at + 2].copy_from_slice(&count.to_le_bytes());
    at += 2;
    for (code, label) in e.values.iter() {
        b[at..at + 2].copy_from_slice(&code.to_le_bytes());
        b[at + 2] = u8::try_from(label.len()).expect("a label of at most 255 bytes");
        b[at + 3..at + 3 + label.len()].copy_from_slice(label.as_bytes());
        at += 3 + label.len();
    }
    at
}

/// The DICTIONARY messages of `entries` (in fid order), each as full as 64 KiB allows, the last
/// flagged COMPLETE. A dictionary that loaded has no entry too long for one part
/// ([`Dictionary::encode`](crate::dictionary::Dictionary::encode)).
///
/// # Panics
/// If an entry is longer than [`MAX_ENTRY_LEN`].
pub fn encode_dictionary(entries: &[DictEntry<'_>]) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut start = 0;
    loop {
        let mut end = start;
        let mut len = DICTIONARY_HEADER_LEN;
        while end < entries.len() && len + entries[end].encoded_len() <= MAX_MESSAGE_LEN {
            len += entries[end].encoded_len();
            end += 1;
        }
        assert!(
            end > start || start == entries.len(),
            "a dictionary entry longer than {MAX_ENTRY_LEN} bytes (Dictionary refuses them)"
        );
        let repr = DictionaryRepr {
            complete: end == entries.len(),
            part: u16::try_from(messages.len()).expect("a dictionary of at most 65535 parts"),
            fields: DefList::List(&entries[start..end]),
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut DictionaryView::new_unchecked(&mut b[..]));
        messages.push(b);
        if repr.complete {
            return messages;
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[test]
    fn rejects_fids_out_of_order_and_values_on_a_price() {
        let mut b = vec![12 + 18, 0, 0x1b, 1, 0, 0, 0, 0, 0, 0, 2, 0];
        b.extend_from_slice(&[22, 0, 2, 3, b'B', b'I', b'D', 0, 0]);
        b.extend_from_slice(&[15, 0, 2, 3, b'A', b'S', b'K', 0, 0]);
        assert_eq!(
            DictionaryView::new_checked(&b[..]).unwrap_err(),
            MdError::BadField {
                field: "dictionary.fid",
                value: 15
            }
        );
        let mut b = vec![12 + 12, 0, 0x1b, 1, 0, 0, 0, 0, 0, 0, 1, 0];
        b.extend_from_slice(&[22, 0, 2, 3, b'B', b'I', b'D', 1, 0, 1, 0, 0]);
        assert_eq!(
            DictionaryView::new_checked(&b[..]).unwrap_err(),
            MdError::BadField {
                field: "dictionary.value_count",
                value: 1
            }
        );
        let r = [8, 0, 0x1a, 0, 0, 0, 0, 0];
        assert!(DictionaryRequestView::new_checked(&r[..]).is_ok());
        assert!(DictionaryRequestView::new_checked(&[9, 0, 0x1a, 0, 0, 0, 0, 0, 0][..]).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x1b)) {
            if let Ok(view) = DictionaryView::new_checked(&bytes[..]) {
                let repr = DictionaryRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut DictionaryView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
