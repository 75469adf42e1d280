//! Ping-pong: half round trip over a transport between two processes (sockperf's and Reflex's
//! method). The ping side stamps a send, waits for the echo, and records (RTT / 2). Each ping
//! carries its number in its first 8 bytes (sizes of 8 bytes and more) and the echo is checked.
//!
//! The same two sides measure `bench echo` (Reflex's normal and urgent modes): the streams'
//! [`StreamMode`] and the ping side's [`DutyCycle`] are its two settings.

use crate::clock::Clock;
use crate::helper::protocol::{say_ready_with, say_result, EchoReport, Helper, Role};
use crate::measure::floor::{with_cpu, FloorMoments, Line};
use crate::stats::{LatencyRecorder, Summary};
use crate::{BenchError, CpuPair};
use peregrine::{Context, IdleKind, OfferError, Publisher, Scheme, Subscriber};
use std::path::Path;
use std::time::{Duration, Instant};

/// Settings of a ping-pong run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PingPongConfig {
    #[serde(with = "crate::by_name")]
    pub transport: Scheme,
    pub size: usize,
    pub count: u64,
    pub warmup_count: u64,
    pub cpus: CpuPair,
    #[serde(with = "crate::by_name")]
    pub idle: IdleKind,
    /// Base of the two segment names (`NAME-ping`, `NAME-pong`).
    pub name: String,
    /// How long to wait for the other side (longer when the sides are started by hand).
    pub connect_timeout: Duration,
    /// The ping stream's URI (default: from `transport` and `name`, on loopback).
    pub ping_uri: Option<String>,
    /// The pong stream's URI.
    pub pong_uri: Option<String>,
    /// Floor bursts: before the first measured ping, then after every this many (0: none).
    /// Only when this process starts the pong side ([`run`]).
    #[serde(default)]
    pub floor_every: u64,
    /// The shared line the bursts run on (set by [`run`] for the pong side).
    #[serde(default)]
    pub floor_line: Option<String>,
    /// The `mode=` added to both streams' URIs when they do not name one (network transports;
    /// `ipc` has no send modes): `urgent`, the latency configuration, unless `bench echo`
    /// measures `normal`.
    #[serde(default)]
    pub mode: StreamMode,
    /// The pings go through a failover group of one member ([`GROUP`]): each carries the
    /// group's header and the pong side's subscriber is a `FailoverSubscriber` that arbitrates
    /// them; what a failover subscriber costs when nothing fails.
    #[serde(default)]
    pub group: bool,
    /// The pong side runs in this network namespace (`bench pingpong --netns`; the ping side's
    /// thread is moved into the other one by its caller, [`crate::netns::in_namespace`]).
    #[serde(default)]
    pub pong_netns: Option<String>,
}

/// The failover group of `group` ping-pongs.
pub const GROUP: &str = "bench";

/// Offers `payload` as `sequence` of the failover group [`GROUP`], spinning while the
/// publisher is back-pressured.
fn offer_as_member_spinning(
    publ: &mut Publisher,
    sequence: u64,
    payload: &[u8],
) -> Result<(), OfferError> {
    let group = peregrine::failover::group_id(GROUP);
    loop {
        match peregrine::failover::offer_as_member(publ, group, sequence, payload) {
            Ok(_) => return Ok(()),
            Err(OfferError::BackPressured) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// Round trips of one floor burst between blocks of pings, and the ones before them that are
/// not kept (the line's first transfers after a block of pings).
pub const FLOOR_BURST: u64 = 5_000;
pub const FLOOR_BURST_WARMUP: u64 = 500;

/// Word 0 of a message asking the pong side to answer a floor burst (never a ping number).
const FLOOR_REQUEST: u64 = 1 << 63;

/// The default spacing of floor bursts for `count` pings: about 20 blocks, none under 10,000
/// pings (a burst costs a few milliseconds).
pub fn default_floor_every(count: u64) -> u64 {
    (count / 20).max(10_000)
}

/// How the publishers of a network stream send (the URI's `mode=`; `ipc` has one path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// `mode=urgent`: every message leaves in the `offer` that publishes it.
    #[default]
    Urgent,
    /// `mode=normal`: messages are batched; a batch leaves when the oldest message in it has
    /// waited the URI's `batch_interval_us` (checked by `offer`, `flush` and `do_work`), or
    /// when it holds `batch_bytes`.
    Normal,
}

impl StreamMode {
    /// Every mode, in the order `--modes` lists them by default.
    pub const ALL: [StreamMode; 2] = [StreamMode::Normal, StreamMode::Urgent];

    /// The URI's value: `urgent`, `normal`.
    pub fn name(self) -> &'static str {
        match self {
            StreamMode::Urgent => "urgent",
            StreamMode::Normal => "normal",
        }
    }
}

impl std::str::FromStr for StreamMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StreamMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "'{s}' is not a send mode: give normal (batched) or urgent (every message at once), for example normal,urgent"
                )
            })
    }
}

