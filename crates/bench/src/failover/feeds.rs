//! The A/B feed pair case of `bench failover`: two `peregrine feed --ab` processes publish
//! one numbered stream on a backbone of the run's own, a `peregrine distributor` takes each
//! update from whichever comes first, and a consumer in this process watches every item. The
//! feeds are killed with SIGKILL in turn (each restarted, and given time to send its images,
//! before the other is killed). Per kill: the consumer's gap (from the last update before
//! the kill to the first after it) and the items it was told were stale; over the run, every
//! item's `item_seq` checked (lost, duplicated).
//!
//! **The baselines of the same run.** Between kills, at a moment with no kill, the same gap is
//! measured (the last update before that moment to the first after it): with both feeds live
//! (the baseline), and with the survivor alone, before the killed feed is restarted (the
//! single-feed baseline: the survivor's own pace, which is what a kill leaves the consumer
//! with; the consumer cannot tell which feed's copy it got, so the feeds' distance at the kill
//! is not measured apart).

use super::md::{distributor, free_port, poll_until, MdFailoverConfig, Setup, TOKEN, USER};
use crate::fanout::process::Proc;
use crate::BenchError;
use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_md::model::ItemState;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a restarted feed is given, once the distributor found it, before the other is
/// killed: it must have sent its images (a few milliseconds for hundreds of items) and be
/// carrying the stream.
const SETTLE: Duration = Duration::from_millis(1000);

/// What one kill cost the consumer.
#[derive(Debug, Clone, Serialize)]
pub struct FeedKill {
    /// From the last update before the kill to the first after it.
    pub gap_ns: u64,
    /// Items the consumer was told were stale from the kill to the next kill's settling.
    pub stale: usize,
}

/// What the case measured.
#[derive(Debug, Clone, Serialize)]
pub struct FeedPairResult {
    pub items: usize,
    pub rate: f64,
    pub kills: Vec<FeedKill>,
    /// The same gap at moments with no kill, both feeds live.
    pub baseline_gaps_ns: Vec<u64>,
    /// The same gap at moments with no kill while one feed is live (the other killed and not
    /// yet restarted): the survivor's own delivery, which a kill leaves the consumer with.
    pub single_feed_gaps_ns: Vec<u64>,
    pub updates: u64,
    /// `item_seq` values the consumer never got (over every item), and got twice or backwards.
    pub lost: u64,
    pub duplicated: u64,
    pub seconds: f64,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

impl FeedPairResult {
    pub fn gap_median_ns(&self) -> u64 {
        median(self.kills.iter().map(|k| k.gap_ns).collect())
    }
    pub fn gap_max_ns(&self) -> u64 {
        self.kills.iter().map(|k| k.gap_ns).max().unwrap_or(0)
    }
    pub fn baseline_median_ns(&self) -> u64 {
        median(self.baseline_gaps_ns.clone())
    }
    pub fn single_feed_median_ns(&self) -> u64 {
        median(self.single_feed_gaps_ns.clone())
    }
    pub fn stale(&self) -> usize {
        self.kills.iter().map(|k| k.stale).sum()
    }
    /// The stream's own time between updates.
    pub fn interval_ns(&self) -> f64 {
        1e9 / self.rate
    }
}

/// The consumer's view: each item's last `item_seq`, and the latest update's arrival.
#[derive(Default)]
struct Track {
    seq: HashMap<String, u32>,
    updates: u64,
    lost: u64,
    duplicated: u64,
    stale: usize,
    last_update: Option<Instant>,
}

impl Track {
    fn take(&mut self, e: &Event<'_>) {
        match e {
            Event::Refresh { item, item_seq, .. } => {
                self.seq.insert(item.to_string(), *item_seq);
            }
            Event::Update { item, item_seq, .. } => {
                self.updates += 1;
                self.last_update = Some(Instant::now());
                let Some(last) = self.seq.get_mut(*item) else {
                    return;
                };
                let step = item_seq.wrapping_sub(*last) as i32;
                if step <= 0 {
                    self.duplicated += 1;
                    return;
                }
                self.lost += (step - 1) as u64;
                *last = *item_seq;
            }
            Event::Status { state, .. } if *state == ItemState::Stale => self.stale += 1,
            _ => {}
        }
    }
}

fn feed(
    exe: &Path,
    dir: &Path,
    cfg: &MdFailoverConfig,
    backbone: &str,
) -> Result<Proc, BenchError> {
    let mut c = Command::new(exe);
    c.arg("feed")
        .arg("--ab")
        .arg("--items")
        .arg(dir.join("items.txt"))
        .args(["--rate", &format!("{}", cfg.rate)])
        .args(["--backbone", backbone, "--json", "--seconds", "3600"]);
    let mut p = Proc::spawn(c, "peregrine feed --ab")?;
    p.wait_line(
        |l| l.contains("\"feed\""),
        Duration::from_secs(20),
        "start line",
    )?;
    Ok(p)
}

/// Waits for the distributor to say it found a feed session (its first messages, the
/// images, arrived).
fn feed_found(dist: &mut Proc) -> Result<(), BenchError> {
    dist.wait_line(
        |l| l.contains("\"feed_found\""),
        Duration::from_secs(20),
        "feed_found line",
    )
    .map(drop)
}

/// Polls the consumer for `d`.
fn pump(consumer: &mut Consumer, track: &mut Track, d: Duration) -> Result<(), BenchError> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        consumer
            .poll(Duration::from_millis(1), &mut |e| track.take(&e))
            .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    }
    Ok(())
}

