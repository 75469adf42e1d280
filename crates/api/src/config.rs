//! The configuration file and environment: defaults for transport URI parameters.
//!
//! One TOML file with a table per transport; each key is a URI parameter of that transport
//! (see `peregrine_transport::net::config` and `peregrine_transport::ipc`):
//!
//! ```toml
//! [mcast]
//! iface = "10.1.2.3"
//! ttl = 4
//! rcvbuf = "32m"
//!
//! [udp]
//! datagram = 8192
//! mode = "urgent"
//! ```
//!
//! Precedence, highest first: the URI's own parameter, the environment variable
//! `PEREGRINE_<TRANSPORT>_<KEY>` (e.g. `PEREGRINE_MCAST_IFACE=10.1.2.3`), the file, the built-in
//! default. Every value is validated when the configuration is loaded, with the same rules and
//! messages as a URI parameter, naming the file or variable.

use peregrine_proto::receiver::{LateJoin, LateJoinError};
use peregrine_proto::resolver::ResolverConfig;
use peregrine_transport::ipc::IpcConfig;
use peregrine_transport::net::NetConfig;
use peregrine_transport::resolver::{ResolverPath, DEFAULT_DAEMON_PORT, DEFAULT_GROUP};
use peregrine_transport::{Scheme, Uri};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// Defaults for URI parameters, per transport; topic resolution settings; explicit URIs per
/// topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// (scheme, key, value, where it came from)
    entries: Vec<(Scheme, String, String, String)>,
    /// `[resolver]` keys, checked: (key, value).
    resolver: Vec<(String, String)>,
    /// `[topics]`: (topic, URI).
    topics: Vec<(String, String)>,
}

/// How topic resolution runs in a context (the `[resolver]` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverSettings {
    /// The multicast group or the daemon.
    pub path: ResolverPath,
    /// Schedules, TTL, datagram size, rate limit (`context_id` is drawn at start).
    pub resolver: ResolverConfig,
    /// Offer (and prefer) shared memory to subscribers on this host (`local = "ipc"`).
    pub local_ipc: bool,
    /// What publishers by topic offer to other hosts (`remote`).
    pub remote: Remote,
    /// The address publishers bind and advertise, and the resolver's interface (`iface`).
    pub iface: Ipv4Addr,
    /// Where subscribers by topic start a `udp`/`mcast` source they find mid-stream
    /// (`late_join`; `None`: the transport's setting, by default `start`).
    pub late_join: Option<LateJoin>,
    /// The pre-shared key every resolver datagram is sealed with and must carry (`auth`).
    pub auth: Option<ResolverAuth>,
}

/// The key of `[resolver] auth = "KEYFILE"`: resolver datagrams end with an AUTH frame under it
/// (docs/protocol.md §11b), and datagrams without a valid one are dropped and counted
/// (`ResolverCounters::auth_rejected`) before anything reads them.
#[derive(Clone)]
pub struct ResolverAuth {
    /// The key file, as given.
    pub path: PathBuf,
    pub key: std::sync::Arc<peregrine_proto::auth::AuthKey>,
}

impl fmt::Debug for ResolverAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResolverAuth({}, key id {:08x})",
            self.path.display(),
            self.key.key_id()
        )
    }
}

impl PartialEq for ResolverAuth {
    fn eq(&self, other: &Self) -> bool {
        self.key.key_id() == other.key.key_id() && self.path == other.path
    }
}
impl Eq for ResolverAuth {}

/// What a publisher by topic offers to subscribers on other hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remote {
    /// `udp://IFACE:PORT`, one port per publisher (the default).
    Udp,
    /// `tcp://IFACE:PORT`, one port per publisher.
    Tcp,
    /// One multicast URI shared by every publisher of the context.
    Mcast(String),
    /// Nothing: this host only.
    None,
}

