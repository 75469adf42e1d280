//! The consumer's session core on a virtual clock, against a distributor played by the test.

use super::*;
use crate::codec::{
    open_flags, refresh_flags, AckCode, AckRepr, ConflatedRepr, DictionaryRepr, DictionaryView,
    FieldList, LoginResponseRepr, LoginResult, Messages, RefreshRepr, StatusRepr, UpdateRepr,
};
use crate::dictionary::Dictionary;
use crate::model::{Field, Value};

const MS: u64 = 1_000_000;

/// What the handler saw, owned.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    LoggedIn(usize),
    Refresh(String, u32, Vec<(u16, String)>),
    Update(String, u32, Vec<(u16, String)>),
    Status(String, ItemState, u32),
    Gap(String, u32, u32),
    Conflated(u32, u32),
    Disconnected,
    Service(String, bool),
    Dictionary(usize),
    Ack(u32, String, AckCode, String),
}

fn fields(f: &FieldList<'_>) -> Vec<(u16, String)> {
    f.iter()
        .map(|f| (f.fid, format!("{:?}", f.value)))
        .collect()
}

fn record(seen: &mut Vec<Seen>) -> impl FnMut(Event<'_>) + '_ {
    move |e| {
        seen.push(match e {
            Event::LoggedIn { address } => Seen::LoggedIn(address),
            Event::Refresh {
                item,
                item_seq,
                fields: f,
                ..
            } => Seen::Refresh(item.into(), item_seq, fields(&f)),
            Event::Update {
                item,
                item_seq,
                fields: f,
                ..
            } => Seen::Update(item.into(), item_seq, fields(&f)),
            Event::Status {
                item,
                state,
                request,
                ..
            } => Seen::Status(item.into(), state, request),
            Event::Gap {
                item,
                expected,
                got,
            } => Seen::Gap(item.into(), expected, got),
            Event::Conflated {
                items,
                updates_dropped,
            } => Seen::Conflated(items, updates_dropped),
            Event::Disconnected { .. } => Seen::Disconnected,
            Event::Service { service, up, .. } => Seen::Service(service.into(), up),
            Event::Dictionary { dictionary } => Seen::Dictionary(dictionary.len()),
            Event::Ack {
                post_id,
                item,
                code,
                text,
            } => Seen::Ack(post_id, item.into(), code, text.into()),
        })
    }
}

fn bytes(m: Message<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    m.emit_to_vec(&mut b);
    b
}

fn accepted() -> Vec<u8> {
    bytes(Message::LoginResponse(LoginResponseRepr {
        ping_interval_ms: None,
        result: LoginResult::Accepted,
        text: "",
    }))
}

fn refresh(id: u32, name: &str, seq: u32, bid: i64) -> Vec<u8> {
    let f = [Field::new(22, Value::price(bid, -2))];
    bytes(Message::Refresh(RefreshRepr {
        item_id: id,
        flags: refresh_flags::SOLICITED,
        timestamp_ns: 5,
        item_seq: seq,
        service: "FEED1",
        name,
        fields: FieldList::List(&f),
    }))
}

fn update(id: u32, seq: u32, bid: i64) -> Vec<u8> {
    let f = [Field::new(22, Value::price(bid, -2))];
    bytes(Message::Update(UpdateRepr {
        item_id: id,
        timestamp_ns: 6,
        item_seq: seq,
        fields: FieldList::List(&f),
    }))
}

/// The distributor's STATUS ending snapshot request `request`.
fn snapshot_complete(request: u32) -> Vec<u8> {
    bytes(Message::Status(StatusRepr {
        item_id: 0,
        request_id: request,
        state: ItemState::Closed,
        service: "FEED1",
        name: "",
        text: "snapshot complete",
    }))
}

/// The messages the consumer queued, parsed and described.
fn sent(c: &mut ConsumerCore) -> Vec<String> {
    let out = c.transmit().to_vec();
    c.transmitted(out.len());
    Messages::new(&out)
        .map(|m| match Message::parse(m.unwrap().1).unwrap() {
            Message::Login(l) => format!("LOGIN {}", l.user),
            Message::Open(o) => format!(
                "OPEN {} {} {}",
                o.request_id,
                o.service,
                o.patterns.iter().collect::<Vec<_>>().join(",")
            ),
            Message::Close(c) => format!("CLOSE {}", c.request_id),
            Message::Ping(p) => format!("PING {}", p.payload),
            Message::Pong(p) => format!("PONG {}", p.payload),
            Message::DictionaryRequest(_) => "DICTIONARY_REQUEST".to_string(),
            Message::Post(p) => format!("POST {} {} {}", p.post_id, p.service, p.name),
            other => format!("{other:?}"),
        })
        .collect()
}

/// A consumer of two distributors that does not download the dictionary (the tests of the
/// download turn it on).
fn consumer() -> ConsumerCore {
    let mut config = ConsumerConfig::new("alice", b"a", 2);
    config.download_dictionary = false;
    ConsumerCore::new(config).unwrap()
}

#[test]
fn requests_opened_before_login_are_sent_once_logged_in_and_after_every_reconnection() {
    let mut c = consumer();
    assert_eq!(c.poll_timeout(), Some(0), "may connect at once");
    let r1 = c.open("FEED1", &["AAA.O", "MSFT.*"]).unwrap();
    assert!(c.transmit().is_empty(), "nothing before a connection");
    c.connected(0);
    assert_eq!(sent(&mut c), ["LOGIN alice"]);
    let mut seen = Vec::new();
    c.handle_bytes(&accepted(), 0, &mut record(&mut seen))
        .unwrap();
    assert_eq!(seen, [Seen::LoggedIn(0)]);
    assert_eq!(sent(&mut c), [format!("OPEN {r1} FEED1 AAA.O,MSFT.*")]);
    let r2 = c.open("FEED1", &["BBB.O"]).unwrap();
    assert_eq!(sent(&mut c), [format!("OPEN {r2} FEED1 BBB.O")]);
    c.close(r1).unwrap();
    assert_eq!(sent(&mut c), [format!("CLOSE {r1}")]);
    assert!(c.close(r1).is_err());

    c.connection_lost(10 * MS, "reset", &mut record(&mut seen));
    assert_eq!(c.poll_timeout(), Some(60 * MS), "50 ms back-off");
    assert_eq!(c.address(), 1, "the next distributor of the list");
    c.connected(0);
    c.handle_bytes(&accepted(), 0, &mut record(&mut seen))
        .unwrap();
    assert_eq!(
        sent(&mut c),
        ["LOGIN alice".to_string(), format!("OPEN {r2} FEED1 BBB.O")]
    );
}

#[test]
fn a_lost_connection_reports_every_ok_item_stale_then_fresh_images_follow() {
    let mut c = consumer();
    c.open("FEED1", &["*"]).unwrap();
    c.connected(0);
    let mut seen = Vec::new();
    let mut input = accepted();
    input.extend(refresh(1, "AAA.O", 7, 100));
    input.extend(refresh(2, "BBB.O", 3, 200));
    input.extend(update(1, 8, 101));
    // BBB.O goes stale at the distributor: not reported again on the loss.
    input.extend(bytes(Message::Status(StatusRepr {
        item_id: 2,
        request_id: 0,
        state: ItemState::Stale,
        service: "",
        name: "",
        text: "feed gone",
    })));
    c.handle_bytes(&input, 0, &mut record(&mut seen)).unwrap();
    seen.clear();
    c.connection_lost(0, "closed", &mut record(&mut seen));
    assert_eq!(
        seen,
        [
            Seen::Status("AAA.O".into(), ItemState::Stale, 0),
            Seen::Disconnected
        ]
    );
    seen.clear();
    c.connected(0);
    let mut input = accepted();
    input.extend(refresh(9, "AAA.O", 8, 101));
    c.handle_bytes(&input, 0, &mut record(&mut seen)).unwrap();
    assert_eq!(
        seen[1].clone(),
        Seen::Refresh(
            "AAA.O".into(),
            8,
            vec![(22, format!("{:?}", Value::price(101, -2)))]
        )
    );
}

#[test]
fn an_item_seq_gap_is_an_event_and_the_update_still_arrives() {
    let mut c = consumer();
    c.open("FEED1", &["AAA.O"]).unwrap();
    c.connected(0);
    let mut seen = Vec::new();
    let mut input = accepted();
    input.extend(refresh(1, "AAA.O", 7, 100));
    input.extend(update(1, 8, 101));
    input.extend(update(1, 10, 102));
    c.handle_bytes(&input, 0, &mut record(&mut seen)).unwrap();
    assert_eq!(seen[3], Seen::Gap("AAA.O".into(), 9, 10));
    assert!(matches!(&seen[4], Seen::Update(n, 10, _) if n == "AAA.O"));
    assert_eq!(c.counters().gaps, 1);
}

#[test]
fn messages_split_anywhere_are_reassembled() {
    let mut c = consumer();
    c.open("FEED1", &["AAA.O"]).unwrap();
    c.connected(0);
    let mut input = accepted();
    input.extend(refresh(1, "AAA.O", 7, 100));
    input.extend(bytes(Message::Conflated(ConflatedRepr {
        items: 1,
        updates_dropped: 4,
    })));
    for n in 0..8 {
        input.extend(update(1, 8 + n, 100 + i64::from(n)));
    }
    let mut whole = Vec::new();
    {
        let mut w = consumer();
        w.open("FEED1", &["AAA.O"]).unwrap();
        w.connected(0);
        w.handle_bytes(&input, 0, &mut record(&mut whole)).unwrap();
    }
    for chunk in [1, 3, 7, 50] {
        let mut c = consumer();
        c.open("FEED1", &["AAA.O"]).unwrap();
        c.connected(0);
        let mut seen = Vec::new();
        for part in input.chunks(chunk) {
            c.handle_bytes(part, 0, &mut record(&mut seen)).unwrap();
        }
        assert_eq!(seen, whole, "chunks of {chunk}");
    }
    assert_eq!(whole.len(), 11);
    let _ = c;
}

#[test]
fn back_off_doubles_to_two_seconds_and_resets_after_a_login() {
    let mut c = consumer();
    let mut at = Vec::new();
    let mut now = 0;
    for _ in 0..8 {
        c.connect_failed(now, "refused", &mut |_| {});
        let t = c.poll_timeout().unwrap();
        at.push((t - now) / MS);
        now = t;
    }
    assert_eq!(at, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
    c.connected(0);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    assert_eq!(c.poll_timeout(), None);
    c.connection_lost(now, "x", &mut |_| {});
    assert_eq!(c.poll_timeout(), Some(now + 50 * MS));
}

#[test]
fn a_refused_login_ends_the_session_and_bad_input_is_refused() {
    let mut c = consumer();
    c.connected(0);
    let denied = bytes(Message::LoginResponse(LoginResponseRepr {
        ping_interval_ms: None,
        result: LoginResult::Denied,
        text: "unknown user or wrong token",
    }));
    let e = c.handle_bytes(&denied, 0, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("wrong token"), "{e}");
    assert!(c.is_refused());
    c.connection_lost(0, "closed", &mut |_| {});
    assert_eq!(c.poll_timeout(), None, "no more attempts");

    assert!(ConsumerCore::new(ConsumerConfig::new("al ice", b"a", 1)).is_err());
    assert!(ConsumerCore::new(ConsumerConfig::new("alice", b"", 1)).is_err());
    let mut c = consumer();
    let e = c.open("FEED 1", &["A"]).unwrap_err();
    assert!(e.to_string().contains("FEED 1"), "{e}");
    let e = c.open("FEED1", &["A B"]).unwrap_err();
    assert!(e.to_string().contains("\"A B\""), "{e}");
    assert!(c.open("FEED1", &[]).is_err());
    let many: Vec<String> = (0..9000).map(|i| format!("ITEM{i}.O")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = c.open("FEED1", &many).unwrap_err();
    assert!(e.to_string().contains("several requests"), "{e}");
    // A message only distributors receive: the connection must close.
    c.connected(0);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    let login = bytes(Message::Login(LoginRepr::new("x", b"y")));
    assert!(matches!(
        c.handle_bytes(&login, 0, &mut |_| {}),
        Err(ConsumerError::Protocol { .. })
    ));
}

fn accepted_with_liveness(ms: u32) -> Vec<u8> {
    bytes(Message::LoginResponse(LoginResponseRepr {
        ping_interval_ms: Some(ms),
        result: LoginResult::Accepted,
        text: "",
    }))
}

#[test]
fn the_login_asks_for_the_configured_interval_with_version_2() {
    let mut config = ConsumerConfig::new("alice", b"a", 1);
    config.ping_interval_ns = 250 * MS;
    let mut c = ConsumerCore::new(config).unwrap();
    c.connected(0);
    let out = c.transmit().to_vec();
    let Ok(Message::Login(l)) = Message::parse(&out) else {
        panic!("a LOGIN first");
    };
    assert_eq!((l.version, l.ping_interval_ms), (2, 250));
}

#[test]
fn pings_at_the_agreed_interval_times_the_pong_answers_pings_and_gives_up_on_silence() {
    let mut c = consumer();
    c.connected(0);
    sent(&mut c);
    assert_eq!(c.poll_timeout(), Some(10_000 * MS), "the login deadline");
    let t0 = 1_000 * MS;
    c.handle_bytes(&accepted_with_liveness(200), t0, &mut |_| {})
        .unwrap();
    assert_eq!(c.ping_interval_ns(), Some(200 * MS));
    assert_eq!(c.poll_timeout(), Some(t0 + 200 * MS));
    c.handle_timeout(t0 + 199 * MS).unwrap();
    assert!(sent(&mut c).is_empty());
    let at = t0 + 200 * MS;
    c.handle_timeout(at).unwrap();
    assert_eq!(sent(&mut c), [format!("PING {at}")]);
    let pong = PingRepr { payload: at }.to_bytes(crate::codec::PingKind::Pong);
    c.handle_bytes(&pong, at + 2 * MS, &mut |_| {}).unwrap();
    assert_eq!(c.rtt_ns(), Some(2 * MS));
    assert_eq!(c.counters().pongs_received, 1);
    // The distributor's PING is answered with its payload; it is no event.
    let mut seen = Vec::new();
    let ping = PingRepr { payload: 99 }.to_bytes(crate::codec::PingKind::Ping);
    c.handle_bytes(&ping, at + 3 * MS, &mut record(&mut seen))
        .unwrap();
    assert!(seen.is_empty());
    assert_eq!(sent(&mut c), ["PONG 99"]);
    // Silent for three intervals since last heard: give up.
    let heard = at + 3 * MS;
    c.handle_timeout(heard + 600 * MS - 1).unwrap();
    let e = c.handle_timeout(heard + 600 * MS).unwrap_err();
    assert_eq!(
        e,
        ConsumerError::Silent {
            silent_ms: 600,
            interval_ms: 200
        }
    );
    assert_eq!(c.counters().silences, 1);
    c.connection_lost(heard + 600 * MS, &e.to_string(), &mut |_| {});
    assert_eq!(c.ping_interval_ns(), None);
    assert_eq!(c.address(), 1, "the next distributor");
}

#[test]
fn an_unanswered_login_is_given_up_and_a_version_1_distributor_gets_version_1_at_once() {
    let mut c = consumer();
    c.connected(0);
    assert!(c.handle_timeout(9_999 * MS).is_ok());
    assert_eq!(
        c.handle_timeout(10_000 * MS).unwrap_err(),
        ConsumerError::LoginTimeout { waited_ms: 10_000 }
    );
    c.connection_lost(10_000 * MS, "login timeout", &mut |_| {});
    assert_eq!(c.address(), 1);

    let mut c = consumer();
    c.connected(0);
    sent(&mut c);
    let old = bytes(Message::LoginResponse(LoginResponseRepr {
        ping_interval_ms: None,
        result: LoginResult::UnsupportedVersion,
        text: "this distributor speaks version 1",
    }));
    let e = c.handle_bytes(&old, 5 * MS, &mut |_| {}).unwrap_err();
    assert!(matches!(e, ConsumerError::Protocol { .. }), "{e}");
    assert!(!c.is_refused());
    c.connection_lost(5 * MS, &e.to_string(), &mut |_| {});
    assert_eq!(c.poll_timeout(), Some(5 * MS), "at once");
    assert_eq!(c.address(), 0, "the same distributor");
    c.connected(5 * MS);
    let out = c.transmit().to_vec();
    let Ok(Message::Login(l)) = Message::parse(&out) else {
        panic!("a LOGIN");
    };
    assert_eq!((l.version, l.ping_interval_ms), (1, 0));
    // Accepted without liveness: no timer while logged in.
    sent(&mut c);
    c.handle_bytes(&accepted(), 6 * MS, &mut |_| {}).unwrap();
    assert_eq!(c.poll_timeout(), None);
    // Refused again with version 1: the end.
    c.connection_lost(7 * MS, "x", &mut |_| {});
    c.connected(60 * MS);
    assert!(c.handle_bytes(&old, 61 * MS, &mut |_| {}).is_err());
    assert!(c.is_refused());
}

#[test]
fn a_snapshot_is_sent_flagged_leaves_no_live_item_and_is_forgotten_once_closed() {
    let mut c = consumer();
    let snap = c.snapshot("FEED1", &["AAA.O"]).unwrap();
    c.connected(0);
    sent(&mut c);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    let out = c.transmit().to_vec();
    let Ok(Message::Open(o)) = Message::parse(&out) else {
        panic!("the snapshot's OPEN");
    };
    assert_eq!((o.request_id, o.flags), (snap, open_flags::SNAPSHOT));
    sent(&mut c);
    // Its image: flagged, and not a live item (no stale for it when the connection breaks).
    let mut image = refresh(1, "AAA.O", 4, 18921);
    image[3] |= refresh_flags::SNAPSHOT;
    let mut snapshot_flag = None;
    c.handle_bytes(&image, 0, &mut |e| {
        if let Event::Refresh { snapshot, .. } = e {
            snapshot_flag = Some(snapshot);
        }
    })
    .unwrap();
    assert_eq!(snapshot_flag, Some(true));
    // Broken before its end: asked again after the next login.
    let mut seen = Vec::new();
    c.connection_lost(0, "x", &mut record(&mut seen));
    assert_eq!(seen, [Seen::Disconnected], "no stale for a snapshot's item");
    c.connected(100 * MS);
    sent(&mut c);
    c.handle_bytes(&accepted(), 100 * MS, &mut |_| {}).unwrap();
    assert_eq!(sent(&mut c), [format!("OPEN {snap} FEED1 AAA.O")]);
    let done = snapshot_complete(snap);
    let mut seen = Vec::new();
    c.handle_bytes(&done, 100 * MS, &mut record(&mut seen))
        .unwrap();
    assert_eq!(seen, [Seen::Status(String::new(), ItemState::Closed, snap)]);
    assert_eq!(c.open_requests(), 0, "forgotten once closed");
    c.connection_lost(200 * MS, "x", &mut |_| {});
    c.connected(300 * MS);
    sent(&mut c);
    c.handle_bytes(&accepted(), 300 * MS, &mut |_| {}).unwrap();
    assert!(sent(&mut c).is_empty(), "not asked again");
}

#[test]
fn a_paused_request_is_paused_again_after_a_reconnection_until_resumed() {
    let mut c = consumer();
    let r1 = c.open("FEED1", &["AAA.O"]).unwrap();
    let r2 = c.open("FEED1", &["MSFT.O"]).unwrap();
    assert!(c.pause(99).is_err(), "not open");
    c.pause(r1).unwrap();
    assert!(c.transmit().is_empty(), "nothing before a connection");
    c.connected(0);
    sent(&mut c);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    assert_eq!(
        sent(&mut c),
        [
            format!("OPEN {r1} FEED1 AAA.O"),
            format!("Pause(PauseRepr {{ request_id: {r1} }})"),
            format!("OPEN {r2} FEED1 MSFT.O"),
        ]
    );
    c.resume(0).unwrap();
    assert_eq!(sent(&mut c), ["Resume(PauseRepr { request_id: 0 })"]);
    c.pause(0).unwrap();
    sent(&mut c);
    c.connection_lost(0, "x", &mut |_| {});
    c.connected(100 * MS);
    sent(&mut c);
    c.handle_bytes(&accepted(), 100 * MS, &mut |_| {}).unwrap();
    assert_eq!(sent(&mut c).len(), 4, "both opened and paused again");
}

#[test]
fn a_viewed_item_skipping_item_seq_is_not_a_gap_and_the_view_is_sent_again() {
    let mut c = consumer();
    assert!(c.open_view("FEED1", &["AAA.O"], &[]).is_err());
    assert!(c.open_view("FEED1", &["AAA.O"], &[22, 22]).is_err());
    assert!(c.open_view("FEED1", &["AAA.O"], &[0]).is_err());
    let r = c.open_view("FEED1", &["AAA.O"], &[22]).unwrap();
    c.connected(0);
    sent(&mut c);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    let out = c.transmit().to_vec();
    let Ok(Message::Open(o)) = Message::parse(&out) else {
        panic!("an OPEN");
    };
    assert_eq!(o.request_id, r);
    assert_eq!(o.view.map(|v| v.iter().collect::<Vec<_>>()), Some(vec![22]));
    sent(&mut c);
    let mut image = refresh(1, "AAA.O", 4, 100);
    image[3] |= refresh_flags::VIEW;
    let mut input = image;
    input.extend(update(1, 9, 101));
    let mut seen = Vec::new();
    c.handle_bytes(&input, 0, &mut record(&mut seen)).unwrap();
    assert!(
        !seen.iter().any(|e| matches!(e, Seen::Gap(..))),
        "updates outside the view are not sent: {seen:?}"
    );
    assert_eq!(c.counters().gaps, 0);
}

/// A REFRESH (flags on top of SOLICITED | VIEW) or UPDATE of BID, BIDSIZE and ASK.
fn three_fields(id: u32, seq: u32, refresh: Option<u8>, fids: &[u16]) -> Vec<u8> {
    let all = [
        Field::new(22, Value::price(100, -2)),
        Field::new(25, Value::price(101, -2)),
        Field::new(30, Value::Int(7)),
    ];
    let f: Vec<Field<'_>> = all.into_iter().filter(|f| fids.contains(&f.fid)).collect();
    match refresh {
        Some(flags) => bytes(Message::Refresh(RefreshRepr {
            item_id: id,
            flags: refresh_flags::SOLICITED | refresh_flags::VIEW | flags,
            timestamp_ns: 5,
            item_seq: seq,
            service: "FEED1",
            name: "AAA.O",
            fields: FieldList::List(&f),
        })),
        None => bytes(Message::Update(UpdateRepr {
            item_id: id,
            timestamp_ns: 6,
            item_seq: seq,
            fields: FieldList::List(&f),
        })),
    }
}

/// Each REFRESH or UPDATE event as "kind request item fids".
fn streams_seen(c: &mut ConsumerCore, input: &[u8]) -> Vec<String> {
    let mut seen = Vec::new();
    c.handle_bytes(input, 0, &mut |e| match e {
        Event::Refresh {
            request,
            item,
            fields,
            snapshot,
            ..
        } => seen.push(format!(
            "{} {request} {item} {:?}",
            if snapshot { "snapshot" } else { "refresh" },
            fields.iter().map(|f| f.fid).collect::<Vec<_>>()
        )),
        Event::Update {
            request,
            item,
            fields,
            ..
        } => seen.push(format!(
            "update {request} {item} {:?}",
            fields.iter().map(|f| f.fid).collect::<Vec<_>>()
        )),
        _ => {}
    })
    .unwrap();
    seen
}

#[test]
fn each_request_holding_an_item_gets_its_own_events_with_its_own_view() {
    let mut c = consumer();
    let bid = c.open_view("FEED1", &["AAA.O"], &[22]).unwrap();
    let size = c.open_view("FEED1", &["AAA.O", "ZZZ.O"], &[30]).unwrap();
    c.connected(0);
    c.handle_bytes(&accepted(), 0, &mut |_| {}).unwrap();
    sent(&mut c);
    // The distributor sends the union of the two views.
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 1, Some(0), &[22, 30])),
        [
            format!("refresh {bid} AAA.O [22]"),
            format!("refresh {size} AAA.O [30]")
        ],
        "one image per request, each of its own fields"
    );
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 2, None, &[22])),
        [format!("update {bid} AAA.O [22]")],
        "an update of BID alone goes to the BID view alone"
    );
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 3, None, &[22, 30])),
        [
            format!("update {bid} AAA.O [22]"),
            format!("update {size} AAA.O [30]")
        ]
    );
    // A glob without a view: every field, beside the views' cuts.
    let all = c.open("FEED1", &["AA*"]).unwrap();
    sent(&mut c);
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 4, None, &[22, 25, 30])),
        [
            format!("update {bid} AAA.O [22]"),
            format!("update {size} AAA.O [30]"),
            format!("update {all} AAA.O [22, 25, 30]")
        ]
    );
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 5, None, &[25])),
        [format!("update {all} AAA.O [25]")]
    );
    // A paused request gets nothing while the others flow; when every holder is paused, what
    // was in flight still comes.
    c.pause(size).unwrap();
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 6, None, &[22, 30])),
        [
            format!("update {bid} AAA.O [22]"),
            format!("update {all} AAA.O [22, 30]")
        ]
    );
    c.pause(0).unwrap();
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 7, None, &[30])).len(),
        2,
        "in flight at the pause: to each holder whose fields it changes"
    );
    c.resume(0).unwrap();
    // A closed request gets nothing more; the one left gets what came as it came.
    c.close(bid).unwrap();
    c.close(all).unwrap();
    assert_eq!(
        streams_seen(&mut c, &three_fields(1, 8, None, &[22, 30])),
        [format!("update {size} AAA.O [22, 30]")],
        "one request holding the item: the fields as the distributor cut them"
    );
    c.close(size).unwrap();
    assert!(streams_seen(&mut c, &three_fields(1, 9, None, &[30])).is_empty());
    // A snapshot's image goes to the snapshot request (the oldest holding the item).
    let live = c.open("FEED1", &["AAA.O"]).unwrap();
    let snap = c.snapshot_view("FEED1", &["A*"], &[25]).unwrap();
    let snap2 = c.snapshot("FEED1", &["AAA.O"]).unwrap();
    sent(&mut c);
    let mut input = three_fields(1, 10, Some(refresh_flags::SNAPSHOT), &[25]);
    input.extend(three_fields(1, 10, Some(0), &[22, 25, 30]));
    assert_eq!(
        streams_seen(&mut c, &input),
        [
            format!("snapshot {snap} AAA.O [25]"),
            format!("refresh {live} AAA.O [22, 25, 30]")
        ]
    );
    let mut input = snapshot_complete(snap);
    input.extend(three_fields(
        1,
        10,
        Some(refresh_flags::SNAPSHOT),
        &[22, 25, 30],
    ));
    assert_eq!(
        streams_seen(&mut c, &input),
        [format!("snapshot {snap2} AAA.O [22, 25, 30]")]
    );
}

