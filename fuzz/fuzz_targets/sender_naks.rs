//! A publisher's sender with retention, fed arbitrary NAK and STATUS frames interleaved with
//! offers, flushes and a clock that moves forward: never a panic, and bounded work per call
//! (no NAK retransmits more than `retransmit_max_frames` frames or more bytes than those frames
//! fill; every batch handed to the sink is well-formed frames; the flow-control limit comes from
//! a receiver table fed the same STATUS frames).
//!
//! The input is a little program: each operation is one byte followed by its arguments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_proto::receiver_table::{ReceiverTable, TableConfig};
use peregrine_proto::sender::{Batch, Packing, SendError, SendMode, Sender, SenderConfig};
use peregrine_wire::header::Frames;
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr, MAX_NAK_RANGES};
use peregrine_wire::status::{StatusFrame, StatusRepr};
use std::net::SocketAddr;

const SESSION: u32 = 0x5e55;
const STREAM: u32 = 7;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        let b = self.bytes(2);
        u16::from_le_bytes([
            b.first().copied().unwrap_or(0),
            b.get(1).copied().unwrap_or(0),
        ])
    }
    fn u32(&mut self) -> u32 {
        let mut a = [0u8; 4];
        for (d, s) in a.iter_mut().zip(self.bytes(4)) {
            *d = *s;
        }
        u32::from_le_bytes(a)
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
}

/// Checks a batch: datagrams of `segment_len` (the last may be shorter) made of valid frames.
fn check_batch(b: &Batch<'_>, segment_len: usize) {
    assert!(!b.bytes.is_empty());
    if b.segment_len != 0 {
        assert_eq!(b.segment_len, segment_len);
    }
    for d in b.datagrams() {
        for f in Frames::new(d) {
            f.expect("the sender emits valid frames");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let stream = input.u8() & 1 == 1;
    let segment_len = if stream {
        4096
    } else {
        [256, 1472, 9000][usize::from(input.u8() % 3)]
    };
    let max_frames = u64::from(input.u16() % 8192) + 1;
    let cfg = SenderConfig {
        mode: if input.u8() & 1 == 1 {
            SendMode::Urgent
        } else {
            SendMode::Normal {
                batch_bytes: 16_000,
                batch_interval_ns: 100_000,
            }
        },
        retain_bytes: (usize::from(input.u16()) + 1) * 64,
        retain_age_ns: u64::from(input.u32()),
        retransmit_max_frames: max_frames,
        retransmit_rate_bytes_per_s: u64::from(input.u32()),
        retransmit_linger_ns: u64::from(input.u16()) * 1000,
        ..SenderConfig::new(
            SESSION,
            STREAM,
            if stream {
                Packing::Stream
            } else {
                Packing::Datagrams
            },
            segment_len,
        )
    };
    let mut sender = Sender::new(cfg);
    let mut table = ReceiverTable::new(TableConfig {
        flow_timeout_ns: u64::from(input.u32()) + 1,
        ..TableConfig::new(STREAM)
    });
    let mut now_ns = 0u64;
    let mut ops = 0;
    while !input.0.is_empty() && ops < 4096 {
        ops += 1;
        match input.u8() % 8 {
            // Offer a message of up to 20 000 bytes (fragmented past the segment).
            0 => {
                let len = usize::from(input.u16()) % 20_000;
                let wanted = sender.next_sequence() + sender.frames_for(len);
                if wanted > sender.limit() && table.on_refused(now_ns, wanted) {
                    sender.set_limit(table.limit().unwrap_or(u64::MAX));
                }
                let payload = vec![0x5au8; len];
                match sender.offer(&payload, now_ns, &mut |b: Batch<'_>| {
                    check_batch(&b, segment_len);
                    Ok::<(), ()>(())
                }) {
                    Ok(_) | Err(SendError::BackPressured) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
            // The clock moves forward (up to about 4 s).
            1 => now_ns = now_ns.saturating_add(u64::from(input.u32())),
            // A NAK built from the input: ranges near what was sent, or anywhere.
            2 => {
                let n = usize::from(input.u8()) % (MAX_NAK_RANGES + 1);
                let sent = sender.sent_next_sequence();
                let ranges: Vec<NakRange> = (0..n.max(1))
                    .map(|_| {
                        let near = input.u8() & 1 == 1;
                        let x = input.u64();
                        NakRange {
                            start: if near {
                                sent.saturating_sub(x % 20_000)
                            } else {
                                x
                            },
                            count: input.u32().max(1),
                        }
                    })
                    .collect();
                let Ok(ranges) = NakRanges::new(&ranges) else {
                    continue;
                };
                let repr = NakRepr {
                    session_id: SESSION,
                    stream_id: STREAM,
                    receiver_id: 9,
                    ranges,
                };
                let mut b = vec![0u8; repr.buffer_len()];
                repr.emit(&mut NakFrame::new_unchecked(&mut b[..]));
                nak(&mut sender, &b, now_ns, max_frames, segment_len);
            }
            // A NAK frame of raw bytes.
            3 => {
                let len = usize::from(input.u16() % 1200);
                let raw = input.bytes(len).to_vec();
                nak(&mut sender, &raw, now_ns, max_frames, segment_len);
            }
            // A STATUS built from the input, then one of raw bytes.
            4 => {
                let s = StatusRepr {
                    session_id: if input.u8() & 1 == 1 { SESSION } else { 0 },
                    stream_id: STREAM,
                    receiver_id: u32::from(input.u8() % 8) + 1,
                    next_sequence: sender
                        .sent_next_sequence()
                        .saturating_sub(u64::from(input.u16())),
                    window: input.u32() % 100_000,
                    flags: u16::from(input.u8() % 3),
                };
                let mut b = [0u8; 40];
                s.emit(&mut StatusFrame::new_unchecked(&mut b[..]));
                status(&mut sender, &mut table, &b, input.u8(), now_ns);
            }
            5 => {
                let raw = input.bytes(40).to_vec();
                status(&mut sender, &mut table, &raw, input.u8(), now_ns);
            }
            // The timers and a flush.
            6 => {
                if table.poll(now_ns, sender.sent_next_sequence()) {
                    sender.set_limit(table.limit().unwrap_or(u64::MAX));
                }
                let _ = sender.poll(now_ns, &mut |b: Batch<'_>| {
                    check_batch(&b, segment_len);
                    Ok::<(), ()>(())
                });
            }
            _ => {
                let _ = sender.flush(now_ns, &mut |b: Batch<'_>| {
                    check_batch(&b, segment_len);
                    Ok::<(), ()>(())
                });
            }
        }
        assert!(sender.oldest_retained() <= sender.sent_next_sequence());
    }
});

