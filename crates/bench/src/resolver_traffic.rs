//! Resolver traffic for many topics: one context advertises N topics on a multicast group of
//! its own (loopback), a counting socket joined to the group tallies every datagram, and a
//! second context with a wildcard subscription measures how long it takes to learn them all.
//!
//! This drives the real resolver (`peregrine_proto::resolver`) over real sockets
//! (`peregrine_transport::resolver`) but opens no data transports: the advertisements name
//! `udp://` endpoints that are never bound, because the traffic does not depend on them and
//! 10 000 shared-memory logs would only measure tmpfs.

use peregrine_proto::resolver::{Pattern, Resolver, ResolverConfig, ResolverEvent};
use peregrine_transport::resolver::{ResolverPath, ResolverSocket, MAX_DATAGRAM};
use peregrine_wire::header::{FrameType, Frames};
use peregrine_wire::query::PatternKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct TrafficConfig {
    pub topics: u32,
    pub seconds: u32,
    pub group: SocketAddrV4,
    /// The publishing context's settings (schedules, rate limit, datagram size).
    pub resolver: ResolverConfig,
}

/// One second of traffic on the group.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Second {
    pub second: u32,
    pub datagrams: u64,
    pub advertisements: u64,
    pub queries: u64,
    pub bytes: u64,
}

/// The outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrafficResult {
    pub topics: u32,
    pub per_second: Vec<Second>,
    /// Seconds from the start until the subscriber knew every topic (None: it never did).
    pub resolved_all_s: Option<f64>,
    pub resolved: u64,
    /// Initial phase: the seconds before `initial_duration` ends; sustain: the seconds after
    /// it plus one maximum initial interval (so no initial advertisement is counted).
    pub initial_packets_per_s: f64,
    pub initial_peak_packets_per_s: u64,
    pub sustain_packets_per_s: f64,
    pub sustain_advertisements_per_s: f64,
    pub sustain_bytes_per_s: f64,
    pub subscriber_rejected: u64,
}

impl TrafficResult {
    /// The result as a table and summary lines, in Markdown.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "Resolver traffic, {} topics (one publishing context, loopback multicast)\n",
            self.topics
        );
        t.push_str("| second | packets | advertisements | queries | bytes |\n");
        t.push_str("| ---: | ---: | ---: | ---: | ---: |\n");
        for s in &self.per_second {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} |",
                s.second, s.datagrams, s.advertisements, s.queries, s.bytes
            );
        }
        let _ = writeln!(
            t,
            "\ninitial phase: {:.0} packets/s on average, {} at peak",
            self.initial_packets_per_s, self.initial_peak_packets_per_s
        );
        let _ = writeln!(
            t,
            "sustain phase: {:.0} packets/s, {:.0} advertisements/s, {:.1} KB/s",
            self.sustain_packets_per_s,
            self.sustain_advertisements_per_s,
            self.sustain_bytes_per_s / 1e3
        );
        let _ = match self.resolved_all_s {
            Some(t_s) => writeln!(
                t,
                "a wildcard subscriber knew all {} topics after {t_s:.2} s",
                self.topics
            ),
            None => writeln!(
                t,
                "a wildcard subscriber knew {} of {} topics at the end",
                self.resolved, self.topics
            ),
        };
        let _ = writeln!(t, "subscriber rejected {} frames", self.subscriber_rejected);
        t
    }
}

