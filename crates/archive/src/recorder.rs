//! [`Recorder`]: subscribes to topics by name or pattern, on any transport topic resolution
//! finds, and appends each stream (a topic's session) to a recording of its own under one
//! folder: `DIR/<topic>/<session>/` (the topic escaped for a file name, the session as 8
//! hex digits).

use crate::folder::{stream_dir, wall_ns};
use crate::{ArchiveError, RecordingWriter, StreamMeta, WriterOptions};
use peregrine::{Context, IdleKind, Subscriber, SubscriberEvent};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What happened to a stream the recorder follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecorderEvent {
    /// A stream's recording was opened (new, or resumed after recovery).
    Started { meta: StreamMeta, dir: PathBuf },
    /// A stream ended (its publisher closed or died): its recording is forced and closed.
    Ended { meta: StreamMeta, messages: u64 },
    /// A stream's recording failed (a full disk, an unwritable folder): it is no longer
    /// recorded; the others carry on.
    Failed { meta: StreamMeta, error: String },
    /// Messages the subscriber reported lost before the recorder got them (they are not in
    /// the recording).
    Lost {
        meta: StreamMeta,
        from_sequence: u64,
        count: u64,
    },
}

/// A stream being recorded, or one that failed (its messages are dropped, counted).
#[derive(Debug)]
struct Stream {
    meta: StreamMeta,
    writer: Option<RecordingWriter>,
    messages: u64,
    dropped: u64,
    /// Messages not appended because the recording had them (a resumed stream).
    already: u64,
}

/// Records every stream of the topics it is given: see the module's documentation.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    opts: WriterOptions,
    subs: Vec<Subscriber>,
    /// By session, then by topic (a session's topics are few): found per message without
    /// building a key.
    streams: HashMap<u32, Vec<Stream>>,
    events: Vec<RecorderEvent>,
    messages: u64,
    bytes: u64,
}

impl Recorder {
    /// Subscribes (through `ctx`) to each of `patterns` (an exact topic or a glob) and
    /// records into `dir`.
    pub fn new(
        ctx: &Context,
        dir: &Path,
        patterns: &[&str],
        opts: WriterOptions,
    ) -> Result<Recorder, ArchiveError> {
        if patterns.is_empty() {
            return Err(ArchiveError::Config(
                "no topic to record: give a topic name or a glob, for example orders.*".into(),
            ));
        }
        let mut r = Recorder::open(dir, opts)?;
        for p in patterns {
            r.record_topic(ctx, p)?;
        }
        Ok(r)
    }

