//! The quotes a test feed publishes: items with a price that ticks, their REFRESH and UPDATE
//! messages (an UPDATE of any size from 60 bytes, padded with string fields), the seeded
//! generators that draw them, and the sample item names. `peregrine feed` publishes them on the
//! backbone; the fan-out benchmark publishes the same bytes through NATS, so both systems carry
//! identical updates.

use crate::codec::{FieldList, Message, RefreshRepr, UpdateRepr};
use crate::model::{Field, Price, Value};
use core::fmt;

/// Field ids of the built-in dictionary (crates/md/fields.toml) a quote carries.
pub mod fid {
    pub const DSPLY_NAME: u16 = 3;
    pub const CURRENCY: u16 = 15;
    pub const HST_CLOSE: u16 = 21;
    pub const BID: u16 = 22;
    pub const ASK: u16 = 25;
    pub const BIDSIZE: u16 = 30;
    pub const ASKSIZE: u16 = 31;
    pub const QUOTIM: u16 = 1025;
    /// The first id of the padding strings of a larger UPDATE (not in the dictionary: carried
    /// as is, printed as `#9000`).
    pub const PAD: u16 = 9000;
}

/// How long a paced feed sleeps between its bursts: until its next update is due, but at
/// least [`PACING_STEP`] and at most a millisecond. Every update is stamped when it is
/// encoded, just before it is sent, so a burst adds no latency to what it carries; what the
/// step saves is system calls: at 200 K updates/s a feed woken every 10 us (in practice every
/// 60 us, the kernel's timer slack) sent a datagram per wake-up, and spent 0.5 of a core on
/// them on the 2-core test machine.
pub fn pacing_sleep(next_due: std::time::Instant) -> Option<std::time::Duration> {
    let wait = next_due.checked_duration_since(std::time::Instant::now())?;
    Some(wait.clamp(PACING_STEP, std::time::Duration::from_millis(1)))
}

/// The shortest sleep of a paced feed.
pub const PACING_STEP: std::time::Duration = std::time::Duration::from_micros(100);

/// Prices are in cents.
const PRICE_EXPONENT: i8 = -2;

/// The feed's seeded generator: SplitMix64 (Steele, Lea and Flood, "Fast splittable
/// pseudorandom number generators", 2014), `rand_xoshiro`'s, the one the loss simulator uses
/// too. Tiny, fast and the same sequence for a seed in every build: good enough to draw items
/// and price moves. [`Draws`] adds the two draws the feed makes.
pub use rand_xoshiro::SplitMix64;

/// The draws a feed makes from its generator.
pub trait Draws {
    /// A generator whose sequence is fixed by `seed`.
    fn seeded(seed: u64) -> Self;
    /// Uniform in [0, 1): the top 53 bits of the next draw.
    fn next_f64(&mut self) -> f64;
    /// Uniform in [0, n) (Lemire's multiply-shift, without the rejection step: the bias, under
    /// n / 2^64, is far below what a feed's draws could show).
    fn below(&mut self, n: u64) -> u64;
}

impl Draws for SplitMix64 {
    fn seeded(seed: u64) -> Self {
        <SplitMix64 as rand_core::SeedableRng>::seed_from_u64(seed)
    }
    fn next_f64(&mut self) -> f64 {
        (rand_core::Rng::next_u64(self) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(rand_core::Rng::next_u64(self)) * u128::from(n)) >> 64) as u64
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

/// The `i`-th sample item name (from 0): three letters counting from `AAA`, exchange suffixes
/// `.O .N .L .T` in turn. `crates/md/items/sample.txt` holds the first 4000; there are 17 576
/// distinct names.
pub fn sample_item_name(i: usize) -> String {
    let l = |d: usize| (b'A' + ((i / d) % 26) as u8) as char;
    let suffix = [".O", ".N", ".L", ".T"][i % 4];
    format!("{}{}{}{suffix}", l(676), l(26), l(1))
}

/// How many distinct names [`sample_item_name`] gives.
pub const SAMPLE_NAMES: usize = 26 * 26 * 26;

/// How many names `crates/md/items/sample.txt` holds, and [`sample_items`] gives by default
/// (`peregrine feed --items sample`).
pub const SAMPLE_ITEMS: usize = 4000;

/// The first `n` sample item names ([`sample_item_name`] 0 to `n - 1`): with
/// [`SAMPLE_ITEMS`], the lines of `crates/md/items/sample.txt`, with no file to find.
/// `None` past [`SAMPLE_NAMES`].
pub fn sample_items(n: usize) -> Option<Vec<String>> {
    (n <= SAMPLE_NAMES).then(|| (0..n).map(sample_item_name).collect())
}

/// Why an UPDATE size was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateSizeError {
    pub size: usize,
}