/// Advertises `cfg.topics` topics for `cfg.seconds` and counts the group's traffic.
pub fn run(cfg: &TrafficConfig) -> Result<TrafficResult, String> {
    let path = ResolverPath::Multicast {
        group: cfg.group,
        iface: Ipv4Addr::LOCALHOST,
        ttl: 0,
    };
    let open = || ResolverSocket::open(&path).map_err(|e| e.to_string());
    let (mut pub_sock, mut sub_sock, mut counter) = (open()?, open()?, open()?);
    let start = Instant::now();
    let now_ns = || start.elapsed().as_nanos() as u64;
    let mut publisher = Resolver::new(ResolverConfig {
        context_id: 1,
        ..cfg.resolver.clone()
    });
    let mut subscriber = Resolver::new(ResolverConfig::new(2));
    subscriber.subscribe(
        Pattern::new(PatternKind::Glob, "bench.resolver.*").map_err(|e| e.to_string())?,
        0,
    );
    for i in 0..cfg.topics {
        let port = 20000 + (i % 40000);
        publisher
            .advertise(
                &format!("bench.resolver.T{i:05}"),
                0x1000_0000 + i,
                &[format!("udp://127.0.0.1:{port}")],
                0,
            )
            .map_err(|e| e.to_string())?;
    }
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut per_second = vec![Second::default(); cfg.seconds as usize];
    for (i, s) in per_second.iter_mut().enumerate() {
        s.second = i as u32;
    }
    let mut resolved = 0u64;
    let mut resolved_all_s = None;
    let end = Duration::from_secs(u64::from(cfg.seconds));
    while start.elapsed() < end {
        let now = now_ns();
        while let Some(n) = publisher.poll_transmit(now, &mut buf) {
            pub_sock.send(&buf[..n]);
        }
        while let Some(n) = subscriber.poll_transmit(now, &mut buf) {
            sub_sock.send(&buf[..n]);
        }
        while let Some(n) = pub_sock.recv(&mut buf) {
            publisher.on_datagram(&buf[..n], now_ns());
        }
        while let Some(n) = sub_sock.recv(&mut buf) {
            subscriber.on_datagram(&buf[..n], now_ns());
        }
        while let Some(ev) = subscriber.poll_event() {
            if matches!(ev, ResolverEvent::SourceFound { .. }) {
                resolved += 1;
                if resolved == u64::from(cfg.topics) {
                    resolved_all_s = Some(start.elapsed().as_secs_f64());
                }
            }
        }
        while let Some(n) = counter.recv(&mut buf) {
            let sec = (start.elapsed().as_secs() as usize).min(per_second.len() - 1);
            let s = &mut per_second[sec];
            s.datagrams += 1;
            s.bytes += n as u64;
            for (ty, _) in Frames::new(&buf[..n]).flatten() {
                match ty {
                    FrameType::Advertise => s.advertisements += 1,
                    FrameType::Query => s.queries += 1,
                    _ => {}
                }
            }
        }
        let next = publisher
            .poll_timeout()
            .into_iter()
            .chain(subscriber.poll_timeout())
            .min()
            .unwrap_or(u64::MAX);
        let wait = next.saturating_sub(now_ns()).min(200_000);
        if wait > 20_000 {
            std::thread::sleep(Duration::from_nanos(wait));
        }
    }
    let sched = cfg.resolver.advertise;
    let initial_s = (sched.initial_duration_ns / 1_000_000_000) as usize;
    let sustain_from = ((sched.initial_duration_ns + sched.max_initial_interval_ns)
        .div_ceil(1_000_000_000)) as usize;
    let avg = |xs: &[Second], f: fn(&Second) -> u64| -> f64 {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().map(f).sum::<u64>() as f64 / xs.len() as f64
        }
    };
    let initial = &per_second[..initial_s.min(per_second.len())];
    let sustain = &per_second[sustain_from.min(per_second.len())..];
    Ok(TrafficResult {
        topics: cfg.topics,
        resolved_all_s,
        resolved,
        initial_packets_per_s: avg(initial, |s| s.datagrams),
        initial_peak_packets_per_s: initial.iter().map(|s| s.datagrams).max().unwrap_or(0),
        sustain_packets_per_s: avg(sustain, |s| s.datagrams),
        sustain_advertisements_per_s: avg(sustain, |s| s.advertisements),
        sustain_bytes_per_s: avg(sustain, |s| s.bytes),
        subscriber_rejected: subscriber.counters().rejected(),
        per_second,
    })
}
