//! The receiving side shared by the reflector and the embedded-timestamp run: every message's
//! number checked, its pings handed on.

use super::{SubReport, NUMBER, PING};
use crate::BenchError;
use peregrine::{OfferError, Publisher, Subscriber};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Sequence checking of a stream of numbered messages: gaps, duplicates, reordering.
#[derive(Debug, Default, Clone)]
pub struct SequenceCheck {
    /// The number expected next.
    pub(super) next: u64,
    pub received: u64,
    /// Messages missing when a later one arrived (a later arrival of one is out of order).
    pub gaps: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Numbers missed and not yet seen (a bounded record of the latest gaps).
    pub(super) missing: VecDeque<(u64, u64)>,
}

impl SequenceCheck {
    /// Accounts message number `n`.
    #[inline]
    pub fn see(&mut self, n: u64) {
        self.received += 1;
        if n == self.next {
            self.next += 1;
            return;
        }
        if n > self.next {
            self.gaps += n - self.next;
            self.missing.push_back((self.next, n));
            if self.missing.len() > 1024 {
                self.missing.pop_front();
            }
            self.next = n + 1;
            return;
        }
        // An old number: a late arrival fills a recorded gap; anything else is a duplicate.
        if let Some(k) = self.missing.iter().position(|&(a, b)| (a..b).contains(&n)) {
            let (a, b) = self.missing[k];
            self.out_of_order += 1;
            self.gaps -= 1;
            self.missing.remove(k);
            if a < n {
                self.missing.insert(k, (a, n));
            }
            if n + 1 < b {
                self.missing.insert(k + usize::from(a < n), (n + 1, b));
            }
        } else {
            self.duplicates += 1;
        }
    }
}

/// Runs `on_message` for every message until the publisher ends the session.
pub(super) fn subscribe_loop(
    sub: &mut Subscriber,
    connect_timeout: Duration,
    mut on_message: impl FnMut(&[u8]),
) -> Result<(), BenchError> {
    let start = Instant::now();
    while !sub.is_connected() {
        sub.poll(&mut |m| on_message(m.payload), 1);
        if start.elapsed() > connect_timeout {
            return Err(BenchError::Child(format!(
                "no publisher within {} s",
                connect_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    loop {
        let n = sub.poll(&mut |m| on_message(m.payload), 256);
        // Losses show in the sequence check (the numbers in the messages); the transport's
        // events are drained so they do not pile up.
        while sub.next_event().is_some() {}
        if n == 0 && !sub.is_connected() {
            return Ok(());
        }
        sub.idle(n);
    }
}

/// One message of a ping run's load stream, on the subscriber: checks its number and size,
/// reflects it if it is a ping.
pub(super) fn on_load_message(
    payload: &[u8],
    size: usize,
    r: &mut SubReport,
    check: &mut SequenceCheck,
    reflect: &mut Publisher,
) -> Result<(), OfferError> {
    let Some(head) = payload.get(..8) else {
        r.corrupt += 1;
        return Ok(());
    };
    let word = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    check.see(word & NUMBER);
    if payload.len() != size {
        r.corrupt += 1;
    }
    if word & PING != 0 {
        crate::measure::pingpong::offer_spinning(reflect, payload)?;
        r.reflected += 1;
    }
    Ok(())
}
