//! The market data tier for Python: the submodule `peregrine._peregrine._md`, re-exported by
//! `peregrine.md` (python/peregrine/md.py). It wraps `peregrine_market_data` directly:
//!
//! - `Provider` publishes a service's items on the backbone (refresh, update, status) and
//!   answers the distributors' image requests when `do_work` is called;
//! - `Consumer` logs in to a distributor (or the next of a list), opens items and `poll`s
//!   their events. `poll` waits with the GIL released, gathers the events as owned Rust values
//!   (one field array per poll, shared by that poll's events) and makes one small `Event`
//!   per event; an event's `fields` dict is built when first read, so events whose fields are
//!   never looked at cost no Python value.
//!
//! Values cross by the field's type in the dictionary: prices are `decimal.Decimal` built from
//! the exact decimal text of mantissa and exponent (never through a float), `int` and `enum`
//! are Python ints, `string` is str, `time` a UTC `datetime` (microseconds) or int
//! nanoseconds. Bad input raises `ValueError` naming the field and the value.

use crate::{BackPressured, Closed, ConfigError, PeregrineError};
use peregrine_market_data::consumer::{
    AnyConsumer, Consumer as RsConsumer, ConsumerError, Event as RsEvent, SessionError, WarmStandby,
};
use peregrine_market_data::provider::{
    Post as RsPost, Provider as RsProvider, ProviderError, ProviderOptions,
};
use peregrine_market_data::DEFAULT_BACKBONE;
use peregrine_md::codec::{AckCode, FieldList};
use peregrine_md::dictionary::{Dictionary, FieldDef};
use peregrine_md::model::{
    Field, ItemState, Kind, Price, Value, MAX_EXPONENT, MAX_FID, MAX_STRING_LEN, MIN_EXPONENT,
};
use peregrine_md::provider::ProvideError;
use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{
    PyBool, PyBytes, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFloat, PyInt, PyList, PyString,
    PyType, PyTzInfo, PyTzInfoAccess,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

create_exception!(
    peregrine.md,
    MarketDataError,
    PeregrineError,
    "A market data session failed: no distributor reachable, a protocol error, a backbone \
     that cannot be opened."
);
create_exception!(
    peregrine.md,
    LoginRefused,
    MarketDataError,
    "The distributor refused the login (unknown user, wrong token): the session is over."
);

/// The longest wait of one `Consumer.poll` slice: Ctrl-C is checked between slices.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// Locks a mutex without holding the GIL while waiting (another thread may hold the mutex
/// while it waits with the GIL released).
fn lock_attached<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(|e| e.into_inner())
}

fn decimal_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static DECIMAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    DECIMAL.import(py, "decimal", "Decimal")
}

fn utc(py: Python<'_>) -> PyResult<Bound<'_, PyTzInfo>> {
    Ok(PyTzInfo::utc(py)?.to_owned())
}

/// 1970-01-01T00:00:00Z.
fn epoch(py: Python<'_>) -> PyResult<&Bound<'_, PyDateTime>> {
    static EPOCH: PyOnceLock<Py<PyDateTime>> = PyOnceLock::new();
    EPOCH
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(PyDateTime::new(py, 1970, 1, 1, 0, 0, 0, 0, Some(&utc(py)?))?.unbind())
        })
        .map(|e| e.bind(py))
}

fn load_dictionary(path: Option<&str>) -> PyResult<Dictionary> {
    match path {
        None => Ok(Dictionary::builtin()),
        Some(p) => Dictionary::load(Path::new(p)).map_err(|e| PyValueError::new_err(e.to_string())),
    }
}

// ---- values ---------------------------------------------------------------------------------

/// A field value owned by Rust: what a provider's input becomes before it is borrowed as a
/// `Value`, and what a consumer's events hold until their fields are read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owned {
    Int(i64),
    Price(Price),
    Time(u64),
    Enum(u16),
    Str(Box<str>),
}

impl Owned {
    fn value(&self) -> Value<'_> {
        match self {
            Owned::Int(v) => Value::Int(*v),
            Owned::Price(p) => Value::Price(*p),
            Owned::Time(t) => Value::TimeNs(*t),
            Owned::Enum(c) => Value::Enum(*c),
            Owned::Str(s) => Value::Str(s),
        }
    }

    fn of(v: Value<'_>) -> Owned {
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
fn parse_price(text: &str) -> Result<Price, String> {
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
fn bad_value(field: &str, v: &Bound<'_, PyAny>, why: &str) -> PyErr {
    let shown = v
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<value>".into());
    PyValueError::new_err(format!("field {field}: {shown} {why}"))
}

/// Nanoseconds since the epoch of an aware `datetime`.
fn datetime_ns(field: &str, v: &Bound<'_, PyDateTime>) -> PyResult<u64> {
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
fn value_of_kind(
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
fn inferred_kind(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Kind> {
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
fn field_key<'d>(
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
fn fields_of(
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
fn datetime_of(py: Python<'_>, ns: u64) -> PyResult<Bound<'_, PyAny>> {
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
struct Conv {
    times_ns: bool,
    names: HashMap<u16, Py<PyString>>,
}

impl Conv {
    fn new(py: Python<'_>, dict: &Dictionary, times_ns: bool) -> Conv {
        Conv {
            times_ns,
            names: dict
                .iter()
                .map(|d| (d.fid, PyString::intern(py, &d.name).unbind()))
                .collect(),
        }
    }

    fn name<'py>(&self, py: Python<'py>, fid: u16) -> Bound<'py, PyString> {
        match self.names.get(&fid) {
            Some(n) => n.bind(py).clone(),
            None => PyString::new(py, &format!("#{fid}")),
        }
    }

    fn value<'py>(&self, py: Python<'py>, v: &Owned) -> PyResult<Bound<'py, PyAny>> {
        Ok(match v {
            Owned::Int(i) => i.into_pyobject(py)?.into_any(),
            Owned::Price(p) => decimal_type(py)?.call1((p.to_string(),))?,
            Owned::Time(t) if self.times_ns => t.into_pyobject(py)?.into_any(),
            Owned::Time(t) => datetime_of(py, *t)?,
            Owned::Enum(c) => c.into_pyobject(py)?.into_any(),
            Owned::Str(s) => PyString::new(py, s).into_any(),
        })
    }

    fn dict<'py>(&self, py: Python<'py>, fields: &[(u16, Owned)]) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (fid, v) in fields {
            d.set_item(self.name(py, *fid), self.value(py, v)?)?;
        }
        Ok(d)
    }
}

// ---- the provider ---------------------------------------------------------------------------

/// A client's post to an item of a `Provider`'s service (`Provider.poll_post`): `user`,
/// `item`, `refresh` (a full image, else an update), `fields` (a dict by dictionary name).
/// Answer it once: `Provider.accept`, `Provider.refuse` or `Provider.publish_post`.
#[pyclass(module = "peregrine.md", frozen)]
pub struct Post {
    #[pyo3(get)]
    user: String,
    #[pyo3(get)]
    item: String,
    #[pyo3(get)]
    refresh: bool,
    #[pyo3(get)]
    fields: Py<PyDict>,
    /// `None` once answered.
    inner: Mutex<Option<RsPost>>,
}

impl Post {
    fn take(&self, py: Python<'_>) -> PyResult<RsPost> {
        lock_attached(py, &self.inner).take().ok_or_else(|| {
            PyValueError::new_err(format!(
                "the post to {} was answered already: answer each post once",
                self.item
            ))
        })
    }
}

#[pymethods]
impl Post {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Post(user={:?}, item={:?}, refresh={}, fields={})",
            self.user,
            self.item,
            if self.refresh { "True" } else { "False" },
            self.fields.bind(py).repr()?
        ))
    }
}

