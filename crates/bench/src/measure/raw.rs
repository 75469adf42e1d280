//! Bare-socket ping-pong: the baseline for Peregrine's own overhead over udp, mcast and tcp.
//!
//! The same method as [`crate::measure::pingpong`] (half round trip, TSC clock, each ping carrying its
//! 8-byte number, the echo checked byte for byte) with nothing but a socket on each side:
//! - `udp`: the pong binds the ping URI's address, the ping binds the pong URI's address and
//!   sends to the ping URI; the pong echoes to the sender.
//! - `mcast`: the pong joins the ping URI's group and port, the ping joins the pong URI's
//!   (a different port); each sends to the other's group:port, on the loopback interface.
//! - `tcp`: the shape of Peregrine's TCP transport, two one-way connections: the pong side listens
//!   on both URIs' addresses (two ports of its host), the ping side connects to both, sends pings
//!   on the first and reads echoes on the second; the reverse direction of each carries only
//!   ACKs, as a subscriber's connection does. (A single connection that carries both ways lets
//!   each echo carry the ACK of its ping; sockperf's row measures that shape.) `TCP_NODELAY` on
//!   every socket, and every message is exactly `size` bytes.
//!
//! `busy_poll` makes the sockets non-blocking and polls them in a spin loop; otherwise a receive
//! blocks. At the end the ping sends a stop message (udp/mcast: an empty datagram, answered by an
//! empty one; tcp: a write shutdown, answered by the pong closing). Every wait for the other side
//! gives up after [`PEER_TIMEOUT`] with an error naming what it waited for.

mod ping;
mod pong;
mod socket;

use crate::clock::Clock;
use crate::helper::protocol::{say_ready, say_result, EchoReport, Helper, Role};
use crate::measure::floor::with_cpu;
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use peregrine::Scheme;
use ping::{ping_loop, PingLink};
use pong::PongSide;
use socket::io_ctx;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::path::Path;
use std::time::Duration;

/// How long either side waits for the other before giving up.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// The group of local multicast runs ([`local_uris`]).
pub const MCAST_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 2);
/// Multicast is sent and joined on the loopback interface.
const MCAST_IFACE: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// The largest TCP message accepted (an arbitrary bound against typos).
pub const MAX_TCP_MESSAGE: usize = 16 << 20;
/// How long the ping waits for the answer to each stop datagram, and how many it sends.
const STOP_WAIT: Duration = Duration::from_millis(200);
const STOP_TRIES: u32 = 5;

/// Settings of a raw-socket ping-pong run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RawConfig {
    /// `udp`, `mcast` or `tcp`.
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    pub count: u64,
    pub warmup_count: u64,
    pub cpus: CpuPair,
    /// Non-blocking sockets polled in a spin loop (`--idle spin`) instead of blocking receives
    /// (`--idle block`).
    pub busy_poll: bool,
}

/// One end of a raw run, as given by `--ping-uri` / `--pong-uri`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `udp://IP:PORT`
    Udp(SocketAddrV4),
    /// `mcast://GROUP:PORT`, on the loopback interface.
    Mcast(SocketAddrV4),
    /// `tcp://IP:PORT`
    Tcp(SocketAddrV4),
}

