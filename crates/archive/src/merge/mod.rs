//! Replay merge: a subscriber that starts from a sequence in the past gets the recorded
//! history, then the live stream, with no gap and no duplicate at the seam (Aeron Archive's
//! replay merge). [`MergingSubscriber`] subscribes live first and holds what arrives; for
//! each live stream (a publisher session) it reads the recording of that stream from the
//! sequence asked for up to the first live message held, delivers it, then the held live
//! messages and the live stream from there on. A recording that has not caught up with the
//! live stream yet (the recorder writes behind it by its buffer) is read again until it has,
//! up to a time limit; past it the seam is reported with the sequences missing. A loss the
//! transport reports later is read from the recording in the same way (off-transport
//! recovery). The state machine is `core.rs`'s, without I/O; this drives it.

mod core;

use crate::folder::stream_dir;
use crate::format::replay::From;
use crate::{ArchiveError, Entry, RecordingReader, RemoteEntry, ReplayClient};
use core::{HistorySource, MergeCore};
use peregrine::{Context, IdleKind, Subscriber, SubscriberEvent};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the history comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum History {
    /// A recording folder on this host (`peregrine record --dir`).
    Dir(PathBuf),
    /// Recorders serving replays (`peregrine record --serve`), HOST:PORT each: the first that
    /// answers is read.
    Recorders(Vec<String>),
}

/// Where a stream heard live for the first time starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From its first live message (no history): the history only repairs what the
    /// transport loses.
    Live,
    /// From this sequence: the recorded history first, then live.
    Sequence(u64),
}

/// One message, from the recording or live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergedMessage<'a> {
    pub session_id: u32,
    pub sequence: u64,
    pub payload: &'a [u8],
    /// From the recording (before a seam, or repairing a loss), or live.
    pub recorded: bool,
}

impl<'a> MergedMessage<'a> {
    /// Message `sequence` of session `session_id`, from the recording or live.
    pub(crate) fn new(session_id: u32, sequence: u64, payload: &'a [u8], recorded: bool) -> Self {
        MergedMessage {
            session_id,
            sequence,
            payload,
            recorded,
        }
    }
}

/// What happened at a stream's seam.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeEvent {
    /// The history reached the live stream: `recorded` messages came from the recording,
    /// and live delivery took over at `live_from`, `after` the subscriber started.
    Seam {
        session_id: u32,
        recorded: u64,
        live_from: u64,
        after: Duration,
    },
    /// Sequences `from..to` that the transport lost (its publisher no longer retained them)
    /// came from the recording instead: `recorded` messages, in order, before anything after
    /// them. Nothing was lost.
    Recovered {
        session_id: u32,
        from: u64,
        to: u64,
        recorded: u64,
    },
    /// The recording did not have sequences `from..live_from` within the time limit (or
    /// there is none): they are missing; live delivery took over.
    Gap {
        session_id: u32,
        from: u64,
        live_from: u64,
        reason: String,
    },
    /// A stream resumed from a position but not heard live within the time limit (its
    /// publisher is gone): its history was delivered to the recording's end, `next`.
    CaughtUp {
        session_id: u32,
        recorded: u64,
        next: u64,
    },
}

/// See the module's documentation.
#[derive(Debug)]
pub struct MergingSubscriber {
    topic: String,
    history: History,
    live: Subscriber,
    core: MergeCore,
}

