//! Topic resolution, sans I/O: publishers advertise `(topic, transport URI, session)`,
//! subscribers query for topic names or patterns, and every context keeps a table of the
//! sources it has heard of, expiring those that stop advertising.
//!
//! The model is Ultra Messaging's resolver:
//!
//! - **Advertisements** of each publication follow a [`Schedule`]: an *initial phase* whose
//!   interval starts at `min_initial_interval_ns` and doubles up to `max_initial_interval_ns`
//!   for `initial_duration_ns`, then a *sustain phase* of one advertisement every
//!   `sustain_interval_ns` for as long as the publication lives. (UM's
//!   `resolver_advertisement_minimum_initial_interval`, `..._maximum_initial_interval`,
//!   `..._minimum_initial_duration` and `..._sustain_interval`.) Each carries a TTL; a receiver
//!   that hears nothing for that long expires the source. A closed publication sends one
//!   advertisement with TTL 0, which withdraws it at once.
//! - **Queries** of each subscription follow their own schedule. An exact subscription stops
//!   querying once a source answers and starts again when its last source is lost; a wildcard
//!   subscription queries through its initial phase only (matching topics that appear later
//!   are found by their own advertisements). A query brings the matching publications' next
//!   advertisement forward to now, at most once per `min_initial_interval_ns` each.
//! - **Bounded traffic**: advertisements of one publication travel together in one datagram,
//!   datagrams are packed up to `datagram_len` (sustain-phase advertisements due within a tenth
//!   of the sustain interval are sent early to fill a datagram), and a token bucket caps advertisements per
//!   second (`max_advertisements_per_s`). An advertisement held back by the cap is sent late,
//!   never dropped.
//!
//! Inputs: [`Resolver::advertise`], [`Resolver::withdraw`], [`Resolver::subscribe`],
//! [`Resolver::unsubscribe`] and [`Resolver::on_datagram`], each with `now_ns`. Outputs:
//! datagrams from [`Resolver::poll_transmit`], the next deadline from
//! [`Resolver::poll_timeout`], and [`ResolverEvent`]s from [`Resolver::poll_event`]. Local
//! publications match local subscriptions directly, with no datagram.
//!
//! Files: this one holds the [`Resolver`] state machine (publications, subscriptions, datagrams
//! in and out); `schedule.rs` the advertise and query [`Schedule`]s; `pattern.rs` the exact,
//! glob and regex [`Pattern`]s; `sources.rs` the table of sources (TTL expiry, withdrawal,
//! bounds).
//!
//! Every received datagram is checked frame by frame. Malformed frames are counted by
//! [`WireError`] kind; well-formed frames that cannot be true (a stream id that is not the
//! topic's, a URI whose scheme is none of [`Scheme::ALL`], a TTL above `max_ttl_ms`, a session
//! that changes topic, a claim to one of this context's own sessions) are rejected and counted
//! too ([`ResolverCounters`]). Nothing a peer sends can make the table grow past `max_sources`.
//!
//! ```
//! use peregrine_proto::resolver::{Pattern, Resolver, ResolverConfig, ResolverEvent};
//! use peregrine_wire::query::PatternKind;
//!
//! let mut publisher = Resolver::new(ResolverConfig::new(1));
//! let mut subscriber = Resolver::new(ResolverConfig::new(2));
//! publisher.advertise("md.eq.AAPL", 0xAB, &["udp://10.0.0.1:4000".into()], 0).unwrap();
//! let sub = subscriber.subscribe(Pattern::new(PatternKind::Glob, "md.eq.*").unwrap(), 0);
//!
//! // Carry datagrams both ways, as a socket would.
//! let mut buf = [0u8; 1472];
//! while let Some(n) = subscriber.poll_transmit(0, &mut buf) {
//!     publisher.on_datagram(&buf[..n], 0);
//! }
//! while let Some(n) = publisher.poll_transmit(0, &mut buf) {
//!     subscriber.on_datagram(&buf[..n], 0);
//! }
//! match subscriber.poll_event() {
//!     Some(ResolverEvent::SourceFound { subscription, source }) => {
//!         assert_eq!(subscription, sub);
//!         assert_eq!(source.topic, "md.eq.AAPL");
//!         assert_eq!(source.uris, ["udp://10.0.0.1:4000"]);
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```

mod pattern;
mod schedule;
mod sources;

pub use pattern::{Pattern, PatternError};
pub use peregrine_wire::query::PatternKind;
pub use schedule::Schedule;
pub use sources::{LostReason, SourceInfo, MIN_TTL_MS, SOURCE_COST_BYTES, URI_COST_BYTES};

use crate::counters::counters;
use crate::rate::TokenBucket;
use crate::scheme::Scheme;
use peregrine_wire::advertise::{check_topic, check_uri, AdvertiseFrame, AdvertiseRepr};
use peregrine_wire::header::{FrameType, Frames};
use peregrine_wire::query::{QueryFrame, QueryRepr};
use peregrine_wire::{align_frame, WireError};
use sources::{known_scheme, Source, SourceKey};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;

/// The stream id of a topic inside a session: FNV-1a of its name. Receivers check it against
/// the advertised topic, so a corrupted or forged pairing is rejected.
pub fn stream_id_of(topic: &str) -> u32 {
    topic.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// How many distinct incoming query patterns are kept compiled.
const PATTERN_CACHE: usize = 256;

/// A resolver's settings. [`ResolverConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverConfig {
    /// This context's id: the `session_id` of its QUERY frames.
    pub context_id: u32,
    pub advertise: Schedule,
    pub query: Schedule,
    /// The TTL this context's advertisements carry (default 5 s: five sustain intervals).
    pub ttl_ms: u32,
    /// Advertisements with a longer TTL are rejected (default one hour).
    pub max_ttl_ms: u32,
    /// Largest datagram sent (default 1472: one Ethernet frame).
    pub datagram_len: usize,
    /// Advertisements per second at most (default 20 000; 0: unlimited), with a burst of
    /// `advertisement_burst`.
    pub max_advertisements_per_s: u64,
    pub advertisement_burst: u64,
    /// Most remote sources kept (default 100 000); advertisements of new ones beyond it are
    /// rejected and counted.
    pub max_sources: usize,
    /// Most bytes the remote sources may take (default 32 MiB), counted as their topics and
    /// URIs plus a fixed cost per source and per URI ([`SOURCE_COST_BYTES`],
    /// [`URI_COST_BYTES`]); advertisements beyond it are rejected and counted. A table
    /// of 100 000 sources with names of a few dozen bytes fits; one of 1 KiB topics stops at
    /// about 27 000.
    pub max_source_bytes: usize,
}

