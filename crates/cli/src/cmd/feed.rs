//! `peregrine feed`: the synthetic market data provider. A driver over the provider API
//! (`peregrine_market_data::Provider`): publishes UPDATEs of the items of a file onto the
//! backbone (topic `md.<service>`) at a rate, items drawn with a seeded Zipf popularity, every
//! UPDATE stamped with CLOCK_MONOTONIC (its `timestamp_ns`, docs/market-data.md, so a client
//! on the same host measures one-way latency); a REFRESH of every item at start. The provider
//! keeps every item's image and answers the distributors' IMAGE_REQUESTs (topic
//! `md.<service>.req`) itself.
//!
//! A feed is the only source of images: a distributor's cache holds what the feed's REFRESHes
//! said, and asks again whenever it cannot trust it (backbone loss, the feed gone and back).

use super::md::read_list;
use super::{context, Stop};
use crate::flags::md::FeedArgs;
use anyhow::{bail, Context as _, Result};
use peregrine_market_data::provider::{Provider, ProviderError, ProviderOptions};
use peregrine_md::model::check_item_name;
use peregrine_md::quotes::{Quote, SplitMix64, UpdateLayout, Zipf};
use std::io::Write;
use std::time::{Duration, Instant};

/// UPDATEs offered per loop turn at most, so that image requests are still served when the
/// feed runs behind its schedule.
const MAX_UPDATE_BURST: u64 = 1024;
/// Start-up REFRESHes sent per loop turn at most: they go out in slices between the updates,
/// never as one burst of thousands.
const MAX_REFRESH_BURST: usize = 64;
/// How often the provider's work (image requests, their answers) is done at most, when
/// updates keep the loop busy: a turn at a high rate sends a few updates, and two empty
/// receive calls per turn would cost as much.
const WORK_EVERY: Duration = Duration::from_millis(1);

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the feed counted besides the provider's counters.
#[derive(Debug, Default, Clone, Copy)]
struct FeedCounters {
    updates: u64,
    /// Offers refused by back-pressure (retried later).
    refused: u64,
}