impl Endpoint {
    /// Parses `udp://IP:PORT`, `mcast://GROUP:PORT` or `tcp://IP:PORT` (IPv4, port not 0).
    pub fn parse(uri: &str) -> Result<Endpoint, BenchError> {
        let bad = |why: &str| {
            BenchError::Config(format!(
                "'{uri}' is not accepted: {why} (give udp://IP:PORT, mcast://GROUP:PORT or tcp://IP:PORT, for example udp://127.0.0.1:40000)"
            ))
        };
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| bad("it has no scheme"))?;
        let addr: SocketAddrV4 = rest
            .parse()
            .map_err(|_| bad("the address is not IPv4-address:port"))?;
        if addr.port() == 0 {
            return Err(bad("port 0 names no port"));
        }
        let multicast = addr.ip().is_multicast();
        match scheme.parse::<Scheme>() {
            Ok(Scheme::Udp | Scheme::Tcp) if multicast => {
                Err(bad("a multicast address needs mcast://"))
            }
            Ok(Scheme::Mcast) if !multicast => Err(bad(
                "mcast:// needs a multicast group (224.0.0.0 to 239.255.255.255)",
            )),
            Ok(Scheme::Udp) => Ok(Endpoint::Udp(addr)),
            Ok(Scheme::Tcp) => Ok(Endpoint::Tcp(addr)),
            Ok(Scheme::Mcast) => Ok(Endpoint::Mcast(addr)),
            _ => Err(bad("unknown scheme")),
        }
    }

    pub fn addr(&self) -> SocketAddrV4 {
        match *self {
            Endpoint::Udp(a) | Endpoint::Mcast(a) | Endpoint::Tcp(a) => a,
        }
    }

    /// `udp`, `mcast` or `tcp`: the transport and URI scheme.
    pub fn scheme(&self) -> Scheme {
        match self {
            Endpoint::Udp(_) => Scheme::Udp,
            Endpoint::Mcast(_) => Scheme::Mcast,
            Endpoint::Tcp(_) => Scheme::Tcp,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.addr())
    }
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &RawConfig) -> Result<(), BenchError> {
    let max = match cfg.transport {
        Scheme::Udp | Scheme::Mcast => MAX_DATAGRAM,
        Scheme::Tcp => MAX_TCP_MESSAGE,
        t => {
            return Err(BenchError::Config(format!(
                "--transport {t} is not accepted with --raw: give udp, mcast or tcp"
            )))
        }
    };
    if cfg.size < 8 || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted for a raw {} ping-pong: give 8 to {max} bytes (each ping carries its 8-byte number)",
            cfg.size, cfg.transport
        )));
    }
    if cfg.count == 0 {
        return Err(BenchError::Config(
            "--count 0 is not accepted: give at least 1 sample".into(),
        ));
    }
    Ok(())
}

/// Both URIs for a run on this machine, with ports the kernel found free (bound to port 0 and
/// released, so another process could still take one before the run does): `(ping, pong)`.
pub fn local_uris(transport: Scheme) -> Result<(String, String), BenchError> {
    let two_udp_ports = || -> io::Result<(u16, u16)> {
        // Both held at once, so they differ.
        let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        Ok((a.local_addr()?.port(), b.local_addr()?.port()))
    };
    let ctx = |e| io_ctx("cannot find a free port on 127.0.0.1")(e);
    match transport {
        Scheme::Udp => {
            let (p, q) = two_udp_ports().map_err(ctx)?;
            Ok((
                format!("udp://127.0.0.1:{p}"),
                format!("udp://127.0.0.1:{q}"),
            ))
        }
        Scheme::Mcast => {
            let (p, q) = two_udp_ports().map_err(ctx)?;
            Ok((
                format!("mcast://{MCAST_GROUP}:{p}"),
                format!("mcast://{MCAST_GROUP}:{q}"),
            ))
        }
        Scheme::Tcp => {
            // Both held at once, so they differ.
            let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ctx)?;
            let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ctx)?;
            let (p, q) = (
                a.local_addr().map_err(ctx)?.port(),
                b.local_addr().map_err(ctx)?.port(),
            );
            Ok((
                format!("tcp://127.0.0.1:{p}"),
                format!("tcp://127.0.0.1:{q}"),
            ))
        }
        t => Err(BenchError::Config(format!(
            "--transport {t} is not accepted with --raw: give udp, mcast or tcp"
        ))),
    }
}

/// Parses both URIs, checking they are of `cfg.transport`.
fn endpoints(
    cfg: &RawConfig,
    ping_uri: &str,
    pong_uri: &str,
) -> Result<(Endpoint, Endpoint), BenchError> {
    let ping = Endpoint::parse(ping_uri)?;
    let pong = Endpoint::parse(pong_uri)?;
    for (flag, e) in [("--ping-uri", ping), ("--pong-uri", pong)] {
        if e.scheme() != cfg.transport {
            return Err(BenchError::Config(format!(
                "{flag} {e} does not match --transport {}: give a {}:// URI",
                cfg.transport, cfg.transport
            )));
        }
    }
    Ok((ping, pong))
}

