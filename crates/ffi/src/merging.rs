//! Subscribers with a recorded history in the C ABI (`pg_merging_subscriber_*`): a replay
//! merge from a sequence in the past, a live subscriber whose losses are recovered from the
//! recording, and a durable subscriber whose position the recorder keeps
//! (`peregrine_archive::MergingSubscriber`, `DurableSubscriber`; docs/recording.md), with the
//! handle, status and `pg_last_error` conventions of the messaging API.

use super::{check_out, cstring, free, insert, put, run, text, with, with_context};
use crate::error::pg_status::*;
use crate::handles::Kind;
use crate::subscriber::hand_to_c;
use crate::{pg_context, pg_message_handler, Failure};
use peregrine_archive::{
    ArchiveError, DurableSubscriber, History, MergeEvent, MergedMessage, MergingSubscriber, Start,
};
use std::ffi::{c_char, c_void, CString};
use std::time::Duration;

/// A subscriber of one topic with a recorded history: see `pg_merging_subscriber_new`.
/// Opaque; freed by `pg_merging_subscriber_free`.
#[derive(Debug)]
pub struct pg_merging_subscriber {
    _opaque: [u8; 0],
}

/// Kinds of merging subscriber events (`pg_merge_event.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_merge_event_kind {
    /// An event of a kind newer than this header: `reason` describes it.
    PG_MERGE_OTHER = 0,
    /// A stream's history reached the live stream: `recorded` messages came from the
    /// recording, live delivery took over at `to`.
    PG_MERGE_SEAM = 1,
    /// Sequences `from .. to` that the transport lost came from the recording instead
    /// (`recorded` messages), before anything after them: nothing was lost.
    PG_MERGE_RECOVERED = 2,
    /// Sequences `from .. to` are in neither the transport nor the recording: lost
    /// (`reason` says why); delivery goes on after them.
    PG_MERGE_GAP = 3,
    /// A stream resumed from a position and not heard live: its recording was read to its
    /// end (`to`, the next sequence; `recorded` messages).
    PG_MERGE_CAUGHT_UP = 4,
}

/// A merging subscriber event. `reason` belongs to the subscriber and stays valid until its
/// next `pg_merging_subscriber_next_event` or `pg_merging_subscriber_free`; NULL when it does
/// not apply.
#[repr(C)]
#[derive(Debug)]
pub struct pg_merge_event {
    /// A `pg_merge_event_kind`.
    pub kind: i32,
    /// The publisher's session.
    pub session_id: u32,
    /// The first sequence concerned (`PG_MERGE_RECOVERED`, `PG_MERGE_GAP`).
    pub from: u64,
    /// One past the last (`PG_MERGE_RECOVERED`, `PG_MERGE_GAP`), where live took over
    /// (`PG_MERGE_SEAM`), or the next sequence (`PG_MERGE_CAUGHT_UP`).
    pub to: u64,
    /// Messages that came from the recording.
    pub recorded: u64,
    /// `PG_MERGE_GAP`, `PG_MERGE_OTHER`: why.
    pub reason: *const c_char,
}

#[derive(Debug)]
enum Merge {
    Plain(Box<MergingSubscriber>),
    Durable(Box<DurableSubscriber>),
}

#[derive(Debug)]
struct MergingObject {
    merge: Merge,
    topic: CString,
    events: std::collections::VecDeque<MergeEvent>,
    reason: CString,
}

impl MergingObject {
    fn take_events(&mut self) {
        let new = match &mut self.merge {
            Merge::Plain(m) => m.take_events(),
            Merge::Durable(d) => d.take_events(),
        };
        self.events.extend(new);
    }
}

fn archive_failure(e: ArchiveError) -> Failure {
    let status = match e {
        ArchiveError::Config(_) => PG_ERROR_INVALID_ARGUMENT,
        _ => PG_ERROR_OPEN,
    };
    Failure::new(status, e.to_string())
}

