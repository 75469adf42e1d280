//! Parsers of single flag values: each rejection names the value and what is accepted.

use peregrine::{IdleKind, Scheme, SlowSubscriberPolicy};
use peregrine_bench::measure::pingpong::StreamMode;
use peregrine_bench::CpuPair;

/// `100000`, `100k`, `1.5m`, `2M`: messages per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * mult >= 1.0 && v * mult <= 1e9 => Ok(v * mult),
        _ => Err(format!(
            "'{s}' is not a rate: give messages per second from 1 to 1g, with an optional k or m, for example 100k or 1.5m"
        )),
    }
}

/// A transport: `ipc`, `udp`, `mcast` or `tcp`.
pub fn parse_scheme(s: &str) -> Result<Scheme, String> {
    s.parse::<Scheme>()
        .map_err(|_| format!("'{s}' is not a transport: use one of ipc, udp, mcast, tcp"))
}

/// What `bench pingpong --transport` and `bench throughput --transport` name: a scheme, or
/// `xdp` (udp through AF_XDP, measured with `--netns` beside the kernel's udp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchTransport {
    Scheme(Scheme),
    Xdp,
}

impl BenchTransport {
    pub fn name(self) -> &'static str {
        match self {
            BenchTransport::Scheme(s) => s.name(),
            BenchTransport::Xdp => "xdp",
        }
    }
}

pub fn parse_bench_transport(s: &str) -> Result<BenchTransport, String> {
    if s == "xdp" {
        return Ok(BenchTransport::Xdp);
    }
    s.parse::<Scheme>().map(BenchTransport::Scheme).map_err(|_| {
        format!("'{s}' is not a transport: use one of ipc, udp, mcast, tcp, or xdp (udp through AF_XDP, with --netns)")
    })
}

/// A send mode: `normal` or `urgent` (an empty value is a stray comma or an empty list).
pub fn parse_mode(s: &str) -> Result<StreamMode, String> {
    if s.trim().is_empty() {
        return Err(
            "an empty send mode (an empty list, or a stray comma): give normal, urgent or both, comma-separated, for example normal,urgent".into(),
        );
    }
    s.trim().parse::<StreamMode>()
}

/// A message size in bytes, at least 8 (the benchmark's message number); the transport's
/// upper limit is checked with the other settings.
pub fn parse_message_size(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 8 => Ok(n),
        Ok(n) => Err(format!(
            "{n} bytes is too small: give a size of at least 8 bytes (each message carries its 8-byte number), for example 28 or 1460"
        )),
        Err(_) if s.trim().is_empty() => Err(
            "an empty size (an empty list, or a stray comma): give sizes in bytes, comma-separated, for example 28,1460".into(),
        ),
        Err(_) => Err(format!(
            "'{s}' is not a size in bytes: give a whole number of at least 8, for example 28 or 1460"
        )),
    }
}

pub fn parse_cpus(s: &str) -> Result<CpuPair, String> {
    CpuPair::parse(s).map_err(|e| e.to_string())
}

pub fn parse_idle(s: &str) -> Result<IdleKind, String> {
    s.parse::<IdleKind>().map_err(|e| e.to_string())
}

pub fn parse_policy(s: &str) -> Result<SlowSubscriberPolicy, String> {
    peregrine_bench::parse_policy(s)
}

/// A log capacity: a power of two from 64k to 4g.
pub fn parse_capacity(s: &str) -> Result<u64, String> {
    peregrine::parse_bytes(s)
        .filter(|c| c.is_power_of_two() && (64 << 10..=1 << 32).contains(c))
        .ok_or_else(|| {
            format!("'{s}' is not accepted: give a power of two from 64k to 4g, for example 16m")
        })
}

/// A positive number of seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e7 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a duration: give a number of seconds above 0, for example 10 or 0.5"
        )),
    }
}

/// A topic to publish: not empty (the library checks the rest).
pub fn parse_topic(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(
            "the topic is empty: give a topic name, for example peregrine pub md.eq.AAPL".into(),
        );
    }
    Ok(s.to_string())
}

/// A topic pattern to subscribe to: not empty (an empty pattern matches no topic).
pub fn parse_pattern(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the topic pattern is empty and would match no topic: give a topic name (md.eq.AAPL), a glob (md.eq.*, or * for every topic) or, with --regex, a regular expression".into());
    }
    Ok(s.to_string())
}

/// A failover group's name (see `peregrine::failover::validate_group`).
pub fn parse_group(s: &str) -> Result<String, String> {
    peregrine::failover::validate_group(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// A failover subscriber's window in milliseconds: 1 ms to one minute.
pub fn parse_window_ms(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|ms| (1..=60_000).contains(ms))
        .ok_or_else(|| {
            format!(
                "'{s}' is not accepted: give how long a missing sequence is waited for, from 1 to 60000 milliseconds, for example 100"
            )
        })
}

/// A linger time in milliseconds: 0 to one hour.
pub fn parse_linger_ms(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|ms| *ms <= 3_600_000)
        .ok_or_else(|| {
            format!(
                "'{s}' is not accepted: give milliseconds from 0 to 3600000 (one hour), for example 500"
            )
        })
}

/// A market data service name: 1 to 64 bytes of A-Z a-z 0-9 . _ -.
pub fn parse_service(s: &str) -> Result<String, String> {
    peregrine_md::model::check_service(s.as_bytes())
        .map(str::to_string)
        .map_err(|e| {
            format!(
                "service '{s}' {e}: give {}, for example FEED1",
                peregrine_md::model::SERVICE_ALPHABET
            )
        })
}

/// A market data user name: 1 to 64 bytes of A-Z a-z 0-9 . _ -.
pub fn parse_user(s: &str) -> Result<String, String> {
    peregrine_md::model::check_user(s.as_bytes())
        .map(str::to_string)
        .map_err(|e| {
            format!(
                "user '{s}' {e}: give {}, for example alice",
                peregrine_md::model::USER_ALPHABET
            )
        })
}

/// A Zipf exponent: 0 (uniform) to 5.
pub fn parse_zipf(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=5.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not accepted: give an exponent from 0 (every item alike) to 5, for example 1"
        )),
    }
}

/// A size in bytes, with an optional k, m or g suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    peregrine::parse_bytes(s).ok_or_else(|| {
        format!("'{s}' is not a size: give bytes with an optional k, m or g, for example 4m")
    })
}

/// A fraction: `0.5` or `50%`, from 0 to 1.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a fraction: give 0 to 1 or 0% to 100%, for example 0.5 or 50%"
        )),
    }
}

/// A warm-up in seconds: 0 to 3600.
pub fn parse_warmup(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not accepted: give 0 to 3600 seconds, for example 0.5"
        )),
    }
}
