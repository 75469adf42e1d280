//! The distributor's settings: defaults, then the `--config` TOML file, then the command's
//! flags ([`SettingsOverrides`]: what `peregrine distributor`'s flags set). Every key of the
//! file is checked (unknown keys too) and every value with an error naming the file, the key,
//! the value and what is accepted; a flag's error names the flag instead.
//!
//! | key | flag | default | accepted |
//! | --- | --- | --- | --- |
//! | `listen` | `--listen` | `127.0.0.1:14500` | `ADDR:PORT` (port 0: any free port) |
//! | `websocket` | `--websocket` | (none) | `ADDR:PORT`: the WebSocket JSON API and the quote board page (TLS too when `tls_cert` is set) |
//! | `users` | `--users` | (required) | a path; relative paths in the file are from the file's folder |
//! | `backbone` | `--backbone` | `mcast://239.255.90.1:40900` | a udp://, mcast://, tcp:// or ipc:// URI |
//! | `requests` | `--requests` | the backbone's port + 1 | a URI |
//! | `services` | `--service` (repeated) | `["FEED1"]` | service names |
//! | `mode` | `--mode` | `throughput` | `throughput` or `latency` |
//! | `flush_interval_ms` | `--flush-interval-ms` | 20 | 1 to 1000 |
//! | `flush_bytes` | | 64k | 1k to 16m: a throughput-mode buffer this full is written at once |
//! | `max_queue_bytes` | `--max-queue-bytes` | 4m | 131102 (`MIN_QUEUE_BYTES`) to 1g |
//! | `slow` | `--slow` | `conflate` | `conflate` or `disconnect` |
//! | `max_clients` | `--max-clients` | 1024 | 1 to 1000000: logged-in clients |
//! | `max_pending_clients` | | 256 | 1 to 1000000: connections not logged in yet (past it the oldest is closed) |
//! | `max_clients_per_address` | | 256 | 1 to 1000000: connections from one address (IPv6: one /64) |
//! | `max_clients_per_user` | | 128 | 1 to 1000000: logged-in connections of one user |
//! | `tls_cert` | `--tls-cert` | (none: plaintext) | a PEM certificate chain: clients connect over TLS |
//! | `tls_key` | `--tls-key` | | its PEM private key (mode 0600, owned by this user or root) |
//! | `tls_client_ca` | `--tls-client-ca` | (none) | a PEM CA: client certificates are asked for and checked (users with `cert_subject`) |
//! | `allow_plaintext_logins` | `--allow-plaintext-logins` | false | true: accept logins over plaintext from other hosts (tokens in the clear) |
//! | `max_items` | | 1000000 | 1 to 100000000 |
//! | `max_requests_per_client` | | 1024 | 1 to 1000000 |
//! | `max_patterns_per_client` | | 10000 | 1 to 10000000 |
//! | `max_globs_per_client` | | 256 | 1 to 100000 |
//! | `max_watch_per_client` | | 100000 | 1 to 10000000 |
//! | `login_timeout_ms` | | 10000 | 100 to 600000 |
//! | `image_retry_ms` | | 1000 | 10 to 600000 |
//! | `min_client_version` | | 2 | 1 or 2: the oldest protocol version a LOGIN may use (version 1 has no liveness: an idle client of it holds its slot for ever) |
//! | `ping_interval_ms` | | 5000 | 10 to 3600000: the liveness interval of a client (protocol version 2) that asks for none |
//! | `min_ping_interval_ms` | | 1000 | 10 to 3600000: the shortest interval a client may ask for (a shorter one is raised to it) |
//! | `max_ping_interval_ms` | | 60000 | 10 to 3600000: the longest (a client silent for three is closed) |
//! | `dictionary` | `--dictionary` | the built-in one | a field dictionary file: served to clients (DICTIONARY) and posts' field types are checked against it |
//! | `post_timeout_ms` | | 5000 | 1 to 3600000: a post forwarded to a provider without an answer this long is answered `timeout` |
//! | `max_posts_per_client` | | 256 | 1 to 1000000: posts of one connection waiting for their answer (past it: `busy`) |
//! | `feed_gap_window_ms` | | 100 | 1 to 60000: A/B feeds: how long an item waits for another feed to send the update one feed skipped |
//! | `feed_loss_overlap_ms` | | 5000 | 1 to 3600000: A/B feeds: a feed's loss is covered by another feed with no loss within this long |
//! | `client_sndbuf` | | the kernel's (auto-tuned) | 4k to 64m: SO_SNDBUF of each client socket |
//! | `max_accepts_per_s` | | 1000 | 0 (no limit) or 1 to 1000000: new connections taken from the listeners a second (bursts of a tenth of it, at least 16); more wait in the kernel's backlog |
//! | `stats_every_s` | | 10 | 0 (never) to 3600 |
//! | `busy_poll_us` | | latency: 200, throughput: 0 | 0 to 100000: after a backbone message, poll without sleeping this long |

