//! Settings of the network transports, read from URI parameters (which a configuration file
//! may supply defaults for). Every rejected value names the key, the value and what is accepted.
//!
//! | key | transports | default | meaning |
//! |-----|------------|---------|---------|
//! | `iface` | udp, mcast | mcast: `127.0.0.1`; udp: any | IPv4 address of the interface to send and join on (mcast), or to bind a subscriber to (udp) |
//! | `datagram` | udp, mcast | 1472 | datagram payload size in bytes (64 to 65000, a multiple of 8); messages above `datagram - 32` are fragmented. Datagrams never exceed the path MTU: a larger size fails with a message saying so. |
//! | `frame` | tcp | 65536 | largest frame on the stream; longer messages are fragmented |
//! | `mode` | all | `normal` | `urgent`: every message leaves at once; `normal`: batched |
//! | `batch_bytes` | all | 65000 | normal mode: send when this many bytes are batched (UDP: at most one GSO send, 65000) |
//! | `batch_interval_us` | all | 100 | normal mode: send when the oldest batched message waited this long (checked by `offer`, `flush` and `do_work`) |
//! | `sndbuf`, `rcvbuf` | all | 4m, 16m | socket buffer sizes (forced past the sysctl limit when running as root) |
//! | `ttl` | mcast | 1 | multicast TTL (0 to 255) |
//! | `b` | mcast | off | a second multicast group on the same port (the B line): the publisher sends every datagram (data, heartbeats, retransmissions, BYE) to both groups from one socket, the subscriber joins both and takes each frame from whichever copy comes first (the second is a duplicate), so losing either path loses nothing and needs no NAK. Both leave and arrive on `iface` |
//! | `loop` | mcast | 1 | multicast loopback (1: subscribers on the sending host receive) |
//! | `window` | udp, mcast | from `rcvbuf` | subscriber's flow-control window in frames; 0: none |
//! | `gso` | udp, mcast | 1 | publisher: use UDP GSO for batches (falls back to one send per datagram when the kernel refuses) |
//! | `gro` | udp, mcast | 1 | subscriber: turn UDP GRO on once datagrams queue up (four reads in a row of 32 or more), after which a GSO batch arrives in one buffer on loopback; until then (and with 0) each datagram is read with `recvfrom`, the cheapest read |
//! | `nak` | udp, mcast | 1 | subscriber: repair loss by NAK (0: report it as `Lost` at once) |
//! | `late_join` | udp, mcast | `start` | subscriber, on a session first heard mid-stream: `none` (start at the first message seen), `start` (from the session's first message when the stream began moments ago: first heard within 65 536 messages and the publisher still retains message 0; else as `none`), `all` (everything the publisher retains), or N (the last N messages); what is asked for and no longer retained is reported `Lost`. Takes effect with `nak=1` (the default); with `nak=0` every value acts as `none` |
//! | `retain`, `retain_ms` | udp, mcast | 16m, 10000 | publisher: sent datagrams kept for retransmission, by bytes and age (`retain_ms` 1 to 3600000). Keep `retain` at least the subscribers' window (a quarter of their `rcvbuf` by default), or frames a subscriber is still entitled to ask for can be gone. |
//! | `rate` | udp, mcast | 0 | publisher: data rate limit in bytes per second (suffixes k, m, g; 0: none); `offer` refuses with `BackPressured` beyond it |
//! | `retransmit_rate` | udp, mcast | 100m | publisher: retransmission rate limit in bytes per second (0: none) |
//! | `linger_ms` | udp, mcast | 1000 | publisher: on close, keep answering NAKs until every subscriber has confirmed the last message, at most this long |
//! | `loss` | udp, mcast | off | test loss generator: `1%`, or the compact form `rate=1%,seed=42,dir=recv,kinds=data+retransmit,burst=4` (see `peregrine_proto::lossgen`); also the `PEREGRINE_LOSS` environment variable |
//! | `timeout_ms` | udp, mcast (accepted on tcp, where the connection tells) | 5000 | a silent publisher is declared gone after this long; a UDP publisher drops a silent receiver after the larger of 2 s and half of it |
//! | `flow_timeout_ms` | udp, mcast, tcp | 1000 | publisher: longest a refused offer waits for one subscriber; past it a UDP receiver is dropped from flow control (it then repairs by NAK or reports an exact loss) and a TCP subscriber whose socket took nothing in that time is disconnected (it reconnects and is told exactly what it missed; one that reads, however slowly, is back-pressured instead); counted in `flow_dropped` |
//! | `max_pending` | tcp | 16m | bytes queued for one slow subscriber before `slow` applies |
//! | `slow` | tcp | `backpressure` | `backpressure`: `offer` refuses while a subscriber's queue is full (one whose socket took nothing for `flow_timeout_ms` is dropped); `disconnect`: drop that subscriber at once |
//! | `auth` | udp, mcast | off | the path of a key file: every datagram sent ends with an AUTH frame (a MAC under that pre-shared key) and every datagram received must carry a valid one, checked before anything else reads it ([`super::auth`]); `datagram` must then be at least 96 |
//! | `tls_cert`, `tls_key` | tcp | off | publisher: serve over TLS with this PEM certificate chain and its private key (mode 0600); subscriber: present them as its client certificate ([`crate::tls`]) |
//! | `tls_ca` | tcp | off | subscriber: connect over TLS, checking the publisher's certificate against this PEM CA; publisher: require a client certificate that chains to it |
//! | `tls_server_name` | tcp | the URI's address | subscriber: the name the publisher's certificate must carry |
//! | `xdp` | udp, mcast | off | kernel bypass: the name of the interface whose AF_XDP socket carries the stream's data (root, or CAP_NET_ADMIN and CAP_BPF). Same frames on the wire as without it; see [`super::xdp`] |
//! | `xdp_mode` | udp, mcast | `auto` | with `xdp=`: how the steering program attaches: `native` (the driver's hook, or an error), `generic` (any interface, slower), `auto` (native, else generic with a warning) |
//! | `xdp_queue` | udp, mcast | 0 | with `xdp=`: the receive queue the socket binds (steer the stream's packets to it on a multi-queue NIC) |
//! | `xdp_frames` | udp, mcast | 4096 | with `xdp=`: UMEM frames of 2048 bytes, a power of two from 64 to 1048576, half to receive, half to send |
//! | `mac` | udp, mcast | `blake3` | with `auth=`, the MAC this side seals with: `blake3`, or `hmac-sha256` for peers older than BLAKE3 (fast only where the CPU has the SHA extensions); a receiver checks either |

