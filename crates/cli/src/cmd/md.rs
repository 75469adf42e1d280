//! What the market data drivers (`feed`, `distributor`, `client`) share: the topic names of a
//! service, the request URI derived from the backbone's, list files, the file-descriptor
//! limit.

use anyhow::{bail, Context as _, Result};
use peregrine::Scheme;
use peregrine_transport::Uri;
use std::path::Path;

/// The backbone topic of `service`: its REFRESHes, UPDATEs and STATUSes.
pub fn backbone_topic(service: &str) -> String {
    format!("md.{service}")
}

/// The topic distributors publish image requests for `service` on.
pub fn request_topic(service: &str) -> String {
    format!("md.{service}.req")
}

/// The request URI when none is given: the backbone's address with the port + 1 and the same
/// parameters (`ipc://NAME`: `ipc://NAME.req`). A separate port keeps the backbone's
/// datagrams out of the feed's request socket.
pub fn default_requests_uri(backbone: &str) -> Result<String> {
    let uri = Uri::parse(backbone).with_context(|| format!("--backbone {backbone}"))?;
    let address = match uri.scheme {
        Scheme::Ipc => format!("{}.req", uri.address),
        _ => {
            let Some((host, port)) = uri.address.rsplit_once(':') else {
                bail!(
                    "--backbone {backbone} has no port: write HOST:PORT, for example {DEFAULT}",
                    DEFAULT = crate::flags::md::DEFAULT_BACKBONE
                );
            };
            match port.parse::<u16>() {
                Ok(p) if (1..u16::MAX).contains(&p) => format!("{host}:{}", p + 1),
                _ => bail!(
                    "--backbone {backbone}: the request URI is the backbone's port + 1, which \
                     port {port} has not: give --requests URI, or a backbone port from 1 to 65534"
                ),
            }
        }
    };
    let mut s = format!("{}://{address}", uri.scheme.name());
    for (i, (k, v)) in uri.params.iter().enumerate() {
        s.push(if i == 0 { '?' } else { '&' });
        s.push_str(&format!("{k}={v}"));
    }
    Ok(s)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_uri_is_the_backbones_port_plus_one_with_its_parameters() {
        assert_eq!(
            default_requests_uri("mcast://239.255.90.1:40900").unwrap(),
            "mcast://239.255.90.1:40901"
        );
        assert_eq!(
            default_requests_uri("udp://127.0.0.1:5000?timeout_ms=500&nak=0").unwrap(),
            "udp://127.0.0.1:5001?timeout_ms=500&nak=0"
        );
        assert_eq!(default_requests_uri("ipc://md").unwrap(), "ipc://md.req");
        let e = default_requests_uri("mcast://239.255.90.1:65535").unwrap_err();
        assert!(e.to_string().contains("--requests"), "{e}");
    }
}