/// Makes a subscriber of `topic` (a name, found by topic resolution) with a recorded history
/// into `*out`. The history is the recording folder `dir` (`peregrine record --dir`) or the
/// recorders `recorders` ("HOST:PORT,HOST:PORT": the first that answers is read); give one,
/// the other NULL.
///
/// - `from_sequence` 0 or more: every stream from that sequence, the recorded history first,
///   then live, with no gap and no duplicate at the seam. Negative: live, and every loss the
///   transport reports (its publisher no longer retains the range) is read from the
///   recording and delivered in order before anything after it.
/// - `durable_name` not NULL: a durable subscriber of that name (1 to 128 letters, digits,
///   `.`, `-`, `_`): its position in each stream is kept in `dir` or by the recorders every
///   `commit_ms` milliseconds (0: 200) while it is polled, at
///   `pg_merging_subscriber_commit` and at `pg_merging_subscriber_free`; a name kept before
///   resumes where it stood (`from_sequence` then applies only to a name never kept).
#[no_mangle]
pub unsafe extern "C" fn pg_merging_subscriber_new(
    context: *mut pg_context,
    topic: *const c_char,
    dir: *const c_char,
    recorders: *const c_char,
    from_sequence: i64,
    durable_name: *const c_char,
    commit_ms: u64,
    out: *mut *mut pg_merging_subscriber,
) -> i32 {
    with_context(context, |c| {
        let topic = text(topic, "topic")?;
        let history = match (dir.is_null(), recorders.is_null()) {
            (false, true) => History::Dir(text(dir, "dir")?.into()),
            (true, false) => History::Recorders(
                text(recorders, "recorders")?
                    .split(',')
                    .map(|a| a.trim().to_string())
                    .filter(|a| !a.is_empty())
                    .collect(),
            ),
            _ => {
                return Err(Failure::invalid(
                    "give the history as dir (a recording folder) or recorders (HOST:PORT,...), one of them, the other NULL",
                ))
            }
        };
        if matches!(&history, History::Recorders(r) if r.is_empty()) {
            return Err(Failure::invalid(
                "recorders is empty: give HOST:PORT of at least one recorder",
            ));
        }
        if commit_ms > 3_600_000 {
            return Err(Failure::invalid(format!(
                "commit_ms {commit_ms} is not accepted: give 1 to 3600000 milliseconds, or 0 for the default 200"
            )));
        }
        let start = if from_sequence < 0 {
            Start::Live
        } else {
            Start::Sequence(from_sequence as u64)
        };
        check_out(out, "out")?;
        let limit = Duration::from_secs(10);
        let merge = if durable_name.is_null() {
            Merge::Plain(Box::new(
                MergingSubscriber::with_start(&c.context, topic, start, history, limit)
                    .map_err(archive_failure)?,
            ))
        } else {
            let name = text(durable_name, "durable_name")?;
            let every = Duration::from_millis(if commit_ms == 0 { 200 } else { commit_ms });
            Merge::Durable(Box::new(
                DurableSubscriber::open(&c.context, topic, name, history, start, every, limit)
                    .map_err(archive_failure)?,
            ))
        };
        let h = insert(
            Kind::MergingSubscriber,
            MergingObject {
                merge,
                topic: cstring(topic),
                events: Default::default(),
                reason: CString::default(),
            },
        )?;
        put(out, h as *mut pg_merging_subscriber, "out")?;
        Ok(0)
    })
}

fn with_merging(
    s: *mut pg_merging_subscriber,
    body: impl FnOnce(&mut MergingObject) -> Result<i32, Failure>,
) -> i32 {
    with(
        s as usize,
        Kind::MergingSubscriber,
        "merging subscriber",
        body,
    )
}

/// Calls `handler(user, message)` for up to `limit` messages (recorded and live, in order)
/// and returns how many, or a negative code. Never blocks for long: a history read is at most
/// one read of the recording. A durable subscriber keeps its positions here when its interval
/// has passed; when neither the folder nor any recorder kept them, this poll returns
/// `PG_ERROR_OPEN` (the messages it handed to `handler` stand, and the next interval tries
/// again).
#[no_mangle]
pub unsafe extern "C" fn pg_merging_subscriber_poll(
    subscriber: *mut pg_merging_subscriber,
    handler: pg_message_handler,
    user: *mut c_void,
    limit: usize,
) -> i32 {
    with_merging(subscriber, |s| {
        let Some(handler) = handler else {
            return Err(Failure::null("handler"));
        };
        let limit = limit.min(i32::MAX as usize);
        let topic = s.topic.as_bytes();
        let mut deliver = |m: MergedMessage<'_>| {
            hand_to_c(handler, user, topic, m.payload, m.sequence, m.session_id)
        };
        let n = match &mut s.merge {
            Merge::Plain(m) => m.poll(&mut deliver, limit),
            Merge::Durable(d) => {
                let n = d.poll(&mut deliver, limit);
                if let Some(e) = d.take_commit_failure() {
                    return Err(Failure::new(
                        PG_ERROR_OPEN,
                        format!("positions not kept (tried again at the next interval): {e}"),
                    ));
                }
                n
            }
        }
        .map_err(archive_failure)?;
        s.take_events();
        Ok(n as i32)
    })
}

