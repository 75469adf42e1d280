//! A seeded loss generator, for tests and benchmarks: drops a chosen fraction of frames,
//! deterministically, so loss recovery can be exercised on a network (or loopback) that loses
//! nothing, and a failing run can be replayed with the same seed.
//!
//! The driver asks [`LossGenerator::drop_frame`] about every datagram it is about to send or has
//! just received, with the datagram's direction and [`FrameKind`] (from [`classify`]), and
//! discards it on `true`. A datagram is the unit of loss, as on a real network: one carrying
//! several batched frames is classified by its first frame.
//!
//! **Configuration** ([`LossConfig`]): the fraction `rate` of the matching frames to drop, the
//! `seed`, which `direction` and which `kinds` of frames are eligible, and `burst_len`. With
//! `burst_len` 1 every matching frame is dropped independently with probability `rate`. With
//! `burst_len` N > 1 each loss event drops N consecutive matching frames, and the frame after a
//! burst always passes, so every run of drops is exactly N long; events start with the
//! probability that makes the long-run fraction dropped still `rate` (see
//! [`LossConfig::event_probability`]), which caps `rate` at N / (N + 1).
//!
//! Frames that do not match the direction and kinds neither draw from the generator nor
//! advance a burst: the decisions for the matching frames depend only on the seed and on how
//! many matching frames came before, not on how unrelated traffic interleaves with them.
//!
//! The compact text form, for configuration files and an environment variable, is a
//! comma-separated list of `key=value` ([`LossConfig::parse`]):
//!
//! ```
//! use peregrine_proto::lossgen::{Direction, FrameKind, FrameKinds, LossConfig, LossGenerator};
//!
//! let cfg = LossConfig::parse("rate=1%,seed=42,dir=recv,kinds=data+retransmit,burst=4").unwrap();
//! assert_eq!(cfg.rate, 0.01);
//! assert_eq!(cfg.kinds, FrameKinds::DATA | FrameKinds::RETRANSMIT);
//! let mut gen = LossGenerator::new(cfg);
//! // Heartbeats are not among the kinds: never dropped.
//! assert!(!gen.drop_frame(Direction::Receive, FrameKind::Heartbeat));
//!
//! let err = LossConfig::parse("rate=150%").unwrap_err();
//! assert_eq!(err.to_string(), r#"loss setting rate="150%": expected a fraction 0..=1 or a percentage 0%..=100% (e.g. 0.01 or 1%)"#);
//! ```

use peregrine_wire::header::{flags, FrameType, Header, HEADER_LEN, MAGIC};
use rand_core::{Rng as _, SeedableRng as _};
use rand_xoshiro::SplitMix64;
use std::fmt;
use std::ops::BitOr;

/// Which way a frame travels, seen from the process deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Receive,
    Send,
    /// In a [`LossConfig`]: both directions. Given for a frame: matches any configuration.
    Both,
}

impl Direction {
    /// The name in the compact form: `recv`, `send` or `both`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::Receive => "recv",
            Direction::Send => "send",
            Direction::Both => "both",
        }
    }

    /// Whether a frame travelling `frame` way is covered by this configured direction.
    pub fn covers(self, frame: Direction) -> bool {
        self == Direction::Both || frame == Direction::Both || self == frame
    }
}

/// What a frame is, as far as loss injection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FrameKind {
    /// DATA sent the first time.
    Data,
    /// DATA with the RETRANSMIT flag: a repair answering a NAK.
    Retransmit,
    Nak,
    Heartbeat,
    Status,
    /// PAD, ADVERTISE, QUERY, BYE, and anything that is not a Peregrine frame.
    Other,
}

impl FrameKind {
    /// Every kind, in counter order.
    pub const ALL: [FrameKind; 6] = [
        FrameKind::Data,
        FrameKind::Retransmit,
        FrameKind::Nak,
        FrameKind::Heartbeat,
        FrameKind::Status,
        FrameKind::Other,
    ];

