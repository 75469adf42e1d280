//! [`DurableSubscriber`]: a subscriber with a name whose position in each stream of its
//! topic is kept by the recorder (Ultra Messaging's durable receivers, Aeron Archive's
//! recording positions): after a restart, or a crash, it resumes from there with the
//! recorded history, then live, through a [`MergingSubscriber`]. Delivery is at least once:
//! what it delivered after its last commit comes again after a crash (commit as often as the
//! application can afford to see repeats; `close` commits, so a clean stop repeats nothing).

use crate::durable;
use crate::folder::wall_ns;
use crate::format::positions::{check_name, Op, PositionsRepr};
use crate::merge::{History, MergeEvent, MergedMessage, MergingSubscriber, Start};
use crate::{ArchiveError, ReplayClient};
use peregrine::Context;
use std::time::{Duration, Instant};

/// See the module's documentation.
#[derive(Debug)]
pub struct DurableSubscriber {
    merge: MergingSubscriber,
    name: String,
    created_ns: u64,
    history: History,
    commit_every: Duration,
    last_commit: Instant,
    committed: Vec<(u32, u64)>,
    /// The positions were kept at least once by this subscriber.
    saved: bool,
    resumed: bool,
    commit_failure: Option<String>,
}

impl DurableSubscriber {
    /// Opens durable subscriber `name` of `topic` (a name, not a pattern). A name kept
    /// before resumes every stream where it stood, and reads from their start the streams
    /// that began since and that it never saw; a name never kept starts as `first` says and
    /// is kept from now on. Positions are kept in the folder of `history`, or by every
    /// recorder of it that answers (read from the first that does), every `commit_every`
    /// while polled, and at [`commit`](Self::commit) and [`close`](Self::close).
    pub fn open(
        ctx: &Context,
        topic: &str,
        name: &str,
        history: History,
        first: Start,
        commit_every: Duration,
        limit: Duration,
    ) -> Result<DurableSubscriber, ArchiveError> {
        check_name(name).map_err(ArchiveError::Config)?;
        let kept: Option<(u64, Vec<(u32, u64)>)> = match &history {
            History::Dir(d) => match durable::load(d, name, topic)? {
                Some(p) => Some((p.created_ns, durable::resume_points(d, &p)?)),
                None => None,
            },
            History::Recorders(addrs) => {
                let p = first_answer(addrs, |a| ReplayClient::load_positions(a, name, topic))?;
                (p.created_ns != 0).then_some((p.created_ns, p.entries))
            }
        };
        let resumed = kept.is_some();
        let (start, created_ns, entries) = match kept {
            // A stream it has no position for is new: all of it.
            Some((created, entries)) => (Start::Sequence(0), created, entries),
            None => (first, wall_ns(), Vec::new()),
        };
        let mut merge = MergingSubscriber::with_start(ctx, topic, start, history.clone(), limit)?;
        for (s, next) in &entries {
            merge.resume(*s, *next);
        }
        let mut d = DurableSubscriber {
            merge,
            name: name.to_string(),
            created_ns,
            history,
            commit_every,
            last_commit: Instant::now(),
            committed: Vec::new(),
            saved: false,
            resumed,
            commit_failure: None,
        };
        // The name is kept from its first use, so that streams starting while it is away
        // are found when it comes back.
        d.commit()?;
        Ok(d)
    }

    /// True when the name had positions kept: it resumed.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The durable name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// [`MergingSubscriber::poll`], then the positions kept when `commit_every` has passed
    /// (a failure to keep them is kept for [`take_commit_failure`](Self::take_commit_failure)
    /// and tried again at the next interval; delivery goes on).
    pub fn poll(
        &mut self,
        handler: &mut dyn FnMut(MergedMessage<'_>),
        limit: usize,
    ) -> Result<usize, ArchiveError> {
        let n = self.merge.poll(handler, limit)?;
        if self.last_commit.elapsed() >= self.commit_every {
            if let Err(e) = self.commit() {
                self.commit_failure = Some(e.to_string());
            }
        }
        Ok(n)
    }

    /// Keeps the positions now: everything delivered so far is not delivered again.
    pub fn commit(&mut self) -> Result<(), ArchiveError> {
        self.last_commit = Instant::now();
        let entries = self.merge.positions();
        if entries == self.committed && self.saved {
            return Ok(());
        }
        let p = PositionsRepr {
            op: Op::Save,
            name: self.name.clone(),
            topic: self.merge.topic().to_string(),
            created_ns: self.created_ns,
            entries,
        };
        match &self.history {
            History::Dir(d) => durable::save(d, &p)?,
            History::Recorders(addrs) => {
                // Every recorder that answers keeps them: either can serve the next start.
                let mut kept = 0;
                let mut failed = Vec::new();
                for a in addrs {
                    match ReplayClient::save_positions(a, &p) {
                        Ok(()) => kept += 1,
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                if kept == 0 {
                    return Err(ArchiveError::Remote {
                        addr: addrs.join(","),
                        text: format!("no recorder kept the positions: {}", failed.join("; ")),
                    });
                }
            }
        }
        self.committed = p.entries;
        self.saved = true;
        Ok(())
    }

    /// Why the last automatic commit failed, once.
    pub fn take_commit_failure(&mut self) -> Option<String> {
        self.commit_failure.take()
    }

    /// Seams, recoveries and streams caught up since the last call.
    pub fn take_events(&mut self) -> Vec<MergeEvent> {
        self.merge.take_events()
    }

    /// The merge under it.
    pub fn merge(&self) -> &MergingSubscriber {
        &self.merge
    }

    /// Commits, and closes.
    pub fn close(mut self) -> Result<(), ArchiveError> {
        self.commit()
    }
}

/// `f` of the first of `addrs` that answers; the errors of all when none does.
fn first_answer<T>(
    addrs: &[String],
    mut f: impl FnMut(&str) -> Result<T, ArchiveError>,
) -> Result<T, ArchiveError> {
    let mut failed = Vec::new();
    for a in addrs {
        match f(a) {
            Ok(t) => return Ok(t),
            Err(e @ (ArchiveError::Config(_) | ArchiveError::Remote { .. })) => return Err(e),
            Err(e) => failed.push(e.to_string()),
        }
    }
    Err(ArchiveError::Remote {
        addr: addrs.join(","),
        text: format!("no recorder answered: {}", failed.join("; ")),
    })
}
