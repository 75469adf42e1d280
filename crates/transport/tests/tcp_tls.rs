//! `tcp://` over TLS (issue 29, item 2): a publisher with `tls_cert`/`tls_key` and subscribers
//! with `tls_ca` exchange every message in order through a TLS session; a subscriber that
//! trusts another CA, or expects another name, gets nothing and says why; with `tls_ca` on the
//! publisher, a subscriber without a client certificate is refused and one with a certificate
//! of that CA is served. Certificates are made here with rcgen.

use peregrine_transport::net::tcp::{TcpPublisher, TcpSubscriber};
use peregrine_transport::net::NetConfig;
use peregrine_transport::{Message, SubscriberEvent, Uri};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const STREAM: u32 = 77;

/// ca.crt, other.crt (another CA), md.{crt,key} (127.0.0.1), sub.{crt,key} (a client).
fn pki(tag: &str) -> PathBuf {
    use peregrine_testkit::pki::TestCa;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tcp-tls-{tag}-{}", std::process::id()));
    let ca = TestCa::new(&dir, "ca");
    TestCa::new(&dir, "other");
    ca.issue("md", &["127.0.0.1"]);
    ca.issue("sub", &[]);
    dir
}

fn free_port() -> u16 {
    peregrine_testkit::free_port(true)
}

fn cfg(uri: &str) -> NetConfig {
    NetConfig::from_uri(&Uri::parse(uri).unwrap()).unwrap()
}

