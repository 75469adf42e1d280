//! A fixed workload for the stream path (`tcp://`): N messages of one size framed by a sender
//! in stream packing (65,000-byte batches, as the TCP publisher sends them), then the bytes
//! handed to a receiver configured as the TCP subscriber's, 64 KiB at a time as it reads them.
//! It prints the time per message of each half; its instruction counts (callgrind, with
//! `--toggle-collect='stream_loop::frame'` or `'stream_loop::receive'`) compare two builds of
//! either path without the machine's timing noise.
//!
//! ```sh
//! cargo build --release --example stream_loop -p peregrine-proto
//! target/release/examples/stream_loop 2000000 32
//! ```
use peregrine_proto::events::Message;
use peregrine_proto::receiver::{LateJoin, Progress, Receiver, ReceiverConfig};
use peregrine_proto::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use peregrine_wire::align_frame;
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(2_000_000);
    let size: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let mut sender = Sender::new(SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 65_000,
            batch_interval_ns: u64::MAX,
        },
        max_batch_len: 256 << 10,
        ..SenderConfig::new(9, 7, Packing::Stream, 65_536)
    });
    let message = vec![7u8; size];
    let mut stream: Vec<u8> = Vec::with_capacity(n * align_frame(32 + size) + (1 << 20));
    let mut keep = |b: Batch<'_>| -> Result<(), ()> {
        stream.extend_from_slice(b.bytes);
        Ok(())
    };
    offer_all(&mut sender, &message, n, &mut keep);
    // Timed again without keeping the bytes: the cost of framing alone.
    let mut sender = Sender::new(*sender.config());
    let mut bytes = 0usize;
    let t0 = Instant::now();
    frame(&mut sender, &message, n, &mut bytes);
    let framed = t0.elapsed();

    let cfg = ReceiverConfig {
        session_timeout_ns: u64::MAX / 4,
        max_jump_frames: u64::MAX,
        late_join: LateJoin::None,
        ..ReceiverConfig::new(7, 1)
    };
    let mut receiver = Receiver::new(cfg);
    let source: SocketAddr = "127.0.0.1:5000".parse()?;
    let mut sum = 0u64;
    let t0 = Instant::now();
    let received = receive(&mut receiver, &stream, source, &mut sum);
    let received_in = t0.elapsed();
    println!(
        "{n} messages of {size} bytes, {} stream bytes: framing {:.2} ns/msg, receiving {:.2} ns/msg (sequence sum {})",
        stream.len(),
        framed.as_nanos() as f64 / n as f64,
        received_in.as_nanos() as f64 / n as f64,
        black_box(sum)
    );
    if received != n {
        return Err(format!("received {received} of {n} messages").into());
    }
    Ok(())
}

/// The sender's half: every message offered, the batches' bytes counted.
#[inline(never)]
fn frame(sender: &mut Sender, message: &[u8], n: usize, bytes: &mut usize) {
    offer_all(sender, message, n, &mut |b: Batch<'_>| -> Result<(), ()> {
        *bytes += black_box(b.bytes).len();
        Ok(())
    });
}

fn offer_all<S: FnMut(Batch<'_>) -> Result<(), ()>>(
    sender: &mut Sender,
    message: &[u8],
    n: usize,
    sink: &mut S,
) {
    for _ in 0..n {
        sender
            .offer(message, 0, sink)
            .expect("a sink that cannot fail");
    }
    sender.flush(0, sink).expect("a sink that cannot fail");
}

/// The receiver's half: the stream in reads of up to 64 KiB, each cut at its last whole frame
/// as the TCP subscriber does.
#[inline(never)]
fn receive(receiver: &mut Receiver, stream: &[u8], source: SocketAddr, sum: &mut u64) -> usize {
    let (mut start, mut received) = (0, 0);
    while start < stream.len() {
        let mut end = start;
        while end < stream.len() {
            let len = u32::from_le_bytes(stream[end..end + 4].try_into().unwrap()) as usize;
            let next = end + align_frame(len);
            if next - start > 65_536 {
                break;
            }
            end = next;
        }
        let (n, progress) = receiver.on_datagram(
            &stream[..end],
            start,
            source,
            1,
            &mut |m: Message<'_>| *sum = sum.wrapping_add(m.sequence),
            usize::MAX,
        );
        debug_assert_eq!(progress, Progress::Done);
        received += n;
        start = end;
    }
    received
}
