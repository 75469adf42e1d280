//! The jump bound (docs/protocol.md §13): a frame that would move a session further than a
//! legitimate sender can is believed only when a second frame from the source confirms the
//! new position. Until then it is held, one per session, the latest replacing an unconfirmed
//! one. So one datagram can neither blind a session (move it so far ahead that the real frames
//! look old) nor make it report a loss it has no evidence of.

/// What a frame says about a session's position: kept while a jump waits for confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    Data { sequence: u64 },
    Heartbeat { next: u64, oldest: u64 },
    Bye { final_next: u64 },
}

impl Claim {
    /// One past the last sequence number it says was sent.
    fn reach(self) -> u64 {
        match self {
            Claim::Data { sequence } => sequence.saturating_add(1),
            Claim::Heartbeat { next, .. } => next,
            Claim::Bye { final_next } => final_next,
        }
    }
}

/// Whether a frame reaching `end` skips more than `bound` sequence numbers past `seen`, what
/// the session has seen. One compare for a frame in order.
#[inline]
pub(super) fn beyond(seen: u64, end: u64, bound: u64) -> bool {
    end > seen && end - seen > bound
}

/// The frame a session holds while its jump waits for a second witness.
#[derive(Debug, Default)]
pub(super) struct Suspect {
    claim: Option<Claim>,
    /// A DATA claim's frame (the allocation kept for reuse).
    frame: Vec<u8>,
}

/// What [`Suspect::offer`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Held, not acted on; `replaced` when it took the place of an unconfirmed claim.
    Held { replaced: bool },
    /// Two witnesses agree: act on both, in this order (a BYE last), each with its frame
    /// (a DATA claim's bytes; empty for the others).
    Confirmed {
        first: (Claim, Vec<u8>),
        second: (Claim, Vec<u8>),
    },
}

impl Suspect {
    /// Bytes of the frame held.
    pub(super) fn bytes(&self) -> usize {
        self.frame.len()
    }

    /// A frame beyond the bound (`frame`: a DATA claim's bytes): confirms the claim held if
    /// the two lie within `bound` of each other, else is held in its place.
    pub(super) fn offer(&mut self, claim: Claim, frame: &[u8], bound: u64) -> Verdict {
        // The same DATA frame or BYE again (a duplicated datagram) is no second witness; an
        // idle publisher repeats its heartbeat, which is.
        let confirms = |prev: Claim| {
            (prev != claim || matches!(claim, Claim::Heartbeat { .. }))
                && prev.reach().abs_diff(claim.reach()) <= bound
        };
        match self.claim {
            Some(prev) if confirms(prev) => {
                self.claim = None;
                let bytes = |c: Claim, held: &[u8]| -> Vec<u8> {
                    match c {
                        Claim::Data { .. } if c == prev => held.to_vec(),
                        Claim::Data { .. } => frame.to_vec(),
                        _ => Vec::new(),
                    }
                };
                // A BYE ends the session: act on it last.
                let (first, second) = if matches!(prev, Claim::Bye { .. }) {
                    (claim, prev)
                } else {
                    (prev, claim)
                };
                let verdict = Verdict::Confirmed {
                    first: (first, bytes(first, &self.frame)),
                    second: (second, bytes(second, &self.frame)),
                };
                self.frame.clear();
                verdict
            }
            prev => {
                self.claim = Some(claim);
                self.frame.clear();
                if let Claim::Data { .. } = claim {
                    self.frame.extend_from_slice(frame);
                }
                Verdict::Held {
                    replaced: prev.is_some(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: u64 = 100;

    fn data(sequence: u64) -> Claim {
        Claim::Data { sequence }
    }

    #[test]
    fn a_frame_in_order_or_within_the_bound_is_not_a_jump() {
        assert!(!beyond(10, 10, BOUND), "in order");
        assert!(!beyond(10, 5, BOUND), "old");
        assert!(!beyond(10, 110, BOUND), "at the bound");
        assert!(beyond(10, 111, BOUND));
        assert!(!beyond(0, u64::MAX, u64::MAX), "no bound (TCP)");
    }

    #[test]
    fn a_jump_waits_for_a_second_frame_near_it_and_both_are_acted_on_in_order() {
        let mut s = Suspect::default();
        assert_eq!(
            s.offer(data(5_000), b"first", BOUND),
            Verdict::Held { replaced: false }
        );
        assert_eq!(s.bytes(), 5);
        assert_eq!(
            s.offer(data(5_001), b"second", BOUND),
            Verdict::Confirmed {
                first: (data(5_000), b"first".to_vec()),
                second: (data(5_001), b"second".to_vec()),
            }
        );
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn a_second_frame_far_from_the_first_replaces_it() {
        let mut s = Suspect::default();
        s.offer(data(5_000), b"a", BOUND);
        assert_eq!(
            s.offer(data(9_000), b"b", BOUND),
            Verdict::Held { replaced: true }
        );
        // Confirmed by a heartbeat near the second: the second's frame is the one kept.
        let hb = Claim::Heartbeat {
            next: 9_001,
            oldest: 0,
        };
        assert_eq!(
            s.offer(hb, &[], BOUND),
            Verdict::Confirmed {
                first: (data(9_000), b"b".to_vec()),
                second: (hb, vec![]),
            }
        );
    }

    #[test]
    fn the_same_frame_twice_is_no_witness_but_a_repeated_heartbeat_is() {
        let mut s = Suspect::default();
        s.offer(data(5_000), b"x", BOUND);
        assert_eq!(
            s.offer(data(5_000), b"x", BOUND),
            Verdict::Held { replaced: true },
            "a duplicated datagram"
        );
        let bye = Claim::Bye { final_next: 7_000 };
        let mut s = Suspect::default();
        s.offer(bye, &[], BOUND);
        assert_eq!(s.offer(bye, &[], BOUND), Verdict::Held { replaced: true });
        let hb = Claim::Heartbeat {
            next: 7_000,
            oldest: 6_000,
        };
        let mut s = Suspect::default();
        s.offer(hb, &[], BOUND);
        assert!(matches!(s.offer(hb, &[], BOUND), Verdict::Confirmed { .. }));
    }

    #[test]
    fn a_bye_is_acted_on_last_whichever_came_first() {
        let bye = Claim::Bye { final_next: 7_001 };
        let mut s = Suspect::default();
        s.offer(bye, &[], BOUND);
        assert_eq!(
            s.offer(data(7_000), b"last", BOUND),
            Verdict::Confirmed {
                first: (data(7_000), b"last".to_vec()),
                second: (bye, vec![]),
            }
        );
    }
}
