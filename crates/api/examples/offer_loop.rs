//! Offers and polls N messages of 32 bytes through one `ipc://` log in one thread: a fixed
//! workload whose instruction count (`valgrind --tool=callgrind`) compares two builds of the
//! offer and poll paths without the machine's timing noise.
//!
//! ```sh
//! cargo build --release --example offer_loop -p peregrine
//! valgrind --tool=callgrind target/release/examples/offer_loop 1000000
//! ```

mod common;

use peregrine::{Context, IdleKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = common::count_arg(1_000_000)?;
    let ctx = Context::new();
    let uri = format!("ipc://offer-loop-{}", std::process::id());
    let mut publisher = ctx.publisher("offer.loop", &uri)?;
    let mut subscriber = ctx.subscriber("offer.loop", &uri, IdleKind::Spin)?;
    let payload = [7u8; 32];
    let (mut sent, mut received, mut sum) = (0u64, 0u64, 0u64);
    while received < n {
        // Up to 64 messages ahead, then drain: both paths run n times.
        while sent < n && sent - received < 64 {
            if publisher.offer(&payload).is_ok() {
                sent += 1;
            }
        }
        received += subscriber.poll(&mut |m| sum += m.sequence, 64) as u64;
    }
    println!("{received} messages, sequence sum {sum}");
    Ok(())
}
