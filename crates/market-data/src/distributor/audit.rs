//! The distributor's refusals in its log without flooding it: in each window of
//! [`WINDOW`], the first [`SHOWN_PER_WINDOW`] refusals are logged one line each (user, address,
//! reason); the rest are counted, and one line at the window's end summarises them by reason
//! and by address (the busiest first). A brute force of 10,000 logins a second writes about
//! two dozen lines every ten seconds, not 10,000.

use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a window of refusals lasts.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Refusals logged one by one in a window.
pub const SHOWN_PER_WINDOW: u32 = 20;
/// Addresses named in a summary at most.
const TOP_PEERS: usize = 5;

#[derive(Debug)]
pub(super) struct Refusals {
    window_start: Instant,
    shown: u32,
    /// Refusals not shown in this window, by reason.
    by_reason: BTreeMap<&'static str, u64>,
    /// ... and by address.
    by_peer: BTreeMap<String, u64>,
}

impl Refusals {
    pub fn new(now: Instant) -> Refusals {
        Refusals {
            window_start: now,
            shown: 0,
            by_reason: BTreeMap::new(),
            by_peer: BTreeMap::new(),
        }
    }

    /// A refusal for `reason` (a stable name: `login_denied`, `connection_refused`,
    /// `tls_refused`) from `peer`: true if it should be logged on its own line.
    pub fn admit(&mut self, now: Instant, reason: &'static str, peer: &str) -> bool {
        if now.duration_since(self.window_start) >= WINDOW && self.suppressed() == 0 {
            self.window_start = now;
            self.shown = 0;
        }
        if self.shown < SHOWN_PER_WINDOW {
            self.shown += 1;
            return true;
        }
        *self.by_reason.entry(reason).or_default() += 1;
        *self.by_peer.entry(peer.to_string()).or_default() += 1;
        false
    }

    fn suppressed(&self) -> u64 {
        self.by_reason.values().sum()
    }

    /// At the end of a window with refusals not shown: the summary line (text, JSON), and a
    /// new window.
    pub fn summary(&mut self, now: Instant) -> Option<(String, serde_json::Value)> {
        if now.duration_since(self.window_start) < WINDOW {
            return None;
        }
        let total = self.suppressed();
        let seconds = now.duration_since(self.window_start).as_secs_f64();
        self.window_start = now;
        self.shown = 0;
        if total == 0 {
            return None;
        }
        let reasons = std::mem::take(&mut self.by_reason);
        let mut peers: Vec<(String, u64)> = std::mem::take(&mut self.by_peer).into_iter().collect();
        peers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let addresses = peers.len();
        peers.truncate(TOP_PEERS);
        let text = format!(
            "{total} more refusals in the last {seconds:.0} s, not logged one by one: {}; from {addresses} address(es), most from {}",
            reasons
                .iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            peers
                .iter()
                .map(|(p, n)| format!("{p} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let value = json!({"event": "refusals_summary", "refusals": total, "seconds": seconds,
                           "by_reason": reasons, "addresses": addresses,
                           "top_addresses": peers.iter().map(|(p, n)| json!({"peer": p, "refusals": n})).collect::<Vec<_>>()});
        Some((text, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_as_a_few_lines_and_a_summary() {
        let t0 = Instant::now();
        let mut r = Refusals::new(t0);
        let mut lines = 0;
        for i in 0..10_000u32 {
            let now = t0 + Duration::from_micros(u64::from(i) * 100);
            let peer = format!("10.0.0.{}", i % 3);
            if r.admit(now, "login_denied", &peer) {
                lines += 1;
            }
            assert!(r.summary(now).is_none(), "no summary inside the window");
        }
        assert_eq!(lines, SHOWN_PER_WINDOW);
        let (text, value) = r.summary(t0 + WINDOW).unwrap();
        assert!(
            text.starts_with("9980 more refusals in the last 10 s"),
            "{text}"
        );
        assert!(
            text.contains("login_denied 9980") && text.contains("from 3 address(es)"),
            "{text}"
        );
        assert_eq!(value["by_reason"]["login_denied"], 9980);
        // A new window logs again, and a quiet one says nothing.
        assert!(r.admit(t0 + WINDOW, "tls_refused", "10.0.0.9"));
        assert!(r.summary(t0 + WINDOW * 2).is_none());
    }
}
