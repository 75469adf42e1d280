//! Warm standby through two real distributors (issue 31, item 3): a consumer logged in to
//! both, its requests paused on the standby; the active distributor stops (its sockets close,
//! as a killed process's do) and the standby is resumed: no item goes stale, no update is
//! missed (a changed item comes as a conflated refresh), and the stopped one's login comes back
//! as the standby when it returns.

mod common;

use common::{backbone, bid, send, start, start_on};
use peregrine_market_data::consumer::{ConnectOptions, Event, WarmStandby};
use peregrine_market_data::provider::Provider;
use peregrine_md::model::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const ITEMS: [&str; 2] = ["AAA.O", "BBB.O"];

/// Per item, what the application saw: (item_seq, bid, "R" refresh or "U" update).
#[derive(Default)]
struct Seen {
    items: BTreeMap<String, Vec<(u32, i64, char)>>,
    stale: Vec<String>,
    gaps: usize,
    disconnected: usize,
}

impl Seen {
    fn take(&mut self, e: &Event<'_>) {
        let (item, seq, fields, kind) = match e {
            Event::Refresh {
                item,
                item_seq,
                fields,
                ..
            } => (item, item_seq, fields, 'R'),
            Event::Update {
                item,
                item_seq,
                fields,
                ..
            } => (item, item_seq, fields, 'U'),
            Event::Status { item, text, .. } => return self.stale.push(format!("{item}: {text}")),
            Event::Gap { .. } => {
                self.gaps += 1;
                return;
            }
            Event::Disconnected { .. } => {
                self.disconnected += 1;
                return;
            }
            _ => return,
        };
        let Some(Value::Price(p)) = fields.get(22) else {
            panic!("no BID: {e:?}")
        };
        self.items
            .entry(item.to_string())
            .or_default()
            .push((*seq, p.mantissa, kind));
    }

    fn last(&self, item: &str) -> Option<(u32, i64, char)> {
        self.items.get(item)?.last().copied()
    }
}

