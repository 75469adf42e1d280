//! The provider API (RTSDK's non-interactive provider): an application publishes its own items
//! onto the backbone, and the provider keeps their last images and answers the distributors'
//! image requests itself, so the application only publishes changes.
//!
//! A thin driver: the state is `peregrine_md::provider::ProviderCore`'s (sans-I/O), the
//! sockets are a Peregrine publisher of `md.<service>` and a subscriber of `md.<service>.req`.
//! No thread of its own: the application's calls (`refresh`, `update`, `status`, `do_work`)
//! drive it, as they drive the messaging API. Call [`Provider::do_work`] every millisecond or
//! so, between changes and when idle, so that image requests are answered and NAKs repaired.
//!
//! ```no_run
//! use peregrine::Context;
//! use peregrine_market_data::provider::Provider;
//! use peregrine_md::model::Value;
//!
//! let ctx = Context::new();
//! let mut prov = Provider::open(&ctx, "FEED1", "mcast://239.255.90.1:40900")?;
//! prov.refresh_named("AAA.O", &[("BID", Value::price(18921, -2)), ("BIDSIZE", Value::Int(300))])?;
//! prov.update_named("AAA.O", &[("BID", Value::price(18923, -2))])?;
//! loop {
//!     prov.do_work(); // answers image requests; repairs losses
//!     while let Some(post) = prov.poll_post() {
//!         // A client's contribution: publish it as an update of its item, and say so.
//!         let _ = prov.publish_post(&post);
//!     }
//!     # break;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::backbone::{self, Sealing};
use peregrine::{Context, IdleKind, OfferError, OpenError, Publisher, Subscriber};
use peregrine_md::codec::AckCode;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Field, ItemState, Value};
pub use peregrine_md::provider::Post;
use peregrine_md::provider::{ProvideError, ProviderConfig, ProviderCore, ProviderCounters};
use std::fmt;

/// Solicited REFRESHes sent per [`Provider::do_work`] at most: answers to a request for every
/// image go out in slices between the application's own messages, never as one burst.
pub const REFRESH_BURST: usize = 64;

/// Where and how a provider publishes; [`ProviderOptions::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    pub service: String,
    /// The backbone URI (`md.<service>` is published there); sealed by default
    /// ([`backbone`]).
    pub backbone: String,
    /// Where image requests come from (default: the backbone's port + 1).
    pub requests: Option<String>,
    /// Field types are checked against it (default: the built-in dictionary).
    pub dictionary: Dictionary,
    /// Items at most.
    pub max_items: usize,
}

impl ProviderOptions {
    pub fn new(service: &str, backbone: &str) -> Self {
        ProviderOptions {
            service: service.to_string(),
            backbone: backbone.to_string(),
            requests: None,
            dictionary: Dictionary::builtin(),
            max_items: 1_000_000,
        }
    }
}

/// Why a provider call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProviderError {
    /// The backbone or request URI is unusable.
    Backbone(backbone::BackboneError),
    /// Opening the publisher or the request subscriber failed.
    Open { what: String, error: OpenError },
    /// The input was refused (bad name, field type, update before refresh, ...): nothing sent.
    Refused(ProvideError),
    /// The backbone's slowest subscriber has no room yet: nothing sent; call `do_work` and
    /// try again.
    BackPressured,
    /// The transport failed: nothing sent.
    Send(OfferError),
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::Backbone(e) => e.fmt(f),
            ProviderError::Open { what, error } => write!(f, "{what}: {error}"),
            ProviderError::Refused(e) => e.fmt(f),
            ProviderError::BackPressured => f.write_str(
                "back-pressured: the backbone's slowest subscriber has no room yet; nothing was \
                 sent, call do_work and send it again",
            ),
            ProviderError::Send(e) => write!(f, "publishing on the backbone: {e}"),
        }
    }
}

impl std::error::Error for ProviderError {}

impl From<ProvideError> for ProviderError {
    fn from(e: ProvideError) -> Self {
        ProviderError::Refused(e)
    }
}

/// A provider of one service: see the module's documentation.
#[derive(Debug)]
pub struct Provider {
    core: ProviderCore,
    publisher: Publisher,
    requests: Subscriber,
    sealing: Sealing,
    requests_uri: String,
}

impl Provider {
    /// A provider of `service` on `backbone`, with the defaults.
    pub fn open(ctx: &Context, service: &str, backbone: &str) -> Result<Self, ProviderError> {
        Provider::with_options(ctx, ProviderOptions::new(service, backbone))
    }