    /// A recorder into `dir` that records nothing yet: give it topics with
    /// [`record_topic`](Self::record_topic) and [`record_uri`](Self::record_uri).
    pub fn open(dir: &Path, opts: WriterOptions) -> Result<Recorder, ArchiveError> {
        opts.validate()?;
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(dir, "create folder", e))?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            opts,
            subs: Vec::new(),
            streams: HashMap::new(),
            events: Vec::new(),
            messages: 0,
            bytes: 0,
        })
    }

    /// Records every stream of `pattern` (an exact topic or a glob) that topic resolution
    /// finds.
    pub fn record_topic(&mut self, ctx: &Context, pattern: &str) -> Result<(), ArchiveError> {
        let sub = ctx
            .subscribe(pattern, IdleKind::Block)
            .map_err(|e| ArchiveError::Config(format!("topics {pattern}: {e}")))?;
        self.subs.push(sub);
        Ok(())
    }

    /// Records `topic` on `uri`: a stream that is not advertised (a market data backbone,
    /// which its feeds publish on a URI the operator gives), every session heard on it.
    pub fn record_uri(
        &mut self,
        ctx: &Context,
        topic: &str,
        uri: &str,
    ) -> Result<(), ArchiveError> {
        let sub = ctx
            .subscriber(topic, uri, IdleKind::Block)
            .map_err(|e| ArchiveError::Config(format!("{topic} on {uri}: {e}")))?;
        self.subs.push(sub);
        Ok(())
    }

    /// Receives what has arrived (up to `limit` messages from each subscriber), appends each
    /// message to its stream's recording with the time it was received, and runs the
    /// writers' timers. Returns the messages received.
    pub fn poll(&mut self, limit: usize) -> usize {
        let now = wall_ns();
        let Recorder {
            dir,
            opts,
            subs,
            streams,
            events,
            messages,
            bytes,
        } = self;
        let mut n = 0;
        for sub in subs.iter_mut() {
            n += sub.poll_topic(
                &mut |topic, m| {
                    let of_session = streams.entry(m.session_id).or_default();
                    let i = match of_session.iter().position(|s| s.meta.topic == topic) {
                        Some(i) => i,
                        None => {
                            of_session.push(open_stream(
                                dir,
                                topic,
                                m.session_id,
                                *opts,
                                now,
                                events,
                            ));
                            of_session.len() - 1
                        }
                    };
                    let s = &mut of_session[i];
                    let Some(w) = s.writer.as_mut() else {
                        s.dropped += 1;
                        return;
                    };
                    // A stream resumed after a restart: what it recorded before comes again
                    // (a late join asks for it); each sequence is recorded once.
                    if w.last_sequence().is_some_and(|l| m.sequence <= l) {
                        s.already += 1;
                        return;
                    }
                    match w.append(m.sequence, now, m.payload) {
                        Ok(()) => {
                            s.messages += 1;
                            *messages += 1;
                            *bytes += m.payload.len() as u64;
                        }
                        Err(e) => {
                            s.dropped += 1;
                            s.writer = None;
                            events.push(RecorderEvent::Failed {
                                meta: s.meta.clone(),
                                error: e.to_string(),
                            });
                        }
                    }
                },
                limit,
            );
            while let Some(ev) = sub.next_event() {
                match ev {
                    SubscriberEvent::PublisherClosed { session_id }
                    | SubscriberEvent::PublisherDied { session_id } => {
                        for s in streams.remove(&session_id).unwrap_or_default() {
                            if let Some(w) = s.writer {
                                if let Err(e) = w.close() {
                                    events.push(RecorderEvent::Failed {
                                        meta: s.meta.clone(),
                                        error: e.to_string(),
                                    });
                                }
                            }
                            events.push(RecorderEvent::Ended {
                                meta: s.meta,
                                messages: s.messages,
                            });
                        }
                    }
                    SubscriberEvent::Lost {
                        session_id,
                        from_sequence,
                        count,
                    } => {
                        for s in streams.get(&session_id).into_iter().flatten() {
                            events.push(RecorderEvent::Lost {
                                meta: s.meta.clone(),
                                from_sequence,
                                count,
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        for s in streams.values_mut().flatten() {
            if let Some(w) = s.writer.as_mut() {
                if let Err(e) = w.poll(now) {
                    s.writer = None;
                    events.push(RecorderEvent::Failed {
                        meta: s.meta.clone(),
                        error: e.to_string(),
                    });
                }
            }
        }
        n
    }

    /// Waits (blocking subscribers) when the last poll found nothing.
    pub fn idle(&mut self, work: usize) {
        if work == 0 {
            // Each writer's timer needs a poll at least every few milliseconds.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<RecorderEvent> {
        std::mem::take(&mut self.events)
    }

    /// Messages and bytes recorded, and streams followed now.
    pub fn totals(&self) -> (u64, u64, usize) {
        (
            self.messages,
            self.bytes,
            self.streams.values().map(Vec::len).sum(),
        )
    }

    /// Messages a failed stream dropped, over every stream followed now.
    pub fn dropped(&self) -> u64 {
        self.streams.values().flatten().map(|s| s.dropped).sum()
    }

    /// Messages not recorded again because their stream's recording had them already (a
    /// stream resumed after the recorder restarted), over every stream followed now.
    pub fn already_recorded(&self) -> u64 {
        self.streams.values().flatten().map(|s| s.already).sum()
    }

    /// Forces and closes every recording.
    pub fn close(mut self) -> Result<(), ArchiveError> {
        let mut first = None;
        for s in self.streams.drain().flat_map(|(_, v)| v) {
            if let Some(w) = s.writer {
                if let Err(e) = w.close() {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Opens a stream's recording (its failure is an event, and the stream's messages are
/// dropped and counted).
fn open_stream(
    dir: &Path,
    topic: &str,
    session_id: u32,
    opts: WriterOptions,
    now: u64,
    events: &mut Vec<RecorderEvent>,
) -> Stream {
    let meta = StreamMeta {
        topic: topic.to_string(),
        session_id,
        stream_id: peregrine::stream_id(topic),
    };
    let d = stream_dir(dir, topic, session_id);
    let writer = match RecordingWriter::open(&d, &meta, opts, now) {
        Ok(w) => {
            events.push(RecorderEvent::Started {
                meta: meta.clone(),
                dir: d,
            });
            Some(w)
        }
        Err(e) => {
            events.push(RecorderEvent::Failed {
                meta: meta.clone(),
                error: e.to_string(),
            });
            None
        }
    };
    Stream {
        meta,
        writer,
        messages: 0,
        dropped: 0,
        already: 0,
    }
}
