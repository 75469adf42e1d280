//! `Subscriber`: polls (one message, a batch, an iterator), its idle strategy, events and
//! counters.

use super::messages::{Batch, Gathered, Message};
use crate::{counters_dict, lock, Closed};
use peregrine::SubscriberEvent;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView, PyString};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(super) struct SubscriberState {
    pub(super) subscriber: peregrine::Subscriber,
    pub(super) gathered: Gathered,
}

/// A subscriber's Rust half while it is open (`None` once closed).
pub(super) type Open = Option<SubscriberState>;

/// The lock of an open subscriber (checked open when taken).
pub(super) struct StateGuard<'a>(MutexGuard<'a, Open>);

impl std::ops::Deref for StateGuard<'_> {
    type Target = SubscriberState;
    fn deref(&self) -> &SubscriberState {
        self.0.as_ref().expect("checked open when locked")
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut SubscriberState {
        self.0.as_mut().expect("checked open when locked")
    }
}

/// Receives messages of one topic (or of every topic of a pattern), in order.
#[pyclass(module = "peregrine", frozen)]
pub(super) struct Subscriber {
    pub(super) inner: Mutex<Open>,
    pub(super) topic: Py<PyString>,
    pub(super) topic_text: String,
    pub(super) by_pattern: bool,
}

impl Subscriber {
    pub(super) fn new(py: Python<'_>, s: peregrine::Subscriber) -> Self {
        let topic_text = s.topic().to_string();
        // Only subscribers by pattern admit sources.
        let by_pattern = s.source_admission().is_some();
        Subscriber {
            topic: PyString::new(py, &topic_text).unbind(),
            topic_text,
            by_pattern,
            inner: Mutex::new(Some(SubscriberState {
                subscriber: s,
                gathered: Gathered::default(),
            })),
        }
    }

    /// The open subscriber, locked; `Closed` once closed.
    pub(super) fn state(&self) -> PyResult<StateGuard<'_>> {
        let guard = lock(&self.inner);
        if guard.is_none() {
            return Err(Closed::new_err("the subscriber is closed"));
        }
        Ok(StateGuard(guard))
    }

    /// Polls up to `limit` messages as `Message`s over one buffer.
    pub(super) fn poll_messages(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<Message>> {
        let mut state = self.state()?;
        let n = self.gather(&mut state, limit);
        if n == 0 {
            return Ok(Vec::new());
        }
        let g = &state.gathered;
        let buffer = Self::buffer(py, g)?.unbind();
        let mut topics = Vec::new();
        Ok((0..n)
            .map(|i| Message {
                sequence: g.seqs[i],
                session_id: g.sessions[i],
                topic: self.topic_of(py, g, &mut topics, i),
                buffer: buffer.clone_ref(py),
                start: g.starts[i],
                end: g.starts.get(i + 1).copied().unwrap_or(g.data.len()),
            })
            .collect())
    }

    /// Polls up to `limit` messages into the state's gathered columns.
    pub(super) fn gather(&self, state: &mut SubscriberState, limit: usize) -> usize {
        state.gathered.clear();
        let SubscriberState {
            subscriber,
            gathered,
        } = state;
        if self.by_pattern {
            subscriber.poll_topic(&mut |t, m| gathered.push(Some(t), m), limit)
        } else {
            subscriber.poll(&mut |m| gathered.push(None, m), limit)
        }
    }

    /// The topic of gathered message `i`.
    pub(super) fn topic_of(
        &self,
        py: Python<'_>,
        g: &Gathered,
        cache: &mut Vec<Py<PyString>>,
        i: usize,
    ) -> Py<PyString> {
        if !self.by_pattern {
            return self.topic.clone_ref(py);
        }
        if cache.len() < g.topic_names.len() {
            for name in &g.topic_names[cache.len()..] {
                cache.push(PyString::new(py, name).unbind());
            }
        }
        cache[g.topic_of[i]].clone_ref(py)
    }

    /// One bytes object holding the gathered payloads, as a memoryview.
    pub(super) fn buffer<'py>(py: Python<'py>, g: &Gathered) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(PyBytes::new(py, &g.data).as_any())
    }
}

/// The bytes of `values`, each as `to_bytes` gives them.
pub(super) fn ne_bytes<T: Copy, const N: usize>(
    values: &[T],
    to_bytes: fn(T) -> [u8; N],
) -> Vec<u8> {
    values.iter().flat_map(|&v| to_bytes(v)).collect()
}

