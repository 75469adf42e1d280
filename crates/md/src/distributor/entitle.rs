//! Users and entitlements: the users file, the login check, and item globs.
//!
//! ```toml
//! [users.alice]
//! token_argon2 = "$argon2id$v=19$m=19456,t=2,p=1$..." # peregrine distributor --hash-token
//! cert_subject = "CN=alice,O=Desk" # optional: the subject of alice's TLS client certificate
//! items = ["AAA.*", "MSFT.O"]     # globs; an item matching none is not-entitled
//! services = ["FEED1"]            # optional: default every service
//! post = ["AAA.*"]                # optional: item globs the user may post to (default none)
//! slow = "conflate"               # optional: conflate | disconnect (default: the global policy)
//! ```
//!
//! A user has a token hash (`token_argon2`, or the older `token_sha256`), `cert_subject` or
//! both; a login must satisfy each it has. `token_argon2` is a salted, deliberately slow hash
//! (Argon2id, RustCrypto's `argon2`, as a PHC string): a stolen users file gives an attacker
//! some tens of guesses a second per core instead of billions. Checking it takes tens of
//! milliseconds, so [`Users::login`] does not: it says [`LoginCheck::Verify`] and the driver
//! checks ([`verify_token`]) off its event loop; an unknown user is checked against a dummy
//! hash the same way, so the time taken does not tell whether a user exists. `token_sha256`
//! (unsalted SHA-256) is still read, with a warning ([`Users::warnings`]); it is compared in
//! constant time, an unknown user against a dummy digest. A certificate's subject is compared as a
//! set of `ATTRIBUTE=value` pairs (order, spaces around `,` and `=`, and the case of
//! attribute names do not matter; values are compared exactly).

use crate::load::{join, Doc, LoadError};
use crate::model::{
    check_item_pattern, check_service, check_user, PATTERN_ALPHABET, SERVICE_ALPHABET,
    USER_ALPHABET,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What happens to a client whose output queue passes its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlowPolicy {
    /// Stop queueing updates, remember which items changed, and send their images once the
    /// queue drained below half the bound.
    Conflate,
    /// Close the connection.
    Disconnect,
}

/// How a user's token is kept in the users file.
#[derive(Clone, PartialEq, Eq)]
enum StoredToken {
    /// `token_sha256`: unsalted SHA-256 (read with a warning).
    Sha256([u8; 32]),
    /// `token_argon2`: an Argon2 PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`).
    Argon2(Arc<str>),
}

/// What [`Users::login`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginCheck {
    /// The credentials are right: the user's index.
    Accepted(usize),
    /// They are not (an unknown user, a wrong token or certificate).
    Denied,
    /// The token must be checked against a slow hash, off the event loop: [`verify_token`]
    /// of `hash` and the token, then `Accepted(user)` if it matches and `user` is `Some`
    /// (`None`: an unknown user, checked against a dummy hash so that it takes as long).
    Verify { user: Option<usize>, hash: Arc<str> },
}

impl LoginCheck {
    /// The user's index if accepted without a slow check.
    pub fn accepted(&self) -> Option<usize> {
        match self {
            LoginCheck::Accepted(u) => Some(*u),
            _ => None,
        }
    }
}

/// The Argon2id parameters of new token hashes: OWASP's first choice (19 MiB, 2 passes, one
/// lane), about 20-40 ms on a server core.
fn argon2() -> argon2::Argon2<'static> {
    argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(19 * 1024, 2, 1, None).expect("valid parameters"),
    )
}

/// The PHC string of `token` hashed with Argon2id and `salt` (16 random bytes: the caller's,
/// so that this crate needs no random source), for `token_argon2` in the users file.
pub fn hash_token(token: &[u8], salt: &[u8; 16]) -> String {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::encode_b64(salt).expect("16 bytes is a valid salt");
    argon2()
        .hash_password(token, &salt)
        .expect("Argon2 hashes any token")
        .to_string()
}

/// True if `token` matches the PHC string `hash` (constant time in the hash compared). Slow
/// by design: call it off the event loop.
pub fn verify_token(hash: &str, token: &[u8]) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    PasswordHash::new(hash)
        .is_ok_and(|h| argon2::Argon2::default().verify_password(token, &h).is_ok())
}

