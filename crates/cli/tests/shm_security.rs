//! Issue 14, "local users and shared memory": what a hostile or careless local user could do to
//! the shared-memory transport, each as a test through the `peregrine` binary.
//!
//! Every test has a base directory of its own (`PEREGRINE_SHM_DIR`, under `/dev/shm`, removed
//! at the end), so it neither sees nor disturbs anyone else's segments. The cases that need a
//! second local user (its segment, its lock, its squatting) run as root with a system user made
//! by the test (`pgr-test-shm`), and say they are skipped otherwise.
//!
//! `PEREGRINE_TEST_EXE` runs them against another build of `peregrine` (how they were checked
//! to fail before the fix).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One test at a time: each runs several processes on a small machine.
static SERIAL: Mutex<()> = Mutex::new(());

const OTHER_USER: &str = "pgr-test-shm";

fn exe() -> String {
    std::env::var("PEREGRINE_TEST_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_peregrine").into())
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// A base directory of the test's own, mode 1777 like /dev/shm (a second user makes its own
/// directory in it), removed with its content at the end.
struct Base(PathBuf);

impl Base {
    fn new(tag: &str) -> Base {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = Path::new("/dev/shm").join(format!(
            "pgtest-cli-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Base(p)
    }
    /// This user's segment directory.
    fn mine(&self) -> PathBuf {
        self.0.join(format!("peregrine-{}", euid()))
    }
    /// The segment files of this user: in its directory, and (so that these tests show the
    /// attacks on a build from before issue 14, see `PEREGRINE_TEST_EXE`) regular files
    /// `peregrine-NAME` directly in the base, where segments were kept then.
    /// The segments (and leftovers) in the directory: every file but the counters files.
    fn my_files(&self) -> Vec<PathBuf> {
        self.all_files()
            .into_iter()
            .filter(|p| !is_counters(p))
            .collect()
    }
    /// The counters files (`peregrine stat`) of live or dead processes.
    fn counters_files(&self) -> Vec<PathBuf> {
        self.all_files()
            .into_iter()
            .filter(|p| is_counters(p))
            .collect()
    }
    fn all_files(&self) -> Vec<PathBuf> {
        let list = |d: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(d)
                .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
                .unwrap_or_default()
        };
        let old_layout = list(&self.0).into_iter().filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("peregrine-")
                && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
        });
        list(&self.mine()).into_iter().chain(old_layout).collect()
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(exe());
        c.args(args).env("PEREGRINE_SHM_DIR", &self.0);
        c
    }
}

