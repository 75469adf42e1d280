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
use peregrine_md::codec::{
    refresh_flags, FieldList, ImageRequestRepr, ImageRequestView, Message, RefreshRepr, UpdateRepr,
};
use peregrine_md::model::{check_item_name, Field, Price, Value};
use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

/// Field ids of the built-in dictionary (crates/md/fields.toml) the feed publishes.
mod fid {
    pub const DSPLY_NAME: u16 = 3;
    pub const CURRENCY: u16 = 15;
    pub const HST_CLOSE: u16 = 21;
    pub const BID: u16 = 22;
    pub const ASK: u16 = 25;
    pub const BIDSIZE: u16 = 30;
    pub const ASKSIZE: u16 = 31;
    pub const QUOTIM: u16 = 1025;
}

/// Prices are in cents.
const PRICE_EXPONENT: i8 = -2;
/// UPDATEs offered per loop turn at most, so that image requests are still served when the
/// feed runs behind its schedule.
const MAX_UPDATE_BURST: u64 = 1024;
/// REFRESHes sent per loop turn at most: the start-up images and the answers to a request for
/// every image go out in slices between the updates, never as one burst of thousands.
const MAX_REFRESH_BURST: usize = 64;

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// 2014): a tiny, fast, seedable generator, good enough to draw items and price moves.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Draws item ranks with Zipf-like popularity: rank k (0-based) has weight 1/(k+1)^s.
///
/// Hand-rolled rather than `rand_distr::Zipf`: rand_distr is not in the lockfile, and a
/// table of the cumulative weights over a few thousand items with a binary search per draw is
/// exact, allocation-free after construction and a dozen lines.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// Cumulative weights: `cdf[k]` is the sum of the weights of ranks 0..=k.
    cdf: Vec<f64>,
}

