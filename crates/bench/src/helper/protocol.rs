//! The helper protocol: how a benchmark starts one of its sides as a process and hears from
//! it. The parent runs this same binary again as `peregrine helper SPEC` ([`Helper::start`]),
//! where SPEC is the side's settings as JSON, `{"<role>": {...}}`; the helper, once set up,
//! prints one line `ready` (or `ready INFO`, e.g. the URI it bound, [`say_ready_with`]), and
//! at exit one JSON line with what it measured ([`say_result`]). Its stderr passes through to
//! ours.
//!
//! Each side is a [`Role`]: a type of its measurement's module carrying the same typed
//! configuration the measuring side runs with, so no argument list is built or parsed by hand.
//! Which roles exist, and what plays each, is the [registry](super::registry): the
//! measurements name only this module, and only the registry names them.

use crate::BenchError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The name of the (hidden) command line word that starts a helper: `peregrine helper SPEC`.
pub const HELPER_COMMAND: &str = "helper";

/// One side a benchmark can start as a helper process.
pub trait Role: Serialize {
    /// The side's name in a SPEC: the registry's [`HelperSpec`](super::registry::HelperSpec)
    /// variant, in snake case.
    const TAG: &'static str;
    /// What it is, for error messages.
    const WHAT: &'static str;
}

/// The SPEC a helper playing `role` is started with: `{"<TAG>": <role>}`.
pub fn spec_json<R: Role>(role: &R) -> String {
    let mut spec = serde_json::Map::new();
    spec.insert(
        R::TAG.to_string(),
        serde_json::to_value(role).expect("helper roles serialise"),
    );
    serde_json::Value::Object(spec).to_string()
}

/// A running helper process.
#[derive(Debug)]
pub struct Helper {
    child: Child,
    out: BufReader<ChildStdout>,
    what: String,
    /// What followed `ready` on the helper's first line (empty if nothing).
    pub ready_info: String,
}

impl Helper {
    /// Starts `exe helper SPEC` playing `role` and waits for its `ready` line.
    pub fn start<R: Role>(exe: &std::path::Path, role: &R) -> Result<Helper, BenchError> {
        Self::start_in(exe, role, None)
    }

    /// [`start`](Self::start), in network namespace `netns` when one is named (`ip netns
    /// exec`; the benchmark made the namespace, see [`crate::netns`]).
    pub fn start_in<R: Role>(
        exe: &std::path::Path,
        role: &R,
        netns: Option<&str>,
    ) -> Result<Helper, BenchError> {
        let what = format!("{} ({})", R::WHAT, exe.display());
        let json = spec_json(role);
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args([HELPER_COMMAND, &json])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Child(format!("could not start the {what}: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut h = Helper {
            child,
            out,
            what,
            ready_info: String::new(),
        };
        let line = h.read_line()?;
        let line = line.trim();
        if let Some(info) = line.strip_prefix("ready ") {
            h.ready_info = info.trim().to_string();
        } else if line != "ready" {
            return Err(BenchError::Child(format!(
                "the {} said '{line}' instead of 'ready'",
                h.what
            )));
        }
        Ok(h)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the helper SIGKILL (no chance to close anything) without waiting for it to end
    /// (dropping the helper reaps it).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    fn read_line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        let n = self.out.read_line(&mut line)?;
        if n == 0 {
            let status = self.child.wait()?;
            return Err(BenchError::Child(format!(
                "the {} exited ({status}) before answering",
                self.what
            )));
        }
        Ok(line)
    }

    /// Waits for the helper's result line and its exit.
    pub fn finish<T: DeserializeOwned>(mut self) -> Result<T, BenchError> {
        let line = self.read_line()?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(BenchError::Child(format!(
                "the {} failed: {status}",
                self.what
            )));
        }
        serde_json::from_str(line.trim()).map_err(|e| {
            BenchError::Child(format!(
                "the {} printed an unreadable result '{}': {e}",
                self.what,
                line.trim()
            ))
        })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // A helper still running here means the benchmark failed: do not leave it spinning.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What an echoing side (a pong) reports at exit.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct EchoReport {
    pub cpu_s: f64,
    pub echoed: u64,
}

/// Announces readiness to the parent (the helper side of the protocol).
pub fn say_ready() {
    say_ready_with("");
}

/// Announces readiness with information for the parent (e.g. the URI bound).
pub fn say_ready_with(info: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = if info.is_empty() {
        writeln!(o, "ready")
    } else {
        writeln!(o, "ready {info}")
    };
    let _ = o.flush();
}

/// Prints the helper's result line.
pub fn say_result(v: &impl Serialize) {
    use std::io::Write;
    let line = serde_json::to_string(v).expect("helper results serialise");
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}
