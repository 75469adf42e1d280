//! `peregrine bench failover`: the failover group case of [`crate::failover`] per transport,
//! and the A/B paths, A/B feed and distributor pair cases when asked for; each printed,
//! recorded as one cell, and shown in the report's failover table.

use super::Session;
use crate::failover::distributors::DistributorPairResult;
use crate::failover::feeds::FeedPairResult;
use crate::failover::paths::PathsResult;
use crate::failover::MdFailoverConfig;
use crate::failover::{FailoverConfig, FailoverResult};
use crate::{round3, BenchError};
use peregrine::Scheme;
use peregrine_report::model::{Cell, Detail, FailoverDetail, Scenario};
use serde_json::json;

/// What `bench failover` runs: the failover group case per transport, the A/B paths case
/// when `paths` is set (at `cfg`'s rate, size and count), the distributor pair case when
/// `distributors` is set, the A/B feed pair case when `feeds` is.
#[derive(Debug, Clone)]
pub struct FailoverPlan {
    pub transports: Vec<Scheme>,
    pub cfg: FailoverConfig,
    pub paths: bool,
    pub distributors: Option<MdFailoverConfig>,
    pub feeds: Option<MdFailoverConfig>,
}

/// Runs each case, prints it (a table row, or with --json one object) and records its cell.
/// Fails when a message was lost, duplicated, out of order or corrupted: the group's promise.
pub fn run(plan: &FailoverPlan, s: &mut Session) -> Result<(), BenchError> {
    for t in &plan.transports {
        FailoverConfig {
            transport: *t,
            ..plan.cfg.clone()
        }
        .validate()?;
    }
    if !s.out.json {
        println!(
            "failover group: two members at {} msgs/s of {} B, the leader killed with SIGKILL {} times and restarted",
            plan.cfg.rate, plan.cfg.size, plan.cfg.kills
        );
        println!(
            "  {:<9} {:>6} {:>10} {:>6} {:>5} {:>11} {:>11} {:>11} {:>7} {:>11}",
            "transport",
            "kills",
            "delivered",
            "lost",
            "dup",
            "gap_med_us",
            "gap_max_us",
            "no_kill_us",
            "x",
            "interval_us"
        );
    }
    let mut bad = Vec::new();
    for t in &plan.transports {
        let cfg = FailoverConfig {
            transport: *t,
            ..plan.cfg.clone()
        };
        let r = crate::failover::measure(&cfg, s.exe(), s.clock())?;
        if s.out.json {
            println!("{}", line(&r));
        } else {
            println!(
                "  {:<9} {:>6} {:>10} {:>6} {:>5} {:>11.1} {:>11.1} {:>11.1} {:>7.2} {:>11.1}",
                r.transport,
                r.kills.len(),
                r.delivered,
                r.lost,
                r.duplicated,
                r.gap_median_ns() as f64 / 1e3,
                r.gap_max_ns() as f64 / 1e3,
                r.baseline_median_ns() as f64 / 1e3,
                x_baseline(r.gap_median_ns(), r.baseline_median_ns()).unwrap_or(f64::NAN),
                r.interval_ns() / 1e3,
            );
        }
        if r.lost + r.duplicated + r.out_of_order + r.corrupt > 0 {
            bad.push(format!(
                "{}: lost {}, duplicated {}, out of order {}, corrupted {}",
                r.transport, r.lost, r.duplicated, r.out_of_order, r.corrupt
            ));
        }
        s.record(cell(&r), None, None)?;
    }
    if !bad.is_empty() {
        return Err(BenchError::Child(format!(
            "the failover group's stream was not whole: {}",
            bad.join("; ")
        )));
    }
    if plan.paths {
        let r = crate::failover::paths::measure(&plan.cfg, s.exe(), s.clock())?;
        if s.out.json {
            println!("{}", paths_line(&r));
        } else {
            println!(
                "A/B paths: one publisher sending on two multicast groups at {} msgs/s of {} B, line A cut {} times in the network (an nft rule, in a namespace of the run's own)",
                r.rate,
                r.size,
                r.gaps_ns.len()
            );
            println!(
                "  gap median {:.1} us, max {:.1} us (no cut {:.1} us, x {:.2}; interval {:.1} us); {} delivered, lost {}, duplicated {}, NAKs {}, retransmissions {}",
                r.gap_median_ns() as f64 / 1e3,
                r.gap_max_ns() as f64 / 1e3,
                r.baseline_median_ns() as f64 / 1e3,
                x_baseline(r.gap_median_ns(), r.baseline_median_ns()).unwrap_or(f64::NAN),
                r.interval_ns() / 1e3,
                r.delivered,
                r.lost,
                r.duplicated,
                r.naks_sent,
                r.retransmits_received
            );
        }
        s.record(paths_cell(&r), None, None)?;
        if r.lost + r.duplicated + r.out_of_order + r.corrupt + r.transport_lost > 0 {
            return Err(BenchError::Child(format!(
                "the A/B paths stream was not whole: lost {}, duplicated {}, out of order {}, corrupted {}, reported lost by the transport {}",
                r.lost, r.duplicated, r.out_of_order, r.corrupt, r.transport_lost
            )));
        }
    }
    if let Some(fcfg) = &plan.feeds {
        let r = crate::failover::feeds::measure(fcfg, s.exe())?;
        if s.out.json {
            println!("{}", feeds_line(&r));
        } else {
            println!(
                "A/B feed pair: two feeds of one numbered stream, one distributor, a consumer of every item; the feeds killed with SIGKILL in turn {} times ({} items, {} updates/s)",
                r.kills.len(),
                r.items,
                r.rate
            );
            println!(
                "  gap median {:.1} us, max {:.1} us (no kill {:.1} us, one feed alone {:.1} us, interval {:.1} us); {} updates, lost {}, duplicated {}, items stale {}",
                r.gap_median_ns() as f64 / 1e3,
                r.gap_max_ns() as f64 / 1e3,
                r.baseline_median_ns() as f64 / 1e3,
                r.single_feed_median_ns() as f64 / 1e3,
                r.interval_ns() / 1e3,
                r.updates,
                r.lost,
                r.duplicated,
                r.stale()
            );
        }
        s.record(feeds_cell(&r), None, None)?;
        if r.lost + r.duplicated > 0 {
            return Err(BenchError::Child(format!(
                "the A/B feed pair's stream was not whole: lost {}, duplicated {}",
                r.lost, r.duplicated
            )));
        }
    }
    for warm in [false, true] {
        let Some(dcfg) = &plan.distributors else {
            break;
        };
        let r = crate::failover::distributors::measure(dcfg, s.exe(), warm)?;
        // What the mode promises after each kill, and the consumer it uses.
        let (promise, consumer, used) = if warm {
            (
                "nothing stale",
                "warm standby): a consumer logged in to both, paused on the standby",
                "active one",
            )
        } else {
            (
                "every item stale then re-imaged",
                "cold): a consumer of two distributors",
                "one it uses",
            )
        };
        if s.out.json {
            println!("{}", distributors_line(&r));
        } else {
            println!(
                "distributor pair ({consumer}; the {used} killed with SIGKILL {} times ({} items, {} updates/s)",
                r.kills.len(),
                r.items,
                r.rate
            );
            println!(
                "  first update after a kill: median {:.1} ms, max {:.1} ms; {promise} after {} of {} kills",
                r.first_update_median_ns() as f64 / 1e6,
                r.first_update_max_ns() as f64 / 1e6,
                r.kills.len() - r.incomplete(),
                r.kills.len()
            );
        }
        s.record(distributors_cell(&r), None, None)?;
        if r.incomplete() > 0 {
            return Err(BenchError::Child(format!(
                "{}: {promise} after only {} of {} distributor kills",
                r.mode,
                r.kills.len() - r.incomplete(),
                r.kills.len()
            )));
        }
    }
    Ok(())
}