impl Zipf {
    /// `n` ranks (at least 1), exponent `s` (0: uniform).
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let cdf = (1..=n.max(1))
            .map(|k| {
                total += (k as f64).powf(-s);
                total
            })
            .collect();
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut SplitMix64) -> usize {
        let total = *self.cdf.last().expect("at least one rank");
        let u = rng.next_f64() * total;
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// One item the feed publishes: its image, moved by every UPDATE.
#[derive(Debug, Clone)]
struct FeedItem {
    name: String,
    /// The feed's id of the item: its line in the file, from 1.
    id: u32,
    /// The `item_seq` of the next REFRESH or UPDATE.
    seq: u32,
    bid: i64,
    /// Ask minus bid, in cents.
    spread: i64,
    bid_size: i64,
    ask_size: i64,
    close: i64,
    /// A REFRESH of it is queued, with these flags.
    queued: Option<u8>,
}

impl FeedItem {
    fn new(name: String, id: u32, rng: &mut SplitMix64) -> FeedItem {
        let close = 500 + rng.below(50_000) as i64; // 5.00 to 505.00
        FeedItem {
            name,
            id,
            seq: 0,
            bid: close,
            spread: 1 + rng.below(5) as i64,
            bid_size: 100 * (1 + rng.below(50) as i64),
            ask_size: 100 * (1 + rng.below(50) as i64),
            close,
            queued: None,
        }
    }

    fn price(mantissa: i64) -> Value<'static> {
        Value::Price(Price {
            mantissa,
            exponent: PRICE_EXPONENT,
        })
    }

    /// A quote tick: the bid moves by -2..=2 cents (never below a cent), new sizes.
    fn tick(&mut self, rng: &mut SplitMix64) {
        self.bid = (self.bid + rng.below(5) as i64 - 2).max(1);
        self.bid_size = 100 * (1 + rng.below(50) as i64);
        self.ask_size = 100 * (1 + rng.below(50) as i64);
    }

    /// The UPDATE of a quote tick: BID, ASK, BIDSIZE, ASKSIZE (24 + 4 x 12 = 72 bytes, the
    /// size of the STAC report's level-1 updates).
    fn encode_update(&self, timestamp_ns: u64, out: &mut Vec<u8>) {
        let fields = [
            Field::new(fid::BID, Self::price(self.bid)),
            Field::new(fid::ASK, Self::price(self.bid + self.spread)),
            Field::new(fid::BIDSIZE, Value::Int(self.bid_size)),
            Field::new(fid::ASKSIZE, Value::Int(self.ask_size)),
        ];
        out.clear();
        Message::Update(UpdateRepr {
            item_id: self.id,
            timestamp_ns,
            item_seq: self.seq,
            fields: FieldList::List(&fields),
        })
        .emit_to_vec(out);
    }

    /// The full image.
    fn encode_refresh(
        &self,
        service: &str,
        flags: u8,
        timestamp_ns: u64,
        wall_ns: u64,
        out: &mut Vec<u8>,
    ) {
        let fields = [
            Field::new(fid::DSPLY_NAME, Value::Str(&self.name)),
            Field::new(fid::CURRENCY, Value::Enum(840)),
            Field::new(fid::HST_CLOSE, Self::price(self.close)),
            Field::new(fid::BID, Self::price(self.bid)),
            Field::new(fid::ASK, Self::price(self.bid + self.spread)),
            Field::new(fid::BIDSIZE, Value::Int(self.bid_size)),
            Field::new(fid::ASKSIZE, Value::Int(self.ask_size)),
            Field::new(fid::QUOTIM, Value::TimeNs(wall_ns)),
        ];
        out.clear();
        Message::Refresh(RefreshRepr {
            item_id: self.id,
            flags,
            timestamp_ns,
            item_seq: self.seq,
            service,
            name: &self.name,
            fields: FieldList::List(&fields),
        })
        .emit_to_vec(out);
    }
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

    let mut rng = SplitMix64::new(a.seed);
    let mut items: Vec<FeedItem> = names
        .into_iter()
        .enumerate()
        .map(|(i, n)| FeedItem::new(n, i as u32 + 1, &mut rng))
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
    let start = Instant::now();
    let end = a.duration.map(|s| start + Duration::from_secs_f64(s));
    let mut last_line = start;
    let mut updates_at_line = 0u64;
    // A pending update (drawn, encoded, refused by back-pressure) is offered again as is, so
    // that item_seq numbers only what was sent.
    let mut pending: Option<usize> = None;
    while stop.requested().is_none() && end.is_none_or(|e| Instant::now() < e) {
        // UPDATEs due by the schedule.
        let due = (start.elapsed().as_secs_f64() * a.rate) as u64 + 1;
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
            let it = &mut items[i];
            it.encode_update(peregrine_agent::monotonic_ns(), &mut scratch);
            match publisher.offer(&scratch) {
                Ok(_) => {
                    it.seq = it.seq.wrapping_add(1);
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
            it.encode_refresh(
                &a.service,
                flags,
                peregrine_agent::monotonic_ns(),
                wall_ns(),
                &mut scratch,
            );
            match publisher.offer(&scratch) {
                Ok(_) => {
                    it.seq = it.seq.wrapping_add(1);
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

        // Image requests.
        requests_seen.clear();
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
            print_line(&mut out, &a, &c, (now - start).as_secs_f64(), rate, false)?;
            last_line = now;
            updates_at_line = c.updates;
        }
        if !queue.is_empty() {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        if c.updates < due || pending.is_some() {
            continue;
        }
        let next_due = start + Duration::from_secs_f64(c.updates as f64 / a.rate);
        if let Some(wait) = next_due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
    }
    publisher.close();
    let secs = start.elapsed().as_secs_f64();
    print_line(&mut out, &a, &c, secs, c.updates as f64 / secs, true)?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_draws_favour_the_first_ranks_and_cover_the_others() {
        let z = Zipf::new(100, 1.0);
        let mut rng = SplitMix64::new(7);
        let mut hits = [0u32; 100];
        for _ in 0..200_000 {
            hits[z.sample(&mut rng)] += 1;
        }
        // Weight 1/(k+1) over H(100) ~ 5.19: rank 0 about 19%, rank 1 about 9.6%, rank 99
        // about 0.19%.
        let share = |k: usize| f64::from(hits[k]) / 200_000.0;
        assert!((share(0) - 0.193).abs() < 0.01, "{}", share(0));
        assert!((share(1) - 0.096).abs() < 0.01, "{}", share(1));
        assert!(share(99) > 0.001 && share(99) < 0.003, "{}", share(99));
        let uniform = Zipf::new(4, 0.0);
        let mut hits = [0u32; 4];
        for _ in 0..40_000 {
            hits[uniform.sample(&mut rng)] += 1;
        }
        assert!(
            hits.iter().all(|&h| (9_000..11_000).contains(&h)),
            "{hits:?}"
        );
    }

    #[test]
    fn the_same_seed_draws_the_same_sequence() {
        let z = Zipf::new(50, 1.2);
        let draw = |seed| {
            let mut r = SplitMix64::new(seed);
            (0..20).map(|_| z.sample(&mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn a_quote_update_is_72_bytes_and_parses_with_its_monotonic_timestamp() {
        let mut rng = SplitMix64::new(1);
        let mut it = FeedItem::new("AAA.O".into(), 1, &mut rng);
        it.seq = 5;
        it.tick(&mut rng);
        let mut b = Vec::new();
        it.encode_update(123_456, &mut b);
        assert_eq!(b.len(), 72);
        let Ok(Message::Update(u)) = Message::parse(&b) else {
            panic!("not an UPDATE")
        };
        assert_eq!((u.item_id, u.item_seq, u.timestamp_ns), (1, 5, 123_456));
        it.encode_refresh("FEED1", refresh_flags::SOLICITED, 1, 2, &mut b);
        let Ok(Message::Refresh(r)) = Message::parse(&b) else {
            panic!("not a REFRESH")
        };
        assert_eq!((r.name, r.service, r.fields.count()), ("AAA.O", "FEED1", 8));
    }

    /// The shipped sample is what `crates/md/items/README.md` says generates it.
    #[test]
    fn the_sample_items_file_is_its_generator_output() {
        let text = include_str!("../../../md/items/sample.txt");
        assert_eq!(text, sample_items(4000));
    }

    /// The sample items: three letters counting from AAA, exchange suffixes in turn.
    fn sample_items(n: usize) -> String {
        let mut s = String::new();
        for i in 0..n {
            let l = |d: usize| (b'A' + ((i / d) % 26) as u8) as char;
            let suffix = [".O", ".N", ".L", ".T"][i % 4];
            s.push_str(&format!("{}{}{}{suffix}\n", l(676), l(26), l(1)));
        }
        s
    }
}