impl ResolverConfig {
    pub fn new(context_id: u32) -> Self {
        ResolverConfig {
            context_id,
            advertise: Schedule::ADVERTISE,
            query: Schedule::QUERY,
            ttl_ms: 5_000,
            max_ttl_ms: 3_600_000,
            datagram_len: 1472,
            max_advertisements_per_s: 20_000,
            advertisement_burst: 1_000,
            max_sources: 100_000,
            max_source_bytes: 32 << 20,
        }
    }
}

/// Names a local publication.
pub type PublicationId = u64;
/// Names a local subscription.
pub type SubscriptionId = u64;

/// What the resolver tells its subscriptions.
// Not #[non_exhaustive]: a driver must act on every event, so a new one should not compile
// until peregrine's resolve.rs handles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolverEvent {
    /// A source of a matching topic appeared (or was already known when the subscription was
    /// made).
    SourceFound {
        subscription: SubscriptionId,
        source: SourceInfo,
    },
    /// A source this subscription was told of is gone.
    SourceLost {
        subscription: SubscriptionId,
        topic: String,
        session_id: u32,
        stream_id: u32,
        reason: LostReason,
    },
}

counters! {
/// What a resolver counted. Field names are stable (JSON output, docs).
pub struct ResolverCounters {
    pub datagrams_received: u64,
    pub advertisements_received: u64,
    pub queries_received: u64,
    /// Advertisements with TTL 0 that removed a known source.
    pub withdrawals_received: u64,
    /// This context's own frames heard back (multicast loops them back).
    pub own_frames: u64,
    /// Malformed frames, by [`WireError::index`] (see [`WireError::NAMES`]): wrong sizes,
    /// over-long texts, unknown versions and types, bad magic...
    pub malformed: [u64; WireError::KINDS],
    /// Well-formed frames of a type the resolver does not take (DATA on the resolver port).
    pub unexpected_frames: u64,
    /// Advertisements whose stream id is not their topic's.
    pub bad_stream_id: u64,
    /// Advertisements whose URI names no known transport.
    pub bad_uri: u64,
    /// Advertisements whose TTL is above `max_ttl_ms`.
    pub bad_ttl: u64,
    /// Advertisements of a known session under another topic.
    pub conflicts: u64,
    /// Advertisements claiming one of this context's sessions with another topic or URI.
    pub spoofed_own: u64,
    /// Queries whose regular expression does not compile.
    pub bad_patterns: u64,
    /// Advertisements of new sources (or new URIs of a source) refused because the table was
    /// full.
    pub table_full: u64,
    /// Advertisements of new sources or URIs refused because the table held `max_source_bytes`.
    pub table_bytes_full: u64,
    /// With a resolver key (`auth`): datagrams dropped unread, by
    /// [`AuthReject::index`](crate::auth::AuthReject::index): no AUTH frame, another key, a
    /// tag that does not match.
    pub auth_rejected: [u64; 3],
    pub datagrams_sent: u64,
    pub advertisements_sent: u64,
    pub queries_sent: u64,
    /// Advertisements brought forward to answer a query.
    pub query_responses: u64,
    /// Times the advertisement rate limit held a due advertisement back.
    pub advertisements_delayed: u64,
    pub sources_found: u64,
    pub sources_expired: u64,
    pub sources_withdrawn: u64,
}
}

