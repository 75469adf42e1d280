//! The distributor's settings, checked before it starts, and how its driver writes.

use super::entitle::SlowPolicy;
use super::errors::ConfigError;
use crate::codec::conflated::CONFLATED_LEN;
use crate::codec::header::MAX_MESSAGE_LEN;
use crate::dictionary::Dictionary;
use crate::model::check_service;
use std::sync::Arc;

/// The smallest `max_queue_bytes`: a conflated client that drained below half of it can
/// always be sent a CONFLATED and the largest image.
pub const MIN_QUEUE_BYTES: usize = 2 * (MAX_MESSAGE_LEN + CONFLATED_LEN);

/// How a distributor's driver writes to its clients (the core is the same for both). One
/// definition for the distributor, its command's `--mode` and `peregrine bench fanout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Writes to each client coalesced under a flush interval (or 64 KiB): the report's
    /// `timedWrites`.
    #[default]
    Throughput,
    /// Updates written as soon as they arrive, those that arrived together in one write.
    Latency,
}

impl WriteMode {
    pub const fn name(self) -> &'static str {
        match self {
            WriteMode::Throughput => "throughput",
            WriteMode::Latency => "latency",
        }
    }

    /// By name, or what is accepted.
    pub fn from_name(s: &str) -> Result<WriteMode, String> {
        match s {
            "throughput" => Ok(WriteMode::Throughput),
            "latency" => Ok(WriteMode::Latency),
            _ => Err(
                "throughput (writes coalesced under flush_interval_ms) or latency (each \
                      update written at once, TCP_NODELAY)"
                    .into(),
            ),
        }
    }
}

/// The distributor's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributorConfig {
    /// The services carried (each has its backbone topic `md.<service>`).
    pub services: Vec<String>,
    /// Items the cache holds at most; REFRESHes of new items past it are refused and counted.
    pub max_items: usize,
    /// Logged-in clients at most.
    pub max_clients: usize,
    /// Connections not logged in yet, at most, kept apart from the logged-in ones: past it the
    /// oldest is closed, so connections that never log in cannot keep honest ones out.
    pub max_pending_clients: usize,
    /// Connections (pending and logged in) from one address (IPv6: one /64) at most.
    pub max_clients_per_address: usize,
    /// Logged-in connections of one user at most.
    pub max_clients_per_user: usize,
    /// Accept LOGINs over plaintext from addresses other than loopback (their tokens cross the
    /// network in the clear): off unless the operator says so for a trusted network.
    pub allow_plaintext_logins: bool,
    /// Bound of each client's output queue, in bytes.
    pub max_queue_bytes: usize,
    /// What happens to a client past its bound (a user's `slow` overrides it).
    pub slow: SlowPolicy,
    /// Open requests per client.
    pub max_requests_per_client: usize,
    /// Names and globs held open per client.
    pub max_patterns_per_client: usize,
    /// Globs held open per client (each costs a pass over its service's items when opened,
    /// and a match against every new item): 256.
    pub max_globs_per_client: usize,
    /// Items watched per client.
    pub max_watch_per_client: usize,
    /// A connection that has not logged in after this long is refused.
    pub login_timeout_ns: u64,
    /// An image asked for is not asked for again before this long.
    pub image_retry_ns: u64,
    /// The oldest protocol version a LOGIN may use (2): version 1 clients have no liveness, so
    /// an idle one would hold its slot for ever; 1 accepts them.
    pub min_client_version: u16,
    /// The ping interval of a client that logs in with version 2 and asks for none (5 s).
    pub ping_interval_ns: u64,
    /// The shortest and longest intervals a client may ask for (1 s and 60 s): an interval
    /// asked for outside them is taken as the nearest. A client silent for three intervals is
    /// closed, so the longest bounds how long a dead one holds its slot.
    pub min_ping_interval_ns: u64,
    pub max_ping_interval_ns: u64,
    /// The field dictionary served to clients (DICTIONARY) and that posts' field types are
    /// checked against: the built-in one unless configured.
    pub dictionary: Arc<Dictionary>,
    /// How long a post forwarded to a provider may wait for its ACK before the client is
    /// told `timeout` (5 s).
    pub post_timeout_ns: u64,
    /// Posts of one connection waiting for their answer, at most (past it: `busy`).
    pub max_posts_per_client: usize,
    /// This distributor's id on the backbone: the `origin` of the posts it forwards, so that
    /// it takes only the ACKs of its own posts. Not 0; distributors of one backbone must not
    /// share one (the driver draws it at random).
    pub origin: u64,
    /// A/B feeds: how long an item waits for another feed to deliver the update one feed
    /// skipped ahead of (100 ms), before it goes stale and its image is asked for.
    pub feed_gap_window_ns: u64,
    /// A/B feeds: a feed's loss is covered by another live feed that had no loss within this
    /// long (5 s); otherwise the service goes stale and every image is asked for.
    pub feed_loss_overlap_ns: u64,
}

/// The shortest ping interval a distributor may be configured to allow.
pub const MIN_PING_INTERVAL_NS: u64 = 10_000_000;

