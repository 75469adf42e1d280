//! The JSON session against the binary protocol: what each JSON message becomes, and what
//! each binary message the core queues becomes for a JSON client.

use super::*;
use crate::codec::{
    AckCode, AckRepr, FieldList, LoginResponseRepr, LoginResult, Message, PingRepr, RefreshRepr,
    StatusRepr, UpdateRepr,
};
use crate::model::{Field, ItemState, Price, Value};

fn session() -> JsonSession {
    JsonSession::new(Arc::new(Dictionary::builtin()), "FEED1")
}

/// The binary messages of `text`, described.
fn sent(s: &mut JsonSession, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    s.from_client(text, &mut out).unwrap();
    messages(&out)
        .map(|b| match Message::parse(b).unwrap() {
            Message::Login(l) => format!("LOGIN {} {}", l.user, String::from_utf8_lossy(l.token)),
            Message::Open(o) => format!(
                "OPEN {} {} {} flags={} view={:?}",
                o.request_id,
                o.service,
                o.patterns.iter().collect::<Vec<_>>().join(","),
                o.flags,
                o.view.map(|v| v.iter().collect::<Vec<_>>())
            ),
            Message::Close(c) => format!("CLOSE {}", c.request_id),
            Message::Ping(p) => format!("PING {}", p.payload),
            Message::Pong(p) => format!("PONG {}", p.payload),
            Message::Post(p) => format!(
                "POST {} {} {} refresh={} {:?}",
                p.post_id,
                p.service,
                p.name,
                p.refresh,
                p.fields.iter().collect::<Vec<_>>()
            ),
            other => format!("{other:?}"),
        })
        .collect()
}

fn to_json(s: &mut JsonSession, m: Message<'_>) -> Vec<Json> {
    let mut b = Vec::new();
    m.emit_to_vec(&mut b);
    let mut out = String::new();
    let n = s.to_client(&b, None, &mut out);
    // One message, or an array of them.
    let got: Vec<Json> = match out.is_empty() {
        true => Vec::new(),
        false => match serde_json::from_str::<Json>(&out).unwrap() {
            Json::Array(list) => list,
            one => vec![one],
        },
    };
    assert_eq!(got.len(), n, "{out}");
    got
}

fn logged_in() -> JsonSession {
    let mut s = session();
    sent(
        &mut s,
        r#"{"ID":1,"Domain":"Login","Key":{"Name":"alice","Elements":{"AuthenticationToken":"s3cret"}}}"#,
    );
    s
}

/// A REFRESH of AAA.O (item id 40) flagged SOLICITED and `more` flags.
fn aaa_refresh<'a>(more: u8, item_seq: u32, fields: &'a [Field<'a>]) -> Message<'a> {
    Message::Refresh(RefreshRepr {
        item_id: 40,
        flags: crate::codec::refresh_flags::SOLICITED | more,
        timestamp_ns: 1,
        item_seq,
        service: "FEED1",
        name: "AAA.O",
        fields: FieldList::List(fields),
    })
}

fn price(m: i64) -> Value<'static> {
    Value::Price(Price {
        mantissa: m,
        exponent: -2,
    })
}

/// What a new session that logged in as `user` sends its client for `response`.
fn answer_to_login(user: &str, response: LoginResponseRepr<'_>) -> Vec<Json> {
    let mut s = session();
    sent(
        &mut s,
        &format!(
            r#"{{"ID":1,"Domain":"Login","Key":{{"Name":"{user}","Elements":{{"AuthenticationToken":"t"}}}}}}"#
        ),
    );
    to_json(&mut s, Message::LoginResponse(response))
}

#[test]
fn a_login_becomes_a_login_and_its_answer_a_login_refresh() {
    let mut s = session();
    assert_eq!(
        sent(
            &mut s,
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"alice","Elements":{"AuthenticationToken":"s3cret"}}}"#
        ),
        ["LOGIN alice s3cret"]
    );
    let got = to_json(
        &mut s,
        Message::LoginResponse(LoginResponseRepr {
            result: LoginResult::Accepted,
            ping_interval_ms: Some(5000),
            text: "",
        }),
    );
    assert_eq!(
        got[0],
        serde_json::json!({"ID":1,"Type":"Refresh","Domain":"Login","Key":{"Name":"alice"},
            "State":{"Stream":"Open","Data":"Ok","Text":"Login accepted"},
            "Elements":{"PingTimeout":15}})
    );
    // The longest interval the message can carry: three of it in seconds, not an overflow
    // (the fuzz target md_json found the multiplication done in u32).
    let got = answer_to_login(
        "alice",
        LoginResponseRepr {
            result: LoginResult::Accepted,
            ping_interval_ms: Some(u32::MAX),
            text: "",
        },
    );
    assert_eq!(got[0]["Elements"]["PingTimeout"], 12_884_902);
    let got = answer_to_login(
        "bob",
        LoginResponseRepr {
            result: LoginResult::Denied,
            ping_interval_ms: None,
            text: "unknown user or wrong token",
        },
    );
    assert_eq!(got[0]["Type"], "Status");
    assert_eq!(got[0]["State"]["Stream"], "Closed");
    assert_eq!(
        got[0]["State"]["Text"],
        "denied: unknown user or wrong token"
    );
}

