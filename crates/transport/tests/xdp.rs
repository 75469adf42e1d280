//! The xdp driver (`xdp=IFNAME`) across a veth pair between network namespaces this test
//! creates (root; `ip`): xdp to xdp, xdp to a kernel `udp` subscriber and back, multicast to
//! two subscribers behind a bridge, NAK repair under the loss generator, a subscriber process
//! killed with SIGKILL leaving the interface passing traffic, other traffic untouched while a
//! stream runs, and bad configurations refused with their fix.

mod common;

use common::{cfg, connect, drive, in_namespace, run, send};
use peregrine_testkit::root_with_netns;
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{random_u32, Message, OfferError, Uri};
use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

const STREAM: u32 = 33;

/// Namespaces joined by veth pairs: `pair` two hosts back to back, `bridged` several behind a
/// bridge in a namespace of its own. Removed on drop.
struct Net {
    namespaces: Vec<String>,
    /// Each host's namespace, interface and address.
    hosts: Vec<(String, String, Ipv4Addr)>,
}

impl Net {
    fn tag() -> String {
        format!("{:x}", random_u32() & 0xfffff)
    }

    fn pair() -> Net {
        let t = Self::tag();
        let (a, b) = (format!("pgx{t}a"), format!("pgx{t}b"));
        let (va, vb) = (format!("vx{t}a"), format!("vx{t}b"));
        let subnet = (random_u32() % 200 + 20) as u8;
        let mut net = Net {
            namespaces: vec![a.clone(), b.clone()],
            hosts: Vec::new(),
        };
        run("ip", &["netns", "add", &a]);
        run("ip", &["netns", "add", &b]);
        // One queue each way: the socket binds queue 0, and a kernel sender's packets would
        // otherwise be spread over a queue per CPU (those on other queues reach the kernel).
        run(
            "ip",
            &[
                "link",
                "add",
                &va,
                "numtxqueues",
                "1",
                "numrxqueues",
                "1",
                "type",
                "veth",
                "peer",
                "name",
                &vb,
                "numtxqueues",
                "1",
                "numrxqueues",
                "1",
            ],
        );
        for (i, (ns, dev)) in [(&a, &va), (&b, &vb)].into_iter().enumerate() {
            let addr = Ipv4Addr::new(10, 78, subnet, i as u8 + 1);
            run("ip", &["link", "set", dev, "netns", ns]);
            run(
                "ip",
                &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev],
            );
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
            net.hosts.push((ns.clone(), dev.clone(), addr));
        }
        net
    }

    /// `n` hosts on one bridge (multicast floods to every port: snooping off).
    fn bridged(n: usize) -> Net {
        let t = Self::tag();
        let sw = format!("pgx{t}s");
        let subnet = (random_u32() % 200 + 20) as u8;
        let mut net = Net {
            namespaces: vec![sw.clone()],
            hosts: Vec::new(),
        };
        run("ip", &["netns", "add", &sw]);
        run(
            "ip",
            &[
                "-n",
                &sw,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ],
        );
        run("ip", &["-n", &sw, "link", "set", "br0", "up"]);
        for i in 0..n {
            let ns = format!("pgx{t}{i}");
            let (dev, port) = (format!("vx{t}h{i}"), format!("vx{t}p{i}"));
            let addr = Ipv4Addr::new(10, 79, subnet, i as u8 + 1);
            run("ip", &["netns", "add", &ns]);
            net.namespaces.push(ns.clone());
            run(
                "ip",
                &[
                    "link",
                    "add",
                    &dev,
                    "numtxqueues",
                    "1",
                    "numrxqueues",
                    "1",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &port,
                    "numtxqueues",
                    "1",
                    "numrxqueues",
                    "1",
                ],
            );
            run("ip", &["link", "set", &dev, "netns", &ns]);
            run("ip", &["link", "set", &port, "netns", &sw]);
            run("ip", &["-n", &sw, "link", "set", &port, "master", "br0"]);
            run("ip", &["-n", &sw, "link", "set", &port, "up"]);
            run(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &dev],
            );
            run("ip", &["-n", &ns, "link", "set", &dev, "up"]);
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            // Multicast leaves by this interface.
            run(
                "ip",
                &["-n", &ns, "route", "add", "224.0.0.0/4", "dev", &dev],
            );
            net.hosts.push((ns, dev, addr));
        }
        net
    }

    /// Whether an XDP program is attached to host `i`'s interface.
    fn xdp_attached(&self, i: usize) -> bool {
        let (ns, dev, _) = &self.hosts[i];
        let o = Command::new("ip")
            .args(["-n", ns, "-d", "link", "show", "dev", dev])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn publisher(ns: &str, uri: &str) -> UdpPublisher {
    let (ns, uri) = (ns.to_string(), uri.to_string());
    in_namespace(&ns, move || {
        UdpPublisher::create(&cfg(&uri), &uri, random_u32(), STREAM)
            .unwrap_or_else(|e| panic!("{uri}: {e}"))
    })
}

fn subscriber(ns: &str, uri: &str) -> UdpSubscriber {
    let (ns, uri) = (ns.to_string(), uri.to_string());
    in_namespace(&ns, move || {
        UdpSubscriber::new(&cfg(&uri), &uri, STREAM).unwrap_or_else(|e| panic!("{uri}: {e}"))
    })
}

/// Sends 0..n from `p`, waiting out back-pressure (the subscribers' windows are bounded by
/// their receive rings) while they read, and checks every subscriber got each message exactly
/// once, in order.
fn stream(p: &mut UdpPublisher, subs: &mut [&mut UdpSubscriber], n: u64) {
    connect(p, subs);
    let mut got: Vec<Vec<u64>> = subs.iter().map(|_| Vec::new()).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut next = 0u64;
    while got.iter().any(|g| g.len() < n as usize) {
        assert!(
            Instant::now() < deadline,
            "sent {next}, received {:?}",
            got.iter().map(Vec::len).collect::<Vec<_>>()
        );
        while next < n {
            match p.offer(&next.to_le_bytes()) {
                Ok(_) => next += 1,
                Err(OfferError::BackPressured) => break,
                Err(e) => panic!("offer {next}: {e}"),
            }
        }
        p.flush().unwrap();
        p.do_work();
        for (s, g) in subs.iter_mut().zip(got.iter_mut()) {
            s.poll(
                &mut |m: Message<'_>| {
                    g.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                usize::MAX,
            );
            while s.next_event().is_some() {}
        }
    }
    let all: Vec<u64> = (0..n).collect();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &all, "subscriber {i}: every message once, in order");
        let c = subs[i].counters();
        assert_eq!(c.lost, 0, "subscriber {i}: {c:?}");
    }
}

