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
    /// Subscriber slots freed because their process died without detaching (shared memory),
    /// or receivers dropped after going silent or acknowledging no data (network).
    pub subscribers_reaped: u64,
    /// Subscribers that held the publisher back longer than `flow_timeout_ms`: a UDP receiver
    /// dropped from flow control, a TCP subscriber disconnected (network).
    pub flow_dropped: u64,
    /// New network receivers not admitted: over the admission rate, or the table full.
    pub joins_refused: u64,
    /// Offers refused by the rate limit (`rate=`).
    pub rate_limited: u64,
    /// NAK frames received (network).
    pub naks_received: u64,
    /// Frames sent again in answer to NAKs.
    pub retransmitted: u64,
    /// Frames asked for that had left the retention buffer (the receiver reports them lost).
    pub retransmit_unavailable: u64,
    /// Frames asked for and not retransmitted to bound the work: already retransmitted
    /// moments ago, beyond the per-NAK cap, over the retransmission rate, or never sent.
    pub retransmit_refused: u64,
}

impl PublisherCounters {
    /// The counters' names, in the order of [`values`](Self::values) (stable: `peregrine stat`,
    /// Prometheus metric names).
    pub const NAMES: [&'static str; 11] = [
        "messages",
        "bytes",
        "back_pressured",
        "subscribers_reaped",
        "flow_dropped",
        "joins_refused",
        "rate_limited",
        "naks_received",
        "retransmitted",
        "retransmit_unavailable",
        "retransmit_refused",
    ];

    /// The counters' values, in the order of [`NAMES`](Self::NAMES).
    pub fn values(&self) -> [u64; 11] {
        [
            self.messages,
            self.bytes,
            self.back_pressured,
            self.subscribers_reaped,
            self.flow_dropped,
            self.joins_refused,
            self.rate_limited,
            self.naks_received,
            self.retransmitted,
            self.retransmit_unavailable,
            self.retransmit_refused,
        ]
    }
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
    /// Frames received twice (a retransmission or a duplicated datagram) and dropped.
    pub duplicates: u64,
    /// NAK frames sent (network, loss repair on).
    pub naks_sent: u64,
    /// Frames received with the RETRANSMIT flag.
    pub retransmits_received: u64,
    /// Missing frames that arrived later (retransmitted or reordered): gaps repaired.
    pub recovered: u64,
}

impl SubscriberCounters {
    /// The counters' names, in the order of [`values`](Self::values) (stable: `peregrine stat`,
    /// Prometheus metric names).
    pub const NAMES: [&'static str; 9] = [
        "messages",
        "bytes",
        "gaps",
        "lost",
        "corrupt_frames",
        "duplicates",
        "naks_sent",
        "retransmits_received",
        "recovered",
    ];

    /// The counters' values, in the order of [`NAMES`](Self::NAMES).
    pub fn values(&self) -> [u64; 9] {
        [
            self.messages,
            self.bytes,
            self.gaps,
            self.lost,
            self.corrupt_frames,
            self.duplicates,
            self.naks_sent,
            self.retransmits_received,
            self.recovered,
        ]
    }
}

impl SubscriberCounters {
    /// Adds another session's counters to these.
    pub fn accumulate(&mut self, other: &SubscriberCounters) {
        self.messages += other.messages;
        self.bytes += other.bytes;
        self.gaps += other.gaps;
        self.lost = self.lost.saturating_add(other.lost); // a hostile sender can make it huge
        self.corrupt_frames += other.corrupt_frames;
        self.duplicates += other.duplicates;
        self.naks_sent += other.naks_sent;
        self.retransmits_received += other.retransmits_received;
        self.recovered += other.recovered;
    }
}
