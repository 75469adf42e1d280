//! The fan-out probe through NATS: `nats-server` on loopback (the Debian package, default
//! settings), a feed publishing each UPDATE on its item's subject (`md.FEED1.<item>`), and N
//! clients subscribing to their items' subjects. The feed and the clients are this program's
//! helper processes (`peregrine helper`), publishing the same UPDATE bytes the Peregrine feed
//! publishes, and checking and timing them the same way the Peregrine client does.
//!
//! The NATS client protocol is written here, not taken from a crate: the benchmark's clients
//! must read with the same blocking-then-busy-polling loop as `peregrine client` and report
//! the same counters, from one thread, so that the comparison measures the servers and not two
//! client runtimes; the official Rust client is asynchronous (tokio) and would add a runtime,
//! TLS and a second scheduling model to one side only. The protocol is the documented text
//! protocol (INFO, CONNECT, PUB, SUB, MSG, PING, PONG, +OK, -ERR), and what a client needs of
//! it is small; every line from the server is parsed with bounds checked, never trusted.

use super::peregrine::Workdir;
use super::process::Proc;
use super::{
    account, read_client_items, read_feed_items, ClientReport, FanoutConfig, LatencyStats, Probe,
    ProbeRecord, System, Watchlists,
};
use crate::helper::protocol::{say_ready, say_result, Helper, Role};
use crate::BenchError;
use hdrhistogram::Histogram;
use peregrine_md::codec::Message;
use peregrine_md::quotes::{Draws as _, Quote, SplitMix64, UpdateLayout, Zipf};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The program the comparison runs (Debian package `nats-server`).
pub const SERVER: &str = "nats-server";
/// Subjects are `md.FEED1.<item>`.
const SUBJECT_PREFIX: &str = "md.FEED1.";
/// The subject of the feed's last message: every client subscribes to it, and takes it as
/// the end of the stream (NATS keeps one publisher's order to each subscriber).
const END_SUBJECT: &str = "md.FEED1-end";
/// The longest protocol line accepted from the server (INFO lines are a few hundred bytes).
const MAX_LINE: usize = 64 << 10;

/// Whether `nats-server` can be run.
pub fn server_available() -> bool {
    Command::new(SERVER)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A NATS client connection: a socket, a read buffer and a buffered writer.
struct Conn {
    stream: TcpStream,
    w: BufWriter<TcpStream>,
    buf: Vec<u8>,
    /// Start of the unparsed bytes in `buf`.
    at: usize,
    /// What one read fills (allocated and zeroed once), copied to `buf` as `peregrine client`
    /// does with its own.
    chunk: Vec<u8>,
}

/// One thing the server sent.
#[derive(Debug, PartialEq, Eq)]
enum Op<'a> {
    Msg { sid: &'a [u8], payload: &'a [u8] },
    Ping,
    Pong,
    Ok,
    Info,
    Err(String),
}

/// Why the server's bytes could not be read.
fn protocol(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Parses one operation from `b`: `Ok(None)` when it is not complete yet, else the operation
/// and the bytes it took.
fn parse_op(b: &[u8]) -> io::Result<Option<(Op<'_>, usize)>> {
    let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
        if b.len() > MAX_LINE {
            return Err(protocol(format!("a line longer than {MAX_LINE} bytes")));
        }
        return Ok(None);
    };
    let line = &b[..eol];
    let word_end = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
    let (verb, rest) = (&line[..word_end], line.get(word_end + 1..).unwrap_or(&[]));
    let op = match verb.to_ascii_uppercase().as_slice() {
        b"MSG" => {
            // MSG <subject> <sid> [reply-to] <#bytes>
            let args: Vec<&[u8]> = rest
                .split(|&c| c == b' ')
                .filter(|a| !a.is_empty())
                .collect();
            if !(3..=4).contains(&args.len()) {
                return Err(protocol(format!(
                    "a MSG line with {} arguments: {}",
                    args.len(),
                    String::from_utf8_lossy(line)
                )));
            }
            let len: usize = std::str::from_utf8(args[args.len() - 1])
                .ok()
                .and_then(|s| s.parse().ok())
                .filter(|&n| n <= 64 << 20)
                .ok_or_else(|| {
                    protocol(format!(
                        "a MSG length that is not a number: {}",
                        String::from_utf8_lossy(line)
                    ))
                })?;
            let start = eol + 2;
            let end = start + len;
            if b.len() < end + 2 {
                return Ok(None);
            }
            if &b[end..end + 2] != b"\r\n" {
                return Err(protocol("a MSG payload not followed by CRLF"));
            }
            return Ok(Some((
                Op::Msg {
                    sid: args[1],
                    payload: &b[start..end],
                },
                end + 2,
            )));
        }
        b"PING" => Op::Ping,
        b"PONG" => Op::Pong,
        b"+OK" => Op::Ok,
        b"INFO" => Op::Info,
        b"-ERR" => Op::Err(String::from_utf8_lossy(rest).into_owned()),
        _ => {
            return Err(protocol(format!(
                "an unknown operation: {}",
                String::from_utf8_lossy(&line[..line.len().min(80)])
            )))
        }
    };
    Ok(Some((op, eol + 2)))
}

