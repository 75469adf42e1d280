//! Failover under kills: per case, the kills, what was delivered, lost and duplicated, and the
//! gap each kill left.

use super::format::{dash, header, rate_label, us};
use super::{of, Row, Section, Table};
use crate::model::{Cell, Results, Scenario};

/// The failover table: per case, the kills, what was delivered, lost and duplicated, and the
/// gap a kill left next to the stream's own inter-message and inter-delivery times.
pub(super) fn failover(results: &Results) -> Option<Section> {
    let cells = of(results, Scenario::Failover);
    if cells.is_empty() {
        return None;
    }
    let mut rows = vec![header(&[
        "Case",
        "Transport",
        "Rate",
        "Kills",
        "Delivered",
        "Lost",
        "Duplicated",
        "Gap median (us)",
        "Gap max (us)",
        "No kill (us)",
        "Gap x no kill",
        "Interval (us)",
        "Inter-delivery 99.9% (us)",
        "Items stale",
    ])];
    for c in cells {
        let d = c.detail.failover().cloned().unwrap_or_default();
        let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(dash);
        let micros = |v: Option<f64>| v.map(us).unwrap_or_else(dash);
        rows.push(Row::Cells(vec![
            case_name(c),
            c.transport.clone(),
            c.rate_requested_msgs_per_s
                .map(rate_label)
                .unwrap_or_else(dash),
            n(d.kills),
            n(d.delivered),
            c.lost.to_string(),
            n(d.duplicated),
            micros(d.gap_median_ns),
            micros(d.gap_max_ns),
            micros(d.baseline_gap_median_ns),
            d.gap_x_baseline
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(dash),
            micros(d.interval_ns),
            micros(d.interdelivery_p999_ns),
            n(d.stale_items),
        ]));
    }
    Some(Section {
        title: "Failover".to_string(),
        intro: Some(
            "A failover group's two members publish one stream; the member whose copies are \
             being delivered is killed with SIGKILL, then restarted once the other has taken \
             over. The gap is the time from the last message delivered before a kill to the \
             first after it. \"No kill\" is the same run's baseline: at a moment with no kill, \
             the time from the leader's last first copy to the other member's next newer \
             sequence (median of one probe per round), the gap a kill would leave if failing \
             over cost nothing. The interval is the stream's time between messages, and the \
             inter-delivery 99.9th percentile what the stream shows all run long (members \
             send in small bursts). The paths case cuts line A of one publisher sending \
             each datagram on two multicast groups (an nft rule in a network namespace of the \
             run's own); its gap runs from the last message delivered before the cut to the \
             first after, and its \"no kill\" is the same gap at a moment with no cut. The \
             feeds case kills the two feeds of an A/B pair in \
             turn under a distributor and counts every item's updates at a consumer (gap, \
             and items reported stale); the distributors case kills the distributor a \
             consumer of two is using (gap: from the kill to its first update from the \
             other)."
                .to_string(),
        ),
        tables: vec![Table {
            caption: None,
            left: 2,
            rows,
        }],
    })
}

/// A failover cell's case, with its mode when it has one (`distributors (warm)`).
pub(crate) fn case_name(c: &Cell) -> String {
    let d = c.detail.failover();
    let case = d.and_then(|d| d.case.as_deref()).unwrap_or("-");
    match d.and_then(|d| d.mode.as_deref()) {
        Some(mode) => format!("{case} ({mode})"),
        None => case.to_string(),
    }
}
