//! Replaying at the recorded pace: [`Pacer`] spaces messages as they were received.

use std::time::{Duration, Instant};

/// Holds each message of a replay until its place in time: message `m` goes at the replay's
/// start plus `(m.receive_ns - first.receive_ns) / speed`. Messages late already (the replay
/// fell behind) go at once; the lag is not made up by going faster later than recorded.
#[derive(Debug, Clone)]
pub struct Pacer {
    speed: f64,
    first: Option<(u64, Instant)>,
}

impl Pacer {
    /// `speed` 1.0 is the recorded pace, 2.0 twice as fast (more than 0).
    pub fn new(speed: f64) -> Pacer {
        assert!(speed > 0.0 && speed.is_finite(), "a speed of {speed}");
        Pacer { speed, first: None }
    }

    /// How long to wait before the message received at `receive_ns` goes, seen at `now`.
    pub fn delay(&mut self, receive_ns: u64, now: Instant) -> Duration {
        let (t0, w0) = *self.first.get_or_insert((receive_ns, now));
        let offset = receive_ns.saturating_sub(t0) as f64 / self.speed;
        let due = w0 + Duration::from_nanos(offset as u64);
        due.saturating_duration_since(now)
    }

    /// Sleeps until the message received at `receive_ns` is due.
    pub fn wait(&mut self, receive_ns: u64) {
        let d = self.delay(receive_ns, Instant::now());
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_held_to_their_recorded_spacing_over_the_speed() {
        let w0 = Instant::now();
        let mut p = Pacer::new(2.0);
        assert_eq!(p.delay(1_000_000_000, w0), Duration::ZERO);
        // 1 s later as recorded, at twice the speed: 500 ms after the first went.
        assert_eq!(
            p.delay(2_000_000_000, w0 + Duration::from_millis(100)),
            Duration::from_millis(400)
        );
        // Late already: at once.
        assert_eq!(
            p.delay(2_000_000_000, w0 + Duration::from_secs(3)),
            Duration::ZERO
        );
        // Recorded earlier than the first (a clock step back): at once.
        assert_eq!(p.delay(0, w0), Duration::ZERO);
    }
}
