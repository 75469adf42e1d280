//! `peregrine feed`: the market data publisher. Publishes UPDATEs of the items of a file onto
//! the backbone (topic `md.<service>`) at a rate, items drawn with a seeded Zipf popularity,
//! every UPDATE stamped with CLOCK_MONOTONIC (its `timestamp_ns`, docs/market-data.md, so a
//! client on the same host measures one-way latency); a REFRESH of every item at start; and
//! REFRESHes answering the distributors' IMAGE_REQUESTs (topic `md.<service>.req`).
//!
//! A feed is the only source of images: a distributor's cache holds what the feed's REFRESHes
//! said, and asks again whenever it cannot trust it (backbone loss, the feed gone and back).

use super::md::{backbone_topic, default_requests_uri, read_list, request_topic};
use super::{context, Stop};
use crate::flags::md::FeedArgs;
use anyhow::{bail, Context as _, Result};
use peregrine::{IdleKind, OfferError};
use peregrine_md::codec::{refresh_flags, ImageRequestRepr, ImageRequestView};
use peregrine_md::model::check_item_name;
use peregrine_md::quotes::{Quote, SplitMix64, UpdateLayout, Zipf};
use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

/// UPDATEs offered per loop turn at most, so that image requests are still served when the
/// feed runs behind its schedule.
const MAX_UPDATE_BURST: u64 = 1024;
/// REFRESHes sent per loop turn at most: the start-up images and the answers to a request for
/// every image go out in slices between the updates, never as one burst of thousands.
const MAX_REFRESH_BURST: usize = 64;
/// How often image requests are looked for.
const REQUEST_POLL: Duration = Duration::from_millis(1);

/// One item the feed publishes: its quote, and whether a REFRESH of it is queued.
#[derive(Debug, Clone)]
struct FeedItem {
    quote: Quote,
    /// A REFRESH of it is queued, with these flags.
    queued: Option<u8>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the feed counted.
#[derive(Debug, Default, Clone, Copy)]
struct FeedCounters {
    updates: u64,
    refreshes: u64,
    image_requests: u64,
    /// Image requests for an id the feed does not have (not answered).
    unknown_requests: u64,
    /// Request-topic messages that are not IMAGE_REQUESTs.
    bad_requests: u64,
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
    let requests = match &a.requests {
        Some(r) => r.clone(),
        None => default_requests_uri(&a.backbone)?,
    };
    let ctx = context()?;
    let topic = backbone_topic(&a.service);
    let mut publisher = ctx
        .publisher(&topic, &a.backbone)
        .with_context(|| format!("publishing {topic} on --backbone {}", a.backbone))?;
    let mut req = ctx
        .subscriber(&request_topic(&a.service), &requests, IdleKind::Backoff)
        .with_context(|| format!("subscribing to image requests on --requests {requests}"))?;

    let layout =
        UpdateLayout::for_size(a.size).map_err(|e| anyhow::anyhow!("--size {}: {e}", a.size))?;
    let mut rng = SplitMix64::new(a.seed);
    let mut items: Vec<FeedItem> = names
        .into_iter()
        .enumerate()
        .map(|(i, n)| FeedItem {
            quote: Quote::new(n, i as u32 + 1, &mut rng),
            queued: None,
        })
        .collect();
    let zipf = Zipf::new(items.len(), a.zipf);
    let mut queue: VecDeque<usize> = VecDeque::new();
    for (i, it) in items.iter_mut().enumerate() {
        it.queued = Some(0);
        queue.push_back(i);
    }