#[test]
fn the_directory_becomes_service_events_and_a_group_status_one_status_per_item() {
    use crate::codec::{DirectoryRepr, EntryList, ServiceEntry};
    let mut c = consumer();
    c.open("FEED1", &["A*"]).unwrap();
    c.connected(0);
    sent(&mut c);
    let entries = [ServiceEntry {
        name: "FEED1",
        up: true,
        open: true,
    }];
    let mut input = accepted();
    input.extend(bytes(Message::Directory(DirectoryRepr {
        complete: true,
        services: EntryList::List(&entries),
    })));
    input.extend(refresh(1, "AAA.O", 1, 100));
    input.extend(refresh(2, "AAB.O", 1, 100));
    input.extend(bytes(Message::Status(StatusRepr {
        item_id: 0,
        request_id: 0,
        state: ItemState::Stale,
        service: "FEED1",
        name: "*",
        text: "the feed went away",
    })));
    let mut services = Vec::new();
    let mut seen = Vec::new();
    c.handle_bytes(&input, 0, &mut |e| {
        if let Event::Service {
            service,
            up,
            may_open,
        } = e
        {
            services.push((service.to_string(), up, may_open));
        }
        record(&mut seen)(e);
    })
    .unwrap();
    assert_eq!(services, [("FEED1".to_string(), true, true)]);
    assert_eq!(c.services().collect::<Vec<_>>(), [("FEED1", true, true)]);
    let stale: Vec<&Seen> = seen
        .iter()
        .filter(|e| matches!(e, Seen::Status(_, ItemState::Stale, _)))
        .collect();
    assert_eq!(
        stale,
        [
            &Seen::Status("AAA.O".into(), ItemState::Stale, 0),
            &Seen::Status("AAB.O".into(), ItemState::Stale, 0),
        ]
    );
    // The answer to a request's pattern `*` is that request's, not a group status.
    let answer = bytes(Message::Status(StatusRepr {
        item_id: 0,
        request_id: 1,
        state: ItemState::NotEntitled,
        service: "FEED1",
        name: "*",
        text: "no",
    }));
    let mut seen = Vec::new();
    c.handle_bytes(&answer, 0, &mut record(&mut seen)).unwrap();
    assert_eq!(seen, [Seen::Status("*".into(), ItemState::NotEntitled, 1)]);
    // Stale items take no update until refreshed: counted, not delivered as ok.
    c.handle_bytes(&update(1, 2, 101), 0, &mut |_| {}).unwrap();
    assert_eq!(c.counters().updates_without_image, 1);
}

