//! Per-session counters (DESIGN section 5): what a subscriber or publisher can report about
//! one session. Field names are stable: they appear in JSON output.
//!
//! Every counters struct of the crate (these two, the resolver's and the relay's) is declared
//! once, with [`counters!`]: the struct, its `NAMES`, `HELP` and `values()` come from the one
//! list of fields and their doc comments, so `peregrine stat`, the Prometheus exposition and
//! the bindings cannot fall out of step with the struct. (The C API's structs are written out
//! for cbindgen; a test checks them against `NAMES`.)

/// A counter: one value, or one per kind of reason (shown summed).
pub trait Counter {
    fn total(&self) -> u64;
    /// Adds another's count to this one, saturating (a hostile peer can make some huge).
    fn accumulate(&mut self, other: &Self);
}

impl Counter for u64 {
    fn total(&self) -> u64 {
        *self
    }
    fn accumulate(&mut self, other: &Self) {
        *self = self.saturating_add(*other);
    }
}

impl<const N: usize> Counter for [u64; N] {
    fn total(&self) -> u64 {
        self.iter().fold(0, |a, b| a.saturating_add(*b))
    }
    fn accumulate(&mut self, other: &Self) {
        for (a, b) in self.iter_mut().zip(other) {
            *a = a.saturating_add(*b);
        }
    }
}

/// Declares a counters struct: the fields (each `u64`, or an array of `u64` by kind of reason)
/// with their doc comments, and from them `NAMES` (stable: `peregrine stat`, Prometheus metric
/// names), `HELP` (each field's doc comment, one line) and `values()` (arrays summed).
macro_rules! counters {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident: $ty:ty,
            )+
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                pub $field: $ty,
            )+
        }

        impl $name {
            /// How many counters [`values`](Self::values) gives.
            pub const COUNT: usize = [$(stringify!($field)),+].len();

            /// The counters' names, in the order of [`values`](Self::values) (stable:
            /// `peregrine stat`, Prometheus metric names). Counters kept per kind of reason are
            /// summed.
            pub const NAMES: [&'static str; Self::COUNT] = [$(stringify!($field)),+];

            /// Each counter's doc comment as one line (empty when it has none), in the order of
            /// [`NAMES`](Self::NAMES): the help of its Prometheus metric.
            pub const HELP: [&'static str; Self::COUNT] = [$(concat!($($doc),*)),+];

            /// The counters' values, in the order of [`NAMES`](Self::NAMES).
            pub fn values(&self) -> [u64; Self::COUNT] {
                [$($crate::counters::Counter::total(&self.$field)),+]
            }

            /// Adds another's counters to these (another session's, say).
            pub fn accumulate(&mut self, other: &Self) {
                $($crate::counters::Counter::accumulate(&mut self.$field, &other.$field);)+
            }

            /// The help of the counter `name`, trimmed; `None` for an unknown name or one
            /// without a doc comment.
            pub fn help(name: &str) -> Option<&'static str> {
                let i = Self::NAMES.iter().position(|n| *n == name)?;
                Some(Self::HELP[i].trim()).filter(|h| !h.is_empty())
            }
        }
    };
}
pub(crate) use counters;

counters! {
/// What a publisher counted on one session.
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
    /// dropped from flow control, a TCP subscriber disconnected (network), a shared-memory
    /// subscriber left on the old log when the publisher went on in a new one.
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
}

counters! {
/// What a subscriber counted on one session.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolver::ResolverCounters;

    #[test]
    fn names_values_and_help_come_from_the_one_list_in_its_order() {
        let c = SubscriberCounters {
            messages: 1,
            bytes: 2,
            gaps: 3,
            lost: 4,
            corrupt_frames: 5,
            duplicates: 6,
            naks_sent: 7,
            retransmits_received: 8,
            recovered: 9,
        };
        assert_eq!(c.values(), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(SubscriberCounters::NAMES[6], "naks_sent");
        assert_eq!(
            SubscriberCounters::help("naks_sent"),
            Some("NAK frames sent (network, loss repair on).")
        );
        // A doc comment of several lines is one line of help.
        assert_eq!(
            PublisherCounters::help("subscribers_reaped"),
            Some(
                "Subscriber slots freed because their process died without detaching (shared \
                 memory), or receivers dropped after going silent or acknowledging no data \
                 (network)."
            )
        );
        assert_eq!(PublisherCounters::help("nonesuch"), None);
        // A field without a doc comment has no help.
        assert_eq!(ResolverCounters::help("datagrams_received"), None);
    }

    #[test]
    fn counters_by_reason_are_summed_and_everything_accumulates_saturating() {
        let mut r = ResolverCounters::default();
        r.malformed[0] = 2;
        r.malformed[3] = 5;
        r.auth_rejected = [1, 1, 1];
        let at = |name: &str| {
            ResolverCounters::NAMES
                .iter()
                .position(|n| *n == name)
                .unwrap()
        };
        assert_eq!(r.values()[at("malformed")], 7);
        assert_eq!(r.values()[at("auth_rejected")], 3);
        let mut total = r;
        total.accumulate(&r);
        assert_eq!(total.malformed[3], 10);
        assert_eq!(total.values()[at("auth_rejected")], 6);
        let mut s = SubscriberCounters {
            lost: u64::MAX - 1,
            ..Default::default()
        };
        s.accumulate(&SubscriberCounters {
            lost: 5,
            messages: 3,
            ..Default::default()
        });
        assert_eq!((s.lost, s.messages), (u64::MAX, 3));
    }
}
