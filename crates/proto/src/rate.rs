//! The publisher's rate limit, sans I/O: a token bucket counting bytes per second.
//!
//! This is the role of Ultra Messaging's `transport_lbtrm_data_rate_limit`: a multicast
//! publisher that writes as fast as its CPU allows overruns switch buffers and the receivers'
//! socket buffers, and that is where most multicast loss comes from. The driver asks
//! [`TokenBucket::try_take`] before it hands a datagram (or a batch) to the kernel; when the
//! answer is no, it waits until [`TokenBucket::next_ready_ns`] (its deadline for the next
//! attempt) instead of spinning.
//!
//! **Arithmetic.** Tokens are bytes. Refilling adds `rate * elapsed_ns / 1e9` bytes, computed in
//! `u128` (`u64::MAX * u64::MAX` fits) so no input can overflow, and the part of a byte that does
//! not make a whole token is kept as a remainder in nano-bytes and carried into the next refill.
//! Refilling in many small steps therefore credits exactly what one big step would: a publisher
//! polling every microsecond at 10 MB/s (0.01 byte per nanosecond) gets its 10 MB/s, not zero.
//!
//! **Burst and debt.** The bucket holds at most `burst_bytes` and starts full. A request larger
//! than the burst could never be met by a bucket that stops at `burst_bytes`, so it is granted
//! when the bucket is full and leaves the balance negative: the debt is repaid by refilling
//! before anything else passes, so the long-run rate still holds and a jumbo datagram is
//! delayed rather than refused forever.
//!
//! **Time.** `now_ns` comes from the driver's monotonic clock. A `now_ns` older than one already
//! seen (two cores' clocks disagreeing by a few nanoseconds) refills nothing and changes nothing;
//! refilling resumes once the clock passes the latest time seen, so no interval is credited twice.
//!
//! ```
//! use peregrine_proto::rate::TokenBucket;
//!
//! // 1 MB/s, bursts of up to 64 KiB.
//! let mut bucket = TokenBucket::new(1_000_000, 65_536, 0);
//! assert!(bucket.try_take(65_536, 0)); // the bucket starts full
//! assert!(!bucket.try_take(1_000, 0));
//! // 1000 bytes take 1 ms to come back.
//! assert_eq!(bucket.next_ready_ns(1_000, 0), 1_000_000);
//! assert!(bucket.try_take(1_000, 1_000_000));
//! ```

use std::cmp::Ordering;

/// Nanoseconds per second: the denominator of every refill.
const NS_PER_S: u128 = 1_000_000_000;

