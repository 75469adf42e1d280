//! `peregrine distributor`: the point-to-point server of the market data tier, a thin command
//! over `peregrine_market_data::distributor` (flags and the config file resolved into its
//! settings, its lines printed as text or JSON). SIGINT or SIGTERM stops it; it prints its
//! counters and exits 0. SIGHUP reloads the users file (a file that fails validation is
//! refused, the old one kept).

use super::md::raise_nofile_limit;
use super::{context, Stop};
use crate::flags::md::DistributorArgs;
use anyhow::{Context as _, Result};
use peregrine_market_data::distributor::{
    DistributorServer, DistributorSettings, Line, SettingsOverrides,
};
use peregrine_md::distributor::Users;
use std::io::{self, Read, Write};

pub fn run(a: DistributorArgs) -> Result<()> {
    if a.hash_token {
        return hash_token();
    }
    let settings = DistributorSettings::resolve(&SettingsOverrides {
        listen: a.listen,
        websocket: a.websocket,
        users: a.users.clone(),
        backbone: a.backbone.clone(),
        requests: a.requests.clone(),
        services: a.services.clone(),
        mode: a.mode,
        flush_interval_ms: a.flush_interval_ms,
        max_queue_bytes: a.max_queue_bytes,
        slow: a.slow.clone(),
        max_clients: a.max_clients,
        tls_cert: a.tls_cert.clone(),
        tls_key: a.tls_key.clone(),
        tls_client_ca: a.tls_client_ca.clone(),
        allow_plaintext_logins: a.allow_plaintext_logins,
        dictionary: a.dictionary.clone(),
        config: a.config.clone(),
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let users = Users::load(&settings.users).map_err(|e| anyhow::anyhow!("--users: {e}"))?;
    let stop = {
        use signal_hook::consts::{SIGINT, SIGTERM};
        Stop::install_for(&[SIGINT, SIGTERM])?
    };
    let nofile = raise_nofile_limit();
    let ctx = context()?;
    let listen = settings.listen;
    let mut server = DistributorServer::bind(&ctx, settings, users).map_err(|e| match e {
        peregrine_market_data::DistributorError::Listen { .. } => {
            anyhow::anyhow!("--listen {listen}: {e}")
        }
        e => anyhow::anyhow!("{e}"),
    })?;
    let json = a.json;
    server.set_output(Box::new(move |l: &Line| {
        let out = io::stdout();
        let mut out = out.lock();
        let _ = if json {
            writeln!(out, "{}", l.json)
        } else {
            writeln!(out, "{}", l.text)
        };
        let _ = out.flush();
    }));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, server.reload_flag())
        .context("installing the SIGHUP handler")?;
    server.say_started(nofile);
    server
        .run(&|| stop.requested().is_some())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    server.say_done(stop.requested());
    Ok(())
}

/// `--hash-token`: the Argon2id PHC string of the first line of standard input, with a random
/// salt.
fn hash_token() -> Result<()> {
    let mut input = Vec::new();
    io::stdin()
        .read_to_end(&mut input)
        .context("reading the token from standard input")?;
    let token = input.split(|&b| b == b'\n').next().unwrap_or_default();
    let token = token.strip_suffix(b"\r").unwrap_or(token);
    if token.is_empty() || token.len() > 255 {
        anyhow::bail!(
            "--hash-token reads the token from standard input: give 1 to 255 bytes on its first line, for example: printf %s 'TOKEN' | peregrine distributor --hash-token"
        );
    }
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("no random salt: {e}"))?;
    println!(
        "{}",
        peregrine_md::distributor::entitle::hash_token(token, &salt)
    );
    Ok(())
}
