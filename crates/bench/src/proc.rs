//! The helper processes of a benchmark: this same binary started again with `--role ...`.
//!
//! Protocol on the helper's stdout: one line `ready` (or `ready INFO`, e.g. the URI it bound)
//! once it is set up, then at exit one JSON line with what it measured. Its stderr passes
//! through to ours.

use crate::BenchError;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

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
    /// Starts `exe args...` and waits for its `ready` line.
    pub fn start(exe: &std::path::Path, args: &[String]) -> Result<Helper, BenchError> {
        let what = format!("{} {}", exe.display(), args.join(" "));
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Child(format!("could not start `{what}`: {e}")))?;
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
                "`{}` said '{}' instead of 'ready'",
                h.what,
                line.trim()
            )));
        }
        Ok(h)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn read_line(&mut self) -> Result<String, BenchError> {
        let mut line = String::new();
        let n = self.out.read_line(&mut line)?;
        if n == 0 {
            let status = self.child.wait()?;
            return Err(BenchError::Child(format!(
                "`{}` exited ({status}) before answering",
                self.what
            )));
        }
        Ok(line)
    }

    /// Waits for the helper's result line and its exit.
    pub fn finish(mut self) -> Result<serde_json::Value, BenchError> {
        let line = self.read_line()?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(BenchError::Child(format!(
                "`{}` failed: {status}",
                self.what
            )));
        }
        serde_json::from_str(line.trim()).map_err(|e| {
            BenchError::Child(format!(
                "`{}` printed an unreadable result '{}': {e}",
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
pub fn say_result(v: &serde_json::Value) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{v}");
    let _ = o.flush();
}