impl ResolverCounters {
    /// Every frame rejected: malformed, unexpected or not believable.
    pub fn rejected(&self) -> u64 {
        self.malformed.iter().sum::<u64>()
            + self.unexpected_frames
            + self.bad_stream_id
            + self.bad_uri
            + self.bad_ttl
            + self.conflicts
            + self.spoofed_own
            + self.bad_patterns
            + self.table_full
            + self.table_bytes_full
            + self.auth_rejected.iter().sum::<u64>()
    }
}

/// Why a publication could not be advertised.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdvertiseError {
    /// The topic or a URI breaks the wire rules.
    Invalid(WireError),
    /// No URI given, or one with no known scheme.
    BadUri(String),
    /// The advertisements of one publication must fit in one datagram.
    TooLong { needed: usize, datagram_len: usize },
    /// This session already advertises this topic.
    Duplicate,
}

impl fmt::Display for AdvertiseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdvertiseError::Invalid(e) => write!(f, "cannot advertise: {e}"),
            AdvertiseError::BadUri(u) => write!(
                f,
                "cannot advertise URI '{u}': expected one of {}:// followed by an address",
                Scheme::ALL.map(Scheme::name).join("://, ")
            ),
            AdvertiseError::TooLong {
                needed,
                datagram_len,
            } => write!(
                f,
                "the topic and URIs need {needed} bytes of advertisements, above the resolver datagram of {datagram_len} bytes: shorten them or raise the datagram size"
            ),
            AdvertiseError::Duplicate => write!(f, "this session already advertises the topic"),
        }
    }
}
impl std::error::Error for AdvertiseError {}

#[derive(Debug)]
struct Publication {
    topic: String,
    session_id: u32,
    stream_id: u32,
    uris: Vec<String>,
    start_ns: u64,
    last_ns: u64,
    sends: u32,
    next_ns: u64,
}

/// The room for a frame of `len` bytes at the next 8-byte aligned offset after `*at`, with the
/// padding before it zeroed; `*at` moves past it.
fn place<'b>(buf: &'b mut [u8], at: &mut usize, len: usize) -> &'b mut [u8] {
    let start = align_frame(*at);
    buf[*at..start].fill(0);
    *at = start + len;
    &mut buf[start..start + len]
}

/// Where frames of `lens` end when packed from `at`, each at an 8-byte aligned offset.
fn packed_end(at: usize, lens: impl Iterator<Item = usize>) -> usize {
    lens.fold(at, |end, len| align_frame(end) + len)
}

fn advertise_len(topic: &str, uri: &str) -> usize {
    peregrine_wire::advertise::ADVERTISE_HEADER_LEN + topic.len() + uri.len()
}

