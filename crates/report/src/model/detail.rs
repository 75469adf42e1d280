//! A cell's detail: what a scenario keeps beyond the common columns, one typed struct per kind
//! of scenario, tagged by `kind` in `results.json`.
//!
//! Every value a report table, chart or result line reads is a field here, written by the
//! benchmark through the same field: a renamed field is a compile error on one side, not a
//! column silently empty. Settings only kept for the record (idle strategy, CPUs, batch
//! counts, ...) stay free-form in each struct's `settings`, beside the fields, flattened into the
//! same JSON object.
//!
//! Format 1 folders (before the tag) are read by adding the tag their scenario implies
//! ([`Detail::from_v1`]): the field names are the keys they already had.

use super::Scenario;
use serde::{Deserialize, Serialize};

/// Free-form settings of a cell, kept for the record and the JSON lines; no report reads them.
pub type Settings = serde_json::Map<String, serde_json::Value>;

/// What a cell keeps beyond the common columns, by kind of scenario.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// Nothing beyond the common columns.
    #[default]
    None,
    /// [`Scenario::Floor`], [`Scenario::Raw`], [`Scenario::Pingpong`].
    Latency(LatencyDetail),
    /// [`Scenario::Echo`].
    Echo(EchoDetail),
    /// [`Scenario::Load`], [`Scenario::FloorLoad`], [`Scenario::MaxProbe`], [`Scenario::Max`],
    /// [`Scenario::Embedded`].
    Paced(PacedDetail),
    /// [`Scenario::Throughput`].
    Throughput(ThroughputDetail),
    /// [`Scenario::FanoutProbe`], [`Scenario::Fanout`], [`Scenario::MdLatency`].
    Fanout(FanoutDetail),
    /// [`Scenario::Jitter`].
    Jitter(JitterDetail),
    /// [`Scenario::Failover`].
    Failover(FailoverDetail),
}

/// A half round trip's cell: its ratios to the floor of the same run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyDetail {
    /// What carried it when it was not loopback (`veth`, a namespace pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Median and 99th percentile over the floor's (the cache line for ipc, bare sockets for
    /// the network) measured in the same run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_x_floor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_x_floor: Option<f64>,
    /// The floor measured in bursts between the blocks of pings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ns: Option<f64>,
    /// The floor changed mode during the run (its ratios compare two machine modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_moved: Option<bool>,
    /// Median over the two-line floor (a ping and a pong line, as a transport has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_x_two_line_floor: Option<f64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// An echo cell (seed 004): its send mode and its ratio to the ping-pong of the same run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EchoDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `normal` (batched) or `urgent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A remark shown under the transport's rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Median over the ping-pong median of the same transport and size, and that median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_x_pingpong: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pingpong_median_ns: Option<f64>,
    /// The normal-mode batch interval of the sender's and of the echo's stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_interval_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo_batch_interval_us: Option<f64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// A paced cell (load, its floor under load, the maximum search, embedded timestamps).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PacedDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A floor under load's load cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_cell: Option<String>,
    /// The cache-line floor just before and just after the cell, and whether it moved
    /// between them (by more than 1.3x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_before_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_after_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_moved: Option<bool>,
    /// The floor under load's median and 99.9th percentile, and the cell's over them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_load_median_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_load_p999_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_x_floor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999_x_floor: Option<f64>,
    /// The 99.9th percentile of the pings no stall touched, over the floor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstalled_p999_x_floor: Option<f64>,
    /// The median of a plain ping-pong of the same transport and size, and the cell's over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unloaded_median_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_x_unloaded: Option<f64>,
    /// The machine's stalls of 100 us or more over the cell, per second, and the largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls_over_100us_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_stall_ns: Option<f64>,
    /// Pings a stall overlapped, and the latency of the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pings_stalled: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstalled_median_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstalled_p999_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstalled_max_ns: Option<f64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// An unpaced throughput cell, with the same run's ceiling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Which bare mechanism the ceiling is (`ring`, `udp gso`, `tcp`), its rate, and the
    /// cell's rate over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling_msgs_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_ceiling: Option<f64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// A market data fan-out probe or result, or a market data latency cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FanoutDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_per_client: Option<u64>,
    /// The share of a client's items other clients watch too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<f64>,
    /// Updates per second the feed sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feed_updates_per_s: Option<f64>,
    /// The probe's verdict, and the findings that decided it (`; ` between them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// The machine's jitter on one CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JitterDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Gaps per second over 1 us, 10 us, 100 us and 1 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_over_1us_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_over_10us_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_over_100us_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_over_1ms_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_gap_ns: Option<f64>,
    /// The fraction of the time lost to gaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_fraction: Option<f64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// A failover case: the kills, the gap each left, and the same run's no-kill baseline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverDetail {
    /// `group`, `paths`, `feeds`, `distributors`, and the mode where the case has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kills: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicated: Option<u64>,
    /// The gap each kill left, their median and largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps_ns: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_median_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_max_ns: Option<f64>,
    /// The same gaps at moments with no kill, their median, and the kills' median over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_gaps_ns: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_gap_median_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_x_baseline: Option<f64>,
    /// The stream's time between messages, and the 99.9th percentile between deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interdelivery_p999_ns: Option<f64>,
    /// Items a consumer was told were stale (the feeds case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_items: Option<u64>,
    #[serde(flatten)]
    pub settings: Settings,
}

