//! A/B feeds through a real distributor (issue 31, item 3): two providers of one service,
//! numbering each item's messages alike, publish on one backbone; a consumer gets every
//! update once, in order, whichever provider's copy came first, and when one provider closes
//! nothing goes stale.

use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_market_data::distributor::{
    DistributorServer, DistributorSettings, Line, SettingsOverrides,
};
use peregrine_market_data::provider::{Provider, ProviderError};
use peregrine_md::distributor::Users;
use peregrine_md::model::{Field, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ITEMS: [&str; 2] = ["AAA.O", "BBB.O"];

struct Running {
    addr: String,
    backbone: String,
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start() -> Running {
    use sha2::Digest;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ab-feeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let users = dir.join("users.toml");
    std::fs::write(
        &users,
        format!(
            "[users.bob]\ntoken_sha256 = \"{}\"\nitems = [\"*\"]\n",
            hex::encode(sha2::Sha256::digest(b"bob-token"))
        ),
    )
    .unwrap();
    let pid = std::process::id();
    let backbone = format!(
        "mcast://239.255.98.{}:{}",
        1 + pid % 250,
        20_000 + (pid * 7) % 20_000
    );
    let settings = DistributorSettings::resolve(&SettingsOverrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        users: Some(users.clone()),
        backbone: Some(backbone.clone()),
        ..Default::default()
    })
    .unwrap();
    let mut server = DistributorServer::bind(
        &peregrine_market_data::Context::new(),
        settings,
        Users::load(&users).unwrap(),
    )
    .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    {
        let lines = lines.clone();
        server.set_output(Box::new(move |l: &Line| {
            lines.lock().unwrap().push(l.text.clone())
        }));
    }
    let addr = server.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || server.run(&|| stop.load(Ordering::Relaxed)).unwrap())
    };
    Running {
        addr,
        backbone,
        lines,
        stop,
        thread: Some(thread),
    }
}

/// Retries `f` while the backbone pushes back (10 s at most).
fn send(p: &mut Provider, f: impl Fn(&mut Provider) -> Result<(), ProviderError>) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match f(p) {
            Ok(()) => return,
            Err(ProviderError::BackPressured) if Instant::now() < end => {
                p.do_work();
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn bid(v: i64) -> [Field<'static>; 1] {
    [Field::new(22, Value::price(v, -2))]
}

/// What the consumer saw: per item, each update's (item_seq, bid); and every status.
#[derive(Default)]
struct Seen {
    updates: BTreeMap<String, Vec<(u32, i64)>>,
    images: usize,
    statuses: Vec<String>,
}

impl Seen {
    fn take(&mut self, e: &Event<'_>) {
        match e {
            Event::Refresh { .. } => self.images += 1,
            Event::Update {
                item,
                item_seq,
                fields,
                ..
            } => {
                let Some(Value::Price(p)) = fields.get(22) else {
                    panic!("an update without BID: {e:?}")
                };
                self.updates
                    .entry(item.to_string())
                    .or_default()
                    .push((*item_seq, p.mantissa));
            }
            Event::Status { item, text, .. } => self.statuses.push(format!("{item}: {text}")),
            Event::Gap { .. } | Event::Disconnected { .. } => panic!("{e:?}"),
            _ => {}
        }
    }

    fn count(&self) -> usize {
        self.updates.values().map(Vec::len).sum()
    }
}

/// Both providers publish updates `from..=to` of every item (item_seq k, bid 10000 + k), the
/// first of them in turn, while `cons` reads; returns once it has them all (20 s at most).
fn publish_both(
    provs: &mut [&mut Provider],
    cons: &mut Consumer,
    seen: &mut Seen,
    from: u32,
    to: u32,
) {
    let want = seen.count() + ITEMS.len() * (to - from + 1) as usize;
    for k in from..=to {
        for i in 0..provs.len() {
            let p = &mut *provs[(i + k as usize) % provs.len()];
            for item in ITEMS {
                send(p, |p| {
                    p.update_numbered(item, &bid(10_000 + i64::from(k)), k)
                });
            }
            p.do_work();
        }
        cons.poll(Duration::ZERO, &mut |e| seen.take(&e)).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(20);
    while seen.count() < want {
        assert!(
            Instant::now() < end,
            "received {} of {want} updates",
            seen.count()
        );
        for p in provs.iter_mut() {
            p.do_work();
        }
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
}

#[test]
fn two_providers_numbering_alike_are_one_stream_and_either_may_go() {
    let d = start();
    let ctx = peregrine_market_data::Context::new();
    let mut a = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    let mut b = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    assert_ne!(a.session_id(), b.session_id());
    // B starts with the items in the other order: the two number their items differently.
    for item in ITEMS {
        send(&mut a, |p| p.refresh_numbered(item, &bid(10_000), 0));
    }
    for item in ITEMS.iter().rev() {
        send(&mut b, |p| p.refresh_numbered(item, &bid(10_000), 0));
    }
    let mut cons = Consumer::connect(&[d.addr.as_str()], "bob", b"bob-token").unwrap();
    cons.open("FEED1", &ITEMS).unwrap();
    let mut seen = Seen::default();
    let end = Instant::now() + Duration::from_secs(10);
    while seen.images < ITEMS.len() {
        assert!(Instant::now() < end, "no images");
        a.do_work();
        b.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
    // (A request may have reached the distributor before the images: "not in the cache yet".)
    seen.statuses.clear();

    publish_both(&mut [&mut a, &mut b], &mut cons, &mut seen, 1, 1000);
    // A goes: B alone carries on, nothing stale.
    a.close();
    let end = Instant::now() + Duration::from_secs(10);
    while !d
        .lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("other feed session(s) carry its items"))
    {
        assert!(Instant::now() < end, "{:?}", d.lines.lock().unwrap());
        b.do_work();
        cons.poll(Duration::from_millis(10), &mut |e| seen.take(&e))
            .unwrap();
    }
    publish_both(&mut [&mut b], &mut cons, &mut seen, 1001, 1500);

    for item in ITEMS {
        let want: Vec<(u32, i64)> = (1..=1500).map(|k| (k, 10_000 + i64::from(k))).collect();
        assert_eq!(
            seen.updates[item], want,
            "{item}: every update once, in order"
        );
    }
    assert!(seen.statuses.is_empty(), "{:?}", seen.statuses);
    assert_eq!(seen.images, ITEMS.len(), "no image but the first");
}
