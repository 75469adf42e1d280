//! Values between Python and the dictionary's types: prices as `decimal.Decimal` from their
//! exact decimal text, times as UTC `datetime` or int nanoseconds, each refusal a
//! `ValueError` naming the field and the value; and the conversion of a field list to a dict.

use super::{decimal_type, epoch, utc};
use peregrine_md::dictionary::{Dictionary, FieldDef};
use peregrine_md::model::{
    Kind, Price, Value, MAX_EXPONENT, MAX_FID, MAX_STRING_LEN, MIN_EXPONENT,
};
use peregrine_md::provider::ProvideError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFloat, PyInt, PyString, PyTzInfoAccess,
};
use std::borrow::Cow;
use std::collections::HashMap;

/// A field value owned by Rust: what a provider's input becomes before it is borrowed as a
/// `Value`, and what a consumer's events hold until their fields are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owned {
    Int(i64),
    Price(Price),
    Time(u64),
    Enum(u16),
    Str(Box<str>),
}

impl Owned {
    pub(super) fn value(&self) -> Value<'_> {
        match self {
            Owned::Int(v) => Value::Int(*v),
            Owned::Price(p) => Value::Price(*p),
            Owned::Time(t) => Value::TimeNs(*t),
            Owned::Enum(c) => Value::Enum(*c),
            Owned::Str(s) => Value::Str(s),
        }
    }

    pub(super) fn of(v: Value<'_>) -> Owned {
        match v {
            Value::Int(i) => Owned::Int(i),
            Value::Price(p) => Owned::Price(p),
            Value::TimeNs(t) => Owned::Time(t),
            Value::Enum(c) => Owned::Enum(c),
            Value::Str(s) => Owned::Str(s.into()),
        }
    }
}

/// A decimal number's text (`189.21`, `-0.005`, `1.5E+3`, `42`) as a price: exactly its
/// digits, trailing zeros kept (`189.20` is 18920e-2) except those past 12 decimals, an
/// exponent above 6 folded into the mantissa. `Err` says what is wrong with it.
pub(super) fn parse_price(text: &str) -> Result<Price, String> {
    const NOT_A_NUMBER: &str = "is not a decimal number";
    let t = text.trim();
    let (negative, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (number, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac.is_empty())
        || !int_part
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err(NOT_A_NUMBER.into());
    }
    let mut exp: i64 = match exponent {
        Some(e) => e.parse().map_err(|_| NOT_A_NUMBER.to_string())?,
        None => 0,
    };
    exp = exp.saturating_sub(frac.len() as i64);
    let digits: Vec<u8> = int_part.bytes().chain(frac.bytes()).collect();
    let first = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    let mut digits = &digits[first..];
    let (min, max) = (i64::from(MIN_EXPONENT), i64::from(MAX_EXPONENT));
    if digits.is_empty() {
        return Ok(Price {
            mantissa: 0,
            exponent: exp.clamp(min, max) as i8,
        });
    }
    while exp < min && digits.last() == Some(&b'0') {
        digits = &digits[..digits.len() - 1];
        exp += 1;
    }
    if exp < min {
        return Err(format!(
            "has {} decimal places; a price has at most {}",
            -exp, -min
        ));
    }
    let too_large = || {
        "is too large for a price (a 64-bit mantissa: at most 18 significant digits)".to_string()
    };
    let mut mantissa: i64 = 0;
    for &d in digits {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(d - b'0')))
            .ok_or_else(too_large)?;
    }
    while exp > max {
        mantissa = mantissa.checked_mul(10).ok_or_else(too_large)?;
        exp -= 1;
    }
    Ok(Price {
        mantissa: if negative { -mantissa } else { mantissa },
        exponent: exp as i8,
    })
}

/// `field BID: 'abc' is not a price: ...`: the error for a value that does not fit its field.
pub(super) fn bad_value(field: &str, v: &Bound<'_, PyAny>, why: &str) -> PyErr {
    let shown = v
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<value>".into());
    PyValueError::new_err(format!("field {field}: {shown} {why}"))
}

