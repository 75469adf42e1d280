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

/// A [`SubscriberEvent`] as flat fields, for bindings that hand events to other languages (the
/// C ABI's `pg_event`, Python's `peregrine.Event`): the kind's name and the fields it has.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventFields<'a> {
    /// `connected`, `lost`, `publisher_closed`, `publisher_died`, `attach_failed`,
    /// `segment_damaged`, `source_found`, `source_lost`.
    pub kind: &'static str,
    pub session_id: Option<u32>,
    /// `connected`: the first sequence; `lost`: the first one lost.
    pub sequence: Option<u64>,
    /// `lost`: how many.
    pub count: Option<u64>,
    pub topic: Option<&'a str>,
    pub uri: Option<&'a str>,
    /// `attach_failed`, `segment_damaged`: why; `source_lost`: `withdrawn` or `expired`.
    pub reason: Option<&'a str>,
}

impl SubscriberEvent {
    /// The event as flat fields.
    pub fn fields(&self) -> EventFields<'_> {
        let f = EventFields::default();
        match self {
            SubscriberEvent::Connected {
                session_id,
                first_sequence,
            } => EventFields {
                kind: "connected",
                session_id: Some(*session_id),
                sequence: Some(*first_sequence),
                ..f
            },
            SubscriberEvent::Lost {
                session_id,
                from_sequence,
                count,
            } => EventFields {
                kind: "lost",
                session_id: Some(*session_id),
                sequence: Some(*from_sequence),
                count: Some(*count),
                ..f
            },
            SubscriberEvent::PublisherClosed { session_id } => EventFields {
                kind: "publisher_closed",
                session_id: Some(*session_id),
                ..f
            },
            SubscriberEvent::PublisherDied { session_id } => EventFields {
                kind: "publisher_died",
                session_id: Some(*session_id),
                ..f
            },
            SubscriberEvent::AttachFailed { reason } => EventFields {
                kind: "attach_failed",
                reason: Some(reason),
                ..f
            },
            SubscriberEvent::SegmentDamaged { session_id, reason } => EventFields {
                kind: "segment_damaged",
                session_id: Some(*session_id),
                reason: Some(reason),
                ..f
            },
            SubscriberEvent::SourceFound {
                topic,
                session_id,
                uri,
            } => EventFields {
                kind: "source_found",
                session_id: Some(*session_id),
                topic: Some(topic),
                uri: Some(uri),
                ..f
            },
            SubscriberEvent::SourceLost {
                topic,
                session_id,
                reason,
            } => EventFields {
                kind: "source_lost",
                session_id: Some(*session_id),
                topic: Some(topic),
                reason: Some(reason),
                ..f
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_own_kind_and_its_fields() {
        let events = [
            SubscriberEvent::Connected {
                session_id: 1,
                first_sequence: 5,
            },
            SubscriberEvent::Lost {
                session_id: 2,
                from_sequence: 7,
                count: 3,
            },
            SubscriberEvent::PublisherClosed { session_id: 3 },
            SubscriberEvent::PublisherDied { session_id: 4 },
            SubscriberEvent::AttachFailed {
                reason: "no".into(),
            },
            SubscriberEvent::SegmentDamaged {
                session_id: 5,
                reason: "cut".into(),
            },
            SubscriberEvent::SourceFound {
                topic: "t".into(),
                session_id: 6,
                uri: "ipc://x".into(),
            },
            SubscriberEvent::SourceLost {
                topic: "t".into(),
                session_id: 7,
                reason: "expired",
            },
        ];
        let kinds: Vec<&str> = events.iter().map(|e| e.fields().kind).collect();
        assert_eq!(
            kinds,
            [
                "connected",
                "lost",
                "publisher_closed",
                "publisher_died",
                "attach_failed",
                "segment_damaged",
                "source_found",
                "source_lost"
            ]
        );
        let lost = events[1].fields();
        assert_eq!(
            (lost.session_id, lost.sequence, lost.count),
            (Some(2), Some(7), Some(3))
        );
        let found = events[6].fields();
        assert_eq!((found.topic, found.uri), (Some("t"), Some("ipc://x")));
        assert_eq!(events[7].fields().reason, Some("expired"));
        assert_eq!(events[4].fields().session_id, None);
    }
}