    pub fn with_options(ctx: &Context, o: ProviderOptions) -> Result<Self, ProviderError> {
        let core = ProviderCore::new(ProviderConfig {
            service: o.service.clone(),
            dictionary: o.dictionary,
            max_items: o.max_items,
            ..ProviderConfig::new(&o.service)
        })?;
        let requests = match o.requests {
            Some(r) => r,
            None => backbone::default_requests_uri(&o.backbone).map_err(ProviderError::Backbone)?,
        };
        let (backbone_uri, sealing) =
            backbone::seal(ctx, &o.backbone).map_err(ProviderError::Backbone)?;
        let (requests_uri, _) = backbone::seal(ctx, &requests).map_err(ProviderError::Backbone)?;
        let topic = backbone::backbone_topic(&o.service);
        let publisher =
            ctx.publisher(&topic, &backbone_uri)
                .map_err(|error| ProviderError::Open {
                    what: format!("publishing {topic} on {}", o.backbone),
                    error,
                })?;
        let requests = ctx
            .subscriber(
                &backbone::request_topic(&o.service),
                &requests_uri,
                IdleKind::Backoff,
            )
            .map_err(|error| ProviderError::Open {
                what: format!("subscribing to image requests on {requests}"),
                error,
            })?;
        Ok(Provider {
            core,
            publisher,
            requests,
            sealing,
            requests_uri,
        })
    }