/// Answers the NAK in `bytes` (if it parses) and checks the work stayed within the caps.
fn nak(sender: &mut Sender, bytes: &[u8], now_ns: u64, max_frames: u64, segment_len: usize) {
    let Ok(n) = NakFrame::new_checked(bytes).and_then(|f| NakRepr::parse(&f)) else {
        return;
    };
    let mut out_bytes = 0usize;
    let sent = sender
        .on_nak(
            n.ranges.iter().map(|r| (r.start, u64::from(r.count))),
            now_ns,
            &mut |b: Batch<'_>| {
                check_batch(&b, segment_len);
                out_bytes += b.bytes.len();
                Ok::<(), ()>(())
            },
        )
        .expect("the sink never fails");
    assert!(
        sent <= max_frames,
        "{sent} frames for one NAK, cap {max_frames}"
    );
    // Each frame fills at most one segment (plus a PAD per segment).
    assert!(out_bytes <= (sent as usize) * segment_len + segment_len);
}

/// Applies the STATUS in `bytes` (if it parses) from one of a few addresses.
fn status(sender: &mut Sender, table: &mut ReceiverTable, bytes: &[u8], who: u8, now_ns: u64) {
    let Ok(s) = StatusFrame::new_checked(bytes).and_then(|f| StatusRepr::parse(&f)) else {
        return;
    };
    let from = SocketAddr::from(([10, 0, 0, who % 4], 4000 + u16::from(who % 3)));
    table.on_status(from, &s, SESSION, sender.sent_next_sequence(), now_ns);
    sender.set_limit(table.limit().unwrap_or(u64::MAX));
    assert!(table.len() <= table.config().max_receivers);
}