/// The DICTIONARY messages of `text` (a dictionary file), as a distributor sends them.
fn dictionary_parts(text: &str) -> Vec<Vec<u8>> {
    Dictionary::parse(text, "d.toml").unwrap().encode()
}

const SERVED: &str = "[fields.BID]\nfid = 22\ntype = \"price\"\n\
                      [fields.CURRENCY]\nfid = 15\ntype = \"enum\"\nvalues = { 840 = \"USD\" }\n";

#[test]
fn the_dictionary_is_asked_for_after_a_version_2_login_and_put_together_from_its_parts() {
    let mut c = ConsumerCore::new(ConsumerConfig::new("alice", b"a", 1)).unwrap();
    c.connected(0);
    sent(&mut c);
    let mut seen = Vec::new();
    c.handle_bytes(&accepted_with_liveness(5000), 0, &mut record(&mut seen))
        .unwrap();
    assert_eq!(sent(&mut c), ["DICTIONARY_REQUEST"]);
    assert!(c.dictionary_pending() && c.dictionary().is_none());
    // Parts of a dictionary of 10000 fields, fed in one read.
    let mut text = String::new();
    for fid in 1..=10000 {
        text.push_str(&format!("[fields.F{fid}]\nfid = {fid}\ntype = \"int\"\n"));
    }
    let parts = dictionary_parts(&text);
    assert!(parts.len() >= 2);
    let all: Vec<u8> = parts.concat();
    c.handle_bytes(&all, 1, &mut record(&mut seen)).unwrap();
    assert_eq!(seen.last(), Some(&Seen::Dictionary(10000)));
    assert!(!c.dictionary_pending());
    assert_eq!(c.dictionary().unwrap().by_name("F17").unwrap().fid, 17);
    // A DICTIONARY nobody asked for breaks the connection.
    assert!(matches!(
        c.handle_bytes(&parts[0], 2, &mut record(&mut seen)),
        Err(ConsumerError::Protocol { .. })
    ));
}

