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
//! A driver over the consumer API (`peregrine_market_data::Consumer`), which checks every
//! item's `item_seq` (an UPDATE that does not follow the item's previous REFRESH or UPDATE by
//! one is a gap the distributor did not announce: counted in `gaps`, there should never be
//! one) and, when the distributor goes away, reports its items stale, reconnects with
//! back-off, logs in again and reopens the watchlist.

mod ws;

use super::md::{connect_setup, read_list};
use super::Stop;
use crate::flags::md::ClientArgs;
use anyhow::{bail, Context as _, Result};
use hdrhistogram::Histogram;
use peregrine_market_data::consumer::{AnyConsumer, Consumer, Event, WarmStandby};
use peregrine_md::codec::MAX_MESSAGE_LEN;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::check_item_pattern;
use serde_json::json;
use std::io::{self, BufWriter, Write};
use std::time::{Duration, Instant};

/// How long a poll waits, so that statistics lines and deadlines are kept.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

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
    /// Connections given up because the distributor was silent for three ping intervals.
    silences: u64,
    /// The last PING round trip to the distributor.
    rtt: Option<Duration>,
    /// One-way latency of UPDATEs, nanoseconds.
    latency: Histogram<u64>,
    /// Every item received, by name, over every connection (for `--items-out`).
    tallies: Vec<ItemTally>,
    /// By item name (FxHash: looked up per message).
    tally_of: rustc_hash::FxHashMap<String, usize>,
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

struct Client {
    a: ClientArgs,
    watch: Vec<String>,
    dict: Dictionary,
    stop: Stop,
    start: Instant,
    deadline: Option<Instant>,
    /// Latency is recorded from this time on (`--latency-after-s` after the first UPDATE).
    record_from_ns: Option<u64>,
    /// The clock, read once per poll's batch of messages (they arrived together).
    batch_now_ns: Option<u64>,
    t: Totals,
    out: BufWriter<io::Stdout>,
    last_line: Instant,
    updates_at_line: u64,
    /// `--snapshot`: the snapshot requests not answered yet (it ends when none is left).
    snapshots: Vec<u32>,
}

