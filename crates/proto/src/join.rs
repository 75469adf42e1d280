//! When a subscriber asks a publisher that has not answered yet to take it on (a UDP STATUS
//! JOIN, a TCP connect), sans I/O.
//!
//! A subscriber learns a publisher's address from a URI or an advertisement, and an
//! advertisement can be forged: the address may be anybody's. So the attempts back off and
//! the backoff has a ceiling well above a second: the first attempts come quickly (10 ms,
//! doubling to 1 s) for `fast_for_ns` (10 s), then the interval keeps doubling up to
//! `max_interval_ns` (30 s). A destination that never answers gets about 20 attempts in its
//! first minute and then one every 30 s, whatever else happens; a real publisher that starts
//! late is still found, within the interval reached by then. An answer resets the schedule,
//! so a publisher that restarts is found again quickly.
//!
//! ```
//! use peregrine_proto::join::{JoinBackoff, JoinSchedule};
//!
//! let mut j = JoinBackoff::new(JoinSchedule::default(), 0);
//! assert!(j.poll(0)); // at once
//! assert!(!j.poll(5_000_000));
//! assert!(j.poll(10_000_000)); // 10 ms later, then 20 ms, 40 ms, ...
//! assert_eq!(j.next_ns(), 30_000_000);
//! ```

/// The shape of the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinSchedule {
    /// The first interval (10 ms); each attempt doubles it...
    pub first_interval_ns: u64,
    /// ...up to this (1 s) for the first `fast_for_ns` (10 s) of trying...
    pub fast_max_interval_ns: u64,
    pub fast_for_ns: u64,
    /// ...and up to this (30 s) after.
    pub max_interval_ns: u64,
}

impl Default for JoinSchedule {
    fn default() -> Self {
        JoinSchedule {
            first_interval_ns: 10_000_000,
            fast_max_interval_ns: 1_000_000_000,
            fast_for_ns: 10_000_000_000,
            max_interval_ns: 30_000_000_000,
        }
    }
}

/// One destination's attempts. See the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinBackoff {
    schedule: JoinSchedule,
    /// When trying started (since the last answer).
    since_ns: u64,
    next_ns: u64,
    interval_ns: u64,
    /// Attempts since the last answer.
    pub unanswered: u64,
}

impl JoinBackoff {
    /// Starts trying at `now_ns` (the first attempt is due at once).
    pub fn new(schedule: JoinSchedule, now_ns: u64) -> Self {
        JoinBackoff {
            schedule,
            since_ns: now_ns,
            next_ns: now_ns,
            interval_ns: schedule.first_interval_ns,
            unanswered: 0,
        }
    }

    /// Whether an attempt is due at `now_ns`; if so it counts as made and the next one is
    /// scheduled.
    pub fn poll(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_ns {
            return false;
        }
        let s = &self.schedule;
        let cap = if now_ns.saturating_sub(self.since_ns) < s.fast_for_ns {
            s.fast_max_interval_ns
        } else {
            s.max_interval_ns
        };
        self.next_ns = now_ns.saturating_add(self.interval_ns);
        self.interval_ns = self.interval_ns.saturating_mul(2).min(cap.max(1));
        self.unanswered += 1;
        true
    }

    /// When the next attempt is due.
    pub fn next_ns(&self) -> u64 {
        self.next_ns
    }

    /// The destination answered: when it is lost, trying starts over at `now_ns`.
    pub fn answered(&mut self, now_ns: u64) {
        *self = JoinBackoff::new(self.schedule, now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Issue 14, item 8: a forged advertisement made every subscriber JOIN its address once a
    /// second for as long as it was advertised. Now: about 20 in the first minute, then one per
    /// 30 s.
    #[test]
    fn a_destination_that_never_answers_gets_a_bounded_number_of_attempts() {
        let mut j = JoinBackoff::new(JoinSchedule::default(), 0);
        let mut at = Vec::new();
        let mut now = 0;
        while now <= 3600 * S {
            if j.poll(now) {
                at.push(now);
            }
            now += S / 1000;
        }
        let first_minute = at.iter().filter(|&&t| t < 60 * S).count();
        assert!((15..=25).contains(&first_minute), "{first_minute}: {at:?}");
        // From the second minute on, never more than one per 30 s.
        for w in at.windows(2).filter(|w| w[0] >= 60 * S) {
            assert!(w[1] - w[0] >= 30 * S - S / 1000, "{w:?}");
        }
        assert!(at.len() <= first_minute + 3540 / 30 + 1, "{}", at.len());
    }

    #[test]
    fn the_first_attempts_come_quickly_and_an_answer_starts_over() {
        let mut j = JoinBackoff::new(JoinSchedule::default(), 0);
        let mut at = Vec::new();
        let mut now = 0;
        while now < 3 * S {
            if j.poll(now) {
                at.push(now / 1_000_000);
            }
            now += 1_000_000;
        }
        assert_eq!(at, [0, 10, 30, 70, 150, 310, 630, 1270, 2270]);
        // A late publisher answers: connected. Lost again later: quick attempts again.
        j.answered(100 * S);
        assert!(j.poll(100 * S));
        assert!(j.poll(100 * S + 10_000_000));
        assert_eq!(j.unanswered, 2);
    }

    #[test]
    fn time_going_backwards_or_to_the_end_of_time_is_harmless() {
        let mut j = JoinBackoff::new(JoinSchedule::default(), u64::MAX - 5);
        assert!(j.poll(u64::MAX - 5));
        assert!(!j.poll(0));
        assert!(j.poll(u64::MAX));
    }
}
