//! A and B lines (`mcast://A:PORT?b=B`): the publisher sends every datagram to both groups and
//! the subscriber takes each frame from whichever copy comes first. On loopback: each line
//! alone carries the whole stream and the subscriber of both gets every message once. In a
//! network namespace of its own (root and `nft`): either line cut by a rule dropping its
//! group loses nothing and sends no NAK.
// One unsafe call: unshare(2), to put one test thread in a network namespace of its own.
#![allow(unsafe_code)]

mod common;

use common::{cfg, connect, drive, in_namespace, run, send};
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{random_u32, Message, Uri};
use std::process::Command;
use std::time::{Duration, Instant};

const STREAM: u32 = 91;

/// Two fresh groups on one fresh port: (A, B, port).
fn groups() -> (String, String, u16) {
    let r = random_u32();
    let a = format!("239.255.{}.{}", (r >> 8) & 0x7f, (r & 0xff).max(1));
    let b = format!("239.255.{}.{}", 128 + ((r >> 8) & 0x7f), (r & 0xff).max(1));
    (a, b, 20_000 + ((r >> 16) % 40_000) as u16)
}

#[test]
fn each_line_carries_the_stream_and_the_subscriber_of_both_gets_each_message_once() {
    let (a, b, port) = groups();
    let uri = format!("mcast://{a}:{port}?b={b}");
    let mut p = UdpPublisher::create(&cfg(&uri), &uri, 0xab, STREAM).unwrap();
    let mut both = UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap();
    let (ua, ub) = (format!("mcast://{a}:{port}"), format!("mcast://{b}:{port}"));
    let mut only_a = UdpSubscriber::new(&cfg(&ua), &ua, STREAM).unwrap();
    let mut only_b = UdpSubscriber::new(&cfg(&ub), &ub, STREAM).unwrap();
    connect(&mut p, &mut [&mut both, &mut only_a, &mut only_b]);
    send(&mut p, 0..2000);
    let (mut g_both, mut g_a, mut g_b) = (Vec::new(), Vec::new(), Vec::new());
    drive(
        &mut p,
        &mut [
            (&mut both, &mut g_both),
            (&mut only_a, &mut g_a),
            (&mut only_b, &mut g_b),
        ],
        2000,
    );
    let all: Vec<u64> = (0..2000).collect();
    assert_eq!(
        g_both, all,
        "the subscriber of both lines: each message once, in order"
    );
    assert_eq!(g_a, all, "line A alone");
    assert_eq!(g_b, all, "line B alone");
    let c = both.counters();
    assert_eq!((c.lost, c.gaps), (0, 0), "{c:?}");
    assert!(
        c.duplicates >= 1000,
        "the second copies are duplicates: {c:?}"
    );
}

#[test]
fn the_b_group_is_checked_with_the_fix() {
    for (uri, says) in [
        (
            "mcast://239.1.1.1:4000?b=10.0.0.1",
            "b=10.0.0.1 is not accepted",
        ),
        (
            "mcast://239.1.1.1:4000?b=239.1.1.1",
            "the A line's group itself",
        ),
        ("udp://127.0.0.1:4000?b=239.1.1.2", "b"),
        (
            "mcast://239.1.1.1:4000?b_iface=127.0.0.1",
            "there is no line B: add b=GROUP",
        ),
        (
            "mcast://239.1.1.1:4000?b=239.1.1.2&b_iface=eth1",
            "b_iface=eth1 is not accepted: give the IPv4 address",
        ),
    ] {
        let e = NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap_err();
        assert!(e.to_string().contains(says), "{uri}: {e}");
    }
    // Line B on line A's interface is one socket for both lines, as without b_iface.
    let same = cfg("mcast://239.1.1.1:4000?b=239.1.1.2&iface=127.0.0.1&b_iface=127.0.0.1");
    assert_eq!(same.iface_b, None);
    let other = cfg("mcast://239.1.1.1:4000?b=239.1.1.2&b_iface=10.0.2.1");
    assert_eq!(other.iface_b, Some("10.0.2.1".parse().unwrap()));
    // An interface the host does not have: both sides say which line and which address.
    let (a, b, port) = groups();
    let uri = format!("mcast://{a}:{port}?b={b}&b_iface=192.0.2.77");
    let e = UdpPublisher::create(&cfg(&uri), &uri, 0xab, STREAM).unwrap_err();
    assert!(e.to_string().contains("line B (b_iface=192.0.2.77)"), "{e}");
    let e = UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap_err();
    assert!(e.to_string().contains("192.0.2.77"), "{e}");
}

