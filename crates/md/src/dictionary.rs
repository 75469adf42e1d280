//! The field dictionary: names and types of field ids, from a TOML file.
//!
//! ```toml
//! [fields.BID]
//! fid = 22
//! type = "price"
//!
//! [fields.CURRENCY]
//! fid = 15
//! type = "enum"
//! values = { 840 = "USD", 978 = "EUR" }   # optional: names printed instead of codes
//! ```
//!
//! A dictionary is validated when loaded: ids 1 to 32767, names of `A-Z 0-9 _` up to 32 bytes,
//! no id or name twice, a known type, `values` only on enums. `crates/md/fields.toml` is built
//! in ([`Dictionary::builtin`]). A field the dictionary does not know is carried and forwarded
//! as is; [`Dictionary::display`] prints it as `#FID=value`.

use crate::codec::{encode_dictionary, DictEntry, EnumValues, FieldList};
use crate::load::{join, Doc, LoadError};
use crate::model::{Kind, OwnedValue, Price, Value, MAX_FID};
use core::fmt;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The built-in dictionary's file.
pub const BUILTIN: &str = include_str!("../fields.toml");

pub use crate::codec::dictionary::MAX_NAME_LEN;
/// Longest name of an enum code, in bytes.
pub const MAX_LABEL_LEN: usize = 255;

/// Why a field cannot join a dictionary ([`Dictionary::insert`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefError {
    BadFid(u16),
    BadName(String),
    FidTaken { fid: u16, by: String },
    NameTaken(String),
    ValuesNotEnum(String),
    BadLabel(String),
    TooLong { name: String, len: usize },
}

impl fmt::Display for DefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefError::BadFid(fid) => write!(f, "field id {fid} is not from 1 to {MAX_FID}"),
            DefError::BadName(n) => write!(
                f,
                "field name {n:?} is not 1 to {MAX_NAME_LEN} bytes of A-Z 0-9 _"
            ),
            DefError::FidTaken { fid, by } => {
                write!(f, "field id {fid} is taken already (by {by}): each id once")
            }
            DefError::NameTaken(n) => write!(f, "field {n} is defined twice: each name once"),
            DefError::ValuesNotEnum(n) => write!(
                f,
                "field {n} names codes but is not an enum: only enum fields name their codes"
            ),
            DefError::BadLabel(n) => write!(
                f,
                "field {n} has a code name that is empty or over {MAX_LABEL_LEN} bytes"
            ),
            DefError::TooLong { name, len } => write!(
                f,
                "field {name} takes {len} bytes with its code names; at most {} fit in one \
                 DICTIONARY message: name fewer codes",
                crate::codec::dictionary::MAX_ENTRY_LEN
            ),
        }
    }
}

impl std::error::Error for DefError {}

/// A field two dictionaries give different types ([`Dictionary::agrees_with`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DictionaryMismatch {
    /// The field as the local dictionary has it.
    pub name: String,
    pub fid: u16,
    pub local: Kind,
    /// The field as the other (downloaded) dictionary has it.
    pub theirs_name: String,
    pub theirs_fid: u16,
    pub theirs: Kind,
}

impl fmt::Display for DictionaryMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "field {} (id {}) is {} in the local dictionary but the distributor's {} (id {}) \
             is {}: fix the local dictionary, or use the distributor's",
            self.name,
            self.fid,
            self.local.name(),
            self.theirs_name,
            self.theirs_fid,
            self.theirs.name()
        )
    }
}

impl std::error::Error for DictionaryMismatch {}

/// One field of the dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    pub fid: u16,
    pub name: String,
    pub kind: Kind,
    /// Names of enum codes (enum fields only; may be empty).
    pub values: BTreeMap<u16, String>,
}

impl FieldDef {
    /// The field as a DICTIONARY message carries it.
    pub fn entry(&self) -> DictEntry<'_> {
        DictEntry {
            fid: self.fid,
            kind: self.kind,
            name: &self.name,
            values: EnumValues::Map(&self.values),
        }
    }

    /// The field a DICTIONARY message's entry describes.
    pub fn from_entry(e: &DictEntry<'_>) -> FieldDef {
        FieldDef {
            fid: e.fid,
            name: e.name.to_string(),
            kind: e.kind,
            values: e.values.iter().map(|(c, l)| (c, l.to_string())).collect(),
        }
    }
}

/// Field definitions by id and by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dictionary {
    by_fid: BTreeMap<u16, FieldDef>,
    by_name: HashMap<String, u16>,
}