impl Conn {
    /// Connects, reads the server's INFO and sends CONNECT.
    fn connect(addr: SocketAddr, name: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        let w = BufWriter::with_capacity(64 << 10, stream.try_clone()?);
        let mut c = Conn {
            stream,
            w,
            buf: Vec::with_capacity(256 << 10),
            at: 0,
            chunk: vec![0; 64 << 10],
        };
        c.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        match c.next_op_owned()? {
            Some(OwnedOp::Info) => {}
            other => {
                return Err(protocol(format!(
                    "the server began with {other:?}, not INFO"
                )))
            }
        }
        write!(
            c.w,
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"name\":\"{name}\",\"lang\":\"rust-peregrine-bench\",\"version\":\"{}\",\"protocol\":1,\"echo\":false}}\r\n",
            env!("CARGO_PKG_VERSION")
        )?;
        Ok(c)
    }

    /// Sends PING and reads until its PONG: the server has then processed everything sent
    /// before it (subscriptions, publications). Waits up to a minute.
    fn round_trip(&mut self) -> io::Result<()> {
        self.stream
            .set_read_timeout(Some(Duration::from_secs(60)))?;
        self.w.write_all(b"PING\r\n")?;
        self.w.flush()?;
        loop {
            match self.next_op_owned()? {
                Some(OwnedOp::Pong) => return Ok(()),
                Some(OwnedOp::Ping) => self.pong()?,
                Some(OwnedOp::Err(e)) => return Err(protocol(format!("-ERR {e}"))),
                Some(_) => {}
                None => return Err(io::ErrorKind::UnexpectedEof.into()),
            }
        }
    }

    fn pong(&mut self) -> io::Result<()> {
        self.w.write_all(b"PONG\r\n")?;
        self.w.flush()
    }

    /// Reads more bytes into the buffer: `Ok(false)` at end of stream. A read timeout is
    /// returned as `WouldBlock`/`TimedOut`.
    fn fill(&mut self) -> io::Result<bool> {
        if self.at > 0 && self.at * 2 >= self.buf.len() {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let n = self.stream.read(&mut self.chunk)?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n > 0)
    }

    /// The next operation, blocking (for set-up: copies what it returns).
    fn next_op_owned(&mut self) -> io::Result<Option<OwnedOp>> {
        loop {
            if let Some((op, used)) = parse_op(&self.buf[self.at..])? {
                let owned = match op {
                    Op::Msg { .. } => OwnedOp::Msg,
                    Op::Ping => OwnedOp::Ping,
                    Op::Pong => OwnedOp::Pong,
                    Op::Ok => OwnedOp::Ok,
                    Op::Info => OwnedOp::Info,
                    Op::Err(e) => OwnedOp::Err(e),
                };
                self.at += used;
                return Ok(Some(owned));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }
}

#[derive(Debug)]
enum OwnedOp {
    Msg,
    Ping,
    Pong,
    Ok,
    Info,
    Err(String),
}

/// The NATS feed helper's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NatsFeedSpec {
    pub server: SocketAddr,
    pub items: PathBuf,
    pub rate: f64,
    pub seconds: f64,
    pub size: usize,
    pub seed: u64,
    pub items_out: PathBuf,
}

impl Role for NatsFeedSpec {
    const TAG: &'static str = "nats_feed";
    const WHAT: &'static str = "NATS feed";
}

/// What the NATS feed reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NatsFeedReport {
    pub updates: u64,
    pub seconds: f64,
    pub updates_per_s: f64,
    pub cpu_s: f64,
}

