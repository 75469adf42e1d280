//! `peregrine feed --ab`: one feed of an A/B pair. The stream is a function of the clock and
//! the seed alone: update N (N counted from the Unix epoch at --rate a second) is of item
//! N mod items, is that item's update N div items (its `item_seq`, wrapping at 2^32), and
//! its quote is drawn from (seed, item, item_seq). Two feeds started with the same items,
//! rate and seed therefore publish the same updates with the same numbers, and a distributor
//! takes each from whichever comes first (docs/market-data.md, "A/B feeds"). A feed started
//! late, or again after a crash, publishes each item's image as of its last update before
//! now, then carries on with the clock's next update: the same numbers the other feed uses.

use super::{print_line, wall_ns, work, write_items, FeedArgs, FeedCounters, MAX_UPDATE_BURST};
use super::{MAX_REFRESH_BURST, WORK_EVERY};
use crate::cmd::Stop;
use anyhow::{anyhow, Context as _, Result};
use peregrine_market_data::provider::{Provider, ProviderError};
use peregrine_md::quotes::{Quote, UpdateLayout};
use std::io::Write;
use std::time::{Duration, Instant};

/// The clock's schedule: update N is due N / rate seconds after the epoch.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    rate: f64,
}

impl Schedule {
    /// The last update due at `wall_ns` (ns since the epoch).
    fn due_by(self, wall_ns: u64) -> u64 {
        (wall_ns as f64 / 1e9 * self.rate).floor() as u64
    }

    /// When update `n` is due, in ns since the epoch.
    fn due_at(self, n: u64) -> u64 {
        (n as f64 / self.rate * 1e9) as u64
    }
}

/// `item_seq` of an item's `k`-th update: the wire's 32 bits, wrapping.
fn seq(k: u64) -> u32 {
    k as u32
}

pub(super) fn run(
    a: &FeedArgs,
    rate: f64,
    mut provider: Provider,
    mut items: Vec<Quote>,
    stop: &Stop,
    out: &mut impl Write,
) -> Result<()> {
    let n = items.len() as u64;
    let schedule = Schedule { rate };
    let send_error = |e: ProviderError| anyhow!("publishing on {}: {e}", a.backbone);
    let layout = UpdateLayout::for_size(72).expect("72 bytes is a plain quote");
    let began = Instant::now();
    let mut c = FeedCounters::default();

    // Each item's image as of its last update before the first this feed publishes.
    let first = schedule.due_by(wall_ns()) + 1;
    let mut sent = 0;
    while sent < items.len() {
        if stop.requested().is_some() {
            return Ok(());
        }
        for q in items[sent..].iter_mut().take(MAX_REFRESH_BURST) {
            let i = u64::from(q.id - 1);
            let k = (first - 1 - i.min(first - 1)) / n;
            q.set_clocked(a.seed, k);
            // QUOTIM left out: the image must be the same in both feeds, whenever each
            // started.
            match provider.refresh_numbered(&q.name, &q.refresh_fields(0)[..7], seq(k)) {
                Ok(()) => sent += 1,
                Err(ProviderError::BackPressured) => {
                    c.refused += 1;
                    break;
                }
                Err(e) => return Err(send_error(e)),
            }
        }
        work(&mut provider, a.posts);
        std::thread::sleep(Duration::from_micros(100));
    }

    let start = Instant::now();
    let end = a.stop.seconds.map(|s| start + Duration::from_secs_f64(s));
    let mut next = first;
    let mut next_work = Instant::now();
    let mut last_line = began;
    let mut updates_at_line = 0u64;
    while stop.requested().is_none() && end.is_none_or(|e| Instant::now() < e) {
        let due = schedule.due_by(wall_ns());
        let mut burst = 0;
        while next <= due && burst < MAX_UPDATE_BURST {
            let q = &mut items[(next % n) as usize];
            let k = next / n;
            q.set_clocked(a.seed, k);
            let q = &*q;
            match q.with_update_fields(&layout, |f| provider.update_numbered(&q.name, f, seq(k))) {
                Ok(()) => {
                    c.updates += 1;
                    burst += 1;
                    next += 1;
                }
                Err(ProviderError::BackPressured) => {
                    c.refused += 1;
                    break;
                }
                Err(e) => return Err(send_error(e)),
            }
        }
        let turn = Instant::now();
        if turn >= next_work || provider.queued_refreshes() > 0 {
            next_work = turn + WORK_EVERY;
            work(&mut provider, a.posts);
        } else {
            let _ = provider.flush();
        }
        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            let per_s = (c.updates - updates_at_line) as f64 / secs;
            let t = (now - began).as_secs_f64();
            print_line(out, a, &c, &provider, t, per_s, false)?;
            last_line = now;
            updates_at_line = c.updates;
        }
        if next <= schedule.due_by(wall_ns()) || provider.queued_refreshes() > 0 {
            continue;
        }
        let wait = schedule.due_at(next).saturating_sub(wall_ns());
        if let Some(sleep) =
            peregrine_md::quotes::pacing_sleep(Instant::now() + Duration::from_nanos(wait))
        {
            std::thread::sleep(sleep);
        }
    }
    let per_s = c.updates as f64 / start.elapsed().as_secs_f64();
    provider.close();
    if let Some(path) = &a.items_out {
        write_items(path, [&provider])
            .with_context(|| format!("--items-out {}", path.display()))?;
    }
    print_line(
        out,
        a,
        &c,
        &provider,
        began.elapsed().as_secs_f64(),
        per_s,
        true,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_the_clock_times_the_rate() {
        let s = Schedule { rate: 10_000.0 };
        // 2026-11-29T00:00:00Z
        let t = 1_796_083_200_000_000_000u64;
        let n = s.due_by(t);
        assert_eq!(n, 17_960_832_000_000);
        assert!(s.due_at(n) <= t && s.due_at(n + 1) > t);
        assert_eq!(seq(u64::from(u32::MAX) + 3), 2, "item_seq wraps");
    }

    #[test]
    fn every_feed_draws_the_same_quote_for_the_same_update() {
        use peregrine_md::quotes::{Draws as _, SplitMix64};
        let mut rng = SplitMix64::seeded(1);
        let mut a = Quote::new("AAA.O".into(), 1, &mut rng);
        let mut b = a.clone();
        a.set_clocked(7, 1_000);
        a.set_clocked(7, 1_001);
        b.set_clocked(7, 1_001);
        let layout = UpdateLayout::for_size(72).unwrap();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.encode_update(5, &layout, &mut x);
        b.encode_update(5, &layout, &mut y);
        assert_eq!(x, y);
        b.set_clocked(7, 1_002);
        b.encode_update(5, &layout, &mut y);
        assert_ne!(
            x, y,
            "another update moves the quote (this seed's draws differ)"
        );
    }
}
