//! Deterministic simulator: the sender and receiver state machines over a seeded link that
//! drops, reorders and duplicates datagrams, with a virtual clock. No sockets, no threads.
//!
//! Each scenario publishes 1 M messages of 32 bytes (their index in the payload) and checks
//! that every one arrives, once, in order, with no loss reported. The table of loss rate x
//! retransmissions x recovery time is compared with `tests/snapshots/loss_table.md` (the run is
//! deterministic); set `UPDATE_SNAPSHOTS=1` to rewrite it after an intended change.

use peregrine_proto::events::{Message, SubscriberEvent};
use peregrine_proto::receiver::{NakConfig, Receiver, ReceiverConfig};
use peregrine_proto::sender::{Batch, Packing, SendMode, Sender, SenderConfig};
use peregrine_wire::nak::{NakFrame, NakRepr};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

/// The link's seeded randomness: SplitMix64, the loss generator's.
struct Rng(rand_xoshiro::SplitMix64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(rand_core::SeedableRng::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        rand_core::Rng::next_u64(&mut self.0)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    name: &'static str,
    /// Probability each datagram (either direction) is dropped.
    loss: f64,
    /// Loss comes in bursts of this many consecutive datagrams.
    burst: u32,
    reorder: f64,
    duplicate: f64,
}

/// One direction of the link: datagrams delivered after a latency, some dropped, delayed
/// further (reordered) or doubled.
struct Link {
    rng: Rng,
    sc: Scenario,
    burst_left: u32,
    queue: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    order: u64,
    latency_ns: u64,
}

impl Link {
    fn send(&mut self, now_ns: u64, d: &[u8]) {
        if self.burst_left > 0 {
            self.burst_left -= 1;
            return;
        }
        if self.rng.chance(self.sc.loss / f64::from(self.sc.burst)) {
            self.burst_left = self.sc.burst - 1;
            return;
        }
        let mut at = now_ns + self.latency_ns;
        if self.rng.chance(self.sc.reorder) {
            at += 1 + self.rng.next() % 50_000;
        }
        self.order += 1;
        self.queue.push(Reverse((at, self.order, d.to_vec())));
        if self.rng.chance(self.sc.duplicate) {
            self.order += 1;
            self.queue
                .push(Reverse((at + 5_000, self.order, d.to_vec())));
        }
    }
    fn due(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self
            .queue
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now_ns)
        {
            return self.queue.pop().map(|Reverse((_, _, d))| d);
        }
        None
    }
}

struct Outcome {
    delivered: u64,
    retransmitted: u64,
    naks: u64,
    gaps: u64,
    recovery_ns: Vec<u64>,
    virtual_ns: u64,
}

const MESSAGES: u64 = 1_000_000;

