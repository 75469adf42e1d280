//! What the market data commands (`feed`, `distributor`, `client`) share beyond the library
//! (`peregrine_market_data::backbone` has the topics, the request URI and the backbone's
//! sealing): list files, the file-descriptor limit.

use crate::flags::md::ConnectArgs;
use anyhow::{bail, Context as _, Result};
use peregrine_market_data::consumer::ConnectOptions;
use peregrine_market_data::tls::ClientTls;
use std::path::Path;

/// The lines of a list file (items, a watchlist): trimmed, without blank lines and `#`
/// comments; each checked by `check`, an error naming the file, the line and the fix.
pub fn read_list(
    path: &Path,
    what: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Err(e) = check(line) {
            bail!("{}:{}: {what} '{line}' {e}", path.display(), i + 1);
        }
        out.push(line.to_string());
    }
    if out.is_empty() {
        bail!(
            "{} holds no {what}: write one per line (# starts a comment)",
            path.display()
        );
    }
    Ok(out)
}

/// Raises the soft limit of open files to the hard limit (a distributor serves a socket per
/// client); returns the soft limit in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    // `None` is unlimited; the soft limit is never above the hard one.
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The token (`--token`, else `PEREGRINE_MD_TOKEN`) and the connection options (TLS) of a
/// client command.
pub fn connect_setup(c: &ConnectArgs) -> Result<(Vec<u8>, ConnectOptions)> {
    let token = match &c.token {
        Some(t) => t.clone().into_bytes(),
        None => match std::env::var_os("PEREGRINE_MD_TOKEN") {
            Some(t) => t.into_encoded_bytes(),
            None => bail!("no token: give --token T, or set PEREGRINE_MD_TOKEN (which keeps it out of the process list)"),
        },
    };
    if token.is_empty() || token.len() > 255 {
        bail!(
            "the token is {} bytes long: give 1 to 255 bytes",
            token.len()
        );
    }
    let options = match &c.tls_ca {
        None => ConnectOptions::plain(),
        Some(ca) => {
            if c.tls_cert.is_some() != c.tls_key.is_some() {
                bail!("--tls-cert and --tls-key go together: give both, or neither");
            }
            let identity = c.tls_cert.as_deref().zip(c.tls_key.as_deref());
            let mut tls = ClientTls::load(ca, identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Some(name) = &c.tls_server_name {
                tls = tls
                    .with_server_name(name)
                    .map_err(|e| anyhow::anyhow!("--tls-server-name: {e}"))?;
            }
            ConnectOptions::tls(tls)
        }
    };
    Ok((token, options))
}
