//! What retention costs the sender: nanoseconds per 32-byte message with and without it, the
//! sink doing nothing (no system calls), so only the sender's own work is timed. In normal mode
//! (65,000-byte batches) and in urgent mode (a batch per message, as a ping-pong sends), the
//! latter both while the buffer fills (150,000 messages: 14 MB of 16 MiB) and once it evicts.
//! All runs share the process's heap: memory that earlier runs freed may serve later ones (a
//! publisher's first fill has none), so compare two builds run for run, and read the filling
//! figures as rough.
//!
//! `cargo run --release -p peregrine-proto --example retention_cost`
use peregrine_proto::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use std::time::Instant;

fn run(retain_bytes: usize, mode: SendMode, n: u64) -> f64 {
    let mut s = Sender::new(SenderConfig {
        mode,
        retain_bytes,
        retain_age_ns: u64::MAX,
        ..SenderConfig::new(1, 7, Packing::Datagrams, 1472)
    });
    let mut bytes = 0usize;
    let mut sink = |b: Batch<'_>| -> Result<(), ()> {
        bytes += b.bytes.len();
        Ok(())
    };
    let payload = [7u8; 32];
    let t = Instant::now();
    for _ in 0..n {
        s.offer(&payload, 0, &mut sink).unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    std::hint::black_box(bytes);
    ns
}

fn main() {
    let normal = SendMode::Normal {
        batch_bytes: 65_000,
        batch_interval_ns: u64::MAX,
    };
    for _ in 0..3 {
        for retain in [0usize, 4 << 20, 8 << 20, 16 << 20] {
            println!(
                "normal, retain={:>9} bytes: {:.2} ns/message",
                retain,
                run(retain, normal, 50_000_000)
            );
        }
        for (n, what) in [(150_000, "filling"), (5_000_000, "evicting")] {
            for retain in [0usize, 16 << 20] {
                println!(
                    "urgent, retain={:>9} bytes, {what}: {:.2} ns/message",
                    retain,
                    run(retain, SendMode::Urgent, n)
                );
            }
        }
    }
}
