//! A fixed workload for the receiver: N messages of one size, batched into 1,472-byte
//! datagrams by a sender as `udp://` does, handed to a receiver with loss repair on. Its
//! instruction count inside `receive` compares two builds of the receive path without the
//! machine's timing noise.
//!
//! ```sh
//! cargo build --release --example receive_loop -p peregrine-proto
//! valgrind --tool=callgrind --toggle-collect='receive_loop::receive' \
//!     target/release/examples/receive_loop 200000 32
//! ```
//!
//! The second argument is the message size: 32 and 200 travel many to a datagram, 3000 in
//! three fragments.
use peregrine_proto::events::Message;
use peregrine_proto::receiver::{NakConfig, Progress, Receiver, ReceiverConfig};
use peregrine_proto::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use std::hint::black_box;
use std::net::SocketAddr;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let size: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let mut sender = Sender::new(SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 64 * 1472,
            batch_interval_ns: u64::MAX,
        },
        ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
    });
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    let mut sink = |b: Batch<'_>| -> Result<(), ()> {
        datagrams.extend(b.datagrams().map(|d| d.to_vec()));
        Ok(())
    };
    let message = vec![7u8; size];
    for _ in 0..n {
        sender
            .offer(&message, 0, &mut sink)
            .map_err(|e| format!("offer: {e:?}"))?;
    }
    sender
        .flush(0, &mut sink)
        .map_err(|e| format!("flush: {e:?}"))?;

    let mut cfg = ReceiverConfig::new(7, 1);
    cfg.nak = Some(NakConfig::new(false));
    let mut receiver = Receiver::new(cfg);
    let source: SocketAddr = "127.0.0.1:5000".parse()?;
    let (mut received, mut sum) = (0usize, 0u64);
    for d in &datagrams {
        received += receive(&mut receiver, d, source, &mut sum);
    }
    println!(
        "{} datagrams, {received} messages, sequence sum {}",
        datagrams.len(),
        black_box(sum)
    );
    if received != n {
        return Err(format!("received {received} of {n} messages").into());
    }
    Ok(())
}

/// One datagram through the receiver (what a driver does per datagram received).
#[inline(never)]
fn receive(receiver: &mut Receiver, datagram: &[u8], source: SocketAddr, sum: &mut u64) -> usize {
    let (n, progress) = receiver.on_datagram(
        datagram,
        0,
        source,
        1,
        &mut |m: Message<'_>| *sum = sum.wrapping_add(m.sequence),
        usize::MAX,
    );
    debug_assert_eq!(progress, Progress::Done);
    n
}