/// A memoryview of unsigned integers (`format` "Q" or "I") over `bytes`, their native-order
/// bytes.
pub(super) fn column<'py>(
    py: Python<'py>,
    bytes: &[u8],
    format: &str,
) -> PyResult<Bound<'py, PyAny>> {
    PyMemoryView::from(PyBytes::new(py, bytes).as_any())?.call_method1("cast", (format,))
}

#[pymethods]
impl Subscriber {
    /// The messages received so far, up to `limit`, as a list of `Message` (empty when there
    /// are none; never blocks). Their payloads are views of one buffer per poll.
    #[pyo3(signature = (limit = 256))]
    pub(super) fn poll<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.poll_messages(py, limit)?)
    }

    /// The messages received so far, up to `limit`, as one `Batch` of columns: the cheapest
    /// way to receive many messages per call.
    #[pyo3(signature = (limit = 4096))]
    pub(super) fn poll_batch(&self, py: Python<'_>, limit: usize) -> PyResult<Batch> {
        let mut state = self.state()?;
        let n = self.gather(&mut state, limit);
        let g = &mut state.gathered;
        let mut offsets: Vec<u64> = g.starts.iter().map(|&s| s as u64).collect();
        offsets.push(g.data.len() as u64);
        let mut starts = std::mem::take(&mut g.starts);
        starts.push(g.data.len());
        let mut topics = Vec::new();
        let topic_list = if self.by_pattern {
            (0..n)
                .map(|i| self.topic_of(py, g, &mut topics, i))
                .collect()
        } else {
            vec![self.topic.clone_ref(py)]
        };
        let batch = Batch {
            data: Self::buffer(py, g)?.unbind(),
            offsets: column(py, &ne_bytes(&offsets, u64::to_ne_bytes), "Q")?.unbind(),
            sequences: column(py, &ne_bytes(&g.seqs, u64::to_ne_bytes), "Q")?.unbind(),
            session_ids: column(py, &ne_bytes(&g.sessions, u32::to_ne_bytes), "I")?.unbind(),
            topics: topic_list,
            starts,
            seqs: std::mem::take(&mut g.seqs),
            sessions: std::mem::take(&mut g.sessions),
        };
        Ok(batch)
    }

    /// Calls `callback(message)` for each message received so far, up to `limit`; returns how
    /// many. An exception the callback raises propagates at once; the message it was given
    /// counts as received, and the next poll goes on with the one after it.
    #[pyo3(signature = (callback, limit = 256))]
    pub(super) fn poll_with(
        &self,
        py: Python<'_>,
        callback: &Bound<'_, PyAny>,
        limit: usize,
    ) -> PyResult<usize> {
        let mut done = 0;
        while done < limit {
            // One message per poll: when the callback raises, nothing after its message has
            // been taken from the transport.
            let Some(message) = self.poll_messages(py, 1)?.pop() else {
                break;
            };
            done += 1;
            callback.call1((message,))?;
        }
        Ok(done)
    }

    /// Applies the idle strategy after a poll that returned `work_count` messages (other
    /// Python threads run meanwhile).
    pub(super) fn idle(&self, py: Python<'_>, work_count: usize) -> PyResult<()> {
        let mut state = self.state()?;
        let s = &mut state.subscriber;
        py.detach(|| s.idle(work_count));
        Ok(())
    }

    /// An iterator over messages as they arrive: it polls (up to `limit` at a time) and idles
    /// with the subscriber's strategy, and stops after `timeout` seconds with nothing
    /// received (never, by default). Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None, limit = 256))]
    pub(super) fn messages(
        slf: Py<Self>,
        timeout: Option<f64>,
        limit: usize,
    ) -> PyResult<MessageIterator> {
        if let Some(t) = timeout {
            if !(t >= 0.0 && t.is_finite()) {
                return Err(PyValueError::new_err(format!(
                    "timeout={t} is not a number of seconds: give 0 or more, or None"
                )));
            }
        }
        Ok(MessageIterator {
            subscriber: slf,
            pending: std::collections::VecDeque::new(),
            timeout: timeout.map(Duration::from_secs_f64),
            limit: limit.max(1),
        })
    }

    pub(super) fn __iter__(slf: Py<Self>) -> PyResult<MessageIterator> {
        Subscriber::messages(slf, None, 256)
    }

    /// The next event (connected, lost, publisher_closed...), or None.
    pub(super) fn next_event(&self) -> PyResult<Option<Event>> {
        Ok(self.state()?.subscriber.next_event().map(Event::from))
    }

    /// Every event waiting, in order.
    pub(super) fn events(&self) -> PyResult<Vec<Event>> {
        let mut state = self.state()?;
        Ok(std::iter::from_fn(|| state.subscriber.next_event())
            .map(Event::from)
            .collect())
    }

    #[getter]
    pub(super) fn is_connected(&self) -> PyResult<bool> {
        Ok(self.state()?.subscriber.is_connected())
    }

    #[getter]
    pub(super) fn topic(&self) -> &str {
        &self.topic_text
    }

    /// The sources a subscriber by pattern follows now: (session_id, topic, uri).
    pub(super) fn sources(&self) -> PyResult<Vec<(u32, String, String)>> {
        Ok(self.state()?.subscriber.sources())
    }

    /// The socket a `udp://` or `mcast://` subscriber receives on (for selectors), or None.
    #[getter]
    pub(super) fn readable_fd(&self) -> PyResult<Option<i32>> {
        Ok(self.state()?.subscriber.readable_fd())
    }

    /// The counters, by name (messages, bytes, gaps, lost...).
    pub(super) fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.state()?.subscriber.counters();
        counters_dict(py, &peregrine::SubscriberCounters::NAMES, &c.values())
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

    /// Detaches from the publishers; later calls raise `Closed`.
    pub(super) fn close(&self) {
        lock(&self.inner).take();
    }

    pub(super) fn __repr__(&self) -> String {
        format!("<peregrine.Subscriber topic={:?}>", self.topic_text)
    }
}

