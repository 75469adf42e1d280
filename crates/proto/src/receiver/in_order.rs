//! The common case in a loop of its own: a run of whole messages (DATA, BEGIN|END), each the
//! next in sequence of the session of the frame before, from the source that session is bound
//! to, with nothing missing before it. A datagram of small messages, or a TCP read of 64 KiB,
//! is mostly such a run.
//!
//! The general path takes each frame apart field by field and through several units (the
//! frame iterator's checks, the DATA checks, the session table, the jump bound, repair,
//! reassembly). Here the fixed part of a frame is four little-endian words
//! ([`peregrine_wire::data::words`]), each compared with the one value it may have. Anything
//! else ends the run and goes through the general path, frame by frame, so the run takes a
//! subset of what the general path accepts, and for each frame it takes it has the same
//! effects: the same messages, the same counters, the same state (the property test below runs
//! both on the same input and compares).

use super::Receiver;
use crate::events::Message;
use peregrine_wire::align_frame;
use peregrine_wire::data::{words, DATA_HEADER_LEN, MAX_MESSAGE_LEN};
use peregrine_wire::header::{flags, FrameType};
use std::net::SocketAddr;

const WHOLE: u16 = flags::BEGIN | flags::END;
const WHOLE_URGENT: u16 = WHOLE | flags::URGENT;

fn word_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

impl Receiver {
    /// Delivers the run of in-order whole messages at the start of `bytes` (at most `limit`),
    /// from `source`; returns the bytes it took (a multiple of the frame alignment, or the
    /// whole of `bytes`) and the messages delivered. `(0, 0)` when the first frame is not such
    /// a message: the caller takes it through the general path.
    #[inline]
    pub(super) fn in_order_run<F: FnMut(Message<'_>)>(
        &mut self,
        bytes: &[u8],
        source: SocketAddr,
        now_ns: u64,
        handler: &mut F,
        limit: usize,
    ) -> (usize, usize) {
        #[cfg(test)]
        if self.general_only {
            return (0, 0);
        }
        let repairs = self.cfg.nak.is_some();
        let stream_id = self.cfg.stream_id;
        let Some(s) = self.sessions.get_mut(self.last_session) else {
            return (0, 0);
        };
        // With repair, `[next_sequence, high)` is what is held and missing: empty, nothing
        // is. A late join not settled yet takes the general path (its first frame settles it).
        if s.tentative || (repairs && s.high != s.next_sequence) || s.source != source {
            return (0, 0);
        }
        let (session_id, first) = (s.session_id, s.next_sequence);
        let (mut at, mut next) = (0usize, first);
        let (mut payload_bytes, mut frame_bytes) = (0u64, 0u64);
        let (whole, whole_urgent) = (
            words::flags_session(WHOLE, session_id),
            words::flags_session(WHOLE_URGENT, session_id),
        );
        while ((next - first) as usize) < limit && bytes.len() - at >= DATA_HEADER_LEN {
            let h = &bytes[at..at + DATA_HEADER_LEN];
            // Four words, four compares: magic, version and type; flags, reserved and
            // session; stream and a message length equal to the payload's; the sequence.
            let length_type = word_at(h, words::LENGTH_TYPE);
            let len = words::frame_length(length_type) as usize;
            let flags_session = word_at(h, words::FLAGS_SESSION);
            if length_type != words::length_type(len as u32, FrameType::Data)
                || (flags_session != whole && flags_session != whole_urgent)
                || word_at(h, words::SEQUENCE) != next
                || next == u64::MAX
                || len < DATA_HEADER_LEN
                || len > bytes.len() - at
            {
                break;
            }
            let message_len = (len - DATA_HEADER_LEN) as u32;
            if message_len > MAX_MESSAGE_LEN
                || word_at(h, words::STREAM_LENGTH) != words::stream_length(stream_id, message_len)
            {
                break;
            }
            handler(Message {
                payload: &bytes[at + DATA_HEADER_LEN..at + len],
                sequence: next,
                session_id,
            });
            next += 1;
            payload_bytes += u64::from(message_len);
            frame_bytes += len.next_multiple_of(8) as u64;
            at += align_frame(len).min(bytes.len() - at);
        }
        let n = next - first;
        if n == 0 {
            return (0, 0);
        }
        // What the general path does for each frame, once for the run.
        s.next_sequence = next;
        if repairs {
            s.high = next;
        }
        s.last_heard_ns = now_ns;
        if s.source_b.is_some() {
            s.last_from_b = false;
        }
        s.reassembly.whole();
        for c in [&mut s.counters, &mut self.counters] {
            c.messages += n;
            c.bytes += payload_bytes;
        }
        self.frames_seen += n;
        self.frame_bytes_seen += frame_bytes;
        (at, n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NakConfig, Progress, Receiver, ReceiverConfig};
    use crate::events::{Message, SubscriberEvent};
    use crate::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
    use proptest::prelude::*;
    use std::net::SocketAddr;

    const A: &str = "127.0.0.1:5000";
    const B: &str = "127.0.0.2:5000";

    fn receiver(repair: bool, general_only: bool) -> Receiver {
        let mut r = Receiver::new(ReceiverConfig {
            nak: repair.then(|| NakConfig::new(false)),
            ..ReceiverConfig::new(7, 1)
        });
        r.general_only = general_only;
        r
    }

    /// Everything a receiver shows or keeps, to compare two of them.
    fn state(r: &mut Receiver) -> String {
        let events: Vec<SubscriberEvent> = std::iter::from_fn(|| r.next_event()).collect();
        format!(
            "{:?} {:?} {:?} {:?} {} {} {} {} {:?}",
            r.counters(),
            r.stats(),
            r.footprint(),
            r.sessions,
            r.frames_seen,
            r.frame_bytes_seen,
            r.datagrams_seen,
            r.last_session,
            events,
        )
    }

    /// Hands `d` to `r` from `source` in pieces of at most `limit` messages (resuming where
    /// each stopped, as the drivers do); returns the messages.
    fn feed(r: &mut Receiver, d: &[u8], source: &str, now: u64, limit: usize) -> Vec<String> {
        let mut got = Vec::new();
        let mut start = 0;
        loop {
            let (_, p) = r.on_datagram(
                d,
                start,
                source.parse::<SocketAddr>().unwrap(),
                now,
                &mut |m: Message<'_>| {
                    got.push(format!("{}/{}:{:?}", m.session_id, m.sequence, m.payload))
                },
                limit,
            );
            match p {
                Progress::Done => return got,
                Progress::Resume(at) => start = at,
            }
        }
    }

