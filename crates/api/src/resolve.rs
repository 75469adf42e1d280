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

use crate::config::ResolverSettings;
use peregrine_agent::Wake;
use peregrine_proto::auth::AuthKey;
use peregrine_proto::resolver::{
    LostReason, Pattern, PublicationId, Resolver, ResolverConfig, ResolverCounters, ResolverEvent,
    SourceInfo, SubscriptionId,
};
use peregrine_proto::resolverd::{keepalive, KEEPALIVE_INTERVAL_NS};
use peregrine_transport::ipc::{IpcConfig, IpcPublisher};
use peregrine_transport::net::sys;
use peregrine_transport::net::NetConfig;
use peregrine_transport::resolver::{ResolverSocket, MAX_DATAGRAM};
use peregrine_transport::stat::Record;
use peregrine_transport::{
    AnyPublisher, AnySubscriber, Message, OfferError, OpenError, PublisherCounters, Scheme,
    SubscriberCounters, SubscriberEvent, Uri,
};
use peregrine_wire::auth::AUTH_LEN;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// How long a subscriber keeps reading a source's transport after the resolver lost the
/// source, so messages published just before a close are still delivered.
const CLOSE_GRACE_NS: u64 = 2_000_000_000;

/// At most this many transports opened for sources that have not yet sent a frame, per
/// subscription. An advertisement is anybody's word: without the bound, forged advertisements
/// of a topic would make a subscriber open a socket, poll it, and send JOINs to the address of
/// each (one per advertisement), until it stalls or runs out of descriptors.
pub const MAX_UNPROVEN_LEGS: usize = 16;

/// A transport opened for a source that sends nothing for this long is closed, and its sources
/// are no longer followed (until advertised again under a new session).
pub const PROOF_TIMEOUT_NS: u64 = 2_000_000_000;

/// Sources found while [`MAX_UNPROVEN_LEGS`] transports await their first frame wait here, up
/// to this many (the newest are kept, and tried first).
pub const MAX_WAITING_SOURCES: usize = 256;

/// How a subscriber by pattern admitted the sources topic resolution found
/// ([`Subscriber::source_admission`](crate::Subscriber::source_admission)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceAdmission {
    /// Transports open now.
    pub legs: usize,
    /// Of them, opened for a source and not yet sent a frame.
    pub unproven_legs: usize,
    /// Sources waiting for an unproven transport to prove itself or close.
    pub waiting: usize,
    /// Sources of a topic `[topics]` pins to a URI, advertised at another: not followed.
    pub pinned_elsewhere: u64,
    /// Transports closed because no frame came within [`PROOF_TIMEOUT_NS`].
    pub unproven_closed: u64,
    /// Waiting sources dropped because [`MAX_WAITING_SOURCES`] were waiting.
    pub waiting_dropped: u64,
}

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

/// A publisher by topic: one session on shared memory and/or the network.
///
/// Every message goes to the shared-memory log; it goes to the network only while a network
/// subscriber is registered. When the network refuses a message the log already took, the
/// message is kept and sent before the next one, so both sides see every message once, in order.
#[derive(Debug)]
pub(crate) struct MultiPublisher {
    ipc: Option<IpcPublisher>,
    /// The network side; never `AnyPublisher::Ipc` (the shared-memory log is `ipc`). A type
    /// without that arm would be a second copy of the transport enum and its dispatch.
    net: Option<AnyPublisher>,
    pending: Option<Vec<u8>>,
    scratch: Vec<u8>,
    registration: Option<(Arc<Handle>, PublicationId)>,
    session_id: u32,
    closed: bool,
}

impl MultiPublisher {
    pub(crate) fn new(
        ipc: Option<IpcPublisher>,
        net: Option<AnyPublisher>,
        handle: Arc<Handle>,
        publication: PublicationId,
        session_id: u32,
    ) -> Self {
        MultiPublisher {
            ipc,
            net,
            pending: None,
            scratch: Vec::new(),
            registration: Some((handle, publication)),
            session_id,
            closed: false,
        }
    }

    fn net_active(&self) -> bool {
        self.net.as_ref().is_some_and(|n| n.subscriber_count() > 0)
    }

    /// Sends the message the network refused last time; false while it still refuses.
    fn retry_pending(&mut self) -> Result<(), OfferError> {
        if let (Some(msg), Some(net)) = (&self.pending, &mut self.net) {
            net.offer(msg)?;
            self.pending = None;
        }
        Ok(())
    }