#[derive(Debug)]
struct Subscription {
    pattern: Pattern,
    query_id: u32,
    start_ns: u64,
    sends: u32,
    /// When the next query is due; `None`: not querying.
    next_ns: Option<u64>,
    /// Sources this subscription was told of.
    sources: usize,
}

/// One context's resolver: its publications, subscriptions and table of sources.
#[derive(Debug)]
pub struct Resolver {
    cfg: ResolverConfig,
    publications: HashMap<PublicationId, Publication>,
    subscriptions: HashMap<SubscriptionId, Subscription>,
    sources: HashMap<SourceKey, Source>,
    remote_sources: usize,
    /// What the remote sources cost, as `max_source_bytes` counts.
    remote_bytes: usize,
    /// (due_ns, id) of every publication.
    ads_due: BTreeSet<(u64, PublicationId)>,
    /// (due_ns, id) of every subscription that queries.
    queries_due: BTreeSet<(u64, SubscriptionId)>,
    /// TTL-0 advertisements still to send: (topic, session, stream, uri).
    withdrawals: VecDeque<(String, u32, u32, String)>,
    events: VecDeque<ResolverEvent>,
    bucket: TokenBucket,
    /// The rate limit stopped advertisements at this time; retry one token later.
    limited_at_ns: Option<u64>,
    /// No remote source expires before this.
    next_expiry_ns: u64,
    next_id: u64,
    patterns: HashMap<(u8, String), Option<Pattern>>,
    counters: ResolverCounters,
}

impl Resolver {
    pub fn new(cfg: ResolverConfig) -> Self {
        let bucket = TokenBucket::new(cfg.max_advertisements_per_s, cfg.advertisement_burst, 0);
        Resolver {
            cfg,
            publications: HashMap::new(),
            subscriptions: HashMap::new(),
            sources: HashMap::new(),
            remote_sources: 0,
            remote_bytes: 0,
            ads_due: BTreeSet::new(),
            queries_due: BTreeSet::new(),
            withdrawals: VecDeque::new(),
            events: VecDeque::new(),
            bucket,
            limited_at_ns: None,
            next_expiry_ns: u64::MAX,
            next_id: 1,
            patterns: HashMap::new(),
            counters: ResolverCounters::default(),
        }
    }

    pub fn config(&self) -> &ResolverConfig {
        &self.cfg
    }
    /// Counts a datagram the driver dropped because its AUTH frame did not check.
    pub fn note_auth_rejected(&mut self, reason: crate::auth::AuthReject) {
        self.counters.auth_rejected[reason.index()] += 1;
    }

    pub fn counters(&self) -> ResolverCounters {
        self.counters
    }
    /// Remote sources currently known.
    pub fn remote_sources(&self) -> usize {
        self.remote_sources
    }
    /// What the remote sources take, as `max_source_bytes` counts it.
    pub fn source_bytes(&self) -> usize {
        self.remote_bytes
    }

    /// Starts advertising `topic`, published by `session_id` and reachable at each of `uris`.
    /// The first advertisement is due at once; local subscriptions that match are told now.
    pub fn advertise(
        &mut self,
        topic: &str,
        session_id: u32,
        uris: &[String],
        now_ns: u64,
    ) -> Result<PublicationId, AdvertiseError> {
        check_topic(topic).map_err(AdvertiseError::Invalid)?;
        if uris.is_empty() {
            return Err(AdvertiseError::BadUri(String::new()));
        }
        for u in uris {
            check_uri(u).map_err(AdvertiseError::Invalid)?;
            if !known_scheme(u) {
                return Err(AdvertiseError::BadUri(u.clone()));
            }
        }
        let stream_id = stream_id_of(topic);
        if self.sources.contains_key(&(session_id, stream_id)) {
            return Err(AdvertiseError::Duplicate);
        }
        let p = Publication {
            topic: topic.to_string(),
            session_id,
            stream_id,
            uris: uris.to_vec(),
            start_ns: now_ns,
            last_ns: now_ns,
            sends: 0,
            next_ns: now_ns,
        };
        let needed = packed_end(0, p.uris.iter().map(|u| advertise_len(&p.topic, u)));
        if needed > self.cfg.datagram_len {
            return Err(AdvertiseError::TooLong {
                needed,
                datagram_len: self.cfg.datagram_len,
            });
        }
        let id = self.take_id();
        self.ads_due.insert((now_ns, id));
        self.publications.insert(id, p);
        let source = Source {
            topic: topic.to_string(),
            uris: uris.iter().map(|u| (u.clone(), u64::MAX)).collect(),
            local: true,
            told: Vec::new(),
        };
        self.sources.insert((session_id, stream_id), source);
        self.tell_matching((session_id, stream_id));
        Ok(id)
    }