#[test]
fn a_part_out_of_order_breaks_the_connection_and_the_next_login_asks_again() {
    let mut c = ConsumerCore::new(ConsumerConfig::new("alice", b"a", 1)).unwrap();
    c.connected(0);
    let mut seen = Vec::new();
    c.handle_bytes(&accepted_with_liveness(5000), 0, &mut record(&mut seen))
        .unwrap();
    sent(&mut c);
    // Part 1 where part 0 was due.
    let served = Dictionary::parse(SERVED, "d.toml").unwrap();
    let entry = served.get(22).unwrap().entry();
    let part1 = DictionaryRepr {
        complete: true,
        part: 1,
        fields: crate::codec::DefList::List(&[entry]),
    };
    let mut b = vec![0u8; part1.buffer_len()];
    part1.emit(&mut DictionaryView::new_unchecked(&mut b[..]));
    let e = c.handle_bytes(&b, 1, &mut record(&mut seen)).unwrap_err();
    assert!(e.to_string().contains("part 1 where part 0 was due"), "{e}");
    c.connection_lost(2, "protocol", &mut record(&mut seen));
    let at = c.poll_timeout().unwrap();
    c.connected(at);
    c.handle_bytes(&accepted_with_liveness(5000), at, &mut record(&mut seen))
        .unwrap();
    assert_eq!(sent(&mut c), ["LOGIN alice", "DICTIONARY_REQUEST"]);
}

