//! Result lines: a table in microseconds for people, JSON in nanoseconds for scripts.
//!
//! A scenario's result is a results-folder [`Cell`]; a [`ResultLine`] is how one is printed.
//! JSON keys are stable: `kind`, `transport`, `size_bytes`, `samples`, `min_ns`, `mean_ns`,
//! `median_ns`, `p99_ns`, `p999_ns`, `p9999_ns`, `max_ns`, `stddev_ns` on every line (null where a
//! kind has no latency), and for throughput `msgs_per_s`, `bytes_per_s`, `lost`, and where the
//! run measured one `ceiling_msgs_per_s` and `x_ceiling`. Paced cells
//! (load, sweep, max, embedded) print as the cell itself.

use crate::stats::Summary;
use crate::sweep::rate_label;
use peregrine_report::model::{Cell, Detail, Scenario};
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
    /// Throughput: the same run's ceiling (the bare mechanism's rate, with offload where the
    /// transport has it) and the rate over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_msgs_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_ceiling: Option<f64>,
    /// The rest of the cell's detail and its settings (idle strategy, CPUs, policy,
    /// subscribers, CPU seconds), as one JSON object.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
    /// The cell's typed detail, which the table reads (`detail` is its JSON).
    #[serde(skip)]
    pub typed: Detail,
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

    /// The printed form of a latency or throughput cell: its figures, the floor ratios the
    /// cell carries (`detail.median_x_floor`, `detail.p99_x_floor`), its settings, and the CPU
    /// seconds of each side as `<role>_cpu_s`.
    pub fn from_cell(c: &Cell) -> ResultLine {
        let kind = match c.scenario {
            Some(Scenario::Floor) => "floor",
            Some(Scenario::Raw) => "raw",
            Some(Scenario::Pingpong) => "pingpong",
            Some(Scenario::Echo) => "echo",
            Some(Scenario::Throughput) => "throughput",
            Some(Scenario::Load) => "load",
            Some(Scenario::MaxProbe) => "max-probe",
            Some(Scenario::FloorLoad) => "floorload",
            Some(Scenario::Max) => "max",
            Some(Scenario::Embedded) => "embedded",
            Some(Scenario::FanoutProbe) => "fanout_probe",
            Some(Scenario::Fanout) => "fanout",
            Some(Scenario::MdLatency) => "md_latency",
            Some(Scenario::Jitter) => "jitter",
            Some(Scenario::Failover) => "failover",
            None => "result",
        };
        let mut line = match &c.latency {
            Some(l) => ResultLine::latency(kind, &c.transport, c.size_bytes, l),
            None => ResultLine {
                kind,
                transport: c.transport.clone(),
                size_bytes: c.size_bytes,
                samples: c.sent,
                ..Default::default()
            },
        };
        if c.scenario == Some(Scenario::Throughput) {
            let rate = c.rate_achieved_msgs_per_s.unwrap_or(0.0);
            line.msgs_per_s = Some(rate);
            line.bytes_per_s = Some(rate * c.size_bytes as f64);
            line.lost = Some(c.lost);
        }
        // The ratios have keys of their own on the line: taken out of the rest.
        let mut rest = c.detail.clone();
        if let Detail::Latency(d) = &mut rest {
            line.median_x_floor = d.median_x_floor.take();
            line.p99_x_floor = d.p99_x_floor.take();
        }
        if let Detail::Throughput(d) = &mut rest {
            line.ceiling_msgs_per_s = d.ceiling_msgs_per_s.take();
            line.x_ceiling = d.x_ceiling.take();
        }
        let mut detail = rest.to_map();
        for (role, secs) in &c.cpu_s {
            detail.insert(format!("{role}_cpu_s"), (*secs).into());
        }
        line.detail = detail;
        line.typed = c.detail.clone();
        line
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

    /// Prints a latency or throughput cell (see [`ResultLine::from_cell`]); paced cells as
    /// [`paced`](Self::paced).
    pub fn cell(&mut self, c: &Cell) {
        match c.scenario {
            Some(
                Scenario::Load | Scenario::MaxProbe | Scenario::Embedded | Scenario::FloorLoad,
            ) => self.paced(c),
            _ => self.print(&ResultLine::from_cell(c)),
        }
    }

    /// One line per paced cell as it completes (the seeds' tables follow at the end of the
    /// run, rendered from the results folder), or the cell as JSON.
    pub fn paced(&self, c: &Cell) {
        if self.json {
            println!("{}", serde_json::to_string(c).expect("cells serialise"));
            return;
        }
        println!("{}", paced_line(c));
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
                "{:<10} {:<9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}",
                "test", "transport", "size", "samples", "Min", "Avg", "Median", "99th", "99.9th", "99.99th", "Max",
                "Std Dev", "floor", "x floor", "x 2-line", "99/flr"
            );
        }
        let us = |v: Option<f64>| {
            v.map(|v| format!("{:.3}", v / 1000.0))
                .unwrap_or_else(|| "-".into())
        };
        let x = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        // The floor of the run's moments (bursts between blocks of pings), starred when the
        // machine changed mode during the run.
        let lat = r.typed.latency();
        let moved = lat.and_then(|d| d.floor_moved) == Some(true);
        let floor = match lat.and_then(|d| d.floor_ns) {
            Some(f) => format!("{}{}", us(Some(f)), if moved { "*" } else { "" }),
            None => "-".into(),
        };
        // An echo's mode, within the column's width (the report's table spells it out).
        let test = match (r.kind, r.typed.echo().and_then(|d| d.mode.as_deref())) {
            ("echo", Some("urgent")) => "echo urg",
            ("echo", Some("normal")) => "echo norm",
            (kind, _) => kind,
        };
        println!(
            "{:<10} {:<9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}",
            test,
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
            floor,
            x(r.median_x_floor),
            x(lat.and_then(|d| d.median_x_two_line_floor)),
            x(r.p99_x_floor),
        );
        if moved {
            println!(
                "           * the floor moved during this run (bursts {}): x floor counts only the blocks whose floor held",
                lat.and_then(|d| d.settings.get("floor_bursts_ns"))
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            );
        }
    }

    fn print_throughput(&mut self, r: &ResultLine) {
        if !self.throughput_header_done {
            self.throughput_header_done = true;
            self.latency_header_done = false;
            println!();
            println!("Throughput, one publisher, every sequence number checked");
            println!(
                "{:<10} {:<9} {:>6} {:>12} {:>12} {:>10} {:>6} {:>12} {:>7} settings",
                "test",
                "transport",
                "size",
                "messages",
                "msgs/s",
                "MB/s",
                "lost",
                "ceiling",
                "x ceil"
            );
        }
        let settings: Vec<String> = r
            .detail
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"')))
            .collect();
        println!(
            "{:<10} {:<9} {:>6} {:>12} {:>12} {:>10.1} {:>6} {:>12} {:>7} {}",
            r.kind,
            r.transport,
            r.size_bytes,
            r.samples,
            format_rate(r.msgs_per_s.unwrap_or(0.0)),
            r.bytes_per_s.unwrap_or(0.0) / 1e6,
            r.lost.unwrap_or(0),
            r.ceiling_msgs_per_s
                .map_or_else(|| "-".to_string(), format_rate),
            r.x_ceiling
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}x")),
            settings.join(" ")
        );
    }
}

