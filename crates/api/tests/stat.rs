//! Issue 18: what a context publishes to its counters file (read here as `peregrine stat`
//! reads it) is exactly what its publishers and subscribers count, once they are quiet.

use peregrine::stat::RecordType;
use peregrine::{Context, IdleKind, OfferError};
use peregrine_transport::ipc::dir::DirSpec;
use peregrine_transport::stat::{scan, DeadFiles, RecordSnapshot};

/// The live records of this process of `kind` whose label `key` is `value`.
fn records(kind: RecordType, key: &str, value: &str) -> Vec<RecordSnapshot> {
    let pid = std::process::id();
    scan(&DirSpec::default(), DeadFiles::Report)
        .unwrap()
        .processes
        .into_iter()
        .filter(|p| p.pid == pid)
        .flat_map(|p| p.records)
        .filter(|r| r.kind == kind && r.label(key) == Some(value))
        .collect()
}

fn values(r: &RecordSnapshot) -> Vec<u64> {
    r.values.iter().map(|v| v.value).collect()
}

#[test]
fn the_file_holds_the_owners_counters_exactly_over_shared_memory() {
    let topic = format!("stat.exact.{}", std::process::id());
    let uri = format!("ipc://stat-exact-{}?capacity=64k", std::process::id());
    let ctx = Context::new();
    let mut p = ctx.publisher(&topic, &uri).unwrap();
    let mut s = ctx.subscriber(&topic, &uri, IdleKind::Spin).unwrap();
    let mut got = 0u64;
    let mut refused = 0u64;
    let mut sent = 0u64;
    // 64 KiB of log: 20 000 messages of 100 bytes meet back-pressure many times.
    while sent < 20_000 {
        match p.offer(&[7u8; 100]) {
            Ok(_) => sent += 1,
            Err(OfferError::BackPressured) => {
                refused += 1;
                got += s.poll(&mut |_| {}, 50) as u64;
            }
            Err(e) => panic!("{e}"),
        }
    }
    while got < sent {
        got += s.poll(&mut |_| {}, 1000) as u64;
    }
    // A subscriber writes its values once it has been waiting for 64 polls in a row.
    for _ in 0..64 {
        assert_eq!(s.poll(&mut |_| {}, 1), 0);
    }
    assert!(refused > 0, "the test wants back-pressure counted");
    // The idle loop's duty cycle writes the values that are not counted as they happen (the
    // first call, then every 100 ms).
    p.do_work();

    let pubs = records(RecordType::Publisher, "topic", &topic);
    assert_eq!(pubs.len(), 1, "{pubs:?}");
    let c = p.counters();
    let mut expect = c.values().to_vec();
    expect.push(1); // the `subscribers` gauge
    assert_eq!(values(&pubs[0]), expect, "{:?}", pubs[0].values);
    assert_eq!(pubs[0].value("messages"), Some(20_000));
    assert_eq!(pubs[0].value("bytes"), Some(2_000_000));
    assert_eq!(pubs[0].value("back_pressured"), Some(refused));
    assert_eq!(pubs[0].label("transport"), Some("ipc"));

    let subs = records(RecordType::Subscriber, "topic", &topic);
    assert_eq!(subs.len(), 1, "{subs:?}");
    let mut expect = s.counters().values().to_vec();
    expect.push(1); // `sources`
    assert_eq!(values(&subs[0]), expect, "{:?}", subs[0].values);
    assert_eq!(subs[0].value("messages"), Some(20_000));

    // Closed (dropped) publishers and subscribers leave the file.
    drop((p, s));
    assert!(records(RecordType::Publisher, "topic", &topic).is_empty());
    assert!(records(RecordType::Subscriber, "topic", &topic).is_empty());
}

#[test]
fn an_application_record_is_read_with_its_names_and_labels() {
    use peregrine::stat::ValueKind;
    let ctx = Context::new();
    let tag = format!("app-{}", std::process::id());
    let r = ctx.counters_record(
        RecordType::Distributor,
        &[("listen", &tag)],
        &[
            (ValueKind::Counter, "updates_sent"),
            (ValueKind::Gauge, "clients"),
        ],
    );
    r.add(0, 41);
    r.add(0, 1);
    r.set(1, 3);
    let got = records(RecordType::Distributor, "listen", &tag);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value("updates_sent"), Some(42));
    assert_eq!(got[0].value("clients"), Some(3));
}
