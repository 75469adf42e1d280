//! Issue 14, item 8, over real sockets: `peregrine resolverd` registers only clients that
//! prove their address (a cookie they echo), sends nothing larger than what it got to one
//! that does not, and fake clients from one address cannot lock real clients out. Real
//! clients ([`ResolverSocket`]) pass the exchange without the resolver noticing.

use peregrine_proto::resolver::{Resolver, ResolverConfig};
use peregrine_proto::resolverd::{cookie_answer, cookie_frame, keepalive, RelayConfig};
use peregrine_transport::resolver::{Daemon, ResolverPath, ResolverSocket};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

fn advertisement(topic: &str) -> Vec<u8> {
    let mut r = Resolver::new(ResolverConfig::new(9));
    r.advertise(topic, 5, &["udp://127.0.0.1:1".into()], 0)
        .unwrap();
    let mut buf = [0u8; 1472];
    let n = r.poll_transmit(0, &mut buf).unwrap();
    buf[..n].to_vec()
}

fn daemon(max_clients: usize) -> (Daemon, SocketAddrV4) {
    let cfg = RelayConfig {
        max_clients,
        ..RelayConfig::default()
    };
    let d = Daemon::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), cfg).unwrap();
    let SocketAddr::V4(at) = d.local_addr() else {
        unreachable!()
    };
    (d, at)
}

fn client(at: SocketAddrV4, iface: [u8; 4]) -> ResolverSocket {
    ResolverSocket::open(&ResolverPath::Daemon {
        daemon: at,
        iface: Ipv4Addr::from(iface),
    })
    .unwrap()
}

/// Runs the daemon and `b`'s receive side until `b` gets a datagram equal to `want` (or 5 s).
fn relayed_to(
    d: &mut Daemon,
    b: &mut ResolverSocket,
    want: &[u8],
    mut tick: impl FnMut(&mut Daemon),
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        tick(d);
        d.run_once(1);
        while let Some(n) = b.recv(&mut buf) {
            if &buf[..n] == want {
                return true;
            }
        }
    }
    false
}

#[test]
fn real_clients_pass_the_cookie_exchange_transparently() {
    let (mut d, at) = daemon(4096);
    let mut a = client(at, [127, 0, 0, 1]);
    let mut b = client(at, [127, 0, 0, 1]);
    // Each says something (a keepalive, as a context does first); the daemon challenges,
    // the socket answers by itself.
    b.send(&keepalive(2));
    a.send(&keepalive(1));
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.clients() < 2 {
        assert!(
            Instant::now() < deadline,
            "not registered: {:?}",
            d.counters()
        );
        d.run_once(1);
        while a.recv(&mut buf).is_some() {}
        while b.recv(&mut buf).is_some() {}
    }
    assert!(a.has_cookie() && b.has_cookie());
    let ad = advertisement("md.eq.A");
    a.send(&ad);
    assert!(
        relayed_to(&mut d, &mut b, &ad, |_| {}),
        "{:?}",
        d.counters()
    );
    let c = d.counters();
    assert_eq!(c.challenges, 2);
    assert_eq!(c.rejected(), 0);
}

/// The amplifier of issue 14, item 8: any datagram registered its source, and the daemon
/// then sent it a copy of every advertisement. A source that does not echo the cookie (the
/// victim of a forged source address never sees it) gets exactly one answer per datagram,
/// no larger than the datagram, and no copy of anything.
#[test]
fn a_source_that_does_not_prove_its_address_gets_no_copies_and_never_more_than_it_sent() {
    let (mut d, at) = daemon(4096);
    let mut a = client(at, [127, 0, 0, 1]);
    let mut b = client(at, [127, 0, 0, 1]);
    b.send(&keepalive(2));
    a.send(&keepalive(1));
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim.set_nonblocking(true).unwrap();
    let mut sent = Vec::new();
    let mut received = Vec::new();
    let mut buf = vec![0u8; 65536];
    let ad = advertisement("md.eq.V");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut k = 0u32;
    while Instant::now() < deadline {
        // What an attacker writes with the victim's address as source: old-style datagrams
        // and datagrams with a made-up cookie.
        let mut with_cookie = cookie_frame(&[k as u8; 16]).to_vec();
        with_cookie.extend_from_slice(&advertisement(&format!("x.{k}")));
        for datagram in [keepalive(k).to_vec(), advertisement("x"), with_cookie] {
            victim.send_to(&datagram, at).unwrap();
            sent.push(datagram.len());
        }
        k += 1;
        d.run_once(1);
        while let Ok((n, _)) = victim.recv_from(&mut buf) {
            received.push(buf[..n].to_vec());
        }
        while a.recv(&mut buf).is_some() {}
        while b.recv(&mut buf).is_some() {}
        if k % 50 == 0 {
            a.send(&ad);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    assert!(d.counters().datagrams_forwarded > 0, "{:?}", d.counters());
    assert!(
        received.iter().all(|r| cookie_answer(r).is_some()),
        "the victim got something other than a cookie"
    );
    assert!(
        received.len() <= sent.len() / 3,
        "one answer per datagram that carried a cookie frame"
    );
    let bytes_in: usize = received.iter().map(Vec::len).sum();
    let bytes_out: usize = sent.iter().sum();
    assert!(
        bytes_in * 3 <= bytes_out,
        "{bytes_in} bytes back for {bytes_out}"
    );
    assert_eq!(d.clients(), 2);
}

/// The lock-out of issue 14, item 8: fake clients kept alive filled the daemon and real
/// clients resolved nothing. One address holds at most 64 clients, so 100 fakes from one
/// host leave room for the real clients of other hosts.
#[test]
fn fake_clients_kept_alive_from_one_host_do_not_lock_real_clients_out() {
    let (mut d, at) = daemon(100);
    let mut fakes: Vec<(UdpSocket, Vec<u8>)> = (0..100)
        .map(|i| {
            let s = UdpSocket::bind("127.0.0.2:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let mut first = cookie_frame(&[0; 16]).to_vec();
            first.extend_from_slice(&keepalive(1000 + i));
            (s, first)
        })
        .collect();
    for _ in 0..20 {
        keep_alive(&mut d, at, &mut fakes);
    }
    assert_eq!(d.clients(), 64, "{:?}", d.counters());
    let mut a = client(at, [127, 0, 0, 3]);
    let mut b = client(at, [127, 0, 0, 4]);
    b.send(&keepalive(2));
    a.send(&keepalive(1));
    let ad = advertisement("md.eq.L");
    let mut n = 0;
    let found = relayed_to(&mut d, &mut b, &ad, |d| {
        keep_alive(d, at, &mut fakes);
        while a.recv(&mut vec![0u8; 65536]).is_some() {}
        n += 1;
        if n % 10 == 0 {
            a.send(&ad);
        }
    });
    assert!(found, "a real client was locked out: {:?}", d.counters());
    assert!(d.counters().ip_full > 0);
}

/// Every fake sends its keepalive (with the cookie it last learnt) and reads what came back.
fn keep_alive(d: &mut Daemon, at: SocketAddrV4, fakes: &mut [(UdpSocket, Vec<u8>)]) {
    let mut buf = [0u8; 2048];
    for (s, datagram) in fakes.iter_mut() {
        let _ = s.send_to(datagram, at);
    }
    d.run_once(1);
    for (s, datagram) in fakes.iter_mut() {
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            // A fake reads at its address: it learns its cookie.
            if let Some(c) = cookie_answer(&buf[..n]) {
                datagram[..32].copy_from_slice(&cookie_frame(&c));
            }
        }
    }
}
