//! `peregrine pub TOPIC`: publishes "#N" messages at a rate, by topic name.

use super::{context, shown, Stop};
use crate::flags::topics::PubArgs;
use anyhow::{bail, Result};
use peregrine::OfferError;
use std::io::Write;
use std::time::{Duration, Instant};

fn fill_payload(buf: &mut [u8], n: u64) {
    buf.fill(b'.');
    let label = format!("#{n}");
    let k = label.len().min(buf.len());
    buf[..k].copy_from_slice(&label.as_bytes()[..k]);
}

pub fn run(a: PubArgs) -> Result<()> {
    let stop = Stop::install()?;
    let ctx = context()?;
    let mut p = ctx.publish(&a.topic)?;
    let size = match &a.message {
        Some(m) => m.len(),
        None => a.size as usize,
    };
    if size > p.max_message_len() {
        bail!(
            "{} of {size} bytes is above what this topic's transports carry ({} bytes): send less",
            if a.message.is_some() {
                "--message"
            } else {
                "--size"
            },
            p.max_message_len()
        );
    }
    // With --stdin, lines are sent as they come unless --rate caps them.
    let rate = a.rate.unwrap_or(if a.stdin { f64::INFINITY } else { 10.0 });
    let mut lines = a.stdin.then(|| std::io::stdin().lock());
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(
        out,
        "publishing {} as session {:08x} on {}",
        a.topic,
        p.session_id(),
        p.uri()
    )?;
    if p.stale_segments_removed() > 0 {
        writeln!(
            out,
            "removed {} shared-memory segment(s) left by dead publishers",
            p.stale_segments_removed()
        )?;
    }
    if a.wait_subscribers > 0 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while p.subscriber_count() < a.wait_subscribers && stop.requested().is_none() {
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
                    if scratch.len() > p.max_message_len() {
                        bail!(
                            "line {} of standard input is {} bytes, above what this topic's \
                             transports carry ({} bytes): split it",
                            sent + 1,
                            scratch.len(),
                            p.max_message_len()
                        );
                    }
                    pending_line = true;
                }
            } else if a.message.is_none() {
                fill_payload(&mut scratch, sent);
            }
            match p.offer(&scratch) {
                Ok(seq) => {
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
        p.do_work();
        std::thread::sleep(Duration::from_micros(200));
    }
    p.close();
    let c = p.counters();
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
