//! `peregrine stat --serve ADDR`: the counters in the Prometheus text exposition format
//! (version 0.0.4) at `/metrics`. Names and labels are documented in docs/operations.md.
//!
//! Every value of a record becomes one sample of the family `peregrine_TYPE_NAME` (counters
//! get the `_total` suffix), labelled with the process (`pid`, `process`, `context`), the
//! record's `slot` (so two records with equal labels stay two series) and the record's own
//! labels (`topic`, `uri`, `transport`, `session`, `pattern`, `path`).

use super::{matches, Look};
use anyhow::{Context as _, Result};
use peregrine_transport::stat::{DeadFiles, RecordType, Scan, ValueKind};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The content type of the text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn serve(
    addr: SocketAddr,
    filter: Option<&str>,
    seconds: Option<f64>,
    dead: DeadFiles,
) -> Result<()> {
    let stop = super::super::Stop::install()?;
    let server = tiny_http::Server::http(addr).map_err(|e| {
        anyhow::anyhow!(
            "cannot serve on {addr}: {e} (is the port in use? give another with --serve HOST:PORT)"
        )
    })?;
    let bound = server
        .server_addr()
        .to_ip()
        .context("the server has no IP address")?;
    println!("serving Prometheus metrics on http://{bound}/metrics");
    let start = Instant::now();
    loop {
        if let Some(signal) = stop.requested() {
            println!("stopped by {signal}");
            return Ok(());
        }
        if seconds.is_some_and(|s| start.elapsed().as_secs_f64() >= s) {
            return Ok(());
        }
        let Some(request) = server.recv_timeout(Duration::from_millis(100))? else {
            continue;
        };
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let response = match (request.method(), path.as_str()) {
            (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
                match Look::take(dead) {
                    Ok(look) => text_response(200, exposition(&look.scan, filter), CONTENT_TYPE),
                    Err(e) => text_response(500, format!("{e:#}\n"), "text/plain"),
                }
            }
            (tiny_http::Method::Get, "/") => text_response(
                200,
                "Peregrine counters: see /metrics\n".into(),
                "text/plain",
            ),
            (tiny_http::Method::Get | tiny_http::Method::Head, _) => text_response(
                404,
                "not found: the metrics are at /metrics\n".into(),
                "text/plain",
            ),
            _ => text_response(405, "only GET is served\n".into(), "text/plain"),
        };
        // A scraper that hung up is its own problem: keep serving.
        let _ = request.respond(response);
    }
}

fn text_response(
    status: u16,
    body: String,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a valid header");
    tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header)
}

/// A metric or label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn name_part(s: &str) -> String {
    let mut n: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() || n.as_bytes()[0].is_ascii_digit() {
        n.insert(0, '_');
    }
    n.trim_start_matches("__").to_string()
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// The metric family of a value.
pub(crate) fn family(kind: RecordType, name: &str, value_kind: ValueKind) -> String {
    let base = format!("peregrine_{}_{}", kind.name(), name_part(name));
    match value_kind {
        ValueKind::Counter => format!("{base}_total"),
        ValueKind::Gauge => base,
    }
}

struct Family {
    kind: ValueKind,
    help: String,
    samples: Vec<String>,
}

/// The exposition of one scan.
pub(crate) fn exposition(scan: &Scan, filter: Option<&str>) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut add = |name: String, kind: ValueKind, help: String, sample: String| {
        families
            .entry(name)
            .or_insert_with(|| Family {
                kind,
                help,
                samples: Vec::new(),
            })
            .samples
            .push(sample);
    };
    for p in &scan.processes {
        let context = p.file.rsplit('.').next().unwrap_or("0");
        let process_labels = format!(
            "pid=\"{}\",process=\"{}\",context=\"{}\"",
            p.pid,
            escape(&p.label),
            escape(context)
        );
        add(
            "peregrine_process_start_time_seconds".into(),
            ValueKind::Gauge,
            "When the context's counters file was created, in seconds since the Unix epoch.".into(),
            format!("{{{process_labels}}} {:.3}", p.start_unix_ns as f64 / 1e9),
        );
        add(
            "peregrine_process_records_refused".into(),
            ValueKind::Gauge,
            "Publishers, subscribers... whose counters did not fit in the context's file.".into(),
            format!("{{{process_labels}}} {}", p.refused),
        );
        for r in p.records.iter().filter(|r| matches(filter, p, r)) {
            let mut labels = format!("{process_labels},slot=\"{}\"", r.index);
            for (k, v) in &r.labels {
                let k = name_part(k);
                if !matches!(k.as_str(), "pid" | "process" | "context" | "slot") {
                    let _ = write!(labels, ",{k}=\"{}\"", escape(v));
                }
            }
            for v in &r.values {
                add(
                    family(r.kind, &v.name, v.kind),
                    v.kind,
                    help(r.kind, &v.name),
                    format!("{{{labels}}} {}", v.value),
                );
            }
        }
    }
    add(
        "peregrine_stat_processes".into(),
        ValueKind::Gauge,
        "Live Peregrine contexts (counters files) of this user.".into(),
        format!(" {}", scan.processes.len()),
    );
    add(
        "peregrine_stat_unreadable_files".into(),
        ValueKind::Gauge,
        "Counters files of live processes that could not be read (see peregrine stat).".into(),
        format!(" {}", scan.problems.len()),
    );
    let mut out = String::new();
    for (name, f) in &families {
        let _ = writeln!(out, "# HELP {name} {}", f.help);
        let kind = match f.kind {
            ValueKind::Counter => "counter",
            ValueKind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in &f.samples {
            let _ = writeln!(out, "{name}{s}");
        }
    }
    out
}