    /// Position in [`ALL`](Self::ALL) and in the counters.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name in the compact form, e.g. `retransmit`.
    pub const fn name(self) -> &'static str {
        match self {
            FrameKind::Data => "data",
            FrameKind::Retransmit => "retransmit",
            FrameKind::Nak => "nak",
            FrameKind::Heartbeat => "heartbeat",
            FrameKind::Status => "status",
            FrameKind::Other => "other",
        }
    }
}

/// A set of [`FrameKind`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameKinds(u8);

impl FrameKinds {
    pub const NONE: FrameKinds = FrameKinds(0);
    pub const DATA: FrameKinds = FrameKinds::of(FrameKind::Data);
    pub const RETRANSMIT: FrameKinds = FrameKinds::of(FrameKind::Retransmit);
    pub const NAK: FrameKinds = FrameKinds::of(FrameKind::Nak);
    pub const HEARTBEAT: FrameKinds = FrameKinds::of(FrameKind::Heartbeat);
    pub const STATUS: FrameKinds = FrameKinds::of(FrameKind::Status);
    pub const OTHER: FrameKinds = FrameKinds::of(FrameKind::Other);
    pub const ALL: FrameKinds = FrameKinds((1 << FrameKind::ALL.len()) - 1);

    /// The set holding only `kind`.
    pub const fn of(kind: FrameKind) -> FrameKinds {
        FrameKinds(1 << kind as u8)
    }
    pub const fn contains(self, kind: FrameKind) -> bool {
        self.0 & (1 << kind as u8) != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for FrameKinds {
    type Output = FrameKinds;
    fn bitor(self, rhs: FrameKinds) -> FrameKinds {
        FrameKinds(self.0 | rhs.0)
    }
}

impl From<FrameKind> for FrameKinds {
    fn from(kind: FrameKind) -> FrameKinds {
        FrameKinds::of(kind)
    }
}

/// `all`, or the kinds joined by `+` (`data+retransmit`), or `none`.
impl fmt::Display for FrameKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == FrameKinds::ALL {
            return f.write_str("all");
        }
        if self.is_empty() {
            return f.write_str("none");
        }
        let mut sep = "";
        for kind in FrameKind::ALL.into_iter().filter(|k| self.contains(*k)) {
            write!(f, "{sep}{}", kind.name())?;
            sep = "+";
        }
        Ok(())
    }
}

/// What to drop. [`LossConfig::off`] (the default) drops nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossConfig {
    /// Seeds the generator: the same seed and the same frames give the same decisions.
    pub seed: u64,
    /// Long-run fraction of the matching frames dropped, 0.0..=1.0 (at most N / (N + 1) when
    /// `burst_len` is N > 1).
    pub rate: f64,
    /// 1: independent losses. N > 1: each loss event drops N consecutive matching frames.
    pub burst_len: u32,
    /// Which frames are eligible: those travelling this way...
    pub direction: Direction,
    /// ...and of these kinds.
    pub kinds: FrameKinds,
}

impl Default for LossConfig {
    fn default() -> Self {
        LossConfig::off()
    }
}

/// The keys of the compact form.
const KEYS: &str = "rate, seed, dir, kinds or burst";
const EXPECT_RATE: &str = "a fraction 0..=1 or a percentage 0%..=100% (e.g. 0.01 or 1%)";
const EXPECT_SEED: &str = "an unsigned 64-bit integer, decimal or 0x-prefixed hex";
const EXPECT_DIR: &str = "recv, send or both";
const EXPECT_KINDS: &str =
    "all, none, or kinds among data, retransmit, nak, heartbeat, status, other joined by +";
const EXPECT_BURST: &str = "an integer from 1 to 4294967295";

impl LossConfig {
    /// Drops nothing: rate 0 (seed 0, received frames of every kind, burst 1 are what the
    /// compact form assumes for keys it does not give).
    pub const fn off() -> Self {
        LossConfig {
            seed: 0,
            rate: 0.0,
            burst_len: 1,
            direction: Direction::Receive,
            kinds: FrameKinds::ALL,
        }
    }

    /// Whether this configuration can drop anything.
    pub fn is_off(&self) -> bool {
        self.rate.is_nan() || self.rate <= 0.0 || self.kinds.is_empty()
    }