#[test]
fn requests_become_opens_with_their_view_snapshot_and_batch_ids() {
    let mut s = logged_in();
    assert_eq!(
        sent(
            &mut s,
            r#"{"ID":2,"Key":{"Service":"FEED1","Name":"AAA.O"}}"#
        ),
        ["OPEN 2 FEED1 AAA.O flags=0 view=None"]
    );
    assert_eq!(
        sent(
            &mut s,
            r#"{"ID":3,"Key":{"Name":"AAB.O"},"View":["BID","ASK"],"Streaming":false}"#
        ),
        ["OPEN 3 FEED1 AAB.O flags=1 view=Some([22, 25])"]
    );
    assert_eq!(
        sent(
            &mut s,
            r#"[{"ID":10,"Key":{"Name":["A.O","B.O"]}},{"ID":2,"Type":"Close"}]"#
        ),
        [
            "OPEN 11 FEED1 A.O flags=0 view=None",
            "OPEN 12 FEED1 B.O flags=0 view=None",
            "CLOSE 2"
        ]
    );
}

#[test]
fn refreshes_updates_and_statuses_go_to_their_stream() {
    let mut s = logged_in();
    sent(&mut s, r#"{"ID":5,"Key":{"Name":"AAA.O"}}"#);
    sent(&mut s, r#"{"ID":6,"Key":{"Name":"MSFT.*"}}"#);
    let fields = [
        Field::new(22, price(18920)),
        Field::new(15, Value::Enum(840)),
    ];
    let refresh = |id, name| {
        Message::Refresh(RefreshRepr {
            item_id: id,
            flags: crate::codec::refresh_flags::SOLICITED,
            timestamp_ns: 1,
            item_seq: 1,
            service: "FEED1",
            name,
            fields: FieldList::List(&fields),
        })
    };
    let got = to_json(&mut s, refresh(40, "AAA.O"));
    assert_eq!(
        got[0],
        serde_json::json!({"ID":5,"Type":"Refresh","Key":{"Service":"FEED1","Name":"AAA.O"},
            "State":{"Stream":"Open","Data":"Ok"},"SeqNumber":1,"ProviderTimeNs":1,
            "Fields":{"BID":189.20,"CURRENCY":840}})
    );
    assert_eq!(
        to_json(&mut s, refresh(41, "MSFT.O"))[0]["ID"],
        6,
        "by the glob"
    );
    let glob_update = to_json(
        &mut s,
        Message::Update(UpdateRepr {
            item_id: 41,
            timestamp_ns: 3,
            item_seq: 2,
            fields: FieldList::List(&fields[..1]),
        }),
    );
    assert_eq!(
        glob_update[0]["Key"]["Name"], "MSFT.O",
        "a glob's updates say their item"
    );
    let bid = [Field::new(22, price(18921))];
    let got = to_json(
        &mut s,
        Message::Update(UpdateRepr {
            item_id: 40,
            timestamp_ns: 2,
            item_seq: 2,
            fields: FieldList::List(&bid),
        }),
    );
    assert_eq!(
        got[0],
        serde_json::json!({"ID":5,"Type":"Update","UpdateType":"Quote","SeqNumber":2,
            "ProviderTimeNs":2,"Fields":{"BID":189.21}})
    );
    let status = |item_id, request_id, state, name| {
        Message::Status(StatusRepr {
            item_id,
            request_id,
            state,
            service: "FEED1",
            name,
            text: "why",
        })
    };
    let got = to_json(&mut s, status(0, 7, ItemState::NotEntitled, "ZZZ.O"));
    assert_eq!(
        got[0],
        serde_json::json!({"ID":7,"Type":"Status","State":{"Stream":"Closed","Data":"Suspect",
            "Code":"NotEntitled","Text":"why"}})
    );
    assert_eq!(
        to_json(&mut s, status(40, 0, ItemState::Stale, ""))[0]["ID"],
        5
    );
    // A whole service stale: one Status per stream.
    let got = to_json(&mut s, status(0, 0, ItemState::Stale, "*"));
    let ids: Vec<&Json> = got.iter().map(|g| &g["ID"]).collect();
    assert_eq!(ids, [5, 6]);
    // What a JSON client is not sent.
    let mut b = Vec::new();
    Message::Conflated(crate::codec::ConflatedRepr {
        items: 1,
        updates_dropped: 2,
    })
    .emit_to_vec(&mut b);
    assert_eq!(s.to_client(&b, None, &mut String::new()), 0);
}

#[test]
fn pings_pongs_posts_and_acks() {
    let mut s = logged_in();
    assert_eq!(
        to_json(&mut s, Message::Ping(PingRepr { payload: 77 })),
        [serde_json::json!({"Type":"Ping"})]
    );
    assert_eq!(sent(&mut s, r#"{"Type":"Pong"}"#), ["PONG 77"]);
    assert_eq!(sent(&mut s, r#"{"Type":"Ping"}"#), ["PING 0"]);
    let posted = sent(
        &mut s,
        r#"{"ID":9,"Type":"Post","Key":{"Service":"FEED1","Name":"AAA.O"},"PostID":3,"Ack":true,
            "Message":{"Type":"Update","Fields":{"BID":189.25,"BIDSIZE":"7"}}}"#,
    );
    assert_eq!(posted.len(), 1);
    assert!(
        posted[0].starts_with("POST 1 FEED1 AAA.O refresh=false"),
        "{posted:?}"
    );
    assert!(posted[0].contains("mantissa: 18925"), "{posted:?}");
    let got = to_json(
        &mut s,
        Message::Ack(AckRepr {
            origin: 0,
            post_id: 1,
            code: AckCode::Refused,
            text: "halted",
        }),
    );
    assert_eq!(
        got[0],
        serde_json::json!({"ID":9,"Type":"Ack","AckID":3,"NakCode":"DeniedBySrc","Text":"halted"})
    );
}

#[test]
fn bad_messages_are_errors_naming_what_is_wrong() {
    let mut s = session();
    let e = |s: &mut JsonSession, t: &str| s.from_client(t, &mut Vec::new()).unwrap_err().0;
    assert!(e(&mut s, "{").starts_with("not JSON"));
    assert!(e(&mut s, r#"{"ID":2,"Key":{"Name":"AAA.O"}}"#).starts_with("log in first"));
    assert!(e(&mut s, r#"{"ID":1,"Domain":"Login","Key":{"Name":"a"}}"#)
        .contains("AuthenticationToken"));
    let mut s = logged_in();
    assert!(e(&mut s, r#"{"Key":{"Name":"AAA.O"}}"#).contains("no ID"));
    assert!(e(&mut s, r#"{"ID":0,"Key":{"Name":"AAA.O"}}"#).contains("1 to 4294967295"));
    assert!(e(&mut s, r#"{"ID":2,"Type":"Shout"}"#).contains("Type Shout is not accepted"));
    assert!(e(&mut s, r#"{"ID":2,"Key":{"Name":"AAA.O"},"View":["NOPE"]}"#).contains("NOPE"));
    assert!(e(&mut s, r#"{"ID":2,"Domain":"Source","Key":{"Name":"x"}}"#).contains("Source"));
    assert!(e(&mut s, r#"{"ID":2,"Key":{"Name":"A B"}}"#).contains("A B"));
    assert!(e(
        &mut s,
        r#"{"ID":3,"Type":"Post","Key":{"Name":"AAA.O"},"Message":{"Fields":{"BID":"cheap"}}}"#
    )
    .contains("BID=cheap"));
}

#[test]
fn a_message_shared_by_clients_is_encoded_once_and_each_adds_its_stream_id() {
    let mut a = logged_in();
    let mut b = logged_in();
    sent(&mut a, r#"{"ID":5,"Key":{"Name":"AAA.O"}}"#);
    sent(&mut b, r#"{"ID":9,"Key":{"Name":"AAA.*"}}"#);
    let mut c = logged_in();
    sent(&mut c, r#"{"ID":7,"Key":{"Name":"AAA.O"}}"#);
    let fields = [Field::new(22, price(18920))];
    let mut refresh = Vec::new();
    aaa_refresh(0, 1, &fields).emit_to_vec(&mut refresh);
    let mut update = Vec::new();
    Message::Update(UpdateRepr {
        item_id: 40,
        timestamp_ns: 2,
        item_seq: 2,
        fields: FieldList::List(&fields),
    })
    .emit_to_vec(&mut update);
    for bytes in [&refresh, &update] {
        let mut shared = Shared::default();
        let (mut oa, mut ob) = (String::new(), String::new());
        a.to_client(bytes, Some(&mut shared), &mut oa);
        b.to_client(bytes, Some(&mut shared), &mut ob);
        let (ja, jb): (Json, Json) = (
            serde_json::from_str(&oa).unwrap(),
            serde_json::from_str(&ob).unwrap(),
        );
        assert_eq!((&ja["ID"], &jb["ID"]), (&Json::from(5), &Json::from(9)));
        assert_eq!(ja["Fields"], jb["Fields"]);
        // b's stream is a glob's: its update names the item, a's does not.
        if ja["Type"] == "Update" {
            assert!(
                ja.get("Key").is_none() && jb["Key"]["Name"] == "AAA.O",
                "{oa} {ob}"
            );
        }
        // A third client of an exact stream takes a's encoding as it is, with its own ID.
        let mut oc = String::new();
        c.to_client(bytes, Some(&mut shared), &mut oc);
        assert_eq!(oc, oa.replacen("\"ID\":5", "\"ID\":7", 1));
    }
}

#[test]
fn each_stream_of_an_item_gets_its_own_messages_with_its_own_view() {
    let mut s = logged_in();
    sent(&mut s, r#"{"ID":5,"Key":{"Name":"AAA.O"},"View":["BID"]}"#);
    sent(&mut s, r#"{"ID":6,"Key":{"Name":"AAA.O"},"View":["ASK"]}"#);
    sent(&mut s, r#"{"ID":7,"Key":{"Name":"AA*"}}"#);
    // The core sends the union of the views.
    let all = [
        Field::new(22, price(18920)),
        Field::new(25, price(18921)),
        Field::new(30, Value::Int(7)),
    ];
    let got = to_json(&mut s, aaa_refresh(0, 1, &all));
    let by_stream: Vec<(Json, Json)> = got
        .iter()
        .map(|m| (m["ID"].clone(), m["Fields"].clone()))
        .collect();
    assert_eq!(
        by_stream,
        [
            (5.into(), serde_json::json!({"BID":189.20})),
            (6.into(), serde_json::json!({"ASK":189.21})),
            (
                7.into(),
                serde_json::json!({"BID":189.20,"ASK":189.21,"BIDSIZE":7})
            ),
        ]
    );
    let update = |fields: &[Field<'_>]| {
        let mut b = Vec::new();
        Message::Update(UpdateRepr {
            item_id: 40,
            timestamp_ns: 2,
            item_seq: 2,
            fields: FieldList::List(fields),
        })
        .emit_to_vec(&mut b);
        b
    };
    // An update of BID alone: not to the ASK stream. The glob's names its item.
    let mut shared = Shared::default();
    let mut out = String::new();
    assert_eq!(
        s.to_client(&update(&all[..1]), Some(&mut shared), &mut out),
        2
    );
    let got: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(got[0]["ID"], 5);
    assert_eq!(
        (&got[1]["ID"], &got[1]["Key"]["Name"]),
        (&7.into(), &"AAA.O".into())
    );
    assert!(got[0].get("Key").is_none());
    // A stale item: one Status per stream.
    let stale = Message::Status(StatusRepr {
        item_id: 40,
        request_id: 0,
        state: ItemState::Stale,
        service: "FEED1",
        name: "",
        text: "",
    });
    let ids: Vec<Json> = to_json(&mut s, stale)
        .iter()
        .map(|m| m["ID"].clone())
        .collect();
    assert_eq!(ids, [5, 6, 7]);
    // Closed streams get nothing more; the one left gets the message as it came.
    sent(&mut s, r#"{"ID":5,"Type":"Close"}"#);
    sent(&mut s, r#"{"ID":7,"Type":"Close"}"#);
    let mut out = String::new();
    assert_eq!(s.to_client(&update(&all[..2]), None, &mut out), 1);
    let got: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(got["ID"], 6);
    assert_eq!(
        got["Fields"],
        serde_json::json!({"BID":189.20,"ASK":189.21})
    );
    sent(&mut s, r#"{"ID":6,"Type":"Close"}"#);
    assert_eq!(s.to_client(&update(&all), None, &mut String::new()), 0);
    // A snapshot's image goes to the snapshot's stream.
    sent(
        &mut s,
        r#"{"ID":9,"Key":{"Name":"AAA.O"},"Streaming":false}"#,
    );
    let got = to_json(
        &mut s,
        aaa_refresh(crate::codec::refresh_flags::SNAPSHOT, 3, &all),
    );
    assert_eq!(
        (&got[0]["ID"], &got[0]["State"]["Stream"]),
        (&9.into(), &"NonStreaming".into())
    );
}