/// How often the ping side runs its publisher's duty cycle (`do_work`) while it waits for an
/// echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DutyCycle {
    /// Every [`POLLS_PER_DUTY_CYCLE`] empty polls (`bench pingpong`): in urgent mode a ping
    /// leaves in its `offer`, and the duty cycle only sends heartbeats and answers NAKs.
    Sparse,
    /// On every empty poll, as an application's event loop does (`bench echo`): what sends a
    /// normal-mode batch once its interval has passed.
    EveryEmptyPoll,
}

/// The context of a benchmark process: the configuration of the environment
/// (`PEREGRINE_CONFIG`, `PEREGRINE_<TRANSPORT>_<KEY>`), which helper processes inherit.
pub(crate) fn context() -> Result<Context, BenchError> {
    Context::from_env().map_err(|e| BenchError::Config(e.to_string()))
}

/// A loopback URI for a benchmark stream of run `name`: `udp` and `tcp` bind a free port
/// (`:0`); `mcast` takes a group and port derived from the name (`offset` apart for a second
/// stream), so runs with different names do not meet; `ipc` the segment `NAME-OFFSET`.
pub(crate) fn loopback_uri(transport: Scheme, name: &str, offset: u16) -> String {
    match transport {
        Scheme::Mcast => {
            let hash = peregrine::stream_id(name);
            format!(
                "mcast://239.255.{}.{}:{}",
                (hash >> 8) & 0xff,
                (hash & 0xff).max(1),
                30_000 + (hash >> 16) % 20_000 + u32::from(offset)
            )
        }
        Scheme::Ipc => format!("ipc://{name}-{offset}"),
        t => format!("{t}://127.0.0.1:0"),
    }
}

/// What a ping-pong run measured.
#[derive(Debug, Clone)]
pub struct PingPongResult {
    pub summary: Summary,
    /// The samples (half round trips, nanoseconds).
    pub recorder: LatencyRecorder,
    pub ping_cpu_s: f64,
    pub pong_cpu_s: Option<f64>,
    /// The floor bursts between blocks of pings, when asked for (`floor_every`).
    pub floor: Option<FloorMoments>,
    /// The ping stream's URI as opened: the configuration's defaults applied, the bound port
    /// in place of `:0`.
    pub ping_uri: String,
    /// The pong stream's URI as opened (on the network transports, as the pong side announced
    /// it).
    pub pong_uri: String,
}

/// Checks that each URI given (`(flag, uri)`) is of the transport `--transport` names.
pub(crate) fn check_transport(
    transport: Scheme,
    uris: &[(&str, &Option<String>)],
) -> Result<(), BenchError> {
    for (flag, uri) in uris {
        if let Some(u) = uri {
            if Scheme::of_uri(u) != Some(transport) {
                return Err(BenchError::Config(format!(
                    "{flag} {u} does not match --transport {transport}: give a {transport}:// URI"
                )));
            }
        }
    }
    Ok(())
}

