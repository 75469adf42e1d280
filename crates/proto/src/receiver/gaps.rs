//! The loss detector's record of one session: the ranges of sequence numbers found missing
//! ([`Gap`]s, sorted and disjoint), each with when it was found and the clock of its NAKs.
//! A gap opens when a frame (or a heartbeat's `next_sequence`) passes the highest sequence
//! seen, shrinks or splits as retransmissions fill it, and is given up (then reported `Lost`
//! by the receiver) when the sender says it no longer retains it, when its NAKs run out
//! ([`nak::take_due`](super::nak::take_due)), when the publisher leaves, or when memory
//! bounds need the room.

/// Gaps a session keeps open at most; a further one gives up the oldest (reported `Lost`).
pub const MAX_GAPS: usize = 1024;

/// A range of missing sequence numbers of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gap {
    pub start: u64,
    pub end: u64,
    pub detected_ns: u64,
    pub nak_at_ns: u64,
    pub tries: u32,
    pub gave_up: bool,
}

impl Gap {
    /// `[start, end)` found missing at `now_ns`, its first NAK due `delay_ns` later.
    pub(super) fn new(start: u64, end: u64, now_ns: u64, delay_ns: u64) -> Gap {
        Gap {
            start,
            end,
            detected_ns: now_ns,
            nak_at_ns: now_ns.saturating_add(delay_ns),
            tries: 0,
            gave_up: false,
        }
    }
}

/// A session's gaps, sorted by `start` and disjoint.
#[derive(Debug, Default)]
pub(super) struct Gaps(Vec<Gap>);

