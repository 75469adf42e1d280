//! Flags of `peregrine record` and `peregrine replay`.

use super::shared::StopAfter;
use super::values;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RecordArgs {
    #[command(subcommand)]
    pub command: Option<RecordCommand>,
    /// The topics to record: names or globs (`orders.*`), comma-separated. Every stream
    /// (publisher session) of each gets a recording of its own under --dir.
    #[arg(long, required_unless_present = "backbone", value_delimiter = ',', value_parser = values::parse_pattern)]
    pub topics: Vec<String>,
    /// Also record market data: each --service's topic (md.SERVICE) on this backbone, as a
    /// distributor reads it (sealed with the backbone's key unless the URI says auth=none).
    /// Without a value, the default backbone.
    #[arg(long, num_args = 0..=1, default_missing_value = peregrine_market_data::backbone::DEFAULT_BACKBONE)]
    pub backbone: Option<String>,
    /// The services of --backbone to record, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = peregrine_market_data::backbone::DEFAULT_SERVICE, requires = "backbone")]
    pub service: Vec<String>,
    /// The folder of the recordings: `DIR/<topic>/<session>/` (made if missing; a stream
    /// recorded before is resumed after its recovery).
    #[arg(long, required = true)]
    pub dir: Option<PathBuf>,
    /// When records are forced to the disk: none, each (before the next message is taken),
    /// or interval:MS.
    #[arg(long, default_value = "interval:100", value_parser = parse_durability)]
    pub fsync: peregrine_archive::Durability,
    /// Bytes per segment file (k, m, g suffixes): a multiple of 4096 from 64k to 1g.
    #[arg(long, default_value = "64m", value_parser = values::parse_size)]
    pub segment_len: u64,
    /// Keep at most this many bytes of segments per stream (k, m, g suffixes; at least two
    /// segments): the oldest go first.
    #[arg(long, value_parser = values::parse_size)]
    pub retain_bytes: Option<u64>,
    /// Keep records for at least this many seconds, and segments whose records are all older
    /// go.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10 * 365 * 86_400))]
    pub retain_seconds: Option<u64>,
    #[command(flatten)]
    pub stop: StopAfter,
    /// Serve replays of the folder over TCP on this address (`peregrine replay --recorder
    /// ADDR`). Unauthenticated: keep it on loopback or a trusted network.
    #[arg(long)]
    pub serve: Option<std::net::SocketAddr>,
}

#[derive(clap::Subcommand, Debug)]
pub enum RecordCommand {
    /// Write recordings to one file for research: market data (`md.*` topics) decoded into
    /// columns (receive and embedded time, service, item, message type, one column per
    /// dictionary field), other topics as rows of raw bytes; all in receive order.
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The folder `peregrine record --dir` wrote.
    #[arg(long)]
    pub dir: PathBuf,
    /// The file format: parquet (Apache Parquet, snappy-compressed).
    #[arg(long, default_value = "parquet", value_parser = parse_format)]
    pub format: String,
    /// The file to write (replaced whole: written beside it, then renamed).
    #[arg(long)]
    pub out: PathBuf,
    /// Topics to export: names or globs (default: every topic recorded).
    #[arg(value_parser = values::parse_pattern)]
    pub topics: Vec<String>,
    /// The field dictionary of the market data (default: the built-in one, what `peregrine
    /// feed` and `peregrine distributor` use unless given another): a column per field.
    #[arg(long)]
    pub dictionary: Option<PathBuf>,
    /// Rows per Parquet row group.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    pub rows_per_group: u64,
}

fn parse_format(s: &str) -> Result<String, String> {
    match s {
        "parquet" => Ok(s.to_string()),
        _ => Err(format!(
            "--format {s} is not a format this export writes: give parquet"
        )),
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The folder `peregrine record --dir` wrote.
    #[arg(
        long,
        required_unless_present = "recorder",
        conflicts_with = "recorder"
    )]
    pub dir: Option<PathBuf>,
    /// Recorders serving replays (`peregrine record --serve ADDR`), HOST:PORT,
    /// comma-separated: the first that answers is read.
    #[arg(long, value_delimiter = ',')]
    pub recorder: Option<Vec<String>>,
    /// The topic to replay (every session recorded of it, oldest first).
    #[arg(value_parser = values::parse_topic)]
    pub topic: String,
    /// From this sequence of each session on.
    #[arg(long, conflicts_with = "since")]
    pub from_seq: Option<u64>,
    /// From this time on: nanoseconds since the Unix epoch, or UTC as
    /// 2026-11-29T04:00:00Z (fractions of a second allowed).
    #[arg(long, value_parser = parse_time)]
    pub since: Option<u64>,
    /// Print every message as `peregrine sub --print` does (otherwise a count).
    #[arg(long)]
    pub print: bool,
    /// Replay at the recorded pace times this speed (1: as recorded, 2: twice as fast);
    /// without it, as fast as it reads.
    #[arg(long, value_parser = parse_speed)]
    pub pace: Option<f64>,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0 && *v <= 1_000_000.0)
        .ok_or_else(|| {
            format!("--pace {s} is not accepted: give a speed over 0 (1: as recorded, 2: twice as fast)")
        })
}

fn parse_durability(s: &str) -> Result<peregrine_archive::Durability, String> {
    s.parse()
        .map_err(|e: peregrine_archive::ArchiveError| e.to_string())
}

/// Nanoseconds since the Unix epoch, or `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "'{s}' is not a time: give nanoseconds since the Unix epoch or UTC as 2026-11-29T04:00:00Z (a fraction of a second allowed: 04:00:00.25Z)"
        )
    };
    if let Ok(ns) = s.parse::<u64>() {
        return Ok(ns);
    }
    let body = s.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = body.split_once('T').ok_or_else(bad)?;
    let d: Vec<&str> = date.split('-').collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = hms.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let num = |x: &str| x.parse::<i64>().map_err(|_| bad());
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (hh, mm, ss) = (num(t[0])?, num(t[1])?, num(t[2])?);
    if !(1970..=2262).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || hh > 23
        || mm > 59
        || ss > 60
    {
        return Err(bad());
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, mo) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let frac_ns = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse::<i64>().map_err(|_| bad())?
    };
    u64::try_from(secs * 1_000_000_000 + frac_ns).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_are_read_as_utc_or_nanoseconds() {
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        // 2026-11-29T04:00:00Z, by `date -u -d 2026-11-29T04:00:00Z +%s`.
        assert_eq!(
            parse_time("2026-11-29T04:00:00Z"),
            Ok(1_795_924_800_000_000_000)
        );
        assert_eq!(
            parse_time("2000-02-29T12:34:56.5Z"),
            Ok(951_827_696_500_000_000)
        );
        for bad in [
            "2026-11-29 04:00:00",
            "2026-13-01T00:00:00Z",
            "yesterday",
            "1.5",
        ] {
            assert!(
                parse_time(bad).unwrap_err().contains("is not a time"),
                "{bad}"
            );
        }
    }
}