/// One line of help per value; the meaning of each is in docs/operations.md. A protocol
/// counter's help is its field's doc comment (`peregrine_proto`'s `counters!`); the gauges and
/// the market data values have theirs here.
fn help(kind: RecordType, name: &str) -> String {
    use peregrine_proto::counters::{PublisherCounters, SubscriberCounters};
    use peregrine_proto::resolver::ResolverCounters;
    use peregrine_proto::resolverd::RelayCounters;
    let counter = match kind {
        RecordType::Publisher => PublisherCounters::help(name),
        RecordType::Subscriber => SubscriberCounters::help(name),
        RecordType::Resolver => ResolverCounters::help(name),
        RecordType::Relay => RelayCounters::help(name),
        _ => None,
    };
    let what = counter.unwrap_or(match (kind, name) {
        (RecordType::Publisher, "subscribers") => "Subscribers attached now.",
        (RecordType::Subscriber, "sources") => "Publishers followed now.",
        (RecordType::Distributor, "conflations") => {
            "Times a client's queue passed its bound and conflation began."
        }
        (RecordType::Distributor, "clients") => "Clients connected now.",
        (RecordType::Distributor, "queued_bytes") => "Bytes queued to clients now.",
        (RecordType::Consumer, "connected") => "1 while logged in to a distributor, else 0.",
        (RecordType::Consumer, "gaps") => "Item sequence gaps seen (each one a lost update).",
        _ => "",
    });
    if what.is_empty() {
        format!(
            "Peregrine {} value {name} (docs/operations.md).",
            kind.name()
        )
    } else {
        format!("{what} (Peregrine {}.)", kind.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_made_valid() {
        assert_eq!(name_part("topic"), "topic");
        assert_eq!(name_part("9x-y"), "_9x_y");
        assert_eq!(name_part("__reserved"), "reserved");
        assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
        assert_eq!(
            family(RecordType::Publisher, "messages", ValueKind::Counter),
            "peregrine_publisher_messages_total"
        );
        assert_eq!(
            family(RecordType::Subscriber, "sources", ValueKind::Gauge),
            "peregrine_subscriber_sources"
        );
    }

    /// Every metric family the counters files produce is documented in docs/operations.md.
    #[test]
    fn every_metric_is_documented() {
        let doc = include_str!("../../../../../docs/operations.md");
        let counters: Vec<(RecordType, &[&str])> = vec![
            (
                RecordType::Publisher,
                &peregrine_proto::counters::PublisherCounters::NAMES,
            ),
            (
                RecordType::Subscriber,
                &peregrine_proto::counters::SubscriberCounters::NAMES,
            ),
            (
                RecordType::Resolver,
                &peregrine_proto::resolver::ResolverCounters::NAMES,
            ),
            (RecordType::Resolver, &["send_errors"]),
            (
                RecordType::Relay,
                &peregrine_proto::resolverd::RelayCounters::NAMES,
            ),
            (
                RecordType::Distributor,
                peregrine_md::distributor::Counters::NAMES,
            ),
            (
                RecordType::Consumer,
                &peregrine_md::consumer::ConsumerCounters::NAMES,
            ),
        ];
        let gauges: Vec<(RecordType, &[&str])> = vec![
            (RecordType::Publisher, &["subscribers"]),
            (RecordType::Subscriber, &["sources"]),
            (RecordType::Relay, &["clients"]),
            (
                RecordType::Distributor,
                &peregrine_market_data::distributor::DISTRIBUTOR_GAUGES,
            ),
            (
                RecordType::Consumer,
                &peregrine_market_data::consumer::CONSUMER_GAUGES,
            ),
        ];
        let mut missing = Vec::new();
        for (list, kind) in [(counters, ValueKind::Counter), (gauges, ValueKind::Gauge)] {
            for (t, names) in list {
                for n in names {
                    let f = family(t, n, kind);
                    if !doc.contains(&format!("| `{f}` |")) {
                        missing.push(f);
                    }
                }
            }
        }
        assert!(missing.is_empty(), "not in docs/operations.md: {missing:?}");
    }
}
