//! TLS between consumers and the distributor (issue 29, items 2-4): market data over TLS, a
//! user logging in by its client certificate, and every way a handshake must fail (another
//! CA, an expired certificate, another name, TLS 1.1) refused with the reason on both sides;
//! `openssl s_client` as an independent client; a plaintext login from another host (a veth
//! address in a namespace this test makes) refused.
//!
//! The certificates are made here with rcgen: a CA, the distributor's (for `localhost` and
//! 127.0.0.1), a client's (`CN=dora,O=Desk`), an expired one, one for another name, and a
//! second CA that signs nothing the distributor trusts.

use peregrine_market_data::consumer::{ConnectOptions, Consumer, ConsumerError, Event};
use peregrine_market_data::distributor::{
    DistributorServer, DistributorSettings, Line, SettingsOverrides,
};
use peregrine_market_data::provider::{Provider, ProviderError};
use peregrine_market_data::tls::{ClientTls, ServerTls};
use peregrine_md::distributor::Users;
use peregrine_md::model::Value;
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Pki {
    dir: PathBuf,
}

fn write_private(path: &Path, pem: &str) {
    std::fs::write(path, pem).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    let cert = params.self_signed(&key).unwrap();
    (cert, key)
}

impl Pki {
    /// Files: ca.crt, other-ca.crt, server.{crt,key}, expired.{crt,key}, elsewhere.{crt,key},
    /// dora.{crt,key}, stranger.{crt,key} (signed by the other CA).
    fn new(tag: &str) -> Pki {
        Pki::with_server_name(tag, "127.0.0.1")
    }

