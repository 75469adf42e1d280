//! The peer baseline: the same ping-pong measured by `sockperf` (Debian's 3.7 package).
//!
//! `sockperf server` is the reflector on `cpus.b`, `sockperf ping-pong` the measuring side on
//! `cpus.a`, both over loopback only: `127.0.0.1` for udp and tcp, the group [`MCAST_GROUP`] on
//! the loopback interface for mcast. Both are pinned with `taskset -c CPU` when `taskset` is on the
//! `PATH`, otherwise by starting them from a thread pinned to the CPU (a child inherits its
//! affinity). sockperf 3.7 has no affinity option for a single-socket server or client (its
//! `--cpu-affinity` needs `-f` and threads), so `taskset` is the one used.
//!
//! sockperf prints half the round trip ("latency") in microseconds; [`parse_output`] reads its
//! summary into a [`Summary`] in nanoseconds. Differences from our own statistics, all from
//! sockperf's source (`src/client.cpp`, `src/ticks.cpp`):
//! - it measures with its own TSC reading and drops the first 400 ms (its warm-up) and the
//!   last messages from the statistics: `samples` is its observation count of the valid part;
//! - its percentiles are nearest-rank on the exact sorted samples (ours come from an
//!   HdrHistogram with 3 significant digits), printed to 1 ns;
//! - its std-dev is the sample standard deviation (n - 1); `stddev_ns` is converted to the
//!   population standard deviation our [`Summary`] holds, `sd * sqrt((n - 1) / n)`.
//!
//! sockperf prints every [`Summary`] column, so nothing is filled in or estimated.

use crate::measure::floor::with_cpu;
use crate::stats::Summary;
use crate::{BenchError, CpuPair};
use peregrine::Scheme;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The multicast group sockperf uses for `mcast`, joined on the loopback interface.
pub const MCAST_GROUP: &str = "239.255.77.1";
/// The interface, and for udp and tcp the address, of every sockperf run.
const LOOPBACK: &str = "127.0.0.1";
/// sockperf refuses messages under 14 bytes (its header).
pub const MIN_SIZE: usize = 14;
/// The largest UDP payload (sockperf's limit for all transports).
pub const MAX_SIZE: usize = 65_507;
/// How long the server may take to start listening.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long past `seconds` (and sockperf's 400 ms warm-up) the client may take before it is killed.
const CLIENT_SLACK: Duration = Duration::from_secs(15);

/// Settings of a sockperf run.
#[derive(Debug, Clone)]
pub struct SockperfConfig {
    /// `udp`, `mcast` or `tcp`.
    pub transport: Scheme,
    /// Message size in bytes ([`MIN_SIZE`] to [`MAX_SIZE`]).
    pub size: usize,
    /// `a`: the client (measuring side), `b`: the server (reflector).
    pub cpus: CpuPair,
    /// Non-blocking sockets polled in a loop (`--nonblocked`) instead of blocking receives.
    pub busy_poll: bool,
    /// The client's run time (`-t`), including sockperf's 400 ms warm-up.
    pub seconds: u32,
    /// A free port (see [`free_port`]).
    pub port: u16,
    /// Across a veth pair instead of loopback (`bench pingpong --netns`): the server in one
    /// namespace on its address, the client in the other.
    pub across: Option<SockperfAcross>,
    /// The client sends at this many messages per second (`--mps`) instead of as fast as the
    /// answers come; every message is still answered. (Its `under-load` mode, which answers
    /// one in N, gave medians of 1.3 to 1.9 ms at 100,000 msgs/s on loopback on a 2-core guest
    /// where `ping-pong --mps` gave 3 us: not a baseline.)
    pub mps: Option<u64>,
}

/// Where the two sides of a sockperf run across namespaces are.
#[derive(Debug, Clone)]
pub struct SockperfAcross {
    pub server_ns: String,
    pub client_ns: String,
    pub server_addr: std::net::Ipv4Addr,
}

/// What a sockperf ping-pong printed: the latency summary and its error counts.
#[derive(Debug, Clone, PartialEq)]
pub struct SockperfReport {
    pub summary: Summary,
    pub dropped: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
}

/// `Some(version line)` (e.g. "sockperf, version 3.7-no.git") if `sockperf --version` runs.
pub fn available() -> Option<String> {
    let out = Command::new("sockperf")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(str::trim)
        .find(|l| l.contains("version"))
        .map(str::to_string)
}

