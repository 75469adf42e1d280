use super::book::{untouched, PingBook};
use super::cache_line::{PingChannel, INLINE, LOAD_WORD, PINGS_REFLECTED, PINGS_SENT, RING};
use super::SequenceCheck;
use crate::clock::Clock;
use crate::jitter::CpuJitter;
use crate::measure::floor::Line;

/// A ping any of whose round trip a stall of either loop overlapped is left out of the
/// unstalled latency and counted; the others are kept; without both loops' stalls, or all
/// the pings, there is nothing to say.
#[test]
fn pings_a_stall_overlapped_are_counted_apart_from_the_rest() {
    // CLOCK_MONOTONIC_RAW's ticks are nanoseconds.
    let clock = Clock::from_arg("raw").unwrap();
    let mut book = PingBook::new(0);
    // Pings 1..=5, each sent at n * 1_000_000 and reflected 2 us later.
    for n in 1..=5u64 {
        book.sent(n, n * 1_000_000, n * 1_000_000);
    }
    for n in 1..=5u64 {
        book.reflected(n, n * 1_000_000 + 2_000, &clock);
    }
    let side = |spans: Vec<(u64, u64)>| CpuJitter {
        spans_ticks: spans,
        ..CpuJitter::default()
    };
    // The publisher stalled across ping 2's round trip, the reflector inside ping 4's.
    let publisher = side(vec![(1_500_000, 2_000_500)]);
    let reflector = side(vec![(4_000_100, 4_000_900), (4_500_000, 4_600_000)]);
    let u = untouched(&book, Some(&publisher), Some(&reflector)).unwrap();
    assert_eq!(u.touched, 2);
    let l = u.latency.summary();
    assert_eq!(l.samples, 3);
    assert_eq!(l.max_ns, 1_000.0);
    assert!(untouched(&book, Some(&publisher), None).is_none());
    // Nor when the run measured more pings than it keeps.
    book.samples_full = true;
    assert!(untouched(&book, Some(&publisher), Some(&reflector)).is_none());
}

fn page() -> Line {
    Line::open(&crate::run_name("chan"), true).unwrap()
}

/// A reader that keeps up reads each number from the count's line; one the writer has
/// lapped on that line, from the ring: every number comes back, in both channels, at any
/// distance behind the writer short of a whole ring.
#[test]
fn a_ping_channel_gives_back_every_number_from_its_line_or_its_ring() {
    let line = page();
    for chan in [PINGS_SENT, PINGS_REFLECTED] {
        let number = |n: u64| (n * 7919) ^ (1 << 40);
        for n in 0..3 * RING {
            chan.push(&line, n, number(n));
            assert_eq!(chan.count(&line), n + 1);
            for behind in [0, 1, INLINE - 1, INLINE, INLINE + 1, RING - 1] {
                if behind <= n {
                    assert_eq!(chan.get(&line, n - behind), number(n - behind));
                }
            }
        }
    }
}

/// The two channels and the load word share a page without overwriting each other.
#[test]
fn the_load_word_and_both_channels_do_not_overlap() {
    let line = page();
    let load = line.word_at(LOAD_WORD);
    let (a, b): (PingChannel, PingChannel) = (PINGS_SENT, PINGS_REFLECTED);
    for n in 0..2 * RING {
        a.push(&line, n, n + 1);
        b.push(&line, n, u64::MAX - n);
        load.store(0xdead, std::sync::atomic::Ordering::Relaxed);
    }
    for n in RING..2 * RING {
        assert_eq!(a.get(&line, n), n + 1);
        assert_eq!(b.get(&line, n), u64::MAX - n);
    }
}

#[test]
fn sequence_check_counts_gaps_late_arrivals_and_duplicates() {
    let mut c = SequenceCheck::default();
    for n in [0, 1, 2, 5, 6, 3, 6, 4, 9] {
        c.see(n);
    }
    // 3 and 4 were missing, then arrived late; 7 and 8 never came; 6 came twice.
    assert_eq!(c.received, 9);
    assert_eq!(c.out_of_order, 2);
    assert_eq!(c.duplicates, 1);
    assert_eq!(c.gaps, 2);
}

#[test]
fn an_in_order_stream_counts_nothing_but_receipts() {
    let mut c = SequenceCheck::default();
    (0..10_000).for_each(|n| c.see(n));
    assert_eq!(
        (c.received, c.gaps, c.duplicates, c.out_of_order),
        (10_000, 0, 0, 0)
    );
}
