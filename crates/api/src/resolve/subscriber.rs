//! A subscriber by topic or pattern: one leg per source the resolver finds (shared memory on
//! this host, the network otherwise), proven before it is kept, read after the source is lost
//! for a grace period, and a bound on the sources admitted.

use super::{now_ns, Handle, Inbox};
use peregrine_agent::Wake;
use peregrine_proto::resolver::{
    LostReason, Pattern, ResolverCounters, ResolverEvent, SourceInfo, SubscriptionId,
};
use peregrine_transport::ipc::IpcConfig;
use peregrine_transport::net::NetConfig;
use peregrine_transport::{
    AnySubscriber, Message, OpenError, Scheme, SubscriberCounters, SubscriberEvent, Uri,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
