//! TLS (rustls over ring; TLS 1.2 and 1.3 only) for Peregrine's TCP paths: the `tcp://`
//! transport's publisher and subscribers (`tls_*` URI parameters) and the market data tier's
//! distributor and consumers. A server is a [`ServerTls`] (with client certificates optional
//! or required), a client a [`ClientTls`] (with its own certificate for mutual TLS).
//!
//! Files are PEM. A private key file is checked like a backbone key: a regular file of this
//! user (or root) that nobody else may read (mode 0600 or 0400); one others can read is
//! refused with the `chmod` that fixes it.
//!
//! ```no_run
//! use peregrine_transport::tls::{ClientTls, ServerTls};
//! use std::path::Path;
//!
//! // The distributor: its certificate chain and key, and the CA its clients' certificates
//! // must chain to (optional: without it, clients log in by token only).
//! let server = ServerTls::load(
//!     Path::new("md.crt"),
//!     Path::new("md.key"),
//!     Some(Path::new("clients-ca.crt")),
//! )?;
//! // A consumer: the CA the distributor's certificate must chain to, and its own
//! // certificate and key when its user is identified by them.
//! let client = ClientTls::load(Path::new("ca.crt"), Some((Path::new("alice.crt"), Path::new("alice.key"))))?;
//! # Ok::<(), peregrine_transport::tls::TlsError>(())
//! ```
//!
//! The byte pumps at the end ([`read_plain`], [`write_pending`]) drive a rustls connection
//! over a non-blocking socket: the distributor's mio loop and the consumer's reads share them.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why TLS could not be set up from the files given: the message names the file and the fix.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A file that cannot be read.
    Read { file: PathBuf, error: io::Error },
    /// A private key file others may read, or that belongs to another user.
    Exposed { file: PathBuf, why: String },
    /// A file without what it should hold (no certificate, no key), or that does not parse.
    Content { file: PathBuf, why: String },
    /// rustls refused the combination (a key that does not match its certificate, ...).
    Config { why: String },
    /// A server name that is neither a DNS name nor an IP address.
    ServerName { name: String },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { file, error } => {
                write!(f, "{}: cannot read ({error})", file.display())
            }
            TlsError::Exposed { file, why } => write!(f, "{}: {why}", file.display()),
            TlsError::Content { file, why } => write!(f, "{}: {why}", file.display()),
            TlsError::Config { why } => write!(f, "TLS: {why}"),
            TlsError::ServerName { name } => write!(
                f,
                "TLS server name {name:?} is neither a DNS name nor an IP address; give the \
                 name the distributor's certificate carries"
            ),
        }
    }
}

impl std::error::Error for TlsError {}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        file: path.to_path_buf(),
        error,
    })
}

