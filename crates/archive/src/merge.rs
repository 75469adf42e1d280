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
use peregrine::{Context, IdleKind, Subscriber, SubscriberEvent};
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

/// Why a stream reads history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// From where it starts, to the live stream.
    Start,
    /// A loss the transport reported, from this sequence.
    Loss(u64),
    /// From a position given before it was heard live.
    Resume,
}

/// A stream reading history: what arrived live meanwhile (held), and where the history stands.
#[derive(Debug)]
struct Pending {
    held: VecDeque<(u64, Vec<u8>)>,
    /// The next sequence the history must deliver.
    next: u64,
    /// With nothing held: where the history must reach (the end of a loss at the stream's
    /// tail).
    until: Option<u64>,
    why: Why,
    recorded: u64,
    since: Instant,
    /// When the history was last read.
    tried: Option<Instant>,
}

impl Pending {
    fn new(next: u64, why: Why) -> Pending {
        Pending {
            held: VecDeque::new(),
            next,
            until: None,
            why,
            recorded: 0,
            since: Instant::now(),
            tried: None,
        }
    }

    /// Where the history must reach: the first message held, else `until`, else no end.
    fn live_from(&self) -> u64 {
        self.held
            .front()
            .map(|h| h.0)
            .or(self.until)
            .unwrap_or(u64::MAX)
    }
}

