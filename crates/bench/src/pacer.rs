//! The load generator's rate algorithm, sans-I/O: it takes `now_ns` and says how many messages
//! to send and how long to sleep. The driver ([`crate::measure::load`]) owns the clock and the sockets.
//!
//! The algorithm is Ultra Messaging lbmpubload's (the UM report's appendix, docs/benchmarks.md),
//! exactly:
//! 1. the outer loop wakes up;
//! 2. it reads the clock and computes, from the start time and the rate, how many messages
//!    should have been sent by now;
//! 3. it subtracts the number already sent;
//! 4. the difference is the application batch: 1 at low rates, hundreds at high rates;
//! 5. the inner loop sends the batch, then flushes it;
//! 6. it computes when the next message is due, and sleeps when that is more than 1 ms away.
//!
//! Message `i` is due at `start + i / rate`: message 0 at the start. Catching up after a stall
//! is part of the algorithm (the next batch is larger), so the long-run rate is exact as long
//! as the sender can keep up at all.
//!
//! Pings: one message in each window of `ping_every` consecutive messages is a ping, at a
//! position drawn uniformly in the window ([`PingPicker`]). A fixed period (every K-th message)
//! would alias with the batches: at a steady batch size, pings would always sit at the same
//! place in a batch (for example always first, so never waiting behind the rest of the batch),
//! and the latency measured would not be the latency of a typical message.

/// Sleeps shorter than this are not taken: the outer loop runs again at once (lbmpubload
/// sleeps only when the next message is more than 1 ms away).
pub const MIN_SLEEP_NS: u64 = 1_000_000;

/// The pacing state of one run.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_msgs_per_s: f64,
    start_ns: u64,
    sent: u64,
    limit: u64,
}

/// What the outer loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send messages `first .. first + count` now (the inner loop), then flush.
    Send { first: u64, count: u64 },
    /// Nothing is due: sleep until `until_ns` (more than [`MIN_SLEEP_NS`] away).
    Sleep { until_ns: u64 },
    /// Nothing is due yet, but the next message is less than 1 ms away: run the outer loop
    /// again at once.
    Spin { due_ns: u64 },
    /// Every message of the run (`limit`) was sent.
    Done,
}

impl Pacer {
    /// A pacer that sends `rate_msgs_per_s` from `start_ns`, at most `limit` messages in all.
    pub fn new(rate_msgs_per_s: f64, start_ns: u64, limit: u64) -> Pacer {
        assert!(
            rate_msgs_per_s.is_finite() && rate_msgs_per_s > 0.0,
            "rate must be positive"
        );
        Pacer {
            rate_msgs_per_s,
            start_ns,
            sent: 0,
            limit,
        }
    }

    /// Messages sent so far (as reported by [`sent_one`](Self::sent_one)).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// When message `i` is due.
    #[inline]
    pub fn scheduled_ns(&self, i: u64) -> u64 {
        self.start_ns + (i as f64 * 1e9 / self.rate_msgs_per_s) as u64
    }

    /// How many messages should have been sent by `now_ns` (message 0 is due at the start).
    #[inline]
    pub fn desired(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let elapsed_ns = (now_ns - self.start_ns) as f64;
        // Messages due at or before now: floor(elapsed * rate) + 1. Round-off of the f64 can
        // only move a message by one ulp of its due time.
        ((elapsed_ns * self.rate_msgs_per_s / 1e9) as u64 + 1).min(self.limit)
    }

    /// Steps 2 to 4 and 6 of the outer loop: the batch due at `now_ns`, or how to wait.
    pub fn step(&self, now_ns: u64) -> Step {
        if self.sent >= self.limit {
            return Step::Done;
        }
        let desired = self.desired(now_ns);
        if desired > self.sent {
            return Step::Send {
                first: self.sent,
                count: desired - self.sent,
            };
        }
        let due_ns = self.scheduled_ns(self.sent);
        if due_ns.saturating_sub(now_ns) > MIN_SLEEP_NS {
            Step::Sleep { until_ns: due_ns }
        } else {
            Step::Spin { due_ns }
        }
    }

    /// Records that the inner loop sent one more message (call after each successful send).
    #[inline]
    pub fn sent_one(&mut self) {
        self.sent += 1;
    }
}

/// Picks which messages are pings: one in each window of `every` messages, at a uniformly
/// random position inside the window (a seeded xorshift generator, so runs are repeatable).
#[derive(Debug, Clone)]
pub struct PingPicker {
    every: u64,
    rng: u64,
    next_ping: u64,
    window_start: u64,
}

