use super::*;
use crate::sweep::search_max;

fn item(name: &str, first: u32, last: u32, updates: u64) -> ClientItem {
    ClientItem {
        name: name.into(),
        first_seq: first,
        last_seq: last,
        updates,
        refreshes: 0,
    }
}

#[test]
fn watchlists_share_the_asked_fraction_and_nothing_else() {
    let w = Watchlists::new(16, 400, 0.5).unwrap();
    assert_eq!(w.shared, 200);
    assert_eq!(w.items.len(), 200 + 16 * 200);
    let lists: Vec<Vec<&str>> = (0..16).map(|k| w.of(k).collect()).collect();
    for (k, l) in lists.iter().enumerate() {
        assert_eq!(l.len(), 400);
        for (j, m) in lists.iter().enumerate().filter(|(j, _)| *j != k) {
            let common = l.iter().filter(|n| m.contains(n)).count();
            assert_eq!(common, 200, "clients {k} and {j}");
        }
    }
    // 0% and 100%: nothing shared, everything shared.
    let w = Watchlists::new(3, 10, 0.0).unwrap();
    assert_eq!((w.shared, w.items.len()), (0, 30));
    let w = Watchlists::new(3, 10, 1.0).unwrap();
    assert_eq!((w.shared, w.items.len()), (10, 10));
    // More distinct items than there are names: refused, naming the flags.
    let e = Watchlists::new(512, 17_000, 0.1).unwrap_err().to_string();
    assert!(
        e.contains("--clients 512") && e.contains("distinct items"),
        "{e}"
    );
}

#[test]
fn a_client_that_got_everything_accounts_exactly() {
    let feed: FeedItems = [("A".to_string(), Some(10)), ("B".to_string(), Some(4))].into();
    let got = [item("A", 0, 10, 10), item("B", 2, 4, 2)];
    let a = account(["A", "B"], &feed, &got);
    assert_eq!(
        a,
        Account {
            expected: 12,
            delivered: 12,
            undelivered: 0,
            foreign: 0,
            inconsistent: 0
        }
    );
    // A REFRESH asked for again takes an item_seq: 10 = 9 updates + 1 refresh.
    let mut r = item("A", 0, 10, 9);
    r.refreshes = 1;
    assert_eq!(account(["A"], &feed, &[r]).inconsistent, 0);
}

#[test]
fn missing_late_and_foreign_items_are_each_counted() {
    let feed: FeedItems = [
        ("A".to_string(), Some(10)),
        ("B".to_string(), Some(4)),
        ("C".to_string(), Some(7)),
        ("D".to_string(), None),
    ]
    .into();
    // A: two updates lost in the middle; B: not drained (last 3 of 4); C: never received;
    // X: not watched.
    let got = [item("A", 0, 10, 8), item("B", 0, 3, 3), item("X", 0, 1, 1)];
    let a = account(["A", "B", "C", "D"], &feed, &got);
    assert_eq!(a.inconsistent, 1);
    assert_eq!(a.undelivered, 1 + 8);
    assert_eq!(a.foreign, 1);
    assert_eq!(a.delivered, 11);
}

fn client(updates: u64, max_ms: f64) -> ClientReport {
    ClientReport {
        updates,
        latency: LatencyStats {
            mean_ns: 50_000.0,
            stddev_ns: 10_000.0,
            min_ns: 20_000.0,
            max_ns: max_ms * 1e6,
            points: updates,
        },
        ..ClientReport::default()
    }
}

fn record(rate: f64, clients: Vec<ClientReport>, accounts: Vec<Account>) -> ProbeRecord {
    ProbeRecord {
        rate_asked: rate,
        feed_rate: rate,
        feed_updates: (rate * 2.0) as u64,
        feed_seconds: 2.0,
        clients,
        accounts,
        ..ProbeRecord::default()
    }
}

fn ok_account(n: u64) -> Account {
    Account {
        expected: n,
        delivered: n,
        ..Account::default()
    }
}

#[test]
fn verdicts_put_loss_before_lag_before_refusal() {
    let good = record(1000.0, vec![client(100, 1.0)], vec![ok_account(100)]);
    let p = Probe::judge(System::Peregrine, good.clone(), 100.0);
    assert_eq!(p.verdict, Verdict::Sustained);
    assert_eq!(p.updates_per_s, 50.0);

    let mut slow = good.clone();
    slow.clients[0].latency.max_ns = 150e6;
    let p = Probe::judge(System::Peregrine, slow.clone(), 100.0);
    assert_eq!(p.verdict, Verdict::Lagging);
    assert!(p.why.contains("150.0 ms"), "{}", p.why);

    let mut behind = good.clone();
    behind.accounts[0].undelivered = 5;
    assert_eq!(
        Probe::judge(System::Nats, behind.clone(), 100.0).verdict,
        Verdict::Lagging
    );
    // The same shortfall after the server dropped the client: lost.
    behind.clients[0].disconnects = 1;
    let p = Probe::judge(System::Nats, behind, 100.0);
    assert_eq!((p.verdict.clone(), p.lost), (Verdict::Lost, 5));

    let mut gap = slow.clone();
    gap.clients[0].gaps = 2;
    assert_eq!(
        Probe::judge(System::Peregrine, gap, 100.0).verdict,
        Verdict::Lost
    );

    let mut refused = good.clone();
    refused.feed_rate = 900.0;
    refused.refused = 40;
    let p = Probe::judge(System::Peregrine, refused, 100.0);
    assert_eq!(p.verdict, Verdict::Refused);
    assert!(p.why.contains("40 offers refused"), "{}", p.why);

    let mut conflated = good;
    conflated.tier_slow = 1;
    assert_eq!(
        Probe::judge(System::Peregrine, conflated, 100.0).verdict,
        Verdict::Lagging
    );
}