/// Checks the settings, naming any value that is not accepted.
pub fn validate(cfg: &SockperfConfig) -> Result<(), BenchError> {
    if !matches!(cfg.transport, Scheme::Udp | Scheme::Mcast | Scheme::Tcp) {
        return Err(BenchError::Config(format!(
            "--transport {} is not accepted for sockperf: give udp, mcast or tcp",
            cfg.transport
        )));
    }
    if cfg.size < MIN_SIZE || cfg.size > MAX_SIZE {
        return Err(BenchError::Config(format!(
            "--size {} is not accepted for sockperf: give {MIN_SIZE} to {MAX_SIZE} bytes (sockperf's own limits)",
            cfg.size
        )));
    }
    if cfg.seconds == 0 {
        return Err(BenchError::Config(
            "sockperf run time 0 s is not accepted: give at least 1 second (sockperf spends the first 400 ms warming up)".into(),
        ));
    }
    if cfg.port == 0 {
        return Err(BenchError::Config(
            "sockperf port 0 is not accepted: give a free port (see sockperf::free_port)".into(),
        ));
    }
    if cfg.mps == Some(0) {
        return Err(BenchError::Config(
            "sockperf rate 0 messages per second is not accepted: give at least 1, or no rate for as fast as the answers come".into(),
        ));
    }
    Ok(())
}

/// A port free on 127.0.0.1 for `transport` at the time of the call (the kernel's choice for
/// port 0; released again, so another process could take it before sockperf does).
pub fn free_port(transport: Scheme) -> Result<u16, BenchError> {
    let port = if transport == Scheme::Tcp {
        std::net::TcpListener::bind((LOOPBACK, 0))?
            .local_addr()?
            .port()
    } else {
        std::net::UdpSocket::bind((LOOPBACK, 0))?
            .local_addr()?
            .port()
    };
    Ok(port)
}

/// The address, transport and blocking options both sides share.
fn common_args(cfg: &SockperfConfig) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let ip = match &cfg.across {
        Some(x) => x.server_addr.to_string(),
        None if cfg.transport == Scheme::Mcast => MCAST_GROUP.into(),
        None => LOOPBACK.into(),
    };
    a.extend(["-i".into(), ip, "-p".into(), cfg.port.to_string()]);
    match cfg.transport {
        Scheme::Tcp => a.push("--tcp".into()),
        Scheme::Mcast => a.extend([
            "--mc-rx-if".into(),
            LOOPBACK.into(),
            "--mc-tx-if".into(),
            LOOPBACK.into(),
        ]),
        _ => {}
    }
    if cfg.busy_poll {
        a.push("--nonblocked".into());
    }
    a
}

fn taskset() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("taskset"))
        .find(|p| p.is_file())
}

/// The full argv: `taskset -c CPU sockperf ...` (or `sockperf ...` when there is no taskset),
/// after `ip netns exec NS` when the side runs in namespace `ns`.
fn argv(cpu: usize, ns: Option<&str>, sockperf_args: Vec<String>) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(ns) = ns {
        v.extend(["ip".into(), "netns".into(), "exec".into(), ns.to_string()]);
    }
    if taskset().is_some() {
        v.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
    }
    v.push("sockperf".into());
    v.extend(sockperf_args);
    v
}

fn server_argv(cfg: &SockperfConfig) -> Vec<String> {
    let mut a = vec!["server".to_string()];
    a.extend(common_args(cfg));
    argv(
        cfg.cpus.b,
        cfg.across.as_ref().map(|x| x.server_ns.as_str()),
        a,
    )
}

fn client_argv(cfg: &SockperfConfig) -> Vec<String> {
    let mut a = vec!["ping-pong".to_string()];
    a.extend(common_args(cfg));
    a.extend([
        "-m".into(),
        cfg.size.to_string(),
        "-t".into(),
        cfg.seconds.to_string(),
    ]);
    if let Some(mps) = cfg.mps {
        a.push(format!("--mps={mps}"));
    }
    argv(
        cfg.cpus.a,
        cfg.across.as_ref().map(|x| x.client_ns.as_str()),
        a,
    )
}

/// The exact server and client command lines [`run`] starts, for printing.
pub fn command_lines(cfg: &SockperfConfig) -> (String, String) {
    (server_argv(cfg).join(" "), client_argv(cfg).join(" "))
}

