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

mod consumer;
mod events;
mod provider;
mod values;

use consumer::Consumer;
use events::Event;
use provider::{Post, Provider};

use crate::PeregrineError;
use peregrine_market_data::DEFAULT_BACKBONE;
use peregrine_md::dictionary::Dictionary;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{PyDateTime, PyDict, PyType, PyTzInfo};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

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

/// A dict of counters from their names and values.
fn named_counters<'py>(py: Python<'py>, values: &[(&str, u64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in values {
        d.set_item(name, value)?;
    }
    Ok(d)
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
