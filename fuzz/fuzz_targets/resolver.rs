//! The resolver and the resolverd relay take any datagram: never a panic, every datagram
//! counted, and nothing rejected reaches a subscription.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_proto::resolver::{Pattern, Resolver, ResolverConfig};
use peregrine_proto::resolverd::{Relay, RelayConfig};
use peregrine_wire::query::PatternKind;

fuzz_target!(|data: &[u8]| {
    let mut r = Resolver::new(ResolverConfig::new(7));
    r.advertise("md.eq.OWN", 42, &["udp://127.0.0.1:1".into()], 0)
        .unwrap();
    r.subscribe(Pattern::new(PatternKind::Glob, "*").unwrap(), 0);
    while r.poll_event().is_some() {}
    r.on_datagram(data, 1);
    let c = r.counters();
    assert_eq!(c.datagrams_received, 1);
    let found = std::iter::from_fn(|| r.poll_event()).count() as u64;
    assert!(found <= c.sources_found);
    let mut buf = vec![0u8; 1472];
    while r.poll_transmit(2, &mut buf).is_some() {}
    r.handle_timeout(u64::MAX / 2);

    let mut relay = Relay::new(RelayConfig::default(), [7; 32]);
    relay.on_datagram("127.0.0.1:9".parse().unwrap(), data, 0);
    assert_eq!(relay.counters().datagrams_received, 1);
});
