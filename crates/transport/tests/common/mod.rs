//! What the tests that drive a publisher and its subscribers by hand share: the configuration
//! of a URI, connecting (UDP and TCP), sending numbered messages and driving both sides until
//! each subscriber has them, and running commands or sockets inside a network namespace.
#![allow(dead_code)] // each test file uses its own part

use peregrine_transport::net::tcp::{TcpPublisher, TcpSubscriber};
use peregrine_transport::net::udp::{UdpPublisher, UdpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{Message, Uri};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn cfg(uri: &str) -> NetConfig {
    NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap()
}

/// A TCP publisher of stream `stream_id` on `uri` and a subscriber connected to it, once the
/// publisher counts `1 + extra` subscribers (connections the caller made) and the subscriber
/// is connected; fails after 10 s.
pub fn tcp_pair(
    uri: &str,
    session_id: u32,
    stream_id: u32,
    extra: usize,
) -> (TcpPublisher, TcpSubscriber) {
    let c = cfg(uri);
    let mut p = TcpPublisher::create(&c, uri, session_id, stream_id).unwrap();
    let mut s = TcpSubscriber::new(&c, uri, stream_id).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() < 1 + extra || !s.is_connected() {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        s.poll(&mut |_m: Message<'_>| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    (p, s)
}

pub fn drive(p: &mut UdpPublisher, subs: &mut [(&mut UdpSubscriber, &mut Vec<u64>)], want: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while subs.iter().any(|(_, got)| got.len() < want) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            subs.iter().map(|(_, g)| g.len()).collect::<Vec<_>>()
        );
        p.do_work();
        for (s, got) in subs.iter_mut() {
            s.poll(
                &mut |m: Message<'_>| {
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
                },
                usize::MAX,
            );
            while s.next_event().is_some() {}
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

pub fn connect(p: &mut UdpPublisher, subs: &mut [&mut UdpSubscriber]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.subscriber_count() < subs.len() || subs.iter().any(|s| !s.is_connected()) {
        assert!(Instant::now() < deadline, "no connection");
        p.do_work();
        for s in subs.iter_mut() {
            s.poll(&mut |_| panic!("nothing was sent yet"), 16);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn send(p: &mut UdpPublisher, range: std::ops::Range<u64>) {
    for i in range {
        p.offer(&i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
}

/// Runs `ip` or `nft` in this thread's network namespace (a child forked by this thread
/// inherits it).
pub fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` in a thread moved into network namespace `ns`: the sockets it makes live there,
/// and keep working from any thread once made.
pub fn in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
    .join()
    .unwrap()
}