/// See the module's documentation.
#[derive(Debug)]
pub struct MergingSubscriber {
    topic: String,
    start: Start,
    history: History,
    limit: Duration,
    live: Subscriber,
    started: Instant,
    /// Streams past their seam: the next live sequence to deliver.
    seamed: HashMap<u32, u64>,
    pending: HashMap<u32, Pending>,
    /// Streams caught up from a position without being heard live: where they stand.
    caught_up: HashMap<u32, u64>,
    /// Live messages of a seamed stream after a jump in its sequence, held until the poll's
    /// events say whether the jump was a loss (or a message of several frames).
    jumped: HashMap<u32, VecDeque<(u64, Vec<u8>)>>,
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
        MergingSubscriber::with_start(ctx, topic, Start::Sequence(from), history, limit)
    }

    /// [`new`](Self::new) with every stream starting as `start` says. With [`Start::Live`]
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
            start,
            history,
            limit,
            live,
            started: Instant::now(),
            seamed: HashMap::new(),
            pending: HashMap::new(),
            caught_up: HashMap::new(),
            jumped: HashMap::new(),
            events: Vec::new(),
            duplicates: 0,
        })
    }

    /// Resumes session `session_id` from `next` (a position kept from before): its history
    /// from there is delivered whether or not it is heard live, then live delivery takes
    /// over. Call before the first poll.
    pub fn resume(&mut self, session_id: u32, next: u64) {
        self.pending
            .insert(session_id, Pending::new(next, Why::Resume));
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
        let mut delivered = 0;
        let (seamed, pending, caught_up, jumped, start, dups) = (
            &mut self.seamed,
            &mut self.pending,
            &mut self.caught_up,
            &mut self.jumped,
            self.start,
            &mut self.duplicates,
        );
        self.live.poll(
            &mut |m| {
                if let Some(held) = jumped.get_mut(&m.session_id) {
                    held.push_back((m.sequence, m.payload.to_vec()));
                    return;
                }
                if let Some(next) = seamed.get_mut(&m.session_id) {
                    if m.sequence < *next {
                        *dups += 1;
                        return;
                    }
                    if m.sequence > *next {
                        // A loss, or the previous message took several frames (sequences):
                        // the poll's events tell.
                        jumped.insert(
                            m.session_id,
                            VecDeque::from([(m.sequence, m.payload.to_vec())]),
                        );
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
                if let Some(p) = pending.get_mut(&m.session_id) {
                    p.held.push_back((m.sequence, m.payload.to_vec()));
                    return;
                }
                let from = match (caught_up.remove(&m.session_id), start) {
                    (Some(next), _) => next,
                    (None, Start::Sequence(from)) => from,
                    (None, Start::Live) => {
                        seamed.insert(m.session_id, m.sequence + 1);
                        delivered += 1;
                        handler(MergedMessage {
                            session_id: m.session_id,
                            sequence: m.sequence,
                            payload: m.payload,
                            recorded: false,
                        });
                        return;
                    }
                };
                let mut p = Pending::new(from, Why::Start);
                p.held.push_back((m.sequence, m.payload.to_vec()));
                pending.insert(m.session_id, p);
            },
            limit,
        );
        // Losses the transport reports: from the history, before what came after them.
        let mut lost: HashMap<u32, u64> = HashMap::new();
        while let Some(e) = self.live.next_event() {
            if let SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            } = e
            {
                let end = from_sequence.saturating_add(count);
                let e = lost.entry(session_id).or_insert(end);
                *e = (*e).max(end);
            }
        }
        for (s, held) in self.jumped.drain() {
            let next = self.seamed.remove(&s).expect("a jump of a seamed stream");
            if lost.remove(&s).is_some() {
                let mut p = Pending::new(next, Why::Loss(next));
                p.held = held;
                self.pending.insert(s, p);
                continue;
            }
            // No loss: the jump was a message of several frames.
            let mut next = next;
            for (q, payload) in held {
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
        }
        // A loss with nothing after it yet (the stream's tail): the history must reach its end.
        for (s, end) in lost {
            if let Some(&next) = self.seamed.get(&s) {
                if next < end {
                    self.seamed.remove(&s);
                    let mut p = Pending::new(next, Why::Loss(next));
                    p.until = Some(end);
                    self.pending.insert(s, p);
                }
            }
        }
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
        let live_from = p.live_from();
        // Read again every millisecond while the live stream waits on the history (the
        // recorder writes behind it), every 20 ms when nothing live waits.
        let every = Duration::from_millis(if live_from == u64::MAX { 20 } else { 1 });
        let due = p.tried.is_none_or(|t| t.elapsed() >= every);
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
        if live_from == u64::MAX {
            // Resumed, never heard live: its history is all there is.
            self.events.push(MergeEvent::CaughtUp {
                session_id: s,
                recorded: p.recorded,
                next: p.next,
            });
            self.caught_up.insert(s, p.next);
            return Ok(delivered);
        }
        self.events.push(match (seam, p.why) {
            (true, Why::Loss(from)) => MergeEvent::Recovered {
                session_id: s,
                from,
                to: live_from,
                recorded: p.recorded,
            },
            (true, _) => MergeEvent::Seam {
                session_id: s,
                recorded: p.recorded,
                live_from,
                after: self.started.elapsed(),
            },
            (false, _) => MergeEvent::Gap {
                session_id: s,
                from: p.next,
                live_from,
                reason: format!(
                    "the recording did not reach sequence {live_from} within {:?}",
                    self.limit
                ),
            },
        });
        // The held live messages the history did not already give, in order.
        let mut next = match (self.start, p.why) {
            (Start::Sequence(from), Why::Start) => p.next.max(from),
            _ => p.next,
        };
        if !seam {
            next = next.max(live_from);
        }
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

    /// Seams reached (or given up), losses recovered, since the last call.
    pub fn take_events(&mut self) -> Vec<MergeEvent> {
        std::mem::take(&mut self.events)
    }

    /// Live messages dropped because the recording had delivered them already.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Streams reading history (before their seam, or repairing a loss).
    pub fn merging(&self) -> usize {
        self.pending.len()
    }

    pub fn is_connected(&self) -> bool {
        self.live.is_connected()
    }

    /// Each stream's next sequence to deliver: where a subscriber that stopped now would
    /// resume (streams still reading history count from where their history stands).
    pub fn positions(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .seamed
            .iter()
            .map(|(s, n)| (*s, *n))
            .chain(self.pending.iter().map(|(s, p)| (*s, p.next)))
            .chain(self.caught_up.iter().map(|(s, n)| (*s, *n)))
            .collect();
        // A stream whose jump is held has delivered up to the seamed next, already counted.
        v.sort_unstable();
        v.dedup_by_key(|x| x.0);
        v
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