#[test]
fn xdp_to_xdp_over_a_veth_pair() {
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let ((a, va, addr_a), (b, vb, _)) = (&net.hosts[0], &net.hosts[1]);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    let mut p = publisher(a, &format!("udp://{addr_a}:{port}?xdp={va}&mode=urgent"));
    let mut s = subscriber(b, &format!("udp://{addr_a}:{port}?xdp={vb}"));
    assert!(net.xdp_attached(0) && net.xdp_attached(1));
    stream(&mut p, &mut [&mut s], 5000);
    let (tx, rx) = (p.xdp().unwrap(), s.xdp().unwrap());
    // The data went through the rings: all but what left before the peer's Ethernet address
    // was known (the first datagrams may go through the kernel while it resolves).
    assert!(tx.sent >= 4000, "sent through the ring: {}", tx.sent);
    assert!(
        rx.received >= 4000,
        "received through the ring: {}",
        rx.received
    );
    assert_eq!(rx.rejected, 0);
    drop((p, s));
}

#[test]
fn xdp_and_kernel_udp_interoperate_both_ways() {
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let ((a, va, addr_a), (b, _, addr_b)) = (&net.hosts[0], &net.hosts[1]);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    // An xdp publisher, a kernel subscriber.
    let mut p = publisher(a, &format!("udp://{addr_a}:{port}?xdp={va}"));
    let mut s = subscriber(b, &format!("udp://{addr_a}:{port}"));
    stream(&mut p, &mut [&mut s], 3000);
    assert!(p.xdp().unwrap().sent > 0);
    drop((p, s));
    // A kernel publisher, an xdp subscriber.
    let mut p = publisher(b, &format!("udp://{addr_b}:{port}"));
    let mut s = subscriber(a, &format!("udp://{addr_b}:{port}?xdp={va}"));
    stream(&mut p, &mut [&mut s], 3000);
    // The kernel's batches (a few dozen datagrams) all came through the ring, their UDP
    // checksums left for offload by the kernel that sent them over the veth.
    let rx = s.xdp().unwrap();
    assert!(rx.received > 0 && rx.rejected == 0, "{rx:?}");
}

