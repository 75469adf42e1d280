//! `peregrine bench record`: what recording and replaying cost against the disk itself, in
//! the same run (issue 32's targets). Per message size, in a folder of the user's choice:
//!
//! - **record**: a [`RecordingWriter`] appends messages as fast as it takes them (the
//!   storage alone: no transport), forced as `--fsync` says;
//! - **append ceiling**: the same number of bytes (the recording's records) appended to a
//!   plain file in 256 KiB writes, forced on the same schedule;
//! - **replay**: a [`RecordingReader`] reads every message back, checking each;
//! - **read ceiling**: the same segment files read sequentially in 1 MiB reads (`cat`);
//! - **seek**: 64 reads from a sequence spread over the recording, to their first message,
//!   with the segments' indexes, then the same with the index files removed (each segment
//!   read from its start to the place);
//! - **live**: a [`peregrine_archive::Recorder`] records a live stream: a publisher in a thread of its own sends
//!   the same messages over shared memory (found by topic resolution) as fast as the recorder
//!   takes them (the log's back-pressure paces it: nothing is lost), and the rate from the
//!   first send to the last message recorded is its highest rate with no loss; against the
//!   append ceiling of the same run;
//! - **export**: a recording of market data (a REFRESH of each of 1,000 items, then 72-byte
//!   UPDATEs; one message per 128 bytes of `bytes`, 10,000 to 1,000,000) written to Parquet
//!   by [`peregrine_archive::export`]: rows per second.
//!
//! Both writes start from an empty folder and both reads follow their write (the page cache
//! holds what was just written in both cases). The median of `runs` runs is reported.

use crate::BenchError;
use peregrine_archive::format::align8;
use peregrine_archive::format::record::RECORD_HEADER_LEN;
use peregrine_archive::{
    Durability, Entry, RecordingReader, RecordingWriter, StreamMeta, WriterOptions,
};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RecordBenchConfig {
    pub sizes: Vec<usize>,
    /// Bytes of records written per size and run.
    pub bytes: u64,
    pub durability: Durability,
    /// Where the files go (made, emptied between runs, removed at the end).
    pub dir: PathBuf,
    pub runs: u32,
}

impl RecordBenchConfig {
    pub fn validate(&self) -> Result<(), BenchError> {
        if let Some(s) = self.sizes.iter().find(|s| **s < 8 || **s > 1 << 20) {
            return Err(BenchError::Config(format!(
                "--size {s} is not accepted: give 8 bytes to 1m (the first 8 carry the sequence for the check)"
            )));
        }
        if !(1 << 20..=64 << 30).contains(&self.bytes) {
            return Err(BenchError::Config(format!(
                "--bytes {} is not accepted: give 1m to 64g",
                self.bytes
            )));
        }
        if !(1..=15).contains(&self.runs) {
            return Err(BenchError::Config(format!(
                "--runs {} is not accepted: give 1 to 15",
                self.runs
            )));
        }
        Ok(())
    }
}

/// One size's figures (medians over the runs).
#[derive(Debug, Clone, Serialize)]
pub struct RecordBenchRow {
    pub size_bytes: usize,
    pub messages: u64,
    pub record_msgs_per_s: f64,
    pub record_bytes_per_s: f64,
    pub append_ceiling_bytes_per_s: f64,
    /// Record over the ceiling, run by run, and their median.
    pub record_x_ceiling: Vec<f64>,
    pub record_x_ceiling_median: f64,
    pub replay_msgs_per_s: f64,
    pub replay_bytes_per_s: f64,
    pub read_ceiling_bytes_per_s: f64,
    pub replay_x_ceiling: Vec<f64>,
    pub replay_x_ceiling_median: f64,
    /// Microseconds from `from_sequence` to the first message, with the index and without.
    pub seek_us: f64,
    pub seek_without_index_us: f64,
    /// Recording from a live stream: messages per second from the first send to the last
    /// recorded, messages lost (0: the publisher was back-pressured instead), and the bytes
    /// per second over the append ceiling, run by run.
    pub live_msgs_per_s: f64,
    pub live_lost: u64,
    pub live_x_ceiling: Vec<f64>,
    pub live_x_ceiling_median: f64,
}