    /// Publishes `item`'s full image (a new item, or a new image of a known one).
    pub fn refresh(&mut self, item: &str, fields: &[Field<'_>]) -> Result<(), ProviderError> {
        let p = self
            .core
            .prepare_refresh(item, fields, peregrine_agent::monotonic_ns())?;
        self.send(p)
    }

    /// Publishes the `fields` of `item` that changed; the item must have been refreshed.
    pub fn update(&mut self, item: &str, fields: &[Field<'_>]) -> Result<(), ProviderError> {
        let p = self
            .core
            .prepare_update(item, fields, peregrine_agent::monotonic_ns())?;
        self.send(p)
    }

    /// [`refresh`](Self::refresh) numbered `item_seq` by the application: the upstream's
    /// numbering of the item, so that two providers fed the same stream publish the same
    /// numbers and a distributor takes each message from whichever comes first (A/B feeds,
    /// docs/market-data.md). It must be after the item's last number; unnumbered messages
    /// follow on from it.
    pub fn refresh_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        item_seq: u32,
    ) -> Result<(), ProviderError> {
        let p = self.core.prepare_refresh_numbered(
            item,
            fields,
            peregrine_agent::monotonic_ns(),
            item_seq,
        )?;
        self.send(p)
    }

    /// [`update`](Self::update) numbered `item_seq` by the application (see
    /// [`refresh_numbered`](Self::refresh_numbered)).
    pub fn update_numbered(
        &mut self,
        item: &str,
        fields: &[Field<'_>],
        item_seq: u32,
    ) -> Result<(), ProviderError> {
        let p = self.core.prepare_update_numbered(
            item,
            fields,
            peregrine_agent::monotonic_ns(),
            item_seq,
        )?;
        self.send(p)
    }

    /// Publishes `item`'s state: `Stale` (its image is not to be trusted until the next
    /// refresh) or `Closed` (no more of it; a later refresh reopens it).
    pub fn status(
        &mut self,
        item: &str,
        state: ItemState,
        text: &str,
    ) -> Result<(), ProviderError> {
        let p = self.core.prepare_status(item, state, text)?;
        self.send(p)
    }

    /// [`refresh`](Self::refresh) with fields named as in the dictionary.
    pub fn refresh_named(
        &mut self,
        item: &str,
        fields: &[(&str, Value<'_>)],
    ) -> Result<(), ProviderError> {
        let fields = ProviderCore::fields_by_name(self.core.dictionary(), fields)?;
        self.refresh(item, &fields)
    }

    /// [`update`](Self::update) with fields named as in the dictionary.
    pub fn update_named(
        &mut self,
        item: &str,
        fields: &[(&str, Value<'_>)],
    ) -> Result<(), ProviderError> {
        let fields = ProviderCore::fields_by_name(self.core.dictionary(), fields)?;
        self.update(item, &fields)
    }

    fn send(&mut self, p: peregrine_md::provider::Prepared) -> Result<(), ProviderError> {
        match self.publisher.offer(self.core.message()) {
            Ok(_) => {
                self.core.commit(p);
                Ok(())
            }
            Err(OfferError::BackPressured) => Err(ProviderError::BackPressured),
            Err(e) => Err(ProviderError::Send(e)),
        }
    }

    /// The next post a client made to an item of this service (through a distributor): answer
    /// it with [`accept`](Self::accept), [`refuse`](Self::refuse) or
    /// [`publish_post`](Self::publish_post). Posts arrive in [`do_work`](Self::do_work).
    pub fn poll_post(&mut self) -> Option<Post> {
        self.core.poll_post()
    }

    /// Tells the poster its post was accepted (publishing it is the application's call).
    pub fn accept(&mut self, post: &Post) {
        self.core.ack(post, AckCode::Accepted, "");
        self.send_acks();
    }

    /// Tells the poster its post was refused, and why (at most 255 bytes).
    pub fn refuse(&mut self, post: &Post, why: &str) {
        self.core.ack(post, AckCode::Refused, why);
        self.send_acks();
    }

    /// The usual answer: publishes the post's fields (an UPDATE of its item, or a REFRESH for
    /// a post flagged as a full image) and accepts it; a post the provider cannot publish
    /// (an update of an item it has no image of, a field of the wrong type) is refused
    /// `invalid` with the reason, and one the backbone cannot take now `busy`.
    pub fn publish_post(&mut self, post: &Post) -> Result<(), ProviderError> {
        let fields = post.field_list();
        let sent = if post.refresh {
            self.refresh(&post.item, &fields)
        } else {
            self.update(&post.item, &fields)
        };
        match &sent {
            Ok(()) => self.core.ack(post, AckCode::Accepted, ""),
            Err(ProviderError::Refused(e)) => self.core.ack(post, AckCode::Invalid, &e.to_string()),
            Err(e) => self.core.ack(post, AckCode::Busy, &e.to_string()),
        }
        self.send_acks();
        sent
    }

    /// Sends the queued ACKs the backbone takes now (the rest on a later turn).
    fn send_acks(&mut self) -> usize {
        let mut sent = 0;
        while let Some(ack) = self.core.poll_ack() {
            if self.publisher.offer(ack).is_err() {
                break;
            }
            self.core.ack_sent();
            sent += 1;
        }
        if sent > 0 {
            let _ = self.publisher.flush();
        }
        sent
    }

    /// Reads image requests and posts, sends queued ACKs and up to [`REFRESH_BURST`] queued
    /// answers, flushes, and runs the publisher's timers (heartbeats, NAK repair). Returns the
    /// work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = peregrine_agent::monotonic_ns();
        let core = &mut self.core;
        let mut work = self
            .requests
            .poll(&mut |m| core.handle_request(m.payload, now), 256);
        while self.requests.next_event().is_some() {}
        work += self.send_acks();
        self.core.handle_timeout(now);
        for _ in 0..REFRESH_BURST {
            let Some(p) = self.core.prepare_solicited(now) else {
                break;
            };
            match self.publisher.offer(self.core.message()) {
                Ok(_) => {
                    self.core.commit(p);
                    work += 1;
                }
                Err(_) => {
                    // Back-pressure (or a failing send): answered on a later turn.
                    self.core.requeue(p);
                    break;
                }
            }
        }
        let _ = self.publisher.flush();
        work + self.publisher.do_work()
    }

    /// Sends what is batched now (normal mode batches small messages for a short while).
    pub fn flush(&mut self) -> Result<(), ProviderError> {
        self.publisher.flush().map_err(ProviderError::Send)
    }

    /// Closes the backbone session: distributors see the provider go (its items go stale).
    pub fn close(&mut self) {
        self.publisher.close();
    }

    pub fn counters(&self) -> ProviderCounters {
        self.core.counters()
    }

    /// How the backbone is sealed, for a start line.
    pub fn sealing(&self) -> &Sealing {
        &self.sealing
    }

    pub fn service(&self) -> &str {
        self.core.service()
    }

    /// The dictionary fields are checked against (and named by).
    pub fn dictionary(&self) -> &Dictionary {
        self.core.dictionary()
    }

    /// The backbone URI as opened (with its key's path when sealed).
    pub fn backbone_uri(&self) -> &str {
        self.publisher.uri()
    }

    pub fn requests_uri(&self) -> &str {
        &self.requests_uri
    }

    pub fn session_id(&self) -> u32 {
        self.publisher.session_id()
    }

    /// Solicited REFRESHes waiting to be sent.
    pub fn queued_refreshes(&self) -> usize {
        self.core.queued()
    }

    /// Every item and the `item_seq` of the last message sent of it (`None`: none yet).
    pub fn items(&self) -> impl Iterator<Item = (&str, Option<u32>)> + '_ {
        self.core.items()
    }

    /// The `item_seq` the item's next message will carry.
    pub fn item_seq(&self, item: &str) -> Option<u32> {
        self.core.item_seq(item)
    }
}
