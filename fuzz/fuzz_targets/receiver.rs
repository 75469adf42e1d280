//! The receiver, stateful: an arbitrary script of datagrams (raw bytes, or DATA, HEARTBEAT,
//! BYE and NAK frames built from the input so that deep states are reached) from four source
//! addresses, time advancing, the timers (`poll`, `poll_repair`) and TCP's `disconnected` run
//! in between. Never a panic; what it holds stays within its bounds after every step
//! (sessions, gaps, held bytes, the reorder ring's span, held jumps, departed sessions); and a
//! session's messages are delivered in increasing sequence order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_proto::events::{Message, SubscriberEvent};
use peregrine_proto::receiver::{LateJoin, NakConfig, Receiver, ReceiverConfig, MAX_GAPS};
use peregrine_wire::bye::{ByeFrame, ByeRepr, BYE_LEN};
use peregrine_wire::data::{DataFrame, DataRepr};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr};
use std::collections::HashMap;
use std::net::SocketAddr;

const STREAM: u32 = 7;
const MAX_SESSIONS: usize = 4;
const MAX_HELD: usize = 64 << 10;

/// Reads the script.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn u64(&mut self, width: usize) -> u64 {
        let mut b = [0u8; 8];
        let s = self.bytes(width);
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b)
    }
    /// A sequence number: mostly small, sometimes anywhere (a mode byte picks 1, 2, 4 or 8
    /// bytes).
    fn sequence(&mut self) -> u64 {
        let w = [1, 2, 4, 8][usize::from(self.byte().unwrap_or(0) % 4)];
        self.u64(w)
    }
}

fn data(session_id: u32, sequence: u64, fl: u16, payload: &[u8]) -> Vec<u8> {
    let repr = DataRepr {
        session_id,
        stream_id: STREAM,
        sequence,
        message_length: payload.len() as u32,
        flags: fl,
        payload,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DataFrame::new_unchecked(&mut b[..]));
    b
}