/// Publishes updates `from..=to` of every item (bid 10000 + k) while the consumer reads, then
/// reads until every item's last bid arrived (20 s at most).
fn publish(prov: &mut Provider, cons: &mut WarmStandby, seen: &mut Seen, from: i64, to: i64) {
    for k in from..=to {
        for item in ITEMS {
            send(prov, |p| p.update(item, &bid(10_000 + k)));
        }
        prov.do_work();
        cons.poll(Duration::ZERO, &mut |e| seen.take(&e)).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(20);
    while !ITEMS
        .iter()
        .all(|i| seen.last(i).is_some_and(|(_, b, _)| b == 10_000 + to))
    {
        assert!(
            Instant::now() < end,
            "not every update arrived: {:?}",
            seen.items
        );
        prov.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
}

/// Polls until `cond` holds (10 s at most).
fn until(
    prov: &mut Provider,
    cons: &mut WarmStandby,
    seen: &mut Seen,
    what: &str,
    cond: impl Fn(&WarmStandby, &Seen) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond(cons, seen) {
        assert!(
            Instant::now() < end,
            "{what}: standing by {}, standby images {}, last {:?}, stale {:?}",
            cons.standing_by(),
            cons.standby_items(),
            ITEMS.map(|i| seen.last(i)),
            seen.stale
        );
        prov.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
}

#[test]
fn the_standby_takes_over_by_a_resume_with_nothing_stale_and_nothing_missed() {
    let bb = backbone(1);
    let first = start(&bb, "warm-first");
    let second = start(&bb, "warm-second");
    let ctx = peregrine_market_data::Context::new();
    let mut prov = Provider::open(&ctx, "FEED1", &bb).unwrap();
    for item in ITEMS {
        send(&mut prov, |p| p.refresh(item, &bid(10_000)));
    }
    let mut cons = WarmStandby::connect(
        &first.addr,
        &second.addr,
        "bob",
        b"bob-token",
        ConnectOptions::default(),
    )
    .unwrap();
    cons.open("FEED1", &ITEMS).unwrap();
    let mut seen = Seen::default();
    until(
        &mut prov,
        &mut cons,
        &mut seen,
        "images at the active and the standby",
        |c, s| s.items.len() == ITEMS.len() && c.standing_by(),
    );
    // (A request may reach a distributor before the images: "not in the cache yet".)
    seen.stale.clear();
    assert_eq!(cons.active_distributor().unwrap().to_string(), first.addr);
    assert_eq!(cons.standby_distributor().unwrap().to_string(), second.addr);

    publish(&mut prov, &mut cons, &mut seen, 1, 300);
    // The standby is paused: it was sent none of these updates.
    let first_addr = first.addr.clone();
    first.stop();
    publish(&mut prov, &mut cons, &mut seen, 301, 600);
    assert_eq!(cons.failovers(), 1);
    assert_eq!(cons.active_distributor().unwrap().to_string(), second.addr);
    assert_eq!(seen.disconnected, 1, "the lost connection is told");

    // The first comes back on its address: its login stands by; the second goes, and the
    // first takes over again.
    let first = start_on(&bb, "warm-first-again", &first_addr);
    until(
        &mut prov,
        &mut cons,
        &mut seen,
        "the first distributor's login standing by again",
        |c, _| {
            c.standby_distributor().map(|a| a.to_string()) == Some(first_addr.clone())
                && c.standing_by()
        },
    );
    let second_addr = second.addr.clone();
    second.stop();
    publish(&mut prov, &mut cons, &mut seen, 601, 900);
    assert_eq!(cons.failovers(), 2);
    assert_eq!(cons.active_distributor().unwrap().to_string(), first.addr);
    assert_eq!(seen.disconnected, 2);
    assert!(seen.stale.is_empty(), "{:?}", seen.stale);
    assert_eq!(seen.gaps, 0);
    for item in ITEMS {
        let got = &seen.items[item];
        // Item_seq only goes up, one at a time, but where a refresh stands for what changed
        // (the resume's image may be the one the application has: the same item_seq).
        for w in got.windows(2) {
            let ((a, _, _), (b, _, kind)) = (w[0], w[1]);
            assert!(
                b == a + 1 || (kind == 'R' && b >= a),
                "{item}: {a} then {b} ({kind})"
            );
        }
        // After each failover: at most one conflated image (what the standby's distributor
        // kept while paused, not passed on when the application had it), then updates.
        let refreshes = got.iter().filter(|(_, _, k)| *k == 'R').count();
        assert!((1..=3).contains(&refreshes), "{item}: {got:?}");
        assert_eq!(got.last().unwrap().1, 10_900);
    }
    let second = start_on(&bb, "warm-second-again", &second_addr);
    until(
        &mut prov,
        &mut cons,
        &mut seen,
        "the second standing by again",
        |c, _| c.standing_by() && c.standby_items() == ITEMS.len(),
    );

    // The provider goes: the service goes stale at both distributors, and the standby is told
    // too (a whole service's status passes a pause). A new provider's images come: the standby,
    // to which a distributor sends no image while it is paused, is resumed to get them, and
    // stands by again with every image.
    prov.close();
    until(
        &mut prov,
        &mut cons,
        &mut seen,
        "the service stale at the application and at the standby",
        |c, s| s.stale.len() == ITEMS.len() && !c.standing_by(),
    );
    let mut prov = Provider::open(&ctx, "FEED1", &bb).unwrap();
    for item in ITEMS {
        send(&mut prov, |p| p.refresh(item, &bid(20_000)));
    }
    until(
        &mut prov,
        &mut cons,
        &mut seen,
        "the standby standing by again with the new images",
        |c, s| {
            c.standing_by()
                && c.standby_items() == ITEMS.len()
                && ITEMS
                    .iter()
                    .all(|i| s.last(i).is_some_and(|(_, b, _)| b == 20_000))
        },
    );
    assert!(
        seen.stale.iter().all(|s| s.contains("feed went away")),
        "{:?}",
        seen.stale
    );
    drop(second);
}
