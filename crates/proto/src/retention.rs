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
//! previous one ended drops everything older). Their bytes are appended, one after another, to
//! chunks of [`CHUNK_BYTES`] (a batch larger than that gets a chunk of its own size), and each
//! datagram's first sequence number to one shared index: so keeping a batch allocates nothing
//! but a new chunk every few thousand small batches, and once warm, nothing (chunks freed by
//! eviction are reused). Kept in a buffer of its own each, a batch took two allocations: a
//! 96-byte ping-pong datagram spent about 450 instructions in the allocator per send, until
//! eviction began to recycle buffers (16 MiB later by default). Eviction is by whole batches,
//! oldest first; a chunk is freed when its last batch is.
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

/// One batch as sent: where its bytes are and which datagrams of the index are its own.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Sequence number of the batch's first DATA frame.
    first: u64,
    sent_ns: u64,
    /// The chunk holding its bytes (a number counted since the buffer was created), and where.
    chunk: u64,
    offset: usize,
    len: usize,
    /// Datagram size (0: the batch is one piece, stream packing).
    segment_len: usize,
    /// Its datagrams' entries in the index (a number counted since the buffer was created), and
    /// how many.
    datagram: u64,
    datagrams: usize,
}

/// Standard chunk size: a few thousand small batches, or four of UDP's largest (65,000 bytes).
pub const CHUNK_BYTES: usize = 256 << 10;
/// Freed chunks kept for reuse, at most.
const SPARE_CHUNKS: usize = 4;

/// See the [module documentation](self).
#[derive(Debug)]
pub struct RetentionBuffer {
    max_bytes: usize,
    max_age_ns: u64,
    /// The capacity of a standard chunk: [`CHUNK_BYTES`], or `max_bytes` when that is smaller.
    chunk_bytes: usize,
    /// Oldest retained sequence number (`next` when empty).
    first: u64,
    /// One past the newest retained sequence number.
    next: u64,
    entries: VecDeque<Entry>,
    /// Bytes of the batches retained (their lengths).
    bytes: usize,
    /// The first DATA sequence number of every retained datagram, batch after batch.
    index: VecDeque<u64>,
    /// The number of `index`'s front element.
    index_base: u64,
    /// The chunks holding the retained batches, oldest first; batches are appended to the back
    /// one while it has room (a chunk never grows: its capacity is fixed when it is taken).
    chunks: VecDeque<Vec<u8>>,
    /// The number of `chunks`' front element.
    chunk_base: u64,
    /// Freed standard chunks, empty, for reuse.
    spare: Vec<Vec<u8>>,
    /// Chunks allocated since creation (tests check that a warm buffer allocates none).
    chunk_allocations: u64,
}

impl RetentionBuffer {
    /// Keeps at most `max_bytes` of batches, none older than `max_age_ns`.
    pub fn new(max_bytes: usize, max_age_ns: u64) -> Self {
        RetentionBuffer {
            max_bytes,
            max_age_ns,
            chunk_bytes: CHUNK_BYTES.min(max_bytes.max(1)),
            first: 0,
            next: 0,
            entries: VecDeque::new(),
            bytes: 0,
            index: VecDeque::new(),
            index_base: 0,
            chunks: VecDeque::new(),
            chunk_base: 0,
            spare: Vec::new(),
            chunk_allocations: 0,
        }
    }

