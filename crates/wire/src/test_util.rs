//! Strategies shared by the frame modules' property tests.

use crate::header::{FrameType, HEADER_LEN, MAGIC, VERSION};
use proptest::collection::vec;
use proptest::prelude::*;
use std::vec::Vec;

/// Mostly zero, sometimes anything: reserved fields and lengths are then often valid, so the
/// decoders get past their first checks.
fn biased_byte() -> impl Strategy<Value = u8> {
    prop_oneof![3 => Just(0u8), 1 => any::<u8>()]
}

/// Arbitrary bytes: either fully random, or a valid common header of type `ty` (flags 0, a
/// `frame_length` that is usually the buffer length) followed by a zero-biased body.
pub fn arbitrary_frame(ty: FrameType) -> BoxedStrategy<Vec<u8>> {
    let raw = vec(any::<u8>(), 0..160);
    let typed = (
        vec(biased_byte(), 0..160),
        prop::option::weighted(0.8, Just(())),
        any::<u8>(),
    )
        .prop_map(move |(body, exact, len)| {
            let mut b = Vec::with_capacity(HEADER_LEN + body.len());
            let frame_length = match exact {
                Some(()) => (HEADER_LEN + body.len()) as u32,
                None => len as u32,
            };
            b.extend_from_slice(&frame_length.to_le_bytes());
            b.extend_from_slice(&MAGIC.to_le_bytes());
            b.extend_from_slice(&[VERSION, ty as u8, 0, 0, 0, 0, 1, 2, 3, 4]);
            b.extend_from_slice(&body);
            b
        });
    prop_oneof![1 => raw, 4 => typed].boxed()
}

/// A few byte edits (position modulo the buffer length, XOR value forced non-zero) and maybe a
/// truncation.
pub fn mutations() -> impl Strategy<Value = (Vec<(usize, u8)>, Option<usize>)> {
    (
        vec((any::<usize>(), 1u8..=255), 1..4),
        prop::option::weighted(0.2, any::<usize>()),
    )
}

/// Applies [`mutations`] to `buf`.
pub fn mutate(buf: &mut Vec<u8>, (edits, cut): &(Vec<(usize, u8)>, Option<usize>)) {
    if buf.is_empty() {
        return;
    }
    for &(i, x) in edits {
        let i = i % buf.len();
        buf[i] ^= x;
    }
    if let Some(c) = cut {
        let c = c % (buf.len() + 1);
        buf.truncate(c);
    }
}
