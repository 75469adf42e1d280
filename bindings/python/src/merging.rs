//! Subscribers with a recorded history for Python: `MergingSubscriber` (a replay merge from a
//! sequence in the past; live with its losses recovered from the recording; or durable, its
//! position kept by the recorder). The Rust types are `peregrine_archive::MergingSubscriber`
//! and `DurableSubscriber` (docs/recording.md).

use crate::{lock, Closed, ConfigError, Context, Event, Gathered, Message, OpenError};
use peregrine_archive::{
    ArchiveError, DurableSubscriber, History, MergeEvent, MergingSubscriber as Merging, Start,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

enum Merge {
    Plain(Box<Merging>),
    Durable(Box<DurableSubscriber>),
}

struct State {
    merge: Merge,
    gathered: Gathered,
    events: VecDeque<MergeEvent>,
}

impl State {
    fn take_events(&mut self) {
        let new = match &mut self.merge {
            Merge::Plain(m) => m.take_events(),
            Merge::Durable(d) => d.take_events(),
        };
        self.events.extend(new);
    }
}

fn error(e: ArchiveError) -> PyErr {
    match e {
        ArchiveError::Config(text) => ConfigError::new_err(text),
        e => OpenError::new_err(e.to_string()),
    }
}

/// A subscriber of one topic (a name, found by topic resolution) with a recorded history:
/// `dir`, the folder `peregrine record --dir` writes, or `recorders`, ["HOST:PORT", ...] of
/// recorders serving replays (the first that answers is read).
///
/// - `from_seq=N`: every stream from sequence N, the recorded history first, then live, with
///   no gap and no duplicate at the seam.
/// - without it: live, and a loss the transport reports (its publisher no longer retains the
///   range) is read from the recording and delivered in order before anything after it.
/// - `durable="NAME"`: its position in each stream is kept (in `dir`, or by the recorders)
///   every `commit_ms` while polled, at `commit()` and at `close()`; a name kept before
///   resumes where it stood (at least once: after a crash, what came after the last commit
///   comes again).
///
/// Events (`next_event`): `seam` (session_id, sequence where live took over, count recorded),
/// `recovered` (sequence, count: a lost range that came from the recording), `gap` (sequence,
/// count, reason: in neither), `caught_up` (sequence: the next, count recorded).
#[pyclass(module = "peregrine", frozen)]
pub(crate) struct MergingSubscriber {
    inner: Mutex<Option<State>>,
    topic: Py<PyString>,
}

#[pymethods]
impl MergingSubscriber {
    #[new]
    #[pyo3(signature = (context, topic, *, dir = None, recorders = None, from_seq = None, durable = None, commit_ms = 200))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        context: &Context,
        topic: &str,
        dir: Option<std::path::PathBuf>,
        recorders: Option<Vec<String>>,
        from_seq: Option<u64>,
        durable: Option<&str>,
        commit_ms: u64,
    ) -> PyResult<Self> {
        context.open()?;
        let history = match (dir, recorders) {
            (Some(d), None) => History::Dir(d),
            (None, Some(r)) if !r.is_empty() => History::Recorders(r),
            _ => {
                return Err(PyValueError::new_err(
                    "give the history as dir= (a recording folder) or recorders=[\"HOST:PORT\", ...], one of them",
                ))
            }
        };
        if !(1..=3_600_000).contains(&commit_ms) {
            return Err(PyValueError::new_err(format!(
                "commit_ms={commit_ms} is not accepted: give 1 to 3600000 milliseconds"
            )));
        }
        let start = match from_seq {
            Some(n) => Start::Sequence(n),
            None => Start::Live,
        };
        let limit = Duration::from_secs(10);
        let ctx = &context.inner;
        let merge = py
            .detach(|| match durable {
                Some(name) => DurableSubscriber::open(
                    ctx,
                    topic,
                    name,
                    history,
                    start,
                    Duration::from_millis(commit_ms),
                    limit,
                )
                .map(|d| Merge::Durable(Box::new(d))),
                None => Merging::with_start(ctx, topic, start, history, limit)
                    .map(|m| Merge::Plain(Box::new(m))),
            })
            .map_err(error)?;
        Ok(MergingSubscriber {
            inner: Mutex::new(Some(State {
                merge,
                gathered: Gathered::default(),
                events: VecDeque::new(),
            })),
            topic: PyString::new(py, topic).unbind(),
        })
    }

    /// The messages received so far, recorded and live, in order, up to `limit`, as
    /// `Message`s. Never blocks for long (a history read is one read of the recording).
    #[pyo3(signature = (limit = 256))]
    fn poll(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<Message>> {
        let mut guard = lock(&self.inner);
        let Some(s) = guard.as_mut() else {
            return Err(Closed::new_err("the merging subscriber is closed"));
        };
        let State {
            merge, gathered, ..
        } = s;
        gathered.clear();
        let mut push = |m: peregrine_archive::MergedMessage<'_>| {
            gathered.push(
                None,
                peregrine::Message {
                    payload: m.payload,
                    sequence: m.sequence,
                    session_id: m.session_id,
                },
            )
        };
        let polled = py.detach(|| match merge {
            Merge::Plain(m) => m.poll(&mut push, limit),
            Merge::Durable(d) => d.poll(&mut push, limit),
        });
        polled.map_err(error)?;
        s.take_events();
        if let Merge::Durable(d) = &mut s.merge {
            if let Some(e) = d.take_commit_failure() {
                return Err(OpenError::new_err(format!(
                    "positions not kept (tried again at the next interval): {e}"
                )));
            }
        }
        s.gathered.messages(py, &self.topic)
    }

    /// The next event, or None.
    fn next_event(&self) -> PyResult<Option<Event>> {
        let mut guard = lock(&self.inner);
        let Some(s) = guard.as_mut() else {
            return Err(Closed::new_err("the merging subscriber is closed"));
        };
        s.take_events();
        let blank = |kind, session_id| Event {
            kind,
            session_id: Some(session_id),
            sequence: None,
            count: None,
            topic: None,
            uri: None,
            reason: None,
        };
        Ok(s.events.pop_front().map(|e| match e {
            MergeEvent::Seam {
                session_id,
                recorded,
                live_from,
                ..
            } => Event {
                sequence: Some(live_from),
                count: Some(recorded),
                ..blank("seam", session_id)
            },
            MergeEvent::Recovered {
                session_id,
                from,
                to,
                ..
            } => Event {
                sequence: Some(from),
                count: Some(to - from),
                ..blank("recovered", session_id)
            },
            MergeEvent::Gap {
                session_id,
                from,
                live_from,
                reason,
            } => Event {
                sequence: Some(from),
                count: Some(live_from.saturating_sub(from)),
                reason: Some(reason),
                ..blank("gap", session_id)
            },
            MergeEvent::CaughtUp {
                session_id,
                recorded,
                next,
            } => Event {
                sequence: Some(next),
                count: Some(recorded),
                ..blank("caught_up", session_id)
            },
        }))
    }

    /// Each stream's next sequence to deliver, as (session_id, sequence) pairs: where it
    /// would resume.
    fn positions(&self) -> PyResult<Vec<(u32, u64)>> {
        let guard = lock(&self.inner);
        let Some(s) = guard.as_ref() else {
            return Err(Closed::new_err("the merging subscriber is closed"));
        };
        Ok(match &s.merge {
            Merge::Plain(m) => m.positions(),
            Merge::Durable(d) => d.merge().positions(),
        })
    }

    /// A durable subscriber: keeps its positions now.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = lock(&self.inner);
        let Some(s) = guard.as_mut() else {
            return Err(Closed::new_err("the merging subscriber is closed"));
        };
        match &mut s.merge {
            Merge::Durable(d) => py.detach(|| d.commit()).map_err(error),
            Merge::Plain(_) => Err(PyValueError::new_err(
                "this subscriber has no durable name: there are no positions to keep",
            )),
        }
    }

    /// Closes it (a durable one keeps its positions first). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = lock(&self.inner).take();
        if let Some(State {
            merge: Merge::Durable(d),
            ..
        }) = taken
        {
            py.detach(|| d.close()).map_err(error)?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Py<PyAny>>,
        _v: Option<Py<PyAny>>,
        _tb: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        self.close(py)
    }
}
