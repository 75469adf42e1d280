//! The consumer API's requests by field name through a real distributor: a consumer made with
//! `Consumer::new` (it connects on its first poll), a dictionary of the application's own, an
//! `open_view` that gets only its fields and a `snapshot_view` answered once and closed.

mod common;

use common::{backbone, send, start};
use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_market_data::provider::Provider;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Field, ItemState, Value};
use std::time::{Duration, Instant};

/// One image as the consumer saw it: its request, whether it answers a snapshot, its fields.
#[derive(Debug, PartialEq)]
struct Image {
    request: u32,
    snapshot: bool,
    fids: Vec<u16>,
}

#[test]
fn views_and_snapshots_by_field_name_get_only_their_fields() {
    let d = start(&backbone(0), "requests");
    let ctx = peregrine_market_data::Context::new();
    let mut prov = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    assert_eq!(prov.service(), "FEED1");
    let dict = Dictionary::builtin();
    let fid = |name: &str| dict.by_name(name).unwrap().fid;
    let (bid, ask) = (fid("BID"), fid("ASK"));
    let image = [
        Field::new(bid, Value::price(10_000, -2)),
        Field::new(ask, Value::price(10_010, -2)),
    ];
    send(&mut prov, |p| p.refresh("AAA.O", &image));

    // Connects on its first poll; names are read through the dictionary set here.
    let mut cons = Consumer::new(&[d.addr.as_str()], "bob", b"bob-token").unwrap();
    cons.set_dictionary(Dictionary::builtin());
    let viewed = cons.open_view("FEED1", &["AAA.O"], &["BID"]).unwrap();
    let snapped = cons.snapshot_view("FEED1", &["AAA.O"], &["ASK"]).unwrap();
    assert_ne!(viewed, snapped);

    let mut images = Vec::new();
    let mut snapshot_closed = false;
    let end = Instant::now() + Duration::from_secs(10);
    while images.len() < 2 || !snapshot_closed {
        assert!(
            Instant::now() < end,
            "images {images:?}, snapshot closed {snapshot_closed}"
        );
        prov.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| match e {
            Event::Refresh {
                request,
                snapshot,
                fields,
                ..
            } => images.push(Image {
                request,
                snapshot,
                fids: fields.iter().map(|f| f.fid).collect(),
            }),
            Event::Status {
                item: "",
                state: ItemState::Closed,
                request,
                ..
            } if request == snapped => snapshot_closed = true,
            _ => {}
        })
        .unwrap();
    }
    images.sort_by_key(|i| i.request);
    assert_eq!(
        images,
        [
            Image {
                request: viewed,
                snapshot: false,
                fids: vec![bid],
            },
            Image {
                request: snapped,
                snapshot: true,
                fids: vec![ask],
            },
        ]
    );
}
