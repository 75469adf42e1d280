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

use peregrine_transport::ipc::IpcConfig;
use peregrine_transport::net::NetConfig;
use peregrine_transport::{Scheme, Uri};
use std::fmt;
use std::path::{Path, PathBuf};

/// Defaults for URI parameters, per transport.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// (scheme, key, value, where it came from)
    entries: Vec<(Scheme, String, String, String)>,
}

/// Why a configuration was rejected.
#[derive(Debug)]
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

/// Checks one `key = value` for `scheme` exactly as a URI parameter is checked.
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
    let probe = match scheme {
        Scheme::Ipc => format!("ipc://config-check?{key}={value}"),
        Scheme::Mcast => format!("mcast://239.255.0.1:1?{key}={value}"),
        s => format!("{}://127.0.0.1:1?{key}={value}", s.name()),
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
        for (section, body) in &table {
            let scheme = Scheme::ALL
                .into_iter()
                .find(|s| s.name() == section)
                .ok_or_else(|| ConfigError::Invalid {
                    origin: origin.to_string(),
                    problem: format!(
                        "unknown section [{section}]: sections are [ipc], [udp], [mcast] and [tcp]"
                    ),
                })?;
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
                check(scheme, key, &value, &at)?;
                cfg.set(scheme, key, &value, &at);
            }
        }
        Ok(cfg)
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
        Ok(self)
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
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