    pub(crate) fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        if self.closed {
            return Err(OfferError::Closed);
        }
        self.retry_pending()?;
        if !self.net_active() {
            return match (&mut self.ipc, &mut self.net) {
                (Some(ipc), _) => ipc.offer_with(len, fill),
                (None, Some(net)) => net.offer_with(len, fill),
                (None, None) => Err(OfferError::Closed),
            };
        }
        let max = self.max_message_len();
        if len > max {
            return Err(OfferError::TooLarge { len, max });
        }
        self.scratch.clear();
        self.scratch.resize(len, 0);
        fill(&mut self.scratch);
        let seq = match &mut self.ipc {
            Some(ipc) => Some(ipc.offer(&self.scratch)?),
            None => None,
        };
        let net = self.net.as_mut().expect("net_active");
        match (net.offer(&self.scratch), seq) {
            (Ok(s), None) => Ok(s),
            (Ok(_), Some(s)) => Ok(s),
            (Err(e), None) => Err(e),
            (Err(_), Some(s)) => {
                self.pending = Some(std::mem::take(&mut self.scratch));
                Ok(s)
            }
        }
    }

    pub(crate) fn flush(&mut self) -> Result<(), OfferError> {
        self.retry_pending()?;
        match &mut self.net {
            Some(n) => n.flush(),
            None => Ok(()),
        }
    }

    pub(crate) fn do_work(&mut self) -> usize {
        let _ = self.retry_pending();
        match &mut self.net {
            Some(n) => n.do_work(),
            None => 0,
        }
    }

    pub(crate) fn max_message_len(&self) -> usize {
        let a = self.ipc.as_ref().map(|p| p.max_message_len());
        let b = self.net.as_ref().map(AnyPublisher::max_message_len);
        a.into_iter().chain(b).min().unwrap_or(0)
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        self.ipc.as_ref().map_or(0, IpcPublisher::subscriber_count)
            + self.net.as_ref().map_or(0, AnyPublisher::subscriber_count)
    }

    pub(crate) fn session_id(&self) -> u32 {
        self.session_id
    }

    pub(crate) fn stale_segments_removed(&self) -> usize {
        self.ipc
            .as_ref()
            .map_or(0, IpcPublisher::stale_segments_removed)
    }

    /// Messages are counted once (the shared-memory side when there is one); the network's
    /// retransmission and NAK counters are added.
    pub(crate) fn counters(&self) -> PublisherCounters {
        let net = self.net.as_ref().map(AnyPublisher::counters);
        match (self.ipc.as_ref().map(IpcPublisher::counters), net) {
            (Some(mut c), Some(n)) => {
                c.naks_received += n.naks_received;
                c.retransmitted += n.retransmitted;
                c.retransmit_unavailable += n.retransmit_unavailable;
                c.retransmit_refused += n.retransmit_refused;
                c.subscribers_reaped += n.subscribers_reaped;
                c.flow_dropped += n.flow_dropped;
                c.joins_refused += n.joins_refused;
                c
            }
            (Some(c), None) | (None, Some(c)) => c,
            (None, None) => PublisherCounters::default(),
        }
    }

    pub(crate) fn close(&mut self) {
        if self.closed {
            return;
        }
        let _ = self.retry_pending();
        if let Some(n) = &mut self.net {
            n.close();
        }
        // Marks the log closed for its subscribers (its name goes when the publisher is
        // dropped); its counters stay readable.
        if let Some(i) = &mut self.ipc {
            i.close();
        }
        if let Some((h, id)) = self.registration.take() {
            h.withdraw(id);
        }
        self.closed = true;
    }
}

impl Drop for MultiPublisher {
    fn drop(&mut self) {
        self.close();
    }
}

#[derive(Debug)]
struct Leg {
    uri: String,
    topic: String,
    sub: AnySubscriber,
    /// Sources (session ids) read through this transport.
    sessions: Vec<u32>,
    /// Since when no source is left: the leg is read for a grace period, then closed.
    orphaned_ns: Option<u64>,
    /// Its publisher said goodbye (or died): nothing more will come.
    ended: bool,
    /// Opened from a `[topics]` entry when the subscription was made, before any source was
    /// found: it stays open for the subscription's life.
    explicit: bool,
    /// A frame came through it (or it is explicit): it is no longer subject to the proof
    /// timeout nor counted against [`MAX_UNPROVEN_LEGS`].
    proven: bool,
    opened_ns: u64,
}