/// The export's figures (medians over the runs).
#[derive(Debug, Clone, Serialize)]
pub struct ExportBenchRow {
    pub rows: u64,
    pub rows_per_s: f64,
    pub file_bytes: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs every size; prints nothing.
pub fn run(cfg: &RecordBenchConfig) -> Result<Vec<RecordBenchRow>, BenchError> {
    cfg.validate()?;
    let mut rows = Vec::new();
    for &size in &cfg.sizes {
        let mut runs = Vec::new();
        for _ in 0..cfg.runs {
            runs.push(one_run(cfg, size)?);
        }
        let _ = std::fs::remove_dir_all(&cfg.dir);
        let messages = runs[0].messages;
        let pick = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        let rx: Vec<f64> = runs.iter().map(|r| r.record_bps / r.append_bps).collect();
        let px: Vec<f64> = runs.iter().map(|r| r.replay_bps / r.read_bps).collect();
        let lx: Vec<f64> = runs.iter().map(|r| r.live_bps / r.append_bps).collect();
        rows.push(RecordBenchRow {
            size_bytes: size,
            messages,
            record_msgs_per_s: pick(|r| r.record_mps),
            record_bytes_per_s: pick(|r| r.record_bps),
            append_ceiling_bytes_per_s: pick(|r| r.append_bps),
            record_x_ceiling_median: median(rx.clone()),
            record_x_ceiling: rx,
            replay_msgs_per_s: pick(|r| r.replay_mps),
            replay_bytes_per_s: pick(|r| r.replay_bps),
            read_ceiling_bytes_per_s: pick(|r| r.read_bps),
            replay_x_ceiling_median: median(px.clone()),
            replay_x_ceiling: px,
            seek_us: pick(|r| r.seek_us),
            seek_without_index_us: pick(|r| r.scan_us),
            live_msgs_per_s: pick(|r| r.live_mps),
            live_lost: runs.iter().map(|r| r.live_lost).sum(),
            live_x_ceiling_median: median(lx.clone()),
            live_x_ceiling: lx,
        });
    }
    Ok(rows)
}

/// Messages of the export's recording: one per 128 bytes of `--bytes`, 10,000 to 1,000,000.
fn export_messages(cfg: &RecordBenchConfig) -> u64 {
    (cfg.bytes / 128).clamp(10_000, 1_000_000)
}

/// Writes a recording of market data and exports it to Parquet `runs` times: the median.
pub fn run_export(cfg: &RecordBenchConfig) -> Result<ExportBenchRow, BenchError> {
    use peregrine_archive::export::{export_parquet, ExportOptions};
    use peregrine_md::quotes::{Draws as _, Quote, SplitMix64, UpdateLayout};
    cfg.validate()?;
    let messages = export_messages(cfg);
    let _ = std::fs::remove_dir_all(&cfg.dir);
    let rec = cfg.dir.join("export");
    let topic = "md.BENCH";
    let meta = StreamMeta {
        topic: topic.into(),
        session_id: 1,
        stream_id: 1,
    };
    let child = |e: peregrine_archive::ArchiveError| BenchError::Child(e.to_string());
    {
        let mut w = RecordingWriter::open(
            &peregrine_archive::folder::stream_dir(&rec, topic, 1),
            &meta,
            WriterOptions {
                durability: Durability::None,
                ..WriterOptions::default()
            },
            wall_ns(),
        )
        .map_err(child)?;
        let mut rng = SplitMix64::seeded(1);
        let mut quotes: Vec<Quote> = (0..1000)
            .map(|i| {
                Quote::new(
                    peregrine_md::quotes::sample_item_name(i),
                    i as u32 + 1,
                    &mut rng,
                )
            })
            .collect();
        let layout = UpdateLayout::for_size(72).map_err(|e| BenchError::Config(e.to_string()))?;
        let mut buf = Vec::new();
        let t0 = wall_ns();
        let items = quotes.len() as u64;
        for i in 0..messages {
            let q = &mut quotes[(i % items) as usize];
            if i < items {
                q.encode_refresh("BENCH", 0, t0 + i, t0 + i, &mut buf);
            } else {
                q.tick(&mut rng);
                q.encode_update(t0 + i, &layout, &mut buf);
            }
            q.seq += 1;
            w.append(i, t0 + i, &buf).map_err(child)?;
        }
        w.close().map_err(child)?;
    }
    let out = cfg.dir.join("export.parquet");
    let mut rates = Vec::new();
    let mut file_bytes = 0;
    for _ in 0..cfg.runs {
        let t0 = Instant::now();
        let summary = export_parquet(&rec, &out, &ExportOptions::default())
            .map_err(|e| BenchError::Child(format!("export: {e}")))?;
        let secs = t0.elapsed().as_secs_f64();
        if summary.market_data != messages || summary.raw != 0 {
            return Err(BenchError::Child(format!(
                "export: {} market data rows and {} raw of {messages} messages",
                summary.market_data, summary.raw
            )));
        }
        file_bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        rates.push(messages as f64 / secs);
    }
    let _ = std::fs::remove_dir_all(&cfg.dir);
    Ok(ExportBenchRow {
        rows: messages,
        rows_per_s: median(rates),
        file_bytes,
    })
}

/// The export's line.
pub fn export_line(r: &ExportBenchRow) -> String {
    format!(
        "export to Parquet: {} market data rows (a REFRESH of each of 1,000 items, then 72-byte UPDATEs) at {:.0} rows/s (median), {:.1} MB of file\n",
        r.rows,
        r.rows_per_s,
        r.file_bytes as f64 / 1e6
    )
}

/// One run's rates (bytes are the records' bytes on disk).
struct Run {
    messages: u64,
    record_mps: f64,
    record_bps: f64,
    append_bps: f64,
    replay_mps: f64,
    replay_bps: f64,
    read_bps: f64,
    seek_us: f64,
    scan_us: f64,
    live_mps: f64,
    live_bps: f64,
    live_lost: u64,
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> BenchError {
    BenchError::Child(format!("{what} {}: {e}", path.display()))
}

fn one_run(cfg: &RecordBenchConfig, size: usize) -> Result<Run, BenchError> {
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir).map_err(|e| io_err(&cfg.dir, "create", e))?;
    let span = (RECORD_HEADER_LEN + align8(size)) as u64;
    let messages = (cfg.bytes / span).max(1);
    let bytes = messages * span;
    let interval_ns = match cfg.durability {
        Durability::Interval { ms } => Some(ms * 1_000_000),
        _ => None,
    };