/// The hash an unknown user's token is checked against (the same cost as a real one).
fn dummy_hash() -> Arc<str> {
    static DUMMY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    DUMMY
        .get_or_init(|| hash_token(b"no such user", &[0x5a; 16]).into())
        .clone()
}

/// One user of the users file.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    token: Option<StoredToken>,
    /// The subject of the user's client certificate, normalised ([`normalize_subject`]).
    pub cert_subject: Option<String>,
    /// Item globs the user may see.
    pub items: Vec<String>,
    /// Services the user may open; `None`: every service.
    pub services: Option<Vec<String>>,
    /// Item globs the user may post to (of the services it may open); none by default.
    pub post: Vec<String>,
    /// The user's slow-client policy; `None`: the distributor's.
    pub slow: Option<SlowPolicy>,
}

/// Never prints the digest.
impl core::fmt::Debug for User {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("cert_subject", &self.cert_subject)
            .field("items", &self.items)
            .field("services", &self.services)
            .field("post", &self.post)
            .field("slow", &self.slow)
            .finish_non_exhaustive()
    }
}

impl User {
    /// Builds a user from its token (tests, and tools that write users files).
    pub fn with_token(name: &str, token: &[u8], items: &[&str]) -> User {
        User {
            name: name.to_string(),
            token: Some(StoredToken::Sha256(Sha256::digest(token).into())),
            cert_subject: None,
            items: items.iter().map(|s| s.to_string()).collect(),
            services: None,
            post: Vec::new(),
            slow: None,
        }
    }

    /// The same user, allowed to post to items matching `globs`.
    pub fn with_post(mut self, globs: &[&str]) -> User {
        self.post = globs.iter().map(|s| s.to_string()).collect();
        self
    }

    /// True if the user may post to the item `name` of `service`: a service it may open, and
    /// one of its `post` globs matches the name.
    pub fn may_post(&self, service: &str, name: &str) -> bool {
        self.may_open_service(service)
            && self
                .post
                .iter()
                .any(|g| glob_match(g.as_bytes(), name.as_bytes()))
    }

    /// The same user, also (or, with [`without_token`](Self::without_token), only) identified
    /// by its client certificate's subject.
    pub fn with_cert_subject(mut self, subject: &str) -> User {
        self.cert_subject = Some(normalize_subject(subject));
        self
    }

    /// The same user with no token: it logs in by its certificate alone.
    pub fn without_token(mut self) -> User {
        self.token = None;
        self
    }

    /// The same user with its token kept as the Argon2 PHC string `hash` ([`hash_token`]).
    pub fn with_token_argon2(mut self, hash: &str) -> User {
        self.token = Some(StoredToken::Argon2(hash.into()));
        self
    }

    /// True if the user may open items of `service`.
    pub fn may_open_service(&self, service: &str) -> bool {
        self.services
            .as_ref()
            .is_none_or(|list| list.iter().any(|s| s == service))
    }

    /// True if one of the user's globs matches the item `name`.
    pub fn may_see_item(&self, name: &str) -> bool {
        self.items
            .iter()
            .any(|g| glob_match(g.as_bytes(), name.as_bytes()))
    }
}

/// The users file: who may log in, and what each may see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    users: Vec<User>,
    by_name: BTreeMap<String, usize>,
    /// Some user's token is an Argon2 hash: unknown users are checked slowly too.
    any_argon2: bool,
}

impl Users {
    /// Users from a list (tests, embedding).
    pub fn from_users(users: Vec<User>) -> Users {
        let by_name = users
            .iter()
            .enumerate()
            .map(|(i, u)| (u.name.clone(), i))
            .collect();
        let any_argon2 = users
            .iter()
            .any(|u| matches!(u.token, Some(StoredToken::Argon2(_))));
        Users {
            users,
            by_name,
            any_argon2,
        }
    }

    /// Loads and validates a users file.
    pub fn load(path: &Path) -> Result<Users, LoadError> {
        let text = crate::load::read(path)?;
        Users::parse(&text, &path.display().to_string())
    }