fn provider_error(e: ProviderError) -> PyErr {
    match e {
        ProviderError::Refused(_) => PyValueError::new_err(e.to_string()),
        ProviderError::BackPressured => BackPressured::new_err(e.to_string()),
        _ => MarketDataError::new_err(e.to_string()),
    }
}

struct ProviderState {
    provider: RsProvider,
    closed: bool,
}

/// Publishes one service's items on the backbone: see `peregrine.md`.
#[pyclass(module = "peregrine.md", frozen)]
pub struct Provider {
    inner: Mutex<ProviderState>,
    service: String,
}

impl Provider {
    fn state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, ProviderState>> {
        let g = lock_attached(py, &self.inner);
        if g.closed {
            return Err(Closed::new_err(format!(
                "the provider of {} is closed",
                self.service
            )));
        }
        Ok(g)
    }

    fn send(
        &self,
        py: Python<'_>,
        refresh: bool,
        item: &str,
        item_seq: Option<u32>,
        fields: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let mut s = self.state(py)?;
        // Typed by the provider's own dictionary (which checks them again).
        let owned = fields_of(s.provider.dictionary(), fields, kwargs)?;
        let fields: Vec<Field<'_>> = owned
            .iter()
            .map(|(fid, v)| Field::new(*fid, v.value()))
            .collect();
        match (refresh, item_seq) {
            (true, None) => s.provider.refresh(item, &fields),
            (false, None) => s.provider.update(item, &fields),
            (true, Some(n)) => s.provider.refresh_numbered(item, &fields, n),
            (false, Some(n)) => s.provider.update_numbered(item, &fields, n),
        }
        .map_err(provider_error)
    }
}

#[pymethods]
impl Provider {
    /// A provider of `service` publishing on `backbone` (sealed with the user's key unless
    /// the URI says `auth=none`); image requests are read on `requests` (default: the
    /// backbone's port + 1). `dictionary`: the path of a dictionary file (default: the
    /// built-in one). `context`: a `peregrine.Context` (default: the environment's).
    #[new]
    #[pyo3(signature = (service, backbone = DEFAULT_BACKBONE, requests = None, dictionary = None, max_items = None, context = None))]
    fn new(
        py: Python<'_>,
        service: &str,
        backbone: &str,
        requests: Option<String>,
        dictionary: Option<&str>,
        max_items: Option<usize>,
        context: Option<PyRef<'_, crate::Context>>,
    ) -> PyResult<Self> {
        let mut o = ProviderOptions::new(service, backbone);
        o.requests = requests;
        o.dictionary = load_dictionary(dictionary)?;
        if let Some(m) = max_items {
            o.max_items = m;
        }
        let ctx = match &context {
            Some(c) => {
                c.open()?;
                c.inner.clone()
            }
            None => {
                peregrine::Context::from_env().map_err(|e| ConfigError::new_err(e.to_string()))?
            }
        };
        let provider = py
            .detach(|| RsProvider::with_options(&ctx, o))
            .map_err(provider_error)?;
        Ok(Provider {
            inner: Mutex::new(ProviderState {
                provider,
                closed: false,
            }),
            service: service.to_string(),
        })
    }

    /// Publishes `item`'s full image: every field it has, from a dict of field name (or
    /// `"#FID"`, or int id) to value, and keywords. A new item, or a new image of a known one.
    /// Raises ValueError for bad input (nothing sent), `peregrine.BackPressured` when the
    /// backbone's slowest subscriber has no room (nothing sent: call `do_work`, retry).
    #[pyo3(signature = (item, fields = None, **kwargs))]
    fn refresh(
        &self,
        py: Python<'_>,
        item: &str,
        fields: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.send(py, true, item, None, fields, kwargs)
    }

    /// `refresh` numbered `item_seq` by the application: the upstream's numbering, so that
    /// two providers fed the same stream publish the same numbers and a distributor takes
    /// each message from whichever comes first (A/B feeds). It must be after the item's last
    /// number (ValueError otherwise); unnumbered messages follow on from it.
    #[pyo3(signature = (item, item_seq, fields = None, **kwargs))]
    fn refresh_numbered(
        &self,
        py: Python<'_>,
        item: &str,
        item_seq: u32,
        fields: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.send(py, true, item, Some(item_seq), fields, kwargs)
    }

    /// `update` numbered `item_seq` by the application (see `refresh_numbered`).
    #[pyo3(signature = (item, item_seq, fields = None, **kwargs))]
    fn update_numbered(
        &self,
        py: Python<'_>,
        item: &str,
        item_seq: u32,
        fields: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.send(py, false, item, Some(item_seq), fields, kwargs)
    }