/// Checks that a private key file is a regular file of this user or root, readable by its
/// owner only.
pub fn check_private(path: &Path) -> Result<(), TlsError> {
    let meta = std::fs::metadata(path).map_err(|error| TlsError::Read {
        file: path.to_path_buf(),
        error,
    })?;
    let exposed = |why: String| TlsError::Exposed {
        file: path.to_path_buf(),
        why,
    };
    if !meta.is_file() {
        return Err(exposed(
            "not a regular file; give the path of a PEM key file".into(),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(exposed(format!(
            "the private key is readable by others (mode {:o}); make it private: chmod 600 {}",
            meta.mode() & 0o777,
            path.display()
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(exposed(format!(
            "the private key belongs to uid {}, not to this user (uid {me}) or root; use a key of your own",
            meta.uid()
        )));
    }
    Ok(())
}

/// The certificates of a PEM file, in order (a chain: the leaf first).
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Content {
            file: path.to_path_buf(),
            why: format!("not a PEM certificate file ({e})"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Content {
            file: path.to_path_buf(),
            why: "holds no certificate (-----BEGIN CERTIFICATE-----)".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1), after [`check_private`].
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    check_private(path)?;
    let pem = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Content {
        file: path.to_path_buf(),
        why: format!("holds no usable private key ({e}); give the PEM key of the certificate"),
    })
}

fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in load_certificates(ca)? {
        store.add(cert).map_err(|e| TlsError::Content {
            file: ca.to_path_buf(),
            why: format!("a certificate is not a usable CA ({e})"),
        })?;
    }
    Ok(store)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 and 1.2: nothing older (rustls has nothing older either).
const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The distributor's TLS: its certificate and key, and optionally the CA of its clients'
/// certificates.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    verifies_clients: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the certificate chain `cert`, its private key `key` and, when given, the CA that
    /// client certificates must chain to. A client without a certificate is still accepted
    /// (its user logs in by token); one with a certificate that does not chain to the CA, or
    /// has expired, fails the handshake.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerTls, TlsError> {
        ServerTls::build(cert, key, client_ca, false)
    }

    /// Like [`load`](Self::load), but a client must present a certificate that chains to
    /// `client_ca`: without one its handshake fails (the `tcp://` transport, which has no
    /// login to identify a subscriber otherwise).
    pub fn load_requiring_client_certificates(
        cert: &Path,
        key: &Path,
        client_ca: &Path,
    ) -> Result<ServerTls, TlsError> {
        ServerTls::build(cert, key, Some(client_ca), true)
    }

    fn build(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        required: bool,
    ) -> Result<ServerTls, TlsError> {
        let chain = load_certificates(cert)?;
        let key = load_private_key(key)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| TlsError::Config { why: e.to_string() })?;
        let builder = match client_ca {
            Some(ca) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider());
                let verifier = if required {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                let verifier = verifier.build().map_err(|e| TlsError::Config {
                    why: format!("client CA {}: {e}", ca.display()),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| identity_error(cert, e))?;
        Ok(ServerTls {
            config: Arc::new(config),
            verifies_clients: client_ca.is_some(),
        })
    }

    /// True when client certificates are asked for and checked.
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }

    /// A server connection for one accepted socket.
    pub fn accept(&self) -> Result<rustls::ServerConnection, TlsError> {
        let mut c = rustls::ServerConnection::new(self.config.clone())
            .map_err(|e| TlsError::Config { why: e.to_string() })?;
        // Encrypted bytes rustls holds for the socket at most: the distributor's own queue
        // (bounded, counted) keeps the rest.
        c.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        Ok(c)
    }
}

/// Bytes of plaintext rustls takes ahead of the socket.
pub const TLS_BUFFER_LIMIT: usize = 64 << 10;

/// A consumer's TLS: the CA the distributor's certificate must chain to, optionally its own
/// certificate and key, and the name to check the distributor's certificate against.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of `ca`; presents `identity` (certificate chain, key) when
    /// given. The distributor's certificate is checked against the host of the address
    /// connected to, unless [`with_server_name`](Self::with_server_name) says otherwise.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTls, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| TlsError::Config { why: e.to_string() })?
            .with_root_certificates(roots(ca)?);
        let config = match identity {
            Some((cert, key)) => builder
                .with_client_auth_cert(load_certificates(cert)?, load_private_key(key)?)
                .map_err(|e| identity_error(cert, e))?,
            None => builder.with_no_client_auth(),
        };
        Ok(ClientTls {
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// Checks the distributor's certificate against `name` (a DNS name or an IP address)
    /// instead of the host connected to.
    pub fn with_server_name(mut self, name: &str) -> Result<ClientTls, TlsError> {
        self.server_name = Some(server_name(name)?);
        Ok(self)
    }

    /// A client connection to `host` (the host part of the address connected to).
    pub fn connect(&self, host: &str) -> Result<rustls::ClientConnection, TlsError> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => server_name(host)?,
        };
        rustls::ClientConnection::new(self.config.clone(), name)
            .map_err(|e| TlsError::Config { why: e.to_string() })
    }
}

/// Why a certificate and key were refused together, with the likely fix.
fn identity_error(cert: &Path, e: rustls::Error) -> TlsError {
    let hint = match e {
        rustls::Error::InconsistentKeys(_) => "the key is not this certificate's: give its own key",
        _ => "give a PEM X.509 v3 certificate (openssl x509 -req makes version 1 without -extfile)",
    };
    TlsError::Config {
        why: format!("{} and its key: {e}; {hint}", cert.display()),
    }
}

fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).map_err(|_| TlsError::ServerName {
        name: name.to_string(),
    })
}

/// The subject of a DER certificate as `ATTRIBUTE=value` pairs (`CN=alice, O=Desk`), as the
/// users file's `cert_subject` is written; `None` if it does not parse.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().to_string())
}

/// Why a TLS connection failed, as an `io::Error` of kind `InvalidData` whose text names the
/// TLS error (an unknown CA, an expired certificate, another name, an old protocol version).
fn tls_failure(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// Reads plaintext into `buf` from a TLS connection over a non-blocking socket: what rustls
/// already decrypted, else what the socket has (handshake records are answered on the way).
/// `Ok(0)` is the end of the stream; `WouldBlock` means nothing is ready. When it returns
/// less than `buf.len()`, rustls holds no more plaintext, so waiting on the socket is right.
pub fn read_plain<S: Read + Write>(
    tls: &mut rustls::Connection,
    socket: &mut S,
    buf: &mut [u8],
) -> io::Result<usize> {
    loop {
        let mut n = 0;
        while n < buf.len() {
            match tls.reader().read(&mut buf[n..]) {
                Ok(0) if n == 0 => return Ok(0), // close_notify
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if n > 0 {
            return Ok(n);
        }
        match tls.read_tls(socket) {
            Ok(0) => return Ok(0),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        let processed = tls.process_new_packets();
        // Handshake answers, or the alert saying why it failed.
        let _ = write_pending(tls, socket);
        processed.map_err(tls_failure)?;
    }
}

/// Writes what rustls holds for the socket until it is all written (`Ok`) or the socket is
/// full (`WouldBlock`).
pub fn write_pending<S: Write>(tls: &mut rustls::Connection, socket: &mut S) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(socket) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