/// Starts `argv` with piped output; without taskset, from a thread pinned to `cpu`.
fn spawn(argv: &[String], cpu: usize) -> Result<Child, BenchError> {
    let start = || {
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    let child = if argv[0] == "taskset" || argv[0] == "ip" {
        start()
    } else {
        with_cpu(cpu, start)?
    };
    child.map_err(|e| BenchError::Child(format!("could not start `{}`: {e}", argv.join(" "))))
}

/// Forwards a child's stdout and stderr, line by line, to a channel (closed when both end).
fn forward_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let readers: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().expect("stdout is piped")),
        Box::new(child.stderr.take().expect("stderr is piped")),
    ];
    for r in readers {
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// The sockperf server, killed when dropped (also when the run fails).
struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Starts the server and waits until it is in its receive loop: sockperf prints
/// "[tid N] using recvfrom() to block on socket(s)" (or epoll/poll/select) after its socket
/// is bound, listening or joined, just before it starts receiving.
fn start_server(cfg: &SockperfConfig) -> Result<Server, BenchError> {
    let argv = server_argv(cfg);
    let mut child = spawn(&argv, cfg.cpus.b)?;
    let lines = forward_lines(&mut child);
    let mut server = Server { child };
    let mut seen = Vec::new();
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let ready = line.contains("to block on socket");
                seen.push(strip_ansi(&line));
                if ready {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(BenchError::Child(format!(
                    "`{}` did not start receiving within {} s (waited for its line '... to block on socket(s)'); it printed:\n{}",
                    argv.join(" "),
                    SERVER_START_TIMEOUT.as_secs(),
                    seen.join("\n")
                )));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = server.child.wait()?;
                return Err(BenchError::Child(format!(
                    "`{}` exited ({status}) before it was ready; it printed:\n{}",
                    argv.join(" "),
                    seen.join("\n")
                )));
            }
        }
    }
    // Keep draining the server's output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(server)
}

/// Runs the client to completion (killing it if it overruns) and returns what it printed.
fn run_client(cfg: &SockperfConfig) -> Result<String, BenchError> {
    let argv = client_argv(cfg);
    let mut child = spawn(&argv, cfg.cpus.a)?;
    let lines = forward_lines(&mut child);
    let limit = Duration::from_secs(u64::from(cfg.seconds)) + CLIENT_SLACK;
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => out.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Child(format!(
                    "`{}` did not finish within {} s and was killed; it printed:\n{}",
                    argv.join(" "),
                    limit.as_secs(),
                    strip_ansi(&out.join("\n"))
                )));
            }
        }
    }
    let status = child.wait()?;
    let text = out.join("\n");
    if !status.success() {
        return Err(BenchError::Child(format!(
            "`{}` failed ({status}); it printed:\n{}",
            argv.join(" "),
            strip_ansi(&text)
        )));
    }
    Ok(text)
}

/// Runs `sockperf server` and `sockperf ping-pong` as [`command_lines`] shows and returns the
/// client's summary in nanoseconds. Dropped, duplicated or out-of-order messages (which sockperf
/// leaves out of its statistics) are reported on stderr.
pub fn run(cfg: &SockperfConfig) -> Result<Summary, BenchError> {
    validate(cfg)?;
    let server = start_server(cfg)?;
    let text = run_client(cfg)?;
    drop(server);
    let report = parse_output(&text)?;
    if report.dropped + report.duplicated + report.out_of_order > 0 {
        tracing::warn!(
            "sockperf {} {} B: {} dropped, {} duplicated, {} out-of-order messages (not in its statistics)",
            cfg.transport, cfg.size, report.dropped, report.duplicated, report.out_of_order
        );
    }
    Ok(report.summary)
}

/// Removes ANSI colour sequences (sockperf colours some lines even when not on a terminal).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // Parameters and intermediates, up to the final byte (a letter).
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The number at the start of `s` (after spaces), e.g. "  36.449 (std" gives 36.449.
fn leading_number(s: &str) -> Option<f64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(s.len());
    s[..end].parse().ok()
}

/// The number after `key` and the next `=` in `line`.
fn after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let rest = &rest[rest.find('=')? + 1..];
    leading_number(rest)
}