    /// Parses and validates a users file; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Users, LoadError> {
        let doc = Doc { file };
        let top = doc.parse(text)?;
        doc.only_keys("", &top, &["users"])?;
        let mut users = Vec::new();
        let Some(table) = top.get("users") else {
            return Ok(Users::default());
        };
        for (name, def) in doc.table("users", table)? {
            let key = join("users", name);
            check_user(name.as_bytes()).map_err(|e| {
                doc.invalid(
                    &key,
                    "{...}",
                    format!("a user name of {USER_ALPHABET} (this one {e})"),
                )
            })?;
            let def = doc.table(&key, def)?;
            doc.only_keys(
                &key,
                def,
                &[
                    "token_argon2",
                    "token_sha256",
                    "cert_subject",
                    "items",
                    "services",
                    "post",
                    "slow",
                ],
            )?;
            let hex_accepts = "64 hex digits: the SHA-256 of the user's token (sha256sum)";
            let tkey = format!("{key}.token_sha256");
            let token_sha256 = match def.get("token_sha256") {
                None => None,
                Some(t) => {
                    let mut digest = [0u8; 32];
                    hex::decode_to_slice(doc.string(&tkey, t, hex_accepts)?, &mut digest)
                        .map_err(|_| doc.invalid(&tkey, t, hex_accepts))?;
                    Some(digest)
                }
            };
            let ckey = format!("{key}.cert_subject");
            let subject_accepts =
                "a certificate subject as ATTRIBUTE=value pairs separated by commas, for example \"CN=alice,O=Desk\"";
            let cert_subject = match def.get("cert_subject") {
                None => None,
                Some(v) => {
                    let text = doc.string(&ckey, v, subject_accepts)?;
                    if !is_subject(text) {
                        return Err(doc.invalid(&ckey, v, subject_accepts));
                    }
                    Some(normalize_subject(text))
                }
            };
            let akey = format!("{key}.token_argon2");
            let argon_accepts = "an Argon2 PHC string ($argon2id$v=19$m=...,t=...,p=...$salt$hash), as `peregrine distributor --hash-token` prints";
            let token_argon2 = match def.get("token_argon2") {
                None => None,
                Some(v) => {
                    let text = doc.string(&akey, v, argon_accepts)?;
                    let ok = argon2::password_hash::PasswordHash::new(text).is_ok_and(|h| {
                        h.algorithm.as_str().starts_with("argon2") && h.hash.is_some()
                    });
                    if !ok {
                        return Err(doc.invalid(&akey, v, argon_accepts));
                    }
                    Some(text)
                }
            };
            let token = match (token_argon2, token_sha256) {
                (Some(_), Some(_)) => return Err(doc.invalid(
                    &key,
                    "{...}",
                    "one token hash per user: token_argon2 (or the older token_sha256), not both",
                )),
                (Some(a), None) => Some(StoredToken::Argon2(a.into())),
                (None, Some(d)) => Some(StoredToken::Sha256(d)),
                (None, None) => None,
            };
            if token.is_none() && cert_subject.is_none() {
                return Err(doc.invalid(
                    &key,
                    "{...}",
                    "a user with token_argon2 (a token login; token_sha256 is still read), cert_subject (a TLS client certificate login) or both",
                ));
            }
            let items_accepts = format!("a list of item globs, each {PATTERN_ALPHABET}");
            let ikey = format!("{key}.items");
            let items_value = doc.required(&key, def, "items", &items_accepts)?;
            let items = doc.strings(&ikey, items_value, &items_accepts)?;
            for (i, p) in items.iter().enumerate() {
                check_item_pattern(p.as_bytes()).map_err(|e| {
                    doc.invalid(
                        &format!("{ikey}[{i}]"),
                        format!("{p:?}"),
                        format!("{items_accepts} (this one {e})"),
                    )
                })?;
            }
            let post = match def.get("post") {
                None => Vec::new(),
                Some(v) => {
                    let pkey = format!("{key}.post");
                    let accepts = format!(
                        "a list of item globs the user may post to, each {PATTERN_ALPHABET}"
                    );
                    let list = doc.strings(&pkey, v, &accepts)?;
                    for (i, p) in list.iter().enumerate() {
                        check_item_pattern(p.as_bytes()).map_err(|e| {
                            doc.invalid(
                                &format!("{pkey}[{i}]"),
                                format!("{p:?}"),
                                format!("{accepts} (this one {e})"),
                            )
                        })?;
                    }
                    list.iter().map(|s| s.to_string()).collect()
                }
            };
            let services = match def.get("services") {
                None => None,
                Some(v) => {
                    let skey = format!("{key}.services");
                    let accepts = format!("a list of service names, each {SERVICE_ALPHABET}");
                    let list = doc.strings(&skey, v, &accepts)?;
                    for (i, s) in list.iter().enumerate() {
                        check_service(s.as_bytes()).map_err(|e| {
                            doc.invalid(
                                &format!("{skey}[{i}]"),
                                format!("{s:?}"),
                                format!("{accepts} (this one {e})"),
                            )
                        })?;
                    }
                    Some(list.iter().map(|s| s.to_string()).collect())
                }
            };
            let slow = match def.get("slow") {
                None => None,
                Some(v) => {
                    let accepts = "conflate or disconnect";
                    let skey = format!("{key}.slow");
                    Some(match doc.string(&skey, v, accepts)? {
                        "conflate" => SlowPolicy::Conflate,
                        "disconnect" => SlowPolicy::Disconnect,
                        _ => return Err(doc.invalid(&skey, v, accepts)),
                    })
                }
            };
            users.push(User {
                name: name.clone(),
                token,
                cert_subject,
                items: items.iter().map(|s| s.to_string()).collect(),
                services,
                post,
                slow,
            });
        }
        Ok(Users::from_users(users))
    }

    /// Checks a login against the user `name`'s credentials: `token` against its token hash
    /// (when it has one) and `cert_subject` (a TLS client certificate's, normalised) against
    /// its subject (when it has one). A SHA-256 digest is compared here, in constant time; an
    /// Argon2 hash is left to the caller ([`LoginCheck::Verify`]), off its event loop. An
    /// unknown user costs what a known one does: a comparison against a dummy digest, or (when
    /// the file holds Argon2 hashes) a slow check against a dummy hash.
    pub fn login(&self, name: &str, token: &[u8], cert_subject: Option<&str>) -> LoginCheck {
        const DUMMY: [u8; 32] = [0x5a; 32];
        let found = self.by_name.get(name).copied();
        let Some(index) = found else {
            if self.any_argon2 {
                return LoginCheck::Verify {
                    user: None,
                    hash: dummy_hash(),
                };
            }
            let digest: [u8; 32] = Sha256::digest(token).into();
            let _: bool = digest.ct_eq(&DUMMY).into();
            return LoginCheck::Denied;
        };
        let user = &self.users[index];
        let subject_ok = match &user.cert_subject {
            None => true,
            Some(want) => cert_subject == Some(want.as_str()),
        };
        match &user.token {
            None if subject_ok => LoginCheck::Accepted(index),
            None => LoginCheck::Denied,
            Some(StoredToken::Sha256(stored)) => {
                let digest: [u8; 32] = Sha256::digest(token).into();
                let token_ok: bool = digest.ct_eq(stored).into();
                if token_ok && subject_ok {
                    LoginCheck::Accepted(index)
                } else {
                    LoginCheck::Denied
                }
            }
            // A wrong certificate is checked the same slow way: the time taken does not say
            // which credential was wrong.
            Some(StoredToken::Argon2(hash)) => LoginCheck::Verify {
                user: subject_ok.then_some(index),
                hash: hash.clone(),
            },
        }
    }

    /// What an operator should hear about the file: users whose token is kept as an unsalted
    /// SHA-256 digest, with the fix.
    pub fn warnings(&self) -> Vec<String> {
        self.users
            .iter()
            .filter(|u| matches!(u.token, Some(StoredToken::Sha256(_))))
            .map(|u| {
                format!(
                    "users.{}.token_sha256 is an unsalted fast hash: replace it with token_argon2 = \"...\" from `peregrine distributor --hash-token`",
                    u.name
                )
            })
            .collect()
    }

    pub fn get(&self, index: usize) -> Option<&User> {
        self.users.get(index)
    }

    /// The index of the user called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// A certificate subject in one canonical form: its `ATTRIBUTE=value` pairs with blanks