    /// Keeps a batch as sent: `bytes` holds datagrams of `segment_len` bytes (the last one
    /// possibly shorter; `segment_len` 0: one piece) whose DATA frames carry consecutive
    /// sequence numbers from `first`. Returns the sequence number after the batch's last DATA
    /// frame. A batch that does not start where the previous one ended drops everything older;
    /// a batch larger than the whole buffer is not kept.
    pub fn push(&mut self, bytes: &[u8], segment_len: usize, first: u64, now_ns: u64) -> u64 {
        let step = if segment_len == 0 {
            bytes.len().max(1)
        } else {
            segment_len
        };
        if first != self.next {
            self.clear_to(first);
        }
        // Only the first frame of each datagram and the frames of the last one are read. The
        // index takes them at its back now; they are the new entry's, or dropped below.
        let datagram = self.index_base + self.index.len() as u64;
        let (mut end, mut datagrams) = (first, 0);
        for d in bytes.chunks(step) {
            // The sender starts every datagram with a DATA frame; a datagram without one (which
            // it never sends) is kept in the bytes but not indexed.
            let q = first_data_sequence(d).unwrap_or(end);
            self.index.push_back(q);
            datagrams += 1;
            end = end.max(q);
        }
        if let Some(l) = bytes.chunks(step).last().and_then(last_data_sequence) {
            end = end.max(l + 1);
        }
        if bytes.len() > self.max_bytes {
            self.index.truncate(self.index.len() - datagrams);
            self.clear_to(end);
            return end;
        }
        while self.bytes + bytes.len() > self.max_bytes {
            self.pop();
        }
        let (chunk, offset) = self.room_for(bytes.len());
        let c = self
            .chunks
            .back_mut()
            .expect("room_for leaves a chunk at the back");
        c.extend_from_slice(bytes);
        self.bytes += bytes.len();
        self.next = end;
        self.entries.push_back(Entry {
            first,
            sent_ns: now_ns,
            chunk,
            offset,
            len: bytes.len(),
            segment_len,
            datagram,
            datagrams,
        });
        end
    }

    /// The chunk (its number) and offset where `len` more bytes go: the back chunk if it has
    /// room, else a new one at the back (a spare, or allocated).
    fn room_for(&mut self, len: usize) -> (u64, usize) {
        if let Some(c) = self.chunks.back() {
            if c.capacity() - c.len() >= len {
                return (self.chunk_base + self.chunks.len() as u64 - 1, c.len());
            }
        }
        let c = if len <= self.chunk_bytes {
            self.spare.pop().unwrap_or_else(|| {
                self.chunk_allocations += 1;
                Vec::with_capacity(self.chunk_bytes)
            })
        } else {
            // Larger than a standard chunk: one of its own, never kept as a spare.
            self.chunk_allocations += 1;
            Vec::with_capacity(len)
        };
        self.chunks.push_back(c);
        (self.chunk_base + self.chunks.len() as u64 - 1, 0)
    }

    fn pop(&mut self) {
        let Some(e) = self.entries.pop_front() else {
            return;
        };
        self.bytes -= e.len;
        self.first = self.entries.front().map_or(self.next, |n| n.first);
        for _ in 0..e.datagrams {
            self.index.pop_front();
        }
        self.index_base += e.datagrams as u64;
        // Free the chunks no retained batch is in any more (all of them once none is).
        let keep_from = self.entries.front().map_or(u64::MAX, |n| n.chunk);
        while self.chunk_base < keep_from {
            let Some(mut c) = self.chunks.pop_front() else {
                break;
            };
            self.chunk_base += 1;
            if c.capacity() == self.chunk_bytes && self.spare.len() < SPARE_CHUNKS {
                c.clear();
                self.spare.push(c);
            }
        }
    }

    fn clear_to(&mut self, next: u64) {
        while !self.entries.is_empty() {
            self.pop();
        }
        // Index entries of a batch that was not kept (too large) have no entry to pop them.
        self.index_base += self.index.len() as u64;
        self.index.clear();
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

    /// The memory its buffers take (the chunks' capacities, retained and spare, and the index),
    /// in bytes: at most about twice the bytes retained plus a few chunks.
    pub fn footprint_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>()
            + self.spare.iter().map(Vec::capacity).sum::<usize>()
            + 8 * self.index.capacity()
    }