    /// Publishes the fields of `item` that changed (as `refresh` takes them); the item must
    /// have been refreshed. Raises as `refresh` does.
    #[pyo3(signature = (item, fields = None, **kwargs))]
    fn update(
        &self,
        py: Python<'_>,
        item: &str,
        fields: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.send(py, false, item, None, fields, kwargs)
    }

    /// Publishes `item`'s state: "stale" (its image is not to be trusted until the next
    /// refresh) or "closed" (no more of it; a later refresh reopens it), with a text.
    #[pyo3(signature = (item, state, text = ""))]
    fn status(&self, py: Python<'_>, item: &str, state: &str, text: &str) -> PyResult<()> {
        let state = match state {
            "stale" => ItemState::Stale,
            "closed" => ItemState::Closed,
            other => {
                return Err(PyValueError::new_err(format!(
                    "item {item}: state {other:?}: a provider sends \"stale\" or \"closed\" \
                     (ok is a refresh)"
                )))
            }
        };
        self.state(py)?
            .provider
            .status(item, state, text)
            .map_err(provider_error)
    }

    /// The next post a client made to an item of this service (a `Post`), or None. Posts
    /// arrive in `do_work`; answer each once.
    fn poll_post(&self, py: Python<'_>) -> PyResult<Option<Post>> {
        let mut s = self.state(py)?;
        let Some(post) = s.provider.poll_post() else {
            return Ok(None);
        };
        let conv = Conv::new(py, s.provider.dictionary(), false);
        let fields: Vec<(u16, Owned)> = post
            .fields()
            .iter()
            .map(|f| (f.fid, Owned::of(f.value)))
            .collect();
        Ok(Some(Post {
            user: post.user.clone(),
            item: post.item.clone(),
            refresh: post.refresh,
            fields: conv.dict(py, &fields)?.unbind(),
            inner: Mutex::new(Some(post)),
        }))
    }

    /// Accepts `post` (publishing it is the application's call).
    fn accept(&self, py: Python<'_>, post: &Post) -> PyResult<()> {
        let p = post.take(py)?;
        self.state(py)?.provider.accept(&p);
        Ok(())
    }

    /// Refuses `post`, with `reason` for the poster (at most 255 bytes are sent).
    #[pyo3(signature = (post, reason = ""))]
    fn refuse(&self, py: Python<'_>, post: &Post, reason: &str) -> PyResult<()> {
        let p = post.take(py)?;
        self.state(py)?.provider.refuse(&p, reason);
        Ok(())
    }

    /// Publishes `post` (an update of its item, or a refresh for a full image) and accepts
    /// it; one that cannot be published is refused to the poster with the reason, and this
    /// raises as `update` would.
    fn publish_post(&self, py: Python<'_>, post: &Post) -> PyResult<()> {
        let p = post.take(py)?;
        self.state(py)?
            .provider
            .publish_post(&p)
            .map_err(provider_error)
    }

    /// Reads image requests and posts (see `poll_post`) and answers a few, sends what is
    /// batched, runs the backbone's timers (heartbeats, NAK repair). Call it every
    /// millisecond or so, busy or idle. Returns the work done (0: idle).
    fn do_work(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.state(py)?.provider.do_work())
    }

    /// Sends what is batched now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.state(py)?.provider.flush().map_err(provider_error)
    }

    /// Ends the backbone session (distributors see the provider go: its items go stale).
    /// Later calls raise `peregrine.Closed`; counters stay readable.
    fn close(&self, py: Python<'_>) {
        let mut s = lock_attached(py, &self.inner);
        if !s.closed {
            s.closed = true;
            let p = &mut s.provider;
            py.detach(|| p.close());
        }
    }

    /// The `item_seq` the item's next message will carry (None: an unknown item).
    fn item_seq(&self, py: Python<'_>, item: &str) -> Option<u32> {
        lock_attached(py, &self.inner).provider.item_seq(item)
    }

    /// Every item published: (name, item_seq of the last message sent of it or None).
    fn items(&self, py: Python<'_>) -> Vec<(String, Option<u32>)> {
        lock_attached(py, &self.inner)
            .provider
            .items()
            .map(|(n, s)| (n.to_string(), s))
            .collect()
    }

    /// Answers to image requests waiting to be sent.
    #[getter]
    fn queued_refreshes(&self, py: Python<'_>) -> usize {
        lock_attached(py, &self.inner).provider.queued_refreshes()
    }

    #[getter]
    fn service(&self) -> &str {
        &self.service
    }

    /// The backbone URI as opened (with its key's path when sealed).
    #[getter]
    fn backbone_uri(&self, py: Python<'_>) -> String {
        lock_attached(py, &self.inner)
            .provider
            .backbone_uri()
            .to_string()
    }

    #[getter]
    fn requests_uri(&self, py: Python<'_>) -> String {
        lock_attached(py, &self.inner)
            .provider
            .requests_uri()
            .to_string()
    }

    /// How the backbone is sealed, in one line (the key file used, or a warning).
    #[getter]
    fn sealing(&self, py: Python<'_>) -> String {
        lock_attached(py, &self.inner).provider.sealing().describe()
    }

    #[getter]
    fn session_id(&self, py: Python<'_>) -> u32 {
        lock_attached(py, &self.inner).provider.session_id()
    }

    /// The counters, by name (refreshes, updates, image_requests, requests_coalesced...).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = lock_attached(py, &self.inner).provider.counters();
        named_counters(py, &c.values())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close(py);
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let s = lock_attached(py, &self.inner);
        format!(
            "<peregrine.md.Provider service={:?} backbone={:?}{}>",
            self.service,
            s.provider.backbone_uri(),
            if s.closed { " closed" } else { "" }
        )
    }
}

// ---- the consumer ---------------------------------------------------------------------------

fn consumer_error(e: ConsumerError) -> PyErr {
    match &e {
        ConsumerError::Address { .. } => PyValueError::new_err(e.to_string()),
        ConsumerError::Session(SessionError::LoginRefused { .. }) => {
            LoginRefused::new_err(e.to_string())
        }
        ConsumerError::Session(SessionError::Protocol { .. }) => {
            MarketDataError::new_err(e.to_string())
        }
        ConsumerError::Session(_) => PyValueError::new_err(e.to_string()),
        _ => MarketDataError::new_err(e.to_string()),
    }
}

