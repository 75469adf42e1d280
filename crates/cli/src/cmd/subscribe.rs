//! `peregrine sub PATTERN`: subscribes by name, glob or regular expression and prints what
//! comes: messages (with --print), sources as they come and go, losses, a rate line a second.

use super::{context, message_line, printable, shown, Stop};
use crate::flags::topics::SubArgs;
use anyhow::{bail, Context as _, Result};
use peregrine::failover::{ArbiterConfig, FailoverEvent, FailoverSubscriber};
use peregrine::{Pattern, PatternKind, SubscriberEvent};
use std::io::Write;
use std::time::{Duration, Instant};

pub fn run(a: SubArgs) -> Result<()> {
    if let Some(group) = a.group.clone() {
        return run_group(a, &group);
    }
    if a.from_seq.is_some() || a.dir.is_some() || a.recorder.is_some() || a.durable.is_some() {
        return run_merge(a);
    }
    let stop = Stop::install()?;
    let ctx = context()?;
    let pattern = if a.regex {
        Pattern::new(PatternKind::Regex, &a.pattern)
    } else {
        Pattern::exact_or_glob(&a.pattern)
    }?;
    let mut s = ctx.subscribe_pattern(pattern, a.idle.idle)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "subscribed to {}", printable(&a.pattern))?;
    out.flush()?;
    let start = Instant::now();
    let deadline = a.stop.seconds.map(|x| start + Duration::from_secs_f64(x));
    let want = a.count.unwrap_or(u64::MAX);
    let mut received = 0u64;
    let mut bytes = 0u64;
    let mut last_line = start;
    let mut received_at_line = 0u64;
    let mut lines: Vec<String> = Vec::new();
    // The sessions messages came from (the sources still alive at the end may be fewer).
    let mut sessions: Vec<u32> = Vec::new();
    while received < want && stop.requested().is_none() {
        let limit = (want - received).min(256) as usize;
        let n = s.poll_topic(
            &mut |topic, m| {
                received += 1;
                bytes += m.payload.len() as u64;
                if sessions.last() != Some(&m.session_id) && !sessions.contains(&m.session_id) {
                    sessions.push(m.session_id);
                }
                if a.print {
                    lines.push(message_line(topic, m.session_id, m.sequence, m.payload));
                }
            },
            limit,
        );
        // The events of this poll first: a source's `source found:` line comes before its
        // first message.
        while let Some(ev) = s.next_event() {
            print_source_event(&mut out, ev)?;
        }
        for l in lines.drain(..) {
            writeln!(out, "{l}")?;
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
        "done{}: received {received} messages from {} source(s) in {:.2} s, lost {}, resolver rejected {}",
        stop.requested()
            .map(|s| format!(" (stopped by {s})"))
            .unwrap_or_default(),
        sessions.len(),
        start.elapsed().as_secs_f64(),
        c.lost,
        r.rejected()
    )?;
    if let Some(a) = s.source_admission() {
        if a.pinned_elsewhere + a.unproven_closed + a.waiting_dropped > 0 {
            writeln!(
                out,
                "sources not followed: {} advertised away from their [topics] URI, {} silent for {} s, {} dropped from the wait",
                a.pinned_elsewhere,
                a.unproven_closed,
                peregrine::PROOF_TIMEOUT_NS / 1_000_000_000,
                a.waiting_dropped
            )?;
        }
    }
    out.flush()?;
    if received < want && a.count.is_some() && stop.requested().is_none() {
        bail!("received {received} of --count {want} messages before --seconds ran out");
    }
    Ok(())
}

/// One line for a subscriber's event (sources found and lost, losses, attach failures,
/// damaged segments); nothing for the others.
fn print_source_event(out: &mut impl Write, ev: SubscriberEvent) -> Result<()> {
    match ev {
        SubscriberEvent::SourceFound {
            topic,
            session_id,
            uri,
        } => writeln!(
            out,
            "source found: {} session={session_id:08x} via {}",
            printable(&topic),
            printable(&uri)
        )?,
        SubscriberEvent::SourceLost {
            topic,
            session_id,
            reason,
        } => writeln!(
            out,
            "source lost: {} session={session_id:08x} ({})",
            printable(&topic),
            printable(reason)
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
            writeln!(out, "attach failed: {}", printable(&reason))?
        }
        SubscriberEvent::SegmentDamaged { session_id, reason } => writeln!(
            out,
            "DAMAGED: session={session_id:08x}: {}",
            printable(&reason)
        )?,
        _ => {}
    }
    Ok(())
}