    /// Frame `sequence`'s bytes, if retained.
    pub fn get(&self, sequence: u64) -> Option<&[u8]> {
        if sequence < self.first || sequence >= self.next {
            return None;
        }
        // The last batch starting at or before `sequence`, then its last datagram doing so.
        let k = self.entries.partition_point(|e| e.first <= sequence);
        let e = self.entries.get(k.checked_sub(1)?)?;
        let from = (e.datagram - self.index_base) as usize;
        let (mut lo, mut hi) = (from, from + e.datagrams);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.index[mid] <= sequence {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let j = lo.checked_sub(from)?.checked_sub(1)?;
        let chunk = &self.chunks[(e.chunk - self.chunk_base) as usize];
        let bytes = &chunk[e.offset..e.offset + e.len];
        let (start, end) = if e.segment_len == 0 {
            (0, bytes.len())
        } else {
            let s = j * e.segment_len;
            (s, (s + e.segment_len).min(bytes.len()))
        };
        Frames::new(&bytes[start..end])
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

    /// `batch` renumbered to start at `next`, and pushed; `next` becomes the sequence number
    /// after it.
    fn push_renumbered(r: &mut RetentionBuffer, next: &mut u64, (b, seg): &(Vec<u8>, usize)) {
        let mut b = b.clone();
        let mut q = *next;
        for d in b.chunks_mut(*seg) {
            let base = d.as_ptr() as usize;
            // DATA frames only: the PADs that fill datagrams out carry no number of their own.
            let offsets: Vec<usize> = Frames::new(d)
                .map_while(Result::ok)
                .filter(|&(ty, _)| ty == FrameType::Data)
                .map(|(_, f)| f.as_ptr() as usize - base)
                .collect();
            for at in offsets {
                d[at + 24..at + 32].copy_from_slice(&q.to_le_bytes());
                q += 1;
            }
        }
        let start = *next;
        *next = r.push(&b, *seg, start, 0);
        assert_eq!(*next, q);
    }

    /// Small batches with a burst now and then (a large batch, as after a stall): the memory
    /// stays within twice what is retained plus a few chunks (with a buffer per batch, each
    /// burst once left one more 57 KB buffer behind, and 1 MiB of retention came to take
    /// 11 MB), and every retained frame is still found.
    #[test]
    fn bursts_among_small_batches_keep_the_memory_bounded() {
        let large = batches(1400, 40, 1).remove(0); // one batch of ~57 KB
        let small = batches(64, 1, 1).remove(0); // one of 96 B
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let mut next = 0u64;
        for _ in 0..200 {
            push_renumbered(&mut r, &mut next, &large);
            for _ in 0..500 {
                push_renumbered(&mut r, &mut next, &small);
            }
        }
        assert!(r.retained_bytes() <= 1 << 20);
        let bound =
            2 * r.retained_bytes() + (2 + SPARE_CHUNKS) * CHUNK_BYTES + 8 * 2 * r.index.len();
        assert!(
            r.footprint_bytes() <= bound,
            "{} bytes of buffers for {} bytes retained in {} batches (bound {bound})",
            r.footprint_bytes(),
            r.retained_bytes(),
            r.entries.len()
        );
        for q in r.oldest()..r.next() {
            assert_eq!(seq_of(r.get(q).unwrap_or_else(|| panic!("frame {q}"))), q);
        }
    }

    /// Once the buffer is full and evicting, keeping a batch allocates no chunk: the chunks
    /// eviction frees are reused.
    #[test]
    fn a_warm_buffer_allocates_no_chunk() {
        let small = batches(64, 1, 1).remove(0);
        let mut r = RetentionBuffer::new(1 << 20, u64::MAX);
        let mut next = 0u64;
        // 1 MiB of 96-byte batches fills it; twice that and it is evicting.
        let per_fill = (1 << 20) / small.0.len();
        for _ in 0..2 * per_fill {
            push_renumbered(&mut r, &mut next, &small);
        }
        let (allocated, footprint) = (r.chunk_allocations, r.footprint_bytes());
        for _ in 0..5 * per_fill {
            push_renumbered(&mut r, &mut next, &small);
        }
        assert_eq!(
            r.chunk_allocations, allocated,
            "chunks allocated while warm"
        );
        assert!(r.footprint_bytes() <= footprint + 8 * r.index.capacity());
        assert_eq!(r.len(), r.next() - r.oldest());
        assert_eq!(seq_of(r.get(next - 1).unwrap()), next - 1);
        assert_eq!(seq_of(r.get(r.oldest()).unwrap()), r.oldest());
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
