//! Peregrine: broker-less publish/subscribe for trading and market data.
//!
//! A [`Context`] is one process's handle. It makes [`Publisher`]s and [`Subscriber`]s on
//! *topics*: by name alone through topic resolution ([`Context::publish`],
//! [`Context::subscribe`] with a name or glob, [`Context::subscribe_pattern`] with a regular
//! expression), or on a transport given by URI ([`Context::publisher`],
//! [`Context::subscriber`]; `ipc://NAME` for shared memory on one host).
//!
//! No thread is in the data path: your own `offer` and `poll` calls move the data, and an
//! [`IdleKind`] decides what [`Subscriber::idle`] does when a poll found nothing. (Publishing or
//! subscribing by topic name starts one resolver thread per context, which never touches data.)
//!
//! ```
//! use peregrine::{Context, IdleKind};
//!
//! # let name = format!("doc-{}", std::process::id());
//! let ctx = Context::new();
//! let uri = format!("ipc://{name}");
//! let mut publisher = ctx.publisher("md.eq.AAPL", &uri)?;
//! let mut subscriber = ctx.subscriber("md.eq.AAPL", &uri, IdleKind::Backoff)?;
//!
//! publisher.offer(b"bid 189.20 ask 189.21")?;
//!
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     let n = subscriber.poll(&mut |msg| got.push(msg.payload.to_vec()), 16);
//!     subscriber.idle(n);
//! }
//! assert_eq!(got[0], b"bid 189.20 ask 189.21");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]

pub mod config;
pub mod failover;
mod resolve;
pub mod stat;
pub use config::{Config, ConfigError, Remote, ResolverSettings};
pub use peregrine_proto::resolver::{
    LostReason, Pattern, PatternError, ResolverCounters, Schedule,
};
pub use peregrine_wire::query::PatternKind;
pub use resolve::{SourceAdmission, MAX_UNPROVEN_LEGS, MAX_WAITING_SOURCES, PROOF_TIMEOUT_NS};

use peregrine_agent::{Idle, IdleStrategy};
use peregrine_transport::ipc::IpcConfig;
use peregrine_transport::net::NetConfig;
use peregrine_transport::stat::{Record, RecordType, ValueKind};
use peregrine_transport::{AnyPublisher, AnySubscriber, Uri};

pub use peregrine_agent::IdleKind;
pub use peregrine_proto::lossgen::LossCounters;
pub use peregrine_transport::ipc::segment::shm_dir;
pub use peregrine_transport::ipc::SlowSubscriberPolicy;
pub use peregrine_transport::net::parse_loss;
pub use peregrine_transport::uri::parse_bytes;

/// Largest message an `ipc://` log of `capacity` bytes accepts.
pub fn ipc_max_message_len(capacity: u64) -> usize {
    peregrine_transport::ipc::layout::max_message_for(capacity) as usize
}

/// The default `ipc://` log capacity in bytes.
pub const IPC_DEFAULT_CAPACITY: u64 = IpcConfig::DEFAULT_CAPACITY;
pub use peregrine_transport::uri::UnknownScheme;
pub use peregrine_transport::{
    EventFields, Message, OfferError, OpenError, PublisherCounters, Scheme, SubscriberCounters,
    SubscriberEvent, UriError,
};

/// One process's handle: configuration, topic resolution, and the factory of publishers and
/// subscribers. Clones share one resolver.
#[derive(Debug, Clone, Default)]
pub struct Context {
    config: Config,
    resolver: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<resolve::Handle>>>>,
    counters: stat::ContextCounters,
}

impl Context {
    /// A context with the defaults (single host, no configuration file).
    pub fn new() -> Self {
        Context::default()
    }

    /// A context whose URI parameters default to `config` (see [`config`]).
    pub fn with_config(config: Config) -> Self {
        Context {
            config,
            resolver: Default::default(),
            counters: Default::default(),
        }
    }

    /// The configuration this context applies to every URI it opens.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The context's resolver, started on first use.
    fn resolver(&self) -> Result<std::sync::Arc<resolve::Handle>, OpenError> {
        let mut slot = self.resolver.lock().expect("resolver slot");
        if let Some(h) = &*slot {
            return Ok(h.clone());
        }
        let settings = self.config.resolver();
        let path = match &settings.path {
            peregrine_transport::resolver::ResolverPath::Multicast { group, .. } => {
                format!("mcast://{group}")
            }
            peregrine_transport::resolver::ResolverPath::Daemon { daemon, .. } => {
                format!("resolverd://{daemon}")
            }
            other => format!("{other:?}"),
        };
        let record = self.counters.record(
            RecordType::Resolver,
            &[("path", &path)],
            &[
                stat::descriptors(&ResolverCounters::NAMES, &[]),
                vec![(ValueKind::Counter, "send_errors")],
            ]
            .concat(),
        );
        let h = resolve::Handle::start(settings, record)?;
        *slot = Some(h.clone());
        Ok(h)
    }