/// Reads the summary of a `sockperf ping-pong` run (microseconds) into nanoseconds.
///
/// Needs these lines (sockperf 3.7; later versions add fields to the first one):
/// ```text
/// ====> avg-latency=43.151 (std-dev=49.064)
/// # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
/// Total 17949 observations; each percentile contains 179.49 observations
/// ---> <MAX> observation = 3430.277
/// ---> percentile 99.990 = 1220.471     (also 99.900, 99.000 and 50.000)
/// ---> <MIN> observation =    7.090
/// ```
/// The error names every one that is missing. The error counts line is optional (0 if absent).
pub fn parse_output(text: &str) -> Result<SockperfReport, BenchError> {
    let text = strip_ansi(text);
    let mut avg = None;
    let mut sd = None;
    let mut total = None;
    let mut min = None;
    let mut max = None;
    let mut percentiles: Vec<(f64, f64)> = Vec::new();
    let (mut dropped, mut duplicated, mut out_of_order) = (0, 0, 0);
    let mut problems = Vec::new();
    for line in text.lines() {
        if line.contains("avg-rtt=") {
            problems.push(format!(
                "it reported round trips ('{}'), not half round trips",
                line.trim()
            ));
        } else if let Some(i) = line.find("avg-lat") {
            // "avg-latency=" (3.7 and later) or "avg-lat=" (older versions).
            avg = after(&line[i..], "avg-lat");
            sd = after(line, "std-dev");
        } else if line.contains("# dropped ") {
            let count = |key| after(line, key).map(|v| v as u64).unwrap_or(0);
            dropped = count("# dropped ");
            duplicated = count("# duplicated ");
            out_of_order = count("# out-of-order ");
        } else if let Some(i) = line.find("Total ") {
            let rest = &line[i + "Total ".len()..];
            if rest.contains("observations") {
                total = leading_number(rest).map(|v| v as u64);
            }
        } else if line.contains("<MAX> observation") {
            max = after(line, "<MAX> observation");
        } else if line.contains("<MIN> observation") {
            min = after(line, "<MIN> observation");
        } else if let Some(i) = line.find("percentile ") {
            let rest = &line[i + "percentile ".len()..];
            if let (Some(p), Some(v)) = (leading_number(rest), after(rest, "")) {
                percentiles.push((p, v));
            }
        } else if line.contains("No messages were received")
            || line.contains("No valid observations")
            || line.contains("ERROR")
        {
            problems.push(format!("it said '{}'", line.trim()));
        }
    }
    let pct = |p: f64| {
        percentiles
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-6)
            .map(|&(_, v)| v)
    };
    let fields = [
        ("the average latency (`avg-latency=`)", avg),
        ("the std-dev (`std-dev=`)", sd),
        (
            "the observation count (`Total N observations`)",
            total.map(|t| t as f64),
        ),
        ("the minimum (`<MIN> observation =`)", min),
        ("the median (`percentile 50.000 =`)", pct(50.0)),
        ("the 99th percentile (`percentile 99.000 =`)", pct(99.0)),
        ("the 99.9th percentile (`percentile 99.900 =`)", pct(99.9)),
        ("the 99.99th percentile (`percentile 99.990 =`)", pct(99.99)),
        ("the maximum (`<MAX> observation =`)", max),
    ];
    let missing: Vec<&str> = fields
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(name, _)| *name)
        .collect();
    if !missing.is_empty() {
        let said = if problems.is_empty() {
            String::new()
        } else {
            format!(" ({})", problems.join("; "))
        };
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(BenchError::Child(format!(
            "sockperf's output lacks {}{said}; its last lines were:\n{}",
            missing.join(", "),
            tail.join("\n")
        )));
    }
    if let Some(p) = problems.first() {
        return Err(BenchError::Child(format!(
            "sockperf's output is unusable: {p}"
        )));
    }
    let us = |v: Option<f64>| v.expect("checked above") * 1000.0;
    let n = total.expect("checked above");
    let population = if n > 1 {
        ((n - 1) as f64 / n as f64).sqrt()
    } else {
        0.0
    };
    Ok(SockperfReport {
        summary: Summary {
            samples: n,
            min_ns: us(min),
            mean_ns: us(avg),
            // sockperf prints no 1st percentile: the box plot's lower whisker is its minimum.
            p1_ns: us(min),
            p25_ns: pct(25.0).map_or(f64::NAN, |v| v * 1000.0),
            median_ns: us(pct(50.0)),
            p75_ns: pct(75.0).map_or(f64::NAN, |v| v * 1000.0),
            p90_ns: pct(90.0).map_or(f64::NAN, |v| v * 1000.0),
            p99_ns: us(pct(99.0)),
            p999_ns: us(pct(99.9)),
            p9999_ns: us(pct(99.99)),
            max_ns: us(max),
            stddev_ns: us(sd) * population,
        },
        dropped,
        duplicated,
        out_of_order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `taskset -c 0 sockperf ping-pong -i 127.0.0.1 -p 23451 -m 64 -t 2` against
    /// `taskset -c 1 sockperf server -i 127.0.0.1 -p 23451` on the development machine
    /// (sockperf 3.7-no.git, stdout redirected to a file: the colour codes are kept).
    const SAMPLE: &str = "sockperf: \u{1b}[2;35m== version #3.7-no.git == \u{1b}[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)

[ 0] IP = 127.0.0.1       PORT = 23451 # UDP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.001 sec; Warm up time=400 msec; SentMessages=22817; ReceivedMessages=22816
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=17949; ReceivedMessages=17949
sockperf: \u{1b}[2;35m====> avg-latency=43.151 (std-dev=49.064)\u{1b}[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 43.151 usec
sockperf: \u{1b}[2;35mTotal 17949 observations\u{1b}[0m; each percentile contains 179.49 observations
sockperf: ---> <MAX> observation = 3430.277
sockperf: ---> percentile 99.999 = 3430.277
sockperf: ---> percentile 99.990 = 1220.471
sockperf: ---> percentile 99.900 =  551.335
sockperf: ---> percentile 99.000 =  205.174
sockperf: ---> percentile 90.000 =   48.742
sockperf: ---> percentile 75.000 =   41.231
sockperf: ---> percentile 50.000 =   36.449
sockperf: ---> percentile 25.000 =   32.503
sockperf: ---> <MIN> observation =    7.090
";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn parses_sockperf_3_7_ping_pong_output_into_nanoseconds() {
        let r = parse_output(SAMPLE).unwrap();
        let s = r.summary;
        assert_eq!(s.samples, 17949);
        assert!(close(s.mean_ns, 43_151.0), "{s:?}");
        assert!(close(s.min_ns, 7_090.0), "{s:?}");
        assert!(close(s.median_ns, 36_449.0), "{s:?}");
        assert!(close(s.p99_ns, 205_174.0), "{s:?}");
        assert!(close(s.p999_ns, 551_335.0), "{s:?}");
        assert!(close(s.p9999_ns, 1_220_471.0), "{s:?}");
        assert!(close(s.max_ns, 3_430_277.0), "{s:?}");
        // Sample std-dev 49.064 us converted to the population one.
        let want = 49_064.0 * (17948.0f64 / 17949.0).sqrt();
        assert!(close(s.stddev_ns, want), "{s:?}");
        assert_eq!((r.dropped, r.duplicated, r.out_of_order), (0, 0, 0));
    }

    #[test]
    fn reads_the_error_counts() {
        let text = SAMPLE.replace(
            "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0",
            "\u{1b}[0;31m# dropped messages = 3; # duplicated messages = 1; # out-of-order messages = 2\u{1b}[0m",
        );
        let r = parse_output(&text).unwrap();
        assert_eq!((r.dropped, r.duplicated, r.out_of_order), (3, 1, 2));
    }

    #[test]
    fn garbage_output_is_an_error_naming_what_is_missing() {
        let e = parse_output("hello\nthis is not sockperf\n")
            .unwrap_err()
            .to_string();
        for field in [
            "average latency",
            "std-dev",
            "observation count",
            "minimum",
            "median",
            "99th percentile",
            "99.9th percentile",
            "99.99th percentile",
            "maximum",
        ] {
            assert!(e.contains(field), "'{field}' not named in: {e}");
        }
        assert!(e.contains("this is not sockperf"), "{e}");
    }

    #[test]
    fn a_partial_summary_names_only_the_missing_fields() {
        let text = SAMPLE.replace("sockperf: ---> percentile 99.900 =  551.335\n", "");
        let e = parse_output(&text).unwrap_err().to_string();
        assert!(e.contains("99.9th percentile"), "{e}");
        assert!(!e.contains("median"), "{e}");
    }

    #[test]
    fn a_server_that_never_answered_is_reported_as_such() {
        let text = "sockperf: Test ended\nsockperf: No messages were received from the server. Is the server down?\n";
        let e = parse_output(text).unwrap_err().to_string();
        assert!(e.contains("No messages were received"), "{e}");
    }

    #[test]
    fn command_lines_are_loopback_only_and_pinned() {
        let cfg = SockperfConfig {
            transport: Scheme::Mcast,
            size: 64,
            cpus: CpuPair { a: 0, b: 1 },
            busy_poll: true,
            seconds: 3,
            port: 23456,
            across: None,
            mps: None,
        };
        let (server, client) = command_lines(&cfg);
        let pin = |cpu| {
            if taskset().is_some() {
                format!("taskset -c {cpu} ")
            } else {
                String::new()
            }
        };
        assert_eq!(
            server,
            format!("{}sockperf server -i 239.255.77.1 -p 23456 --mc-rx-if 127.0.0.1 --mc-tx-if 127.0.0.1 --nonblocked", pin(1))
        );
        assert_eq!(
            client,
            format!("{}sockperf ping-pong -i 239.255.77.1 -p 23456 --mc-rx-if 127.0.0.1 --mc-tx-if 127.0.0.1 --nonblocked -m 64 -t 3", pin(0))
        );
        let tcp = SockperfConfig {
            transport: Scheme::Tcp,
            busy_poll: false,
            ..cfg
        };
        let (server, client) = command_lines(&tcp);
        assert!(server.ends_with("sockperf server -i 127.0.0.1 -p 23456 --tcp"));
        assert!(client.ends_with("sockperf ping-pong -i 127.0.0.1 -p 23456 --tcp -m 64 -t 3"));
    }

    fn udp_config(busy_poll: bool, seconds: u32) -> SockperfConfig {
        SockperfConfig {
            transport: Scheme::Udp,
            size: 64,
            cpus: CpuPair::default_pair(),
            busy_poll,
            seconds,
            port: free_port(Scheme::Udp).unwrap(),
            across: None,
            mps: None,
        }
    }

    #[test]
    fn runs_sockperf_end_to_end() {
        if peregrine_testkit::program("sockperf", "apt-get install sockperf").is_none() {
            return;
        }
        // Blocking, 1 s: a check of the plumbing, not a measurement.
        let s = run(&udp_config(false, 1)).unwrap();
        assert!(s.samples > 0, "{s:?}");
        assert!(
            s.min_ns > 0.0 && s.min_ns <= s.median_ns && s.median_ns <= s.max_ns,
            "{s:?}"
        );
    }

    /// The baseline measurement: `cargo test -p peregrine-bench --lib -- --ignored
    /// sockperf_udp_64_busy_poll --nocapture` on an otherwise idle machine.
    #[test]
    #[ignore = "a 3 s measurement that spins both CPUs"]
    fn sockperf_udp_64_busy_poll() {
        let cfg = udp_config(true, 3);
        let (server, client) = command_lines(&cfg);
        let s = run(&cfg).unwrap();
        println!("{}\n{server}\n{client}", available().unwrap());
        println!(
            "samples {} min {:.3} mean {:.3} median {:.3} p99 {:.3} p99.9 {:.3} p99.99 {:.3} max {:.3} sd {:.3} (us)",
            s.samples,
            s.min_ns / 1e3,
            s.mean_ns / 1e3,
            s.median_ns / 1e3,
            s.p99_ns / 1e3,
            s.p999_ns / 1e3,
            s.p9999_ns / 1e3,
            s.max_ns / 1e3,
            s.stddev_ns / 1e3
        );
    }

    #[test]
    fn validate_names_the_bad_value() {
        let cfg = SockperfConfig {
            transport: Scheme::Ipc,
            size: 64,
            cpus: CpuPair { a: 0, b: 1 },
            busy_poll: false,
            seconds: 1,
            port: 1,
            across: None,
            mps: None,
        };
        assert!(validate(&cfg).unwrap_err().to_string().contains("ipc"));
        let small = SockperfConfig {
            transport: Scheme::Udp,
            size: 8,
            ..cfg
        };
        assert!(validate(&small).unwrap_err().to_string().contains("14"));
    }
}