/// The NATS feed: UPDATEs of uniformly drawn items at `rate` for `seconds`, each published on
/// its item's subject, then the end message and a PING/PONG (everything reached the server).
/// Items are numbered from 1 (`item_seq` 0 stands for the image NATS does not have).
pub fn feed(spec: &NatsFeedSpec) -> Result<(), BenchError> {
    let io = |e: io::Error| BenchError::Child(format!("nats feed: {e}"));
    let names: Vec<String> = std::fs::read_to_string(&spec.items)?
        .lines()
        .map(str::to_string)
        .collect();
    if names.is_empty() {
        return Err(BenchError::Config(format!(
            "nats feed: {} holds no item",
            spec.items.display()
        )));
    }
    let layout = UpdateLayout::for_size(spec.size)
        .map_err(|e| BenchError::Config(format!("--size {}: {e}", spec.size)))?;
    let mut rng = SplitMix64::seeded(spec.seed);
    let mut quotes: Vec<Quote> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut q = Quote::new(n.clone(), i as u32 + 1, &mut rng);
            q.seq = 1;
            q
        })
        .collect();
    let subjects: Vec<String> = names
        .iter()
        .map(|n| format!("{SUBJECT_PREFIX}{n}"))
        .collect();
    let zipf = Zipf::new(quotes.len(), 0.0);
    let mut c = Conn::connect(spec.server, "peregrine-bench-feed").map_err(io)?;
    c.round_trip().map_err(io)?;
    say_ready();
    let mut scratch = Vec::with_capacity(spec.size);
    let mut sent = 0u64;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(spec.seconds);
    // The same pacing as `peregrine feed`: what is due by the schedule, at most 1024 per turn,
    // then one write of the buffer.
    while Instant::now() < end {
        let due = (start.elapsed().as_secs_f64() * spec.rate) as u64 + 1;
        let mut burst = 0;
        while sent < due && burst < 1024 {
            let i = zipf.sample(&mut rng);
            let q = &mut quotes[i];
            q.tick(&mut rng);
            q.encode_update(peregrine_agent::monotonic_ns(), &layout, &mut scratch);
            write!(c.w, "PUB {} {}\r\n", subjects[i], scratch.len()).map_err(io)?;
            c.w.write_all(&scratch).map_err(io)?;
            c.w.write_all(b"\r\n").map_err(io)?;
            q.seq = q.seq.wrapping_add(1);
            sent += 1;
            burst += 1;
        }
        c.w.flush().map_err(io)?;
        if sent < due {
            continue;
        }
        let next_due = start + Duration::from_secs_f64(sent as f64 / spec.rate);
        if let Some(wait) = peregrine_md::quotes::pacing_sleep(next_due) {
            std::thread::sleep(wait);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    write!(c.w, "PUB {END_SUBJECT} 0\r\n\r\n").map_err(io)?;
    c.round_trip().map_err(io)?;
    let mut w = BufWriter::new(std::fs::File::create(&spec.items_out)?);
    for q in &quotes {
        writeln!(w, "{} {}", q.name, q.seq - 1)?;
    }
    w.flush()?;
    say_result(&NatsFeedReport {
        updates: sent,
        seconds,
        updates_per_s: sent as f64 / seconds,
        cpu_s: crate::cpu_seconds_self(),
    });
    Ok(())
}

/// The NATS client helper's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NatsClientSpec {
    pub server: SocketAddr,
    pub watch: PathBuf,
    pub items_out: PathBuf,
    /// After data, read without blocking this long before blocking again (0: always block),
    /// as `peregrine client --busy-poll-us`.
    pub busy_poll_us: u64,
    /// Give up (and report) after this long without the end message.
    pub max_seconds: f64,
    /// Record latency only for updates that arrive this long after the first.
    pub latency_after_s: f64,
}