/// The keys of `[resolver]`.
pub const RESOLVER_KEYS: [&str; 19] = [
    "group",
    "auth",
    "iface",
    "multicast_ttl",
    "daemon",
    "local",
    "remote",
    "late_join",
    "source_ttl_ms",
    "datagram",
    "max_advertisements_per_s",
    "advertise_min_initial_interval_ms",
    "advertise_max_initial_interval_ms",
    "advertise_initial_duration_ms",
    "advertise_sustain_interval_ms",
    "query_min_initial_interval_ms",
    "query_max_initial_interval_ms",
    "query_initial_duration_ms",
    "query_sustain_interval_ms",
];

impl Default for ResolverSettings {
    fn default() -> Self {
        ResolverSettings {
            path: ResolverPath::Multicast {
                group: DEFAULT_GROUP,
                iface: Ipv4Addr::LOCALHOST,
                ttl: 1,
            },
            resolver: ResolverConfig::new(0),
            local_ipc: true,
            remote: Remote::Udp,
            iface: Ipv4Addr::LOCALHOST,
            late_join: None,
            auth: None,
        }
    }
}

impl ResolverSettings {
    /// Settings from `(key, value)` pairs in order (later ones win); errors name the key, the
    /// value and what is accepted.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ResolverSettings, String> {
        let mut s = ResolverSettings::default();
        let mut group = DEFAULT_GROUP;
        let mut daemon: Option<SocketAddrV4> = None;
        let mut ttl = 1u32;
        let ms = |key: &str, v: &str, min: u64, max: u64| -> Result<u64, String> {
            v.parse::<u64>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| format!("{key} = {v} is not accepted: give a whole number of milliseconds from {min} to {max}"))
        };
        for (key, v) in pairs {
            let r = &mut s.resolver;
            match key {
                "group" => {
                    group = v
                        .parse::<SocketAddrV4>()
                        .ok()
                        .filter(|a| a.ip().is_multicast() && a.port() != 0)
                        .ok_or_else(|| format!("group = {v} is not accepted: give a multicast GROUP:PORT, for example {DEFAULT_GROUP}"))?
                }
                "iface" => {
                    s.iface = v.parse().map_err(|_| {
                        format!("iface = {v} is not accepted: give an IPv4 address of this host, for example 127.0.0.1")
                    })?
                }
                "multicast_ttl" => ttl = ms(key, v, 0, 255)? as u32,
                "daemon" => {
                    daemon = Some(v.parse::<SocketAddrV4>().ok().filter(|a| a.port() != 0).ok_or_else(|| {
                        format!("daemon = {v} is not accepted: give the HOST:PORT of a peregrine resolverd, for example 10.0.0.1:{DEFAULT_DAEMON_PORT}")
                    })?)
                }
                "local" => {
                    s.local_ipc = match v {
                        "ipc" => true,
                        "none" => false,
                        _ => return Err(format!("local = {v} is not accepted: use \"ipc\" or \"none\"")),
                    }
                }
                "remote" => {
                    s.remote = match v {
                        "udp" => Remote::Udp,
                        "tcp" => Remote::Tcp,
                        "none" => Remote::None,
                        m if m.starts_with("mcast://") => {
                            let u = Uri::parse(m).map_err(|e| format!("remote = {v}: {e}"))?;
                            NetConfig::from_uri(&u).map_err(|e| format!("remote = {v}: {}", e.problem))?;
                            Remote::Mcast(m.to_string())
                        }
                        _ => return Err(format!("remote = {v} is not accepted: use \"udp\", \"tcp\", \"none\" or a mcast://GROUP:PORT URI")),
                    }
                }
                "auth" => {
                    let key = peregrine_transport::net::auth::load_key(Path::new(v))
                        .map_err(|e| e.replacen("auth=", "auth = ", 1))?;
                    s.auth = Some(ResolverAuth {
                        path: PathBuf::from(v),
                        key: std::sync::Arc::new(key),
                    });
                }
                "late_join" => s.late_join = Some(v.parse().map_err(|e: LateJoinError| e.to_string().replacen("late_join=", "late_join = ", 1))?),
                "source_ttl_ms" => r.ttl_ms = ms(key, v, 100, 3_600_000)? as u32,
                "datagram" => r.datagram_len = ms(key, v, 1200, 65000).map_err(|_| format!("datagram = {v} is not accepted: give a size in bytes from 1200 to 65000"))? as usize,
                "max_advertisements_per_s" => r.max_advertisements_per_s = v.parse().map_err(|_| format!("max_advertisements_per_s = {v} is not accepted: give a whole number (0: unlimited)"))?,
                "advertise_min_initial_interval_ms" => r.advertise.min_initial_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                "advertise_max_initial_interval_ms" => r.advertise.max_initial_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                "advertise_initial_duration_ms" => r.advertise.initial_duration_ns = ms(key, v, 0, 3_600_000)? * 1_000_000,
                "advertise_sustain_interval_ms" => r.advertise.sustain_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                "query_min_initial_interval_ms" => r.query.min_initial_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                "query_max_initial_interval_ms" => r.query.max_initial_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                "query_initial_duration_ms" => r.query.initial_duration_ns = ms(key, v, 0, 3_600_000)? * 1_000_000,
                "query_sustain_interval_ms" => r.query.sustain_interval_ns = ms(key, v, 1, 3_600_000)? * 1_000_000,
                _ => {
                    return Err(format!(
                        "unknown key '{key}' for [resolver]: accepted keys are {}",
                        RESOLVER_KEYS.join(", ")
                    ))
                }
            }
        }
        s.resolver
            .advertise
            .check()
            .map_err(|e| format!("advertise schedule: {e}"))?;
        s.resolver
            .query
            .check()
            .map_err(|e| format!("query schedule: {e}"))?;
        s.path = match daemon {
            Some(daemon) => ResolverPath::Daemon {
                daemon,
                iface: s.iface,
            },
            None => ResolverPath::Multicast {
                group,
                iface: s.iface,
                ttl,
            },
        };
        Ok(s)
    }
}

