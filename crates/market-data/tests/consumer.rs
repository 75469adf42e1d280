//! The consumer's driver against a distributor played by this test over a real TCP socket:
//! an application's own event loop (wait for the socket, then poll with no time left) gets
//! what arrived, and a connection the distributor closes is reported stale, then disconnected.

use peregrine_market_data::consumer::{ConnectOptions, Consumer, Event};
use peregrine_md::codec::{
    FieldList, LoginResponseRepr, LoginResult, Message, Messages, RefreshRepr, UpdateRepr,
};
use peregrine_md::model::{Field, ItemState, Value};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

fn bytes(m: Message<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    m.emit_to_vec(&mut b);
    b
}

/// Reads whole messages until one of `ty` arrives.
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, want: peregrine_md::codec::MessageType) {
    let mut chunk = [0u8; 4096];
    loop {
        let mut msgs = Messages::new(buf);
        let found = msgs
            .by_ref()
            .any(|m| m.map(|(t, _)| t == want).unwrap_or(false));
        let rest = msgs.remaining().len();
        let used = buf.len() - rest;
        buf.drain(..used);
        if found {
            return;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the consumer closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn an_event_loop_polling_with_no_time_left_gets_what_arrived_and_a_close_is_stale_then_disconnected(
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (go, wait) = mpsc::channel::<&'static str>();
    let server = std::thread::spawn(move || {
        use peregrine_md::codec::MessageType;
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        read_until(&mut s, &mut buf, MessageType::Login);
        s.write_all(&bytes(Message::LoginResponse(LoginResponseRepr {
            result: LoginResult::Accepted,
            ping_interval_ms: None,
            text: "",
        })))
        .unwrap();
        read_until(&mut s, &mut buf, MessageType::Open);
        let bid = [Field::new(22, Value::price(18921, -2))];
        s.write_all(&bytes(Message::Refresh(RefreshRepr {
            item_id: 1,
            flags: 0,
            timestamp_ns: 1,
            item_seq: 4,
            service: "FEED1",
            name: "AAA.O",
            fields: FieldList::List(&bid),
        })))
        .unwrap();
        assert_eq!(wait.recv().unwrap(), "update");
        let bid = [Field::new(22, Value::price(18922, -2))];
        s.write_all(&bytes(Message::Update(UpdateRepr {
            item_id: 1,
            timestamp_ns: 2,
            item_seq: 5,
            fields: FieldList::List(&bid),
        })))
        .unwrap();
        assert_eq!(wait.recv().unwrap(), "close");
        drop(s);
    });

    // This distributor serves no dictionary: the consumer is told not to wait for one.
    let mut c = Consumer::connect_with(
        &[addr.as_str()],
        "alice",
        b"a",
        ConnectOptions::plain().without_dictionary_download(),
    )
    .unwrap();
    c.open("FEED1", &["AAA.O"]).unwrap();
    let got: RefCell<Vec<String>> = RefCell::default();
    let mut record = |e: Event<'_>| {
        got.borrow_mut().push(match e {
            Event::Refresh { item, item_seq, .. } => format!("refresh {item} {item_seq}"),
            Event::Update { item, item_seq, .. } => format!("update {item} {item_seq}"),
            Event::Status { item, state, .. } => format!("status {item} {}", state.name()),
            Event::Disconnected { .. } => "disconnected".into(),
            other => format!("{other:?}"),
        })
    };
    while got.borrow().is_empty() {
        c.poll(Duration::from_secs(5), &mut record).unwrap();
    }
    assert_eq!(*got.borrow(), ["refresh AAA.O 4"]);

    // The application's own loop: wait for the socket, then poll with no time left.
    go.send("update").unwrap();
    {
        let socket = c.socket().expect("connected");
        let mut fds = [rustix::event::PollFd::new(
            &socket,
            rustix::event::PollFlags::IN,
        )];
        let five = rustix::time::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&five)).unwrap(), 1);
    }
    let n = c.poll(Duration::ZERO, &mut record).unwrap();
    assert_eq!(n, 1, "{:?}", got.borrow());
    assert_eq!(got.borrow()[1], "update AAA.O 5");

    go.send("close").unwrap();
    while !got.borrow().iter().any(|g| g == "disconnected") {
        c.poll(Duration::from_secs(5), &mut record).unwrap();
    }
    let got = got.borrow();
    let after: Vec<&str> = got[2..].iter().map(String::as_str).take(2).collect();
    assert_eq!(after, ["status AAA.O stale", "disconnected"]);
    assert_eq!(ItemState::Stale.name(), "stale");
    server.join().unwrap();
}