use crate::uri::{parse_bytes, Scheme, Uri, UriError};
use peregrine_proto::auth::AuthKey;
use peregrine_proto::join::JoinSchedule;
use peregrine_proto::lossgen::{LossConfig, LossConfigError};
use peregrine_proto::receiver::LateJoin;
use peregrine_proto::sender::SendMode;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::sync::Arc;

/// What a TCP publisher does with a subscriber whose queue passed `max_pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowPolicy {
    BackPressure,
    Disconnect,
}

/// Parsed settings of a `udp://`, `mcast://` or `tcp://` URI.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    pub scheme: Scheme,
    pub addr: SocketAddrV4,
    pub iface: Option<Ipv4Addr>,
    /// Datagram size (udp, mcast) or largest frame (tcp).
    pub segment_len: usize,
    pub mode: SendMode,
    pub sndbuf: usize,
    pub rcvbuf: usize,
    pub ttl: u32,
    pub loopback: bool,
    /// `None`: computed from the receive buffer.
    pub window: Option<u32>,
    pub gso: bool,
    pub gro: bool,
    /// Subscriber: repair loss by NAK.
    pub nak: bool,
    /// Subscriber: where a session first heard mid-stream starts.
    pub late_join: LateJoin,
    /// Publisher: bytes and age of sent datagrams kept for retransmission (0: none).
    pub retain_bytes: usize,
    pub retain_age_ns: u64,
    /// Publisher: data and retransmission rate limits, bytes per second (0: none).
    pub rate_bytes_per_s: u64,
    pub retransmit_rate_bytes_per_s: u64,
    /// Publisher: how long `close` waits for subscribers to confirm the last message.
    pub linger_ns: u64,
    /// The test loss generator (`None`: off).
    pub loss: Option<LossConfig>,
    pub timeout_ns: u64,
    /// Publisher: longest a refused offer waits for one subscriber (`flow_timeout_ms`).
    pub flow_timeout_ns: u64,
    pub max_pending: usize,
    pub slow: SlowPolicy,
    /// Subscriber: how JOINs (UDP) and connects (TCP) to a publisher that does not answer
    /// back off. Not a URI key (tests shorten it).
    pub join: JoinSchedule,
    /// `auth=`: the pre-shared key every datagram is signed and checked with (shared: the
    /// key's HMAC state is a few hundred bytes, and configurations are cloned).
    pub auth: Option<Arc<AuthKey>>,
    /// `tls_*` on `tcp://`.
    pub tls: Option<TcpTls>,
    /// mcast: the B line's group (same port as `addr`), when two paths carry the stream.
    pub path_b: Option<SocketAddrV4>,
    /// mcast: the B line's interface (`b_iface=`), when it is not `iface`: the publisher
    /// sends line B from a socket of its own on it, the subscriber joins group B on it.
    pub iface_b: Option<Ipv4Addr>,
    /// Kernel bypass (`xdp=IFNAME` and its `xdp_*` keys): the stream's data through AF_XDP.
    pub xdp: Option<crate::net::xdp::XdpConfig>,
}

