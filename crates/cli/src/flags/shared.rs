//! The flags many commands share, each defined once as a clap group and flattened into the
//! commands that take it: the name, the spelling of its older aliases and the value check
//! live here. A command that needs another default or a help line of its own says so with
//! `#[command(mut_arg("NAME", ...))]` on its own flags, so what differs is visible where it
//! differs (for example `peregrine sub` idles with `backoff`, every benchmark with `spin`).

use super::values;
use clap::Args;
use peregrine::{IdleKind, Scheme};
use peregrine_bench::CpuPair;

/// How long a rate-driven run measures, and how long it runs at the rate before that. The
/// ranges are the scenario's own, checked with its other settings (a fan-out warm-up must be
/// shorter than its probe).
#[derive(Args, Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The measured interval, in seconds.
    #[arg(long, default_value = "2")]
    pub seconds: f64,
    /// Seconds at the rate before measuring (`--warmup-s` is an older spelling).
    #[arg(long, alias = "warmup-s", default_value = "0.5")]
    pub warmup_seconds: f64,
}

/// How many round trips run before measuring.
#[derive(Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmupCount {
    /// Round trips before measuring (`--warmup` is an older spelling).
    #[arg(long, alias = "warmup", default_value_t = 100_000)]
    pub warmup_count: u64,
}

/// When a command that otherwise runs until interrupted stops by itself.
#[derive(Args, Debug, Clone, Copy, PartialEq)]
pub struct StopAfter {
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long, value_parser = values::parse_seconds)]
    pub seconds: Option<f64>,
}

/// The two CPUs a two-sided run pins its sides to.
#[derive(Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    /// Two CPUs, `A,B`: the measuring side runs on A, the other on B (default: the first two
    /// this process may use).
    #[arg(long, value_parser = values::parse_cpus)]
    pub cpus: Option<CpuPair>,
}

impl Cpus {
    /// The CPUs given, else the first two this process may use.
    pub fn pair(&self) -> CpuPair {
        self.cpus.unwrap_or_else(CpuPair::default_pair)
    }
}

/// What a reading side does when there is nothing to read.
#[derive(Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    /// What a reading side does when there is nothing to read: spin, yield, backoff or block.
    #[arg(long, default_value = "spin", value_parser = values::parse_idle)]
    pub idle: IdleKind,
}

/// The one transport a run measures.
#[derive(Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Transport: ipc (shared memory), udp, mcast or tcp (loopback unless a URI flag says
    /// otherwise).
    #[arg(long, default_value = "ipc", value_parser = values::parse_scheme)]
    pub transport: Scheme,
}

/// The transports a run measures, one after the other.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct Transports {
    /// Transports, comma-separated: ipc, udp, mcast, tcp (`--transports` is another
    /// spelling).
    #[arg(long, alias = "transports", value_delimiter = ',', default_value = "ipc,udp", value_parser = values::parse_scheme)]
    pub transport: Vec<Scheme>,
}

#[cfg(test)]
mod tests {
    use crate::flags::{Cli, Command};
    use clap::{CommandFactory, Parser};

    fn parse(args: &[&str]) -> Result<Command, String> {
        let argv = ["peregrine"].iter().chain(args);
        Cli::try_parse_from(argv)
            .map(|c| c.command)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_override_names_a_flag_the_command_has() {
        // `mut_arg` on a flag a command does not have panics when the command is built: this
        // builds every subcommand's definition.
        Cli::command().debug_assert();
    }

    #[test]
    fn each_command_keeps_its_own_defaults_through_the_shared_groups() {
        use crate::flags::bench::Scenario;
        let Command::Bench(b) = parse(&["bench", "load"]).unwrap() else {
            panic!("not bench")
        };
        let Some(Scenario::Load(load)) = b.scenario else {
            panic!("not load")
        };
        assert_eq!(
            (load.timing.seconds, load.timing.warmup_seconds),
            (3.0, 1.0)
        );
        let Command::Bench(b) = parse(&["bench", "sweep"]).unwrap() else {
            panic!("not bench")
        };
        let Some(Scenario::Sweep(sweep)) = b.scenario else {
            panic!("not sweep")
        };
        assert_eq!(
            (sweep.timing.seconds, sweep.timing.warmup_seconds),
            (2.0, 0.5)
        );
        let Command::Sub(sub) = parse(&["sub", "md.*"]).unwrap() else {
            panic!("not sub")
        };
        assert_eq!(sub.idle.idle, peregrine::IdleKind::Backoff);
    }

    #[test]
    fn the_older_spellings_still_parse() {
        use crate::flags::bench::Scenario;
        let Command::Bench(b) =
            parse(&["bench", "max", "--transports", "udp", "--warmup-s", "0.25"]).unwrap()
        else {
            panic!("not bench")
        };
        let Some(Scenario::Max(max)) = b.scenario else {
            panic!("not max")
        };
        assert_eq!(max.transports.transport, [peregrine::Scheme::Udp]);
        assert_eq!(max.timing.warmup_seconds, 0.25);
        let Command::Bench(b) = parse(&["bench", "floor", "--warmup", "7"]).unwrap() else {
            panic!("not bench")
        };
        let Some(Scenario::Floor(floor)) = b.scenario else {
            panic!("not floor")
        };
        assert_eq!(floor.warmup.warmup_count, 7);
    }

    #[test]
    fn a_bad_shared_value_is_refused_naming_it() {
        for (args, says) in [
            (&["sub", "t", "--seconds", "0"][..], "'0' is not a duration"),
            (&["bench", "latency", "--warmup-seconds", "x"][..], "'x'"),
            (
                &["bench", "sweep", "--transport", "smoke"][..],
                "'smoke' is not a transport",
            ),
            (&["sub", "t", "--idle", "nap"][..], "nap"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }
}
