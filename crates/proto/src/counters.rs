//! Per-session counters (DESIGN section 5): what a subscriber or publisher can report about
//! one session. Field names are stable: they appear in JSON output.

/// What a publisher counted on one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublisherCounters {
    /// Messages published.
    pub messages: u64,
    /// Payload bytes published.
    pub bytes: u64,
    /// Offers refused because the slowest subscriber had not made room.
    pub back_pressured: u64,
    /// Subscriber slots freed because their process died without detaching.
    pub subscribers_reaped: u64,
}

/// What a subscriber counted on one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriberCounters {
    /// Messages delivered to the application.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Gaps detected (each is one `Lost` event on shared memory).
    pub gaps: u64,
    /// Messages lost for good, summed over all gaps.
    pub lost: u64,
    /// Frames that broke the layout or the protocol and were rejected.
    pub corrupt_frames: u64,
}

impl SubscriberCounters {
    /// Adds another session's counters to these.
    pub fn accumulate(&mut self, other: &SubscriberCounters) {
        self.messages += other.messages;
        self.bytes += other.bytes;
        self.gaps += other.gaps;
        self.lost += other.lost;
        self.corrupt_frames += other.corrupt_frames;
    }
}
