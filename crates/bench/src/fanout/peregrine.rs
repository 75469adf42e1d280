//! One fan-out probe through Peregrine: `peregrine distributor` on loopback with a reliable
//! multicast backbone of the probe's own, N `peregrine client` processes logged in with their
//! watchlists, then `peregrine feed` at the probe's rate for its seconds. The processes are the
//! commands users run, started from this same program with their documented flags; each writes
//! its `--items-out` at exit, and the probe checks every client's items against the feed's.

use super::process::Proc;
use super::{
    account, read_client_items, read_feed_items, ClientReport, FanoutConfig, LatencyStats, Probe,
    ProbeRecord, System, Watchlists,
};
use crate::BenchError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The user every client logs in as, and its token.
const USER: &str = "bench";
const TOKEN: &str = "bench-fanout";

/// How long after the feed's last update the clients are left to receive what is queued for
/// them before they are stopped: longer than the distributor's flush interval (20 ms) by far.
pub const DRAIN: Duration = Duration::from_millis(1000);

/// A folder of the run's files (watchlists, users, items), removed at the end.
#[derive(Debug)]
pub struct Workdir {
    pub path: PathBuf,
}

impl Workdir {
    pub fn new(label: &str) -> Result<Workdir, BenchError> {
        let path = std::env::temp_dir().join(format!(
            "peregrine-fanout-{label}-{}-{:04x}",
            std::process::id(),
            peregrine_agent::monotonic_ns() & 0xffff
        ));
        std::fs::create_dir_all(&path)?;
        Ok(Workdir { path })
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Probes through Peregrine, one after the other.
#[derive(Debug)]
pub struct PeregrineRun {
    exe: PathBuf,
    cfg: FanoutConfig,
    watch: Watchlists,
    dir: Workdir,
    probes: u32,
}

impl PeregrineRun {
    /// Writes the watchlists, the feed's items and the users file.
    pub fn new(exe: &Path, cfg: &FanoutConfig) -> Result<PeregrineRun, BenchError> {
        cfg.validate()?;
        let watch = Watchlists::new(cfg.clients, cfg.items_per_client, cfg.overlap)?;
        let dir = Workdir::new("peregrine")?;
        watch.write_items(&dir.path.join("items.txt"))?;
        for k in 0..cfg.clients {
            watch.write(k, &dir.path.join(format!("watch{k}.txt")))?;
        }
        let mut users = format!(
            "[users.{USER}]\ntoken_sha256 = \"{}\"\nitems = [\"*\"]\n",
            token_sha256()
        );
        users.push('\n');
        std::fs::write(dir.path.join("users.toml"), users)?;
        // Every client is one user on one address: the per-user and per-address limits (128
        // and 256 by default) are raised to the most clients a run may have.
        let limit = FanoutConfig::MAX_CLIENTS + 8;
        std::fs::write(
            dir.path.join("distributor.toml"),
            format!("max_clients_per_user = {limit}\nmax_clients_per_address = {limit}\nmax_pending_clients = {limit}\n"),
        )?;
        if cfg.client_tls {
            write_certificates(&dir.path)?;
        }
        Ok(PeregrineRun {
            exe: exe.to_path_buf(),
            cfg: cfg.clone(),
            watch,
            dir,
            probes: 0,
        })
    }

    /// The probe's backbone: a multicast group and port of its own on loopback (the port
    /// moves with each probe, so that no datagram of a previous probe's processes reaches it).
    fn backbone(&self) -> String {
        let pid = std::process::id();
        format!(
            "mcast://239.255.97.{}:{}?datagram={}{}",
            1 + pid % 250,
            44_000 + (pid % 1000) * 10 + (self.probes % 5) * 2,
            self.cfg.backbone_datagram,
            if self.cfg.backbone_sealed {
                ""
            } else {
                "&auth=none"
            }
        )
    }

    /// Runs one probe with the feed at `rate` updates per second.
    pub fn probe(&mut self, rate: f64) -> Result<Probe, BenchError> {
        self.probes += 1;
        let d = self.dir.path.clone();
        let backbone = self.backbone();
        let n = self.probes;
        let mut dist = Proc::spawn(
            {
                let mut c = Command::new(&self.exe);
                c.arg("distributor")
                    .args(["--listen", "127.0.0.1:0", "--backbone", &backbone])
                    .arg("--users")
                    .arg(d.join("users.toml"))
                    .arg("--config")
                    .arg(d.join("distributor.toml"))
                    .args(["--mode", self.cfg.mode.name(), "--json"]);
                if self.cfg.client_tls {
                    c.arg("--tls-cert")
                        .arg(d.join("md.crt"))
                        .arg("--tls-key")
                        .arg(d.join("md.key"));
                }
                if self.cfg.client_websocket {
                    c.args(["--websocket", "127.0.0.1:0"]);
                }
                c
            },
            "peregrine distributor",
        )?;
        let line = dist.wait_line(
            |l| l.contains("\"listening\""),
            Duration::from_secs(20),
            "'listening' line",
        )?;
        if let Some(p) = self.cfg.pin {
            dist.pin(p.b)?;
        }
        // WebSocket clients connect to the distributor's WebSocket port.
        let key = if self.cfg.client_websocket {
            "websocket"
        } else {
            "listening"
        };
        let address = |key: &str| {
            serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v[key].as_str().map(str::to_string))
                .ok_or_else(|| BenchError::Child(format!("distributor: unreadable line {line}")))
        };
        let addr = address(key)?;
        // Attacks go to the binary listener.
        let binary_addr = address("listening")?;
        let mut clients = Vec::with_capacity(self.cfg.clients);
        for k in 0..self.cfg.clients {
            let mut c = Command::new(&self.exe);
            c.arg("client")
                .args(["--connect", &addr, "--user", USER, "--json"])
                .args(["--latency-after-s", &self.cfg.warmup_seconds.to_string()])
                .arg("--watch")
                .arg(d.join(format!("watch{k}.txt")))
                .arg("--items-out")
                .arg(d.join(format!("client{k}-{n}.items")))
                .env("PEREGRINE_MD_TOKEN", TOKEN);
            if self.cfg.client_busy_poll_us > 0 {
                c.args(["--busy-poll-us", &self.cfg.client_busy_poll_us.to_string()]);
            }
            if self.cfg.client_tls {
                c.arg("--tls-ca").arg(d.join("ca.crt"));
            }
            if self.cfg.client_websocket {
                c.arg("--websocket");
            }
            clients.push(Proc::spawn(c, format!("peregrine client {k}"))?);
        }
        for c in &mut clients {
            c.wait_line(
                |l| l.contains("\"logged_in\""),
                Duration::from_secs(20),
                "login",
            )?;
            if let Some(p) = self.cfg.pin {
                c.pin(p.a)?;
            }
        }
        let feed_items = d.join(format!("feed-{n}.items"));
        let mut feed = Proc::spawn(
            {
                let mut c = Command::new(&self.exe);
                c.arg("feed")
                    .arg("--items")
                    .arg(d.join("items.txt"))
                    .args(["--rate", &format!("{rate}"), "--zipf", "0"])
                    .args(["--backbone", &backbone, "--json"])
                    .args(["--seconds", &format!("{}", self.cfg.seconds)])
                    .args(["--size", &self.cfg.size.to_string()])
                    .args(["--seed", &self.cfg.seed.to_string()])
                    .arg("--items-out")
                    .arg(&feed_items);
                c
            },
            "peregrine feed",
        )?;
        if let Some(p) = self.cfg.pin {
            feed.pin(p.a)?;
        }
        // The attack runs while the feed publishes and the clients measure.
        let attacker = self
            .cfg
            .attack
            .map(|kind| super::attack::Attacker::start(kind, &binary_addr, USER, TOKEN));
        feed.wait(Duration::from_secs_f64(self.cfg.seconds + 60.0))?;
        drop(attacker);
        let done = feed.last_json("done")?;
        std::thread::sleep(DRAIN);
        for c in &clients {
            c.terminate();
        }
        let mut reports = Vec::with_capacity(clients.len());
        for c in &mut clients {
            c.wait(Duration::from_secs(20))?;
            reports.push(client_report(&c.last_json("done")?));
        }
        dist.terminate();
        dist.wait(Duration::from_secs(20))?;
        let dist_done = dist.last_json("done")?;
        let counters = &dist_done["counters"];
        let count = |k: &str| counters[k].as_u64().unwrap_or(0);

        let sent = read_feed_items(&feed_items)?;
        let mut accounts = Vec::with_capacity(clients.len());
        for k in 0..self.cfg.clients {
            let got = read_client_items(&d.join(format!("client{k}-{n}.items")))?;
            accounts.push(account(self.watch.of(k), &sent, &got));
        }
        let mut cpu_s = BTreeMap::new();
        cpu_s.insert("feed".to_string(), f(&done["cpu_s"]));
        cpu_s.insert("distributor".to_string(), f(&dist_done["cpu_s"]));
        cpu_s.insert(
            "clients".to_string(),
            reports.iter().map(|r| r.cpu_s).sum::<f64>(),
        );
        let feed_updates = done["updates"].as_u64().unwrap_or(0);
        let feed_rate = f(&done["updates_per_s"]);
        let record = ProbeRecord {
            rate_asked: rate,
            feed_rate,
            feed_updates,
            feed_seconds: if feed_rate > 0.0 {
                feed_updates as f64 / feed_rate
            } else {
                0.0
            },
            refused: done["refused"].as_u64().unwrap_or(0),
            clients: reports,
            accounts,
            tier_losses: count("backbone_losses") + count("sequence_gaps"),
            tier_slow: count("slow_disconnects") + count("conflations"),
            cpu_s,
        };
        Ok(Probe::judge(System::Peregrine, record, self.cfg.max_lag_ms))
    }
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// A `peregrine client --json` summary as a [`ClientReport`].
fn client_report(v: &serde_json::Value) -> ClientReport {
    let l = &v["latency_ns"];
    ClientReport {
        updates: v["updates"].as_u64().unwrap_or(0),
        gaps: v["gaps"].as_u64().unwrap_or(0) + v["updates_without_image"].as_u64().unwrap_or(0),
        conflated: v["conflated"].as_u64().unwrap_or(0),
        disconnects: v["reconnects"].as_u64().unwrap_or(0),
        latency: LatencyStats {
            mean_ns: f(&l["mean"]),
            stddev_ns: f(&l["stddev"]),
            min_ns: f(&l["min"]),
            max_ns: f(&l["max"]),
            points: l["points"].as_u64().unwrap_or(0),
        },
        cpu_s: f(&v["cpu_s"]),
    }
}

/// The users file's `token_sha256` of [`TOKEN`]. Not the Argon2 hash `--hash-token` prints:
/// every probe logs up to 512 clients in at once, and their slow checks (tens of ms each,
/// one at a time) would hold the probe's start for seconds; the run measures the fan-out.
fn token_sha256() -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(TOKEN.as_bytes()))
}

/// A CA and the distributor's certificate for 127.0.0.1 (ECDSA P-256), made for one run.
fn write_certificates(dir: &Path) -> Result<(), BenchError> {
    use std::os::unix::fs::PermissionsExt;
    let failed =
        |e: rcgen::Error| BenchError::Config(format!("making the run's certificates: {e}"));
    let ca_key = rcgen::KeyPair::generate().map_err(failed)?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "peregrine bench CA");
    let ca_cert = ca.self_signed(&ca_key).map_err(failed)?;
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .map_err(failed)?
        .signed_by(&key, &ca_cert, &ca_key)
        .map_err(failed)?;
    std::fs::write(dir.join("ca.crt"), ca_cert.pem())?;
    std::fs::write(dir.join("md.crt"), cert.pem())?;
    let key_path = dir.join("md.key");
    std::fs::write(&key_path, key.serialize_pem())?;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}
