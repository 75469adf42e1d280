//! A process of a fan-out probe: its standard output and error read by threads into lines (so a
//! chatty process never blocks on a full pipe), waited for with deadlines, stopped by signal,
//! killed if it outlives the probe, and its CPU time read from `/proc` for the processes that
//! do not report their own (nats-server).

use crate::BenchError;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Proc {
    child: Child,
    what: String,
    /// Standard output lines not yet taken by [`Proc::wait_line`].
    lines: Receiver<String>,
    /// Every standard output line, in order.
    out: Arc<Mutex<Vec<String>>>,
    /// The last lines of standard error, for error messages.
    err: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
}

fn read_lines(
    r: impl Read + Send + 'static,
    keep: Arc<Mutex<Vec<String>>>,
    tail_only: bool,
    tx: Option<std::sync::mpsc::Sender<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if let Some(tx) = &tx {
                let _ = tx.send(line.clone());
            }
            let mut k = keep.lock().expect("lines lock");
            if tail_only && k.len() >= 20 {
                k.remove(0);
            }
            k.push(line);
        }
    });
}

impl Proc {
    /// Starts `cmd` (its stdin closed, stdout and stderr read into lines).
    pub fn spawn(mut cmd: Command, what: impl Into<String>) -> Result<Proc, BenchError> {
        let what = what.into();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::Child(format!("could not start {what}: {e}")))?;
        let (tx, rx) = channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(Vec::new()));
        read_lines(
            child.stdout.take().expect("piped"),
            Arc::clone(&out),
            false,
            Some(tx),
        );
        read_lines(
            child.stderr.take().expect("piped"),
            Arc::clone(&err),
            true,
            None,
        );
        Ok(Proc {
            child,
            what,
            lines: rx,
            out,
            err,
            status: None,
        })
    }

    /// The last lines it wrote to standard error, joined (for error messages).
    pub fn stderr_tail(&self) -> String {
        self.err.lock().expect("lines lock").join(" | ")
    }

    fn failed(&self, why: String) -> BenchError {
        let tail = self.stderr_tail();
        if tail.is_empty() {
            BenchError::Child(format!("{}: {why}", self.what))
        } else {
            BenchError::Child(format!("{}: {why}; its last words: {tail}", self.what))
        }
    }

    /// Waits for a standard output line that `wanted` accepts, and returns it.
    pub fn wait_line(
        &mut self,
        wanted: impl Fn(&str) -> bool,
        timeout: Duration,
        waiting_for: &str,
    ) -> Result<String, BenchError> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return Ok(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.failed(format!(
                        "no {waiting_for} within {:.0} s",
                        timeout.as_secs_f64()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    return Err(self.failed(format!(
                        "exited ({}) before {waiting_for}",
                        status.map_or("?".to_string(), |s| s.to_string())
                    )));
                }
            }
        }
    }

    /// Kills it with SIGKILL (no chance to close anything); reaped by [`wait`](Self::wait) or
    /// when dropped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Asks it to stop (SIGTERM).
    pub fn terminate(&self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }

    /// Waits for it to exit, killing it after `timeout`; an exit that is not a success is an
    /// error naming it.
    pub fn wait(&mut self, timeout: Duration) -> Result<(), BenchError> {
        let end = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(self.failed(format!(
                    "still running {:.0} s after it should have ended; killed",
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.status = Some(status);
        // Let the reader threads take the last lines.
        let until = Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&self.out) > 1 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !status.success() {
            return Err(self.failed(format!("exited with {status}")));
        }
        Ok(())
    }

    /// Its last standard output line that is a JSON object with `key`.
    pub fn last_json(&self, key: &str) -> Result<serde_json::Value, BenchError> {
        let out = self.out.lock().expect("lines lock");
        out.iter()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get(key).is_some())
            .ok_or_else(|| {
                drop(out);
                self.failed(format!("printed no JSON line with \"{key}\""))
            })
    }

    /// Pins every thread it has now to `cpu` (threads it starts later inherit the pinning of
    /// the thread that starts them). Best effort: a thread that ended meanwhile is skipped.
    pub fn pin(&self, cpu: usize) -> Result<(), BenchError> {
        pin_process(self.child.id(), cpu)
    }

    /// CPU seconds (user + system) it has used so far, from `/proc/PID/stat`.
    pub fn cpu_s(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // The command name (field 2) is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of the line (utime, stime) are 11 and 12 after the name and state.
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
    }
}

/// Pins every thread process `pid` has now to `cpu` (see [`Proc::pin`]).
pub fn pin_process(pid: u32, cpu: usize) -> Result<(), BenchError> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(BenchError::Config(format!("cpu {cpu} out of range")));
    }
    set.set(cpu);
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))?;
    for t in tasks.flatten() {
        let tid = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
        if let Some(tid) = tid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::thread::sched_setaffinity(Some(tid), &set);
        }
    }
    Ok(())
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