impl fmt::Display for UpdateSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an UPDATE of {} bytes cannot be made: give 60, or {} to {} bytes (72 is a plain \
             quote, BID ASK BIDSIZE ASKSIZE; other sizes add padding string fields)",
            self.size,
            UpdateLayout::MIN_PADDED,
            UpdateLayout::MAX_SIZE
        )
    }
}

impl std::error::Error for UpdateSizeError {}

/// The fields of an UPDATE of a given size: BID, ASK, BIDSIZE (60 bytes with the header), then
/// ASKSIZE (72), then padding strings (4 bytes + their length each, at most 255 long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateLayout {
    /// 3 (without ASKSIZE) or 4.
    quote_fields: usize,
    /// The length of each padding string.
    pads: Vec<u8>,
}

impl UpdateLayout {
    /// The plain quote: BID, ASK, BIDSIZE, ASKSIZE.
    pub const PLAIN_SIZE: usize = 72;
    /// The smallest size made with padding.
    pub const MIN_PADDED: usize = 64;
    /// The largest size accepted (a backbone message and a client message hold far more; this
    /// bounds what a benchmark may ask for).
    pub const MAX_SIZE: usize = 16_384;

    /// The layout whose UPDATE is exactly `size` bytes.
    pub fn for_size(size: usize) -> Result<UpdateLayout, UpdateSizeError> {
        const HEADER: usize = 24;
        const NUMBER: usize = 12;
        const PAD_MAX: usize = 4 + 255;
        let err = UpdateSizeError { size };
        if size == HEADER + 3 * NUMBER {
            return Ok(UpdateLayout {
                quote_fields: 3,
                pads: Vec::new(),
            });
        }
        if !(Self::MIN_PADDED..=Self::MAX_SIZE).contains(&size) {
            return Err(err);
        }
        // Four quote fields when the rest leaves room for a padding field (4 bytes at least).
        let quote_fields = if size == Self::PLAIN_SIZE || size >= Self::PLAIN_SIZE + 4 {
            4
        } else {
            3
        };
        let rest = size - HEADER - quote_fields * NUMBER;
        let n = rest.div_ceil(PAD_MAX);
        let text = rest - 4 * n; // n <= rest / 4 whenever rest >= 4, and rest is 0 or >= 4
        let pads = (0..n)
            .map(|i| (text / n + usize::from(i < text % n)) as u8)
            .collect();
        Ok(UpdateLayout { quote_fields, pads })
    }

    /// The UPDATE's size in bytes.
    pub fn size(&self) -> usize {
        24 + 12 * self.quote_fields + self.pads.iter().map(|&p| 4 + usize::from(p)).sum::<usize>()
    }
}

/// Padding text: the longest string a field holds.
const PAD_TEXT: &str = concat!(
    "................................................................",
    "................................................................",
    "................................................................",
    "..............................................................."
);

/// One quoted item: its image, moved by every tick.
#[derive(Debug, Clone)]
pub struct Quote {
    pub name: String,
    /// The feed's id of the item (not 0).
    pub id: u32,
    /// The `item_seq` of the next REFRESH or UPDATE.
    pub seq: u32,
    bid: i64,
    /// Ask minus bid, in cents.
    spread: i64,
    bid_size: i64,
    ask_size: i64,
    close: i64,
}

impl Quote {
    pub fn new(name: String, id: u32, rng: &mut SplitMix64) -> Quote {
        let close = 500 + rng.below(50_000) as i64; // 5.00 to 505.00
        Quote {
            name,
            id,
            seq: 0,
            bid: close,
            spread: 1 + rng.below(5) as i64,
            bid_size: 100 * (1 + rng.below(50) as i64),
            ask_size: 100 * (1 + rng.below(50) as i64),
            close,
        }
    }

