//! `Context`: configuration, topic resolution, and the factory of publishers and subscribers.

use super::publisher::Publisher;
use super::subscriber::Subscriber;
use crate::{idle_kind, lock, open_error, Closed, ConfigError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Mutex;

/// One process's handle on Peregrine: configuration and topic resolution, and the factory of
/// publishers and subscribers.
#[pyclass(module = "peregrine")]
pub(super) struct Context {
    pub(super) inner: peregrine::Context,
    pub(super) closed: Mutex<bool>,
}

impl Context {
    pub(super) fn open(&self) -> PyResult<()> {
        if *lock(&self.closed) {
            return Err(Closed::new_err("the context is closed"));
        }
        Ok(())
    }
}

#[pymethods]
impl Context {
    /// `config`: the text of a TOML configuration (docs/configuration.md); by default the
    /// environment's (`PEREGRINE_CONFIG`, `PEREGRINE_<TRANSPORT>_<KEY>`).
    #[new]
    #[pyo3(signature = (config = None))]
    pub(super) fn new(config: Option<&str>) -> PyResult<Self> {
        let inner = match config {
            Some(text) => peregrine::Config::from_toml(text, "Context(config=...)")
                .map(peregrine::Context::with_config),
            None => peregrine::Context::from_env(),
        }
        .map_err(|e| ConfigError::new_err(e.to_string()))?;
        Ok(Context {
            inner,
            closed: Mutex::new(false),
        })
    }

    /// A publisher of `topic` on the transport `uri` (`ipc://NAME`, `udp://HOST:PORT`...).
    pub(super) fn publisher(&self, topic: &str, uri: &str) -> PyResult<Publisher> {
        self.open()?;
        let p = self.inner.publisher(topic, uri).map_err(open_error)?;
        Ok(Publisher::new(p))
    }

    /// A publisher of `topic` found by name through topic resolution (no URI to share).
    pub(super) fn publish(&self, topic: &str) -> PyResult<Publisher> {
        self.open()?;
        let p = self.inner.publish(topic).map_err(open_error)?;
        Ok(Publisher::new(p))
    }

    /// A subscriber of `topic` on the transport `uri`; `idle` is what `idle()` and the
    /// message iterator do while nothing arrives: spin, yield, backoff or block.
    #[pyo3(signature = (topic, uri, idle = "backoff"))]
    pub(super) fn subscriber(
        &self,
        py: Python<'_>,
        topic: &str,
        uri: &str,
        idle: &str,
    ) -> PyResult<Subscriber> {
        self.open()?;
        let s = self
            .inner
            .subscriber(topic, uri, idle_kind(idle)?)
            .map_err(open_error)?;
        Ok(Subscriber::new(py, s))
    }

    /// A subscriber of every topic `pattern` matches, through topic resolution: a name, a
    /// glob (`md.eq.*`), or with `regex=True` a regular expression.
    #[pyo3(signature = (pattern, idle = "backoff", regex = false))]
    pub(super) fn subscribe(
        &self,
        py: Python<'_>,
        pattern: &str,
        idle: &str,
        regex: bool,
    ) -> PyResult<Subscriber> {
        self.open()?;
        let idle = idle_kind(idle)?;
        let s = if regex {
            let p = peregrine::Pattern::new(peregrine::PatternKind::Regex, pattern)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            self.inner.subscribe_pattern(p, idle)
        } else {
            self.inner.subscribe(pattern, idle)
        }
        .map_err(open_error)?;
        Ok(Subscriber::new(py, s))
    }

    /// Refuses to make more publishers and subscribers; those made stay open until closed.
    pub(super) fn close(&self) {
        *lock(&self.closed) = true;
    }

    pub(super) fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    pub(super) fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close();
    }
}
