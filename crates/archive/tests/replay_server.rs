//! Replay over TCP: a server on a folder of recordings, clients asking for a topic from its
//! start or a sequence, an unknown topic and a request that is not one answered with an
//! error frame, the server serving on after them.

use peregrine_archive::format::replay::From;
use peregrine_archive::{
    Durability, RecordingWriter, RemoteEntry, ReplayClient, ReplayServer, Retention, StreamMeta,
    WriterOptions,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const T0: u64 = 1_800_000_000_000_000_000;

fn opts() -> WriterOptions {
    WriterOptions {
        segment_len: 64 << 10,
        durability: Durability::None,
        buffer_bytes: 4096,
        retention: Retention::default(),
    }
}

fn message(session: u32, i: u64) -> Vec<u8> {
    format!("{session}:{i}:{}", "x".repeat((i % 300) as usize)).into_bytes()
}

/// Records `n` messages of `topic` from `session` under `dir` as the recorder lays them out.
fn record(dir: &Path, topic: &str, session: u32, n: u64) {
    let meta = StreamMeta {
        topic: topic.into(),
        session_id: session,
        stream_id: 3,
    };
    let d = peregrine_archive::folder::stream_dir(dir, topic, session);
    let mut w = RecordingWriter::open(&d, &meta, opts(), T0).unwrap();
    for i in 0..n {
        // Session 2 starts later: it is replayed second.
        let t = T0 + u64::from(session) * 1_000_000_000 + i;
        w.append(i, t, &message(session, i)).unwrap();
    }
    w.close().unwrap();
}

/// A recording as a client read it: its session and its messages (sequence, bytes).
type Recording = (u32, Vec<(u64, Vec<u8>)>);

/// Everything a client reads: the recordings, and the end's count.
fn read_all(c: &mut ReplayClient) -> (Vec<Recording>, Option<u64>) {
    let (mut recs, mut end) = (Vec::<Recording>::new(), None);
    while let Some(e) = c.next_entry() {
        match e.unwrap() {
            RemoteEntry::Recording(m) => recs.push((m.session_id, Vec::new())),
            RemoteEntry::Message {
                sequence, payload, ..
            } => recs
                .last_mut()
                .unwrap()
                .1
                .push((sequence, payload.to_vec())),
            RemoteEntry::End { messages } => end = Some(messages),
        }
    }
    (recs, end)
}

#[test]
fn a_topics_recordings_are_replayed_over_tcp_and_bad_requests_get_an_error_frame() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("replay-server-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    record(&dir, "orders.eu", 1, 1500);
    record(&dir, "orders.eu", 2, 700);
    record(&dir, "other", 9, 10);
    let server = ReplayServer::start(&dir, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().to_string();

    let want = |session: u32, from: u64, n: u64| -> Vec<(u64, Vec<u8>)> {
        (from..n).map(|i| (i, message(session, i))).collect()
    };
    let mut c = ReplayClient::connect(&addr, "orders.eu", From::Start).unwrap();
    let (recs, end) = read_all(&mut c);
    assert_eq!(recs, vec![(1, want(1, 0, 1500)), (2, want(2, 0, 700))]);
    assert_eq!(end, Some(2200));

    let mut c = ReplayClient::connect(&addr, "orders.eu", From::Sequence(600)).unwrap();
    let (recs, end) = read_all(&mut c);
    assert_eq!(recs, vec![(1, want(1, 600, 1500)), (2, want(2, 600, 700))]);
    assert_eq!(end, Some(1000));

    let mut c = ReplayClient::connect(&addr, "nothing.here", From::Start).unwrap();
    let e = c.next_entry().unwrap().unwrap_err();
    assert!(
        e.to_string().contains("no recording of topic nothing.here"),
        "{e}"
    );
    assert!(c.next_entry().is_none());

    // Not a request: an error frame, and the connection closed.
    let mut raw = std::net::TcpStream::connect(&addr).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    assert_eq!(&reply[..4], b"PGRX");
    let text = String::from_utf8_lossy(&reply[8..]);
    assert!(text.starts_with("a bad request: "), "{text}");

    // A list of recorders: the first that answers (a port nothing listens on first).
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut c =
        ReplayClient::connect_first(&[dead.clone(), addr.clone()], "orders.eu", From::Start)
            .unwrap();
    assert_eq!(read_all(&mut c).1, Some(2200));
    let e = ReplayClient::connect_first(std::slice::from_ref(&dead), "orders.eu", From::Start)
        .unwrap_err();
    assert!(e.to_string().contains("no recorder answered"), "{e}");
    assert!(e.to_string().contains(&dead), "{e}");

    // Still serving.
    let mut c = ReplayClient::connect(&addr, "other", From::Start).unwrap();
    let (recs, end) = read_all(&mut c);
    assert_eq!((recs.len(), end), (1, Some(10)));
    drop(server);
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "the server stopped"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
