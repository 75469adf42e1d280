//! What the distributor says, as [`Line`]s: its start and end, the core's events (refusals
//! summarised by `audit.rs`), the statistics lines, and the record `peregrine stat` reads.

use super::{DistributorServer, Line};
use peregrine_md::distributor::{ClientId, Counters, Event, ServiceId};
use serde_json::json;
use std::time::{Duration, Instant};

/// How often the distributor writes its values for `peregrine stat`.
pub(super) const STAT_EVERY: Duration = Duration::from_millis(100);

/// Gauges after the distributor's counters in its `peregrine stat` record.
/// `rtt_mean_us` and `rtt_max_us`: the last PING round trip of each client that answered
/// one (protocol version 2), their mean and the largest.
pub const DISTRIBUTOR_GAUGES: [&str; 6] = [
    "clients",
    "items",
    "queued_bytes",
    "largest_queue_bytes",
    "rtt_mean_us",
    "rtt_max_us",
];

// The counters and gauges fit one record of the counters file (checked when it compiles).
const _: () = assert!(
    Counters::NAMES.len() + DISTRIBUTOR_GAUGES.len() <= peregrine_transport::stat::MAX_VALUES
);

/// CPU seconds this process used.
fn cpu_seconds_self() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// This process's resident set (VmRSS of /proc/self/status), in KiB.
fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl DistributorServer {
    pub(super) fn say(&mut self, text: String, json: serde_json::Value) {
        (self.output)(&Line { text, json });
    }

    /// How clients connect: TLS (with or without client certificates) or plaintext, and
    /// whether plaintext logins from other hosts are allowed.
    pub fn describe_clients(&self) -> String {
        let mut t = match (&self.tls, &self.s.tls) {
            (Some(tls), Some(files)) if tls.verifies_clients() => format!(
                "clients over TLS (certificate {}; client certificates checked against {})",
                files.cert.display(),
                files
                    .client_ca
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
            (Some(_), Some(files)) => {
                format!("clients over TLS (certificate {})", files.cert.display())
            }
            _ => "clients over plaintext TCP".to_string(),
        };
        if self.tls.is_none() {
            if self.s.core.allow_plaintext_logins {
                t.push_str(
                    ", WARNING: plaintext logins from other hosts ALLOWED (allow_plaintext_logins): their tokens cross the network in the clear",
                );
            } else {
                t.push_str(
                    ", logins from loopback only (give tls_cert and tls_key for other hosts)",
                );
            }
        }
        t
    }

    /// Says where it listens and how, with the process's open files limit.
    pub fn say_started(&mut self, nofile: u64) {
        let services = self.s.core.services.join(",");
        let clients = self.describe_clients();
        self.say(
            format!(
                "listening on {}{} ({} mode, services {services}, backbone {}, image requests on {}, {} users, open files limit {nofile}, {}); {clients}; {}",
                self.local_addr,
                self.websocket_addr().map_or(String::new(), |a| format!(
                    ", WebSocket JSON and the quote board on {a}"
                )),
                self.s.mode.name(),
                self.s.backbone,
                self.s.requests,
                self.s.users.display(),
                match self.fds_reserved {
                    Some(n) => format!("descriptors up to {n} reserved"),
                    None => "WARNING: the descriptor table could not be reserved and grows as clients come (each growth stops the loop)".to_string(),
                },
                self.sealing.describe(),
            ),
            json!({"listening": self.local_addr.to_string(), "mode": self.s.mode.name(),
                   "services": self.s.core.services, "backbone": self.s.backbone,
                   "requests": self.s.requests, "open_files_limit": nofile,
                   "descriptors_reserved": self.fds_reserved,
                   "backbone_auth": self.sealing.describe(), "clients": clients,
                   "tls": self.tls.is_some(),
                   "websocket": self.websocket_addr().map(|a| a.to_string()),
                   "allow_plaintext_logins": self.s.core.allow_plaintext_logins}),
        );
        self.warn_if_users_file_exposed();
    }

    /// Says its final counters (`signal`: what stopped it).
    pub fn say_done(&mut self, signal: Option<&str>) {
        let c = self.core.counters();
        let f = self.core.footprint();
        let counters: serde_json::Map<String, serde_json::Value> =
            c.values().map(|(k, v)| (k.to_string(), v.into())).collect();
        let refused: u64 = self.backbones.iter().map(|b| b.requests_refused).sum();
        let text = {
            let mut t = format!(
                "done{}: {:.1} s, {} clients connected now, {} items cached\n",
                signal
                    .map(|s| format!(" (stopped by {s})"))
                    .unwrap_or_default(),
                self.start.elapsed().as_secs_f64(),
                f.clients,
                f.items
            );
            for (k, v) in c.values() {
                t.push_str(&format!("  {k:<24} {v}\n"));
            }
            t.push_str(&format!("  {:<24} {refused}", "image_requests_refused"));
            t
        };
        self.say(
            text,
            json!({"done": true, "signal": signal, "counters": counters,
                   "image_requests_refused": refused, "accept_errors": self.accept_errors,
                   "clients": f.clients, "items": f.items, "rss_kib": rss_kib(),
                   "cpu_s": cpu_seconds_self()}),
        );
    }

    /// A client as the log names it: its user (once logged in) and its address.
    pub(super) fn who(&self, c: ClientId) -> (String, String) {
        let user = self
            .core
            .client_stats(c)
            .and_then(|s| s.user)
            .unwrap_or_else(|| "(not logged in)".to_string());
        let peer = self
            .by_client
            .get(&c)
            .and_then(|t| self.conns.get(*t))
            .map_or_else(|| "-".to_string(), |conn| conn.peer.to_string());
        (user, peer)
    }

    pub(super) fn log_event(&mut self, e: Event) {
        let client = |id: ClientId| id.get();
        let (text, value) = match &e {
            Event::LoggedIn { client: c, user } => {
                let (_, peer) = self.who(*c);
                (
                    format!("{user} logged in from {peer} (client {})", client(*c)),
                    json!({"event": "logged_in", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::LoginDenied {
                client: c,
                user,
                peer,
                error,
            } => {
                let peer = peer.to_string();
                if !self.refusals.admit(Instant::now(), "login_denied", &peer) {
                    return;
                }
                let who = user.as_deref().unwrap_or("(no login)");
                (
                    format!(
                        "a login as {who} from {peer} refused (client {}): {error}",
                        client(*c)
                    ),
                    json!({"event": "login_denied", "client": client(*c), "user": user, "peer": peer, "error": error.to_string()}),
                )
            }
            Event::Revoked {
                client: c,
                user,
                items,
                requests,
            } => {
                let (_, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}): entitlements revoked by the reload: {items} items not-entitled ({requests} requests of a service closed)",
                        client(*c)
                    ),
                    json!({"event": "revoked", "client": client(*c), "user": user, "peer": peer, "items": items, "requests": requests}),
                )
            }
            Event::ProtocolError {
                client: c,
                user,
                peer,
                error,
            } => {
                let user = user.as_deref().unwrap_or("(not logged in)");
                (
                    format!("{user} from {peer} (client {}) closed: {error}", client(*c)),
                    json!({"event": "protocol_error", "client": client(*c), "user": user, "peer": peer.to_string(), "error": error.to_string()}),
                )
            }
            Event::Conflating { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) is behind: conflating",
                        client(*c)
                    ),
                    json!({"event": "conflating", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::CaughtUp { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!("{user} from {peer} (client {}) caught up", client(*c)),
                    json!({"event": "caught_up", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::Silent {
                client: c,
                user,
                peer,
                silent_ms,
            } => {
                let who = user.as_deref().unwrap_or("(no login)");
                (
                    format!(
                        "{who} from {peer} (client {}) closed: nothing read from it for \
                         {silent_ms} ms (three ping intervals)",
                        client(*c)
                    ),
                    json!({"event": "silent", "client": client(*c), "user": user, "peer": peer.to_string(), "silent_ms": silent_ms}),
                )
            }
            Event::Posted {
                client: c,
                user,
                service,
                item,
                code,
            } => {
                let (_, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) posted to {item} of {service}: {code}",
                        client(*c)
                    ),
                    json!({"event": "posted", "client": client(*c), "user": user, "peer": peer, "service": service, "item": item, "code": code.name()}),
                )
            }
            Event::SlowDisconnect { client: c } => {
                let (user, peer) = self.who(*c);
                (
                    format!(
                        "{user} from {peer} (client {}) disconnected: its queue passed max_queue_bytes",
                        client(*c)
                    ),
                    json!({"event": "slow_disconnect", "client": client(*c), "user": user, "peer": peer}),
                )
            }
            Event::FeedsDisagree {
                service,
                item,
                item_seq,
            } => (
                format!(
                    "backbone {}: feeds disagree on {item} at item_seq {item_seq} (another image): they are not fed the same stream; the first image stays",
                    self.service_name(*service)
                ),
                json!({"event": "feeds_disagree", "service": self.service_name(*service), "item": item, "item_seq": item_seq}),
            ),
            Event::BackboneRejected { service, error } => (
                format!("backbone {}: dropped: {error}", self.service_name(*service)),
                json!({"event": "backbone_rejected", "service": self.service_name(*service), "error": error.to_string()}),
            ),
            Event::ServiceStale {
                service,
                items,
                cause,
            } => (
                format!(
                    "service {}: {items} items stale ({cause:?}); asking the feed for every image",
                    self.service_name(*service)
                ),
                json!({"event": "service_stale", "service": self.service_name(*service), "items": items, "cause": format!("{cause:?}")}),
            ),
        };
        self.say(text, value);
    }

    pub(super) fn service_name(&self, s: ServiceId) -> &str {
        self.backbones
            .get(s.index())
            .map_or("?", |b| b.name.as_str())
    }

    /// Writes the counters and gauges for `peregrine stat`.
    pub(super) fn publish_counters(&self) {
        let c = self.core.counters();
        let n = Counters::NAMES.len();
        self.stat.set_all(c.values().map(|(_, v)| v));
        let queues = self.conns.iter().map(|c| c.out.len());
        let (queued, largest) = queues.fold((0, 0), |(sum, max), q| (sum + q, max.max(q)));
        self.stat.set(n, self.conns.len() as u64);
        self.stat.set(n + 1, self.core.footprint().items as u64);
        self.stat.set(n + 2, queued as u64);
        self.stat.set(n + 3, largest as u64);
        let rtt = self.core.round_trips();
        self.stat.set(n + 4, rtt.mean_ns / 1_000);
        self.stat.set(n + 5, rtt.max_ns / 1_000);
    }

    pub(super) fn stats(&mut self, last: &Counters, over: Duration) {
        let c = self.core.counters();
        let f = self.core.footprint();
        let secs = over.as_secs_f64().max(1e-9);
        let per_s = |now: u64, then: u64| ((now - then) as f64 / secs).round();
        let queued: usize = self.conns.iter().map(|c| c.out.len()).sum();
        let held: usize = self.conns.iter().map(|c| c.out.capacity()).sum();
        let rss = rss_kib();
        self.say(
            format!(
                "[distributor {:.1}s] {} clients, {} items, {:.0} updates/s in, {:.0} sent/s, queued {} B ({} B held), conflating {}, RSS {} KiB",
                self.start.elapsed().as_secs_f64(),
                self.conns.len(),
                f.items,
                per_s(c.updates_applied, last.updates_applied),
                per_s(c.updates_sent, last.updates_sent),
                queued,
                held,
                c.conflations - last.conflations,
                rss.unwrap_or(0)
            ),
            json!({"t": (self.start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                   "clients": self.conns.len(), "items": f.items,
                   "updates_in_per_s": per_s(c.updates_applied, last.updates_applied),
                   "updates_sent_per_s": per_s(c.updates_sent, last.updates_sent),
                   "queued_bytes": queued, "queue_capacity_bytes": held,
                   "conflations": c.conflations, "slow_disconnects": c.slow_disconnects,
                   "rss_kib": rss}),
        );
    }
}