impl MergingSubscriber {
    /// Subscribes to `topic` (a name) live through `ctx` and merges history, every stream
    /// starting as `start` says (`Start::Sequence(from)`: history from `from` on), read from
    /// `history`; a seam not reached within `limit` is given up (a `Gap` event). With [`Start::Live`]
    /// it is a live subscriber whose losses are recovered from the recording (Ultra
    /// Messaging's off-transport recovery): a range the transport reports lost (the publisher
    /// no longer retains it) is read from `history` and delivered in order before anything
    /// after it, and only what the recording lacks too is reported (`Gap`).
    pub fn with_start(
        ctx: &Context,
        topic: &str,
        start: Start,
        history: History,
        limit: Duration,
    ) -> Result<MergingSubscriber, ArchiveError> {
        if topic.contains(['*', '?']) {
            return Err(ArchiveError::Config(format!(
                "a replay merge needs a topic name, not a pattern: {topic}"
            )));
        }
        let live = ctx
            .subscribe(topic, IdleKind::Spin)
            .map_err(|e| ArchiveError::Config(format!("topic {topic}: {e}")))?;
        Ok(MergingSubscriber {
            topic: topic.to_string(),
            history,
            live,
            core: MergeCore::new(start, limit, Instant::now()),
        })
    }

    /// Resumes session `session_id` from `next` (a position kept from before): its history
    /// from there is delivered whether or not it is heard live, then live delivery takes
    /// over. Call before the first poll.
    pub fn resume(&mut self, session_id: u32, next: u64) {
        self.core.resume(session_id, next, Instant::now());
    }

    /// The topic merged.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Receives what has arrived and moves each stream towards its seam; hands every message
    /// to `handler` in order (recorded ones first). Returns the messages delivered.
    pub fn poll(
        &mut self,
        handler: &mut dyn FnMut(MergedMessage<'_>),
        limit: usize,
    ) -> Result<usize, ArchiveError> {
        let now = Instant::now();
        let mut delivered = 0;
        let core = &mut self.core;
        self.live.poll(
            &mut |m| delivered += core.live(m.session_id, m.sequence, m.payload, now, handler),
            limit,
        );
        while let Some(e) = self.live.next_event() {
            if let SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            } = e
            {
                self.core.lost(session_id, from_sequence, count);
            }
        }
        let mut source = Recorded {
            history: &self.history,
            topic: &self.topic,
        };
        delivered += self.core.settle(Instant::now(), &mut source, handler)?;
        Ok(delivered)
    }

    /// Seams reached (or given up), losses recovered, streams caught up, since the last call.
    pub fn take_events(&mut self) -> Vec<MergeEvent> {
        self.core.take_events()
    }

    /// Live messages dropped because the recording had delivered them already.
    pub fn duplicates(&self) -> u64 {
        self.core.duplicates()
    }

    /// Each stream's next sequence to deliver: where a subscriber that stopped now would
    /// resume (streams still reading history count from where their history stands).
    pub fn positions(&self) -> Vec<(u32, u64)> {
        self.core.positions()
    }
}

/// The history of one topic: a folder's recordings, or recorders' replays.
struct Recorded<'a> {
    history: &'a History,
    topic: &'a str,
}

impl HistorySource for Recorded<'_> {
    fn read(
        &mut self,
        session: u32,
        from: u64,
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Result<(), ArchiveError> {
        match self.history {
            History::Dir(dir) => {
                let d = stream_dir(dir, self.topic, session);
                if !d.exists() {
                    // Not recorded (yet): nothing to give.
                    return Ok(());
                }
                let r = RecordingReader::open(&d)?;
                let mut c = r.from_sequence(from)?;
                while let Some(e) = c.next_entry() {
                    if let Entry::Message {
                        sequence, payload, ..
                    } = e?
                    {
                        if !deliver(sequence, payload) {
                            break;
                        }
                    }
                }
            }
            History::Recorders(addrs) => {
                let mut c = ReplayClient::connect_first(addrs, self.topic, From::Sequence(from))?;
                let mut ours = false;
                while let Some(e) = c.next_entry() {
                    match e {
                        Ok(RemoteEntry::Recording(m)) => ours = m.session_id == session,
                        Ok(RemoteEntry::Message {
                            sequence, payload, ..
                        }) if ours => {
                            if !deliver(sequence, payload) {
                                break;
                            }
                        }
                        Ok(_) => {}
                        // No recording of the topic yet.
                        Err(ArchiveError::Remote { .. }) => break,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }
}