    /// Parses the compact form: comma-separated `key=value` items, keys and words
    /// case-insensitive, blanks around items ignored; keys not given keep their
    /// [`off`](Self::off) values, and an empty string or `off` is [`off`](Self::off).
    ///
    /// - `rate`: `0.01` or `1%` (0 to 1, or 0% to 100%);
    /// - `seed`: `42` or `0x2a`;
    /// - `dir`: `recv`, `send` or `both`;
    /// - `kinds`: `all`, `none`, or some of `data`, `retransmit`, `nak`, `heartbeat`, `status`,
    ///   `other` joined by `+`;
    /// - `burst`: consecutive frames dropped per loss event, at least 1.
    ///
    /// A key given twice is an error, and so is a rate a burst length cannot reach (see
    /// [`validate`](Self::validate)).
    pub fn parse(text: &str) -> Result<Self, LossConfigError> {
        let mut cfg = LossConfig::off();
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("off") {
            return Ok(cfg);
        }
        let mut seen: Vec<String> = Vec::new();
        // The rate as written, for an error found once the burst length is known too.
        let mut rate_text = "";
        for item in text.split(',') {
            let item = item.trim();
            let Some((key, value)) = item.split_once('=') else {
                return Err(LossConfigError::new(item, "", "key=value"));
            };
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
            let bad = |expected| LossConfigError::new(&key, value, expected);
            if seen.contains(&key) {
                return Err(bad("each key at most once"));
            }
            match key.as_str() {
                "rate" => {
                    cfg.rate = parse_rate(value).ok_or_else(|| bad(EXPECT_RATE))?;
                    rate_text = value;
                }
                "seed" => cfg.seed = parse_u64(value).ok_or_else(|| bad(EXPECT_SEED))?,
                "dir" => {
                    cfg.direction = match value.to_ascii_lowercase().as_str() {
                        "recv" | "receive" => Direction::Receive,
                        "send" => Direction::Send,
                        "both" => Direction::Both,
                        _ => return Err(bad(EXPECT_DIR)),
                    }
                }
                "kinds" => cfg.kinds = parse_kinds(value).ok_or_else(|| bad(EXPECT_KINDS))?,
                "burst" => {
                    cfg.burst_len = value
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| bad(EXPECT_BURST))?
                }
                _ => return Err(LossConfigError::new(&key, value, KEYS)),
            }
            seen.push(key);
        }
        cfg.validate().map_err(|mut e| {
            if e.key == "rate" {
                e.value = rate_text.to_owned();
            }
            e
        })?;
        Ok(cfg)
    }

    /// Checks a configuration built in code the way [`parse`](Self::parse) checks text: a rate
    /// in 0..=1 and, with a burst of N > 1, at most N / (N + 1) (a burst is always followed by
    /// a frame that passes); a burst of at least 1. The error names the compact form's key.
    pub fn validate(&self) -> Result<(), LossConfigError> {
        if !(0.0..=1.0).contains(&self.rate) {
            return Err(LossConfigError::new(
                "rate",
                &self.rate.to_string(),
                EXPECT_RATE,
            ));
        }
        if self.burst_len == 0 {
            return Err(LossConfigError::new("burst", "0", EXPECT_BURST));
        }
        // Compared with N / (N + 1) rather than through `event_probability`, whose rounding
        // would refuse the limit itself (0.8 with a burst of 4 gives 1.0000000000000002).
        let n = f64::from(self.burst_len);
        if self.burst_len > 1 && self.rate > n / (n + 1.0) {
            return Err(LossConfigError::new(
                "rate",
                &self.rate.to_string(),
                "at most burst/(burst+1) when burst > 1 (runs of `burst` drops are separated by \
                 at least one frame that passes)",
            ));
        }
        Ok(())
    }

    /// The probability that a loss event starts at an eligible matching frame (one not in or
    /// right after a burst). With N = `burst_len`, a frame is either a miss (1 frame) or starts
    /// an event (N drops and the pass after them), so the fraction dropped is
    /// `p N / (1 + p N)`; solving for `rate` gives `p = rate / (N (1 - rate))`. With N = 1 there
    /// is no pass after a drop and `p = rate`. Greater than 1 when the rate is out of reach.
    pub fn event_probability(&self) -> f64 {
        let n = f64::from(self.burst_len.max(1));
        if self.burst_len <= 1 {
            self.rate
        } else if self.rate >= 1.0 {
            f64::INFINITY
        } else {
            self.rate / (n * (1.0 - self.rate))
        }
    }
}