/// Runs both sides: spawns the pong process with `exe`, then pings from this one (on `cpus.a`).
pub fn run(cfg: &RawConfig, exe: &Path, clock: &Clock) -> Result<LatencyRecorder, BenchError> {
    validate(cfg)?;
    let (ping_uri, pong_uri) = local_uris(cfg.transport)?;
    let (ping_ep, pong_ep) = endpoints(cfg, &ping_uri, &pong_uri)?;
    let helper = Helper::start(
        exe,
        &RawPong {
            cfg: cfg.clone(),
            ping_uri: ping_uri.clone(),
            pong_uri: pong_uri.clone(),
        },
    )?;
    let mut link = PingLink::open(cfg, ping_ep, pong_ep, PEER_TIMEOUT)?;
    let mut rec = LatencyRecorder::new();
    with_cpu(cfg.cpus.a, || {
        ping_loop(cfg, clock, &mut link, |ns| rec.record(ns))
    })??;
    link.stop()?;
    let r: EchoReport = helper.finish()?;
    let sent = cfg.warmup_count + cfg.count;
    if r.echoed != sent {
        return Err(BenchError::Child(format!(
            "the raw {} pong side reports {} echoes of the {sent} pings sent",
            cfg.transport, r.echoed
        )));
    }
    Ok(rec)
}

/// The bare-socket pong side, as a helper.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RawPong {
    pub cfg: RawConfig,
    pub ping_uri: String,
    pub pong_uri: String,
}

impl Role for RawPong {
    const TAG: &'static str = "raw_pong";
    const WHAT: &'static str = "bare-socket pong side";
}