/// Nanoseconds since the epoch of an aware `datetime`.
pub(super) fn datetime_ns(field: &str, v: &Bound<'_, PyDateTime>) -> PyResult<u64> {
    let py = v.py();
    if v.get_tzinfo().is_none() {
        return Err(bad_value(
            field,
            v.as_any(),
            "is a naive datetime: give an aware one (tzinfo=datetime.timezone.utc) or int \
             nanoseconds since the epoch",
        ));
    }
    let delta = v.sub(epoch(py)?)?;
    let delta = delta.cast::<PyDelta>()?;
    let micros = (i64::from(delta.get_days()) * 86_400 + i64::from(delta.get_seconds()))
        * 1_000_000
        + i64::from(delta.get_microseconds());
    u64::try_from(micros).map(|us| us * 1000).map_err(|_| {
        bad_value(
            field,
            v.as_any(),
            "is before 1970: a time field cannot hold it",
        )
    })
}

/// A Python value as the value of a field of type `kind` (`def`: its dictionary entry).
pub(super) fn value_of_kind(
    field: &str,
    kind: Kind,
    def: Option<&FieldDef>,
    v: &Bound<'_, PyAny>,
) -> PyResult<Owned> {
    let py = v.py();
    let is_bool = v.is_instance_of::<PyBool>();
    match kind {
        Kind::Price => {
            let text = if is_bool {
                None
            } else if v.is_instance_of::<PyInt>() {
                if let Ok(m) = v.extract::<i64>() {
                    return Ok(Owned::Price(Price {
                        mantissa: m,
                        exponent: 0,
                    }));
                }
                Some(v.str()?)
            } else if v.is_instance_of::<PyFloat>() {
                // Its shortest repr, as Decimal(repr(f)) reads it: 189.21 is 18921e-2.
                Some(v.repr()?)
            } else if v.is_instance_of::<PyString>() || v.is_instance(decimal_type(py)?)? {
                Some(v.str()?)
            } else {
                None
            };
            let Some(text) = text else {
                return Err(bad_value(
                    field,
                    v,
                    "is not a price: give a Decimal, int, float or str such as \"189.21\"",
                ));
            };
            parse_price(text.to_str()?)
                .map(Owned::Price)
                .map_err(|why| bad_value(field, v, &format!("{why} (field {field} is a price)")))
        }
        Kind::Int => {
            if is_bool || !v.is_instance_of::<PyInt>() {
                return Err(bad_value(field, v, "is not an int (field type int)"));
            }
            v.extract::<i64>()
                .map(Owned::Int)
                .map_err(|_| bad_value(field, v, "does not fit in a 64-bit int"))
        }
        Kind::Enum => {
            if let Ok(s) = v.cast::<PyString>() {
                let label = s.to_str()?;
                if let Some((&code, _)) =
                    def.and_then(|d| d.values.iter().find(|(_, l)| *l == label))
                {
                    return Ok(Owned::Enum(code));
                }
                let names: Vec<&str> = def
                    .map(|d| d.values.values().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(bad_value(
                    field,
                    v,
                    &format!(
                        "is not a value of this enum: give a code from 0 to 65535{}",
                        if names.is_empty() {
                            String::new()
                        } else {
                            format!(" or one of {}", names.join(", "))
                        }
                    ),
                ));
            }
            if is_bool || !v.is_instance_of::<PyInt>() {
                return Err(bad_value(
                    field,
                    v,
                    "is not an enum code: give an int from 0 to 65535 or the name of a value",
                ));
            }
            v.extract::<u16>()
                .map(Owned::Enum)
                .map_err(|_| bad_value(field, v, "is not an enum code from 0 to 65535"))
        }
        Kind::Time => {
            if let Ok(dt) = v.cast::<PyDateTime>() {
                return datetime_ns(field, dt).map(Owned::Time);
            }
            if is_bool || !v.is_instance_of::<PyInt>() {
                return Err(bad_value(
                    field,
                    v,
                    "is not a time: give an aware datetime or int nanoseconds since the epoch",
                ));
            }
            v.extract::<u64>()
                .map(Owned::Time)
                .map_err(|_| bad_value(field, v, "is not nanoseconds since the epoch (0 or more)"))
        }
        Kind::String => {
            let Ok(s) = v.cast::<PyString>() else {
                return Err(bad_value(field, v, "is not a str (field type string)"));
            };
            let s = s.to_str()?;
            if s.len() > MAX_STRING_LEN {
                return Err(bad_value(
                    field,
                    v,
                    &format!(
                        "is {} bytes long in UTF-8; a string field holds at most {MAX_STRING_LEN}",
                        s.len()
                    ),
                ));
            }
            Ok(Owned::Str(s.into()))
        }
    }
}

/// The kind of a value given for a field the dictionary does not know.
pub(super) fn inferred_kind(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Kind> {
    let py = v.py();
    Ok(if v.is_instance_of::<PyBool>() {
        return Err(bad_value(field, v, "is a bool: no field type holds one"));
    } else if v.is_instance_of::<PyInt>() {
        Kind::Int
    } else if v.is_instance_of::<PyFloat>() || v.is_instance(decimal_type(py)?)? {
        Kind::Price
    } else if v.is_instance_of::<PyString>() {
        Kind::String
    } else if v.is_instance_of::<PyDateTime>() {
        Kind::Time
    } else {
        return Err(bad_value(
            field,
            v,
            "has no field type: a field the dictionary does not know takes an int, a \
             Decimal or float (price), a str or a datetime",
        ));
    })
}

/// A field key (a dictionary name, `"#FID"`, or an int id) as its id, its name for errors
/// (the dictionary's when it has one), and its dictionary entry.
pub(super) fn field_key<'d>(
    dict: &'d Dictionary,
    key: &Bound<'_, PyAny>,
) -> PyResult<(u16, Cow<'d, str>, Option<&'d FieldDef>)> {
    let by_id = |n: i64, shown: String| -> PyResult<(u16, Cow<'d, str>, Option<&'d FieldDef>)> {
        match u16::try_from(n) {
            Ok(fid) if (1..=MAX_FID).contains(&fid) => Ok(match dict.get(fid) {
                Some(d) => (fid, Cow::Borrowed(d.name.as_str()), Some(d)),
                None => (fid, Cow::Owned(shown), None),
            }),
            _ => Err(PyValueError::new_err(format!(
                "field id {shown}: give an id from 1 to {MAX_FID}"
            ))),
        }
    };
    if let Ok(s) = key.cast::<PyString>() {
        let name = s.to_str()?;
        if let Some(d) = dict.by_name(name) {
            return Ok((d.fid, Cow::Borrowed(d.name.as_str()), Some(d)));
        }
        if let Some(digits) = name.strip_prefix('#') {
            if let Ok(n) = digits.parse::<i64>() {
                return by_id(n, name.to_string());
            }
        }
        return Err(PyValueError::new_err(
            ProvideError::UnknownField {
                name: name.to_string(),
            }
            .to_string()
                + " (\"#FID\" for a field it does not know)",
        ));
    }
    if key.is_instance_of::<PyInt>() && !key.is_instance_of::<PyBool>() {
        let n = key.extract::<i64>().unwrap_or(-1);
        return by_id(n, format!("#{n}"));
    }
    Err(PyTypeError::new_err(format!(
        "field key {}: give a dictionary name (\"BID\"), \"#FID\" or an int field id",
        key.repr()?
    )))
}

/// The fields of a `refresh` or `update` call (a dict or mapping, then keywords) as owned
/// values, typed by the dictionary.
pub(super) fn fields_of(
    dict: &Dictionary,
    fields: Option<&Bound<'_, PyAny>>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<(u16, Owned)>> {
    let mut out: Vec<(u16, Owned)> = Vec::new();
    let mut add = |k: &Bound<'_, PyAny>, v: &Bound<'_, PyAny>| -> PyResult<()> {
        let (fid, name, def) = field_key(dict, k)?;
        let value = match def {
            Some(d) => value_of_kind(&name, d.kind, Some(d), v)?,
            None => value_of_kind(&name, inferred_kind(&name, v)?, None, v)?,
        };
        // A linear scan: field lists are short, and this allocates nothing.
        if out.iter().any(|(f, _)| *f == fid) {
            return Err(PyValueError::new_err(format!(
                "field {name} (fid {fid}) is given twice (by name, \"#{fid}\" or id {fid}): \
                 give it once"
            )));
        }
        out.push((fid, value));
        Ok(())
    };
    if let Some(f) = fields.filter(|f| !f.is_none()) {
        if let Ok(d) = f.cast::<PyDict>() {
            for (k, v) in d.iter() {
                add(&k, &v)?;
            }
        } else if f.hasattr("items")? {
            for kv in f.call_method0("items")?.try_iter()? {
                let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = kv?.extract()?;
                add(&k, &v)?;
            }
        } else {
            return Err(PyTypeError::new_err(
                "fields: give a dict of field name to value, e.g. {\"BID\": Decimal(\"189.21\")}",
            ));
        }
    }
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            add(&k, &v)?;
        }
    }
    Ok(out)
}