/// Messages as they arrive (see `Subscriber.messages`).
#[pyclass(module = "peregrine")]
pub(super) struct MessageIterator {
    subscriber: Py<Subscriber>,
    pending: std::collections::VecDeque<Message>,
    timeout: Option<Duration>,
    limit: usize,
}

#[pymethods]
impl MessageIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Message>> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some(m));
        }
        let sub = self.subscriber.bind(py).get();
        let started = Instant::now();
        let mut idle_calls = 0u32;
        loop {
            let polled = sub.poll_messages(py, self.limit)?;
            if !polled.is_empty() {
                sub.idle(py, polled.len())?;
                self.pending.extend(polled);
                return Ok(self.pending.pop_front());
            }
            if self.timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(None);
            }
            sub.idle(py, 0)?;
            idle_calls = idle_calls.wrapping_add(1);
            if idle_calls % 1024 == 0 {
                py.check_signals()?;
            }
        }
    }
}

/// A subscriber event: `kind` is one of connected, lost, publisher_closed, publisher_died,
/// attach_failed, segment_damaged, source_found, source_lost, other; the fields that do not
/// apply are None.
#[pyclass(module = "peregrine", frozen, get_all)]
pub(super) struct Event {
    pub(super) kind: &'static str,
    pub(super) session_id: Option<u32>,
    /// connected: the first sequence; lost: the first one lost.
    pub(super) sequence: Option<u64>,
    /// lost: how many.
    pub(super) count: Option<u64>,
    pub(super) topic: Option<String>,
    pub(super) uri: Option<String>,
    pub(super) reason: Option<String>,
}

impl From<SubscriberEvent> for Event {
    fn from(e: SubscriberEvent) -> Self {
        let f = e.fields();
        let kind = if f.kind.is_empty() { "other" } else { f.kind };
        Event {
            kind,
            session_id: f.session_id,
            sequence: f.sequence,
            count: f.count,
            topic: f.topic.map(str::to_string),
            uri: f.uri.map(str::to_string),
            reason: match kind {
                "other" => Some(format!("{e:?}")),
                _ => f.reason.map(str::to_string),
            },
        }
    }
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        let mut s = format!("<peregrine.Event {}", self.kind);
        if let Some(v) = self.session_id {
            s += &format!(" session_id={v:#010x}");
        }
        if let Some(v) = self.sequence {
            s += &format!(" sequence={v}");
        }
        if let Some(v) = self.count {
            s += &format!(" count={v}");
        }
        for (k, v) in [
            ("topic", &self.topic),
            ("uri", &self.uri),
            ("reason", &self.reason),
        ] {
            if let Some(v) = v {
                s += &format!(" {k}={v:?}");
            }
        }
        s + ">"
    }
}
