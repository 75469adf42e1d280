use super::*;
use crate::sender::{Packing, SendError, Sender, SenderConfig};

const SESSION: u32 = 5;
const MS: u64 = 1_000_000;

fn st(session_id: u32, receiver_id: u32, next: u64, window: u32, flags: u16) -> StatusRepr {
    StatusRepr {
        session_id,
        stream_id: 7,
        receiver_id,
        next_sequence: next,
        window,
        flags,
    }
}

fn addr(ip: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, ip], port))
}

fn table() -> ReceiverTable {
    ReceiverTable::new(TableConfig {
        timeout_ns: 1000,
        max_receivers: 4,
        ..TableConfig::new(7)
    })
}

#[test]
fn join_update_leave_and_expiry() {
    let a = addr(1, 1);
    let b = addr(1, 2);
    let mut t = table();
    assert_eq!(
        t.on_status(a, &st(0, 1, 0, 100, status_flags::JOIN), SESSION, 10, 0),
        StatusOutcome::Joined
    );
    assert_eq!(
        t.on_status(b, &st(0, 2, 0, 50, status_flags::JOIN), SESSION, 10, 0),
        StatusOutcome::Joined
    );
    assert_eq!(t.limit(), None, "nobody acknowledged data yet");
    assert_eq!(t.lowest_next(), Some(10));
    // b acknowledges data sent after its JOIN: it holds the publisher from now on.
    assert_eq!(
        t.on_status(b, &st(SESSION, 2, 40, 50, 0), SESSION, 45, 500),
        StatusOutcome::Updated
    );
    assert_eq!(t.limit(), Some(90));
    assert_eq!(t.in_flow_control(), 1);
    // A position ahead of what was sent is a made-up acknowledgement: ignored, counted.
    assert_eq!(
        t.on_status(a, &st(SESSION, 1, 999, 100, 0), SESSION, 45, 500),
        StatusOutcome::Ignored
    );
    assert_eq!(t.claims_ahead, 1);
    assert_eq!(t.limit(), Some(90));
    // A known receiver's keep-alive for another session and another stream are ignored.
    assert_eq!(
        t.on_status(a, &st(6, 1, 0, 100, 0), SESSION, 45, 500),
        StatusOutcome::Ignored
    );
    let mut other = st(SESSION, 1, 0, 100, 0);
    other.stream_id = 8;
    assert_eq!(
        t.on_status(a, &other, SESSION, 45, 500),
        StatusOutcome::Ignored
    );
    assert_eq!(t.ignored, 3);
    // a is silent after 0; b speaks at 1200; a expires at 1600.
    assert_eq!(
        t.on_status(b, &st(SESSION, 2, 45, 50, 0), SESSION, 45, 1200),
        StatusOutcome::Updated
    );
    assert!(t.poll(1600, 45));
    assert_eq!(t.len(), 1);
    assert_eq!(t.timed_out, 1);
    assert_eq!(
        t.on_status(
            b,
            &st(SESSION, 2, 45, 0, status_flags::LEAVE),
            SESSION,
            45,
            1700
        ),
        StatusOutcome::Left
    );
    assert!(t.is_empty());
    assert_eq!(t.limit(), None);
    // A keep-alive for an older session from an unknown receiver: this publisher replaced
    // the one it knew, so it joins at the current position.
    assert_eq!(
        t.on_status(b, &st(4, 2, 3, 50, 0), SESSION, 45, 1800),
        StatusOutcome::Joined
    );
    assert_eq!(t.lowest_next(), Some(45));
}

#[test]
fn a_rejoin_neither_acknowledges_nor_proves() {
    let a = addr(1, 1);
    let mut t = table();
    t.on_status(a, &st(0, 1, 0, 10, status_flags::JOIN), SESSION, 100, 0);
    // The publisher sends 200 more; a JOIN again (session 0) must not count as having them.
    assert_eq!(
        t.on_status(a, &st(0, 1, 0, 10, status_flags::JOIN), SESSION, 300, 10),
        StatusOutcome::Rejoined
    );
    assert_eq!((t.lowest_next(), t.limit()), (Some(100), None));
}

