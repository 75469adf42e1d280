//! `peregrine pub`, `peregrine sub` and `peregrine resolverd`: publishing and subscribing by
//! topic name from the shell (the roles of Ultra Messaging's lbmsrc/lbmrcv and `nats pub`/`nats
//! sub`), and the resolver daemon for networks without multicast (lbmrd).

use anyhow::{bail, Context as _, Result};
use clap::Args;
use peregrine::{Context, IdleKind, OfferError, Pattern, PatternKind, SubscriberEvent};
use std::io::Write;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct PubArgs {
    /// The topic to publish.
    topic: String,
    /// Messages per second (k and m suffixes: 10k, 1.5m).
    #[arg(long, default_value = "10", value_parser = super::parse_rate)]
    rate: f64,
    /// Payload bytes per message: "#N" (the message number) padded with dots.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    size: u32,
    /// Messages to send, then stop (default: until interrupted).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Print every message sent.
    #[arg(long)]
    print: bool,
    /// Wait until this many subscribers are attached before the first message (up to 30 s).
    #[arg(long, default_value_t = 0)]
    wait_subscribers: usize,
    /// After the last message, keep serving subscribers (retransmissions) this long, then close.
    #[arg(long, default_value_t = 500)]
    linger_ms: u64,
}

#[derive(Args, Debug)]
pub struct SubArgs {
    /// A topic name, or a glob (`md.eq.*`; `*` any run of characters, `?` one), or with
    /// --regex a regular expression matching whole topic names.
    pattern: String,
    /// Treat the pattern as a regular expression.
    #[arg(long)]
    regex: bool,
    /// Print every message received.
    #[arg(long)]
    print: bool,
    /// Stop after this many messages (exit status 1 if --seconds passes first).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// What to do when no message is waiting: spin, yield, backoff or block.
    #[arg(long, default_value = "backoff", value_parser = super::parse_idle)]
    idle: IdleKind,
}

#[derive(Args, Debug)]
pub struct ResolverdArgs {
    /// Address and port to serve.
    #[arg(long, default_value = "0.0.0.0:14401")]
    listen: SocketAddrV4,
    /// Clients silent this long are dropped (they send keepalives every 5 s).
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1000..))]
    client_timeout_ms: u64,
    /// Print a statistics line this often (0: never).
    #[arg(long, default_value_t = 10)]
    stats_every_s: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e7 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a duration: give a number of seconds above 0, for example 10 or 0.5"
        )),
    }
}

fn context() -> Result<Context> {
    Context::from_env().context("invalid configuration (PEREGRINE_CONFIG, PEREGRINE_* variables)")
}

/// A payload as printable text: ASCII as is, anything else escaped, cut at 80 characters.
fn shown(payload: &[u8]) -> String {
    let text: String = payload
        .iter()
        .take(80)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if payload.len() > 80 {
        format!("{text}...")
    } else {
        text
    }
}

fn fill_payload(buf: &mut [u8], n: u64) {
    buf.fill(b'.');
    let label = format!("#{n}");
    let k = label.len().min(buf.len());
    buf[..k].copy_from_slice(&label.as_bytes()[..k]);
}

pub fn publish(a: PubArgs) -> Result<()> {
    let ctx = context()?;
    let mut p = ctx.publish(&a.topic)?;
    let size = a.size as usize;
    if size > p.max_message_len() {
        bail!(
            "--size {size} is above what this topic's transports carry ({} bytes): lower --size",
            p.max_message_len()
        );
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(
        out,
        "publishing {} as session {:08x} on {}",
        a.topic,
        p.session_id(),
        p.uri()
    )?;
    if a.wait_subscribers > 0 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while p.subscriber_count() < a.wait_subscribers {
            if Instant::now() > deadline {
                bail!(
                    "--wait-subscribers {}: only {} subscriber(s) attached after 30 s",
                    a.wait_subscribers,
                    p.subscriber_count()
                );
            }
            p.do_work();
            std::thread::sleep(Duration::from_millis(1));
        }
        writeln!(out, "{} subscriber(s) attached", p.subscriber_count())?;
    }
    let start = Instant::now();
    let mut sent = 0u64;
    let mut refused = 0u64;
    let mut last_line = start;
    let mut sent_at_line = 0u64;
    let mut scratch = vec![0u8; size];
    let count = a.count.unwrap_or(u64::MAX);
    while sent < count {
        let now = Instant::now();
        let due = ((now - start).as_secs_f64() * a.rate) as u64 + 1;
        let due = due.min(count);
        while sent < due {
            fill_payload(&mut scratch, sent);
            match p.offer(&scratch) {
                Ok(seq) => {
                    if a.print {
                        writeln!(
                            out,
                            "sent {} seq={seq} len={size}: {}",
                            a.topic,
                            shown(&scratch)
                        )?;
                    }
                    sent += 1;
                }
                Err(OfferError::BackPressured) => {
                    refused += 1;
                    p.do_work();
                    break;
                }
                Err(e) => bail!("publishing on {}: {e}", a.topic),
            }
        }
        let _ = p.flush();
        p.do_work();
        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            writeln!(
                out,
                "[pub {:.1}s] {:.0} msgs/s, total {sent}, subscribers {}, refused {refused}",
                (now - start).as_secs_f64(),
                (sent - sent_at_line) as f64 / secs,
                p.subscriber_count()
            )?;
            out.flush()?;
            last_line = now;
            sent_at_line = sent;
        }
        if sent < due {
            continue;
        }
        let next_due = start + Duration::from_secs_f64(sent as f64 / a.rate);
        if let Some(wait) = next_due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
    }
    let linger_end = Instant::now() + Duration::from_millis(a.linger_ms);
    while Instant::now() < linger_end {
        p.do_work();
        std::thread::sleep(Duration::from_micros(200));
    }
    p.close();
    let c = p.counters();
    writeln!(
        out,
        "done: sent {sent} messages in {:.2} s, retransmitted {}, refused {refused}",
        start.elapsed().as_secs_f64(),
        c.retransmitted
    )?;
    Ok(())
}

