//! `peregrine pub TOPIC`: publishes "#N" messages at a rate, by topic name; with `--group`, as
//! a member of a failover group.

use super::{context, shown, Stop};
use crate::flags::topics::PubArgs;
use anyhow::{bail, Result};
use peregrine::failover::FailoverPublisher;
use peregrine::{OfferError, Publisher};
use std::io::Write;
use std::time::{Duration, Instant};

fn fill_payload(buf: &mut [u8], n: u64) {
    buf.fill(b'.');
    let label = format!("#{n}");
    let k = label.len().min(buf.len());
    buf[..k].copy_from_slice(&label.as_bytes()[..k]);
}

/// A plain publisher, or a failover group's member.
enum Out {
    Plain(Publisher),
    Member(FailoverPublisher),
}

impl Out {
    fn publisher(&mut self) -> &mut Publisher {
        match self {
            Out::Plain(p) => p,
            Out::Member(m) => m.publisher(),
        }
    }
    fn max_message_len(&mut self) -> usize {
        match self {
            Out::Plain(p) => p.max_message_len(),
            Out::Member(m) => m.max_message_len(),
        }
    }
    /// Offers message number `n`; returns the session's sequence.
    fn offer(&mut self, n: u64, message: &[u8]) -> Result<u64, OfferError> {
        match self {
            Out::Plain(p) => p.offer(message),
            Out::Member(m) => m.offer(n, message),
        }
    }
}

/// Nanoseconds since the Unix epoch.
fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

