//! The relay behind `peregrine resolverd`, sans I/O: topic resolution for networks without
//! multicast (Ultra Messaging's lbmrd is the model).
//!
//! Clients send their resolver datagrams (ADVERTISE and QUERY frames) to the daemon instead of
//! a multicast group; the relay forwards each to every other registered client. A client with
//! nothing to say sends a *keepalive*: one HEARTBEAT frame whose `stream_id` is 0 and whose
//! `session_id` is the client's context id. Clients silent for `client_timeout_ns` are dropped.
//!
//! **Proof of address.** A relay that registered whoever sent it a datagram would send copies
//! of every advertisement to any address an attacker wrote as the source of one (an
//! amplifier), and could be filled with fake clients. So every datagram a client sends starts
//! with a COOKIE frame (docs/protocol.md §11a) echoing the cookie the daemon gave that address,
//! as QUIC's Retry and DTLS's HelloVerifyRequest do:
//!
//! - the cookie is a keyed BLAKE3 hash of the source address and a one-minute time bucket under
//!   a random per-daemon secret; one is valid in its minute and the next;
//! - a datagram whose cookie is not valid for its source is answered with one COOKIE frame
//!   holding a valid cookie ([`Verdict::Challenge`]): 32 bytes, never more than the datagram
//!   (which starts with a 32-byte COOKIE frame itself), and the daemon keeps no state for it;
//! - only a datagram with a valid cookie registers or refreshes its sender, and only registered
//!   clients receive copies; a cookie from the previous minute is still accepted and answered
//!   with a fresh one, so a live client never sees a datagram refused;
//! - the COOKIE frame is stripped from what is relayed ([`forwarded`]).
//!
//! **Bounds.** At most `max_clients` (4096) clients, at most `max_clients_per_ip` (64) from one
//! IP address. A new client from an address at its quota, or arriving at a full table, takes
//! the place of the client silent the longest if that one has been silent more than one and a
//! half keepalive intervals (idle: alive clients speak at least every 5 s); otherwise it is
//! refused and counted.
//!
//! The relay checks every frame before forwarding, so one bad client cannot make the daemon
//! send garbage to all others: a datagram with any malformed or unexpected frame is dropped
//! whole and counted, and it neither registers its sender nor earns it a cookie.

use crate::counters::counters;
use peregrine_wire::advertise::{AdvertiseFrame, AdvertiseRepr};
use peregrine_wire::auth::{AuthFrame, AuthRepr};
use peregrine_wire::cookie::{CookieFrame, CookieRepr, COOKIE_BYTES, COOKIE_LEN};
use peregrine_wire::header::{FrameType, Frames, Header};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr, HEARTBEAT_LEN};
use peregrine_wire::query::{QueryFrame, QueryRepr};
use peregrine_wire::WireError;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// The relay's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayConfig {
    /// A client silent this long is dropped (default 15 s: three keepalive intervals).
    pub client_timeout_ns: u64,
    /// Most clients registered at once (default 4096).
    pub max_clients: usize,
    /// Most clients registered from one IP address (default 64).
    pub max_clients_per_ip: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            client_timeout_ns: 15_000_000_000,
            max_clients: 4096,
            max_clients_per_ip: 64,
        }
    }
}

/// How often a client sends a keepalive when it has sent nothing else (5 s).
pub const KEEPALIVE_INTERVAL_NS: u64 = 5_000_000_000;

/// A client silent this long (one and a half keepalive intervals) may give its place to a new
/// one.
pub const IDLE_NS: u64 = KEEPALIVE_INTERVAL_NS * 3 / 2;

/// A cookie is made for a time bucket of this length and accepted in it and the next.
pub const COOKIE_PERIOD_NS: u64 = 60_000_000_000;

/// The keepalive a client sends to the daemon (after its COOKIE frame).
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

/// The COOKIE frame carrying `cookie`, as the daemon answers and as a client starts its
/// datagrams.
pub fn cookie_frame(cookie: &[u8; COOKIE_BYTES]) -> [u8; COOKIE_LEN] {
    let mut b = [0u8; COOKIE_LEN];
    CookieRepr { cookie: *cookie }.emit(&mut CookieFrame::new_unchecked(&mut b[..]));
    b
}

