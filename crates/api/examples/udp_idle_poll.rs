//! What an empty poll of a connected `udp://` subscriber costs, next to an empty `recv_from` on
//! a bare non-blocking socket: the loop a latency run's waiting side spins in. A message that
//! arrives while the subscriber is busy with an empty poll's own work waits for it, so half of
//! the difference is added, on average, to every one-way latency.
//!
//! ```sh
//! cargo run --release --example udp_idle_poll -p peregrine -- 1000000
//! cargo run --release --example udp_idle_poll -p peregrine -- 1000000 gro=0
//! ```
//!
//! The second argument, if any, is added to the subscriber's URI (`key=value&...`).
//!
//! Under callgrind, build as `tcp_offer_loop.rs` says (rustix through libc).

mod common;

use peregrine::{Context, IdleKind};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = common::count_arg(1_000_000)?;
    let ctx = Context::new();
    let mut publisher = ctx.publisher("idle.poll", "udp://127.0.0.1:0")?;
    let mut uri = publisher.uri().to_string();
    if let Some(extra) = std::env::args().nth(2) {
        uri.push(if uri.contains('?') { '&' } else { '?' });
        uri.push_str(&extra);
    }
    let mut subscriber = ctx.subscriber("idle.poll", &uri, IdleKind::Spin)?;
    // Connect, and deliver one message so that the session is followed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut delivered = 0;
    while delivered == 0 {
        if Instant::now() > deadline {
            return Err("the subscriber never received the first message".into());
        }
        publisher.do_work();
        if publisher.subscriber_count() > 0 {
            publisher.offer(b"hello")?;
        }
        std::thread::sleep(Duration::from_millis(1));
        delivered = subscriber.poll(&mut |_| {}, 16);
    }

    let t0 = Instant::now();
    let mut got = 0;
    for _ in 0..n {
        got += subscriber.poll(&mut |_| {}, 1);
    }
    let peregrine_ns = t0.elapsed().as_nanos() as f64 / n as f64;

    let bare = UdpSocket::bind("127.0.0.1:0")?;
    bare.set_nonblocking(true)?;
    let mut buf = [0u8; 2048];
    let t0 = Instant::now();
    for _ in 0..n {
        if bare.recv_from(&mut buf).is_ok() {
            got += 1;
        }
    }
    let bare_ns = t0.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "{n} empty polls: subscriber {peregrine_ns:.1} ns each, bare recv_from {bare_ns:.1} ns \
         each, x {:.2} ({got} delivered meanwhile)",
        peregrine_ns / bare_ns
    );
    Ok(())
}
