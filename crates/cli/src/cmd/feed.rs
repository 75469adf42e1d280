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
use crate::flags::md::{FeedArgs, ItemList, PostPolicy, TickSource};
use anyhow::{bail, Context as _, Result};
use peregrine_market_data::provider::{Provider, ProviderError, ProviderOptions};
use peregrine_md::model::check_item_name;
use peregrine_md::quotes::{Draws as _, Quote, SplitMix64, UpdateLayout, Zipf};
use std::io::Write;
use std::time::{Duration, Instant};

mod ab;

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

/// The provider's work, then the posts it received answered as `--posts` says.
fn work(p: &mut Provider, posts: PostPolicy) -> usize {
    let n = p.do_work();
    while let Some(post) = p.poll_post() {
        match posts {
            PostPolicy::Refuse => p.refuse(
                &post,
                "this feed takes no posts (peregrine feed --posts refuse)",
            ),
            // A post the provider cannot publish is refused to its poster with the reason.
            PostPolicy::Publish => {
                let _ = p.publish_post(&post);
            }
            PostPolicy::Ignore => {}
        }
    }
    n
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
    if let Some(source) = a.ticks.clone() {
        return replay(&a, &source, &stop);
    }
    // clap requires both without --ticks.
    let (Some(list), Some(rate)) = (a.items.clone(), a.rate) else {
        bail!("give --items sample|FILE --rate R (synthetic quotes), or --ticks sample|FILE.csv (a replay)");
    };
    let names = match &list {
        ItemList::Sample(n) => {
            peregrine_md::quotes::sample_items(*n).expect("the flag's parser bounds n")
        }
        ItemList::File(path) => read_list(path, "item", |l| {
            check_item_name(l.as_bytes())
                .map(drop)
                .map_err(|e| format!("{e}: give {}", peregrine_md::model::ITEM_ALPHABET))
        })?,
    };
    if names.len() > u32::MAX as usize - 1 {
        bail!("{list}: too many items");
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
    if a.ab && a.size != 72 {
        bail!(
            "--size {}: an A/B feed (--ab) publishes plain 72-byte quotes; leave --size out",
            a.size
        );
    }
    let mut rng = SplitMix64::seeded(a.seed);
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

    if a.ab {
        return ab::run(&a, rate, provider, items, &stop, &mut out);
    }

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
            end = a.stop.seconds.map(|s| now + Duration::from_secs_f64(s));
        }
        // UPDATEs due by the schedule.
        let due = start.map_or(0, |s| (s.elapsed().as_secs_f64() * rate) as u64 + 1);
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
            work(&mut provider, a.posts);
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
        let next_due = start + Duration::from_secs_f64(c.updates as f64 / rate);
        if let Some(wait) = peregrine_md::quotes::pacing_sleep(next_due) {
            std::thread::sleep(wait);
        }
    }
    // The rate over the updates' own interval (images excluded), before the close's linger.
    let rate = start.map_or(0.0, |s| c.updates as f64 / s.elapsed().as_secs_f64());
    provider.close();
    if let Some(path) = &a.items_out {
        write_items(path, [&provider])
            .with_context(|| format!("--items-out {}", path.display()))?;
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

/// `--ticks FILE`: replays recorded ticks, one provider per service of the file, at the
/// recorded pace times `--speed`; then keeps answering image requests until stopped (or
/// `--seconds` seconds after the start).
fn replay(a: &FeedArgs, source: &TickSource, stop: &Stop) -> Result<()> {
    let dictionary = peregrine_md::dictionary::Dictionary::builtin();
    let text = match source {
        TickSource::Sample => peregrine_md::ticks::SAMPLE.to_string(),
        TickSource::File(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --ticks {}", path.display()))?,
    };
    let ticks = peregrine_md::ticks::parse(&dictionary, &text)
        .map_err(|e| anyhow::anyhow!("--ticks {source}: {e}"))?;
    if ticks.is_empty() {
        bail!(
            "--ticks {source} holds no tick: write one per line, time,service,item,FIELD=value..."
        );
    }
    let speed = a.speed.unwrap_or(1.0);
    let ctx = context()?;
    let mut providers: std::collections::BTreeMap<String, Provider> = Default::default();
    for t in &ticks {
        if !providers.contains_key(&t.service) {
            let mut options = ProviderOptions::new(&t.service, &a.backbone);
            options.requests = a.requests.clone();
            options.dictionary = dictionary.clone();
            let p = Provider::with_options(&ctx, options).map_err(|e| match e {
                ProviderError::Backbone(e) => anyhow::anyhow!("--backbone: {e}"),
                e => anyhow::anyhow!("{e}"),
            })?;
            providers.insert(t.service.clone(), p);
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let items: std::collections::BTreeSet<(&str, &str)> = ticks
        .iter()
        .map(|t| (t.service.as_str(), t.item.as_str()))
        .collect();
    let first = providers.values().next().expect("a tick, so a provider");
    let services: Vec<&str> = providers.keys().map(String::as_str).collect();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"feed": services, "ticks": ticks.len(), "items": items.len(),
                "file": source.to_string(), "speed": if speed.is_finite() { speed.into() } else { serde_json::Value::from("max") },
                "backbone": first.backbone_uri(), "requests": first.requests_uri(),
                "backbone_auth": first.sealing().describe()})
        )?;
    } else {
        writeln!(
            out,
            "feed {}: replaying {} ticks of {} items from {} at {} on {}, image requests from {}; {}",
            services.join(","),
            ticks.len(),
            items.len(),
            source,
            if speed.is_finite() { format!("{speed}x the recorded pace") } else { "full speed".into() },
            first.backbone_uri(),
            first.requests_uri(),
            first.sealing().describe()
        )?;
    }
    out.flush()?;

    let began = Instant::now();
    let end = a.stop.seconds.map(|s| began + Duration::from_secs_f64(s));
    let over = |now: Instant| stop.requested().is_some() || end.is_some_and(|e| now >= e);
    let t0 = ticks[0].time_ns;
    let mut c = FeedCounters::default();
    let mut refreshes = 0u64;
    let mut seen: std::collections::HashSet<(&str, &str)> = Default::default();
    let mut next_work = Instant::now();
    let mut fields = Vec::new();
    'ticks: for t in &ticks {
        if speed.is_finite() {
            let due = began + Duration::from_secs_f64((t.time_ns - t0) as f64 / 1e9 / speed);
            loop {
                let now = Instant::now();
                if over(now) {
                    break 'ticks;
                }
                if now >= due {
                    break;
                }
                providers.values_mut().for_each(|p| {
                    work(p, a.posts);
                });
                std::thread::sleep((due - now).min(Duration::from_millis(1)));
            }
        }
        let p = providers
            .get_mut(&t.service)
            .expect("a provider per service");
        fields.clear();
        fields.extend(
            t.fields
                .iter()
                .map(|(fid, v)| peregrine_md::model::Field::new(*fid, v.as_value())),
        );
        let image = seen.insert((t.service.as_str(), t.item.as_str()));
        loop {
            let sent = if image {
                p.refresh(&t.item, &fields)
            } else {
                p.update(&t.item, &fields)
            };
            match sent {
                Ok(()) => break,
                Err(ProviderError::BackPressured) => {
                    c.refused += 1;
                    work(p, a.posts);
                    if over(Instant::now()) {
                        break 'ticks;
                    }
                }
                Err(e) => {
                    return Err(anyhow::anyhow!("--ticks {source}: {e}"));
                }
            }
        }
        if image {
            refreshes += 1;
        } else {
            c.updates += 1;
        }
        let now = Instant::now();
        if now >= next_work {
            next_work = now + WORK_EVERY;
            providers.values_mut().for_each(|p| {
                work(p, a.posts);
            });
        }
    }
    let replayed = began.elapsed().as_secs_f64();
    providers.values_mut().for_each(|p| {
        let _ = p.flush();
    });
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"event": "ticks_done", "images": refreshes, "updates": c.updates, "seconds": replayed})
        )?;
    } else {
        writeln!(out, "ticks done: {refreshes} images and {} updates in {replayed:.3} s; answering image requests until stopped", c.updates)?;
    }
    out.flush()?;
    while !over(Instant::now()) {
        let mut work = 0;
        providers
            .values_mut()
            .for_each(|p| work += self::work(p, a.posts));
        if work == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for p in providers.values_mut() {
        p.close();
    }
    if let Some(path) = &a.items_out {
        write_items(path, providers.values())
            .with_context(|| format!("--items-out {}", path.display()))?;
    }
    let requests: u64 = providers
        .values()
        .map(|p| p.counters().image_requests)
        .sum();
    let solicited: u64 = providers
        .values()
        .map(|p| p.counters().solicited_refreshes)
        .sum();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"done": true, "images": refreshes, "updates": c.updates,
            "image_requests": requests, "solicited_refreshes": solicited, "refused": c.refused,
            "cpu_s": peregrine_bench::cpu_seconds_self()})
        )?;
    } else {
        writeln!(out, "done: {refreshes} images, {} updates, {requests} image requests answered with {solicited} images, refused {}", c.updates, c.refused)?;
    }
    out.flush()?;
    Ok(())
}

/// `--items-out`: one line per item, `NAME LAST_SEQ`, the `item_seq` of the last REFRESH or
/// UPDATE sent for it (`-` when none was).
fn write_items<'a>(
    path: &std::path::Path,
    providers: impl IntoIterator<Item = &'a Provider>,
) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for provider in providers {
        for (name, last) in provider.items() {
            match last {
                Some(last) => writeln!(w, "{name} {last}")?,
                None => writeln!(w, "{name} -")?,
            }
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
