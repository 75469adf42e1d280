//! `peregrine client`: the market data test client (the rmdstestclient role). Logs in to a
//! distributor, opens its watchlist (exact names and globs), counts updates per second and
//! measures one-way latency from the feed's CLOCK_MONOTONIC timestamps (meaningful when the
//! feed runs on the same host), and with `--print` writes one line per message:
//!
//! ```text
//! REFRESH AAA.O DSPLY_NAME="AAA.O" CURRENCY=USD HST_CLOSE=42.17 BID=42.18 ASK=42.20 ...
//! UPDATE AAA.O BID=42.19 ASK=42.21 BIDSIZE=300 ASKSIZE=1200
//! STATUS AAA.O stale "backbone loss: waiting for a fresh image"
//! CONFLATED items=3 dropped=1200
//! ```
//!
//! It checks every item's `item_seq`: an UPDATE that does not follow the item's previous
//! REFRESH or UPDATE by one is a gap the distributor did not announce (counted in `gaps`;
//! there should never be one). When the distributor goes away it reconnects with back-off,
//! logs in again and reopens the watchlist.

use super::md::read_list;
use super::Stop;
use crate::flags::md::ClientArgs;
use anyhow::{bail, Context as _, Result};
use hdrhistogram::Histogram;
use peregrine_md::codec::{
    LoginRepr, LoginResult, Message, Messages, OpenRepr, PatternList, MAX_MESSAGE_LEN,
};
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{check_item_pattern, ItemState};
use serde_json::json;
use std::collections::HashMap;
use std::io::{self, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// First reconnection delay; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a read waits, so that statistics lines and deadlines are kept.
const READ_TIMEOUT: Duration = Duration::from_millis(100);

/// What the client counted over its whole run (every connection).
struct Totals {
    messages: u64,
    refreshes: u64,
    updates: u64,
    statuses: u64,
    conflated: u64,
    /// UPDATEs whose item_seq did not follow the item's last message by one.
    gaps: u64,
    /// UPDATEs of an item last said to be stale (or never refreshed).
    updates_without_image: u64,
    reconnects: u64,
    /// One-way latency of UPDATEs, nanoseconds.
    latency: Histogram<u64>,
    /// Every item received, by name, over every connection (for `--items-out`).
    tallies: Vec<ItemTally>,
    tally_of: HashMap<String, usize>,
}

/// What the client received of one item over its whole run.
struct ItemTally {
    name: String,
    /// The item_seq of its first REFRESH.
    first_seq: u32,
    /// The item_seq of its last REFRESH or UPDATE.
    last_seq: u32,
    updates: u64,
    /// REFRESHes after the first (an image the distributor asked the feed for again).
    refreshes: u64,
}

/// What one connection knows of an item (by the distributor's id).
struct ItemView {
    name: String,
    /// The item_seq of its last REFRESH or UPDATE; `None` while it is not ok.
    seq: Option<u32>,
    /// Its entry in [`Totals::tallies`].
    tally: usize,
}

/// Why a connection ended.
enum End {
    /// Asked to (signal, --count, --seconds).
    Stop,
    /// The distributor closed it or it broke.
    Lost(String),
}

struct Client {
    a: ClientArgs,
    token: Vec<u8>,
    watch: Vec<String>,
    dict: Dictionary,
    addr: SocketAddr,
    stop: Stop,
    start: Instant,
    deadline: Option<Instant>,
    /// Latency is recorded from this time on (`--latency-after-s` after the first UPDATE).
    record_from_ns: Option<u64>,
    t: Totals,
    out: BufWriter<io::Stdout>,
    last_line: Instant,
    updates_at_line: u64,
}

pub fn run(a: ClientArgs) -> Result<()> {
    let stop = Stop::install()?;
    let token = match &a.token {
        Some(t) => t.clone().into_bytes(),
        None => match std::env::var_os("PEREGRINE_MD_TOKEN") {
            Some(t) => t.into_encoded_bytes(),
            None => bail!("no token: give --token T, or set PEREGRINE_MD_TOKEN (which keeps it out of the process list)"),
        },
    };
    if token.is_empty() || token.len() > 255 {
        bail!(
            "the token is {} bytes long: give 1 to 255 bytes",
            token.len()
        );
    }
    let watch = read_list(&a.watch, "watch pattern", |l| {
        check_item_pattern(l.as_bytes()).map(drop).map_err(|e| {
            format!(
                "{e}: give an item name or a glob, {}",
                peregrine_md::model::PATTERN_ALPHABET
            )
        })
    })?;
    let dict = match &a.dictionary {
        Some(p) => Dictionary::load(p).map_err(|e| anyhow::anyhow!("--dictionary: {e}"))?,
        None => Dictionary::builtin(),
    };
    let addr = a
        .connect
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .with_context(|| {
            format!(
                "--connect {} is not an address: give HOST:PORT, for example 127.0.0.1:14500",
                a.connect
            )
        })?;
    let start = Instant::now();
    let mut c = Client {
        deadline: a.seconds.map(|s| start + Duration::from_secs_f64(s)),
        record_from_ns: None,
        a,
        token,
        watch,
        dict,
        addr,
        stop,
        start,
        t: Totals {
            messages: 0,
            refreshes: 0,
            updates: 0,
            statuses: 0,
            conflated: 0,
            gaps: 0,
            updates_without_image: 0,
            reconnects: 0,
            latency: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            tallies: Vec::new(),
            tally_of: HashMap::new(),
        },
        out: BufWriter::with_capacity(64 << 10, io::stdout()),
        last_line: start,
        updates_at_line: 0,
    };
    let result = c.run();
    if let Some(path) = &c.a.items_out {
        c.write_items(path)
            .with_context(|| format!("--items-out {}", path.display()))?;
    }
    c.summary()?;
    result
}

impl Client {
    fn stopping(&self) -> bool {
        self.stop.requested().is_some()
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.a.count.is_some_and(|n| self.t.messages >= n)
    }

    fn say(&mut self, text: String, value: serde_json::Value) -> Result<()> {
        if self.a.json {
            writeln!(self.out, "{value}")?;
        } else {
            writeln!(self.out, "{text}")?;
        }
        self.out.flush()?;
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let mut backoff = FIRST_BACKOFF;
        let mut connected_once = false;
        while !self.stopping() {
            let stream = match TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)) {
                Ok(s) => s,
                Err(e) => {
                    self.say(
                        format!("cannot connect to {}: {e}; retrying in {} ms", self.addr, backoff.as_millis()),
                        json!({"event": "connect_failed", "error": e.to_string(), "retry_ms": backoff.as_millis() as u64}),
                    )?;
                    self.pause(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            if connected_once {
                self.t.reconnects += 1;
            }
            connected_once = true;
            match self.session(stream)? {
                End::Stop => break,
                End::Lost(why) => {
                    if self.stopping() {
                        break;
                    }
                    self.say(
                        format!("disconnected: {why}; reconnecting in {} ms", backoff.as_millis()),
                        json!({"event": "disconnected", "reason": why, "retry_ms": backoff.as_millis() as u64}),
                    )?;
                    self.pause(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        if let (Some(n), true) = (self.a.count, self.stop.requested().is_none()) {
            if self.t.messages < n {
                bail!(
                    "received {} of --count {n} messages before --seconds ran out",
                    self.t.messages
                );
            }
        }
        Ok(())
    }

    /// Sleeps `d`, waking early to stop.
    fn pause(&self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end && !self.stopping() {
            std::thread::sleep(Duration::from_millis(10).min(end - Instant::now()));
        }
    }

    /// One connection: login, the watchlist, then messages until it ends.
    fn session(&mut self, mut stream: TcpStream) -> Result<End> {
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        let mut buf = Vec::new();
        Message::Login(LoginRepr {
            user: &self.a.user,
            token: &self.token,
        })
        .emit_to_vec(&mut buf);
        if let Err(e) = stream.write_all(&buf) {
            return Ok(End::Lost(format!("sending LOGIN: {e}")));
        }
        let mut inbuf: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        let mut logged_in = false;
        let mut items: HashMap<u32, ItemView> = HashMap::new();
        // --busy-poll-us: after data, read without blocking (spinning) this long before
        // sleeping in a blocking read again.
        let mut spin =
            peregrine_agent::SpinThenBlock::new(Duration::from_micros(self.a.busy_poll_us));
        loop {
            if self.stopping() {
                return Ok(End::Stop);
            }
            self.rate_line()?;
            let n = match stream.read(&mut chunk) {
                Ok(0) => return Ok(End::Lost("the distributor closed the connection".into())),
                Ok(n) => {
                    if let Some(nonblocking) = spin.data() {
                        stream.set_nonblocking(nonblocking)?;
                    }
                    n
                }
                Err(e) if spin.spinning() && e.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(nonblocking) = spin.nothing() {
                        stream.set_nonblocking(nonblocking)?;
                    }
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Ok(End::Lost(e.to_string())),
            };
            inbuf.extend_from_slice(&chunk[..n]);
            let now_ns = peregrine_agent::monotonic_ns();
            let mut msgs = Messages::new(&inbuf);
            let mut consumed_all = true;
            for m in msgs.by_ref() {
                let (_, bytes) = match m {
                    Ok(m) => m,
                    Err(e) => bail!("the distributor sent a stream this client cannot read: {e}"),
                };
                let msg = Message::parse(bytes).map_err(|e| {
                    anyhow::anyhow!("the distributor sent a malformed message: {e}")
                })?;
                if !logged_in {
                    let Message::LoginResponse(r) = msg else {
                        bail!(
                            "the distributor answered LOGIN with {:?}",
                            msg.message_type()
                        );
                    };
                    match r.result {
                        LoginResult::Accepted => {
                            logged_in = true;
                            self.say(
                                format!("logged in to {} as {}; opening {} names and globs", self.addr, self.a.user, self.watch.len()),
                                json!({"event": "logged_in", "user": self.a.user, "patterns": self.watch.len()}),
                            )?;
                            self.open_watchlist(&mut stream)?;
                        }
                        other => bail!("login refused ({other:?}): {}", r.text),
                    }
                    continue;
                }
                self.on_message(&msg, &mut items, now_ns)?;
                if self.stopping() {
                    consumed_all = false;
                    break;
                }
            }
            if !consumed_all {
                self.out.flush()?;
                return Ok(End::Stop);
            }
            let rest = msgs.remaining().len();
            let from = inbuf.len() - rest;
            inbuf.drain(..from);
            self.out.flush()?;
        }
    }

    /// Sends the watchlist as OPENs, as many patterns in each as fit in one message.
    fn open_watchlist(&mut self, stream: &mut TcpStream) -> Result<()> {
        let mut buf = Vec::new();
        let mut request_id = 0u32;
        let mut i = 0;
        while i < self.watch.len() {
            let mut len = 16 + self.a.service.len();
            let mut j = i;
            while j < self.watch.len()
                && j - i < usize::from(u16::MAX)
                && len + 1 + self.watch[j].len() <= MAX_MESSAGE_LEN
            {
                len += 1 + self.watch[j].len();
                j += 1;
            }
            let patterns: Vec<&str> = self.watch[i..j].iter().map(String::as_str).collect();
            request_id += 1;
            Message::Open(OpenRepr {
                request_id,
                service: &self.a.service,
                patterns: PatternList::List(&patterns),
            })
            .emit_to_vec(&mut buf);
            i = j;
        }
        stream.write_all(&buf).context("sending OPEN")?;
        Ok(())
    }

    fn on_message(
        &mut self,
        msg: &Message<'_>,
        items: &mut HashMap<u32, ItemView>,
        now_ns: u64,
    ) -> Result<()> {
        match msg {
            Message::Refresh(r) => {
                self.t.messages += 1;
                self.t.refreshes += 1;
                let tally = match self.t.tally_of.get(r.name) {
                    Some(&k) => {
                        self.t.tallies[k].refreshes += 1;
                        k
                    }
                    None => {
                        let k = self.t.tallies.len();
                        self.t.tallies.push(ItemTally {
                            name: r.name.to_string(),
                            first_seq: r.item_seq,
                            last_seq: r.item_seq,
                            updates: 0,
                            refreshes: 0,
                        });
                        self.t.tally_of.insert(r.name.to_string(), k);
                        k
                    }
                };
                self.t.tallies[tally].last_seq = r.item_seq;
                items.insert(
                    r.item_id,
                    ItemView {
                        name: r.name.to_string(),
                        seq: Some(r.item_seq),
                        tally,
                    },
                );
                if self.a.print {
                    let f = self.dict.display(&r.fields);
                    writeln!(self.out, "REFRESH {} {f}", r.name)?;
                }
            }
            Message::Update(u) => {
                self.t.messages += 1;
                self.t.updates += 1;
                let from = *self
                    .record_from_ns
                    .get_or_insert_with(|| now_ns + (self.a.latency_after_s * 1e9) as u64);
                if u.timestamp_ns > 0 && now_ns >= u.timestamp_ns && now_ns >= from {
                    self.t.latency.saturating_record(now_ns - u.timestamp_ns);
                }
                let name = match items.get_mut(&u.item_id) {
                    Some(v) => {
                        match v.seq {
                            Some(s) if u.item_seq != s.wrapping_add(1) => {
                                self.t.gaps += 1;
                                tracing::warn!(
                                    "GAP: {} item_seq {} after {s}, with no STATUS between",
                                    v.name,
                                    u.item_seq
                                );
                            }
                            Some(_) => {}
                            None => self.t.updates_without_image += 1,
                        }
                        v.seq = Some(u.item_seq);
                        let t = &mut self.t.tallies[v.tally];
                        t.last_seq = u.item_seq;
                        t.updates += 1;
                        v.name.as_str()
                    }
                    None => {
                        self.t.updates_without_image += 1;
                        "?"
                    }
                };
                if self.a.print {
                    writeln!(self.out, "UPDATE {name} {}", self.dict.display(&u.fields))?;
                }
            }
            Message::Status(s) => {
                self.t.messages += 1;
                self.t.statuses += 1;
                let known = items.get_mut(&s.item_id);
                let name = if !s.name.is_empty() {
                    s.name.to_string()
                } else {
                    known.as_ref().map_or("-".to_string(), |v| v.name.clone())
                };
                if let Some(v) = known {
                    if s.state != ItemState::Ok {
                        v.seq = None;
                    }
                }
                if self.a.print {
                    if s.text.is_empty() {
                        writeln!(self.out, "STATUS {name} {}", s.state.name())?;
                    } else {
                        writeln!(
                            self.out,
                            "STATUS {name} {} \"{}\"",
                            s.state.name(),
                            s.text.escape_debug()
                        )?;
                    }
                }
            }
            Message::Conflated(c) => {
                self.t.conflated += 1;
                if self.a.print {
                    writeln!(
                        self.out,
                        "CONFLATED items={} dropped={}",
                        c.items, c.updates_dropped
                    )?;
                }
            }
            // Nothing else is sent to logged-in clients.
            _ => {}
        }
        Ok(())
    }

    fn rate_line(&mut self) -> Result<()> {
        let now = Instant::now();
        if now - self.last_line < Duration::from_secs(1) {
            return Ok(());
        }
        let secs = (now - self.last_line).as_secs_f64();
        let rate = (self.t.updates - self.updates_at_line) as f64 / secs;
        self.last_line = now;
        self.updates_at_line = self.t.updates;
        let mean_us = self.t.latency.mean() / 1e3;
        let t = (now - self.start).as_secs_f64();
        let (updates, refreshes, statuses, gaps) = (
            self.t.updates,
            self.t.refreshes,
            self.t.statuses,
            self.t.gaps,
        );
        self.say(
            format!(
                "[client {t:.1}s] {rate:.0} updates/s, total {updates}, refreshes {refreshes}, statuses {statuses}, gaps {gaps}, latency mean {mean_us:.1} us"
            ),
            json!({"t": (t * 10.0).round() / 10.0, "updates_per_s": rate.round(), "updates": updates,
                   "refreshes": refreshes, "statuses": statuses, "gaps": gaps}),
        )
    }

    /// `--items-out`: `NAME FIRST_SEQ LAST_SEQ UPDATES REFRESHES` per item received.
    fn write_items(&self, path: &std::path::Path) -> io::Result<()> {
        let mut w = BufWriter::new(std::fs::File::create(path)?);
        for t in &self.t.tallies {
            writeln!(
                w,
                "{} {} {} {} {}",
                t.name, t.first_seq, t.last_seq, t.updates, t.refreshes
            )?;
        }
        w.flush()
    }

    fn summary(&mut self) -> Result<()> {
        let secs = self.start.elapsed().as_secs_f64();
        let h = &self.t.latency;
        let us = |ns: f64| (ns / 10.0).round() / 100.0;
        let (mean, median, p99, p999, max) = if h.is_empty() {
            (0.0, 0.0, 0.0, 0.0, 0.0)
        } else {
            (
                us(h.mean()),
                us(h.value_at_quantile(0.5) as f64),
                us(h.value_at_quantile(0.99) as f64),
                us(h.value_at_quantile(0.999) as f64),
                us(h.max() as f64),
            )
        };
        let t = &self.t;
        let text = format!(
            "done: {} messages in {secs:.2} s ({} refreshes, {} updates, {} statuses, {} conflated), {:.0} updates/s, gaps {}, updates without image {}, reconnects {}; one-way latency us: mean {mean} median {median} p99 {p99} p99.9 {p999} max {max} ({} samples)",
            t.messages,
            t.refreshes,
            t.updates,
            t.statuses,
            t.conflated,
            t.updates as f64 / secs.max(1e-9),
            t.gaps,
            t.updates_without_image,
            t.reconnects,
            h.len()
        );
        let value = json!({
            "done": true, "seconds": secs, "messages": t.messages, "refreshes": t.refreshes,
            "updates": t.updates, "statuses": t.statuses, "conflated": t.conflated,
            "gaps": t.gaps, "updates_without_image": t.updates_without_image,
            "reconnects": t.reconnects,
            "latency_us": {"mean": mean, "median": median, "p99": p99, "p99_9": p999,
                           "max": max, "samples": h.len()},
            "latency_ns": {"mean": h.mean(), "stddev": h.stdev(), "min": h.min(),
                           "max": h.max(), "points": h.len()},
            "cpu_s": peregrine_bench::cpu_seconds_self(),
        });
        self.say(text, value)
    }
}