fn run(sc: Scenario, seed: u64) -> Outcome {
    let src: SocketAddr = "10.0.0.1:4000".parse().unwrap();
    let mut sender = Sender::new(SenderConfig {
        mode: SendMode::Normal {
            batch_bytes: 1472,
            batch_interval_ns: 20_000,
        },
        retain_bytes: 64 << 20,
        retain_age_ns: 10_000_000_000,
        retransmit_linger_ns: 500_000,
        retransmit_max_frames: 100_000,
        heartbeat_min_ns: 100_000,
        heartbeat_max_ns: 10_000_000,
        ..SenderConfig::new(7, 3, Packing::Datagrams, 1472)
    });
    let mut receiver = Receiver::new(ReceiverConfig {
        nak: Some(NakConfig {
            max_tries: 1000,
            max_stall_ns: u64::MAX / 2,
            ..NakConfig::new(false)
        }),
        ..ReceiverConfig::new(3, 99)
    });
    receiver.record_recovery();
    let mk = |s: u64| Link {
        rng: Rng::new(s),
        sc,
        burst_left: 0,
        queue: BinaryHeap::new(),
        order: 0,
        latency_ns: 20_000,
    };
    let mut down = mk(seed);
    let mut up = mk(seed ^ 0x5555);
    let mut now = 0u64;
    let mut next_index = 0u64;
    let mut expected = 0u64;
    let mut events = Vec::new();
    // 10 messages per microsecond of virtual time: 10 M msgs/s.
    while expected < MESSAGES {
        now += 1_000;
        assert!(now < 600_000_000_000, "{}: stuck at {expected}", sc.name);
        let mut outbox: Vec<Vec<u8>> = Vec::new();
        {
            let mut sink = |b: Batch<'_>| -> Result<(), ()> {
                outbox.extend(b.datagrams().map(<[u8]>::to_vec));
                Ok(())
            };
            for _ in 0..10 {
                if next_index < MESSAGES {
                    sender
                        .offer(&next_index.to_le_bytes().repeat(4), now, &mut sink)
                        .unwrap();
                    next_index += 1;
                }
            }
            let out = sender.poll(now, &mut sink).unwrap();
            if out.heartbeat_due {
                let hb = sender.heartbeat();
                outbox.push(hb.to_vec());
                sender.heartbeat_sent(now);
            }
        }
        for d in outbox.drain(..) {
            down.send(now, &d);
        }
        // The receiver.
        let mut check = |m: Message<'_>| {
            let idx = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
            assert_eq!(idx, expected, "{}: out of order or lost", sc.name);
            assert_eq!(m.payload.len(), 32);
            expected += 1;
        };
        while let Some(d) = down.due(now) {
            receiver.on_datagram(&d, 0, src, now, &mut check, usize::MAX);
        }
        let mut naks: Vec<Vec<u8>> = Vec::new();
        receiver.poll_repair(now, &mut check, &mut |_, f: &[u8]| naks.push(f.to_vec()));
        while let Some(e) = receiver.next_event() {
            events.push(e);
        }
        for n in naks {
            up.send(now, &n);
        }
        // The sender answers NAKs.
        while let Some(n) = up.due(now) {
            let f = NakFrame::new_checked(&n[..]).unwrap();
            let r = NakRepr::parse(&f).unwrap();
            let ranges: Vec<(u64, u64)> = r
                .ranges
                .iter()
                .map(|x| (x.start, u64::from(x.count)))
                .collect();
            let mut sink = |b: Batch<'_>| -> Result<(), ()> {
                outbox.extend(b.datagrams().map(<[u8]>::to_vec));
                Ok(())
            };
            sender.on_nak(ranges, now, &mut sink).unwrap();
            for d in outbox.drain(..) {
                down.send(now, &d);
            }
        }
    }
    let lost: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, SubscriberEvent::Lost { .. }))
        .collect();
    assert!(lost.is_empty(), "{}: {lost:?}", sc.name);
    let st = receiver.stats();
    assert_eq!(receiver.counters().lost, 0);
    Outcome {
        delivered: expected,
        retransmitted: sender.stats().retransmitted,
        naks: receiver.counters().naks_sent,
        gaps: st.gaps_detected,
        recovery_ns: receiver.take_recovery_ns(),
        virtual_ns: now,
    }
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[test]
fn one_million_messages_arrive_complete_and_in_order_under_loss() {
    let scenarios = [
        Scenario {
            name: "0.1% loss",
            loss: 0.001,
            burst: 1,
            reorder: 0.0,
            duplicate: 0.0,
        },
        Scenario {
            name: "1% loss",
            loss: 0.01,
            burst: 1,
            reorder: 0.0,
            duplicate: 0.0,
        },
        Scenario {
            name: "5% loss",
            loss: 0.05,
            burst: 1,
            reorder: 0.0,
            duplicate: 0.0,
        },
        Scenario {
            name: "20% loss",
            loss: 0.20,
            burst: 1,
            reorder: 0.0,
            duplicate: 0.0,
        },
        Scenario {
            name: "1% in bursts of 20",
            loss: 0.01,
            burst: 20,
            reorder: 0.0,
            duplicate: 0.0,
        },
        Scenario {
            name: "1% loss, 1% reorder, 1% dup",
            loss: 0.01,
            burst: 1,
            reorder: 0.01,
            duplicate: 0.01,
        },
    ];
    let mut table = String::from(
        "| link | messages | gaps detected | NAK frames | frames retransmitted | retransmitted / sent | recovery p50 (us) | p99.9 (us) | max (us) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (k, sc) in scenarios.iter().enumerate() {
        let mut o = run(*sc, 0x1234_5678 + k as u64);
        assert_eq!(o.delivered, MESSAGES);
        let frames_sent = MESSAGES;
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.4} | {:.0} | {:.0} | {:.0} |\n",
            sc.name,
            o.delivered,
            o.gaps,
            o.naks,
            o.retransmitted,
            o.retransmitted as f64 / frames_sent as f64,
            pct(&mut o.recovery_ns, 0.5) as f64 / 1e3,
            pct(&mut o.recovery_ns, 0.999) as f64 / 1e3,
            o.recovery_ns.last().copied().unwrap_or(0) as f64 / 1e3,
        ));
        let _ = o.virtual_ns;
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/loss_table.md");
    let header = "Loss repair in the deterministic simulator (crates/proto/tests/sim.rs): 1 M messages of 32 B at 10 M msgs/s, 20 us one-way latency, unicast NAKs after 50 us, retries every 2 ms. Recovery time is from the gap's detection to the frame's arrival.\n\n";
    let text = format!("{header}{table}");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    // A missing snapshot is a failure, never a pass: a test that writes what it then compares
    // with would accept any table.
    let snap = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the snapshot {}: {e}; if it was never written, run \
             `UPDATE_SNAPSHOTS=1 cargo test -p peregrine-proto --test sim` and review it",
            path.display()
        )
    });
    assert_eq!(
        snap, text,
        "the loss table changed: review it, then rerun with UPDATE_SNAPSHOTS=1"
    );
}
