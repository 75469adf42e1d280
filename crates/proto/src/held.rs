//! Frames a receiver holds behind a gap until the gap is repaired: a reorder buffer.
//!
//! While a gap is open every frame after it is held, so at a high message rate holding is the
//! receiver's hot path. The store is dense: a ring of slots indexed by sequence number from
//! `base` (held frames all lie between the receiver's next sequence and the highest seen, which
//! flow control bounds), and the frame bytes go into 64 KiB chunks appended to in arrival
//! order. A chunk returns to a free list when its last frame is taken, so once warm holding
//! allocates nothing and costs one copy of the frame. (A `BTreeMap` of per-frame buffers spent
//! more time in its inserts, removals and allocations than the receiver spent on everything
//! else; this is hand-rolled because no crate offers this shape: a sequence-indexed ring with
//! chunked, batch-freed storage.)
//!
//! ```
//! use peregrine_proto::held::HeldFrames;
//!
//! let mut h = HeldFrames::default();
//! h.insert(12, &[12; 40]);
//! h.insert(11, &[11; 48]);
//! assert!(h.contains(12) && !h.contains(10));
//! h.skip_to(11); // 10 was given up
//! assert_eq!(h.front(11), Some(&[11u8; 48][..]));
//! h.pop_front();
//! assert_eq!(h.front(12), Some(&[12u8; 40][..]));
//! h.pop_front();
//! assert!(h.is_empty());
//! ```

use std::collections::VecDeque;

/// Bytes per storage chunk (a frame longer than this gets a chunk of its own size).
const CHUNK_BYTES: usize = 64 << 10;
/// Free chunks kept for reuse (4 MiB).
const FREE_KEPT: usize = 64;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    chunk: u32,
    offset: u32,
    /// 0: empty (no frame is shorter than a DATA header).
    len: u32,
}

#[derive(Debug, Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// Frames stored in it and not yet taken.
    live: u32,
}

/// See the [module documentation](self).
#[derive(Debug, Default)]
pub struct HeldFrames {
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Slot>,
    chunks: Vec<Chunk>,
    /// The chunk being appended to.
    current: Option<usize>,
    free: Vec<usize>,
    /// Chunks whose memory was given back: their indices are reused first.
    dead: Vec<usize>,
    count: usize,
    bytes: usize,
}

