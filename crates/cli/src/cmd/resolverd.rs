//! `peregrine resolverd`: relays topic resolution between hosts where multicast does not
//! reach (the role of Ultra Messaging's lbmrd).

use crate::flags::topics::ResolverdArgs;
use anyhow::Result;
use std::io::Write;
use std::time::{Duration, Instant};

pub fn run(a: ResolverdArgs) -> Result<()> {
    use peregrine_transport::resolver::Daemon;
    let stop = super::Stop::install()?;
    let cfg = peregrine_proto::resolverd::RelayConfig {
        client_timeout_ns: a.client_timeout_ms * 1_000_000,
        max_clients: a.max_clients as usize,
        max_clients_per_ip: a.max_clients_per_ip as usize,
    };
    let mut d = Daemon::bind(a.listen, cfg)?;
    // A context of its own only for its counters file (it starts no resolver).
    let stat = peregrine::Context::new().counters_record(
        peregrine::stat::RecordType::Relay,
        &[("listen", &d.local_addr().to_string())],
        &peregrine::stat::descriptors(
            &peregrine_proto::resolverd::RelayCounters::NAMES,
            &["clients"],
        ),
    );
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "resolverd listening on {}", d.local_addr())?;
    out.flush()?;
    let start = Instant::now();
    let mut last = start;
    loop {
        d.run_once(100);
        let v = d.counters().values();
        stat.set_all(v);
        stat.set(v.len(), d.clients() as u64);
        let now = Instant::now();
        if a.stats_every_s > 0 && now - last >= Duration::from_secs(a.stats_every_s) {
            let c = d.counters();
            writeln!(
                out,
                "[resolverd {:.0}s] clients {}, received {}, forwarded {} ({} copies), keepalives {}, cookies sent {}, rejected {} (table full {}, address full {})",
                (now - start).as_secs_f64(),
                d.clients(),
                c.datagrams_received,
                c.datagrams_forwarded,
                c.copies_sent,
                c.keepalives,
                c.challenges + c.cookies_refreshed,
                c.rejected(),
                c.table_full,
                c.ip_full
            )?;
            out.flush()?;
            last = now;
        }
        if a.stop
            .seconds
            .is_some_and(|s| (now - start).as_secs_f64() >= s)
        {
            return Ok(());
        }
        if let Some(signal) = stop.requested() {
            writeln!(out, "resolverd stopped by {signal}")?;
            return Ok(());
        }
    }
}