#[test]
fn pooled_latency_is_the_latency_of_the_union() {
    // Samples {1, 3} and {5, 7, 9}: mean 5, population variance (16+4+0+4+16)/5 = 8.
    let a = LatencyStats {
        mean_ns: 2.0,
        stddev_ns: 1.0,
        min_ns: 1.0,
        max_ns: 3.0,
        points: 2,
    };
    let b = LatencyStats {
        mean_ns: 7.0,
        stddev_ns: (8.0f64 / 3.0).sqrt(),
        min_ns: 5.0,
        max_ns: 9.0,
        points: 3,
    };
    let p = LatencyStats::pool(&[a, b, LatencyStats::default()]);
    assert_eq!(p.points, 5);
    assert!((p.mean_ns - 5.0).abs() < 1e-9);
    assert!((p.stddev_ns - 8f64.sqrt()).abs() < 1e-9);
    assert_eq!((p.min_ns, p.max_ns), (1.0, 9.0));
    assert_eq!(LatencyStats::pool(&[]), LatencyStats::default());
}

/// The rate search over recorded probes: a tier that holds up to 1.3M updates/s and lags
/// above. The search doubles from the start rate, then bisects to within 10%, and what it
/// reports is the highest probe that held.
#[test]
fn the_rate_search_over_recorded_probes_finds_the_highest_sustained() {
    let capacity = 1_300_000.0;
    let recorded = |rate: f64| {
        let lag_ms = if rate <= capacity { 2.0 } else { 400.0 };
        let n = (rate * 2.0) as u64;
        record(rate, vec![client(n, lag_ms)], vec![ok_account(n)])
    };
    let mut tried = Vec::new();
    let mut best: Option<Probe> = None;
    let found = search_max(100_000.0, 1_000.0, 20e6, 0.10, |rate| {
        let p = Probe::judge(System::Peregrine, recorded(rate), 100.0);
        tried.push((rate, p.verdict.clone()));
        if p.sustained() && best.as_ref().is_none_or(|b| b.record.rate_asked < rate) {
            best = Some(p.clone());
        }
        Ok::<_, ()>(p.sustained())
    })
    .unwrap()
    .unwrap();
    assert_eq!(
        tried[..5].iter().map(|t| t.0).collect::<Vec<_>>(),
        [1e5, 2e5, 4e5, 8e5, 1.6e6]
    );
    assert_eq!(tried[4].1, Verdict::Lagging);
    assert!((capacity / 1.1..=capacity).contains(&found), "{found}");
    assert_eq!(best.unwrap().record.rate_asked, found);
    assert!(tried.len() <= 9, "{tried:?}");
}

#[test]
fn configurations_out_of_range_are_refused_naming_the_flag() {
    let good = FanoutConfig {
        clients: 16,
        items_per_client: 400,
        overlap: 0.5,
        size: 74,
        mode: WriteMode::Throughput,
        seconds: 3.0,
        warmup_seconds: 0.5,
        max_lag_ms: 100.0,
        seed: 1,
        client_busy_poll_us: 0,
        pin: None,
        backbone_datagram: LOOPBACK_DATAGRAM,
        backbone_sealed: true,
        client_tls: false,
        client_websocket: false,
        attack: None,
    };
    good.validate().unwrap();
    for (bad, flag) in [
        (
            FanoutConfig {
                clients: 0,
                ..good.clone()
            },
            "--clients 0",
        ),
        (
            FanoutConfig {
                size: 62,
                ..good.clone()
            },
            "--size 62",
        ),
        (
            FanoutConfig {
                overlap: 1.5,
                ..good.clone()
            },
            "--overlap 1.5",
        ),
        (
            FanoutConfig {
                seconds: 0.1,
                ..good.clone()
            },
            "--seconds 0.1",
        ),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(flag), "{e}");
    }
}

#[test]
fn items_files_that_are_not_what_the_processes_write_are_errors() {
    let dir = std::env::temp_dir().join(format!("pg-fanout-items-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("feed.items");
    std::fs::write(&f, "AAA.O 12\nAAB.N -\n").unwrap();
    let feed = read_feed_items(&f).unwrap();
    assert_eq!(feed["AAA.O"], Some(12));
    assert_eq!(feed["AAB.N"], None);
    std::fs::write(&f, "AAA.O twelve\n").unwrap();
    assert!(read_feed_items(&f)
        .unwrap_err()
        .to_string()
        .contains("line 1"));
    let c = dir.join("client.items");
    std::fs::write(&c, "AAA.O 0 12 11 1\n").unwrap();
    assert_eq!(read_client_items(&c).unwrap()[0].refreshes, 1);
    std::fs::write(&c, "AAA.O 0 12\n").unwrap();
    assert!(read_client_items(&c).is_err());
    assert!(read_client_items(&dir.join("absent")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
