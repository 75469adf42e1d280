//! When a receiver asks for missing frames (docs/architecture.md, "Loss repair"): the first
//! NAK of a gap after a fixed delay on unicast or a random back-off on multicast
//! ([`NakDelay`]), repeated every `retry_ns` while unanswered, and the gap given up when its
//! tries or its stall limit run out ([`take_due`]). The gaps themselves are
//! [`Gaps`](super::gaps::Gaps); suppression by another receiver's NAK is
//! [`Gaps::suppress`](super::gaps::Gaps::suppress).

use super::gaps::Gaps;
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr, MAX_NAK_RANGES};
use std::net::SocketAddr;

/// How a receiver asks for lost frames (docs/architecture.md, "Loss repair").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NakConfig {
    /// Multicast: the first NAK for a gap waits a random time up to `backoff_max_ns`, and a
    /// NAK from another receiver for the same frames counts as ours (suppression). Unicast: it
    /// waits `delay_ns`, so frames merely reordered can still arrive.
    pub multicast: bool,
    pub delay_ns: u64,
    pub backoff_max_ns: u64,
    /// A NAK not answered is repeated after this long...
    pub retry_ns: u64,
    /// ...at most this many times in all; then the frames are reported lost.
    pub max_tries: u32,
    /// A gap is never waited for longer than this: then it is reported lost and delivery
    /// carries on.
    pub max_stall_ns: u64,
    /// Bytes of frames held behind gaps (over all sessions); a frame that does not fit gives
    /// up the oldest gaps until it does. It also bounds the reorder ring: a frame is held
    /// only within `max_buffered_bytes / 32` sequence numbers (at least 1024) of the first
    /// frame held, as many as the bytes could hold of the smallest frames.
    pub max_buffered_bytes: usize,
}

impl NakConfig {
    /// Defaults: 50 us unicast delay, multicast back-off up to 500 us, retries every 2 ms, up
    /// to 50 tries and at most 1 s stalled, 32 MiB held.
    pub fn new(multicast: bool) -> Self {
        NakConfig {
            multicast,
            delay_ns: 50_000,
            backoff_max_ns: 500_000,
            retry_ns: 2_000_000,
            max_tries: 50,
            max_stall_ns: 1_000_000_000,
            max_buffered_bytes: 32 << 20,
        }
    }
}

/// The wait before a new gap's first NAK: `delay_ns` on unicast; on multicast a random time
/// below `backoff_max_ns`, so that of many receivers missing the same frames one asks first
/// and the others hear its NAK and stay quiet.
#[derive(Debug, Clone)]
pub(super) struct NakDelay {
    /// xorshift64 state (never 0).
    rng: u64,
}

impl NakDelay {
    /// Seeded from the receiver's random id: receivers of one group draw different delays.
    pub(super) fn new(seed: u32) -> Self {
        NakDelay {
            rng: u64::from(seed) | 1,
        }
    }

    pub(super) fn next(&mut self, nak: &NakConfig) -> u64 {
        if !nak.multicast || nak.backoff_max_ns == 0 {
            return nak.delay_ns;
        }
        // xorshift64: a deterministic spread of back-offs; not security related.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % nak.backoff_max_ns
    }
}

/// The NAK timers of one session's gaps at `now_ns`: each gap whose NAK is due is either given
/// up (out of tries, or stalled for `max_stall_ns`) or asked for again (one range per gap,
/// pushed to `ranges`, the next try `retry_ns` later). Returns whether a gap was given up.
pub(super) fn take_due(
    gaps: &mut Gaps,
    now_ns: u64,
    nak: &NakConfig,
    ranges: &mut Vec<NakRange>,
) -> bool {
    let mut gave_up = false;
    for g in gaps.iter_mut() {
        if g.gave_up || g.nak_at_ns > now_ns {
            continue;
        }
        if g.tries >= nak.max_tries || now_ns.saturating_sub(g.detected_ns) >= nak.max_stall_ns {
            g.gave_up = true;
            gave_up = true;
            continue;
        }
        g.tries += 1;
        g.nak_at_ns = now_ns.saturating_add(nak.retry_ns);
        // One range per gap: a gap longer than a range can say (a late join, a confirmed
        // jump) is asked for from its start, the rest once that is repaired.
        let count = (g.end - g.start).min(u64::from(u32::MAX)) as u32;
        ranges.push(NakRange {
            start: g.start,
            count,
        });
    }
    gave_up
}

/// Who a NAK comes from and is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NakFrom {
    pub session_id: u32,
    pub stream_id: u32,
    pub receiver_id: u32,
}

/// Emits `ranges` as NAK frames of at most [`MAX_NAK_RANGES`] ranges each, to `to`. Returns
/// the frames emitted and the ranges they carried.
pub(super) fn emit_naks<E: FnMut(SocketAddr, &[u8])>(
    from: NakFrom,
    ranges: &[NakRange],
    to: SocketAddr,
    emit: &mut E,
) -> (u64, u64) {
    if ranges.is_empty() {
        // Most polls while gaps wait for their deadline: not even the buffer's zeroing.
        return (0, 0);
    }
    let mut buf = [0u8; 32 + 16 * MAX_NAK_RANGES];
    let (mut frames, mut carried) = (0, 0);
    for chunk in ranges.chunks(MAX_NAK_RANGES) {
        let Ok(rs) = NakRanges::new(chunk) else {
            continue;
        };
        let repr = NakRepr {
            session_id: from.session_id,
            stream_id: from.stream_id,
            receiver_id: from.receiver_id,
            ranges: rs,
        };
        let len = repr.buffer_len();
        repr.emit(&mut NakFrame::new_unchecked(&mut buf[..len]));
        emit(to, &buf[..len]);
        frames += 1;
        carried += chunk.len() as u64;
    }
    (frames, carried)
}

