//! The provider's core on a virtual clock: images kept and merged, item_seq, bad input refused
//! with nothing kept, image requests coalesced and bounded.

use super::*;
use crate::codec::{refresh_flags, FieldList, ImageRequestRepr, Message};
use crate::model::{Price, Value};

const SEC: u64 = 1_000_000_000;

fn bid(m: i64) -> Field<'static> {
    Field::new(
        22,
        Value::Price(Price {
            mantissa: m,
            exponent: -2,
        }),
    )
}

fn size(v: i64) -> Field<'static> {
    Field::new(30, Value::Int(v))
}

fn core() -> ProviderCore {
    ProviderCore::new(ProviderConfig::new("FEED1")).unwrap()
}

/// Prepares and commits (the transport took the bytes); returns them.
fn send(
    p: &mut ProviderCore,
    prepare: impl FnOnce(&mut ProviderCore) -> Result<Prepared, ProvideError>,
) -> Vec<u8> {
    let prepared = prepare(p).unwrap();
    let bytes = p.message().to_vec();
    p.commit(prepared);
    bytes
}

fn request(item_id: u32) -> Vec<u8> {
    let mut b = Vec::new();
    Message::ImageRequest(ImageRequestRepr {
        item_id,
        request_id: 9,
    })
    .emit_to_vec(&mut b);
    b
}

/// Every solicited REFRESH the core has queued, sent: (name, item_seq, fields as (fid, text)).
/// A solicited REFRESH as sent: (name, item_seq, fields as (fid, text)).
type Answer = (String, u32, Vec<(u16, String)>);

fn drain(p: &mut ProviderCore, now_ns: u64) -> Vec<Answer> {
    let mut out = Vec::new();
    while let Some(prep) = p.prepare_solicited(now_ns) {
        let Message::Refresh(r) = Message::parse(p.message()).unwrap() else {
            panic!("not a refresh")
        };
        assert_eq!(r.flags, refresh_flags::SOLICITED);
        let fields = r
            .fields
            .iter()
            .map(|f| (f.fid, format!("{:?}", f.value)))
            .collect();
        out.push((r.name.to_string(), r.item_seq, fields));
        p.commit(prep);
    }
    out
}

#[test]
fn refreshes_and_updates_are_numbered_per_item_and_the_image_follows_the_updates() {
    let mut p = core();
    let b = send(&mut p, |p| {
        p.prepare_refresh("AAA.O", &[bid(100), size(3)], 5)
    });
    let Message::Refresh(r) = Message::parse(&b).unwrap() else {
        panic!()
    };
    assert_eq!(
        (
            r.item_id,
            r.item_seq,
            r.flags,
            r.service,
            r.name,
            r.timestamp_ns
        ),
        (1, 0, 0, "FEED1", "AAA.O", 5)
    );
    send(&mut p, |p| p.prepare_refresh("BBB.O", &[bid(7)], 6));
    let b = send(&mut p, |p| p.prepare_update("AAA.O", &[bid(101)], 7));
    let Message::Update(u) = Message::parse(&b).unwrap() else {
        panic!()
    };
    assert_eq!((u.item_id, u.item_seq, u.timestamp_ns), (1, 1, 7));
    assert_eq!(u.fields.get(22), Some(bid(101).value));
    // A new field appended, an existing one replaced.
    send(&mut p, |p| {
        p.prepare_update("AAA.O", &[Field::new(31, Value::Int(9)), size(4)], 8)
    });
    assert_eq!(p.item_seq("AAA.O"), Some(3));
    assert_eq!(p.item_seq("BBB.O"), Some(1));

    p.handle_request(&request(1), 10);
    let answers = drain(&mut p, 11);
    assert_eq!(answers.len(), 1);
    let (name, seq, fields) = &answers[0];
    // The image as of the last update (item_seq 2), numbered as it.
    assert_eq!((name.as_str(), *seq), ("AAA.O", 2));
    let fids: Vec<u16> = fields.iter().map(|f| f.0).collect();
    assert_eq!(fids, [22, 30, 31]);
    assert_eq!(fields[0].1, format!("{:?}", bid(101).value));
    assert_eq!(fields[1].1, format!("{:?}", Value::Int(4)));
    assert_eq!(
        p.item_seq("AAA.O"),
        Some(3),
        "a solicited image takes no item_seq of its own"
    );
    let items: Vec<_> = p.items().collect();
    assert_eq!(items, [("AAA.O", Some(2)), ("BBB.O", Some(0))]);
    let c = p.counters();
    assert_eq!((c.refreshes, c.solicited_refreshes, c.updates), (3, 1, 2));
}