/// `peregrine sub TOPIC --group NAME`: the failover group's stream, each sequence once.
fn run_group(a: SubArgs, group: &str) -> Result<()> {
    if a.pattern.contains(['*', '?']) {
        bail!(
            "--group {group} needs one topic name, not the pattern '{}': a failover group is one stream",
            printable(&a.pattern)
        );
    }
    let stop = Stop::install()?;
    let ctx = context()?;
    let config = ArbiterConfig {
        window_ns: a.window_ms * 1_000_000,
        ..ArbiterConfig::default()
    };
    let s = ctx.subscribe(&a.pattern, a.idle.idle)?;
    let mut s = FailoverSubscriber::new(vec![s], group, config)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(
        out,
        "subscribed to {} as failover group '{}'",
        printable(&a.pattern),
        printable(group)
    )?;
    out.flush()?;
    let start = Instant::now();
    let deadline = a.stop.seconds.map(|x| start + Duration::from_secs_f64(x));
    let want = a.count.unwrap_or(u64::MAX);
    let mut received = 0u64;
    let mut last_line = start;
    let mut received_at_line = 0u64;
    let mut lines: Vec<String> = Vec::new();
    while received < want && stop.requested().is_none() {
        let n = s.poll(
            &mut |m| {
                received += 1;
                if a.print && received <= want {
                    lines.push(format!(
                        "{} seq={} session={:08x} len={}: {}",
                        printable(&a.pattern),
                        m.sequence,
                        m.session_id,
                        m.payload.len(),
                        shown(m.payload)
                    ));
                }
            },
            256,
        );
        while let Some(ev) = s.next_event() {
            match ev {
                FailoverEvent::Lost {
                    from_sequence,
                    count,
                } => writeln!(
                    out,
                    "LOST: {count} message(s) from seq={from_sequence}: no member of the group supplied them"
                )?,
                FailoverEvent::Disagreement {
                    sequence,
                    delivered_from,
                    other,
                } => writeln!(
                    out,
                    "DISAGREE: seq={sequence}: session={delivered_from:08x}'s copy was delivered, session={other:08x} sent other content"
                )?,
                FailoverEvent::Refused { reason, .. } => {
                    writeln!(out, "refused: {}", printable(&reason))?
                }
                FailoverEvent::Source(SubscriberEvent::PublisherDied { session_id }) => {
                    writeln!(out, "member gone: session={session_id:08x} (died)")?
                }
                FailoverEvent::Source(SubscriberEvent::PublisherClosed { session_id }) => {
                    writeln!(out, "member gone: session={session_id:08x} (closed)")?
                }
                FailoverEvent::Source(ev) => print_source_event(&mut out, ev)?,
                _ => {}
            }
        }
        for l in lines.drain(..) {
            writeln!(out, "{l}")?;
        }
        let now = Instant::now();
        if now - last_line >= Duration::from_secs(1) {
            let secs = (now - last_line).as_secs_f64();
            let c = s.counters();
            writeln!(
                out,
                "[sub {:.1}s] {:.0} msgs/s, total {received}, members {}, duplicates {}, lost {}",
                (now - start).as_secs_f64(),
                (received - received_at_line) as f64 / secs,
                s.members().len(),
                c.duplicates,
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
    writeln!(
        out,
        "done{}: received {received} messages of failover group '{}' in {:.2} s, lost {}, duplicates {}, disagreements {}, refused {}",
        stop.requested()
            .map(|s| format!(" (stopped by {s})"))
            .unwrap_or_default(),
        printable(group),
        start.elapsed().as_secs_f64(),
        c.lost,
        c.duplicates,
        c.disagreements,
        s.refused_messages()
    )?;
    out.flush()?;
    if received < want && a.count.is_some() && stop.requested().is_none() {
        bail!("received {received} of --count {want} messages before --seconds ran out");
    }
    Ok(())
}

/// `sub TOPIC --from-seq N`: the recorded history from N, then the live stream (a replay
/// merge, `peregrine_archive::MergingSubscriber`), printed as `--print` prints, with a line
/// per stream at its seam. Without --from-seq (`--dir` or `--recorder` alone): live, with
/// every loss the publisher can no longer repair recovered from the recording.
fn run_merge(a: SubArgs) -> Result<()> {
    use peregrine_archive::{DurableSubscriber, History, MergeEvent, MergingSubscriber, Start};
    let what = match a.from_seq {
        Some(from) => format!("--from-seq {from}"),
        None => "--dir or --recorder".to_string(),
    };
    let history = match (&a.dir, &a.recorder) {
        (Some(d), _) => History::Dir(d.clone()),
        (None, Some(r)) => History::Recorders(r.clone()),
        (None, None) => bail!(
            "{what}: say where the history is: --dir DIR (a recording folder) or --recorder HOST:PORT"
        ),
    };
    if a.pattern.contains(['*', '?']) {
        bail!(
            "{what} needs a topic name, not the pattern {}",
            printable(&a.pattern)
        );
    }
    let start = match a.from_seq {
        Some(from) => Start::Sequence(from),
        None => Start::Live,
    };
    let stop = Stop::install()?;
    let ctx = context()?;
    let limit = Duration::from_secs(10);
    let mut m = match &a.durable {
        Some(name) => Merged::Durable(Box::new(DurableSubscriber::open(
            &ctx,
            &a.pattern,
            name,
            history,
            start,
            Duration::from_millis(a.commit_ms),
            limit,
        )?)),
        None => Merged::Plain(Box::new(MergingSubscriber::with_start(
            &ctx, &a.pattern, start, history, limit,
        )?)),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match (&m, start) {
        (Merged::Durable(d), _) if d.resumed() => writeln!(
            out,
            "subscribed to {} as durable {}: resuming where it stood",
            printable(&a.pattern),
            d.name()
        )?,
        (Merged::Durable(d), _) => writeln!(
            out,
            "subscribed to {} as durable {} (new name: kept from now on)",
            printable(&a.pattern),
            d.name()
        )?,
        (_, Start::Sequence(from)) => writeln!(
            out,
            "subscribed to {} from sequence {from}",
            printable(&a.pattern)
        )?,
        (_, Start::Live) => writeln!(
            out,
            "subscribed to {} (losses recovered from the recording)",
            printable(&a.pattern)
        )?,
    }
    out.flush()?;
    let start = Instant::now();
    let deadline = a.stop.seconds.map(|x| start + Duration::from_secs_f64(x));
    let want = a.count.unwrap_or(u64::MAX);
    let mut received = 0u64;
    let mut lines = Vec::new();
    while received < want && stop.requested().is_none() {
        let limit = (want - received).min(256) as usize;
        let n = m.poll(
            &mut |msg| {
                received += 1;
                if a.print {
                    lines.push(message_line(
                        &a.pattern,
                        msg.session_id,
                        msg.sequence,
                        msg.payload,
                    ));
                }
            },
            limit,
        )?;
        for e in m.take_events(&mut lines) {
            match e {
                MergeEvent::Seam {
                    session_id,
                    recorded,
                    live_from,
                    after,
                } => lines.push(format!(
                    "seam session={session_id:08x}: {recorded} recorded, live from sequence {live_from}, after {:.1} ms",
                    after.as_secs_f64() * 1e3
                )),
                MergeEvent::Gap {
                    session_id,
                    from,
                    live_from,
                    reason,
                } => lines.push(format!(
                    "GAP session={session_id:08x}: sequences {from} to {} missing ({reason})",
                    live_from.saturating_sub(1)
                )),
                MergeEvent::Recovered {
                    session_id,
                    from,
                    to,
                    recorded,
                } => lines.push(format!(
                    "recovered session={session_id:08x}: sequences {from} to {} from the recording ({recorded} messages), nothing lost",
                    to.saturating_sub(1)
                )),
                MergeEvent::CaughtUp {
                    session_id,
                    recorded,
                    next,
                } => lines.push(format!(
                    "caught up session={session_id:08x}: {recorded} recorded to sequence {next}, not live"
                )),
            }
        }
        for l in lines.drain(..) {
            writeln!(out, "{l}")?;
        }
        if n == 0 {
            out.flush()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let duplicates = match &m {
        Merged::Plain(p) => p.duplicates(),
        Merged::Durable(d) => d.merge().duplicates(),
    };
    writeln!(
        out,
        "done{}: received {received} messages in {:.2} s, live copies of recorded ones dropped {duplicates}",
        stop.requested()
            .map(|s| format!(" (stopped by {s})"))
            .unwrap_or_default(),
        start.elapsed().as_secs_f64(),
    )?;
    out.flush()?;
    if let Merged::Durable(d) = m {
        d.close().context("keeping the durable positions")?;
    }
    if received < want && a.count.is_some() {
        bail!("{received} of {want} messages received");
    }
    Ok(())
}

/// A replay merge, durable or not.
enum Merged {
    Plain(Box<peregrine_archive::MergingSubscriber>),
    Durable(Box<peregrine_archive::DurableSubscriber>),
}

impl Merged {
    fn poll(
        &mut self,
        handler: &mut dyn FnMut(peregrine_archive::MergedMessage<'_>),
        limit: usize,
    ) -> Result<usize, peregrine_archive::ArchiveError> {
        match self {
            Merged::Plain(m) => m.poll(handler, limit),
            Merged::Durable(d) => d.poll(handler, limit),
        }
    }

    /// The merge's events, and a failure to keep the positions as a line of its own.
    fn take_events(&mut self, lines: &mut Vec<String>) -> Vec<peregrine_archive::MergeEvent> {
        match self {
            Merged::Plain(m) => m.take_events(),
            Merged::Durable(d) => {
                if let Some(e) = d.take_commit_failure() {
                    lines.push(format!("WARNING: positions not kept (tried again): {e}"));
                }
                d.take_events()
            }
        }
    }
}
