//! The backbone: where providers publish (`md.<service>`), where distributors ask for images
//! (`md.<service>.req`), and how both are sealed.
//!
//! **Sealed by default.** A backbone on `udp://` or `mcast://` is authenticated with a
//! pre-shared key unless the operator opts out: every datagram carries a MAC (BLAKE3 keyed,
//! or HMAC-SHA256 with `mac=hmac-sha256`; `auth=`, docs/protocol.md §11b), and a datagram without a valid one (a forged REFRESH, a
//! forged sequence gap, a forged IMAGE_REQUEST or flow-control STATUS, from any address) is
//! dropped before anything reads it. The key, in order:
//!
//! 1. `auth=KEYFILE` on the URI;
//! 2. the context's configuration (`[mcast] auth = ...` in `PEREGRINE_CONFIG`, or
//!    `PEREGRINE_MCAST_AUTH` / `PEREGRINE_UDP_AUTH`);
//! 3. the file `PEREGRINE_MD_KEY` names;
//! 4. the user's own key, `$XDG_CONFIG_HOME/peregrine/backbone.key` (or
//!    `~/.config/peregrine/backbone.key`), made on first use (32 random bytes, mode 0600 in a
//!    0700 folder), so that a feed and a distributor of one user on one host agree with no
//!    set-up. Across hosts, copy that file (or give one with `auth=`) to every host.
//!
//! `auth=none` on the URI opts out (a lab, a capture to read without the key): the start line
//! says the backbone is unauthenticated. `ipc://` backbones are not sealed: shared memory is
//! already limited to its user (docs/architecture.md). `tcp://` backbones are not sealed
//! either (the transport's TLS is the answer there, not yet built).

use peregrine::{Context, Scheme};
use peregrine_transport::Uri;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The backbone when none is given: reliable multicast on loopback.
pub const DEFAULT_BACKBONE: &str = "mcast://239.255.90.1:40900";
/// The service when none is given.
pub const DEFAULT_SERVICE: &str = "FEED1";
/// The environment variable naming the backbone's key file.
pub const KEY_ENV: &str = "PEREGRINE_MD_KEY";

/// The backbone topic of `service`: its REFRESHes, UPDATEs and STATUSes.
pub fn backbone_topic(service: &str) -> String {
    format!("md.{service}")
}

/// The topic distributors publish image requests for `service` on.
pub fn request_topic(service: &str) -> String {
    format!("md.{service}.req")
}

/// A backbone URI that cannot be used, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackboneError(pub String);

impl fmt::Display for BackboneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackboneError {}

