//! The distributor's protocol, on a virtual clock: a feed and clients driven by hand, every
//! output drained the way a driver would, every queue read back and decoded.

use super::*;
use crate::codec::{
    refresh_flags, CloseRepr, FieldList, LoginRepr, LoginResult, Message, Messages, OpenRepr,
    PatternList, PingKind, PingRepr, RefreshRepr, StatusRepr, UpdateRepr,
};
use crate::dictionary::Dictionary;
use crate::model::{Field, ItemState, Price, Value};
use feeds::FeedKey;
use std::collections::HashMap;
use std::net::IpAddr;

const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

const FEED1: &str = "FEED1";

/// A distributor, its clients' queues, and what it asked of the feed: a driver without
/// sockets.
struct Net {
    d: Distributor,
    now_ns: u64,
    queues: HashMap<ClientId, Vec<u8>>,
    disconnects: Vec<Disconnect>,
    image_requests: Vec<ImageRequest>,
    posts: Vec<PostForward>,
    events: Vec<Event>,
    dict: Dictionary,
}

fn users() -> Users {
    let mut alice = User::with_token("alice", b"alice-token", &["AAA.*", "MSFT.O"]);
    alice.services = Some(vec![FEED1.into()]);
    let bob = User::with_token("bob", b"bob-token", &["*"]).with_post(&["AAA.*"]);
    let mut carol = User::with_token("carol", b"carol-token", &["*"]);
    carol.slow = Some(SlowPolicy::Disconnect);
    Users::from_users(vec![alice, bob, carol])
}

fn price(hundredths: i64) -> Value<'static> {
    Value::Price(Price {
        mantissa: hundredths,
        exponent: -2,
    })
}

/// The default configuration of `services`, but that version 1 logins are taken.
fn v1_config(services: &[&str]) -> DistributorConfig {
    let mut config = DistributorConfig::new(services);
    config.min_client_version = 1;
    config
}

/// A LOGIN of protocol version 1.
fn v1_login(user: &str, token: &[u8]) -> Vec<u8> {
    encode(&Message::Login(LoginRepr {
        version: 1,
        ..LoginRepr::new(user, token)
    }))
}

fn encode(m: &Message<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    m.emit_to_vec(&mut b);
    b
}

fn refresh(feed_id: u32, name: &str, seq: u32, bid: i64) -> Vec<u8> {
    let fields = [Field::new(22, price(bid)), Field::new(30, Value::Int(100))];
    encode(&Message::Refresh(RefreshRepr {
        item_id: feed_id,
        flags: 0,
        timestamp_ns: 1,
        item_seq: seq,
        service: FEED1,
        name,
        fields: FieldList::List(&fields),
    }))
}

fn update(feed_id: u32, seq: u32, bid: i64) -> Vec<u8> {
    let fields = [Field::new(22, price(bid))];
    encode(&Message::Update(UpdateRepr {
        item_id: feed_id,
        timestamp_ns: 2,
        item_seq: seq,
        fields: FieldList::List(&fields),
    }))
}

impl Net {
    /// A distributor that also takes version 1 logins: [`login`](Self::login) uses version
    /// 1 on it (per-item STATUSes, no directory, no liveness), as most tests here check
    /// what both versions share; the version 2 tests log in with `login_v2`.
    fn new() -> Net {
        Net::with(v1_config(&[FEED1, "FEED2"]))
    }

    fn with(config: DistributorConfig) -> Net {
        Net {
            d: Distributor::new(config, Arc::new(users())).unwrap(),
            now_ns: 1_000,
            queues: HashMap::new(),
            disconnects: Vec::new(),
            image_requests: Vec::new(),
            posts: Vec::new(),
            events: Vec::new(),
            dict: Dictionary::builtin(),
        }
    }

    fn feed1(&self) -> ServiceId {
        self.d.service_id(FEED1).unwrap()
    }

    /// Drains every output as a driver does.
    fn pump(&mut self) {
        while let Some(t) = self.d.poll_transmit() {
            for c in t.clients {
                self.queues
                    .entry(*c)
                    .or_default()
                    .extend_from_slice(t.bytes);
            }
        }
        while let Some(r) = self.d.poll_image_request() {
            self.image_requests.push(r);
        }
        while let Some(p) = self.d.poll_post_forward() {
            self.posts.push(p);
        }
        while let Some(x) = self.d.poll_disconnect() {
            self.disconnects.push(x);
        }
        while let Some(e) = self.d.poll_event() {
            self.events.push(e);
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.now_ns += 1_000;
        let s = self.feed1();
        self.d.handle_backbone_message(s, bytes, self.now_ns);
        self.pump();
    }

    fn connect(&mut self) -> ClientId {
        let c = self
            .d
            .client_connected(self.now_ns, ClientLink::plain(LOOPBACK))
            .unwrap();
        self.queues.insert(c, Vec::new());
        c
    }

    fn send(&mut self, c: ClientId, bytes: &[u8]) {
        self.now_ns += 1_000;
        self.d.handle_client_bytes(c, bytes, self.now_ns);
        self.pump();
    }

    fn login(&mut self, user: &str) -> ClientId {
        if self.d.config().min_client_version == 1 {
            return self.login_v1(user);
        }
        let c = self.connect();
        let token = format!("{user}-token");
        self.send(
            c,
            &encode(&Message::Login(LoginRepr::new(user, token.as_bytes()))),
        );
        let got = self.take(c);
        assert_eq!(got[0], "LOGIN_RESPONSE accepted");
        assert!(
            got[1..].iter().all(|m| m.starts_with("DIRECTORY complete")) && got.len() <= 2,
            "a version 2 login is followed by the directory: {got:?}"
        );
        c
    }

    /// Logs `user` in with protocol version 1 (the distributor must accept it): no liveness,
    /// no directory, a STATUS per item.
    fn login_v1(&mut self, user: &str) -> ClientId {
        let c = self.connect();
        let token = format!("{user}-token");
        let login = LoginRepr {
            version: 1,
            ..LoginRepr::new(user, token.as_bytes())
        };
        self.send(c, &encode(&Message::Login(login)));
        assert_eq!(self.take(c), ["LOGIN_RESPONSE accepted"]);
        c
    }

    fn open(&mut self, c: ClientId, request_id: u32, service: &str, patterns: &[&str]) {
        let m = encode(&Message::Open(OpenRepr {
            flags: 0,
            request_id,
            service,
            patterns: PatternList::List(patterns),
            view: None,
        }));
        self.send(c, &m);
    }

    /// Decodes and empties the client's queue, and tells the distributor it drained.
    fn take(&mut self, c: ClientId) -> Vec<String> {
        let bytes = self
            .queues
            .get_mut(&c)
            .map(std::mem::take)
            .unwrap_or_default();
        self.d.client_drained(c, 0);
        self.pump();
        let mut out = Vec::new();
        let mut m = Messages::new(&bytes);
        for msg in m.by_ref() {
            let (_, b) = msg.expect("the distributor frames its stream");
            out.push(self.describe(b));
        }
        assert!(m.remaining().is_empty(), "a partial message in the queue");
        out
    }

    fn describe(&self, b: &[u8]) -> String {
        match Message::parse(b).expect("the distributor sends valid messages") {
            Message::Refresh(r) => {
                let mut flags = String::new();
                if r.flags & refresh_flags::SOLICITED != 0 {
                    flags.push_str(" SOLICITED");
                }
                if r.flags & refresh_flags::CONFLATED != 0 {
                    flags.push_str(" CONFLATED");
                }
                let fields = self.dict.display(&r.fields).to_string();
                format!("REFRESH {} {}{flags} {fields}", r.item_id, r.name)
            }
            Message::Update(u) => format!(
                "UPDATE {} seq={} {}",
                u.item_id,
                u.item_seq,
                self.dict.display(&u.fields)
            ),
            Message::Status(s) => format!(
                "STATUS {} req={} {} {}/{}: {}",
                s.item_id,
                s.request_id,
                s.state.name(),
                s.service,
                s.name,
                s.text
            ),
            Message::LoginResponse(l) if l.text.is_empty() => {
                format!("LOGIN_RESPONSE {}", l.result.name())
            }
            Message::LoginResponse(l) => {
                format!("LOGIN_RESPONSE {}: {}", l.result.name(), l.text)
            }
            Message::Conflated(c) => {
                format!("CONFLATED items={} dropped={}", c.items, c.updates_dropped)
            }
            Message::Ping(p) => format!("PING {}", p.payload),
            Message::Directory(d) => {
                let mut t = String::from(if d.complete {
                    "DIRECTORY complete"
                } else {
                    "DIRECTORY change"
                });
                for e in d.services.iter() {
                    t.push_str(&format!(
                        " {}={}{}",
                        e.name,
                        if e.up { "up" } else { "down" },
                        if e.open { "" } else { "(closed)" }
                    ));
                }
                t
            }
            Message::Pong(p) => format!("PONG {}", p.payload),
            Message::Ack(a) if a.text.is_empty() => format!("ACK {} {}", a.post_id, a.code),
            Message::Ack(a) => format!("ACK {} {}: {}", a.post_id, a.code, a.text),
            Message::Dictionary(d) => format!(
                "DICTIONARY part={}{} fields={}",
                d.part,
                if d.complete { " complete" } else { "" },
                d.fields.len()
            ),
            other => panic!("a client never receives {:?}", other.message_type()),
        }
    }

    fn disconnected(&self, c: ClientId) -> Option<DisconnectReason> {
        self.disconnects
            .iter()
            .find(|d| d.client == c)
            .map(|d| d.reason)
    }
}

#[test]
fn a_watched_item_gets_its_refresh_then_every_update_restamped_with_the_distributors_id() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 18921));
    let a = net.login("alice");
    net.open(a, 1, FEED1, &["AAA.O"]);
    assert_eq!(
        net.take(a),
        ["REFRESH 1 AAA.O SOLICITED BID=189.21 BIDSIZE=100"]
    );
    for (seq, bid) in [(2, 18922), (3, 18923)] {
        net.feed(&update(500, seq, bid));
    }
    assert_eq!(
        net.take(a),
        ["UPDATE 1 seq=2 BID=189.22", "UPDATE 1 seq=3 BID=189.23"]
    );
    // The forwarded bytes are the feed's, but for the item id.
    let sent = update(500, 4, 1);
    net.feed(&sent);
    let got = net.queues[&a].clone();
    assert_eq!(got[..4], sent[..4]);
    assert_eq!(got[4..8], 1u32.to_le_bytes());
    assert_eq!(got[8..], sent[8..]);
    assert_eq!(net.d.counters().updates_applied, 3);
}