/// The detail kind a scenario's cells have.
fn kind_of(scenario: Option<Scenario>) -> &'static str {
    match scenario {
        Some(Scenario::Floor | Scenario::Raw | Scenario::Pingpong) => "latency",
        Some(Scenario::Echo) => "echo",
        Some(
            Scenario::Load
            | Scenario::FloorLoad
            | Scenario::MaxProbe
            | Scenario::Max
            | Scenario::Embedded,
        ) => "paced",
        Some(Scenario::Throughput) => "throughput",
        Some(Scenario::FanoutProbe | Scenario::Fanout | Scenario::MdLatency) => "fanout",
        Some(Scenario::Jitter) => "jitter",
        Some(Scenario::Failover) => "failover",
        None => "none",
    }
}

macro_rules! accessors {
    ($($variant:ident: $ty:ident, $get:ident, $get_mut:ident;)+) => {
        impl Detail {
            $(
                #[doc = concat!("The [`", stringify!($ty), "`], if this is one.")]
                pub fn $get(&self) -> Option<&$ty> {
                    match self {
                        Detail::$variant(d) => Some(d),
                        _ => None,
                    }
                }

                #[doc = concat!("The [`", stringify!($ty), "`] to fill in: an empty detail ")]
                #[doc = "becomes one."]
                ///
                /// # Panics
                /// If the detail is of another kind (a benchmark filling in the wrong kind).
                pub fn $get_mut(&mut self) -> &mut $ty {
                    if matches!(self, Detail::None) {
                        *self = Detail::$variant($ty::default());
                    }
                    match self {
                        Detail::$variant(d) => d,
                        other => panic!(
                            "a {} detail filled in as {}",
                            other.kind(),
                            stringify!($variant)
                        ),
                    }
                }
            )+
        }
    };
}

accessors! {
    Latency: LatencyDetail, latency, latency_mut;
    Echo: EchoDetail, echo, echo_mut;
    Paced: PacedDetail, paced, paced_mut;
    Throughput: ThroughputDetail, throughput, throughput_mut;
    Fanout: FanoutDetail, fanout, fanout_mut;
    Jitter: JitterDetail, jitter, jitter_mut;
    Failover: FailoverDetail, failover, failover_mut;
}

impl Detail {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Detail::None => "none",
            Detail::Latency(_) => "latency",
            Detail::Echo(_) => "echo",
            Detail::Paced(_) => "paced",
            Detail::Throughput(_) => "throughput",
            Detail::Fanout(_) => "fanout",
            Detail::Jitter(_) => "jitter",
            Detail::Failover(_) => "failover",
        }
    }

    /// What carried the cell when it was not loopback, for the kinds that say.
    pub fn path(&self) -> Option<&str> {
        match self {
            Detail::Latency(d) => d.path.as_deref(),
            Detail::Echo(d) => d.path.as_deref(),
            Detail::Paced(d) => d.path.as_deref(),
            Detail::Throughput(d) => d.path.as_deref(),
            _ => None,
        }
    }

    /// The detail as one JSON object without its tag: what a JSON result line prints.
    pub fn to_map(&self) -> Settings {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut m)) => {
                m.remove("kind");
                m
            }
            _ => Settings::new(),
        }
    }

    /// A format 1 cell's `detail` object: the same keys, tagged with the kind its scenario
    /// implies.
    pub fn from_v1(
        scenario: Option<Scenario>,
        mut map: Settings,
    ) -> Result<Detail, serde_json::Error> {
        if map.is_empty() && scenario.is_none() {
            return Ok(Detail::None);
        }
        map.insert("kind".into(), kind_of(scenario).into());
        serde_json::from_value(serde_json::Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detail_is_one_object_tagged_by_kind_with_its_settings_beside_its_fields() {
        let mut d = Detail::None;
        d.paced_mut().for_cell = Some("load-udp-32B-10K".into());
        d.paced_mut().pings_stalled = Some(3);
        d.paced_mut().settings.insert("idle".into(), "spin".into());
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "paced", "for_cell": "load-udp-32B-10K", "pings_stalled": 3,
                "idle": "spin"
            })
        );
        let back: Detail = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
        assert_eq!(
            d.to_map(),
            serde_json::json!({"for_cell": "load-udp-32B-10K", "pings_stalled": 3, "idle": "spin"})
                .as_object()
                .unwrap()
                .clone()
        );
    }

    #[test]
    fn a_format_1_detail_reads_into_the_kind_of_its_scenario() {
        let v1 = serde_json::json!({"median_x_floor": 1.25, "floor_moved": true, "idle": "spin"});
        let d = Detail::from_v1(Some(Scenario::Pingpong), v1.as_object().unwrap().clone()).unwrap();
        let l = d.latency().unwrap();
        assert_eq!((l.median_x_floor, l.floor_moved), (Some(1.25), Some(true)));
        assert_eq!(l.settings["idle"], "spin");
        // Counts read as integers, times as numbers of either kind.
        let v1 = serde_json::json!({"kills": 5, "gaps_ns": [1, 2, 3], "case": "group"});
        let d = Detail::from_v1(Some(Scenario::Failover), v1.as_object().unwrap().clone()).unwrap();
        let f = d.failover().unwrap();
        assert_eq!(f.kills, Some(5));
        assert_eq!(f.gaps_ns.as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(
            Detail::from_v1(None, Settings::new()).unwrap(),
            Detail::None
        );
    }

    #[test]
    #[should_panic(expected = "a latency detail filled in as Paced")]
    fn filling_in_another_kind_is_a_bug_said_at_once() {
        let mut d = Detail::Latency(LatencyDetail::default());
        d.paced_mut();
    }
}