/// The next event, if any, into `*event`. Returns 1 when one was written, 0 when there is
/// none, or a negative code.
#[no_mangle]
pub unsafe extern "C" fn pg_merging_subscriber_next_event(
    subscriber: *mut pg_merging_subscriber,
    event: *mut pg_merge_event,
) -> i32 {
    with_merging(subscriber, |s| {
        check_out(event, "event")?;
        s.take_events();
        let Some(e) = s.events.pop_front() else {
            return Ok(0);
        };
        use pg_merge_event_kind::*;
        let (kind, session_id, from, to, recorded, reason) = match e {
            MergeEvent::Seam {
                session_id,
                recorded,
                live_from,
                ..
            } => (PG_MERGE_SEAM, session_id, 0, live_from, recorded, None),
            MergeEvent::Recovered {
                session_id,
                from,
                to,
                recorded,
            } => (PG_MERGE_RECOVERED, session_id, from, to, recorded, None),
            MergeEvent::Gap {
                session_id,
                from,
                live_from,
                reason,
            } => (PG_MERGE_GAP, session_id, from, live_from, 0, Some(reason)),
            MergeEvent::CaughtUp {
                session_id,
                recorded,
                next,
            } => (PG_MERGE_CAUGHT_UP, session_id, 0, next, recorded, None),
        };
        let reason = match reason {
            Some(r) => {
                s.reason = cstring(&r);
                s.reason.as_ptr()
            }
            None => std::ptr::null(),
        };
        put(
            event,
            pg_merge_event {
                kind: kind as i32,
                session_id,
                from,
                to,
                recorded,
                reason,
            },
            "event",
        )?;
        Ok(1)
    })
}

/// A durable subscriber: keeps its positions now (everything delivered so far is not
/// delivered again). `PG_ERROR_INVALID_ARGUMENT` for a subscriber without a durable name;
/// `PG_ERROR_OPEN` when neither the folder nor any recorder kept them.
#[no_mangle]
pub unsafe extern "C" fn pg_merging_subscriber_commit(
    subscriber: *mut pg_merging_subscriber,
) -> i32 {
    with_merging(subscriber, |s| match &mut s.merge {
        Merge::Durable(d) => d.commit().map(|()| 0).map_err(archive_failure),
        Merge::Plain(_) => Err(Failure::invalid(
            "this subscriber has no durable name: there are no positions to keep",
        )),
    })
}

/// Frees a merging subscriber; a durable one keeps its positions first (its failure to is
/// returned, `PG_ERROR_OPEN`, and the handle is freed all the same).
#[no_mangle]
pub unsafe extern "C" fn pg_merging_subscriber_free(subscriber: *mut pg_merging_subscriber) -> i32 {
    let committed = run(|| {
        // SAFETY: the kind fixes the type (MergingObject is inserted under this kind only),
        // and the header tells callers to free a handle while no other thread uses it.
        let object = unsafe {
            super::handles::get::<MergingObject>(subscriber as usize, Kind::MergingSubscriber)
        }
        .map_err(|e| Failure::handle(e, "merging subscriber"))?;
        match &mut object.merge {
            Merge::Durable(d) => d.commit().map(|()| 0).map_err(archive_failure),
            Merge::Plain(_) => Ok(0),
        }
    });
    let freed = free::<MergingObject>(
        subscriber as usize,
        Kind::MergingSubscriber,
        "merging subscriber",
    );
    if freed != 0 {
        return freed;
    }
    committed
}