    /// What this context's resolver counted (sent, received, rejected), once started.
    pub fn resolver_counters(&self) -> Option<ResolverCounters> {
        let slot = self.resolver.lock().expect("resolver slot");
        slot.as_ref().map(|h| h.counters().0)
    }

    /// A publisher of `topic` found by name: subscribers anywhere find it through topic
    /// resolution, with no URI to share.
    ///
    /// By default it offers shared memory to subscribers on this host and UDP to the others
    /// (`[resolver] local` and `remote` change that); a `[topics]` entry for the topic makes it
    /// use exactly that URI. It joins the context's resolver, which advertises it until it is
    /// closed or dropped.
    pub fn publish(&self, topic: &str) -> Result<Publisher, OpenError> {
        peregrine_transport::validate_topic(topic)?;
        let handle = self.resolver()?;
        let session_id = resolve::new_session_id();
        let stream = stream_id(topic);
        // The transports to open: the [topics] URI, or this host's log and the remote choice.
        let settings = &handle.settings;
        let targets: Vec<String> = match self.config.topic_uri(topic) {
            Some(uri) => vec![uri.to_string()],
            None => {
                let local = settings
                    .local_ipc
                    .then(|| format!("ipc://pg.{session_id:08x}.{stream:08x}"));
                let remote = match &settings.remote {
                    config::Remote::Udp => Some(format!("udp://{}:0", settings.iface)),
                    config::Remote::Tcp => Some(format!("tcp://{}:0", settings.iface)),
                    config::Remote::Mcast(u) => Some(u.clone()),
                    config::Remote::None => None,
                };
                local.into_iter().chain(remote).collect()
            }
        };
        if targets.is_empty() {
            return Err(OpenError::InvalidTopic(format!(
                "cannot publish '{topic}': [resolver] local = \"none\" and remote = \"none\" leave no transport"
            )));
        }
        let (mut ipc, mut net, mut uris) = (None, None, Vec::new());
        for target in &targets {
            let (publisher, uri) = self.open_publisher(topic, target, session_id)?;
            match publisher {
                AnyPublisher::Ipc(p) => {
                    ipc = Some(p);
                    // Subscribers on other hosts, or of other users (who cannot open it: it
                    // is in this user's directory), must not try to map it.
                    let uri = with_param(&uri, "host", &handle.host_id);
                    let user = peregrine_transport::ipc::dir::current_user().to_string();
                    uris.push(with_param(&uri, "user", &user));
                }
                p @ (AnyPublisher::Udp(_) | AnyPublisher::Tcp(_)) => {
                    net = Some(p);
                    uris.push(uri);
                }
            }
        }
        let publication = handle.advertise(topic, session_id, &uris)?;
        let uri = uris.join(" ");
        Ok(Publisher {
            stat: self.publisher_record(topic, &uri, session_id),
            stat_calls: 0,
            stat_offers: 0,
            stat_written_ns: 0,
            claims: 0,
            staging: Vec::new(),
            discard: Vec::new(),
            inner: PublisherInner::Multi(Box::new(resolve::MultiPublisher::new(
                ipc,
                net,
                handle,
                publication,
                session_id,
            ))),
            topic: topic.to_string(),
            uri,
        })
    }

    /// A subscriber of every topic `pattern` matches, found by topic resolution: an exact
    /// name, or a glob when the pattern holds `*` or `?` (`md.eq.*`). It joins matching
    /// publishers as they appear (several per topic), at their current position, and reports
    /// them as [`SubscriberEvent::SourceFound`] and [`SubscriberEvent::SourceLost`].
    pub fn subscribe(&self, pattern: &str, idle: IdleKind) -> Result<Subscriber, OpenError> {
        let p =
            Pattern::exact_or_glob(pattern).map_err(|e| OpenError::InvalidTopic(e.to_string()))?;
        self.subscribe_pattern(p, idle)
    }

