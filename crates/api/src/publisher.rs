//! [`Publisher`]: a topic's sender over one transport or several (by topic), with its
//! claims, counters and `peregrine stat` record.

use crate::{resolve, stat};
use peregrine_proto::lossgen::LossCounters;
use peregrine_transport::stat::Record;
use peregrine_transport::{AnyPublisher, OfferError, PublisherCounters, SubscriberCounters};

// The hot calls keep the shared-memory arm inline, and TCP's common case (a message written
// into the batch: `TcpPublisher::offer`), and call the rest out of line: with every arm
// inlined, the function grew past what the compiler inlines into a caller's loop, and ipc
// throughput fell by a fifth. TCP's inline case took its 32-byte throughput from 0.55x to 0.71x
// of the bare-socket ceiling (medians of 7 paired runs): with two calls an offer it spent about
// as long outside the kernel as its `send` took inside.
#[inline(never)]
pub(super) fn cold_offer<F: FnOnce(&mut [u8])>(
    inner: &mut PublisherInner,
    len: usize,
    fill: F,
) -> Result<u64, OfferError> {
    match inner {
        PublisherInner::One(p) => p.offer_with_inlined(len, fill),
        PublisherInner::Multi(p) => p.offer_with(len, fill),
    }
}

#[inline(never)]
pub(super) fn cold_flush(inner: &mut PublisherInner) -> Result<(), OfferError> {
    match inner {
        PublisherInner::One(p) => p.flush(),
        PublisherInner::Multi(p) => p.flush(),
    }
}

/// A publisher on one transport given by URI, or one by topic name over several.
// The transport stays inline: boxing it would put a pointer chase in front of every offer.
// Its own tag byte, as `AnyPublisher`'s (see there).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[repr(u8)]
pub(super) enum PublisherInner {
    One(AnyPublisher),
    Multi(Box<resolve::MultiPublisher>),
}

/// Publishes messages on one topic. `offer` never blocks.
///
/// On the network transports, messages in `normal` mode are batched: a batch leaves when it
/// reaches `batch_bytes`, on [`flush`](Self::flush), or when [`do_work`](Self::do_work) (or a
/// later `offer`) finds its oldest message older than `batch_interval_us`. `do_work` also
/// answers subscribers joining and sends heartbeats: call it from the idle loop.
#[derive(Debug)]
pub struct Publisher {
    pub(super) inner: PublisherInner,
    pub(super) topic: String,
    pub(super) uri: String,
    /// This publisher's values in the context's counters file (see [`stat`]).
    pub(super) stat: Record,
    /// `flush` and `do_work` calls (the clock is read every few).
    pub(super) stat_calls: u32,
    /// Offers, accepted or refused (the counters are written every few).
    pub(super) stat_offers: u32,
    /// When the values were last written (monotonic ns).
    pub(super) stat_written_ns: u64,
    /// Claims made (the last one is the only one that may be committed).
    pub(super) claims: u64,
    /// A claim's payload on the network transports and topic publishers, copied to the batch
    /// at commit.
    pub(super) staging: Vec<u8>,
    /// What a stale claim's buffer is: written, never published (and never the log or the
    /// latest claim's staging).
    pub(super) discard: Vec<u8>,
}

/// Room for one message claimed by [`Publisher::claim`]: write the payload through
/// [`Publisher::claim_buffer`], then [`Publisher::commit`] it. Dropping it uncommitted
/// abandons the claim.
#[derive(Debug)]
#[must_use = "a claim publishes nothing until it is committed"]
pub struct ClaimToken {
    /// Which of the publisher's claims this is.
    pub(super) number: u64,
    /// The transport's claim, on `ipc://`; `None` when the payload is staged.
    pub(super) ipc: Option<peregrine_transport::ipc::IpcClaim>,
    pub(super) len: usize,
}