/// around them trimmed, attribute names upper-cased, sorted, joined by `,`
/// (`" o=Desk, CN=alice"` becomes `"CN=alice,O=Desk"`). Values are kept as they are (a value
/// holding a comma is not supported).
pub fn normalize_subject(subject: &str) -> String {
    let mut parts: Vec<String> = subject
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => format!("{}={}", k.trim().to_ascii_uppercase(), v.trim()),
            None => p.to_string(),
        })
        .collect();
    parts.sort();
    parts.join(",")
}

/// True if `s` reads as a subject: one or more `ATTRIBUTE=value` pairs, each attribute a
/// word of letters, digits or dots (`CN`, `O`, `2.5.4.3`) and each value non-empty.
fn is_subject(s: &str) -> bool {
    let mut any = false;
    for p in s.split(',') {
        let Some((k, v)) = p.split_once('=') else {
            return false;
        };
        let k = k.trim();
        if k.is_empty()
            || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
            || v.trim().is_empty()
        {
            return false;
        }
        any = true;
    }
    any
}

/// Shell-style glob over bytes: `*` matches any run (dots included: item names are not
/// paths), `?` one byte; anything else itself. Linear backtracking on the last `*`, no
/// allocation: the distributor matches every new item against every open glob.
pub fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_and_single_characters() {
        let m = |p: &str, n: &str| glob_match(p.as_bytes(), n.as_bytes());
        assert!(m("AAA.*", "AAA.O"));
        assert!(m("AAA.*", "AAA."));
        assert!(!m("AAA.*", "AAB.O"));
        assert!(m("*", "EUR="));
        assert!(m("?SFT.O", "MSFT.O"));
        assert!(!m("?SFT.O", "SFT.O"));
        assert!(m("*.O", "A.B.O"));
        assert!(m("A*B*C", "AxxBxxBxxC"));
        assert!(!m("A*B*C", "AxxBxxBxx"));
        assert!(m("MSFT.O", "MSFT.O"));
        assert!(!m("MSFT.O", "MSFT.OQ"));
        assert!(m("**", ""));
    }

    const ALICE: &str = r#"
