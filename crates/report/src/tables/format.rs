//! How the tables write numbers: microseconds, rates as the seeds write them (`100K`, `1.5M`),
//! thousands separators, and the header and dash cells.

use super::Row;
use crate::model::{Cell, Latency};

pub(super) fn latency_values<const N: usize>(
    latency: Option<&Latency>,
    pick: impl Fn(&Latency) -> [f64; N],
) -> Vec<String> {
    match latency {
        Some(l) => pick(l).map(us).to_vec(),
        None => vec![dash(); N],
    }
}

pub(super) fn rate_and_mb(c: &Cell) -> (String, String) {
    match c.rate_achieved_msgs_per_s {
        Some(r) => (
            thousands(r.round() as u64),
            format!("{:.1}", r * c.size_bytes as f64 / 1e6),
        ),
        None => (dash(), dash()),
    }
}

pub(super) fn header(names: &[&str]) -> Row {
    Row::Header(names.iter().map(|s| s.to_string()).collect())
}

pub(super) fn dash() -> String {
    "-".to_string()
}

/// Nanoseconds as microseconds with two decimals: `5421.7` -> `5.42`.
pub(crate) fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

/// A message rate as the seeds write it: `100K`, `1.5M`, `2M`, `730K`, `500`.
pub(crate) fn rate_label(msgs_per_s: f64) -> String {
    let (value, suffix) = if msgs_per_s >= 1e6 {
        (msgs_per_s / 1e6, "M")
    } else if msgs_per_s >= 1e3 {
        (msgs_per_s / 1e3, "K")
    } else {
        (msgs_per_s, "")
    };
    let digits = format!("{value:.2}");
    let digits = digits.trim_end_matches('0').trim_end_matches('.');
    format!("{digits}{suffix}")
}

/// A row label of seed 001's Full Results: `32B/100K`.
pub(crate) fn size_rate_label(cell: &Cell) -> String {
    match cell.rate_requested_msgs_per_s {
        Some(r) => format!("{}B/{}", cell.size_bytes, rate_label(r)),
        None => format!("{}B/unpaced", cell.size_bytes),
    }
}

/// An integer with thousands separators: `1,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