#[test]
fn the_same_update_bytes_are_listed_once_with_every_watcher() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 100));
    let a = net.login("alice");
    let b = net.login("bob");
    net.open(a, 1, FEED1, &["AAA.O"]);
    net.open(b, 1, FEED1, &["*"]);
    net.take(a);
    net.take(b);
    net.d
        .handle_backbone_message(net.feed1(), &update(500, 2, 101), 9_000);
    let t = net.d.poll_transmit().unwrap();
    assert_eq!(t.clients.len(), 2);
    assert!(t.clients.contains(&a) && t.clients.contains(&b));
    assert_eq!(t.bytes.len(), update(500, 2, 101).len());
    assert!(net.d.poll_transmit().is_none());
}

#[test]
fn an_exact_name_not_in_the_cache_is_not_found_then_opened_when_its_refresh_arrives() {
    let mut net = Net::new();
    let a = net.login("alice");
    net.open(a, 7, FEED1, &["MSFT.O"]);
    assert_eq!(
        net.take(a),
        [
            "STATUS 0 req=7 not-found FEED1/MSFT.O: not in the cache yet: kept open, its REFRESH \
          follows if the feed publishes it"
        ]
    );
    net.feed(&refresh(9, "MSFT.O", 1, 4000));
    net.feed(&update(9, 2, 4001));
    assert_eq!(
        net.take(a),
        [
            "REFRESH 1 MSFT.O BID=40.00 BIDSIZE=100",
            "UPDATE 1 seq=2 BID=40.01"
        ]
    );
}

#[test]
fn a_glob_answers_what_the_cache_has_and_follows_items_that_appear_later() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    net.feed(&refresh(2, "AAB.O", 1, 200));
    let a = net.login("alice");
    net.open(a, 1, FEED1, &["AA?.*"]);
    assert_eq!(
        net.take(a),
        ["REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100"]
    );
    net.feed(&refresh(3, "AAA.L", 1, 300));
    assert_eq!(net.take(a), ["REFRESH 3 AAA.L BID=3.00 BIDSIZE=100"]);
}

#[test]
fn a_user_never_receives_an_item_it_is_not_entitled_to() {
    let mut net = Net::new();
    for (fid, name) in [(1, "AAA.O"), (2, "IBM.N"), (3, "MSFT.O"), (4, "ZZZ.O")] {
        net.feed(&refresh(fid, name, 1, 100));
    }
    let a = net.login("alice");
    // Exact names, a glob over everything, and a batch of both in one OPEN.
    net.open(a, 1, FEED1, &["IBM.N"]);
    net.open(a, 2, FEED1, &["*"]);
    net.open(a, 3, FEED1, &["ZZZ.O", "MSFT.O", "Z*"]);
    net.open(a, 4, "FEED2", &["AAA.O"]);
    let got = net.take(a);
    assert_eq!(
        got,
        [
            "STATUS 0 req=1 not-entitled FEED1/IBM.N: user alice may not see IBM.N",
            "REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100",
            "REFRESH 3 MSFT.O SOLICITED BID=1.00 BIDSIZE=100",
            "STATUS 0 req=3 not-entitled FEED1/ZZZ.O: user alice may not see ZZZ.O",
            "REFRESH 3 MSFT.O SOLICITED BID=1.00 BIDSIZE=100",
            "STATUS 0 req=4 not-entitled FEED2/AAA.O: user alice may not open service FEED2",
        ]
    );
    // Updates and new items she may not see never reach her.
    net.feed(&update(2, 2, 1));
    net.feed(&update(4, 2, 1));
    net.feed(&refresh(5, "ZZZ.L", 1, 1));
    net.feed(&update(1, 2, 5));
    assert_eq!(net.take(a), ["UPDATE 1 seq=2 BID=0.05"]);
    assert_eq!(net.d.counters().not_entitled, 3);
}

#[test]
fn a_name_in_a_service_the_distributor_does_not_carry_is_not_found() {
    let mut net = Net::new();
    let b = net.login("bob");
    net.open(b, 1, "FEED9", &["X", "Y*"]);
    assert_eq!(
        net.take(b),
        [
            "STATUS 0 req=1 not-found FEED9/X: service FEED9 is not carried by this distributor",
            "STATUS 0 req=1 not-found FEED9/Y*: service FEED9 is not carried by this distributor",
        ]
    );
}

#[test]
fn bad_logins_are_answered_with_a_login_response_counted_and_closed() {
    let mut net = Net::new();
    let cases: Vec<(Vec<u8>, &str)> =
        vec![
        (
            v1_login("alice", b"wrong"),
            "LOGIN_RESPONSE denied: unknown user or wrong token",
        ),
        (
            v1_login("mallory", b"alice-token"),
            "LOGIN_RESPONSE denied: unknown user or wrong token",
        ),
        (
            {
                let mut b = v1_login("alice", b"alice-token");
                b[12] = 3;
                b
            },
            "LOGIN_RESPONSE unsupported-version: protocol version 3 is not supported: this \
             distributor speaks versions 1 to 2",
        ),
        (
            encode(&Message::Close(CloseRepr { request_id: 1 })),
            "LOGIN_RESPONSE denied: log in first: the first message must be LOGIN, not CLOSE",
        ),
        (
            vec![4, 0, 0, 0],
            "LOGIN_RESPONSE denied: malformed message: bad length 4: smaller than the 8-byte \
             header",
        ),
        (
            vec![16, 0, 0x10, 0, 0, 0, 0, 0, b'X', b'G', b'M', b'D', 1, 0, 0, 0],
            "LOGIN_RESPONSE denied: malformed message: LOGIN magic 0x444d4758 is not \"PGMD\": \
             not a Peregrine market data client",
        ),
    ];
    for (bytes, answer) in &cases {
        let c = net.connect();
        net.send(c, bytes);
        assert_eq!(net.take(c), [*answer]);
        assert!(matches!(
            net.disconnected(c),
            Some(DisconnectReason::LoginDenied(_))
        ));
        assert!(net.disconnects.last().unwrap().flush());
        // Whatever it sends next is ignored.
        net.send(c, &encode(&Message::Close(CloseRepr { request_id: 1 })));
        assert!(net.take(c).is_empty());
    }
    assert_eq!(net.d.counters().logins_denied, cases.len() as u64);
    assert_eq!(net.d.counters().malformed_messages, 2);
    assert_eq!(net.d.footprint().clients, 0);
}

#[test]
fn a_client_that_does_not_log_in_in_time_is_refused() {
    let mut net = Net::new();
    let c = net.connect();
    let deadline = net.d.poll_timeout().unwrap();
    net.d.handle_timeout(deadline - 1);
    net.pump();
    assert!(net.disconnected(c).is_none());
    net.d.handle_timeout(deadline);
    net.pump();
    assert_eq!(
        net.take(c),
        ["LOGIN_RESPONSE denied: no LOGIN within 10000 ms of connecting"]
    );
    assert!(net.d.poll_timeout().is_none());
}

#[test]
fn malformed_or_out_of_order_messages_after_login_are_rejected_with_a_status_and_closed() {
    let mut net = Net::new();
    let mut bad_open = encode(&Message::Open(OpenRepr {
        flags: 0,
        request_id: 1,
        service: FEED1,
        patterns: PatternList::List(&["A B"]),
        view: None,
    }));
    bad_open[13] = 1; // reserved
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            bad_open,
            "STATUS 0 req=0 rejected /: malformed message: field open.reserved has invalid \
             value 1 (see docs/market-data.md)",
        ),
        (
            v1_login("bob", b"bob-token"),
            "STATUS 0 req=0 rejected /: already logged in: LOGIN is sent once",
        ),
        (
            update(1, 1, 1),
            "STATUS 0 req=0 rejected /: UPDATE is not a message clients send (OPEN, CLOSE)",
        ),
        (
            vec![8, 0, 0x7f, 0, 0, 0, 0, 0],
            "STATUS 0 req=0 rejected /: malformed message: unknown message type 0x7f",
        ),
    ];
    for (bytes, answer) in &cases {
        let c = net.login("bob");
        net.send(c, bytes);
        assert_eq!(net.take(c), [*answer]);
        assert!(matches!(
            net.disconnected(c),
            Some(DisconnectReason::Protocol(_))
        ));
    }
    assert_eq!(net.d.counters().protocol_errors, cases.len() as u64);
}

#[test]
fn a_refused_request_is_answered_but_the_connection_stays() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.send(b, &encode(&Message::Close(CloseRepr { request_id: 9 })));
    assert_eq!(
        net.take(b),
        [
            "REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100",
            "STATUS 0 req=1 rejected /: request id 1 is already open: choose another or CLOSE \
             it first",
            "STATUS 0 req=9 rejected /: no open request has id 9",
        ]
    );
    assert!(net.disconnected(b).is_none());
    assert_eq!(net.d.counters().requests_rejected, 2);
}

#[test]
fn close_keeps_the_items_another_request_still_opened() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    net.feed(&refresh(2, "AAA.L", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.open(b, 2, FEED1, &["AAA.*"]);
    net.take(b);
    net.send(b, &encode(&Message::Close(CloseRepr { request_id: 2 })));
    net.feed(&update(1, 2, 1));
    net.feed(&update(2, 2, 1));
    assert_eq!(net.take(b), ["UPDATE 1 seq=2 BID=0.01"]);
    net.send(b, &encode(&Message::Close(CloseRepr { request_id: 1 })));
    net.feed(&update(1, 3, 1));
    assert!(net.take(b).is_empty());
    assert_eq!(net.d.client_stats(b).unwrap().watched, 0);
}

#[test]
fn messages_split_into_single_bytes_are_reassembled() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let c = net.connect();
    let stream = login_then_open("bob", b"bob-token", "AAA.O");
    for b in &stream {
        net.send(c, std::slice::from_ref(b));
    }
    assert_eq!(
        net.take(c),
        [
            "LOGIN_RESPONSE accepted",
            "REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100"
        ]
    );
    assert_eq!(net.d.footprint().input_bytes, 0);
}