pub fn run(a: PubArgs) -> Result<()> {
    let stop = Stop::install()?;
    let ctx = context()?;
    let mut out_p = match &a.group {
        None => Out::Plain(ctx.publish(&a.topic)?),
        Some(g) => Out::Member(FailoverPublisher::new(ctx.publish(&a.topic)?, g)?),
    };
    let size = match &a.message {
        Some(m) => m.len(),
        None => a.size as usize,
    };
    if size > out_p.max_message_len() {
        bail!(
            "{} of {size} bytes is above what this topic's transports carry ({} bytes): send less",
            if a.message.is_some() {
                "--message"
            } else {
                "--size"
            },
            out_p.max_message_len()
        );
    }
    // With --stdin, lines are sent as they come unless --rate caps them.
    let rate = a.rate.unwrap_or(if a.stdin { f64::INFINITY } else { 10.0 });
    let mut lines = a.stdin.then(|| std::io::stdin().lock());
    let out = std::io::stdout();
    let mut out = out.lock();
    let session = out_p.publisher().session_id();
    let uri = out_p.publisher().uri().to_string();
    match &a.group {
        None => writeln!(
            out,
            "publishing {} as session {session:08x} on {uri}",
            a.topic
        )?,
        Some(g) => writeln!(
            out,
            "publishing {} as session {session:08x} on {uri}, member of failover group '{g}'",
            a.topic
        )?,
    }
    if out_p.publisher().stale_segments_removed() > 0 {
        writeln!(
            out,
            "removed {} shared-memory segment(s) left by dead publishers",
            out_p.publisher().stale_segments_removed()
        )?;
    }
    if a.wait_subscribers > 0 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while out_p.publisher().subscriber_count() < a.wait_subscribers
            && stop.requested().is_none()
        {
            if Instant::now() > deadline {
                bail!(
                    "--wait-subscribers {}: only {} subscriber(s) attached after 30 s",
                    a.wait_subscribers,
                    out_p.publisher().subscriber_count()
                );
            }
            out_p.publisher().do_work();
            std::thread::sleep(Duration::from_millis(1));
        }
        writeln!(
            out,
            "{} subscriber(s) attached",
            out_p.publisher().subscriber_count()
        )?;
    }
    let start = Instant::now();
    // A failover group's members number their messages alike: by the wall clock (message N
    // is due N/rate s after the Unix epoch), or by line with --stdin.
    let base = match (&a.group, a.stdin) {
        (Some(_), false) => (unix_ns() as f64 / 1e9 * rate) as u64,
        _ => 0,
    };
    let mut sent = 0u64;
    let mut refused = 0u64;
    let mut last_line = start;
    let mut sent_at_line = 0u64;
    let mut scratch = vec![0u8; size];
    if let Some(m) = &a.message {
        scratch.copy_from_slice(m.as_bytes());
    }
    let mut count = a.count.unwrap_or(u64::MAX);
    // A line read but refused by back-pressure is offered again as it is.
    let mut pending_line = false;
    while sent < count && stop.requested().is_none() {
        let now = Instant::now();
        let due = ((now - start).as_secs_f64() * rate).min(u64::MAX as f64) as u64;
        let due = due.saturating_add(1).min(count);
        while sent < due {
            if let Some(input) = lines.as_mut() {
                if !pending_line {
                    use std::io::BufRead;
                    scratch.clear();
                    if input.read_until(b'\n', &mut scratch)? == 0 {
                        count = sent; // the end of the input
                        break;
                    }
                    if scratch.last() == Some(&b'\n') {
                        scratch.pop();
                        if scratch.last() == Some(&b'\r') {
                            scratch.pop();
                        }
                    }
                    if scratch.len() > out_p.max_message_len() {
                        bail!(
                            "line {} of standard input is {} bytes, above what this topic's \
                             transports carry ({} bytes): split it",
                            sent + 1,
                            scratch.len(),
                            out_p.max_message_len()
                        );
                    }
                    pending_line = true;
                }
            } else if a.message.is_none() {
                fill_payload(&mut scratch, base + sent);
            }
            match out_p.offer(base + sent, &scratch) {
                Ok(seq) => {
                    // A member prints the group's sequence, as its subscribers do.
                    let seq = if a.group.is_some() { base + sent } else { seq };
                    if a.print {
                        writeln!(
                            out,
                            "sent {} seq={seq} len={}: {}",
                            a.topic,
                            scratch.len(),
                            shown(&scratch)
                        )?;
                    }
                    sent += 1;
                    pending_line = false;
                    // A line goes out as it comes: the next read may wait for input as long
                    // as the writer likes, and a batch held meanwhile would wait with it.
                    if lines.is_some() {
                        let _ = out_p.publisher().flush();
                    }
                }
                Err(OfferError::BackPressured) => {
                    refused += 1;
                    out_p.publisher().do_work();
                    break;
                }
                Err(e) => bail!("publishing on {}: {e}", a.topic),
            }
        }
        let _ = out_p.publisher().flush();
        out_p.publisher().do_work();
        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            writeln!(
                out,
                "[pub {:.1}s] {:.0} msgs/s, total {sent}, subscribers {}, refused {refused}",
                (now - start).as_secs_f64(),
                (sent - sent_at_line) as f64 / secs,
                out_p.publisher().subscriber_count()
            )?;
            out.flush()?;
            last_line = now;
            sent_at_line = sent;
        }
        if sent < due {
            continue;
        }
        if !rate.is_finite() {
            continue;
        }
        let next_due = start + Duration::from_secs_f64(sent as f64 / rate);
        if let Some(wait) = next_due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
    }
    let linger_end = Instant::now() + Duration::from_millis(a.linger_ms);
    while Instant::now() < linger_end && stop.requested().is_none() {
        out_p.publisher().do_work();
        std::thread::sleep(Duration::from_micros(200));
    }
    out_p.publisher().close();
    let c = out_p.publisher().counters();
    writeln!(
        out,
        "done{}: sent {sent} messages in {:.2} s, retransmitted {}, refused {refused}",
        stop.requested()
            .map(|s| format!(" (stopped by {s})"))
            .unwrap_or_default(),
        start.elapsed().as_secs_f64(),
        c.retransmitted
    )?;
    Ok(())
}