impl DistributorConfig {
    /// Defaults for `services`: 1 M items, 1024 logged-in clients (256 more waiting to log in,
    /// 256 per address, 128 per user), 4 MiB queues that conflate, 10 s to log in, image
    /// requests repeated after 1 s, no plaintext logins but from loopback.
    pub fn new(services: &[&str]) -> Self {
        DistributorConfig {
            services: services.iter().map(|s| s.to_string()).collect(),
            max_items: 1_000_000,
            max_clients: 1024,
            max_pending_clients: 256,
            max_clients_per_address: 256,
            max_clients_per_user: 128,
            allow_plaintext_logins: false,
            max_queue_bytes: 4 << 20,
            slow: SlowPolicy::Conflate,
            max_requests_per_client: 1024,
            max_patterns_per_client: 10_000,
            max_globs_per_client: 256,
            max_watch_per_client: 100_000,
            login_timeout_ns: 10_000_000_000,
            image_retry_ns: 1_000_000_000,
            min_client_version: 2,
            ping_interval_ns: 5_000_000_000,
            min_ping_interval_ns: 1_000_000_000,
            max_ping_interval_ns: 60_000_000_000,
            dictionary: Arc::new(Dictionary::builtin()),
            post_timeout_ns: 5_000_000_000,
            max_posts_per_client: 256,
            origin: 1,
            feed_gap_window_ns: 100_000_000,
            feed_loss_overlap_ns: 5_000_000_000,
        }
    }

    /// The interval taken for a client asking for `asked_ms` (0: the default), in ms.
    pub fn ping_interval_for(&self, asked_ms: u32) -> u32 {
        let asked = if asked_ms == 0 {
            self.ping_interval_ns
        } else {
            u64::from(asked_ms) * 1_000_000
        };
        let ns = asked.clamp(self.min_ping_interval_ns, self.max_ping_interval_ns);
        u32::try_from(ns / 1_000_000).unwrap_or(u32::MAX).max(1)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.services.is_empty() {
            return Err(ConfigError::NoService);
        }
        if self.services.len() > usize::from(u16::MAX) {
            return Err(ConfigError::Zero("services (at most 65535)"));
        }
        for (i, s) in self.services.iter().enumerate() {
            check_service(s.as_bytes()).map_err(|e| ConfigError::BadService {
                name: s.clone(),
                problem: e.to_string(),
            })?;
            if self.services[..i].contains(s) {
                return Err(ConfigError::DuplicateService(s.clone()));
            }
        }
        if self.max_queue_bytes < MIN_QUEUE_BYTES {
            return Err(ConfigError::QueueTooSmall {
                max_queue_bytes: self.max_queue_bytes,
                min: MIN_QUEUE_BYTES,
            });
        }
        for (name, v) in [
            ("max_items", self.max_items),
            ("max_clients", self.max_clients),
            ("max_pending_clients", self.max_pending_clients),
            ("max_clients_per_address", self.max_clients_per_address),
            ("max_clients_per_user", self.max_clients_per_user),
            ("max_requests_per_client", self.max_requests_per_client),
            ("max_patterns_per_client", self.max_patterns_per_client),
            ("max_globs_per_client", self.max_globs_per_client),
            ("max_watch_per_client", self.max_watch_per_client),
            ("max_posts_per_client", self.max_posts_per_client),
            ("origin", usize::from(self.origin != 0)),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        for (key, ns, max_ms) in [
            ("feed_gap_window_ms", self.feed_gap_window_ns, 60_000),
            ("feed_loss_overlap_ms", self.feed_loss_overlap_ns, 3_600_000),
        ] {
            if !(1_000_000..=max_ms * 1_000_000).contains(&ns) {
                return Err(ConfigError::FeedWindow {
                    key,
                    ms: ns / 1_000_000,
                    max_ms,
                });
            }
        }
        if !(1_000_000..=3_600_000_000_000).contains(&self.post_timeout_ns) {
            return Err(ConfigError::PostTimeout {
                ms: self.post_timeout_ns / 1_000_000,
            });
        }
        let dictionary_bytes: usize = self.dictionary.encode().iter().map(Vec::len).sum();
        if dictionary_bytes > self.max_queue_bytes / 2 {
            return Err(ConfigError::DictionaryTooLarge {
                bytes: dictionary_bytes,
                max_queue_bytes: self.max_queue_bytes,
            });
        }
        if !(crate::codec::MIN_VERSION..=crate::codec::VERSION).contains(&self.min_client_version) {
            return Err(ConfigError::MinClientVersion(self.min_client_version));
        }
        let (min, default, max) = (
            self.min_ping_interval_ns,
            self.ping_interval_ns,
            self.max_ping_interval_ns,
        );
        if min < MIN_PING_INTERVAL_NS
            || !(min..=max).contains(&default)
            || max > u64::from(u32::MAX) * 1_000_000
        {
            return Err(ConfigError::PingIntervals {
                min_ms: min / 1_000_000,
                default_ms: default / 1_000_000,
                max_ms: max / 1_000_000,
            });
        }
        Ok(())
    }
}