/// The ping and pong URIs: given ones (with `mode=` of `cfg.mode`, `urgent` unless set
/// otherwise, added when they do not set one), or loopback defaults. `udp` and `tcp` defaults
/// use port 0: each side binds a free port and the pong side announces its URI on its `ready`
/// line.
pub fn uris(cfg: &PingPongConfig) -> (String, String) {
    let default = |which: u16| -> String {
        match cfg.transport {
            Scheme::Ipc => format!(
                "ipc://{}-{}",
                cfg.name,
                if which == 0 { "ping" } else { "pong" }
            ),
            t => loopback_uri(t, &cfg.name, which),
        }
    };
    // The latency configuration, unless the URI says otherwise: every ping leaves at once
    // (`mode=urgent`; `bench echo` also measures `mode=normal`). UDP receivers keep their
    // default `gro=1`: GRO is turned on only once a backlog lasts, which a ping-pong never
    // has, so they read datagram by datagram with `recvfrom` as `gro=0` would.
    let settings = |uri: String| -> String {
        let scheme = Scheme::of_uri(&uri);
        if scheme == Some(Scheme::Ipc) {
            return uri;
        }
        let has = |key: &str| {
            uri.split_once('?')
                .is_some_and(|(_, q)| q.split('&').any(|p| p.split('=').next() == Some(key)))
        };
        if has("mode") {
            return uri;
        }
        let sep = if uri.contains('?') { '&' } else { '?' };
        format!("{uri}{sep}mode={}", cfg.mode.name())
    };
    (
        settings(cfg.ping_uri.clone().unwrap_or_else(|| default(0))),
        settings(cfg.pong_uri.clone().unwrap_or_else(|| default(1))),
    )
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &PingPongConfig) -> Result<(), BenchError> {
    check_transport(
        cfg.transport,
        &[("--ping-uri", &cfg.ping_uri), ("--pong-uri", &cfg.pong_uri)],
    )?;
    // Ping-pong uses the default log capacity on ipc.
    let max = if cfg.transport == Scheme::Ipc {
        peregrine::ipc_max_message_len(peregrine::IPC_DEFAULT_CAPACITY)
    } else {
        1 << 20
    };
    if cfg.size < 8 || cfg.size > max {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted for ping-pong: give 8 to {max} bytes (each ping carries its 8-byte number)",
            cfg.size
        )));
    }
    if cfg.count == 0 {
        return Err(BenchError::Config(
            "--count 0 is not accepted: give at least 1 sample".into(),
        ));
    }
    Ok(())
}

/// Runs both sides: spawns the pong process with `exe`, then pings from this one.
pub fn run(cfg: &PingPongConfig, exe: &Path, clock: &Clock) -> Result<PingPongResult, BenchError> {
    run_with(cfg, exe, clock, DutyCycle::Sparse)
}

/// [`run`] with the ping side running its publisher's duty cycle as `duty` says.
pub fn run_with(
    cfg: &PingPongConfig,
    exe: &Path,
    clock: &Clock,
    duty: DutyCycle,
) -> Result<PingPongResult, BenchError> {
    validate(cfg)?;
    let cpu_before = crate::cpu_seconds_self();
    let ctx = context()?;
    let (ping_uri, pong_uri) = uris(cfg);
    let publ = ctx.publisher("bench.ping", &ping_uri)?;
    // The URI as bound (a free port in place of :0) goes to the pong side.
    let ping_uri = publ.uri().to_string();
    let floor_name = format!("{}-floor", cfg.name);
    let line = match cfg.floor_every {
        0 => None,
        _ => Some(Line::open(&floor_name, true)?),
    };
    let helper = Helper::start_in(
        exe,
        &Pong(PingPongConfig {
            ping_uri: Some(ping_uri.clone()),
            pong_uri: Some(pong_uri.clone()),
            floor_line: line.as_ref().map(|_| floor_name),
            ..cfg.clone()
        }),
        cfg.pong_netns.as_deref(),
    )?;
    let pong_uri = if helper.ready_info.is_empty() {
        pong_uri
    } else {
        helper.ready_info.clone()
    };
    let sub = ctx.subscriber("bench.pong", &pong_uri, cfg.idle)?;
    let (recorder, floor) = match duty {
        DutyCycle::Sparse => {
            ping_loop::<POLLS_PER_DUTY_CYCLE>(cfg, clock, publ, sub, line.as_ref())?
        }
        DutyCycle::EveryEmptyPoll => ping_loop::<1>(cfg, clock, publ, sub, line.as_ref())?,
    };
    let ping_cpu_s = crate::cpu_seconds_self() - cpu_before;
    let r: EchoReport = helper.finish()?;
    Ok(PingPongResult {
        summary: recorder.summary(),
        recorder,
        ping_cpu_s,
        pong_cpu_s: Some(r.cpu_s),
        floor,
        ping_uri,
        pong_uri,
    })
}