/// An event as gathered while the GIL is released: names as indexes into the consumer's item
/// names, fields as a range of the poll's field array.
#[derive(Debug)]
enum Gathered {
    LoggedIn {
        address: usize,
    },
    Refresh {
        request: u32,
        item: u32,
        item_seq: u32,
        timestamp_ns: u64,
        solicited: bool,
        conflated: bool,
        snapshot: bool,
        fields: Range<usize>,
    },
    Update {
        request: u32,
        item: u32,
        item_seq: u32,
        timestamp_ns: u64,
        fields: Range<usize>,
    },
    Status {
        item: u32,
        state: ItemState,
        text: Box<str>,
        request: u32,
    },
    Gap {
        item: u32,
        expected: u32,
        got: u32,
    },
    Conflated {
        items: u32,
        updates_dropped: u32,
    },
    Disconnected {
        reason: Box<str>,
    },
    Service {
        service: Box<str>,
        up: bool,
        may_open: bool,
    },
    Ack {
        post_id: u32,
        item: u32,
        code: AckCode,
        text: Box<str>,
    },
    Dictionary {
        fields: usize,
    },
}

/// Item names seen, each made a Python str once.
#[derive(Default)]
struct ItemNames {
    index: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    py: Vec<Py<PyString>>,
}

impl ItemNames {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.into());
        self.index.insert(name.into(), i);
        i
    }

    /// Makes the Python strs of the names added since the last call.
    fn sync(&mut self, py: Python<'_>) {
        for n in &self.names[self.py.len()..] {
            self.py.push(PyString::new(py, n).unbind());
        }
    }
}

struct ConsumerState {
    consumer: AnyConsumer,
    names: ItemNames,
    events: Vec<Gathered>,
    fields: Vec<(u16, Owned)>,
}

impl ConsumerState {
    /// One `Consumer::poll` of up to `timeout`, its events gathered.
    fn gather(&mut self, timeout: Duration) -> Result<usize, ConsumerError> {
        let ConsumerState {
            consumer,
            names,
            events,
            fields,
        } = self;
        let mut take = |f: &FieldList<'_>| {
            let from = fields.len();
            fields.extend(f.iter().map(|f| (f.fid, Owned::of(f.value))));
            from..fields.len()
        };
        consumer.poll(timeout, &mut |e| {
            let g = match e {
                RsEvent::LoggedIn { address } => Gathered::LoggedIn { address },
                RsEvent::Refresh {
                    request,
                    item,
                    item_seq,
                    timestamp_ns,
                    solicited,
                    conflated,
                    snapshot,
                    fields,
                } => Gathered::Refresh {
                    request,
                    item: names.id(item),
                    item_seq,
                    timestamp_ns,
                    solicited,
                    conflated,
                    snapshot,
                    fields: take(&fields),
                },
                RsEvent::Update {
                    request,
                    item,
                    item_seq,
                    timestamp_ns,
                    fields,
                } => Gathered::Update {
                    request,
                    item: names.id(item),
                    item_seq,
                    timestamp_ns,
                    fields: take(&fields),
                },
                RsEvent::Status {
                    item,
                    state,
                    text,
                    request,
                } => Gathered::Status {
                    item: names.id(item),
                    state,
                    text: text.into(),
                    request,
                },
                RsEvent::Gap {
                    item,
                    expected,
                    got,
                } => Gathered::Gap {
                    item: names.id(item),
                    expected,
                    got,
                },
                RsEvent::Conflated {
                    items,
                    updates_dropped,
                } => Gathered::Conflated {
                    items,
                    updates_dropped,
                },
                RsEvent::Disconnected { reason } => Gathered::Disconnected {
                    reason: reason.into(),
                },
                RsEvent::Service {
                    service,
                    up,
                    may_open,
                } => Gathered::Service {
                    service: service.into(),
                    up,
                    may_open,
                },
                RsEvent::Ack {
                    post_id,
                    item,
                    code,
                    text,
                } => Gathered::Ack {
                    post_id,
                    item: names.id(item),
                    code,
                    text: text.into(),
                },
                RsEvent::Dictionary { dictionary } => Gathered::Dictionary {
                    fields: dictionary.len(),
                },
            };
            events.push(g);
        })
    }
}

/// The fields of one poll, shared by its events.
struct PollFields {
    fields: Vec<(u16, Owned)>,
    conv: Arc<Conv>,
}

/// One event of a `Consumer`: `kind` is "refresh", "update", "status", "gap", "conflated",
/// "logged_in" or "disconnected"; the attributes that do not apply to it are None.
///
/// - refresh / update: `request` (the request it is for: an item several requests hold comes
///   once per request, each with its own view's fields), `item`, `item_seq`, `timestamp_ns`
///   (the provider's monotonic clock), `fields` (dict by dictionary name, `"#FID"` for ids it
///   does not know); refresh also `solicited`, `conflated` and `snapshot` (it answers the
///   `snapshot` request `request`);
/// - status: `item`, `state` ("stale", "closed", "not-entitled", "not-found", "rejected"),
///   `text`, `request` (the request it answers, 0 for none); "closed" with an empty `item`
///   ends a snapshot;
/// - gap: `item`, `expected`, `got` (item_seq values; the update follows as its own event);
/// - conflated: `items` (refreshes that follow), `updates_dropped`;
/// - service: `item` (the service's name), `state` ("up" while a provider of it is live, else
///   "down"), `may_open` (this user may open it): after each login and on every change;
/// - ack: the answer to a `post`, exactly one per post: `post_id`, `item`, `state` ("accepted",
///   or why not: "refused", "not-entitled", "service-down", "unknown-service", "busy",
///   "timeout", "invalid"), `text` (the reason);
/// - dictionary: the distributor's dictionary arrived (`items`: its fields);
/// - logged_in: `text` (the distributor's address); disconnected: `text` (why: the
///   connection broke, or an attempt to reconnect failed; another attempt follows).
#[pyclass(module = "peregrine.md", frozen)]
pub struct Event {
    #[pyo3(get)]
    kind: Py<PyString>,
    #[pyo3(get)]
    item: Option<Py<PyString>>,
    #[pyo3(get)]
    item_seq: Option<u32>,
    #[pyo3(get)]
    timestamp_ns: Option<u64>,
    #[pyo3(get)]
    state: Option<Py<PyString>>,
    #[pyo3(get)]
    text: Option<Py<PyString>>,
    #[pyo3(get)]
    request: Option<u32>,
    #[pyo3(get)]
    solicited: Option<bool>,
    #[pyo3(get)]
    conflated: Option<bool>,
    #[pyo3(get)]
    snapshot: Option<bool>,
    #[pyo3(get)]
    may_open: Option<bool>,
    #[pyo3(get)]
    expected: Option<u32>,
    #[pyo3(get)]
    got: Option<u32>,
    #[pyo3(get)]
    items: Option<u32>,
    #[pyo3(get)]
    updates_dropped: Option<u32>,
    #[pyo3(get)]
    post_id: Option<u32>,
    source: Option<(Arc<PollFields>, Range<usize>)>,
    fields: PyOnceLock<Py<PyDict>>,
}