/// `tls_*` on a `tcp://` URI, loaded: what a publisher serves with and what a subscriber
/// connects with (one URI may serve both sides, as the other parameters do).
#[derive(Debug, Clone)]
pub struct TcpTls {
    /// With `tls_cert` and `tls_key`: the publisher's (client certificates required when
    /// `tls_ca` is given too).
    pub server: Option<crate::tls::ServerTls>,
    /// With `tls_ca`: the subscriber's (its own certificate when `tls_cert` and `tls_key` are
    /// given, checked against `tls_server_name` or the URI's address).
    pub client: Option<crate::tls::ClientTls>,
    /// The parameters as given (for equality: sessions cannot be compared).
    given: String,
}

impl PartialEq for TcpTls {
    fn eq(&self, other: &Self) -> bool {
        self.given == other.given
    }
}

impl TcpTls {
    fn from_uri(uri: &Uri) -> Result<Option<TcpTls>, UriError> {
        let p = |k: &str| uri.param(k);
        let (cert, key, ca, name) = (
            p("tls_cert"),
            p("tls_key"),
            p("tls_ca"),
            p("tls_server_name"),
        );
        if cert.is_none() && key.is_none() && ca.is_none() && name.is_none() {
            return Ok(None);
        }
        if cert.is_some() != key.is_some() {
            return Err(uri.error(
                "tls_cert and tls_key go together: give both (the certificate and its private key), or neither",
            ));
        }
        if cert.is_none() && ca.is_none() {
            return Err(uri.error(
                "TLS needs tls_cert and tls_key (a publisher's certificate) or tls_ca (the CA a subscriber checks the publisher's certificate against)",
            ));
        }
        let tls_err = |e: crate::tls::TlsError| uri.error(e.to_string());
        let identity = cert
            .zip(key)
            .map(|(c, k)| (std::path::Path::new(c), std::path::Path::new(k)));
        let server = match identity {
            Some((c, k)) => Some(
                match ca {
                    Some(ca) => crate::tls::ServerTls::load_requiring_client_certificates(
                        c,
                        k,
                        std::path::Path::new(ca),
                    ),
                    None => crate::tls::ServerTls::load(c, k, None),
                }
                .map_err(tls_err)?,
            ),
            None => None,
        };
        let client = match ca {
            Some(ca) => {
                let mut t = crate::tls::ClientTls::load(std::path::Path::new(ca), identity)
                    .map_err(tls_err)?;
                if let Some(n) = name {
                    t = t.with_server_name(n).map_err(tls_err)?;
                }
                Some(t)
            }
            None => None,
        };
        Ok(Some(TcpTls {
            server,
            client,
            given: format!("{cert:?} {key:?} {ca:?} {name:?}"),
        }))
    }
}

impl NetConfig {
    pub const DEFAULT_DATAGRAM: usize = 1472;
    pub const DEFAULT_FRAME: usize = 65_536;
    /// One second: a live subscriber makes room in far less (it reports every quarter of its
    /// window), a stalled one costs the publisher and its shared-memory subscribers at most
    /// this.
    pub const DEFAULT_FLOW_TIMEOUT_NS: u64 = 1_000_000_000;