/// The ping side alone (`--role ping`): the pong side runs elsewhere with the same `--name`.
pub fn ping(cfg: &PingPongConfig, clock: &Clock) -> Result<PingPongResult, BenchError> {
    validate(cfg)?;
    let ctx = context()?;
    let (ping_uri, pong_uri) = uris(cfg);
    let publ = ctx.publisher("bench.ping", &ping_uri)?;
    let ping_uri = publ.uri().to_string();
    let sub = ctx.subscriber("bench.pong", &pong_uri, cfg.idle)?;
    // The pong side runs elsewhere: no shared line, no floor bursts.
    let (recorder, _) = ping_loop::<POLLS_PER_DUTY_CYCLE>(cfg, clock, publ, sub, None)?;
    Ok(PingPongResult {
        summary: recorder.summary(),
        recorder,
        ping_cpu_s: crate::cpu_seconds_self(),
        pong_cpu_s: None,
        floor: None,
        ping_uri,
        pong_uri,
    })
}

/// Waits until `publ` has a subscriber and `sub` follows a publisher, driving both.
///
/// Returns (copied) the messages `sub` received while waiting: the two sides of a pair finish
/// waiting at different moments, so the other side may already have sent its first message
/// (a ping, a load message) while this one still waits for its own publisher's subscriber.
/// Those must be handled, not dropped: a dropped ping is never echoed and the run hangs.
pub(crate) fn wait_connected(
    publ: &mut Publisher,
    sub: &mut Subscriber,
    timeout: Duration,
    who: &str,
) -> Result<Vec<Vec<u8>>, BenchError> {
    let start = Instant::now();
    let mut early = Vec::new();
    while publ.subscriber_count() == 0 || !sub.is_connected() {
        publ.do_work();
        sub.poll(&mut |m| early.push(m.payload.to_vec()), 16);
        if start.elapsed() > timeout {
            return Err(BenchError::Child(format!(
                "the {who} side did not connect within {} s (is it running with the same --name?)",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(early)
}

/// Empty polls between two duty cycles of the ping side's publisher while it waits for an
/// echo ([`DutyCycle::Sparse`]). A round trip takes microseconds, far fewer polls, so a measured ping never waits on
/// it; but if the echo is late the publisher still sends heartbeats, answers NAKs and drains
/// queued bytes, so a lost ping is repaired instead of waited for until the session times out.
pub const POLLS_PER_DUTY_CYCLE: u32 = 4096;

/// The ping side's loop: offers each ping (no flush) and polls for its echo, running the
/// publisher's duty cycle every `POLLS` empty polls (a constant, so that `bench pingpong`'s
/// loop compiles as it did before `bench echo` asked for `POLLS = 1`).
///
/// With a floor `line`, a floor burst runs before the first measured ping and after every
/// `floor_every` of them (and after the last): the ping side asks the pong side to answer on
/// the line with a message of its own, so both processes, pinned where they are, measure the
/// machine's floor between two blocks of pings.
fn ping_loop<const POLLS: u32>(
    cfg: &PingPongConfig,
    clock: &Clock,
    mut publ: Publisher,
    mut sub: Subscriber,
    line: Option<&Line>,
) -> Result<(LatencyRecorder, Option<FloorMoments>), BenchError> {
    // The pong side sends nothing before the first ping.
    let early = wait_connected(&mut publ, &mut sub, cfg.connect_timeout, "pong")?;
    if !early.is_empty() {
        return Err(BenchError::Child(format!(
            "{} message(s) arrived from the pong side before the first ping",
            early.len()
        )));
    }
    let mut buf = vec![0u8; cfg.size];
    let mut rec = LatencyRecorder::new();
    let every = cfg.floor_every.max(1);
    // Every message on the ping stream, pings and floor requests, numbered for the group.
    let mut sequence = 0u64;
    let group = cfg.group;
    let mut send = move |publ: &mut Publisher, payload: &[u8]| {
        let r = if group {
            offer_as_member_spinning(publ, sequence, payload)
        } else {
            offer_spinning(publ, payload)
        };
        sequence += 1;
        r
    };
    let mut moments = FloorMoments::default();
    let mut block = LatencyRecorder::new();
    let mut next_floor = 0u64;
    // One burst: the one-line floor, then the two-line floor (one line each way, as the two
    // logs of a ping-pong), both with the pong side answering on the shared page.
    type Send<'s> = dyn FnMut(&mut Publisher, &[u8]) -> Result<(), OfferError> + 's;
    let mut floor_burst = |publ: &mut Publisher,
                           line: &Line,
                           moments: &mut FloorMoments,
                           send: &mut Send<'_>|
     -> Result<(), BenchError> {
        // No stale value (the last burst's LEAVE) may greet the pong side: it is reset
        // before the request is sent.
        line.word().store(0, std::sync::atomic::Ordering::Release);
        let mut req = vec![0u8; cfg.size];
        req[..8].copy_from_slice(&(FLOOR_REQUEST | next_floor).to_le_bytes());
        send(publ, &req).map_err(|e| BenchError::Child(format!("offer failed: {e}")))?;
        // A batched (normal-mode) stream sends it now: the pong side must get it to answer.
        publ.flush()
            .map_err(|e| BenchError::Child(format!("flush failed: {e}")))?;
        let one = crate::measure::floor::burst(
            line,
            FLOOR_BURST,
            FLOOR_BURST_WARMUP,
            clock,
            &mut next_floor,
            false,
        );
        let two = crate::measure::floor::burst(
            line,
            FLOOR_BURST,
            FLOOR_BURST_WARMUP,
            clock,
            &mut next_floor,
            true,
        );
        crate::measure::floor::leave(line.word());
        moments.bursts_ns.push(one.summary().median_ns);
        moments.two_line_bursts_ns.push(two.summary().median_ns);
        Ok(())
    };
    let result = with_cpu(cfg.cpus.a, || -> Result<(), BenchError> {
        for i in 0..cfg.warmup_count + cfg.count {
            if let Some(line) = line {
                if i >= cfg.warmup_count && (i - cfg.warmup_count) % every == 0 {
                    if i > cfg.warmup_count {
                        moments.blocks_ns.push(block.summary().median_ns);
                        block = LatencyRecorder::new();
                    }
                    floor_burst(&mut publ, line, &mut moments, &mut send)?;
                }
            }
            buf[..8].copy_from_slice(&i.to_le_bytes());
            let t0 = clock.now();
            send(&mut publ, &buf).map_err(|e| BenchError::Child(format!("offer failed: {e}")))?;
            let mut echoed = None;
            let mut empty_polls = 0u32;
            loop {
                let n = sub.poll(
                    &mut |m| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&m.payload[..8]);
                        echoed = Some((u64::from_le_bytes(b), m.payload.len()));
                    },
                    1,
                );
                if n > 0 {
                    break;
                }
                sub.idle(0);
                if !sub.is_connected() {
                    return Err(BenchError::Child(format!(
                        "the pong side went away while ping {i} waited for its echo"
                    )));
                }
                empty_polls += 1;
                if empty_polls % POLLS == 0 {
                    publ.do_work();
                }
            }
            let t1 = clock.now();
            sub.idle(1);
            if echoed != Some((i, cfg.size)) {
                return Err(BenchError::Child(format!(
                    "ping {i} of {} bytes was echoed as {echoed:?}",
                    cfg.size
                )));
            }
            if i >= cfg.warmup_count {
                let half_ns = clock.ticks_to_ns(t1 - t0) / 2.0;
                rec.record(half_ns);
                block.record(half_ns);
            }
        }
        if let Some(line) = line {
            moments.blocks_ns.push(block.summary().median_ns);
            floor_burst(&mut publ, line, &mut moments, &mut send)?;
        }
        Ok(())
    })?;
    result?;
    Ok((rec, line.map(|_| moments)))
}

/// Offers `payload`, spinning while the publisher is back-pressured.
#[inline]
pub(crate) fn offer_spinning(publ: &mut Publisher, payload: &[u8]) -> Result<(), OfferError> {
    loop {
        match publ.offer(payload) {
            Ok(_) => return Ok(()),
            Err(OfferError::BackPressured) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// The loop of a side that answers (the pong, the load reflector): hands `on_message` the
/// messages that arrived while it connected (`early`, from [`wait_connected`]), then each one
/// as it comes, running the publisher's duty cycle when idle, until the other side's
/// publisher goes. Stops at the first error of `on_message`. `tick` runs once per loop.
pub(crate) fn serve(
    publ: &mut Publisher,
    sub: &mut Subscriber,
    early: &[Vec<u8>],
    batch: usize,
    mut on_message: impl FnMut(&mut Publisher, &[u8]) -> Result<(), OfferError>,
    mut tick: impl FnMut(),
) -> Result<(), OfferError> {
    for payload in early {
        on_message(publ, payload)?;
    }
    let mut failed = None;
    loop {
        tick();
        let n = sub.poll(
            &mut |m| {
                if failed.is_none() {
                    failed = on_message(publ, m.payload).err();
                }
            },
            batch,
        );
        if let Some(e) = failed {
            return Err(e);
        }
        if n == 0 {
            if !sub.is_connected() {
                return Ok(());
            }
            publ.do_work();
        }
        sub.idle(n);
    }
}

/// The pong side of a ping-pong, as a helper: echoes every ping.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Pong(pub PingPongConfig);

impl Role for Pong {
    const TAG: &'static str = "pong";
    const WHAT: &'static str = "ping-pong pong side";
}

/// The pong side: echoes every ping until the ping side closes.
pub fn pong(cfg: &PingPongConfig) -> Result<(), BenchError> {
    validate(cfg)?;
    let ctx = context()?;
    let (ping_uri, pong_uri) = uris(cfg);
    let mut publ = ctx.publisher("bench.pong", &pong_uri)?;
    let mut sub = ctx.subscriber("bench.ping", &ping_uri, cfg.idle)?;
    peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
    // Ready as soon as the endpoints exist (telling the URI bound), so the ping side can
    // subscribe; then both sides wait for each other.
    say_ready_with(if cfg.transport == Scheme::Ipc {
        ""
    } else {
        publ.uri()
    });
    // Pings that arrived while this side still waited for its own subscriber are echoed
    // first, in order.
    let early = wait_connected(&mut publ, &mut sub, cfg.connect_timeout, "ping")?;
    let line = match &cfg.floor_line {
        Some(name) => Some(Line::open(name, false)?),
        None => None,
    };
    let echo = |publ: &mut Publisher, payload: &[u8]| {
        if let Some(line) = &line {
            // A floor request (FLOOR_REQUEST, the top bit of word 0): answer the burst on the
            // line, then go back to echoing.
            if payload.get(7).is_some_and(|b| b & 0x80 != 0) {
                crate::measure::floor::answer(line);
                return Ok(());
            }
        }
        offer_spinning(publ, payload)
    };
    if cfg.group {
        let echoed = serve_group(publ, sub, &early, echo)
            .map_err(|e| BenchError::Child(format!("echo failed: {e}")))?;
        say_result(&EchoReport {
            cpu_s: crate::cpu_seconds_self(),
            echoed,
        });
        return Ok(());
    }
    serve(&mut publ, &mut sub, &early, 16, echo, || {})
        .map_err(|e| BenchError::Child(format!("echo failed: {e}")))?;
    say_result(&EchoReport {
        cpu_s: crate::cpu_seconds_self(),
        echoed: sub.counters().messages,
    });
    Ok(())
}

/// The pong side's loop for a `group` ping-pong: the ping subscriber inside a
/// `FailoverSubscriber` of [`GROUP`] (the pings that arrived while connecting, `early`, still
/// carry the group's header: echoed without it); returns how many were echoed.
fn serve_group(
    mut publ: Publisher,
    sub: Subscriber,
    early: &[Vec<u8>],
    mut on_message: impl FnMut(&mut Publisher, &[u8]) -> Result<(), OfferError>,
) -> Result<u64, String> {
    let header = peregrine_wire::failover::FAILOVER_HEADER_LEN;
    let mut echoed = 0u64;
    for payload in early {
        on_message(&mut publ, payload.get(header..).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        echoed += 1;
    }
    let mut group = peregrine::failover::FailoverSubscriber::new(
        vec![sub],
        GROUP,
        peregrine::failover::ArbiterConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut failed = None;
    loop {
        let n = group.poll(
            &mut |m| {
                if failed.is_none() {
                    failed = on_message(&mut publ, m.payload).err();
                }
            },
            16,
        );
        if let Some(e) = failed {
            return Err(e.to_string());
        }
        echoed += n as u64;
        if n == 0 {
            if !group.subscribers()[0].is_connected() {
                return Ok(echoed);
            }
            publ.do_work();
        }
        group.idle(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race behind a hang seen under load: the ping side is ready (its publisher has the
    /// pong's subscriber, its subscriber follows the pong's publisher) and sends ping 0 while
    /// the pong side still waits for its own publisher's subscriber. The ping must come out of
    /// the wait, to be echoed, not be dropped by it.
    #[test]
    fn a_message_that_arrives_while_waiting_is_handed_back_not_dropped() {
        let name = format!("pg-wait-{}", std::process::id());
        let (ping_uri, pong_uri) = (format!("ipc://{name}-ping"), format!("ipc://{name}-pong"));
        let ctx = context().unwrap();
        let mut ping_pub = ctx.publisher("bench.ping", &ping_uri).unwrap();
        let mut pong_sub = ctx
            .subscriber("bench.ping", &ping_uri, IdleKind::Spin)
            .unwrap();
        let start = Instant::now();
        while !pong_sub.is_connected() {
            assert_eq!(pong_sub.poll(&mut |_| {}, 1), 0);
            assert!(start.elapsed() < Duration::from_secs(5), "never attached");
        }
        ping_pub.offer(b"ping 0 (early)").unwrap();
        let mut pong_pub = ctx.publisher("bench.pong", &pong_uri).unwrap();

        // The ping side's subscriber to the pong stream attaches only later.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut ping_sub = context()
                .unwrap()
                .subscriber("bench.pong", &pong_uri, IdleKind::Spin)
                .unwrap();
            while done_rx.try_recv().is_err() {
                ping_sub.poll(&mut |_| {}, 1);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let early = wait_connected(
            &mut pong_pub,
            &mut pong_sub,
            Duration::from_secs(10),
            "ping",
        );
        done_tx.send(()).unwrap();
        late.join().unwrap();
        assert_eq!(early.unwrap(), vec![b"ping 0 (early)".to_vec()]);
        assert_eq!(pong_sub.poll(&mut |_| {}, 16), 0, "delivered twice");
    }

    fn config(transport: Scheme) -> PingPongConfig {
        PingPongConfig {
            transport,
            size: 32,
            count: 10,
            warmup_count: 1,
            cpus: CpuPair { a: 0, b: 1 },
            idle: IdleKind::Spin,
            name: "bench-pp-test".into(),
            connect_timeout: Duration::from_secs(1),
            ping_uri: None,
            pong_uri: None,
            mode: StreamMode::default(),
            floor_every: 0,
            floor_line: None,
            group: false,
            pong_netns: None,
        }
    }

    /// `bench pingpong` keeps the latency configuration; a URI naming its own mode keeps it.
    #[test]
    fn the_pingpong_streams_are_urgent_unless_a_mode_is_set() {
        let (ping, pong) = uris(&config(Scheme::Udp));
        assert_eq!(ping, "udp://127.0.0.1:0?mode=urgent");
        assert_eq!(pong, "udp://127.0.0.1:0?mode=urgent");
        let mut cfg = config(Scheme::Tcp);
        cfg.mode = StreamMode::Normal;
        cfg.ping_uri = Some("tcp://127.0.0.1:4000?mode=urgent".into());
        let (ping, pong) = uris(&cfg);
        assert_eq!(ping, "tcp://127.0.0.1:4000?mode=urgent");
        assert_eq!(pong, "tcp://127.0.0.1:0?mode=normal");
    }

    /// A helper spec written before the mode existed still reads (as urgent).
    #[test]
    fn a_config_without_a_mode_reads_as_urgent() {
        let mut json = serde_json::to_value(config(Scheme::Udp)).unwrap();
        assert_eq!(json["mode"], "urgent");
        json.as_object_mut().unwrap().remove("mode");
        let back: PingPongConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back.mode, StreamMode::Urgent);
    }

    #[test]
    fn send_modes_parse_by_name_and_a_bad_one_names_the_choices() {
        assert_eq!("normal".parse::<StreamMode>(), Ok(StreamMode::Normal));
        assert_eq!("urgent".parse::<StreamMode>(), Ok(StreamMode::Urgent));
        let e = "fast".parse::<StreamMode>().unwrap_err();
        assert!(
            e.contains("'fast'") && e.contains("normal") && e.contains("urgent"),
            "{e}"
        );
    }
}