impl Event {
    fn new(kind: Bound<'_, PyString>) -> Event {
        Event {
            kind: kind.unbind(),
            item: None,
            item_seq: None,
            timestamp_ns: None,
            state: None,
            text: None,
            request: None,
            solicited: None,
            conflated: None,
            snapshot: None,
            may_open: None,
            expected: None,
            got: None,
            items: None,
            updates_dropped: None,
            post_id: None,
            source: None,
            fields: PyOnceLock::new(),
        }
    }
}

#[pymethods]
impl Event {
    /// The fields of a refresh or update (None for other events), by dictionary name: made
    /// when first read, then the same dict.
    #[getter]
    fn fields(&self, py: Python<'_>) -> PyResult<Option<Py<PyDict>>> {
        let Some((src, range)) = &self.source else {
            return Ok(None);
        };
        let d = self.fields.get_or_try_init(py, || {
            src.conv
                .dict(py, &src.fields[range.clone()])
                .map(Bound::unbind)
        })?;
        Ok(Some(d.clone_ref(py)))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut s = format!("<peregrine.md.Event {}", self.kind.bind(py));
        if let Some(i) = &self.item {
            s += &format!(" {}", i.bind(py));
        }
        if let Some(v) = self.item_seq {
            s += &format!(" item_seq={v}");
        }
        if let Some(v) = &self.state {
            s += &format!(" {}", v.bind(py));
        }
        if let Some((src, range)) = &self.source {
            for (fid, v) in &src.fields[range.clone()] {
                let v = match v {
                    Owned::Str(t) => format!("{t:?}"),
                    Owned::Price(p) => p.to_string(),
                    Owned::Int(i) => i.to_string(),
                    Owned::Enum(c) => c.to_string(),
                    Owned::Time(t) => t.to_string(),
                };
                s += &format!(" {}={v}", src.conv.name(py, *fid));
            }
        }
        for (k, v) in [("expected", self.expected), ("got", self.got)] {
            if let Some(v) = v {
                s += &format!(" {k}={v}");
            }
        }
        if let Some(t) = &self.text {
            s += &format!(" {:?}", t.bind(py).to_str()?);
        }
        Ok(s + ">")
    }
}

/// Logs in to a distributor and receives the items it opens: see `peregrine.md`. One thread
/// at a time uses it: a call from another thread waits until a `poll` in progress returns.
#[pyclass(module = "peregrine.md", frozen)]
pub struct Consumer {
    /// `None` once disconnected.
    inner: Mutex<Option<ConsumerState>>,
    conv: Arc<Conv>,
    addresses: Vec<String>,
    user: String,
}

impl Consumer {
    fn state<'a>(&'a self, py: Python<'_>) -> PyResult<MutexGuard<'a, Option<ConsumerState>>> {
        let g = lock_attached(py, &self.inner);
        if g.is_none() {
            return Err(Closed::new_err("the consumer is disconnected"));
        }
        Ok(g)
    }

    /// `open` and `snapshot`: the patterns and the view's names read from Python.
    fn request(
        &self,
        py: Python<'_>,
        service: &str,
        patterns: &Bound<'_, PyAny>,
        snapshot: bool,
        view: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let patterns = strings("patterns", patterns)?;
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        let view = view.map(|v| strings("view", v)).transpose()?;
        let view: Option<Vec<&str>> = view
            .as_ref()
            .map(|v| v.iter().map(String::as_str).collect());
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        if snapshot {
            plain(&mut s.consumer, "snapshot")?
                .request(service, &patterns, true, view.as_deref())
                .map_err(consumer_error)
        } else {
            s.consumer
                .request(service, &patterns, view.as_deref())
                .map_err(consumer_error)
        }
    }

