//! Warm standby (RTSDK's warm standby): two logins, one watchlist. The *active* consumer
//! delivers; the *standby*, logged in to another distributor, holds the same requests open and
//! paused (the distributor keeps each item's latest state, sends nothing). A request is paused
//! on the standby once the standby has the image of every item the active has of it: a
//! distributor withholds from a paused request even an item's first image, and one that has
//! just started has none to give at the standby's login. An item going stale at the standby
//! (a backbone loss at its distributor) resumes its requests until the images are back. When
//! the active
//! connection is lost, the standby is resumed (one REFRESH flagged `conflated` per item that
//! changed since it was paused, then its updates) and becomes the active: failing over is a
//! RESUME on a connection already logged in, not a reconnection, a login and a re-open. The
//! old active reconnects to its own distributor with back-off and, once back, stands by,
//! paused.
//!
//! What the application sees of a failover: the lost connection's `Disconnected` event, then
//! the new active's refreshes and updates. The lost connection's `stale` statuses are passed on
//! only for items the standby had no current image of (those stay stale until an image comes);
//! an item the standby carries needs none: its image at the application is as current as the
//! standby's distributor, and a change it missed comes as a refresh. The standby's
//! distributor may be a little behind the lost one: until an item's messages from the new
//! active pass the `item_seq` the application last got, the resume's older image and the
//! updates it already had are not passed on again (`duplicates_dropped`); an image the
//! provider publishes anew (not the resume's) always is.
//!
//! ```no_run
//! use peregrine_market_data::consumer::{ConnectOptions, Event, WarmStandby};
//! use std::time::Duration;
//!
//! let mut c = WarmStandby::connect(
//!     "10.0.0.1:14500", "10.0.0.2:14500", "alice", b"s3cret", ConnectOptions::default(),
//! )?;
//! c.open("FEED1", &["AAA.O", "BBB.*"])?;
//! loop {
//!     c.poll(Duration::from_millis(100), &mut |e| {
//!         if let Event::Update { item, .. } = e {
//!             println!("{item}");
//!         }
//!     })?;
//! }
//! # Ok::<(), peregrine_market_data::ConsumerError>(())
//! ```

use super::{ConnectOptions, Consumer, ConsumerError, Event};
use peregrine_md::consumer::CONNECTION_LOST;
use peregrine_md::model::ItemState;
// FxHash: the item names are looked up on every event the active login delivers (as the
// provider core does for its names); they come from the distributor the consumer trusts.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::net::SocketAddr;
use std::time::Duration;

/// A consumer with a warm standby: see the module's documentation.
#[derive(Debug)]
pub struct WarmStandby {
    /// Each bound to one distributor.
    consumers: [Consumer; 2],
    active: usize,
    /// Items the standby has a current image of (a refresh, and no status since).
    standby_ok: HashSet<String>,
    /// The open requests, and those not yet paused on the standby.
    requests: Vec<u32>,
    unpaused: HashSet<u32>,
    /// The items each request has delivered to the application.
    active_items: HashMap<u32, HashSet<String>>,
    /// The `item_seq` of the last refresh or update of each item passed to the application.
    delivered: HashMap<String, u32>,
    /// After a failover: items whose messages from the new active have not yet passed what
    /// the application got (`delivered` as it was).
    catching_up: HashMap<String, u32>,
    failovers: u64,
    duplicates_dropped: u64,
}

impl WarmStandby {
    /// Logs in to `active` (waiting for it as [`Consumer::connect_with`] does) and to
    /// `standby` (in the background: it stands by once logged in, and retries with back-off
    /// until then).
    pub fn connect(
        active: &str,
        standby: &str,
        user: &str,
        token: &[u8],
        options: ConnectOptions,
    ) -> Result<WarmStandby, ConsumerError> {
        let first = Consumer::connect_with(&[active], user, token, options.clone())?;
        let second = Consumer::new_with(&[standby], user, token, options)?;
        Ok(WarmStandby {
            consumers: [first, second],
            active: 0,
            standby_ok: HashSet::default(),
            requests: Vec::new(),
            unpaused: HashSet::default(),
            active_items: HashMap::default(),
            delivered: HashMap::default(),
            catching_up: HashMap::default(),
            failovers: 0,
            duplicates_dropped: 0,
        })
    }

