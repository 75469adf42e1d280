//! The table of sources a context knows: local publications and remote advertisements, each
//! remote URI with its TTL; expiry, withdrawal and the bounds on what a peer can make it hold.

use super::{stream_id_of, Resolver, ResolverEvent, SubscriptionId};
use crate::scheme::Scheme;
use peregrine_wire::advertise::AdvertiseRepr;

/// The shortest TTL honoured: shorter ones are raised to it, so a peer cannot make this
/// context rescan its table every few microseconds.
pub const MIN_TTL_MS: u32 = 100;

/// What a remote source costs beyond its topic's bytes, for `max_source_bytes`: its entry in
/// the table, its `Source` and the vectors' headers (an estimate on the high side).
pub const SOURCE_COST_BYTES: usize = 128;
/// What one advertised URI costs beyond its bytes (its string header and expiry).
pub const URI_COST_BYTES: usize = 32;

/// What `src` costs, as `max_source_bytes` counts.
fn cost(src: &Source) -> usize {
    SOURCE_COST_BYTES
        + src.topic.len()
        + src
            .uris
            .iter()
            .map(|(u, _)| URI_COST_BYTES + u.len())
            .sum::<usize>()
}

/// A source as a subscriber learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    pub topic: String,
    pub session_id: u32,
    pub stream_id: u32,
    /// Every transport the publisher offers, in the order it advertised them.
    pub uris: Vec<String>,
    /// Published by this very context.
    pub local: bool,
}

/// Why a source went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// No advertisement arrived within its TTL.
    Expired,
    /// The publisher withdrew it (closed).
    Withdrawn,
}

impl LostReason {
    pub fn name(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Withdrawn => "withdrawn",
        }
    }
}

#[derive(Debug)]
pub(super) struct Source {
    pub(super) topic: String,
    /// (uri, expires_ns); local sources never expire.
    pub(super) uris: Vec<(String, u64)>,
    pub(super) local: bool,
    /// Subscriptions told of this source.
    pub(super) told: Vec<SubscriptionId>,
}

pub(super) type SourceKey = (u32, u32);

/// Whether `uri` is `SCHEME://ADDRESS` with a known scheme and an address.
pub(super) fn known_scheme(uri: &str) -> bool {
    match uri.split_once("://") {
        Some((scheme, rest)) => scheme.parse::<Scheme>().is_ok() && !rest.is_empty(),
        None => false,
    }
}

impl Resolver {
    /// Expires the remote sources whose TTL ran out by `now_ns`; called by
    /// [`poll_transmit`](Self::poll_transmit) too.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if now_ns < self.next_expiry_ns {
            return;
        }
        let mut next = u64::MAX;
        let mut gone = Vec::new();
        for (key, src) in self.sources.iter_mut() {
            if src.local {
                continue;
            }
            let before = cost(src);
            src.uris.retain(|(_, exp)| *exp > now_ns);
            self.remote_bytes -= before - cost(src);
            match src.uris.iter().map(|u| u.1).min() {
                Some(e) => next = next.min(e),
                None => gone.push(*key),
            }
        }
        self.next_expiry_ns = next;
        for key in gone {
            self.remove_source(key, LostReason::Expired, now_ns);
        }
    }

    /// Applies one advertisement; returns the key of a source it created.
    pub(super) fn on_advertise(
        &mut self,
        ad: &AdvertiseRepr<'_>,
        now_ns: u64,
    ) -> Option<SourceKey> {
        self.counters.advertisements_received += 1;
        let key = (ad.session_id, ad.stream_id);
        if let Some(src) = self.sources.get(&key) {
            if src.local {
                if src.topic == ad.topic && src.uris.iter().any(|u| u.0 == ad.uri) {
                    self.counters.own_frames += 1;
                } else {
                    self.counters.spoofed_own += 1;
                }
                return None;
            }
            if src.topic != ad.topic {
                self.counters.conflicts += 1;
                return None;
            }
        }
        if ad.stream_id != stream_id_of(ad.topic) {
            self.counters.bad_stream_id += 1;
            return None;
        }
        if !known_scheme(ad.uri) {
            self.counters.bad_uri += 1;
            return None;
        }
        if ad.ttl_ms > self.cfg.max_ttl_ms {
            self.counters.bad_ttl += 1;
            return None;
        }
        if ad.ttl_ms == 0 {
            if let Some(src) = self.sources.get_mut(&key) {
                let before = cost(src);
                src.uris.retain(|u| u.0 != ad.uri);
                self.remote_bytes -= before - cost(src);
                if src.uris.is_empty() {
                    self.counters.withdrawals_received += 1;
                    self.remove_source(key, LostReason::Withdrawn, now_ns);
                }
            }
            return None;
        }
        let expires_ns = now_ns.saturating_add(u64::from(ad.ttl_ms.max(MIN_TTL_MS)) * 1_000_000);
        self.next_expiry_ns = self.next_expiry_ns.min(expires_ns);
        let bytes_left = self.cfg.max_source_bytes.saturating_sub(self.remote_bytes);
        match self.sources.get_mut(&key) {
            Some(src) => {
                let room = src.uris.len() < Scheme::ALL.len() * 2;
                let uri_cost = URI_COST_BYTES + ad.uri.len();
                match src.uris.iter_mut().find(|u| u.0 == ad.uri) {
                    Some(u) => u.1 = expires_ns,
                    None if !room => self.counters.table_full += 1,
                    None if uri_cost > bytes_left => self.counters.table_bytes_full += 1,
                    None => {
                        src.uris.push((ad.uri.to_string(), expires_ns));
                        self.remote_bytes += uri_cost;
                    }
                }
                None
            }
            None => {
                if self.remote_sources >= self.cfg.max_sources {
                    self.counters.table_full += 1;
                    return None;
                }
                let source_cost =
                    SOURCE_COST_BYTES + ad.topic.len() + URI_COST_BYTES + ad.uri.len();
                if source_cost > bytes_left {
                    self.counters.table_bytes_full += 1;
                    return None;
                }
                self.remote_sources += 1;
                self.remote_bytes += source_cost;
                self.counters.sources_found += 1;
                self.sources.insert(
                    key,
                    Source {
                        topic: ad.topic.to_string(),
                        uris: vec![(ad.uri.to_string(), expires_ns)],
                        local: false,
                        told: Vec::new(),
                    },
                );
                Some(key)
            }
        }
    }

    pub(super) fn remove_source(&mut self, key: SourceKey, reason: LostReason, now_ns: u64) {
        let Some(src) = self.sources.remove(&key) else {
            return;
        };
        if !src.local {
            self.remote_sources -= 1;
            self.remote_bytes -= cost(&src);
            match reason {
                LostReason::Expired => self.counters.sources_expired += 1,
                LostReason::Withdrawn => self.counters.sources_withdrawn += 1,
            }
        }
        for id in src.told {
            let Some(sub) = self.subscriptions.get_mut(&id) else {
                continue;
            };
            sub.sources -= 1;
            let requery = sub.sources == 0 && !sub.pattern.is_wildcard();
            self.events.push_back(ResolverEvent::SourceLost {
                subscription: id,
                topic: src.topic.clone(),
                session_id: key.0,
                stream_id: key.1,
                reason,
            });
            if requery {
                // An exact name with no source left queries again, from a fresh schedule.
                self.start_queries(id, now_ns);
            }
        }
    }
}