    /// [`subscribe`](Self::subscribe) with a compiled [`Pattern`] (for regular expressions:
    /// `Pattern::new(PatternKind::Regex, r"md\.(eq|fx)\..*")`).
    pub fn subscribe_pattern(
        &self,
        pattern: Pattern,
        idle: IdleKind,
    ) -> Result<Subscriber, OpenError> {
        let handle = self.resolver()?;
        let text = pattern.text().to_string();
        Ok(Subscriber {
            stat: self.subscriber_record(&[("pattern", &text)]),
            stat_dirty: false,
            stat_polls: 0,
            stat_empty: 0,
            inner: SubscriberInner::Multi(Box::new(resolve::MultiSubscriber::new(
                handle,
                pattern,
                self.config.clone(),
                idle == IdleKind::Block,
            ))),
            idle: Idle::new(idle),
            topic: text,
        })
    }

    /// Opens one publishing transport for `uri` with `session_id`; returns it and the URI
    /// subscribers use (with the bound port).
    fn open_publisher(
        &self,
        topic: &str,
        uri: &str,
        session_id: u32,
    ) -> Result<(AnyPublisher, String), OpenError> {
        let uri = &self.config.apply(uri)?;
        let parsed = Uri::parse(uri)?;
        let publisher = AnyPublisher::open(&parsed, topic, stream_id(topic), session_id)?;
        let uri = match publisher.local_addr() {
            Some(a) if parsed.scheme != Scheme::Mcast => with_address(&parsed, &a.to_string()),
            _ => uri.to_string(),
        };
        Ok((publisher, uri))
    }

    /// A record of this context's counters file for a component of the application's own
    /// (the distributor uses it): `values` are named counters and gauges, written by the
    /// caller with [`Record::add`] and [`Record::set`] and read by `peregrine stat`. When the
    /// file cannot be created or is full, the record still counts, privately.
    pub fn counters_record(
        &self,
        kind: RecordType,
        labels: &[(&str, &str)],
        values: &[(ValueKind, &str)],
    ) -> Record {
        self.counters.record(kind, labels, values)
    }

    fn publisher_record(&self, topic: &str, uri: &str, session_id: u32) -> Record {
        self.counters.record(
            RecordType::Publisher,
            &[
                ("topic", topic),
                ("uri", uri),
                ("transport", &stat::transports(uri)),
                ("session", &format!("{session_id:#010x}")),
            ],
            &stat::descriptors(&PublisherCounters::NAMES, &[PUBLISHER_SUBSCRIBERS]),
        )
    }

    fn subscriber_record(&self, labels: &[(&str, &str)]) -> Record {
        self.counters.record(
            RecordType::Subscriber,
            labels,
            &stat::descriptors(&SubscriberCounters::NAMES, &[SUBSCRIBER_SOURCES]),
        )
    }

    /// The configuration of the environment: the file named by `PEREGRINE_CONFIG` if set, then
    /// `PEREGRINE_<TRANSPORT>_<KEY>` variables over it.
    pub fn from_env() -> Result<Self, ConfigError> {
        let file = match std::env::var_os("PEREGRINE_CONFIG") {
            Some(p) => Config::from_file(std::path::Path::new(&p))?,
            None => Config::default(),
        };
        Ok(Context::with_config(file.with_env(std::env::vars())?))
    }

    /// A publisher of `topic` on the transport `uri`.
    ///
    /// On `udp://` and `tcp://` the publisher binds the address (port 0: any free port, see
    /// [`Publisher::uri`]); on `mcast://` it sends to the group.
    pub fn publisher(&self, topic: &str, uri: &str) -> Result<Publisher, OpenError> {
        peregrine_transport::validate_topic(topic)?;
        let (publisher, uri) = self.open_publisher(topic, uri, resolve::new_session_id())?;
        Ok(Publisher {
            stat: self.publisher_record(topic, &uri, publisher.session_id()),
            stat_calls: 0,
            stat_offers: 0,
            stat_written_ns: 0,
            claims: 0,
            staging: Vec::new(),
            discard: Vec::new(),
            inner: PublisherInner::One(publisher),
            topic: topic.to_string(),
            uri,
        })
    }

    /// The payload one frame carries on `uri` with this context's configuration, for the
    /// network transports (a longer message takes one sequence number per frame); `None` for
    /// `ipc://`, where every message is one frame.
    pub fn frame_payload(&self, uri: &str) -> Result<Option<usize>, OpenError> {
        let uri = self.config.apply(uri)?;
        let parsed = Uri::parse(&uri)?;
        Ok(match parsed.scheme {
            Scheme::Ipc => None,
            _ => Some(NetConfig::from_uri(&parsed)?.segment_len - 32),
        })
    }