/// The request URI when none is given: the backbone's address with the port + 1 and the same
/// parameters (`ipc://NAME`: `ipc://NAME.req`). A separate port keeps the backbone's
/// datagrams out of the provider's request socket.
pub fn default_requests_uri(backbone: &str) -> Result<String, BackboneError> {
    let uri = Uri::parse(backbone).map_err(|e| BackboneError(format!("backbone {e}")))?;
    let address = match uri.scheme {
        Scheme::Ipc => format!("{}.req", uri.address),
        _ => {
            let Some((host, port)) = uri.address.rsplit_once(':') else {
                return Err(BackboneError(format!(
                    "backbone {backbone} has no port: write HOST:PORT, for example \
                     {DEFAULT_BACKBONE}"
                )));
            };
            match port.parse::<u16>() {
                Ok(p) if (1..u16::MAX).contains(&p) => format!("{host}:{}", p + 1),
                _ => {
                    return Err(BackboneError(format!(
                        "backbone {backbone}: the request URI is the backbone's port + 1, \
                         which port {port} has not: give the requests URI, or a backbone port \
                         from 1 to 65534"
                    )))
                }
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

/// How a backbone URI is sealed, as [`seal`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealing {
    /// With the key of this file: given (`auth=`, the configuration, `PEREGRINE_MD_KEY`) or the
    /// user's own (`generated`: made just now).
    Key { path: PathBuf, generated: bool },
    /// `auth=none`: the operator opted out. Any process that can reach the backbone can forge
    /// its data.
    OptedOut,
    /// `ipc://` (limited to its user by the file system) or `tcp://` (not sealed: no TLS yet).
    NotSealed { scheme: &'static str },
}

impl Sealing {
    /// One line for a start banner.
    pub fn describe(&self) -> String {
        match self {
            Sealing::Key { path, generated } => format!(
                "backbone authenticated with the key {}{}",
                path.display(),
                if *generated {
                    " (made now: copy it to the other hosts of this backbone)"
                } else {
                    ""
                }
            ),
            Sealing::OptedOut => "WARNING: backbone NOT authenticated (auth=none): any process \
                                  that reaches it can forge prices, losses and image requests"
                .to_string(),
            Sealing::NotSealed { scheme } => format!("backbone on {scheme}:// is not sealed"),
        }
    }
}

/// `uri` as the backbone opens it: sealed with a key unless it says `auth=none` (module doc).
/// Returns the URI to open and how it is sealed.
pub fn seal(ctx: &Context, uri: &str) -> Result<(String, Sealing), BackboneError> {
    seal_with(ctx, uri, std::env::var_os(KEY_ENV).map(PathBuf::from), None)
}

/// [`seal`] with the `PEREGRINE_MD_KEY` value and the user's key folder given (tests).
pub fn seal_with(
    ctx: &Context,
    uri: &str,
    key_env: Option<PathBuf>,
    key_dir: Option<&Path>,
) -> Result<(String, Sealing), BackboneError> {
    let parsed = Uri::parse(uri).map_err(|e| BackboneError(format!("backbone {e}")))?;
    match parsed.scheme {
        Scheme::Ipc => return Ok((uri.to_string(), Sealing::NotSealed { scheme: "ipc" })),
        Scheme::Tcp => return Ok((uri.to_string(), Sealing::NotSealed { scheme: "tcp" })),
        _ => {}
    }
    match parsed.param("auth") {
        Some("none") => return Ok((without_param(uri, "auth"), Sealing::OptedOut)),
        Some(path) => {
            return Ok((
                uri.to_string(),
                Sealing::Key {
                    path: path.into(),
                    generated: false,
                },
            ))
        }
        None => {}
    }
    let applied = ctx
        .config()
        .apply(uri)
        .map_err(|e| BackboneError(format!("backbone {e}")))?;
    if let Some(path) = Uri::parse(&applied)
        .ok()
        .and_then(|u| u.param("auth").filter(|p| *p != "none").map(PathBuf::from))
    {
        return Ok((
            uri.to_string(),
            Sealing::Key {
                path,
                generated: false,
            },
        ));
    }
    let (path, generated) = match key_env {
        Some(p) => (p, false),
        None => {
            let dir = match key_dir {
                Some(d) => d.to_path_buf(),
                None => user_key_dir()?,
            };
            user_key(&dir)?
        }
    };
    let sep = if uri.contains('?') { '&' } else { '?' };
    Ok((
        format!("{uri}{sep}auth={}", path.display()),
        Sealing::Key { path, generated },
    ))
}

/// `uri` without its parameter `key`.
fn without_param(uri: &str, key: &str) -> String {
    let Some((base, query)) = uri.split_once('?') else {
        return uri.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| kv.split_once('=').map_or(*kv, |(k, _)| k) != key)
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// `$XDG_CONFIG_HOME/peregrine`, or `$HOME/.config/peregrine`.
fn user_key_dir() -> Result<PathBuf, BackboneError> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("peregrine"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".config").join("peregrine")),
        None => Err(BackboneError(format!(
            "no key for the backbone: neither XDG_CONFIG_HOME nor HOME is set; give \
             auth=KEYFILE on the backbone URI, set {KEY_ENV}=KEYFILE, or auth=none to run \
             unauthenticated"
        ))),
    }
}

/// The user's backbone key in `dir`, made if it does not exist (atomically: a key written in
/// full under a temporary name, then linked into place, so two processes starting at once
/// agree on one key). Returns its path and whether this call made it.
fn user_key(dir: &Path) -> Result<(PathBuf, bool), BackboneError> {
    let path = dir.join("backbone.key");
    if path.exists() {
        return Ok((path, false));
    }
    let fail = |what: &str, e: std::io::Error| {
        BackboneError(format!(
            "cannot make the backbone key {} ({what}: {e}); give auth=KEYFILE on the backbone \
             URI or set {KEY_ENV}=KEYFILE",
            path.display()
        ))
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail("creating its folder", e))?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| fail("drawing random bytes", std::io::Error::other(e.to_string())))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(
        ".backbone.key.{}.{}",
        std::process::id(),
        peregrine_agent::monotonic_ns()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| fail("writing it", e))?;
    let written = f
        .write_all(
            format!(
                "# Peregrine market data backbone key (for auth=), made {}: every feed, \
                 provider and distributor of this backbone needs the same file\n{hex}\n",
                "on first use"
            )
            .as_bytes(),
        )
        .and_then(|()| f.sync_all());
    drop(f);
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((path, true)),
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((path, false)),
        Err(e) => Err(fail("writing it", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "pg-md-key-{}-{name}-{}",
            std::process::id(),
            peregrine_agent::monotonic_ns()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

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
        assert!(e.to_string().contains("requests URI"), "{e}");
    }

    #[test]
    fn a_backbone_without_a_key_is_sealed_with_the_users_own_made_once() {
        use std::os::unix::fs::PermissionsExt;
        let ctx = Context::new();
        let dir = temp_dir("made");
        let (uri, sealing) =
            seal_with(&ctx, "mcast://239.255.90.1:40900?nak=1", None, Some(&dir)).unwrap();
        let path = dir.join("backbone.key");
        assert_eq!(
            sealing,
            Sealing::Key {
                path: path.clone(),
                generated: true
            }
        );
        assert_eq!(
            uri,
            format!("mcast://239.255.90.1:40900?nak=1&auth={}", path.display())
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(dmode & 0o777, 0o700);
        // The transport accepts the key file it made.
        peregrine_transport::net::auth::load_key(&path).unwrap();
        let key = std::fs::read(&path).unwrap();
        // The second time: the same key, not made again.
        let (uri2, sealing2) =
            seal_with(&ctx, "mcast://239.255.90.1:40900", None, Some(&dir)).unwrap();
        assert_eq!(
            sealing2,
            Sealing::Key {
                path: path.clone(),
                generated: false
            }
        );
        assert!(
            uri2.ends_with(&format!("?auth={}", path.display())),
            "{uri2}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), key);
        assert!(
            sealing.describe().contains("copy it"),
            "{}",
            sealing.describe()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn processes_starting_at_once_agree_on_one_key() {
        let dir = temp_dir("race");
        let made: Vec<(PathBuf, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| user_key(&dir).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.iter().filter(|m| m.1).count(), 1, "{made:?}");
        peregrine_transport::net::auth::load_key(&dir.join("backbone.key")).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_given_key_is_kept_and_auth_none_opts_out() {
        let ctx = Context::new();
        let dir = temp_dir("given");
        let (uri, s) = seal_with(
            &ctx,
            "mcast://239.255.90.1:40900?auth=/k/md.key",
            None,
            Some(&dir),
        )
        .unwrap();
        assert_eq!(uri, "mcast://239.255.90.1:40900?auth=/k/md.key");
        assert_eq!(
            s,
            Sealing::Key {
                path: "/k/md.key".into(),
                generated: false
            }
        );
        let (uri, s) = seal_with(
            &ctx,
            "mcast://239.255.90.1:40900?nak=1&auth=none&ttl=1",
            None,
            Some(&dir),
        )
        .unwrap();
        assert_eq!(uri, "mcast://239.255.90.1:40900?nak=1&ttl=1");
        assert_eq!(s, Sealing::OptedOut);
        assert!(s.describe().contains("NOT authenticated"));
        let (uri, s) = seal_with(
            &ctx,
            "udp://127.0.0.1:5000",
            Some("/e/k".into()),
            Some(&dir),
        )
        .unwrap();
        assert_eq!(uri, "udp://127.0.0.1:5000?auth=/e/k");
        assert_eq!(
            s,
            Sealing::Key {
                path: "/e/k".into(),
                generated: false
            }
        );
        let (uri, s) = seal_with(&ctx, "ipc://md", None, Some(&dir)).unwrap();
        assert_eq!(
            (uri.as_str(), s),
            ("ipc://md", Sealing::NotSealed { scheme: "ipc" })
        );
        assert!(!dir.exists(), "no key made when one was given");
        // The context's configuration gives the key: the URI is left for it to apply.
        let made = temp_dir("config");
        let (key, _) = user_key(&made).unwrap();
        let toml = format!("[mcast]\nauth = \"{}\"\n", key.display());
        let ctx = Context::with_config(peregrine::Config::from_toml(&toml, "t.toml").unwrap());
        let (uri, s) = seal_with(&ctx, "mcast://239.255.90.1:40900", None, Some(&dir)).unwrap();
        assert_eq!(uri, "mcast://239.255.90.1:40900");
        assert_eq!(
            s,
            Sealing::Key {
                path: key,
                generated: false
            }
        );
        std::fs::remove_dir_all(&made).unwrap();
        assert!(!dir.exists(), "no key made when one was given");
    }
}
