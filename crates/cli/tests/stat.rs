//! `peregrine stat`: the counters of real `peregrine pub` and `peregrine sub` processes read by
//! another process (text, JSON, Prometheus), a killed process's file listed and removed by
//! `--clean`, the exposition checked by `promtool` and scraped by a real Prometheus (both skip
//! visibly without the Debian package `prometheus`; `.ci/run` installs it), and bad flags
//! refused.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_peregrine");

/// A child killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Running {
    Running(
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

fn topic(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("stat.{tag}.{}.{nanos}", std::process::id())
}

fn stat_json(args: &[&str]) -> Value {
    stat_json_in(None, args)
}

/// `stat --json ARGS`, reading the segment folder under `shm` (PEREGRINE_SHM_DIR) if given.
fn stat_json_in(shm: Option<&std::path::Path>, args: &[&str]) -> Value {
    let mut cmd = Command::new(BIN);
    if let Some(dir) = shm {
        cmd.env("PEREGRINE_SHM_DIR", dir);
    }
    let o = cmd.args(["stat", "--json"]).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The record of `kind` of process `pid` in a `stat --json` document.
fn record<'a>(doc: &'a Value, pid: u32, kind: &str) -> Option<&'a Value> {
    doc["processes"]
        .as_array()?
        .iter()
        .filter(|p| p["pid"] == pid)
        .flat_map(|p| p["records"].as_array().unwrap().iter())
        .find(|r| r["type"] == kind)
}

