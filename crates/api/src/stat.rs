//! Publishing a context's counters to other processes (`peregrine stat`): the context's
//! counters file, and when each publisher and subscriber writes its values into it.
//!
//! The layout and the reader are in [`peregrine_transport::stat`]. Here is the cadence, chosen
//! so the data path pays next to nothing:
//!
//! - a publisher writes its counters every 256 offers (accepted or refused), and all its values
//!   on the first `flush` or `do_work` call and then on one 100 ms or more after it last wrote
//!   them (the clock is read every 64th call), and on `close`;
//! - a subscriber writes all its values every 64 polls that delivered, after 64 polls in a row
//!   that found nothing since it delivered (so while it waits, not while it delivers), before an
//!   idle strategy that may sleep or block (`backoff`, `block`) waits, and when it hands out an
//!   event.
//!
//! So a reader sees every value at most one of those moments late: a publisher whose loop calls
//! `do_work` (as it must on the network transports) within 100 ms, a subscriber as soon as it
//! waits for messages.

use peregrine_transport::stat::{CountersFile, DEFAULT_CAPACITY};
use std::sync::{Arc, Mutex};

pub use peregrine_transport::stat::{set_process_label, Record, RecordType, ValueKind};

/// A context's counters file, created on first use and shared by the context's clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContextCounters {
    /// `None`: not tried yet; `Some(None)`: it could not be created (values stay private).
    file: Arc<Mutex<Option<Option<Arc<CountersFile>>>>>,
}

impl ContextCounters {
    pub(crate) fn record(
        &self,
        kind: RecordType,
        labels: &[(&str, &str)],
        values: &[(ValueKind, &str)],
    ) -> Record {
        let mut slot = self.file.lock().expect("counters file lock");
        let file = slot.get_or_insert_with(|| match CountersFile::create(DEFAULT_CAPACITY) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(
                    "counters stay private to this process (peregrine stat will not see them): {e}"
                );
                None
            }
        });
        match file {
            Some(f) => f.record(kind, labels, values),
            None => Record::detached(values.len()),
        }
    }
}

/// Value descriptors: `counters` as counters, then `gauges` (for
/// [`Context::counters_record`](crate::Context::counters_record)).
pub fn descriptors(
    counters: &[&'static str],
    gauges: &[&'static str],
) -> Vec<(ValueKind, &'static str)> {
    counters
        .iter()
        .map(|n| (ValueKind::Counter, *n))
        .chain(gauges.iter().map(|n| (ValueKind::Gauge, *n)))
        .collect()
}

/// The transport names of a URI list (`ipc`, `udp+ipc`).
pub(crate) fn transports(uris: &str) -> String {
    let mut names: Vec<&str> = uris
        .split_whitespace()
        .filter_map(|u| u.split_once("://").map(|(s, _)| s))
        .collect();
    names.dedup();
    names.join("+")
}

/// How often (in polls that delivered) a busy subscriber writes all its values.
pub(crate) const SUBSCRIBER_EVERY_POLLS: u32 = 64;
/// How often (in offers) a publisher writes its counters.
pub(crate) const PUBLISHER_EVERY_OFFERS: u32 = 256;
/// How often an idle publisher writes its values, when `flush` or `do_work` is called.
pub(crate) const PUBLISHER_EVERY_NS: u64 = 100_000_000;
/// An idle publisher reads the clock every this many `flush` and `do_work` calls.
pub(crate) const PUBLISHER_CLOCK_CALLS: u32 = 64;
