//! Offers N messages of 32 bytes on a `tcp://` publisher that no subscriber reads: the
//! publisher's offer path alone (the API, the TCP driver, the framing), its batches handed to no
//! connection. It prints the time per offer, and its instruction count under callgrind compares
//! two builds without the machine's timing noise.
//!
//! Under valgrind, rustix must use libc for its system calls (the clock included), as valgrind
//! does not follow rustix's own vDSO calls:
//!
//! ```sh
//! RUSTFLAGS="--cfg rustix_use_libc" CARGO_TARGET_DIR=target/libc \
//!     cargo build --release --example tcp_offer_loop -p peregrine
//! valgrind --tool=callgrind target/libc/release/examples/tcp_offer_loop 1000000
//! ```

mod common;

use peregrine::Context;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = common::count_arg(1_000_000)?;
    let ctx = Context::new();
    // An ephemeral port on loopback: nothing connects to it.
    let mut publisher = ctx.publisher("offer.loop", "tcp://127.0.0.1:0")?;
    let payload = [7u8; 32];
    let mut sent = 0u64;
    let t0 = Instant::now();
    while sent < n {
        if publisher.offer(&payload).is_ok() {
            sent += 1;
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    println!("{sent} offers, {ns:.2} ns each");
    Ok(())
}