    /// [`new`](Self::new), the server's certificate also valid for `server` (an address).
    fn with_server_name(tag: &str, server: &str) -> Pki {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pair = ca("Peregrine test CA");
        let other_pair = ca("Someone else's CA");
        std::fs::write(dir.join("ca.crt"), ca_pair.0.pem()).unwrap();
        std::fs::write(dir.join("other-ca.crt"), other_pair.0.pem()).unwrap();
        let (issuer, other_issuer) = (&ca_pair, &other_pair);
        let leaf = |name: &str,
                    sans: &[&str],
                    cn: &str,
                    org: Option<&str>,
                    expired: bool,
                    by: &(rcgen::Certificate, KeyPair)| {
            let key = KeyPair::generate().unwrap();
            let mut p =
                CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, cn);
            if let Some(o) = org {
                dn.push(DnType::OrganizationName, o);
            }
            p.distinguished_name = dn;
            if expired {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let cert = p.signed_by(&key, &by.0, &by.1).unwrap();
            std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
            write_private(&dir.join(format!("{name}.key")), &key.serialize_pem());
        };
        leaf(
            "server",
            &["localhost", "127.0.0.1", server],
            "md1",
            None,
            false,
            issuer,
        );
        leaf(
            "expired",
            &["localhost", "127.0.0.1"],
            "md1",
            None,
            true,
            issuer,
        );
        leaf(
            "elsewhere",
            &["md.elsewhere.test"],
            "md2",
            None,
            false,
            issuer,
        );
        leaf("dora", &[], "dora", Some("Desk"), false, issuer);
        leaf("stranger", &[], "dora", Some("Desk"), false, other_issuer);
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn users_file(dir: &Path) -> PathBuf {
    use sha2::Digest;
    let p = dir.join("users.toml");
    std::fs::write(
        &p,
        format!(
            "[users.bob]\ntoken_sha256 = \"{}\"\nitems = [\"*\"]\n\n\
             [users.dora]\ncert_subject = \"CN=dora,O=Desk\"\nitems = [\"*\"]\n",
            hex::encode(sha2::Sha256::digest(b"bob-token"))
        ),
    )
    .unwrap();
    p
}

struct Running {
    addr: String,
    backbone: String,
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Running {
    fn said(&self, what: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(what))
    }

    /// Waits (up to 10 s) until the distributor logged a line containing `what`.
    fn wait_said(&self, what: &str) {
        let end = Instant::now() + Duration::from_secs(10);
        while !self.said(what) {
            assert!(
                Instant::now() < end,
                "the distributor never said {what:?}; it said {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn start(pki: &Pki, listen: &str, overrides: SettingsOverrides, tag: u32) -> Running {
    let pid = std::process::id();
    let group = format!("239.255.97.{}", 1 + (pid + tag) % 250);
    let port = 20_000 + ((pid * 7 + tag * 2) % 20_000);
    let backbone = format!("mcast://{group}:{port}");
    let users = users_file(&pki.dir);
    let settings = DistributorSettings::resolve(&SettingsOverrides {
        listen: Some(listen.parse().unwrap()),
        users: Some(users.clone()),
        backbone: Some(backbone.clone()),
        ..overrides
    })
    .unwrap();
    let mut server = DistributorServer::bind(
        &peregrine_market_data::Context::new(),
        settings,
        Users::load(&users).unwrap(),
    )
    .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    {
        let lines = lines.clone();
        server.set_output(Box::new(move |l: &Line| {
            lines.lock().unwrap().push(l.text.clone())
        }));
    }
    server.say_started(0);
    let addr = server.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || server.run(&|| stop.load(Ordering::Relaxed)).unwrap())
    };
    Running {
        addr,
        backbone,
        lines,
        stop,
        thread: Some(thread),
    }
}

fn tls_overrides(pki: &Pki, cert: &str) -> SettingsOverrides {
    SettingsOverrides {
        tls_cert: Some(pki.path(&format!("{cert}.crt"))),
        tls_key: Some(pki.path(&format!("{cert}.key"))),
        tls_client_ca: Some(pki.path("ca.crt")),
        ..Default::default()
    }
}

fn client_tls(pki: &Pki, ca: &str, identity: Option<&str>) -> ClientTls {
    let cert = identity.map(|n| (pki.path(&format!("{n}.crt")), pki.path(&format!("{n}.key"))));
    ClientTls::load(
        &pki.path(ca),
        cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
    )
    .unwrap()
}

/// Polls `cons` until `done` says so (10 s at most), handing it each event.
fn poll_until(cons: &mut Consumer, mut on: impl FnMut(&Event<'_>) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    let mut done = false;
    while !done {
        assert!(Instant::now() < end, "timed out");
        cons.poll(Duration::from_millis(50), &mut |e| done |= on(&e))
            .unwrap();
    }
}

/// Market data over TLS: bob (token) over TLS receives an item's image and 2,000 updates in
/// order with exactly the published prices; dora logs in by her client certificate alone.
#[test]
fn market_data_flows_over_tls_and_a_user_logs_in_by_its_certificate() {
    let pki = Pki::new("flow");
    let d = start(&pki, "127.0.0.1:0", tls_overrides(&pki, "server"), 1);
    assert!(
        d.said("clients over TLS (certificate") && d.said("client certificates checked against"),
        "{:?}",
        d.lines.lock().unwrap()
    );
    let mut bob = Consumer::connect_with(
        &[d.addr.as_str()],
        "bob",
        b"bob-token",
        ConnectOptions::tls(client_tls(&pki, "ca.crt", None)),
    )
    .unwrap();
    bob.open("FEED1", &["AAA.O"]).unwrap();
    // The request is answered (not found yet) before the provider starts.
    poll_until(&mut bob, |e| {
        matches!(e, Event::Status { item: "AAA.O", .. })
    });

    let ctx = peregrine_market_data::Context::new();
    let mut prov = Provider::open(&ctx, "FEED1", &d.backbone).unwrap();
    let bid = bob.dictionary().by_name("BID").unwrap().fid;
    let send = |prov: &mut Provider,
                f: &mut dyn FnMut(&mut Provider) -> Result<(), ProviderError>| {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            match f(prov) {
                Ok(()) => return,
                Err(ProviderError::BackPressured) if Instant::now() < end => {
                    prov.do_work();
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    send(&mut prov, &mut |p| {
        p.refresh_named("AAA.O", &[("BID", Value::price(10_000, -2))])
    });
    const UPDATES: i64 = 2000;
    let mut got: Vec<i64> = Vec::new();
    let mut sent = 0;
    let end = Instant::now() + Duration::from_secs(20);
    while got.len() < UPDATES as usize + 1 {
        assert!(
            Instant::now() < end,
            "received {} of {}",
            got.len(),
            UPDATES + 1
        );
        if sent < UPDATES {
            sent += 1;
            let v = 10_000 + sent;
            send(&mut prov, &mut |p| {
                p.update_named("AAA.O", &[("BID", Value::price(v, -2))])
            });
        }
        prov.do_work();
        bob.poll(
            Duration::from_millis(if sent < UPDATES { 0 } else { 20 }),
            &mut |e| match e {
                Event::Refresh {
                    item: "AAA.O",
                    fields,
                    ..
                }
                | Event::Update {
                    item: "AAA.O",
                    fields,
                    ..
                } => {
                    if let Some(Value::Price(p)) = fields.get(bid) {
                        got.push(p.mantissa);
                    }
                }
                Event::Gap { .. } | Event::Disconnected { .. } => panic!("{e:?}"),
                _ => {}
            },
        )
        .unwrap();
    }
    // The image (whichever updates it already held), then every later update in order.
    let first = got[0];
    assert_eq!(got, (first..=10_000 + UPDATES).collect::<Vec<_>>());

    // dora: her certificate, no token of her own (the LOGIN carries a placeholder).
    let mut dora = Consumer::connect_with(
        &[d.addr.as_str()],
        "dora",
        b"-",
        ConnectOptions::tls(client_tls(&pki, "ca.crt", Some("dora"))),
    )
    .unwrap();
    dora.open("FEED1", &["AAA.O"]).unwrap();
    poll_until(&mut dora, |e| {
        matches!(e, Event::Refresh { item: "AAA.O", .. })
    });
    // Without her certificate, dora is refused.
    let e = Consumer::connect_with(
        &[d.addr.as_str()],
        "dora",
        b"-",
        ConnectOptions::tls(client_tls(&pki, "ca.crt", None)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown user or wrong token"), "{e}");
}

fn refused(d: &Running, tls: ClientTls) -> String {
    match Consumer::connect_with(
        &[d.addr.as_str()],
        "bob",
        b"bob-token",
        ConnectOptions::tls(tls),
    ) {
        Ok(_) => panic!("connected"),
        Err(e @ ConsumerError::NoDistributor { .. }) => e.to_string(),
        Err(e) => panic!("{e}"),
    }
}

/// Each failed handshake is refused with its reason, on the consumer's side (its error) and
/// on the distributor's (its log line).
#[test]
fn wrong_ca_expired_certificate_other_name_and_foreign_client_certificate_are_refused() {
    let pki = Pki::new("refused");
    let d = start(&pki, "127.0.0.1:0", tls_overrides(&pki, "server"), 2);
    // The consumer trusts another CA.
    let e = refused(&d, client_tls(&pki, "other-ca.crt", None));
    assert!(
        e.contains("TLS: invalid peer certificate: UnknownIssuer"),
        "{e}"
    );
    d.wait_said("refused: TLS:");
    // A client certificate from another CA.
    let e = refused(&d, client_tls(&pki, "ca.crt", Some("stranger")));
    assert!(e.contains("TLS"), "{e}");
    d.wait_said("invalid peer certificate: UnknownIssuer");
    drop(d);

    let d = start(&pki, "127.0.0.1:0", tls_overrides(&pki, "expired"), 3);
    let e = refused(&d, client_tls(&pki, "ca.crt", None));
    assert!(
        e.contains("invalid peer certificate: certificate expired"),
        "{e}"
    );
    drop(d);

    let d = start(&pki, "127.0.0.1:0", tls_overrides(&pki, "elsewhere"), 4);
    let e = refused(&d, client_tls(&pki, "ca.crt", None));
    assert!(e.contains("certificate not valid for name"), "{e}");
    // Checked against the name it carries, it is accepted.
    let tls = client_tls(&pki, "ca.crt", None)
        .with_server_name("md.elsewhere.test")
        .unwrap();
    Consumer::connect_with(
        &[d.addr.as_str()],
        "bob",
        b"bob-token",
        ConnectOptions::tls(tls),
    )
    .unwrap();
}

/// A private key others can read is refused with the fix; so is a certificate file that holds
/// none, naming it.
#[test]
fn key_files_are_checked_like_backbone_keys() {
    let pki = Pki::new("files");
    let key = pki.path("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = ServerTls::load(&pki.path("server.crt"), &key, None).unwrap_err();
    assert!(e.to_string().contains("chmod 600"), "{e}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = ServerTls::load(&pki.path("users.toml.missing"), &key, None).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");
    let e = ServerTls::load(&key, &key, None).unwrap_err();
    assert!(e.to_string().contains("holds no certificate"), "{e}");
    // A key that is not the certificate's.
    let e = ServerTls::load(&pki.path("server.crt"), &pki.path("dora.key"), None).unwrap_err();
    assert!(
        e.to_string().contains("the key is not this certificate's"),
        "{e}"
    );
}

/// `openssl s_client`, a TLS client written independently, completes a handshake with the
/// distributor and verifies its certificate; asked for TLS 1.1 it is refused.
#[test]
fn openssl_s_client_handshakes_and_tls_1_1_is_refused() {
    let Some(openssl) = peregrine_testkit::program("openssl", "apt-get install openssl") else {
        return;
    };
    let pki = Pki::new("openssl");
    let d = start(&pki, "127.0.0.1:0", tls_overrides(&pki, "server"), 5);
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(&openssl)
            .args(["s_client", "-connect", &d.addr, "-CAfile"])
            .arg(pki.path("ca.crt"))
            .args(["-verify_return_error", "-servername", "localhost"])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, text) = run(&[]);
    assert!(ok, "{text}");
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(text.contains("TLSv1.3"), "{text}");
    let (ok, text) = run(&["-tls1_2"]);
    assert!(ok && text.contains("TLSv1.2"), "{text}");
    let (ok, text) = run(&["-tls1_1"]);
    assert!(!ok, "TLS 1.1 was accepted: {text}");
    // rustls answers an offer of nothing newer than TLS 1.1 with a handshake_failure alert.
    assert!(
        text.contains("alert handshake failure") && text.contains("Cipher is (NONE)"),
        "{text}"
    );
    d.wait_said("refused: TLS: peer is incompatible");
}

/// Removes the namespace and the veth pair a test made, whatever happens.
struct Netns {
    name: String,
    host_if: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 29, item 4: a client on another host (a network namespace this test makes, joined to
/// this one by a veth pair) is refused a plaintext token login; over TLS it logs in; with
/// `allow_plaintext_logins` it logs in over plaintext too.
#[test]
fn a_plaintext_login_from_another_host_is_refused_unless_allowed() {
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let pid = std::process::id();
    let net = pid % 250;
    let ns = Netns {
        name: format!("pgtls{pid}"),
        host_if: format!("pgt{}a", pid % 100_000),
    };
    let peer_if = format!("pgt{}b", pid % 100_000);
    let host_ip = format!("10.201.{net}.1");
    let peer_ip = format!("10.201.{net}.2");
    ip(&["netns", "add", &ns.name]);
    ip(&[
        "link",
        "add",
        &ns.host_if,
        "type",
        "veth",
        "peer",
        "name",
        &peer_if,
    ]);
    ip(&["link", "set", &peer_if, "netns", &ns.name]);
    ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &ns.host_if]);
    ip(&["link", "set", &ns.host_if, "up"]);
    ip(&[
        "netns",
        "exec",
        &ns.name,
        "ip",
        "addr",
        "add",
        &format!("{peer_ip}/30"),
        "dev",
        &peer_if,
    ]);
    ip(&[
        "netns", "exec", &ns.name, "ip", "link", "set", &peer_if, "up",
    ]);
    ip(&["netns", "exec", &ns.name, "ip", "link", "set", "lo", "up"]);

    let pki = Pki::with_server_name("netns", &host_ip);
    let listen = format!("{host_ip}:0");
    let plain = start(&pki, &listen, SettingsOverrides::default(), 6);
    let tls = start(&pki, &listen, tls_overrides(&pki, "server"), 7);
    let allowed = start(
        &pki,
        &listen,
        SettingsOverrides {
            allow_plaintext_logins: true,
            ..Default::default()
        },
        8,
    );
    assert!(plain.said("logins from loopback only"));
    assert!(allowed.said("WARNING: plaintext logins from other hosts ALLOWED"));
    // The consumers run on a thread that moved into the namespace: their address is
    // 10.201.N.2, another host's as the distributor sees it.
    let (plain_addr, tls_addr, allowed_addr) =
        (plain.addr.clone(), tls.addr.clone(), allowed.addr.clone());
    let ca = client_tls(&pki, "ca.crt", None);
    let results = std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/pgtls{pid}")).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&f),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        let login = |addr: &str, options: ConnectOptions| {
            Consumer::connect_with(&[addr], "bob", b"bob-token", options).map(|_| ())
        };
        (
            login(&plain_addr, ConnectOptions::plain()),
            login(&tls_addr, ConnectOptions::tls(ca)),
            login(&allowed_addr, ConnectOptions::plain()),
        )
    })
    .join()
    .unwrap();
    let e = results.0.unwrap_err().to_string();
    assert!(
        e.contains("a login over plaintext from a non-loopback address is refused"),
        "{e}"
    );
    plain.wait_said(&format!("from {peer_ip} refused"));
    results.1.unwrap();
    results.2.unwrap();
    tls.wait_said(&format!("bob logged in from {peer_ip}"));
}

/// The WebSocket endpoint speaks TLS with the listener's certificate: a `wss://` client checks
/// it against the CA, logs in and gets its answer; a plaintext `ws://` upgrade to it is refused
/// (the TLS handshake fails), so nothing crosses in the clear.
#[test]
fn the_websocket_endpoint_speaks_tls_with_the_listeners_certificate() {
    let pki = Pki::new("wss");
    let d = start(
        &pki,
        "127.0.0.1:0",
        SettingsOverrides {
            websocket: Some("127.0.0.1:0".parse().unwrap()),
            ..tls_overrides(&pki, "server")
        },
        7,
    );
    let line = d
        .lines
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("WebSocket JSON and the quote board on "))
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", d.lines.lock().unwrap()));
    let ws_addr = line
        .split("quote board on ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let tcp = std::net::TcpStream::connect(&ws_addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let session = client_tls(&pki, "ca.crt", None)
        .connect("127.0.0.1")
        .unwrap();
    let tls = rustls::StreamOwned::new(session, tcp);
    let (mut ws, response) =
        tungstenite::client(format!("wss://{ws_addr}/ws"), tls).expect("the wss upgrade");
    assert_eq!(response.status().as_u16(), 101);
    ws.send(tungstenite::Message::text(
        r#"{"ID":1,"Domain":"Login","Key":{"Name":"bob","Elements":{"AuthenticationToken":"bob-token"}}}"#,
    ))
    .unwrap();
    let answer = loop {
        match ws.read().unwrap() {
            tungstenite::Message::Text(t) => break t.to_string(),
            _ => continue,
        }
    };
    assert!(
        answer.contains("\"Domain\":\"Login\"") && answer.contains("\"Data\":\"Ok\""),
        "{answer}"
    );
    // A plaintext upgrade to the TLS port: no answer in the clear.
    let mut plain = std::net::TcpStream::connect(&ws_addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    use std::io::{Read, Write};
    plain
        .write_all(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("101 Switching"),
        "a plaintext upgrade is never answered"
    );
}