pub fn run(a: FeedArgs) -> Result<()> {
    let stop = Stop::install()?;
    let names = read_list(&a.items, "item", |l| {
        check_item_name(l.as_bytes())
            .map(drop)
            .map_err(|e| format!("{e}: give {}", peregrine_md::model::ITEM_ALPHABET))
    })?;
    if names.len() > u32::MAX as usize - 1 {
        bail!("{}: too many items", a.items.display());
    }
    let ctx = context()?;
    let mut options = ProviderOptions::new(&a.service, &a.backbone);
    options.requests = a.requests.clone();
    options.max_items = names.len().max(1);
    let mut provider = Provider::with_options(&ctx, options).map_err(|e| match e {
        ProviderError::Backbone(e) => anyhow::anyhow!("--backbone: {e}"),
        e => anyhow::anyhow!("{e}"),
    })?;

    let layout =
        UpdateLayout::for_size(a.size).map_err(|e| anyhow::anyhow!("--size {}: {e}", a.size))?;
    let mut rng = SplitMix64::new(a.seed);
    let mut items: Vec<Quote> = names
        .into_iter()
        .enumerate()
        .map(|(i, n)| Quote::new(n, i as u32 + 1, &mut rng))
        .collect();
    let zipf = Zipf::new(items.len(), a.zipf);
    // The start-up images not yet sent: items[next_image..].
    let mut next_image = 0usize;

    let out = std::io::stdout();
    let mut out = out.lock();
    let topic = peregrine_market_data::backbone::backbone_topic(&a.service);
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"feed": a.service, "items": items.len(), "backbone": provider.backbone_uri(),
                "topic": topic, "requests": provider.requests_uri(), "session": provider.session_id(),
                "backbone_auth": provider.sealing().describe()})
        )?;
    } else {
        writeln!(
            out,
            "feed {}: {} items on {} (topic {topic}, session {:08x}), image requests from {}; {}",
            a.service,
            items.len(),
            provider.backbone_uri(),
            provider.session_id(),
            provider.requests_uri(),
            provider.sealing().describe()
        )?;
    }
    out.flush()?;

    let mut c = FeedCounters::default();
    let mut next_work = Instant::now();
    let began = Instant::now();
    // The update schedule starts once the start-up images are out, so that no UPDATE reaches
    // a distributor before its item's image (it would be dropped, and an image asked for).
    let mut start: Option<Instant> = None;
    let mut end: Option<Instant> = None;
    let mut last_line = began;
    let mut updates_at_line = 0u64;
    // A pending update (drawn, refused by back-pressure) is offered again as is, so that
    // item_seq numbers only what was sent.
    let mut pending: Option<usize> = None;
    let send_error = |e: ProviderError| anyhow::anyhow!("publishing on {}: {e}", a.backbone);
    while stop.requested().is_none() && end.is_none_or(|e| Instant::now() < e) {
        if start.is_none() && next_image == items.len() {
            let now = Instant::now();
            start = Some(now);
            end = a.duration.map(|s| now + Duration::from_secs_f64(s));
        }
        // UPDATEs due by the schedule.
        let due = start.map_or(0, |s| (s.elapsed().as_secs_f64() * a.rate) as u64 + 1);
        let mut burst = 0;
        while c.updates < due && burst < MAX_UPDATE_BURST {
            let i = match pending.take() {
                Some(i) => i,
                None => {
                    let i = zipf.sample(&mut rng);
                    items[i].tick(&mut rng);
                    i
                }
            };
            let q = &items[i];
            match q.with_update_fields(&layout, |f| provider.update(&q.name, f)) {
                Ok(()) => {
                    c.updates += 1;
                    burst += 1;
                }
                Err(ProviderError::BackPressured) => {
                    c.refused += 1;
                    pending = Some(i);
                    break;
                }
                Err(e) => return Err(send_error(e)),
            }
        }
        // Start-up REFRESHes.
        let mut sent_images = 0;
        while next_image < items.len() && sent_images < MAX_REFRESH_BURST {
            let q = &items[next_image];
            match provider.refresh(&q.name, &q.refresh_fields(wall_ns())) {
                Ok(()) => {
                    next_image += 1;
                    sent_images += 1;
                }
                Err(ProviderError::BackPressured) => {
                    c.refused += 1;
                    break;
                }
                Err(e) => return Err(send_error(e)),
            }
        }
        // Image requests and their answers, every WORK_EVERY (and flushes every turn).
        let turn = Instant::now();
        if turn >= next_work || next_image < items.len() || provider.queued_refreshes() > 0 {
            next_work = turn + WORK_EVERY;
            provider.do_work();
        } else {
            let _ = provider.flush();
        }

        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            let rate = (c.updates - updates_at_line) as f64 / secs;
            print_line(
                &mut out,
                &a,
                &c,
                &provider,
                (now - began).as_secs_f64(),
                rate,
                false,
            )?;
            last_line = now;
            updates_at_line = c.updates;
        }
        if next_image < items.len() || provider.queued_refreshes() > 0 {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        let Some(start) = start else { continue };
        if c.updates < due || pending.is_some() {
            continue;
        }
        let next_due = start + Duration::from_secs_f64(c.updates as f64 / a.rate);
        if let Some(wait) = peregrine_md::quotes::pacing_sleep(next_due) {
            std::thread::sleep(wait);
        }
    }
    // The rate over the updates' own interval (images excluded), before the close's linger.
    let rate = start.map_or(0.0, |s| c.updates as f64 / s.elapsed().as_secs_f64());
    provider.close();
    if let Some(path) = &a.items_out {
        write_items(path, &provider).with_context(|| format!("--items-out {}", path.display()))?;
    }
    print_line(
        &mut out,
        &a,
        &c,
        &provider,
        began.elapsed().as_secs_f64(),
        rate,
        true,
    )?;
    Ok(())
}

/// `--items-out`: one line per item, `NAME LAST_SEQ`, the `item_seq` of the last REFRESH or
/// UPDATE sent for it (`-` when none was).
fn write_items(path: &std::path::Path, provider: &Provider) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (name, last) in provider.items() {
        match last {
            Some(last) => writeln!(w, "{name} {last}")?,
            None => writeln!(w, "{name} -")?,
        }
    }
    w.flush()
}

fn print_line(
    out: &mut impl Write,
    a: &FeedArgs,
    c: &FeedCounters,
    provider: &Provider,
    t: f64,
    rate: f64,
    done: bool,
) -> Result<()> {
    let p = provider.counters();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "t": (t * 10.0).round() / 10.0, "done": done, "updates_per_s": rate.round(),
                "updates": c.updates, "refreshes": p.refreshes,
                "image_requests": p.image_requests, "requests_coalesced": p.requests_coalesced,
                "unknown_requests": p.unknown_requests,
                "bad_requests": p.bad_requests, "refused": c.refused,
                "cpu_s": peregrine_bench::cpu_seconds_self(),
            })
        )?;
    } else {
        writeln!(
            out,
            "{}[feed {t:.1}s] {rate:.0} updates/s, total {}, refreshes {}, image requests {} \
             ({} coalesced, {} unknown, {} malformed), refused {}",
            if done { "done " } else { "" },
            c.updates,
            p.refreshes,
            p.image_requests,
            p.requests_coalesced,
            p.unknown_requests,
            p.bad_requests,
            c.refused
        )?;
    }
    out.flush()?;
    Ok(())
}