    /// Keys accepted per scheme.
    pub fn keys(scheme: Scheme) -> &'static [&'static str] {
        match scheme {
            Scheme::Udp => &[
                "iface",
                "datagram",
                "mode",
                "batch_bytes",
                "batch_interval_us",
                "sndbuf",
                "rcvbuf",
                "window",
                "gso",
                "gro",
                "timeout_ms",
                "nak",
                "late_join",
                "retain",
                "retain_ms",
                "rate",
                "retransmit_rate",
                "linger_ms",
                "loss",
                "flow_timeout_ms",
                "auth",
                "mac",
                "xdp",
                "xdp_mode",
                "xdp_queue",
                "xdp_frames",
            ],
            Scheme::Mcast => &[
                "iface",
                "datagram",
                "mode",
                "batch_bytes",
                "batch_interval_us",
                "sndbuf",
                "rcvbuf",
                "window",
                "gso",
                "gro",
                "timeout_ms",
                "ttl",
                "loop",
                "b",
                "b_iface",
                "nak",
                "late_join",
                "retain",
                "retain_ms",
                "rate",
                "retransmit_rate",
                "linger_ms",
                "loss",
                "flow_timeout_ms",
                "auth",
                "mac",
                "xdp",
                "xdp_mode",
                "xdp_queue",
                "xdp_frames",
            ],
            Scheme::Tcp => &[
                "frame",
                "mode",
                "batch_bytes",
                "batch_interval_us",
                "sndbuf",
                "rcvbuf",
                "timeout_ms",
                "max_pending",
                "slow",
                "flow_timeout_ms",
                "tls_cert",
                "tls_key",
                "tls_ca",
                "tls_server_name",
            ],
            // Not a network scheme.
            _ => &[],
        }
    }

    /// Reads and validates the URI.
    pub fn from_uri(uri: &Uri) -> Result<Self, UriError> {
        let scheme = uri.scheme;
        if !matches!(scheme, Scheme::Udp | Scheme::Mcast | Scheme::Tcp) {
            return Err(uri.error("not a udp://, mcast:// or tcp:// URI"));
        }
        uri.check_keys(Self::keys(scheme))?;
        let addr = resolve(uri)?;
        let is_mcast = addr.ip().is_multicast();
        match scheme {
            Scheme::Mcast if !is_mcast => {
                return Err(uri.error(format!(
                    "{} is not a multicast group: mcast:// needs an address from 224.0.0.0 to 239.255.255.255 (for unicast use udp://)",
                    addr.ip()
                )))
            }
            // Every subscriber binds the group's port and the publisher sends to it: "any free
            // port" means nothing to the other side.
            Scheme::Mcast if addr.port() == 0 => {
                return Err(uri.error(format!(
                    "port 0 is not accepted for a multicast group: the publisher sends to {}:PORT and every subscriber binds that port, so give a port from 1 to 65535, for example mcast://{}:30001",
                    addr.ip(),
                    addr.ip()
                )))
            }
            Scheme::Udp | Scheme::Tcp if is_mcast || addr.ip().is_broadcast() => {
                return Err(uri.error(format!(
                    "{} is a multicast or broadcast address: {}:// needs a unicast address (for multicast use mcast://)",
                    addr.ip(),
                    scheme.name()
                )))
            }
            _ => {}
        }
        let mut cfg = NetConfig {
            scheme,
            addr,
            iface: if scheme == Scheme::Mcast {
                Some(Ipv4Addr::LOCALHOST)
            } else {
                None
            },
            segment_len: if scheme == Scheme::Tcp {
                Self::DEFAULT_FRAME
            } else {
                Self::DEFAULT_DATAGRAM
            },
            mode: SendMode::Normal {
                batch_bytes: 65_000,
                batch_interval_ns: 100_000,
            },
            sndbuf: 4 << 20,
            rcvbuf: 16 << 20,
            ttl: 1,
            loopback: true,
            window: None,
            gso: true,
            gro: true,
            nak: true,
            late_join: LateJoin::Start,
            // Twice the default window (a quarter of the default 16m receive buffer, which the
            // kernel reports doubled): what a subscriber may still ask for is retained.
            retain_bytes: 16 << 20,
            retain_age_ns: 10_000_000_000,
            rate_bytes_per_s: 0,
            retransmit_rate_bytes_per_s: 100 << 20,
            linger_ns: 1_000_000_000,
            loss: None,
            timeout_ns: 5_000_000_000,
            flow_timeout_ns: Self::DEFAULT_FLOW_TIMEOUT_NS,
            max_pending: 16 << 20,
            slow: SlowPolicy::BackPressure,
            join: JoinSchedule::default(),
            auth: None,
            tls: None,
            path_b: None,
            iface_b: None,
            xdp: None,
        };
        if let Some(v) = uri.param("b") {
            let group = v.parse::<Ipv4Addr>().ok().filter(|g| g.is_multicast()).ok_or_else(|| {
                uri.error(format!(
                    "b={v} is not accepted: give the B line's multicast group (224.0.0.0 to 239.255.255.255; it uses the same port), for example b=239.255.91.1"
                ))
            })?;
            if group == *cfg.addr.ip() {
                return Err(uri.error(format!(
                    "b={v} is the A line's group itself: give the B line another group, for example b=239.255.91.1"
                )));
            }
            cfg.path_b = Some(SocketAddrV4::new(group, cfg.addr.port()));
        }
        if let Some(v) = uri.param("iface") {
            cfg.iface = Some(v.parse::<Ipv4Addr>().map_err(|_| {
                uri.error(format!(
                    "iface={v} is not accepted: give the IPv4 address of a local interface, for example iface=127.0.0.1"
                ))
            })?);
        }
        if let Some(v) = uri.param("b_iface") {
            let b = v.parse::<Ipv4Addr>().map_err(|_| {
                uri.error(format!(
                    "b_iface={v} is not accepted: give the IPv4 address of the local interface line B uses, for example b_iface=10.0.2.1"
                ))
            })?;
            if cfg.path_b.is_none() {
                return Err(uri.error(format!(
                    "b_iface={v} names line B's interface, but there is no line B: add b=GROUP (the B line's multicast group), for example b=239.255.91.1&b_iface={v}"
                )));
            }
            // The same interface as line A's is one socket for both lines.
            cfg.iface_b = Some(b).filter(|b| Some(*b) != cfg.iface);
        }
        if let Some(v) = uri.param("datagram") {
            cfg.segment_len = v
                .parse::<usize>()
                .ok()
                .filter(|n| (64..=65_000).contains(n) && n % 8 == 0)
                .ok_or_else(|| {
                    uri.error(format!(
                        "datagram={v} is not accepted: give a multiple of 8 from 64 to 65000 bytes, for example datagram=1472 (an Ethernet MTU of 1500 minus 28 bytes of IP and UDP headers)"
                    ))
                })?;
        }
        if let Some(n) = bytes_param(
            uri,
            "frame",
            64..=16 << 20,
            8,
            "a multiple of 8 from 64 bytes to 16m, for example frame=64k",
        )? {
            cfg.segment_len = n;
        }
        let batch_bytes = bytes_param(
            uri,
            "batch_bytes",
            1..=64 << 20,
            1,
            "1 to 64m bytes, for example batch_bytes=64k",
        )?
        .unwrap_or(65_000);
        let interval_ns = num_param(
            uri,
            "batch_interval_us",
            1..=10_000_000,
            "1 to 10000000 microseconds, for example batch_interval_us=100",
        )?
        .map_or(100_000, |us| us * 1000);
        cfg.mode = match uri.param("mode").unwrap_or("normal") {
            "normal" => SendMode::Normal {
                batch_bytes,
                batch_interval_ns: interval_ns,
            },
            "urgent" => SendMode::Urgent,
            v => {
                return Err(uri.error(format!(
                    "mode={v} is not accepted: use mode=urgent (every message leaves at once) or mode=normal (batched)"
                )))
            }
        };
        for (key, slot) in [("sndbuf", &mut cfg.sndbuf), ("rcvbuf", &mut cfg.rcvbuf)] {
            if let Some(n) = bytes_param(
                uri,
                key,
                4096..=1 << 30,
                1,
                &format!("4k to 1g bytes, for example {key}=16m"),
            )? {
                *slot = n;
            }
        }
        if let Some(n) = num_param(
            uri,
            "ttl",
            0..=255,
            "a whole number from 0 to 255 (1 keeps traffic on the local network)",
        )? {
            cfg.ttl = n as u32;
        }
        for (key, slot, hint) in [
            ("loop", &mut cfg.loopback, ""),
            ("gso", &mut cfg.gso, ""),
            ("gro", &mut cfg.gro, ""),
            ("nak", &mut cfg.nak, " (1: repair loss, 0: report it only)"),
        ] {
            if let Some(v) = uri.param(key) {
                *slot = parse_bool(v).ok_or_else(|| {
                    uri.error(format!(
                        "{key}={v} is not accepted: use {key}=1 or {key}=0{hint}"
                    ))
                })?;
            }
        }
        if let Some(v) = uri.param("late_join") {
            cfg.late_join = v
                .parse()
                .map_err(|e: peregrine_proto::receiver::LateJoinError| uri.error(e.to_string()))?;
        }
        if let Some(n) = bytes_param(
            uri,
            "retain",
            0..=1 << 30,
            1,
            "0 (no retransmission) to 1g bytes, for example retain=16m",
        )? {
            cfg.retain_bytes = n;
        }
        if let Some(ms) = num_param(uri, "retain_ms", 1..=3_600_000, "1 to 3600000 milliseconds")? {
            cfg.retain_age_ns = ms * 1_000_000;
        }
        for (key, slot) in [
            ("rate", &mut cfg.rate_bytes_per_s),
            ("retransmit_rate", &mut cfg.retransmit_rate_bytes_per_s),
        ] {
            if let Some(v) = uri.param(key) {
                *slot = parse_bytes(v).filter(|n| *n <= 1 << 40).ok_or_else(|| {
                    uri.error(format!(
                        "{key}={v} is not accepted: give bytes per second, 0 (no limit) to 1024g, with suffix k, m or g (powers of 1024), for example {key}=100m"
                    ))
                })?;
            }
        }
        if let Some(ms) = num_param(uri, "linger_ms", 0..=3_600_000, "0 to 3600000 milliseconds")? {
            cfg.linger_ns = ms * 1_000_000;
        }
        if let Some(v) = uri.param("loss") {
            cfg.loss = parse_loss(v).map_err(|e| {
                uri.error(format!(
                    "loss={v} is not accepted: {e} (give a rate such as loss=1%, or the compact form loss=rate=1%,seed=42,dir=recv,kinds=data)"
                ))
            })?;
        }
        if let Some(n) = num_param(
            uri,
            "window",
            0..=u64::from(u32::MAX),
            "a number of frames from 0 (no flow control) to 4294967295",
        )? {
            cfg.window = Some(n as u32);
        }
        if let Some(ms) = num_param(
            uri,
            "timeout_ms",
            10..=3_600_000,
            "10 to 3600000 milliseconds",
        )? {
            cfg.timeout_ns = ms * 1_000_000;
        }
        if let Some(ms) = num_param(
            uri,
            "flow_timeout_ms",
            1..=3_600_000,
            "1 to 3600000 milliseconds: how long one slow subscriber may hold the publisher back, for example flow_timeout_ms=1000",
        )? {
            cfg.flow_timeout_ns = ms * 1_000_000;
        }
        if let Some(n) = bytes_param(
            uri,
            "max_pending",
            64 << 10..=1 << 30,
            1,
            "64k to 1g bytes, for example max_pending=16m",
        )? {
            cfg.max_pending = n;
        }
        if let Some(v) = uri.param("slow") {
            cfg.slow = match v {
                "backpressure" => SlowPolicy::BackPressure,
                "disconnect" => SlowPolicy::Disconnect,
                _ => {
                    return Err(uri.error(format!(
                        "slow={v} is not accepted: use slow=backpressure or slow=disconnect"
                    )))
                }
            };
        }
        if let Some(v) = uri.param("auth") {
            let key = super::auth::load_key(std::path::Path::new(v)).map_err(|e| uri.error(e))?;
            if cfg.segment_len < 96 {
                return Err(uri.error(format!(
                    "datagram={} is too small with auth=: the AUTH frame takes 32 bytes of each datagram, so give datagram=96 or more",
                    cfg.segment_len
                )));
            }
            let mac = match uri.param("mac") {
                None => peregrine_proto::auth::Mac::default(),
                Some(v) => peregrine_proto::auth::Mac::from_name(v).ok_or_else(|| {
                    uri.error(format!(
                        "mac={v} is not accepted: use mac=blake3 (the default) or mac=hmac-sha256"
                    ))
                })?,
            };
            cfg.auth = Some(Arc::new(key.with_mac(mac)));
        } else if let Some(v) = uri.param("mac") {
            return Err(uri.error(format!(
                "mac={v} is given without auth=: give auth=KEYFILE too, or drop mac="
            )));
        }
        cfg.tls = TcpTls::from_uri(uri)?;
        cfg.xdp = xdp_from_uri(uri)?;
        Ok(cfg)
    }

    /// The payload bytes of a datagram the sender may fill: `datagram`, less the AUTH frame
    /// that ends each one under `auth=`.
    pub fn sender_segment_len(&self) -> usize {
        match (&self.auth, self.scheme) {
            (Some(_), Scheme::Udp | Scheme::Mcast) => {
                self.segment_len - peregrine_wire::auth::AUTH_LEN
            }
            _ => self.segment_len,
        }
    }

    /// The subscriber's flow-control window: `(frames, bytes)` for
    /// [`ReceiverConfig`](peregrine_proto::receiver::ReceiverConfig): the `window` setting in
    /// frames, or by default a quarter of the receive buffer the kernel granted, in bytes (the
    /// kernel reports about twice the payload it holds, and counts its own overhead per
    /// datagram).
    pub fn window(&self, rcvbuf_actual: usize) -> (u32, u64) {
        match self.window {
            Some(frames) => (frames, 0),
            None => (0, (rcvbuf_actual / 4).max(64 << 10) as u64),
        }
    }
}