/// The cookie in a datagram that is exactly one COOKIE frame (the daemon's answer), if it is.
pub fn cookie_answer(datagram: &[u8]) -> Option<[u8; COOKIE_BYTES]> {
    (datagram.len() == COOKIE_LEN)
        .then(|| CookieRepr::parse(&CookieFrame::new_unchecked(datagram)).ok())
        .flatten()
        .map(|c| c.cookie)
}

/// What the daemon relays of a datagram it was told to [`Verdict::Forward`]: everything after
/// the leading COOKIE frame.
pub fn forwarded(datagram: &[u8]) -> &[u8] {
    &datagram[COOKIE_LEN.min(datagram.len())..]
}

/// What to do with a datagram.
// Not #[non_exhaustive]: the daemon's loop acts on each verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send [`forwarded`]`(datagram)` to every other client ([`Relay::destinations`]); with
    /// `refresh_cookie`, also send the sender [`Relay::cookie_for`] (its cookie is from the
    /// previous minute).
    Forward { refresh_cookie: bool },
    /// A keepalive: the sender is registered, nothing to forward (cookie: as for `Forward`).
    Keepalive { refresh_cookie: bool },
    /// The sender has not proved its address: send it [`Relay::cookie_for`] and nothing else.
    Challenge,
    /// Dropped (counted).
    Rejected,
}

counters! {
/// What the relay counted. Field names are stable.
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
    /// Datagrams dropped for not starting with a COOKIE frame.
    pub missing_cookie: u64,
    /// Datagrams answered with a cookie instead of being relayed (the cookie was missing, made
    /// for another address, or too old).
    pub challenges: u64,
    /// Fresh cookies sent to clients whose cookie was from the previous minute.
    pub cookies_refreshed: u64,
    /// Datagrams from new clients dropped because the table was full of live clients.
    pub table_full: u64,
    /// Datagrams from new clients dropped because their IP address had its quota of live
    /// clients.
    pub ip_full: u64,
    /// Idle clients dropped to make room for new ones.
    pub clients_evicted: u64,
    pub clients_registered: u64,
    pub clients_expired: u64,
}
}

impl RelayCounters {
    /// Every datagram dropped: malformed, unexpected, without a cookie, or from a client beyond
    /// the table (challenged datagrams are not counted here: they were answered).
    pub fn rejected(&self) -> u64 {
        self.malformed.iter().sum::<u64>()
            + self.unexpected_frames
            + self.missing_cookie
            + self.table_full
            + self.ip_full
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
    /// The key of the cookies' hash: random per daemon.
    secret: [u8; 32],
    clients: HashMap<SocketAddr, Client>,
    /// The clients of each IP address (at most `max_clients_per_ip` each).
    per_ip: HashMap<IpAddr, Vec<SocketAddr>>,
    counters: RelayCounters,
    next_expiry_ns: u64,
    /// A full table found no idle client: none can be idle before this.
    no_idle_until_ns: u64,
}

impl Relay {
    /// A relay whose cookies are keyed with `secret` (32 random bytes the daemon draws at
    /// start: cookies do not survive a restart, and clients fetch new ones transparently).
    pub fn new(cfg: RelayConfig, secret: [u8; 32]) -> Self {
        Relay {
            cfg,
            secret,
            clients: HashMap::new(),
            per_ip: HashMap::new(),
            counters: RelayCounters::default(),
            next_expiry_ns: u64::MAX,
            no_idle_until_ns: 0,
        }
    }

    pub fn counters(&self) -> RelayCounters {
        self.counters
    }
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
    pub fn is_registered(&self, addr: SocketAddr) -> bool {
        self.clients.contains_key(&addr)
    }

