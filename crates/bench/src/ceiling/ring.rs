//! The shared-memory ceiling: a plain SPSC byte ring (rtrb) of the stream's log size between
//! the same two CPUs, carrying messages of the same size. The producer copies each message in
//! and commits it, as a publisher's `offer` does; the consumer reads up to 256 whole messages in
//! place and releases them at once, as a subscriber's `poll` does, checking each one's number.
//! When less than a batch is waiting it pauses before looking again, so that the producer keeps
//! the tail's cache line: the ring's best rate, which is what a ceiling is.

use super::{Ceiling, CeilingConfig, CeilingKind, Reads};
use crate::BenchError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Messages the consumer reads before releasing them.
const READ_BATCH: usize = 256;
/// Spin-loop hints between two looks at the tail when less than a batch is waiting (on this
/// machine kind, 64 gave the highest rate of the settings tried: 0, 16, 64, 128).
const POLL_PAUSE: usize = 64;

/// Runs the ring for `cfg.duration`.
pub fn measure(cfg: &CeilingConfig) -> Result<Ceiling, BenchError> {
    // A message of 0 bytes still takes a byte here, so that it can be counted.
    let size = cfg.size.max(1);
    let capacity = usize::try_from(cfg.capacity)
        .map_err(|_| BenchError::Config(format!("--capacity {} is too large", cfg.capacity)))?;
    let (mut producer, mut consumer) = rtrb::RingBuffer::<u8>::new(capacity);
    let done = AtomicBool::new(false);
    let (written, (reads, bad)) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
            let (mut reads, mut bad) = (Reads::default(), 0u64);
            loop {
                let whole = (consumer.slots() / size).min(READ_BATCH);
                if whole < READ_BATCH && !done.load(Ordering::Relaxed) {
                    // Fewer than a batch: let the producer write more before reading the tail
                    // again. A reader polling the tail at full speed takes its cache line from
                    // the producer at every message and halves the ring's rate.
                    for _ in 0..POLL_PAUSE {
                        std::hint::spin_loop();
                    }
                    if whole == 0 {
                        continue;
                    }
                }
                if whole == 0 {
                    // The producer is done once `done` is set: whatever it wrote is visible.
                    if done.load(Ordering::Acquire) && consumer.slots() < size {
                        break;
                    }
                    std::hint::spin_loop();
                    continue;
                }
                let chunk = consumer
                    .read_chunk(whole * size)
                    .expect("the slots counted are readable");
                let (one, two) = chunk.as_slices();
                for k in 0..whole {
                    // Message n carries n: the messages read before this batch, plus k.
                    if size >= 8 && number_at(one, two, k * size) != reads.total + k as u64 {
                        bad += 1;
                    }
                }
                chunk.commit_all();
                reads.saw(whole as u64);
            }
            Ok::<_, BenchError>((reads, bad))
        });
        let writer = s.spawn(|| {
            peregrine_agent::pin_to_cpu(cfg.cpus.a)?;
            let mut msg = vec![0u8; size];
            let mut seq = 0u64;
            let t0 = Instant::now();
            'run: loop {
                // Check the clock once per 4096 messages, not per message.
                for _ in 0..4096 {
                    if size >= 8 {
                        msg[..8].copy_from_slice(&seq.to_le_bytes());
                    }
                    while producer.push_entire_slice(&msg).is_err() {
                        std::hint::spin_loop();
                    }
                    seq += 1;
                }
                if t0.elapsed() >= cfg.duration {
                    break 'run;
                }
            }
            done.store(true, Ordering::Release);
            Ok::<_, BenchError>(seq)
        });
        let written = writer.join().expect("the ring's writer does not panic");
        // A writer that failed to pin never sets `done`: tell the reader.
        done.store(true, Ordering::Release);
        let read = reader.join().expect("the ring's reader does not panic");
        Ok::<_, BenchError>((written?, read?))
    })?;
    if bad > 0 {
        return Err(BenchError::Child(format!(
            "the ring ceiling read {bad} messages out of order: this is a bug, please report it"
        )));
    }
    Ok(Ceiling {
        kind: CeilingKind::Ring,
        msgs_per_s: reads.rate(1.0),
        written,
        read: reads.total,
        offload_refused: None,
    })
}

/// The little-endian number in the 8 bytes at `at` of the two slices seen as one.
fn number_at(one: &[u8], two: &[u8], at: usize) -> u64 {
    if let Some(b) = one.get(at..at + 8) {
        return u64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
    let mut b = [0u8; 8];
    for (i, byte) in b.iter_mut().enumerate() {
        let j = at + i;
        *byte = if j < one.len() {
            one[j]
        } else {
            two[j - one.len()]
        };
    }
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine::Scheme;
    use std::time::Duration;

    #[test]
    fn a_number_split_by_the_ring_s_end_reads_whole() {
        let n = 0x0102_0304_0506_0708u64.to_le_bytes();
        assert_eq!(number_at(&n[..3], &n[3..], 0), 0x0102_0304_0506_0708);
        assert_eq!(number_at(&[9, 9, n[0]], &n[1..], 2), 0x0102_0304_0506_0708);
    }

    #[test]
    fn the_ring_moves_every_message_in_order() {
        let cfg = CeilingConfig {
            transport: Scheme::Ipc,
            // 40 bytes do not divide the ring: messages straddle its end.
            size: 40,
            capacity: 1 << 16,
            cpus: super::super::test_cpus(),
            duration: Duration::from_millis(50),
        };
        let c = measure(&cfg).unwrap();
        assert_eq!(c.kind, CeilingKind::Ring);
        assert!(c.written > 0);
        assert_eq!(c.read, c.written);
    }
}