impl Dictionary {
    /// The dictionary of `crates/md/fields.toml`, built in.
    pub fn builtin() -> Dictionary {
        Dictionary::parse(BUILTIN, "fields.toml (built in)")
            .expect("the built-in dictionary is valid (a unit test checks it)")
    }

    /// Loads and validates a dictionary file.
    pub fn load(path: &Path) -> Result<Dictionary, LoadError> {
        let text = crate::load::read(path)?;
        Dictionary::parse(&text, &path.display().to_string())
    }

    /// Parses and validates a dictionary; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Dictionary, LoadError> {
        let doc = Doc { file };
        let top = doc.parse(text)?;
        doc.only_keys("", &top, &["fields"])?;
        let mut dict = Dictionary::default();
        let Some(fields) = top.get("fields") else {
            return Ok(dict);
        };
        for (name, def) in doc.table("fields", fields)? {
            let key = join("fields", name);
            if name.is_empty()
                || name.len() > MAX_NAME_LEN
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(doc.invalid(
                    &key,
                    "{...}",
                    format!("a field name of 1 to {MAX_NAME_LEN} bytes of A-Z 0-9 _"),
                ));
            }
            let def = doc.table(&key, def)?;
            doc.only_keys(&key, def, &["fid", "type", "values"])?;
            let fid_accepts = format!("a field id from 1 to {MAX_FID}, each id once");
            let fid_value = doc.required(&key, def, "fid", &fid_accepts)?;
            let fid = fid_value
                .as_integer()
                .and_then(|i| u16::try_from(i).ok())
                .filter(|&f| (1..=MAX_FID).contains(&f))
                .ok_or_else(|| doc.invalid(&format!("{key}.fid"), fid_value, &fid_accepts))?;
            if let Some(other) = dict.by_fid.get(&fid) {
                return Err(doc.invalid(
                    &format!("{key}.fid"),
                    fid,
                    format!("an id no other field has ({} has {fid})", other.name),
                ));
            }
            let types = "one of int, price, time, enum, string";
            let ty = doc.required(&key, def, "type", types)?;
            let kind = doc
                .string(&format!("{key}.type"), ty, types)
                .ok()
                .and_then(|t| Kind::ALL.into_iter().find(|k| k.name() == t))
                .ok_or_else(|| doc.invalid(&format!("{key}.type"), ty, types))?;
            let mut values = BTreeMap::new();
            if let Some(v) = def.get("values") {
                let vkey = format!("{key}.values");
                if kind != Kind::Enum {
                    return Err(doc.invalid(
                        &vkey,
                        v,
                        "no values: only enum fields name their codes",
                    ));
                }
                for (code, label) in doc.table(&vkey, v)? {
                    let ckey = join(&vkey, code);
                    let code = code
                        .parse::<u16>()
                        .map_err(|_| doc.invalid(&ckey, label, "codes from 0 to 65535 as keys"))?;
                    let label_accepts = format!("a name of 1 to {MAX_LABEL_LEN} bytes");
                    let label = doc.string(&ckey, label, &label_accepts)?;
                    if label.is_empty() || label.len() > MAX_LABEL_LEN {
                        return Err(doc.invalid(&ckey, format!("{label:?}"), label_accepts));
                    }
                    values.insert(code, label.to_string());
                }
            }
            dict.insert(FieldDef {
                fid,
                name: name.clone(),
                kind,
                values,
            })
            .map_err(|e| doc.invalid(&key, "{...}", e.to_string()))?;
        }
        Ok(dict)
    }

    pub fn get(&self, fid: u16) -> Option<&FieldDef> {
        self.by_fid.get(&fid)
    }

    pub fn by_name(&self, name: &str) -> Option<&FieldDef> {
        self.by_name.get(name).and_then(|fid| self.by_fid.get(fid))
    }

    /// Every field, by id.
    pub fn iter(&self) -> impl Iterator<Item = &FieldDef> {
        self.by_fid.values()
    }

    /// The DICTIONARY messages that serve it, each as full as 64 KiB allows, the last flagged
    /// COMPLETE (every field fits one: [`insert`](Self::insert) refused longer ones).
    pub fn encode(&self) -> Vec<Vec<u8>> {
        let entries: Vec<DictEntry<'_>> = self.iter().map(FieldDef::entry).collect();
        encode_dictionary(&entries)
    }

    pub fn len(&self) -> usize {
        self.by_fid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_fid.is_empty()
    }

    /// Adds a field: what a downloaded dictionary is built with, part by part. Refuses an id
    /// or a name the dictionary has, an id out of 1 to 32767, a name out of `A-Z 0-9 _` or
    /// longer than 32 bytes, names of codes on a field that is not an enum, labels of more
    /// than 255 bytes, and a field too long for one DICTIONARY message.
    pub fn insert(&mut self, def: FieldDef) -> Result<(), DefError> {
        if def.fid == 0 || def.fid > MAX_FID {
            return Err(DefError::BadFid(def.fid));
        }
        if def.name.is_empty()
            || def.name.len() > MAX_NAME_LEN
            || !def
                .name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(DefError::BadName(def.name));
        }
        if let Some(other) = self.by_fid.get(&def.fid) {
            return Err(DefError::FidTaken {
                fid: def.fid,
                by: other.name.clone(),
            });
        }
        if self.by_name.contains_key(&def.name) {
            return Err(DefError::NameTaken(def.name));
        }
        if def.kind != Kind::Enum && !def.values.is_empty() {
            return Err(DefError::ValuesNotEnum(def.name));
        }
        if def
            .values
            .values()
            .any(|l| l.is_empty() || l.len() > MAX_LABEL_LEN)
        {
            return Err(DefError::BadLabel(def.name));
        }
        let len = def.entry().encoded_len();
        if len > crate::codec::dictionary::MAX_ENTRY_LEN {
            return Err(DefError::TooLong {
                name: def.name,
                len,
            });
        }
        self.by_name.insert(def.name.clone(), def.fid);
        self.by_fid.insert(def.fid, def);
        Ok(())
    }

    /// Checks that `other` (a downloaded dictionary) gives every field both know the same
    /// type, by id and by name: the first that differs is the error.
    pub fn agrees_with(&self, other: &Dictionary) -> Result<(), DictionaryMismatch> {
        for mine in self.iter() {
            let theirs = other.get(mine.fid).or_else(|| other.by_name(&mine.name));
            if let Some(theirs) = theirs {
                if theirs.kind != mine.kind {
                    return Err(DictionaryMismatch {
                        name: mine.name.clone(),
                        fid: mine.fid,
                        local: mine.kind,
                        theirs_name: theirs.name.clone(),
                        theirs_fid: theirs.fid,
                        theirs: theirs.kind,
                    });
                }
            }
        }
        Ok(())
    }

    /// The field `name` with its value read from `text` as its type says: `int` a whole
    /// number, `price` a plain decimal (kept exactly), `time` UTC in ISO 8601
    /// (`2026-11-27T14:30:00.123456789Z`) or nanoseconds since the epoch, `enum` a code or one
    /// of its named values (`USD`), `string` the text (at most 255 bytes). The error names
    /// the field, the text and what is accepted.
    pub fn parse_value(&self, name: &str, text: &str) -> Result<(u16, OwnedValue), String> {
        let def = self.by_name(name).ok_or_else(|| {
            format!("{name} is not a field of the dictionary: give a field name it has")
        })?;
        let bad = |accepted: &str| format!("{name}={text} is not accepted: {accepted}");
        let v = match def.kind {
            Kind::Int => OwnedValue::Int(text.parse().map_err(|_| bad("a whole number"))?),
            Kind::Price => OwnedValue::Price(Price::parse_decimal(text).ok_or_else(|| {
                bad("a decimal such as 189.21 (at most 12 places, within 64 bits)")
            })?),
            Kind::Time => OwnedValue::TimeNs(parse_utc_ns(text).ok_or_else(|| {
                bad("a UTC time such as 2026-11-27T14:30:00.000001Z, or nanoseconds since 1970")
            })?),
            Kind::Enum => OwnedValue::Enum(match text.parse::<u16>() {
                Ok(code) => code,
                Err(_) => {
                    *def.values
                        .iter()
                        .find(|(_, label)| label.as_str() == text)
                        .ok_or_else(|| {
                            bad(&format!(
                                "a code from 0 to 65535{}",
                                if def.values.is_empty() {
                                    String::new()
                                } else {
                                    format!(
                                        " or one of {}",
                                        def.values.values().cloned().collect::<Vec<_>>().join(", ")
                                    )
                                }
                            ))
                        })?
                        .0
                }
            }),
            Kind::String if text.len() > crate::model::MAX_STRING_LEN => {
                return Err(bad("a text of at most 255 bytes"))
            }
            Kind::String => OwnedValue::Str(text.to_string()),
        };
        Ok((def.fid, v))
    }

    /// Prints a field list as `BID=189.21 ASK=189.22 CURRENCY=USD DSPLY_NAME="APPLE INC"`:
    /// names from the dictionary (`#FID` for an id it does not know), prices in decimal,
    /// times in UTC (`2024-05-01T13:30:00.000000001Z`), strings quoted.
    pub fn display<'a>(&'a self, fields: &'a FieldList<'a>) -> FieldsDisplay<'a> {
        FieldsDisplay { dict: self, fields }
    }
}