pub fn run(a: ClientArgs) -> Result<()> {
    let stop = Stop::install()?;
    let (token, options) = connect_setup(&a.conn)?;
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
    let addresses: Vec<&str> = a.conn.connect.split(',').map(str::trim).collect();
    // The application's own dictionary is checked against the distributor's at each login.
    let options = match &a.dictionary {
        Some(_) => options.with_dictionary(dict.clone()),
        None => options,
    };
    let options = match a.ping_interval_ms {
        Some(ms) => options.with_ping_interval(Duration::from_millis(ms.into())),
        None => options,
    };
    let address_error = |e: peregrine_market_data::ConsumerError| match e {
        peregrine_market_data::ConsumerError::Address { .. } => {
            anyhow::anyhow!("--connect {}: {e}", a.conn.connect)
        }
        e => anyhow::anyhow!("{e}"),
    };
    let mut consumer = if a.websocket {
        None
    } else if a.warm_standby {
        let [first, second] = addresses[..] else {
            bail!(
                "--warm-standby: --connect {} names {} distributor(s): give two, A,B (the first active, the second standing by)",
                a.conn.connect,
                addresses.len()
            );
        };
        let mut ws = WarmStandby::connect(first, second, &a.conn.user, &token, options)
            .map_err(address_error)?;
        ws.set_busy_poll(Duration::from_micros(a.busy_poll_us));
        Some(AnyConsumer::from(ws))
    } else {
        let mut consumer =
            Consumer::new_with(&addresses, &a.conn.user, &token, options).map_err(address_error)?;
        consumer.set_busy_poll(Duration::from_micros(a.busy_poll_us));
        Some(AnyConsumer::from(consumer))
    };
    let start = Instant::now();
    let mut c = Client {
        deadline: a.stop.seconds.map(|s| start + Duration::from_secs_f64(s)),
        record_from_ns: None,
        batch_now_ns: None,
        a,
        watch,
        dict,
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
            silences: 0,
            rtt: None,
            latency: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            tallies: Vec::new(),
            tally_of: Default::default(),
        },
        out: BufWriter::with_capacity(64 << 10, io::stdout()),
        last_line: start,
        updates_at_line: 0,
        snapshots: Vec::new(),
    };
    let result = match &mut consumer {
        None => c.run_ws(&token),
        Some(consumer) => {
            let result = c.run(consumer);
            let counters = consumer.active().counters();
            c.t.updates_without_image = counters.updates_without_image;
            c.t.reconnects = counters.connections.saturating_sub(1);
            c.t.silences = counters.silences;
            c.t.rtt = consumer.active().rtt();
            result
        }
    };
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
            || (self.a.snapshot && self.snapshots.is_empty())
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

    fn run(&mut self, consumer: &mut AnyConsumer) -> Result<()> {
        self.open_watchlist(consumer)?;
        while !self.stopping() {
            self.rate_line()?;
            let mut failed: Option<anyhow::Error> = None;
            self.batch_now_ns = None;
            let result = consumer.poll(POLL_TIMEOUT, &mut |e| {
                if failed.is_none() {
                    if let Err(err) = self.on_event(e) {
                        failed = Some(err);
                    }
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            result.map_err(|e| anyhow::anyhow!("{e}"))?;
            self.out.flush()?;
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

    /// Opens the watchlist: as many patterns in each request as fit in one message (the
    /// consumer sends them at every login).
    fn open_watchlist(&mut self, consumer: &mut AnyConsumer) -> Result<()> {
        let mut i = 0;
        while i < self.watch.len() {
            let view_len = if self.a.view.is_empty() {
                0
            } else {
                2 + 2 * self.a.view.len()
            };
            let mut len = 16 + self.a.service.len() + view_len;
            let mut j = i;
            while j < self.watch.len()
                && j - i < usize::from(u16::MAX)
                && len + 1 + self.watch[j].len() <= MAX_MESSAGE_LEN
            {
                len += 1 + self.watch[j].len();
                j += 1;
            }
            let patterns: Vec<&str> = self.watch[i..j].iter().map(String::as_str).collect();
            let view: Vec<&str> = self.a.view.iter().map(String::as_str).collect();
            let view = (!view.is_empty()).then_some(&view[..]);
            let id = match consumer.plain() {
                Some(c) => c.request(&self.a.service, &patterns, self.a.snapshot, view),
                // (--snapshot conflicts with --warm-standby.)
                None => consumer.request(&self.a.service, &patterns, view),
            }
            .map_err(|e| anyhow::anyhow!("--watch or --view: {e}"))?;
            if self.a.snapshot {
                self.snapshots.push(id);
            }
            i = j;
        }
        Ok(())
    }

    /// The item's tally, and whether it existed before (made now at `seq` if not).
    fn tally(&mut self, name: &str, seq: u32) -> (usize, bool) {
        match self.t.tally_of.get(name) {
            Some(&k) => (k, true),
            None => {
                let k = self.t.tallies.len();
                self.t.tallies.push(ItemTally {
                    name: name.to_string(),
                    first_seq: seq,
                    last_seq: seq,
                    updates: 0,
                    refreshes: 0,
                });
                self.t.tally_of.insert(name.to_string(), k);
                (k, false)
            }
        }
    }

    fn on_event(&mut self, e: Event<'_>) -> Result<()> {
        // --count: what arrives past it is not taken.
        if self.a.count.is_some_and(|n| self.t.messages >= n)
            && matches!(
                e,
                Event::Refresh { .. } | Event::Update { .. } | Event::Status { .. }
            )
        {
            return Ok(());
        }
        match e {
            Event::LoggedIn { address } => {
                let to = self
                    .a
                    .conn
                    .connect
                    .split(',')
                    .nth(address)
                    .unwrap_or(&self.a.conn.connect)
                    .trim()
                    .to_string();
                self.say(
                    format!(
                        "logged in to {to} as {}; opening {} names and globs",
                        self.a.conn.user,
                        self.watch.len()
                    ),
                    json!({"event": "logged_in", "distributor": to, "user": self.a.conn.user, "patterns": self.watch.len()}),
                )?;
            }
            Event::Disconnected { reason } => {
                self.say(
                    format!("disconnected: {reason}; reconnecting"),
                    json!({"event": "disconnected", "reason": reason}),
                )?;
            }
            Event::Refresh {
                item,
                item_seq,
                fields,
                ..
            } => {
                self.t.messages += 1;
                self.t.refreshes += 1;
                let (k, known) = self.tally(item, item_seq);
                let t = &mut self.t.tallies[k];
                if known {
                    t.refreshes += 1;
                }
                t.last_seq = item_seq;
                if self.a.print {
                    let f = self.dict.display(&fields);
                    writeln!(self.out, "REFRESH {item} {f}")?;
                }
            }
            Event::Update {
                item,
                item_seq,
                timestamp_ns,
                fields,
                ..
            } => {
                self.t.messages += 1;
                self.t.updates += 1;
                let now_ns = *self
                    .batch_now_ns
                    .get_or_insert_with(peregrine_agent::monotonic_ns);
                let from = *self
                    .record_from_ns
                    .get_or_insert_with(|| now_ns + (self.a.latency_after_s * 1e9) as u64);
                if timestamp_ns > 0 && now_ns >= timestamp_ns && now_ns >= from {
                    self.t.latency.saturating_record(now_ns - timestamp_ns);
                }
                let (k, _) = self.tally(item, item_seq);
                let t = &mut self.t.tallies[k];
                t.last_seq = item_seq;
                t.updates += 1;
                if self.a.print {
                    writeln!(self.out, "UPDATE {item} {}", self.dict.display(&fields))?;
                }
            }
            Event::Gap {
                item,
                expected,
                got,
            } => {
                self.t.gaps += 1;
                tracing::warn!(
                    "GAP: {item} item_seq {got} where {expected} was due, with no STATUS between"
                );
            }
            Event::Status {
                item,
                state,
                text,
                request,
            } => {
                self.t.messages += 1;
                self.t.statuses += 1;
                if item.is_empty()
                    && matches!(
                        state,
                        peregrine_md::model::ItemState::Closed
                            | peregrine_md::model::ItemState::Rejected
                    )
                {
                    self.snapshots.retain(|&r| r != request);
                }
                if self.a.print {
                    let item = if item.is_empty() { "-" } else { item };
                    if text.is_empty() {
                        writeln!(self.out, "STATUS {item} {}", state.name())?;
                    } else {
                        writeln!(
                            self.out,
                            "STATUS {item} {} \"{}\"",
                            state.name(),
                            text.escape_debug()
                        )?;
                    }
                }
            }
            Event::Dictionary { dictionary } => {
                // Fields are printed by the distributor's names unless --dictionary was given.
                if self.a.dictionary.is_none() {
                    self.dict = dictionary.clone();
                }
                self.say(
                    format!("the distributor's dictionary: {} fields", dictionary.len()),
                    json!({"event": "dictionary", "fields": dictionary.len()}),
                )?;
            }
            Event::Ack { .. } => {}
            Event::Conflated {
                items,
                updates_dropped,
            } => {
                self.t.conflated += 1;
                if self.a.print {
                    writeln!(
                        self.out,
                        "CONFLATED items={items} dropped={updates_dropped}"
                    )?;
                }
            }
            Event::Service {
                service,
                up,
                may_open,
            } => {
                let state = if up { "up" } else { "down" };
                self.say(
                    format!(
                        "service {service} {state}{}",
                        if may_open {
                            ""
                        } else {
                            " (not open to this user)"
                        }
                    ),
                    json!({"event": "service", "service": service, "up": up, "may_open": may_open}),
                )?;
            }
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
        let text = format!(
            "[client {t:.1}s] {rate:.0} updates/s, total {updates}, refreshes {refreshes}, statuses {statuses}, gaps {gaps}, latency mean {mean_us:.1} us"
        );
        let value = json!({"t": (t * 10.0).round() / 10.0, "updates_per_s": rate.round(), "updates": updates,
               "refreshes": refreshes, "statuses": statuses, "gaps": gaps});
        if self.a.print {
            // Standard output is the messages' with --print: statistics go to standard error.
            let mut err = io::stderr().lock();
            if self.a.json {
                writeln!(err, "{value}")?;
            } else {
                writeln!(err, "{text}")?;
            }
            return Ok(());
        }
        self.say(text, value)
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
            "done: {} messages in {secs:.2} s ({} refreshes, {} updates, {} statuses, {} conflated), {:.0} updates/s, gaps {}, updates without image {}, reconnects {} ({} for silence), ping round trip {}; one-way latency us: mean {mean} median {median} p99 {p99} p99.9 {p999} max {max} ({} samples)",
            t.messages,
            t.refreshes,
            t.updates,
            t.statuses,
            t.conflated,
            t.updates as f64 / secs.max(1e-9),
            t.gaps,
            t.updates_without_image,
            t.reconnects,
            t.silences,
            t.rtt
                .map_or_else(|| "-".to_string(), |d| format!("{} us", d.as_micros())),
            h.len()
        );
        let value = json!({
            "done": true, "seconds": secs, "messages": t.messages, "refreshes": t.refreshes,
            "updates": t.updates, "statuses": t.statuses, "conflated": t.conflated,
            "gaps": t.gaps, "updates_without_image": t.updates_without_image,
            "reconnects": t.reconnects, "silences": t.silences,
            "rtt_us": t.rtt.map(|d| d.as_micros() as u64),
            "latency_us": {"mean": mean, "median": median, "p99": p99, "p99_9": p999,
                           "max": max, "samples": h.len()},
            "latency_ns": {"mean": h.mean(), "stddev": h.stdev(), "min": h.min(),
                           "max": h.max(), "points": h.len()},
            "cpu_s": peregrine_bench::cpu_seconds_self(),
        });
        self.say(text, value)
    }
}