#[test]
fn cutting_either_line_loses_nothing_and_needs_no_nak() {
    if !peregrine_testkit::root("cutting a multicast line with nft in a network namespace") {
        return;
    }
    let Some(nft) = peregrine_testkit::program("nft", "apt-get install nftables") else {
        return;
    };
    let nft = nft.to_string_lossy().into_owned();
    // A thread of its own in a fresh network namespace: its loopback, its rules, its sockets;
    // nothing of the host's traffic is touched.
    std::thread::spawn(move || {
        // SAFETY: unshare(2) with CLONE_NEWNET moves only this thread into a new network
        // namespace; no pointer is passed.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        run("ip", &["link", "set", "lo", "up"]);
        run("ip", &["link", "set", "lo", "multicast", "on"]);
        run(&nft, &["add", "table", "ip", "pg"]);
        run(
            &nft,
            // On input: the line is cut in the network, after the publisher sent (a rule on
            // output would fail the publisher's send instead).
            &[
                "add",
                "chain",
                "ip",
                "pg",
                "in",
                "{ type filter hook input priority 0; }",
            ],
        );
        // And on output: the publisher's own send to a line fails (EPERM).
        run(
            &nft,
            &[
                "add",
                "chain",
                "ip",
                "pg",
                "out",
                "{ type filter hook output priority 0; }",
            ],
        );
        let (a, b, port) = groups();
        let uri = format!("mcast://{a}:{port}?b={b}");
        let mut p = UdpPublisher::create(&cfg(&uri), &uri, 0xab, STREAM).unwrap();
        let mut s = UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap();
        connect(&mut p, &mut [&mut s]);
        let mut got = Vec::new();
        let cut = |group: &str| {
            run(
                &nft,
                &[
                    "add", "rule", "ip", "pg", "in", "ip", "daddr", group, "drop",
                ],
            )
        };
        let mend = || run(&nft, &["flush", "chain", "ip", "pg", "in"]);
        // The second copies, counted as duplicates, show whether both lines carry.
        let dups = |s: &UdpSubscriber| s.counters().duplicates;
        send(&mut p, 0..1000);
        drive(&mut p, &mut [(&mut s, &mut got)], 1000);
        let both_up = dups(&s);
        cut(&a);
        send(&mut p, 1000..3000);
        drive(&mut p, &mut [(&mut s, &mut got)], 3000);
        let a_cut = dups(&s) - both_up;
        mend();
        cut(&b);
        send(&mut p, 3000..5000);
        drive(&mut p, &mut [(&mut s, &mut got)], 5000);
        let b_cut = dups(&s) - both_up - a_cut;
        mend();
        // A line whose send fails at the publisher (a local rule: EPERM): the other carries.
        run(
            &nft,
            &["add", "rule", "ip", "pg", "out", "ip", "daddr", &a, "drop"],
        );
        // Flow control may hold the publisher back here (the subscriber's STATUS comes as it
        // reads): offer while reading.
        for i in 5000..7000u64 {
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = p.offer(&i.to_le_bytes()) {
                assert!(Instant::now() < deadline, "offer {i}: {e}");
                p.do_work();
                s.poll(
                    &mut |m: Message<'_>| {
                        got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                    },
                    usize::MAX,
                );
            }
        }
        p.flush().unwrap();
        drive(&mut p, &mut [(&mut s, &mut got)], 7000);
        run(&nft, &["flush", "chain", "ip", "pg", "out"]);
        assert!(p.partial_send_errors() > 0, "the sends to line A failed");
        assert!(
            both_up >= 500,
            "both lines carried the first 1000: {both_up} duplicates"
        );
        // At most the batch in flight when the rule went in.
        assert!(
            a_cut < 200 && b_cut < 200,
            "the cuts held: {a_cut}, {b_cut} duplicates"
        );
        assert_eq!(got, (0..7000).collect::<Vec<u64>>());
        let c = s.counters();
        assert_eq!((c.lost, c.gaps, c.naks_sent), (0, 0, 0), "{c:?}");
        assert_eq!(p.counters().retransmitted, 0);
    })
    .join()
    .unwrap();
}

/// Two network namespaces of the test's own, a publisher host and a subscriber host, joined by
/// two veth links: line A on one, line B on the other (`iface=` and `b_iface=` on each side).
struct TwoLinks {
    publisher_ns: String,
    subscriber_ns: String,
    /// The subscriber host's end of each link.
    sub_if: [String; 2],
}

