//! The feeds of each service, and the arbitration between them (A/B feeds).
//!
//! Two (or more) providers may publish one service: both fed the same stream, numbering each
//! item's messages with the same `item_seq` (the upstream's numbering, as an exchange's A and
//! B lines carry it). The distributor takes each item's messages from whichever feed comes
//! first, and a feed that dies or loses messages makes nothing stale while another feed
//! carries what it would have. The rules (docs/market-data.md, "A/B feeds"):
//!
//! - **Routes.** Each feed (one transport session) names items by its own ids; a feed's REFRESH
//!   of an item gives it a route to the item, with the `item_seq` of the last message of it the
//!   feed sent and whether the feed says the item is ok.
//! - **Updates.** An UPDATE `item_seq` one past the cache's is applied, whichever feed sent it.
//!   One at or before the cache's was delivered already by another feed, live or gone (a
//!   duplicate: dropped). One further ahead is dropped too while another feed has not yet
//!   passed the missing `item_seq` (it may still deliver it): the item waits at most
//!   `feed_gap_window_ns` for it, then goes stale and its image is asked for. When no other feed
//!   can deliver it (every other one passed it, or there is none) the gap is the cache's
//!   (stale, image asked for) at once.
//! - **Refreshes.** A REFRESH always gives its feed the route. When another feed routes the
//!   item, a REFRESH at or before the cache's `item_seq` changes nothing (with the same
//!   `item_seq` and another image, the feeds disagree: counted and reported); a newer one
//!   replaces the image. A feed alone always replaces it.
//! - **Statuses.** A feed's `stale` or `closed` of an item is applied when no other feed has an
//!   ok route to it; otherwise it is kept on the feed's route only.
//! - **Losses.** A feed's unrepaired loss is covered when another feed is live and has had no
//!   loss within `feed_loss_overlap_ns`: nothing goes stale. Otherwise the service goes stale
//!   and every image is asked for (the messages the loss held are unknown).
//! - **A feed gone.** Items no remaining feed has an ok route to go stale; when every remaining
//!   feed had a loss within `feed_loss_overlap_ns`, the whole service does.
//!
//! A service with one feed behaves as it always did (every message applies by the cache's
//! rules), but that an UPDATE the cache has passed is dropped as a duplicate rather than
//! taken for a gap: the feed that was ahead may have just gone. Memory: at most `max_items` routes per feed and `MAX_FEEDS` feeds per service; one
//! pending gap per item.

use super::cache::{Cache, ItemId};
use super::ServiceId;
use crate::model::ItemState;
use std::collections::{HashMap, HashSet, VecDeque};

/// A driver's name for one feed of a service: its transport session id (0 for a driver that
/// knows of one feed only).
pub type FeedKey = u32;

/// Feeds per service, at most: a session past it is not given routes (its messages are
/// counted and dropped).
pub const MAX_FEEDS: usize = 16;

/// One feed's route to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub item: ItemId,
    /// The `item_seq` of the last REFRESH or UPDATE of the item this feed sent.
    pub seq: u32,
    /// The feed's last word on the item was a REFRESH or UPDATE (not a `stale` or `closed`).
    pub ok: bool,
}

#[derive(Debug)]
struct Feed {
    key: FeedKey,
    /// By the feed's id of the item.
    routes: HashMap<u32, Route>,
    /// The feed's id of each item it routes.
    ids: HashMap<ItemId, u32>,
    /// When the transport last reported a loss on this feed.
    lost_at_ns: Option<u64>,
}

/// What to do with a feed's UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateVerdict {
    /// The feed's id names no item (or the feed is over [`MAX_FEEDS`]): ask for its image.
    Unknown,
    /// Apply it by the cache's rules (one past the cache's `item_seq`, or a gap no other feed
    /// can fill).
    Apply(ItemId),
    /// Another feed delivered it already: drop it.
    Duplicate(ItemId),
    /// Ahead of the cache while another feed may still deliver `needed`: drop it and wait.
    Ahead { item: ItemId, needed: u32 },
}

/// What to do with a feed's REFRESH of a known item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshVerdict {
    /// Replace the image.
    Apply,
    /// Another feed is as far or further: nothing changes.
    Behind,
    /// Another feed gave the same `item_seq` another image: nothing changes, and the
    /// disagreement is reported.
    Disagrees { item_seq: u32 },
}