    /// Stops advertising: one TTL-0 advertisement per URI goes out, and local subscriptions
    /// are told the source was withdrawn.
    pub fn withdraw(&mut self, id: PublicationId, now_ns: u64) {
        let Some(p) = self.publications.remove(&id) else {
            return;
        };
        self.ads_due.remove(&(p.next_ns, id));
        for uri in &p.uris {
            self.withdrawals
                .push_back((p.topic.clone(), p.session_id, p.stream_id, uri.clone()));
        }
        self.remove_source((p.session_id, p.stream_id), LostReason::Withdrawn, now_ns);
    }

    /// Subscribes to the topics `pattern` matches. Known sources that match are reported at
    /// once; the first query is due now.
    pub fn subscribe(&mut self, pattern: Pattern, now_ns: u64) -> SubscriptionId {
        let id = self.take_id();
        let query_id = id as u32;
        self.subscriptions.insert(
            id,
            Subscription {
                pattern,
                query_id,
                start_ns: now_ns,
                sends: 0,
                next_ns: None,
                sources: 0,
            },
        );
        let keys: Vec<SourceKey> = self.sources.keys().copied().collect();
        for key in keys {
            self.tell_one(key, id);
        }
        let s = &self.subscriptions[&id];
        if s.pattern.is_wildcard() || s.sources == 0 {
            self.start_queries(id, now_ns);
        }
        id
    }

    /// Ends a subscription; it gets no more events.
    pub fn unsubscribe(&mut self, id: SubscriptionId) {
        if let Some(s) = self.subscriptions.remove(&id) {
            if let Some(due) = s.next_ns {
                self.queries_due.remove(&(due, id));
            }
            for src in self.sources.values_mut() {
                src.told.retain(|&t| t != id);
            }
            self.events.retain(|e| match e {
                ResolverEvent::SourceFound { subscription, .. }
                | ResolverEvent::SourceLost { subscription, .. } => *subscription != id,
            });
        }
    }

    pub fn poll_event(&mut self) -> Option<ResolverEvent> {
        self.events.pop_front()
    }

    /// The earliest time something is due: a datagram to send or a source to expire.
    pub fn poll_timeout(&self) -> Option<u64> {
        if !self.withdrawals.is_empty() {
            return Some(0);
        }
        let mut t = self.next_expiry_ns;
        if let Some(&(due, _)) = self.ads_due.first() {
            // Held back by the rate limit: retry once a millisecond's tokens have built up, so
            // the backlog leaves in full datagrams rather than one or two frames at a time.
            let due = match self.limited_at_ns {
                Some(at) => due.max(at + self.limit_retry_ns()),
                None => due,
            };
            t = t.min(due);
        }
        if let Some(&(due, _)) = self.queries_due.first() {
            t = t.min(due);
        }
        (t != u64::MAX).then_some(t)
    }

