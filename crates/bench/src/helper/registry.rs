//! The registry of helper roles: every side a benchmark starts as a process (the floor's
//! pong, the ping-pong's pong, the bare-socket pong, the throughput subscribers, the load
//! reflectors, the embedded-timestamp publisher, the NATS feed and clients, the failover
//! members) and what plays it. `peregrine helper SPEC` ends here ([`serve_spec`]). The
//! measurements start their sides through the [protocol](super::protocol) and never name this
//! module; only it names them.

use super::protocol::HELPER_COMMAND;
use crate::failover::paths::PathsSpec;
use crate::failover::MemberSpec;
use crate::fanout::nats::{NatsClientSpec, NatsFeedSpec};
use crate::measure::floor::FloorPong;
use crate::measure::load::{CacheLineReflector, EmbeddedPublisher, LoadReflector};
use crate::measure::pingpong::Pong;
use crate::measure::raw::RawPong;
use crate::measure::throughput::ThroughputSubscriber;
use crate::BenchError;
use serde::{Deserialize, Serialize};

/// One helper process: which side it plays and with what settings. Each variant's name, in
/// snake case, is its role's [`Role::TAG`](super::protocol::Role::TAG).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HelperSpec {
    FloorPong(FloorPong),
    Pong(Pong),
    RawPong(RawPong),
    ThroughputSubscriber(ThroughputSubscriber),
    LoadReflector(LoadReflector),
    CacheLineReflector(CacheLineReflector),
    EmbeddedPublisher(EmbeddedPublisher),
    NatsFeed(NatsFeedSpec),
    NatsClient(NatsClientSpec),
    FailoverMember(MemberSpec),
    PathsPublisher(PathsSpec),
}

impl HelperSpec {
    /// Plays this side, in the helper process.
    pub fn serve(self) -> Result<(), BenchError> {
        match self {
            HelperSpec::FloorPong(p) => crate::measure::floor::pong(&p),
            HelperSpec::Pong(Pong(cfg)) => crate::measure::pingpong::pong(&cfg),
            HelperSpec::RawPong(RawPong {
                cfg,
                ping_uri,
                pong_uri,
            }) => crate::measure::raw::pong(&cfg, &ping_uri, &pong_uri),
            HelperSpec::ThroughputSubscriber(ThroughputSubscriber { cfg, uri }) => {
                crate::measure::throughput::subscribe(&cfg, &uri)
            }
            HelperSpec::LoadReflector(LoadReflector { cfg, clock }) => {
                crate::measure::load::reflect(&cfg, &clock)
            }
            HelperSpec::CacheLineReflector(CacheLineReflector { cfg, line, clock }) => {
                crate::measure::load::reflect_cache_line(&cfg, &line, &clock)
            }
            HelperSpec::EmbeddedPublisher(EmbeddedPublisher { cfg, clock }) => {
                crate::measure::load::publish_embedded(&cfg, &clock)
            }
            HelperSpec::NatsFeed(spec) => crate::fanout::nats::feed(&spec),
            HelperSpec::NatsClient(spec) => crate::fanout::nats::client(&spec),
            HelperSpec::FailoverMember(spec) => crate::failover::member(&spec),
            HelperSpec::PathsPublisher(spec) => crate::failover::paths::publish(&spec),
        }
    }
}