/// A case's median gap over the same run's no-kill median (None without a baseline).
fn x_baseline(gap_median_ns: u64, baseline_median_ns: u64) -> Option<f64> {
    (baseline_median_ns > 0).then(|| round3(gap_median_ns as f64 / baseline_median_ns as f64))
}

/// A case's JSON line as its results cell: the line's fields, less those `cell` has a place
/// of its own for, go into `detail` (the report's into its fields, the rest its settings).
fn case_cell(id: String, line: serde_json::Value, cell: Cell) -> Cell {
    let serde_json::Value::Object(mut detail) = line else {
        unreachable!("a JSON object")
    };
    for k in ["kind", "transport", "size_bytes", "rate_msgs_per_s", "lost"] {
        detail.remove(k);
    }
    let detail: FailoverDetail = serde_json::from_value(serde_json::Value::Object(detail))
        .expect("a case's line has the types of the failover detail");
    Cell {
        id,
        scenario: Some(Scenario::Failover),
        detail: Detail::Failover(detail),
        ..cell
    }
}

fn paths_line(r: &PathsResult) -> serde_json::Value {
    json!({
        "kind": "failover", "case": "paths", "transport": "mcast", "rate_msgs_per_s": r.rate,
        "size_bytes": r.size, "kills": r.gaps_ns.len(), "delivered": r.delivered,
        "lost": r.lost, "duplicated": r.duplicated, "out_of_order": r.out_of_order,
        "corrupt": r.corrupt, "gap_median_ns": r.gap_median_ns(), "gap_max_ns": r.gap_max_ns(),
        "gaps_ns": r.gaps_ns, "interval_ns": round3(r.interval_ns()),
        "baseline_gap_median_ns": r.baseline_median_ns(),
        "baseline_gaps_ns": r.baseline_gaps_ns,
        "gap_x_baseline": x_baseline(r.gap_median_ns(), r.baseline_median_ns()),
        "line_duplicates": r.line_duplicates, "naks_sent": r.naks_sent,
        "retransmits_received": r.retransmits_received, "transport_lost": r.transport_lost,
    })
}