fn slow_net() -> Net {
    let mut config = v1_config(&[FEED1]);
    config.max_queue_bytes = MIN_QUEUE_BYTES;
    Net::with(config)
}

#[test]
fn a_client_that_stops_draining_is_conflated_while_the_others_get_everything() {
    let mut net = slow_net();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    net.feed(&refresh(2, "AAA.L", 1, 100));
    let fast = net.login("bob");
    let slow = net.login("alice");
    net.open(fast, 1, FEED1, &["AAA.*"]);
    net.open(slow, 1, FEED1, &["AAA.*"]);
    net.take(fast);
    net.take(slow);
    let per_update = update(1, 2, 1).len();
    let n = 2 * MIN_QUEUE_BYTES / per_update;
    let mut fast_got = 0;
    for i in 0..n as u32 {
        net.feed(&update(1 + i % 2, 2 + i / 2, i64::from(i)));
        fast_got += net.take(fast).len();
        // The slow client's queue never holds more than the bound.
        assert!(net.queues[&slow].len() <= MIN_QUEUE_BYTES);
    }
    assert_eq!(fast_got, n);
    let stats = net.d.client_stats(slow).unwrap();
    assert!(stats.conflating);
    assert!(stats.updates_dropped > 0);
    assert!(net.events.contains(&Event::Conflating { client: slow }));
    assert!(net.d.footprint().conflated_items <= 2);
    // The backlog drains: CONFLATED, then one REFRESH per changed item with its latest image.
    let before = net.take(slow);
    assert!(before.iter().all(|m| m.starts_with("UPDATE")));
    let got = net.take(slow);
    // Item 1 took the even-numbered updates, item 2 the odd ones.
    let last_of = |parity: usize| (0..n).rev().find(|i| i % 2 == parity).unwrap() as i64;
    let bid = |v: i64| format!("{}.{:02}", v / 100, v % 100);
    assert_eq!(
        got,
        [
            format!("CONFLATED items=2 dropped={}", stats.updates_dropped),
            format!(
                "REFRESH 1 AAA.O CONFLATED BID={} BIDSIZE=100",
                bid(last_of(0))
            ),
            format!(
                "REFRESH 2 AAA.L CONFLATED BID={} BIDSIZE=100",
                bid(last_of(1))
            ),
        ]
    );
    assert!(!net.d.client_stats(slow).unwrap().conflating);
    assert!(net.events.contains(&Event::CaughtUp { client: slow }));
    // And it gets updates again.
    let next = net.d.cache().get(1).unwrap().item_seq + 1;
    net.feed(&update(1, next, 7));
    assert_eq!(net.take(slow), [format!("UPDATE 1 seq={next} BID=0.07")]);
}

#[test]
fn a_slow_client_whose_policy_is_disconnect_is_disconnected_and_the_others_continue() {
    let mut net = slow_net();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let carol = net.login("carol");
    let bob = net.login("bob");
    net.open(carol, 1, FEED1, &["AAA.O"]);
    net.open(bob, 1, FEED1, &["AAA.O"]);
    net.take(carol);
    net.take(bob);
    let mut seq = 2;
    while net.disconnected(carol).is_none() {
        net.feed(&update(1, seq, 1));
        assert_eq!(net.take(bob).len(), 1);
        seq += 1;
        assert!(seq < 100_000, "never disconnected");
    }
    assert_eq!(net.disconnected(carol), Some(DisconnectReason::Slow));
    assert!(!net.disconnects.last().unwrap().flush());
    assert_eq!(net.d.counters().slow_disconnects, 1);
    net.feed(&update(1, seq, 1));
    assert_eq!(net.take(bob).len(), 1);
    assert_eq!(net.d.footprint().clients, 1);
}

#[test]
fn backbone_loss_makes_items_stale_then_fresh_refreshes_bring_them_back() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    net.feed(&refresh(2, "AAA.L", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.*"]);
    net.take(b);
    net.image_requests.clear();
    let s = net.feed1();
    net.d.handle_backbone_loss(s, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(b),
        [
            "STATUS 2 req=0 stale FEED1/AAA.L: backbone loss: waiting for a fresh image",
            "STATUS 1 req=0 stale FEED1/AAA.O: backbone loss: waiting for a fresh image",
        ]
    );
    assert_eq!(net.image_requests.len(), 1);
    assert_eq!(net.image_requests[0].feed_item_id, 0);
    assert_eq!(
        net.image_requests[0].to_bytes()[..8],
        [12, 0, 0x20, 0, 0, 0, 0, 0]
    );
    // Updates of a stale item are not forwarded: no silent gap.
    net.feed(&update(1, 5, 1));
    assert!(net.take(b).is_empty());
    net.feed(&refresh(1, "AAA.O", 9, 300));
    net.feed(&update(1, 10, 301));
    assert_eq!(
        net.take(b),
        [
            "REFRESH 1 AAA.O BID=3.00 BIDSIZE=100",
            "UPDATE 1 seq=10 BID=3.01"
        ]
    );
    assert_eq!(
        net.d.cache().get(2).unwrap().state,
        ItemState::Stale,
        "AAA.L waits for its own REFRESH"
    );
}

/// Bob watching AAA.O of FEED1, whose feed then went away: (net, bob, FEED1's id, what bob
/// was told).
fn bob_watching_a_feed_that_went(net: &mut Net) -> (ClientId, ServiceId, Vec<String>) {
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.take(b);
    let s = net.feed1();
    net.d.feed_gone(s, net.now_ns);
    net.pump();
    let told = net.take(b);
    net.image_requests.clear();
    (b, s, told)
}

#[test]
fn a_feed_that_goes_and_comes_back_gives_stale_then_fresh_images_under_the_same_ids() {
    let mut net = Net::new();
    let (b, s, told) = bob_watching_a_feed_that_went(&mut net);
    assert_eq!(
        told,
        ["STATUS 1 req=0 stale FEED1/AAA.O: the feed went away: waiting for it to come back"]
    );
    // Joined in the middle of the new session: every image is asked for.
    net.d.feed_back(s, false, net.now_ns);
    net.pump();
    assert_eq!(net.image_requests.len(), 1);
    assert_eq!(net.image_requests[0].feed_item_id, 0, "every item");
    // The new feed numbers the item differently; the client keeps the distributor's id.
    net.feed(&refresh(77, "AAA.O", 1, 200));
    net.feed(&update(77, 2, 201));
    assert_eq!(
        net.take(b),
        [
            "REFRESH 1 AAA.O BID=2.00 BIDSIZE=100",
            "UPDATE 1 seq=2 BID=2.01"
        ]
    );
}

#[test]
fn a_feed_session_joined_from_its_first_message_is_not_asked_for_images() {
    let mut net = Net::new();
    let (b, s, _) = bob_watching_a_feed_that_went(&mut net);
    // The restarted feed's start-up image is the first message of its session, and the
    // transport delivers the session from it: it is the one image, none is asked for.
    net.feed(&refresh(5, "AAA.O", 1, 300));
    net.d.feed_back(s, true, net.now_ns);
    net.pump();
    assert!(net.image_requests.is_empty(), "{:?}", net.image_requests);
    assert_eq!(net.d.counters().feeds_joined_at_start, 1);
    net.feed(&update(5, 2, 301));
    assert_eq!(
        net.take(b),
        [
            "REFRESH 1 AAA.O BID=3.00 BIDSIZE=100",
            "UPDATE 1 seq=2 BID=3.01"
        ]
    );
    // An item whose image the feed did not send (it has none, or it was dropped) is still
    // asked for when its first UPDATE comes.
    net.feed(&update(6, 1, 302));
    assert_eq!(net.image_requests.len(), 1);
    assert_eq!(net.image_requests[0].feed_item_id, 6);
}

#[test]
fn an_update_without_an_image_asks_for_it_once_per_retry_interval() {
    let mut net = Net::new();
    net.feed(&update(42, 1, 1));
    net.feed(&update(42, 2, 1));
    assert_eq!(net.image_requests.len(), 1);
    assert_eq!(net.image_requests[0].feed_item_id, 42);
    net.now_ns += net.d.config().image_retry_ns;
    net.feed(&update(42, 3, 1));
    assert_eq!(net.image_requests.len(), 2);
    assert_eq!(net.d.counters().updates_without_image, 3);
}

#[test]
fn a_sequence_gap_makes_the_item_stale_and_asks_for_its_image() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.take(b);
    net.image_requests.clear();
    net.feed(&update(1, 3, 1));
    assert_eq!(
        net.take(b),
        ["STATUS 1 req=0 stale FEED1/AAA.O: missed an update (item_seq 3, expected 2)"]
    );
    assert_eq!(net.image_requests.len(), 1);
    assert_eq!(net.image_requests[0].feed_item_id, 1);
    assert_eq!(net.d.counters().sequence_gaps, 1);
}

#[test]
fn the_feeds_status_reaches_watchers_and_closed_drops_the_image() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.take(b);
    let closed = encode(&Message::Status(StatusRepr {
        item_id: 1,
        request_id: 0,
        state: ItemState::Closed,
        service: "",
        name: "",
        text: "delisted",
    }));
    net.feed(&closed);
    assert_eq!(net.take(b), ["STATUS 1 req=0 closed FEED1/AAA.O: delisted"]);
    assert!(net.d.cache().get(1).unwrap().image().is_empty());
    // A later OPEN of a closed item is answered with its state.
    net.open(b, 2, FEED1, &["AAA.O"]);
    assert_eq!(net.take(b), ["STATUS 1 req=2 closed FEED1/AAA.O: "]);
}

#[test]
fn backbone_messages_a_feed_does_not_send_are_rejected_and_counted() {
    let mut net = Net::new();
    net.feed(&encode(&Message::Close(CloseRepr { request_id: 1 })));
    net.feed(&[1, 2, 3]);
    let mut other = refresh(1, "AAA.O", 1, 1);
    other[24..29].copy_from_slice(b"FEED2");
    net.feed(&other);
    let mut two = refresh(1, "AAA.O", 1, 1);
    two.extend(update(1, 2, 1));
    net.feed(&two);
    assert_eq!(net.d.counters().backbone_rejected, 4);
    assert_eq!(net.d.cache().len(), 0);
}