impl PingPicker {
    /// `every` >= 1; with 1 every message is a ping.
    pub fn new(every: u64, seed: u64) -> PingPicker {
        assert!(every >= 1, "ping period must be at least 1");
        let mut p = PingPicker {
            every,
            rng: seed | 1,
            next_ping: 0,
            window_start: 0,
        };
        p.next_ping = p.draw();
        p
    }

    fn draw(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.window_start + self.rng % self.every
    }

    /// Whether message `i` is a ping. Must be called for every message in order.
    #[inline]
    pub fn is_ping(&mut self, i: u64) -> bool {
        debug_assert!(i < self.window_start + self.every);
        let ping = i == self.next_ping;
        if i + 1 == self.window_start + self.every {
            self.window_start += self.every;
            self.next_ping = self.draw();
        }
        ping
    }
}

/// The default ping period for a rate: about 5 000 pings per second (every message below
/// 10 000 msgs/s), so a 3-second cell has ~15 000 samples and the reflected stream stays
/// small next to the load.
pub fn default_ping_every(rate_msgs_per_s: f64) -> u64 {
    ((rate_msgs_per_s / 5_000.0).round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver on a virtual clock: each message costs `send_ns`, each flush `flush_ns`, each
    /// pass of the outer loop `loop_ns`, and a sleep ends `oversleep_ns` late (as the kernel's
    /// timer slack makes it). Returns the batch sizes and the sleeps taken.
    struct Run {
        batches: Vec<u64>,
        sleeps_ns: Vec<u64>,
        end_ns: u64,
        sent: u64,
    }

    fn drive(
        rate: f64,
        seconds: f64,
        send_ns: u64,
        flush_ns: u64,
        loop_ns: u64,
        oversleep_ns: u64,
    ) -> Run {
        let start = 1_000_000_000u64;
        let end = start + (seconds * 1e9) as u64;
        let mut p = Pacer::new(rate, start, u64::MAX);
        let mut now = start;
        let mut run = Run {
            batches: vec![],
            sleeps_ns: vec![],
            end_ns: 0,
            sent: 0,
        };
        while now < end {
            now += loop_ns;
            match p.step(now) {
                Step::Send { first, count } => {
                    assert_eq!(first, p.sent());
                    for _ in 0..count {
                        now += send_ns;
                        p.sent_one();
                    }
                    now += flush_ns;
                    run.batches.push(count);
                }
                Step::Sleep { until_ns } => {
                    assert!(until_ns - now > MIN_SLEEP_NS);
                    run.sleeps_ns.push(until_ns - now);
                    now = until_ns + oversleep_ns;
                }
                Step::Spin { due_ns } => assert!(due_ns.saturating_sub(now) <= MIN_SLEEP_NS),
                Step::Done => unreachable!(),
            }
        }
        run.end_ns = now - start;
        run.sent = p.sent();
        run
    }

    fn expected(rate: f64, elapsed_ns: u64) -> u64 {
        (elapsed_ns as f64 * rate / 1e9) as u64 + 1
    }

    #[test]
    fn at_1k_per_second_every_batch_is_one_message_and_the_loop_never_sleeps() {
        // The next message is 1 ms away after each send: not *more* than 1 ms, so no sleep.
        let r = drive(1_000.0, 2.0, 200, 1_000, 50, 60_000);
        assert!(r.batches.iter().all(|&b| b == 1), "{:?}", &r.batches[..10]);
        assert!(r.sleeps_ns.is_empty());
        assert!(r.sent.abs_diff(expected(1_000.0, r.end_ns)) <= 1);
    }

    #[test]
    fn at_100_per_second_the_loop_sleeps_between_single_messages_and_oversleep_is_caught_up() {
        let r = drive(100.0, 2.0, 200, 1_000, 50, 60_000);
        assert!(r.batches.iter().all(|&b| b == 1));
        // One sleep per message, each almost the whole 10 ms period.
        assert!(r.sleeps_ns.len() as u64 >= r.sent - 1);
        assert!(r
            .sleeps_ns
            .iter()
            .all(|&s| (9_800_000..=10_000_000).contains(&s)));
        assert!(r.sent.abs_diff(expected(100.0, r.end_ns)) <= 1);
    }

    #[test]
    fn at_100k_per_second_batches_are_single_messages_sent_when_due() {
        let r = drive(100_000.0, 1.0, 80, 1_500, 50, 60_000);
        assert!(r.sleeps_ns.is_empty());
        assert!(r.batches.iter().all(|&b| b == 1));
        assert_eq!(r.batches.len() as u64, r.sent);
        assert!(r.sent.abs_diff(expected(100_000.0, r.end_ns)) <= 1);
    }

    #[test]
    fn at_2m_per_second_batches_grow_until_the_sender_keeps_up() {
        // A message costs 150 ns and a flush 5 us: one message per flush cannot keep up with a
        // 500 ns period, so batches grow to where a batch's cost equals its time:
        // b * 150 + 5050 = b * 500, b ~ 14.4.
        let r = drive(2_000_000.0, 0.5, 150, 5_000, 50, 60_000);
        assert!(r.sleeps_ns.is_empty());
        let steady = &r.batches[r.batches.len() / 2..];
        let mean = steady.iter().sum::<u64>() as f64 / steady.len() as f64;
        assert!((13.5..=15.5).contains(&mean), "mean batch {mean}");
        assert!(steady.iter().all(|&b| (13..=16).contains(&b)), "{steady:?}");
        // The rate holds exactly: what is due is sent, to within the batch in flight.
        let want = expected(2_000_000.0, r.end_ns);
        assert!(
            r.sent <= want && want - r.sent <= 16,
            "{} vs {want}",
            r.sent
        );
    }

    #[test]
    fn a_stall_is_caught_up_by_one_large_batch() {
        let start = 0;
        let mut p = Pacer::new(1_000_000.0, start, u64::MAX);
        // Nothing sent for 10 ms: the next step sends the 10 001 messages due.
        assert_eq!(
            p.step(10_000_000),
            Step::Send {
                first: 0,
                count: 10_001
            }
        );
        for _ in 0..10_001 {
            p.sent_one();
        }
        assert_eq!(p.step(10_000_000), Step::Spin { due_ns: 10_001_000 });
    }

    #[test]
    fn a_limited_run_ends_after_its_last_message() {
        let mut p = Pacer::new(1_000.0, 0, 3);
        assert_eq!(p.step(5_000_000_000), Step::Send { first: 0, count: 3 });
        for _ in 0..3 {
            p.sent_one();
        }
        assert_eq!(p.step(5_000_000_000), Step::Done);
    }

    #[test]
    fn scheduled_times_are_spaced_by_the_period() {
        let p = Pacer::new(250_000.0, 100, u64::MAX);
        assert_eq!(p.scheduled_ns(0), 100);
        assert_eq!(p.scheduled_ns(1), 4_100);
        assert_eq!(p.scheduled_ns(250_000), 1_000_000_100);
        assert_eq!(p.desired(99), 0);
        assert_eq!(p.desired(100), 1);
        assert_eq!(p.desired(4_099), 1);
        assert_eq!(p.desired(4_100), 2);
    }

    #[test]
    fn one_ping_in_every_window_of_k() {
        let mut pick = PingPicker::new(100, 7);
        let pings: Vec<u64> = (0..100_000).filter(|&i| pick.is_ping(i)).collect();
        assert_eq!(pings.len(), 1_000);
        for (w, &p) in pings.iter().enumerate() {
            assert_eq!(p / 100, w as u64, "one ping per window");
        }
        let mut all = PingPicker::new(1, 3);
        assert!((0..1000).all(|i| all.is_ping(i)));
    }

    #[test]
    fn pings_are_spread_uniformly_across_batches() {
        // Batches of 100 and a ping every 200 messages: a fixed period would put every ping at
        // the same place in its batch. Drawn positions cover the batch evenly: count pings per
        // tenth of the batch and check each tenth has its share (a chi-square test at 10^-6).
        let (batch, every, n_pings) = (100u64, 200u64, 20_000u64);
        let mut pick = PingPicker::new(every, 0x9e37_79b9_7f4a_7c15);
        let mut tenths = [0u64; 10];
        for i in 0..every * n_pings {
            if pick.is_ping(i) {
                tenths[((i % batch) * 10 / batch) as usize] += 1;
            }
        }
        let expected = n_pings as f64 / 10.0;
        let chi2: f64 = tenths
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 9 degrees of freedom: P(chi2 > 42) < 1e-6.
        assert!(chi2 < 42.0, "{tenths:?} chi2 {chi2}");
        let naive: Vec<u64> = (0..every * 100)
            .filter(|i| i % every == 0)
            .map(|i| i % batch)
            .collect();
        assert!(naive.iter().all(|&p| p == 0), "the aliasing this avoids");
    }

    #[test]
    fn default_ping_period() {
        assert_eq!(default_ping_every(1_000.0), 1);
        assert_eq!(default_ping_every(10_000.0), 2);
        assert_eq!(default_ping_every(1_000_000.0), 200);
        assert_eq!(default_ping_every(10_000_000.0), 2_000);
    }
}
