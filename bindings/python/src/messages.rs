//! What a poll hands Python: one `Message`, or a `Batch` of many in one buffer with NumPy-ready
//! columns, gathered with the GIL released.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyMemoryView, PySlice, PyString};

/// One received message: `payload` is a memoryview over the poll's buffer (read-only; take
/// `bytes(message.payload)` to keep a copy of this message alone).
#[pyclass(module = "peregrine", frozen)]
pub(super) struct Message {
    #[pyo3(get)]
    pub(super) sequence: u64,
    #[pyo3(get)]
    pub(super) session_id: u32,
    pub(super) topic: Py<PyString>,
    /// The poll's buffer (a memoryview of bytes) and this message's part of it.
    pub(super) buffer: Py<PyMemoryView>,
    pub(super) start: usize,
    pub(super) end: usize,
}

#[pymethods]
impl Message {
    #[getter]
    pub(super) fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let slice = PySlice::new(py, self.start as isize, self.end as isize, 1);
        self.buffer.bind(py).get_item(slice)
    }

    #[getter]
    pub(super) fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }

    pub(super) fn __len__(&self) -> usize {
        self.end - self.start
    }

    pub(super) fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<peregrine.Message topic={:?} sequence={} session_id={:#010x} {} bytes>",
            self.topic.bind(py).to_string(),
            self.sequence,
            self.session_id,
            self.end - self.start
        )
    }
}

/// Messages of one poll as columns: `data` holds every payload back to back, message `i` is
/// `data[offsets[i]:offsets[i + 1]]`; `sequences`, `session_ids` and `offsets` are memoryviews
/// of unsigned integers. Indexing or iterating gives `Message`s.
#[pyclass(module = "peregrine", frozen)]
pub(super) struct Batch {
    #[pyo3(get)]
    pub(super) data: Py<PyMemoryView>,
    #[pyo3(get)]
    pub(super) offsets: Py<PyAny>,
    #[pyo3(get)]
    pub(super) sequences: Py<PyAny>,
    #[pyo3(get)]
    pub(super) session_ids: Py<PyAny>,
    /// One topic per message (subscribers by pattern), or the subscriber's for all.
    pub(super) topics: Vec<Py<PyString>>,
    pub(super) starts: Vec<usize>,
    pub(super) seqs: Vec<u64>,
    pub(super) sessions: Vec<u32>,
}

#[pymethods]
impl Batch {
    pub(super) fn __len__(&self) -> usize {
        self.seqs.len()
    }

    pub(super) fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<Message> {
        let n = self.seqs.len() as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "message {index} of a batch of {n}"
            )));
        }
        let i = i as usize;
        Ok(Message {
            sequence: self.seqs[i],
            session_id: self.sessions[i],
            topic: self.topics[i.min(self.topics.len() - 1)].clone_ref(py),
            buffer: self.data.clone_ref(py),
            start: self.starts[i],
            end: self.starts[i + 1],
        })
    }

    pub(super) fn __iter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // A list's iterator over the messages (made when iterated).
        let b = slf.bind(py);
        let n = b.get().seqs.len();
        let items = (0..n)
            .map(|i| b.get().__getitem__(py, i as isize))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?
            .as_any()
            .try_iter()?
            .into_any()
            .unbind())
    }
}

/// What polling gathers before Python objects are made: payloads back to back, and per
/// message its start, sequence, session and topic.
#[derive(Default)]
pub(super) struct Gathered {
    pub(super) data: Vec<u8>,
    pub(super) starts: Vec<usize>,
    pub(super) seqs: Vec<u64>,
    pub(super) sessions: Vec<u32>,
    /// Per message, an index into `topic_names` (subscribers by pattern only).
    pub(super) topic_of: Vec<usize>,
    pub(super) topic_names: Vec<String>,
}

impl Gathered {
    /// The gathered messages of one topic as `Message`s over one buffer.
    pub(super) fn messages(&self, py: Python<'_>, topic: &Py<PyString>) -> PyResult<Vec<Message>> {
        let n = self.seqs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let buffer = PyMemoryView::from(PyBytes::new(py, &self.data).as_any())?.unbind();
        Ok((0..n)
            .map(|i| Message {
                sequence: self.seqs[i],
                session_id: self.sessions[i],
                topic: topic.clone_ref(py),
                buffer: buffer.clone_ref(py),
                start: self.starts[i],
                end: self.starts.get(i + 1).copied().unwrap_or(self.data.len()),
            })
            .collect())
    }

    pub(super) fn clear(&mut self) {
        self.data.clear();
        self.starts.clear();
        self.seqs.clear();
        self.sessions.clear();
        self.topic_of.clear();
    }

    pub(super) fn push(&mut self, topic: Option<&str>, m: peregrine::Message<'_>) {
        self.starts.push(self.data.len());
        self.data.extend_from_slice(m.payload);
        self.seqs.push(m.sequence);
        self.sessions.push(m.session_id);
        if let Some(t) = topic {
            let i = match self.topic_names.iter().position(|n| n == t) {
                Some(i) => i,
                None => {
                    self.topic_names.push(t.to_string());
                    self.topic_names.len() - 1
                }
            };
            self.topic_of.push(i);
        }
    }
}