#[test]
fn the_cache_is_bounded_by_max_items() {
    let mut config = v1_config(&[FEED1]);
    config.max_items = 2;
    let mut net = Net::with(config);
    for i in 1..=5 {
        net.feed(&refresh(i, &format!("I{i}"), 1, 1));
    }
    assert_eq!(net.d.cache().len(), 2);
    assert_eq!(net.d.counters().cache_full, 3);
}

#[test]
fn a_client_past_its_bound_that_keeps_requesting_is_disconnected() {
    let mut net = slow_net();
    let b = net.login("bob");
    let mut rid = 1;
    while net.disconnected(b).is_none() {
        // Never drained: each OPEN's not-found answers pile up.
        net.open(b, rid, "FEED9", &["X"; 200]);
        rid += 1;
        assert!(rid < 10_000);
    }
    assert_eq!(net.disconnected(b), Some(DisconnectReason::Slow));
    assert!(net.queues[&b].len() <= MIN_QUEUE_BYTES);
}

#[test]
fn invalid_configurations_are_refused_with_what_is_accepted() {
    let mut c = v1_config(&[FEED1, FEED1]);
    assert_eq!(
        c.validate().unwrap_err().to_string(),
        "service \"FEED1\" is named twice"
    );
    c.services = vec!["FEED 1".into()];
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("holds the character ' '"));
    c.services = vec![FEED1.into()];
    c.max_queue_bytes = 1000;
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("max_queue_bytes = 1000 is too small: at least 131102"));
}

#[test]
fn counter_names_are_stable() {
    let c = Counters::default();
    let names: Vec<_> = c.values().map(|(n, _)| n).collect();
    assert_eq!(names, Counters::NAMES);
    assert_eq!(names[0], "clients_connected");
    assert!(names.contains(&"updates_conflated"));
}

/// Issue 34, item 10: a provider answering an image request with the image the watchers
/// already have (the same item_seq and fields) sends them nothing; a different image, or a
/// new item_seq, is a REFRESH as before.
#[test]
fn a_repeated_image_is_not_sent_to_watchers_again() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 18921));
    let a = net.login("alice");
    net.open(a, 1, FEED1, &["AAA.O"]);
    assert_eq!(net.take(a).len(), 1);
    net.feed(&update(500, 2, 18922));
    assert_eq!(net.take(a), ["UPDATE 1 seq=2 BID=189.22"]);
    // The image as of item_seq 2, as the provider answers a request: nothing new.
    let mut image = Vec::new();
    let fields = [
        Field::new(22, price(18922)),
        Field::new(30, Value::Int(100)),
    ];
    Message::Refresh(RefreshRepr {
        item_id: 500,
        flags: refresh_flags::SOLICITED,
        timestamp_ns: 1,
        item_seq: 2,
        service: FEED1,
        name: "AAA.O",
        fields: FieldList::List(&fields),
    })
    .emit_to_vec(&mut image);
    net.feed(&image);
    assert!(net.take(a).is_empty(), "the same image twice");
    net.feed(&update(500, 3, 18923));
    assert_eq!(net.take(a), ["UPDATE 1 seq=3 BID=189.23"]);
    // A new image (another item_seq) still goes out.
    net.feed(&refresh(500, "AAA.O", 4, 18930));
    assert_eq!(net.take(a), ["REFRESH 1 AAA.O BID=189.30 BIDSIZE=100"]);
}

/// Issue 29, item 5: an OPEN of 10,000 globs is refused before any is matched (at most
/// `max_globs_per_client` open per connection); the same glob repeated is one glob, and an
/// item matched by several globs of a request is listed, and sent, once.
#[test]
fn globs_are_bounded_before_they_are_matched_and_each_item_is_listed_once() {
    let mut net = Net::new();
    for (i, name) in ["AAA.O", "AAB.O", "BBB.O"].iter().enumerate() {
        net.feed(&refresh(i as u32 + 1, name, 1, 100));
    }
    let a = net.login("bob");
    let flood = vec!["*"; 10_000];
    net.open(a, 1, FEED1, &flood);
    let got = net.take(a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("rejected") && got[0].contains("too many globs (at most 256"),
        "{got:?}"
    );
    assert!(net.disconnected(a).is_none(), "the connection stays");
    // Repeated and overlapping globs: each item once.
    net.open(a, 2, FEED1, &["*", "*", "AA*", "A?A.O"]);
    let mut got = net.take(a);
    got.sort();
    assert_eq!(
        got,
        [
            "REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100",
            "REFRESH 2 AAB.O SOLICITED BID=1.00 BIDSIZE=100",
            "REFRESH 3 BBB.O SOLICITED BID=1.00 BIDSIZE=100",
        ]
    );
    // 3 globs open (the repeated one counts once): 253 more fit, 254 do not.
    let more: Vec<String> = (0..254).map(|i| format!("X{i}*")).collect();
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    net.open(a, 3, FEED1, &more);
    assert!(net.take(a)[0].contains("too many globs"));
    net.open(a, 4, FEED1, &more[..253]);
    assert!(net.take(a).is_empty(), "253 globs that match nothing yet");
}

impl Net {
    fn connect_from(&mut self, link: ClientLink) -> Result<ClientId, TooManyClients> {
        let c = self.d.client_connected(self.now_ns, link)?;
        self.queues.insert(c, Vec::new());
        Ok(c)
    }

    fn login_as(&mut self, c: ClientId, user: &str, token: &[u8]) -> Vec<String> {
        self.send(c, &v1_login(user, token));
        self.take(c)
    }
}

const ACCEPTED: &str = "LOGIN_RESPONSE accepted";

/// A LOGIN and, in the same bytes, request 1 for `name` of FEED1.
fn login_then_open(user: &str, token: &[u8], name: &str) -> Vec<u8> {
    let mut bytes = v1_login(user, token);
    bytes.extend(encode(&Message::Open(OpenRepr {
        flags: 0,
        request_id: 1,
        service: FEED1,
        patterns: PatternList::List(&[name]),
        view: None,
    })));
    bytes
}

fn remote(last: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, last))
}

/// Issue 29, item 4: a token login over plaintext from a non-loopback address is refused
/// unless the operator allows it; over TLS, or from loopback, it is accepted.
#[test]
fn a_plaintext_login_from_another_host_is_refused_unless_allowed() {
    let mut net = Net::new();
    let c = net.connect_from(ClientLink::plain(remote(1))).unwrap();
    let answer = net.login_as(c, "bob", b"bob-token");
    assert_eq!(answer.len(), 1);
    assert!(
        answer[0].starts_with(
            "LOGIN_RESPONSE denied: a login over plaintext from a non-loopback address is refused"
        ),
        "{answer:?}"
    );
    let tls = ClientLink {
        peer: remote(1),
        tls: true,
    };
    let c = net.connect_from(tls).unwrap();
    assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);

    let mut config = v1_config(&[FEED1]);
    config.allow_plaintext_logins = true;
    let mut net = Net::with(config);
    let c = net.connect_from(ClientLink::plain(remote(1))).unwrap();
    assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);
}

/// Issue 29, item 6: a brute force of 10,000 wrong tokens in one second from one address
/// gets its free failures checked, then is refused unchecked with a growing delay; the right
/// token from that address waits too, while another address logs in at once.
#[test]
fn a_login_brute_force_is_throttled_per_address_and_per_user() {
    let mut net = Net::new();
    let attacker = ClientLink::plain(LOOPBACK);
    let mut denied = 0;
    let mut throttled = 0;
    for i in 0..10_000u32 {
        let c = net.connect_from(attacker).unwrap();
        let answer = net.login_as(c, "bob", format!("guess-{i}").as_bytes());
        if answer[0].contains("unknown user or wrong token") {
            denied += 1;
        } else {
            assert!(answer[0].contains("too many failed logins"), "{answer:?}");
            throttled += 1;
        }
        net.now_ns += 100_000; // 10,000 in a second
    }
    // The free failures, then one check per expired delay: 100 ms, 200, 400 ms fit in a
    // second.
    assert!(denied <= 3 + 4, "{denied} guesses were checked");
    assert_eq!(denied + throttled, 10_000);
    assert_eq!(net.d.counters().logins_throttled, throttled);
    // bob's right token is held back too (his name is being guessed) ...
    let c = net.connect_from(attacker).unwrap();
    assert!(net.login_as(c, "bob", b"bob-token")[0].contains("too many failed logins"));
    // ... while alice, from another address, logs in at once.
    let c = net
        .connect_from(ClientLink {
            peer: remote(7),
            tls: true,
        })
        .unwrap();
    assert_eq!(net.login_as(c, "alice", b"alice-token"), [ACCEPTED]);
    // Once the delay passed, bob's right token is accepted.
    net.now_ns += throttle::MAX_DELAY_NS;
    let c = net.connect_from(attacker).unwrap();
    assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);
    assert_eq!(net.d.footprint().clients, 2);
}

/// Issue 29, item 5: connections that never log in hold pending slots only; past
/// `max_pending_clients` the oldest is closed, so an honest client still logs in. One
/// address and one user are bounded too, and `max_clients` counts logged-in clients.
#[test]
fn slots_cannot_be_exhausted_before_or_after_login() {
    let mut config = v1_config(&[FEED1]);
    config.max_pending_clients = 8;
    config.max_clients_per_address = 20;
    config.max_clients_per_user = 3;
    config.max_clients = 5;
    let mut net = Net::with(config);
    // 1,000 connections that never log in, from 100 addresses.
    let mut idle = Vec::new();
    for i in 0..1000u32 {
        let c = net
            .connect_from(ClientLink::plain(remote((i % 100) as u8)))
            .unwrap();
        idle.push(c);
    }
    net.pump();
    assert_eq!(net.d.counters().pending_evicted, 1000 - 8);
    let evicted = idle
        .iter()
        .filter(|&&c| {
            matches!(
                net.disconnected(c),
                Some(DisconnectReason::LoginDenied(ClientError::Evicted {
                    max: 8
                }))
            )
        })
        .count();
    assert_eq!(evicted, 1000 - 8);
    for c in idle.iter().take(1000 - 8) {
        net.d.client_closed(*c);
    }
    // An honest client connects and logs in.
    let honest = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert_eq!(net.login_as(honest, "alice", b"alice-token"), [ACCEPTED]);

    // One user: at most 3 logged in; the 4th is refused, other users are not.
    let mut bobs = Vec::new();
    for _ in 0..3 {
        let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
        assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);
        bobs.push(c);
    }
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert!(net.login_as(c, "bob", b"bob-token")[0].contains("max_clients_per_user"));
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert_eq!(net.login_as(c, "carol", b"carol-token"), [ACCEPTED]);
    // 5 logged in (alice, 3 bobs, carol): max_clients.
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert!(net.login_as(c, "alice", b"alice-token")[0].contains("max_clients"));
    // A bob leaves: his slots come back.
    net.d.client_closed(bobs[0]);
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    assert_eq!(net.login_as(c, "bob", b"bob-token"), [ACCEPTED]);

    // One address: at most `max_clients_per_address` connections, pending or not.
    let mut config = v1_config(&[FEED1]);
    config.max_clients_per_address = 20;
    let mut net = Net::with(config);
    let a = remote(200);
    let first = net.connect_from(ClientLink::plain(a)).unwrap();
    for _ in 1..20 {
        net.connect_from(ClientLink::plain(a)).unwrap();
    }
    let e = net.connect_from(ClientLink::plain(a)).unwrap_err();
    assert_eq!(e.max, 20);
    assert!(
        e.to_string()
            .contains("192.0.2.200 has 20 connections open"),
        "{e}"
    );
    assert!(net.connect_from(ClientLink::plain(remote(201))).is_ok());
    net.d.client_closed(first);
    assert!(net.connect_from(ClientLink::plain(a)).is_ok());
}

