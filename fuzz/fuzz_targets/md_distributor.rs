//! The distributor's core, stateful: a script of inputs from four client connections (raw
//! bytes, or LOGIN, OPEN, CLOSE, PAUSE, RESUME, PING, PONG, DICTIONARY_REQUEST and POST built
//! from the script so that logged-in states are reached) interleaved with backbone messages
//! (raw, or REFRESH, UPDATE, STATUS and the providers' ACKs built from the script), losses, feeds going and coming back, drains, closes and time. After every step
//! the outputs are drained as a driver does. Never a panic; no client's queue passes its bound;
//! what the distributor holds stays within its limits; every byte it sends is a valid message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_md::codec::*;
use peregrine_md::distributor::*;
use peregrine_md::model::{Field, ItemState, Price, Value};
use std::collections::HashMap;
use std::sync::Arc;

const CLIENTS: usize = 4;
const MAX_ITEMS: usize = 16;
const MAX_WATCH: usize = 8;
const MAX_PATTERNS: usize = 12;
const NAMES: [&str; 8] = [
    "AAA.O", "AAA.L", "MSFT.O", "IBM.N", "ZZZ.O", "EUR=", "A", "B.B",
];
const PATTERNS: [&str; 8] = ["AAA.O", "AAA.*", "*", "MSFT.O", "I?M.N", "ZZZ.O", "A*", "Q"];
const USERS: [&str; 4] = ["alice", "bob", "carol", "mallory"];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

fn encode(m: &Message<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    if m.check().is_ok() {
        m.emit_to_vec(&mut b);
    }
    b
}

fn users() -> Users {
    let mut alice = User::with_token("alice", b"alice", &["AAA.*", "MSFT.O"]);
    alice.services = Some(vec!["FEED1".into()]);
    let bob = User::with_token("bob", b"bob", &["*"]).with_post(&["AAA.*", "ZZZ.O"]);
    let mut carol = User::with_token("carol", b"carol", &["*"]);
    carol.slow = Some(SlowPolicy::Disconnect);
    Users::from_users(vec![alice, bob, carol])
}

