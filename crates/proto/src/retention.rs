//! The sender's retention buffer: the batches it sent, kept whole for retransmission, bounded
//! by bytes and by age.
//!
//! **Whole batches, not frames.** Keeping a batch costs one `memcpy` of its bytes and one
//! sequence number read per datagram (the first DATA frame's), whatever the number of frames in
//! it: a 64 KB batch of 1 600 small messages is kept as cheaply as one of 44 large ones. (Kept
//! frame by frame, retention halved the throughput of 32-byte messages.) Finding frame `q` is
//! then a binary search over the batches, a binary search over the batch's datagrams, and a walk
//! over that datagram's frames, which only retransmission pays.
//!
//! Batches are kept in sequence order with no holes (a batch starting elsewhere than where the
//! previous one ended drops everything older). Each batch's bytes live in a buffer taken from a
//! pool of buffers freed by eviction, so once warm the buffer allocates nothing (a hand-rolled
//! pool: batch sizes vary, and a byte ring would have to skip its tail on every wrap). Eviction
//! is by whole batches, oldest first.
//!
//! ```
//! use peregrine_proto::retention::RetentionBuffer;
//! use peregrine_proto::sender::{Packing, Sender, SenderConfig};
//!
//! // A sender keeps what it sends when `retain_bytes` is set; here its batches are kept by hand.
//! let mut sender = Sender::new(SenderConfig::new(1, 7, Packing::Datagrams, 1472));
//! let mut kept = RetentionBuffer::new(1 << 20, 1_000_000);
//! let mut next = 0;
//! let mut sink = |b: peregrine_proto::sender::Batch<'_>| -> Result<(), ()> {
//!     next = kept.push(b.bytes, b.segment_len, next, 0);
//!     Ok(())
//! };
//! for i in 0..100u64 {
//!     sender.offer(&i.to_le_bytes(), 0, &mut sink).unwrap();
//! }
//! assert_eq!((kept.oldest(), kept.next()), (0, 100));
//! let frame = kept.get(42).unwrap(); // a 40-byte DATA frame whose payload is 42
//! assert_eq!(&frame[32..40], &42u64.to_le_bytes());
//! kept.expire(2_000_000); // everything is older than 1 ms now
//! assert!(kept.is_empty());
//! ```

use peregrine_wire::data::DataFrame;
use peregrine_wire::header::{FrameType, Frames};
use std::collections::VecDeque;

/// One batch as sent.
#[derive(Debug, Default)]
struct Entry {
    /// Sequence number of the batch's first DATA frame.
    first: u64,
    sent_ns: u64,
    bytes: Vec<u8>,
    /// Datagram size (0: the batch is one piece, stream packing).
    segment_len: usize,
    /// Sequence number of the first DATA frame of each datagram.
    datagram_first: Vec<u64>,
}

/// See the [module documentation](self).
#[derive(Debug)]
pub struct RetentionBuffer {
    max_bytes: usize,
    max_age_ns: u64,
    /// Oldest retained sequence number (`next` when empty).
    first: u64,
    /// One past the newest retained sequence number.
    next: u64,
    entries: VecDeque<Entry>,
    bytes: usize,
    /// Entries evicted, their buffers kept for reuse.
    pool: Vec<Entry>,
    /// The capacity of the pool's buffers, in bytes.
    pool_bytes: usize,
}

/// Evicted batch buffers kept for reuse: at most this many, of at most [`POOL_MAX_BYTES`].
const POOL_MAX: usize = 1024;
const POOL_MAX_BYTES: usize = 4 << 20;

/// A reused buffer whose capacity exceeds twice what a batch needs, plus this, is replaced by
/// one of the batch's size. Without it, every buffer that once held a large batch (a burst
/// after a stall) would keep that capacity while holding small ones, and the retained memory
/// would creep far past `max_bytes`, which counts lengths.
const SLACK_BYTES: usize = 64;

