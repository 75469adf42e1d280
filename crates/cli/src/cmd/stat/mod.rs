//! `peregrine stat`: reads the counters files of every live Peregrine process of this user
//! (see `peregrine_transport::stat`) and shows them once, every second (`--watch`), as JSON, or
//! serves them to Prometheus (`--serve`).

mod prom;

use super::printable;
use crate::flags::stat::StatArgs;
use anyhow::{Context as _, Result};
use peregrine_report::thousands;
use peregrine_transport::ipc::dir::DirSpec;
use peregrine_transport::stat::{
    scan, DeadFiles, ProcessCounters, RecordSnapshot, RecordType, Scan, ValueKind,
};
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

pub fn run(a: StatArgs) -> Result<()> {
    if let Some(addr) = a.serve {
        return prom::serve(
            addr,
            a.filter.as_deref(),
            a.stop.seconds,
            dead_files(a.clean),
        );
    }
    let stop = super::Stop::install()?;
    let out = std::io::stdout();
    let clear = a.watch && !a.json && std::io::IsTerminal::is_terminal(&out);
    let mut prev: Option<Look> = None;
    let mut refreshes = 0u64;
    loop {
        let look = Look::take(dead_files(a.clean))?;
        let since = prev.as_ref().map(|p| (p, look.at - p.at));
        let text = if a.json {
            let mut s = serde_json::to_string(&to_json(&look, since, a.filter.as_deref()))?;
            s.push('\n');
            s
        } else {
            render_text(&look, since, a.filter.as_deref(), a.all)
        };
        {
            let mut out = out.lock();
            if clear {
                out.write_all(b"\x1b[H\x1b[2J")?;
            } else if refreshes > 0 && !a.json {
                out.write_all(b"\n")?;
            }
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
        refreshes += 1;
        if !a.watch || a.count.is_some_and(|c| refreshes >= c) {
            return Ok(());
        }
        let next = look.at + Duration::from_millis(a.interval_ms);
        prev = Some(look);
        while Instant::now() < next {
            if stop.requested().is_some() {
                return Ok(());
            }
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
    }
}

/// One scan of the segment directory, and how long it took.
pub(crate) struct Look {
    at: Instant,
    scan: Scan,
    took: Duration,
}

/// `--clean`: remove dead processes' files; otherwise only list them.
fn dead_files(clean: bool) -> DeadFiles {
    if clean {
        DeadFiles::Remove
    } else {
        DeadFiles::Report
    }
}

impl Look {
    pub(crate) fn take(dead: DeadFiles) -> Result<Look> {
        let at = Instant::now();
        let scan = scan(&DirSpec::default(), dead).context("cannot read the counters files")?;
        Ok(Look {
            at,
            took: at.elapsed(),
            scan,
        })
    }
}

/// Identifies a value while its record lives: file, slot, generation, value name.
type Key<'a> = (&'a str, u32, u32, &'a str);

fn values_by_key(scan: &Scan) -> HashMap<Key<'_>, u64> {
    let mut m = HashMap::new();
    for p in &scan.processes {
        for r in &p.records {
            for v in &r.values {
                m.insert(
                    (p.file.as_str(), r.index, r.generation, v.name.as_str()),
                    v.value,
                );
            }
        }
    }
    m
}

/// A counter's rate per second since the previous look, when the record was there then.
fn rate(
    prev: &HashMap<Key<'_>, u64>,
    over: Duration,
    p: &ProcessCounters,
    r: &RecordSnapshot,
    name: &str,
    value: u64,
) -> Option<f64> {
    let before = prev.get(&(p.file.as_str(), r.index, r.generation, name))?;
    let s = over.as_secs_f64();
    (s > 0.0).then(|| value.saturating_sub(*before) as f64 / s)
}

/// True when the record (of process `p`) matches `--filter`.
pub(crate) fn matches(filter: Option<&str>, p: &ProcessCounters, r: &RecordSnapshot) -> bool {
    let Some(f) = filter else {
        return true;
    };
    p.label.contains(f)
        || p.pid.to_string() == f
        || r.kind.name().contains(f)
        || r.labels
            .iter()
            .any(|(k, v)| v.contains(f) || format!("{k}={v}").contains(f))
}

/// Display order: by type, then transport, then topic (or pattern, path).
fn sorted<'a>(p: &'a ProcessCounters, filter: Option<&str>) -> Vec<&'a RecordSnapshot> {
    let mut v: Vec<&RecordSnapshot> = p.records.iter().filter(|r| matches(filter, p, r)).collect();
    v.sort_by(|a, b| {
        let key = |r: &'a RecordSnapshot| {
            (
                r.kind,
                r.label("transport").unwrap_or(""),
                r.label("topic")
                    .or(r.label("pattern"))
                    .or(r.label("path"))
                    .unwrap_or(""),
                r.index,
            )
        };
        key(a).cmp(&key(b))
    });
    v
}

