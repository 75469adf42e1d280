//! Test certificates: a CA and certificates it signs, written as PEM files (private keys mode
//! 0600, as Peregrine's key checks want), made with rcgen so that no tool outside the Rust
//! toolchain is needed.
//!
//! ```no_run
//! let dir = std::env::temp_dir().join("pki-example");
//! let ca = peregrine_testkit::pki::TestCa::new(&dir, "ca"); // dir/ca.crt
//! let (crt, key) = ca.issue("md", &["127.0.0.1"]); // dir/md.crt, dir/md.key
//! # let _ = (crt, key);
//! ```

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A certificate authority of a test, its certificate at `DIR/NAME.crt`.
pub struct TestCa {
    dir: PathBuf,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

/// Never prints the key.
impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name` (its common name), written to `dir/name.crt` (the folder is
    /// made).
    pub fn new(dir: &Path, name: &str) -> TestCa {
        std::fs::create_dir_all(dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = p.self_signed(&key).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
        TestCa {
            dir: dir.to_path_buf(),
            cert,
            key,
        }
    }

    /// A certificate for `names` (DNS names or IP addresses; none for a client's), signed by
    /// this CA: `(dir/name.crt, dir/name.key)`.
    pub fn issue(&self, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap()
                .signed_by(&key, &self.cert, &self.key)
                .unwrap();
        let crt = self.dir.join(format!("{name}.crt"));
        let key_path = self.dir.join(format!("{name}.key"));
        std::fs::write(&crt, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (crt, key_path)
    }
}
