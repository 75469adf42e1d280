//! `peregrine bench fanout`: the highest aggregate updates/s a distribution tier delivers to
//! its clients (seed 003's Producer 50/50), and with `--latency` its one-way latency over a
//! list of update rates (seed 003's Table 2); through Peregrine and, with `--compare nats`,
//! through nats-server in the same run.

use super::Session;
use crate::fanout::nats::NatsRun;
use crate::fanout::peregrine::PeregrineRun;
use crate::fanout::{FanoutConfig, Probe, System};
use crate::sweep::{rate_label, search_max};
use crate::{round3, BenchError};
use peregrine_report::model::{Cell, Detail, FanoutDetail, Latency, Scenario};
use serde_json::json;

/// The rate search's plan.
#[derive(Debug, Clone)]
pub struct FanoutPlan {
    pub cfg: FanoutConfig,
    pub compare_nats: bool,
    /// The first feed rate tried, and the highest, in updates per second.
    pub start_rate: f64,
    pub max_rate: f64,
}

/// The latency table's plan.
#[derive(Debug, Clone)]
pub struct MdLatencyPlan {
    pub cfg: FanoutConfig,
    pub compare_nats: bool,
    /// Feed rates, ascending; the run stops after the first one not sustained.
    pub rates: Vec<f64>,
}

/// The search stops when the highest rate sustained and the lowest not are within 10%.
const TOLERANCE: f64 = 0.10;
/// The lowest rate the search goes down to.
const FLOOR_RATE: f64 = 1_000.0;

/// Probes through one system.
enum Runner {
    Peregrine(PeregrineRun),
    Nats(NatsRun),
}

impl Runner {
    fn new(system: System, s: &Session, cfg: &FanoutConfig) -> Result<Runner, BenchError> {
        Ok(match system {
            System::Peregrine => Runner::Peregrine(PeregrineRun::new(s.exe(), cfg)?),
            System::Nats => Runner::Nats(NatsRun::new(s.exe(), cfg)?),
        })
    }

    fn probe(&mut self, rate: f64) -> Result<Probe, BenchError> {
        match self {
            Runner::Peregrine(r) => r.probe(rate),
            Runner::Nats(r) => r.probe(rate),
        }
    }
}

fn systems(compare_nats: bool) -> Vec<System> {
    if compare_nats {
        vec![System::Peregrine, System::Nats]
    } else {
        vec![System::Peregrine]
    }
}

/// Checks that nats-server is there before anything runs, so a run never ends with half its
/// comparison.
fn check_nats(compare_nats: bool) -> Result<(), BenchError> {
    if compare_nats && !crate::fanout::nats::server_available() {
        return Err(BenchError::Config(format!(
            "--compare nats needs {}, which is not installed: apt-get install nats-server",
            crate::fanout::nats::SERVER
        )));
    }
    Ok(())
}

/// The rate search, per system, then the comparison.
pub fn fanout(plan: &FanoutPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.cfg.validate()?;
    check_nats(plan.compare_nats)?;
    if !(FLOOR_RATE..=1e9).contains(&plan.start_rate) || plan.max_rate < plan.start_rate {
        return Err(BenchError::Config(format!(
            "--start-rate {} --max-rate {} is not accepted: give a start rate from 1K and a maximum at least as high",
            plan.start_rate, plan.max_rate
        )));
    }
    let mut results: Vec<(System, Option<Probe>)> = Vec::new();
    for system in systems(plan.compare_nats) {
        if !s.out.json {
            println!(
                "{}: {} clients, {} items each, {:.0}% shared, {} B updates, {} mode, {} s per probe",
                system.name(),
                plan.cfg.clients,
                plan.cfg.items_per_client,
                plan.cfg.overlap * 100.0,
                plan.cfg.size,
                plan.cfg.mode.name(),
                plan.cfg.seconds
            );
        }
        let mut runner = Runner::new(system, s, &plan.cfg)?;
        let mut best: Option<Probe> = None;
        search_max(
            plan.start_rate,
            FLOOR_RATE,
            plan.max_rate,
            TOLERANCE,
            |rate| {
                tracing::info!(
                    system = system.name(),
                    rate = rate.round(),
                    "fan-out probe: {} clients",
                    plan.cfg.clients
                );
                let p = runner.probe(rate.round())?;
                show_probe(s, &plan.cfg, &p)?;
                let ok = p.sustained();
                if ok
                    && best
                        .as_ref()
                        .is_none_or(|b| b.record.rate_asked < p.record.rate_asked)
                {
                    best = Some(p);
                }
                Ok::<bool, BenchError>(ok)
            },
        )?;
        let cell = result_cell(&plan.cfg, system, best.as_ref());
        if s.out.json {
            println!("{}", result_json(&plan.cfg, system, best.as_ref()));
        }
        s.record(cell, None, None)?;
        results.push((system, best));
    }
    if !s.out.json {
        print_summary(&plan.cfg, &results);
    }
    Ok(())
}