fn plural(kind: RecordType) -> &'static str {
    match kind {
        RecordType::Publisher => "publishers",
        RecordType::Subscriber => "subscribers",
        RecordType::Resolver => "topic resolution",
        RecordType::Relay => "resolution relay (resolverd)",
        RecordType::Distributor => "market data distributor",
        RecordType::Consumer => "market data consumers",
        RecordType::Other(_) => "records of an unknown type",
    }
}

fn uptime(start_unix_ns: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let s = now.saturating_sub(start_unix_ns) as f64 / 1e9;
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Values shown even at 0 (the others only when they are not 0, unless --all).
fn headline(kind: RecordType, name: &str) -> bool {
    match kind {
        RecordType::Publisher => matches!(
            name,
            "messages" | "bytes" | "back_pressured" | "subscribers"
        ),
        RecordType::Subscriber => {
            matches!(name, "messages" | "bytes" | "gaps" | "lost" | "sources")
        }
        RecordType::Resolver => matches!(name, "datagrams_received" | "datagrams_sent"),
        RecordType::Relay => matches!(
            name,
            "clients" | "datagrams_received" | "datagrams_forwarded"
        ),
        RecordType::Distributor => matches!(
            name,
            "clients" | "updates_sent" | "conflations" | "slow_disconnects" | "queued_bytes"
        ),
        RecordType::Consumer => matches!(
            name,
            "connected" | "messages" | "updates" | "gaps" | "disconnections"
        ),
        RecordType::Other(_) => true,
    }
}

pub(crate) fn render_text(
    look: &Look,
    since: Option<(&Look, Duration)>,
    filter: Option<&str>,
    all: bool,
) -> String {
    let scan = &look.scan;
    let prev = since.map(|(p, _)| values_by_key(&p.scan));
    let over = since.map(|(_, d)| d).unwrap_or_default();
    let mut s = String::new();
    let shown: Vec<(&ProcessCounters, Vec<&RecordSnapshot>)> = scan
        .processes
        .iter()
        .map(|p| (p, sorted(p, filter)))
        .filter(|(p, r)| filter.is_none() || !r.is_empty() || matches_process(filter, p))
        .collect();
    let records: usize = shown.iter().map(|(_, r)| r.len()).sum();
    let _ = writeln!(
        s,
        "Peregrine counters in {}: {} process{}, {} record{}{} (read in {:.1} ms)",
        scan.dir.display(),
        shown.len(),
        if shown.len() == 1 { "" } else { "es" },
        records,
        if records == 1 { "" } else { "s" },
        filter.map_or(String::new(), |f| format!(" matching '{f}'")),
        look.took.as_secs_f64() * 1e3
    );
    if !scan.removed_dead.is_empty() {
        let _ = writeln!(
            s,
            "removed the counters files of dead processes: {}",
            scan.removed_dead.join(", ")
        );
    }
    if !scan.dead.is_empty() {
        let _ = writeln!(
            s,
            "counters files of dead processes (peregrine stat --clean removes them): {}",
            scan.dead.join(", ")
        );
    }
    for (p, records) in &shown {
        let _ = writeln!(
            s,
            "\npid {}  {}  up {}  ({})",
            p.pid,
            printable(&p.label),
            uptime(p.start_unix_ns),
            p.file
        );
        if p.refused > 0 {
            let _ = writeln!(
                s,
                "  {} record(s) did not fit in the file (capacity {}): their counters are not shown",
                p.refused, p.capacity
            );
        }
        let mut last = None;
        for r in records {
            if last != Some(r.kind) {
                let _ = writeln!(s, "  {}", plural(r.kind));
                last = Some(r.kind);
            }
            // Another process wrote these bytes: escape control characters (a file written by
            // hand could hold terminal escape sequences).
            let labels: Vec<String> = r
                .labels
                .iter()
                .map(|(k, v)| printable(&format!("{k}={v}")))
                .collect();
            let _ = writeln!(s, "    {}", labels.join("  "));
            let mut hidden = 0;
            for v in &r.values {
                if !all && v.value == 0 && !headline(r.kind, &v.name) {
                    hidden += 1;
                    continue;
                }
                let _ = write!(s, "      {:<26}{:>20}", v.name, thousands(v.value));
                match v.kind {
                    ValueKind::Gauge => s.push_str("  (now)"),
                    ValueKind::Counter => {
                        if let Some(per_s) = prev
                            .as_ref()
                            .and_then(|m| rate(m, over, p, r, &v.name, v.value))
                        {
                            let _ = write!(s, "{:>16}/s", thousands(per_s.round() as u64));
                        }
                    }
                }
                s.push('\n');
            }
            if hidden > 0 {
                let _ = writeln!(s, "      ({hidden} more at 0; --all shows them)");
            }
        }
        for problem in &p.problems {
            let _ = writeln!(s, "  skipped {}", printable(problem));
        }
    }
    for problem in &scan.problems {
        let _ = writeln!(s, "\ncannot read {problem}");
    }
    s
}

fn matches_process(filter: Option<&str>, p: &ProcessCounters) -> bool {
    filter.is_some_and(|f| p.label.contains(f) || p.pid.to_string() == f)
}

pub(crate) fn to_json(
    look: &Look,
    since: Option<(&Look, Duration)>,
    filter: Option<&str>,
) -> serde_json::Value {
    let scan = &look.scan;
    let prev = since.map(|(p, _)| values_by_key(&p.scan));
    let over = since.map(|(_, d)| d).unwrap_or_default();
    let processes: Vec<serde_json::Value> = scan
        .processes
        .iter()
        .map(|p| (p, sorted(p, filter)))
        .filter(|(p, r)| filter.is_none() || !r.is_empty() || matches_process(filter, p))
        .map(|(p, records)| {
            let records: Vec<serde_json::Value> = records
                .iter()
                .map(|r| {
                    let labels: serde_json::Map<String, serde_json::Value> = r
                        .labels
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v)))
                        .collect();
                    let values: serde_json::Map<String, serde_json::Value> = r
                        .values
                        .iter()
                        .map(|v| (v.name.clone(), json!(v.value)))
                        .collect();
                    let gauges: Vec<&str> = r
                        .values
                        .iter()
                        .filter(|v| v.kind == ValueKind::Gauge)
                        .map(|v| v.name.as_str())
                        .collect();
                    let mut o = json!({
                        "type": r.kind.name(),
                        "slot": r.index,
                        "labels": labels,
                        "values": values,
                        "gauges": gauges,
                    });
                    if let Some(m) = &prev {
                        let rates: serde_json::Map<String, serde_json::Value> = r
                            .values
                            .iter()
                            .filter(|v| v.kind == ValueKind::Counter)
                            .filter_map(|v| {
                                rate(m, over, p, r, &v.name, v.value)
                                    .map(|x| (v.name.clone(), json!(x)))
                            })
                            .collect();
                        o["rates_per_s"] = json!(rates);
                    }
                    o
                })
                .collect();
            json!({
                "pid": p.pid,
                "label": p.label,
                "file": p.file,
                "start_unix_ns": p.start_unix_ns,
                "capacity": p.capacity,
                "refused": p.refused,
                "records": records,
                "problems": p.problems,
            })
        })
        .collect();
    json!({
        "dir": scan.dir.display().to_string(),
        "read_ms": look.took.as_secs_f64() * 1e3,
        "processes": processes,
        "dead": scan.dead,
        "removed_dead": scan.removed_dead,
        "problems": scan.problems.iter().map(|p| json!({"file": p.file, "problem": p.problem})).collect::<Vec<_>>(),
    })
}