    // The ceiling: the same bytes appended to one file, forced on the same schedule.
    let plain = cfg.dir.join("plain.dat");
    let append_s = {
        let mut f = std::fs::File::create(&plain).map_err(|e| io_err(&plain, "create", e))?;
        let chunk = vec![0x5au8; 256 << 10];
        let t0 = Instant::now();
        let mut last_force = t0;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])
                .map_err(|e| io_err(&plain, "write", e))?;
            left -= n as u64;
            let force = match cfg.durability {
                Durability::Each => true,
                Durability::None => false,
                Durability::Interval { .. } => {
                    last_force.elapsed().as_nanos() as u64 >= interval_ns.unwrap_or(u64::MAX)
                }
            };
            if force {
                f.sync_data().map_err(|e| io_err(&plain, "fsync", e))?;
                last_force = Instant::now();
            }
        }
        if cfg.durability != Durability::None {
            f.sync_data().map_err(|e| io_err(&plain, "fsync", e))?;
        }
        t0.elapsed().as_secs_f64()
    };
    std::fs::remove_file(&plain).map_err(|e| io_err(&plain, "remove", e))?;

    // The recording.
    let rec = cfg.dir.join("recording");
    let meta = StreamMeta {
        topic: "bench.record".into(),
        session_id: 1,
        stream_id: 1,
    };
    let opts = WriterOptions {
        durability: cfg.durability,
        ..WriterOptions::default()
    };
    let record_s = {
        let mut payload = vec![0u8; size];
        for (k, b) in payload.iter_mut().enumerate() {
            *b = k as u8;
        }
        let t0 = Instant::now();
        let mut w = RecordingWriter::open(&rec, &meta, opts, wall_ns())
            .map_err(|e| BenchError::Child(e.to_string()))?;
        for i in 0..messages {
            payload[..8].copy_from_slice(&i.to_le_bytes());
            w.append(i, i, &payload)
                .map_err(|e| BenchError::Child(e.to_string()))?;
            if i % 1024 == 1023 {
                w.poll(t0.elapsed().as_nanos() as u64)
                    .map_err(|e| BenchError::Child(e.to_string()))?;
            }
        }
        w.close().map_err(|e| BenchError::Child(e.to_string()))?;
        t0.elapsed().as_secs_f64()
    };

    // Replay, checking every message; then the same files read as `cat` would.
    let replay_s = {
        let t0 = Instant::now();
        let r = RecordingReader::open(&rec).map_err(|e| BenchError::Child(e.to_string()))?;
        let mut c = r.cursor();
        let mut next = 0u64;
        while let Some(e) = c.next_entry() {
            match e.map_err(|e| BenchError::Child(e.to_string()))? {
                Entry::Message {
                    sequence, payload, ..
                } if sequence == next
                    && payload.len() == size
                    && payload[..8] == next.to_le_bytes() =>
                {
                    next += 1
                }
                other => {
                    return Err(BenchError::Child(format!(
                        "replay: message {next} read back as {other:?}"
                    )))
                }
            }
        }
        if next != messages {
            return Err(BenchError::Child(format!(
                "replay: {next} of {messages} messages read back"
            )));
        }
        t0.elapsed().as_secs_f64()
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&rec)
        .map_err(|e| io_err(&rec, "list", e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    let read_s = read_files(&files)?;
    // The segment files hold the records and the unused rest of the last one: the read
    // ceiling is per byte of file read.
    let file_bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let replayed_file_bytes = file_bytes as f64;
    let seek_us = seeks(&rec, messages)?;
    for p in &files {
        let idx = p.with_extension("idx");
        std::fs::remove_file(&idx).map_err(|e| io_err(&idx, "remove", e))?;
    }
    let scan_us = seeks(&rec, messages)?;
    let (live_s, live_lost) = live(cfg, size, messages)?;
    Ok(Run {
        messages,
        record_mps: messages as f64 / record_s,
        record_bps: bytes as f64 / record_s,
        append_bps: bytes as f64 / append_s,
        replay_mps: messages as f64 / replay_s,
        replay_bps: replayed_file_bytes / replay_s,
        read_bps: replayed_file_bytes / read_s,
        seek_us,
        scan_us,
        live_mps: messages as f64 / live_s,
        live_bps: bytes as f64 / live_s,
        live_lost,
    })
}

/// Records `messages` of `size` bytes from a live stream (see the module's documentation):
/// the seconds from the first send to the last message recorded, and the messages lost.
fn live(cfg: &RecordBenchConfig, size: usize, messages: u64) -> Result<(f64, u64), BenchError> {
    use peregrine_archive::{Recorder, RecorderEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let dir = cfg.dir.join("live");
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("bench.record.live.{}", std::process::id());
    let ctx = |_: ()| peregrine::Context::from_env().map_err(|e| BenchError::Config(e.to_string()));
    let child = |e: &dyn std::fmt::Display| BenchError::Child(format!("live: {e}"));
    let rctx = ctx(())?;
    let opts = WriterOptions {
        durability: cfg.durability,
        ..WriterOptions::default()
    };
    let mut rec = Recorder::new(&rctx, &dir, &[topic.as_str()], opts).map_err(|e| child(&e))?;
    let done = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel::<Result<Instant, String>>();
    let publisher = {
        let (topic, done, pctx) = (topic.clone(), done.clone(), ctx(())?);
        std::thread::spawn(move || {
            let mut p = match pctx.publish(&topic) {
                Ok(p) => p,
                Err(e) => {
                    let _ = started_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            while p.subscriber_count() == 0 {
                if Instant::now() > deadline {
                    let _ = started_tx.send(Err("the recorder never attached".into()));
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let mut payload = vec![0u8; size];
            let t0 = Instant::now();
            let _ = started_tx.send(Ok(t0));
            for i in 0..messages {
                payload[..8].copy_from_slice(&i.to_le_bytes());
                loop {
                    match p.offer(&payload) {
                        Ok(_) => break,
                        Err(peregrine::OfferError::BackPressured) => std::hint::spin_loop(),
                        Err(_) => return,
                    }
                }
            }
            let _ = p.flush();
            // Open until everything is recorded: the recorder reads the log while it is.
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    let mut t0 = None;
    let mut lost = 0u64;
    let mut last_progress = Instant::now();
    let mut last_count = 0;
    let outcome = loop {
        let n = rec.poll(4096);
        if t0.is_none() {
            match started_rx.try_recv() {
                Ok(Ok(t)) => t0 = Some(t),
                Ok(Err(e)) => break Err(child(&e)),
                Err(_) => {}
            }
        }
        for e in rec.take_events() {
            match e {
                RecorderEvent::Lost { count, .. } => lost += count,
                RecorderEvent::Failed { error, .. } => return Err(child(&error)),
                _ => {}
            }
        }
        let (recorded, _, _) = rec.totals();
        if recorded + lost >= messages {
            break Ok(());
        }
        if recorded != last_count {
            (last_count, last_progress) = (recorded, Instant::now());
        } else if last_progress.elapsed() > std::time::Duration::from_secs(10) {
            break Err(child(&format!(
                "{recorded} of {messages} messages recorded, then nothing for 10 s"
            )));
        }
        if n == 0 {
            std::hint::spin_loop();
        }
    };
    let secs = t0.map(|t| t.elapsed().as_secs_f64());
    done.store(true, Ordering::Release);
    let _ = publisher.join();
    rec.close().map_err(|e| child(&e))?;
    outcome?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        secs.ok_or_else(|| child(&"the publisher never started"))?,
        lost,
    ))
}

/// The mean microseconds of 64 reads from a sequence spread over the recording (each
/// checked), from `from_sequence` to the first message.
fn seeks(rec: &Path, messages: u64) -> Result<f64, BenchError> {
    const SEEKS: u64 = 64;
    let r = RecordingReader::open(rec).map_err(|e| BenchError::Child(e.to_string()))?;
    let t0 = Instant::now();
    for k in 1..=SEEKS {
        let want = k.wrapping_mul(2_654_435_761) % messages;
        let mut c = r
            .from_sequence(want)
            .map_err(|e| BenchError::Child(e.to_string()))?;
        match c.next_entry() {
            Some(Ok(Entry::Message { sequence, .. })) if sequence == want => {}
            other => {
                return Err(BenchError::Child(format!(
                    "seek: sequence {want} read as {other:?}"
                )))
            }
        }
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / SEEKS as f64)
}

/// Reads `files` in turn, 1 MiB at a time; the seconds it took.
fn read_files(files: &[PathBuf]) -> Result<f64, BenchError> {
    let mut buf = vec![0u8; 1 << 20];
    let t0 = Instant::now();
    let mut sum = 0u64;
    for p in files {
        let mut f = std::fs::File::open(p).map_err(|e| io_err(p, "open", e))?;
        loop {
            let n = f.read(&mut buf).map_err(|e| io_err(p, "read", e))?;
            if n == 0 {
                break;
            }
            sum = sum.wrapping_add(u64::from(buf[n - 1]));
        }
    }
    std::hint::black_box(sum);
    Ok(t0.elapsed().as_secs_f64())
}

fn wall_ns() -> u64 {
    peregrine_archive::folder::wall_ns()
}

/// The rows as a table.
pub fn table(rows: &[RecordBenchRow], cfg: &RecordBenchConfig) -> String {
    let mut s = format!(
        "recording and replay against the disk ({}, fsync={}, median of {} runs)\n",
        cfg.dir.display(),
        cfg.durability,
        cfg.runs
    );
    s += &format!(
        "  {:>8} {:>10} {:>14} {:>12} {:>12} {:>7} {:>14} {:>12} {:>12} {:>7} {:>9} {:>12} {:>12} {:>7} {:>5}\n",
        "size_B",
        "messages",
        "record_msg/s",
        "record_MB/s",
        "append_MB/s",
        "x",
        "replay_msg/s",
        "replay_MB/s",
        "read_MB/s",
        "x",
        "seek_us",
        "no_index_us",
        "live_msg/s",
        "x",
        "lost"
    );
    for r in rows {
        s += &format!(
            "  {:>8} {:>10} {:>14.0} {:>12.1} {:>12.1} {:>7.2} {:>14.0} {:>12.1} {:>12.1} {:>7.2} {:>9.0} {:>12.0} {:>12.0} {:>7.2} {:>5}\n",
            r.size_bytes,
            r.messages,
            r.record_msgs_per_s,
            r.record_bytes_per_s / 1e6,
            r.append_ceiling_bytes_per_s / 1e6,
            r.record_x_ceiling_median,
            r.replay_msgs_per_s,
            r.replay_bytes_per_s / 1e6,
            r.read_ceiling_bytes_per_s / 1e6,
            r.replay_x_ceiling_median,
            r.seek_us,
            r.seek_without_index_us,
            r.live_msgs_per_s,
            r.live_x_ceiling_median,
            r.live_lost,
        );
    }
    s
}