#[test]
fn bad_input_is_refused_naming_the_value_and_nothing_is_kept() {
    let mut p = core();
    let e = p.prepare_update("AAA.O", &[bid(1)], 1).unwrap_err();
    assert_eq!(
        e,
        ProvideError::UpdateBeforeRefresh {
            item: "AAA.O".into()
        }
    );
    assert!(e.to_string().contains("refresh"), "{e}");
    let e = p.prepare_refresh("AAA O", &[bid(1)], 1).unwrap_err();
    assert!(
        matches!(e, ProvideError::BadItemName { .. }) && e.to_string().contains("\"AAA O\""),
        "{e}"
    );
    // BID is a price in the dictionary.
    let e = p
        .prepare_refresh("AAA.O", &[Field::new(22, Value::Int(5))], 1)
        .unwrap_err();
    assert!(
        e.to_string().contains("BID") && e.to_string().contains("price"),
        "{e}"
    );
    let e = p
        .prepare_refresh("AAA.O", &[bid(1), bid(2)], 1)
        .unwrap_err();
    assert!(matches!(e, ProvideError::BadFields { .. }), "{e}");
    let e = ProviderCore::fields_by_name(p.dictionary(), &[("NOPE", Value::Int(1))]).unwrap_err();
    assert!(e.to_string().contains("NOPE"), "{e}");
    let e = p.prepare_status("AAA.O", ItemState::Ok, "").unwrap_err();
    assert!(matches!(e, ProvideError::BadStatus { .. }), "{e}");
    assert!(ProviderCore::new(ProviderConfig::new("FEED 1")).is_err());
    assert!(p.is_empty());
    assert_eq!(p.len(), 0);
    assert_eq!(p.counters(), ProviderCounters::default());

    // Prepared but never committed (the transport refused it): nothing changes.
    let _ = p.prepare_refresh("AAA.O", &[bid(1)], 1).unwrap();
    assert!(p.is_empty() && p.item_seq("AAA.O").is_none());
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 1));
    let _ = p.prepare_update("AAA.O", &[bid(2)], 2).unwrap();
    assert_eq!(p.item_seq("AAA.O"), Some(1));
    p.handle_request(&request(1), 3);
    let answers = drain(&mut p, 4);
    assert_eq!(answers[0].2[0].1, format!("{:?}", bid(1).value));
}

#[test]
fn a_closed_item_takes_no_update_until_it_is_refreshed_again() {
    let mut p = core();
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 1));
    let b = send(&mut p, |p| {
        p.prepare_status("AAA.O", ItemState::Closed, "halted")
    });
    let Message::Status(s) = Message::parse(&b).unwrap() else {
        panic!()
    };
    assert_eq!(
        (s.item_id, s.state, s.name, s.text),
        (1, ItemState::Closed, "AAA.O", "halted")
    );
    assert!(p.prepare_update("AAA.O", &[bid(2)], 2).is_err());
    p.handle_request(&request(1), 3);
    assert!(drain(&mut p, 3).is_empty(), "no image to answer with");
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(3)], 4));
    send(&mut p, |p| p.prepare_update("AAA.O", &[bid(4)], 5));
    assert_eq!(p.item_seq("AAA.O"), Some(3));
}

#[test]
fn a_refresh_the_application_publishes_answers_a_queued_request() {
    let mut p = core();
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 1));
    p.handle_request(&request(1), 2);
    p.handle_request(&request(1), 2);
    assert_eq!(p.counters().requests_coalesced, 1);
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(2)], 3));
    assert!(drain(&mut p, 4).is_empty(), "one image, not two");
}

