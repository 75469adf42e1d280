//! The relay behind `peregrine resolverd`, sans I/O: topic resolution for networks without
//! multicast (Ultra Messaging's lbmrd is the model).
//!
//! Clients send their resolver datagrams (ADVERTISE and QUERY frames) to the daemon instead of
//! a multicast group. Any valid datagram registers its sender; the relay forwards it to every
//! other registered client. A client with nothing to say sends a *keepalive*: a datagram of one
//! HEARTBEAT frame whose `stream_id` is 0 and whose `session_id` is the client's context id.
//! Clients silent for `client_timeout_ns` are dropped.
//!
//! The relay checks every frame before forwarding, so one bad client cannot make the daemon
//! send garbage to all others: a datagram with any malformed or unexpected frame is dropped
//! whole and counted, and it does not register its sender.

use peregrine_wire::advertise::{AdvertiseFrame, AdvertiseRepr};
use peregrine_wire::header::{FrameType, Frames};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr, HEARTBEAT_LEN};
use peregrine_wire::query::{QueryFrame, QueryRepr};
use peregrine_wire::WireError;
use std::collections::HashMap;
use std::net::SocketAddr;

/// The relay's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayConfig {
    /// A client silent this long is dropped (default 15 s: three keepalive intervals).
    pub client_timeout_ns: u64,
    /// Most clients registered at once (default 4096); datagrams from new clients beyond it
    /// are dropped and counted.
    pub max_clients: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            client_timeout_ns: 15_000_000_000,
            max_clients: 4096,
        }
    }
}

/// How often a client sends a keepalive when it has sent nothing else (5 s).
pub const KEEPALIVE_INTERVAL_NS: u64 = 5_000_000_000;

/// The keepalive a client sends to the daemon.
pub fn keepalive(context_id: u32) -> [u8; HEARTBEAT_LEN] {
    let mut b = [0u8; HEARTBEAT_LEN];
    HeartbeatRepr {
        session_id: context_id,
        stream_id: 0,
        next_sequence: 0,
        oldest_retained: 0,
    }
    .emit(&mut HeartbeatFrame::new_unchecked(&mut b[..]));
    b
}

/// What to do with a datagram.
// Not #[non_exhaustive]: the daemon's loop acts on each verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it to every other client ([`Relay::destinations`]).
    Forward,
    /// A keepalive: the sender is registered, nothing to forward.
    Keepalive,
    /// Dropped (counted).
    Rejected,
}

/// What the relay counted. Field names are stable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayCounters {
    pub datagrams_received: u64,
    pub datagrams_forwarded: u64,
    /// Copies sent: a forwarded datagram counts once per destination.
    pub copies_sent: u64,
    pub keepalives: u64,
    /// Datagrams dropped for a malformed frame, by [`WireError::index`].
    pub malformed: [u64; WireError::KINDS],
    /// Datagrams dropped for a well-formed frame of a type the resolver does not use.
    pub unexpected_frames: u64,
    /// Datagrams from new clients dropped because the table was full.
    pub table_full: u64,
    pub clients_registered: u64,
    pub clients_expired: u64,
}

impl RelayCounters {
    /// Every datagram dropped: malformed, unexpected, or from a client beyond the table.
    pub fn rejected(&self) -> u64 {
        self.malformed.iter().sum::<u64>() + self.unexpected_frames + self.table_full
    }
}

#[derive(Debug)]
struct Client {
    last_ns: u64,
}

/// The daemon's table of clients.
#[derive(Debug)]
pub struct Relay {
    cfg: RelayConfig,
    clients: HashMap<SocketAddr, Client>,
    counters: RelayCounters,
    next_expiry_ns: u64,
}

impl Relay {
    pub fn new(cfg: RelayConfig) -> Self {
        Relay {
            cfg,
            clients: HashMap::new(),
            counters: RelayCounters::default(),
            next_expiry_ns: u64::MAX,
        }
    }

