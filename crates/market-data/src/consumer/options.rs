//! How a consumer connects: [`ConnectOptions`] (TLS, its dictionary, liveness, the context
//! whose counters it joins).

use crate::tls::ClientTls;
use peregrine_md::dictionary::Dictionary;
use std::time::Duration;

/// How a consumer connects (plaintext TCP unless `tls` is set).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// TLS: the CA that the distributor's certificate must chain to, and this consumer's own
    /// certificate when its user logs in by it.
    pub tls: Option<ClientTls>,
    /// The context whose counters file carries this consumer's counters for `peregrine stat`
    /// (a record of type `consumer`). `None`: a file of the consumer's own, removed when the
    /// consumer is dropped. A process with many consumers gives them one context.
    pub context: Option<peregrine::Context>,
    /// The ping interval to ask the distributor for (`None`: the distributor's default). The
    /// distributor takes the nearest it allows; each side pings at it, and a side silent for
    /// three intervals is taken as gone (the consumer then reconnects).
    pub ping_interval: Option<Duration>,
    /// The application's own field dictionary. The distributor's is downloaded at each login
    /// and must give every field both know the same type: one that does not ends the session
    /// with an error naming the field. `None`: the distributor's is taken as it is.
    pub dictionary: Option<Dictionary>,
    /// Do not download the distributor's dictionary: read fields by `dictionary` (or the
    /// built-in one) alone.
    pub no_dictionary_download: bool,
}

impl ConnectOptions {
    /// Plaintext TCP (loopback distributors, or ones that allow plaintext logins).
    pub fn plain() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// TLS with `tls`.
    pub fn tls(tls: ClientTls) -> ConnectOptions {
        ConnectOptions {
            tls: Some(tls),
            ..ConnectOptions::default()
        }
    }

    /// The same, with the application's own dictionary, checked against the distributor's.
    pub fn with_dictionary(mut self, dictionary: Dictionary) -> ConnectOptions {
        self.dictionary = Some(dictionary);
        self
    }

    /// The same, without downloading the distributor's dictionary.
    pub fn without_dictionary_download(mut self) -> ConnectOptions {
        self.no_dictionary_download = true;
        self
    }

    /// The same, asking for a ping interval of `interval`.
    pub fn with_ping_interval(mut self, interval: Duration) -> ConnectOptions {
        self.ping_interval = Some(interval);
        self
    }

    /// The same, with the consumer's counters in `context`'s counters file.
    pub fn with_context(mut self, context: &peregrine::Context) -> ConnectOptions {
        self.context = Some(context.clone());
        self
    }
}
