//! Transport URIs: `ipc://NAME?capacity=16m&policy=backpressure`.
//!
//! Parsing is split in two steps, as ripgrep splits flags: [`Uri::parse`] only splits the text
//! into scheme, address and parameters; each transport then validates its own parameters into a
//! typed configuration and rejects unknown keys, naming the key, the value and what is accepted.

use std::fmt;

pub use peregrine_proto::scheme::{Scheme, UnknownScheme};

/// A URI split into its parts; parameters keep their order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    pub scheme: Scheme,
    pub address: String,
    pub params: Vec<(String, String)>,
    text: String,
}

/// Why a URI or one of its parameters was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriError {
    pub uri: String,
    pub problem: String,
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid transport URI '{}': {}", self.uri, self.problem)
    }
}
impl std::error::Error for UriError {}

impl Uri {
    /// Splits `text` into scheme, address and `key=value` parameters.
    pub fn parse(text: &str) -> Result<Uri, UriError> {
        let err = |problem: String| UriError {
            uri: text.to_string(),
            problem,
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| err("expected SCHEME://ADDRESS, for example ipc://md.quotes".into()))?;
        let scheme: Scheme = scheme
            .parse()
            .map_err(|e: UnknownScheme| err(e.to_string()))?;
        let (address, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        if address.is_empty() {
            return Err(err("the address after :// is empty".into()));
        }
        let mut params: Vec<(String, String)> = Vec::new();
        if let Some(q) = query {
            // Malformed: a '?' with nothing after it, an empty parameter (`?&`, `a=1&&b=2`, a
            // trailing '&'), a parameter without '=' or without a key. An empty value
            // (`capacity=`) is the transport's to judge: it names the key and what it accepts.
            if q.is_empty() {
                return Err(err(
                    "nothing follows '?': remove it, or give parameters as KEY=VALUE joined by '&'"
                        .into(),
                ));
            }
            for pair in q.split('&') {
                if pair.is_empty() {
                    return Err(err(
                        "empty parameter (two '&' in a row, or one at either end of the parameters): remove the extra '&'"
                            .into(),
                    ));
                }
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    err(format!("parameter '{pair}' has no value: write KEY=VALUE"))
                })?;
                if k.is_empty() {
                    return Err(err(format!(
                        "parameter '{pair}' has no key: write KEY=VALUE"
                    )));
                }
                if params.iter().any(|(pk, _)| pk == k) {
                    return Err(err(format!("parameter '{k}' is given twice")));
                }
                params.push((k.to_string(), v.to_string()));
            }
        }
        Ok(Uri {
            scheme,
            address: address.to_string(),
            params,
            text: text.to_string(),
        })
    }

    /// The URI as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// An error about this URI.
    pub fn error(&self, problem: impl Into<String>) -> UriError {
        UriError {
            uri: self.text.clone(),
            problem: problem.into(),
        }
    }

    /// Rejects any parameter not in `accepted`.
    pub fn check_keys(&self, accepted: &[&str]) -> Result<(), UriError> {
        for (k, v) in &self.params {
            if !accepted.contains(&k.as_str()) {
                return Err(self.error(format!(
                    "unknown parameter '{k}={v}' for {}://: accepted parameters are {}",
                    self.scheme.name(),
                    accepted.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The value of parameter `key`, if given.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses a byte size: a whole number with an optional suffix `k`, `m` or `g` (powers of 1024).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&t[..i], 1 << 20),
        (i, 'g' | 'G') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_scheme_address_and_params_in_order() {
        let u = Uri::parse("ipc://md.quotes?capacity=1m&policy=overwrite").unwrap();
        assert_eq!(u.scheme, Scheme::Ipc);
        assert_eq!(u.address, "md.quotes");
        assert_eq!(u.param("capacity"), Some("1m"));
        assert_eq!(u.param("policy"), Some("overwrite"));
        assert_eq!(u.param("nope"), None);
    }

    #[test]
    fn rejects_malformed_uris_naming_the_problem() {
        let cases = [
            ("md.quotes", "SCHEME://ADDRESS"),
            ("shm://x", "unknown scheme 'shm'"),
            ("ipc://", "empty"),
            ("ipc://x?capacity", "has no value"),
            ("ipc://x?a=1&a=2", "given twice"),
            // Issue 14: these were accepted as "no parameters".
            ("ipc://x?", "nothing follows '?'"),
            ("ipc://x?&", "empty parameter"),
            ("ipc://x?capacity=1m&", "empty parameter"),
            ("ipc://x?&capacity=1m", "empty parameter"),
            ("ipc://x?capacity=1m&&policy=overwrite", "empty parameter"),
            ("ipc://x?=", "has no key"),
            ("ipc://x?=1m", "has no key"),
            ("ipc://x?a", "has no value"),
        ];
        for (text, needle) in cases {
            let e = Uri::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected_with_the_accepted_list() {
        let u = Uri::parse("ipc://x?capcity=1m").unwrap();
        let e = u
            .check_keys(&["capacity", "policy"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'capcity=1m'") && e.contains("capacity, policy"),
            "{e}"
        );
    }

    #[test]
    fn byte_sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64k"), Some(65536));
        assert_eq!(parse_bytes("16M"), Some(16 << 20));
        assert_eq!(parse_bytes("1g"), Some(1 << 30));
        for bad in ["", "k", "1.5m", "-1", "12q", "99999999999999999999g"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