use crate::backbone::{DEFAULT_BACKBONE, DEFAULT_SERVICE};
pub use peregrine_md::distributor::WriteMode;
use peregrine_md::distributor::{DistributorConfig, SlowPolicy, MIN_QUEUE_BYTES};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// Where the distributor listens when neither the flag nor the config says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:14500";

/// A setting that was not accepted: the message names the flag or the file and key, the
/// value, and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

type Result<T, E = SettingsError> = std::result::Result<T, E>;

macro_rules! bail {
    ($($t:tt)*) => {
        return Err(SettingsError(format!($($t)*)))
    };
}

/// What the command's flags set; each wins over the config file's key of the same name.
#[derive(Debug, Clone, Default)]
pub struct SettingsOverrides {
    pub listen: Option<SocketAddr>,
    pub websocket: Option<SocketAddr>,
    pub users: Option<PathBuf>,
    pub backbone: Option<String>,
    pub requests: Option<String>,
    pub services: Vec<String>,
    pub mode: Option<WriteMode>,
    pub flush_interval_ms: Option<u64>,
    pub max_queue_bytes: Option<u64>,
    pub slow: Option<String>,
    pub max_clients: Option<u64>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// `true` when the flag is given (the file's key cannot be turned off by a flag).
    pub allow_plaintext_logins: bool,
    pub dictionary: Option<PathBuf>,
    /// The TOML file with any of the keys.
    pub config: Option<PathBuf>,
}

/// Everything a distributor run needs, checked.
#[derive(Debug, Clone)]
pub struct DistributorSettings {
    pub listen: SocketAddr,
    /// The WebSocket JSON listener, if any.
    pub websocket: Option<SocketAddr>,
    pub users: PathBuf,
    pub backbone: String,
    pub requests: String,
    pub mode: WriteMode,
    pub flush_interval_ms: u64,
    pub flush_bytes: usize,
    pub client_sndbuf: Option<usize>,
    /// New connections taken from the listeners a second (0: no limit).
    pub max_accepts_per_s: u64,
    pub stats_every_s: u64,
    /// After a backbone message, the loop polls without sleeping this long.
    pub busy_poll_us: u64,
    /// TLS on the client listener.
    pub tls: Option<TlsFiles>,
    /// The core's settings (services, bounds, policy, timeouts, plaintext logins).
    pub core: DistributorConfig,
}

/// The distributor's TLS files (checked when the server loads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The keys of the config file, in the order of the table above.
pub const KEYS: &[&str] = &[
    "listen",
    "websocket",
    "users",
    "backbone",
    "requests",
    "services",
    "mode",
    "flush_interval_ms",
    "flush_bytes",
    "max_queue_bytes",
    "slow",
    "max_clients",
    "max_pending_clients",
    "max_clients_per_address",
    "max_clients_per_user",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "allow_plaintext_logins",
    "max_items",
    "max_requests_per_client",
    "max_patterns_per_client",
    "max_globs_per_client",
    "max_watch_per_client",
    "login_timeout_ms",
    "image_retry_ms",
    "min_client_version",
    "ping_interval_ms",
    "min_ping_interval_ms",
    "max_ping_interval_ms",
    "dictionary",
    "post_timeout_ms",
    "max_posts_per_client",
    "feed_gap_window_ms",
    "feed_loss_overlap_ms",
    "client_sndbuf",
    "max_accepts_per_s",
    "stats_every_s",
    "busy_poll_us",
];