    let out = std::io::stdout();
    let mut out = out.lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"feed": a.service, "items": items.len(), "backbone": publisher.uri(),
                "topic": topic, "requests": requests, "session": publisher.session_id()})
        )?;
    } else {
        writeln!(
            out,
            "feed {}: {} items on {} (topic {topic}, session {:08x}), image requests from {requests}",
            a.service,
            items.len(),
            publisher.uri(),
            publisher.session_id()
        )?;
    }
    out.flush()?;

    let mut c = FeedCounters::default();
    let mut scratch = Vec::with_capacity(512);
    let mut requests_seen: Vec<[u8; 12]> = Vec::new();
    let mut next_request_poll = Instant::now();
    let began = Instant::now();
    // The update schedule starts once the start-up images are out, so that no UPDATE reaches
    // a distributor before its item's image (it would be dropped, and an image asked for).
    let mut start: Option<Instant> = None;
    let mut end: Option<Instant> = None;
    let mut last_line = began;
    let mut updates_at_line = 0u64;
    // A pending update (drawn, encoded, refused by back-pressure) is offered again as is, so
    // that item_seq numbers only what was sent.
    let mut pending: Option<usize> = None;
    while stop.requested().is_none() && end.is_none_or(|e| Instant::now() < e) {
        if start.is_none() && queue.is_empty() {
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
                    items[i].quote.tick(&mut rng);
                    i
                }
            };
            let q = &mut items[i].quote;
            q.encode_update(peregrine_agent::monotonic_ns(), &layout, &mut scratch);
            match publisher.offer(&scratch) {
                Ok(_) => {
                    q.seq = q.seq.wrapping_add(1);
                    c.updates += 1;
                    burst += 1;
                }
                Err(OfferError::BackPressured) => {
                    c.refused += 1;
                    pending = Some(i);
                    break;
                }
                Err(e) => bail!("publishing on {}: {e}", a.backbone),
            }
        }
        // REFRESHes queued (at start, or asked for).
        for _ in 0..MAX_REFRESH_BURST {
            let Some(&i) = queue.front() else { break };
            let it = &mut items[i];
            let flags = it.queued.unwrap_or(0);
            it.quote.encode_refresh(
                &a.service,
                flags,
                peregrine_agent::monotonic_ns(),
                wall_ns(),
                &mut scratch,
            );
            match publisher.offer(&scratch) {
                Ok(_) => {
                    it.quote.seq = it.quote.seq.wrapping_add(1);
                    it.queued = None;
                    queue.pop_front();
                    c.refreshes += 1;
                }
                Err(OfferError::BackPressured) => {
                    c.refused += 1;
                    break;
                }
                Err(e) => bail!("publishing on {}: {e}", a.backbone),
            }
        }
        let _ = publisher.flush();
        publisher.do_work();

        // Image requests, looked for every REQUEST_POLL (not on every turn: a turn at a high
        // rate sends a few updates, and two empty receive calls per turn would cost as much).
        requests_seen.clear();
        let turn = Instant::now();
        if turn >= next_request_poll {
            next_request_poll = turn + REQUEST_POLL;
            req.poll(
                &mut |m| {
                    if let Ok(b) = <[u8; 12]>::try_from(m.payload) {
                        requests_seen.push(b);
                    } else {
                        c.bad_requests += 1;
                    }
                },
                256,
            );
            while req.next_event().is_some() {}
        }
        for b in &requests_seen {
            let Ok(r) = ImageRequestRepr::parse(&ImageRequestView::new_unchecked(&b[..])) else {
                c.bad_requests += 1;
                continue;
            };
            c.image_requests += 1;
            let wanted: Box<dyn Iterator<Item = usize>> = if r.item_id == 0 {
                Box::new(0..items.len())
            } else if (r.item_id as usize) <= items.len() {
                Box::new(std::iter::once(r.item_id as usize - 1))
            } else {
                // An id this feed never gave: not answered (docs/market-data.md allows a
                // STATUS not-found or nothing; the distributor stops asking after its retry).
                c.unknown_requests += 1;
                Box::new(std::iter::empty())
            };
            for i in wanted {
                let it = &mut items[i];
                match it.queued {
                    Some(ref mut f) => *f |= refresh_flags::SOLICITED,
                    None => {
                        it.queued = Some(refresh_flags::SOLICITED);
                        queue.push_back(i);
                    }
                }
            }
        }

        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            let rate = (c.updates - updates_at_line) as f64 / secs;
            print_line(&mut out, &a, &c, (now - began).as_secs_f64(), rate, false)?;
            last_line = now;
            updates_at_line = c.updates;
        }
        if !queue.is_empty() {
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
    publisher.close();
    // The rate over the updates' own interval (images excluded).
    let rate = start.map_or(0.0, |s| c.updates as f64 / s.elapsed().as_secs_f64());
    if let Some(path) = &a.items_out {
        write_items(path, &items).with_context(|| format!("--items-out {}", path.display()))?;
    }
    print_line(&mut out, &a, &c, began.elapsed().as_secs_f64(), rate, true)?;
    Ok(())
}

/// `--items-out`: one line per item, `NAME LAST_SEQ`, the `item_seq` of the last REFRESH or
/// UPDATE sent for it (`-` when none was).
fn write_items(path: &std::path::Path, items: &[FeedItem]) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for it in items {
        match it.quote.seq.checked_sub(1) {
            Some(last) => writeln!(w, "{} {last}", it.quote.name)?,
            None => writeln!(w, "{} -", it.quote.name)?,
        }
    }
    w.flush()
}

fn print_line(
    out: &mut impl Write,
    a: &FeedArgs,
    c: &FeedCounters,
    t: f64,
    rate: f64,
    done: bool,
) -> Result<()> {
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "t": (t * 10.0).round() / 10.0, "done": done, "updates_per_s": rate.round(),
                "updates": c.updates, "refreshes": c.refreshes,
                "image_requests": c.image_requests, "unknown_requests": c.unknown_requests,
                "bad_requests": c.bad_requests, "refused": c.refused,
                "cpu_s": peregrine_bench::cpu_seconds_self(),
            })
        )?;
    } else {
        writeln!(
            out,
            "{}[feed {t:.1}s] {rate:.0} updates/s, total {}, refreshes {}, image requests {} \
             ({} unknown, {} malformed), refused {}",
            if done { "done " } else { "" },
            c.updates,
            c.refreshes,
            c.image_requests,
            c.unknown_requests,
            c.bad_requests,
            c.refused
        )?;
    }
    out.flush()?;
    Ok(())
}