    /// Makes the `Event`s of what `state` gathered (and clears it).
    fn events<'py>(
        &self,
        py: Python<'py>,
        state: &mut ConsumerState,
    ) -> PyResult<Bound<'py, PyList>> {
        state.names.sync(py);
        let poll = Arc::new(PollFields {
            fields: std::mem::take(&mut state.fields),
            conv: self.conv.clone(),
        });
        let names = &state.names.py;
        let item = |i: u32| Some(names[i as usize].clone_ref(py));
        let list = PyList::empty(py);
        for g in state.events.drain(..) {
            let e = match g {
                Gathered::LoggedIn { address } => Event {
                    text: self
                        .addresses
                        .get(address)
                        .map(|a| PyString::new(py, a).unbind()),
                    ..Event::new(PyString::intern(py, "logged_in"))
                },
                Gathered::Refresh {
                    request,
                    item: i,
                    item_seq,
                    timestamp_ns,
                    solicited,
                    conflated,
                    snapshot,
                    fields,
                } => Event {
                    request: Some(request),
                    item: item(i),
                    item_seq: Some(item_seq),
                    timestamp_ns: Some(timestamp_ns),
                    solicited: Some(solicited),
                    conflated: Some(conflated),
                    snapshot: Some(snapshot),
                    source: Some((poll.clone(), fields)),
                    ..Event::new(PyString::intern(py, "refresh"))
                },
                Gathered::Update {
                    request,
                    item: i,
                    item_seq,
                    timestamp_ns,
                    fields,
                } => Event {
                    request: Some(request),
                    item: item(i),
                    item_seq: Some(item_seq),
                    timestamp_ns: Some(timestamp_ns),
                    source: Some((poll.clone(), fields)),
                    ..Event::new(PyString::intern(py, "update"))
                },
                Gathered::Status {
                    item: i,
                    state,
                    text,
                    request,
                } => Event {
                    item: item(i),
                    state: Some(PyString::intern(py, state.name()).unbind()),
                    text: Some(PyString::new(py, &text).unbind()),
                    request: Some(request),
                    ..Event::new(PyString::intern(py, "status"))
                },
                Gathered::Gap {
                    item: i,
                    expected,
                    got,
                } => Event {
                    item: item(i),
                    expected: Some(expected),
                    got: Some(got),
                    ..Event::new(PyString::intern(py, "gap"))
                },
                Gathered::Conflated {
                    items,
                    updates_dropped,
                } => Event {
                    items: Some(items),
                    updates_dropped: Some(updates_dropped),
                    ..Event::new(PyString::intern(py, "conflated"))
                },
                Gathered::Disconnected { reason } => Event {
                    text: Some(PyString::new(py, &reason).unbind()),
                    ..Event::new(PyString::intern(py, "disconnected"))
                },
                Gathered::Service {
                    service,
                    up,
                    may_open,
                } => Event {
                    item: Some(PyString::new(py, &service).unbind()),
                    state: Some(PyString::intern(py, if up { "up" } else { "down" }).unbind()),
                    may_open: Some(may_open),
                    ..Event::new(PyString::intern(py, "service"))
                },
                Gathered::Ack {
                    post_id,
                    item: i,
                    code,
                    text,
                } => Event {
                    item: item(i),
                    post_id: Some(post_id),
                    state: Some(PyString::intern(py, code.name()).unbind()),
                    text: Some(PyString::new(py, &text).unbind()),
                    ..Event::new(PyString::intern(py, "ack"))
                },
                Gathered::Dictionary { fields } => Event {
                    items: Some(u32::try_from(fields).unwrap_or(u32::MAX)),
                    ..Event::new(PyString::intern(py, "dictionary"))
                },
            };
            list.append(Bound::new(py, e)?)?;
        }
        Ok(list)
    }
}

/// A list of str from one str or a sequence of them.
/// A dict of counters from their names and values.
fn named_counters<'py>(py: Python<'py>, values: &[(&str, u64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in values {
        d.set_item(name, value)?;
    }
    Ok(d)
}

/// The consumer's TLS from the constructor's `tls_*` arguments: plaintext without `tls_ca`.
fn connect_options(
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
    server_name: Option<&str>,
) -> PyResult<peregrine_market_data::ConnectOptions> {
    use peregrine_market_data::tls::ClientTls;
    let Some(ca) = ca else {
        if cert.is_some() || key.is_some() || server_name.is_some() {
            return Err(PyValueError::new_err(
                "tls_cert, tls_key and tls_server_name need tls_ca (the CA of the distributor's certificate)",
            ));
        }
        return Ok(peregrine_market_data::ConnectOptions::plain());
    };
    let identity = match (&cert, &key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "tls_cert and tls_key go together: give both, or neither",
            ))
        }
    };
    let mut tls =
        ClientTls::load(&ca, identity).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Some(name) = server_name {
        tls = tls
            .with_server_name(name)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
    }
    Ok(peregrine_market_data::ConnectOptions::tls(tls))
}

/// The single login of `c`, for the calls a warm standby does not take (`call` names the one
/// refused).
fn plain<'a>(c: &'a mut AnyConsumer, call: &str) -> PyResult<&'a mut RsConsumer> {
    c.plain().ok_or_else(|| {
        PyValueError::new_err(format!(
            "{call}() is not available on a warm standby consumer: it pauses and resumes its \
             requests on the standby itself, and a request made on one login only would number \
             the two logins' requests apart. Use open() and close(), or a consumer made without \
             warm_standby"
        ))
    })
}

