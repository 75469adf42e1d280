//! `Publisher`: offers (one message, or many in one call), claims, flush, counters.

use crate::{counters_dict, lock, offer_error, PeregrineError};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::sync::Mutex;

/// Publishes messages on one topic; `offer` never blocks.
#[pyclass(module = "peregrine")]
pub(super) struct Publisher {
    pub(super) inner: Mutex<peregrine::Publisher>,
    pub(super) topic: String,
    pub(super) uri: String,
    /// The failover group's id after `set_failover_group`.
    pub(super) group_id: Mutex<Option<u32>>,
}

impl Publisher {
    pub(super) fn new(p: peregrine::Publisher) -> Self {
        Publisher {
            topic: p.topic().to_string(),
            uri: p.uri().to_string(),
            inner: Mutex::new(p),
            group_id: Mutex::new(None),
        }
    }
}

#[pymethods]
impl Publisher {
    /// Publishes `data` (bytes, bytearray, memoryview or any contiguous buffer, copied straight
    /// into the transport); returns its sequence number. Raises `BackPressured` when the
    /// slowest subscriber has not made room (nothing was sent: retry), `MessageTooLarge`,
    /// `Closed`.
    pub(super) fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let mut p = lock(&self.inner);
        if let Ok(bytes) = data.cast::<PyBytes>() {
            return p.offer(bytes.as_bytes()).map_err(offer_error);
        }
        let buffer = PyBuffer::<u8>::get(data)?;
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "offer needs a contiguous buffer of bytes: pass bytes(data) or a contiguous copy",
            ));
        }
        let mut failed = None;
        let r = p.offer_with(buffer.len_bytes(), |dst| {
            failed = buffer.copy_to_slice(py, dst).err();
        });
        if let Some(e) = failed {
            return Err(e);
        }
        r.map_err(offer_error)
    }

    /// Makes this publisher a member of the failover group `group`: `offer_sequenced` then
    /// carries the application's sequence with each message. Every member of a group must
    /// publish the same messages with the same sequences. Raises `ValueError` for a bad name.
    pub(super) fn set_failover_group(&self, group: &str) -> PyResult<()> {
        peregrine::failover::validate_group(group)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        *lock(&self.group_id) = Some(peregrine::failover::group_id(group));
        Ok(())
    }

    /// Publishes `data` (bytes or a contiguous buffer) as the failover group's `sequence`;
    /// returns the session's own sequence. Raises `PeregrineError` before
    /// `set_failover_group`, and what `offer` raises.
    pub(super) fn offer_sequenced(
        &self,
        py: Python<'_>,
        sequence: u64,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let Some(group) = *lock(&self.group_id) else {
            return Err(PeregrineError::new_err(
                "this publisher is not a member of a failover group: call set_failover_group first",
            ));
        };
        let mut p = lock(&self.inner);
        if let Ok(bytes) = data.cast::<PyBytes>() {
            return peregrine::failover::offer_as_member(&mut p, group, sequence, bytes.as_bytes())
                .map_err(offer_error);
        }
        let buffer = PyBuffer::<u8>::get(data)?;
        let bytes = buffer.to_vec(py)?;
        peregrine::failover::offer_as_member(&mut p, group, sequence, &bytes).map_err(offer_error)
    }

    /// Sends whatever is batched (network transports in normal mode).
    pub(super) fn flush(&self) -> PyResult<()> {
        lock(&self.inner).flush().map_err(offer_error)
    }

    /// The duty cycle (network transports): batches due, heartbeats, joins, NAKs. Returns the
    /// work done.
    pub(super) fn do_work(&self) -> usize {
        lock(&self.inner).do_work()
    }

    /// Ends the session; later offers raise `Closed`. Counters stay readable.
    pub(super) fn close(&self, py: Python<'_>) {
        let mut p = lock(&self.inner);
        let p: &mut peregrine::Publisher = &mut p;
        // Lingering for NAKs on UDP may take a while: let other Python threads run.
        py.detach(|| p.close());
    }

    /// Subscribers attached or followed now.
    #[getter]
    pub(super) fn subscriber_count(&self) -> usize {
        lock(&self.inner).subscriber_count()
    }

    #[getter]
    pub(super) fn topic(&self) -> &str {
        &self.topic
    }

    /// The URI subscribers use (with the bound port; for a publisher by topic, every URI it
    /// advertises, separated by spaces).
    #[getter]
    pub(super) fn uri(&self) -> &str {
        &self.uri
    }

    #[getter]
    pub(super) fn max_message_len(&self) -> usize {
        lock(&self.inner).max_message_len()
    }

    #[getter]
    pub(super) fn session_id(&self) -> u32 {
        lock(&self.inner).session_id()
    }

    /// The counters, by name (messages, bytes, back_pressured...).
    pub(super) fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = lock(&self.inner).counters();
        counters_dict(py, &peregrine::PublisherCounters::NAMES, &c.values())
    }

    pub(super) fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    pub(super) fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close(py);
    }

    pub(super) fn __repr__(&self) -> String {
        format!(
            "<peregrine.Publisher topic={:?} uri={:?}>",
            self.topic, self.uri
        )
    }
}