/// Why a configuration was rejected.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    Invalid {
        origin: String,
        problem: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, source } => {
                write!(
                    f,
                    "cannot read configuration file {}: {source}",
                    path.display()
                )
            }
            ConfigError::Invalid { origin, problem } => write!(f, "{origin}: {problem}"),
        }
    }
}
impl std::error::Error for ConfigError {}

fn keys(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Ipc => &IpcConfig::KEYS,
        s => NetConfig::keys(s),
    }
}

/// Keys that are valid only beside another key of the same transport (`mac` beside `auth`,
/// `tls_cert` beside `tls_key`, `tls_server_name` beside `tls_ca` or the pair, the `xdp_*`
/// keys beside `xdp`): checked with
/// the other keys of their transport ([`Config::check_together`]), not alone.
const PAIRED: [&str; 7] = [
    "mac",
    "tls_cert",
    "tls_key",
    "tls_server_name",
    "xdp_mode",
    "xdp_queue",
    "xdp_frames",
];

/// Checks one `key = value` for `scheme` exactly as a URI parameter is checked (a
/// [`PAIRED`] key: only its name, the rest when its transport's keys are checked together).
fn check(scheme: Scheme, key: &str, value: &str, origin: &str) -> Result<(), ConfigError> {
    let accepted = keys(scheme);
    if !accepted.contains(&key) {
        return Err(ConfigError::Invalid {
            origin: origin.to_string(),
            problem: format!(
                "unknown key '{key}' for [{}]: accepted keys are {}",
                scheme.name(),
                accepted.join(", ")
            ),
        });
    }
    if scheme != Scheme::Ipc && PAIRED.contains(&key) {
        return Ok(());
    }
    check_probe(scheme, &format!("{key}={value}"), origin)
}

/// Checks `query` (`key=value&...`) on a probe URI of `scheme`.
fn check_probe(scheme: Scheme, query: &str, origin: &str) -> Result<(), ConfigError> {
    let probe = match scheme {
        Scheme::Ipc => format!("ipc://config-check?{query}"),
        Scheme::Mcast => format!("mcast://239.255.0.1:1?{query}"),
        s => format!("{}://127.0.0.1:1?{query}", s.name()),
    };
    let invalid = |problem: String| ConfigError::Invalid {
        origin: origin.to_string(),
        problem,
    };
    let uri = Uri::parse(&probe).map_err(|e| invalid(e.problem))?;
    match scheme {
        Scheme::Ipc => IpcConfig::from_uri(&uri).map(drop),
        _ => NetConfig::from_uri(&uri).map(drop),
    }
    .map_err(|e| invalid(e.problem))
}

