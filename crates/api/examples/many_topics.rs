//! Holds many topics open, for measuring `peregrine stat` over them: N shared-memory publishers
//! (64 KiB logs) and a subscriber on each, one message per topic every 100 ms.
//!
//! ```text
//! cargo run --release -p peregrine --example many_topics -- 1000 &
//! time peregrine stat > /dev/null
//! ```

use peregrine::{Context, IdleKind};
use std::time::Duration;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the number of topics"))
        .unwrap_or(1000);
    let seconds: f64 = std::env::args()
        .nth(2)
        .map(|a| a.parse().expect("seconds to run"))
        .unwrap_or(3600.0);
    peregrine::stat::set_process_label("many-topics");
    let ctx = Context::new();
    let pid = std::process::id();
    let mut pairs: Vec<_> = (0..n)
        .map(|i| {
            let topic = format!("many.{i:05}");
            let uri = format!("ipc://many-{pid}-{i}?capacity=64k");
            let p = ctx.publisher(&topic, &uri).expect("publisher");
            let s = ctx
                .subscriber(&topic, &uri, IdleKind::Backoff)
                .expect("subscriber");
            (p, s)
        })
        .collect();
    println!("{n} topics open");
    let start = std::time::Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        for (p, s) in &mut pairs {
            let _ = p.offer(b"a message of 32 bytes, padded...");
            while s.poll(&mut |_| {}, 64) > 0 {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
