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
    let count = a.count.unwrap_or(u64::MAX);
    while sent < count && stop.requested().is_none() {
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