    /// A subscriber of `topic` on the transport `uri`, idling with `idle` in [`Subscriber::idle`].
    /// It may be created before its publisher exists: it attaches when the publisher appears.
    pub fn subscriber(
        &self,
        topic: &str,
        uri: &str,
        idle: IdleKind,
    ) -> Result<Subscriber, OpenError> {
        peregrine_transport::validate_topic(topic)?;
        let uri = self.config.apply(uri)?;
        let subscriber = AnySubscriber::open(
            &Uri::parse(&uri)?,
            topic,
            stream_id(topic),
            idle == IdleKind::Block,
        )?;
        Ok(Subscriber {
            stat: self.subscriber_record(&[
                ("topic", topic),
                ("uri", &uri),
                ("transport", &stat::transports(&uri)),
            ]),
            stat_dirty: false,
            stat_polls: 0,
            stat_empty: 0,
            inner: SubscriberInner::One(subscriber),
            idle: Idle::new(idle),
            topic: topic.to_string(),
        })
    }
}

/// `uri` with its address replaced (the port a publisher bound for `:0`).
fn with_address(uri: &Uri, address: &str) -> String {
    let mut s = format!("{}://{address}", uri.scheme.name());
    for (i, (k, v)) in uri.params.iter().enumerate() {
        s.push(if i == 0 { '?' } else { '&' });
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// `uri` with `key=value` added.
fn with_param(uri: &str, key: &str, value: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{key}={value}")
}

/// The stream id a topic name maps to inside a session (FNV-1a of the name).
pub fn stream_id(topic: &str) -> u32 {
    peregrine_proto::resolver::stream_id_of(topic)
}

// The hot calls keep the shared-memory arm inline and call the network arms out of line: with
// every arm inlined, the function grew past what the compiler inlines into a caller's loop, and
// ipc throughput fell by a fifth. (A network send is a system call; one more call is noise.)
#[inline(never)]
fn cold_offer<F: FnOnce(&mut [u8])>(
    inner: &mut PublisherInner,
    len: usize,
    fill: F,
) -> Result<u64, OfferError> {
    match inner {
        PublisherInner::One(p) => p.offer_with(len, fill),
        PublisherInner::Multi(p) => p.offer_with(len, fill),
    }
}

#[inline(never)]
fn cold_flush(inner: &mut PublisherInner) -> Result<(), OfferError> {
    match inner {
        PublisherInner::One(p) => p.flush(),
        PublisherInner::Multi(p) => p.flush(),
    }
}

#[inline(never)]
fn cold_poll<F: FnMut(Message<'_>)>(
    inner: &mut SubscriberInner,
    handler: &mut F,
    limit: usize,
) -> usize {
    match inner {
        SubscriberInner::One(s) => s.poll(handler, limit),
        SubscriberInner::Multi(s) => s.poll(&mut |_, m| handler(m), limit),
    }
}

/// A publisher on one transport given by URI, or one by topic name over several.
// The transport stays inline: boxing it would put a pointer chase in front of every offer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum PublisherInner {
    One(AnyPublisher),
    Multi(Box<resolve::MultiPublisher>),
}

/// Publishes messages on one topic. `offer` never blocks.
///
/// On the network transports, messages in `normal` mode are batched: a batch leaves when it
/// reaches `batch_bytes`, on [`flush`](Self::flush), or when [`do_work`](Self::do_work) (or a
/// later `offer`) finds its oldest message older than `batch_interval_us`. `do_work` also
/// answers subscribers joining and sends heartbeats: call it from the idle loop.
#[derive(Debug)]
pub struct Publisher {
    inner: PublisherInner,
    topic: String,
    uri: String,
    /// This publisher's values in the context's counters file (see [`stat`]).
    stat: Record,
    /// `flush` and `do_work` calls (the clock is read every few).
    stat_calls: u32,
    /// Offers, accepted or refused (the counters are written every few).
    stat_offers: u32,
    /// When the values were last written (monotonic ns).
    stat_written_ns: u64,
    /// Claims made (the last one is the only one that may be committed).
    claims: u64,
    /// A claim's payload on the network transports and topic publishers, copied to the batch
    /// at commit.
    staging: Vec<u8>,
    /// What a stale claim's buffer is: written, never published (and never the log or the
    /// latest claim's staging).
    discard: Vec<u8>,
}

/// Room for one message claimed by [`Publisher::claim`]: write the payload through
/// [`Publisher::claim_buffer`], then [`Publisher::commit`] it. Dropping it uncommitted
/// abandons the claim.
#[derive(Debug)]
#[must_use = "a claim publishes nothing until it is committed"]
pub struct ClaimToken {
    /// Which of the publisher's claims this is.
    number: u64,
    /// The transport's claim, on `ipc://`; `None` when the payload is staged.
    ipc: Option<peregrine_transport::ipc::IpcClaim>,
    len: usize,
}

impl ClaimToken {
    /// The payload length claimed.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a claim of an empty message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Gauges after a publisher's counters: subscribers attached or followed now.
const PUBLISHER_SUBSCRIBERS: &str = "subscribers";
/// Gauges after a subscriber's counters: sources followed now (0 or 1 on one URI).
const SUBSCRIBER_SOURCES: &str = "sources";
const _: () = assert!(
    peregrine_transport::stat::MAX_VALUES > PublisherCounters::NAMES.len()
        && peregrine_transport::stat::MAX_VALUES > SubscriberCounters::NAMES.len()
);

impl Publisher {
    /// Publishes `payload`; returns its sequence number, or why nothing was sent
    /// ([`OfferError::BackPressured`]: try again after the subscribers make room).
    #[inline(always)]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.offer(payload),
            other => cold_offer(other, payload.len(), |b| b.copy_from_slice(payload)),
        };
        self.count(r)
    }

    /// Counts an offer for the counters file: every [`stat::PUBLISHER_EVERY_OFFERS`] offers,
    /// accepted or refused, the counters are written.
    // Always inline, as `offer` and `poll`: the counting made them large enough that the
    // compiler stopped inlining them into callers' loops, and the IPC ping-pong median rose
    // from 80 to 90 ns (paired runs of `peregrine bench pingpong`). A countdown, not the
    // values themselves: two load-and-stores per offer cost the IPC 32 B throughput about 4%.
    #[inline(always)]
    fn count(&mut self, r: Result<u64, OfferError>) -> Result<u64, OfferError> {
        self.stat_offers = self.stat_offers.wrapping_add(1);
        if self.stat_offers % stat::PUBLISHER_EVERY_OFFERS == 0 {
            self.write_counters();
        }
        r
    }

    /// Writes the counters (not the gauge, which reads lines the subscribers write).
    #[cold]
    #[inline(never)]
    fn write_counters(&mut self) {
        self.stat.set_all(self.counters().values());
    }

    /// Writes every value to the counters file.
    #[cold]
    #[inline(never)]
    fn publish_counters(&mut self) {
        self.stat_written_ns = peregrine_agent::monotonic_ns();
        let v = self.counters().values();
        self.stat.set_all(v);
        self.stat.set(v.len(), self.subscriber_count() as u64);
    }

    /// Publishes a message of `len` bytes written in place by `fill` (zero copy).
    #[inline(always)]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.offer_with(len, fill),
            other => cold_offer(other, len, fill),
        };
        self.count(r)
    }

    /// Claims room for a message of `len` bytes, to be written in place and then committed
    /// with [`commit`](Self::commit) (zero copy on `ipc://`: the payload is written straight
    /// into shared memory, and subscribers see nothing of it before the commit).
    ///
    /// On the network transports and on publishers by topic name the claim is a buffer of the
    /// publisher's that the commit offers (one copy, as `offer`), and the commit may still be
    /// refused by flow control. Only the latest claim can be committed; dropping a token
    /// abandons its claim.
    ///
    /// ```
    /// # let ctx = peregrine::Context::new();
    /// # let uri = format!("ipc://doc-claim-{}", std::process::id());
    /// let mut publisher = ctx.publisher("md.eq.AAPL", &uri)?;
    /// let claim = publisher.claim(8)?;
    /// publisher.claim_buffer(&claim).copy_from_slice(&42u64.to_le_bytes());
    /// let sequence = publisher.commit(&claim)?;
    /// # assert_eq!(sequence, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn claim(&mut self, len: usize) -> Result<ClaimToken, OfferError> {
        self.claims += 1;
        let number = self.claims;
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.claim(len).map(Some),
            _ => {
                let max = self.max_message_len();
                if len > max {
                    Err(OfferError::TooLarge { len, max })
                } else {
                    // Its content is unspecified until written: only its length changes.
                    self.staging.resize(len, 0);
                    Ok(None)
                }
            }
        };
        match r {
            Ok(ipc) => Ok(ClaimToken { number, ipc, len }),
            Err(e) => {
                let _ = self.count(Err(e));
                Err(e)
            }
        }
    }

    /// The payload bytes of `claim`, to write before committing it (their content is
    /// unspecified until written).
    pub fn claim_buffer(&mut self, claim: &ClaimToken) -> &mut [u8] {
        let latest = claim.number == self.claims;
        match (&mut self.inner, &claim.ipc) {
            (PublisherInner::One(AnyPublisher::Ipc(p)), Some(c)) if latest && p.is_current(c) => {
                p.claimed_payload(c)
            }
            (_, None) if latest => &mut self.staging[..claim.len],
            // A stale token's buffer: neither the log nor the latest claim's, so writing it
            // cannot disturb a frame published since or a claim made since (its commit fails).
            _ => {
                self.discard.resize(claim.len, 0);
                &mut self.discard[..claim.len]
            }
        }
    }

    /// Publishes what was written into `claim`; returns its sequence number. Fails with
    /// [`OfferError::ClaimStale`] when it is not this publisher's latest claim, was committed
    /// already, or another offer took its room since. On the network transports flow control
    /// may refuse it ([`OfferError::BackPressured`]): the claim and its payload stay, to commit
    /// again.
    pub fn commit(&mut self, claim: &ClaimToken) -> Result<u64, OfferError> {
        let r = if claim.number != self.claims {
            Err(OfferError::ClaimStale)
        } else {
            match (&mut self.inner, &claim.ipc) {
                (PublisherInner::One(AnyPublisher::Ipc(p)), Some(c)) => p.commit(c),
                (_, Some(_)) => Err(OfferError::ClaimStale),
                (inner, None) => {
                    let staged = &self.staging[..claim.len];
                    cold_offer(inner, staged.len(), |b| b.copy_from_slice(staged))
                }
            }
        };
        if r.is_ok() {
            self.claims += 1; // this token is stale now
        }
        self.count(r)
    }

    /// Sends whatever is batched.
    pub fn flush(&mut self) -> Result<(), OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(_)) => Ok(()),
            other => cold_flush(other),
        };
        self.tick();
        r
    }

    /// The counters file's cadence for `flush` and `do_work`: write the values once
    /// [`stat::PUBLISHER_EVERY_NS`] passed (the clock is read every
    /// [`stat::PUBLISHER_CLOCK_CALLS`] calls, from the first). Not on every call: a loop calls
    /// them millions of times a second, and the `subscribers` gauge reads the segment's
    /// subscriber slots, lines the subscribers write.
    #[inline]
    fn tick(&mut self) {
        self.stat_calls = self.stat_calls.wrapping_add(1);
        if self.stat_calls % stat::PUBLISHER_CLOCK_CALLS == 1 {
            let now_ns = peregrine_agent::monotonic_ns();
            if now_ns.saturating_sub(self.stat_written_ns) >= stat::PUBLISHER_EVERY_NS {
                self.publish_counters();
            }
        }
    }

    /// The duty cycle (network transports): sends a batch whose interval passed, heartbeats
    /// while idle, reads subscribers' joins and windows. Returns the work done.
    pub fn do_work(&mut self) -> usize {
        let work = match &mut self.inner {
            PublisherInner::One(p) => p.do_work(),
            PublisherInner::Multi(p) => p.do_work(),
        };
        self.tick();
        work
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The URI subscribers use: as given, with the bound port when it was given as 0. (A
    /// publisher by topic: every URI it advertises, separated by spaces.)
    pub fn uri(&self) -> &str {
        &self.uri
    }
    pub fn max_message_len(&self) -> usize {
        match &self.inner {
            PublisherInner::One(p) => p.max_message_len(),
            PublisherInner::Multi(p) => p.max_message_len(),
        }
    }
    pub fn subscriber_count(&self) -> usize {
        match &self.inner {
            PublisherInner::One(p) => p.subscriber_count(),
            PublisherInner::Multi(p) => p.subscriber_count(),
        }
    }
    pub fn session_id(&self) -> u32 {
        match &self.inner {
            PublisherInner::One(p) => p.session_id(),
            PublisherInner::Multi(p) => p.session_id(),
        }
    }
    pub fn counters(&self) -> PublisherCounters {
        match &self.inner {
            PublisherInner::One(p) => p.counters(),
            PublisherInner::Multi(p) => p.counters(),
        }
    }
    /// How many shared-memory segments left by dead publishers (and leftovers of interrupted
    /// creations) this publisher removed from the segment directory when it was created.
    pub fn stale_segments_removed(&self) -> usize {
        match &self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.stale_segments_removed(),
            PublisherInner::One(_) => 0,
            PublisherInner::Multi(p) => p.stale_segments_removed(),
        }
    }

    /// Ends the session: sends what is batched and tells subscribers the stream ended (on UDP
    /// and multicast after lingering, answering NAKs, until every subscriber confirmed the last
    /// message or `linger_ms` passed). Dropping the publisher does the same; closing first
    /// keeps [`counters`](Self::counters) readable afterwards. Later offers fail with `Closed`.
    pub fn close(&mut self) {
        match &mut self.inner {
            PublisherInner::One(p) => p.close(),
            PublisherInner::Multi(p) => p.close(),
        }
        self.publish_counters();
    }

    /// What the test loss generator (`loss=`, `PEREGRINE_LOSS`) saw and dropped, if one runs.
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match &self.inner {
            PublisherInner::One(p) => p.loss_counters(),
            PublisherInner::Multi(_) => None,
        }
    }
}