#[test]
fn a_dictionary_that_types_a_field_otherwise_ends_the_session_naming_it() {
    let mut config = ConsumerConfig::new("alice", b"a", 1);
    config.dictionary =
        Some(Dictionary::parse("[fields.BID]\nfid = 22\ntype = \"int\"\n", "local.toml").unwrap());
    let mut c = ConsumerCore::new(config).unwrap();
    c.connected(0);
    let mut seen = Vec::new();
    c.handle_bytes(&accepted_with_liveness(5000), 0, &mut record(&mut seen))
        .unwrap();
    let e = c
        .handle_bytes(
            &dictionary_parts(SERVED).concat(),
            1,
            &mut record(&mut seen),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "field BID (id 22) is int in the local dictionary but the distributor's BID (id 22) \
         is price: fix the local dictionary, or use the distributor's"
    );
    assert!(c.is_refused(), "no reconnection: fields would be misread");
    assert!(!seen.contains(&Seen::Dictionary(2)));
    // A local dictionary that agrees (fields the other lacks are fine) is taken.
    let mut config = ConsumerConfig::new("alice", b"a", 1);
    config.dictionary = Some(
        Dictionary::parse(
            "[fields.BID]\nfid = 22\ntype = \"price\"\n[fields.X]\nfid = 9\ntype = \"int\"\n",
            "l.toml",
        )
        .unwrap(),
    );
    let mut c = ConsumerCore::new(config).unwrap();
    c.connected(0);
    c.handle_bytes(&accepted_with_liveness(5000), 0, &mut record(&mut seen))
        .unwrap();
    c.handle_bytes(
        &dictionary_parts(SERVED).concat(),
        1,
        &mut record(&mut seen),
    )
    .unwrap();
    assert_eq!(seen.last(), Some(&Seen::Dictionary(2)));
}