/// A byte-rate limiter. See the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    /// 0: unlimited.
    rate_bytes_per_s: u64,
    burst_bytes: u64,
    /// Whole bytes available. Negative after a request larger than the burst (a debt); it
    /// ranges from `burst_bytes - u64::MAX` to `burst_bytes`, hence `i128`.
    balance_bytes: i128,
    /// The part of a byte credited but not yet whole, in units of 1e-9 byte (`rate * ns / 1e9`
    /// leaves a remainder below 1e9). Always below 1e9; 0 while the bucket is full.
    fraction_nanobytes: u64,
    /// The latest `now_ns` seen: refills are counted from here.
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket refilling at `rate_bytes_per_s` up to `burst_bytes`. A rate of 0 means
    /// unlimited: every take succeeds.
    ///
    /// A `burst_bytes` of 0 is allowed: every request is then larger than the burst, so each one
    /// passes only once the previous one has been paid for (strict pacing, no burst at all).
    pub fn new(rate_bytes_per_s: u64, burst_bytes: u64, now_ns: u64) -> Self {
        TokenBucket {
            rate_bytes_per_s,
            burst_bytes,
            balance_bytes: i128::from(burst_bytes),
            fraction_nanobytes: 0,
            last_ns: now_ns,
        }
    }

    /// The rate in bytes per second (0: unlimited).
    pub fn rate(&self) -> u64 {
        self.rate_bytes_per_s
    }

    pub fn is_unlimited(&self) -> bool {
        self.rate_bytes_per_s == 0
    }

    /// Changes the rate from `now_ns` on: the time up to `now_ns` is credited at the old rate
    /// first. Going from unlimited to a limit starts with a full bucket.
    pub fn set_rate(&mut self, rate_bytes_per_s: u64, now_ns: u64) {
        self.refill(now_ns);
        if self.rate_bytes_per_s == 0 && rate_bytes_per_s != 0 {
            self.balance_bytes = i128::from(self.burst_bytes);
            self.fraction_nanobytes = 0;
        }
        self.rate_bytes_per_s = rate_bytes_per_s;
    }

    /// Whole bytes available at `now_ns` (negative: a debt still to be repaid). Meaningless
    /// when unlimited (returns the burst).
    pub fn balance_bytes(&self, now_ns: u64) -> i128 {
        let mut b = self.clone();
        b.refill(now_ns);
        b.balance_bytes
    }

    /// Takes `bytes` tokens if they are available at `now_ns`; false leaves the balance as it
    /// was (after refilling). A request larger than the burst passes when the bucket is full and
    /// leaves a debt. Zero bytes always pass.
    pub fn try_take(&mut self, bytes: u64, now_ns: u64) -> bool {
        self.refill(now_ns);
        if self.rate_bytes_per_s == 0 || bytes == 0 {
            return true;
        }
        if self.balance_bytes < self.needed(bytes) {
            return false;
        }
        self.balance_bytes -= i128::from(bytes);
        true
    }

    /// Takes `bytes` unconditionally, leaving a debt when they are not there: for bytes that
    /// leave anyway (a batch whose messages were already accepted). A debt is repaid by
    /// refilling before [`has_credit`](Self::has_credit) is true again, so the long-run rate
    /// holds.
    pub fn charge(&mut self, bytes: u64, now_ns: u64) {
        self.refill(now_ns);
        if self.rate_bytes_per_s != 0 {
            self.balance_bytes -= i128::from(bytes);
        }
    }

    /// Whether the balance is positive at `now_ns` (always, when unlimited): the admission test
    /// of a sender that [`charge`](Self::charge)s what it sends.
    pub fn has_credit(&mut self, now_ns: u64) -> bool {
        self.refill(now_ns);
        self.rate_bytes_per_s == 0 || self.balance_bytes > 0
    }

    /// The earliest time at which [`try_take`](Self::try_take)`(bytes, t)` succeeds if nothing
    /// else is taken meanwhile: `now_ns` when it would succeed now, else the instant the refill
    /// covers the shortfall. Never before the latest time seen (time that went backwards
    /// refills nothing). Saturates at `u64::MAX` when the wait does not fit in a `u64` (a rate
    /// of a few bytes per second and a debt of exabytes).
    pub fn next_ready_ns(&self, bytes: u64, now_ns: u64) -> u64 {
        if self.rate_bytes_per_s == 0 || bytes == 0 {
            return now_ns;
        }
        let needed = self.needed(bytes);
        if self.balance_bytes >= needed {
            return now_ns;
        }
        // Smallest `elapsed` with balance + (rate * elapsed + fraction) / 1e9 >= needed. The
        // shortfall is at most 2^65 bytes (needed <= u64::MAX, balance >= -u64::MAX), so the
        // product with 1e9 fits easily in u128; the fraction is below 1e9 and the shortfall at
        // least 1, so the subtraction cannot underflow.
        let shortfall_bytes = (needed - self.balance_bytes) as u128;
        let shortfall_nanobytes = shortfall_bytes * NS_PER_S - u128::from(self.fraction_nanobytes);
        let elapsed_ns = shortfall_nanobytes.div_ceil(u128::from(self.rate_bytes_per_s));
        let ready = u128::from(self.last_ns) + elapsed_ns;
        u64::try_from(ready).unwrap_or(u64::MAX).max(now_ns)
    }

    /// The balance a request of `bytes` needs: all of it, or a full bucket when it is larger
    /// than the burst.
    fn needed(&self, bytes: u64) -> i128 {
        i128::from(bytes.min(self.burst_bytes))
    }

    /// Credits the time from `last_ns` to `now_ns`; nothing when time went backwards.
    fn refill(&mut self, now_ns: u64) {
        let elapsed_ns = match now_ns.cmp(&self.last_ns) {
            Ordering::Greater => now_ns - self.last_ns,
            Ordering::Equal | Ordering::Less => return,
        };
        self.last_ns = now_ns;
        let burst = i128::from(self.burst_bytes);
        if self.rate_bytes_per_s == 0 || self.balance_bytes >= burst {
            return;
        }
        // (2^64 - 1)^2 + 1e9 < 2^128: no overflow for any inputs.
        let nanobytes = u128::from(self.rate_bytes_per_s) * u128::from(elapsed_ns)
            + u128::from(self.fraction_nanobytes);
        // At most 2^128 / 1e9 < 2^99: fits an i128 with room for the balance.
        let whole = (nanobytes / NS_PER_S) as i128;
        let balance = self.balance_bytes + whole;
        if balance >= burst {
            // Full: what overflows the bucket, fraction included, is lost by design.
            self.balance_bytes = burst;
            self.fraction_nanobytes = 0;
        } else {
            self.balance_bytes = balance;
            self.fraction_nanobytes = (nanobytes % NS_PER_S) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// xorshift64*: request sizes for the tests (any fixed sequence would do).
    fn sizes(mut x: u64) -> impl FnMut(u64, u64) -> u64 {
        move |lo, hi| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            lo + x.wrapping_mul(0x2545_F491_4F6C_DD1D) % (hi - lo + 1)
        }
    }

    /// A sender that sends whenever it may, sleeping until `next_ready_ns` otherwise: the bytes
    /// it gets through in `[0, duration]`.
    fn saturate(bucket: &mut TokenBucket, duration_ns: u64, seed: u64, max_size: u64) -> u64 {
        let mut size = sizes(seed);
        let mut now = 0;
        let mut sent = 0;
        let mut want = size(1, max_size);
        loop {
            if bucket.try_take(want, now) {
                sent += want;
                want = size(1, max_size);
            } else {
                let t = bucket.next_ready_ns(want, now);
                assert!(t > now, "refused at {now} but said ready at {t}");
                if t > duration_ns {
                    return sent;
                }
                now = t;
            }
        }
    }

    #[test]
    fn long_run_rate_is_exact_with_random_sizes() {
        let rate = 10_000_000;
        let burst = 65_536;
        let mut b = TokenBucket::new(rate, burst, 0);
        let sent = saturate(&mut b, 10 * S, 7, 9_000);
        let expected = rate * 10;
        // Never more than the burst plus ten seconds' worth...
        assert!(sent <= expected + burst, "sent {sent}");
        // ...and within 0.1% of it (in fact within one request of it).
        assert!(
            sent.abs_diff(expected) <= expected / 1000 + burst,
            "sent {sent}"
        );
        assert!(sent + 9_000 >= expected + burst, "sent {sent}");
    }

    #[test]
    fn long_run_rate_is_exact_when_polled_at_random_small_steps() {
        // 10 MB/s is 0.01 byte per nanosecond: polls 1 to 2000 ns apart mostly refill less than
        // a byte, which only the carried remainder keeps.
        let rate = 10_000_000;
        let burst = 9_000;
        let mut b = TokenBucket::new(rate, burst, 0);
        let mut rnd = sizes(99);
        let (mut now, mut sent) = (0, 0);
        let mut want = rnd(1, 1_500);
        while now <= S {
            if b.try_take(want, now) {
                sent += want;
                want = rnd(1, 1_500);
            }
            now += rnd(1, 2_000);
        }
        let expected = rate;
        assert!(sent <= expected + burst, "sent {sent}");
        assert!(
            sent + 1_500 >= expected + burst - 2_000 / 100,
            "sent {sent}"
        );
    }

    #[test]
    fn fractional_tokens_are_never_lost() {
        // 1_000_001 bytes/s polled every nanosecond: 0.001000001 byte per poll, 1000.001 bytes
        // per millisecond. Rounding each refill down would give nothing at all.
        let mut b = TokenBucket::new(1_000_001, 10, 0);
        assert!(b.try_take(10, 0)); // empty it
        let mut sent = 0;
        for now in 1..=MS {
            if b.try_take(1, now) {
                sent += 1;
            }
        }
        assert_eq!(sent, 1_000);
        // 7 bytes per second in steps of a millisecond (0.007 byte each).
        let mut b = TokenBucket::new(7, 100, 0);
        assert!(b.try_take(100, 0));
        for now in (MS..=S).step_by(MS as usize) {
            assert!(!b.try_take(8, now));
        }
        assert_eq!(b.balance_bytes(S), 7);
        assert!(b.try_take(7, S));
    }

    #[test]
    fn charging_leaves_a_debt_repaid_at_the_rate() {
        // 1 MB/s, 64 KiB burst: a sender that sends 100 KB batches whenever it has credit gets
        // 1 MB/s over a second, give or take the first burst and one batch.
        let mut b = TokenBucket::new(1_000_000, 65_536, 0);
        let mut sent = 0u64;
        let mut now = 0;
        while now <= S {
            if b.has_credit(now) {
                b.charge(100_000, now);
                sent += 100_000;
            }
            now += 10_000;
        }
        assert!(
            (1_000_000..=1_000_000 + 65_536 + 100_000).contains(&sent),
            "{sent}"
        );
        assert!(!b.has_credit(now));
        let mut free = TokenBucket::new(0, 0, 0);
        free.charge(u64::MAX, 0);
        assert!(free.has_credit(0));
    }

    #[test]
    fn refilling_in_steps_equals_refilling_at_once() {
        let mut stepped = TokenBucket::new(333_333_333, u64::MAX, 0);
        let mut once = stepped.clone();
        assert!(stepped.try_take(u64::MAX / 2, 0));
        assert!(once.try_take(u64::MAX / 2, 0));
        let mut now = 0;
        for step in [1, 2, 3, 5, 7, 11, 999_999_999, 13, 1] {
            now += step;
            stepped.try_take(0, now);
        }
        assert_eq!(stepped.balance_bytes(now), once.balance_bytes(now));
        once.try_take(0, now);
        assert_eq!(stepped, once);
    }

    #[test]
    fn burst_is_available_at_once_and_caps_the_balance() {
        let mut b = TokenBucket::new(1_000, 500, 0);
        assert!(b.try_take(300, 0));
        assert!(b.try_take(200, 0));
        assert!(!b.try_take(1, 0));
        assert_eq!(b.next_ready_ns(1, 0), MS);
        assert_eq!(b.next_ready_ns(500, 0), 500 * MS);
        // An hour idle refills no more than the burst.
        assert_eq!(b.balance_bytes(3_600 * S), 500);
        assert!(b.try_take(500, 3_600 * S));
        assert!(!b.try_take(1, 3_600 * S));
    }

    #[test]
    fn a_request_larger_than_the_burst_passes_when_full_and_leaves_a_debt() {
        let mut b = TokenBucket::new(1_000, 100, 0);
        assert!(b.try_take(1_000, 0));
        assert_eq!(b.balance_bytes(0), -900);
        // The debt is repaid before anything passes: 901 bytes for one more byte.
        assert!(!b.try_take(1, 0));
        assert_eq!(b.next_ready_ns(1, 0), 901 * MS);
        assert!(!b.try_take(1, 901 * MS - 1));
        assert!(b.try_take(1, 901 * MS));
        // Another oversized request waits for a full bucket: 100 bytes, 100 ms.
        assert_eq!(b.next_ready_ns(5_000, 901 * MS), 1_001 * MS);
        assert!(!b.try_take(5_000, 1_001 * MS - 1));
        assert!(b.try_take(5_000, 1_001 * MS));
        assert_eq!(b.balance_bytes(1_001 * MS), -4_900);
    }

    #[test]
    fn zero_burst_paces_every_request() {
        let mut b = TokenBucket::new(1_000, 0, 0);
        assert!(b.try_take(10, 0));
        assert!(!b.try_take(10, 0));
        assert_eq!(b.next_ready_ns(10, 0), 10 * MS);
        assert!(b.try_take(10, 10 * MS));
    }

    #[test]
    fn a_huge_debt_saturates_the_ready_time() {
        let mut b = TokenBucket::new(1, 0, 5);
        assert!(b.try_take(u64::MAX, 5));
        assert_eq!(b.next_ready_ns(1, 5), u64::MAX);
        assert!(!b.try_take(1, u64::MAX));
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let mut b = TokenBucket::new(0, 0, 0);
        assert!(b.is_unlimited());
        for now in 0..1_000 {
            assert!(b.try_take(u64::MAX, now));
            assert_eq!(b.next_ready_ns(u64::MAX, now), now);
        }
    }

    #[test]
    fn zero_bytes_always_pass() {
        let mut b = TokenBucket::new(1, 0, 0);
        assert!(b.try_take(1_000, 0));
        assert!(b.try_take(0, 0));
        assert_eq!(b.next_ready_ns(0, 0), 0);
    }

    #[test]
    fn time_going_backwards_refills_nothing_and_does_not_panic() {
        let mut b = TokenBucket::new(1_000, 1_000, 10 * S);
        assert!(b.try_take(1_000, 10 * S));
        let before = b.clone();
        assert!(!b.try_take(1, 5 * S));
        assert!(!b.try_take(1, 0));
        assert_eq!(b, before);
        assert_eq!(b.balance_bytes(0), 0);
        // Ready time is in the bucket's own timeline: after the latest time seen.
        assert_eq!(b.next_ready_ns(1, 0), 10 * S + MS);
        // Refilling resumes from the latest time seen, not from the earlier one.
        assert!(!b.try_take(2, 10 * S + MS));
        assert!(b.try_take(1, 10 * S + MS));
    }

    #[test]
    fn set_rate_credits_the_past_at_the_old_rate() {
        let mut b = TokenBucket::new(1_000, 10_000, 0);
        assert!(b.try_take(10_000, 0));
        b.set_rate(2_000, S); // 1000 bytes at the old rate
        assert_eq!(b.rate(), 2_000);
        assert_eq!(b.balance_bytes(S), 1_000);
        assert_eq!(b.balance_bytes(2 * S), 3_000);
        // Unlimited and back: a full bucket.
        b.set_rate(0, 2 * S);
        assert!(b.try_take(1 << 40, 2 * S));
        b.set_rate(1_000, 3 * S);
        assert_eq!(b.balance_bytes(3 * S), 10_000);
    }

    proptest! {
        #[test]
        fn arbitrary_inputs_never_panic(
            rate in any::<u64>(),
            burst in any::<u64>(),
            start in any::<u64>(),
            ops in proptest::collection::vec((0u8..3, any::<u64>(), any::<u64>()), 0..40),
        ) {
            let mut b = TokenBucket::new(rate, burst, start);
            for (op, x, now) in ops {
                match op {
                    0 => { b.try_take(x, now); }
                    1 => { b.next_ready_ns(x, now); b.balance_bytes(now); }
                    _ => b.set_rate(x, now),
                }
                prop_assert!(b.balance_bytes <= i128::from(b.burst_bytes));
                prop_assert!(b.balance_bytes >= i128::from(b.burst_bytes) - i128::from(u64::MAX));
                prop_assert!(b.fraction_nanobytes < 1_000_000_000);
            }
        }

        #[test]
        fn next_ready_is_the_earliest_time_a_take_succeeds(
            rate in 1u64..=u64::MAX,
            burst in 0u64..1 << 40,
            takes in proptest::collection::vec((0u64..1 << 41, 0u64..1 << 30), 0..20),
            want in 0u64..1 << 41,
        ) {
            let mut b = TokenBucket::new(rate, burst, 0);
            let mut now = 0u64;
            for (bytes, step) in takes {
                now += step;
                b.try_take(bytes, now);
            }
            let t = b.next_ready_ns(want, now);
            prop_assert!(t >= now);
            if t < u64::MAX {
                prop_assert!(b.clone().try_take(want, t));
            }
            if t > now {
                prop_assert!(!b.clone().try_take(want, t - 1));
            }
        }
    }
}