#[test]
fn a_full_table_drops_its_oldest_unproven_receiver_and_refuses_when_all_have_proven() {
    let mut t = ReceiverTable::new(TableConfig {
        max_receivers: 2,
        ..TableConfig::new(7)
    });
    let join = |id| st(0, id, 0, 0, status_flags::JOIN);
    assert_eq!(
        t.on_status(addr(1, 1), &join(1), SESSION, 0, 0),
        StatusOutcome::Joined
    );
    assert_eq!(
        t.on_status(addr(1, 2), &join(2), SESSION, 0, 1),
        StatusOutcome::Joined
    );
    // Full: the oldest unproven (1) makes room for 3.
    assert_eq!(
        t.on_status(addr(1, 3), &join(3), SESSION, 0, 2),
        StatusOutcome::Joined
    );
    let ids: Vec<SocketAddr> = t.addrs().collect();
    assert!(!ids.contains(&addr(1, 1)) && ids.len() == 2, "{ids:?}");
    // Both prove themselves (they acknowledge data sent after their JOIN).
    t.on_status(addr(1, 2), &st(SESSION, 2, 5, 0, 0), SESSION, 5, 3);
    t.on_status(addr(1, 3), &st(SESSION, 3, 5, 0, 0), SESSION, 5, 3);
    assert_eq!(t.in_flow_control(), 2);
    assert_eq!(
        t.on_status(addr(1, 4), &join(4), SESSION, 5, 4),
        StatusOutcome::Ignored
    );
    assert_eq!(t.joins_refused, 1);
    assert_eq!(
        t.limit(),
        None,
        "receivers without a window do not hold the sender"
    );
}

/// A publisher driven as the UDP driver drives it: a sender in urgent mode whose limit comes
/// from the table, refusals reported to the table, STATUS applied, timers run.
struct Publisher {
    sender: Sender,
    table: ReceiverTable,
    refused: u64,
}