pub fn subscribe(a: SubArgs) -> Result<()> {
    let ctx = context()?;
    let pattern = if a.regex {
        Pattern::new(PatternKind::Regex, &a.pattern)
    } else {
        Pattern::exact_or_glob(&a.pattern)
    }?;
    let mut s = ctx.subscribe_pattern(pattern, a.idle)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "subscribed to {}", a.pattern)?;
    out.flush()?;
    let start = Instant::now();
    let deadline = a.seconds.map(|x| start + Duration::from_secs_f64(x));
    let want = a.count.unwrap_or(u64::MAX);
    let mut received = 0u64;
    let mut bytes = 0u64;
    let mut last_line = start;
    let mut received_at_line = 0u64;
    let mut lines: Vec<String> = Vec::new();
    while received < want {
        let limit = (want - received).min(256) as usize;
        let n = s.poll_topic(
            &mut |topic, m| {
                received += 1;
                bytes += m.payload.len() as u64;
                if a.print {
                    lines.push(format!(
                        "{topic} session={:08x} seq={} len={}: {}",
                        m.session_id,
                        m.sequence,
                        m.payload.len(),
                        shown(m.payload)
                    ));
                }
            },
            limit,
        );
        for l in lines.drain(..) {
            writeln!(out, "{l}")?;
        }
        while let Some(ev) = s.next_event() {
            match ev {
                SubscriberEvent::SourceFound {
                    topic,
                    session_id,
                    uri,
                } => writeln!(
                    out,
                    "source found: {topic} session={session_id:08x} via {uri}"
                )?,
                SubscriberEvent::SourceLost {
                    topic,
                    session_id,
                    reason,
                } => writeln!(
                    out,
                    "source lost: {topic} session={session_id:08x} ({reason})"
                )?,
                SubscriberEvent::Lost {
                    session_id,
                    from_sequence,
                    count,
                } => writeln!(
                    out,
                    "LOST: session={session_id:08x} {count} message(s) from seq={from_sequence}"
                )?,
                SubscriberEvent::AttachFailed { reason } => {
                    writeln!(out, "attach failed: {reason}")?
                }
                _ => {}
            }
        }
        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            let c = s.counters();
            writeln!(
                out,
                "[sub {:.1}s] {:.0} msgs/s, {:.2} MB/s, total {received}, sources {}, lost {}",
                (now - start).as_secs_f64(),
                (received - received_at_line) as f64 / secs,
                bytes as f64 / 1e6 / (now - start).as_secs_f64(),
                s.sources().len(),
                c.lost
            )?;
            out.flush()?;
            last_line = now;
            received_at_line = received;
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        s.idle(n);
    }
    let c = s.counters();
    let r = s.resolver_counters().unwrap_or_default();
    writeln!(
        out,
        "done: received {received} messages from {} source(s) in {:.2} s, lost {}, resolver rejected {}",
        s.sources().len(),
        start.elapsed().as_secs_f64(),
        c.lost,
        r.rejected()
    )?;
    out.flush()?;
    if received < want && a.count.is_some() {
        bail!("received {received} of --count {want} messages before --seconds ran out");
    }
    Ok(())
}

pub fn resolverd(a: ResolverdArgs) -> Result<()> {
    use peregrine_transport::resolver::Daemon;
    let cfg = peregrine_proto::resolverd::RelayConfig {
        client_timeout_ns: a.client_timeout_ms * 1_000_000,
        ..Default::default()
    };
    let mut d = Daemon::bind(a.listen, cfg)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "resolverd listening on {}", d.local_addr())?;
    out.flush()?;
    let start = Instant::now();
    let mut last = start;
    loop {
        d.run_once(100);
        let now = Instant::now();
        if a.stats_every_s > 0 && now - last >= Duration::from_secs(a.stats_every_s) {
            let c = d.counters();
            writeln!(
                out,
                "[resolverd {:.0}s] clients {}, received {}, forwarded {} ({} copies), keepalives {}, rejected {}",
                (now - start).as_secs_f64(),
                d.clients(),
                c.datagrams_received,
                c.datagrams_forwarded,
                c.copies_sent,
                c.keepalives,
                c.rejected()
            )?;
            out.flush()?;
            last = now;
        }
        if a.seconds.is_some_and(|s| (now - start).as_secs_f64() >= s) {
            return Ok(());
        }
    }
}