/// The A/B paths case as a cell.
fn paths_cell(r: &PathsResult) -> Cell {
    case_cell(
        "failover-paths".to_string(),
        paths_line(r),
        Cell {
            transport: "mcast".to_string(),
            size_bytes: r.size,
            rate_requested_msgs_per_s: Some(r.rate),
            sent: r.delivered + r.lost,
            lost: r.lost,
            seconds: round3(r.seconds),
            ..Cell::default()
        },
    )
}

fn feeds_line(r: &FeedPairResult) -> serde_json::Value {
    let b = r.baseline_median_ns();
    json!({
        "kind": "failover", "case": "feeds", "transport": "mcast",
        "kills": r.kills.len(), "items": r.items, "rate_msgs_per_s": r.rate,
        "delivered": r.updates, "lost": r.lost, "duplicated": r.duplicated,
        "stale_items": r.stale(),
        "gap_median_ns": r.gap_median_ns(), "gap_max_ns": r.gap_max_ns(),
        "gaps_ns": r.kills.iter().map(|k| k.gap_ns).collect::<Vec<_>>(),
        "stale_per_kill": r.kills.iter().map(|k| k.stale).collect::<Vec<_>>(),
        "baseline_gap_median_ns": b,
        "baseline_gaps_ns": r.baseline_gaps_ns,
        "gap_x_baseline": x_baseline(r.gap_median_ns(), b),
        "single_feed_gap_median_ns": r.single_feed_median_ns(),
        "single_feed_gaps_ns": r.single_feed_gaps_ns,
        "interval_ns": round3(r.interval_ns()),
    })
}

