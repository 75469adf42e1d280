//! Topic resolution in a [`Context`](crate::Context): publishers and subscribers by topic name
//! or pattern alone.
//!
//! The first [`Context::publish`](crate::Context::publish) or
//! [`Context::subscribe`](crate::Context::subscribe) starts the context's resolver: one socket
//! (the multicast group, or a `peregrine resolverd`) and one thread that sleeps in `poll(2)`
//! until a datagram arrives or the next advertisement, query or expiry is due. The thread never
//! touches data: messages still move only in the application's own `offer` and `poll` calls.
//! It hands what it learns to each subscriber through an inbox that the subscriber's `poll`
//! checks with one relaxed atomic load.
//!
//! A publisher by topic opens, by default, a shared-memory log (for subscribers on this host)
//! and a UDP endpoint (for the others) under one session id, and advertises both. A subscriber
//! takes the shared-memory log when the advertisement says it is on this host, the network
//! otherwise. `[resolver] local` and `remote`, or an explicit URI per topic (`[topics]`), change
//! that.

mod publisher;
mod subscriber;

pub(crate) use publisher::MultiPublisher;
pub(crate) use subscriber::MultiSubscriber;
pub use subscriber::{SourceAdmission, MAX_UNPROVEN_LEGS, MAX_WAITING_SOURCES, PROOF_TIMEOUT_NS};

use crate::config::ResolverSettings;
use peregrine_proto::auth::AuthKey;
use peregrine_proto::resolver::{
    Pattern, PublicationId, Resolver, ResolverConfig, ResolverCounters, ResolverEvent,
    SubscriptionId,
};
use peregrine_proto::resolverd::{keepalive, KEEPALIVE_INTERVAL_NS};
use peregrine_transport::net::sys;
use peregrine_transport::resolver::{ResolverSocket, MAX_DATAGRAM};
use peregrine_transport::stat::Record;
use peregrine_transport::OpenError;
use peregrine_wire::auth::AUTH_LEN;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

fn now_ns() -> u64 {
    peregrine_agent::monotonic_ns()
}

/// What the resolver thread hands one subscription.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pending: AtomicBool,
    events: Mutex<Vec<ResolverEvent>>,
}

struct State {
    resolver: Resolver,
    socket: ResolverSocket,
    inboxes: HashMap<SubscriptionId, Arc<Inbox>>,
    buf: Vec<u8>,
    last_send_ns: u64,
    /// `[resolver] auth`: every datagram sent is sealed with it, every one received opened.
    auth: Option<Arc<AuthKey>>,
    sealed: Vec<u8>,
}

impl State {
    /// Sends `frames`, sealed when the resolver has a key.
    fn send(&mut self, frames: &[u8]) {
        match &self.auth {
            Some(key) => {
                self.sealed.clear();
                key.seal_into(frames, &mut self.sealed);
                self.socket.send(&self.sealed);
            }
            None => self.socket.send(frames),
        }
    }

    /// Receives, applies, sends and routes everything due; returns the next deadline.
    fn do_work(&mut self, now_ns: u64) -> u64 {
        while let Some(n) = self.socket.recv(&mut self.buf) {
            let datagram = &self.buf[..n];
            match &self.auth {
                // Nothing of a datagram is read before its tag checks.
                Some(key) => match key.open(datagram) {
                    Ok(frames) => self.resolver.on_datagram(frames, now_ns),
                    Err(reason) => self.resolver.note_auth_rejected(reason),
                },
                None => self.resolver.on_datagram(datagram, now_ns),
            }
        }
        let mut out = std::mem::take(&mut self.buf);
        while let Some(n) = self.resolver.poll_transmit(now_ns, &mut out) {
            self.send(&out[..n]);
            self.last_send_ns = now_ns;
        }
        self.buf = out;
        let mut next = self.resolver.poll_timeout().unwrap_or(u64::MAX);
        if self.socket.is_daemon() {
            if now_ns.saturating_sub(self.last_send_ns) >= KEEPALIVE_INTERVAL_NS {
                self.send(&keepalive(self.resolver.config().context_id));
                self.last_send_ns = now_ns;
            }
            next = next.min(self.last_send_ns + KEEPALIVE_INTERVAL_NS);
        }
        while let Some(ev) = self.resolver.poll_event() {
            let id = match &ev {
                ResolverEvent::SourceFound { subscription, .. }
                | ResolverEvent::SourceLost { subscription, .. } => *subscription,
            };
            if let Some(inbox) = self.inboxes.get(&id) {
                inbox.events.lock().expect("inbox lock").push(ev);
                inbox.pending.store(true, Ordering::Release);
            }
        }
        next
    }
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    wake_tx: UnixDatagram,
}