impl Config {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, &path.display().to_string())
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    origin: origin.to_string(),
                    problem: format!("not valid TOML: {}", e.message()),
                })?;
        let mut cfg = Config::default();
        // [topics] last: its URIs are checked with the transports' defaults applied.
        let sections = table
            .iter()
            .filter(|s| s.0 != "topics")
            .chain(table.iter().filter(|s| s.0 == "topics"));
        for (section, body) in sections {
            let scheme = section.parse::<Scheme>().ok();
            if scheme.is_none() && section != "resolver" && section != "topics" {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    problem: format!(
                        "unknown section [{section}]: sections are {}, [resolver] and [topics]",
                        Scheme::ALL.map(|s| format!("[{s}]")).join(", ")
                    ),
                });
            }
            let toml::Value::Table(body) = body else {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    problem: format!(
                        "'{section}' must be a table: write [{section}] and keys under it"
                    ),
                });
            };
            for (key, value) in body {
                let value = match value {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Boolean(b) => (if *b { "1" } else { "0" }).to_string(),
                    other => {
                        return Err(ConfigError::Invalid {
                            origin: origin.to_string(),
                            problem: format!(
                                "[{section}] {key} = {other}: give a string, a whole number or true/false"
                            ),
                        })
                    }
                };
                let at = format!("{origin}: [{section}] {key} = {value}");
                match scheme {
                    Some(scheme) => {
                        check(scheme, key, &value, &at)?;
                        cfg.set(scheme, key, &value, &at);
                    }
                    None if section == "topics" => cfg.set_topic(key, &value, &at)?,
                    None => cfg.set_resolver(key, &value, &at)?,
                }
            }
        }
        cfg.check_together(origin)?;
        Ok(cfg)
    }

    /// Checks each transport's [`PAIRED`] keys with every other key of that transport, as
    /// one URI giving them all would be checked.
    fn check_together(&self, origin: &str) -> Result<(), ConfigError> {
        for scheme in Scheme::ALL {
            let mine = || self.entries.iter().filter(move |e| e.0 == scheme);
            let Some(paired) = mine().find(|e| PAIRED.contains(&e.1.as_str())) else {
                continue;
            };
            let query: Vec<String> = mine().map(|e| format!("{}={}", e.1, e.2)).collect();
            check_probe(
                scheme,
                &query.join("&"),
                &format!(
                    "{origin}: [{}] {} (with the other keys of [{}])",
                    scheme.name(),
                    paired.1,
                    scheme.name()
                ),
            )?;
        }
        Ok(())
    }

    /// Applies `PEREGRINE_<TRANSPORT>_<KEY>` variables from `vars` over these values, and
    /// `PEREGRINE_LOSS` (the test loss generator, `loss` of udp and mcast) below those.
    pub fn with_env(
        mut self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars.collect();
        for (name, value) in vars.iter().filter(|v| v.0 == "PEREGRINE_LOSS") {
            let at = format!("environment variable {name}={value}");
            for scheme in [Scheme::Udp, Scheme::Mcast] {
                check(scheme, "loss", value, &at)?;
                self.set(scheme, "loss", value, &at);
            }
        }
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("PEREGRINE_") else {
                continue;
            };
            if let Some(key) = rest.strip_prefix("RESOLVER_") {
                let at = format!("environment variable {name}={value}");
                self.set_resolver(&key.to_ascii_lowercase(), &value, &at)?;
                continue;
            }
            let Some(scheme) = Scheme::ALL
                .into_iter()
                .find(|s| rest.starts_with(&format!("{}_", s.name().to_ascii_uppercase())))
            else {
                continue;
            };
            let key = rest[scheme.name().len() + 1..].to_ascii_lowercase();
            let at = format!("environment variable {name}={value}");
            check(scheme, &key, &value, &at)?;
            self.set(scheme, &key, &value, &at);
        }
        self.check_together("the configuration file and the PEREGRINE_ variables")?;
        Ok(self)
    }

    fn set_resolver(&mut self, key: &str, value: &str, origin: &str) -> Result<(), ConfigError> {
        let mut next = self.resolver.clone();
        next.retain(|e| e.0 != key);
        next.push((key.to_string(), value.to_string()));
        ResolverSettings::from_pairs(next.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(
            |problem| ConfigError::Invalid {
                origin: origin.to_string(),
                problem,
            },
        )?;
        self.resolver = next;
        Ok(())
    }

    /// Sets a `[resolver]` key, checked as the file's are (for programs and tests).
    pub fn with_resolver(mut self, key: &str, value: &str) -> Result<Config, ConfigError> {
        self.set_resolver(key, value, &format!("resolver {key} = {value}"))?;
        Ok(self)
    }

    /// Gives `topic` an explicit transport URI (a `[topics]` entry).
    pub fn with_topic(mut self, topic: &str, uri: &str) -> Result<Config, ConfigError> {
        self.set_topic(topic, uri, &format!("topic {topic} = {uri}"))?;
        Ok(self)
    }

    /// Sets a `[topics]` entry after checking the topic and the URI (with this configuration's
    /// transport defaults applied) as a publisher will.
    fn set_topic(&mut self, topic: &str, uri: &str, origin: &str) -> Result<(), ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            origin: origin.to_string(),
            problem,
        };
        peregrine_transport::validate_topic(topic).map_err(|e| invalid(e.to_string()))?;
        let applied = self.apply(uri).map_err(|e| invalid(e.problem))?;
        check_uri(&applied).map_err(invalid)?;
        self.topics.retain(|t| t.0 != topic);
        self.topics.push((topic.to_string(), uri.to_string()));
        Ok(())
    }

    /// The topic resolution settings.
    pub fn resolver(&self) -> ResolverSettings {
        ResolverSettings::from_pairs(self.resolver.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .expect("[resolver] entries are checked as they are set")
    }

    /// The `[topics]` entries: (topic, URI).
    pub fn topics(&self) -> impl Iterator<Item = (&str, &str)> {
        self.topics.iter().map(|(t, u)| (t.as_str(), u.as_str()))
    }

    /// The explicit URI of `topic`, if `[topics]` gives one.
    pub fn topic_uri(&self, topic: &str) -> Option<&str> {
        self.topics
            .iter()
            .find(|t| t.0 == topic)
            .map(|t| t.1.as_str())
    }

    fn set(&mut self, scheme: Scheme, key: &str, value: &str, origin: &str) {
        self.entries.retain(|e| !(e.0 == scheme && e.1 == key));
        self.entries.push((
            scheme,
            key.to_string(),
            value.to_string(),
            origin.to_string(),
        ));
    }

    /// `uri` with the configured defaults added for the parameters it does not give.
    pub fn apply(&self, uri: &str) -> Result<String, peregrine_transport::UriError> {
        let parsed = Uri::parse(uri)?;
        let mut out = uri.to_string();
        let mut first = !uri.contains('?');
        for (scheme, key, value, _) in &self.entries {
            if *scheme == parsed.scheme && parsed.param(key).is_none() {
                out.push(if first { '?' } else { '&' });
                first = false;
                out.push_str(key);
                out.push('=');
                out.push_str(value);
            }
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.resolver.is_empty() && self.topics.is_empty()
    }
}

/// Checks a complete transport URI as its transport will.
fn check_uri(uri: &str) -> Result<(), String> {
    let parsed = Uri::parse(uri).map_err(|e| e.problem)?;
    match parsed.scheme {
        Scheme::Ipc => IpcConfig::from_uri(&parsed).map(drop),
        _ => NetConfig::from_uri(&parsed).map(drop),
    }
    .map_err(|e| e.problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_valid_only_together_are_accepted_together_and_refused_alone() {
        let dir = std::env::temp_dir().join(format!("pg-config-paired-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("k");
        std::fs::write(&key, "07".repeat(32)).unwrap();
        let mut mode = std::fs::metadata(&key).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o600);
        std::fs::set_permissions(&key, mode).unwrap();
        let k = key.display();
        let c = Config::from_toml(
            &format!("[udp]\nauth = \"{k}\"\nmac = \"hmac-sha256\"\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            c.apply("udp://127.0.0.1:1").unwrap(),
            format!("udp://127.0.0.1:1?auth={k}&mac=hmac-sha256")
        );
        let e = Config::from_toml("[udp]\nmac = \"hmac-sha256\"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("[udp] mac"), "{e}");
        let e =
            Config::from_toml("[tcp]\ntls_cert = \"/nonexistent.pem\"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("tls_cert"), "{e}");
        // A variable completes what the file began.
        let c = Config::from_toml(&format!("[mcast]\nauth = \"{k}\"\n"), "t.toml")
            .unwrap()
            .with_env([("PEREGRINE_MCAST_MAC".to_string(), "blake3".to_string())].into_iter());
        assert!(c.is_ok(), "{c:?}");
        let _ = std::fs::remove_dir_all(&dir);
        // The kernel bypass's settings go with its interface.
        let c =
            Config::from_toml("[udp]\nxdp = \"eth1\"\nxdp_mode = \"generic\"\n", "t.toml").unwrap();
        assert_eq!(
            c.apply("udp://127.0.0.1:1").unwrap(),
            "udp://127.0.0.1:1?xdp=eth1&xdp_mode=generic"
        );
        let e = Config::from_toml("[mcast]\nxdp_frames = 8192\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("without xdp="), "{e}");
    }

    #[test]
    fn file_values_fill_in_what_the_uri_does_not_say() {
        let c = Config::from_toml(
            "[mcast]\niface = \"127.0.0.1\"\nttl = 4\nloop = true\n[udp]\ndatagram = 8192\n",
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            c.apply("mcast://239.1.1.1:5000?ttl=2").unwrap(),
            "mcast://239.1.1.1:5000?ttl=2&iface=127.0.0.1&loop=1"
        );
        assert_eq!(
            c.apply("udp://127.0.0.1:1").unwrap(),
            "udp://127.0.0.1:1?datagram=8192"
        );
        assert_eq!(c.apply("tcp://127.0.0.1:1").unwrap(), "tcp://127.0.0.1:1");
    }

    #[test]
    fn environment_overrides_the_file() {
        let c = Config::from_toml("[udp]\nrcvbuf = \"8m\"\n", "f")
            .unwrap()
            .with_env(
                [
                    ("PEREGRINE_UDP_RCVBUF".to_string(), "32m".to_string()),
                    ("HOME".to_string(), "/root".to_string()),
                ]
                .into_iter(),
            )
            .unwrap();
        assert_eq!(
            c.apply("udp://127.0.0.1:1").unwrap(),
            "udp://127.0.0.1:1?rcvbuf=32m"
        );
    }

    #[test]
    fn bad_entries_name_the_place_the_key_the_value_and_the_fix() {
        let cases = [
            ("[udp]\nttl = 4\n", "f.toml", "unknown key 'ttl' for [udp]"),
            (
                "[mcast]\nttl = 300\n",
                "f.toml: [mcast] ttl = 300",
                "0 to 255",
            ),
            ("[smtp]\nx = 1\n", "f.toml", "unknown section [smtp]"),
            (
                "[udp]\ndatagram = 1.5\n",
                "f.toml",
                "give a string, a whole number",
            ),
            ("[udp\n", "f.toml", "not valid TOML"),
            (
                "[ipc]\ncapacity = \"3k\"\n",
                "[ipc] capacity = 3k",
                "power of two",
            ),
        ];
        for (text, origin, needle) in cases {
            let e = Config::from_toml(text, "f.toml").unwrap_err().to_string();
            assert!(e.contains(origin) && e.contains(needle), "{text:?}: {e}");
        }
        let e = Config::default()
            .with_env([("PEREGRINE_TCP_SLOW".to_string(), "drop".to_string())].into_iter())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("PEREGRINE_TCP_SLOW=drop") && e.contains("slow=backpressure"),
            "{e}"
        );
    }
}