impl Drop for Base {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process whose stdout is read line by line.
struct Proc {
    child: Child,
    out: BufReader<ChildStdout>,
    seen: String,
}

impl Proc {
    fn start(mut c: Command) -> Proc {
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("peregrine starts");
        let out = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child,
            out,
            seen: String::new(),
        }
    }
    /// Reads lines until one contains `needle` (false at the end of the output).
    fn wait_line(&mut self, needle: &str) -> bool {
        let mut l = String::new();
        loop {
            l.clear();
            if self.out.read_line(&mut l).unwrap_or(0) == 0 {
                return false;
            }
            self.seen.push_str(&l);
            if l.contains(needle) {
                return true;
            }
        }
    }
    fn signal(&self, sig: rustix::process::Signal) {
        peregrine_testkit::signal(self.child.id(), sig).unwrap();
    }
    /// Waits for the end (killing it after `limit`) and returns its whole output.
    fn finish(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        self.seen.push_str(&rest);
        let mut o = self.child.wait_with_output().unwrap();
        o.stdout = std::mem::take(&mut self.seen).into_bytes();
        o
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn topic(tag: &str) -> String {
    format!("shm{}.{tag}", std::process::id())
}

#[test]
fn a_missing_or_non_directory_peregrine_shm_dir_is_an_error_naming_the_variable_and_the_fix() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = Base::new("env");
    let file = base.0.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let missing = base.0.join("missing");
    for (value, why) in [(&missing, "no such directory"), (&file, "not a directory")] {
        let o = Command::new(exe())
            .args([
                "bench",
                "throughput",
                "--role",
                "pub",
                "--name",
                "x",
                "--count",
                "1",
            ])
            .env("PEREGRINE_SHM_DIR", value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{}", text(&o));
        let shown = format!("PEREGRINE_SHM_DIR={}", value.display());
        for needle in [shown.as_str(), why, "mkdir -p", "unset PEREGRINE_SHM_DIR"] {
            assert!(err.contains(needle), "'{needle}' missing: {err}");
        }
    }
}

/// Issue 14: `peregrine pub` interrupted by SIGINT, SIGTERM or SIGHUP left its 16 MiB segment
/// behind. Now pub, sub and resolverd stop cleanly on each and pub removes its segment.
#[test]
fn pub_sub_and_resolverd_stopped_by_sigint_sigterm_or_sighup_close_cleanly_and_leave_no_segment() {
    use rustix::process::Signal;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (sig, name) in [
        (Signal::INT, "SIGINT"),
        (Signal::TERM, "SIGTERM"),
        (Signal::HUP, "SIGHUP"),
    ] {
        let base = Base::new("sig");
        let t = topic(&format!("sig{}", name.to_lowercase()));
        let mut sub = Proc::start(base.cmd(&["sub", &t]));
        assert!(sub.wait_line("subscribed to"));
        let mut publ = Proc::start(base.cmd(&["pub", &t, "--rate", "200"]));
        let publ_pid = publ.child.id();
        assert!(publ.wait_line("publishing"), "{name}");
        wait_until("the publisher's segment", || !base.my_files().is_empty());
        assert!(sub.wait_line("source found"), "{name}");
        publ.signal(sig);
        let o = publ.finish(Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&format!("stopped by {name}")),
            "{}",
            text(&o)
        );
        assert!(
            base.my_files().is_empty(),
            "{name}: left behind {:?}",
            base.my_files()
        );
        let pub_counters = format!("counters.{}.", publ_pid);
        assert!(
            !base.counters_files().iter().any(|p| p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&pub_counters)),
            "{name}: the publisher's counters file stayed: {:?}",
            base.counters_files()
        );
        sub.signal(sig);
        let o = sub.finish(Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("stopped by {name}")));
        let mut d = Proc::start(base.cmd(&["resolverd", "--listen", "127.0.0.1:0"]));
        assert!(d.wait_line("resolverd listening"));
        d.signal(sig);
        let o = d.finish(Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("stopped by {name}")));
        assert!(
            base.all_files().is_empty(),
            "{name}: left behind {:?}",
            base.all_files()
        );
    }
}

/// Issue 14: a publisher killed with kill -9 left its segment for good. The next publisher
/// removes it (its lock is gone) and says how many it removed.
#[test]
fn a_segment_left_by_kill_9_is_removed_by_the_next_publisher_which_counts_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = Base::new("kill");
    let mut first = Proc::start(base.cmd(&["pub", &topic("killed"), "--rate", "100"]));
    assert!(first.wait_line("publishing"));
    wait_until("the segment", || base.my_files().len() == 1);
    let left = base.my_files();
    first.signal(rustix::process::Signal::KILL);
    let o = first.finish(Duration::from_secs(10));
    assert_eq!(
        o.status.signal(),
        Some(rustix::process::Signal::KILL.as_raw())
    );
    assert_eq!(base.my_files(), left, "kill -9 leaves the segment behind");
    assert_eq!(
        base.counters_files().len(),
        1,
        "and its counters file: {:?}",
        base.counters_files()
    );
    let o = base
        .cmd(&["pub", &topic("next"), "--count", "1", "--linger-ms", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("removed 1 shared-memory segment(s) left by dead publishers"),
        "{}",
        text(&o)
    );
    assert!(base.all_files().is_empty(), "{:?}", base.all_files());
}