    /// The cookie of `addr` for time bucket `bucket`.
    fn cookie(&self, addr: SocketAddr, bucket: u64) -> [u8; COOKIE_BYTES] {
        let mut input = [0u8; 26];
        let ip = match addr.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        input[..16].copy_from_slice(&ip);
        input[16..18].copy_from_slice(&addr.port().to_le_bytes());
        input[18..26].copy_from_slice(&bucket.to_le_bytes());
        let h = blake3::keyed_hash(&self.secret, &input);
        let mut c = [0u8; COOKIE_BYTES];
        c.copy_from_slice(&h.as_bytes()[..COOKIE_BYTES]);
        c
    }

    /// The COOKIE frame to send `addr` at `now_ns` (after [`Verdict::Challenge`], or with a
    /// `refresh_cookie`).
    pub fn cookie_for(&self, addr: SocketAddr, now_ns: u64) -> [u8; COOKIE_LEN] {
        cookie_frame(&self.cookie(addr, now_ns / COOKIE_PERIOD_NS))
    }

    /// Checks a datagram from `from`, registers or refreshes its sender, and says what to do.
    pub fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8], now_ns: u64) -> Verdict {
        self.counters.datagrams_received += 1;
        let Some(cookie) = leading_cookie(datagram) else {
            self.counters.missing_cookie += 1;
            return Verdict::Rejected;
        };
        let keepalive = match classify(forwarded(datagram)) {
            Ok(k) => k,
            Err(Some(e)) => {
                self.counters.malformed[e.index()] += 1;
                return Verdict::Rejected;
            }
            Err(None) => {
                self.counters.unexpected_frames += 1;
                return Verdict::Rejected;
            }
        };
        let bucket = now_ns / COOKIE_PERIOD_NS;
        let refresh_cookie = if same(&cookie, &self.cookie(from, bucket)) {
            false
        } else if bucket > 0 && same(&cookie, &self.cookie(from, bucket - 1)) {
            self.counters.cookies_refreshed += 1;
            true
        } else {
            self.counters.challenges += 1;
            return Verdict::Challenge;
        };
        match self.clients.get_mut(&from) {
            Some(c) => c.last_ns = now_ns,
            None => {
                if !self.register(from, now_ns) {
                    return Verdict::Rejected;
                }
            }
        }
        self.next_expiry_ns = self
            .next_expiry_ns
            .min(now_ns.saturating_add(self.cfg.client_timeout_ns));
        if keepalive {
            self.counters.keepalives += 1;
            Verdict::Keepalive { refresh_cookie }
        } else {
            self.counters.datagrams_forwarded += 1;
            self.counters.copies_sent += self.clients.len() as u64 - 1;
            Verdict::Forward { refresh_cookie }
        }
    }

    /// Registers `from` (its address proved), making room by dropping an idle client of its
    /// IP address or of the table when needed; false when refused.
    fn register(&mut self, from: SocketAddr, now_ns: u64) -> bool {
        let ip = from.ip();
        let at_quota = self
            .per_ip
            .get(&ip)
            .is_some_and(|v| v.len() >= self.cfg.max_clients_per_ip);
        if at_quota {
            let idlest = self.per_ip[&ip]
                .iter()
                .copied()
                .min_by_key(|a| self.clients.get(a).map_or(0, |c| c.last_ns));
            match idlest {
                Some(a) if self.is_idle(a, now_ns) => self.evict(a),
                _ => {
                    self.counters.ip_full += 1;
                    return false;
                }
            }
        } else if self.clients.len() >= self.cfg.max_clients {
            if now_ns < self.no_idle_until_ns {
                self.counters.table_full += 1;
                return false;
            }
            let idlest = self
                .clients
                .iter()
                .min_by_key(|(_, c)| c.last_ns)
                .map(|(a, c)| (*a, c.last_ns));
            match idlest {
                Some((a, _)) if self.is_idle(a, now_ns) => self.evict(a),
                other => {
                    // Nobody can be idle before the quietest client has been quiet long enough.
                    self.no_idle_until_ns = other.map_or(0, |(_, t)| t.saturating_add(IDLE_NS));
                    self.counters.table_full += 1;
                    return false;
                }
            }
        }
        self.clients.insert(from, Client { last_ns: now_ns });
        self.per_ip.entry(ip).or_default().push(from);
        self.counters.clients_registered += 1;
        true
    }

    fn is_idle(&self, addr: SocketAddr, now_ns: u64) -> bool {
        self.clients
            .get(&addr)
            .is_some_and(|c| now_ns.saturating_sub(c.last_ns) > IDLE_NS)
    }

    fn evict(&mut self, addr: SocketAddr) {
        self.remove(addr);
        self.counters.clients_evicted += 1;
    }

    fn remove(&mut self, addr: SocketAddr) {
        self.clients.remove(&addr);
        if let Some(v) = self.per_ip.get_mut(&addr.ip()) {
            v.retain(|a| *a != addr);
            if v.is_empty() {
                self.per_ip.remove(&addr.ip());
            }
        }
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
            self.remove(*a);
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

/// Compares two cookies in time independent of where they differ.
fn same(a: &[u8; COOKIE_BYTES], b: &[u8; COOKIE_BYTES]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The cookie of the COOKIE frame a datagram must start with.
fn leading_cookie(datagram: &[u8]) -> Option<[u8; COOKIE_BYTES]> {
    let h = Header::new_checked(datagram).ok()?;
    if h.frame_type() != Ok(FrameType::Cookie) {
        return None;
    }
    CookieRepr::parse(&CookieFrame::new_unchecked(datagram))
        .ok()
        .map(|c| c.cookie)
}

/// `Ok(false)` for a datagram of valid ADVERTISE and QUERY frames, `Ok(true)` for one
/// keepalive, `Err(Some(e))` for a malformed frame, `Err(None)` for anything else.
///
/// A datagram of clients with a resolver key (`[resolver] auth`) ends with an AUTH frame: the
/// relay has no key, so it checks the frame's shape, not its tag (the receiving clients do),
/// and relays it with the rest. Nothing may follow it.
fn classify(datagram: &[u8]) -> Result<bool, Option<WireError>> {
    let mut frames = 0usize;
    let mut keepalive = false;
    let mut sealed = false;
    for frame in Frames::new(datagram) {
        let (ty, bytes) = frame.map_err(Some)?;
        if sealed {
            return Err(None);
        }
        if ty == FrameType::Auth {
            AuthRepr::parse(&AuthFrame::new_unchecked(bytes)).map_err(Some)?;
            sealed = true;
            continue;
        }
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
        (1, true) => Ok(true),
        (_, true) => Err(None),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolver::{Resolver, ResolverConfig};

    const SECRET: [u8; 32] = [7; 32];
    const S: u64 = 1_000_000_000;

    fn addr(ip: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, ip], port))
    }

    fn advert() -> Vec<u8> {
        let mut r = Resolver::new(ResolverConfig::new(9));
        r.advertise("md.eq.X", 5, &["udp://10.0.0.1:1".into()], 0)
            .unwrap();
        let mut buf = [0u8; 1472];
        let n = r.poll_transmit(0, &mut buf).unwrap();
        buf[..n].to_vec()
    }

    /// `frames` after a COOKIE frame holding `cookie`, as a client sends them.
    fn with_cookie(cookie: &[u8; COOKIE_BYTES], frames: &[u8]) -> Vec<u8> {
        let mut d = cookie_frame(cookie).to_vec();
        d.extend_from_slice(frames);
        d
    }

    /// A client's first contact: a keepalive without a cookie, the challenge, the echo.
    /// Returns the cookie it was given.
    fn register(relay: &mut Relay, from: SocketAddr, now_ns: u64) -> [u8; COOKIE_BYTES] {
        let first = with_cookie(&[0; 16], &keepalive(1));
        assert_eq!(relay.on_datagram(from, &first, now_ns), Verdict::Challenge);
        let answer = relay.cookie_for(from, now_ns);
        assert!(
            answer.len() <= first.len(),
            "never larger than what it sent"
        );
        let cookie = cookie_answer(&answer).expect("one COOKIE frame");
        assert_eq!(
            relay.on_datagram(from, &with_cookie(&cookie, &keepalive(1)), now_ns),
            Verdict::Keepalive {
                refresh_cookie: false
            }
        );
        cookie
    }

    #[test]
    fn forwards_to_every_other_client_and_registers_senders_that_proved_their_address() {
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let _ = register(&mut relay, addr(1, 1), 0);
        let _ = register(&mut relay, addr(2, 1), 0);
        let c3 = register(&mut relay, addr(3, 1), 0);
        let d = with_cookie(&c3, &advert());
        assert_eq!(
            relay.on_datagram(addr(3, 1), &d, 0),
            Verdict::Forward {
                refresh_cookie: false
            }
        );
        assert_eq!(
            forwarded(&d),
            &advert()[..],
            "the COOKIE frame is not relayed"
        );
        let mut to: Vec<_> = relay.destinations(addr(3, 1)).collect();
        to.sort();
        assert_eq!(to, [addr(1, 1), addr(2, 1)]);
        let c = relay.counters();
        assert_eq!(
            (c.keepalives, c.datagrams_forwarded, c.copies_sent),
            (3, 1, 2)
        );
        assert_eq!((c.clients_registered, c.challenges), (3, 3));
    }

    /// Clients with a resolver key seal every datagram: the relay, which has no key, relays an
    /// advertisement with its AUTH frame untouched, takes a sealed keepalive as a keepalive,
    /// and drops a datagram with anything after the AUTH frame.
    #[test]
    fn sealed_datagrams_are_relayed_whole_and_sealed_keepalives_kept() {
        let key = crate::auth::AuthKey::new([3; 32]);
        let seal = |frames: &[u8]| {
            let mut v = Vec::new();
            key.seal_into(frames, &mut v);
            v
        };
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let c1 = register(&mut relay, addr(1, 1), 0);
        let _ = register(&mut relay, addr(2, 1), 0);
        assert_eq!(
            relay.on_datagram(addr(1, 1), &with_cookie(&c1, &seal(&keepalive(1))), 0),
            Verdict::Keepalive {
                refresh_cookie: false
            }
        );
        let sealed = seal(&advert());
        let d = with_cookie(&c1, &sealed);
        assert_eq!(
            relay.on_datagram(addr(1, 1), &d, 0),
            Verdict::Forward {
                refresh_cookie: false
            }
        );
        assert_eq!(forwarded(&d), &sealed[..]);
        let opened = key.open(forwarded(&d)).expect("the tag still checks");
        assert_eq!(
            &opened[..advert().len()],
            &advert()[..],
            "then zero padding"
        );
        let mut trailing = sealed.clone();
        trailing.extend_from_slice(&advert());
        assert_eq!(
            relay.on_datagram(addr(1, 1), &with_cookie(&c1, &trailing), 0),
            Verdict::Rejected
        );
        assert_eq!(relay.counters().unexpected_frames, 1);
    }

    /// Issue 14, item 8: registrations from spoofed source addresses were accepted, and the
    /// daemon then sent copies of every datagram to them. A source that cannot read at its
    /// address never echoes a cookie: it is never registered, never gets a copy, and each of
    /// its datagrams earns at most one answer no larger than itself.
    #[test]
    fn a_spoofed_source_is_never_registered_and_is_never_sent_more_than_it_sent() {
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let listener = addr(1, 1);
        let cl = register(&mut relay, listener, 0);
        let victim = addr(66, 6);
        // Guessed cookies, a cookie of another address, an old daemon's cookie.
        let other = relay.cookie_for(listener, 0);
        let guesses: [[u8; 16]; 4] = [
            [0; 16],
            [0xff; 16],
            cookie_answer(&other).unwrap(),
            cookie_answer(&Relay::new(RelayConfig::default(), [8; 32]).cookie_for(victim, 0))
                .unwrap(),
        ];
        for (k, g) in guesses.iter().enumerate() {
            for d in [with_cookie(g, &keepalive(9)), with_cookie(g, &advert())] {
                assert_eq!(relay.on_datagram(victim, &d, k as u64), Verdict::Challenge);
                assert!(relay.cookie_for(victim, k as u64).len() < d.len());
            }
        }
        assert!(!relay.is_registered(victim));
        let d = with_cookie(&cl, &advert());
        assert!(matches!(
            relay.on_datagram(listener, &d, 10),
            Verdict::Forward { .. }
        ));
        assert_eq!(
            relay.destinations(listener).count(),
            0,
            "nothing for the victim"
        );
        // Datagrams without a COOKIE frame (as before this change) get nothing at all.
        assert_eq!(
            relay.on_datagram(victim, &keepalive(9), 11),
            Verdict::Rejected
        );
        assert_eq!(relay.on_datagram(victim, &advert(), 11), Verdict::Rejected);
        assert_eq!(relay.counters().missing_cookie, 2);
        assert_eq!(relay.clients(), 1);
    }

    #[test]
    fn a_cookie_lasts_its_minute_and_the_next_and_is_refreshed_in_the_second() {
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let a = addr(1, 1);
        let c = register(&mut relay, a, 10 * S);
        let ka = with_cookie(&c, &keepalive(1));
        assert_eq!(
            relay.on_datagram(a, &ka, 59 * S),
            Verdict::Keepalive {
                refresh_cookie: false
            }
        );
        assert_eq!(
            relay.on_datagram(a, &ka, 61 * S),
            Verdict::Keepalive {
                refresh_cookie: true
            }
        );
        let fresh = cookie_answer(&relay.cookie_for(a, 61 * S)).unwrap();
        assert_ne!(fresh, c);
        // Too old, even for a registered client: challenged (its address is proved anew).
        assert_eq!(relay.on_datagram(a, &ka, 121 * S), Verdict::Challenge);
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&fresh, &keepalive(1)), 121 * S),
            Verdict::Keepalive {
                refresh_cookie: true
            }
        );
        assert_eq!(relay.counters().cookies_refreshed, 2);
    }

    #[test]
    fn bad_datagrams_are_dropped_whole_counted_and_do_not_register() {
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let a = addr(1, 1);
        let c = relay.cookie(a, 0);
        let good = advert();
        // A good frame followed by a truncated one.
        let mut two = good.clone();
        two.resize(peregrine_wire::align_frame(good.len()), 0);
        two.extend_from_slice(&good[..20]);
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &two), 0),
            Verdict::Rejected
        );
        // An unknown version.
        let mut v = good.clone();
        v[6] = 9;
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &v), 0),
            Verdict::Rejected
        );
        // A keepalive with a stream id, and a keepalive packed with an advertisement.
        let mut hb = keepalive(1);
        hb[16] = 1;
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &hb), 0),
            Verdict::Rejected
        );
        let mut mixed = good.clone();
        mixed.resize(peregrine_wire::align_frame(good.len()), 0);
        mixed.extend_from_slice(&keepalive(1));
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &mixed), 0),
            Verdict::Rejected
        );
        // A cookie and nothing after it; a second cookie frame.
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &[]), 0),
            Verdict::Rejected
        );
        assert_eq!(
            relay.on_datagram(a, &with_cookie(&c, &cookie_frame(&c)), 0),
            Verdict::Rejected
        );
        assert_eq!(relay.on_datagram(a, &[], 0), Verdict::Rejected);
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
        assert_eq!((c.unexpected_frames, c.missing_cookie), (3, 1));
        assert_eq!(c.challenges, 0, "malformed datagrams earn no cookie");
    }

    #[test]
    fn silent_clients_expire_and_the_table_is_bounded() {
        let cfg = RelayConfig {
            client_timeout_ns: 20 * S,
            max_clients: 2,
            ..RelayConfig::default()
        };
        let mut relay = Relay::new(cfg, SECRET);
        let c1 = register(&mut relay, addr(1, 1), 0);
        let _ = register(&mut relay, addr(2, 1), 5 * S);
        // Both alive (heard within 7.5 s): a third is refused.
        let c3 = relay.cookie(addr(3, 1), 0);
        let ka3 = with_cookie(&c3, &keepalive(3));
        assert_eq!(
            relay.on_datagram(addr(3, 1), &ka3, 6 * S),
            Verdict::Rejected
        );
        assert_eq!(relay.counters().table_full, 1);
        // Until the quietest could be idle, refusals cost no scan; then 1 is idle: it goes.
        assert_eq!(
            relay.on_datagram(addr(3, 1), &ka3, 7 * S),
            Verdict::Rejected
        );
        assert!(matches!(
            relay.on_datagram(addr(3, 1), &ka3, 8 * S),
            Verdict::Keepalive { .. }
        ));
        assert_eq!(relay.counters().clients_evicted, 1);
        assert!(!relay.is_registered(addr(1, 1)));
        // 1 comes back (its cookie is still good): 2 is idle by now.
        assert!(matches!(
            relay.on_datagram(addr(1, 1), &with_cookie(&c1, &keepalive(1)), 13 * S),
            Verdict::Keepalive { .. }
        ));
        assert!(!relay.is_registered(addr(2, 1)));
        assert_eq!(relay.handle_timeout(27 * S), Vec::<SocketAddr>::new());
        assert_eq!(relay.poll_timeout(), Some(28 * S));
        assert_eq!(relay.handle_timeout(28 * S), [addr(3, 1)]);
        assert_eq!(relay.clients(), 1);
        assert_eq!(relay.counters().clients_expired, 1);
    }

    /// Issue 14, item 8: 4,096 fake clients kept alive filled the daemon and legitimate
    /// clients resolved nothing. A fake needs an address it reads at (a cookie), one IP address
    /// holds 64 at most, so the legitimate clients of other hosts still register.
    #[test]
    fn fake_clients_kept_alive_from_one_address_cannot_fill_the_table() {
        let mut relay = Relay::new(RelayConfig::default(), SECRET);
        let mut now = 0;
        let mut fakes = Vec::new();
        for port in 1..=4096u16 {
            let a = addr(66, port);
            let first = with_cookie(&[0; 16], &keepalive(u32::from(port)));
            if relay.on_datagram(a, &first, now) == Verdict::Challenge {
                let c = cookie_answer(&relay.cookie_for(a, now)).unwrap();
                let ka = with_cookie(&c, &keepalive(u32::from(port)));
                if matches!(relay.on_datagram(a, &ka, now), Verdict::Keepalive { .. }) {
                    fakes.push((a, ka));
                }
            }
        }
        assert_eq!(fakes.len(), 64);
        assert_eq!(relay.counters().ip_full, 4096 - 64);
        // They keep alive; legitimate clients on other hosts come and register.
        for k in 0..200u8 {
            now += S / 10;
            for (a, ka) in &fakes {
                relay.on_datagram(*a, ka, now);
            }
            let _ = register(&mut relay, SocketAddr::from(([10, 0, 1, k], 1000)), now);
        }
        assert_eq!(relay.clients(), 64 + 200);
    }

    /// A host whose clients come and go (restarts) is not locked out by the ones that left:
    /// an idle one makes room before a new one is refused.
    #[test]
    fn an_address_at_its_quota_makes_room_by_dropping_an_idle_client() {
        let cfg = RelayConfig {
            max_clients_per_ip: 2,
            ..RelayConfig::default()
        };
        let mut relay = Relay::new(cfg, SECRET);
        let _ = register(&mut relay, addr(1, 1), 0);
        let c2 = register(&mut relay, addr(1, 2), 0);
        let c3 = relay.cookie(addr(1, 3), 0);
        let ka3 = with_cookie(&c3, &keepalive(3));
        assert_eq!(relay.on_datagram(addr(1, 3), &ka3, S), Verdict::Rejected);
        assert_eq!(relay.counters().ip_full, 1);
        // 2 stays alive, 1 falls silent: at 8 s, 1 is idle and gives its place.
        relay.on_datagram(addr(1, 2), &with_cookie(&c2, &keepalive(2)), 5 * S);
        assert!(matches!(
            relay.on_datagram(addr(1, 3), &ka3, 8 * S),
            Verdict::Keepalive { .. }
        ));
        assert!(!relay.is_registered(addr(1, 1)) && relay.is_registered(addr(1, 2)));
    }
}