impl ClaimToken {
    /// The payload length claimed.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a claim of an empty message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Gauges after a publisher's counters: subscribers attached or followed now.
pub(super) const PUBLISHER_SUBSCRIBERS: &str = "subscribers";
const _: () = assert!(
    peregrine_transport::stat::MAX_VALUES > PublisherCounters::NAMES.len()
        && peregrine_transport::stat::MAX_VALUES > SubscriberCounters::NAMES.len()
);

impl Publisher {
    /// Publishes `payload`; returns its sequence number, or why nothing was sent
    /// ([`OfferError::BackPressured`]: try again after the subscribers make room).
    #[inline(always)]
    pub fn offer(&mut self, payload: &[u8]) -> Result<u64, OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.offer(payload),
            // Its common case inline, the rest out of line (see `TcpPublisher::offer`).
            PublisherInner::One(AnyPublisher::Tcp(p)) => p.offer(payload),
            other => cold_offer(other, payload.len(), |b| b.copy_from_slice(payload)),
        };
        self.count(r)
    }

    /// Counts an offer for the counters file: every [`stat::PUBLISHER_EVERY_OFFERS`] offers,
    /// accepted or refused, the counters are written.
    // Always inline, as `offer` and `poll`: the counting made them large enough that the
    // compiler stopped inlining them into callers' loops, and the IPC ping-pong median rose
    // from 80 to 90 ns (paired runs of `peregrine bench pingpong`). A countdown, not the
    // values themselves: two load-and-stores per offer cost the IPC 32 B throughput about 4%.
    #[inline(always)]
    fn count(&mut self, r: Result<u64, OfferError>) -> Result<u64, OfferError> {
        self.stat_offers = self.stat_offers.wrapping_add(1);
        if self.stat_offers % stat::PUBLISHER_EVERY_OFFERS == 0 {
            self.write_counters();
        }
        r
    }

    /// Writes the counters (not the gauge, which reads lines the subscribers write).
    #[cold]
    #[inline(never)]
    fn write_counters(&mut self) {
        self.stat.set_all(self.counters().values());
    }

    /// Writes every value to the counters file.
    #[cold]
    #[inline(never)]
    fn publish_counters(&mut self) {
        self.stat_written_ns = peregrine_agent::monotonic_ns();
        let v = self.counters().values();
        self.stat.set_all(v);
        self.stat.set(v.len(), self.subscriber_count() as u64);
    }

    /// Publishes a message of `len` bytes written in place by `fill` (zero copy).
    #[inline(always)]
    pub fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.offer_with(len, fill),
            PublisherInner::One(AnyPublisher::Tcp(p)) => p.offer_with(len, fill),
            other => cold_offer(other, len, fill),
        };
        self.count(r)
    }

    /// Claims room for a message of `len` bytes, to be written in place and then committed
    /// with [`commit`](Self::commit) (zero copy on `ipc://`: the payload is written straight
    /// into shared memory, and subscribers see nothing of it before the commit).
    ///
    /// On the network transports and on publishers by topic name the claim is a buffer of the
    /// publisher's that the commit offers (one copy, as `offer`), and the commit may still be
    /// refused by flow control. Only the latest claim can be committed; dropping a token
    /// abandons its claim.
    ///
    /// ```
    /// # let ctx = peregrine::Context::new();
    /// # let uri = format!("ipc://doc-claim-{}", std::process::id());
    /// let mut publisher = ctx.publisher("md.eq.AAPL", &uri)?;
    /// let claim = publisher.claim(8)?;
    /// publisher.claim_buffer(&claim).copy_from_slice(&42u64.to_le_bytes());
    /// let sequence = publisher.commit(&claim)?;
    /// # assert_eq!(sequence, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn claim(&mut self, len: usize) -> Result<ClaimToken, OfferError> {
        self.claims += 1;
        let number = self.claims;
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.claim(len).map(Some),
            _ => {
                let max = self.max_message_len();
                if len > max {
                    Err(OfferError::TooLarge { len, max })
                } else {
                    // Its content is unspecified until written: only its length changes.
                    self.staging.resize(len, 0);
                    Ok(None)
                }
            }
        };
        match r {
            Ok(ipc) => Ok(ClaimToken { number, ipc, len }),
            Err(e) => {
                let _ = self.count(Err(e));
                Err(e)
            }
        }
    }

    /// The payload bytes of `claim`, to write before committing it (their content is
    /// unspecified until written).
    pub fn claim_buffer(&mut self, claim: &ClaimToken) -> &mut [u8] {
        let latest = claim.number == self.claims;
        match (&mut self.inner, &claim.ipc) {
            (PublisherInner::One(AnyPublisher::Ipc(p)), Some(c)) if latest && p.is_current(c) => {
                p.claimed_payload(c)
            }
            (_, None) if latest => &mut self.staging[..claim.len],
            // A stale token's buffer: neither the log nor the latest claim's, so writing it
            // cannot disturb a frame published since or a claim made since (its commit fails).
            _ => {
                self.discard.resize(claim.len, 0);
                &mut self.discard[..claim.len]
            }
        }
    }

    /// Publishes what was written into `claim`; returns its sequence number. Fails with
    /// [`OfferError::ClaimStale`] when it is not this publisher's latest claim, was committed
    /// already, or another offer took its room since. On the network transports flow control
    /// may refuse it ([`OfferError::BackPressured`]): the claim and its payload stay, to commit
    /// again.
    pub fn commit(&mut self, claim: &ClaimToken) -> Result<u64, OfferError> {
        let r = if claim.number != self.claims {
            Err(OfferError::ClaimStale)
        } else {
            match (&mut self.inner, &claim.ipc) {
                (PublisherInner::One(AnyPublisher::Ipc(p)), Some(c)) => p.commit(c),
                (_, Some(_)) => Err(OfferError::ClaimStale),
                (inner, None) => {
                    let staged = &self.staging[..claim.len];
                    cold_offer(inner, staged.len(), |b| b.copy_from_slice(staged))
                }
            }
        };
        if r.is_ok() {
            self.claims += 1; // this token is stale now
        }
        self.count(r)
    }

    /// Sends whatever is batched.
    pub fn flush(&mut self) -> Result<(), OfferError> {
        let r = match &mut self.inner {
            PublisherInner::One(AnyPublisher::Ipc(_)) => Ok(()),
            other => cold_flush(other),
        };
        self.tick();
        r
    }

    /// The counters file's cadence for `flush` and `do_work`: write the values once
    /// [`stat::PUBLISHER_EVERY_NS`] passed (the clock is read every
    /// [`stat::PUBLISHER_CLOCK_CALLS`] calls, from the first). Not on every call: a loop calls
    /// them millions of times a second, and the `subscribers` gauge reads the segment's
    /// subscriber slots, lines the subscribers write.
    #[inline]
    fn tick(&mut self) {
        self.stat_calls = self.stat_calls.wrapping_add(1);
        if self.stat_calls % stat::PUBLISHER_CLOCK_CALLS == 1 {
            let now_ns = peregrine_agent::monotonic_ns();
            if now_ns.saturating_sub(self.stat_written_ns) >= stat::PUBLISHER_EVERY_NS {
                self.publish_counters();
            }
        }
    }

    /// The duty cycle (network transports): sends a batch whose interval passed, heartbeats
    /// while idle, reads subscribers' joins and windows. Returns the work done.
    pub fn do_work(&mut self) -> usize {
        let work = match &mut self.inner {
            PublisherInner::One(p) => p.do_work(),
            PublisherInner::Multi(p) => p.do_work(),
        };
        self.tick();
        work
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The URI subscribers use: as given, with the bound port when it was given as 0. (A
    /// publisher by topic: every URI it advertises, separated by spaces.)
    pub fn uri(&self) -> &str {
        &self.uri
    }
    pub fn max_message_len(&self) -> usize {
        match &self.inner {
            PublisherInner::One(p) => p.max_message_len(),
            PublisherInner::Multi(p) => p.max_message_len(),
        }
    }
    pub fn subscriber_count(&self) -> usize {
        match &self.inner {
            PublisherInner::One(p) => p.subscriber_count(),
            PublisherInner::Multi(p) => p.subscriber_count(),
        }
    }
    pub fn session_id(&self) -> u32 {
        match &self.inner {
            PublisherInner::One(p) => p.session_id(),
            PublisherInner::Multi(p) => p.session_id(),
        }
    }
    pub fn counters(&self) -> PublisherCounters {
        match &self.inner {
            PublisherInner::One(p) => p.counters(),
            PublisherInner::Multi(p) => p.counters(),
        }
    }
    /// How many shared-memory segments left by dead publishers (and leftovers of interrupted
    /// creations) this publisher removed from the segment directory when it was created.
    pub fn stale_segments_removed(&self) -> usize {
        match &self.inner {
            PublisherInner::One(AnyPublisher::Ipc(p)) => p.stale_segments_removed(),
            PublisherInner::One(_) => 0,
            PublisherInner::Multi(p) => p.stale_segments_removed(),
        }
    }

    /// Ends the session: sends what is batched and tells subscribers the stream ended (on UDP
    /// and multicast after lingering, answering NAKs, until every subscriber confirmed the last
    /// message or `linger_ms` passed). Dropping the publisher does the same; closing first
    /// keeps [`counters`](Self::counters) readable afterwards. Later offers fail with `Closed`.
    pub fn close(&mut self) {
        match &mut self.inner {
            PublisherInner::One(p) => p.close(),
            PublisherInner::Multi(p) => p.close(),
        }
        self.publish_counters();
    }

    /// What the test loss generator (`loss=`, `PEREGRINE_LOSS`) saw and dropped, if one runs.
    pub fn loss_counters(&self) -> Option<LossCounters> {
        match &self.inner {
            PublisherInner::One(p) => p.loss_counters(),
            PublisherInner::Multi(_) => None,
        }
    }
}