/// The echo side (`--raw --role pong`): sets up its sockets, says ready, echoes until told to
/// stop, then prints `{"cpu_s": .., "echoed": ..}`.
pub fn pong(cfg: &RawConfig, ping_addr: &str, pong_addr: &str) -> Result<(), BenchError> {
    validate(cfg)?;
    let (ping_ep, pong_ep) = endpoints(cfg, ping_addr, pong_addr)?;
    let side = PongSide::open(ping_ep, pong_ep)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    say_ready();
    let echoed = side.echo(cfg.size, cfg.busy_poll, PEER_TIMEOUT)?;
    say_result(&EchoReport {
        cpu_s: crate::cpu_seconds_self(),
        echoed,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Source;
    use std::io::Read;
    use std::net::SocketAddr;

    /// A clock that needs no calibration: nothing here is timed.
    const CLOCK: Clock = Clock {
        source: Source::MonotonicRaw,
        ns_per_tick: 1.0,
    };

    fn config(transport: &str, size: usize, count: u64, busy_poll: bool) -> RawConfig {
        let transport: Scheme = transport.parse().unwrap();
        RawConfig {
            transport,
            size,
            count,
            warmup_count: 10,
            cpus: CpuPair { a: 0, b: 0 },
            busy_poll,
        }
    }

    /// Runs the pong side in a thread and pings it from this one; every echo is checked by
    /// `ping_loop`. Returns the samples recorded and the pong's echo count.
    fn echo_in_process(cfg: &RawConfig) -> (u64, u64) {
        validate(cfg).unwrap();
        let (ping_uri, pong_uri) = local_uris(cfg.transport).unwrap();
        let (ping, pong) = endpoints(cfg, &ping_uri, &pong_uri).unwrap();
        let side = PongSide::open(ping, pong).unwrap();
        let (size, busy) = (cfg.size, cfg.busy_poll);
        let t = Duration::from_secs(5);
        let echo = std::thread::spawn(move || side.echo(size, busy, t));
        let mut link = PingLink::open(cfg, ping, pong, t).unwrap();
        let mut samples = 0u64;
        ping_loop(cfg, &CLOCK, &mut link, |ns| {
            assert!(ns >= 0.0);
            samples += 1;
        })
        .unwrap();
        link.stop().unwrap();
        let echoed = echo.join().unwrap().unwrap();
        (samples, echoed)
    }

    #[test]
    fn udp_echo_in_process_is_intact() {
        let cfg = config("udp", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn tcp_echo_in_process_is_intact() {
        let cfg = config("tcp", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn tcp_carries_pings_and_echoes_on_two_one_way_connections() {
        let cfg = config("tcp", 64, 500, false);
        let (ping_uri, pong_uri) = local_uris(cfg.transport).unwrap();
        assert_ne!(ping_uri, pong_uri, "two ports");
        let (ping, pong) = endpoints(&cfg, &ping_uri, &pong_uri).unwrap();
        let side = PongSide::open(ping, pong).unwrap();
        let t = Duration::from_secs(5);
        let echo = std::thread::spawn(move || side.echo(64, false, t));
        let mut link = PingLink::open(&cfg, ping, pong, t).unwrap();
        ping_loop(&cfg, &CLOCK, &mut link, |_| {}).unwrap();
        let PingLink::Stream { tx, rx, .. } = &link else {
            panic!("tcp opens a stream link")
        };
        assert_eq!(tx.peer_addr().unwrap(), SocketAddr::V4(ping.addr()));
        assert_eq!(rx.peer_addr().unwrap(), SocketAddr::V4(pong.addr()));
        // Nothing ever came back on the pings' connection: the echoes took the other one.
        tx.set_nonblocking(true).unwrap();
        let err = (&*tx).read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        link.stop().unwrap();
        assert_eq!(echo.join().unwrap().unwrap(), 510);
        // One port for both ways is refused, naming the fix.
        let same = Endpoint::parse(&ping_uri).unwrap();
        let err = PongSide::open(same, same).err().unwrap().to_string();
        assert!(err.contains("tcp needs two ports"), "{err}");
    }

    #[test]
    fn mcast_echo_on_loopback_in_process_is_intact() {
        let cfg = config("mcast", 100, 2000, false);
        assert_eq!(echo_in_process(&cfg), (2000, 2010));
    }

    #[test]
    fn busy_polled_and_edge_sizes_echo_intact() {
        for (t, size, busy) in [
            ("udp", 8, true),
            ("tcp", 8, true),
            ("udp", MAX_DATAGRAM, false),
            ("tcp", 300_000, true),
            ("tcp", 300_000, false),
        ] {
            let cfg = config(t, size, 200, busy);
            assert_eq!(
                echo_in_process(&cfg),
                (200, 210),
                "{t} {size} B busy={busy}"
            );
        }
    }

    #[test]
    fn a_damaged_echo_is_an_error() {
        let cfg = config("udp", 64, 5, false);
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let me = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (peer_addr, my_addr) = (peer.local_addr().unwrap(), me.local_addr().unwrap());
        drop(me);
        let bad = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let (n, from) = peer.recv_from(&mut buf).unwrap();
            buf[n - 1] ^= 1;
            peer.send_to(&buf[..n], from).unwrap();
        });
        let ping = Endpoint::parse(&format!("udp://{peer_addr}")).unwrap();
        let pong = Endpoint::parse(&format!("udp://{my_addr}")).unwrap();
        let mut link = PingLink::open(&cfg, ping, pong, Duration::from_secs(5)).unwrap();
        let e = ping_loop(&cfg, &CLOCK, &mut link, |_| {}).unwrap_err();
        assert!(e.to_string().contains("damaged payload"), "{e}");
        bad.join().unwrap();
    }

    #[test]
    fn a_silent_peer_is_a_timeout_naming_what_was_awaited() {
        let cfg = config("udp", 64, 5, true);
        let (ping_uri, pong_uri) = local_uris(Scheme::Udp).unwrap();
        let (ping, pong) = endpoints(&cfg, &ping_uri, &pong_uri).unwrap();
        let _silent = UdpSocket::bind(ping.addr()).unwrap();
        let mut link = PingLink::open(&cfg, ping, pong, Duration::from_millis(100)).unwrap();
        let e = ping_loop(&cfg, &CLOCK, &mut link, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("no echo of ping 0"), "{e}");
        assert!(e.contains(&pong_uri), "{e}");
    }

    #[test]
    fn uris_parse_and_print_back() {
        for uri in [
            "udp://127.0.0.1:4000",
            "tcp://127.0.0.1:4001",
            "mcast://239.255.77.2:4002",
        ] {
            assert_eq!(Endpoint::parse(uri).unwrap().to_string(), uri);
        }
        for (uri, why) in [
            ("127.0.0.1:4000", "no scheme"),
            ("udp://localhost:4000", "IPv4"),
            ("udp://127.0.0.1:0", "port 0"),
            ("udp://239.1.1.1:4000", "mcast://"),
            ("mcast://127.0.0.1:4000", "multicast group"),
            ("ipc://127.0.0.1:4000", "unknown scheme"),
        ] {
            let e = Endpoint::parse(uri).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(uri), "{uri}: {e}");
        }
    }

    #[test]
    fn validate_names_the_bad_value() {
        let e = validate(&config("ipc", 64, 1, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ipc"), "{e}");
        let e = validate(&config("udp", 70_000, 1, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("70000") && e.contains("65507"), "{e}");
        let e = endpoints(
            &config("udp", 64, 1, false),
            "tcp://127.0.0.1:1",
            "udp://127.0.0.1:2",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--ping-uri"), "{e}");
    }
}