/// The latency table, per system.
pub fn md_latency(plan: &MdLatencyPlan, s: &mut Session) -> Result<(), BenchError> {
    plan.cfg.validate()?;
    check_nats(plan.compare_nats)?;
    if plan.rates.is_empty() || plan.rates.iter().any(|&r| !(1.0..=1e9).contains(&r)) {
        return Err(BenchError::Config(
            "--rates is not accepted: give update rates from 1 to 1G per second, e.g. 1k,10k,100k"
                .into(),
        ));
    }
    let mut rates = plan.rates.clone();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    for system in systems(plan.compare_nats) {
        let mut runner = Runner::new(system, s, &plan.cfg)?;
        if !s.out.json {
            println!(
                "{}: one-way latency, feed to client through the {}, {} client(s), {} B updates",
                system.name(),
                match system {
                    System::Peregrine => "distributor",
                    System::Nats => "server",
                },
                plan.cfg.clients,
                plan.cfg.size
            );
            println!(
                "  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  verdict",
                "rate", "mean_us", "stddev_us", "max_us", "min_us", "points"
            );
        }
        for &rate in &rates {
            let p = runner.probe(rate)?;
            let cell = probe_cell(&plan.cfg, &p, Scenario::MdLatency);
            if s.out.json {
                println!("{}", latency_json(&plan.cfg, &p));
            } else {
                let l = &p.latency;
                println!(
                    "  {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10}  {}{}",
                    rate_label(rate),
                    l.mean_ns / 1e3,
                    l.stddev_ns / 1e3,
                    l.max_ns / 1e3,
                    l.min_ns / 1e3,
                    l.points,
                    p.verdict.name(),
                    if p.why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", p.why)
                    }
                );
            }
            let held = p.sustained();
            s.record(cell, None, None)?;
            if !held {
                break;
            }
        }
    }
    Ok(())
}

/// One short probe of the default suite: Peregrine, the default shape, one rate.
pub fn suite_probe(cfg: &FanoutConfig, rate: f64, s: &mut Session) -> Result<(), BenchError> {
    let mut run = PeregrineRun::new(s.exe(), cfg)?;
    let p = run.probe(rate)?;
    show_probe(s, cfg, &p)
}

fn show_probe(s: &mut Session, cfg: &FanoutConfig, p: &Probe) -> Result<(), BenchError> {
    if s.out.json {
        println!("{}", probe_json(cfg, p));
    } else {
        println!("  {}", probe_line(p));
    }
    s.record(probe_cell(cfg, p, Scenario::FanoutProbe), None, None)
}

/// `feed 200K/s -> 376,000 updates/s to 16 clients, lost 0, sustained (cpu: ...)`.
pub fn probe_line(p: &Probe) -> String {
    let r = &p.record;
    let cpu: Vec<String> = r.cpu_s.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
    format!(
        "feed {}/s (sent {:.0}/s) -> {} updates/s to {} clients, lost {}, mean {:.1} us, max {:.1} ms: {}{} [cpu s: {}]",
        rate_label(r.rate_asked),
        r.feed_rate,
        crate::output::format_rate(p.updates_per_s),
        r.clients.len(),
        p.lost,
        p.latency.mean_ns / 1e3,
        p.latency.max_ns / 1e6,
        p.verdict.name(),
        if p.why.is_empty() {
            String::new()
        } else {
            format!(" ({})", p.why)
        },
        cpu.join(", ")
    )
}

