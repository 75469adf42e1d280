//! What a test needs from outside the Rust toolchain, and a visible skip without it.
//!
//! A test that needs a program (sockperf, Chromium, nats-server, tshark, promtool, a C
//! compiler, Python) or root asks here first:
//!
//! ```no_run
//! # fn main() {
//! let Some(sockperf) = peregrine_testkit::program("sockperf", "apt-get install sockperf") else {
//!     return; // skipped, and said so
//! };
//! # let _ = sockperf;
//! # }
//! ```
//!
//! On a machine without it the test prints one line on the terminal, even under cargo's
//! output capture, naming what is missing and how to get it:
//!
//! ```text
//! skipped pingpong_compares_with_sockperf: sockperf not installed (apt-get install sockperf); .ci/run installs it
//! ```
//!
//! and passes without running. `.ci/run`, which installs everything, sets
//! [`REQUIRE_TOOLS_VAR`]`=1`: then a missing tool fails the test instead, so CI runs every test.
#![forbid(unsafe_code)]

pub mod pki;

/// A port on loopback that was free a moment ago (bound, then released): TCP, or UDP.
pub fn free_port(tcp: bool) -> u16 {
    if tcp {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free TCP port on loopback")
            .port()
    } else {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free UDP port on loopback")
            .port()
    }
}

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

/// The environment variable that turns a skip into a failure (set by `.ci/run`).
pub const REQUIRE_TOOLS_VAR: &str = "PEREGRINE_REQUIRE_TOOLS";

/// True when a missing tool must fail the test (`PEREGRINE_REQUIRE_TOOLS=1`).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS_VAR).is_ok_and(|v| v == "1")
}

/// The path of `name` on `PATH`, or `None` after saying the test is skipped (`install` tells
/// how to get it). Panics instead of skipping under [`REQUIRE_TOOLS_VAR`].
pub fn program(name: &str, install: &str) -> Option<PathBuf> {
    match find_program(name) {
        Some(p) => Some(p),
        None => {
            skip(
                &format!("{name} not installed ({install})"),
                ".ci/run installs it",
            );
            None
        }
    }
}

/// `name` on `PATH`: an executable file of that name in one of its folders.
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// True when this process runs as root; otherwise says the test is skipped (`why`: what it
/// does that needs root). Panics instead of skipping under [`REQUIRE_TOOLS_VAR`].
pub fn root(why: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    skip(
        &format!(
            "needs root ({why}); running as uid {}",
            rustix::process::geteuid().as_raw()
        ),
        ".ci/run runs as root",
    );
    false
}

/// True when this process is root and `ip netns` works (iproute2 installed, namespaces
/// allowed); otherwise says the test is skipped. Panics instead under [`REQUIRE_TOOLS_VAR`].
pub fn root_with_netns() -> bool {
    if !root("it creates network namespaces and veth pairs") {
        return false;
    }
    if program("ip", "apt-get install iproute2").is_none() {
        return false;
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            skip(
                &format!(
                    "`ip netns list` failed: {} (network namespaces are not available here)",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                ".ci/run needs them",
            );
            false
        }
        Err(e) => {
            skip(
                &format!("cannot run `ip netns list`: {e}"),
                ".ci/run needs it",
            );
            false
        }
    }
}

/// A local user other than the one running the tests, for tests that act as another user
/// (squatting a name, locking a shared directory, reading someone's segment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl OtherUser {
    /// `program` run as this user, the environment passed on: `setpriv` replaces itself with
    /// the program (no process in between), so signals and kill reach the program itself.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "--", program]);
        c
    }
}