#[test]
fn a_flood_of_image_requests_sends_one_full_cycle_per_interval() {
    let mut p = core();
    for i in 0..100 {
        send(&mut p, |p| {
            p.prepare_refresh(&format!("I{i}.O"), &[bid(i)], 0)
        });
    }
    // 100 requests for every item a second, and 100 for one item, for 15 virtual seconds,
    // with the provider sending 10 queued images every millisecond in between.
    let mut sent = 0usize;
    let mut now = SEC;
    let end = 16 * SEC;
    while now < end {
        if now % (10 * 1_000_000) == 0 {
            p.handle_request(&request(0), now);
            p.handle_request(&request(5), now);
        }
        p.handle_timeout(now);
        for _ in 0..10 {
            let Some(prep) = p.prepare_solicited(now) else {
                break;
            };
            p.commit(prep);
            sent += 1;
        }
        now += 1_000_000;
    }
    sent += drain(&mut p, now).len();
    // One full cycle at the first request, then one per second: 15 cycles of 100 images,
    // plus the last deferred one; item 5 at most once per 100 ms besides.
    assert!(
        sent <= 16 * 100 + 16 * 10,
        "{sent} images for 3000 requests"
    );
    assert!(
        sent >= 15 * 100,
        "every interval serves the requests: {sent}"
    );
    let c = p.counters();
    assert_eq!(c.image_requests, 3000);
    assert!(c.requests_coalesced >= 2800, "{c:?}");
}

#[test]
fn a_request_within_the_interval_is_served_when_it_ends_never_dropped() {
    let mut p = core();
    for i in 0..3 {
        send(&mut p, |p| {
            p.prepare_refresh(&format!("I{i}.O"), &[bid(i)], 0)
        });
    }
    p.handle_request(&request(0), SEC);
    assert_eq!(drain(&mut p, SEC).len(), 3);
    assert_eq!(p.poll_timeout(), None);
    p.handle_request(&request(0), SEC + 10);
    assert_eq!(p.poll_timeout(), Some(2 * SEC));
    p.handle_timeout(2 * SEC - 1);
    assert!(drain(&mut p, 2 * SEC - 1).is_empty());
    p.handle_timeout(2 * SEC);
    assert_eq!(drain(&mut p, 2 * SEC).len(), 3);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn one_item_is_answered_at_most_once_per_interval_and_no_request_is_dropped() {
    let mut p = core();
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 0));
    p.handle_request(&request(1), SEC);
    assert_eq!(drain(&mut p, SEC).len(), 1);
    // Asked again 1 ms later, ten times: one answer, when the 100 ms have passed.
    for k in 1..=10 {
        p.handle_request(&request(1), SEC + k * 1_000_000);
    }
    assert!(drain(&mut p, SEC + 20_000_000).is_empty());
    assert_eq!(p.poll_timeout(), Some(SEC + 100_000_000));
    p.handle_timeout(SEC + 100_000_000);
    assert_eq!(drain(&mut p, SEC + 100_000_000).len(), 1);
    assert_eq!(p.poll_timeout(), None);
    assert_eq!(p.counters().requests_coalesced, 10);
}

#[test]
fn a_solicited_refresh_the_transport_refused_is_sent_later() {
    let mut p = core();
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 0));
    p.handle_request(&request(1), 1);
    let prep = p.prepare_solicited(2).unwrap();
    p.requeue(prep);
    assert_eq!(p.queued(), 1);
    let answers = drain(&mut p, 3);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, 0, "the image as of the refresh, item_seq 0");
}

#[test]
fn unknown_and_malformed_requests_are_counted_and_not_answered() {
    let mut p = core();
    send(&mut p, |p| p.prepare_refresh("AAA.O", &[bid(1)], 0));
    p.handle_request(&request(7), 1);
    p.handle_request(&[1, 2, 3], 1);
    let mut wrong = request(1);
    wrong[2] = 0x01; // a REFRESH's type
    p.handle_request(&wrong, 1);
    assert!(drain(&mut p, 2).is_empty());
    let c = p.counters();
    assert_eq!((c.unknown_requests, c.bad_requests), (1, 2));
}

fn post(service: &str, origin: u64, post_id: u32, user: &str) -> Vec<u8> {
    let mut b = Vec::new();
    Message::Post(crate::codec::PostRepr {
        refresh: false,
        origin,
        post_id,
        service,
        name: "AAA.O",
        user,
        fields: FieldList::List(&[bid(18925)]),
    })
    .emit_to_vec(&mut b);
    b
}