impl HeldFrames {
    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Bytes of the frames held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The sequence numbers held, in order.
    pub fn sequences(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len > 0)
            .map(|(k, _)| self.base + k as u64)
    }
    /// Slots of the ring: the sequence numbers it covers, held or not.
    pub fn span(&self) -> usize {
        self.slots.len()
    }

    /// The sequence numbers the ring would cover with `sequence` held too (0 when it holds
    /// nothing): what holding it costs in slots, for the receiver's bound.
    pub fn span_with(&self, sequence: u64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let end = self.base + self.slots.len() as u64;
        end.max(sequence + 1) - self.base.min(sequence)
    }

    fn slot(&self, sequence: u64) -> Option<&Slot> {
        let i = usize::try_from(sequence.checked_sub(self.base)?).ok()?;
        self.slots.get(i).filter(|s| s.len > 0)
    }

    pub fn contains(&self, sequence: u64) -> bool {
        self.slot(sequence).is_some()
    }

    /// Holds frame `sequence` (a frame already held there is replaced). Sequences below those
    /// passed by [`skip_to`](Self::skip_to) are ignored.
    pub fn insert(&mut self, sequence: u64, frame: &[u8]) {
        if frame.is_empty() {
            return;
        }
        if self.count == 0 {
            self.base = sequence;
            self.slots.clear();
        }
        if sequence < self.base {
            // A frame before the first held one (a retransmission filling an earlier gap).
            let Ok(n) = usize::try_from(self.base - sequence) else {
                return;
            };
            for _ in 0..n {
                self.slots.push_front(Slot::default());
            }
            self.base = sequence;
        }
        let Ok(i) = usize::try_from(sequence - self.base) else {
            return;
        };
        if self.slot(sequence).is_some() {
            self.take(i);
        }
        if self.slots.len() <= i {
            self.slots.resize(i + 1, Slot::default());
        }
        let (chunk, offset) = self.store(frame);
        self.slots[i] = Slot {
            chunk: chunk as u32,
            offset: offset as u32,
            len: frame.len() as u32,
        };
        self.count += 1;
        self.bytes += frame.len();
    }

    /// Copies `frame` into a chunk; returns (chunk, offset).
    fn store(&mut self, frame: &[u8]) -> (usize, usize) {
        let fits = |c: &Chunk| c.bytes.capacity() - c.bytes.len() >= frame.len();
        let k = match self.current {
            Some(k) if fits(&self.chunks[k]) => k,
            _ => {
                // The old current chunk is released once its frames are taken.
                if let Some(old) = self.current.take() {
                    if self.chunks[old].live == 0 {
                        self.release(old);
                    }
                }
                let k = match self.free.pop() {
                    Some(k) if frame.len() <= CHUNK_BYTES => k,
                    other => {
                        if let Some(k) = other {
                            self.free.push(k);
                        }
                        let chunk = Chunk {
                            bytes: Vec::with_capacity(CHUNK_BYTES.max(frame.len())),
                            live: 0,
                        };
                        match self.dead.pop() {
                            Some(k) => {
                                self.chunks[k] = chunk;
                                k
                            }
                            None => {
                                self.chunks.push(chunk);
                                self.chunks.len() - 1
                            }
                        }
                    }
                };
                self.current = Some(k);
                k
            }
        };
        let c = &mut self.chunks[k];
        let offset = c.bytes.len();
        c.bytes.extend_from_slice(frame);
        c.live += 1;
        (k, offset)
    }

    fn release(&mut self, k: usize) {
        let c = &mut self.chunks[k];
        c.bytes.clear();
        if self.free.len() < FREE_KEPT && c.bytes.capacity() <= CHUNK_BYTES {
            self.free.push(k);
        } else {
            // Give the memory back; the index is reused by the next new chunk.
            c.bytes = Vec::new();
            self.dead.push(k);
        }
    }

    /// Empties slot `i`, releasing its chunk when that was the chunk's last frame.
    fn take(&mut self, i: usize) {
        let s = std::mem::take(&mut self.slots[i]);
        if s.len == 0 {
            return;
        }
        self.count -= 1;
        self.bytes -= s.len as usize;
        let k = s.chunk as usize;
        self.chunks[k].live -= 1;
        if self.chunks[k].live == 0 && self.current != Some(k) {
            self.release(k);
        } else if self.chunks[k].live == 0 {
            // The current chunk is empty: start it over.
            self.chunks[k].bytes.clear();
        }
    }

    /// Frame `sequence` if it is held and first in line (the caller delivers in order).
    pub fn front(&self, sequence: u64) -> Option<&[u8]> {
        if sequence != self.base {
            return None;
        }
        let s = self.slots.front().filter(|s| s.len > 0)?;
        let c = &self.chunks[s.chunk as usize];
        Some(&c.bytes[s.offset as usize..(s.offset + s.len) as usize])
    }

    /// Drops the first slot (after its frame was delivered).
    pub fn pop_front(&mut self) {
        if !self.slots.is_empty() {
            self.take(0);
            self.slots.pop_front();
            self.base += 1;
        }
    }

    /// Moves the start to `sequence`, dropping anything held before it.
    pub fn skip_to(&mut self, sequence: u64) {
        while self.base < sequence && !self.slots.is_empty() {
            self.pop_front();
        }
        if self.slots.is_empty() {
            self.base = self.base.max(sequence);
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        for i in 0..self.slots.len() {
            self.take(i);
        }
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn chunks_are_reused_once_their_frames_are_taken() {
        let mut h = HeldFrames::default();
        for round in 0..10u64 {
            let first = round * 10_000;
            for q in first..first + 10_000 {
                h.insert(q, &[q as u8; 40]);
            }
            h.skip_to(first);
            for q in first..first + 10_000 {
                assert_eq!(h.front(q), Some(&[q as u8; 40][..]));
                h.pop_front();
            }
            assert!(h.is_empty());
            assert_eq!(h.bytes(), 0);
        }
        // 400 KB held at most: 7 chunks, reused every round rather than allocated anew.
        assert!(h.chunks.len() <= 8, "{} chunks", h.chunks.len());
    }

    #[test]
    fn a_frame_larger_than_a_chunk_is_held() {
        let mut h = HeldFrames::default();
        let big = vec![7u8; CHUNK_BYTES + 100];
        h.insert(5, &big);
        h.insert(6, &[1; 40]);
        assert_eq!(h.front(5), Some(&big[..]));
        h.pop_front();
        assert_eq!(h.front(6), Some(&[1u8; 40][..]));
        h.clear();
        assert!(h.is_empty());
        assert_eq!(h.bytes(), 0);
    }

    #[test]
    fn a_frame_before_the_first_held_one_is_held_in_order() {
        // Gaps at 2 and 3, frame 4 held first; then 3 arrives (retransmitted), then 2.
        let mut h = HeldFrames::default();
        h.insert(4, &[4; 40]);
        h.insert(3, &[3; 40]);
        assert!(h.contains(3) && h.contains(4) && !h.contains(2));
        h.insert(2, &[2; 40]);
        for q in 2..5u64 {
            assert_eq!(h.front(q), Some(&[q as u8; 40][..]));
            h.pop_front();
        }
        assert!(h.is_empty());
    }

    #[test]
    fn memory_of_oversized_chunks_is_given_back_and_their_slots_reused() {
        let mut h = HeldFrames::default();
        for q in 0..100u64 {
            h.insert(q, &vec![1u8; CHUNK_BYTES * 2]);
            h.pop_front();
        }
        assert!(h.chunks.len() <= 3, "{} chunks", h.chunks.len());
    }

    proptest! {
        /// Against a BTreeMap model: any interleaving of inserts (in or out of order, repeated),
        /// in-order takes and skips holds the same frames.
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec((0u8..4, 0u64..300, 1usize..200), 1..400)) {
            let mut h = HeldFrames::default();
            let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            let mut next = 0u64; // the receiver's next sequence: frames below it are not held
            for (op, q, len) in ops {
                match op {
                    0 | 1 => {
                        let q = next + q;
                        let frame = vec![(q % 251) as u8 ^ len as u8; len];
                        h.insert(q, &frame);
                        model.insert(q, frame);
                    }
                    2 => {
                        // Deliver in order from `next` while held.
                        while let Some(f) = model.remove(&next) {
                            h.skip_to(next);
                            prop_assert_eq!(h.front(next), Some(&f[..]));
                            h.pop_front();
                            next += 1;
                        }
                    }
                    _ => {
                        // Give up a gap: skip to a later sequence.
                        next += q % 20;
                        model = model.split_off(&next);
                        h.skip_to(next);
                    }
                }
                prop_assert_eq!(h.len(), model.len());
                prop_assert_eq!(h.bytes(), model.values().map(Vec::len).sum::<usize>());
                for (&k, v) in &model {
                    prop_assert!(h.contains(k));
                    let _ = v;
                }
            }
        }
    }
}