    /// Datagrams (or stream chunks) of two sessions, messages of `sizes` (some fragmented).
    fn traffic(sizes: &[usize], packing: Packing, urgent: bool) -> Vec<Vec<u8>> {
        let mode = if urgent {
            SendMode::Urgent
        } else {
            SendMode::Normal {
                batch_bytes: 4000,
                batch_interval_ns: u64::MAX,
            }
        };
        let mut senders: Vec<Sender> = [9, 10]
            .map(|session| {
                Sender::new(SenderConfig {
                    mode,
                    ..SenderConfig::new(session, 7, packing, 1472)
                })
            })
            .into();
        let mut out = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            let mut sink = |b: Batch<'_>| -> Result<(), ()> {
                match packing {
                    Packing::Datagrams => out.extend(b.datagrams().map(|d| d.to_vec())),
                    Packing::Stream => out.push(b.bytes.to_vec()),
                }
                Ok(())
            };
            // One message in seven is the other session's.
            let s = &mut senders[usize::from(k % 7 == 6)];
            let payload: Vec<u8> = (0..n).map(|i| (i + k) as u8).collect();
            s.offer(&payload, 0, &mut sink).unwrap();
        }
        for s in &mut senders {
            s.flush(0, &mut |b: Batch<'_>| -> Result<(), ()> {
                out.push(b.bytes.to_vec());
                Ok(())
            })
            .unwrap();
        }
        out
    }

    #[derive(Debug, Clone)]
    enum Change {
        Drop(usize),
        Duplicate(usize),
        Swap(usize),
        Corrupt(usize, usize, u8),
        OtherSource(usize),
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            any::<usize>().prop_map(Change::Drop),
            any::<usize>().prop_map(Change::Duplicate),
            any::<usize>().prop_map(Change::Swap),
            (any::<usize>(), any::<usize>(), any::<u8>())
                .prop_map(|(d, b, v)| Change::Corrupt(d, b, v)),
            any::<usize>().prop_map(Change::OtherSource),
        ]
    }

    proptest! {
        /// The in-order run and the general path, on the same datagrams (lost, duplicated,
        /// reordered, corrupted, from another source, delivered a few messages at a time):
        /// the same messages in the same order, and the same counters, statistics, events,
        /// sessions and repair state after each datagram.
        #[test]
        fn the_in_order_run_does_what_the_general_path_does(
            sizes in proptest::collection::vec(prop_oneof![8 => 0usize..80, 1 => 1400usize..3000], 1..120),
            changes in proptest::collection::vec(change(), 0..6),
            stream in any::<bool>(),
            urgent in any::<bool>(),
            repair in any::<bool>(),
            limit in prop_oneof![Just(usize::MAX), 1usize..4],
        ) {
            let packing = if stream { Packing::Stream } else { Packing::Datagrams };
            let mut d: Vec<(Vec<u8>, &str)> =
                traffic(&sizes, packing, urgent).into_iter().map(|x| (x, A)).collect();
            for c in changes {
                let n = d.len();
                match c {
                    Change::Drop(i) if n > 1 => { d.remove(i % n); }
                    Change::Duplicate(i) => { let x = d[i % n].clone(); d.insert(i % n, x); }
                    Change::Swap(i) if n > 1 => d.swap(i % n, (i + 1) % n),
                    Change::Corrupt(i, b, v) => {
                        let x = &mut d[i % n].0;
                        if !x.is_empty() {
                            let at = b % x.len();
                            x[at] = v;
                        }
                    }
                    Change::OtherSource(i) => d[i % n].1 = B,
                    _ => {}
                }
            }
            let mut fast = receiver(repair, false);
            let mut general = receiver(repair, true);
            for (k, (x, source)) in d.iter().enumerate() {
                let now = k as u64 * 1_000;
                prop_assert_eq!(
                    feed(&mut fast, x, source, now, limit),
                    feed(&mut general, x, source, now, limit)
                );
                prop_assert_eq!(state(&mut fast), state(&mut general));
            }
        }
    }

    /// Messages 0-5, then 12-17 (the datagram of 6-11 lost, no repair): the run takes what
    /// is in sequence, the general path takes the first frame after the gap (and reports the
    /// loss), and the run goes on after it. The same datagram again is all duplicates; from
    /// another source, all foreign.
    #[test]
    fn a_run_leaves_what_is_out_of_sequence_or_foreign_to_the_general_path() {
        let d: Vec<Vec<u8>> = {
            let mut s = Sender::new(SenderConfig {
                mode: SendMode::Normal {
                    batch_bytes: 6 * 64,
                    batch_interval_ns: u64::MAX,
                },
                ..SenderConfig::new(9, 7, Packing::Datagrams, 1472)
            });
            let mut out = Vec::new();
            for k in 0..18u8 {
                s.offer(&[k; 32], 0, &mut |b: Batch<'_>| -> Result<(), ()> {
                    out.push(b.bytes.to_vec());
                    Ok(())
                })
                .unwrap();
            }
            out
        };
        assert_eq!(d.len(), 3, "three datagrams of six messages");
        let mut r = receiver(false, false);
        let first = feed(&mut r, &d[0], A, 0, usize::MAX);
        assert_eq!(first.len(), 6);
        let after_gap = feed(&mut r, &d[2], A, 0, usize::MAX);
        assert_eq!(after_gap.len(), 6);
        assert!(after_gap[0].starts_with("9/12:"), "{after_gap:?}");
        assert_eq!((r.counters().messages, r.counters().lost), (12, 6));
        assert!(std::iter::from_fn(|| r.next_event()).any(|e| matches!(
            e,
            SubscriberEvent::Lost {
                from_sequence: 6,
                count: 6,
                ..
            }
        )));
        assert!(feed(&mut r, &d[2], A, 0, usize::MAX).is_empty());
        assert_eq!(r.counters().duplicates, 6);
        assert!(feed(&mut r, &d[2], B, 0, usize::MAX).is_empty());
        assert_eq!(r.stats().foreign_source, 6);
    }
}
