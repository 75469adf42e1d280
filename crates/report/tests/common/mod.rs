//! Helpers shared by the report's integration tests.
#![allow(dead_code)]

use peregrine_report::model::{Cell, Results, Scenario};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The checked-in sample results folder (read only: tests render into copies).
pub fn sample_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample")
}

pub fn sample() -> Results {
    peregrine_report::load(&sample_dir()).expect("the sample results folder loads")
}

/// A new, empty directory under the system temp dir, unique to this test and process.
pub fn fresh_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "peregrine-report-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

/// A fresh directory holding a copy of the sample's results.json.
pub fn sample_copy(name: &str) -> PathBuf {
    let dir = fresh_dir(name);
    std::fs::copy(sample_dir().join("results.json"), dir.join("results.json"))
        .expect("copy the sample results.json");
    dir
}

pub fn cells(results: &Results, scenario: Scenario) -> Vec<&Cell> {
    results
        .cells
        .iter()
        .filter(|c| c.scenario == Some(scenario))
        .collect()
}

/// Transports of `cells`, in order of first appearance.
pub fn transports(cells: &[&Cell]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cells {
        if !out.contains(&c.transport) {
            out.push(c.transport.clone());
        }
    }
    out
}

/// Microseconds with two decimals, as the report prints them.
pub fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

/// Seed-style rate labels for the round rates the sample uses (`100K`, `1M`).
pub fn rate_label(rate: f64) -> String {
    let r = rate.round() as u64;
    if r % 1_000_000 == 0 {
        format!("{}M", r / 1_000_000)
    } else if r % 1_000 == 0 {
        format!("{}K", r / 1_000)
    } else {
        panic!("the sample uses round rates, not {rate}")
    }
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
