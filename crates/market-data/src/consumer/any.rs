//! [`AnyConsumer`]: one login or a warm standby pair, chosen at run time (by a command's
//! flag, a binding's argument), behind one set of calls.

use super::{Consumer, ConsumerError, Event, WarmStandby};
use std::time::Duration;

/// A consumer of one login (moving along its list of distributors on a loss), or a warm
/// standby pair. The calls both take are here; [`plain`](Self::plain) and
/// [`warm`](Self::warm) reach the rest.
///
/// ```no_run
/// use peregrine_market_data::consumer::{AnyConsumer, ConnectOptions, Consumer, WarmStandby};
/// use std::time::Duration;
///
/// let warm = std::env::args().any(|a| a == "--warm-standby");
/// let (a, b) = ("10.0.0.1:14500", "10.0.0.2:14500");
/// let mut c = if warm {
///     AnyConsumer::from(WarmStandby::connect(a, b, "alice", b"s3cret", ConnectOptions::default())?)
/// } else {
///     AnyConsumer::from(Consumer::connect_with(&[a, b], "alice", b"s3cret", ConnectOptions::default())?)
/// };
/// c.open("FEED1", &["AAA.O"])?;
/// c.poll(Duration::from_millis(100), &mut |e| println!("{e:?}"))?;
/// # Ok::<(), peregrine_market_data::ConsumerError>(())
/// ```
#[derive(Debug)]
pub enum AnyConsumer {
    One(Box<Consumer>),
    Warm(Box<WarmStandby>),
}

impl From<Consumer> for AnyConsumer {
    fn from(c: Consumer) -> Self {
        AnyConsumer::One(Box::new(c))
    }
}

impl From<WarmStandby> for AnyConsumer {
    fn from(w: WarmStandby) -> Self {
        AnyConsumer::Warm(Box::new(w))
    }
}

impl AnyConsumer {
    /// The login delivering now (its dictionary, counters, socket, round trip).
    pub fn active(&self) -> &Consumer {
        match self {
            AnyConsumer::One(c) => c,
            AnyConsumer::Warm(w) => w.active(),
        }
    }

    /// The login delivering now, to post through.
    pub fn active_mut(&mut self) -> &mut Consumer {
        match self {
            AnyConsumer::One(c) => c,
            AnyConsumer::Warm(w) => w.active_mut(),
        }
    }

    /// The consumer of one login, or None for a warm standby pair.
    pub fn plain(&mut self) -> Option<&mut Consumer> {
        match self {
            AnyConsumer::One(c) => Some(c),
            AnyConsumer::Warm(_) => None,
        }
    }

    /// The warm standby pair, or None for a consumer of one login.
    pub fn warm(&self) -> Option<&WarmStandby> {
        match self {
            AnyConsumer::One(_) => None,
            AnyConsumer::Warm(w) => Some(w),
        }
    }

    /// Opens `patterns` of `service` (see [`Consumer::open`]); returns the request's id.
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, None)
    }

    /// [`open`](Self::open) for the fields named `view` only, when given.
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: Option<&[&str]>,
    ) -> Result<u32, ConsumerError> {
        match self {
            AnyConsumer::One(c) => c.request(service, patterns, false, view),
            AnyConsumer::Warm(w) => w.request(service, patterns, view),
        }
    }

    /// [`open`](Self::open) for the fields `fids` only.
    pub fn open_view_ids(
        &mut self,
        service: &str,
        patterns: &[&str],
        fids: &[u16],
    ) -> Result<u32, ConsumerError> {
        match self {
            AnyConsumer::One(c) => c.open_view_ids(service, patterns, fids),
            AnyConsumer::Warm(w) => w.open_view_ids(service, patterns, fids),
        }
    }

    /// Closes a request.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        match self {
            AnyConsumer::One(c) => c.close(request),
            AnyConsumer::Warm(w) => w.close(request),
        }
    }

    /// Waits up to `timeout` for events and hands each to `handler` (see [`Consumer::poll`]
    /// and [`WarmStandby::poll`]).
    pub fn poll(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        match self {
            AnyConsumer::One(c) => c.poll(timeout, handler),
            AnyConsumer::Warm(w) => w.poll(timeout, handler),
        }
    }

    /// After data arrives, keep reading without blocking this long.
    pub fn set_busy_poll(&mut self, d: Duration) {
        match self {
            AnyConsumer::One(c) => c.set_busy_poll(d),
            AnyConsumer::Warm(w) => w.set_busy_poll(d),
        }
    }
}