/// See [`Dictionary::display`].
#[derive(Debug)]
pub struct FieldsDisplay<'a> {
    dict: &'a Dictionary,
    fields: &'a FieldList<'a>,
}

impl fmt::Display for FieldsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let def = self.dict.get(field.fid);
            match def {
                Some(d) => write!(f, "{}=", d.name)?,
                None => write!(f, "#{}=", field.fid)?,
            }
            match field.value {
                Value::Int(v) => write!(f, "{v}")?,
                Value::Price(p) => write!(f, "{p}")?,
                Value::TimeNs(t) => write_utc(f, t)?,
                Value::Enum(code) => match def.and_then(|d| d.values.get(&code)) {
                    Some(label) => f.write_str(label)?,
                    None => write!(f, "{code}")?,
                },
                Value::Str(s) => write!(f, "\"{}\"", s.escape_debug())?,
            }
        }
        Ok(())
    }
}

/// Nanoseconds since the Unix epoch as an ISO 8601 UTC time with nanoseconds
/// (`2024-05-01T13:30:00.000000001Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc(pub u64);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_utc(f, self.0)
    }
}

/// Writes nanoseconds since the Unix epoch as an ISO 8601 UTC time with nanoseconds.
fn write_utc(f: &mut fmt::Formatter<'_>, ns: u64) -> fmt::Result {
    let secs = ns / 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    write!(
        f,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

/// Nanoseconds since the epoch of a UTC time in ISO 8601 (`2026-11-27T14:30:00Z`, with up to 9
/// fractional digits and the `Z`), or of a plain count of nanoseconds.
pub fn parse_utc_ns(text: &str) -> Option<u64> {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let t = text.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<u64>().ok());
    let (y, m, dd) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut h = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&dd)
        || hh > 23
        || mm > 59
        || ss > 60
        || frac.len() > 9
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let nanos = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    let days = days_from_civil(y, m, dd);
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000_000) + nanos)
}