/// Offers `count` numbered messages and polls until they all arrived or `give_up` passes.
fn exchange(
    p: &mut TcpPublisher,
    s: &mut TcpSubscriber,
    count: u64,
    give_up: Duration,
) -> Vec<u64> {
    let mut got = Vec::new();
    let end = Instant::now() + give_up;
    // Connect first: a TCP subscriber gets what is published after it joined.
    while p.subscriber_count() == 0 || !s.is_connected() {
        if Instant::now() >= end {
            return got;
        }
        p.do_work();
        s.poll(&mut |_m: Message<'_>| {}, usize::MAX);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut next = 0;
    while (got.len() as u64) < count && Instant::now() < end {
        while next < count && p.offer(&next.to_le_bytes()).is_ok() {
            next += 1;
        }
        p.do_work();
        s.poll(
            &mut |m: Message<'_>| got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap())),
            usize::MAX,
        );
    }
    got
}

#[test]
fn a_tls_stream_delivers_everything_in_order() {
    let dir = pki("a_tls_stream");
    let port = free_port();
    let f = |n: &str| dir.join(n).display().to_string();
    let pub_uri = format!(
        "tcp://127.0.0.1:{port}?tls_cert={}&tls_key={}",
        f("md.crt"),
        f("md.key")
    );
    let sub_uri = format!("tcp://127.0.0.1:{port}?tls_ca={}", f("ca.crt"));
    let mut p = TcpPublisher::create(&cfg(&pub_uri), &pub_uri, 5, STREAM).unwrap();
    let mut s = TcpSubscriber::new(&cfg(&sub_uri), &sub_uri, STREAM).unwrap();
    let got = exchange(&mut p, &mut s, 20_000, Duration::from_secs(20));
    assert_eq!(got, (0..20_000).collect::<Vec<u64>>());
    assert_eq!((p.tls_refused, s.tls_refused), (0, 0));
}

#[test]
fn another_ca_another_name_or_a_missing_client_certificate_is_refused_with_the_reason() {
    let dir = pki("another_ca_a");
    let f = |n: &str| dir.join(n).display().to_string();
    let cases = [
        // (publisher's extra parameters, subscriber's, the subscriber's error)
        ("", format!("tls_ca={}", f("other.crt")), "UnknownIssuer"),
        (
            "",
            format!("tls_ca={}&tls_server_name=md.elsewhere.test", f("ca.crt")),
            "not valid for name",
        ),
        (
            &*format!("&tls_ca={}", f("ca.crt")),
            format!("tls_ca={}", f("ca.crt")),
            "TLS",
        ),
    ];
    for (pub_extra, sub_params, want) in cases {
        let port = free_port();
        let pub_uri = format!(
            "tcp://127.0.0.1:{port}?tls_cert={}&tls_key={}{pub_extra}",
            f("md.crt"),
            f("md.key")
        );
        let sub_uri = format!("tcp://127.0.0.1:{port}?{sub_params}");
        let mut p = TcpPublisher::create(&cfg(&pub_uri), &pub_uri, 5, STREAM).unwrap();
        let mut s = TcpSubscriber::new(&cfg(&sub_uri), &sub_uri, STREAM).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while s.tls_refused == 0 && p.tls_refused == 0 {
            assert!(Instant::now() < end, "{sub_uri}: no refusal");
            let _ = p.offer(b"12345678");
            p.do_work();
            s.poll(
                &mut |m: Message<'_>| panic!("{sub_uri}: delivered {:?}", m.payload),
                usize::MAX,
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Both sides see it fail; the subscriber keeps the reason.
        let end = Instant::now() + Duration::from_secs(10);
        while s.last_tls_error().is_none() || p.tls_refused == 0 {
            assert!(
                Instant::now() < end,
                "{sub_uri}: {:?} / {}",
                s.last_tls_error(),
                p.tls_refused
            );
            p.do_work();
            s.poll(
                &mut |m: Message<'_>| panic!("{sub_uri}: delivered {:?}", m.payload),
                usize::MAX,
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let e = s.last_tls_error().unwrap().to_string();
        assert!(e.contains(want), "{sub_uri}: {e}");
        // The application is told too, as an event: once for this reason, however many
        // retries fail for it.
        let failed: Vec<String> = std::iter::from_fn(|| s.next_event())
            .filter_map(|ev| match ev {
                SubscriberEvent::AttachFailed { reason } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(failed.len(), 1, "{sub_uri}: {failed:?}");
        assert!(
            failed[0].contains(&e) && failed[0].contains("TLS handshake failed"),
            "{sub_uri}: {failed:?}"
        );
    }
    // With its client certificate, the subscriber of the third case is served.
    let port = free_port();
    let pub_uri = format!(
        "tcp://127.0.0.1:{port}?tls_cert={}&tls_key={}&tls_ca={}",
        f("md.crt"),
        f("md.key"),
        f("ca.crt")
    );
    let sub_uri = format!(
        "tcp://127.0.0.1:{port}?tls_ca={}&tls_cert={}&tls_key={}",
        f("ca.crt"),
        f("sub.crt"),
        f("sub.key")
    );
    let mut p = TcpPublisher::create(&cfg(&pub_uri), &pub_uri, 5, STREAM).unwrap();
    let mut s = TcpSubscriber::new(&cfg(&sub_uri), &sub_uri, STREAM).unwrap();
    let got = exchange(&mut p, &mut s, 1000, Duration::from_secs(20));
    assert_eq!(got, (0..1000).collect::<Vec<u64>>());
}

#[test]
fn bad_tls_parameters_are_refused_naming_the_fix() {
    let dir = pki("bad_tls_para");
    let f = |n: &str| dir.join(n).display().to_string();
    let err = |uri: String| {
        NetConfig::from_uri(&Uri::parse(&uri).unwrap())
            .unwrap_err()
            .to_string()
    };
    assert!(err(format!("tcp://127.0.0.1:1?tls_cert={}", f("md.crt")))
        .contains("tls_cert and tls_key go together"));
    assert!(err("tcp://127.0.0.1:1?tls_server_name=x".into())
        .contains("TLS needs tls_cert and tls_key"));
    assert!(err("tcp://127.0.0.1:1?tls_ca=/nonexistent.crt".into()).contains("cannot read"));
    assert!(err(format!("udp://127.0.0.1:1?tls_ca={}", f("ca.crt"))).contains("tls_ca"));
    let key = dir.join("md.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = err(format!(
        "tcp://127.0.0.1:1?tls_cert={}&tls_key={}",
        f("md.crt"),
        f("md.key")
    ));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(e.contains("chmod 600"), "{e}");
    // A subscriber needs tls_ca.
    let uri = format!(
        "tcp://127.0.0.1:1?tls_cert={}&tls_key={}",
        f("md.crt"),
        f("md.key")
    );
    let e = TcpSubscriber::new(&cfg(&uri), &uri, STREAM)
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs tls_ca"), "{e}");
}