/// Issue 29, item 3: a user identified by its client certificate logs in by the subject the
/// driver reports after the TLS handshake; without it, or with another, it is refused.
#[test]
fn a_user_logs_in_by_its_client_certificate() {
    let users = Users::from_users(vec![User::with_token("dora", b"", &["*"])
        .with_cert_subject("CN=dora,O=Desk")
        .without_token()]);
    let mut net = Net {
        d: Distributor::new(v1_config(&[FEED1]), Arc::new(users)).unwrap(),
        ..Net::new()
    };
    let tls = ClientLink {
        peer: remote(3),
        tls: true,
    };
    let c = net.connect_from(tls).unwrap();
    // The LOGIN's token is not checked for a user without one (it must not be empty).
    net.d.client_identified(c, "O=Desk, CN=dora");
    assert_eq!(net.login_as(c, "dora", b"-"), [ACCEPTED]);
    let c = net.connect_from(tls).unwrap();
    assert!(net.login_as(c, "dora", b"-")[0].contains("unknown user or wrong token"));
    let c = net.connect_from(tls).unwrap();
    net.d.client_identified(c, "CN=mallory,O=Desk");
    assert!(net.login_as(c, "dora", b"-")[0].contains("unknown user or wrong token"));
}

/// Issue 29, item 7: a reload of the users file revokes mid-stream: an item the user may no
/// longer see gets STATUS not-entitled and nothing more, a service it may no longer open the
/// same for each of its items, a removed user is logged out; nobody else is touched, and a
/// glob still follows new items the user may see.
#[test]
fn a_reload_revokes_items_services_and_users_without_dropping_the_others() {
    let mut net = Net::new();
    net.feed(&refresh(1, "AAA.L", 1, 100));
    net.feed(&refresh(2, "MSFT.O", 1, 200));
    let a = net.login("alice"); // AAA.*, MSFT.O on FEED1
    let b = net.login("bob"); // *
    let c = net.login("carol"); // *, to be removed
    net.open(a, 1, FEED1, &["AAA.*"]);
    net.open(a, 2, FEED1, &["MSFT.O"]);
    net.open(b, 1, FEED1, &["*"]);
    net.open(c, 1, FEED1, &["*"]);
    for x in [a, b, c] {
        net.take(x);
    }
    // alice loses MSFT.O; carol is removed; bob is unchanged.
    let mut alice = User::with_token("alice", b"alice-token", &["AAA.*"]);
    alice.services = Some(vec![FEED1.into()]);
    let bob = User::with_token("bob", b"bob-token", &["*"]);
    let touched = net
        .d
        .replace_users(Arc::new(Users::from_users(vec![bob, alice])));
    net.pump();
    assert_eq!(touched, 2);
    let got = net.take(a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("STATUS 2 req=2 not-entitled") && got[0].contains("no longer entitled"),
        "{got:?}"
    );
    assert!(net.take(b).is_empty());
    let got = net.take(c);
    assert!(
        got[0].contains("removed from the distributor's users file"),
        "{got:?}"
    );
    assert!(matches!(
        net.disconnected(c),
        Some(DisconnectReason::Protocol(ClientError::UserRemoved))
    ));
    assert!(net.events.iter().any(
        |e| matches!(e, Event::Revoked { user, items: 1, requests: 0, .. } if user == "alice")
    ));
    // Updates: alice gets AAA.L only; bob both.
    net.feed(&update(1, 2, 101));
    net.feed(&update(2, 2, 201));
    assert_eq!(net.take(a), ["UPDATE 1 seq=2 BID=1.01"]);
    assert_eq!(net.take(b).len(), 2);
    // alice's glob follows a new item she may see; a new MSFT item she may not see is not sent.
    net.feed(&refresh(3, "AAA.N", 1, 300));
    net.feed(&refresh(4, "MSFT.N", 1, 400));
    let got = net.take(a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("REFRESH 3 AAA.N"), "{got:?}");
    // Taking FEED1 away from alice answers each of her items and drops both requests.
    let mut alice = User::with_token("alice", b"alice-token", &["*"]);
    alice.services = Some(vec!["FEED2".into()]);
    let bob = User::with_token("bob", b"bob-token", &["*"]);
    net.d
        .replace_users(Arc::new(Users::from_users(vec![alice, bob])));
    net.pump();
    let got = net.take(a);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|g| g.contains("not-entitled")), "{got:?}");
    net.feed(&update(1, 3, 102));
    assert!(net.take(a).is_empty());
    assert_eq!(net.d.client_stats(a).unwrap().requests, 0);
    assert_eq!(net.d.client_stats(a).unwrap().watched, 0);
}

/// Issue 29, item 6: a user whose token is an Argon2 hash is checked off the loop: the LOGIN
/// yields a `Verification` and no answer; what the client sends meanwhile (its OPEN) waits and
/// is served once the driver says the token matched; a wrong token is refused and counts
/// toward throttling; an unknown user is checked (slowly) too.
#[test]
fn an_argon2_login_is_verified_off_the_loop_and_pipelined_requests_wait_for_it() {
    let hash = entitle::hash_token(b"erin-token", &[3; 16]);
    let users = Users::from_users(vec![
        User::with_token("erin", b"", &["*"]).with_token_argon2(&hash)
    ]);
    let mut net = Net {
        d: Distributor::new(v1_config(&[FEED1]), Arc::new(users)).unwrap(),
        ..Net::new()
    };
    net.feed(&refresh(1, "AAA.L", 1, 100));
    let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
    let bytes = login_then_open("erin", b"erin-token", "AAA.L");
    net.send(c, &bytes);
    assert!(net.take(c).is_empty(), "answered before the check");
    let v = net.d.poll_verification().expect("a slow check");
    assert_eq!(v.client, c);
    assert!(net.d.poll_verification().is_none());
    let matched = entitle::verify_token(&v.hash, &v.token);
    assert!(matched);
    net.d.verification_done(c, matched, net.now_ns);
    net.pump();
    let got = net.take(c);
    assert_eq!(got[0], "LOGIN_RESPONSE accepted");
    assert!(got[1].starts_with("REFRESH 1 AAA.L SOLICITED"), "{got:?}");

    // A wrong token, and an unknown user: both checked, both refused.
    for (user, token) in [("erin", &b"guess"[..]), ("mallory", &b"erin-token"[..])] {
        let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
        net.send(c, &v1_login(user, token));
        let v = net.d.poll_verification().expect("a slow check");
        let matched = entitle::verify_token(&v.hash, &v.token);
        assert!(!matched, "{user}");
        net.d.verification_done(c, matched, net.now_ns);
        net.pump();
        assert!(
            net.take(c)[0].contains("unknown user or wrong token"),
            "{user}"
        );
    }
    // A stale answer (a client already gone) changes nothing.
    net.d.verification_done(c, true, net.now_ns);
    net.pump();
    assert_eq!(net.d.counters().logins_accepted, 1);

    // A reload while a check is in flight: the login lands on the user's index in the new file
    // (another user first shifts it), and a user removed meanwhile is refused.
    for keep in [true, false] {
        let c = net.connect_from(ClientLink::plain(LOOPBACK)).unwrap();
        net.send(c, &v1_login("erin", b"erin-token"));
        let v = net.d.poll_verification().expect("a slow check");
        let mut users = vec![User::with_token("abe", b"abe-token", &["AAA.*"])];
        if keep {
            users.push(User::with_token("erin", b"", &["*"]).with_token_argon2(&hash));
        }
        net.d.replace_users(Arc::new(Users::from_users(users)));
        net.d
            .verification_done(c, entitle::verify_token(&v.hash, &v.token), net.now_ns);
        net.pump();
        let got = net.take(c);
        if keep {
            assert_eq!(got, ["LOGIN_RESPONSE accepted"]);
            assert_eq!(net.d.client_stats(c).unwrap().user.as_deref(), Some("erin"));
        } else {
            assert!(got[0].contains("unknown user or wrong token"), "{got:?}");
        }
    }
}

/// Logs `user` in with version 2 asking for `ping_ms`; the interval the distributor took.
fn login_v2(net: &mut Net, user: &str, ping_ms: u32) -> (ClientId, Option<u32>) {
    let c = net.connect();
    let token = format!("{user}-token");
    let login = LoginRepr {
        ping_interval_ms: ping_ms,
        ..LoginRepr::new(user, token.as_bytes())
    };
    net.send(c, &encode(&Message::Login(login)));
    let bytes = std::mem::take(net.queues.get_mut(&c).unwrap());
    let Ok(Message::LoginResponse(r)) = Message::parse(&bytes) else {
        panic!("a LOGIN is answered with a LOGIN_RESPONSE");
    };
    assert_eq!(r.result, LoginResult::Accepted);
    (c, r.ping_interval_ms)
}