fuzz_target!(|script: &[u8]| {
    let mut inp = Input(script);
    let setup = inp.byte();
    let mut config = DistributorConfig::new(&["FEED1", "FEED2"]);
    config.max_items = MAX_ITEMS;
    config.max_clients = CLIENTS;
    config.max_watch_per_client = MAX_WATCH;
    config.max_patterns_per_client = MAX_PATTERNS;
    config.max_requests_per_client = 4;
    config.max_posts_per_client = 3;
    config.post_timeout_ns = 50_000_000;
    config.max_queue_bytes = if setup & 1 == 0 {
        MIN_QUEUE_BYTES
    } else {
        1 << 20
    };
    config.slow = if setup & 2 == 0 {
        SlowPolicy::Conflate
    } else {
        SlowPolicy::Disconnect
    };
    let max_queue = config.max_queue_bytes;
    let origin = config.origin;
    let mut d = Distributor::new(config, Arc::new(users())).unwrap();
    let services = [
        d.service_id("FEED1").unwrap(),
        d.service_id("FEED2").unwrap(),
    ];
    let mut slots: [Option<ClientId>; CLIENTS] = [None; CLIENTS];
    // The driver's queues: bytes appended and not yet written.
    let mut queues: HashMap<ClientId, Vec<u8>> = HashMap::new();
    let mut now_ns = 0u64;
    let mut steps = 0;
    while !inp.0.is_empty() && steps < 2000 {
        steps += 1;
        let op = inp.byte();
        let arg = usize::from(op >> 4);
        let slot = arg % CLIENTS;
        let service = services[arg % 2];
        // Two feeds per service (A/B), named as the driver names them: by session.
        let feed = u32::from((op >> 5) & 1) + 0x100;
        now_ns += 1_000;
        match op & 0x0f {
            0 => {
                if slots[slot].is_none() {
                    // Loopback or another host, plaintext or TLS (logins from another host over
                    // plaintext are refused).
                    let link = ClientLink {
                        peer: std::net::IpAddr::V4(std::net::Ipv4Addr::new(
                            if arg & 2 == 0 { 127 } else { 10 },
                            0,
                            0,
                            (arg & 1) as u8 + 1,
                        )),
                        tls: arg & 4 != 0,
                    };
                    if let Ok(c) = d.client_connected(now_ns, link) {
                        slots[slot] = Some(c);
                        queues.insert(c, Vec::new());
                    }
                }
            }
            1 => {
                let n = usize::from(inp.byte());
                let bytes = inp.bytes(n).to_vec();
                if let Some(c) = slots[slot] {
                    d.handle_client_bytes(c, &bytes, now_ns);
                }
            }
            2 => {
                let b = inp.byte();
                let user = USERS[usize::from(b % 4)];
                let token = if b & 4 != 0 {
                    user.as_bytes()
                } else {
                    b"wrong"
                };
                let m = encode(&Message::Login(LoginRepr::new(user, token)));
                if let Some(c) = slots[slot] {
                    d.handle_client_bytes(c, &m, now_ns);
                }
            }
            3 => {
                let b = inp.byte();
                let request_id = u32::from(b % 6);
                // Sometimes a snapshot.
                let flags = if b & 0x80 != 0 {
                    open_flags::SNAPSHOT
                } else {
                    0
                };
                let service = ["FEED1", "FEED2", "FEED9"][usize::from(inp.byte() % 3)];
                let count = usize::from(inp.byte() % 4) + 1;
                let patterns: Vec<&str> = (0..count)
                    .map(|_| PATTERNS[usize::from(inp.byte() % 8)])
                    .collect();
                // Sometimes a view of one or two of the fields the feed ops send.
                let views: [&[u16]; 3] = [&[22], &[3, 22], &[20, 21]];
                let view = (b & 0x40 != 0).then(|| views[usize::from(b >> 3) % 3]);
                let m = encode(&Message::Open(OpenRepr {
                    flags,
                    request_id,
                    service,
                    patterns: PatternList::List(&patterns),
                    view: view.map(ViewList::List),
                }));
                if let Some(c) = slots[slot] {
                    d.handle_client_bytes(c, &m, now_ns);
                }
            }
            4 => {
                // A CLOSE, a PAUSE or RESUME (of request 0: all, 1 or 2), or a PING or PONG (whose
                // payload may answer the last PING).
                let b = inp.byte();
                let request_id = u32::from(b % 6);
                let payload = if b & 0x40 != 0 { now_ns - 1_000 } else { u64::from(b) };
                let pause = PauseRepr {
                    request_id: request_id % 3,
                };
                let name = NAMES[usize::from(b % 8)];
                let posted = [Field::new(
                    if b & 0x10 != 0 { 22 } else { 30 },
                    Value::Price(Price {
                        mantissa: i64::from(b),
                        exponent: -2,
                    }),
                )];
                let m = match b >> 5 {
                    0 => encode(&Message::Close(CloseRepr { request_id })),
                    1 => encode(&Message::Pause(pause)),
                    2 => encode(&Message::Resume(pause)),
                    3 => encode(&Message::Ping(PingRepr { payload })),
                    4 => encode(&Message::Pong(PingRepr { payload })),
                    5 => encode(&Message::DictionaryRequest(DictionaryRequestRepr)),
                    // A post (to an item bob may post to, or not; a field of the dictionary's
                    // type, or not).
                    _ => encode(&Message::Post(PostRepr {
                        refresh: b & 0x08 != 0,
                        origin: 0,
                        post_id: request_id + 1,
                        service: ["FEED1", "FEED2", "FEED9"][usize::from(b % 3)],
                        name,
                        user: "",
                        fields: FieldList::List(&posted),
                    })),
                };
                if let Some(c) = slots[slot] {
                    d.handle_client_bytes(c, &m, now_ns);
                }
            }
            5 => {
                let n = usize::from(inp.byte());
                let bytes = inp.bytes(n).to_vec();
                d.handle_feed_message(service, feed, &bytes, now_ns);
            }
            6 => {
                let feed_id = u32::from(inp.byte() % 12) + 1;
                let name = NAMES[usize::from(inp.byte() % 8)];
                let seq = u32::from(inp.byte());
                let n = usize::from(inp.byte() % 4);
                let fields: Vec<Field<'_>> = (0..n as u16)
                    .map(|i| Field::new(20 + i, Value::Int(i64::from(i))))
                    .collect();
                let m = encode(&Message::Refresh(RefreshRepr {
                    item_id: feed_id,
                    flags: 0,
                    timestamp_ns: now_ns,
                    item_seq: seq,
                    service: d.service_name(service),
                    name,
                    fields: FieldList::List(&fields),
                }));
                d.handle_feed_message(service, feed, &m, now_ns);
            }
            7 => {
                let feed_id = u32::from(inp.byte() % 12) + 1;
                let seq = u32::from(inp.byte());
                let b = inp.byte();
                let fields = [
                    Field::new(
                        22,
                        Value::Price(Price {
                            mantissa: i64::from(b),
                            exponent: -2,
                        }),
                    ),
                    Field::new(3, Value::Str(&"LONG NAME"[..usize::from(b % 9)])),
                ];
                let m = encode(&Message::Update(UpdateRepr {
                    item_id: feed_id,
                    timestamp_ns: now_ns,
                    item_seq: seq,
                    fields: FieldList::List(&fields[..1 + usize::from(b & 1)]),
                }));
                d.handle_feed_message(service, feed, &m, now_ns);
            }
            8 if inp.0.first().is_some_and(|b| b & 0x80 != 0) => {
                // A provider's ACK: of this distributor's posts (ids are given from 1), or
                // another's.
                let b = inp.byte();
                let m = encode(&Message::Ack(AckRepr {
                    origin: if b & 0x40 != 0 { origin } else { origin + 1 },
                    post_id: u32::from(b % 6) + 1,
                    code: AckCode::ALL[usize::from(b >> 3) % AckCode::ALL.len()],
                    text: "from the provider",
                }));
                d.handle_feed_message(service, feed, &m, now_ns);
            }
            8 => {
                let feed_id = u32::from(inp.byte() % 12) + 1;
                let state = ItemState::ALL[usize::from(inp.byte() % 6)];
                let m = encode(&Message::Status(StatusRepr {
                    item_id: feed_id,
                    request_id: 0,
                    state,
                    service: "",
                    name: "",
                    text: "from the feed",
                }));
                d.handle_feed_message(service, feed, &m, now_ns);
            }
            9 => d.feed_lost(service, feed, now_ns),
            10 if op & 0x40 != 0 => d.feed_gone(service, now_ns),
            10 => d.feed_left(service, feed, now_ns),
            11 => d.feed_joined(service, feed, inp.byte() & 1 == 0, now_ns),
            12 => {
                if let Some(c) = slots[slot] {
                    let q = queues.entry(c).or_default();
                    let keep = if inp.byte() & 1 == 0 { 0 } else { q.len() / 2 };
                    let written = q.len() - keep;
                    q.drain(..written);
                    d.client_drained(c, q.len());
                }
            }
            13 => {
                if let Some(c) = slots[slot].take() {
                    d.client_closed(c);
                    queues.remove(&c);
                }
            }
            14 => {
                // Past a login deadline and three ping intervals, or a step of the pings.
                let b = inp.byte();
                now_ns += if b & 1 == 0 {
                    20_000_000_000
                } else {
                    u64::from(b) * 20_000_000
                };
                d.handle_timeout(now_ns);
            }
            _ => now_ns += u64::from(inp.byte()) * 1_000_000,
        }
        // Drain as a driver does.
        while let Some(t) = d.poll_transmit() {
            let mut m = Messages::new(t.bytes);
            for msg in m.by_ref() {
                let (_, b) = msg.expect("the distributor frames what it sends");
                Message::parse(b).expect("the distributor sends valid messages");
            }
            assert!(m.remaining().is_empty(), "a transmit holds whole messages");
            for c in t.clients {
                if let Some(q) = queues.get_mut(c) {
                    q.extend_from_slice(t.bytes);
                    assert!(q.len() <= max_queue, "a queue passed its bound");
                }
            }
        }
        while let Some(r) = d.poll_image_request() {
            let b = r.to_bytes();
            assert!(Message::parse(&b).is_ok());
        }
        while let Some(p) = d.poll_post_forward() {
            let Ok(Message::Post(post)) = Message::parse(&p.bytes) else {
                panic!("a forwarded post is a valid POST");
            };
            assert_eq!(post.origin, origin);
            assert_eq!(post.user, "bob", "only bob may post");
        }
        while let Some(x) = d.poll_disconnect() {
            queues.remove(&x.client);
            for s in slots.iter_mut() {
                if *s == Some(x.client) {
                    *s = None;
                }
            }
        }
        while d.poll_event().is_some() {}
        let f = d.footprint();
        assert!(f.clients <= CLIENTS);
        assert!(f.items <= MAX_ITEMS);
        assert!(f.image_bytes <= MAX_ITEMS * MAX_MESSAGE_LEN);
        assert!(f.watched <= CLIENTS * MAX_WATCH);
        assert!(f.patterns <= CLIENTS * MAX_PATTERNS);
        assert!(f.input_bytes < CLIENTS * MAX_MESSAGE_LEN);
        assert!(f.conflated_items <= f.watched);
        assert_eq!(f.outbox_bytes, 0, "everything polled");
        assert_eq!(f.events, 0);
        assert!(f.image_requests <= 2 * 4096);
        assert!(f.posts_in_flight <= CLIENTS * 3);
    }
});
