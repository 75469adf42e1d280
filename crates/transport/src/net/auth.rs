//! `auth=KEYFILE` on `udp://` and `mcast://`: every datagram a publisher or subscriber sends
//! ends with an AUTH frame (a MAC under a pre-shared key: BLAKE3, or HMAC-SHA256 with
//! `mac=hmac-sha256`), and every datagram it receives is checked before anything else reads it. The computation is `peregrine_proto::auth`'s; this
//! module reads key files and seals batches for the socket.
//!
//! A key file holds the key as 64 hexadecimal digits (32 bytes), on one line; lines starting
//! with `#` are comments. It must be a regular file readable by its owner only (mode 0600 or
//! 0400), owned by this user or root, like an ssh private key:
//!
//! ```sh
//! head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > md.key && chmod 600 md.key
//! ```

use peregrine_proto::auth::{AuthKey, KEY_LEN};
use peregrine_proto::sender::Batch;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Reads and checks the key file at `path`; the error names the file, what is wrong and the fix.
pub fn load_key(path: &Path) -> Result<AuthKey, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        format!("auth={shown}: cannot read the key file ({e}); give the path of a key file (docs: crates/transport/src/net/auth.rs)")
    })?;
    if !meta.is_file() {
        return Err(format!(
            "auth={shown}: not a regular file; give the path of a key file"
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "auth={shown}: the key file is readable by others (mode {:o}); make it private: chmod 600 {shown}",
            meta.mode() & 0o777
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "auth={shown}: the key file belongs to uid {}, not to this user (uid {me}) or root; use a key file of your own",
            meta.uid()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("auth={shown}: cannot read the key file ({e})"))?;
    parse_key(&text).map_err(|why| format!("auth={shown}: {why}"))
}

/// The key in a key file's text: 64 hexadecimal digits; `#` comment lines and surrounding
/// blanks are ignored.
pub fn parse_key(text: &str) -> Result<AuthKey, String> {
    let hex: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let bad = || {
        format!(
            "the key must be {} hexadecimal digits ({KEY_LEN} bytes) on one line; make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
            2 * KEY_LEN
        )
    };
    if hex.len() != 2 * KEY_LEN || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut key = [0u8; KEY_LEN];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    if key.iter().all(|&b| b == 0) {
        return Err("the key is all zeros: make a random one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'".into());
    }
    Ok(AuthKey::new(key))
}

/// Seals what a driver sends, reusing one buffer.
#[derive(Debug)]
pub(crate) struct Sealer {
    pub(crate) key: AuthKey,
    buf: Vec<u8>,
}

impl Sealer {
    pub(crate) fn new(key: AuthKey) -> Self {
        Sealer {
            key,
            buf: Vec::with_capacity(64 << 10),
        }
    }

    /// The batch with every datagram sealed: datagrams of `segment_len + 32` bytes but the
    /// last, so it can still leave in one GSO send of that segment size.
    pub(crate) fn batch<'a>(&'a mut self, batch: &Batch<'_>) -> Batch<'a> {
        self.buf.clear();
        for d in batch.datagrams() {
            self.key.seal_into(d, &mut self.buf);
        }
        Batch {
            bytes: &self.buf,
            segment_len: AuthKey::sealed_len(batch.segment_len),
        }
    }

    /// One control frame (or datagram) sealed.
    pub(crate) fn one(&mut self, datagram: &[u8]) -> &[u8] {
        self.buf.clear();
        self.key.seal_into(datagram, &mut self.buf);
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn key_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pg-key-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_private_key_file_loads_and_names_its_key() {
        let p = key_file("ok", &format!("# md backbone\n{HEX}\n"), 0o600);
        let key = load_key(&p).unwrap();
        // The key id of docs/golden/sealed.json's key.
        assert_eq!(key.key_id(), 701_304_163);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn bad_key_files_are_refused_with_the_fix() {
        let cases = [
            ("open", HEX.to_string(), 0o644, "chmod 600"),
            (
                "short",
                HEX[..62].to_string(),
                0o600,
                "64 hexadecimal digits",
            ),
            (
                "nothex",
                HEX.replace('a', "g"),
                0o600,
                "64 hexadecimal digits",
            ),
            ("zero", "0".repeat(64), 0o600, "all zeros"),
        ];
        for (name, text, mode, want) in cases {
            let p = key_file(name, &text, mode);
            let e = load_key(&p).unwrap_err();
            assert!(
                e.contains(want) && e.contains(&p.display().to_string()),
                "{name}: {e}"
            );
            std::fs::remove_file(p).unwrap();
        }
        let e = load_key(Path::new("/nonexistent/pg.key")).unwrap_err();
        assert!(e.contains("/nonexistent/pg.key"), "{e}");
    }

    #[test]
    fn a_sealed_batch_keeps_its_gso_shape() {
        let mut s = Sealer::new(parse_key(HEX).unwrap());
        let bytes: Vec<u8> = (0..(64 * 3 + 24)).map(|i| i as u8).collect();
        let batch = Batch {
            bytes: &bytes,
            segment_len: 64,
        };
        let key = s.key.clone();
        let sealed = s.batch(&batch);
        assert_eq!(sealed.segment_len, 96);
        assert_eq!(sealed.segments(), 4);
        let opened: Vec<Vec<u8>> = sealed
            .datagrams()
            .map(|d| key.open(d).unwrap().to_vec())
            .collect();
        assert_eq!(opened[0], bytes[..64]);
        assert_eq!(opened[3], bytes[192..]);
    }
}