    fn both(
        &mut self,
        mut f: impl FnMut(&mut Consumer) -> Result<u32, ConsumerError>,
    ) -> Result<u32, ConsumerError> {
        let a = f(&mut self.consumers[self.active])?;
        let b = f(&mut self.consumers[1 - self.active])?;
        // Both were given the same requests in the same order: they number them alike.
        debug_assert_eq!(a, b, "request ids differ between the two logins");
        Ok(a)
    }

    /// Opens `patterns` of `service` on both logins (paused on the standby once it has their
    /// images); returns the request's id.
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, None)
    }

    /// [`open`](Self::open) for the fields named `view` only.
    pub fn open_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[&str],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, Some(view))
    }

    /// [`open`](Self::open), or [`open_view`](Self::open_view) with `view`.
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: Option<&[&str]>,
    ) -> Result<u32, ConsumerError> {
        let id = self.both(|c| c.request(service, patterns, false, view))?;
        Ok(self.track(id))
    }

    /// [`open`](Self::open) for the fields `fids` only (by field id, as
    /// [`Consumer::open_view_ids`]).
    pub fn open_view_ids(
        &mut self,
        service: &str,
        patterns: &[&str],
        fids: &[u16],
    ) -> Result<u32, ConsumerError> {
        let id = self.both(|c| c.open_view_ids(service, patterns, fids))?;
        Ok(self.track(id))
    }

    /// A request opened on both logins: paused on the standby once it has its images.
    fn track(&mut self, id: u32) -> u32 {
        self.requests.push(id);
        self.unpaused.insert(id);
        id
    }

    /// Closes a request on both logins.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.both(|c| c.close(request).map(|()| request))?;
        self.requests.retain(|&r| r != request);
        self.unpaused.remove(&request);
        self.active_items.remove(&request);
        Ok(())
    }

    /// The distributor delivering now (`None` while the active login is not connected).
    pub fn active_distributor(&self) -> Option<SocketAddr> {
        self.consumers[self.active].distributor()
    }

    /// The standby's distributor, when it is connected.
    pub fn standby_distributor(&self) -> Option<SocketAddr> {
        self.consumers[1 - self.active].distributor()
    }

    /// The standby is logged in and has a current image of `n` items.
    pub fn standby_items(&self) -> usize {
        self.standby_ok.len()
    }

    /// The standby is logged in, with every request paused (it has every image the active
    /// has): a failover now is a RESUME that passes no item on stale.
    pub fn standing_by(&self) -> bool {
        self.consumers[1 - self.active].is_logged_in() && self.unpaused.is_empty()
    }

    /// How many times the standby took over.
    pub fn failovers(&self) -> u64 {
        self.failovers
    }

    /// Messages of a new active not passed on because the application had them already.
    pub fn duplicates_dropped(&self) -> u64 {
        self.duplicates_dropped
    }

    /// After data arrives, both logins keep reading without blocking this long.
    pub fn set_busy_poll(&mut self, d: Duration) {
        for c in &mut self.consumers {
            c.set_busy_poll(d);
        }
    }

    /// The active login (for its counters, dictionary, socket).
    pub fn active(&self) -> &Consumer {
        &self.consumers[self.active]
    }

    /// The active login, to post through.
    pub fn active_mut(&mut self) -> &mut Consumer {
        &mut self.consumers[self.active]
    }

    /// Waits up to `timeout` for the active login's messages and hands each event to
    /// `handler`; reads the standby's without waiting (keeping its liveness and its record of
    /// which items it has). Fails over when the active connection is lost.
    pub fn poll(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        let mut lost = false;
        let (active, standby) = (self.active, 1 - self.active);
        let standby_ok = &self.standby_ok;
        let delivered = &mut self.delivered;
        let catching_up = &mut self.catching_up;
        let active_items = &mut self.active_items;
        let dropped = &mut self.duplicates_dropped;
        let n = self.consumers[self.active].poll(timeout, &mut |e| {
            match &e {
                Event::Status {
                    item,
                    state: ItemState::Stale,
                    text,
                    request: 0,
                } if text.starts_with(CONNECTION_LOST) && standby_ok.contains(*item) => return,
                Event::Disconnected { .. } => lost = true,
                // Each login has one address: the event names the pair's (0 or 1).
                Event::LoggedIn { .. } => {
                    return handler(Event::LoggedIn { address: active });
                }
                Event::Refresh {
                    item,
                    item_seq,
                    snapshot: false,
                    request,
                    ..
                }
                | Event::Update {
                    item,
                    item_seq,
                    request,
                    ..
                } => {
                    let refresh = matches!(e, Event::Refresh { .. });
                    // The resume's images are flagged conflated; any other image is new (a
                    // provider that restarted numbers from 0 again): it always passes.
                    let resumed = matches!(
                        e,
                        Event::Refresh {
                            conflated: true,
                            ..
                        }
                    );
                    if refresh {
                        let items = active_items.entry(*request).or_default();
                        if !items.contains(*item) {
                            items.insert(item.to_string());
                        }
                    }
                    if let Some(&had) = catching_up.get(*item) {
                        // An older image, or an update the application has: not again.
                        let behind = (item_seq.wrapping_sub(had) as i32) < i32::from(refresh);
                        if behind && (resumed || !refresh) {
                            *dropped += 1;
                            return;
                        }
                        catching_up.remove(*item);
                    }
                    match delivered.get_mut(*item) {
                        Some(s) => *s = *item_seq,
                        None => {
                            delivered.insert(item.to_string(), *item_seq);
                        }
                    }
                }
                _ => {}
            }
            handler(e);
        })?;
        if lost {
            self.fail_over()?;
        }
        // With no active login (lost while the standby was not logged in), the standby's
        // events are the application's: its images answer the requests it re-opens at login,
        // and it takes over once logged in.
        let forward = !self.consumers[self.active].is_logged_in();
        let ok = &mut self.standby_ok;
        let mut standby_lost = false;
        let mut standby_stale = false;
        let m = self.consumers[1 - self.active].poll(Duration::ZERO, &mut |e| {
            match &e {
                Event::Refresh {
                    item,
                    snapshot: false,
                    ..
                } => {
                    ok.insert(item.to_string());
                }
                Event::Status { item, state, .. } if *state != ItemState::Ok => {
                    ok.remove(*item);
                    standby_stale = true;
                }
                Event::Disconnected { .. } => {
                    ok.clear();
                    standby_lost = true;
                    return;
                }
                Event::LoggedIn { .. } => {
                    if forward {
                        handler(Event::LoggedIn { address: standby });
                    }
                    return;
                }
                _ => {}
            }
            if forward {
                handler(e);
            }
        })?;
        if forward && self.consumers[1 - self.active].is_logged_in() {
            self.fail_over()?;
        }
        if standby_lost || (standby_stale && self.unpaused.len() < self.requests.len()) {
            self.stand_by_anew()?;
        }
        self.pause_imaged()?;
        Ok(n + if forward { m } else { 0 })
    }

    /// The standby's login is lost, or items went stale at its distributor (a backbone loss
    /// there): its requests go back unpaused (so that the next login, or the distributor once
    /// it has them again, sends the images), to be paused again once it has them.
    fn stand_by_anew(&mut self) -> Result<(), ConsumerError> {
        self.consumers[1 - self.active].resume(0)?;
        self.unpaused.extend(self.requests.iter().copied());
        Ok(())
    }

    /// Pauses on the standby each request whose items (as the active delivered them) the
    /// standby all has images of.
    fn pause_imaged(&mut self) -> Result<(), ConsumerError> {
        if self.unpaused.is_empty() || !self.consumers[1 - self.active].is_logged_in() {
            return Ok(());
        }
        let ready: Vec<u32> = self
            .unpaused
            .iter()
            .copied()
            .filter(|r| {
                self.active_items
                    .get(r)
                    .is_some_and(|items| items.iter().all(|i| self.standby_ok.contains(i)))
            })
            .collect();
        for r in ready {
            self.consumers[1 - self.active].pause(r)?;
            self.unpaused.remove(&r);
        }
        Ok(())
    }

    /// The standby becomes the active: resumed; the old active (reconnecting) will stand by,
    /// paused, once back.
    fn fail_over(&mut self) -> Result<(), ConsumerError> {
        let standby = 1 - self.active;
        if !self.consumers[standby].is_logged_in() {
            // No standby logged in: the first of the two to log in takes over.
            return Ok(());
        }
        self.consumers[standby].resume(0)?;
        self.active = standby;
        self.standby_ok.clear();
        // The old active stands by once it is back and has the images.
        self.stand_by_anew()?;
        self.catching_up.clone_from(&self.delivered);
        self.failovers += 1;
        Ok(())
    }
}