/// The A/B feed pair case as a cell.
fn feeds_cell(r: &FeedPairResult) -> Cell {
    case_cell(
        "failover-feeds".to_string(),
        feeds_line(r),
        Cell {
            transport: "mcast".to_string(),
            rate_requested_msgs_per_s: Some(r.rate),
            sent: r.updates + r.lost,
            lost: r.lost,
            seconds: round3(r.seconds),
            ..Cell::default()
        },
    )
}

fn distributors_line(r: &DistributorPairResult) -> serde_json::Value {
    let reimaged: Vec<u64> = r.kills.iter().map(|k| k.all_reimaged_ns).collect();
    json!({
        "kind": "failover", "case": "distributors", "mode": r.mode, "transport": "tcp",
        "kills": r.kills.len(), "items": r.items, "rate_msgs_per_s": r.rate,
        "lost": 0, "duplicated": 0,
        "gap_median_ns": r.first_update_median_ns(), "gap_max_ns": r.first_update_max_ns(),
        "gaps_ns": r.kills.iter().map(|k| k.first_update_ns).collect::<Vec<_>>(),
        "reimaged_ns": reimaged,
        "stale_per_kill": r.kills.iter().map(|k| k.stale).collect::<Vec<_>>(),
        "reimaged_per_kill": r.kills.iter().map(|k| k.reimaged).collect::<Vec<_>>(),
        "stale_items": r.kills.iter().map(|k| k.stale).sum::<usize>(),
        "incomplete_kills": r.incomplete(),
    })
}

/// The distributor pair case as a cell: the gap is the time from a kill to the consumer's
/// first update from the other distributor.
fn distributors_cell(r: &DistributorPairResult) -> Cell {
    case_cell(
        format!("failover-distributors-{}", r.mode),
        distributors_line(r),
        Cell {
            transport: "tcp".to_string(),
            rate_requested_msgs_per_s: Some(r.rate),
            seconds: round3(r.seconds),
            ..Cell::default()
        },
    )
}

fn line(r: &FailoverResult) -> serde_json::Value {
    json!({
        "kind": "failover", "case": "group", "transport": r.transport, "rate_msgs_per_s": r.rate,
        "size_bytes": r.size, "kills": r.kills.len(), "delivered": r.delivered, "lost": r.lost,
        "duplicated": r.duplicated, "out_of_order": r.out_of_order, "corrupt": r.corrupt,
        "disagreements": r.disagreements, "gap_median_ns": r.gap_median_ns(),
        "gap_max_ns": r.gap_max_ns(), "interval_ns": round3(r.interval_ns()),
        "interdelivery_p50_ns": r.interdelivery_p50_ns,
        "interdelivery_p999_ns": r.interdelivery_p999_ns,
        "interdelivery_max_ns": r.interdelivery_max_ns,
        "gaps_ns": r.kills.iter().map(|k| k.gap_ns).collect::<Vec<_>>(),
        "seq_steps": r.kills.iter().map(|k| k.seq_step).collect::<Vec<_>>(),
        "baseline_gap_median_ns": r.baseline_median_ns(),
        "baseline_gaps_ns": r.baseline_gaps_ns,
        "gap_x_baseline": x_baseline(r.gap_median_ns(), r.baseline_median_ns()),
    })
}

/// One case as a cell: `detail` holds the case, the kills, the gaps (median, largest, each
/// kill's), the stream's interval and inter-delivery times, and what was lost or duplicated.
pub fn cell(r: &FailoverResult) -> Cell {
    case_cell(
        format!("failover-group-{}", r.transport),
        line(r),
        Cell {
            transport: r.transport.clone(),
            size_bytes: r.size,
            rate_requested_msgs_per_s: Some(r.rate),
            sent: r.delivered + r.lost,
            lost: r.lost,
            seconds: round3(r.seconds),
            ..Cell::default()
        },
    )
}