impl Leg {
    fn new(uri: String, topic: String, sub: AnySubscriber, explicit: bool) -> Leg {
        Leg {
            uri,
            topic,
            sub,
            sessions: Vec::new(),
            orphaned_ns: None,
            ended: false,
            explicit,
            proven: explicit,
            opened_ns: now_ns(),
        }
    }
}

/// The endpoint a transport URI names: its scheme and address (resolved, for the network), so
/// an advertised URI finds the leg a `[topics]` entry opened whatever its spelling.
fn endpoint(uri: &str) -> Option<(Scheme, String)> {
    let u = Uri::parse(uri).ok()?;
    let address = match u.scheme {
        Scheme::Ipc => u.address.clone(),
        _ => NetConfig::from_uri(&u).ok()?.addr.to_string(),
    };
    Some((u.scheme, address))
}

/// Whether `addr` is an IPv4 address of one of this host's interfaces (one can bind it).
fn is_local_address(addr: &str) -> bool {
    addr.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|a| std::net::UdpSocket::bind((a, 0)).is_ok())
}

/// `uri` without the parameters `drop` picks.
fn without_params(uri: &Uri, drop: impl Fn(&str, &str) -> bool) -> String {
    let mut s = format!("{}://{}", uri.scheme.name(), uri.address);
    let mut first = true;
    for (k, v) in uri.params.iter().filter(|(k, v)| !drop(k, v)) {
        s.push(if first { '?' } else { '&' });
        first = false;
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// A subscriber by topic pattern: one transport per source it found.
#[derive(Debug)]
pub(crate) struct MultiSubscriber {
    handle: Arc<Handle>,
    subscription: SubscriptionId,
    inbox: Arc<Inbox>,
    config: crate::Config,
    blocking: bool,
    legs: Vec<Leg>,
    /// session id -> leg uri, for the sources followed.
    sources: HashMap<u32, (String, String)>,
    next_leg: usize,
    events: VecDeque<SubscriberEvent>,
    /// Counters of the legs already closed.
    closed_counters: SubscriberCounters,
    polls: u32,
    /// Sources found while [`MAX_UNPROVEN_LEGS`] legs awaited their first frame.
    waiting: VecDeque<SourceInfo>,
    admission: SourceAdmission,
    /// Topics already reported as pinned elsewhere (one event per topic).
    pinned_reported: Vec<String>,
}

impl MultiSubscriber {
    pub(crate) fn new(
        handle: Arc<Handle>,
        pattern: Pattern,
        config: crate::Config,
        blocking: bool,
    ) -> Self {
        let (subscription, inbox) = handle.subscribe(pattern.clone());
        let mut s = MultiSubscriber {
            handle,
            subscription,
            inbox,
            config,
            blocking,
            legs: Vec::new(),
            sources: HashMap::new(),
            next_leg: 0,
            events: VecDeque::new(),
            closed_counters: SubscriberCounters::default(),
            polls: 0,
            waiting: VecDeque::new(),
            admission: SourceAdmission::default(),
            pinned_reported: Vec::new(),
        };
        s.open_explicit_legs(&pattern);
        s
    }

    /// Opens now the network transports `[topics]` names for topics the pattern matches, so a
    /// publisher that starts later is read from its first message (waiting for topic
    /// resolution to find it would miss what it sends meanwhile). Only endpoints a subscriber
    /// can open before its publisher exists: a multicast group, or a fixed `udp`/`tcp` port.
    fn open_explicit_legs(&mut self, pattern: &Pattern) {
        let entries: Vec<(String, String)> = self
            .config
            .topics()
            .filter(|(t, _)| pattern.matches(t))
            .map(|(t, u)| (t.to_string(), u.to_string()))
            .collect();
        for (topic, uri) in entries {
            let fixed = endpoint(&uri).is_some_and(|(scheme, addr)| match scheme {
                Scheme::Mcast => true,
                Scheme::Udp | Scheme::Tcp => !addr.ends_with(":0"),
                _ => false,
            });
            if !fixed {
                continue;
            }
            match self.open_leg(&uri, &topic) {
                Ok(sub) => self.legs.push(Leg::new(uri, topic, sub, true)),
                Err(e) => self.events.push_back(SubscriberEvent::AttachFailed {
                    reason: format!("topic '{topic}' at {uri} ([topics]): {e}"),
                }),
            }
        }
    }

    /// The URI to read `source` through: this host's shared memory when offered, allowed, and
    /// readable by this process (the publisher's user, or a group this context's configuration
    /// names as the publisher's does), else the first network transport.
    fn choose(&self, source: &SourceInfo) -> Option<String> {
        let settings = &self.handle.settings;
        let my_group = self
            .config
            .apply("ipc://probe")
            .ok()
            .and_then(|u| IpcConfig::from_uri(&Uri::parse(&u).ok()?).ok())
            .and_then(|c| c.group);
        let me = peregrine_transport::ipc::dir::current_user().to_string();
        let readable = |p: &Uri| match p.param("group") {
            Some(g) => my_group.is_some() && my_group == peregrine_transport::ipc::dir::group_id(g),
            None => my_group.is_none() && p.param("user").is_none_or(|u| u == me),
        };
        let local = |u: &String| {
            Uri::parse(u).ok().is_some_and(|p| {
                p.scheme == Scheme::Ipc
                    && p.param("host").is_none_or(|h| h == self.handle.host_id)
                    && readable(&p)
            })
        };
        if settings.local_ipc || source.local {
            if let Some(u) = source.uris.iter().find(|u| local(u)) {
                return Some(u.clone());
            }
        }
        source
            .uris
            .iter()
            .find(|u| Scheme::of_uri(u) != Some(Scheme::Ipc))
            .cloned()
    }

    fn open_leg(&self, uri: &str, topic: &str) -> Result<AnySubscriber, OpenError> {
        let mut parsed = Uri::parse(uri)?;
        // A shared-memory subscriber takes its settings from the segment, but whose segments
        // it may read (`group=`) only from this context's configuration: never from an
        // advertisement, which any process can send. The network ones take this context's
        // defaults. `late_join` is the subscriber's own choice: one in an advertised URI (the
        // publisher's configuration) is dropped, and this context's transport section, else
        // `[resolver] late_join`, else the transport's default, apply.
        parsed = if parsed.scheme == Scheme::Ipc {
            Uri::parse(&self.config.apply(&format!("ipc://{}", parsed.address))?)?
        } else {
            // A multicast group's interfaces (`iface`, `b_iface`) are the publisher's host's:
            // kept when they are this host's too (the publisher is here), else this context's
            // (its transport section, else the transport's default) apply.
            let own = without_params(&parsed, |k, v| {
                k == "late_join"
                    || (parsed.scheme == Scheme::Mcast
                        && (k == "iface" || k == "b_iface")
                        && !is_local_address(v))
            });
            let mut applied = self.config.apply(&own)?;
            if matches!(parsed.scheme, Scheme::Udp | Scheme::Mcast) {
                if let Some(late_join) = self.handle.settings.late_join {
                    if Uri::parse(&applied)?.param("late_join").is_none() {
                        let sep = if applied.contains('?') { '&' } else { '?' };
                        applied = format!("{applied}{sep}late_join={late_join}");
                    }
                }
            }
            Uri::parse(&applied)?
        };
        let stream_id = peregrine_proto::resolver::stream_id_of(topic);
        AnySubscriber::open(&parsed, topic, stream_id, self.blocking)
    }

    /// Applies what the resolver thread handed over, if anything (one relaxed load otherwise).
    #[inline]
    fn check_inbox(&mut self) {
        if self.inbox.pending.load(Ordering::Relaxed) {
            self.inbox.pending.store(false, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            self.apply_resolver_events();
        }
    }

    fn apply_resolver_events(&mut self) {
        let events = std::mem::take(&mut *self.inbox.events.lock().expect("inbox lock"));
        for ev in events {
            match ev {
                ResolverEvent::SourceFound { source, .. } => self.found(source),
                ResolverEvent::SourceLost {
                    topic,
                    session_id,
                    reason,
                    ..
                } => self.lost(topic, session_id, reason),
            }
        }
    }

    fn found(&mut self, source: SourceInfo) {
        let Some(uri) = self.choose(&source) else {
            self.events.push_back(SubscriberEvent::AttachFailed {
                reason: format!(
                    "topic '{}' (session {:08x}) offers no transport this host can use: {}",
                    source.topic,
                    source.session_id,
                    source.uris.join(", ")
                ),
            });
            return;
        };
        let here = endpoint(&uri);
        let at = self.legs.iter().position(|l| {
            l.topic == source.topic
                && (l.uri == uri || (here.is_some() && endpoint(&l.uri) == here))
        });
        // A topic `[topics]` pins to an endpoint is read there and nowhere else: its publishers
        // use exactly that URI, so a source of it advertised elsewhere is a publisher with
        // another configuration, or a forgery.
        if at.is_none_or(|i| !self.legs[i].explicit) {
            if let Some(pin) = self
                .legs
                .iter()
                .find(|l| l.explicit && l.topic == source.topic)
            {
                self.admission.pinned_elsewhere += 1;
                if !self.pinned_reported.contains(&source.topic) && self.pinned_reported.len() < 64
                {
                    self.pinned_reported.push(source.topic.clone());
                    self.events.push_back(SubscriberEvent::AttachFailed {
                        reason: format!(
                            "topic '{}' is read at {} ([topics]); a source advertised at {uri} \
                             is not followed (give its publisher the same [topics] entry)",
                            source.topic, pin.uri
                        ),
                    });
                }
                return;
            }
        }
        let at = match at {
            Some(i) => i,
            None if self.unproven_legs() >= MAX_UNPROVEN_LEGS => {
                if self.waiting.len() >= MAX_WAITING_SOURCES {
                    self.waiting.pop_front();
                    self.admission.waiting_dropped += 1;
                }
                self.waiting.push_back(source);
                return;
            }
            None => match self.open_leg(&uri, &source.topic) {
                Ok(sub) => {
                    self.legs
                        .push(Leg::new(uri.clone(), source.topic.clone(), sub, false));
                    self.legs.len() - 1
                }
                Err(e) => {
                    self.events.push_back(SubscriberEvent::AttachFailed {
                        reason: format!("topic '{}' at {uri}: {e}", source.topic),
                    });
                    return;
                }
            },
        };
        let leg = &mut self.legs[at];
        leg.sessions.push(source.session_id);
        leg.orphaned_ns = None;
        self.sources
            .insert(source.session_id, (leg.uri.clone(), source.topic.clone()));
        self.events.push_back(SubscriberEvent::SourceFound {
            topic: source.topic,
            session_id: source.session_id,
            uri,
        });
    }

    fn lost(&mut self, topic: String, session_id: u32, reason: LostReason) {
        let Some((uri, _)) = self.sources.remove(&session_id) else {
            self.waiting
                .retain(|s| !(s.session_id == session_id && s.topic == topic));
            return;
        };
        if let Some(leg) = self
            .legs
            .iter_mut()
            .find(|l| l.uri == uri && l.topic == topic)
        {
            leg.sessions.retain(|&s| s != session_id);
            if leg.sessions.is_empty() && !leg.explicit {
                leg.orphaned_ns = Some(now_ns());
            }
        }
        self.events.push_back(SubscriberEvent::SourceLost {
            topic,
            session_id,
            reason: reason.name(),
        });
    }

    fn unproven_legs(&self) -> usize {
        self.legs.iter().filter(|l| !l.proven).count()
    }

    /// Closes the legs with no source left whose publisher ended or whose grace passed, and the
    /// legs that stayed silent past [`PROOF_TIMEOUT_NS`] (their sources are dropped); then opens
    /// legs for waiting sources while fewer than [`MAX_UNPROVEN_LEGS`] are unproven.
    fn reap_legs(&mut self) {
        let now = now_ns();
        let mut i = 0;
        while i < self.legs.len() {
            let l = &mut self.legs[i];
            if !l.proven && l.sub.is_connected() {
                l.proven = true;
            }
            let orphan_done = l
                .orphaned_ns
                .is_some_and(|t| l.ended || now.saturating_sub(t) >= CLOSE_GRACE_NS);
            let silent = !l.proven && now.saturating_sub(l.opened_ns) >= PROOF_TIMEOUT_NS;
            if orphan_done || silent {
                let leg = self.legs.swap_remove(i);
                self.closed_counters.accumulate(&leg.sub.counters());
                if silent && !orphan_done {
                    self.admission.unproven_closed += 1;
                    for s in &leg.sessions {
                        if self.sources.remove(s).is_some() {
                            self.events.push_back(SubscriberEvent::SourceLost {
                                topic: leg.topic.clone(),
                                session_id: *s,
                                reason: "silent",
                            });
                        }
                    }
                }
            } else {
                i += 1;
            }
        }
        if self.next_leg >= self.legs.len() {
            self.next_leg = 0;
        }
        while self.unproven_legs() < MAX_UNPROVEN_LEGS {
            let Some(source) = self.waiting.pop_back() else {
                break;
            };
            self.found(source);
        }
    }

    /// How the sources topic resolution found were admitted.
    pub(crate) fn source_admission(&self) -> SourceAdmission {
        SourceAdmission {
            legs: self.legs.len(),
            unproven_legs: self.unproven_legs(),
            waiting: self.waiting.len(),
            ..self.admission
        }
    }

    pub(crate) fn poll<F: FnMut(&str, Message<'_>)>(
        &mut self,
        handler: &mut F,
        limit: usize,
    ) -> usize {
        self.check_inbox();
        let legs = self.legs.len();
        let mut n = 0;
        for k in 0..legs {
            if n >= limit {
                break;
            }
            let i = (self.next_leg + k) % legs;
            let leg = &mut self.legs[i];
            let topic = &leg.topic;
            n += leg.sub.poll(&mut |m| handler(topic, m), limit - n);
            while let Some(ev) = leg.sub.next_event() {
                if matches!(
                    ev,
                    SubscriberEvent::PublisherClosed { .. }
                        | SubscriberEvent::PublisherDied { .. }
                        | SubscriberEvent::SegmentDamaged { .. }
                ) {
                    leg.ended =
                        leg.sessions.is_empty() || Scheme::of_uri(&leg.uri) == Some(Scheme::Ipc);
                }
                self.events.push_back(ev);
            }
        }
        if legs > 0 {
            self.next_leg = (self.next_leg + 1) % legs;
        }
        self.polls = self.polls.wrapping_add(1);
        if self.polls % 256 == 0
            && self
                .legs
                .iter()
                .any(|l| l.orphaned_ns.is_some() || !l.proven)
            || !self.waiting.is_empty()
        {
            self.reap_legs();
        }
        n
    }

    pub(crate) fn next_event(&mut self) -> Option<SubscriberEvent> {
        self.check_inbox();
        self.events.pop_front()
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.legs.iter().any(|l| l.sub.is_connected())
    }

    pub(crate) fn counters(&self) -> SubscriberCounters {
        let mut c = self.closed_counters;
        for l in &self.legs {
            c.accumulate(&l.sub.counters());
        }
        c
    }

    /// Counters per source followed now, by session id.
    pub(crate) fn session_counters(&self) -> Vec<(u32, SubscriberCounters)> {
        let mut v = Vec::new();
        for l in &self.legs {
            v.extend(l.sub.session_counters());
        }
        v
    }

    /// The topic of each source followed now.
    pub(crate) fn source_count(&self) -> usize {
        self.sources.len()
    }

    pub(crate) fn sources(&self) -> Vec<(u32, String, String)> {
        let mut v: Vec<_> = self
            .sources
            .iter()
            .map(|(s, (u, t))| (*s, t.clone(), u.clone()))
            .collect();
        v.sort();
        v
    }

    pub(crate) fn resolver_counters(&self) -> ResolverCounters {
        self.handle.counters().0
    }
}

impl Drop for MultiSubscriber {
    fn drop(&mut self) {
        self.handle.unsubscribe(self.subscription);
    }
}

/// Blocking idle over several transports: with one transport, its own wake-up; otherwise (or
/// with none yet) a short sleep, since a futex and sockets cannot be waited on together.
impl Wake for MultiSubscriber {
    fn prepare_wait(&mut self) {
        if let [leg] = &mut self.legs[..] {
            leg.sub.prepare_wait();
        }
    }
    fn wait(&mut self, timeout_ns: u64) {
        if self.inbox.pending.load(Ordering::Relaxed) {
            return;
        }
        match &mut self.legs[..] {
            [leg] => leg.sub.wait(timeout_ns.min(100_000_000)),
            _ => std::thread::sleep(std::time::Duration::from_nanos(timeout_ns.min(200_000))),
        }
    }
    fn cancel_wait(&mut self) {
        if let [leg] = &mut self.legs[..] {
            leg.sub.cancel_wait();
        }
    }
}
