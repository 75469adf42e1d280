//! The flags of `peregrine pub`, `peregrine sub` and `peregrine resolverd`.

use super::shared::{Idle, StopAfter};
use super::values;
use clap::Args;
use std::net::SocketAddrV4;

#[derive(Args, Debug)]
pub struct PubArgs {
    /// The topic to publish.
    #[arg(value_parser = values::parse_topic)]
    pub topic: String,
    /// Messages per second (k and m suffixes: 10k, 1.5m). Default 10; with --stdin, as fast
    /// as the lines come.
    #[arg(long, value_parser = values::parse_rate)]
    pub rate: Option<f64>,
    /// Payload bytes per message: "#N" (the message number) padded with dots.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub size: u32,
    /// Send this text as every message's payload (instead of --size's "#N....").
    #[arg(long, conflicts_with = "stdin")]
    pub message: Option<String>,
    /// Send each line of standard input as one message (without its newline), until the end
    /// of the input (or --count).
    #[arg(long)]
    pub stdin: bool,
    /// Messages to send, then stop (default: until interrupted).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Print every message sent.
    #[arg(long)]
    pub print: bool,
    /// Wait until this many subscribers are attached before the first message (up to 30 s).
    #[arg(long, default_value_t = 0)]
    pub wait_subscribers: usize,
    /// After the last message, keep serving subscribers (retransmissions) this long, then close
    /// (0 to 3600000 milliseconds).
    #[arg(long, default_value_t = 500, value_parser = values::parse_linger_ms)]
    pub linger_ms: u64,
    /// Publish as a member of this failover group: each message carries its sequence number,
    /// message N being due N/rate seconds after the Unix epoch (with --stdin: line N), so
    /// members started apart send the same numbers with the same "#N" payloads at the same
    /// time. Subscribe with `peregrine sub TOPIC --group NAME`.
    #[arg(long, value_parser = values::parse_group)]
    pub group: Option<String>,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("idle", |a| a.default_value("backoff")
        .help("What to do when no message is waiting: spin, yield, backoff or block")),
)]
pub struct SubArgs {
    /// A topic name, or a glob (`md.eq.*`; `*` any run of characters, `?` one), or with
    /// --regex a regular expression matching whole topic names.
    #[arg(value_parser = values::parse_pattern)]
    pub pattern: String,
    /// Treat the pattern as a regular expression.
    #[arg(long)]
    pub regex: bool,
    /// Print every message received.
    #[arg(long)]
    pub print: bool,
    /// Stop after this many messages (exit status 1 if --seconds passes first).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    #[command(flatten)]
    pub stop: StopAfter,
    #[command(flatten)]
    pub idle: Idle,
    /// Subscribe to a failover group: every publisher of the topic is a member, and each
    /// sequence is delivered once, from whichever member's copy comes first. Needs a topic
    /// name (not a glob or --regex).
    #[arg(long, value_parser = values::parse_group, conflicts_with = "regex")]
    pub group: Option<String>,
    /// With --group: how long a missing sequence is waited for while a member is ahead of it
    /// and another has not gone past it, before it is reported lost.
    #[arg(long, default_value_t = 100, value_parser = values::parse_window_ms, requires = "group")]
    pub window_ms: u64,
    /// Start from this sequence in the past: the recorded history (from --dir or
    /// --recorder), then the live stream, with no gap and no duplicate at the seam. Needs a
    /// topic name.
    #[arg(long, conflicts_with_all = ["group", "regex"])]
    pub from_seq: Option<u64>,
    /// The recording folder (`peregrine record --dir`) of the topic: the history of
    /// --from-seq, and where a loss its publisher can no longer repair is recovered from
    /// (without --from-seq: live, with that recovery).
    #[arg(long, conflicts_with_all = ["recorder", "group", "regex"])]
    pub dir: Option<std::path::PathBuf>,
    /// Recorders serving replays (`peregrine record --serve`), HOST:PORT, comma-separated
    /// (the first that answers is read): as --dir, over TCP.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["group", "regex"])]
    pub recorder: Option<Vec<String>>,
    /// A durable subscriber of this name: its position in each stream is kept (in --dir, or
    /// by the --recorder), and a later start with the name resumes from there: the history
    /// it missed, then live. At least once: what it printed after its last commit comes again
    /// after a crash (a clean stop commits). Its first start begins as --from-seq says, or live.
    #[arg(long, value_parser = parse_durable_name)]
    pub durable: Option<String>,
    /// With --durable: keep the positions this often (milliseconds).
    #[arg(long, default_value_t = 200, requires = "durable", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub commit_ms: u64,
}

#[derive(Args, Debug)]
pub struct ResolverdArgs {
    /// Address and port to serve.
    #[arg(long, default_value = "0.0.0.0:14401")]
    pub listen: SocketAddrV4,
    /// Clients silent this long are dropped (they send keepalives every 5 s).
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub client_timeout_ms: u64,
    /// Most clients registered at once.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_clients: u64,
    /// Most clients registered from one IP address (a host running more resolver clients
    /// than this needs a larger value).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_clients_per_ip: u64,
    /// Print a statistics line this often (0: never).
    #[arg(long, default_value_t = 10)]
    pub stats_every_s: u64,
    #[command(flatten)]
    pub stop: StopAfter,
}

fn parse_durable_name(s: &str) -> Result<String, String> {
    peregrine_archive::format::positions::check_name(s).map(|()| s.to_string())
}

#[cfg(test)]
mod tests {
    use crate::flags::{Cli, Command};
    use clap::Parser;

    #[test]
    fn linger_ms_is_bounded_with_a_clear_error() {
        let e = Cli::try_parse_from([
            "peregrine",
            "pub",
            "t",
            "--linger-ms",
            "18446744073709551615",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("from 0 to 3600000"), "{e}");
        let ok = Cli::try_parse_from(["peregrine", "pub", "t", "--linger-ms", "3600000"]).unwrap();
        assert!(matches!(ok.command, Command::Pub(a) if a.linger_ms == 3_600_000));
    }
}
