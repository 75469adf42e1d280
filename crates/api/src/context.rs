//! [`Context`]: one process's handle, its configuration and resolver, and the factory of
//! publishers and subscribers by topic or by URI.

use crate::config::{Config, ConfigError};
use crate::publisher::{Publisher, PublisherInner, PUBLISHER_SUBSCRIBERS};
use crate::subscriber::{Subscriber, SubscriberInner, SUBSCRIBER_SOURCES};
use crate::{config, resolve, stat};
use peregrine_agent::{Idle, IdleKind};
use peregrine_proto::resolver::{Pattern, ResolverCounters};
use peregrine_transport::net::NetConfig;
use peregrine_transport::stat::{Record, RecordType, ValueKind};
use peregrine_transport::{
    AnyPublisher, AnySubscriber, OpenError, PublisherCounters, Scheme, SubscriberCounters, Uri,
};

/// One process's handle: configuration, topic resolution, and the factory of publishers and
/// subscribers. Clones share one resolver.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub(super) config: Config,
    pub(super) resolver: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<resolve::Handle>>>>,
    pub(super) counters: stat::ContextCounters,
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
    /// them as [`SubscriberEvent::SourceFound`](crate::SubscriberEvent::SourceFound) and [`SubscriberEvent::SourceLost`](crate::SubscriberEvent::SourceLost).
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
pub(super) fn with_address(uri: &Uri, address: &str) -> String {
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
pub(super) fn with_param(uri: &str, key: &str, value: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{key}={value}")
}

/// The stream id a topic name maps to inside a session (FNV-1a of the name).
pub fn stream_id(topic: &str) -> u32 {
    peregrine_proto::resolver::stream_id_of(topic)
}
