//! `xdp=` refused for what the process may not do: without the privileges it needs (a process
//! of another user, and a root process whose capabilities were dropped: the error names the
//! uid and what is missing, and nothing is attached), and with frames over its locked-memory
//! limit (the error names xdp_frames= and ulimit -l).
//!
//! Needs root (to start them), `setpriv` and `prlimit`: without them it says so and skips,
//! except under `.ci/run` (`PEREGRINE_REQUIRE_TOOLS=1`), where it fails.

use std::process::Command;

const OTHER_USER: &str = "pgr-test-xdp";

/// Held by each test while it runs processes with `xdp=lo`: the one over its memory limit
/// attaches its program before it fails, which the other test's check of lo would see.
static LO: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A publisher with `xdp=lo` through `bench throughput --role pub`, started by `command`: its
/// standard error, after checking it failed.
fn refused(mut command: Command) -> String {
    let port = peregrine_testkit::free_port(false);
    let out = command
        .args(["bench", "throughput", "--transport", "udp", "--role", "pub"])
        .args(["--name", "xdp-refusals", "--seconds", "1"])
        .args(["--uri", &format!("udp://127.0.0.1:{port}?xdp=lo")])
        .env_remove("PEREGRINE_CONFIG")
        .output()
        .expect("peregrine runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "a publisher with xdp= was not refused: {stderr}"
    );
    stderr
}

#[test]
fn xdp_without_root_or_capabilities_is_refused_naming_what_is_missing() {
    let Some(other) =
        peregrine_testkit::other_user(OTHER_USER, "it opens xdp= as a user without privileges")
    else {
        return;
    };
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let exe = env!("CARGO_BIN_EXE_peregrine");
    let as_user = refused(other.command(exe));
    assert!(
        as_user.contains("Operation not permitted")
            && as_user.contains(&format!("running as uid {}", other.uid))
            && as_user.contains("without CAP_NET_ADMIN and CAP_BPF"),
        "{as_user}"
    );
    // Root with every capability dropped from its bounding set: what it lacks is named.
    let mut dropped = Command::new("setpriv");
    dropped.args(["--bounding-set=-all", "--inh-caps=-all", "--", exe]);
    let as_root = refused(dropped);
    assert!(
        as_root.contains("running as uid 0 without CAP_NET_ADMIN and CAP_BPF"),
        "{as_root}"
    );
    // Nothing was attached to lo (`ip link` shows `prog/xdp` while a program is).
    if peregrine_testkit::program("ip", "apt-get install iproute2").is_some() {
        let out = Command::new("ip")
            .args(["-d", "link", "show", "dev", "lo"])
            .output()
            .expect("ip runs");
        let link = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && !link.contains("xdp"), "{link}");
    }
}

#[test]
fn frames_over_the_locked_memory_limit_are_refused_naming_both_fixes() {
    if !peregrine_testkit::root("it lowers a process's locked-memory limit below its frames") {
        return;
    }
    if peregrine_testkit::program("setpriv", "apt-get install util-linux").is_none()
        || peregrine_testkit::program("prlimit", "apt-get install util-linux").is_none()
    {
        return;
    }
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    // Without CAP_IPC_LOCK the kernel holds the 8 MiB of frames (4096 of 2 KiB, the default)
    // to a 64 KiB limit.
    let mut limited = Command::new("setpriv");
    limited.args(["--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"]);
    limited.args([
        "prlimit",
        "--memlock=65536",
        env!("CARGO_BIN_EXE_peregrine"),
    ]);
    let stderr = refused(limited);
    assert!(
        stderr.contains("cannot allocate or register 8388608 bytes of AF_XDP frames")
            && stderr.contains("lower xdp_frames=")
            && stderr.contains("ulimit -l"),
        "{stderr}"
    );
}
