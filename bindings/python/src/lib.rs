//! Peregrine for Python: the extension module `peregrine._peregrine`, re-exported by the
//! package `peregrine` (python/peregrine/__init__.py, with type stubs beside it).
//!
//! It wraps the Rust API directly (not the C ABI): a `Context` makes `Publisher`s and
//! `Subscriber`s; `Subscriber.poll` returns the messages received so far, each a `Message`
//! whose `payload` is a `memoryview` over one buffer per poll (one copy out of the transport,
//! none per message); `poll_batch` returns them as columns for loops that must stay cheap
//! per message. Errors are exceptions carrying the Rust error's text.
//!
//! The market data tier (`peregrine.md`: a provider and a consumer) is the submodule `_md`,
//! in md.rs.

mod context;
mod failover;
mod md;
mod merging;
mod messages;
mod publisher;
mod subscriber;

use context::Context;
use messages::{Batch, Gathered, Message};
use publisher::Publisher;
use subscriber::{Event, MessageIterator, Subscriber};

use peregrine::{IdleKind, OfferError};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Mutex, MutexGuard};

create_exception!(
    peregrine,
    PeregrineError,
    PyException,
    "An error from Peregrine."
);
create_exception!(
    peregrine,
    BackPressured,
    PeregrineError,
    "The slowest subscriber has not made room yet: nothing was published; try again."
);
create_exception!(
    peregrine,
    MessageTooLarge,
    PeregrineError,
    "The message is larger than the transport accepts."
);
create_exception!(
    peregrine,
    Closed,
    PeregrineError,
    "The publisher or subscriber is closed."
);
create_exception!(
    peregrine,
    OpenError,
    PeregrineError,
    "A publisher or subscriber could not be created."
);
create_exception!(
    peregrine,
    ConfigError,
    PeregrineError,
    "The configuration is invalid."
);

fn offer_error(e: OfferError) -> PyErr {
    match e {
        OfferError::BackPressured => BackPressured::new_err(e.to_string()),
        OfferError::TooLarge { .. } => MessageTooLarge::new_err(e.to_string()),
        OfferError::Closed => Closed::new_err(e.to_string()),
        _ => PeregrineError::new_err(e.to_string()),
    }
}

fn open_error(e: peregrine::OpenError) -> PyErr {
    OpenError::new_err(e.to_string())
}

fn idle_kind(name: &str) -> PyResult<IdleKind> {
    name.parse::<IdleKind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Counters as a dict of name to value.
fn counters_dict<'py>(
    py: Python<'py>,
    names: &[&str],
    values: &[u64],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in names.iter().zip(values) {
        d.set_item(name, value)?;
    }
    Ok(d)
}

/// Locks an object's Rust half (a Python object may be shared between threads).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[pymodule]
fn _peregrine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Context>()?;
    m.add_class::<Publisher>()?;
    m.add_class::<Subscriber>()?;
    m.add_class::<Message>()?;
    m.add_class::<Batch>()?;
    m.add_class::<Event>()?;
    m.add_class::<MessageIterator>()?;
    m.add_class::<failover::FailoverSubscriber>()?;
    m.add_class::<merging::MergingSubscriber>()?;
    m.add("PeregrineError", py.get_type::<PeregrineError>())?;
    m.add("BackPressured", py.get_type::<BackPressured>())?;
    m.add("MessageTooLarge", py.get_type::<MessageTooLarge>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("OpenError", py.get_type::<OpenError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    md::register(m)?;
    Ok(())
}
