//! What the market data tests share: a distributor in a thread of the test, on a backbone of
//! the test's own, its output lines kept; a provider's sends retried under back-pressure.
#![allow(dead_code)] // each test file uses a part

use peregrine_market_data::distributor::{
    DistributorServer, DistributorSettings, Line, SettingsOverrides,
};
use peregrine_market_data::provider::{Provider, ProviderError};
use peregrine_md::distributor::Users;
use peregrine_md::model::{Field, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A backbone of this test process's own (`tag` tells two tests of one process apart).
pub fn backbone(tag: u32) -> String {
    let pid = std::process::id();
    format!(
        "mcast://239.255.98.{}:{}",
        1 + (pid + tag) % 250,
        20_000 + (pid * 7 + tag * 2) % 20_000
    )
}

pub struct Running {
    pub addr: String,
    pub backbone: String,
    pub lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Stops the distributor: its sockets close, as a killed process's would.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn said(&self, what: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(what))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A distributor on `backbone`, listening on a loopback port of its own; user `bob` (token
/// `bob-token`) may see every item. `name` names its folder.
pub fn start(backbone: &str, name: &str) -> Running {
    start_on(backbone, name, "127.0.0.1:0")
}

/// [`start`] listening on `listen`.
pub fn start_on(backbone: &str, name: &str, listen: &str) -> Running {
    use sha2::Digest;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
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
    let settings = DistributorSettings::resolve(&SettingsOverrides {
        listen: Some(listen.parse().unwrap()),
        users: Some(users.clone()),
        backbone: Some(backbone.to_string()),
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
        backbone: backbone.to_string(),
        lines,
        stop,
        thread: Some(thread),
    }
}

/// Retries `f` while the backbone pushes back (10 s at most).
pub fn send(p: &mut Provider, f: impl Fn(&mut Provider) -> Result<(), ProviderError>) {
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

/// A BID of `v` hundredths.
pub fn bid(v: i64) -> [Field<'static>; 1] {
    [Field::new(22, Value::price(v, -2))]
}