fn liveness_config() -> DistributorConfig {
    let mut config = DistributorConfig::new(&[FEED1]);
    config.min_ping_interval_ns = 100_000_000;
    config.ping_interval_ns = 1_000_000_000;
    config.max_ping_interval_ns = 10_000_000_000;
    config
}

#[test]
fn a_version_2_login_agrees_on_an_interval_within_the_distributors_bounds() {
    let mut net = Net::with(liveness_config());
    assert_eq!(login_v2(&mut net, "alice", 0).1, Some(1000), "the default");
    assert_eq!(login_v2(&mut net, "bob", 250).1, Some(250), "as asked");
    assert_eq!(
        login_v2(&mut net, "bob", 1).1,
        Some(100),
        "raised to the minimum"
    );
    assert_eq!(
        login_v2(&mut net, "bob", u32::MAX).1,
        Some(10_000),
        "cut to the maximum"
    );
}

#[test]
fn a_client_is_pinged_every_interval_its_pong_timed_and_its_silence_closes_it() {
    let mut net = Net::with(liveness_config());
    let (a, interval) = login_v2(&mut net, "alice", 200);
    assert_eq!(interval, Some(200));
    let ms = 1_000_000;
    let start = net.now_ns;
    assert_eq!(net.d.poll_timeout(), Some(start + 200 * ms));
    // Nothing before the interval.
    net.d.handle_timeout(start + 199 * ms);
    net.pump();
    assert!(net.take(a).is_empty());
    // The PING carries its send time; the PONG echoing it times the round trip.
    let sent_at = start + 200 * ms;
    net.d.handle_timeout(sent_at);
    net.pump();
    assert_eq!(net.take(a), [format!("PING {sent_at}")]);
    assert_eq!(net.d.counters().pings_sent, 1);
    net.now_ns = sent_at + 3 * ms - 1_000;
    net.send(a, &PingRepr { payload: sent_at }.to_bytes(PingKind::Pong));
    assert_eq!(net.d.client_stats(a).unwrap().rtt_ns, Some(3 * ms));
    assert_eq!(net.d.round_trips().max_ns, 3 * ms);
    // A PONG that answers no PING of ours times nothing.
    net.send(a, &PingRepr { payload: 7 }.to_bytes(PingKind::Pong));
    assert_eq!(net.d.client_stats(a).unwrap().rtt_ns, Some(3 * ms));
    // The client's own PING is answered at once with its payload.
    net.send(a, &PingRepr { payload: 42 }.to_bytes(PingKind::Ping));
    assert_eq!(net.take(a), ["PONG 42"]);
    // Heard last at `net.now_ns`: three intervals of silence from then close it, not before.
    let heard = net.now_ns;
    net.d.handle_timeout(heard + 600 * ms - 1);
    net.pump();
    assert_eq!(net.disconnected(a), None);
    assert_eq!(
        net.take(a),
        [format!("PING {}", heard + 600 * ms - 1)],
        "the PING of the interval that passed (at most one per call)"
    );
    net.d.handle_timeout(heard + 600 * ms);
    net.pump();
    assert_eq!(net.disconnected(a), Some(DisconnectReason::Silent));
    assert!(!net.disconnects.last().unwrap().flush());
    assert_eq!(net.d.counters().clients_silent, 1);
    assert!(matches!(
        net.events.last(),
        Some(Event::Silent { silent_ms: 600, user: Some(u), .. }) if u == "alice"
    ));
}

#[test]
fn a_client_that_keeps_talking_is_never_closed_and_one_behind_is_not_pinged() {
    let mut config = liveness_config();
    config.max_queue_bytes = MIN_QUEUE_BYTES;
    let mut net = Net::with(config);
    let (a, _) = login_v2(&mut net, "alice", 100);
    let ms = 1_000_000;
    for _ in 0..50 {
        net.now_ns += 50 * ms;
        let now = net.now_ns;
        net.d.handle_timeout(now);
        net.pump();
        net.send(a, &PingRepr { payload: now }.to_bytes(PingKind::Ping));
    }
    assert_eq!(net.disconnected(a), None, "2.5 s of talk, 100 ms interval");
    let pings = net.take(a).iter().filter(|m| m.starts_with("PING")).count();
    assert!((20..=26).contains(&pings), "a PING per 100 ms: {pings}");
    // A client whose queue is full is alive (it reads); it is not sent a PING, nor closed as
    // slow for one.
    net.d.client_drained(a, MIN_QUEUE_BYTES);
    let sent = net.d.counters().pings_sent;
    net.now_ns += 100 * ms;
    let now = net.now_ns;
    net.d.handle_timeout(now);
    net.pump();
    assert_eq!(net.d.counters().pings_sent, sent);
    assert_eq!(net.disconnected(a), None);
}

#[test]
fn version_1_is_refused_unless_configured_and_then_never_pinged() {
    let v1 = |user: &str, token: &[u8]| -> Vec<u8> {
        let login = LoginRepr {
            version: 1,
            ..LoginRepr::new("x", b"x")
        };
        encode(&Message::Login(LoginRepr {
            user,
            token,
            ..login
        }))
    };
    let mut net = Net::with(liveness_config());
    let c = net.connect();
    net.send(c, &v1("alice", b"alice-token"));
    assert_eq!(
        net.take(c),
        [
            "LOGIN_RESPONSE unsupported-version: protocol version 1 is refused: this distributor \
          requires version 2 or newer (version 2 keeps idle connections alive with PINGs; \
          min_client_version = 1 accepts older clients)"
        ]
    );
    let mut config = liveness_config();
    config.min_client_version = 1;
    let mut net = Net::with(config);
    let c = net.connect();
    net.send(c, &v1("alice", b"alice-token"));
    assert_eq!(net.take(c), ["LOGIN_RESPONSE accepted"]);
    assert_eq!(
        net.d.poll_timeout(),
        None,
        "no deadline for a version 1 client"
    );
    net.d.handle_timeout(net.now_ns + 3_600_000_000_000);
    net.pump();
    assert!(net.take(c).is_empty());
    assert_eq!(net.disconnected(c), None);
    assert_eq!(net.d.client_stats(c).unwrap().ping_interval_ms, None);
}

#[test]
fn ping_intervals_out_of_order_are_refused_naming_the_keys() {
    let mut config = liveness_config();
    config.ping_interval_ns = 50_000_000;
    let e = Distributor::new(config, Arc::new(users())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "min_ping_interval_ms = 100, ping_interval_ms = 50, max_ping_interval_ms = 10000: \
         accepted: 10 <= min <= default <= max <= 4294967295"
    );
    let mut config = liveness_config();
    config.min_client_version = 3;
    assert_eq!(
        Distributor::new(config, Arc::new(users()))
            .unwrap_err()
            .to_string(),
        "min_client_version = 3: accepted: 1 to 2"
    );
}

fn snapshot_open(net: &mut Net, c: ClientId, request_id: u32, service: &str, patterns: &[&str]) {
    let m = encode(&Message::Open(OpenRepr {
        flags: crate::codec::open_flags::SNAPSHOT,
        request_id,
        service,
        patterns: PatternList::List(patterns),
        view: None,
    }));
    net.send(c, &m);
}

#[test]
fn a_snapshot_gets_each_image_then_a_closed_status_and_no_update_after() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 18921));
    net.feed(&refresh(501, "AAB.O", 7, 100));
    net.feed(&refresh(502, "ZZZ.O", 1, 100));
    let a = net.login("alice");
    snapshot_open(&mut net, a, 5, FEED1, &["AA*", "MSFT.O", "ZZZ.O"]);
    let got = net.take(a);
    // Each image as of now (flagged SNAPSHOT, which `describe` does not print; AAB.O, which
    // alice may not see, is skipped by the glob as in any request), the names it may not see
    // or that are not cached answered, then the request closed.
    assert_eq!(
        got,
        [
            "STATUS 0 req=5 not-found FEED1/MSFT.O: not in the cache",
            "STATUS 0 req=5 not-entitled FEED1/ZZZ.O: user alice may not see ZZZ.O",
            "REFRESH 1 AAA.O SOLICITED BID=189.21 BIDSIZE=100",
            "STATUS 0 req=5 closed FEED1/: snapshot complete",
        ]
    );
    let bytes = {
        net.feed(&refresh(500, "AAA.O", 1, 18921));
        snapshot_open(&mut net, a, 6, FEED1, &["AAA.O"]);
        std::mem::take(net.queues.get_mut(&a).unwrap())
    };
    let Ok(Message::Refresh(r)) = Message::parse(&bytes) else {
        panic!("a REFRESH first");
    };
    assert_eq!(
        r.flags,
        refresh_flags::SOLICITED | refresh_flags::SNAPSHOT,
        "flagged as a snapshot's"
    );
    // Nothing is kept: no update reaches it, the id may be used again, and it holds no slot.
    net.feed(&update(500, 2, 18922));
    assert!(net.take(a).is_empty(), "no update after a snapshot");
    let stats = net.d.client_stats(a).unwrap();
    assert_eq!((stats.watched, stats.requests), (0, 0));
    snapshot_open(&mut net, a, 5, FEED1, &["AAA.O"]);
    assert_eq!(net.take(a).len(), 2, "request id 5 again");
    assert_eq!(net.d.counters().snapshots, 3);
    // A service it may not open: refused per pattern, and closed.
    let c = net.login("carol");
    snapshot_open(&mut net, c, 1, "FEED9", &["A"]);
    assert_eq!(
        net.take(c),
        [
            "STATUS 0 req=1 not-found FEED9/A: service FEED9 is not carried by this distributor",
            "STATUS 0 req=1 closed FEED9/: snapshot complete",
        ]
    );
}

#[test]
fn a_snapshot_beside_a_streaming_request_leaves_the_stream_alone() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 18921));
    let a = net.login("alice");
    net.open(a, 1, FEED1, &["AAA.O"]);
    net.take(a);
    snapshot_open(&mut net, a, 2, FEED1, &["AAA.O"]);
    assert_eq!(net.take(a).len(), 2);
    net.feed(&update(500, 2, 18922));
    assert_eq!(net.take(a), ["UPDATE 1 seq=2 BID=189.22"]);
    // A snapshot may not reuse the id of an open request.
    snapshot_open(&mut net, a, 1, FEED1, &["AAA.O"]);
    assert_eq!(
        net.take(a),
        ["STATUS 0 req=1 rejected /: request id 1 is already open: choose another or CLOSE it first"]
    );
}