impl Publisher {
    fn new(cfg: TableConfig) -> Self {
        Publisher {
            sender: Sender::new(SenderConfig::new(SESSION, 7, Packing::Datagrams, 1472)),
            table: ReceiverTable::new(cfg),
            refused: 0,
        }
    }
    fn set_limit(&mut self) {
        self.sender
            .set_limit(self.table.limit().unwrap_or(u64::MAX));
    }
    fn status(&mut self, from: SocketAddr, s: StatusRepr, now_ns: u64) -> StatusOutcome {
        let sent = self.sender.sent_next_sequence();
        let o = self.table.on_status(from, &s, SESSION, sent, now_ns);
        self.set_limit();
        o
    }
    fn poll(&mut self, now_ns: u64) {
        self.table.poll(now_ns, self.sender.sent_next_sequence());
        self.set_limit();
    }
    /// One message of one frame; false when refused.
    fn offer(&mut self, now_ns: u64) -> bool {
        let wanted = self.sender.next_sequence() + 1;
        if wanted > self.sender.limit() {
            self.table.on_refused(now_ns, wanted);
            self.set_limit();
        }
        match self
            .sender
            .offer(&[7u8; 8], now_ns, &mut |_b| Ok::<(), ()>(()))
        {
            Ok(_) => true,
            Err(SendError::BackPressured) => {
                self.refused += 1;
                false
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    fn sent(&self) -> u64 {
        self.sender.next_sequence()
    }
}

/// Issue 14, item 7: a fake receiver that JOINs a running publisher with `window=1` and keeps
/// itself alive with STATUS keep-alives (its position never moves) used to stop the publisher
/// for good. It never shows that it hears the publisher, so it never holds it back.
#[test]
fn one_join_with_window_1_kept_alive_does_not_freeze_the_publisher() {
    let mut p = Publisher::new(TableConfig::new(7));
    let mut now = 0;
    for _ in 0..1000 {
        assert!(p.offer(now));
        now += 10_000;
    }
    let fake = addr(66, 1);
    assert_eq!(
        p.status(fake, st(0, 9, 0, 1, status_flags::JOIN), now),
        StatusOutcome::Joined
    );
    let mut last_keepalive = now;
    // Ten seconds of a publisher offering every 10 us; the fake keeps alive every 100 ms
    // with a position it made up (0), in the session the advertisement told it.
    let end = now + 10_000 * MS;
    while now < end {
        if now - last_keepalive >= 100 * MS {
            p.status(fake, st(SESSION, 9, 0, 1, 0), now);
            last_keepalive = now;
        }
        if now % (100 * 1000) == 0 {
            p.poll(now);
        }
        assert!(
            p.offer(now),
            "refused at {} ms after {} messages",
            now / MS,
            p.sent()
        );
        now += 10_000;
    }
    assert_eq!(p.refused, 0);
    assert_eq!(p.table.flow_dropped, 0);
    assert!(
        p.table.timed_out >= 1,
        "it acknowledged no data: dropped, and it came back"
    );
    assert!(p.table.len() <= 1);
}

/// A fake that does read (so it proves it receives) and then stops acknowledging holds a
/// refused offer for `flow_timeout` at most, is dropped from flow control and counted; its IP
/// address then rests, so a new receiver id from it cannot stall the publisher again.
#[test]
fn a_receiver_that_stops_acknowledging_is_dropped_from_flow_control_after_the_flow_timeout() {
    let cfg = TableConfig {
        flow_timeout_ns: 200 * MS,
        ..TableConfig::new(7)
    };
    let mut p = Publisher::new(cfg);
    let fake = addr(66, 1);
    p.status(fake, st(0, 9, 0, 1, status_flags::JOIN), 0);
    assert!(p.offer(0));
    // It acknowledges the one frame: now it is in flow control with a window of 1.
    p.status(fake, st(SESSION, 9, 1, 1, 0), MS);
    assert_eq!(p.table.in_flow_control(), 1);
    assert!(p.offer(MS));
    let mut now = 2 * MS;
    let mut first_refusal = None;
    let resumed = loop {
        if now % (10 * MS) == 0 {
            p.status(fake, st(SESSION, 9, 1, 1, 0), now); // keeps alive, never moves
            p.poll(now);
        }
        if p.offer(now) {
            if first_refusal.is_some() {
                break now;
            }
        } else {
            first_refusal.get_or_insert(now);
        }
        now += 10_000;
        assert!(now < 5_000 * MS, "never resumed");
    };
    let held = resumed - first_refusal.unwrap();
    assert!(
        (200 * MS..=201 * MS).contains(&held),
        "held {} ms",
        held / MS
    );
    assert_eq!(p.table.flow_dropped, 1);
    assert_eq!((p.table.in_flow_control(), p.table.len()), (0, 1));
    // Another receiver id from the same address proves itself but stays out of flow control.
    let again = addr(66, 2);
    p.status(again, st(0, 10, 0, 1, status_flags::JOIN), now);
    assert!(p.offer(now));
    p.status(again, st(SESSION, 10, p.sent(), 1, 0), now + MS);
    assert_eq!(p.table.in_flow_control(), 0);
    assert_eq!(p.table.limit(), None);
    // After the rest, the receivers from there that keep up hold the publisher again (the
    // one that joined during the rest, and a new one); the stuck one stays out.
    let later = now + cfg.flow_rest_ns + MS;
    p.status(again, st(SESSION, 10, p.sent(), 1, 0), later);
    let third = addr(66, 3);
    p.status(third, st(0, 11, 0, 1, status_flags::JOIN), later);
    assert!(p.offer(later));
    p.status(third, st(SESSION, 11, p.sent(), 1, 0), later + MS);
    assert_eq!(p.table.in_flow_control(), 2);
}

/// A subscriber paused past the flow timeout (a GC pause, SIGSTOP) is dropped from flow
/// control, and comes back in once it has caught up: it is protected again. One that keeps
/// doing it stays out twice as long each time.
#[test]
fn a_paused_receiver_comes_back_into_flow_control_and_a_repeat_offender_stays_out_longer() {
    let cfg = TableConfig {
        flow_timeout_ns: 100 * MS,
        ..TableConfig::new(7)
    };
    let mut p = Publisher::new(cfg);
    let r = addr(1, 1);
    p.status(r, st(0, 1, 0, 10, status_flags::JOIN), 0);
    p.status(r, st(SESSION, 1, 0, 10, 0), 0);
    let mut now = 0;
    let mut outs = Vec::new();
    for round in 0..3 {
        // It pauses: the publisher fills its window, waits the flow timeout, goes on.
        let paused_at = now;
        while p.table.in_flow_control() == 1 {
            p.offer(now);
            now += MS;
        }
        assert!(
            now - paused_at <= 115 * MS,
            "round {round}: {} ms",
            (now - paused_at) / MS
        );
        // It wakes up and reports, caught up, every millisecond until it is back in.
        let woke = now;
        while p.table.in_flow_control() == 0 {
            p.offer(now);
            p.status(r, st(SESSION, 1, p.sent(), 10, 0), now);
            now += MS;
            assert!(now - woke < 10_000 * MS);
        }
        outs.push(now - woke);
    }
    assert_eq!(p.table.flow_dropped, 3);
    // Out for 100 ms, then 200, then 400 (from the drop; it woke at once).
    assert!(
        outs[0] <= 101 * MS && outs[1] > 150 * MS && outs[2] > 350 * MS,
        "{outs:?}"
    );
}

/// Flow control still does its job: a live receiver that reads at its own pace and reports
/// every quarter of its window holds a faster publisher back for as long as it lives, and is
/// never dropped; the publisher never runs past its window.
#[test]
fn a_slow_but_live_receiver_holds_the_publisher_and_is_never_dropped() {
    let mut p = Publisher::new(TableConfig {
        flow_timeout_ns: 100 * MS,
        ..TableConfig::new(7)
    });
    let r = addr(1, 1);
    let window = 1000u32;
    p.status(r, st(0, 1, 0, window, status_flags::JOIN), 0);
    // Its first STATUS follows the publisher's answer at once (the position it was told).
    p.status(r, st(SESSION, 1, 0, window, 0), 0);
    assert_eq!(p.table.limit(), Some(u64::from(window)));
    let mut consumed = 0u64;
    let mut reported = 0u64;
    let mut now = 0;
    // The receiver consumes one frame per 100 us (10 000 frames/s); the publisher offers
    // every microsecond. Thirty seconds.
    while now < 30_000 * MS {
        p.offer(now);
        assert!(p.sent() <= reported + u64::from(window));
        if now % 100_000 == 0 && consumed < p.sent() {
            consumed += 1;
        }
        if consumed - reported >= u64::from(window / 4) || (now % (100 * MS) == 0 && now > 0) {
            p.status(r, st(SESSION, 1, consumed, window, 0), now);
            reported = consumed;
        }
        if now % (100 * 1000) == 0 {
            p.poll(now);
        }
        now += 1000;
    }
    assert_eq!(p.table.flow_dropped, 0);
    assert_eq!(p.table.in_flow_control(), 1);
    assert!(p.refused > 1000, "it was held back: {}", p.refused);
    // It went at the receiver's pace: 10 000 frames/s.
    assert!((295_000..=301_000).contains(&p.sent()), "{}", p.sent());
}

/// A message longer than a receiver's window could never be sent: it waits the flow timeout,
/// not forever.
#[test]
fn a_window_smaller_than_the_message_holds_it_for_the_flow_timeout_only() {
    let mut t = ReceiverTable::new(TableConfig {
        flow_timeout_ns: 50 * MS,
        ..TableConfig::new(7)
    });
    let r = addr(1, 1);
    t.on_status(r, &st(0, 1, 0, 2, status_flags::JOIN), SESSION, 0, 0);
    t.on_status(r, &st(SESSION, 1, 10, 2, 0), SESSION, 10, 0);
    assert_eq!(t.limit(), Some(12));
    // A 5-frame message from 10 needs sequence numbers below 15.
    assert!(!t.on_refused(0, 15));
    // The receiver acknowledges everything it can, repeatedly: its limit stays below 15.
    t.on_status(r, &st(SESSION, 1, 10, 2, 0), SESSION, 10, 30 * MS);
    assert!(!t.on_refused(30 * MS, 15));
    assert!(t.on_refused(50 * MS, 15));
    assert_eq!((t.limit(), t.flow_dropped), (None, 1));
}

/// Issue 14, item 7: 3,000 fake JOINs (and their keep-alives) against a running publisher are
/// admitted at the admission rate, the table stays bounded, and none of them holds the
/// publisher back.
#[test]
fn a_flood_of_joins_is_admitted_at_a_bounded_rate_and_holds_nothing() {
    let mut p = Publisher::new(TableConfig::new(7));
    let mut now = 0;
    for _ in 0..1000 {
        assert!(p.offer(now));
        now += 10_000;
    }
    let join = |id| st(0, id, 0, 1, status_flags::JOIN);
    for id in 1..=3000 {
        p.status(addr(66, id as u16), join(id), now);
    }
    assert_eq!(p.table.len(), 64, "the burst");
    assert_eq!(p.table.joins_refused, 3000 - 64);
    let start = now;
    while now < start + 10_000 * MS {
        // Every fake keeps alive every 100 ms.
        if (now - start) % (100 * MS) == 0 {
            for id in 1..=3000u32 {
                p.status(addr(66, id as u16), st(SESSION, id, 0, 1, 0), now);
            }
            p.poll(now);
            let admitted = 64 + 64 * ((now - start) / 1_000_000_000 + 1) as usize;
            assert!(
                p.table.len() <= admitted,
                "{} at {} ms",
                p.table.len(),
                now / MS
            );
        }
        assert!(p.offer(now), "refused at {} ms", (now - start) / MS);
        now += 100_000;
    }
    assert_eq!(p.refused, 0);
    assert!(p.table.len() <= 1024);
    // They acknowledge nothing while data flows: dropped after the silence timeout, and
    // re-admitted only at the admission rate.
    assert!(p.table.timed_out > 0);
}

/// The same flood from fakes that do hear the publisher (they echo the position it told
/// them): they hold it back once, for the flow timeout, all together; then their address
/// rests and the ones admitted later stay out of flow control.
#[test]
fn a_flood_of_joins_that_echo_the_position_holds_the_publisher_once_for_the_flow_timeout() {
    let mut p = Publisher::new(TableConfig::new(7));
    let mut now = 0;
    for _ in 0..1000 {
        assert!(p.offer(now));
        now += 10_000;
    }
    let start = now;
    let mut refused_ns = 0;
    while now < start + 10_000 * MS {
        if (now - start) % (100 * MS) == 0 {
            for id in 1..=3000u32 {
                let a = addr(66, id as u16);
                if p.status(a, st(0, id, 0, 1, status_flags::JOIN), now) == StatusOutcome::Joined {
                    // Echo at once what the answer said.
                    p.status(a, st(SESSION, id, p.sent(), 1, 0), now);
                }
            }
            p.poll(now);
        }
        if !p.offer(now) {
            refused_ns += 100_000;
        }
        now += 100_000;
    }
    assert!(p.table.flow_dropped >= 1);
    let timeout = TableConfig::new(7).flow_timeout_ns;
    assert!(
        refused_ns <= timeout + MS,
        "held {} ms in all",
        refused_ns / MS
    );
}

/// An unproven receiver that acknowledges nothing while data flows is dropped after the
/// silence timeout, even if it keeps alive.
#[test]
fn an_unproven_receiver_is_dropped_when_it_acknowledges_no_data() {
    let mut t = table();
    let a = addr(1, 1);
    t.on_status(a, &st(0, 1, 0, 10, status_flags::JOIN), SESSION, 100, 0);
    // Idle publisher: kept however long it keeps alive (with a position it made up).
    for k in 1..10 {
        t.on_status(a, &st(SESSION, 1, 0, 10, 0), SESSION, 100, k * 500);
        assert!(!t.poll(k * 500, 100));
    }
    assert_eq!(t.limit(), None);
    // Data flows from 5000 on; it keeps alive but acknowledges nothing.
    t.on_status(a, &st(SESSION, 1, 0, 10, 0), SESSION, 150, 5000);
    t.poll(5000, 150);
    t.on_status(a, &st(SESSION, 1, 0, 10, 0), SESSION, 150, 5900);
    assert!(!t.poll(5900, 150));
    assert!(t.poll(6001, 150));
    assert!(t.is_empty());
}

/// A multicast receiver registers with a keep-alive of the session (it sends no JOIN): it
/// holds the publisher from that first STATUS, at the position it names. (The first version
/// of the bound waited for a second STATUS, and a publisher that started at once overran
/// three subscribers of a lossy multicast benchmark.)
#[test]
fn a_receiver_that_registers_with_a_keepalive_holds_the_publisher_from_its_first_status() {
    let mut t = table();
    let r = addr(1, 1);
    assert_eq!(
        t.on_status(r, &st(SESSION, 1, 90, 100, 0), SESSION, 100, 0),
        StatusOutcome::Joined
    );
    assert_eq!(
        t.limit(),
        Some(190),
        "at the position it named, not the publisher's"
    );
    // One far behind its window holds nothing until it catches up (it would stop the
    // publisher at once otherwise).
    let far = addr(1, 2);
    t.on_status(far, &st(SESSION, 2, 10, 50, 0), SESSION, 100, 0);
    assert_eq!((t.limit(), t.in_flow_control()), (Some(190), 1));
}

/// A limit never moves back: room given cannot be taken back by a smaller window, so a blind
/// guess with a huge window holds nothing.
#[test]
fn a_limit_never_moves_back() {
    let mut t = table();
    let r = addr(1, 1);
    t.on_status(r, &st(SESSION, 1, 0, u32::MAX, 0), SESSION, 1000, 0);
    assert_eq!(t.limit(), Some(u64::from(u32::MAX)));
    t.on_status(r, &st(SESSION, 1, 0, 1, 0), SESSION, 1000, 1);
    assert_eq!(t.limit(), Some(u64::from(u32::MAX)));
    // Window 0: it asks not to hold the publisher at all, which it may.
    t.on_status(r, &st(SESSION, 1, 0, 0, 0), SESSION, 1000, 2);
    assert_eq!(t.limit(), None);
}