fn print_summary(cfg: &FanoutConfig, results: &[(System, Option<Probe>)]) {
    println!();
    println!(
        "Producer {:.0}/{:.0}: {} clients, {} items each, {} B updates, {} mode",
        cfg.overlap * 100.0,
        100.0 - cfg.overlap * 100.0,
        cfg.clients,
        cfg.items_per_client,
        cfg.size,
        cfg.mode.name()
    );
    println!(
        "  {:<10} {:>14} {:>18} {:>6}  cpu seconds",
        "system", "feed upd/s", "delivered upd/s", "lost"
    );
    for (system, best) in results {
        match best {
            Some(p) => {
                let cpu: Vec<String> = p
                    .record
                    .cpu_s
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.2}"))
                    .collect();
                println!(
                    "  {:<10} {:>14.0} {:>18.0} {:>6}  {}",
                    system.name(),
                    p.record.feed_rate,
                    p.updates_per_s,
                    p.lost,
                    cpu.join(", ")
                );
            }
            None => println!("  {:<10} no rate sustained", system.name()),
        }
    }
    if let [(_, Some(a)), (_, Some(b))] = results {
        println!(
            "  peregrine / nats = {:.2}x delivered updates/s",
            a.updates_per_s / b.updates_per_s
        );
    }
}

fn latency_of(p: &Probe) -> Option<Latency> {
    let l = &p.latency;
    (l.points > 0).then(|| Latency {
        samples: l.points,
        min_ns: l.min_ns,
        mean_ns: round3(l.mean_ns),
        max_ns: l.max_ns,
        stddev_ns: round3(l.stddev_ns),
        ..Latency::default()
    })
}

fn base_cell(cfg: &FanoutConfig, p: &Probe, scenario: Scenario, id: String) -> Cell {
    let r = &p.record;
    let mut fanout = FanoutDetail {
        clients: Some(cfg.clients as u64),
        items_per_client: Some(cfg.items_per_client as u64),
        overlap: Some(cfg.overlap),
        feed_updates_per_s: Some(round3(r.feed_rate)),
        verdict: Some(p.verdict.name().into()),
        why: (!p.why.is_empty()).then(|| p.why.clone()),
        ..FanoutDetail::default()
    };
    let detail = &mut fanout.settings;
    detail.insert("mode".into(), cfg.mode.name().into());
    detail.insert("warmup_seconds".into(), cfg.warmup_seconds.into());
    detail.insert(
        "client_cpu_s".into(),
        r.clients
            .iter()
            .map(|c| round3(c.cpu_s))
            .collect::<Vec<_>>()
            .into(),
    );
    detail.insert(
        "pin".into(),
        cfg.pin.map_or("none".to_string(), |p| p.to_arg()).into(),
    );
    detail.insert("backbone_datagram".into(), cfg.backbone_datagram.into());
    detail.insert("backbone_sealed".into(), cfg.backbone_sealed.into());
    detail.insert("client_tls".into(), cfg.client_tls.into());
    detail.insert("client_websocket".into(), cfg.client_websocket.into());
    detail.insert(
        "attack".into(),
        cfg.attack.map_or("none", |a| a.name()).into(),
    );
    detail.insert("client_busy_poll_us".into(), cfg.client_busy_poll_us.into());
    let expected: u64 = r.accounts.iter().map(|a| a.expected).sum();
    detail.insert("expected".into(), expected.into());
    Cell {
        id,
        scenario: Some(scenario),
        system: Some(p.system.name().to_string()),
        transport: "tcp".to_string(),
        size_bytes: cfg.size,
        rate_requested_msgs_per_s: Some(r.rate_asked),
        rate_achieved_msgs_per_s: Some(round3(p.updates_per_s)),
        seconds: round3(r.feed_seconds),
        sent: r.feed_updates,
        received: r.accounts.iter().map(|a| a.delivered).sum(),
        lost: p.lost,
        refused: r.refused,
        sustained: Some(p.sustained()),
        latency: latency_of(p),
        cpu_s: r
            .cpu_s
            .iter()
            .map(|(k, v)| (k.clone(), round3(*v)))
            .collect(),
        detail: Detail::Fanout(fanout),
        ..Cell::default()
    }
}

