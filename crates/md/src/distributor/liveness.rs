//! Liveness of version 2 clients: PINGs sent when a client was silent, PONGs answered and
//! timed, and the silence that closes a client.

use super::client::{ClientId, Login};
use super::errors::Event;
use super::{DisconnectReason, Distributor, RoundTrips};
use crate::codec::ping::{PingKind, PingRepr, PING_LEN};

impl Distributor {
    /// Pings and silence: see [`handle_timeout`](Self::handle_timeout).
    pub(super) fn keep_alive(&mut self, now_ns: u64) {
        let mut silent = Vec::new();
        let mut ping = Vec::new();
        for c in self.clients.iter() {
            let (Some(l), Login::LoggedIn { .. }) = (&c.liveness, c.login) else {
                continue;
            };
            if l.silent_for(now_ns) >= 3 * l.interval_ns {
                silent.push((c.id, l.silent_for(now_ns)));
            } else if now_ns >= l.next_ping_ns {
                ping.push(c.id);
            }
        }
        for (id, silent_ns) in silent {
            self.counters.clients_silent += 1;
            let (user, peer) = match self.clients.get(id) {
                Some(c) => (c.login_name.as_deref().map(str::to_string), c.link.peer),
                None => continue,
            };
            self.push_event(Event::Silent {
                client: id,
                user,
                peer,
                silent_ms: silent_ns / 1_000_000,
            });
            self.close_client(id, DisconnectReason::Silent);
        }
        for id in ping {
            let Some(l) = self.clients.get_mut(id).and_then(|c| c.liveness.as_mut()) else {
                continue;
            };
            l.next_ping_ns = now_ns.saturating_add(l.interval_ns);
            // The payload is the send time, so the PONG times the round trip; a PING still
            // unanswered is replaced (its round trip is not timed).
            l.outstanding = Some(now_ns);
            if self.queue_liveness(id, PingKind::Ping, now_ns) {
                self.counters.pings_sent += 1;
            }
        }
    }

    /// A PING from a client: answered with a PONG at once.
    pub(super) fn on_ping(&mut self, id: ClientId, payload: u64) {
        self.queue_liveness(id, PingKind::Pong, payload);
    }

    /// A PONG from a client: the round trip of the PING it answers, if it answers the last.
    pub(super) fn on_pong(&mut self, id: ClientId, payload: u64, now_ns: u64) {
        self.counters.pongs_received += 1;
        let Some(l) = self.clients.get_mut(id).and_then(|c| c.liveness.as_mut()) else {
            return;
        };
        if l.outstanding == Some(payload) {
            l.outstanding = None;
            l.rtt_ns = Some(now_ns.saturating_sub(payload));
        }
    }

    /// Queues a PING or PONG to a client, unless its queue is past its bound: a client that
    /// is behind is not closed for a PING (it is alive: it reads; its own PINGs keep it).
    pub(super) fn queue_liveness(&mut self, id: ClientId, kind: PingKind, payload: u64) -> bool {
        let max = self.config.max_queue_bytes;
        match self.clients.get(id) {
            Some(c) if !c.closing() && c.queued_bytes + PING_LEN <= max => {}
            _ => return false,
        }
        let from = self.outbox.buffer().len();
        self.outbox
            .buffer()
            .extend_from_slice(&PingRepr { payload }.to_bytes(kind));
        self.queue_control(id, from);
        true
    }

    /// The round trips of the clients with liveness whose last PING was answered.
    pub fn round_trips(&self) -> RoundTrips {
        let mut r = RoundTrips::default();
        let mut sum: u128 = 0;
        for rtt in self
            .clients
            .iter()
            .filter_map(|c| c.liveness.as_ref()?.rtt_ns)
        {
            r.clients += 1;
            sum += u128::from(rtt);
            r.max_ns = r.max_ns.max(rtt);
        }
        if r.clients > 0 {
            r.mean_ns = (sum / r.clients as u128) as u64;
        }
        r
    }
}