/// Waits until `done` holds for a fresh `stat --json --filter FILTER`, and returns that document.
fn wait_for(filter: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let doc = stat_json(&["--filter", filter]);
        if done(&doc) {
            return doc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: never seen; last: {doc:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A publisher that sent 300 messages of 32 bytes and lingers, and a subscriber that got them.
struct Pair {
    topic: String,
    publisher: Running,
    subscriber: Running,
}

fn pair(tag: &str) -> Pair {
    let topic = topic(tag);
    let subscriber = spawn(&["sub", &topic, "--seconds", "60"]);
    let publisher = spawn(&[
        "pub",
        &topic,
        "--count",
        "300",
        "--rate",
        "3000",
        "--wait-subscribers",
        "1",
        "--linger-ms",
        "60000",
    ]);
    let (p, s) = (publisher.0.id(), subscriber.0.id());
    wait_for(&topic, "300 messages on both sides", |d| {
        let m = |pid, kind| record(d, pid, kind).map(|r| r["values"]["messages"].clone());
        let subscribers = record(d, p, "publisher").map(|r| r["values"]["subscribers"].clone());
        m(p, "publisher") == Some(300.into())
            && m(s, "subscriber") == Some(300.into())
            && subscribers == Some(1.into())
    });
    Pair {
        topic,
        publisher,
        subscriber,
    }
}

#[test]
fn another_process_reads_the_owners_counters_exactly() {
    let pair = pair("exact");
    let (p, s) = (pair.publisher.0.id(), pair.subscriber.0.id());
    let doc = stat_json(&["--filter", &pair.topic]);
    let publisher = record(&doc, p, "publisher").unwrap();
    let subscriber = record(&doc, s, "subscriber").unwrap();
    assert_eq!(publisher["labels"]["topic"], pair.topic.as_str());
    assert_eq!(publisher["labels"]["transport"], "ipc+udp");
    assert_eq!(publisher["values"]["bytes"], 300 * 32);
    assert_eq!(publisher["values"]["back_pressured"], 0);
    assert_eq!(publisher["values"]["subscribers"], 1);
    assert_eq!(subscriber["labels"]["pattern"], pair.topic.as_str());
    assert_eq!(subscriber["values"]["bytes"], 300 * 32);
    assert_eq!(subscriber["values"]["lost"], 0);
    assert_eq!(subscriber["values"]["gaps"], 0);
    assert_eq!(subscriber["values"]["sources"], 1);
    // Both contexts run a resolver (its record carries no topic: look without the filter);
    // the subscriber's found the publisher.
    let all = stat_json(&[]);
    let resolver = record(&all, s, "resolver").unwrap();
    assert!(resolver["values"]["sources_found"].as_u64().unwrap() >= 1);
    let labels: Vec<&str> = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect();
    assert!(labels.contains(&"peregrine-pub") && labels.contains(&"peregrine-sub"));

    // The text view and --watch: rates appear from the second refresh.
    let o = Command::new(BIN)
        .args(["stat", "--watch", "--count", "2", "--interval-ms", "200"])
        .args(["--filter", &pair.topic])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert_eq!(text.matches("Peregrine counters in").count(), 2, "{text}");
    assert!(text.contains(&format!("topic={}", pair.topic)), "{text}");
    assert!(
        text.contains("/s\n"),
        "no rates on the second refresh: {text}"
    );
    assert!(text.contains("messages") && text.contains("300"), "{text}");
}

#[test]
fn a_killed_processs_counters_file_is_listed_and_removed_only_by_stat_clean() {
    // A segment directory of this test's own (PEREGRINE_SHM_DIR), so that no other test's
    // publisher (they remove dead files when they create their logs) touches it.
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stat-killed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let cmd = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(args).env("PEREGRINE_SHM_DIR", &base);
        c
    };
    let stat = |args: &[&str]| stat_json_in(Some(&base), args);
    let topic = topic("killed");
    let mut publisher = Running(
        cmd(&["pub", &topic, "--rate", "100"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = publisher.0.id();
    let start = Instant::now();
    let doc = loop {
        let doc = stat(&[]);
        if record(&doc, pid, "publisher").is_some() {
            break doc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never seen: {doc:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let dir = std::path::PathBuf::from(doc["dir"].as_str().unwrap());
    assert!(dir.starts_with(&base), "{dir:?}");
    let prefix = format!("counters.{pid}.");
    let files = || -> Vec<String> {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect()
    };
    assert_eq!(files().len(), 1, "{:?}", files());
    publisher.0.kill().unwrap();
    publisher.0.wait().unwrap();
    let left = files();
    assert_eq!(left.len(), 1, "SIGKILL leaves the file behind");

    // A look lists it as dead and removes nothing.
    let doc = stat(&[]);
    let listed = |doc: &Value| {
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid)
    };
    assert!(!listed(&doc), "a dead process is listed as live: {doc:#}");
    assert_eq!(doc["dead"], serde_json::json!(left), "{doc:#}");
    assert_eq!(files(), left, "a look removed it");

    // --clean removes it.
    let doc = stat(&["--clean"]);
    assert_eq!(doc["removed_dead"], serde_json::json!(left), "{doc:#}");
    assert!(files().is_empty(), "{:?} still there", files());
    let _ = std::fs::remove_dir_all(&base);
}

/// GETs `path` from `addr`; returns (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// Starts `peregrine stat --serve 127.0.0.1:0` and returns it with the address it bound.
fn serve(args: &[&str]) -> (Running, String) {
    let mut child = Command::new(BIN)
        .args(["stat", "--serve", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8(line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    (Running(child), addr)
}

#[test]
fn the_metrics_endpoint_serves_every_record_and_promtool_accepts_it() {
    let pair = pair("prom");
    let (_server, addr) = serve(&[]);
    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    let p = pair.publisher.0.id();
    let line = body
        .lines()
        .find(|l| {
            l.starts_with("peregrine_publisher_messages_total{")
                && l.contains(&format!("pid=\"{p}\""))
        })
        .unwrap_or_else(|| panic!("no publisher sample: {body}"));
    assert!(
        line.contains(&format!("topic=\"{}\"", pair.topic)),
        "{line}"
    );
    assert!(line.contains("process=\"peregrine-pub\""), "{line}");
    assert!(line.ends_with(" 300"), "{line}");
    assert!(body.contains("# TYPE peregrine_subscriber_lost_total counter"));
    assert!(body.contains("# TYPE peregrine_subscriber_sources gauge"));
    let (status, _) = http_get(&addr, "/nothing");
    assert!(status.contains("404"), "{status}");

    let Some(promtool) = peregrine_testkit::program("promtool", "apt-get install prometheus")
    else {
        return;
    };
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let o = check.wait_with_output().unwrap();
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_real_prometheus_scrapes_the_endpoint() {
    let Some(prometheus) = peregrine_testkit::program("prometheus", "apt-get install prometheus")
    else {
        return;
    };
    let pair = pair("scrape");
    let (_server, addr) = serve(&["--filter", &pair.topic]);
    let dir = std::env::temp_dir().join(format!("pg-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: peregrine\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    // A free port for Prometheus's own API.
    let api = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let _prom = Running(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={api}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let query = format!(
        "/api/v1/query?query=peregrine_subscriber_messages_total%7Bpattern%3D%22{}%22%7D",
        pair.topic
    );
    let start = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(&api) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(s, "GET {query} HTTP/1.0\r\nHost: {api}\r\n\r\n").unwrap();
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            if let Some((_, body)) = reply.split_once("\r\n\r\n") {
                if let Ok(v) = serde_json::from_str::<Value>(body) {
                    if let Some(sample) = v["data"]["result"].as_array().and_then(|r| r.first()) {
                        assert_eq!(sample["value"][1], "300", "{v:#}");
                        assert_eq!(sample["metric"]["process"], "peregrine-sub");
                        break;
                    }
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped the subscriber's counter"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_are_refused_naming_the_value() {
    peregrine_testkit::assert_refused(
        BIN,
        &["stat"],
        &[
            (&["--filter", ""], "--filter ''"),
            (&["--watch", "--interval-ms", "5"], "5"),
            (&["--count", "3"], "--watch"),
            (&["--watch", "--count", "0"], "0"),
            (&["--serve", "nowhere"], "nowhere"),
            (&["--serve", "127.0.0.1:0", "--json"], "--json"),
            (&["--seconds", "1"], "--serve"),
        ],
    );
}
