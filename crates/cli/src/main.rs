//! `peregrine`: the command-line front end.
//!
//! Thin, in ripgrep's way: [`flags`] defines every flag once (parsing, help, single-value
//! checks); [`cmd`] has one module per command that turns the flags into the settings of a
//! run and calls the libraries, where the work (and, for `bench`, the measuring, the results
//! folder and the report) is done.

mod cmd;
mod flags;

use clap::Parser;
use flags::{Cli, Command};

/// Logs through `tracing` to standard error, filtered by `--log`, else `RUST_LOG`, else
/// `warn`. Results and statistics go to standard output; the libraries print nothing.
fn init_logging(flag: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = match flag {
        Some(f) => EnvFilter::builder().parse_lossy(f),
        None => EnvFilter::builder()
            .with_default_directive(tracing::Level::WARN.into())
            .from_env_lossy(),
    };
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn main() {
    let cli = Cli::parse();
    init_logging(cli.log.as_deref());
    // Names this process in its counters files (`peregrine stat`).
    peregrine::stat::set_process_label(match &cli.command {
        Command::Bench(_) => "peregrine-bench",
        Command::Report(_) => "peregrine-report",
        Command::Pub(_) => "peregrine-pub",
        Command::Sub(_) => "peregrine-sub",
        Command::Record(_) => "peregrine-record",
        Command::Replay(_) => "peregrine-replay",
        Command::Resolverd(_) => "peregrine-resolverd",
        Command::Feed(_) => "peregrine-feed",
        Command::Distributor(_) => "peregrine-distributor",
        Command::Client(_) => "peregrine-client",
        Command::Post(_) => "peregrine-post",
        Command::Stat(_) => "peregrine-stat",
        Command::Helper(_) => "peregrine-helper",
    });
    let result = match cli.command {
        Command::Bench(b) => cmd::bench::run(b),
        Command::Report(r) => cmd::report::run(r),
        Command::Pub(a) => cmd::publish::run(a),
        Command::Sub(a) => cmd::subscribe::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Resolverd(a) => cmd::resolverd::run(a),
        Command::Feed(a) => cmd::feed::run(a),
        Command::Distributor(a) => cmd::distributor::run(a),
        Command::Client(a) => cmd::client::run(a),
        Command::Post(a) => cmd::post::run(a),
        Command::Stat(a) => cmd::stat::run(a),
        Command::Helper(h) => {
            peregrine_bench::helper::registry::serve_spec(&h.spec).map_err(Into::into)
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
