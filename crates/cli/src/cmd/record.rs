//! `peregrine record`: a thin driver over [`peregrine_archive::Recorder`]. Prints a line per
//! stream started, ended, failed or reporting a loss, and the totals at the end.

use super::{context, printable, Stop};
use crate::flags::archive::{ExportArgs, RecordArgs, RecordCommand};
use anyhow::{Context as _, Result};
use peregrine_archive::{Recorder, RecorderEvent, Retention, WriterOptions};
use std::io::Write;
use std::time::{Duration, Instant};

pub fn run(a: RecordArgs) -> Result<()> {
    if let Some(RecordCommand::Export(e)) = a.command {
        return export(e);
    }
    let dir = a.dir.context("--dir is required")?;
    let stop = Stop::install()?;
    let opts = WriterOptions {
        segment_len: a.segment_len,
        durability: a.fsync,
        retention: Retention {
            max_bytes: a.retain_bytes,
            max_age_ns: a.retain_seconds.map(|s| s * 1_000_000_000),
        },
        ..WriterOptions::default()
    };
    opts.validate().map_err(|e| {
        anyhow::anyhow!(
            "--segment-len {} --retain-bytes {}: {e}",
            a.segment_len,
            a.retain_bytes
                .map_or("(none)".to_string(), |b| b.to_string())
        )
    })?;
    let ctx = context()?;
    let mut rec =
        Recorder::open(&dir, opts).with_context(|| format!("recording into {}", dir.display()))?;
    for p in &a.topics {
        rec.record_topic(&ctx, p)?;
    }
    let mut what = a.topics.clone();
    if let Some(backbone) = &a.backbone {
        let (uri, sealing) = peregrine_market_data::backbone::seal(&ctx, backbone)
            .map_err(|e| anyhow::anyhow!("--backbone {backbone}: {e}"))?;
        for service in &a.service {
            peregrine_md::model::check_service(service.as_bytes())
                .map_err(|e| anyhow::anyhow!("--service {service}: {e}"))?;
            let topic = peregrine_market_data::backbone::backbone_topic(service);
            rec.record_uri(&ctx, &topic, &uri)?;
            what.push(format!("{topic} on {backbone}"));
        }
        eprintln!("{}", sealing.describe());
    }
    let server = a
        .serve
        .map(|addr| peregrine_archive::ReplayServer::start(&dir, addr))
        .transpose()
        .context("--serve")?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "recording {} into {} (fsync={}, segments of {} bytes){}",
        what.join(","),
        dir.display(),
        a.fsync,
        a.segment_len,
        server
            .as_ref()
            .map(|s| format!(", serving replays on {}", s.local_addr()))
            .unwrap_or_default()
    )?;
    out.flush()?;
    let deadline = a
        .stop
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    while stop.requested().is_none() && deadline.is_none_or(|d| Instant::now() < d) {
        let n = rec.poll(1024);
        for e in rec.take_events() {
            let line = match e {
                RecorderEvent::Started { meta, dir } => format!(
                    "started {} session={:08x} in {}",
                    printable(&meta.topic),
                    meta.session_id,
                    dir.display()
                ),
                RecorderEvent::Ended { meta, messages } => format!(
                    "ended {} session={:08x}: {messages} messages",
                    printable(&meta.topic),
                    meta.session_id
                ),
                RecorderEvent::Failed { meta, error } => format!(
                    "FAILED {} session={:08x}: {error}",
                    printable(&meta.topic),
                    meta.session_id
                ),
                RecorderEvent::Lost {
                    meta,
                    from_sequence,
                    count,
                } => format!(
                    "LOST {} session={:08x}: {count} from sequence {from_sequence} (not recorded)",
                    printable(&meta.topic),
                    meta.session_id
                ),
            };
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        rec.idle(n);
    }
    let (messages, bytes, streams) = rec.totals();
    let (dropped, already) = (rec.dropped(), rec.already_recorded());
    rec.close().context("closing the recordings")?;
    writeln!(
        out,
        "done: {messages} messages ({bytes} bytes) recorded, {streams} streams open at the end, {dropped} dropped by failed streams, {already} recorded before (resumed streams)"
    )?;
    Ok(())
}

/// `peregrine record export`: a thin driver over [`peregrine_archive::export`]. Prints what
/// was written and what was left out.
fn export(a: ExportArgs) -> Result<()> {
    use peregrine_archive::export::{export_parquet, ExportOptions};
    let dictionary = match &a.dictionary {
        Some(p) => peregrine_md::dictionary::Dictionary::load(p)
            .map_err(|e| anyhow::anyhow!("--dictionary: {e}"))?,
        None => peregrine_md::dictionary::Dictionary::builtin(),
    };
    let opts = ExportOptions {
        topics: a.topics,
        dictionary,
        rows_per_group: a.rows_per_group as usize,
    };
    let s = export_parquet(&a.dir, &a.out, &opts)?;
    let mut out = std::io::stdout().lock();
    for d in &s.damaged {
        writeln!(
            out,
            "damaged record skipped: {} at offset {}: {}",
            d.path.display(),
            d.offset,
            d.error
        )?;
    }
    writeln!(
        out,
        "exported {} rows of {} streams to {}: {} market data, {} raw ({} on md.* topics not market data); field values without a column {}, of another kind than the dictionary's {}; damaged records {}",
        s.rows,
        s.streams,
        a.out.display(),
        s.market_data,
        s.raw,
        s.undecodable,
        s.fields.unknown_fields,
        s.fields.kind_mismatches,
        s.damaged.len()
    )?;
    Ok(())
}
