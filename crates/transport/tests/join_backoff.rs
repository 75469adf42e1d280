//! Issue 14, item 8, over real sockets: a subscriber whose publisher address never answers
//! (an advertisement can be forged) sends it a bounded number of JOINs, and still finds a
//! real publisher that starts there late.

use peregrine_proto::join::JoinSchedule;
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{Message, Uri};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

#[test]
fn joins_to_an_address_that_never_answers_back_off_and_a_late_publisher_is_found() {
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let port = victim.local_addr().unwrap().port();
    let uri = format!("udp://127.0.0.1:{port}");
    let mut cfg = NetConfig::from_uri(&Uri::parse(&uri).unwrap()).unwrap();
    // The default shape, ten times faster: 10 ms doubling to 100 ms for 1 s, then to 1 s.
    cfg.join = JoinSchedule {
        first_interval_ns: 10_000_000,
        fast_max_interval_ns: 100_000_000,
        fast_for_ns: 1_000_000_000,
        max_interval_ns: 1_000_000_000,
    };
    let mut s = UdpSubscriber::new(&cfg, &uri, 79).unwrap();
    let start = Instant::now();
    let mut joins = Vec::new();
    let mut buf = [0u8; 2048];
    while start.elapsed() < Duration::from_secs(4) {
        s.poll(&mut |_m: Message<'_>| {}, 16);
        if victim.recv(&mut buf).is_ok() {
            joins.push(start.elapsed());
        }
    }
    // 0, 10, 30, 70, 150, 250, ... 950 ms (fast), then 1.05, 1.25, 1.65, 2.45, 3.45 s.
    assert!(
        (12..=22).contains(&joins.len()),
        "{} JOINs in 4 s: {joins:?}",
        joins.len()
    );
    let late: Vec<_> = joins
        .iter()
        .filter(|t| **t > Duration::from_secs(2))
        .collect();
    assert!(late.len() <= 2, "{late:?}");
    assert_eq!(s.joins_unanswered(), joins.len() as u64);
    // A real publisher starts on that address: found within the interval reached (1 s).
    drop(victim);
    let mut p = UdpPublisher::create(&cfg, &uri, 61, 79).unwrap();
    let started = Instant::now();
    while !s.is_connected() {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the late publisher was not found"
        );
        p.do_work();
        s.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    s.poll(&mut |_m: Message<'_>| {}, 16);
    assert_eq!(s.joins_unanswered(), 0);
}