/// A UTC `datetime` of nanoseconds since the epoch (to the microsecond: `datetime` holds no
/// finer).
pub(super) fn datetime_of(py: Python<'_>, ns: u64) -> PyResult<Bound<'_, PyAny>> {
    let secs = ns / 1_000_000_000;
    let (y, m, d) = peregrine_md::dictionary::civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    Ok(PyDateTime::new(
        py,
        y as i32,
        m as u8,
        d as u8,
        (rem / 3600) as u8,
        (rem % 3600 / 60) as u8,
        (rem % 60) as u8,
        (ns % 1_000_000_000 / 1000) as u32,
        Some(&utc(py)?),
    )?
    .into_any())
}

/// How a consumer's values become Python objects: field names by id, and times as
/// `datetime` or int nanoseconds.
pub(super) struct Conv {
    pub(super) times_ns: bool,
    pub(super) names: HashMap<u16, Py<PyString>>,
}

impl Conv {
    pub(super) fn new(py: Python<'_>, dict: &Dictionary, times_ns: bool) -> Conv {
        Conv {
            times_ns,
            names: dict
                .iter()
                .map(|d| (d.fid, PyString::intern(py, &d.name).unbind()))
                .collect(),
        }
    }

    pub(super) fn name<'py>(&self, py: Python<'py>, fid: u16) -> Bound<'py, PyString> {
        match self.names.get(&fid) {
            Some(n) => n.bind(py).clone(),
            None => PyString::new(py, &format!("#{fid}")),
        }
    }

    pub(super) fn value<'py>(&self, py: Python<'py>, v: &Owned) -> PyResult<Bound<'py, PyAny>> {
        Ok(match v {
            Owned::Int(i) => i.into_pyobject(py)?.into_any(),
            Owned::Price(p) => decimal_type(py)?.call1((p.to_string(),))?,
            Owned::Time(t) if self.times_ns => t.into_pyobject(py)?.into_any(),
            Owned::Time(t) => datetime_of(py, *t)?,
            Owned::Enum(c) => c.into_pyobject(py)?.into_any(),
            Owned::Str(s) => PyString::new(py, s).into_any(),
        })
    }

    pub(super) fn dict<'py>(
        &self,
        py: Python<'py>,
        fields: &[(u16, Owned)],
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (fid, v) in fields {
            d.set_item(self.name(py, *fid), self.value(py, v)?)?;
        }
        Ok(d)
    }
}
