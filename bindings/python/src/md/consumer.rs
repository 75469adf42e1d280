//! `Consumer`: a login to a distributor (or the next of a list, or a warm standby pair), its
//! requests, posts and `poll`.

use super::events::{ConsumerState, Event, Gathered, ItemNames, PollFields};
use super::values::{fields_of, Conv};
use super::{
    dictionary_dict, load_dictionary, lock_attached, named_counters, LoginRefused, MarketDataError,
    POLL_SLICE,
};
use crate::Closed;
use peregrine_market_data::consumer::{
    AnyConsumer, Consumer as RsConsumer, ConsumerError, SessionError, WarmStandby,
};
use peregrine_md::model::Field;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(super) fn consumer_error(e: ConsumerError) -> PyErr {
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

/// The consumer's TLS from the constructor's `tls_*` arguments: plaintext without `tls_ca`.
pub(super) fn connect_options(
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
pub(super) fn plain<'a>(c: &'a mut AnyConsumer, call: &str) -> PyResult<&'a mut RsConsumer> {
    c.plain().ok_or_else(|| {
        PyValueError::new_err(format!(
            "{call}() is not available on a warm standby consumer: it pauses and resumes its \
             requests on the standby itself, and a request made on one login only would number \
             the two logins' requests apart. Use open() and close(), or a consumer made without \
             warm_standby"
        ))
    })
}

/// A list of str from one str or a sequence of them.
pub(super) fn strings(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
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