fn pause_msg(request_id: u32, pause: bool) -> Vec<u8> {
    let m = crate::codec::PauseRepr { request_id };
    encode(&if pause {
        Message::Pause(m)
    } else {
        Message::Resume(m)
    })
}

#[test]
fn a_paused_request_is_conflated_and_its_resume_sends_one_image_per_changed_item() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 100));
    net.feed(&refresh(501, "AAB.O", 1, 200));
    net.feed(&refresh(502, "MSFT.O", 1, 300));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AA*"]);
    net.open(b, 2, FEED1, &["MSFT.O"]);
    net.take(b);
    net.send(b, &pause_msg(1, true));
    // AAA.O changes three times while paused, AAB.O not at all; MSFT.O (request 2) flows.
    for seq in 2..5 {
        net.feed(&update(500, seq, 100 + i64::from(seq)));
    }
    net.feed(&update(502, 2, 301));
    assert_eq!(net.take(b), ["UPDATE 3 seq=2 BID=3.01"]);
    assert_eq!(net.d.counters().updates_paused, 3);
    net.send(b, &pause_msg(1, false));
    assert_eq!(
        net.take(b),
        ["REFRESH 1 AAA.O CONFLATED BID=1.04 BIDSIZE=100"],
        "the latest state of what changed, once"
    );
    net.feed(&update(500, 5, 105));
    assert_eq!(net.take(b), ["UPDATE 1 seq=5 BID=1.05"]);

    // Pausing everything, an item going stale while paused comes back as its STATUS; an item
    // another (unpaused) request opens flows for it.
    net.send(b, &pause_msg(0, true));
    net.feed(&update(501, 2, 201));
    net.d.handle_backbone_loss(net.feed1(), net.now_ns);
    net.pump();
    assert!(
        net.take(b).is_empty(),
        "nothing while every request is paused"
    );
    net.feed(&refresh(500, "AAA.O", 6, 106));
    net.open(b, 3, FEED1, &["AAA.O"]);
    assert_eq!(
        net.take(b),
        ["REFRESH 1 AAA.O SOLICITED BID=1.06 BIDSIZE=100"]
    );
    net.feed(&update(500, 7, 107));
    assert_eq!(net.take(b), ["UPDATE 1 seq=7 BID=1.07"]);
    net.send(b, &pause_msg(0, false));
    let got = net.take(b);
    assert_eq!(
        got,
        [
            "REFRESH 1 AAA.O CONFLATED BID=1.07 BIDSIZE=100",
            "STATUS 2 req=0 stale FEED1/AAB.O: ",
            "STATUS 3 req=0 stale FEED1/MSFT.O: ",
        ],
        "the state of each item that changed under paused requests only, and an image of \
         the item request 3 kept flowing (request 1's stream of it was given nothing)"
    );
    // A request that is not open is refused, and nothing is paused by it.
    net.send(b, &pause_msg(9, true));
    assert_eq!(
        net.take(b),
        ["STATUS 0 req=9 rejected /: no open request has id 9"]
    );
}

#[test]
fn closing_a_paused_request_leaves_the_others_of_its_items_flowing() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 100));
    let b = net.login("bob");
    net.open(b, 1, FEED1, &["AAA.O"]);
    net.open(b, 2, FEED1, &["AA*"]);
    net.take(b);
    net.send(b, &pause_msg(1, true));
    net.send(b, &pause_msg(2, true));
    net.feed(&update(500, 2, 101));
    assert!(net.take(b).is_empty());
    net.send(b, &encode(&Message::Close(CloseRepr { request_id: 2 })));
    net.send(b, &pause_msg(1, false));
    assert_eq!(
        net.take(b),
        ["REFRESH 1 AAA.O CONFLATED BID=1.01 BIDSIZE=100"]
    );
    net.feed(&update(500, 3, 102));
    assert_eq!(net.take(b), ["UPDATE 1 seq=3 BID=1.02"]);
    let c = net.d.clients.get(b).unwrap();
    assert!(c.paused.is_empty() && c.paused_holds.is_empty() && c.paused_changed.is_empty());
}

fn open_view(net: &mut Net, c: ClientId, request_id: u32, patterns: &[&str], view: &[u16]) {
    let m = encode(&Message::Open(OpenRepr {
        flags: 0,
        request_id,
        service: FEED1,
        patterns: PatternList::List(patterns),
        view: Some(crate::codec::ViewList::List(view)),
    }));
    net.send(c, &m);
}

/// An UPDATE of BID and BIDSIZE.
fn update2(feed_id: u32, seq: u32, bid: i64, size: i64) -> Vec<u8> {
    let fields = [Field::new(22, price(bid)), Field::new(30, Value::Int(size))];
    encode(&Message::Update(UpdateRepr {
        item_id: feed_id,
        timestamp_ns: 2,
        item_seq: seq,
        fields: FieldList::List(&fields),
    }))
}

#[test]
fn a_view_gets_its_fields_only_and_no_update_outside_them_encoded_once_per_view() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 100));
    let (a, b, full) = (net.login("bob"), net.login("bob"), net.login("bob"));
    open_view(&mut net, a, 1, &["AAA.O"], &[30]);
    open_view(&mut net, b, 1, &["AAA.O"], &[30]);
    net.open(full, 1, FEED1, &["AAA.O"]);
    assert_eq!(net.take(a), ["REFRESH 1 AAA.O SOLICITED BIDSIZE=100"]);
    net.take(b);
    net.take(full);
    let bytes = std::mem::take(net.queues.get_mut(&a).unwrap());
    assert!(bytes.is_empty());
    // An UPDATE of BID alone reaches the full client only; one of both, each its fields.
    net.feed(&update(500, 2, 101));
    assert!(net.take(a).is_empty());
    assert_eq!(net.take(full), ["UPDATE 1 seq=2 BID=1.01"]);
    assert_eq!(net.d.counters().updates_outside_views, 2);
    // Encoded once for the two clients of one view: one record lists both.
    let s = net.feed1();
    net.now_ns += 1_000;
    net.d
        .handle_backbone_message(s, &update2(500, 3, 102, 300), net.now_ns);
    let mut records = Vec::new();
    while let Some(t) = net.d.poll_transmit() {
        records.push((t.clients.to_vec(), t.bytes.to_vec()));
    }
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].0, [full]);
    assert_eq!(records[1].0, [a, b]);
    assert_eq!(
        net.describe(&records[1].1),
        "UPDATE 1 seq=3 BIDSIZE=300",
        "the same item_seq, the viewed field only"
    );
}

#[test]
fn two_requests_with_views_get_the_union_and_a_narrowing_is_announced() {
    let mut net = Net::new();
    net.feed(&refresh(500, "AAA.O", 1, 100));
    let a = net.login("bob");
    open_view(&mut net, a, 1, &["AAA.O"], &[22]);
    assert_eq!(net.take(a), ["REFRESH 1 AAA.O SOLICITED BID=1.00"]);
    open_view(&mut net, a, 2, &["AAA.O"], &[30]);
    assert_eq!(
        net.take(a),
        ["REFRESH 1 AAA.O SOLICITED BID=1.00 BIDSIZE=100"],
        "the union of the two views"
    );
    net.open(a, 3, FEED1, &["A*"]);
    net.take(a);
    net.feed(&update2(500, 2, 101, 200));
    assert_eq!(net.take(a), ["UPDATE 1 seq=2 BID=1.01 BIDSIZE=200"]);
    // Closing the request without a view narrows to the union: a REFRESH flagged VIEW says
    // so, since UPDATEs outside the view stop from now.
    net.send(a, &encode(&Message::Close(CloseRepr { request_id: 3 })));
    let bytes = std::mem::take(net.queues.get_mut(&a).unwrap());
    let Ok(Message::Refresh(r)) = Message::parse(&bytes) else {
        panic!("a REFRESH announcing the view");
    };
    assert_eq!(r.flags & refresh_flags::VIEW, refresh_flags::VIEW);
    net.send(a, &encode(&Message::Close(CloseRepr { request_id: 1 })));
    net.feed(&update(500, 3, 102));
    assert!(net.take(a).is_empty(), "BID is no longer viewed");
    net.feed(&update2(500, 4, 103, 300));
    assert_eq!(net.take(a), ["UPDATE 1 seq=4 BIDSIZE=300"]);
}

#[test]
fn the_directory_follows_a_login_and_each_change_and_a_lost_feed_is_one_group_status() {
    let mut config = v1_config(&[FEED1, "FEED2"]);
    config.min_client_version = 1;
    let mut net = Net::with(config);
    let a = net.connect();
    net.send(
        a,
        &encode(&Message::Login(LoginRepr::new("alice", b"alice-token"))),
    );
    assert_eq!(
        net.take(a),
        [
            "LOGIN_RESPONSE accepted",
            "DIRECTORY complete FEED1=down FEED2=down(closed)"
        ],
        "alice may open FEED1 only; no feed yet"
    );
    let old = net.login_v1("bob");
    let s = net.feed1();
    net.d.feed_back(s, true, net.now_ns);
    net.pump();
    assert_eq!(net.take(a), ["DIRECTORY change FEED1=up"]);
    assert!(net.take(old).is_empty(), "version 1: no directory");
    net.feed(&refresh(500, "AAA.O", 1, 100));
    net.feed(&refresh(501, "AAB.O", 1, 100));
    net.open(a, 1, FEED1, &["AAA.O"]);
    net.open(old, 1, FEED1, &["AA*"]);
    net.take(a);
    net.take(old);
    net.d.feed_gone(s, net.now_ns);
    net.pump();
    assert_eq!(
        net.take(a),
        [
            "DIRECTORY change FEED1=down",
            "STATUS 0 req=0 stale FEED1/*: the feed went away: waiting for it to come back",
        ],
        "one group status, not one per item"
    );
    assert_eq!(
        net.take(old),
        [
            "STATUS 1 req=0 stale FEED1/AAA.O: the feed went away: waiting for it to come back",
            "STATUS 2 req=0 stale FEED1/AAB.O: the feed went away: waiting for it to come back",
        ]
    );
    assert_eq!(net.d.counters().group_statuses, 1);
    // A repeated report changes nothing.
    net.d.feed_gone(s, net.now_ns);
    net.pump();
    assert!(net.take(a).is_empty());
}