/// The compact form with every key, which [`LossConfig::parse`] reads back to the same value.
impl fmt::Display for LossConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate={},seed={},dir={},kinds={},burst={}",
            self.rate,
            self.seed,
            self.direction.name(),
            self.kinds,
            self.burst_len
        )
    }
}

impl std::str::FromStr for LossConfig {
    type Err = LossConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LossConfig::parse(s)
    }
}

fn parse_rate(value: &str) -> Option<f64> {
    let rate = match value.strip_suffix('%') {
        Some(percent) => percent.trim_end().parse::<f64>().ok()? / 100.0,
        None => value.parse::<f64>().ok()?,
    };
    (rate.is_finite() && (0.0..=1.0).contains(&rate)).then_some(rate)
}

fn parse_u64(value: &str) -> Option<u64> {
    match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    }
}

fn parse_kinds(value: &str) -> Option<FrameKinds> {
    let mut kinds = FrameKinds::NONE;
    for word in value.split('+') {
        let word = word.trim().to_ascii_lowercase();
        kinds = kinds
            | match word.as_str() {
                "all" => FrameKinds::ALL,
                "none" => FrameKinds::NONE,
                _ => FrameKinds::of(FrameKind::ALL.into_iter().find(|k| k.name() == word)?),
            };
    }
    Some(kinds)
}

/// A rejected loss setting: the key, the value given and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossConfigError {
    /// The key as written (lowercased), or the whole item when it has no `=`.
    pub key: String,
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

impl LossConfigError {
    fn new(key: &str, value: &str, expected: &'static str) -> Self {
        LossConfigError {
            key: key.to_owned(),
            value: value.to_owned(),
            expected,
        }
    }
}

impl fmt::Display for LossConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss setting {}={:?}: expected {}",
            self.key, self.value, self.expected
        )
    }
}

impl std::error::Error for LossConfigError {}

/// What a frame is, from its first bytes: the frame type byte (offset 7) and, for DATA, the
/// RETRANSMIT flag (offset 8). Anything too short or without the magic is [`FrameKind::Other`];
/// the rest of the header is not checked (the receiver does that, and a corrupt frame should be
/// lost like any other).
pub fn classify(frame_bytes: &[u8]) -> FrameKind {
    if frame_bytes.len() < HEADER_LEN {
        return FrameKind::Other;
    }
    let header = Header::new_unchecked(frame_bytes);
    if header.magic() != MAGIC {
        return FrameKind::Other;
    }
    match FrameType::from_u8(header.frame_type_raw()) {
        Ok(FrameType::Data) if header.flags() & flags::RETRANSMIT != 0 => FrameKind::Retransmit,
        Ok(FrameType::Data) => FrameKind::Data,
        Ok(FrameType::Nak) => FrameKind::Nak,
        Ok(FrameType::Heartbeat) => FrameKind::Heartbeat,
        Ok(FrameType::Status) => FrameKind::Status,
        Ok(
            FrameType::Pad
            | FrameType::Advertise
            | FrameType::Query
            | FrameType::Bye
            | FrameType::Cookie
            | FrameType::Auth,
        )
        | Err(_) => FrameKind::Other,
    }
}

/// Frames seen and dropped, per [`FrameKind`] (indexed by [`FrameKind::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossCounters {
    /// Every frame asked about, matching the filters or not.
    pub seen: [u64; FrameKind::ALL.len()],
    pub dropped: [u64; FrameKind::ALL.len()],
}

impl LossCounters {
    pub fn seen(&self, kind: FrameKind) -> u64 {
        self.seen[kind.index()]
    }
    pub fn dropped(&self, kind: FrameKind) -> u64 {
        self.dropped[kind.index()]
    }
    pub fn seen_total(&self) -> u64 {
        self.seen.iter().sum()
    }
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }
}

