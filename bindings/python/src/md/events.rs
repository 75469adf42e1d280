//! A poll's events: gathered as owned Rust values with the GIL released, then made one small
//! `Event` each, whose `fields` dict is built when first read.

use super::values::{Conv, Owned};
use peregrine_market_data::consumer::{AnyConsumer, ConsumerError, Event as RsEvent};
use peregrine_md::codec::{AckCode, FieldList};
use peregrine_md::model::ItemState;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// An event as gathered while the GIL is released: names as indexes into the consumer's item
/// names, fields as a range of the poll's field array.
#[derive(Debug)]
pub(super) enum Gathered {
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
pub(super) struct ItemNames {
    pub(super) index: HashMap<Box<str>, u32>,
    pub(super) names: Vec<Box<str>>,
    pub(super) py: Vec<Py<PyString>>,
}

impl ItemNames {
    pub(super) fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.into());
        self.index.insert(name.into(), i);
        i
    }

    /// Makes the Python strs of the names added since the last call.
    pub(super) fn sync(&mut self, py: Python<'_>) {
        for n in &self.names[self.py.len()..] {
            self.py.push(PyString::new(py, n).unbind());
        }
    }
}

pub(super) struct ConsumerState {
    pub(super) consumer: AnyConsumer,
    pub(super) names: ItemNames,
    pub(super) events: Vec<Gathered>,
    pub(super) fields: Vec<(u16, Owned)>,
}

impl ConsumerState {
    /// One `Consumer::poll` of up to `timeout`, its events gathered.
    pub(super) fn gather(&mut self, timeout: Duration) -> Result<usize, ConsumerError> {
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
pub(super) struct PollFields {
    pub(super) fields: Vec<(u16, Owned)>,
    pub(super) conv: Arc<Conv>,
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
    pub(super) kind: Py<PyString>,
    #[pyo3(get)]
    pub(super) item: Option<Py<PyString>>,
    #[pyo3(get)]
    pub(super) item_seq: Option<u32>,
    #[pyo3(get)]
    pub(super) timestamp_ns: Option<u64>,
    #[pyo3(get)]
    pub(super) state: Option<Py<PyString>>,
    #[pyo3(get)]
    pub(super) text: Option<Py<PyString>>,
    #[pyo3(get)]
    pub(super) request: Option<u32>,
    #[pyo3(get)]
    pub(super) solicited: Option<bool>,
    #[pyo3(get)]
    pub(super) conflated: Option<bool>,
    #[pyo3(get)]
    pub(super) snapshot: Option<bool>,
    #[pyo3(get)]
    pub(super) may_open: Option<bool>,
    #[pyo3(get)]
    pub(super) expected: Option<u32>,
    #[pyo3(get)]
    pub(super) got: Option<u32>,
    #[pyo3(get)]
    pub(super) items: Option<u32>,
    #[pyo3(get)]
    pub(super) updates_dropped: Option<u32>,
    #[pyo3(get)]
    pub(super) post_id: Option<u32>,
    pub(super) source: Option<(Arc<PollFields>, Range<usize>)>,
    pub(super) fields: PyOnceLock<Py<PyDict>>,
}

impl Event {
    pub(super) fn new(kind: Bound<'_, PyString>) -> Event {
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
    pub(super) fn fields(&self, py: Python<'_>) -> PyResult<Option<Py<PyDict>>> {
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

    pub(super) fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
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