/// Days since 1970-01-01 of a proleptic Gregorian date after it (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days after the epoch).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{DictionaryRepr, DictionaryView, MAX_MESSAGE_LEN};
    use crate::model::{Field, Price};

    #[test]
    fn an_entry_round_trips_with_its_enum_names() {
        let dict = Dictionary::parse(
            "[fields.BID]\nfid = 22\ntype = \"price\"\n\
             [fields.CURRENCY]\nfid = 15\ntype = \"enum\"\nvalues = { 840 = \"USD\", 978 = \"EUR\" }",
            "t.toml",
        )
        .unwrap();
        let parts = dict.encode();
        assert_eq!(parts.len(), 1);
        let b = &parts[0];
        assert_eq!(
            &b[..],
            [
                47, 0, 0x1b, 1, 0, 0, 0, 0, 0, 0, 2, 0, // header, part 0, 2 fields
                15, 0, 4, 8, b'C', b'U', b'R', b'R', b'E', b'N', b'C', b'Y', 2, 0, // enum
                0x48, 3, 3, b'U', b'S', b'D', 0xd2, 3, 3, b'E', b'U', b'R', // 840, 978
                22, 0, 2, 3, b'B', b'I', b'D', 0, 0, // price, no values
            ]
        );
        let repr = DictionaryRepr::parse(&DictionaryView::new_checked(&b[..]).unwrap()).unwrap();
        assert!(repr.complete);
        let defs: Vec<FieldDef> = repr
            .fields
            .iter()
            .map(|e| FieldDef::from_entry(&e))
            .collect();
        assert_eq!(defs, dict.iter().cloned().collect::<Vec<_>>());
        assert!(repr.check().is_ok());
    }

    #[test]
    fn a_large_dictionary_is_cut_into_parts_of_whole_entries() {
        let mut text = String::new();
        for fid in 1..=6000 {
            text.push_str(&format!(
                "[fields.FIELD_NUMBER_{fid}]\nfid = {fid}\ntype = \"int\"\n"
            ));
        }
        let dict = Dictionary::parse(&text, "big.toml").unwrap();
        let parts = dict.encode();
        assert!(parts.len() >= 2, "{} parts", parts.len());
        let mut fids = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            assert!(p.len() <= MAX_MESSAGE_LEN);
            let r = DictionaryRepr::parse(&DictionaryView::new_checked(&p[..]).unwrap()).unwrap();
            assert_eq!(usize::from(r.part), i);
            assert_eq!(r.complete, i + 1 == parts.len());
            fids.extend(r.fields.iter().map(|e| e.fid));
        }
        assert_eq!(fids, (1..=6000).collect::<Vec<u16>>());
        let empty = Dictionary::default().encode();
        assert_eq!(empty, vec![vec![12, 0, 0x1b, 1, 0, 0, 0, 0, 0, 0, 0, 0]]);
    }

    #[test]
    fn the_builtin_dictionary_has_the_level_1_fields() {
        let d = Dictionary::builtin();
        for (name, fid, kind) in [
            ("BID", 22, Kind::Price),
            ("ASK", 25, Kind::Price),
            ("BIDSIZE", 30, Kind::Int),
            ("ASKSIZE", 31, Kind::Int),
            ("TRDPRC_1", 6, Kind::Price),
            ("ACVOL_1", 32, Kind::Int),
            ("TRDTIM_1", 18, Kind::Time),
            ("QUOTIM", 1025, Kind::Time),
            ("CURRENCY", 15, Kind::Enum),
            ("DSPLY_NAME", 3, Kind::String),
        ] {
            let def = d.by_name(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!((def.fid, def.kind), (fid, kind), "{name}");
            assert_eq!(d.get(fid).unwrap().name, name);
        }
        assert_eq!(d.get(15).unwrap().values.get(&840).unwrap(), "USD");
    }

    #[test]
    fn prints_a_field_list_with_names_and_unknown_fids() {
        let d = Dictionary::builtin();
        let fields = [
            Field::new(
                22,
                Value::Price(Price {
                    mantissa: 18921,
                    exponent: -2,
                }),
            ),
            Field::new(
                25,
                Value::Price(Price {
                    mantissa: 18922,
                    exponent: -2,
                }),
            ),
            Field::new(30, Value::Int(300)),
            Field::new(15, Value::Enum(840)),
            Field::new(3, Value::Str("APPLE \"INC\"")),
            Field::new(1025, Value::TimeNs(1_714_570_200_000_000_001)),
            Field::new(9999, Value::Enum(7)),
        ];
        let list = FieldList::List(&fields);
        assert_eq!(
            d.display(&list).to_string(),
            "BID=189.21 ASK=189.22 BIDSIZE=300 CURRENCY=USD DSPLY_NAME=\"APPLE \\\"INC\\\"\" \
             QUOTIM=2024-05-01T13:30:00.000000001Z #9999=7"
        );
    }

    #[test]
    fn utc_dates_are_right_across_leap_years() {
        let show = |ns| {
            struct T(u64);
            impl fmt::Display for T {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write_utc(f, self.0)
                }
            }
            T(ns).to_string()
        };
        assert_eq!(show(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            show(951_782_400 * 1_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
        assert_eq!(show(u64::MAX), "2554-07-21T23:34:33.709551615Z");
    }

    fn err(text: &str) -> String {
        Dictionary::parse(text, "d.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_key_the_value_and_what_is_accepted() {
        assert_eq!(
            err("[fields.BID]\nfid = 0\ntype = \"price\""),
            "d.toml: fields.BID.fid = 0 is not accepted: a field id from 1 to 32767, each id once"
        );
        assert_eq!(
            err("[fields.BID]\nfid = 22\ntype = \"decimal\""),
            "d.toml: fields.BID.type = \"decimal\" is not accepted: one of int, price, time, enum, string"
        );
        assert_eq!(
            err("[fields.BID]\nfid = 22\ntype = \"price\"\n[fields.ASK]\nfid = 22\ntype = \"price\""),
            "d.toml: fields.BID.fid = 22 is not accepted: an id no other field has (ASK has 22)"
        );
        assert!(err("[fields.bid]\nfid = 22\ntype = \"price\"").contains("A-Z 0-9 _"));
        assert!(err("[fields.BID]\nfid = 22\ntype = \"price\"\nsize = 8").contains(
            "fields.BID.size = ... is not accepted: an unknown key: known keys are fid, type, values"
        ));
        assert!(
            err("[fields.BID]\nfid = 22\ntype = \"price\"\nvalues = { 1 = \"X\" }")
                .contains("only enum fields name their codes")
        );
        assert!(err("[fields.BID]\ntype = \"price\"").contains("fields.BID.fid = (missing)"));
        assert!(err("[fields.BID\n").starts_with("d.toml is not valid TOML"));
    }
}
