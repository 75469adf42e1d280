//! Why a consumer fails: [`ConsumerError`].

use super::FIRST_LOGIN_TIMEOUT;
use peregrine_md::consumer::ConsumerError as SessionError;
use std::fmt;
use std::io;

/// Why a consumer call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerError {
    /// An address that does not resolve.
    Address { address: String, error: io::Error },
    /// A bad argument, a refused login, or a distributor that broke the protocol.
    Session(SessionError),
    /// No distributor of the list accepted a connection and a login in time.
    NoDistributor { addresses: String, last: String },
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::Address { address, error } => write!(
                f,
                "distributor address {address:?}: {error}; give HOST:PORT, for example \
                 127.0.0.1:14500"
            ),
            ConsumerError::Session(e) => e.fmt(f),
            ConsumerError::NoDistributor { addresses, last } => write!(
                f,
                "no distributor of {addresses} accepted a connection and a login (tried for up \
                 to {FIRST_LOGIN_TIMEOUT:?}; last: {last}); is one running there?"
            ),
        }
    }
}

impl std::error::Error for ConsumerError {}

impl From<SessionError> for ConsumerError {
    fn from(e: SessionError) -> Self {
        ConsumerError::Session(e)
    }
}