fn strings(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    v.extract::<Vec<String>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: give a str or a list of str, not {}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

#[pymethods]
impl Consumer {
    /// Connects to the first distributor of `addresses` ("HOST:PORT", or a list tried in
    /// turn) that accepts, logs in as `user` with `token` (str or bytes; default: the
    /// environment's PEREGRINE_MD_TOKEN), and returns once logged in (within 10 s, else
    /// `MarketDataError`; a refused login raises `LoginRefused`). `times`: "datetime" (UTC,
    /// to the microsecond) or "ns" (int nanoseconds, exact). `dictionary`: the path of a
    /// dictionary file for field names (default: the built-in one). `busy_poll_us`: after
    /// data arrives, `poll` keeps reading this long without sleeping (lower latency, a busy
    /// core; default 0). `tls_ca`: connect over TLS, checking the distributor's certificate
    /// against this PEM CA file (and the host of the address, or `tls_server_name`);
    /// `tls_cert` and `tls_key`: this consumer's certificate and key, for a user the
    /// distributor identifies by its certificate. `ping_interval_ms`: the liveness interval
    /// to ask the distributor for (default: the distributor's); a distributor silent for
    /// three intervals is given up and the next address tried. Call `poll` at least once an
    /// interval: a consumer that does not is silent too, and the distributor closes it.
    #[new]
    #[pyo3(signature = (addresses, user, token = None, times = "datetime", dictionary = None, busy_poll_us = 0, tls_ca = None, tls_cert = None, tls_key = None, tls_server_name = None, ping_interval_ms = None, warm_standby = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        addresses: &Bound<'_, PyAny>,
        user: &str,
        token: Option<&Bound<'_, PyAny>>,
        times: &str,
        dictionary: Option<&str>,
        busy_poll_us: u64,
        tls_ca: Option<std::path::PathBuf>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        tls_server_name: Option<&str>,
        ping_interval_ms: Option<u32>,
        warm_standby: bool,
    ) -> PyResult<Self> {
        let mut options = connect_options(tls_ca, tls_cert, tls_key, tls_server_name)?;
        if let Some(ms) = ping_interval_ms {
            if !(1..=3_600_000).contains(&ms) {
                return Err(PyValueError::new_err(format!(
                    "ping_interval_ms={ms}: give 1 to 3600000 (milliseconds), or None for the \
                     distributor's default"
                )));
            }
            options = options.with_ping_interval(Duration::from_millis(ms.into()));
        }
        let addresses = strings("addresses", addresses)?;
        if warm_standby && addresses.len() != 2 {
            return Err(PyValueError::new_err(format!(
                "warm_standby=True takes two addresses, the active distributor's and the \
                 standby's, not {}: give [\"HOST:PORT\", \"HOST:PORT\"]",
                addresses.len()
            )));
        }
        let times_ns = match times {
            "datetime" => false,
            "ns" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "times={other:?}: give \"datetime\" (UTC datetime, to the microsecond) or \
                     \"ns\" (int nanoseconds since the epoch)"
                )))
            }
        };
        let token: Vec<u8> = match token {
            Some(t) if t.is_instance_of::<PyBytes>() => t.cast::<PyBytes>()?.as_bytes().to_vec(),
            Some(t) => t
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("token: give a str or bytes"))?
                .to_str()?
                .as_bytes()
                .to_vec(),
            None => std::env::var("PEREGRINE_MD_TOKEN")
                .map_err(|_| {
                    PyValueError::new_err(
                        "no token: give token=... or set PEREGRINE_MD_TOKEN in the environment",
                    )
                })?
                .into_bytes(),
        };
        // A dictionary file of the application's is checked against the distributor's; without
        // one, fields are named by the distributor's.
        if let Some(path) = dictionary {
            options = options.with_dictionary(load_dictionary(Some(path))?);
        }
        let user_text = user.to_string();
        let mut consumer: AnyConsumer = py
            .detach(|| {
                if warm_standby {
                    WarmStandby::connect(&addresses[0], &addresses[1], &user_text, &token, options)
                        .map(AnyConsumer::from)
                } else {
                    RsConsumer::connect_with(&addresses, &user_text, &token, options)
                        .map(AnyConsumer::from)
                }
            })
            .map_err(consumer_error)?;
        let dict = match dictionary {
            Some(path) => load_dictionary(Some(path))?,
            None => consumer.active().dictionary().clone(),
        };
        let conv = Arc::new(Conv::new(py, &dict, times_ns));
        consumer.set_busy_poll(Duration::from_micros(busy_poll_us));
        Ok(Consumer {
            inner: Mutex::new(Some(ConsumerState {
                consumer,
                names: ItemNames::default(),
                events: Vec::new(),
                fields: Vec::new(),
            })),
            conv,
            addresses,
            user: user.to_string(),
        })
    }

    /// Opens `patterns` (an item name, a glob such as "MSFT.*", or a list of them) of
    /// `service`; returns the request's id. Their images and updates come through `poll`;
    /// an item not entitled comes as a status "not-entitled", one not published yet as
    /// "not-found" (kept open: its refresh follows when it is published). `view`: the field
    /// names (or "#FID") to receive only; an update that changes none of them is not sent.
    #[pyo3(signature = (service, patterns, view = None))]
    fn open(
        &self,
        py: Python<'_>,
        service: &str,
        patterns: &Bound<'_, PyAny>,
        view: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        self.request(py, service, patterns, false, view)
    }

    /// Asks for the images of `patterns` of `service` only; returns the request's id. Each
    /// item comes as a "refresh" event with `snapshot` True (or a "status"), then a "status"
    /// "closed" with an empty `item` and this `request` ends it; nothing more of it follows.
    #[pyo3(signature = (service, patterns, view = None))]
    fn snapshot(
        &self,
        py: Python<'_>,
        service: &str,
        patterns: &Bound<'_, PyAny>,
        view: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        self.request(py, service, patterns, true, view)
    }

    /// Posts fields (a dict of name to value, then keywords, typed as `Provider.update`
    /// takes them) to `item` of `service`: an update, or with `refresh=True` a full image (a
    /// new item). Returns the post's id; exactly one "ack" event with that `post_id` answers
    /// it ("accepted", or why not). Raises `MarketDataError` when not logged in.
    #[pyo3(signature = (service, item, fields = None, refresh = false, **kwargs))]
    fn post(
        &self,
        py: Python<'_>,
        service: &str,
        item: &str,
        fields: Option<&Bound<'_, PyAny>>,
        refresh: bool,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u32> {
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        let owned = fields_of(s.consumer.active().dictionary(), fields, kwargs)?;
        let list: Vec<Field<'_>> = owned
            .iter()
            .map(|(fid, v)| Field::new(*fid, v.value()))
            .collect();
        s.consumer
            .active_mut()
            .post(service, item, &list, refresh)
            .map_err(consumer_error)
    }

    /// The distributor's field dictionary as downloaded at the last login (as `dictionary()`
    /// gives one), or None (a version 1 distributor).
    fn downloaded_dictionary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let g = self.state(py)?;
        let s = g.as_ref().expect("checked");
        s.consumer
            .active()
            .downloaded_dictionary()
            .map(|d| dictionary_dict(py, d))
            .transpose()
    }

    /// Pauses a request (0: every request open now): the distributor keeps its items' latest
    /// state only until `resume`; kept across reconnections.
    fn pause(&self, py: Python<'_>, request: u32) -> PyResult<()> {
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        plain(&mut s.consumer, "pause")?
            .pause(request)
            .map_err(consumer_error)
    }

    /// Resumes a paused request (0: every one): a "refresh" (`conflated` True) or "status"
    /// per item that changed meanwhile, then its updates again.
    fn resume(&self, py: Python<'_>, request: u32) -> PyResult<()> {
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        plain(&mut s.consumer, "resume")?
            .resume(request)
            .map_err(consumer_error)
    }

    /// Closes a request (what it alone opened stops).
    fn close(&self, py: Python<'_>, request: u32) -> PyResult<()> {
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        s.consumer.close(request).map_err(consumer_error)
    }

    /// Waits up to `timeout` seconds (None: until something arrives) and returns the events
    /// received, a list of `Event` (empty when the timeout passed with none). Other Python
    /// threads run while it waits; Ctrl-C interrupts it. A lost connection is an event
    /// ("disconnected", after a "status" stale for every item) and the consumer reconnects
    /// by itself; a refused login raises `LoginRefused`.
    #[pyo3(signature = (timeout = 1.0))]
    fn poll<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let deadline = match timeout {
            Some(t) if t >= 0.0 && t.is_finite() => {
                Some(Instant::now() + Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout={t} is not a number of seconds: give 0 or more, or None"
                )))
            }
            None => None,
        };
        let mut g = self.state(py)?;
        let s = g.as_mut().expect("checked");
        loop {
            let slice = deadline.map_or(POLL_SLICE, |d| {
                d.saturating_duration_since(Instant::now()).min(POLL_SLICE)
            });
            let r = py.detach(|| s.gather(slice));
            if let Err(e) = r {
                s.events.clear();
                s.fields.clear();
                return Err(consumer_error(e));
            }
            if !s.events.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            py.check_signals()?;
        }
        self.events(py, s)
    }

    /// The current connection's socket (for `select`/`selectors`: when readable, call
    /// `poll(0)`), or -1 between connections (then call `poll` at least every 50 ms). It
    /// changes on reconnection: look it up again after "logged_in" or "disconnected".
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        let g = self.state(py)?;
        Ok(g.as_ref()
            .and_then(|s| s.consumer.active().readable_fd())
            .unwrap_or(-1))
    }

    #[getter]
    fn is_logged_in(&self, py: Python<'_>) -> PyResult<bool> {
        let g = self.state(py)?;
        Ok(g.as_ref()
            .is_some_and(|s| s.consumer.active().is_logged_in()))
    }

    /// The distributor connected to now ("HOST:PORT"), or None.
    #[getter]
    fn distributor(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let g = self.state(py)?;
        Ok(g.as_ref()
            .and_then(|s| s.consumer.active().distributor())
            .map(|a| a.to_string()))
    }

    #[getter]
    fn user(&self) -> &str {
        &self.user
    }

    /// The counters, by name (messages, refreshes, updates, statuses, gaps, connections,
    /// pings_sent, silences...).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = {
            let g = self.state(py)?;
            g.as_ref().expect("checked").consumer.active().counters()
        };
        named_counters(py, &c.values())
    }

    /// The distributor's services as its directory last said: a dict name -> {"up": bool,
    /// "may_open": bool} (empty before a login to a version 2 distributor).
    #[getter]
    fn services<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let list = {
            let g = self.state(py)?;
            g.as_ref().expect("checked").consumer.active().services()
        };
        let d = PyDict::new(py);
        for (name, up, may_open) in list {
            let e = PyDict::new(py);
            e.set_item("up", up)?;
            e.set_item("may_open", may_open)?;
            d.set_item(name, e)?;
        }
        Ok(d)
    }

    /// The last PING round trip to the distributor in microseconds (float), or None before
    /// one was timed.
    #[getter]
    fn rtt_us(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let g = self.state(py)?;
        let rtt = g.as_ref().expect("checked").consumer.active().rtt();
        Ok(rtt.map(|d| d.as_nanos() as f64 / 1_000.0))
    }

    /// The ping interval agreed with the distributor, in milliseconds (None: not logged in,
    /// or a distributor of protocol version 1).
    #[getter]
    fn ping_interval_ms(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        let g = self.state(py)?;
        let interval = g
            .as_ref()
            .expect("checked")
            .consumer
            .active()
            .ping_interval();
        Ok(interval.map(|d| d.as_millis() as u64))
    }

    /// How the standby of a consumer made with `warm_standby=True` stands: a dict with
    /// "standing_by" (True: logged in, every request paused with every image the active has,
    /// so a failover now passes no item on stale), "standby_items" (items it has a current
    /// image of), "failovers" (times it took over) and "duplicates_dropped" (messages of a new
    /// active not passed on because the application had them); None for a consumer of one
    /// login.
    #[getter]
    fn standby<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let g = self.state(py)?;
        let Some(w) = g.as_ref().expect("checked").consumer.warm() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("standing_by", w.standing_by())?;
        d.set_item("standby_items", w.standby_items())?;
        d.set_item("failovers", w.failovers())?;
        d.set_item("duplicates_dropped", w.duplicates_dropped())?;
        Ok(Some(d))
    }

    /// Closes the connection; later calls raise `peregrine.Closed`.
    fn disconnect(&self, py: Python<'_>) {
        lock_attached(py, &self.inner).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.disconnect(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "<peregrine.md.Consumer user={:?} distributors={:?}>",
            self.user, self.addresses
        )
    }
}