/// The next queued ACK (taken as sent): origin, post id, code, text.
fn sent_ack(p: &mut ProviderCore) -> (u64, u32, crate::codec::AckCode, String) {
    let b = p.poll_ack().expect("an ACK queued").to_vec();
    p.ack_sent();
    match Message::parse(&b) {
        Ok(Message::Ack(a)) => (a.origin, a.post_id, a.code, a.text.to_string()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn posts_wait_for_the_application_and_each_answer_goes_back_to_its_distributor() {
    use crate::codec::AckCode;
    let mut p = core();
    p.handle_request(&post("FEED1", 0xfeed, 4, "alice"), 1);
    let got = p.poll_post().unwrap();
    assert_eq!(
        (
            got.origin,
            got.post_id,
            got.user.as_str(),
            got.item.as_str()
        ),
        (0xfeed, 4, "alice", "AAA.O")
    );
    assert_eq!(got.field_list(), [bid(18925)]);
    assert!(p.poll_post().is_none());
    // A reason longer than 255 bytes is cut at a character boundary.
    let long = "é".repeat(200);
    p.ack(&got, AckCode::Refused, &long);
    let (origin, post_id, code, text) = sent_ack(&mut p);
    assert_eq!((origin, post_id, code), (0xfeed, 4, AckCode::Refused));
    assert_eq!(text.len(), 254);
    assert!(p.poll_ack().is_none());
    // A client's own post (origin 0) or another service's is not for this provider.
    p.handle_request(&post("FEED1", 0, 5, ""), 2);
    p.handle_request(&post("FEED2", 1, 6, "bob"), 2);
    assert!(p.poll_post().is_none());
    let c = p.counters();
    assert_eq!((c.posts, c.posts_refused, c.bad_requests), (1, 1, 2));
}

#[test]
fn a_provider_that_does_not_take_its_posts_answers_the_extra_ones_busy() {
    use crate::codec::AckCode;
    let mut config = ProviderConfig::new("FEED1");
    config.max_pending_posts = 2;
    let mut p = ProviderCore::new(config).unwrap();
    for id in 1..=3 {
        p.handle_request(&post("FEED1", 7, id, "alice"), 1);
    }
    assert_eq!(p.pending_posts(), 2);
    let (_, post_id, code, text) = sent_ack(&mut p);
    assert_eq!((post_id, code), (3, AckCode::Busy));
    assert!(text.contains("2 posts waiting"), "{text}");
    assert_eq!(p.poll_post().unwrap().post_id, 1);
}

#[test]
fn numbered_messages_carry_the_applications_item_seq_and_go_only_forwards() {
    let mut p = core();
    let seq_of = |b: &[u8]| match Message::parse(b).unwrap() {
        Message::Refresh(r) => r.item_seq,
        Message::Update(u) => u.item_seq,
        _ => panic!(),
    };
    let b = send(&mut p, |p| {
        p.prepare_refresh_numbered("AAA.O", &[bid(100)], 1, 4_000_000_000)
    });
    assert_eq!(seq_of(&b), 4_000_000_000);
    // Unnumbered messages follow the numbered ones.
    let b = send(&mut p, |p| p.prepare_update("AAA.O", &[bid(101)], 2));
    assert_eq!(seq_of(&b), 4_000_000_001);
    // A number that skips ahead is the application's to give; across the wrap too.
    let b = send(&mut p, |p| {
        p.prepare_update_numbered("AAA.O", &[bid(102)], 3, u32::MAX)
    });
    assert_eq!(seq_of(&b), u32::MAX);
    let b = send(&mut p, |p| {
        p.prepare_update_numbered("AAA.O", &[bid(103)], 4, 0)
    });
    assert_eq!(seq_of(&b), 0);
    assert_eq!(p.item_seq("AAA.O"), Some(1));
    // A repeated or older number is refused, and nothing is kept.
    for given in [0, u32::MAX, 3_000_000_000] {
        let e = p
            .prepare_update_numbered("AAA.O", &[bid(1)], 5, given)
            .unwrap_err();
        assert_eq!(
            e,
            ProvideError::SeqNotAfter {
                item: "AAA.O".into(),
                last: 0,
                given
            }
        );
        assert!(
            e.to_string().contains("not after the last one sent (0)"),
            "{e}"
        );
        assert!(p
            .prepare_refresh_numbered("AAA.O", &[bid(1)], 5, given)
            .is_err());
    }
    assert_eq!(p.item_seq("AAA.O"), Some(1));
    // A solicited image carries the last number sent.
    p.handle_request(&request(1), 10);
    let answers = drain(&mut p, 11);
    assert_eq!(answers[0].1, 0);
}