#[test]
fn multicast_reaches_two_xdp_subscribers_behind_a_bridge() {
    if !root_with_netns() {
        return;
    }
    let net = Net::bridged(3);
    let group = format!("239.255.{}.{}", random_u32() % 250, random_u32() % 250 + 1);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    let host = |i: usize| &net.hosts[i];
    let uri = |i: usize| {
        let (_, dev, addr) = host(i);
        format!("mcast://{group}:{port}?iface={addr}&xdp={dev}")
    };
    let mut p = publisher(&host(0).0, &uri(0));
    let mut s1 = subscriber(&host(1).0, &uri(1));
    let mut s2 = subscriber(&host(2).0, &uri(2));
    stream(&mut p, &mut [&mut s1, &mut s2], 4000);
    assert!(
        p.xdp().unwrap().sent >= 4000 / 40,
        "batches left through the ring"
    );
    for s in [&s1, &s2] {
        assert!(s.xdp().unwrap().received > 0);
    }
}

#[test]
fn nak_repair_works_under_the_loss_generator() {
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let ((a, va, addr_a), (b, vb, _)) = (&net.hosts[0], &net.hosts[1]);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    let mut p = publisher(
        a,
        &format!(
            "udp://{addr_a}:{port}?xdp={va}&mode=urgent&loss=rate=5%,seed=7,dir=send,kinds=data"
        ),
    );
    let mut s = subscriber(b, &format!("udp://{addr_a}:{port}?xdp={vb}"));
    stream(&mut p, &mut [&mut s], 5000);
    let c = p.counters();
    assert!(c.naks_received > 0 && c.retransmitted > 0, "{c:?}");
    let dropped = p.loss_counters().unwrap();
    assert!(dropped.dropped.iter().sum::<u64>() > 0, "{dropped:?}");
}

#[test]
fn other_traffic_on_the_interface_is_untouched_while_a_stream_runs() {
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let ((a, va, addr_a), (b, vb, addr_b)) = (&net.hosts[0], &net.hosts[1]);
    let (addr_a, addr_b) = (*addr_a, *addr_b);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    let mut p = publisher(a, &format!("udp://{addr_a}:{port}?xdp={va}"));
    let mut s = subscriber(b, &format!("udp://{addr_a}:{port}?xdp={vb}"));
    connect(&mut p, &mut [&mut s]);
    // A kernel UDP socket on another port of host B, and a TCP listener there.
    let other = in_namespace(b, move || {
        let u = UdpSocket::bind((addr_b, port.wrapping_add(1))).unwrap();
        let t = std::net::TcpListener::bind((addr_b, port.wrapping_add(2))).unwrap();
        (u, t)
    });
    let sender = in_namespace(a, move || UdpSocket::bind((addr_a, 0)).unwrap());
    other
        .0
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    send(&mut p, 0..1000);
    for i in 0..20u8 {
        sender
            .send_to(&[i; 100], (addr_b, port.wrapping_add(1)))
            .unwrap();
        let mut buf = [0u8; 200];
        let (n, from) = other
            .0
            .recv_from(&mut buf)
            .expect("a kernel datagram on another port");
        assert_eq!(
            (n, buf[0], from.ip()),
            (100, i, std::net::IpAddr::V4(addr_a))
        );
    }
    let t = in_namespace(a, move || {
        std::net::TcpStream::connect_timeout(
            &(addr_b, port.wrapping_add(2)).into(),
            Duration::from_secs(5),
        )
    });
    assert!(t.is_ok(), "a TCP connection beside the stream: {t:?}");
    let mut got = Vec::new();
    drive(&mut p, &mut [(&mut s, &mut got)], 1000);
    assert_eq!(got, (0..1000).collect::<Vec<u64>>());
}

/// The child of [`a_killed_process_leaves_the_interface_passing_traffic`]: subscribes with
/// xdp= in the namespace named by the environment, says so, and waits to be killed.
#[test]
fn xdp_child_process() {
    let Ok(spec) = std::env::var("PEREGRINE_XDP_CHILD") else {
        return;
    };
    let mut parts = spec.split(' ');
    let (ns, uri) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    );
    let s = subscriber(&ns, &uri);
    println!("PEREGRINE_XDP_CHILD_READY");
    std::thread::sleep(Duration::from_secs(60));
    drop(s);
}