/// From the last update before now (after `act`, e.g. a kill) to the first update after.
fn gap(consumer: &mut Consumer, track: &mut Track, act: impl FnOnce()) -> Result<u64, BenchError> {
    consumer
        .poll(Duration::ZERO, &mut |e| track.take(&e))
        .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    let before = track
        .last_update
        .ok_or_else(|| BenchError::Child("no update before the kill".into()))?;
    let at = Instant::now();
    act();
    poll_until(consumer, "an update after the kill", &mut |e| {
        track.take(e);
        track.last_update.is_some_and(|t| t > at)
    })?;
    let after = track.last_update.expect("an update was just taken");
    Ok((after - before).as_nanos() as u64)
}

/// Runs the case.
pub fn measure(cfg: &MdFailoverConfig, exe: &Path) -> Result<FeedPairResult, BenchError> {
    let Setup {
        dir: _dir,
        path: d,
        backbone,
    } = Setup::new(cfg)?;
    let port = free_port()?;
    // Updates written as they come: a gap measured in microseconds, not in flush intervals.
    let mut dist = distributor(exe, &d, port, &backbone, "latency")?;
    let mut feeds = [
        Some(feed(exe, &d, cfg, &backbone)?),
        Some(feed(exe, &d, cfg, &backbone)?),
    ];
    let addr = format!("127.0.0.1:{port}");
    let mut consumer = Consumer::connect(&[addr.as_str()], USER, TOKEN.as_bytes())
        .map_err(|e| BenchError::Child(format!("consumer: {e}")))?;
    consumer
        .open(peregrine_market_data::backbone::DEFAULT_SERVICE, &["*"])
        .map_err(|e| BenchError::Child(format!("consumer open: {e}")))?;
    let started = Instant::now();
    let mut track = Track::default();
    poll_until(&mut consumer, "every item's image", &mut |e| {
        track.take(e);
        track.seq.len() == cfg.items
    })?;
    for _ in 0..2 {
        feed_found(&mut dist)?;
    }
    pump(&mut consumer, &mut track, SETTLE)?;
    // (Statuses before every image was in: "not in the cache yet".)
    track.stale = 0;
    let mut kills = Vec::new();
    let mut baseline = Vec::new();
    let mut single = Vec::new();
    let mut killed = Vec::new();
    for n in 0..cfg.kills {
        let i = n as usize % 2;
        let stale_before = track.stale;
        let victim = &mut feeds[i];
        let gap_ns = gap(&mut consumer, &mut track, || {
            if let Some(mut p) = victim.take() {
                p.kill();
                killed.push(p);
            }
        })?;
        pump(&mut consumer, &mut track, SETTLE / 4)?;
        single.push(gap(&mut consumer, &mut track, || {})?);
        pump(&mut consumer, &mut track, SETTLE / 4)?;
        feeds[i] = Some(feed(exe, &d, cfg, &backbone)?);
        feed_found(&mut dist)?;
        pump(&mut consumer, &mut track, SETTLE / 2)?;
        baseline.push(gap(&mut consumer, &mut track, || {})?);
        pump(&mut consumer, &mut track, SETTLE / 2)?;
        kills.push(FeedKill {
            gap_ns,
            stale: track.stale - stale_before,
        });
    }
    let seconds = started.elapsed().as_secs_f64();
    for p in feeds.iter_mut().flatten() {
        p.kill();
    }
    dist.kill();
    Ok(FeedPairResult {
        items: cfg.items,
        rate: cfg.rate,
        kills,
        baseline_gaps_ns: baseline,
        single_feed_gaps_ns: single,
        updates: track.updates,
        lost: track.lost,
        duplicated: track.duplicated,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_track_counts_what_was_skipped_and_what_came_twice() {
        let mut t = Track::default();
        let fields = peregrine_md::codec::FieldList::List(&[]);
        let up = |item_seq| Event::Update {
            request: 1,
            item: "A",
            item_seq,
            timestamp_ns: 0,
            fields,
        };
        t.take(&up(5)); // before the image: not judged
        t.take(&Event::Refresh {
            request: 1,
            item: "A",
            item_seq: u32::MAX - 1,
            timestamp_ns: 0,
            solicited: false,
            conflated: false,
            snapshot: false,
            fields,
        });
        for s in [u32::MAX, 0, 0, 3, 2] {
            t.take(&up(s));
        }
        assert_eq!((t.updates, t.lost, t.duplicated), (6, 2, 2));
    }
}
