//! Claim and commit: a message written in place, on shared memory and over UDP.

use peregrine::{Context, IdleKind, OfferError, Publisher, Subscriber};
use std::time::{Duration, Instant};

fn name(what: &str) -> String {
    format!("claim-{what}-{}", std::process::id())
}

/// Every message the subscriber receives within 5 s, until `want` came: (sequence, payload).
fn receive(sub: &mut Subscriber, publ: &mut Publisher, want: usize) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < deadline {
        publ.do_work();
        let n = sub.poll(&mut |m| got.push((m.sequence, m.payload.to_vec())), 64);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

#[test]
fn a_committed_claim_is_delivered_and_an_abandoned_one_leaves_no_trace() {
    let ctx = Context::new();
    // A small log, so the claims go round it and through its PAD at the end several times.
    let uri = format!("ipc://{}?capacity=64k", name("ipc"));
    let mut publ = ctx.publisher("t.claim", &uri).unwrap();
    let mut sub = ctx.subscriber("t.claim", &uri, IdleKind::Spin).unwrap();
    let mut sent = Vec::new();
    for i in 0..500u32 {
        let len = 1 + (i as usize * 997) % 3000;
        // An abandoned claim first: its room and sequence number are reused.
        let abandoned = publ.claim(len).unwrap();
        publ.claim_buffer(&abandoned).fill(0xee);
        drop(abandoned);
        let claim = publ.claim(len).unwrap();
        assert_eq!(claim.len(), len);
        let payload: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
        publ.claim_buffer(&claim).copy_from_slice(&payload);
        let seq = publ.commit(&claim).unwrap();
        assert_eq!(seq, i as u64);
        sent.push((seq, payload));
        // Read as we go: the log holds a few messages only.
        let got = receive(&mut sub, &mut publ, 1);
        assert_eq!(got, vec![sent[i as usize].clone()], "message {i}");
    }
    assert_eq!(publ.counters().messages, 500);
}

#[test]
fn a_claim_overtaken_by_an_offer_publishes_nothing() {
    let ctx = Context::new();
    let uri = format!("ipc://{}", name("stale"));
    let mut publ = ctx.publisher("t.claim", &uri).unwrap();
    let mut sub = ctx.subscriber("t.claim", &uri, IdleKind::Spin).unwrap();
    let claim = publ.claim(4).unwrap();
    publ.claim_buffer(&claim).copy_from_slice(b"late");
    assert_eq!(publ.offer(b"first").unwrap(), 0);
    // The stale claim's buffer is not the log: writing it leaves the offered message intact.
    publ.claim_buffer(&claim).copy_from_slice(b"XXXX");
    assert_eq!(publ.commit(&claim), Err(OfferError::ClaimStale));
    // Only the latest claim commits.
    let older = publ.claim(3).unwrap();
    let newer = publ.claim(3).unwrap();
    publ.claim_buffer(&newer).copy_from_slice(b"new");
    assert_eq!(publ.commit(&older), Err(OfferError::ClaimStale));
    assert_eq!(publ.commit(&newer).unwrap(), 1);
    assert_eq!(
        publ.commit(&newer),
        Err(OfferError::ClaimStale),
        "committed once only"
    );
    let got = receive(&mut sub, &mut publ, 2);
    assert_eq!(got, vec![(0, b"first".to_vec()), (1, b"new".to_vec())]);
    assert_eq!(sub.poll(&mut |_| {}, 16), 0, "nothing else was published");
    assert!(matches!(
        publ.claim(publ.max_message_len() + 1),
        Err(OfferError::TooLarge { .. })
    ));
}

#[test]
fn a_claim_over_udp_is_sent_at_commit() {
    let ctx = Context::new();
    let mut publ = ctx.publisher("t.claim", "udp://127.0.0.1:0").unwrap();
    let uri = publ.uri().to_string();
    let mut sub = ctx.subscriber("t.claim", &uri, IdleKind::Spin).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while publ.subscriber_count() == 0 {
        assert!(Instant::now() < deadline, "the subscriber never joined");
        publ.do_work();
        sub.poll(&mut |_| {}, 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    // A stale claim's buffer is not the latest claim's.
    let stale = publ.claim(100).unwrap();
    let latest = publ.claim(100).unwrap();
    publ.claim_buffer(&latest).fill(0xaa);
    publ.claim_buffer(&stale).fill(0xbb);
    assert_eq!(publ.commit(&stale), Err(OfferError::ClaimStale));
    let mut sent = vec![(publ.commit(&latest).unwrap(), vec![0xaa; 100])];
    for i in 0..20u8 {
        let claim = publ.claim(100).unwrap();
        publ.claim_buffer(&claim).fill(i);
        let seq = publ.commit(&claim).unwrap();
        sent.push((seq, vec![i; 100]));
    }
    publ.flush().unwrap();
    assert_eq!(receive(&mut sub, &mut publ, 21), sent);
    assert!(matches!(
        publ.claim(publ.max_message_len() + 1),
        Err(OfferError::TooLarge { .. })
    ));
}