/// Uniform in [0, 1): the top 53 bits of the next draw, every value exactly representable.
///
/// The generator is SplitMix64 (Steele, Lea and Flood, 2014; `rand_xoshiro`'s): the same
/// sequence for a seed in every build and version (a failing loss test is replayed by its
/// seed), a uniform u64 per frame, and any seed (0 included) is a good one. The losses it picks
/// have no security role.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Decides frame by frame what to drop. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct LossGenerator {
    cfg: LossConfig,
    rng: SplitMix64,
    /// Chance that an eligible frame starts a loss event (0: never, 1: always).
    event_probability: f64,
    /// Matching frames still to drop in the current burst.
    burst_left: u32,
    /// The next matching frame passes: it ends a burst, keeping runs exactly `burst_len` long.
    pass_next: bool,
    counters: LossCounters,
}

impl LossGenerator {
    /// A generator for `cfg`. Out-of-range values are tolerated rather than refused (use
    /// [`LossConfig::validate`] to refuse them): a rate below 0 or NaN drops nothing, a rate a
    /// burst cannot reach drops as much as it can, and a burst of 0 counts as 1.
    pub fn new(cfg: LossConfig) -> Self {
        let p = cfg.event_probability();
        let event_probability = if p.is_nan() || cfg.kinds.is_empty() {
            0.0
        } else {
            p.clamp(0.0, 1.0)
        };
        LossGenerator {
            cfg,
            rng: SplitMix64::seed_from_u64(cfg.seed),
            event_probability,
            burst_left: 0,
            pass_next: false,
            counters: LossCounters::default(),
        }
    }

    pub fn counters(&self) -> LossCounters {
        self.counters
    }

    /// Whether to drop a frame of `kind` travelling `direction`; counts it either way.
    pub fn drop_frame(&mut self, direction: Direction, kind: FrameKind) -> bool {
        self.counters.seen[kind.index()] += 1;
        if self.event_probability == 0.0
            || !self.cfg.direction.covers(direction)
            || !self.cfg.kinds.contains(kind)
        {
            return false;
        }
        let drop = if self.burst_left > 0 {
            self.burst_left -= 1;
            self.pass_next = self.burst_left == 0;
            true
        } else if self.pass_next {
            self.pass_next = false;
            false
        } else if unit(&mut self.rng) < self.event_probability {
            self.burst_left = self.cfg.burst_len.saturating_sub(1);
            true
        } else {
            false
        };
        if drop {
            self.counters.dropped[kind.index()] += 1;
        }
        drop
    }

