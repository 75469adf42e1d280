//! Result lines: a table in microseconds for people, JSON in nanoseconds for scripts.
//!
//! JSON keys are stable: `kind`, `transport`, `size_bytes`, `samples`, `min_ns`, `mean_ns`,
//! `median_ns`, `p99_ns`, `p999_ns`, `p9999_ns`, `max_ns`, `stddev_ns` on every line (null where a
//! kind has no latency), and for throughput `msgs_per_s`, `bytes_per_s`, `lost`.

use crate::stats::Summary;
use serde::Serialize;

/// One result: a latency distribution, a throughput, or both.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ResultLine {
    pub kind: &'static str,
    pub transport: String,
    pub size_bytes: usize,
    pub samples: u64,
    pub min_ns: Option<f64>,
    pub mean_ns: Option<f64>,
    pub median_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    pub p999_ns: Option<f64>,
    pub p9999_ns: Option<f64>,
    pub max_ns: Option<f64>,
    pub stddev_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msgs_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// Median over the floor's median measured in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_x_floor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_x_floor: Option<f64>,
    /// Free-form settings of the run (idle strategy, CPUs, policy, subscribers, CPU seconds).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl ResultLine {
    pub fn latency(kind: &'static str, transport: &str, size_bytes: usize, s: &Summary) -> Self {
        ResultLine {
            kind,
            transport: transport.to_string(),
            size_bytes,
            samples: s.samples,
            min_ns: Some(s.min_ns),
            mean_ns: Some(s.mean_ns),
            median_ns: Some(s.median_ns),
            p99_ns: Some(s.p99_ns),
            p999_ns: Some(s.p999_ns),
            p9999_ns: Some(s.p9999_ns),
            max_ns: Some(s.max_ns),
            stddev_ns: Some(s.stddev_ns),
            ..Default::default()
        }
    }

    /// Sets the ratios to a floor measured in the same run.
    pub fn against_floor(&mut self, floor: &Summary) {
        if let (Some(m), Some(p)) = (self.median_ns, self.p99_ns) {
            if floor.median_ns > 0.0 {
                self.median_x_floor = Some(m / floor.median_ns);
                self.p99_x_floor = Some(p / floor.median_ns);
            }
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.detail.insert(key.to_string(), value.into());
        self
    }
}

/// Prints result lines as a table (`json == false`) or one JSON object per line.
#[derive(Debug, Default)]
pub struct Printer {
    pub json: bool,
    latency_header_done: bool,
    throughput_header_done: bool,
}

impl Printer {
    pub fn new(json: bool) -> Self {
        Printer {
            json,
            ..Default::default()
        }
    }

    pub fn print(&mut self, r: &ResultLine) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string(r).expect("result lines serialise")
            );
            return;
        }
        if r.msgs_per_s.is_some() {
            self.print_throughput(r);
        } else {
            self.print_latency(r);
        }
    }

    fn print_latency(&mut self, r: &ResultLine) {
        if !self.latency_header_done {
            self.latency_header_done = true;
            self.throughput_header_done = false;
            println!();
            println!("Latency, half round trip, microseconds");
            println!(
                "{:<10} {:<9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
                "test", "transport", "size", "samples", "Min", "Avg", "Median", "99th", "99.9th", "99.99th", "Max",
                "Std Dev", "x floor", "99/flr"
            );
        }
        let us = |v: Option<f64>| {
            v.map(|v| format!("{:.3}", v / 1000.0))
                .unwrap_or_else(|| "-".into())
        };
        let x = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        println!(
            "{:<10} {:<9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
            r.kind,
            r.transport,
            r.size_bytes,
            r.samples,
            us(r.min_ns),
            us(r.mean_ns),
            us(r.median_ns),
            us(r.p99_ns),
            us(r.p999_ns),
            us(r.p9999_ns),
            us(r.max_ns),
            us(r.stddev_ns),
            x(r.median_x_floor),
            x(r.p99_x_floor),
        );
    }

    fn print_throughput(&mut self, r: &ResultLine) {
        if !self.throughput_header_done {
            self.throughput_header_done = true;
            self.latency_header_done = false;
            println!();
            println!("Throughput, one publisher, every sequence number checked");
            println!(
                "{:<10} {:<9} {:>6} {:>12} {:>12} {:>10} {:>6} settings",
                "test", "transport", "size", "messages", "msgs/s", "MB/s", "lost"
            );
        }
        let settings: Vec<String> = r
            .detail
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"')))
            .collect();
        println!(
            "{:<10} {:<9} {:>6} {:>12} {:>12} {:>10.1} {:>6} {}",
            r.kind,
            r.transport,
            r.size_bytes,
            r.samples,
            format_rate(r.msgs_per_s.unwrap_or(0.0)),
            r.bytes_per_s.unwrap_or(0.0) / 1e6,
            r.lost.unwrap_or(0),
            settings.join(" ")
        );
    }
}

/// `63.2M`, `812.5K`, `950`.
pub fn format_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_the_stable_keys() {
        let s = Summary {
            samples: 3,
            min_ns: 1.0,
            mean_ns: 2.0,
            p1_ns: 1.0,
            p25_ns: 1.0,
            median_ns: 2.0,
            p75_ns: 3.0,
            p90_ns: 3.0,
            p99_ns: 3.0,
            p999_ns: 3.0,
            p9999_ns: 3.0,
            max_ns: 3.0,
            stddev_ns: 0.8,
        };
        let v = serde_json::to_value(ResultLine::latency("pingpong", "ipc", 32, &s)).unwrap();
        for k in [
            "kind",
            "transport",
            "size_bytes",
            "samples",
            "min_ns",
            "mean_ns",
            "median_ns",
            "p99_ns",
            "p999_ns",
            "p9999_ns",
            "max_ns",
            "stddev_ns",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["kind"], "pingpong");
        assert_eq!(v["median_ns"], 2.0);
        let t = ResultLine {
            kind: "throughput",
            msgs_per_s: Some(1.0),
            bytes_per_s: Some(32.0),
            lost: Some(0),
            ..Default::default()
        };
        let v = serde_json::to_value(t).unwrap();
        assert!(v["min_ns"].is_null() && v["lost"] == 0 && v["msgs_per_s"] == 1.0);
    }
}