impl Role for NatsClientSpec {
    const TAG: &'static str = "nats_client";
    const WHAT: &'static str = "NATS client";
}

/// The NATS client: subscribes to its items (subscription id = the item's line, from 1) and
/// the end subject, says ready once the server confirmed them, then reads MSGs until the end
/// message, the connection's loss, or `max_seconds`; checks each item's `item_seq` and records
/// one-way latency from the UPDATE's timestamp, as `peregrine client` does.
pub fn client(spec: &NatsClientSpec) -> Result<(), BenchError> {
    let io = |e: io::Error| BenchError::Child(format!("nats client: {e}"));
    let names: Vec<String> = std::fs::read_to_string(&spec.watch)?
        .lines()
        .map(str::to_string)
        .collect();
    let mut c = Conn::connect(spec.server, "peregrine-bench-client").map_err(io)?;
    for (i, n) in names.iter().enumerate() {
        write!(c.w, "SUB {SUBJECT_PREFIX}{n} {}\r\n", i + 1).map_err(io)?;
    }
    write!(c.w, "SUB {END_SUBJECT} 0\r\n").map_err(io)?;
    c.round_trip().map_err(io)?;
    say_ready();

    // Per item: last item_seq and updates.
    let mut last = vec![0u32; names.len()];
    let mut updates = vec![0u64; names.len()];
    let mut r = ClientReport::default();
    let mut lat: Histogram<u64> =
        Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    let deadline = Instant::now() + Duration::from_secs_f64(spec.max_seconds);
    let mut spin = peregrine_agent::SpinThenBlock::new(Duration::from_micros(spec.busy_poll_us));
    c.stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let mut ended = false;
    let mut pongs_owed = 0;
    let mut record_from_ns: Option<u64> = None;
    while !ended && Instant::now() < deadline {
        match c.fill() {
            Ok(true) => {
                if let Some(nonblocking) = spin.data() {
                    c.stream.set_nonblocking(nonblocking).map_err(io)?;
                }
            }
            Ok(false) => {
                r.disconnects += 1;
                break;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if let Some(nonblocking) = spin.nothing() {
                    c.stream.set_nonblocking(nonblocking).map_err(io)?;
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(io(e)),
            Err(_) => {
                r.disconnects += 1;
                break;
            }
        }
        let now_ns = peregrine_agent::monotonic_ns();
        loop {
            let (op, used) = match parse_op(&c.buf[c.at..]) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => return Err(io(e)),
            };
            match op {
                Op::Msg { sid, payload } => {
                    if sid == b"0" {
                        ended = true;
                    } else {
                        let k = std::str::from_utf8(sid)
                            .ok()
                            .and_then(|s| s.parse::<usize>().ok())
                            .filter(|&k| (1..=names.len()).contains(&k));
                        match (k, Message::parse(payload)) {
                            (Some(k), Ok(Message::Update(u))) => {
                                r.updates += 1;
                                let from = *record_from_ns
                                    .get_or_insert(now_ns + (spec.latency_after_s * 1e9) as u64);
                                if now_ns >= u.timestamp_ns && now_ns >= from {
                                    lat.saturating_record(now_ns - u.timestamp_ns);
                                }
                                if u.item_seq != last[k - 1].wrapping_add(1) {
                                    r.gaps += 1;
                                }
                                last[k - 1] = u.item_seq;
                                updates[k - 1] += 1;
                            }
                            _ => r.gaps += 1,
                        }
                    }
                }
                Op::Ping => pongs_owed += 1,
                Op::Err(e) => {
                    tracing::warn!("nats client: the server said -ERR {e}");
                    r.disconnects += 1;
                    ended = true;
                }
                Op::Pong | Op::Ok | Op::Info => {}
            }
            c.at += used;
            if ended {
                break;
            }
        }
        if pongs_owed > 0 {
            if let Some(nonblocking) = spin.block() {
                c.stream.set_nonblocking(nonblocking).map_err(io)?;
            }
            for _ in 0..pongs_owed {
                c.pong().map_err(io)?;
            }
            pongs_owed = 0;
        }
    }
    let mut w = BufWriter::new(std::fs::File::create(&spec.items_out)?);
    for (i, n) in names.iter().enumerate() {
        writeln!(w, "{n} 0 {} {} 0", last[i], updates[i])?;
    }
    w.flush()?;
    if !ended && r.disconnects == 0 {
        tracing::warn!("nats client: no end message within {} s", spec.max_seconds);
    }
    r.latency = LatencyStats {
        mean_ns: lat.mean(),
        stddev_ns: lat.stdev(),
        min_ns: lat.min() as f64,
        max_ns: lat.max() as f64,
        points: lat.len(),
    };
    r.cpu_s = crate::cpu_seconds_self();
    say_result(&r);
    Ok(())
}

/// Probes through NATS, one after the other, each with a fresh `nats-server`.
#[derive(Debug)]
pub struct NatsRun {
    exe: PathBuf,
    cfg: FanoutConfig,
    watch: Watchlists,
    dir: Workdir,
    probes: u32,
}

/// A free TCP port on loopback (bound and released: the server binds it right after).
fn free_port() -> Result<u16, BenchError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl NatsRun {
    pub fn new(exe: &Path, cfg: &FanoutConfig) -> Result<NatsRun, BenchError> {
        cfg.validate()?;
        if !server_available() {
            return Err(BenchError::Config(format!(
                "--compare nats needs {SERVER}, which is not installed: apt-get install nats-server"
            )));
        }
        let watch = Watchlists::new(cfg.clients, cfg.items_per_client, cfg.overlap)?;
        let dir = Workdir::new("nats")?;
        watch.write_items(&dir.path.join("items.txt"))?;
        for k in 0..cfg.clients {
            watch.write(k, &dir.path.join(format!("watch{k}.txt")))?;
        }
        Ok(NatsRun {
            exe: exe.to_path_buf(),
            cfg: cfg.clone(),
            watch,
            dir,
            probes: 0,
        })
    }

    fn start_server(&self) -> Result<(Proc, SocketAddr), BenchError> {
        let port = free_port()?;
        let mut cmd = Command::new(SERVER);
        cmd.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
        let server = Proc::spawn(cmd, SERVER)?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > end {
                return Err(BenchError::Child(format!(
                    "{SERVER} did not accept connections on {addr} within 10 s: {}",
                    server.stderr_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok((server, addr))
    }

    /// Runs one probe with the feed at `rate` updates per second.
    pub fn probe(&mut self, rate: f64) -> Result<Probe, BenchError> {
        self.probes += 1;
        let n = self.probes;
        let d = self.dir.path.clone();
        let (server, addr) = self.start_server()?;
        if let Some(p) = self.cfg.pin {
            server.pin(p.b)?;
        }
        let busy_poll_us = self.cfg.client_busy_poll_us;
        let mut clients = Vec::with_capacity(self.cfg.clients);
        for k in 0..self.cfg.clients {
            let spec = NatsClientSpec {
                server: addr,
                watch: d.join(format!("watch{k}.txt")),
                items_out: d.join(format!("client{k}-{n}.items")),
                busy_poll_us,
                max_seconds: self.cfg.seconds + 60.0,
                latency_after_s: self.cfg.warmup_seconds,
            };
            let c = Helper::start(&self.exe, &spec)?;
            if let Some(p) = self.cfg.pin {
                super::process::pin_process(c.pid(), p.a)?;
            }
            clients.push(c);
        }
        let feed_items = d.join(format!("feed-{n}.items"));
        let feed = Helper::start(
            &self.exe,
            &NatsFeedSpec {
                server: addr,
                items: d.join("items.txt"),
                rate,
                seconds: self.cfg.seconds,
                size: self.cfg.size,
                seed: self.cfg.seed,
                items_out: feed_items.clone(),
            },
        )?;
        if let Some(p) = self.cfg.pin {
            super::process::pin_process(feed.pid(), p.a)?;
        }
        let done: NatsFeedReport = feed.finish()?;
        let mut reports = Vec::with_capacity(clients.len());
        for c in clients {
            reports.push(c.finish::<ClientReport>()?);
        }
        let server_cpu = server.cpu_s().unwrap_or(0.0);
        server.terminate();
        drop(server);

        let sent = read_feed_items(&feed_items)?;
        let mut accounts = Vec::with_capacity(self.cfg.clients);
        for k in 0..self.cfg.clients {
            let got = read_client_items(&d.join(format!("client{k}-{n}.items")))?;
            accounts.push(account(self.watch.of(k), &sent, &got));
        }
        let mut cpu_s = BTreeMap::new();
        cpu_s.insert("feed".to_string(), done.cpu_s);
        cpu_s.insert("nats-server".to_string(), server_cpu);
        cpu_s.insert(
            "clients".to_string(),
            reports.iter().map(|r| r.cpu_s).sum::<f64>(),
        );
        let record = ProbeRecord {
            rate_asked: rate,
            feed_rate: done.updates_per_s,
            feed_updates: done.updates,
            feed_seconds: done.seconds,
            refused: 0,
            clients: reports,
            accounts,
            tier_losses: 0,
            tier_slow: 0,
            cpu_s,
        };
        Ok(Probe::judge(System::Nats, record, self.cfg.max_lag_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_operations_parse_and_wait_for_whole_messages() {
        let b = b"MSG md.FEED1.AAA.O 7 5\r\nhello\r\nPING\r\n";
        let (op, used) = parse_op(b).unwrap().unwrap();
        assert_eq!(
            op,
            Op::Msg {
                sid: b"7",
                payload: b"hello"
            }
        );
        assert_eq!(parse_op(&b[used..]).unwrap().unwrap(), (Op::Ping, 6));
        // Cut anywhere before the end: not complete yet.
        for cut in 0..used {
            assert_eq!(parse_op(&b[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (op, _) = parse_op(b"MSG a.b 12 reply.to 0\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            op,
            Op::Msg {
                sid: b"12",
                payload: b""
            }
        );
        let (op, _) = parse_op(b"-ERR 'Slow Consumer'\r\n").unwrap().unwrap();
        assert_eq!(op, Op::Err("'Slow Consumer'".into()));
        assert_eq!(
            parse_op(b"INFO {\"a\":1}\r\n").unwrap().unwrap().0,
            Op::Info
        );
    }

    proptest::proptest! {
        /// Whatever the server sends, parsing never panics, and an operation it accepts never
        /// claims more bytes than there are.
        #[test]
        fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            if let Ok(Some((_, used))) = parse_op(&bytes) {
                proptest::prop_assert!(used <= bytes.len());
            }
        }

        /// A MSG of any subject, sid and payload is read back exactly, whole or not at all.
        #[test]
        fn messages_read_back_exactly(
            subject in "[a-zA-Z0-9.]{1,40}",
            sid in 0u32..100_000,
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            cut in 0usize..400,
        ) {
            let mut b = format!("MSG {subject} {sid} {}\r\n", payload.len()).into_bytes();
            b.extend_from_slice(&payload);
            b.extend_from_slice(b"\r\n");
            let sid_text = sid.to_string();
            let (op, used) = parse_op(&b).unwrap().unwrap();
            proptest::prop_assert_eq!(used, b.len());
            proptest::prop_assert_eq!(op, Op::Msg { sid: sid_text.as_bytes(), payload: &payload });
            if cut < b.len() {
                proptest::prop_assert_eq!(parse_op(&b[..cut]).unwrap(), None);
            }
        }
    }

    #[test]
    fn malformed_server_lines_are_errors_not_panics() {
        for bad in [
            &b"MSG a 1 x\r\n"[..],
            b"MSG a\r\n",
            b"MSG a 1 2 3 4\r\n",
            b"MSG a 1 99999999999999999999\r\n",
            b"MSG a 1 3\r\nabcXY",
            b"HELLO\r\n",
        ] {
            assert!(parse_op(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse_op(&vec![b'x'; MAX_LINE + 1]).is_err());
        assert_eq!(parse_op(&[b'x'; 100]).unwrap(), None);
    }
}