    /// [`drop_frame`](Self::drop_frame) for a datagram, classified by its first frame.
    pub fn drop_datagram(&mut self, direction: Direction, datagram: &[u8]) -> bool {
        self.drop_frame(direction, classify(datagram))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> LossConfig {
        LossConfig::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn decisions(cfg: LossConfig, n: usize) -> Vec<bool> {
        let mut g = LossGenerator::new(cfg);
        (0..n)
            .map(|_| g.drop_frame(Direction::Receive, FrameKind::Data))
            .collect()
    }

    /// Lengths of the runs of consecutive `true`.
    fn runs(d: &[bool]) -> Vec<usize> {
        d.split(|x| !x)
            .filter(|r| !r.is_empty())
            .map(<[bool]>::len)
            .collect()
    }

    #[test]
    fn same_seed_same_decisions_other_seed_other_decisions() {
        let a = decisions(cfg("rate=10%,seed=42"), 10_000);
        assert_eq!(a, decisions(cfg("rate=10%,seed=42"), 10_000));
        assert_ne!(a, decisions(cfg("rate=10%,seed=43"), 10_000));
        let burst = cfg("rate=10%,seed=42,burst=3");
        assert_eq!(decisions(burst, 10_000), decisions(burst, 10_000));
    }

    #[test]
    fn measured_fraction_matches_the_rate() {
        const N: usize = 1_000_000;
        for rate in [0.01, 0.05, 0.20] {
            for burst_len in [1, 4] {
                let cfg = LossConfig {
                    rate,
                    burst_len,
                    seed: 7,
                    ..LossConfig::off()
                };
                let dropped = decisions(cfg, N).iter().filter(|d| **d).count();
                let measured = dropped as f64 / N as f64;
                assert!(
                    (measured - rate).abs() <= 0.002,
                    "rate {rate} burst {burst_len}: measured {measured}"
                );
            }
        }
    }

    #[test]
    fn zero_and_full_rates() {
        assert!(decisions(LossConfig::off(), 10_000).iter().all(|d| !d));
        assert!(decisions(cfg("rate=1"), 10_000).iter().all(|d| *d));
        // The most a burst of 4 can reach: 4 of every 5 frames.
        let d = decisions(cfg("rate=0.8,burst=4"), 10_000);
        assert_eq!(d.iter().filter(|d| **d).count(), 8_000);
    }

    #[test]
    fn bursts_drop_runs_of_exactly_n() {
        for n in [2u32, 4, 7] {
            let cfg = LossConfig {
                rate: 0.3,
                burst_len: n,
                seed: u64::from(n),
                ..LossConfig::off()
            };
            let d = decisions(cfg, 100_000);
            let r = runs(&d);
            assert!(r.len() > 1_000, "burst {n}: only {} runs", r.len());
            assert!(r.iter().all(|&len| len == n as usize), "burst {n}: {r:?}");
        }
        // Burst 1: independent losses, so adjacent drops do happen.
        let d = decisions(cfg("rate=0.3,burst=1"), 100_000);
        assert!(runs(&d).iter().any(|&len| len > 1));
    }

    #[test]
    fn bursts_count_only_matching_frames() {
        let mut g = LossGenerator::new(cfg("rate=0.2,burst=5,kinds=data,seed=3"));
        let mut data = Vec::new();
        for i in 0..50_000 {
            // Unrelated frames in between never drop and do not shorten a burst.
            assert!(!g.drop_frame(Direction::Receive, FrameKind::Heartbeat));
            if i % 3 == 0 {
                assert!(!g.drop_frame(Direction::Send, FrameKind::Data));
            }
            data.push(g.drop_frame(Direction::Receive, FrameKind::Data));
        }
        assert!(runs(&data).iter().all(|&len| len == 5));
        // ...and do not change the decisions either.
        assert_eq!(
            data,
            decisions(cfg("rate=0.2,burst=5,kinds=data,seed=3"), 50_000)
        );
    }

    #[test]
    fn direction_filter() {
        let mut recv = LossGenerator::new(cfg("rate=1,dir=recv"));
        let mut send = LossGenerator::new(cfg("rate=1,dir=send"));
        let mut both = LossGenerator::new(cfg("rate=1,dir=both"));
        for kind in FrameKind::ALL {
            assert!(recv.drop_frame(Direction::Receive, kind));
            assert!(!recv.drop_frame(Direction::Send, kind));
            assert!(!send.drop_frame(Direction::Receive, kind));
            assert!(send.drop_frame(Direction::Send, kind));
            assert!(both.drop_frame(Direction::Receive, kind));
            assert!(both.drop_frame(Direction::Send, kind));
            assert!(recv.drop_frame(Direction::Both, kind));
        }
    }

    #[test]
    fn kinds_filter_and_counters() {
        let mut g = LossGenerator::new(cfg("rate=100%,kinds=retransmit+nak"));
        for kind in FrameKind::ALL {
            for _ in 0..10 {
                let dropped = g.drop_frame(Direction::Receive, kind);
                assert_eq!(
                    dropped,
                    matches!(kind, FrameKind::Retransmit | FrameKind::Nak)
                );
            }
        }
        let c = g.counters();
        for kind in FrameKind::ALL {
            assert_eq!(c.seen(kind), 10);
        }
        assert_eq!(c.dropped(FrameKind::Retransmit), 10);
        assert_eq!(c.dropped(FrameKind::Nak), 10);
        assert_eq!(c.dropped(FrameKind::Data), 0);
        assert_eq!((c.seen_total(), c.dropped_total()), (60, 20));
        // No kinds: nothing is eligible.
        let none = LossConfig {
            kinds: FrameKinds::NONE,
            rate: 1.0,
            ..LossConfig::off()
        };
        assert!(none.is_off());
        assert!(decisions(none, 100).iter().all(|d| !d));
    }

    fn frame(ty: FrameType, fl: u16) -> [u8; 32] {
        let mut b = [0u8; 32];
        let mut h = Header::new_unchecked(&mut b[..]);
        h.fill(ty, fl, 0x1234);
        h.set_frame_length(32);
        b
    }

    #[test]
    fn classify_by_type_and_retransmit_flag() {
        let begin_end = flags::BEGIN | flags::END;
        assert_eq!(
            classify(&frame(FrameType::Data, begin_end)),
            FrameKind::Data
        );
        assert_eq!(
            classify(&frame(FrameType::Data, begin_end | flags::RETRANSMIT)),
            FrameKind::Retransmit
        );
        assert_eq!(classify(&frame(FrameType::Nak, 0)), FrameKind::Nak);
        assert_eq!(
            classify(&frame(FrameType::Heartbeat, 0)),
            FrameKind::Heartbeat
        );
        assert_eq!(classify(&frame(FrameType::Status, 0)), FrameKind::Status);
        for ty in [
            FrameType::Pad,
            FrameType::Advertise,
            FrameType::Query,
            FrameType::Bye,
            FrameType::Cookie,
            FrameType::Auth,
        ] {
            assert_eq!(classify(&frame(ty, 0)), FrameKind::Other);
        }
        // Too short, wrong magic, unknown type.
        let data = frame(FrameType::Data, 0);
        assert_eq!(classify(&data[..HEADER_LEN - 1]), FrameKind::Other);
        assert_eq!(classify(&[]), FrameKind::Other);
        let mut bad = data;
        bad[4] = 0;
        assert_eq!(classify(&bad), FrameKind::Other);
        let mut unknown = data;
        unknown[7] = 0x7f;
        assert_eq!(classify(&unknown), FrameKind::Other);
        // A datagram is its first frame.
        let mut g = LossGenerator::new(cfg("rate=1,kinds=retransmit"));
        assert!(!g.drop_datagram(Direction::Receive, &data));
        assert!(g.drop_datagram(
            Direction::Receive,
            &frame(FrameType::Data, flags::RETRANSMIT)
        ));
    }

    #[test]
    fn parser_accepts() {
        let c = cfg("rate=1%,seed=42,dir=recv,kinds=data+retransmit,burst=4");
        assert_eq!(
            c,
            LossConfig {
                seed: 42,
                rate: 0.01,
                burst_len: 4,
                direction: Direction::Receive,
                kinds: FrameKinds::DATA | FrameKinds::RETRANSMIT,
            }
        );
        assert_eq!(cfg("rate=0.01").rate, 0.01);
        assert_eq!(cfg("rate=1%").rate, cfg("rate=0.01").rate);
        assert_eq!(cfg("rate=100%").rate, 1.0);
        assert_eq!(cfg("rate=0").rate, 0.0);
        assert_eq!(cfg(""), LossConfig::off());
        assert_eq!(cfg("  OFF "), LossConfig::off());
        assert_eq!(cfg("seed=0x2A").seed, 42);
        assert_eq!(cfg("seed=18446744073709551615").seed, u64::MAX);
        let c = cfg(" Rate = 5 % , DIR=Both , kinds = ALL ");
        assert_eq!(
            (c.rate, c.direction, c.kinds),
            (0.05, Direction::Both, FrameKinds::ALL)
        );
        assert_eq!(cfg("dir=send").direction, Direction::Send);
        assert_eq!(cfg("dir=receive").direction, Direction::Receive);
        assert_eq!(
            cfg("kinds=nak+heartbeat+status+other").kinds,
            FrameKinds::NAK | FrameKinds::HEARTBEAT | FrameKinds::STATUS | FrameKinds::OTHER
        );
        assert_eq!(cfg("burst=4294967295").burst_len, u32::MAX);
        assert_eq!(cfg("rate=0.5,burst=2").burst_len, 2);
        assert_eq!("rate=2%".parse::<LossConfig>().unwrap().rate, 0.02);
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "rate=1%,seed=42,dir=recv,kinds=data+retransmit,burst=4",
            "rate=0.123456789,seed=18446744073709551615,dir=both,kinds=all,burst=1",
            "dir=send,kinds=other",
            "rate=5%,kinds=none",
            "",
        ] {
            let c = cfg(text);
            assert_eq!(cfg(&c.to_string()), c, "{text} -> {c}");
        }
        assert_eq!(
            cfg("rate=1%,seed=42,kinds=data+retransmit,burst=4").to_string(),
            "rate=0.01,seed=42,dir=recv,kinds=data+retransmit,burst=4"
        );
    }

    #[test]
    fn parser_rejects_naming_key_value_and_what_is_accepted() {
        for (text, key, value, expected) in [
            ("rate=abc", "rate", "abc", EXPECT_RATE),
            ("rate=150%", "rate", "150%", EXPECT_RATE),
            ("rate=1.5", "rate", "1.5", EXPECT_RATE),
            ("rate=-0.1", "rate", "-0.1", EXPECT_RATE),
            ("rate=NaN", "rate", "NaN", EXPECT_RATE),
            ("rate=inf", "rate", "inf", EXPECT_RATE),
            ("rate=", "rate", "", EXPECT_RATE),
            ("seed=-1", "seed", "-1", EXPECT_SEED),
            (
                "seed=18446744073709551616",
                "seed",
                "18446744073709551616",
                EXPECT_SEED,
            ),
            ("seed=0xZZ", "seed", "0xZZ", EXPECT_SEED),
            ("dir=up", "dir", "up", EXPECT_DIR),
            ("kinds=data+bogus", "kinds", "data+bogus", EXPECT_KINDS),
            ("kinds=", "kinds", "", EXPECT_KINDS),
            ("kinds=data++nak", "kinds", "data++nak", EXPECT_KINDS),
            ("burst=0", "burst", "0", EXPECT_BURST),
            ("burst=-2", "burst", "-2", EXPECT_BURST),
            ("burst=4294967296", "burst", "4294967296", EXPECT_BURST),
            ("colour=blue", "colour", "blue", KEYS),
            ("rate=1%,rate=2%", "rate", "2%", "each key at most once"),
        ] {
            let e = LossConfig::parse(text).unwrap_err();
            assert_eq!(
                (e.key.as_str(), e.value.as_str(), e.expected),
                (key, value, expected),
                "{text}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains(key) && msg.contains(&format!("{value:?}")) && msg.contains(expected),
                "{text}: {msg}"
            );
        }
        // No `=`: the item is named.
        let e = LossConfig::parse("rate=1%,loud").unwrap_err();
        assert_eq!((e.key.as_str(), e.expected), ("loud", "key=value"));
        assert_eq!(e.to_string(), r#"loss setting loud="": expected key=value"#);
        // A rate a burst cannot reach, whichever order the keys come in.
        for text in ["rate=90%,burst=4", "burst=4,rate=90%", "rate=1,burst=2"] {
            let e = LossConfig::parse(text).unwrap_err();
            assert_eq!(e.key, "rate", "{text}");
            assert!(e.expected.contains("burst/(burst+1)"), "{text}: {e}");
            assert!(
                e.to_string().contains(&format!("{:?}", e.value)),
                "{text}: {e}"
            );
        }
        assert_eq!(
            LossConfig::parse("rate=90%,burst=4").unwrap_err().value,
            "90%"
        );
        // The same checks for a configuration built in code.
        let c = LossConfig {
            rate: 2.0,
            ..LossConfig::off()
        };
        assert_eq!(c.validate().unwrap_err().key, "rate");
        let c = LossConfig {
            burst_len: 0,
            ..LossConfig::off()
        };
        assert_eq!(c.validate().unwrap_err().key, "burst");
    }

    #[test]
    fn out_of_range_configurations_are_tolerated_by_the_generator() {
        for rate in [f64::NAN, -1.0, 2.0, f64::INFINITY] {
            for burst_len in [0, 1, 3] {
                let c = LossConfig {
                    rate,
                    burst_len,
                    ..LossConfig::off()
                };
                let d = decisions(c, 1_000);
                if rate.is_nan() || rate < 0.0 {
                    assert!(d.iter().all(|d| !d));
                }
            }
        }
    }
}