/// A whole number within a range, or why not.
fn ranged(v: u64, lo: u64, hi: u64) -> Result<u64, String> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("a whole number from {lo} to {hi}"))
    }
}

fn slow_policy(s: &str) -> Result<SlowPolicy, String> {
    match s {
        "conflate" => Ok(SlowPolicy::Conflate),
        "disconnect" => Ok(SlowPolicy::Disconnect),
        _ => Err("conflate (keep only the latest image of each item and send it when the client catches up) or disconnect".into()),
    }
}

fn size(v: &Value, lo: u64, hi: u64, example: &str) -> Result<u64, String> {
    let accepted = || {
        format!("a size in bytes from {lo} to {hi}, a number or a string with k, m or g (powers of 1024), for example {example}")
    };
    let n = match v {
        Value::Integer(i) => u64::try_from(*i).map_err(|_| accepted())?,
        Value::String(s) => peregrine::parse_bytes(s).ok_or_else(accepted)?,
        _ => return Err(accepted()),
    };
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(accepted())
    }
}

/// The config file, walked key by key.
struct File<'a> {
    name: String,
    dir: &'a Path,
    table: Table,
}

impl File<'_> {
    fn err(&self, key: &str, value: &Value, accepted: &str) -> SettingsError {
        SettingsError(format!(
            "{}: {key} = {value} is not accepted: {accepted}",
            self.name
        ))
    }
    fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.table.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.err(key, v, "a string")),
        }
    }
    fn int(&self, key: &str, lo: u64, hi: u64) -> Result<Option<u64>> {
        match self.table.get(key) {
            None => Ok(None),
            Some(v @ Value::Integer(i)) => u64::try_from(*i)
                .map_err(|_| format!("a whole number from {lo} to {hi}"))
                .and_then(|n| ranged(n, lo, hi))
                .map(Some)
                .map_err(|a| self.err(key, v, &a)),
            Some(v) => Err(self.err(key, v, &format!("a whole number from {lo} to {hi}"))),
        }
    }
    fn size(&self, key: &str, lo: u64, hi: u64, example: &str) -> Result<Option<u64>> {
        match self.table.get(key) {
            None => Ok(None),
            Some(v) => size(v, lo, hi, example)
                .map(Some)
                .map_err(|a| self.err(key, v, &a)),
        }
    }
    fn parsed<T>(&self, key: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Option<T>> {
        match self.table.get(key) {
            None => Ok(None),
            Some(v @ Value::String(s)) => f(s).map(Some).map_err(|a| self.err(key, v, &a)),
            Some(v) => Err(self.err(key, v, "a string")),
        }
    }
}

fn load_file(path: &Path) -> Result<(Table, String)> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| SettingsError(format!("cannot read --config {name}: {e}")))?;
    let table: Table = text
        .parse()
        .map_err(|e| SettingsError(format!("{name} is not valid TOML: {e}")))?;
    if let Some(k) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        bail!(
            "{name}: {k} = ... is not accepted: an unknown key: known keys are {}",
            KEYS.join(", ")
        );
    }
    Ok((table, name))
}