    pub fn counters(&self) -> RelayCounters {
        self.counters
    }
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Checks a datagram from `from`, registers or refreshes its sender, and says what to do.
    pub fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8], now_ns: u64) -> Verdict {
        self.counters.datagrams_received += 1;
        let verdict = match classify(datagram) {
            Ok(v) => v,
            Err(Some(e)) => {
                self.counters.malformed[e.index()] += 1;
                return Verdict::Rejected;
            }
            Err(None) => {
                self.counters.unexpected_frames += 1;
                return Verdict::Rejected;
            }
        };
        match self.clients.get_mut(&from) {
            Some(c) => c.last_ns = now_ns,
            None => {
                if self.clients.len() >= self.cfg.max_clients {
                    self.counters.table_full += 1;
                    return Verdict::Rejected;
                }
                self.clients.insert(from, Client { last_ns: now_ns });
                self.counters.clients_registered += 1;
            }
        }
        self.next_expiry_ns = self
            .next_expiry_ns
            .min(now_ns.saturating_add(self.cfg.client_timeout_ns));
        match verdict {
            Verdict::Forward => {
                self.counters.datagrams_forwarded += 1;
                self.counters.copies_sent += self.clients.len() as u64 - 1;
            }
            Verdict::Keepalive => self.counters.keepalives += 1,
            Verdict::Rejected => {}
        }
        verdict
    }

    /// Every registered client but `from`.
    pub fn destinations(&self, from: SocketAddr) -> impl Iterator<Item = SocketAddr> + '_ {
        self.clients.keys().copied().filter(move |a| *a != from)
    }

    /// When the next client may expire.
    pub fn poll_timeout(&self) -> Option<u64> {
        (self.next_expiry_ns != u64::MAX).then_some(self.next_expiry_ns)
    }

    /// Drops the clients silent for `client_timeout_ns`; returns them.
    pub fn handle_timeout(&mut self, now_ns: u64) -> Vec<SocketAddr> {
        if now_ns < self.next_expiry_ns {
            return Vec::new();
        }
        let timeout = self.cfg.client_timeout_ns;
        let gone: Vec<SocketAddr> = self
            .clients
            .iter()
            .filter(|(_, c)| now_ns.saturating_sub(c.last_ns) >= timeout)
            .map(|(a, _)| *a)
            .collect();
        for a in &gone {
            self.clients.remove(a);
        }
        self.counters.clients_expired += gone.len() as u64;
        self.next_expiry_ns = self
            .clients
            .values()
            .map(|c| c.last_ns.saturating_add(timeout))
            .min()
            .unwrap_or(u64::MAX);
        gone
    }
}

