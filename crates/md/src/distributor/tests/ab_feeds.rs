//! A/B feeds on a virtual clock: two feeds of one service, numbering each item alike, the
//! distributor taking each message from whichever comes first (`feeds.rs`).

use super::*;

/// Feed A's and feed B's keys (their transport sessions), and their ids of AAA.O: the two
/// providers number their items differently.
const A: FeedKey = 0xA;
const B: FeedKey = 0xB;
const A_ID: u32 = 1;
const B_ID: u32 = 9;

impl Net {
    fn from(&mut self, feed: FeedKey, bytes: &[u8]) {
        self.now_ns += 1_000;
        let s = self.feed1();
        self.d.handle_feed_message(s, feed, bytes, self.now_ns);
        self.pump();
    }
}

/// Both feeds live with AAA.O at item_seq 1 (bid 1.00), and bob watching it.
fn bob_on_two_feeds() -> (Net, ClientId) {
    let mut net = Net::new();
    let s = net.feed1();
    net.d.feed_joined(s, A, true, net.now_ns);
    net.d.feed_joined(s, B, true, net.now_ns);
    net.from(A, &refresh(A_ID, "AAA.O", 1, 100));
    net.from(B, &refresh(B_ID, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    assert_eq!(
        net.take(b),
        ["REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100"]
    );
    assert_eq!(
        net.d.counters().refreshes_behind,
        0,
        "B's image was the same: repeated"
    );
    (net, b)
}

#[test]
fn each_update_is_delivered_once_from_whichever_feed_sends_it_first() {
    let (mut net, b) = bob_on_two_feeds();
    net.from(A, &update(A_ID, 2, 101));
    net.from(B, &update(B_ID, 2, 101));
    net.from(B, &update(B_ID, 3, 102));
    net.from(A, &update(A_ID, 3, 102));
    net.from(A, &update(A_ID, 4, 103));
    assert_eq!(
        net.take(b),
        [
            "UPDATE 1 seq=2 BID=1.01",
            "UPDATE 1 seq=3 BID=1.02",
            "UPDATE 1 seq=4 BID=1.03"
        ]
    );
    let c = net.d.counters();
    assert_eq!((c.updates_applied, c.updates_duplicate), (3, 2));
    assert_eq!((c.sequence_gaps, c.items_stale), (0, 0));
    assert!(net.image_requests.is_empty());
}

#[test]
fn a_feed_that_dies_makes_nothing_stale_while_the_other_lives() {
    let (mut net, b) = bob_on_two_feeds();
    let s = net.feed1();
    net.from(A, &update(A_ID, 2, 101));
    net.d.feed_left(s, A, net.now_ns);
    net.pump();
    net.from(B, &update(B_ID, 2, 101));
    net.from(B, &update(B_ID, 3, 102));
    assert_eq!(
        net.take(b),
        ["UPDATE 1 seq=2 BID=1.01", "UPDATE 1 seq=3 BID=1.02"]
    );
    assert_eq!(net.d.counters().items_stale, 0);
    assert!(net.image_requests.is_empty());
    assert_eq!(net.d.feeds_of(s).collect::<Vec<_>>(), [B]);
    // A restarted A (a new session) sends its start-up image: B's is as new, so nothing
    // changes, but A has its route back and its updates count again.
    let a2 = 0xA2;
    net.d.feed_joined(s, a2, true, net.now_ns);
    net.from(a2, &refresh(4, "AAA.O", 3, 102));
    net.from(a2, &update(4, 4, 103));
    net.from(B, &update(B_ID, 4, 103));
    assert_eq!(net.take(b), ["UPDATE 1 seq=4 BID=1.03"]);
    // The last feed gone: stale, as with one feed.
    net.d.feed_left(s, B, net.now_ns);
    net.d.feed_left(s, a2, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: the feed went away: waiting for it to come back"]
    );
}

#[test]
fn an_update_one_feed_skipped_is_taken_from_the_other() {
    let (mut net, b) = bob_on_two_feeds();
    // A lost item_seq 2 on its way: its 3 is ahead, and B has not sent 2 yet.
    net.from(A, &update(A_ID, 3, 102));
    assert_eq!(net.take(b), Vec::<String>::new());
    assert_eq!(net.d.counters().updates_ahead, 1);
    assert!(
        net.d.poll_timeout().is_some(),
        "the item waits for a deadline"
    );
    net.from(B, &update(B_ID, 2, 101));
    net.from(B, &update(B_ID, 3, 102));
    net.from(A, &update(A_ID, 4, 103));
    assert_eq!(
        net.take(b),
        [
            "UPDATE 1 seq=2 BID=1.01",
            "UPDATE 1 seq=3 BID=1.02",
            "UPDATE 1 seq=4 BID=1.03"
        ]
    );
    // The deadline passes with nothing missing: nothing happens.
    net.now_ns += net.d.config().feed_gap_window_ns;
    net.d.handle_timeout(net.now_ns);
    net.pump();
    assert_eq!(net.take(b), Vec::<String>::new());
    assert_eq!(net.d.counters().items_stale, 0);
}

#[test]
fn an_update_no_feed_sends_makes_the_item_stale_after_the_window() {
    let (mut net, b) = bob_on_two_feeds();
    net.from(A, &update(A_ID, 3, 102));
    net.now_ns += net.d.config().feed_gap_window_ns - 1;
    net.d.handle_timeout(net.now_ns);
    net.pump();
    assert_eq!(net.take(b), Vec::<String>::new(), "not before the window");
    net.now_ns += 1;
    net.d.handle_timeout(net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: missed an update (item_seq 2): no feed sent it"]
    );
    assert_eq!(net.image_requests.len(), 1);
    // The answer, from either feed, brings it back.
    net.from(B, &refresh(B_ID, "AAA.O", 3, 102));
    assert_eq!(net.take(b), ["REFRESH 1 AAA.O BID=1.02 BIDSIZE=100"]);
}

#[test]
fn a_gap_every_feed_went_past_is_stale_at_once() {
    let (mut net, b) = bob_on_two_feeds();
    net.from(A, &update(A_ID, 3, 102));
    net.from(B, &update(B_ID, 3, 102));
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: missed an update (item_seq 3, expected 2)"]
    );
    assert_eq!(net.image_requests.len(), 1);
}

#[test]
fn a_feed_that_leaves_while_another_waits_on_it_makes_the_gap_stale() {
    let (mut net, b) = bob_on_two_feeds();
    let s = net.feed1();
    net.from(A, &update(A_ID, 3, 102));
    net.d.feed_left(s, B, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: missed an update (item_seq 2): no feed sent it"]
    );
}

#[test]
fn a_loss_on_one_feed_is_covered_and_on_both_at_once_is_not() {
    let (mut net, b) = bob_on_two_feeds();
    let s = net.feed1();
    net.d.feed_lost(s, A, net.now_ns);
    net.pump();
    assert_eq!(net.take(b), Vec::<String>::new());
    assert_eq!(net.d.counters().feed_losses_covered, 1);
    assert!(net.image_requests.is_empty());
    // B loses too within the overlap: what both lost may be the same messages.
    net.now_ns += net.d.config().feed_loss_overlap_ns - 1;
    net.d.feed_lost(s, B, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: backbone loss: waiting for a fresh image"]
    );
    assert_eq!(net.image_requests[0].feed_item_id, 0, "every image");
    // Once the images are back, a loss long after the last is covered again.
    net.from(A, &refresh(A_ID, "AAA.O", 1, 100));
    net.take(b);
    net.now_ns += net.d.config().feed_loss_overlap_ns;
    net.d.feed_lost(s, A, net.now_ns);
    net.pump();
    assert_eq!(net.take(b), Vec::<String>::new());
    assert_eq!(net.d.counters().feed_losses_covered, 2);
}

#[test]
fn a_feed_gone_after_the_others_lost_messages_makes_the_service_stale() {
    let (mut net, b) = bob_on_two_feeds();
    let s = net.feed1();
    // B lost messages; A covered them. Then A dies: what B lost may have been only on A.
    net.d.feed_lost(s, B, net.now_ns);
    net.d.feed_left(s, A, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: backbone loss: waiting for a fresh image"]
    );
}

#[test]
fn an_older_refresh_changes_nothing_and_feeds_that_disagree_are_reported() {
    let (mut net, b) = bob_on_two_feeds();
    net.from(A, &update(A_ID, 2, 101));
    net.take(b);
    // B's image at item_seq 2 is another: not the same stream.
    net.from(B, &refresh(B_ID, "AAA.O", 2, 555));
    // B's image as of item_seq 1: older.
    net.from(B, &refresh(B_ID, "AAA.O", 1, 100));
    assert_eq!(net.take(b), Vec::<String>::new());
    let c = net.d.counters();
    assert_eq!((c.refreshes_behind, c.feed_disagreements), (2, 1));
    assert!(net.events.iter().any(|e| matches!(
        e,
        Event::FeedsDisagree { item, item_seq: 2, .. } if item == "AAA.O"
    )));
    // A newer image from either feed replaces it.
    net.from(B, &refresh(B_ID, "AAA.O", 5, 105));
    assert_eq!(net.take(b), ["REFRESH 1 AAA.O BID=1.05 BIDSIZE=100"]);
}

#[test]
fn a_feeds_stale_status_holds_only_while_no_other_feed_carries_the_item() {
    let (mut net, b) = bob_on_two_feeds();
    let status = |id: u32| {
        encode(&Message::Status(StatusRepr {
            item_id: id,
            request_id: 0,
            state: ItemState::Stale,
            service: FEED1,
            name: "AAA.O",
            text: "upstream down",
        }))
    };
    net.from(A, &status(A_ID));
    assert_eq!(net.take(b), Vec::<String>::new());
    assert_eq!(net.d.counters().statuses_covered, 1);
    net.from(B, &update(B_ID, 2, 101));
    assert_eq!(net.take(b), ["UPDATE 1 seq=2 BID=1.01"]);
    net.from(B, &status(B_ID));
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: upstream down"]
    );
}

#[test]
fn the_windows_are_validated_naming_the_key() {
    for (gap, overlap, key) in [
        (0, 5_000_000_000, "feed_gap_window_ms = 0"),
        (61_000_000_000, 5_000_000_000, "feed_gap_window_ms = 61000"),
        (100_000_000, 0, "feed_loss_overlap_ms = 0"),
    ] {
        let mut c = DistributorConfig::new(&[FEED1]);
        c.feed_gap_window_ns = gap;
        c.feed_loss_overlap_ns = overlap;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with(key), "{e}");
    }
}