/// Issue 14: truncating a live segment killed its publisher and its subscribers with SIGBUS
/// (exit 135, no message). Now the publisher ends with an error naming the file and the
/// subscriber reports it and goes on running; neither dies of a signal.
#[test]
fn truncating_a_live_segment_is_an_error_naming_it_not_a_sigbus() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = Base::new("trunc");
    let t = topic("trunc");
    let mut sub = Proc::start(base.cmd(&["sub", &t]));
    assert!(sub.wait_line("subscribed to"));
    let mut publ = Proc::start(base.cmd(&["pub", &t, "--rate", "20000", "--size", "100"]));
    assert!(publ.wait_line("publishing"));
    assert!(sub.wait_line("source found"));
    assert!(sub.wait_line("[sub "), "a rate line: messages flow");
    let files = base.my_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let segment = files[0].clone();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(0)
        .unwrap();
    let o = publ.finish(Duration::from_secs(30));
    assert_eq!(o.status.signal(), None, "{}", text(&o));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&segment.display().to_string()) && err.contains("truncated"),
        "{}",
        text(&o)
    );
    assert!(sub.wait_line("DAMAGED"), "{}", sub.seen);
    assert!(
        sub.seen.contains(&segment.display().to_string()),
        "{}",
        sub.seen
    );
    sub.signal(rustix::process::Signal::TERM);
    let o = sub.finish(Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Issue 14: a segment another local user created under a name was refused to our publisher,
/// but our subscriber attached to it and read that user's data. Now it never looks where
/// another user's segments are, and refuses a file of another user even in its own directory.
#[test]
fn our_subscriber_never_reads_another_users_segment() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(other) = peregrine_testkit::other_user(OTHER_USER, "it publishes as a second user")
    else {
        return;
    };
    let base = Base::new("xuser");
    let name = format!("squat-{}", std::process::id());
    // The other user publishes on the name first.
    let mut theirs = other.command(&exe());
    theirs
        .args(["bench", "throughput", "--role", "pub", "--name", &name])
        .args(["--count", "1000000000", "--size", "32"])
        .env("PEREGRINE_SHM_DIR", &base.0);
    let theirs = Proc::start(theirs);
    let their_dir = base.0.join(format!("peregrine-{}", other.uid));
    wait_until("the other user's segment", || {
        their_dir.join(&name).exists() || base.0.join(format!("peregrine-{name}")).exists()
    });
    // Our subscriber on the same name must not attach: it says "ready" only once attached.
    let mut ours = Proc::start(base.cmd(&[
        "bench",
        "throughput",
        "--role",
        "sub",
        "--name",
        &name,
        "--size",
        "32",
    ]));
    let pid = ours.child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let attached = ours.wait_line("ready");
        tx.send(attached).ok();
        ours.finish(Duration::from_secs(30))
    });
    let attached = rx
        .recv_timeout(Duration::from_millis(1500))
        .unwrap_or(false);
    let _ = peregrine_testkit::signal(pid, rustix::process::Signal::KILL);
    let o = reader.join().unwrap();
    drop(theirs.finish(Duration::ZERO));
    assert!(
        !attached,
        "our subscriber attached to another user's segment: {}",
        text(&o)
    );
    // A file of the other user inside our own directory (only root could put it there) is
    // refused, naming its owner.
    std::fs::create_dir_all(base.mine()).ok();
    std::fs::set_permissions(base.mine(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let planted = base.mine().join(format!("{name}-planted"));
    std::fs::write(&planted, vec![0u8; 8192]).unwrap();
    std::os::unix::fs::chown(&planted, Some(other.uid), Some(other.gid)).unwrap();
    let o = base
        .cmd(&[
            "bench",
            "throughput",
            "--role",
            "sub",
            "--name",
            &format!("{name}-planted"),
            "--size",
            "32",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("belongs to uid {}", other.uid)),
        "{}",
        text(&o)
    );
}

/// Issue 14: another user running `flock -x /dev/shm sleep 9` made every publisher on the host
/// fail after 5 s (creators took turns by locking the shared directory itself). Now they lock
/// their own directory, which no other user can open.
#[test]
fn another_users_lock_on_the_shared_directory_does_not_stop_our_publishers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(other) =
        peregrine_testkit::other_user(OTHER_USER, "it locks the shm directory as a second user")
    else {
        return;
    };
    if peregrine_testkit::program("flock", "apt-get install util-linux").is_none() {
        return;
    }
    let base = Base::new("flock");
    let mut lock = other.command("flock");
    // -o: the lock is held by flock itself (not by sleep), so killing it releases the lock.
    // No pipes: its `sleep` child outlives the kill, and would hold them open for 30 s.
    lock.args(["-o", "-x"])
        .arg(&base.0)
        .args(["sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut attacker = lock.spawn().expect("flock starts");
    let probe = std::fs::File::open(&base.0).unwrap();
    wait_until("the other user's lock", || {
        use rustix::fs::{flock, FlockOperation};
        match flock(&probe, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                let _ = flock(&probe, FlockOperation::Unlock);
                false
            }
            Err(_) => true,
        }
    });
    let name = format!("flocked-{}", std::process::id());
    let publ = Proc::start(base.cmd(&[
        "bench",
        "throughput",
        "--role",
        "pub",
        "--name",
        &name,
        "--count",
        "1000",
        "--size",
        "32",
    ]));
    let sub = Proc::start(base.cmd(&[
        "bench",
        "throughput",
        "--role",
        "sub",
        "--name",
        &name,
        "--size",
        "32",
    ]));
    let p = publ.finish(Duration::from_secs(60));
    let s = sub.finish(Duration::from_secs(60));
    let _ = attacker.kill();
    let _ = attacker.wait();
    assert!(p.status.success(), "publisher: {}", text(&p));
    assert!(s.status.success(), "subscriber: {}", text(&s));
}

/// Another user can still create the name of our directory in the shared base before us (a
/// denial of service): it is refused with an error naming its owner and the fix, and a link
/// there is never followed.
#[test]
fn a_squatted_or_linked_user_directory_is_refused_naming_the_owner_and_the_fix() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(other) =
        peregrine_testkit::other_user(OTHER_USER, "it squats a directory name as a second user")
    else {
        return;
    };
    let base = Base::new("squat");
    let target = base.0.join("elsewhere");
    let pub_args = [
        "bench",
        "throughput",
        "--role",
        "pub",
        "--name",
        "x",
        "--count",
        "1",
    ];
    let mut mkdir = other.command("mkdir");
    mkdir.args(["-m", "777"]).arg(base.mine());
    assert!(mkdir.status().unwrap().success());
    let o = base.cmd(&pub_args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        err.contains(&format!("belongs to uid {}", other.uid)) && err.contains("rm -r"),
        "{err}"
    );
    std::fs::remove_dir(base.mine()).unwrap();
    let mut mkdir = other.command("mkdir");
    mkdir.args(["-m", "777"]).arg(&target);
    assert!(mkdir.status().unwrap().success());
    let mut ln = other.command("ln");
    ln.arg("-s").arg(&target).arg(base.mine());
    assert!(ln.status().unwrap().success());
    let o = base.cmd(&pub_args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing was made through the link"
    );
}

/// With segments kept to their user, a subscriber by topic must not choose the shared memory
/// of another user's publisher (it could not open it, and would wait for ever): it takes the
/// network transport that publisher also offers. (Before issue 14 it read the other user's
/// segment.)
#[test]
fn a_subscriber_by_topic_takes_the_network_from_another_users_publisher() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(other) =
        peregrine_testkit::other_user(OTHER_USER, "it publishes by topic as a second user")
    else {
        return;
    };
    let base = Base::new("bytopic");
    let t = topic("bytopic");
    let mut sub = Proc::start(base.cmd(&["sub", &t, "--count", "20", "--seconds", "30"]));
    assert!(sub.wait_line("subscribed to"));
    let mut theirs = other.command(&exe());
    theirs
        .args(["pub", &t, "--rate", "200"])
        .env("PEREGRINE_SHM_DIR", &base.0);
    let theirs = Proc::start(theirs);
    let o = sub.finish(Duration::from_secs(40));
    theirs.signal(rustix::process::Signal::TERM);
    drop(theirs.finish(Duration::from_secs(10)));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.contains("via udp://"), "{out}");
    assert!(!out.contains("via ipc://"), "{out}");
}

fn is_counters(p: &Path) -> bool {
    p.file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("counters.")
}
