//! Replay merge: a subscriber that starts from a sequence in the past gets the recorded
//! history, then the live stream, with no gap and no duplicate at the seam (Aeron Archive's
//! replay merge). [`MergingSubscriber`] subscribes live first and holds what arrives; for
//! each live stream (a publisher session) it reads the recording of that stream from the
//! sequence asked for up to the first live message held, delivers it, then the held live
//! messages and the live stream from there on. A recording that has not caught up with the
//! live stream yet (the recorder writes behind it by its buffer) is read again until it has,
//! up to a time limit; past it the seam is reported with the sequences missing.

use crate::folder::stream_dir;
use crate::format::replay::From;
use crate::{ArchiveError, Entry, RecordingReader, RemoteEntry, ReplayClient};
use peregrine::{Context, IdleKind, Subscriber};
use std::collections::{HashMap, VecDeque};
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

/// One message, from the recording or live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergedMessage<'a> {
    pub session_id: u32,
    pub sequence: u64,
    pub payload: &'a [u8],
    /// From the recording (before the seam), or live.
    pub recorded: bool,
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
    /// The recording did not reach the live stream within the time limit (or there is none):
    /// sequences `from..live_from` are missing; live delivery took over.
    Gap {
        session_id: u32,
        from: u64,
        live_from: u64,
        reason: String,
    },
}

/// A live stream before its seam: what arrived live (held), and where the history stands.
#[derive(Debug)]
struct Pending {
    held: VecDeque<(u64, Vec<u8>)>,
    /// The next sequence the history must deliver.
    next: u64,
    recorded: u64,
    since: Instant,
    /// When the history was last read (it is read again at most every millisecond).
    tried: Option<Instant>,
}

/// See the module's documentation.
#[derive(Debug)]
pub struct MergingSubscriber {
    topic: String,
    from: u64,
    history: History,
    limit: Duration,
    live: Subscriber,
    started: Instant,
    /// Streams past their seam: the next live sequence to deliver.
    seamed: HashMap<u32, u64>,
    pending: HashMap<u32, Pending>,
    events: Vec<MergeEvent>,
    duplicates: u64,
}

