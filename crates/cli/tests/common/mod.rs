//! Helpers shared by the multi-process tests.

pub use rustix::process::Signal;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A role process started by hand, speaking the ready/result protocol on stdout.
pub struct Role {
    pub child: Child,
    out: BufReader<ChildStdout>,
}

impl Role {
    #[allow(dead_code)] // not every test binary that includes this module uses it
    pub fn start(args: &[&str]) -> Role {
        Role::start_with(args, &[])
    }
    /// [`start`](Self::start) with environment variables set.
    pub fn start_with(args: &[&str], env: &[(&str, &std::path::Path)]) -> Role {
        let mut child = Command::new(env!("CARGO_BIN_EXE_peregrine"))
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Role { child, out }
    }
    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l
    }
    pub fn expect_ready(&mut self) {
        assert_eq!(self.line().trim(), "ready");
    }
    pub fn signal(&self, sig: Signal) {
        peregrine_testkit::signal(self.child.id(), sig)
            .unwrap_or_else(|e| panic!("sending {sig:?} to {}: {e}", self.child.id()));
    }
    pub fn result(mut self) -> Value {
        let l = self.line();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "role failed: {status}");
        serde_json::from_str(l.trim()).unwrap_or_else(|e| panic!("bad result line '{l}': {e}"))
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the benchmark runs of the tests write their results folders: this build's own
/// temporary folder (not the source tree, and not a `/tmp` path another user may own).
pub fn results_base() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peregrine-test-results")
}

/// A shared-memory base directory of one test's own (`PEREGRINE_SHM_DIR`), under `/dev/shm`,
/// removed with its content when dropped: publishers created by other tests (which remove
/// the dead segments of their directory) never touch this test's segments.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub struct ShmBase(pub std::path::PathBuf);

#[allow(dead_code)]
impl ShmBase {
    pub fn new(tag: &str) -> ShmBase {
        let p = std::path::Path::new("/dev/shm")
            .join(format!("pgtest-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        ShmBase(p)
    }
    /// The file of segment `name` of this user.
    pub fn segment(&self, name: &str) -> std::path::PathBuf {
        self.0
            .join(format!("peregrine-{}", rustix::process::geteuid().as_raw()))
            .join(name)
    }
    pub fn env(&self) -> [(&'static str, &std::path::Path); 1] {
        [("PEREGRINE_SHM_DIR", self.0.as_path())]
    }
}

impl Drop for ShmBase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bench run's results folder under [`results_base`], named by `tag` and this process, and
/// not there yet.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn fresh_results_dir(tag: &str) -> std::path::PathBuf {
    let d = results_base().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Benchmark runs have two busy processes: on a 2-core machine, one test at a time, so that
/// the rates asked for are the rates run (a test that overloads the machine measures nothing).
#[allow(dead_code)]
static ONE_BENCH_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[allow(dead_code)]
pub fn one_bench_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_BENCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Runs `peregrine ARGS` with its results under [`results_base`] and the transports'
/// defaults (not a configuration of the environment's).
#[allow(dead_code)]
pub fn run_bench(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .args(args)
        .env("PEREGRINE_RESULTS", results_base())
        .env_remove("PEREGRINE_CONFIG")
        .output()
        .expect("peregrine runs")
}

/// Two namespaces joined by a veth pair (10.77.x.1 and 10.77.x.2), removed on drop.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub struct TwoHosts {
    pub a: String,
    pub b: String,
    pub addr_a: std::net::Ipv4Addr,
    pub addr_b: std::net::Ipv4Addr,
}

#[allow(dead_code)]
fn ip(args: &[&str]) {
    let o = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
            "this test needs root and iproute2 (`apt-get install -y iproute2`): cannot run ip: {e}"
        )
        });
    assert!(
        o.status.success(),
        "ip {} failed (this test needs root and `ip netns`): {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[allow(dead_code)]
impl TwoHosts {
    pub fn new(tag: &str, subnet: u8) -> TwoHosts {
        let id = std::process::id() % 10000;
        let a = format!("pgr{tag}{id}a");
        let b = format!("pgr{tag}{id}b");
        let (va, vb) = (format!("v{tag}{id}a"), format!("v{tag}{id}b"));
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &a])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &b])
            .output();
        let hosts = TwoHosts {
            a: a.clone(),
            b: b.clone(),
            addr_a: std::net::Ipv4Addr::new(10, 77, subnet, 1),
            addr_b: std::net::Ipv4Addr::new(10, 77, subnet, 2),
        };
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        for (ns, dev, addr) in [(&a, &va, hosts.addr_a), (&b, &vb, hosts.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        hosts
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.a])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.b])
            .output();
    }
}
