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

mod failover;
mod md;
mod merging;

use peregrine::{IdleKind, OfferError, SubscriberEvent};
use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView, PySlice, PyString};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// One process's handle on Peregrine: configuration and topic resolution, and the factory of
/// publishers and subscribers.
#[pyclass(module = "peregrine")]
struct Context {
    inner: peregrine::Context,
    closed: Mutex<bool>,
}

impl Context {
    fn open(&self) -> PyResult<()> {
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
    fn new(config: Option<&str>) -> PyResult<Self> {
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
    fn publisher(&self, topic: &str, uri: &str) -> PyResult<Publisher> {
        self.open()?;
        let p = self.inner.publisher(topic, uri).map_err(open_error)?;
        Ok(Publisher::new(p))
    }

    /// A publisher of `topic` found by name through topic resolution (no URI to share).
    fn publish(&self, topic: &str) -> PyResult<Publisher> {
        self.open()?;
        let p = self.inner.publish(topic).map_err(open_error)?;
        Ok(Publisher::new(p))
    }

    /// A subscriber of `topic` on the transport `uri`; `idle` is what `idle()` and the
    /// message iterator do while nothing arrives: spin, yield, backoff or block.
    #[pyo3(signature = (topic, uri, idle = "backoff"))]
    fn subscriber(
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
    fn subscribe(
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
    fn close(&self) {
        *lock(&self.closed) = true;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close();
    }
}

/// Publishes messages on one topic; `offer` never blocks.
#[pyclass(module = "peregrine")]
struct Publisher {
    inner: Mutex<peregrine::Publisher>,
    topic: String,
    uri: String,
    /// The failover group's id after `set_failover_group`.
    group_id: Mutex<Option<u32>>,
}

impl Publisher {
    fn new(p: peregrine::Publisher) -> Self {
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
    fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
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
    fn set_failover_group(&self, group: &str) -> PyResult<()> {
        peregrine::failover::validate_group(group)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        *lock(&self.group_id) = Some(peregrine::failover::group_id(group));
        Ok(())
    }

    /// Publishes `data` (bytes or a contiguous buffer) as the failover group's `sequence`;
    /// returns the session's own sequence. Raises `PeregrineError` before
    /// `set_failover_group`, and what `offer` raises.
    fn offer_sequenced(
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
    fn flush(&self) -> PyResult<()> {
        lock(&self.inner).flush().map_err(offer_error)
    }

    /// The duty cycle (network transports): batches due, heartbeats, joins, NAKs. Returns the
    /// work done.
    fn do_work(&self) -> usize {
        lock(&self.inner).do_work()
    }

    /// Ends the session; later offers raise `Closed`. Counters stay readable.
    fn close(&self, py: Python<'_>) {
        let mut p = lock(&self.inner);
        let p: &mut peregrine::Publisher = &mut p;
        // Lingering for NAKs on UDP may take a while: let other Python threads run.
        py.detach(|| p.close());
    }

    /// Subscribers attached or followed now.
    #[getter]
    fn subscriber_count(&self) -> usize {
        lock(&self.inner).subscriber_count()
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// The URI subscribers use (with the bound port; for a publisher by topic, every URI it
    /// advertises, separated by spaces).
    #[getter]
    fn uri(&self) -> &str {
        &self.uri
    }

    #[getter]
    fn max_message_len(&self) -> usize {
        lock(&self.inner).max_message_len()
    }

    #[getter]
    fn session_id(&self) -> u32 {
        lock(&self.inner).session_id()
    }

    /// The counters, by name (messages, bytes, back_pressured...).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = lock(&self.inner).counters();
        counters_dict(py, &peregrine::PublisherCounters::NAMES, &c.values())
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

    fn __repr__(&self) -> String {
        format!(
            "<peregrine.Publisher topic={:?} uri={:?}>",
            self.topic, self.uri
        )
    }
}

/// One received message: `payload` is a memoryview over the poll's buffer (read-only; take
/// `bytes(message.payload)` to keep a copy of this message alone).
#[pyclass(module = "peregrine", frozen)]
struct Message {
    #[pyo3(get)]
    sequence: u64,
    #[pyo3(get)]
    session_id: u32,
    topic: Py<PyString>,
    /// The poll's buffer (a memoryview of bytes) and this message's part of it.
    buffer: Py<PyMemoryView>,
    start: usize,
    end: usize,
}

#[pymethods]
impl Message {
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let slice = PySlice::new(py, self.start as isize, self.end as isize, 1);
        self.buffer.bind(py).get_item(slice)
    }

    #[getter]
    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }

    fn __len__(&self) -> usize {
        self.end - self.start
    }

    fn __repr__(&self, py: Python<'_>) -> String {
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
struct Batch {
    #[pyo3(get)]
    data: Py<PyMemoryView>,
    #[pyo3(get)]
    offsets: Py<PyAny>,
    #[pyo3(get)]
    sequences: Py<PyAny>,
    #[pyo3(get)]
    session_ids: Py<PyAny>,
    /// One topic per message (subscribers by pattern), or the subscriber's for all.
    topics: Vec<Py<PyString>>,
    starts: Vec<usize>,
    seqs: Vec<u64>,
    sessions: Vec<u32>,
}

#[pymethods]
impl Batch {
    fn __len__(&self) -> usize {
        self.seqs.len()
    }

    fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<Message> {
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

    fn __iter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
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
struct Gathered {
    data: Vec<u8>,
    starts: Vec<usize>,
    seqs: Vec<u64>,
    sessions: Vec<u32>,
    /// Per message, an index into `topic_names` (subscribers by pattern only).
    topic_of: Vec<usize>,
    topic_names: Vec<String>,
}

impl Gathered {
    /// The gathered messages of one topic as `Message`s over one buffer.
    fn messages(&self, py: Python<'_>, topic: &Py<PyString>) -> PyResult<Vec<Message>> {
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

    fn clear(&mut self) {
        self.data.clear();
        self.starts.clear();
        self.seqs.clear();
        self.sessions.clear();
        self.topic_of.clear();
    }

    fn push(&mut self, topic: Option<&str>, m: peregrine::Message<'_>) {
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

struct SubscriberState {
    subscriber: peregrine::Subscriber,
    gathered: Gathered,
}

/// A subscriber's Rust half while it is open (`None` once closed).
type Open = Option<SubscriberState>;

/// The lock of an open subscriber (checked open when taken).
struct StateGuard<'a>(MutexGuard<'a, Open>);

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
struct Subscriber {
    inner: Mutex<Open>,
    topic: Py<PyString>,
    topic_text: String,
    by_pattern: bool,
}

impl Subscriber {
    fn new(py: Python<'_>, s: peregrine::Subscriber) -> Self {
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
    fn state(&self) -> PyResult<StateGuard<'_>> {
        let guard = lock(&self.inner);
        if guard.is_none() {
            return Err(Closed::new_err("the subscriber is closed"));
        }
        Ok(StateGuard(guard))
    }

    /// Polls up to `limit` messages as `Message`s over one buffer.
    fn poll_messages(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<Message>> {
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
    fn gather(&self, state: &mut SubscriberState, limit: usize) -> usize {
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
    fn topic_of(
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
    fn buffer<'py>(py: Python<'py>, g: &Gathered) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(PyBytes::new(py, &g.data).as_any())
    }
}

/// The bytes of `values`, each as `to_bytes` gives them.
fn ne_bytes<T: Copy, const N: usize>(values: &[T], to_bytes: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to_bytes(v)).collect()
}

/// A memoryview of unsigned integers (`format` "Q" or "I") over `bytes`, their native-order
/// bytes.
fn column<'py>(py: Python<'py>, bytes: &[u8], format: &str) -> PyResult<Bound<'py, PyAny>> {
    PyMemoryView::from(PyBytes::new(py, bytes).as_any())?.call_method1("cast", (format,))
}

#[pymethods]
impl Subscriber {
    /// The messages received so far, up to `limit`, as a list of `Message` (empty when there
    /// are none; never blocks). Their payloads are views of one buffer per poll.
    #[pyo3(signature = (limit = 256))]
    fn poll<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.poll_messages(py, limit)?)
    }

    /// The messages received so far, up to `limit`, as one `Batch` of columns: the cheapest
    /// way to receive many messages per call.
    #[pyo3(signature = (limit = 4096))]
    fn poll_batch(&self, py: Python<'_>, limit: usize) -> PyResult<Batch> {
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
    fn poll_with(
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
    fn idle(&self, py: Python<'_>, work_count: usize) -> PyResult<()> {
        let mut state = self.state()?;
        let s = &mut state.subscriber;
        py.detach(|| s.idle(work_count));
        Ok(())
    }

    /// An iterator over messages as they arrive: it polls (up to `limit` at a time) and idles
    /// with the subscriber's strategy, and stops after `timeout` seconds with nothing
    /// received (never, by default). Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None, limit = 256))]
    fn messages(slf: Py<Self>, timeout: Option<f64>, limit: usize) -> PyResult<MessageIterator> {
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

    fn __iter__(slf: Py<Self>) -> PyResult<MessageIterator> {
        Subscriber::messages(slf, None, 256)
    }

    /// The next event (connected, lost, publisher_closed...), or None.
    fn next_event(&self) -> PyResult<Option<Event>> {
        Ok(self.state()?.subscriber.next_event().map(Event::from))
    }

    /// Every event waiting, in order.
    fn events(&self) -> PyResult<Vec<Event>> {
        let mut state = self.state()?;
        Ok(std::iter::from_fn(|| state.subscriber.next_event())
            .map(Event::from)
            .collect())
    }

    #[getter]
    fn is_connected(&self) -> PyResult<bool> {
        Ok(self.state()?.subscriber.is_connected())
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic_text
    }

    /// The sources a subscriber by pattern follows now: (session_id, topic, uri).
    fn sources(&self) -> PyResult<Vec<(u32, String, String)>> {
        Ok(self.state()?.subscriber.sources())
    }

    /// The socket a `udp://` or `mcast://` subscriber receives on (for selectors), or None.
    #[getter]
    fn readable_fd(&self) -> PyResult<Option<i32>> {
        Ok(self.state()?.subscriber.readable_fd())
    }

    /// The counters, by name (messages, bytes, gaps, lost...).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.state()?.subscriber.counters();
        counters_dict(py, &peregrine::SubscriberCounters::NAMES, &c.values())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close();
    }

    /// Detaches from the publishers; later calls raise `Closed`.
    fn close(&self) {
        lock(&self.inner).take();
    }

    fn __repr__(&self) -> String {
        format!("<peregrine.Subscriber topic={:?}>", self.topic_text)
    }
}

/// Messages as they arrive (see `Subscriber.messages`).
#[pyclass(module = "peregrine")]
struct MessageIterator {
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
struct Event {
    kind: &'static str,
    session_id: Option<u32>,
    /// connected: the first sequence; lost: the first one lost.
    sequence: Option<u64>,
    /// lost: how many.
    count: Option<u64>,
    topic: Option<String>,
    uri: Option<String>,
    reason: Option<String>,
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