fuzz_target!(|script: &[u8]| {
    let mut inp = Input(script);
    let Some(setup) = inp.byte() else { return };
    let nak = match setup % 3 {
        0 => None,
        k => Some(NakConfig {
            max_buffered_bytes: MAX_HELD,
            ..NakConfig::new(k == 2)
        }),
    };
    let late_join = match (setup >> 2) % 4 {
        0 => LateJoin::None,
        1 => LateJoin::Start,
        2 => LateJoin::All,
        _ => LateJoin::Last(100),
    };
    let mut r = Receiver::new(ReceiverConfig {
        max_sessions: MAX_SESSIONS,
        session_timeout_ns: 1_000_000_000,
        window_frames: u32::from(setup >> 4) * 100,
        nak,
        late_join,
        max_jump_frames: if setup & 0x80 != 0 { u64::MAX } else { 64 },
        ..ReceiverConfig::new(STREAM, 1)
    });
    let sources: [SocketAddr; 4] = [
        "10.0.0.1:4000".parse().unwrap(),
        "10.0.0.1:4001".parse().unwrap(),
        "10.0.0.2:4000".parse().unwrap(),
        "127.0.0.1:9".parse().unwrap(),
    ];
    let mut now_ns = 0u64;
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut steps = 0;
    while let Some(op) = inp.byte() {
        steps += 1;
        if steps > 4096 {
            break;
        }
        now_ns += [0, 1_000, 1_000_000, 100_000_000][usize::from(op >> 6)];
        let from = sources[usize::from((op >> 3) & 3)];
        let session = u32::from(op & 1) + 1; // two sessions (and raw frames for any)
        let frame = match op & 7 {
            0 => {
                let len = usize::from(inp.byte().unwrap_or(0)) * 4;
                Some(inp.bytes(len).to_vec())
            }
            1 | 2 => {
                let q = inp.sequence();
                let fl = u16::from(inp.byte().unwrap_or(3) & 0x0f);
                let len = usize::from(inp.byte().unwrap_or(0) % 64);
                let payload = vec![0xa5u8; len];
                // Fragments say a longer message; whole frames their own length.
                let mut f = data(session, q, fl, &payload);
                if fl & 3 != 3 {
                    f[20..24].copy_from_slice(&(len as u32 * 3).to_le_bytes());
                }
                Some(f)
            }
            3 => {
                let next = inp.sequence();
                let behind = inp.sequence();
                let mut b = vec![0u8; 40];
                HeartbeatRepr {
                    session_id: session,
                    stream_id: STREAM,
                    next_sequence: next,
                    oldest_retained: next.saturating_sub(behind),
                }
                .emit(&mut HeartbeatFrame::new_unchecked(&mut b[..]));
                Some(b)
            }
            4 => {
                let mut b = vec![0u8; BYE_LEN];
                ByeRepr {
                    session_id: session,
                    stream_id: STREAM,
                    final_next_sequence: inp.sequence(),
                }
                .emit(&mut ByeFrame::new_unchecked(&mut b[..]));
                Some(b)
            }
            5 => {
                let start = inp.sequence();
                let count = (inp.u64(4) as u32).max(1);
                let ranges = [NakRange {
                    start: start.min(u64::MAX - u64::from(count)),
                    count,
                }];
                let repr = NakRepr {
                    session_id: session,
                    stream_id: STREAM,
                    receiver_id: 2,
                    ranges: NakRanges::new(&ranges).unwrap(),
                };
                let mut b = vec![0u8; repr.buffer_len()];
                repr.emit(&mut NakFrame::new_unchecked(&mut b[..]));
                Some(b)
            }
            6 => {
                if op & 8 != 0 {
                    r.disconnected(from);
                }
                None
            }
            _ => None,
        };
        let mut out_of_order: Vec<(u32, u64)> = Vec::new();
        let mut handler = |m: Message<'_>| {
            let prev = last.insert(m.session_id, m.sequence);
            if prev.is_some_and(|p| m.sequence <= p) {
                out_of_order.push((m.session_id, m.sequence));
            }
        };
        if let Some(f) = frame {
            // Sometimes two frames in one datagram (8-byte aligned), as senders pack them.
            let mut d = f.clone();
            if op & 0x20 != 0 && op & 7 != 0 {
                d.resize(d.len().next_multiple_of(8), 0);
                d.extend_from_slice(&f);
            }
            let start = usize::from(op >> 7) * 3;
            r.on_datagram(&d, start, from, now_ns, &mut handler, usize::MAX);
        }
        r.poll(now_ns, &mut |_, _| {});
        r.poll_repair(now_ns, &mut handler, &mut |_, _| {});
        // A session that was closed, died or was (re)created this step may start over.
        while let Some(ev) = r.next_event() {
            match ev {
                SubscriberEvent::Connected { session_id, .. }
                | SubscriberEvent::PublisherClosed { session_id }
                | SubscriberEvent::PublisherDied { session_id } => {
                    out_of_order.retain(|o| o.0 != session_id);
                    last.remove(&session_id);
                }
                _ => {}
            }
        }
        assert!(
            out_of_order.is_empty(),
            "delivered out of order: {out_of_order:?}"
        );
        if let Err(e) = r.check_invariants() {
            panic!("{e}");
        }
        let f = r.footprint();
        assert!(f.sessions <= MAX_SESSIONS, "{f:?}");
        assert!(f.gaps <= MAX_SESSIONS * MAX_GAPS, "{f:?}");
        assert!(f.held_bytes <= MAX_HELD, "{f:?}");
        assert!(
            f.held_slots <= MAX_SESSIONS * (MAX_HELD / 32).max(1024),
            "{f:?}"
        );
        assert!(f.jump_bytes <= MAX_SESSIONS * 4096, "{f:?}");
        assert!(f.departed <= 16, "{f:?}");
    }
});