    fn price(mantissa: i64) -> Value<'static> {
        Value::Price(Price {
            mantissa,
            exponent: PRICE_EXPONENT,
        })
    }

    /// A quote tick: the bid moves by -2..=2 cents (never below a cent), new sizes.
    pub fn tick(&mut self, rng: &mut SplitMix64) {
        self.bid = (self.bid + rng.below(5) as i64 - 2).max(1);
        self.bid_size = 100 * (1 + rng.below(50) as i64);
        self.ask_size = 100 * (1 + rng.below(50) as i64);
    }

    /// The quote as of its `k`-th update in a feed paced by the clock (`peregrine feed
    /// --ab`): drawn from (`seed`, its id, `k`) alone, so that every feed started with the same
    /// seed and items publishes the same update `k` of the item, whenever it started.
    pub fn set_clocked(&mut self, seed: u64, k: u64) {
        let mut rng = SplitMix64::seeded(
            seed ^ (u64::from(self.id) << 40) ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        self.bid = (self.close + rng.below(201) as i64 - 100).max(1);
        self.bid_size = 100 * (1 + rng.below(50) as i64);
        self.ask_size = 100 * (1 + rng.below(50) as i64);
    }

    /// Calls `f` with the fields of the current quote's UPDATE, laid out as `layout` says.
    pub fn with_update_fields<R>(
        &self,
        layout: &UpdateLayout,
        f: impl FnOnce(&[Field<'_>]) -> R,
    ) -> R {
        let quote = [
            Field::new(fid::BID, Self::price(self.bid)),
            Field::new(fid::ASK, Self::price(self.bid + self.spread)),
            Field::new(fid::BIDSIZE, Value::Int(self.bid_size)),
            Field::new(fid::ASKSIZE, Value::Int(self.ask_size)),
        ];
        let pads = layout.pads.iter().enumerate().map(|(i, &len)| {
            Field::new(
                fid::PAD + i as u16,
                Value::Str(&PAD_TEXT[..usize::from(len)]),
            )
        });
        let fields = quote[..layout.quote_fields].iter().copied().chain(pads);
        // The usual sizes fit in a small array on the stack (this runs once per update);
        // the largest need up to 63 padding fields.
        const SMALL: usize = 8;
        let n = layout.quote_fields + layout.pads.len();
        if n <= SMALL {
            let mut small = [quote[0]; SMALL];
            for (slot, f) in small.iter_mut().zip(fields) {
                *slot = f;
            }
            f(&small[..n])
        } else {
            f(&fields.collect::<Vec<_>>())
        }
    }

    /// The UPDATE of the current quote, numbered `self.seq` (the caller advances `seq` once it
    /// is sent), laid out as `layout` says.
    pub fn encode_update(&self, timestamp_ns: u64, layout: &UpdateLayout, out: &mut Vec<u8>) {
        out.clear();
        self.with_update_fields(layout, |list| {
            Message::Update(UpdateRepr {
                item_id: self.id,
                timestamp_ns,
                item_seq: self.seq,
                fields: FieldList::List(list),
            })
            .emit_to_vec(out)
        });
    }

    /// The fields of the full image: DSPLY_NAME, CURRENCY, HST_CLOSE, BID, ASK, BIDSIZE,
    /// ASKSIZE and QUOTIM (`wall_ns`).
    pub fn refresh_fields(&self, wall_ns: u64) -> [Field<'_>; 8] {
        [
            Field::new(fid::DSPLY_NAME, Value::Str(&self.name)),
            Field::new(fid::CURRENCY, Value::Enum(840)),
            Field::new(fid::HST_CLOSE, Self::price(self.close)),
            Field::new(fid::BID, Self::price(self.bid)),
            Field::new(fid::ASK, Self::price(self.bid + self.spread)),
            Field::new(fid::BIDSIZE, Value::Int(self.bid_size)),
            Field::new(fid::ASKSIZE, Value::Int(self.ask_size)),
            Field::new(fid::QUOTIM, Value::TimeNs(wall_ns)),
        ]
    }

    /// The full image, numbered `self.seq`.
    pub fn encode_refresh(
        &self,
        service: &str,
        flags: u8,
        timestamp_ns: u64,
        wall_ns: u64,
        out: &mut Vec<u8>,
    ) {
        let fields = self.refresh_fields(wall_ns);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::refresh_flags;

    #[test]
    fn zipf_draws_favour_the_first_ranks_and_cover_the_others() {
        let z = Zipf::new(100, 1.0);
        let mut rng = SplitMix64::seeded(7);
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
    fn the_generator_is_the_reference_splitmix64() {
        // From this state the reference implementation (xoshiro.di.unimi.it/splitmix64.c)
        // gives these first outputs: a crate update that changed the sequence, and with it every
        // seeded feed and loss simulation, fails here.
        let mut r = SplitMix64::seeded(1_477_776_061_723_855_037);
        let first: Vec<u64> = (0..3).map(|_| rand_core::Rng::next_u64(&mut r)).collect();
        assert_eq!(
            first,
            [
                1_985_237_415_132_408_290,
                2_979_275_885_539_914_483,
                13_511_426_838_097_143_398
            ]
        );
    }

    #[test]
    fn the_same_seed_draws_the_same_sequence() {
        let z = Zipf::new(50, 1.2);
        let draw = |seed| {
            let mut r = SplitMix64::seeded(seed);
            (0..20).map(|_| z.sample(&mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn a_plain_quote_update_is_72_bytes_and_parses_with_its_monotonic_timestamp() {
        let mut rng = SplitMix64::seeded(1);
        let mut q = Quote::new("AAA.O".into(), 1, &mut rng);
        q.seq = 5;
        q.tick(&mut rng);
        let mut b = Vec::new();
        let plain = UpdateLayout::for_size(72).unwrap();
        q.encode_update(123_456, &plain, &mut b);
        assert_eq!(b.len(), 72);
        let Ok(Message::Update(u)) = Message::parse(&b) else {
            panic!("not an UPDATE")
        };
        assert_eq!((u.item_id, u.item_seq, u.timestamp_ns), (1, 5, 123_456));
        assert_eq!(u.fields.count(), 4);
        q.encode_refresh("FEED1", refresh_flags::SOLICITED, 1, 2, &mut b);
        let Ok(Message::Refresh(r)) = Message::parse(&b) else {
            panic!("not a REFRESH")
        };
        assert_eq!((r.name, r.service, r.fields.count()), ("AAA.O", "FEED1", 8));
    }

    /// Every size the layout accepts makes a valid UPDATE of exactly that size, and every size
    /// it refuses is one no field list can make (or out of the bounds).
    #[test]
    fn every_accepted_size_makes_a_valid_update_of_exactly_that_size() {
        let mut rng = SplitMix64::seeded(2);
        let q = Quote::new("ZZZ.T".into(), 9, &mut rng);
        let mut b = Vec::new();
        let mut accepted = 0;
        for size in 0..=UpdateLayout::MAX_SIZE + 10 {
            match UpdateLayout::for_size(size) {
                Ok(l) => {
                    accepted += 1;
                    assert_eq!(l.size(), size);
                    q.encode_update(7, &l, &mut b);
                    assert_eq!(b.len(), size, "size {size}");
                    let Ok(Message::Update(u)) = Message::parse(&b) else {
                        panic!("size {size}: not a valid UPDATE")
                    };
                    assert_eq!(u.item_seq, 0);
                }
                Err(e) => {
                    assert!(
                        size < 64 && size != 60 || size > UpdateLayout::MAX_SIZE,
                        "{size} refused: {e}"
                    );
                    assert!(e.to_string().contains(&size.to_string()));
                }
            }
        }
        assert_eq!(accepted, 1 + UpdateLayout::MAX_SIZE - 64 + 1);
        // The 74 bytes: BID, ASK, BIDSIZE and a 10-byte padding string.
        let l = UpdateLayout::for_size(74).unwrap();
        assert_eq!((l.quote_fields, l.pads.as_slice()), (3, &[10u8][..]));
    }

    /// The shipped sample is what `crates/md/items/README.md` says generates it.
    #[test]
    fn the_sample_items_file_is_the_name_generator_output() {
        let text = include_str!("../items/sample.txt");
        let generated: String = (0..4000).map(|i| sample_item_name(i) + "\n").collect();
        assert_eq!(text, generated);
        let listed: Vec<&str> = text.lines().collect();
        assert_eq!(sample_items(SAMPLE_ITEMS).unwrap(), listed);
        assert_eq!(sample_items(SAMPLE_NAMES).unwrap().len(), SAMPLE_NAMES);
        assert_eq!(sample_items(SAMPLE_NAMES + 1), None);
        let mut all: Vec<String> = (0..SAMPLE_NAMES).map(sample_item_name).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), SAMPLE_NAMES);
    }
}