fn ack(post_id: u32, code: AckCode, text: &str) -> Vec<u8> {
    bytes(Message::Ack(AckRepr {
        origin: 0,
        post_id,
        code,
        text,
    }))
}

#[test]
fn each_post_gets_exactly_one_ack_and_those_in_flight_at_a_disconnection_time_out() {
    let mut c = consumer();
    let bid = [Field::new(22, Value::price(12345, -2))];
    assert_eq!(
        c.post("FEED1", "AAA.O", &bid, false),
        Err(ConsumerError::NotLoggedIn),
        "not kept for a later connection"
    );
    c.connected(0);
    let mut seen = Vec::new();
    c.handle_bytes(&accepted_with_liveness(5000), 0, &mut record(&mut seen))
        .unwrap();
    sent(&mut c);
    let p1 = c.post("FEED1", "AAA.O", &bid, false).unwrap();
    let p2 = c.post("FEED1", "AAB.O", &bid, true).unwrap();
    assert_ne!(p1, p2);
    assert_eq!(
        sent(&mut c),
        [
            format!("POST {p1} FEED1 AAA.O"),
            format!("POST {p2} FEED1 AAB.O")
        ]
    );
    assert!(matches!(
        c.post("FEED1", "AAA.O", &[], false),
        Err(ConsumerError::BadPost { .. })
    ));
    assert!(matches!(
        c.post("FEED1", "A A", &bid, false),
        Err(ConsumerError::BadPost { .. })
    ));
    seen.clear();
    c.handle_bytes(
        &ack(p1, AckCode::Refused, "halted"),
        1,
        &mut record(&mut seen),
    )
    .unwrap();
    // An answer to no post in flight (answered already) is ignored.
    c.handle_bytes(&ack(p1, AckCode::Accepted, ""), 1, &mut record(&mut seen))
        .unwrap();
    assert_eq!(
        seen,
        [Seen::Ack(
            p1,
            "AAA.O".into(),
            AckCode::Refused,
            "halted".into()
        )]
    );
    assert_eq!(c.posts_in_flight(), 1);
    seen.clear();
    c.connection_lost(2, "reset", &mut record(&mut seen));
    assert!(
        matches!(&seen[0], Seen::Ack(id, item, AckCode::Timeout, text)
            if *id == p2 && item == "AAB.O" && text.contains("may or may not")),
        "{seen:?}"
    );
    assert_eq!(c.posts_in_flight(), 0);
}
