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
    pub fn start(args: &[&str]) -> Role {
        let mut child = Command::new(env!("CARGO_BIN_EXE_peregrine"))
            .args(args)
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