/// `Ok(Forward)` for a datagram of valid ADVERTISE and QUERY frames, `Ok(Keepalive)` for one
/// keepalive, `Err(Some(e))` for a malformed frame, `Err(None)` for anything else.
fn classify(datagram: &[u8]) -> Result<Verdict, Option<WireError>> {
    let mut frames = 0usize;
    let mut keepalive = false;
    for frame in Frames::new(datagram) {
        let (ty, bytes) = frame.map_err(Some)?;
        frames += 1;
        match ty {
            FrameType::Advertise => {
                AdvertiseRepr::parse(&AdvertiseFrame::new_unchecked(bytes)).map_err(Some)?;
            }
            FrameType::Query => {
                QueryRepr::parse(&QueryFrame::new_unchecked(bytes)).map_err(Some)?;
            }
            FrameType::Heartbeat => {
                let hb =
                    HeartbeatRepr::parse(&HeartbeatFrame::new_unchecked(bytes)).map_err(Some)?;
                if hb.stream_id != 0 {
                    return Err(None);
                }
                keepalive = true;
            }
            _ => return Err(None),
        }
    }
    match (frames, keepalive) {
        (0, _) => Err(Some(WireError::Truncated {
            needed: peregrine_wire::header::HEADER_LEN,
            available: 0,
        })),
        (1, true) => Ok(Verdict::Keepalive),
        (_, true) => Err(None),
        _ => Ok(Verdict::Forward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolver::{Resolver, ResolverConfig};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    fn advert() -> Vec<u8> {
        let mut r = Resolver::new(ResolverConfig::new(9));
        r.advertise("md.eq.X", 5, &["udp://10.0.0.1:1".into()], 0)
            .unwrap();
        let mut buf = [0u8; 1472];
        let n = r.poll_transmit(0, &mut buf).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn forwards_to_every_other_client_and_registers_senders() {
        let mut relay = Relay::new(RelayConfig::default());
        assert_eq!(
            relay.on_datagram(addr(1), &keepalive(1), 0),
            Verdict::Keepalive
        );
        assert_eq!(
            relay.on_datagram(addr(2), &keepalive(2), 0),
            Verdict::Keepalive
        );
        assert_eq!(relay.on_datagram(addr(3), &advert(), 0), Verdict::Forward);
        let mut to: Vec<_> = relay.destinations(addr(3)).collect();
        to.sort();
        assert_eq!(to, [addr(1), addr(2)]);
        let c = relay.counters();
        assert_eq!(
            (c.keepalives, c.datagrams_forwarded, c.copies_sent),
            (2, 1, 2)
        );
        assert_eq!(c.clients_registered, 3);
    }

    #[test]
    fn bad_datagrams_are_dropped_whole_counted_and_do_not_register() {
        let mut relay = Relay::new(RelayConfig::default());
        let good = advert();
        // A good frame followed by a truncated one.
        let mut two = good.clone();
        two.resize(peregrine_wire::align_frame(good.len()), 0);
        two.extend_from_slice(&good[..20]);
        assert_eq!(relay.on_datagram(addr(1), &two, 0), Verdict::Rejected);
        // An unknown version.
        let mut v = good.clone();
        v[6] = 9;
        assert_eq!(relay.on_datagram(addr(1), &v, 0), Verdict::Rejected);
        // A keepalive with a stream id, and a keepalive packed with an advertisement.
        let mut hb = keepalive(1);
        hb[16] = 1;
        assert_eq!(relay.on_datagram(addr(1), &hb, 0), Verdict::Rejected);
        let mut mixed = good.clone();
        mixed.resize(peregrine_wire::align_frame(good.len()), 0);
        mixed.extend_from_slice(&keepalive(1));
        assert_eq!(relay.on_datagram(addr(1), &mixed, 0), Verdict::Rejected);
        assert_eq!(relay.on_datagram(addr(1), &[], 0), Verdict::Rejected);
        assert_eq!(relay.clients(), 0);
        let c = relay.counters();
        assert_eq!(
            c.malformed[WireError::Truncated {
                needed: 0,
                available: 0
            }
            .index()],
            2
        );
        assert_eq!(c.malformed[WireError::UnsupportedVersion(0).index()], 1);
        assert_eq!(c.unexpected_frames, 2);
    }

    #[test]
    fn silent_clients_expire_and_the_table_is_bounded() {
        let cfg = RelayConfig {
            client_timeout_ns: 1_000,
            max_clients: 2,
        };
        let mut relay = Relay::new(cfg);
        relay.on_datagram(addr(1), &keepalive(1), 0);
        relay.on_datagram(addr(2), &keepalive(2), 500);
        assert_eq!(
            relay.on_datagram(addr(3), &keepalive(3), 600),
            Verdict::Rejected
        );
        assert_eq!(relay.counters().table_full, 1);
        assert_eq!(relay.poll_timeout(), Some(1_000));
        assert_eq!(relay.handle_timeout(999), Vec::<SocketAddr>::new());
        assert_eq!(relay.handle_timeout(1_000), [addr(1)]);
        assert_eq!(relay.poll_timeout(), Some(1_500));
        assert_eq!(
            relay.on_datagram(addr(3), &keepalive(3), 1_200),
            Verdict::Keepalive
        );
        assert_eq!(relay.handle_timeout(1_500), [addr(2)]);
        assert_eq!(relay.clients(), 1);
        assert_eq!(relay.counters().clients_expired, 2);
    }
}