/// Parameter `key` as a byte size (suffixes k, m, g) within `range` and a multiple of
/// `multiple`; `accepted` says what is accepted in the error.
fn bytes_param(
    uri: &Uri,
    key: &str,
    range: std::ops::RangeInclusive<usize>,
    multiple: usize,
    accepted: &str,
) -> Result<Option<usize>, UriError> {
    let Some(v) = uri.param(key) else {
        return Ok(None);
    };
    parse_bytes(v)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| range.contains(n) && n % multiple == 0)
        .map(Some)
        .ok_or_else(|| uri.error(format!("{key}={v} is not accepted: give {accepted}")))
}

/// Parameter `key` as a whole number within `range`; `accepted` says what is accepted.
pub(crate) fn num_param(
    uri: &Uri,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    accepted: &str,
) -> Result<Option<u64>, UriError> {
    let Some(v) = uri.param(key) else {
        return Ok(None);
    };
    v.parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .map(Some)
        .ok_or_else(|| uri.error(format!("{key}={v} is not accepted: give {accepted}")))
}

/// The `xdp=` keys: none of `xdp_mode`, `xdp_queue`, `xdp_frames` without `xdp=`.
fn xdp_from_uri(uri: &Uri) -> Result<Option<crate::net::xdp::XdpConfig>, UriError> {
    use crate::net::xdp::{XdpConfig, XdpMode};
    let Some(name) = uri.param("xdp") else {
        if let Some(k) = ["xdp_mode", "xdp_queue", "xdp_frames"]
            .into_iter()
            .find(|k| uri.param(k).is_some())
        {
            return Err(uri.error(format!(
                "{k}= is given without xdp=: give xdp=IFNAME (the interface to bypass the kernel on) too, or drop {k}="
            )));
        }
        return Ok(None);
    };
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
        return Err(uri.error(format!(
            "xdp={name} is not accepted: give an interface name (1 to 15 characters, as `ip link` lists them), for example xdp=eth0"
        )));
    }
    let mut cfg = XdpConfig::new(name);
    if let Some(v) = uri.param("xdp_mode") {
        cfg.mode = match v {
            "auto" => XdpMode::Auto,
            "native" => XdpMode::Native,
            "generic" => XdpMode::Generic,
            _ => {
                return Err(uri.error(format!(
                    "xdp_mode={v} is not accepted: use xdp_mode=auto (native where the driver has it, else generic), native or generic"
                )))
            }
        };
    }
    if let Some(n) = num_param(
        uri,
        "xdp_queue",
        0..=1023,
        "a receive queue number from 0 to 1023",
    )? {
        cfg.queue = n as u32;
    }
    if let Some(n) = num_param(
        uri,
        "xdp_frames",
        64..=1 << 20,
        "a power of two from 64 to 1048576 (frames of 2048 bytes, half to receive, half to send)",
    )? {
        if !n.is_power_of_two() {
            return Err(uri.error(format!(
                "xdp_frames={n} is not accepted: give a power of two from 64 to 1048576, for example xdp_frames={}",
                n.next_power_of_two().min(1 << 20)
            )));
        }
        cfg.frames = n as u32;
    }
    Ok(Some(cfg))
}

