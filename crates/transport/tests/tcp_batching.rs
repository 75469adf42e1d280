//! A batching TCP publisher reads its clock only now and then (every 64 sequence numbers, and
//! when a batch begins), so that an offer that only writes into the batch reads no clock. A
//! batch whose interval has passed must still leave while the application only offers, with
//! no duty cycle (`do_work`) and no `flush`.

use peregrine_transport::Message;
use std::time::{Duration, Instant};

mod common;
use common::tcp_pair;

const STREAM: u32 = 91;

#[test]
fn a_batch_whose_interval_passed_leaves_within_64_offers_without_the_duty_cycle() {
    // Batches of 65,000 bytes (the default) hold about a thousand of these frames: only the
    // interval can send the first 100.
    let uri = format!(
        "tcp://127.0.0.1:{}?batch_interval_us=1000",
        peregrine_testkit::free_port(true)
    );
    let (mut p, mut s) = tcp_pair(&uri, 7, STREAM, 0);
    let mut got: Vec<u64> = Vec::new();
    for i in 0..100u64 {
        assert_eq!(p.offer(&i.to_le_bytes()).unwrap(), i);
    }
    // The interval passes (a sleep lasts at least as long as asked).
    std::thread::sleep(Duration::from_millis(5));
    // Sequences 100 to 163: the offer of 128 reads the clock and finds the batch due.
    for i in 100..164u64 {
        assert_eq!(p.offer(&i.to_le_bytes()).unwrap(), i);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    // The clock read at 128 sends the batch: 0 to 127, with 128 too if the batch's own
    // interval sent it after writing that message.
    while got.len() < 128 {
        assert!(
            Instant::now() < deadline,
            "{} of the first 128 messages arrived: the batch did not leave",
            got.len()
        );
        s.poll(
            &mut |m: Message<'_>| {
                assert_eq!(m.payload, m.sequence.to_le_bytes());
                got.push(m.sequence)
            },
            usize::MAX,
        );
    }
    assert_eq!(got, (0..got.len() as u64).collect::<Vec<_>>());
}