impl RetentionBuffer {
    /// Keeps at most `max_bytes` of batches, none older than `max_age_ns`.
    pub fn new(max_bytes: usize, max_age_ns: u64) -> Self {
        RetentionBuffer {
            max_bytes,
            max_age_ns,
            first: 0,
            next: 0,
            entries: VecDeque::new(),
            bytes: 0,
            pool: Vec::new(),
            pool_bytes: 0,
        }
    }

    /// Keeps a batch as sent: `bytes` holds datagrams of `segment_len` bytes (the last one
    /// possibly shorter; `segment_len` 0: one piece) whose DATA frames carry consecutive
    /// sequence numbers from `first`. Returns the sequence number after the batch's last DATA
    /// frame. A batch that does not start where the previous one ended drops everything older;
    /// a batch larger than the whole buffer is not kept.
    pub fn push(&mut self, bytes: &[u8], segment_len: usize, first: u64, now_ns: u64) -> u64 {
        let mut e = self.pool.pop().unwrap_or_default();
        self.pool_bytes -= e.bytes.capacity();
        if e.bytes.capacity() > 2 * bytes.len() + SLACK_BYTES {
            e.bytes = Vec::new();
        }
        e.first = first;
        e.sent_ns = now_ns;
        e.segment_len = segment_len;
        e.datagram_first.clear();
        let step = if segment_len == 0 {
            bytes.len().max(1)
        } else {
            segment_len
        };
        // Only the first frame of each datagram and the frames of the last one are read.
        let mut end = first;
        for d in bytes.chunks(step) {
            // The sender starts every datagram with a DATA frame; a datagram without one (which
            // it never sends) is kept in the bytes but not indexed.
            let q = first_data_sequence(d).unwrap_or(end);
            e.datagram_first.push(q);
            end = end.max(q);
        }
        if let Some(l) = bytes.chunks(step).last().and_then(last_data_sequence) {
            end = end.max(l + 1);
        }
        if first != self.next {
            self.clear_to(first);
        }
        if bytes.len() > self.max_bytes {
            self.clear_to(end);
            self.recycle(e);
            return end;
        }
        while self.bytes + bytes.len() > self.max_bytes {
            self.pop();
        }
        e.bytes.clear();
        e.bytes.extend_from_slice(bytes);
        self.bytes += bytes.len();
        self.next = end;
        self.entries.push_back(e);
        end
    }

    fn recycle(&mut self, e: Entry) {
        if self.pool.len() < POOL_MAX && self.pool_bytes + e.bytes.capacity() <= POOL_MAX_BYTES {
            self.pool_bytes += e.bytes.capacity();
            self.pool.push(e);
        }
    }

    fn pop(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.bytes.len();
            self.first = self.entries.front().map_or(self.next, |n| n.first);
            self.recycle(e);
        }
    }

    fn clear_to(&mut self, next: u64) {
        while !self.entries.is_empty() {
            self.pop();
        }
        self.first = next;
        self.next = next;
    }

    /// Drops batches older than the age limit.
    pub fn expire(&mut self, now_ns: u64) {
        while self
            .entries
            .front()
            .is_some_and(|e| now_ns.saturating_sub(e.sent_ns) > self.max_age_ns)
        {
            self.pop();
        }
    }

    /// The oldest sequence number still retained (`next()` when none is).
    pub fn oldest(&self) -> u64 {
        self.first
    }
    /// The sequence number after the newest retained frame.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The memory its buffers take (their capacities, retained and pooled), in bytes: at most
    /// about twice `max_bytes` plus a few dozen bytes per batch, whatever the batch sizes were.
    pub fn footprint_bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.bytes.capacity() + 8 * e.datagram_first.capacity())
            .sum::<usize>()
            + self.pool_bytes
    }

    /// Frame `sequence`'s bytes, if retained.
    pub fn get(&self, sequence: u64) -> Option<&[u8]> {
        if sequence < self.first || sequence >= self.next {
            return None;
        }
        // The last batch starting at or before `sequence`, then its last datagram doing so.
        let k = self.entries.partition_point(|e| e.first <= sequence);
        let e = self.entries.get(k.checked_sub(1)?)?;
        let j = e.datagram_first.partition_point(|&q| q <= sequence);
        let j = j.checked_sub(1)?;
        let (start, end) = if e.segment_len == 0 {
            (0, e.bytes.len())
        } else {
            let s = j * e.segment_len;
            (s, (s + e.segment_len).min(e.bytes.len()))
        };
        Frames::new(&e.bytes[start..end])
            .map_while(Result::ok)
            .find(|&(ty, b)| {
                ty == FrameType::Data && DataFrame::new_unchecked(b).sequence() == sequence
            })
            .map(|(_, b)| b)
    }

    /// Bytes of the batches retained (datagrams as sent, padding included).
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Frames retained.
    pub fn len(&self) -> u64 {
        self.next - self.first
    }
}