    /// Writes the next datagram due at `now_ns` into `buf` and returns its length, or `None`
    /// when nothing is due. Call until `None`.
    ///
    /// # Panics
    /// If `buf` is shorter than `datagram_len`.
    pub fn poll_transmit(&mut self, now_ns: u64, buf: &mut [u8]) -> Option<usize> {
        self.handle_timeout(now_ns);
        let cap = self.cfg.datagram_len;
        let buf = &mut buf[..cap];
        let mut at = 0usize;
        // Withdrawals go first and are not rate limited (one per closed publication).
        while let Some((topic, session_id, stream_id, uri)) = self.withdrawals.front() {
            let len = advertise_len(topic, uri);
            if align_frame(at) + len > cap {
                break;
            }
            let repr = AdvertiseRepr {
                session_id: *session_id,
                stream_id: *stream_id,
                ttl_ms: 0,
                topic,
                uri,
            };
            repr.emit(&mut AdvertiseFrame::new_unchecked(place(buf, &mut at, len)));
            self.counters.advertisements_sent += 1;
            self.withdrawals.pop_front();
        }
        // Sustain-phase advertisements due within a tenth of the sustain interval ride along in
        // a datagram that leaves anyway, so the sustain traffic of many topics packs into full
        // datagrams instead of one datagram per topic.
        let ride_along_ns = self.cfg.advertise.sustain_interval_ns / 10;
        let held = self
            .limited_at_ns
            .is_some_and(|at| now_ns < at + self.limit_retry_ns());
        while let Some(&(due, id)) = self.ads_due.first().filter(|_| !held) {
            let p = &self.publications[&id];
            let sustaining =
                p.sends > 0 && !self.cfg.advertise.in_initial_phase(p.start_ns, p.last_ns);
            if due > now_ns && !(at > 0 && sustaining && due <= now_ns + ride_along_ns) {
                break;
            }
            if packed_end(at, p.uris.iter().map(|u| advertise_len(&p.topic, u))) > cap {
                break;
            }
            if !self.bucket.try_take(p.uris.len() as u64, now_ns) {
                if self.limited_at_ns.is_none() {
                    self.counters.advertisements_delayed += 1;
                }
                self.limited_at_ns = Some(now_ns);
                break;
            }
            self.limited_at_ns = None;
            for uri in &p.uris {
                let repr = AdvertiseRepr {
                    session_id: p.session_id,
                    stream_id: p.stream_id,
                    ttl_ms: self.cfg.ttl_ms,
                    topic: &p.topic,
                    uri,
                };
                let room = place(buf, &mut at, repr.buffer_len());
                repr.emit(&mut AdvertiseFrame::new_unchecked(room));
                self.counters.advertisements_sent += 1;
            }
            self.ads_due.remove(&(due, id));
            let sched = self.cfg.advertise;
            let p = self
                .publications
                .get_mut(&id)
                .expect("due publication exists");
            if p.sends == 0 {
                p.start_ns = now_ns;
            }
            p.sends += 1;
            p.last_ns = now_ns;
            p.next_ns = sched.next_ns(p.start_ns, now_ns, p.sends);
            self.ads_due.insert((p.next_ns, id));
        }
        while let Some(&(due, id)) = self.queries_due.first() {
            if due > now_ns {
                break;
            }
            let s = &self.subscriptions[&id];
            let len = peregrine_wire::query::QUERY_HEADER_LEN + s.pattern.text().len();
            if align_frame(at) + len > cap {
                break;
            }
            let repr = QueryRepr {
                session_id: self.cfg.context_id,
                query_id: s.query_id,
                kind: s.pattern.kind(),
                pattern: s.pattern.text(),
            };
            repr.emit(&mut QueryFrame::new_unchecked(place(buf, &mut at, len)));
            self.counters.queries_sent += 1;
            self.queries_due.remove(&(due, id));
            let sched = self.cfg.query;
            let s = self
                .subscriptions
                .get_mut(&id)
                .expect("due subscription exists");
            if s.sends == 0 {
                s.start_ns = now_ns;
            }
            s.sends += 1;
            // A wildcard queries through its initial phase; an exact name until it resolves.
            let keep_on = !s.pattern.is_wildcard() || sched.in_initial_phase(s.start_ns, now_ns);
            s.next_ns = keep_on.then(|| sched.next_ns(s.start_ns, now_ns, s.sends));
            if let Some(next) = s.next_ns {
                self.queries_due.insert((next, id));
            }
        }
        if at == 0 {
            return None;
        }
        self.counters.datagrams_sent += 1;
        Some(at)
    }