/// The loss generator setting: off, a bare rate (`1%`), or the compact form.
pub fn parse_loss(v: &str) -> Result<Option<LossConfig>, LossConfigError> {
    let cfg = if v.contains('=') {
        LossConfig::parse(v)?
    } else {
        LossConfig::parse(&format!("rate={v}")).or_else(|_| LossConfig::parse(v))?
    };
    Ok((!cfg.is_off()).then_some(cfg))
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "true" | "on" => Some(true),
        "0" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Resolves `HOST:PORT` to an IPv4 address.
fn resolve(uri: &Uri) -> Result<SocketAddrV4, UriError> {
    let a = &uri.address;
    let Some((host, port)) = a.rsplit_once(':') else {
        return Err(uri.error(format!(
            "address '{a}' has no port: write HOST:PORT, for example {}://127.0.0.1:40456",
            uri.scheme.name()
        )));
    };
    let port: u16 = port.parse().map_err(|_| {
        uri.error(format!(
            "port '{port}' is not accepted: give a number from 0 to 65535"
        ))
    })?;
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(SocketAddrV4::new(ip, port));
    }
    if host.is_empty() || host.contains(['[', ']']) || host.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(uri.error(format!(
            "host '{host}' is not accepted: give an IPv4 address or a host name (IPv6 is not supported yet)"
        )));
    }
    let found = (host, port)
        .to_socket_addrs()
        .map_err(|e| uri.error(format!("host '{host}' cannot be resolved: {e}")))?;
    found
        .filter_map(|s| match s {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(_) => None,
        })
        .next()
        .ok_or_else(|| uri.error(format!("host '{host}' has no IPv4 address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Result<NetConfig, String> {
        NetConfig::from_uri(&Uri::parse(text).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_parameters() {
        let c = cfg("udp://127.0.0.1:4000").unwrap();
        assert_eq!(c.segment_len, 1472);
        assert_eq!(c.addr, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(c.iface, None);
        let c = cfg("mcast://239.1.2.3:4000?ttl=4&loop=0&datagram=8192&mode=urgent").unwrap();
        assert_eq!(c.iface, Some(Ipv4Addr::LOCALHOST));
        assert_eq!(
            (c.ttl, c.loopback, c.segment_len, c.mode),
            (4, false, 8192, SendMode::Urgent)
        );
        let c = cfg(
            "tcp://localhost:4000?frame=1m&slow=disconnect&batch_bytes=8k&batch_interval_us=50",
        )
        .unwrap();
        assert_eq!(c.segment_len, 1 << 20);
        assert_eq!(c.slow, SlowPolicy::Disconnect);
        assert_eq!(cfg("udp://127.0.0.1:1").unwrap().late_join, LateJoin::Start);
        for (v, want) in [
            ("none", LateJoin::None),
            ("all", LateJoin::All),
            ("500", LateJoin::Last(500)),
        ] {
            let c = cfg(&format!("mcast://239.1.1.1:1?late_join={v}")).unwrap();
            assert_eq!(c.late_join, want);
        }
        assert_eq!(
            c.mode,
            SendMode::Normal {
                batch_bytes: 8192,
                batch_interval_ns: 50_000
            }
        );
        assert_eq!(c.flow_timeout_ns, 1_000_000_000);
        let c = cfg("udp://127.0.0.1:4000?flow_timeout_ms=250").unwrap();
        assert_eq!(c.flow_timeout_ns, 250_000_000);
    }

    #[test]
    fn bad_values_name_the_key_the_value_and_the_fix() {
        let cases = [
            ("udp://127.0.0.1", "has no port"),
            ("udp://127.0.0.1:99999", "port '99999'"),
            ("udp://239.1.1.1:4000", "use mcast://"),
            ("tcp://255.255.255.255:4000", "needs a unicast address"),
            ("mcast://10.0.0.1:4000", "10.0.0.1 is not a multicast group"),
            (
                "mcast://239.1.1.1:0",
                "port 0 is not accepted for a multicast group",
            ),
            ("udp://[::1]:4000", "IPv6 is not supported"),
            ("udp://no-such-host.invalid:4000", "cannot be resolved"),
            ("udp://127.0.0.1:1?datagram=1500", "datagram=1500"),
            ("udp://127.0.0.1:1?datagram=32", "multiple of 8 from 64"),
            ("udp://127.0.0.1:1?mode=fast", "mode=fast"),
            ("udp://127.0.0.1:1?iface=eth0", "iface=eth0"),
            ("mcast://239.1.1.1:1?ttl=300", "ttl=300"),
            ("mcast://239.1.1.1:1?loop=yes", "loop=yes"),
            ("udp://127.0.0.1:1?rcvbuf=1", "rcvbuf=1"),
            ("udp://127.0.0.1:1?ttl=1", "unknown parameter 'ttl=1'"),
            ("tcp://127.0.0.1:1?slow=drop", "slow=drop"),
            (
                "mcast://239.1.1.1:1?late_join=some",
                "late_join=some is not accepted: use none",
            ),
            ("tcp://127.0.0.1:1?late_join=all", "unknown parameter"),
            (
                "udp://127.0.0.1:1?flow_timeout_ms=0",
                "flow_timeout_ms=0 is not accepted",
            ),
            (
                "tcp://127.0.0.1:1?flow_timeout_ms=1h",
                "flow_timeout_ms=1h is not accepted",
            ),
            (
                "mcast://239.1.1.1:1?flow_timeout_ms=3600001",
                "1 to 3600000 milliseconds",
            ),
            ("tcp://127.0.0.1:1?datagram=1472", "unknown parameter"),
            (
                "udp://127.0.0.1:1?batch_interval_us=0",
                "batch_interval_us=0",
            ),
        ];
        for (text, needle) in cases {
            let e = cfg(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