/// A gap one feed showed that another may still fill.
#[derive(Debug, Clone, Copy)]
struct Gap {
    deadline_ns: u64,
    item: ItemId,
    needed: u32,
}

/// Every service's feeds and their routes.
#[derive(Debug)]
pub struct Feeds {
    services: Vec<Vec<Feed>>,
    max_routes: usize,
    gaps: VecDeque<Gap>,
    gap_items: HashSet<ItemId>,
}

/// `a` is after `b` in `item_seq`'s wrapping order.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Feeds {
    /// No feeds yet, for `services` services; at most `max_routes` routes per feed.
    pub fn new(services: usize, max_routes: usize) -> Feeds {
        Feeds {
            services: (0..services).map(|_| Vec::new()).collect(),
            max_routes,
            gaps: VecDeque::new(),
            gap_items: HashSet::new(),
        }
    }

    fn feeds(&self, service: ServiceId) -> &[Feed] {
        self.services
            .get(service.index())
            .map_or(&[][..], Vec::as_slice)
    }

    fn feed(&self, service: ServiceId, key: FeedKey) -> Option<&Feed> {
        self.feeds(service).iter().find(|f| f.key == key)
    }

    fn feed_mut(&mut self, service: ServiceId, key: FeedKey) -> Option<&mut Feed> {
        self.services
            .get_mut(service.index())?
            .iter_mut()
            .find(|f| f.key == key)
    }

    /// How many feeds of `service` are live.
    pub fn count(&self, service: ServiceId) -> usize {
        self.feeds(service).len()
    }

    /// The live feeds of `service`.
    pub fn keys(&self, service: ServiceId) -> impl Iterator<Item = FeedKey> + '_ {
        self.feeds(service).iter().map(|f| f.key)
    }

    /// A feed of `service` is live (its first message or its session's start). Returns false
    /// if it already was, or the service has [`MAX_FEEDS`].
    pub fn join(&mut self, service: ServiceId, key: FeedKey) -> bool {
        let Some(feeds) = self.services.get_mut(service.index()) else {
            return false;
        };
        if feeds.iter().any(|f| f.key == key) || feeds.len() >= MAX_FEEDS {
            return false;
        }
        feeds.push(Feed {
            key,
            routes: HashMap::new(),
            ids: HashMap::new(),
            lost_at_ns: None,
        });
        true
    }

    /// The feed is gone: its routes with it. Returns the items it routed, or None if it was
    /// not live.
    pub fn leave(&mut self, service: ServiceId, key: FeedKey) -> Option<Vec<ItemId>> {
        let feeds = self.services.get_mut(service.index())?;
        let at = feeds.iter().position(|f| f.key == key)?;
        let feed = feeds.swap_remove(at);
        let mut items: Vec<ItemId> = feed.ids.into_keys().collect();
        items.sort_unstable();
        Some(items)
    }

    /// Every feed of `service` is gone.
    pub fn leave_all(&mut self, service: ServiceId) {
        if let Some(feeds) = self.services.get_mut(service.index()) {
            feeds.clear();
        }
    }

    /// The feed's route named by its id `fid`.
    pub fn route(&self, service: ServiceId, key: FeedKey, fid: u32) -> Option<Route> {
        self.feed(service, key)?.routes.get(&fid).copied()
    }

    /// The feed's id of `item`.
    pub fn feed_id_of(&self, service: ServiceId, key: FeedKey, item: ItemId) -> Option<u32> {
        self.feed(service, key)?.ids.get(&item).copied()
    }

    /// The routes to `item` of the feeds other than `key`.
    fn others(
        &self,
        service: ServiceId,
        key: FeedKey,
        item: ItemId,
    ) -> impl Iterator<Item = Route> + '_ {
        self.feeds(service)
            .iter()
            .filter(move |f| f.key != key)
            .filter_map(move |f| f.routes.get(f.ids.get(&item)?).copied())
    }

    /// Some feed other than `key` has an ok route to `item`.
    pub fn other_ok(&self, service: ServiceId, key: FeedKey, item: ItemId) -> bool {
        self.others(service, key, item).any(|r| r.ok)
    }

    /// Gives the feed the route `fid` -> `item` (its REFRESH). False if the feed holds
    /// `max_routes` already (or is not live and cannot join).
    pub fn set_route(
        &mut self,
        service: ServiceId,
        key: FeedKey,
        fid: u32,
        item: ItemId,
        seq: u32,
    ) -> bool {
        self.join(service, key);
        let max = self.max_routes;
        let Some(feed) = self.feed_mut(service, key) else {
            return false;
        };
        if !feed.routes.contains_key(&fid) && feed.routes.len() >= max {
            return false;
        }
        // A feed renumbering within its session: the old names are dropped both ways.
        if let Some(old) = feed.routes.get(&fid).map(|r| r.item).filter(|&o| o != item) {
            feed.ids.remove(&old);
        }
        if let Some(old) = feed.ids.insert(item, fid).filter(|&o| o != fid) {
            feed.routes.remove(&old);
        }
        feed.routes.insert(
            fid,
            Route {
                item,
                seq,
                ok: true,
            },
        );
        true
    }

    /// The feed's `stale` or `closed` (`ok` false) of the item its id `fid` names.
    pub fn set_ok(&mut self, service: ServiceId, key: FeedKey, fid: u32, ok: bool) {
        if let Some(r) = self
            .feed_mut(service, key)
            .and_then(|f| f.routes.get_mut(&fid))
        {
            r.ok = ok;
        }
    }

    /// Judges a feed's UPDATE `item_seq` of its item `fid` against the cache, and records the
    /// feed's position.
    pub fn judge_update(
        &mut self,
        service: ServiceId,
        key: FeedKey,
        fid: u32,
        item_seq: u32,
        cache: &Cache,
    ) -> UpdateVerdict {
        let Some(route) = self
            .feed_mut(service, key)
            .and_then(|f| f.routes.get_mut(&fid))
        else {
            return UpdateVerdict::Unknown;
        };
        route.seq = item_seq;
        route.ok = true;
        let item = route.item;
        let Some(cached) = cache.get(item).filter(|i| i.state == ItemState::Ok) else {
            return UpdateVerdict::Apply(item);
        };
        let needed = cached.item_seq.wrapping_add(1);
        if item_seq == needed {
            UpdateVerdict::Apply(item)
        } else if !after(item_seq, cached.item_seq) {
            // Within a session a feed's messages come once, in order: one the cache has
            // passed came first from another feed (live, or gone since it got ahead).
            UpdateVerdict::Duplicate(item)
        } else if self
            .others(service, key, item)
            .any(|r| r.ok && after(needed, r.seq))
        {
            UpdateVerdict::Ahead { item, needed }
        } else {
            UpdateVerdict::Apply(item)
        }
    }

    /// Judges a feed's REFRESH (`item_seq`, the encoded `image`) of a known `item`.
    pub fn judge_refresh(
        &self,
        service: ServiceId,
        key: FeedKey,
        item: ItemId,
        item_seq: u32,
        image: &[u8],
        cache: &Cache,
    ) -> RefreshVerdict {
        let Some(cached) = cache.get(item).filter(|i| i.state == ItemState::Ok) else {
            return RefreshVerdict::Apply;
        };
        if !self.other_ok(service, key, item) || after(item_seq, cached.item_seq) {
            return RefreshVerdict::Apply;
        }
        if item_seq == cached.item_seq && image != cached.image() {
            RefreshVerdict::Disagrees { item_seq }
        } else {
            RefreshVerdict::Behind
        }
    }

    /// The transport reported a loss on feed `key` at `now_ns`. True if another live feed
    /// covers it: one with no loss within `overlap_ns`.
    pub fn lost(&mut self, service: ServiceId, key: FeedKey, now_ns: u64, overlap_ns: u64) -> bool {
        self.join(service, key);
        if let Some(f) = self.feed_mut(service, key) {
            f.lost_at_ns = Some(now_ns);
        }
        self.feeds(service)
            .iter()
            .filter(|f| f.key != key)
            .any(|f| clean(f, now_ns, overlap_ns))
    }

    /// Every live feed of `service` had a loss within `overlap_ns` of `now_ns` (none is
    /// clean enough to cover the others' losses). False when no feed is live.
    pub fn all_lossy(&self, service: ServiceId, now_ns: u64, overlap_ns: u64) -> bool {
        let feeds = self.feeds(service);
        !feeds.is_empty() && !feeds.iter().any(|f| clean(f, now_ns, overlap_ns))
    }

    /// Remembers that `item` waits for `needed` until `deadline_ns` (once per item).
    pub fn wait_for(&mut self, item: ItemId, needed: u32, deadline_ns: u64) {
        if self.gap_items.insert(item) {
            self.gaps.push_back(Gap {
                deadline_ns,
                item,
                needed,
            });
        }
    }

    /// The earliest deadline of a waiting gap.
    pub fn next_deadline(&self) -> Option<u64> {
        self.gaps.front().map(|g| g.deadline_ns)
    }

    /// The gaps whose deadline passed at `now_ns` (all of them with `all`) and that the
    /// cache still misses: each item and the `item_seq` it waited for.
    pub fn expired(&mut self, now_ns: u64, all: bool, cache: &Cache) -> Vec<(ItemId, u32)> {
        let mut out = Vec::new();
        while let Some(g) = self.gaps.front().copied() {
            if !all && g.deadline_ns > now_ns {
                break;
            }
            self.gaps.pop_front();
            self.gap_items.remove(&g.item);
            let missing = cache
                .get(g.item)
                .is_some_and(|i| i.state == ItemState::Ok && after(g.needed, i.item_seq));
            if missing {
                out.push((g.item, g.needed));
            }
        }
        out
    }
}