#[test]
fn a_feeds_data_before_its_session_is_reported_says_up_first() {
    let mut net = Net::with(liveness_config());
    let (a, _) = login_v2(&mut net, "bob", 0);
    net.open(a, 1, FEED1, &["AAA.O"]);
    net.take(a);
    // The transport may hand the feed's first messages over before its session event.
    net.feed(&refresh(500, "AAA.O", 1, 100));
    assert_eq!(
        net.take(a),
        [
            "DIRECTORY change FEED1=up",
            "REFRESH 1 AAA.O BID=1.00 BIDSIZE=100"
        ]
    );
    let s = net.feed1();
    net.d.feed_back(s, true, net.now_ns);
    net.pump();
    assert!(net.take(a).is_empty(), "up already");
}

// ---- posting and the dictionary ------------------------------------------------------------

fn post_msg(post_id: u32, service: &str, item: &str, fields: &[Field<'_>]) -> Vec<u8> {
    encode(&Message::Post(crate::codec::PostRepr {
        refresh: false,
        origin: 0,
        post_id,
        service,
        name: item,
        user: "",
        fields: FieldList::List(fields),
    }))
}

fn ack_msg(origin: u64, post_id: u32, code: crate::codec::AckCode, text: &str) -> Vec<u8> {
    encode(&Message::Ack(crate::codec::AckRepr {
        origin,
        post_id,
        code,
        text,
    }))
}

/// The post id the distributor gave the `i`th post it forwarded.
fn forwarded_id(net: &Net, i: usize) -> u32 {
    let Ok(Message::Post(p)) = Message::parse(&net.posts[i].bytes) else {
        panic!("a POST is forwarded")
    };
    p.post_id
}

/// A version 2 distributor of FEED1 whose feed is up, with bob (who may post to `AAA.*`)
/// logged in.
fn posting_net(config: DistributorConfig) -> (Net, ClientId) {
    let mut net = Net::with(config);
    let s = net.feed1();
    net.d.feed_back(s, true, net.now_ns);
    net.pump();
    let (bob, _) = login_v2(&mut net, "bob", 0);
    net.take(bob);
    (net, bob)
}

#[test]
fn a_post_is_forwarded_renamed_and_its_ack_goes_back_to_its_poster_only() {
    use crate::codec::AckCode;
    let mut config = liveness_config();
    config.origin = 0xfeed;
    let (mut net, bob) = posting_net(config);
    let other = net.login("bob");
    let fields = [Field::new(22, price(123))];
    net.send(bob, &post_msg(7, FEED1, "AAA.O", &fields));
    assert!(net.take(bob).is_empty(), "no answer before the provider's");
    assert_eq!(net.posts.len(), 1);
    assert_eq!(net.posts[0].service, net.feed1());
    let Ok(Message::Post(p)) = Message::parse(&net.posts[0].bytes) else {
        panic!("a POST is forwarded")
    };
    assert_eq!(
        (p.origin, p.user, p.service, p.name, p.refresh),
        (0xfeed, "bob", FEED1, "AAA.O", false)
    );
    assert_eq!(p.fields, FieldList::List(&fields));
    let id = p.post_id;
    assert_eq!(net.d.posts_in_flight(), 1);
    // Another distributor's ACK of the same id is not ours.
    net.feed(&ack_msg(0xbeef, id, AckCode::Refused, "not yours"));
    assert!(net.take(bob).is_empty());
    net.feed(&ack_msg(0xfeed, id, AckCode::Accepted, ""));
    assert_eq!(net.take(bob), ["ACK 7 accepted"]);
    assert!(net.take(other).is_empty(), "only the poster is answered");
    // The same ACK again finds nothing in flight.
    net.feed(&ack_msg(0xfeed, id, AckCode::Accepted, ""));
    assert!(net.take(bob).is_empty());
    let c = net.d.counters();
    assert_eq!(
        (
            c.posts,
            c.posts_forwarded,
            c.posts_accepted,
            c.acks_unmatched
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(net.d.posts_in_flight(), 0);
    // A refusal carries the provider's reason.
    net.send(bob, &post_msg(8, FEED1, "AAA.O", &fields));
    let id = forwarded_id(&net, 1);
    net.feed(&ack_msg(0xfeed, id, AckCode::Refused, "market closed"));
    assert_eq!(net.take(bob), ["ACK 8 refused: market closed"]);
    assert!(net.events.iter().any(
        |e| matches!(e, Event::Posted { code: AckCode::Refused, item, user, .. } if item == "AAA.O" && user == "bob")
    ));
}

#[test]
fn posts_the_distributor_refuses_never_reach_the_provider() {
    let mut config = liveness_config();
    config.max_posts_per_client = 2;
    let (mut net, bob) = posting_net(config);
    let (alice, _) = login_v2(&mut net, "alice", 0);
    net.take(alice);
    let bid = [Field::new(22, price(1))];
    net.send(alice, &post_msg(1, FEED1, "AAA.O", &bid));
    assert_eq!(
        net.take(alice),
        ["ACK 1 not-entitled: user alice may not post to AAA.O of FEED1"]
    );
    net.send(bob, &post_msg(2, FEED1, "MSFT.O", &bid));
    assert_eq!(
        net.take(bob),
        ["ACK 2 not-entitled: user bob may not post to MSFT.O of FEED1"]
    );
    net.send(bob, &post_msg(3, "NOPE", "AAA.O", &bid));
    assert_eq!(
        net.take(bob),
        ["ACK 3 unknown-service: this distributor carries no service NOPE"]
    );
    let wrong = [Field::new(22, Value::Int(1))];
    net.send(bob, &post_msg(4, FEED1, "AAA.O", &wrong));
    assert_eq!(
        net.take(bob),
        ["ACK 4 invalid: field BID (id 22) is a price, not a int"]
    );
    assert!(net.posts.is_empty(), "none forwarded");
    // Two in flight: the third waits for one of them.
    for id in [5, 6, 7] {
        net.send(bob, &post_msg(id, FEED1, "AAA.O", &bid));
    }
    assert_eq!(net.posts.len(), 2);
    assert_eq!(
        net.take(bob),
        ["ACK 7 busy: 2 posts of this connection are waiting for their answer: wait for one"]
    );
    // A feed gone: its service is down.
    let s = net.feed1();
    net.d.feed_gone(s, net.now_ns);
    net.pump();
    net.take(bob);
    net.posts.clear();
    net.send(bob, &post_msg(8, FEED1, "AAA.O", &bid));
    assert_eq!(
        net.take(bob),
        ["ACK 8 service-down: no provider of FEED1 is live"]
    );
    assert!(net.posts.is_empty());
    assert_eq!(net.d.counters().posts_refused, 6);
}

#[test]
fn a_post_without_an_answer_is_answered_timeout_once_and_a_late_ack_is_counted() {
    use crate::codec::AckCode;
    let mut config = liveness_config();
    config.post_timeout_ns = 2_000_000_000;
    let (mut net, bob) = posting_net(config);
    net.send(
        bob,
        &post_msg(9, FEED1, "AAA.O", &[Field::new(22, price(1))]),
    );
    let id = forwarded_id(&net, 0);
    let deadline = net.now_ns + 2_000_000_000;
    assert!(net.d.poll_timeout().is_some_and(|t| t <= deadline));
    let acks = |got: Vec<String>| -> Vec<String> {
        got.into_iter().filter(|m| m.starts_with("ACK")).collect()
    };
    net.d.handle_timeout(deadline - 1);
    net.pump();
    assert!(acks(net.take(bob)).is_empty(), "not yet");
    net.d.handle_timeout(deadline);
    net.pump();
    assert_eq!(
        acks(net.take(bob)),
        ["ACK 9 timeout: no answer from the provider of FEED1 within 2000 ms"]
    );
    net.d.handle_timeout(deadline + 1_000_000);
    net.pump();
    assert!(acks(net.take(bob)).is_empty(), "once");
    net.feed(&ack_msg(1, id, AckCode::Accepted, ""));
    assert!(
        acks(net.take(bob)).is_empty(),
        "too late: the poster was told"
    );
    let c = net.d.counters();
    assert_eq!((c.posts_timed_out, c.acks_unmatched), (1, 1));
}

#[test]
fn the_answer_to_a_gone_clients_post_is_dropped() {
    use crate::codec::AckCode;
    let (mut net, bob) = posting_net(liveness_config());
    net.send(
        bob,
        &post_msg(1, FEED1, "AAA.O", &[Field::new(22, price(1))]),
    );
    let id = forwarded_id(&net, 0);
    net.d.client_closed(bob);
    net.pump();
    net.queues.remove(&bob);
    net.feed(&ack_msg(1, id, AckCode::Accepted, ""));
    assert!(
        !net.queues.contains_key(&bob),
        "nothing queued to a gone client"
    );
    assert_eq!(net.d.posts_in_flight(), 0);
}

#[test]
fn a_dictionary_request_is_answered_with_every_part_in_order() {
    let mut text = String::new();
    for fid in 1..=10000 {
        text.push_str(&format!("[fields.F{fid}]\nfid = {fid}\ntype = \"int\"\n"));
    }
    let big = Dictionary::parse(&text, "big.toml").unwrap();
    let mut config = liveness_config();
    config.dictionary = Arc::new(big);
    let (mut net, bob) = posting_net(config.clone());
    net.send(
        bob,
        &encode(&Message::DictionaryRequest(
            crate::codec::DictionaryRequestRepr,
        )),
    );
    let got = net.take(bob);
    assert!(got.len() >= 2, "{got:?}");
    let mut total = 0;
    for (i, m) in got.iter().enumerate() {
        let last = i + 1 == got.len();
        assert!(
            m.starts_with(&format!(
                "DICTIONARY part={i}{} fields=",
                if last { " complete" } else { "" }
            )),
            "{m}"
        );
        total += m.rsplit('=').next().unwrap().parse::<usize>().unwrap();
    }
    assert_eq!(total, 10000);
    assert_eq!(net.d.counters().dictionaries_sent, 1);
    // A dictionary that would take more than half a client's queue is refused at start.
    config.max_queue_bytes = MIN_QUEUE_BYTES;
    let e = Distributor::new(config, Arc::new(users())).unwrap_err();
    assert!(
        e.to_string().contains("raise max_queue_bytes to at least"),
        "{e}"
    );
}

mod ab_feeds;
