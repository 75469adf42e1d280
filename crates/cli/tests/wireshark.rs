//! The Wireshark dissector (`tools/wireshark/peregrine.lua`) run by `tshark`: every golden
//! vector of docs/golden/frames.json in a UDP datagram of its own, every field tshark prints
//! compared with the vector's; every invalid vector rejected; and a capture of real runs over
//! loopback (UDP, multicast and TCP) decoded with nothing flagged. Skips visibly without tshark
//! (and, for the capture, without root); `.ci/run` installs it.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_peregrine");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dissector() -> String {
    format!(
        "lua_script:{}",
        repo().join("tools/wireshark/peregrine.lua").display()
    )
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pg-wireshark-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A pcap file of raw IPv4 packets (link type 101), one UDP datagram per payload, each from
/// its own port pair (so each goes through the heuristic on its own).
fn write_pcap(path: &Path, payloads: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&101u32.to_le_bytes());
    for (i, p) in payloads.iter().enumerate() {
        let mut udp = Vec::new();
        udp.extend_from_slice(&(40_000 + i as u16).to_be_bytes());
        udp.extend_from_slice(&(50_000 + i as u16).to_be_bytes());
        udp.extend_from_slice(&(8 + p.len() as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(p);
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&(20 + udp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&(i as u16).to_be_bytes());
        ip.extend_from_slice(&[0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        ip.extend_from_slice(&udp);
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&ip);
    }
    std::fs::write(path, out).unwrap();
}

/// The fields tshark reads, in column order.
const FIELDS: [&str; 35] = [
    "frame.number",
    "peregrine.frame_type",
    "peregrine.frame_length",
    "peregrine.session_id",
    "peregrine.stream_id",
    "peregrine.sequence",
    "peregrine.message_length",
    "peregrine.flags.begin",
    "peregrine.flags.end",
    "peregrine.flags.urgent",
    "peregrine.flags.retransmit",
    "peregrine.payload",
    "peregrine.next_sequence",
    "peregrine.oldest_retained",
    "peregrine.receiver_id",
    "peregrine.range_count",
    "peregrine.nak.start",
    "peregrine.nak.count",
    "peregrine.ttl_ms",
    "peregrine.topic",
    "peregrine.uri",
    "peregrine.query_id",
    "peregrine.pattern_kind",
    "peregrine.pattern",
    "peregrine.final_next_sequence",
    "peregrine.window",
    "peregrine.flags.join",
    "peregrine.flags.leave",
    "peregrine.cookie",
    "peregrine.tag",
    "peregrine.error",
    "tcp.stream",
    "udp.dstport",
    "peregrine.magic",
    "peregrine.version",
];

/// Runs tshark over `pcap` and returns one map per packet: field -> every occurrence.
fn dissect(
    tshark: &Path,
    pcap: &Path,
) -> Vec<std::collections::HashMap<&'static str, Vec<String>>> {
    let mut cmd = Command::new(tshark);
    cmd.args(["-X", &dissector(), "-n", "-r"])
        .arg(pcap)
        .args(["-T", "fields", "-E", "occurrence=a"])
        .args(["-E", "separator=\u{1e}", "-E", "aggregator=\u{1f}"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let o = cmd.output().expect("tshark runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tshark failed: {err}");
    assert!(!err.contains("Lua Error"), "the dissector raised: {err}");
    let text = String::from_utf8(o.stdout).expect("tshark prints UTF-8");
    assert!(!text.contains("Lua Error"), "the dissector raised: {text}");
    text.lines()
        .map(|l| {
            FIELDS
                .iter()
                .zip(l.split('\u{1e}'))
                .map(|(k, v)| {
                    let occ = if v.is_empty() {
                        Vec::new()
                    } else {
                        let bytes = matches!(
                            *k,
                            "peregrine.payload" | "peregrine.cookie" | "peregrine.tag"
                        );
                        v.split('\u{1f}')
                            .map(|s| {
                                if bytes {
                                    s.replace(':', "")
                                } else {
                                    s.to_string()
                                }
                            })
                            .collect()
                    };
                    (*k, occ)
                })
                .collect()
        })
        .collect()
}

/// A golden integer (a JSON number, or a decimal string at 2^53 and above) as text.
fn int(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.as_u64().expect("an integer").to_string(),
    }
}

fn flag(names: &Value, name: &str) -> String {
    let set = names
        .as_array()
        .is_some_and(|a| a.iter().any(|n| n == name));
    if set { "1" } else { "0" }.to_string()
}

#[test]
fn tshark_decodes_every_golden_vector_field_by_field_and_rejects_the_invalid_ones() {
    let Some(tshark) = peregrine_testkit::program("tshark", "apt-get install tshark") else {
        return;
    };
    let golden: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/golden/frames.json")).unwrap(),
    )
    .unwrap();
    let dir = temp("golden");
    let pcap = dir.join("golden.pcap");
    let payloads: Vec<Vec<u8>> = golden
        .iter()
        .map(|v| hex::decode(v["hex"].as_str().unwrap()).unwrap())
        .collect();
    write_pcap(&pcap, &payloads);
    let packets = dissect(&tshark, &pcap);
    assert_eq!(packets.len(), golden.len());
    let mut compared = 0;
    for (v, p) in golden.iter().zip(&packets) {
        let name = v["name"].as_str().unwrap();
        let one = |field: &str| -> String {
            let occ = &p[field];
            assert!(occ.len() <= 1, "{name}: {field} appears {occ:?}");
            occ.first().cloned().unwrap_or_default()
        };
        if !v["valid"].as_bool().unwrap() {
            // Rejected: either not taken for Peregrine at all (a header that is not its own),
            // or taken and flagged with the rule it breaks.
            let claimed = !p["peregrine.magic"].is_empty() || !p["peregrine.error"].is_empty();
            let header_errors = [
                "Truncated",
                "BadMagic",
                "UnsupportedVersion",
                "UnknownFrameType",
                "BadLength",
            ];
            if claimed {
                assert!(
                    !p["peregrine.error"].is_empty(),
                    "{name} ({}) was decoded with no error: {p:?}",
                    v["error"]
                );
            } else {
                assert!(
                    header_errors.contains(&v["error"].as_str().unwrap()),
                    "{name} ({}) was not recognised as Peregrine",
                    v["error"]
                );
            }
            continue;
        }
        let fields = &v["fields"];
        let mut want: Vec<(&str, String)> = vec![
            ("peregrine.session_id", int(&fields["session_id"])),
            ("peregrine.frame_length", int(&fields["frame_length"])),
        ];
        let ty = v["frame_type"].as_str().unwrap();
        let each = |keys: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            keys.iter()
                .map(|(field, key)| (*field, int(&fields[*key])))
                .collect()
        };
        match ty {
            "DATA" => {
                want.extend(each(&[
                    ("peregrine.stream_id", "stream_id"),
                    ("peregrine.sequence", "sequence"),
                    ("peregrine.message_length", "message_length"),
                ]));
                for (field, flag_name) in [
                    ("peregrine.flags.begin", "BEGIN"),
                    ("peregrine.flags.end", "END"),
                    ("peregrine.flags.urgent", "URGENT"),
                    ("peregrine.flags.retransmit", "RETRANSMIT"),
                ] {
                    want.push((field, flag(&fields["flags"], flag_name)));
                }
                let payload = match (&fields["payload"], &fields["payload_hex"]) {
                    (Value::String(t), _) => hex::encode(t.as_bytes()),
                    (_, Value::String(h)) => h.clone(),
                    _ => String::new(),
                };
                want.push(("peregrine.payload", payload));
            }
            "PAD" => want.extend(each(&[("peregrine.sequence", "sequence")])),
            "HEARTBEAT" => want.extend(each(&[
                ("peregrine.stream_id", "stream_id"),
                ("peregrine.next_sequence", "next_sequence"),
                ("peregrine.oldest_retained", "oldest_retained"),
            ])),
            "NAK" => {
                want.extend(each(&[
                    ("peregrine.stream_id", "stream_id"),
                    ("peregrine.receiver_id", "receiver_id"),
                ]));
                let ranges = fields["ranges"].as_array().unwrap();
                assert_eq!(
                    p["peregrine.nak.start"],
                    ranges.iter().map(|r| int(&r["start"])).collect::<Vec<_>>(),
                    "{name}"
                );
                assert_eq!(
                    p["peregrine.nak.count"],
                    ranges.iter().map(|r| int(&r["count"])).collect::<Vec<_>>(),
                    "{name}"
                );
            }
            "ADVERTISE" => {
                want.extend(each(&[
                    ("peregrine.stream_id", "stream_id"),
                    ("peregrine.ttl_ms", "ttl_ms"),
                ]));
                want.push(("peregrine.topic", fields["topic"].as_str().unwrap().into()));
                want.push(("peregrine.uri", fields["uri"].as_str().unwrap().into()));
            }
            "QUERY" => {
                want.extend(each(&[("peregrine.query_id", "query_id")]));
                let kind = match fields["pattern_kind"].as_str().unwrap() {
                    "exact" => "0",
                    "glob" => "1",
                    "regex" => "2",
                    other => panic!("{name}: pattern kind {other}"),
                };
                want.push(("peregrine.pattern_kind", kind.into()));
                want.push((
                    "peregrine.pattern",
                    fields["pattern"].as_str().unwrap().into(),
                ));
            }
            "BYE" => want.extend(each(&[
                ("peregrine.stream_id", "stream_id"),
                ("peregrine.final_next_sequence", "final_next_sequence"),
            ])),
            "STATUS" => {
                want.extend(each(&[
                    ("peregrine.stream_id", "stream_id"),
                    ("peregrine.receiver_id", "receiver_id"),
                    ("peregrine.next_sequence", "next_sequence"),
                    ("peregrine.window", "window"),
                ]));
                want.push(("peregrine.flags.join", flag(&fields["flags"], "JOIN")));
                want.push(("peregrine.flags.leave", flag(&fields["flags"], "LEAVE")));
            }
            "COOKIE" => want.push((
                "peregrine.cookie",
                fields["cookie_hex"].as_str().unwrap().into(),
            )),
            "AUTH" => want.push(("peregrine.tag", fields["tag_hex"].as_str().unwrap().into())),
            other => panic!("{name}: frame type {other} has no check here"),
        }
        for (field, value) in want {
            assert_eq!(one(field), value, "{name}: {field}");
        }
        assert!(
            p["peregrine.error"].is_empty(),
            "{name}: flagged {:?}",
            p["peregrine.error"]
        );
        compared += 1;
    }
    let valid = golden.iter().filter(|v| v["valid"] == true).count();
    assert_eq!(compared, valid);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A network namespace of the test's own (its loopback only), deleted when dropped, so the
/// capture holds this test's traffic and nothing another test sends (some send malformed
/// frames on purpose).
struct Namespace(String);

impl Namespace {
    fn new() -> Namespace {
        let name = format!("pgws-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ip(&["-n", &name, "route", "add", "224.0.0.0/4", "dev", "lo"]);
        Namespace(name)
    }

    /// `program args...` inside the namespace.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(program);
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Captures real runs over loopback (UDP unicast, multicast, TCP) with tshark, in a network
/// namespace of the test's own, and decodes them: DATA frames in order per stream, the control
/// frames of each transport, nothing flagged.
#[test]
fn tshark_decodes_a_captured_run_over_udp_multicast_and_tcp() {
    let Some(tshark) = peregrine_testkit::program("tshark", "apt-get install tshark") else {
        return;
    };
    if !peregrine_testkit::root_with_netns() {
        return;
    }
    let ns = Namespace::new();
    let dir = temp("capture");
    let pcap = dir.join("run.pcapng");
    let mut capture = ns
        .command(&tshark)
        .args(["-i", "lo", "-q", "-w"])
        .arg(&pcap)
        .args(["-f", "udp or tcp"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tshark starts");
    // tshark says "Capturing on 'Loopback: lo'" once it captures.
    let mut err = capture.stderr.take().unwrap();
    let started = std::thread::spawn(move || {
        use std::io::Read;
        let mut seen = String::new();
        let mut buf = [0u8; 256];
        while !seen.contains("Capturing on") {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        seen
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = started.join().unwrap();
    assert!(
        said.contains("Capturing on"),
        "tshark did not start: {said}"
    );
    for transport in ["udp", "mcast", "tcp"] {
        let o = ns
            .command(BIN)
            .args(["bench", "throughput", "--transport", transport])
            .args(["--count", "3000", "--size", "100", "--json", "--out"])
            .arg(dir.join(format!("results-{transport}")))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{transport}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    // `ip netns exec` enters the namespace and executes tshark in its own process.
    peregrine_testkit::signal(capture.id(), rustix::process::Signal::INT).unwrap();
    capture.wait().unwrap();
    drop(ns);

    let packets = dissect(&tshark, &pcap);
    let mut data_udp = std::collections::BTreeMap::<(String, String), Vec<u64>>::new();
    let mut data_tcp = std::collections::BTreeMap::<(String, String), Vec<u64>>::new();
    let mut types = std::collections::BTreeSet::new();
    for p in &packets {
        assert!(p["peregrine.error"].is_empty(), "flagged: {p:?}");
        let on_tcp = !p["tcp.stream"].is_empty();
        for (i, ty) in p["peregrine.frame_type"].iter().enumerate() {
            types.insert((on_tcp, ty.clone()));
            let _ = i;
        }
        // DATA and PAD frames each carry one session id, stream id and sequence, so in a
        // packet of those only (a GSO send's datagrams are filled up with PAD) the fields line
        // up frame by frame.
        let tys = &p["peregrine.frame_type"];
        if !tys.is_empty() && tys.iter().all(|t| t == "0x01" || t == "0x02") {
            for (k, ty) in tys.iter().enumerate() {
                if ty != "0x01" {
                    continue;
                }
                let key = (
                    p["peregrine.session_id"][k].clone(),
                    p["peregrine.stream_id"][k].clone(),
                );
                let seq: u64 = p["peregrine.sequence"][k].parse().unwrap();
                let map = if on_tcp { &mut data_tcp } else { &mut data_udp };
                map.entry(key).or_default().push(seq);
            }
        }
    }
    for (on_tcp, ty) in [
        (false, "0x01"),
        (false, "0x03"),
        (false, "0x08"),
        (true, "0x01"),
    ] {
        assert!(
            types.contains(&(on_tcp, ty.to_string())),
            "no frame of type {ty} {} in the capture: {types:?}",
            if on_tcp { "on TCP" } else { "on UDP" }
        );
    }
    // Every stream's DATA frames: each sequence number from 0 up, in order (a retransmission
    // may repeat one), across segment boundaries on TCP.
    for (what, map) in [("udp", &data_udp), ("tcp", &data_tcp)] {
        let longest = map.values().map(Vec::len).max().unwrap_or(0);
        assert!(
            longest >= 3000,
            "{what}: the longest stream has {longest} DATA frames"
        );
        for (key, seqs) in map {
            let mut expect = 0;
            for &s in seqs {
                assert!(s <= expect, "{what} {key:?}: {s} after {}", expect - 1);
                if s == expect {
                    expect += 1;
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