fn clean(f: &Feed, now_ns: u64, overlap_ns: u64) -> bool {
    f.lost_at_ns
        .is_none_or(|t| now_ns.saturating_sub(t) >= overlap_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: ServiceId = ServiceId(0);

    #[test]
    fn item_seq_order_wraps() {
        assert!(after(1, 0));
        assert!(!after(0, 0));
        assert!(!after(0, 1));
        assert!(after(0, u32::MAX));
        assert!(after(5, u32::MAX - 5));
    }

    #[test]
    fn routes_are_per_feed_and_renumbering_drops_the_old_names() {
        let mut f = Feeds::new(1, 10);
        assert!(f.set_route(S, 7, 1, 100, 0));
        assert!(f.set_route(S, 9, 5, 100, 0));
        assert_eq!(f.route(S, 7, 1).map(|r| r.item), Some(100));
        assert_eq!(f.route(S, 9, 5).map(|r| r.item), Some(100));
        assert_eq!(f.route(S, 7, 5), None);
        assert!(f.other_ok(S, 7, 100));
        // Feed 7 names item 100 by 2 now: 1 is forgotten.
        assert!(f.set_route(S, 7, 2, 100, 3));
        assert_eq!(f.route(S, 7, 1), None);
        assert_eq!(f.feed_id_of(S, 7, 100), Some(2));
        // And 2 names item 200: item 100 has no route from feed 7.
        assert!(f.set_route(S, 7, 2, 200, 0));
        assert_eq!(f.feed_id_of(S, 7, 100), None);
        f.set_ok(S, 9, 5, false);
        assert!(!f.other_ok(S, 7, 100));
        assert_eq!(f.leave(S, 9), Some(vec![100]));
        assert_eq!(f.leave(S, 9), None);
        assert_eq!(f.count(S), 1);
    }

    #[test]
    fn routes_and_feeds_are_bounded() {
        let mut f = Feeds::new(1, 2);
        assert!(f.set_route(S, 1, 1, 1, 0));
        assert!(f.set_route(S, 1, 2, 2, 0));
        assert!(!f.set_route(S, 1, 3, 3, 0));
        assert!(f.set_route(S, 1, 2, 2, 9), "a known id may be routed again");
        for k in 2..=MAX_FEEDS as u32 {
            assert!(f.join(S, k));
        }
        assert!(!f.join(S, 1000));
        assert!(!f.set_route(S, 1000, 1, 1, 0));
        assert_eq!(f.count(S), MAX_FEEDS);
    }

    #[test]
    fn a_loss_is_covered_only_by_a_feed_without_one_lately() {
        let mut f = Feeds::new(1, 10);
        assert!(!f.lost(S, 1, 1_000, 500), "alone: nobody covers it");
        f.join(S, 2);
        assert!(f.lost(S, 1, 1_100, 500), "feed 2 had no loss");
        assert!(!f.lost(S, 2, 1_200, 500), "feed 1 lost 100 ns ago");
        assert!(f.all_lossy(S, 1_300, 500));
        assert!(f.lost(S, 2, 1_700, 500), "feed 1's loss is 600 ns old");
        assert!(!f.all_lossy(S, 2_200, 500));
    }
}
