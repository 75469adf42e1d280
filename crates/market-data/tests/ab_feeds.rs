//! A/B feeds through a real distributor (issue 31, item 3): two providers of one service,
//! numbering each item's messages alike, publish on one backbone; a consumer gets every
//! update once, in order, whichever provider's copy came first, and when one provider closes
//! nothing goes stale.

mod common;

use common::{backbone, bid, send, start};
use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_market_data::provider::Provider;
use peregrine_md::model::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const ITEMS: [&str; 2] = ["AAA.O", "BBB.O"];

/// What the consumer saw: per item, each update's (item_seq, bid); and every status.
#[derive(Default)]
struct Seen {
    updates: BTreeMap<String, Vec<(u32, i64)>>,
    images: usize,
    statuses: Vec<String>,
}

impl Seen {
    fn take(&mut self, e: &Event<'_>) {
        match e {
            Event::Refresh { .. } => self.images += 1,
            Event::Update {
                item,
                item_seq,
                fields,
                ..
            } => {
                let Some(Value::Price(p)) = fields.get(22) else {
                    panic!("an update without BID: {e:?}")
                };
                self.updates
                    .entry(item.to_string())
                    .or_default()
                    .push((*item_seq, p.mantissa));
            }
            Event::Status { item, text, .. } => self.statuses.push(format!("{item}: {text}")),
            Event::Gap { .. } | Event::Disconnected { .. } => panic!("{e:?}"),
            _ => {}
        }
    }

    fn count(&self) -> usize {
        self.updates.values().map(Vec::len).sum()
    }
}

/// Both providers publish updates `from..=to` of every item (item_seq k, bid 10000 + k), the
/// first of them in turn, while `cons` reads; returns once it has them all (20 s at most).
fn publish_both(
    provs: &mut [&mut Provider],
    cons: &mut Consumer,
    seen: &mut Seen,
    from: u32,
    to: u32,
) {
    let want = seen.count() + ITEMS.len() * (to - from + 1) as usize;
    for k in from..=to {
        for i in 0..provs.len() {
            let p = &mut *provs[(i + k as usize) % provs.len()];
            for item in ITEMS {
                send(p, |p| {
                    p.update_numbered(item, &bid(10_000 + i64::from(k)), k)
                });
            }
            p.do_work();
        }
        cons.poll(Duration::ZERO, &mut |e| seen.take(&e)).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(20);
    while seen.count() < want {
        assert!(
            Instant::now() < end,
            "received {} of {want} updates",
            seen.count()
        );
        for p in provs.iter_mut() {
            p.do_work();
        }
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
}

#[test]
fn two_providers_numbering_alike_are_one_stream_and_either_may_go() {
    let d = start(&backbone(0), "ab-feeds");
    let ctx = peregrine_market_data::Context::new();
    let mut a = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    let mut b = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    assert_ne!(a.session_id(), b.session_id());
    // B starts with the items in the other order: the two number their items differently.
    for item in ITEMS {
        send(&mut a, |p| p.refresh_numbered(item, &bid(10_000), 0));
    }
    for item in ITEMS.iter().rev() {
        send(&mut b, |p| p.refresh_numbered(item, &bid(10_000), 0));
    }
    let mut cons = Consumer::connect(&[d.addr.as_str()], "bob", b"bob-token").unwrap();
    cons.open("FEED1", &ITEMS).unwrap();
    let mut seen = Seen::default();
    let end = Instant::now() + Duration::from_secs(10);
    while seen.images < ITEMS.len() {
        assert!(Instant::now() < end, "no images");
        a.do_work();
        b.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
    // (A request may have reached the distributor before the images: "not in the cache yet".)
    seen.statuses.clear();

    publish_both(&mut [&mut a, &mut b], &mut cons, &mut seen, 1, 1000);
    // A goes: B alone carries on, nothing stale.
    a.close();
    let end = Instant::now() + Duration::from_secs(10);
    while !d
        .lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("other feed session(s) carry its items"))
    {
        assert!(Instant::now() < end, "{:?}", d.lines.lock().unwrap());
        b.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
    publish_both(&mut [&mut b], &mut cons, &mut seen, 1001, 1500);

    for item in ITEMS {
        let want: Vec<(u32, i64)> = (1..=1500).map(|k| (k, 10_000 + i64::from(k))).collect();
        assert_eq!(
            seen.updates[item], want,
            "{item}: every update once, in order"
        );
    }
    assert!(seen.statuses.is_empty(), "{:?}", seen.statuses);
    assert_eq!(seen.images, ITEMS.len(), "no image but the first");
}
