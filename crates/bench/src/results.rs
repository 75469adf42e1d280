//! The results folder every benchmark run writes (layout in [`peregrine_report::model`]):
//! `results.json` and `results.csv` are rewritten after every cell, so a run cut short keeps
//! what it measured; each cell's samples go to `hdr/<id>.hlog` as an HdrHistogram interval
//! log.

use crate::clock::Clock;
use crate::stats::LatencyRecorder;
use crate::{BenchError, CpuPair};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use peregrine_report::model::{Cell, Machine, Results, FORMAT_VERSION};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where results folders go when `--out` is not given: `$PEREGRINE_RESULTS`, else
/// `./peregrine-results`.
pub fn default_base() -> PathBuf {
    std::env::var_os("PEREGRINE_RESULTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("peregrine-results"))
}

/// A results folder being written.
#[derive(Debug)]
pub struct ResultsFolder {
    dir: PathBuf,
    results: Results,
    start: SystemTime,
}

impl ResultsFolder {
    /// Creates `out` (it must not exist, or be an empty folder), or a new folder
    /// `<base>/<YYYYMMDD-HHMMSS>-<label>` when `out` is `None`.
    pub fn create(
        out: Option<&Path>,
        label: &str,
        command_line: Vec<String>,
        clock: &Clock,
        cpus: CpuPair,
    ) -> Result<ResultsFolder, BenchError> {
        let start = SystemTime::now();
        let (iso, compact) = utc(start);
        let dir = match out {
            Some(d) => {
                if d.exists()
                    && std::fs::read_dir(d)
                        .map(|mut r| r.next().is_some())
                        .unwrap_or(true)
                {
                    return Err(BenchError::Config(format!(
                        "--out {} is not accepted: it exists and is not an empty folder; give a new folder's path (results are never written over)",
                        d.display()
                    )));
                }
                d.to_path_buf()
            }
            None => {
                let base = default_base();
                let cannot = |dir: &Path, e: std::io::Error| {
                    BenchError::Config(format!(
                        "cannot create the results folder {}: {e} (give another with --out DIR or PEREGRINE_RESULTS)",
                        dir.display()
                    ))
                };
                std::fs::create_dir_all(&base).map_err(|e| cannot(&base, e))?;
                new_folder(&base, &format!("{compact}-{label}")).map_err(|e| cannot(&base, e))?
            }
        };
        std::fs::create_dir_all(dir.join("hdr")).map_err(|e| {
            BenchError::Config(format!(
                "cannot create the results folder {}: {e} (give another with --out DIR or PEREGRINE_RESULTS)",
                dir.display()
            ))
        })?;
        let f = ResultsFolder {
            dir,
            results: Results {
                format: FORMAT_VERSION,
                peregrine_version: env!("CARGO_PKG_VERSION").to_string(),
                started_utc: iso,
                command_line,
                machine: machine(clock, cpus),
                cells: Vec::new(),
            },
            start,
        };
        f.save()?;
        Ok(f)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn results(&self) -> &Results {
        &self.results
    }

    /// Adds a cell (its id made unique in the folder), with its samples: `from_send` is the
    /// cell's latency, `from_schedule` the corrected one of a load cell. Saves the folder.
    pub fn add(
        &mut self,
        mut cell: Cell,
        from_send: Option<&LatencyRecorder>,
        from_schedule: Option<&LatencyRecorder>,
    ) -> Result<&Cell, BenchError> {
        let base = sanitize(&cell.id);
        let mut id = base.clone();
        let mut k = 2;
        while self.results.cells.iter().any(|c| c.id == id) {
            id = format!("{base}-{k}");
            k += 1;
        }
        cell.id = id;
        let hists: Vec<(&str, &LatencyRecorder)> =
            [("from-send", from_send), ("from-schedule", from_schedule)]
                .into_iter()
                .filter_map(|(t, r)| r.filter(|r| r.summary().samples > 0).map(|r| (t, r)))
                .collect();
        if !hists.is_empty() {
            let rel = format!("hdr/{}.hlog", cell.id);
            self.write_hlog(&self.dir.join(&rel), &cell, &hists)?;
            cell.hdr_log = Some(rel);
        }
        self.results.cells.push(cell);
        self.save()?;
        Ok(self.results.cells.last().expect("just pushed"))
    }

    fn write_hlog(
        &self,
        path: &Path,
        cell: &Cell,
        hists: &[(&str, &LatencyRecorder)],
    ) -> Result<(), BenchError> {
        let mut out = Vec::new();
        let mut ser = V2DeflateSerializer::new();
        let mut builder = IntervalLogWriterBuilder::new();
        builder
            .add_comment(&format!(
                "Peregrine {} cell {}: latency in nanoseconds ({} samples); tags: from-send, from-schedule",
                env!("CARGO_PKG_VERSION"),
                cell.id,
                hists[0].1.summary().samples
            ))
            .with_start_time(self.start)
            .with_base_time(self.start)
            .with_max_value_divisor(1000.0);
        let mut w = builder
            .begin_log_with(&mut out, &mut ser)
            .map_err(BenchError::Io)?;
        let since_start = SystemTime::now()
            .duration_since(self.start)
            .unwrap_or_default();
        let length = Duration::from_secs_f64(cell.seconds.max(0.0));
        for (tag, rec) in hists {
            w.write_histogram(
                rec.histogram(),
                since_start.saturating_sub(length),
                length,
                Tag::new(tag),
            )
            .map_err(|e| BenchError::Child(format!("cannot encode the histogram log: {e:?}")))?;
        }
        drop(w);
        std::fs::write(path, out).map_err(BenchError::Io)
    }

    /// Writes `results.json` and `results.csv`.
    pub fn save(&self) -> Result<(), BenchError> {
        let json = serde_json::to_string_pretty(&self.results).expect("results serialise");
        write_atomically(&self.dir.join("results.json"), json.as_bytes())?;
        write_atomically(&self.dir.join("results.csv"), csv(&self.results).as_bytes())
    }
}

/// Makes `base/name`, or `base/name-2`, `-3`... if taken, and returns it. Made with
/// `create_dir`, which fails if the folder exists: two runs started in the same second (tests
/// run side by side) each get a folder of their own, never one shared (their results files
/// would replace each other's).
fn new_folder(base: &Path, name: &str) -> std::io::Result<PathBuf> {
    let mut dir = base.join(name);
    let mut k = 2;
    loop {
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                dir = base.join(format!("{name}-{k}"));
                k += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Letters, digits, `.`, `-` and `_` stay; anything else becomes `_`.
fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The CSV columns, one row per cell.
pub const CSV_HEADER: &str = "id,scenario,transport,size_bytes,rate_requested_msgs_per_s,rate_achieved_msgs_per_s,seconds,sent,received,lost,duplicates,out_of_order,refused,sustained,samples,min_ns,mean_ns,p1_ns,p25_ns,median_ns,p75_ns,p90_ns,p99_ns,p999_ns,p9999_ns,max_ns,stddev_ns,sched_median_ns,sched_p99_ns,sched_p999_ns,sched_max_ns,cpu_s";

/// `results.csv`: the numbers of every cell, flat.
pub fn csv(r: &Results) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_default();
    for c in &r.cells {
        let scenario = c
            .scenario
            .map(|s| {
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let _ = write!(
            s,
            "{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{}",
            c.id,
            scenario,
            c.transport,
            c.size_bytes,
            opt(c.rate_requested_msgs_per_s),
            opt(c.rate_achieved_msgs_per_s),
            c.seconds,
            c.sent,
            c.received,
            c.lost,
            c.duplicates,
            c.out_of_order,
            c.refused,
            c.sustained.map(|b| b.to_string()).unwrap_or_default(),
        );
        match &c.latency {
            Some(l) => {
                let _ = write!(
                    s,
                    ",{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1}",
                    l.samples,
                    l.min_ns,
                    l.mean_ns,
                    l.p1_ns,
                    l.p25_ns,
                    l.median_ns,
                    l.p75_ns,
                    l.p90_ns,
                    l.p99_ns,
                    l.p999_ns,
                    l.p9999_ns,
                    l.max_ns,
                    l.stddev_ns
                );
            }
            None => s.push_str(",,,,,,,,,,,,,"),
        }
        match &c.latency_from_schedule {
            Some(l) => {
                let _ = write!(
                    s,
                    ",{:.1},{:.1},{:.1},{:.1}",
                    l.median_ns, l.p99_ns, l.p999_ns, l.max_ns
                );
            }
            None => s.push_str(",,,,"),
        }
        let cpu: Vec<String> = c.cpu_s.iter().map(|(k, v)| format!("{k}={v:.3}")).collect();
        let _ = writeln!(s, ",{}", cpu.join(";"));
    }
    s
}

/// What this machine is: CPU model, CPUs, memory, kernel, clock source, the benchmark clock.
pub fn machine(clock: &Clock, cpus: CpuPair) -> Machine {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let memory_bytes = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    Machine {
        hostname: read("/proc/sys/kernel/hostname"),
        cpu_model,
        cpus_online: cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count(),
        cpus_allowed: peregrine_agent::allowed_cpus(),
        memory_bytes,
        kernel: read("/proc/sys/kernel/osrelease"),
        clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        clock: clock.describe(),
        cpus_used: cpus.to_arg(),
    }
}

/// `(2026-11-22T10:31:07Z, 20261122-103107)` for a time (UTC; the civil date from days since
/// 1970 by Howard Hinnant's algorithm, to keep a date crate out of the build).
fn utc(t: SystemTime) -> (String, String) {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem / 60 % 60, rem % 60);
    (
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    use peregrine_report::model::Scenario;

    #[test]
    fn utc_dates_match_known_instants() {
        let at = |s: u64| utc(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0).0, "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.
        assert_eq!(at(951_827_696).0, "2000-02-29T12:34:56Z");
        // `date -u -d @1795350896`: 2026-11-22 12:34:56.
        assert_eq!(at(1_795_350_896).1, "20261122-123456");
    }

    #[test]
    fn a_folder_keeps_cells_csv_and_readable_histogram_logs() {
        let base = std::env::temp_dir().join(crate::run_name("results-test"));
        let clock = Clock::calibrate(Duration::from_millis(5));
        let mut f = ResultsFolder::create(
            Some(&base),
            "t",
            vec!["peregrine".into(), "bench".into()],
            &clock,
            CpuPair::default_pair(),
        )
        .unwrap();
        let mut rec = LatencyRecorder::new();
        for v in 1..=1000 {
            rec.record(v as f64 * 10.0);
        }
        let cell = Cell {
            id: "load-udp-32B/1M".into(),
            scenario: Some(Scenario::Load),
            transport: "udp".into(),
            size_bytes: 32,
            seconds: 1.0,
            latency: Some(rec.summary()),
            ..Default::default()
        };
        let id = f
            .add(cell.clone(), Some(&rec), Some(&rec))
            .unwrap()
            .id
            .clone();
        assert_eq!(id, "load-udp-32B_1M");
        let id2 = f.add(cell, None, None).unwrap().id.clone();
        assert_eq!(id2, "load-udp-32B_1M-2");

        let back: Results =
            serde_json::from_slice(&std::fs::read(base.join("results.json")).unwrap()).unwrap();
        assert_eq!(back, *f.results());
        assert_eq!(back.cells.len(), 2);
        let csv = std::fs::read_to_string(base.join("results.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        let columns = CSV_HEADER.split(',').count();
        assert!(
            lines.iter().all(|l| l.split(',').count() == columns),
            "{csv}"
        );
        assert!(lines[1].starts_with("load-udp-32B_1M,load,udp,32,"));

        // The log holds both histograms, tagged, with every sample.
        let log = std::fs::read(base.join("hdr/load-udp-32B_1M.hlog")).unwrap();
        let mut tags = Vec::new();
        for e in IntervalLogIterator::new(&log) {
            if let Ok(LogEntry::Interval(h)) = e {
                let bytes = base64_decode(h.encoded_histogram());
                let hist: hdrhistogram::Histogram<u64> = Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .unwrap();
                assert_eq!(hist.len(), 1000);
                assert_eq!(
                    hist.value_at_quantile(0.5),
                    rec.histogram().value_at_quantile(0.5)
                );
                tags.push(h.tag().unwrap().as_str().to_string());
            }
        }
        assert_eq!(tags, ["from-send", "from-schedule"]);
        assert!(back.cells[1].hdr_log.is_none());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn runs_started_together_get_a_folder_each() {
        let base = std::env::temp_dir().join(crate::run_name("results-together"));
        std::fs::create_dir_all(&base).unwrap();
        let made: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| new_folder(&base, "20261127-120000-pingpong").unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut names: Vec<String> = made
            .iter()
            .map(|d| d.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(names.contains(&"20261127-120000-pingpong".to_string()));
        assert!(names.contains(&"20261127-120000-pingpong-8".to_string()));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn an_existing_folder_with_files_is_refused() {
        let base = std::env::temp_dir().join(crate::run_name("results-exists"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("x"), b"x").unwrap();
        let clock = Clock::calibrate(Duration::from_millis(5));
        let e = ResultsFolder::create(Some(&base), "t", vec![], &clock, CpuPair::default_pair())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--out") && e.contains("not an empty folder"),
            "{e}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Standard base64 (the interval log's encoding), for the test only.
    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for chunk in bytes.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= u32::from(val(c)) << (18 - 6 * i);
            }
            out.push((n >> 16) as u8);
            if chunk.len() > 2 {
                out.push((n >> 8) as u8);
            }
            if chunk.len() > 3 {
                out.push(n as u8);
            }
        }
        out
    }
}