[users.alice]
token_sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
items = ["AAA.*", "MSFT.O"]
services = ["FEED1"]
slow = "disconnect"

[users.bob]
token_sha256 = "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9"
items = ["*"]
"#;

    #[test]
    fn a_user_logs_in_with_its_token_only() {
        let users = Users::parse(ALICE, "users.toml").unwrap();
        let alice = users.login("alice", b"secret", None).accepted().unwrap();
        let alice = users.get(alice).unwrap();
        assert_eq!(alice.slow, Some(SlowPolicy::Disconnect));
        assert!(alice.may_see_item("AAA.L") && alice.may_see_item("MSFT.O"));
        assert!(!alice.may_see_item("IBM.N"));
        assert!(alice.may_open_service("FEED1") && !alice.may_open_service("FEED2"));
        assert_eq!(users.login("alice", b"secreT", None), LoginCheck::Denied);
        assert_eq!(users.login("mallory", b"secret", None), LoginCheck::Denied);
        let bob = users
            .get(users.login("bob", b"bob", None).accepted().unwrap())
            .unwrap();
        assert!(bob.may_open_service("ANY") && bob.may_see_item("IBM.N"));
        assert!(!format!("{bob:?}").contains("81b6"));
    }

    fn err(text: &str) -> String {
        Users::parse(text, "users.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_key_the_value_and_what_is_accepted() {
        assert_eq!(
            err("[users.alice]\ntoken_sha256 = \"abc\"\nitems = [\"*\"]"),
            "users.toml: users.alice.token_sha256 = \"abc\" is not accepted: 64 hex digits: the SHA-256 of the user's token (sha256sum)"
        );
        let hash = "0".repeat(64);
        assert_eq!(
            err(&format!(
                "[users.alice]\ntoken_sha256 = \"{hash}\"\nitems = [\"*\"]\nslow = \"fast\""
            )),
            "users.toml: users.alice.slow = \"fast\" is not accepted: conflate or disconnect"
        );
        assert!(err(&format!(
            "[users.alice]\ntoken_sha256 = \"{hash}\"\nitems = [\"A B\"]"
        ))
        .contains("users.alice.items[0] = \"A B\" is not accepted: a list of item globs"));
        assert!(err(&format!("[users.alice]\ntoken_sha256 = \"{hash}\""))
            .contains("users.alice.items = (missing)"));
        assert!(err(&format!(
            "[users.alice]\ntoken_sha256 = \"{hash}\"\nitems = []\nservices = [\"F 1\"]"
        ))
        .contains("users.alice.services[0] = \"F 1\""));
        assert!(err(&format!(
            "[users.alice]\ntoken_sha256 = \"{hash}\"\nitems = []\ntoken = 1"
        ))
        .contains("an unknown key"));
        assert!(err(&format!(
            "[users.\"al ice\"]\ntoken_sha256 = \"{hash}\"\nitems = []"
        ))
        .contains("users.\"al ice\" = {...} is not accepted: a user name of"));
        assert!(err("[users.alice]\nitems = []")
            .contains("users.alice = {...} is not accepted: a user with token_argon2"));
        assert!(
            err("[users.alice]\ncert_subject = \"alice\"\nitems = []").contains(
                "users.alice.cert_subject = \"alice\" is not accepted: a certificate subject"
            )
        );
    }

    const CERT_USERS: &str = r#"
[users.carol]
cert_subject = " o=Desk,  CN=carol "
items = ["*"]

[users.dave]
token_sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
cert_subject = "CN=dave,O=Desk"
items = ["*"]
"#;

    #[test]
    fn a_certificate_user_logs_in_by_its_subject_and_a_both_user_needs_both() {
        let users = Users::parse(CERT_USERS, "users.toml").unwrap();
        let carol = normalize_subject("CN=carol, O=Desk");
        assert_eq!(carol, "CN=carol,O=Desk");
        // Whatever token (none), with the subject; never without it, or with another.
        assert!(users.login("carol", b"", Some(&carol)).accepted().is_some());
        assert!(users
            .login("carol", b"anything", Some(&carol))
            .accepted()
            .is_some());
        assert_eq!(users.login("carol", b"", None), LoginCheck::Denied);
        assert_eq!(
            users.login("carol", b"", Some(&normalize_subject("CN=carol,O=Other"))),
            LoginCheck::Denied
        );
        // dave needs his token and his certificate.
        let dave = normalize_subject("O=Desk,CN=dave");
        assert!(users
            .login("dave", b"secret", Some(&dave))
            .accepted()
            .is_some());
        assert_eq!(users.login("dave", b"secret", None), LoginCheck::Denied);
        assert_eq!(
            users.login("dave", b"wrong", Some(&dave)),
            LoginCheck::Denied
        );
        assert_eq!(
            users.login("dave", b"secret", Some(&carol)),
            LoginCheck::Denied
        );
        // A certificate names its user: carol's does not log in as an unknown user.
        assert_eq!(
            users.login("mallory", b"", Some(&carol)),
            LoginCheck::Denied
        );
        let u = users
            .get(users.login("carol", b"", Some(&carol)).accepted().unwrap())
            .unwrap();
        assert_eq!(u.cert_subject.as_deref(), Some("CN=carol,O=Desk"));
    }

    #[test]
    fn an_argon2_token_is_checked_off_the_loop_and_unknown_users_cost_the_same() {
        let hash = hash_token(b"s3cret", &[7; 16]);
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(verify_token(&hash, b"s3cret"));
        assert!(!verify_token(&hash, b"s3creT"));
        assert!(!verify_token("not a hash", b"s3cret"));
        let text = format!(
            "[users.erin]\ntoken_argon2 = \"{hash}\"\nitems = [\"*\"]\n\n\
             [users.bob]\ntoken_sha256 = \"81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9\"\nitems = [\"*\"]\n"
        );
        let users = Users::parse(&text, "users.toml").unwrap();
        let erin = users.index_of("erin").unwrap();
        // The check is the caller's; the hash comes with it.
        match users.login("erin", b"s3cret", None) {
            LoginCheck::Verify { user, hash: h } => {
                assert_eq!(user, Some(erin));
                assert!(verify_token(&h, b"s3cret"));
            }
            other => panic!("{other:?}"),
        }
        // An unknown user is a slow check too, against a hash nothing matches.
        match users.login("mallory", b"s3cret", None) {
            LoginCheck::Verify {
                user: None,
                hash: h,
            } => assert!(!verify_token(&h, b"s3cret")),
            other => panic!("{other:?}"),
        }
        // The SHA-256 user still logs in, and is warned about.
        assert!(users.login("bob", b"bob", None).accepted().is_some());
        let w = users.warnings();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("users.bob.token_sha256 is an unsalted fast hash"),
            "{w:?}"
        );
        // A bad PHC string, or both hashes, are refused naming the key.
        assert!(
            err("[users.erin]\ntoken_argon2 = \"$md5$x\"\nitems = []").contains(
                "users.erin.token_argon2 = \"$md5$x\" is not accepted: an Argon2 PHC string"
            )
        );
        assert!(err(&format!(
            "[users.erin]\ntoken_argon2 = \"{hash}\"\ntoken_sha256 = \"{}\"\nitems = []",
            "0".repeat(64)
        ))
        .contains("one token hash per user"));
    }
}
