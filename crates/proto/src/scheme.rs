//! The transports a URI can name: `ipc://`, `udp://`, `mcast://`, `tcp://`.
//!
//! Defined here, below the transports, so the resolver checks advertised URIs against the same
//! list the transports open. `peregrine_transport::uri::Scheme` and `peregrine::Scheme` are this
//! type.
//!
//! ```
//! use peregrine_proto::scheme::Scheme;
//!
//! assert_eq!("mcast".parse::<Scheme>(), Ok(Scheme::Mcast));
//! assert_eq!(Scheme::of_uri("tcp://10.0.0.1:4000"), Some(Scheme::Tcp));
//! assert_eq!(
//!     "shm".parse::<Scheme>().unwrap_err().to_string(),
//!     "unknown scheme 'shm': supported schemes are ipc, udp, mcast, tcp"
//! );
//! ```

use std::fmt;
use std::str::FromStr;

/// The transports a URI can name. More may come: match with a wildcard arm outside this
/// workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// Shared memory on this host.
    Ipc,
    /// UDP unicast.
    Udp,
    /// UDP multicast.
    Mcast,
    /// TCP.
    Tcp,
}

impl Scheme {
    /// Every scheme, in the order messages list them.
    pub const ALL: [Scheme; 4] = [Scheme::Ipc, Scheme::Udp, Scheme::Mcast, Scheme::Tcp];

    /// The name before `://`.
    pub const fn name(self) -> &'static str {
        match self {
            Scheme::Ipc => "ipc",
            Scheme::Udp => "udp",
            Scheme::Mcast => "mcast",
            Scheme::Tcp => "tcp",
        }
    }

    /// The scheme the URI text `uri` starts with (`SCHEME://`), if it is a known one.
    pub fn of_uri(uri: &str) -> Option<Scheme> {
        uri.split_once("://").and_then(|(s, _)| s.parse().ok())
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scheme name that is none of [`Scheme::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScheme(pub String);

impl fmt::Display for UnknownScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown scheme '{}': supported schemes are {}",
            self.0,
            Scheme::ALL.map(Scheme::name).join(", ")
        )
    }
}
impl std::error::Error for UnknownScheme {}

impl FromStr for Scheme {
    type Err = UnknownScheme;
    /// Exactly one of the names, in lower case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheme::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownScheme(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_scheme() {
        for s in Scheme::ALL {
            assert_eq!(s.name().parse::<Scheme>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
    }

    #[test]
    fn unknown_or_differently_cased_names_are_rejected_with_the_accepted_list() {
        for bad in ["", "shm", "UDP", "udp ", "ipc://"] {
            let e = bad.parse::<Scheme>().unwrap_err().to_string();
            assert!(
                e.contains(&format!("'{bad}'")) && e.ends_with("ipc, udp, mcast, tcp"),
                "{e}"
            );
        }
    }

    #[test]
    fn of_uri_reads_the_scheme_before_the_separator() {
        assert_eq!(Scheme::of_uri("ipc://md.quotes?host=a"), Some(Scheme::Ipc));
        assert_eq!(Scheme::of_uri("mcast://239.1.1.1:1"), Some(Scheme::Mcast));
        assert_eq!(Scheme::of_uri("ipc:/x"), None);
        assert_eq!(Scheme::of_uri("shm://x"), None);
    }
}