#[cfg(test)]
mod tests {
    use super::super::gaps::Gap;
    use super::*;

    fn unicast() -> NakConfig {
        NakConfig::new(false)
    }

    fn gaps(list: &[(u64, u64, u64)]) -> Gaps {
        // (start, end, detected_ns), first NAK due at detection.
        let mut g = Gaps::default();
        for &(start, end, at) in list {
            g.push(Gap::new(start, end, at, 0));
        }
        g
    }

    #[test]
    fn unicast_waits_the_fixed_delay_and_multicast_a_spread_below_the_back_off() {
        let mut d = NakDelay::new(7);
        assert!((0..100).all(|_| d.next(&unicast()) == 50_000));
        let mc = NakConfig::new(true);
        let draws: Vec<u64> = (0..1000).map(|_| d.next(&mc)).collect();
        assert!(draws.iter().all(|&x| x < mc.backoff_max_ns));
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 900, "{} distinct of 1000", distinct.len());
        // Seeded: the same id draws the same delays; another id others.
        let (mut a, mut b, mut c) = (NakDelay::new(7), NakDelay::new(7), NakDelay::new(8));
        let (x, y, z): (Vec<_>, Vec<_>, Vec<_>) = (0..8)
            .map(|_| (a.next(&mc), b.next(&mc), c.next(&mc)))
            .fold((vec![], vec![], vec![]), |mut acc, (p, q, r)| {
                acc.0.push(p);
                acc.1.push(q);
                acc.2.push(r);
                acc
            });
        assert_eq!(x, y);
        assert_ne!(x, z);
        // No back-off configured: the fixed delay, on multicast too.
        let flat = NakConfig {
            backoff_max_ns: 0,
            ..mc
        };
        assert_eq!(d.next(&flat), flat.delay_ns);
    }

    #[test]
    fn a_gap_is_asked_for_when_due_then_every_retry_until_its_tries_run_out() {
        let nak = NakConfig {
            max_tries: 3,
            ..unicast()
        };
        let mut g = gaps(&[(10, 12, 1_000)]);
        let mut ranges = Vec::new();
        // Not due yet.
        assert!(!take_due(&mut g, 999, &nak, &mut ranges));
        assert!(ranges.is_empty());
        // Due: one range for the gap, the next try a retry later.
        let mut now = 1_000;
        for _ in 0..3 {
            ranges.clear();
            assert!(!take_due(&mut g, now, &nak, &mut ranges));
            assert_eq!(
                ranges,
                [NakRange {
                    start: 10,
                    count: 2
                }]
            );
            ranges.clear();
            assert!(!take_due(&mut g, now + nak.retry_ns - 1, &nak, &mut ranges));
            assert!(ranges.is_empty(), "asked again before the retry interval");
            now += nak.retry_ns;
        }
        // The fourth time it is due, it is given up, not asked for.
        assert!(take_due(&mut g, now, &nak, &mut ranges));
        assert!(ranges.is_empty());
        assert!(g.front_given_up());
        assert_eq!(g.next_deadline_ns(), None);
    }

    #[test]
    fn a_gap_stalled_past_the_limit_is_given_up_whatever_its_tries() {
        let nak = NakConfig {
            max_stall_ns: 10_000_000,
            ..unicast()
        };
        let mut g = gaps(&[(0, 1, 0), (5, 6, 9_000_000)]);
        let mut ranges = Vec::new();
        assert!(take_due(&mut g, 10_000_000, &nak, &mut ranges));
        // The first was detected 10 ms ago: given up. The second 1 ms ago: asked for.
        assert_eq!(ranges, [NakRange { start: 5, count: 1 }]);
        assert!(g.front_given_up());
    }

    #[test]
    fn a_gap_longer_than_a_range_can_say_is_asked_for_from_its_start() {
        let mut g = gaps(&[(100, 100 + (1 << 40), 0)]);
        let mut ranges = Vec::new();
        take_due(&mut g, 0, &unicast(), &mut ranges);
        assert_eq!(
            ranges,
            [NakRange {
                start: 100,
                count: u32::MAX
            }]
        );
    }

    #[test]
    fn naks_carry_at_most_their_frame_of_ranges_each_to_the_given_source() {
        let ranges: Vec<NakRange> = (0..MAX_NAK_RANGES as u64 * 2 + 1)
            .map(|k| NakRange {
                start: k * 10,
                count: 1,
            })
            .collect();
        let from = NakFrom {
            session_id: 5,
            stream_id: 6,
            receiver_id: 7,
        };
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut sent = Vec::new();
        let sent_counts = emit_naks(from, &ranges, to, &mut |dst, b: &[u8]| {
            sent.push((dst, b.to_vec()))
        });
        assert_eq!(sent_counts, (3, ranges.len() as u64));
        let mut back = Vec::new();
        for (dst, b) in &sent {
            assert_eq!(*dst, to);
            let n = NakRepr::parse(&NakFrame::new_checked(&b[..]).unwrap()).unwrap();
            assert_eq!(
                (n.session_id, n.stream_id, n.receiver_id),
                (5, 6, 7),
                "{n:?}"
            );
            back.extend(n.ranges.iter());
        }
        assert_eq!(back, ranges);
    }
}
