//! `Provider`: a service's items published on the backbone, the distributors' image requests
//! answered, and clients' posts handed to Python as `Post`s.

use super::values::{fields_of, Conv, Owned};
use super::{load_dictionary, lock_attached, named_counters, MarketDataError};
use crate::{BackPressured, Closed, ConfigError};
use peregrine_market_data::provider::{
    Post as RsPost, Provider as RsProvider, ProviderError, ProviderOptions,
};
use peregrine_market_data::DEFAULT_BACKBONE;
use peregrine_md::model::{Field, ItemState};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Mutex, MutexGuard};

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

pub(super) fn provider_error(e: ProviderError) -> PyErr {
    match e {
        ProviderError::Refused(_) => PyValueError::new_err(e.to_string()),
        ProviderError::BackPressured => BackPressured::new_err(e.to_string()),
        _ => MarketDataError::new_err(e.to_string()),
    }
}

pub(super) struct ProviderState {
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