/// Reads a helper's spec from its command line argument and plays it.
pub fn serve_spec(json: &str) -> Result<(), BenchError> {
    let spec: HelperSpec = serde_json::from_str(json).map_err(|e| {
        BenchError::Config(format!(
            "`peregrine {HELPER_COMMAND}` takes the JSON settings a benchmark gives its helper processes (it is not meant to be run by hand): {e}"
        ))
    })?;
    spec.serve()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::helper::protocol::{spec_json, Role};
    use crate::measure::load::{LoadConfig, Method};
    use crate::measure::throughput::ThroughputConfig;
    use crate::CpuPair;
    use peregrine::{IdleKind, SlowSubscriberPolicy};
    use std::time::Duration;

    /// Every setting a helper needs survives the trip through its command line.
    #[test]
    fn a_spec_reaches_the_helper_with_every_setting() {
        let cpus = CpuPair { a: 0, b: 1 };
        let load = LoadConfig {
            transport: peregrine::Scheme::Udp,
            size: 64,
            rate_msgs_per_s: 250_000.0,
            ping_every: 50,
            seconds: 1.5,
            warmup_seconds: 0.25,
            cpus,
            idle: IdleKind::Backoff,
            method: Method::Embedded,
            name: "bench-ld-1".into(),
            connect_timeout: Duration::from_millis(20_500),
            uri: Some("udp://127.0.0.1:4000?mode=urgent".into()),
            reflect_uri: Some("udp://10.0.0.2:4001?mode=urgent&xdp=pgb0".into()),
            sub_netns: Some("pgb-b".into()),
        };
        let clock = Clock::from_arg("tsc:0.3846").unwrap();
        let spec = EmbeddedPublisher {
            cfg: load.clone(),
            clock,
        };
        let back: HelperSpec = serde_json::from_str(&spec_json(&spec)).unwrap();
        let HelperSpec::EmbeddedPublisher(EmbeddedPublisher { cfg, clock: c }) = back else {
            panic!("another variant came back: {back:?}")
        };
        assert_eq!(format!("{cfg:?}"), format!("{load:?}"));
        assert_eq!(c.to_arg(), clock.to_arg());

        let tp = ThroughputConfig {
            transport: peregrine::Scheme::Ipc,
            size: 32,
            seconds: 2.0,
            count: Some(7),
            subscribers: 3,
            policy: SlowSubscriberPolicy::Overwrite,
            capacity: 1 << 20,
            cpus: None,
            name: "bench-tp-1".into(),
            connect_timeout: Duration::from_secs(20),
            idle: IdleKind::Block,
            uri: None,
            loss: Some("1%".into()),
            group: true,
            sub_netns: None,
        };
        let spec = ThroughputSubscriber {
            cfg: tp.clone(),
            uri: "ipc://bench-tp-1".into(),
        };
        let json = spec_json(&spec);
        let back: HelperSpec = serde_json::from_str(&json).unwrap();
        let HelperSpec::ThroughputSubscriber(ThroughputSubscriber { cfg, uri }) = back else {
            panic!("another variant came back: {back:?}")
        };
        assert_eq!(format!("{cfg:?}"), format!("{tp:?}"));
        assert_eq!(uri, "ipc://bench-tp-1");
        assert!(json.contains("\"policy\":\"overwrite\"") && json.contains("\"idle\":\"block\""));
    }

    /// A role whose tag names no variant of the registry would start a helper that refuses
    /// its spec: every role's tag is one.
    #[test]
    fn every_roles_tag_is_a_variant_of_the_registry() {
        fn check<R: Role>() {
            let e = serde_json::from_str::<HelperSpec>(&format!("{{\"{}\": null}}", R::TAG))
                .unwrap_err()
                .to_string();
            assert!(
                !e.contains("unknown variant") && e.contains("invalid type: null"),
                "{} ({}): {e}",
                R::TAG,
                R::WHAT
            );
        }
        check::<FloorPong>();
        check::<Pong>();
        check::<RawPong>();
        check::<ThroughputSubscriber>();
        check::<LoadReflector>();
        check::<CacheLineReflector>();
        check::<EmbeddedPublisher>();
        check::<NatsFeedSpec>();
        check::<NatsClientSpec>();
        check::<MemberSpec>();
        check::<PathsSpec>();
        // And a tag that names none is told apart.
        let e = serde_json::from_str::<HelperSpec>(r#"{"pingg": null}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }

    #[test]
    fn a_bad_spec_is_refused_with_what_the_command_is_for() {
        let e = serve_spec("{\"pong\": 3}").unwrap_err().to_string();
        assert!(e.contains("not meant to be run by hand"), "{e}");
        let e = serve_spec(r#"{"floor_pong":{"name":"x","cpus":{"a":0,"b":1}}, "idle":"sprint"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("peregrine helper"), "{e}");
    }
}