#[test]
fn a_killed_process_leaves_the_interface_passing_traffic() {
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let ((a, _, addr_a), (b, vb, addr_b)) = (&net.hosts[0], &net.hosts[1]);
    let (addr_a, addr_b) = (*addr_a, *addr_b);
    let port = 20_000 + (random_u32() % 30_000) as u16;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "xdp_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "PEREGRINE_XDP_CHILD",
            format!("{b} udp://{addr_a}:{port}?xdp={vb}"),
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0
                && Instant::now() < deadline,
            "the child did not get ready"
        );
        if line.contains("PEREGRINE_XDP_CHILD_READY") {
            break;
        }
    }
    assert!(net.xdp_attached(1), "the child's program is attached");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The kernel closes the dead process's link: the program goes with it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.xdp_attached(1) {
        assert!(
            Instant::now() < deadline,
            "a program is still attached after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the stream's own port works through the kernel again.
    let rx = in_namespace(b, move || UdpSocket::bind((addr_b, port)).unwrap());
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = in_namespace(a, move || UdpSocket::bind((addr_a, 0)).unwrap());
    tx.send_to(b"after", (addr_b, port)).unwrap();
    let mut buf = [0u8; 16];
    let n = rx
        .recv(&mut buf)
        .expect("the kernel receives on the interface again");
    assert_eq!(&buf[..n], b"after");
}

#[test]
fn bad_configurations_are_refused_with_the_fix() {
    for (uri, says) in [
        (
            "udp://127.0.0.1:4000?xdp_mode=native",
            "xdp_mode= is given without xdp=",
        ),
        (
            "udp://127.0.0.1:4000?xdp=lo&xdp_frames=100",
            "xdp_frames=100 is not accepted",
        ),
        (
            "udp://127.0.0.1:4000?xdp=lo&xdp_mode=fast",
            "xdp_mode=fast is not accepted",
        ),
        (
            "udp://127.0.0.1:4000?xdp=lo&xdp_queue=5000",
            "xdp_queue=5000 is not accepted",
        ),
        ("udp://127.0.0.1:4000?xdp=a/b", "xdp=a/b is not accepted"),
    ] {
        let e = NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap_err();
        assert!(e.to_string().contains(says), "{uri}: {e}");
    }
    if !root_with_netns() {
        return;
    }
    let net = Net::pair();
    let (a, va, addr_a) = net.hosts[0].clone();
    let open = |uri: String| {
        let ns = a.clone();
        in_namespace(&ns, move || {
            UdpPublisher::create(&cfg(&uri), &uri, 1, STREAM)
                .map(drop)
                .map_err(|e| e.to_string())
        })
    };
    let e = open(format!("udp://{addr_a}:4100?xdp=nosuchif0")).unwrap_err();
    assert!(
        e.contains("no interface has that name") && e.contains(&va),
        "{e}"
    );
    // Loopback has no native XDP hook.
    let e = open("udp://127.0.0.1:4101?xdp=lo&xdp_mode=native".to_string()).unwrap_err();
    assert!(
        e.contains("no native XDP") && e.contains("xdp_mode=generic"),
        "{e}"
    );
    let e = open(format!("udp://{addr_a}:4102?xdp={va}&datagram=4000")).unwrap_err();
    assert!(e.contains("too large for xdp="), "{e}");
}

#[test]
fn the_kernel_verifier_accepts_the_steering_program() {
    use peregrine_transport::net::xdp::{bpf, program};
    use std::os::fd::AsRawFd;
    if !peregrine_testkit::root("it loads a BPF program") {
        return;
    }
    let streams = bpf::map_create(
        bpf::MAP_HASH,
        program::STREAM_KEY_LEN as u32,
        4,
        8,
        "t_streams",
    )
    .unwrap();
    let xsks = bpf::map_create(bpf::MAP_XSKMAP, 4, 4, 4, "t_xsks").unwrap();
    let insns = program::steering(streams.as_raw_fd(), xsks.as_raw_fd());
    if let Err(e) = bpf::prog_load_xdp(&insns, "t_steer") {
        panic!("refused: {}\n{}", e.source, e.log);
    }
    // A program the verifier must refuse (reads past the packet without a bounds check) comes
    // back with its log, which the error shows.
    let bad = [
        program::insn(0x61, 2, 1, 0, 0), // r2 = ctx->data
        program::insn(0x71, 0, 2, 0, 0), // r0 = *(u8 *)r2, unchecked
        program::insn(0x95, 0, 0, 0, 0), // exit
    ];
    let e = bpf::prog_load_xdp(&bad, "t_bad").expect_err("an unchecked packet read");
    assert!(!e.log.is_empty(), "the verifier's log: {:?}", e.source);
}