    /// Takes one received datagram: every frame in it is checked, counted and applied.
    pub fn on_datagram(&mut self, datagram: &[u8], now_ns: u64) {
        self.counters.datagrams_received += 1;
        let mut fresh: Vec<SourceKey> = Vec::new();
        for frame in Frames::new(datagram) {
            let (ty, bytes) = match frame {
                Ok(f) => f,
                Err(e) => {
                    self.counters.malformed[e.index()] += 1;
                    break;
                }
            };
            match ty {
                FrameType::Advertise => {
                    match AdvertiseFrame::new_checked(bytes).and_then(|f| {
                        AdvertiseRepr::parse(&f).map(|r| self.on_advertise(&r, now_ns))
                    }) {
                        Ok(Some(key)) if !fresh.contains(&key) => fresh.push(key),
                        Ok(_) => {}
                        Err(e) => self.counters.malformed[e.index()] += 1,
                    }
                }
                FrameType::Query => match QueryFrame::new_checked(bytes)
                    .and_then(|f| QueryRepr::parse(&f).map(|r| self.on_query(&r, now_ns)))
                {
                    Ok(()) => {}
                    Err(e) => self.counters.malformed[e.index()] += 1,
                },
                _ => self.counters.unexpected_frames += 1,
            }
        }
        // A publisher's advertisements travel in one datagram: tell subscriptions once all of
        // its URIs are known, so they can choose among them.
        for key in fresh {
            self.tell_matching(key);
        }
    }

    fn on_query(&mut self, q: &QueryRepr<'_>, now_ns: u64) {
        self.counters.queries_received += 1;
        if q.session_id == self.cfg.context_id {
            self.counters.own_frames += 1;
            return;
        }
        if self.publications.is_empty() {
            return;
        }
        let cache_key = (q.kind as u8, q.pattern.to_string());
        if !self.patterns.contains_key(&cache_key) {
            if self.patterns.len() >= PATTERN_CACHE {
                self.patterns.clear();
            }
            let compiled = Pattern::new(q.kind, q.pattern).ok();
            self.patterns.insert(cache_key.clone(), compiled);
        }
        let Some(pattern) = &self.patterns[&cache_key] else {
            self.counters.bad_patterns += 1;
            return;
        };
        let holdoff_ns = self.cfg.advertise.min_initial_interval_ns;
        let mut moved = Vec::new();
        for (&id, p) in &self.publications {
            if p.next_ns > now_ns
                && (p.sends == 0 || now_ns.saturating_sub(p.last_ns) >= holdoff_ns)
                && pattern.matches(&p.topic)
            {
                moved.push((id, p.next_ns));
            }
        }
        for (id, due) in moved {
            self.ads_due.remove(&(due, id));
            self.ads_due.insert((now_ns, id));
            self.publications.get_mut(&id).expect("listed").next_ns = now_ns;
            self.counters.query_responses += 1;
        }
    }

    /// How long advertisements wait after the rate limit stopped them: a millisecond, or one
    /// token if that is longer.
    fn limit_retry_ns(&self) -> u64 {
        (1_000_000_000 / self.cfg.max_advertisements_per_s.max(1)).max(1_000_000)
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn start_queries(&mut self, id: SubscriptionId, now_ns: u64) {
        let s = self
            .subscriptions
            .get_mut(&id)
            .expect("subscription exists");
        if let Some(due) = s.next_ns.take() {
            self.queries_due.remove(&(due, id));
        }
        s.sends = 0;
        s.start_ns = now_ns;
        s.next_ns = Some(now_ns);
        self.queries_due.insert((now_ns, id));
    }

    fn stop_queries(&mut self, id: SubscriptionId) {
        let s = self
            .subscriptions
            .get_mut(&id)
            .expect("subscription exists");
        if let Some(due) = s.next_ns.take() {
            self.queries_due.remove(&(due, id));
        }
    }

    /// Tells every matching subscription of the source `key`.
    fn tell_matching(&mut self, key: SourceKey) {
        let ids: Vec<SubscriptionId> = self.subscriptions.keys().copied().collect();
        for id in ids {
            self.tell_one(key, id);
        }
    }

    fn tell_one(&mut self, key: SourceKey, id: SubscriptionId) {
        let (Some(src), Some(sub)) = (self.sources.get_mut(&key), self.subscriptions.get_mut(&id))
        else {
            return;
        };
        if src.told.contains(&id) || !sub.pattern.matches(&src.topic) {
            return;
        }
        src.told.push(id);
        sub.sources += 1;
        let exact = !sub.pattern.is_wildcard();
        self.events.push_back(ResolverEvent::SourceFound {
            subscription: id,
            source: SourceInfo {
                topic: src.topic.clone(),
                session_id: key.0,
                stream_id: key.1,
                uris: src.uris.iter().map(|u| u.0.clone()).collect(),
                local: src.local,
            },
        });
        if exact {
            self.stop_queries(id);
        }
    }
}

#[cfg(test)]
mod tests;