/// A context's running resolver; dropping the last reference stops its thread.
pub(crate) struct Handle {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) host_id: String,
    pub(crate) settings: ResolverSettings,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver")
            .field("host_id", &self.host_id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Handle {
    pub(crate) fn start(
        settings: ResolverSettings,
        record: Record,
    ) -> Result<Arc<Handle>, OpenError> {
        let socket = ResolverSocket::open(&settings.path)?;
        let socket_fd = socket.fd();
        let auth = settings.auth.as_ref().map(|a| a.key.clone());
        let cfg = ResolverConfig {
            context_id: nonzero_random(),
            // Room for the AUTH frame within the datagram size.
            datagram_len: settings.resolver.datagram_len
                - if auth.is_some() { AUTH_LEN } else { 0 },
            ..settings.resolver.clone()
        };
        let (wake_tx, wake_rx) = UnixDatagram::pair().map_err(|e| OpenError::Socket {
            uri: "resolver".into(),
            what: "cannot create the resolver thread's wake-up socket pair".into(),
            source: e,
        })?;
        wake_rx.set_nonblocking(true).ok();
        wake_tx.set_nonblocking(true).ok();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                resolver: Resolver::new(cfg),
                socket,
                inboxes: HashMap::new(),
                buf: vec![0; MAX_DATAGRAM],
                last_send_ns: 0,
                auth,
                sealed: Vec::with_capacity(MAX_DATAGRAM),
            }),
            stop: AtomicBool::new(false),
            wake_tx,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("peregrine-resolver".into())
            .spawn(move || {
                let mut drain = [0u8; 64];
                while !s.stop.load(Ordering::Acquire) {
                    let now = now_ns();
                    let next = {
                        let mut st = s.state.lock().expect("resolver lock");
                        let next = st.do_work(now);
                        let v = st.resolver.counters().values();
                        record.set_all(v);
                        record.set(v.len(), st.socket.send_errors);
                        next
                    };
                    let wait_ms = (next.saturating_sub(now_ns()) / 1_000_000 + 1).min(1000) as i32;
                    sys::wait_readable(&[socket_fd, wake_rx.as_raw_fd()], wait_ms);
                    while wake_rx.recv(&mut drain).is_ok() {}
                }
            })
            .map_err(|e| OpenError::Socket {
                uri: "resolver".into(),
                what: "cannot start the resolver thread".into(),
                source: e,
            })?;
        Ok(Arc::new(Handle {
            shared,
            thread: Mutex::new(Some(thread)),
            host_id: peregrine_transport::resolver::host_id(),
            settings,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().expect("resolver lock")
    }

    /// Runs the resolver now (the caller changed something) and wakes the thread so it
    /// recomputes its deadline.
    fn kick(&self, state: &mut State) {
        state.do_work(now_ns());
        let _ = self.shared.wake_tx.send(&[1]);
    }

    pub(crate) fn advertise(
        &self,
        topic: &str,
        session_id: u32,
        uris: &[String],
    ) -> Result<PublicationId, OpenError> {
        let mut st = self.lock();
        let id = st
            .resolver
            .advertise(topic, session_id, uris, now_ns())
            .map_err(|e| OpenError::InvalidTopic(e.to_string()))?;
        self.kick(&mut st);
        Ok(id)
    }

    pub(crate) fn withdraw(&self, id: PublicationId) {
        let mut st = self.lock();
        st.resolver.withdraw(id, now_ns());
        self.kick(&mut st);
    }

    pub(crate) fn subscribe(&self, pattern: Pattern) -> (SubscriptionId, Arc<Inbox>) {
        let mut st = self.lock();
        let id = st.resolver.subscribe(pattern, now_ns());
        let inbox = Arc::new(Inbox::default());
        st.inboxes.insert(id, inbox.clone());
        self.kick(&mut st);
        (id, inbox)
    }

    pub(crate) fn unsubscribe(&self, id: SubscriptionId) {
        let mut st = self.lock();
        st.resolver.unsubscribe(id);
        st.inboxes.remove(&id);
    }

    pub(crate) fn counters(&self) -> (ResolverCounters, u64) {
        let st = self.lock();
        (st.resolver.counters(), st.socket.send_errors)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.wake_tx.send(&[1]);
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

fn nonzero_random() -> u32 {
    loop {
        let r = peregrine_transport::random_u32();
        if r != 0 {
            return r;
        }
    }
}

/// A random session id for a publisher by topic.
pub(crate) fn new_session_id() -> u32 {
    nonzero_random()
}
