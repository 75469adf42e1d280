//! What a subscriber delivers: messages and events. Shared by every transport.

/// One received message, borrowed from the transport's buffer for the duration of the handler.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub payload: &'a [u8],
    pub sequence: u64,
    pub session_id: u32,
}

/// What happens to a subscriber besides messages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscriberEvent {
    /// Attached to a publisher's session; the first message will carry `first_sequence`.
    Connected {
        session_id: u32,
        first_sequence: u64,
    },
    /// Messages `from_sequence .. from_sequence + count` were lost (overwritten before they were
    /// read, or unrecoverable on a network transport). Delivery carries on after them.
    Lost {
        session_id: u32,
        from_sequence: u64,
        count: u64,
    },
    /// The publisher closed its session.
    PublisherClosed { session_id: u32 },
    /// The publisher's process ended without closing.
    PublisherDied { session_id: u32 },
    /// Attaching failed for a reason that will not pass by itself (retried less often).
    AttachFailed { reason: String },
    /// The session's shared memory was damaged under the subscriber (its segment truncated by
    /// another process): the subscriber detached from it. `reason` names the file.
    SegmentDamaged { session_id: u32, reason: String },
    /// Topic resolution found a publisher of a matching topic; messages follow from `uri`.
    SourceFound {
        topic: String,
        session_id: u32,
        uri: String,
    },
    /// A publisher found by topic resolution went away: `"withdrawn"` (it closed) or
    /// `"expired"` (its advertisements stopped). Messages already sent are still delivered.
    SourceLost {
        topic: String,
        session_id: u32,
        reason: &'static str,
    },
}
