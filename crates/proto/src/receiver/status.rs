//! STATUS towards a session's sender (docs/protocol.md): a keep-alive every
//! `status_interval_ns`, a window update once a quarter of the window the last STATUS announced
//! was consumed, and a confirmation as soon as delivery reaches the position a HEARTBEAT
//! announced (a closing publisher waits for that). Also the JOIN and LEAVE frames.

use super::config::ReceiverConfig;
use peregrine_wire::header::status_flags;
use peregrine_wire::status::{StatusFrame, StatusRepr, STATUS_LEN};

/// When one session's next STATUS is due.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatusSchedule {
    /// When the last STATUS went (`None`: never, send one now).
    last_sent_ns: Option<u64>,
    /// The `next_sequence` it carried.
    reported_next: u64,
    /// Delivery at this position sends a window update: a quarter of the window the last
    /// STATUS announced past `reported_next` (`u64::MAX`: it announced no window). Fixed when
    /// the STATUS goes, so that the check on every delivering poll is one comparison.
    update_at: u64,
    /// The highest `next_sequence` a HEARTBEAT announced.
    announced: u64,
}

impl StatusSchedule {
    /// A session first heard at `next`.
    pub(super) fn new(next: u64) -> Self {
        StatusSchedule {
            last_sent_ns: None,
            reported_next: next,
            update_at: u64::MAX,
            announced: next,
        }
    }

    /// A HEARTBEAT announced the sender is at `next`.
    pub(super) fn announce(&mut self, next: u64) {
        self.announced = self.announced.max(next);
    }

    /// Whether a STATUS is due at `now_ns` with delivery at `next_sequence`: the keep-alive
    /// interval passed, a quarter of the announced window was consumed, or delivery reached
    /// what a HEARTBEAT announced.
    #[inline]
    pub(super) fn due(&self, now_ns: u64, next_sequence: u64, interval_ns: u64) -> bool {
        let keepalive = self
            .last_sent_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= interval_ns);
        let update = next_sequence >= self.update_at;
        // Caught up with what the sender announced (it is idle or closing): say so now.
        let caught_up = self.announced > self.reported_next && next_sequence >= self.announced;
        keepalive || update || caught_up
    }

    /// When the keep-alive is due (0: now, none went yet).
    pub(super) fn keepalive_at(&self, interval_ns: u64) -> u64 {
        self.last_sent_ns
            .map_or(0, |t| t.saturating_add(interval_ns))
    }

    /// A STATUS carrying `next_sequence` and announcing `window` frames (0: none) went at
    /// `now_ns`.
    pub(super) fn sent(&mut self, now_ns: u64, next_sequence: u64, window: u32) {
        self.last_sent_ns = Some(now_ns);
        self.reported_next = next_sequence;
        self.update_at = if window == 0 {
            u64::MAX
        } else {
            next_sequence.saturating_add(u64::from(window / 4).max(1))
        };
    }
}

/// A STATUS frame of this receiver about `session_id`.
pub(super) fn status_frame(
    cfg: &ReceiverConfig,
    session_id: u32,
    next_sequence: u64,
    fl: u16,
    window: u32,
) -> [u8; STATUS_LEN] {
    let mut b = [0u8; STATUS_LEN];
    StatusRepr {
        session_id,
        stream_id: cfg.stream_id,
        receiver_id: cfg.receiver_id,
        next_sequence,
        window,
        flags: fl,
    }
    .emit(&mut StatusFrame::new_unchecked(&mut b[..]));
    b
}

/// A STATUS JOIN frame asking a publisher (whose session is not known yet) to take this
/// receiver on.
pub(super) fn join_frame(cfg: &ReceiverConfig, window: u32) -> [u8; STATUS_LEN] {
    status_frame(cfg, 0, 0, status_flags::JOIN, window)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const INTERVAL: u64 = 100 * MS;

    #[test]
    fn the_first_status_goes_at_once_then_one_each_interval() {
        let mut s = StatusSchedule::new(0);
        assert!(s.due(0, 0, INTERVAL));
        s.sent(0, 0, 0);
        assert!(!s.due(INTERVAL - 1, 0, INTERVAL));
        assert!(s.due(INTERVAL, 0, INTERVAL));
    }

    #[test]
    fn a_quarter_of_the_announced_window_consumed_is_reported_before_the_interval() {
        let mut s = StatusSchedule::new(1_000);
        // A window of 400 frames announced: an update after 100 delivered, not 99.
        s.sent(0, 1_000, 400);
        assert!(!s.due(MS, 1_099, INTERVAL));
        assert!(s.due(MS, 1_100, INTERVAL));
        // The next one counts from what that update carried, in the window it announced.
        s.sent(MS, 1_100, 40);
        assert!(!s.due(2 * MS, 1_109, INTERVAL));
        assert!(s.due(2 * MS, 1_110, INTERVAL));
        // No window announced: no updates.
        s.sent(2 * MS, 1_110, 0);
        assert!(!s.due(3 * MS, 1_000_000, INTERVAL));
        // A window under 4 frames: every frame.
        s.sent(3 * MS, 1_110, 3);
        assert!(!s.due(4 * MS, 1_110, INTERVAL));
        assert!(s.due(4 * MS, 1_111, INTERVAL));
    }

    #[test]
    fn reaching_the_announced_position_is_confirmed_at_once_and_once() {
        let mut s = StatusSchedule::new(0);
        s.sent(0, 0, 0);
        s.announce(50);
        s.announce(40); // an older heartbeat does not move it back
        assert!(!s.due(MS, 49, INTERVAL));
        assert!(s.due(MS, 50, INTERVAL));
        s.sent(MS, 50, 0);
        assert!(!s.due(2 * MS, 50, INTERVAL));
    }

    #[test]
    fn frames_carry_the_receiver_and_the_position() {
        let mut cfg = ReceiverConfig::new(7, 9);
        cfg.window_frames = 0;
        let b = status_frame(&cfg, 3, 42, status_flags::LEAVE, 16);
        let r = StatusRepr::parse(&StatusFrame::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (
                r.session_id,
                r.stream_id,
                r.receiver_id,
                r.next_sequence,
                r.window,
                r.flags
            ),
            (3, 7, 9, 42, 16, status_flags::LEAVE)
        );
        let j = join_frame(&cfg, 5);
        let r = StatusRepr::parse(&StatusFrame::new_checked(&j[..]).unwrap()).unwrap();
        assert_eq!(
            (r.session_id, r.flags, r.window),
            (0, status_flags::JOIN, 5)
        );
    }
}
