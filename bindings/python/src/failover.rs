//! Failover groups for Python: `FailoverSubscriber` over one or more `Subscriber`s (the
//! publisher side is `Publisher.set_failover_group` and `Publisher.offer_sequenced`).

use crate::{lock, Closed, Event, Gathered, Message, Subscriber};
use peregrine::failover::{ArbiterConfig, FailoverEvent};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::sync::Mutex;

/// A subscriber of a failover group: each sequence of the group's stream once, in order,
/// from whichever member's copy came first. Made from one or more `Subscriber`s, which it
/// takes (they are closed): one by topic name finds every member; or one per member's URI.
#[pyclass(module = "peregrine", frozen)]
pub(crate) struct FailoverSubscriber {
    inner: Mutex<Option<(peregrine::failover::FailoverSubscriber, Gathered)>>,
    topic: Py<PyString>,
}

#[pymethods]
impl FailoverSubscriber {
    /// `window_ms`: how long a missing sequence is waited for while a member is ahead of it
    /// (1 to 60000).
    #[new]
    #[pyo3(signature = (subscribers, group, window_ms = 100))]
    fn new(
        py: Python<'_>,
        subscribers: Vec<Py<Subscriber>>,
        group: &str,
        window_ms: u64,
    ) -> PyResult<Self> {
        peregrine::failover::validate_group(group)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if !(1..=60_000).contains(&window_ms) {
            return Err(PyValueError::new_err(format!(
                "window_ms={window_ms} is not accepted: give 1 to 60000 milliseconds"
            )));
        }
        if subscribers.is_empty() {
            return Err(PyValueError::new_err(
                "give at least one subscriber: one by topic name, or one per member's URI",
            ));
        }
        // All must be open before any is taken.
        for s in &subscribers {
            s.bind(py).get().state()?;
        }
        let topic = subscribers[0].bind(py).get().topic.clone_ref(py);
        let mut taken = Vec::new();
        for s in &subscribers {
            match lock(&s.bind(py).get().inner).take() {
                Some(state) => taken.push(state.subscriber),
                None => return Err(PyValueError::new_err("a subscriber is given twice")),
            }
        }
        let config = ArbiterConfig {
            window_ns: window_ms * 1_000_000,
            ..ArbiterConfig::default()
        };
        let s = peregrine::failover::FailoverSubscriber::new(taken, group, config)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(FailoverSubscriber {
            inner: Mutex::new(Some((s, Gathered::default()))),
            topic,
        })
    }

    /// The group's messages received so far, up to `limit`, as `Message`s: `sequence` is the
    /// group's sequence and `session_id` the member whose copy it is. Never blocks.
    #[pyo3(signature = (limit = 256))]
    fn poll(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<Message>> {
        let mut guard = lock(&self.inner);
        let Some((s, g)) = guard.as_mut() else {
            return Err(Closed::new_err("the failover subscriber is closed"));
        };
        g.clear();
        s.poll(
            &mut |m| {
                g.push(
                    None,
                    peregrine::Message {
                        payload: m.payload,
                        sequence: m.sequence,
                        session_id: m.session_id,
                    },
                )
            },
            limit,
        );
        g.messages(py, &self.topic)
    }

    /// Applies the idle strategy after a poll that returned `work_count` messages.
    fn idle(&self, py: Python<'_>, work_count: usize) -> PyResult<()> {
        let mut guard = lock(&self.inner);
        let Some((s, _)) = guard.as_mut() else {
            return Err(Closed::new_err("the failover subscriber is closed"));
        };
        py.detach(|| s.idle(work_count));
        Ok(())
    }

    /// The next event, or None: the group's (`group_lost` with sequence and count,
    /// `disagreement` with the sequence, the other member as session_id and a reason,
    /// `refused` with the session and a reason naming the topic and both settings) and the
    /// subscribers' (source_found, publisher_died...).
    fn next_event(&self) -> PyResult<Option<Event>> {
        let mut guard = lock(&self.inner);
        let Some((s, _)) = guard.as_mut() else {
            return Err(Closed::new_err("the failover subscriber is closed"));
        };
        let blank = |kind| Event {
            kind,
            session_id: None,
            sequence: None,
            count: None,
            topic: None,
            uri: None,
            reason: None,
        };
        Ok(s.next_event().map(|e| match e {
            FailoverEvent::Source(e) => Event::from(e),
            FailoverEvent::Lost {
                from_sequence,
                count,
            } => Event {
                sequence: Some(from_sequence),
                count: Some(count),
                ..blank("group_lost")
            },
            FailoverEvent::Disagreement {
                sequence,
                delivered_from,
                other,
            } => Event {
                sequence: Some(sequence),
                session_id: Some(other),
                reason: Some(peregrine::failover::disagreement(
                    sequence,
                    delivered_from,
                    other,
                )),
                ..blank("disagreement")
            },
            FailoverEvent::Refused { session_id, reason } => Event {
                session_id: Some(session_id),
                reason: Some(reason),
                ..blank("refused")
            },
            other => Event {
                reason: Some(format!("{other:?}")),
                ..blank("other")
            },
        }))
    }

    /// The counters, by name: delivered, duplicates, lost, disagreements, held,
    /// held_overflow, jumps_held, jumps_confirmed, jumps_discarded, refused_messages,
    /// members_refused.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = lock(&self.inner);
        let Some((s, _)) = guard.as_ref() else {
            return Err(Closed::new_err("the failover subscriber is closed"));
        };
        let c = s.counters();
        let d = PyDict::new(py);
        for (k, v) in [
            ("delivered", c.delivered),
            ("duplicates", c.duplicates),
            ("lost", c.lost),
            ("disagreements", c.disagreements),
            ("held", c.held),
            ("held_overflow", c.held_overflow),
            ("jumps_held", c.jumps_held),
            ("jumps_confirmed", c.jumps_confirmed),
            ("jumps_discarded", c.jumps_discarded),
            ("refused_messages", s.refused_messages()),
            ("members_refused", c.members_refused),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The members (publisher sessions) followed now.
    #[getter]
    fn members(&self) -> PyResult<Vec<u32>> {
        let guard = lock(&self.inner);
        let Some((s, _)) = guard.as_ref() else {
            return Err(Closed::new_err("the failover subscriber is closed"));
        };
        Ok(s.members())
    }

    /// Detaches from every member; later calls raise `Closed`.
    fn close(&self) {
        lock(&self.inner).take();
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