impl MergingSubscriber {
    /// Subscribes to `topic` (a name) live through `ctx` and merges history from `from` on,
    /// read from `history`; a seam not reached within `limit` is given up (a `Gap` event).
    pub fn new(
        ctx: &Context,
        topic: &str,
        from: u64,
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
            from,
            history,
            limit,
            live,
            started: Instant::now(),
            seamed: HashMap::new(),
            pending: HashMap::new(),
            events: Vec::new(),
            duplicates: 0,
        })
    }

    /// Receives what has arrived and moves each stream towards its seam; hands every message
    /// to `handler` in order (recorded ones first). Returns the messages delivered.
    pub fn poll(
        &mut self,
        handler: &mut dyn FnMut(MergedMessage<'_>),
        limit: usize,
    ) -> Result<usize, ArchiveError> {
        let mut delivered = 0;
        let (seamed, pending, from, dups) = (
            &mut self.seamed,
            &mut self.pending,
            self.from,
            &mut self.duplicates,
        );
        self.live.poll(
            &mut |m| {
                if let Some(next) = seamed.get_mut(&m.session_id) {
                    if m.sequence < *next {
                        *dups += 1;
                        return;
                    }
                    *next = m.sequence + 1;
                    delivered += 1;
                    handler(MergedMessage {
                        session_id: m.session_id,
                        sequence: m.sequence,
                        payload: m.payload,
                        recorded: false,
                    });
                    return;
                }
                let p = pending.entry(m.session_id).or_insert_with(|| Pending {
                    held: VecDeque::new(),
                    next: from,
                    recorded: 0,
                    since: Instant::now(),
                    tried: None,
                });
                p.held.push_back((m.sequence, m.payload.to_vec()));
            },
            limit,
        );
        while self.live.next_event().is_some() {}
        let sessions: Vec<u32> = self.pending.keys().copied().collect();
        for s in sessions {
            delivered += self.advance(s, handler)?;
        }
        Ok(delivered)
    }

    /// Reads session `s`'s history up to its first held live message; at the seam, delivers
    /// the held messages and hands the stream to live delivery.
    fn advance(
        &mut self,
        s: u32,
        handler: &mut dyn FnMut(MergedMessage<'_>),
    ) -> Result<usize, ArchiveError> {
        let mut delivered = 0;
        let p = self.pending.get_mut(&s).expect("pending");
        let live_from = p.held.front().map_or(u64::MAX, |h| h.0);
        let due = p
            .tried
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(1));
        if p.next < live_from && due {
            p.tried = Some(Instant::now());
            let (next, got) =
                read_history(&self.history, &self.topic, s, p.next, live_from, handler)?;
            delivered += got as usize;
            p.recorded += got;
            p.next = next;
        }
        let seam = p.next >= live_from;
        let timed_out = !seam && p.since.elapsed() > self.limit;
        if !(seam || timed_out) {
            return Ok(delivered);
        }
        let p = self.pending.remove(&s).expect("pending");
        if seam {
            self.events.push(MergeEvent::Seam {
                session_id: s,
                recorded: p.recorded,
                live_from,
                after: self.started.elapsed(),
            });
        } else {
            self.events.push(MergeEvent::Gap {
                session_id: s,
                from: p.next,
                live_from,
                reason: format!(
                    "the recording did not reach the live stream within {:?}",
                    self.limit
                ),
            });
        }
        // The held live messages the history did not already give, in order.
        let mut next = p.next.max(self.from);
        for (q, payload) in p.held {
            if q < next {
                self.duplicates += 1;
                continue;
            }
            next = q + 1;
            delivered += 1;
            handler(MergedMessage {
                session_id: s,
                sequence: q,
                payload: &payload,
                recorded: false,
            });
        }
        self.seamed.insert(s, next);
        Ok(delivered)
    }

    /// Seams reached (or given up) since the last call.
    pub fn take_events(&mut self) -> Vec<MergeEvent> {
        std::mem::take(&mut self.events)
    }

    /// Live messages dropped because the recording had delivered them already.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Streams still before their seam.
    pub fn merging(&self) -> usize {
        self.pending.len()
    }

    pub fn is_connected(&self) -> bool {
        self.live.is_connected()
    }
}

/// Delivers session `s`'s recorded messages from `from` up to (not including) `until`;
/// returns the next sequence the history must deliver and how many it delivered.
fn read_history(
    history: &History,
    topic: &str,
    s: u32,
    from: u64,
    until: u64,
    handler: &mut dyn FnMut(MergedMessage<'_>),
) -> Result<(u64, u64), ArchiveError> {
    let (mut next, mut got) = (from, 0u64);
    let mut take = |sequence: u64, payload: &[u8]| -> bool {
        if sequence >= until {
            return false;
        }
        if sequence >= next {
            next = sequence + 1;
            got += 1;
            handler(MergedMessage {
                session_id: s,
                sequence,
                payload,
                recorded: true,
            });
        }
        true
    };
    match history {
        History::Dir(dir) => {
            let d = stream_dir(dir, topic, s);
            if !d.exists() {
                // Not recorded (yet): nothing to give.
                return Ok((from, 0));
            }
            let r = RecordingReader::open(&d)?;
            let mut c = r.from_sequence(from)?;
            while let Some(e) = c.next_entry() {
                if let Entry::Message {
                    sequence, payload, ..
                } = e?
                {
                    if !take(sequence, payload) {
                        break;
                    }
                }
            }
        }
        History::Recorders(addrs) => {
            let mut c = ReplayClient::connect_first(addrs, topic, From::Sequence(from))?;
            let mut ours = false;
            while let Some(e) = c.next_entry() {
                match e {
                    Ok(RemoteEntry::Recording(m)) => ours = m.session_id == s,
                    Ok(RemoteEntry::Message {
                        sequence, payload, ..
                    }) if ours => {
                        if !take(sequence, payload) {
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
    Ok((next, got))
}