impl DistributorSettings {
    /// Defaults, then the config file, then the flags.
    pub fn resolve(a: &SettingsOverrides) -> Result<DistributorSettings> {
        let (table, name) = match &a.config {
            Some(p) => load_file(p)?,
            None => (Table::new(), String::new()),
        };
        let dir = a
            .config
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let f = File { name, dir, table };

        let listen = match a.listen {
            Some(l) => l,
            None => f
                .parsed("listen", |s| {
                    s.parse::<SocketAddr>()
                        .map_err(|_| "an address and port, for example \"127.0.0.1:14500\"".into())
                })?
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid default")),
        };
        let websocket = match a.websocket {
            Some(w) => Some(w),
            None => f.parsed("websocket", |s| {
                s.parse::<SocketAddr>()
                    .map_err(|_| "an address and port, for example \"127.0.0.1:14580\"".into())
            })?,
        };
        let users = match &a.users {
            Some(u) => u.clone(),
            None => match f.str("users")? {
                Some(u) => f.dir.join(u),
                None => bail!(
                    "no users file: give --users FILE (or users = \"FILE\" in --config); \
                     docs/market-data.md shows its format"
                ),
            },
        };
        let backbone = match &a.backbone {
            Some(b) => b.clone(),
            None => f.str("backbone")?.unwrap_or(DEFAULT_BACKBONE).to_string(),
        };
        let requests = match &a.requests {
            Some(r) => r.clone(),
            None => match f.str("requests")? {
                Some(r) => r.to_string(),
                None => crate::backbone::default_requests_uri(&backbone)
                    .map_err(|e| SettingsError(e.to_string()))?,
            },
        };
        let services = if !a.services.is_empty() {
            a.services.clone()
        } else {
            match f.table.get("services") {
                None => vec![DEFAULT_SERVICE.to_string()],
                Some(v) => {
                    let accepted = format!(
                        "a list of service names, each {}, for example [\"FEED1\"]",
                        peregrine_md::model::SERVICE_ALPHABET
                    );
                    let list = v
                        .as_array()
                        .ok_or_else(|| f.err("services", v, &accepted))?;
                    let mut out = Vec::new();
                    for (i, s) in list.iter().enumerate() {
                        let key = format!("services[{i}]");
                        let name = s.as_str().ok_or_else(|| f.err(&key, s, &accepted))?;
                        peregrine_md::model::check_service(name.as_bytes())
                            .map_err(|_| f.err(&key, s, &accepted))?;
                        out.push(name.to_string());
                    }
                    out
                }
            }
        };
        let mode = match a.mode {
            Some(m) => m,
            None => f
                .parsed("mode", WriteMode::from_name)?
                .unwrap_or(WriteMode::Throughput),
        };
        let flush_interval_ms = match a.flush_interval_ms {
            Some(v) => ranged(v, 1, 1000).map_err(|acc| {
                SettingsError(format!("--flush-interval-ms {v} is not accepted: {acc}"))
            })?,
            None => f.int("flush_interval_ms", 1, 1000)?.unwrap_or(20),
        };
        let flush_bytes = f
            .size("flush_bytes", 1 << 10, 16 << 20, "\"64k\"")?
            .unwrap_or(64 << 10) as usize;
        let max_queue_hi = 1u64 << 30;
        let max_queue_bytes = match a.max_queue_bytes {
            Some(v) if (MIN_QUEUE_BYTES as u64..=max_queue_hi).contains(&v) => v,
            Some(v) => bail!(
                "--max-queue-bytes {v} is not accepted: give {MIN_QUEUE_BYTES} (two of the largest \
                 messages and a CONFLATED, so a conflated client can always be sent an image) to 1g"
            ),
            None => f
                .size(
                    "max_queue_bytes",
                    MIN_QUEUE_BYTES as u64,
                    max_queue_hi,
                    "\"4m\"",
                )?
                .unwrap_or(4 << 20),
        } as usize;
        let slow = match &a.slow {
            Some(s) => slow_policy(s)
                .map_err(|acc| SettingsError(format!("--slow {s} is not accepted: {acc}")))?,
            None => f
                .parsed("slow", slow_policy)?
                .unwrap_or(SlowPolicy::Conflate),
        };
        let max_clients = match a.max_clients {
            Some(v) => ranged(v, 1, 1_000_000).map_err(|acc| {
                SettingsError(format!("--max-clients {v} is not accepted: {acc}"))
            })?,
            None => f.int("max_clients", 1, 1_000_000)?.unwrap_or(1024),
        } as usize;
        let mut core = DistributorConfig::new(&[]);
        core.services = services;
        core.max_queue_bytes = max_queue_bytes;
        core.slow = slow;
        core.max_clients = max_clients;
        if let Some(v) = f.int("max_pending_clients", 1, 1_000_000)? {
            core.max_pending_clients = v as usize;
        }
        if let Some(v) = f.int("max_clients_per_address", 1, 1_000_000)? {
            core.max_clients_per_address = v as usize;
        }
        if let Some(v) = f.int("max_clients_per_user", 1, 1_000_000)? {
            core.max_clients_per_user = v as usize;
        }
        core.allow_plaintext_logins = a.allow_plaintext_logins
            || match f.table.get("allow_plaintext_logins") {
                None => false,
                Some(Value::Boolean(b)) => *b,
                Some(v) => {
                    return Err(f.err(
                        "allow_plaintext_logins",
                        v,
                        "true or false (true accepts logins over plaintext from other hosts)",
                    ))
                }
            };
        let path = |flag: &Option<PathBuf>, key: &str| -> Result<Option<PathBuf>> {
            Ok(match flag {
                Some(p) => Some(p.clone()),
                None => f.str(key)?.map(|p| f.dir.join(p)),
            })
        };
        let tls = match (
            path(&a.tls_cert, "tls_cert")?,
            path(&a.tls_key, "tls_key")?,
            path(&a.tls_client_ca, "tls_client_ca")?,
        ) {
            (Some(cert), Some(key), client_ca) => Some(TlsFiles {
                cert,
                key,
                client_ca,
            }),
            (None, None, None) => None,
            (Some(_), None, _) => bail!(
                "tls_cert is given without tls_key: give both (--tls-cert FILE --tls-key FILE), \
                 the certificate and its private key"
            ),
            (None, Some(_), _) => bail!(
                "tls_key is given without tls_cert: give both (--tls-cert FILE --tls-key FILE)"
            ),
            (None, None, Some(_)) => bail!(
                "tls_client_ca is given without tls_cert and tls_key: client certificates are \
                 checked over TLS only; give --tls-cert FILE --tls-key FILE too"
            ),
        };
        if let Some(v) = f.int("max_items", 1, 100_000_000)? {
            core.max_items = v as usize;
        }
        if let Some(v) = f.int("max_requests_per_client", 1, 1_000_000)? {
            core.max_requests_per_client = v as usize;
        }
        if let Some(v) = f.int("max_patterns_per_client", 1, 10_000_000)? {
            core.max_patterns_per_client = v as usize;
        }
        if let Some(v) = f.int("max_globs_per_client", 1, 100_000)? {
            core.max_globs_per_client = v as usize;
        }
        if let Some(v) = f.int("max_watch_per_client", 1, 10_000_000)? {
            core.max_watch_per_client = v as usize;
        }
        if let Some(v) = f.int("login_timeout_ms", 100, 600_000)? {
            core.login_timeout_ns = v * 1_000_000;
        }
        if let Some(v) = f.int("image_retry_ms", 10, 600_000)? {
            core.image_retry_ns = v * 1_000_000;
        }
        if let Some(v) = f.int(
            "min_client_version",
            u64::from(peregrine_md::codec::MIN_VERSION),
            u64::from(peregrine_md::codec::VERSION),
        )? {
            core.min_client_version = v as u16;
        }
        if let Some(v) = f.int("ping_interval_ms", 10, 3_600_000)? {
            core.ping_interval_ns = v * 1_000_000;
        }
        if let Some(v) = f.int("min_ping_interval_ms", 10, 3_600_000)? {
            core.min_ping_interval_ns = v * 1_000_000;
        }
        if let Some(v) = f.int("max_ping_interval_ms", 10, 3_600_000)? {
            core.max_ping_interval_ns = v * 1_000_000;
        }
        if let Some(p) = path(&a.dictionary, "dictionary")? {
            let flag = if a.dictionary.is_some() {
                "--dictionary".to_string()
            } else {
                format!("{}: dictionary", f.name)
            };
            let d = peregrine_md::dictionary::Dictionary::load(&p)
                .map_err(|e| SettingsError(format!("{flag}: {e}")))?;
            core.dictionary = std::sync::Arc::new(d);
        }
        if let Some(v) = f.int("post_timeout_ms", 1, 3_600_000)? {
            core.post_timeout_ns = v * 1_000_000;
        }
        if let Some(v) = f.int("max_posts_per_client", 1, 1_000_000)? {
            core.max_posts_per_client = v as usize;
        }
        if let Some(v) = f.int("feed_gap_window_ms", 1, 60_000)? {
            core.feed_gap_window_ns = v * 1_000_000;
        }
        if let Some(v) = f.int("feed_loss_overlap_ms", 1, 3_600_000)? {
            core.feed_loss_overlap_ns = v * 1_000_000;
        }
        core.validate().map_err(|e| SettingsError(format!("{e}")))?;
        let client_sndbuf = f
            .size("client_sndbuf", 4 << 10, 64 << 20, "\"256k\"")?
            .map(|v| v as usize);
        let max_accepts_per_s = f.int("max_accepts_per_s", 0, 1_000_000)?.unwrap_or(1000);
        let stats_every_s = f.int("stats_every_s", 0, 3600)?.unwrap_or(10);
        let busy_poll_us = f
            .int("busy_poll_us", 0, 100_000)?
            .unwrap_or(if mode == WriteMode::Latency { 200 } else { 0 });
        Ok(DistributorSettings {
            listen,
            websocket,
            users,
            backbone,
            requests,
            mode,
            flush_interval_ms,
            flush_bytes,
            client_sndbuf,
            max_accepts_per_s,
            stats_every_s,
            busy_poll_us,
            tls,
            core,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overrides the command's flags would set (the ones these tests use).
    fn args(extra: &[&str]) -> SettingsOverrides {
        let mut o = SettingsOverrides::default();
        for pair in extra.chunks(2) {
            let v = pair[1];
            match pair[0] {
                "--config" => o.config = Some(v.into()),
                "--users" => o.users = Some(v.into()),
                "--mode" => o.mode = Some(WriteMode::from_name(v).unwrap()),
                "--service" => o.services.push(v.into()),
                "--slow" => o.slow = Some(v.into()),
                "--max-queue-bytes" => o.max_queue_bytes = peregrine::parse_bytes(v),
                "--tls-cert" => o.tls_cert = Some(v.into()),
                "--tls-key" => o.tls_key = Some(v.into()),
                other => panic!("{other}"),
            }
        }
        o
    }

    fn with_config(text: &str, extra: &[&str]) -> Result<DistributorSettings> {
        // A file of its own for each call (tests run in parallel), removed after: nothing is
        // left in the temporary directory.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("pg-dist-cfg-{}-{n}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        let mut v = vec!["--config", p.to_str().unwrap()];
        v.extend_from_slice(extra);
        let r = DistributorSettings::resolve(&args(&v));
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn the_file_sets_everything_and_flags_win() {
        let s = with_config(
            "listen = \"127.0.0.1:0\"\nusers = \"u.toml\"\nmode = \"latency\"\n\
             services = [\"A\", \"B\"]\nmax_queue_bytes = \"1m\"\nslow = \"disconnect\"\n\
             flush_interval_ms = 5\nclient_sndbuf = 65536\nstats_every_s = 0\n\
             login_timeout_ms = 500\nmax_accepts_per_s = 0\n",
            &["--mode", "throughput", "--service", "C"],
        )
        .unwrap();
        assert_eq!(s.mode, WriteMode::Throughput);
        assert_eq!(s.core.services, ["C"]);
        assert_eq!(s.core.max_queue_bytes, 1 << 20);
        assert_eq!(s.core.slow, SlowPolicy::Disconnect);
        assert_eq!(s.core.login_timeout_ns, 500_000_000);
        assert_eq!((s.flush_interval_ms, s.client_sndbuf), (5, Some(65536)));
        assert_eq!(s.max_accepts_per_s, 0, "no limit");
        assert!(s.users.ends_with("u.toml") && s.users.is_absolute());
        assert_eq!(s.requests, "mcast://239.255.90.1:40901");
    }

    #[test]
    fn every_bad_key_or_value_is_named_with_what_is_accepted() {
        let cases: &[(&str, &[&str])] = &[
            (
                "users = \"u\"\nflush = 3",
                &["flush = ... is not accepted", "known keys are listen"],
            ),
            (
                "users = \"u\"\nmode = \"fast\"",
                &["mode = \"fast\"", "throughput (writes"],
            ),
            (
                "users = \"u\"\nflush_interval_ms = 0",
                &["flush_interval_ms = 0", "from 1 to 1000"],
            ),
            (
                "users = \"u\"\nmax_queue_bytes = \"64k\"",
                &["max_queue_bytes = \"64k\"", "131102"],
            ),
            (
                "users = \"u\"\nslow = \"drop\"",
                &["slow = \"drop\"", "conflate"],
            ),
            (
                "users = \"u\"\nservices = [\"A B\"]",
                &["services[0] = \"A B\""],
            ),
            (
                "users = \"u\"\nlisten = \"here\"",
                &["listen = \"here\"", "127.0.0.1:14500"],
            ),
            ("users = 3", &["users = 3", "a string"]),
            ("mode = \"latency\"", &["no users file", "--users FILE"]),
            ("users = [", &["is not valid TOML"]),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", with_config(text, &[]).unwrap_err());
            for w in *want {
                assert!(e.contains(w), "{text:?}: {e:?} lacks {w:?}");
            }
        }
        let e = DistributorSettings::resolve(&args(&["--users", "u", "--slow", "x"])).unwrap_err();
        assert!(e.to_string().contains("--slow x is not accepted"), "{e}");
        let e = DistributorSettings::resolve(&args(&["--users", "u", "--max-queue-bytes", "1k"]))
            .unwrap_err();
        assert!(e.to_string().contains("--max-queue-bytes 1024"), "{e}");
        let e = DistributorSettings::resolve(&args(&["--users", "u", "--tls-cert", "c.pem"]))
            .unwrap_err();
        assert!(
            e.to_string().contains("tls_cert is given without tls_key"),
            "{e}"
        );
    }

    #[test]
    fn tls_limits_and_plaintext_logins_come_from_the_file() {
        let s = with_config(
            "users = \"u.toml\"\ntls_cert = \"md.crt\"\ntls_key = \"md.key\"\n\
             tls_client_ca = \"ca.crt\"\nallow_plaintext_logins = true\n\
             max_pending_clients = 16\nmax_clients_per_address = 8\nmax_clients_per_user = 4\n",
            &[],
        )
        .unwrap();
        let tls = s.tls.unwrap();
        assert!(tls.cert.ends_with("md.crt") && tls.cert.is_absolute());
        assert!(tls.key.ends_with("md.key"));
        assert!(tls.client_ca.unwrap().ends_with("ca.crt"));
        assert!(s.core.allow_plaintext_logins);
        assert_eq!(
            (
                s.core.max_pending_clients,
                s.core.max_clients_per_address,
                s.core.max_clients_per_user
            ),
            (16, 8, 4)
        );
        let e = with_config("users = \"u\"\nallow_plaintext_logins = \"yes\"", &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("allow_plaintext_logins = \"yes\" is not accepted: true or false"),
            "{e}"
        );
        let e = with_config("users = \"u\"\ntls_client_ca = \"ca.crt\"", &[]).unwrap_err();
        assert!(e.to_string().contains("over TLS only"), "{e}");
        let s = with_config("users = \"u\"", &[]).unwrap();
        assert!(s.tls.is_none() && !s.core.allow_plaintext_logins);
    }
}