impl TwoLinks {
    fn new() -> TwoLinks {
        let n = std::process::id() % 100_000;
        let l = TwoLinks {
            publisher_ns: format!("pgabp{n}"),
            subscriber_ns: format!("pgabs{n}"),
            sub_if: [format!("pgab{n}as"), format!("pgab{n}bs")],
        };
        for ns in [&l.publisher_ns, &l.subscriber_ns] {
            run("ip", &["netns", "add", ns]);
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        for (k, line) in ["a", "b"].iter().enumerate() {
            let (p_if, s_if) = (format!("pgab{n}{line}p"), l.sub_if[k].clone());
            run(
                "ip",
                &["link", "add", &p_if, "type", "veth", "peer", "name", &s_if],
            );
            run("ip", &["link", "set", &p_if, "netns", &l.publisher_ns]);
            run("ip", &["link", "set", &s_if, "netns", &l.subscriber_ns]);
            for (ns, ifname, host) in [(&l.publisher_ns, &p_if, 1), (&l.subscriber_ns, &s_if, 2)] {
                let addr = format!("10.91.{}.{host}/24", k + 1);
                run("ip", &["-n", ns, "addr", "add", &addr, "dev", ifname]);
                run("ip", &["-n", ns, "link", "set", ifname, "up"]);
            }
        }
        l
    }

    /// Takes the subscriber host's end of line `k` (0: A, 1: B) down or up.
    fn set(&self, k: usize, up: bool) {
        run(
            "ip",
            &[
                "-n",
                &self.subscriber_ns,
                "link",
                "set",
                &self.sub_if[k],
                if up { "up" } else { "down" },
            ],
        );
    }
}

impl Drop for TwoLinks {
    fn drop(&mut self) {
        // The veth pairs go with the namespaces.
        for ns in [&self.publisher_ns, &self.subscriber_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

#[test]
fn lines_on_two_interfaces_each_carry_the_stream_and_losing_either_loses_nothing() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let links = TwoLinks::new();
    let (a, b, port) = groups();
    // Each side names its own end of the two links; loop=0: no copy through the publisher
    // host's own loopback.
    let pub_uri = format!("mcast://{a}:{port}?b={b}&iface=10.91.1.1&b_iface=10.91.2.1&loop=0");
    let sub_uri = format!("mcast://{a}:{port}?b={b}&iface=10.91.1.2&b_iface=10.91.2.2");
    let mut p = {
        let u = pub_uri.clone();
        in_namespace(&links.publisher_ns, move || {
            UdpPublisher::create(&cfg(&u), &u, 0xab, STREAM).unwrap()
        })
    };
    let mut s = {
        let u = sub_uri.clone();
        in_namespace(&links.subscriber_ns, move || {
            UdpSubscriber::new(&cfg(&u), &u, STREAM).unwrap()
        })
    };
    connect(&mut p, &mut [&mut s]);
    let mut got = Vec::new();
    let dups = |s: &UdpSubscriber| s.counters().duplicates;
    send(&mut p, 0..1000);
    drive(&mut p, &mut [(&mut s, &mut got)], 1000);
    let both_up = dups(&s);
    links.set(0, false);
    send(&mut p, 1000..3000);
    drive(&mut p, &mut [(&mut s, &mut got)], 3000);
    let a_cut = dups(&s) - both_up;
    links.set(0, true);
    // Line A carries again once its second copies come back.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut next = 3000;
    while dups(&s) == both_up + a_cut {
        assert!(Instant::now() < deadline, "line A did not come back");
        send(&mut p, next..next + 10);
        next += 10;
        drive(&mut p, &mut [(&mut s, &mut got)], next as usize);
    }
    let before_b = dups(&s);
    links.set(1, false);
    send(&mut p, next..next + 2000);
    next += 2000;
    drive(&mut p, &mut [(&mut s, &mut got)], next as usize);
    let b_cut = dups(&s) - before_b;
    links.set(1, true);
    assert!(
        both_up >= 500,
        "both lines, from two interfaces, carried the first 1000: {both_up} duplicates, {} foreign",
        s.receiver_stats().foreign_source
    );
    assert!(
        a_cut < 200 && b_cut < 200,
        "the cuts held: {a_cut}, {b_cut} duplicates"
    );
    assert_eq!(got, (0..next).collect::<Vec<u64>>());
    let c = s.counters();
    assert_eq!((c.lost, c.gaps, c.naks_sent), (0, 0, 0), "{c:?}");
    assert_eq!(s.receiver_stats().foreign_source, 0);
    assert_eq!(p.counters().retransmitted, 0);
    drop(links);
}