impl Gaps {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Gap> + '_ {
        self.0.iter()
    }
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Gap> + '_ {
        self.0.iter_mut()
    }

    /// Appends a gap past every gap open (the caller's `high` only moves up).
    pub(super) fn push(&mut self, gap: Gap) {
        debug_assert!(self.0.last().is_none_or(|g| g.end <= gap.start));
        self.0.push(gap);
    }

    /// A retransmission (or a late frame) of sequence `q`: takes `q` out of the gap holding
    /// it, splitting it when `q` was inside. Returns the gap as it was, if `q` was missing.
    pub(super) fn fill(&mut self, q: u64) -> Option<Gap> {
        let k = self.0.iter().position(|g| g.start <= q && q < g.end)?;
        let g = self.0[k];
        let mut parts = Vec::with_capacity(2);
        if g.start < q {
            parts.push(Gap { end: q, ..g });
        }
        if q + 1 < g.end {
            parts.push(Gap { start: q + 1, ..g });
        }
        self.0.splice(k..=k, parts);
        Some(g)
    }

    /// Another receiver asked for `[start, end)` (multicast): the gaps it touches wait until
    /// `until_ns` before asking themselves, since the retransmission will reach the whole
    /// group. Returns how many gaps it held back.
    pub(super) fn suppress(&mut self, start: u64, end: u64, until_ns: u64) -> u64 {
        let mut n = 0;
        for g in self.0.iter_mut() {
            if g.start < end && start < g.end && !g.gave_up {
                g.nak_at_ns = g.nak_at_ns.max(until_ns);
                n += 1;
            }
        }
        n
    }

    /// The sender no longer retains anything below `oldest`: every gap below it is given up,
    /// a gap across it split there (the part above is still asked for).
    pub(super) fn give_up_below(&mut self, oldest: u64) {
        let mut split = Vec::new();
        for g in self.0.iter_mut() {
            if g.end <= oldest {
                g.gave_up = true;
            } else if g.start < oldest {
                split.push(Gap {
                    start: oldest,
                    ..*g
                });
                g.end = oldest;
                g.gave_up = true;
            }
        }
        if !split.is_empty() {
            self.0.extend(split);
            self.0.sort_by_key(|g| g.start);
        }
    }

    /// Gives up every gap (the publisher left).
    pub(super) fn give_up_all(&mut self) {
        for g in &mut self.0 {
            g.gave_up = true;
        }
    }

    /// Gives up the first gap; false when there is none.
    pub(super) fn give_up_front(&mut self) -> bool {
        match self.0.first_mut() {
            Some(g) => {
                g.gave_up = true;
                true
            }
            None => false,
        }
    }

    pub(super) fn front_given_up(&self) -> bool {
        self.0.first().is_some_and(|g| g.gave_up)
    }

    /// Removes the first gap if it was given up and delivery has reached it (`next`).
    pub(super) fn pop_given_up_at(&mut self, next: u64) -> Option<Gap> {
        match self.0.first() {
            Some(g) if g.gave_up && g.start == next => Some(self.0.remove(0)),
            _ => None,
        }
    }

    /// Forgets the gaps that start below `at` (a late join found the history gone).
    pub(super) fn drop_before(&mut self, at: u64) {
        self.0.retain(|g| g.start >= at);
    }

    /// The earliest NAK deadline of a gap still asked for.
    pub(super) fn next_deadline_ns(&self) -> Option<u64> {
        self.0
            .iter()
            .filter(|g| !g.gave_up)
            .map(|g| g.nak_at_ns)
            .min()
    }

    /// Whether `q` lies in a gap.
    pub(super) fn contains(&self, q: u64) -> bool {
        self.0.iter().any(|g| g.start <= q && q < g.end)
    }

    /// Checks that the gaps are sorted, disjoint, not empty and within `[from, to)`; returns
    /// how many sequence numbers they cover.
    pub(super) fn check(&self, from: u64, to: u64) -> Result<u128, &'static str> {
        let mut at = from;
        let mut covered = 0u128;
        for g in &self.0 {
            if g.start < at || g.end <= g.start || g.end > to {
                return Err("gaps unsorted, overlapping or outside");
            }
            at = g.end;
            covered += u128::from(g.end - g.start);
        }
        Ok(covered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(g: &Gaps) -> Vec<(u64, u64, bool)> {
        g.iter().map(|g| (g.start, g.end, g.gave_up)).collect()
    }

    fn open(list: &[(u64, u64)]) -> Gaps {
        let mut g = Gaps::default();
        for (k, &(start, end)) in list.iter().enumerate() {
            g.push(Gap::new(start, end, k as u64 * 1_000, 50_000));
        }
        g
    }

    #[test]
    fn a_new_gap_is_due_after_its_delay_and_found_at_its_time() {
        let g = Gap::new(3, 7, 1_000, 50_000);
        assert_eq!(
            (g.detected_ns, g.nak_at_ns, g.tries, g.gave_up),
            (1_000, 51_000, 0, false)
        );
        assert_eq!(Gap::new(0, 1, u64::MAX - 1, 10).nak_at_ns, u64::MAX);
    }

    #[test]
    fn a_retransmission_splits_its_gap_and_keeps_its_clock() {
        let mut g = open(&[(10, 20), (30, 31)]);
        assert_eq!(g.fill(25), None, "not missing");
        let before = g.fill(15).unwrap();
        assert_eq!((before.start, before.end), (10, 20));
        assert_eq!(
            ranges(&g),
            [(10, 15, false), (16, 20, false), (30, 31, false)]
        );
        // Both halves keep the time the gap was found (recovery time) and its NAK clock.
        assert!(g
            .iter()
            .take(2)
            .all(|x| x.detected_ns == 0 && x.nak_at_ns == 50_000));
        // The ends of a gap shrink it; its only frame closes it.
        g.fill(10);
        g.fill(19);
        g.fill(30);
        assert_eq!(ranges(&g), [(11, 15, false), (16, 19, false)]);
        assert_eq!(g.check(11, 19), Ok(7));
    }

    #[test]
    fn another_receivers_nak_holds_back_only_the_gaps_it_touches() {
        let mut g = open(&[(0, 5), (10, 15), (20, 25)]);
        g.give_up_front();
        // [4, 12) touches the first (given up: left alone) and the second.
        assert_eq!(g.suppress(4, 12, 2_000_000), 1);
        let at: Vec<u64> = g.iter().map(|x| x.nak_at_ns).collect();
        assert_eq!(at, [50_000, 2_000_000, 52_000]);
        // A later deadline already set is kept.
        assert_eq!(g.suppress(10, 11, 10), 1);
        assert_eq!(g.iter().nth(1).unwrap().nak_at_ns, 2_000_000);
        assert_eq!(g.next_deadline_ns(), Some(52_000));
    }

    #[test]
    fn the_senders_retention_gives_up_below_it_and_splits_the_gap_across_it() {
        let mut g = open(&[(0, 5), (10, 20), (30, 40)]);
        g.give_up_below(15);
        assert_eq!(
            ranges(&g),
            [
                (0, 5, true),
                (10, 15, true),
                (15, 20, false),
                (30, 40, false)
            ]
        );
        assert_eq!(g.check(0, 40), Ok(5 + 10 + 10));
        // Delivery at 0 takes the given-up front gaps in order, and stops at one still open.
        assert_eq!(g.pop_given_up_at(1), None, "delivery has not reached it");
        assert_eq!(g.pop_given_up_at(0).map(|x| (x.start, x.end)), Some((0, 5)));
        assert_eq!(
            g.pop_given_up_at(10).map(|x| (x.start, x.end)),
            Some((10, 15))
        );
        assert_eq!(g.pop_given_up_at(15), None, "still asked for");
    }

    #[test]
    fn giving_up_the_front_or_all_marks_them_and_none_is_due_after() {
        let mut g = Gaps::default();
        assert!(!g.give_up_front());
        g = open(&[(1, 2), (3, 4)]);
        assert!(g.give_up_front() && g.front_given_up());
        assert_eq!(g.next_deadline_ns(), Some(51_000));
        g.give_up_all();
        assert_eq!(g.next_deadline_ns(), None);
        assert!(g.contains(3) && !g.contains(2));
        g.drop_before(3);
        assert_eq!(ranges(&g), [(3, 4, true)]);
    }

    #[test]
    fn the_check_finds_gaps_out_of_order_or_outside_their_range() {
        let g = open(&[(5, 6), (8, 9)]);
        assert_eq!(g.check(5, 9), Ok(2));
        assert!(g.check(6, 9).is_err(), "starts before the range");
        assert!(g.check(5, 8).is_err(), "ends past it");
        let mut bad = Gaps::default();
        bad.0.push(Gap::new(8, 9, 0, 0));
        bad.0.push(Gap::new(5, 6, 0, 0));
        assert!(bad.check(0, 10).is_err(), "unsorted");
    }
}