fn first_data_sequence(datagram: &[u8]) -> Option<u64> {
    Frames::new(datagram)
        .map_while(Result::ok)
        .find(|&(ty, _)| ty == FrameType::Data)
        .map(|(_, b)| DataFrame::new_unchecked(b).sequence())
}

fn last_data_sequence(datagram: &[u8]) -> Option<u64> {
    Frames::new(datagram)
        .map_while(Result::ok)
        .filter(|&(ty, _)| ty == FrameType::Data)
        .last()
        .map(|(_, b)| DataFrame::new_unchecked(b).sequence())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::{Batch, Packing, SendMode, Sender, SenderConfig};

    /// Batches of `n` messages of `size` bytes each from a sender, as (bytes, segment_len).
    fn batches(size: usize, per_batch: usize, batches: usize) -> Vec<(Vec<u8>, usize)> {
        let mut s = Sender::new(SenderConfig {
            mode: SendMode::Normal {
                batch_bytes: usize::MAX,
                batch_interval_ns: u64::MAX,
            },
            ..SenderConfig::new(1, 7, Packing::Datagrams, 1472)
        });
        let mut out = Vec::new();
        let mut sink = |b: Batch<'_>| -> Result<(), ()> {
            out.push((b.bytes.to_vec(), b.segment_len));
            Ok(())
        };
        let mut i = 0u64;
        for _ in 0..batches {
            for _ in 0..per_batch {
                let mut p = vec![0u8; size];
                p[..8.min(size)].copy_from_slice(&i.to_le_bytes()[..8.min(size)]);
                s.offer(&p, 0, &mut sink).unwrap();
                i += 1;
            }
            s.flush(0, &mut sink).unwrap();
        }
        out
    }

    fn seq_of(frame: &[u8]) -> u64 {
        DataFrame::new_unchecked(frame).sequence()
    }

    /// Small batches with a burst now and then (a large batch, as after a stall): the buffers
    /// that held a large batch must not keep their capacity while they circulate with small
    /// ones (they did: each burst left one more 57 KB buffer behind, and 1 MiB of retention
    /// came to take 11 MB).
    #[test]
    fn buffers_of_a_burst_do_not_keep_their_size_for_small_batches() {
        let large = batches(1400, 40, 1).remove(0); // one batch of ~57 KB
        let small = batches(64, 1, 1).remove(0); // one of 96 B
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let mut next = 0u64;
        // Each batch renumbered to follow the previous one.
        let mut push = |r: &mut RetentionBuffer, (b, seg): &(Vec<u8>, usize)| {
            let mut b = b.clone();
            let mut q = next;
            for d in b.chunks_mut(*seg) {
                let base = d.as_ptr() as usize;
                let offsets: Vec<usize> = Frames::new(d)
                    .map_while(Result::ok)
                    .map(|(_, f)| f.as_ptr() as usize - base)
                    .collect();
                for at in offsets {
                    d[at + 24..at + 32].copy_from_slice(&q.to_le_bytes());
                    q += 1;
                }
            }
            next = r.push(&b, *seg, next, 0);
            assert_eq!(next, q);
        };
        for _ in 0..200 {
            push(&mut r, &large);
            for _ in 0..500 {
                push(&mut r, &small);
            }
        }
        let retained: usize = r.entries.iter().map(|e| e.bytes.len()).sum();
        assert!(retained <= 1 << 20);
        let bound = 2 * retained + (SLACK_BYTES + 64) * r.entries.len() + r.pool_bytes;
        assert!(
            r.footprint_bytes() <= bound,
            "{} bytes of buffers for {retained} bytes retained in {} batches (bound {bound})",
            r.footprint_bytes(),
            r.entries.len()
        );
    }

    #[test]
    fn every_frame_is_found_by_sequence_across_batches_and_datagrams() {
        // 100 messages of 32 bytes per batch: 36 to a datagram, so 3 datagrams per batch.
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let mut next = 0;
        for (b, seg) in batches(32, 100, 10) {
            next = r.push(&b, seg, next, 0);
        }
        assert_eq!((r.oldest(), r.next(), r.len()), (0, 1000, 1000));
        for q in 0..1000 {
            let f = r.get(q).unwrap_or_else(|| panic!("frame {q}"));
            assert_eq!(seq_of(f), q);
            assert_eq!(&f[32..40], &q.to_le_bytes());
        }
        assert_eq!(r.get(1000), None);
        assert_eq!(r.get(u64::MAX), None);
    }

    #[test]
    fn fragments_spanning_datagrams_are_found() {
        // 3000-byte messages take 3 frames (1440 bytes each at most) and 3 datagrams.
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let mut next = 0;
        for (b, seg) in batches(3000, 4, 3) {
            next = r.push(&b, seg, next, 0);
        }
        assert_eq!(next, 36);
        for q in 0..36 {
            assert_eq!(seq_of(r.get(q).unwrap()), q);
        }
    }

    #[test]
    fn bounded_by_bytes_and_age_evicting_whole_batches() {
        let all = batches(32, 100, 10);
        let one = all[0].0.len();
        // Room for 4 batches.
        let mut r = RetentionBuffer::new(4 * one + one / 2, 500);
        let mut next = 0;
        for (k, (b, seg)) in all.iter().enumerate() {
            next = r.push(b, *seg, next, k as u64 * 100);
        }
        assert!(r.retained_bytes() <= 4 * one + one / 2);
        assert_eq!((r.oldest(), r.next()), (600, 1000));
        assert_eq!(r.get(599), None);
        assert_eq!(seq_of(r.get(600).unwrap()), 600);
        // Batches sent at 600..=900: at 1250 those of 600 and 700 are older than 500.
        r.expire(1250);
        assert_eq!(r.oldest(), 800);
        r.expire(u64::MAX);
        assert!(r.is_empty());
        assert_eq!((r.oldest(), r.next(), r.len()), (1000, 1000, 0));
    }

    #[test]
    fn a_jump_or_an_oversized_batch_drops_what_is_older() {
        let all = batches(32, 100, 3);
        let mut r = RetentionBuffer::new(all[0].0.len() * 2, u64::MAX);
        r.push(&all[0].0, all[0].1, 0, 0);
        // The third batch (sequences 200..300) after the first: 100..200 were never kept.
        let end = r.push(&all[2].0, all[2].1, 200, 0);
        assert_eq!((end, r.oldest(), r.next()), (300, 200, 300));
        let mut small = RetentionBuffer::new(100, u64::MAX);
        let end = small.push(&all[0].0, all[0].1, 0, 0);
        assert_eq!((end, small.oldest(), small.next()), (100, 100, 100));
        assert!(small.is_empty());
    }

    #[test]
    fn garbage_datagrams_neither_panic_nor_index() {
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let end = r.push(&[0xAB; 3000], 1472, 5, 0);
        assert_eq!(end, 5);
        assert_eq!(r.get(5), None);
    }
}