/// The fields of a dictionary (the built-in one, or the file at `path`): a dict of name to
/// {"fid": int, "type": "int" | "price" | "time" | "enum" | "string", "values": {code: name}}.
#[pyfunction]
#[pyo3(signature = (path = None))]
fn dictionary<'py>(py: Python<'py>, path: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
    dictionary_dict(py, &load_dictionary(path)?)
}

/// A dictionary as `dictionary()` gives it.
fn dictionary_dict<'py>(py: Python<'py>, dict: &Dictionary) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for d in dict.iter() {
        let entry = PyDict::new(py);
        entry.set_item("fid", d.fid)?;
        entry.set_item("type", d.kind.name())?;
        let values = PyDict::new(py);
        for (code, name) in &d.values {
            values.set_item(code, name)?;
        }
        entry.set_item("values", values)?;
        out.set_item(&d.name, entry)?;
    }
    Ok(out)
}

/// The submodule `_md` of `peregrine._peregrine`.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, "_md")?;
    m.add_class::<Provider>()?;
    m.add_class::<Consumer>()?;
    m.add_class::<Event>()?;
    m.add_class::<Post>()?;
    m.add_function(wrap_pyfunction!(dictionary, &m)?)?;
    m.add("MarketDataError", py.get_type::<MarketDataError>())?;
    m.add("LoginRefused", py.get_type::<LoginRefused>())?;
    m.add("DEFAULT_BACKBONE", DEFAULT_BACKBONE)?;
    parent.add_submodule(&m)
}