/// A paced cell in one line: achieved rate, loss counts, latency and CPU seconds.
fn paced_line(c: &Cell) -> String {
    let us = |v: f64| format!("{:.2}", v / 1e3);
    let req = c.rate_requested_msgs_per_s.unwrap_or(0.0);
    let got = c.rate_achieved_msgs_per_s.unwrap_or(0.0);
    let mut line = format!(
        "{:<9} {:<5} {:>5}B {:>5}/s  achieved {} ({:.1}%)  lost {} dup {} ooo {} refused {}",
        c.id.split('-').next().unwrap_or(""),
        c.transport,
        c.size_bytes,
        rate_label(req),
        format_rate(got),
        100.0 * got / req.max(1.0),
        c.lost,
        c.duplicates,
        c.out_of_order,
        c.refused,
    );
    if let Some(l) = &c.latency {
        line += &format!(
            "  | us: median {} 99.9th {} max {}",
            us(l.median_ns),
            us(l.p999_ns),
            us(l.max_ns)
        );
    }
    if let Some(l) = &c.latency_from_schedule {
        line += &format!(
            "  | from schedule: median {} 99.9th {}",
            us(l.median_ns),
            us(l.p999_ns)
        );
    }
    line += &format!(
        "  | cpu s: {}",
        c.cpu_s
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if c.sustained == Some(false) {
        line += "  NOT SUSTAINED";
    }
    line
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