/// A subscriber on one transport given by URI, or one by topic pattern over several.
// The transport stays inline: boxing it would put a pointer chase in front of every poll.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum SubscriberInner {
    One(AnySubscriber),
    Multi(Box<resolve::MultiSubscriber>),
}

/// Receives messages of one topic, in order, through `poll`.
#[derive(Debug)]
pub struct Subscriber {
    inner: SubscriberInner,
    idle: Idle,
    topic: String,
    /// This subscriber's values in the context's counters file (see [`stat`]).
    stat: Record,
    /// Messages were delivered since the values were last written.
    stat_dirty: bool,
    /// Polls that delivered since the values were last written.
    stat_polls: u32,
    /// Polls in a row that found nothing since messages were delivered.
    stat_empty: u32,
}

impl Subscriber {
    /// Calls `handler` for up to `limit` messages and returns how many. Never blocks. The
    /// message borrows the transport's buffer (shared memory in place, on `ipc` with
    /// back-pressure; the receive buffer on the network transports) and is valid only during
    /// the call.
    #[inline(always)]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, handler: &mut F, limit: usize) -> usize {
        let n = match &mut self.inner {
            SubscriberInner::One(AnySubscriber::Ipc(s)) => s.poll(handler, limit),
            other => cold_poll(other, handler, limit),
        };
        self.count(n);
        n
    }

    /// The counters file's cadence (see [`stat`]): write the values while waiting, or every
    /// [`stat::SUBSCRIBER_EVERY_POLLS`] polls that delivered.
    #[inline(always)]
    fn count(&mut self, delivered: usize) {
        if delivered > 0 {
            self.stat_dirty = true;
            self.stat_empty = 0;
            self.stat_polls += 1;
            if self.stat_polls >= stat::SUBSCRIBER_EVERY_POLLS {
                self.publish_counters();
            }
        } else if self.stat_dirty {
            // Only once it has been waiting a while: a subscriber keeping up with a fast
            // publisher finds nothing every other poll, and writing the values on each of
            // those cost the IPC 32 B throughput about a tenth.
            self.stat_empty += 1;
            if self.stat_empty >= stat::SUBSCRIBER_EVERY_POLLS {
                self.publish_counters();
            }
        }
    }

    /// Writes every value to the counters file.
    #[cold]
    #[inline(never)]
    fn publish_counters(&mut self) {
        self.stat_dirty = false;
        self.stat_polls = 0;
        self.stat_empty = 0;
        let v = self.counters().values();
        self.stat.set_all(v);
        let sources = match &self.inner {
            SubscriberInner::One(s) => s.is_connected() as u64,
            SubscriberInner::Multi(s) => s.source_count() as u64,
        };
        self.stat.set(v.len(), sources);
    }

    /// Applies the idle strategy after a poll that returned `work_count` messages: spin, yield,
    /// back off, or block (a futex on `ipc`, `poll(2)` on the socket otherwise).
    #[inline]
    pub fn idle(&mut self, work_count: usize) {
        // A strategy that may sleep or block writes the values first (it may not poll again
        // for a long time).
        if work_count == 0
            && self.stat_dirty
            && matches!(self.idle.kind(), IdleKind::Backoff | IdleKind::Block)
        {
            self.publish_counters();
        }
        let idle = &mut self.idle;
        match &mut self.inner {
            SubscriberInner::One(s) => s.idle(work_count, idle),
            SubscriberInner::Multi(s) => idle.idle(work_count, &mut **s),
        }
    }

    /// Like [`poll`](Self::poll), with the topic of each message: for subscribers by pattern,
    /// whose messages come from several topics.
    pub fn poll_topic<F: FnMut(&str, Message<'_>)>(
        &mut self,
        handler: &mut F,
        limit: usize,
    ) -> usize {
        let n = match &mut self.inner {
            SubscriberInner::Multi(s) => s.poll(handler, limit),
            other => {
                let topic = &self.topic;
                cold_poll(other, &mut |m| handler(topic, m), limit)
            }
        };
        self.count(n);
        n
    }

    /// The next connection, loss or resolution event, if any.
    pub fn next_event(&mut self) -> Option<SubscriberEvent> {
        let e = match &mut self.inner {
            SubscriberInner::One(s) => s.next_event(),
            SubscriberInner::Multi(s) => s.next_event(),
        };
        if e.is_some() {
            self.publish_counters();
        }
        e
    }

    /// The socket a subscriber on a `udp://` or `mcast://` URI receives on, for a driver
    /// that waits on many sources in its own `epoll` instead of [`idle`](Self::idle): it
    /// turns readable when datagrams arrive. Keep calling [`poll`](Self::poll) every few
    /// milliseconds while a session is live (loss repair and keep-alives run in it), and
    /// after a wake-up until it returns less than its limit. `None` for shared memory, TCP
    /// and subscribers by pattern: poll those on a timer.
    pub fn readable_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.inner {
            SubscriberInner::One(s) => s.readable_fd(),
            SubscriberInner::Multi(_) => None,
        }
    }

    pub fn is_connected(&self) -> bool {
        match &self.inner {
            SubscriberInner::One(s) => s.is_connected(),
            SubscriberInner::Multi(s) => s.is_connected(),
        }
    }
    pub fn counters(&self) -> SubscriberCounters {
        match &self.inner {
            SubscriberInner::One(s) => s.counters(),
            SubscriberInner::Multi(s) => s.counters(),
        }
    }
    /// The sources a subscriber by pattern follows now: (session id, topic, URI).
    pub fn sources(&self) -> Vec<(u32, String, String)> {
        match &self.inner {
            SubscriberInner::One(_) => Vec::new(),
            SubscriberInner::Multi(s) => s.sources(),
        }
    }
    /// How a subscriber by pattern admitted the sources topic resolution found: transports
    /// open, those still waiting for a first frame, sources waiting for one of those, and what
    /// was refused (sources of a pinned topic advertised elsewhere, transports that stayed
    /// silent, sources dropped from the wait).
    pub fn source_admission(&self) -> Option<SourceAdmission> {
        match &self.inner {
            SubscriberInner::One(_) => None,
            SubscriberInner::Multi(s) => Some(s.source_admission()),
        }
    }
    /// What the context's resolver counted, for a subscriber by pattern.
    pub fn resolver_counters(&self) -> Option<ResolverCounters> {
        match &self.inner {
            SubscriberInner::One(_) => None,
            SubscriberInner::Multi(s) => Some(s.resolver_counters()),
        }
    }
    /// The counters of each publisher session followed now, by session id (on shared memory,
    /// the one session).
    pub fn session_counters(&self) -> Vec<(u32, SubscriberCounters)> {
        match &self.inner {
            SubscriberInner::One(s) => s.session_counters(),
            SubscriberInner::Multi(s) => s.session_counters(),
        }
    }
    /// What the test loss generator (`loss=`, `PEREGRINE_LOSS`) saw and dropped, if one runs.
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match &self.inner {
            SubscriberInner::One(s) => s.loss_counters(),
            SubscriberInner::Multi(_) => None,
        }
    }
    /// Starts recording, on UDP and multicast, how long each repaired frame was missing (from
    /// the gap's detection to the frame's arrival); see
    /// [`take_recovery_ns`](Self::take_recovery_ns).
    pub fn record_recovery(&mut self) {
        if let SubscriberInner::One(s) = &mut self.inner {
            s.record_recovery();
        }
    }
    /// The recovery times recorded since the last call, in nanoseconds.
    pub fn take_recovery_ns(&mut self) -> Vec<u64> {
        match &mut self.inner {
            SubscriberInner::One(s) => s.take_recovery_ns(),
            SubscriberInner::Multi(_) => Vec::new(),
        }
    }
    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn idle_kind(&self) -> IdleKind {
        self.idle.kind()
    }
}