/// A probe (`FanoutProbe`) or a latency row (`MdLatency`) as a cell.
fn probe_cell(cfg: &FanoutConfig, p: &Probe, scenario: Scenario) -> Cell {
    let kind = if scenario == Scenario::MdLatency {
        "md-latency"
    } else {
        "fanout-probe"
    };
    let id = format!(
        "{kind}-{}-{}",
        p.system.name(),
        rate_label(p.record.rate_asked)
    );
    base_cell(cfg, p, scenario, id)
}

/// The search's result: the highest sustained probe, or a cell saying none was.
fn result_cell(cfg: &FanoutConfig, system: System, best: Option<&Probe>) -> Cell {
    let id = format!("fanout-{}", system.name());
    match best {
        Some(p) => base_cell(cfg, p, Scenario::Fanout, id),
        None => Cell {
            id,
            scenario: Some(Scenario::Fanout),
            system: Some(system.name().to_string()),
            transport: "tcp".to_string(),
            size_bytes: cfg.size,
            sustained: Some(false),
            ..Cell::default()
        },
    }
}

fn common_json(cfg: &FanoutConfig, p: &Probe) -> serde_json::Map<String, serde_json::Value> {
    let r = &p.record;
    let v = json!({
        "system": p.system.name(),
        "clients": cfg.clients,
        "items_per_client": cfg.items_per_client,
        "overlap": cfg.overlap,
        "size": cfg.size,
        "mode": cfg.mode.name(),
        "updates_per_s": round3(p.updates_per_s),
        "feed_rate": r.rate_asked,
        "feed_updates_per_s": round3(r.feed_rate),
        "lost": p.lost,
        "delivered": r.accounts.iter().map(|a| a.delivered).sum::<u64>(),
        "undelivered": r.accounts.iter().map(|a| a.undelivered).sum::<u64>(),
        "foreign": r.accounts.iter().map(|a| a.foreign).sum::<u64>(),
        "inconsistent": r.accounts.iter().map(|a| a.inconsistent).sum::<u64>(),
        "gaps": r.clients.iter().map(|c| c.gaps).sum::<u64>(),
        "sustained": p.sustained(),
        "verdict": p.verdict.name(),
        "why": p.why,
        "cpu_s": r.cpu_s,
    });
    v.as_object().expect("an object").clone()
}

fn probe_json(cfg: &FanoutConfig, p: &Probe) -> serde_json::Value {
    let mut m = common_json(cfg, p);
    m.insert("kind".into(), "fanout_probe".into());
    m.into()
}

fn result_json(cfg: &FanoutConfig, system: System, best: Option<&Probe>) -> serde_json::Value {
    match best {
        Some(p) => {
            let mut m = common_json(cfg, p);
            m.insert("kind".into(), "fanout".into());
            m.into()
        }
        None => json!({"kind": "fanout", "system": system.name(), "clients": cfg.clients,
                       "updates_per_s": null, "lost": null, "sustained": false}),
    }
}

fn latency_json(cfg: &FanoutConfig, p: &Probe) -> serde_json::Value {
    let mut m = common_json(cfg, p);
    m.insert("kind".into(), "md_latency".into());
    m.insert("rate".into(), p.record.rate_asked.into());
    let l = &p.latency;
    m.insert("mean_ns".into(), round3(l.mean_ns).into());
    m.insert("stddev_ns".into(), round3(l.stddev_ns).into());
    m.insert("max_ns".into(), l.max_ns.into());
    m.insert("min_ns".into(), l.min_ns.into());
    m.insert("points".into(), l.points.into());
    m.into()
}
