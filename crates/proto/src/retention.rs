//! The sender's retention buffer: the DATA frames it sent, kept for retransmission, bounded by
//! bytes and by age.
//!
//! Frames are kept in sequence order with no holes, so a lookup is an index computation. Each
//! frame's bytes live in their own buffer taken from a pool of buffers freed by eviction, so
//! once warm the buffer allocates nothing (a hand-rolled pool: the frame sizes vary and a byte
//! ring would have to skip its tail on every wrap).
//!
//! ```
//! use peregrine_proto::retention::RetentionBuffer;
//!
//! let mut r = RetentionBuffer::new(100, 1_000);
//! r.push(0, &[1; 40], 0);
//! r.push(1, &[2; 40], 10);
//! r.push(2, &[3; 40], 20); // 120 bytes > 100: frame 0 is evicted
//! assert_eq!(r.oldest(), 1);
//! assert_eq!(r.get(2), Some(&[3u8; 40][..]));
//! r.expire(1_015); // frame 1 is older than 1000 ns
//! assert_eq!(r.oldest(), 2);
//! ```

use std::collections::VecDeque;

#[derive(Debug)]
struct Entry {
    sent_ns: u64,
    bytes: Vec<u8>,
}

/// See the [module documentation](self).
#[derive(Debug)]
pub struct RetentionBuffer {
    max_bytes: usize,
    max_age_ns: u64,
    /// Sequence number of `entries[0]` (or of the next frame when empty).
    first: u64,
    entries: VecDeque<Entry>,
    bytes: usize,
    pool: Vec<Vec<u8>>,
}

impl RetentionBuffer {
    /// Keeps at most `max_bytes` of frames, none older than `max_age_ns`.
    pub fn new(max_bytes: usize, max_age_ns: u64) -> Self {
        RetentionBuffer {
            max_bytes,
            max_age_ns,
            first: 0,
            entries: VecDeque::new(),
            bytes: 0,
            pool: Vec::new(),
        }
    }

    /// Keeps frame `sequence`. Sequences must follow each other; after a jump (which a sender
    /// does not make) everything older is dropped. A frame larger than the whole buffer is not
    /// kept.
    pub fn push(&mut self, sequence: u64, frame: &[u8], now_ns: u64) {
        if sequence != self.next() {
            self.clear_to(sequence);
        }
        if frame.len() > self.max_bytes {
            self.clear_to(sequence + 1);
            return;
        }
        while self.bytes + frame.len() > self.max_bytes {
            self.pop();
        }
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        self.bytes += b.len();
        self.entries.push_back(Entry {
            sent_ns: now_ns,
            bytes: b,
        });
    }

    fn pop(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.bytes.len();
            self.first += 1;
            if self.pool.len() < 4096 {
                self.pool.push(e.bytes);
            }
        }
    }

    fn clear_to(&mut self, next: u64) {
        while !self.entries.is_empty() {
            self.pop();
        }
        self.first = next;
    }

    /// Drops frames older than the age limit.
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
        self.first + self.entries.len() as u64
    }
    /// Frame `sequence`'s bytes, if retained.
    pub fn get(&self, sequence: u64) -> Option<&[u8]> {
        let i = sequence.checked_sub(self.first)?;
        self.entries
            .get(usize::try_from(i).ok()?)
            .map(|e| &e.bytes[..])
    }
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_bytes_and_age_and_indexed_by_sequence() {
        let mut r = RetentionBuffer::new(1000, 500);
        for s in 0..100u64 {
            r.push(s, &[s as u8; 64], s * 10);
        }
        // 1000 bytes hold 15 frames of 64.
        assert_eq!((r.oldest(), r.next(), r.len()), (85, 100, 15));
        assert!(r.retained_bytes() <= 1000);
        assert_eq!(r.get(84), None);
        assert_eq!(r.get(85), Some(&[85u8; 64][..]));
        assert_eq!(r.get(99), Some(&[99u8; 64][..]));
        assert_eq!(r.get(100), None);
        assert_eq!(r.get(u64::MAX), None);
        r.expire(990 + 500); // frames sent at 850..=990: only the last is at most 500 old
        assert_eq!(r.oldest(), 100 - 1);
        r.expire(u64::MAX);
        assert!(r.is_empty());
        assert_eq!(r.oldest(), 100);
    }

    #[test]
    fn a_jump_or_an_oversized_frame_drops_what_is_older() {
        let mut r = RetentionBuffer::new(100, u64::MAX);
        r.push(0, &[0; 10], 0);
        r.push(5, &[5; 10], 0);
        assert_eq!((r.oldest(), r.next()), (5, 6));
        r.push(6, &[6; 200], 0);
        assert_eq!((r.oldest(), r.next()), (7, 7));
        assert!(r.is_empty());
        r.push(7, &[7; 10], 0);
        assert_eq!(r.get(7), Some(&[7u8; 10][..]));
    }
}