/// The system user `name` (made with `useradd --system --no-create-home` if missing; it stays,
/// so a re-run finds it), when this process is root and has `useradd` and `setpriv`; otherwise
/// says the test is skipped (`why`: what the test does as that user). Panics instead of
/// skipping under [`REQUIRE_TOOLS_VAR`].
pub fn other_user(name: &str, why: &str) -> Option<OtherUser> {
    if !root(why) {
        return None;
    }
    program("useradd", "apt-get install passwd")?;
    program("setpriv", "apt-get install util-linux")?;
    let lookup = || -> Option<OtherUser> {
        let o = Command::new("id").arg(name).arg("-u").output().ok()?;
        let uid = String::from_utf8_lossy(&o.stdout).trim().parse().ok()?;
        let o = Command::new("id").arg(name).arg("-g").output().ok()?;
        let gid = String::from_utf8_lossy(&o.stdout).trim().parse().ok()?;
        Some(OtherUser {
            name: name.to_string(),
            uid,
            gid,
        })
    };
    // Test binaries run at once may all try: useradd fails while another holds the lock of
    // /etc/passwd, so try again until the user exists.
    for _ in 0..50 {
        if let Some(u) = lookup() {
            return Some(u);
        }
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .output();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("could not create the test user {name} with useradd");
}

/// Says the current test is skipped because `what` is missing (`ci`: how CI has it): one line
/// straight to the terminal (cargo's capture holds back only `print!`/`eprint!`), or a panic
/// under [`REQUIRE_TOOLS_VAR`].
pub fn skip(what: &str, ci: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if tools_required() {
        panic!(
            "{test}: {what}; {REQUIRE_TOOLS_VAR}=1 (set by .ci/run) makes a missing tool a failure"
        );
    }
    let line = format!("skipped {test}: {what}; {ci}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Sends signal `sig` to process `pid`, without needing a `kill` program on the machine.
pub fn signal(pid: u32, sig: rustix::process::Signal) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| std::io::Error::other(format!("{pid} is not a process id")))?;
    rustix::process::kill_process(pid, sig).map_err(Into::into)
}

/// Runs `program command... args...` for each case and asserts it is refused (a failing exit)
/// with standard error containing the case's text (the value named, or the fix).
pub fn assert_refused(program: &str, command: &[&str], cases: &[(&[&str], &str)]) {
    for (args, says) in cases {
        let o = Command::new(program)
            .args(command)
            .args(*args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{command:?} {args:?} was accepted");
        assert!(err.contains(says), "{command:?} {args:?}: {err}");
    }
}

/// A Python virtual environment in `venv` (made with `python3 -m venv --system-site-packages`
/// if missing) in which every module of `modules` imports, pip installing the package named
/// beside it (`("pyarrow", "pyarrow")`) when it does not: its interpreter, or `None` after
/// saying the test is skipped (no python3, no venv module, or pip could not fetch a package).
/// Tests in one binary that share a `venv` must not call this at once.
pub fn python_with(venv: &std::path::Path, modules: &[(&str, &str)]) -> Option<PathBuf> {
    let python = program("python3", "apt-get install python3 python3-venv")?;
    let venv_python = venv.join("bin/python");
    if !venv_python.exists() {
        let made = Command::new(&python)
            .args(["-m", "venv", "--system-site-packages"])
            .arg(venv)
            .output()
            .expect("run python3");
        if !made.status.success() {
            skip(
                &format!(
                    "python3 cannot make a virtual environment ({}; apt-get install python3-venv)",
                    String::from_utf8_lossy(&made.stderr).trim()
                ),
                ".ci/run installs it",
            );
            return None;
        }
    }
    for (module, package) in modules {
        let imports = Command::new(&venv_python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if imports {
            continue;
        }
        let pip = Command::new(&venv_python)
            .args(["-m", "pip", "install", "--quiet", package])
            .output()
            .expect("run pip");
        if !pip.status.success() {
            skip(
                &format!(
                    "pip install {package} failed ({})",
                    String::from_utf8_lossy(&pip.stderr).trim()
                ),
                ".ci/run fetches it from PyPI",
            );
            return None;
        }
    }
    Some(venv_python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_on_path_is_found_and_a_missing_one_is_not() {
        assert!(find_program("sh").is_some(), "no sh on PATH");
        assert!(find_program("peregrine-no-such-program").is_none());
    }
}
