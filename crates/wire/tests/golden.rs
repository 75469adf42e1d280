//! Checks this crate against `docs/golden/frames.json`, the vectors every Peregrine
//! implementation (and the Wireshark dissector) tests against.
//!
//! - valid vectors: the bytes parse (generic and type-specific decoder agree), every decoded
//!   field equals the JSON, and emitting the parsed form gives back the same bytes;
//! - invalid vectors: both decoders reject the bytes with exactly the error the JSON names.

use peregrine_wire::advertise::{AdvertiseFrame, AdvertiseRepr};
use peregrine_wire::auth::{AuthFrame, AuthRepr, Mac, FLAG_BLAKE3};
use peregrine_wire::bye::{ByeFrame, ByeRepr};
use peregrine_wire::cookie::{CookieFrame, CookieRepr};
use peregrine_wire::data::{DataFrame, DataRepr, PadRepr};
use peregrine_wire::header::{flags, status_flags, Frames};
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use peregrine_wire::nak::{NakFrame, NakRange, NakRanges, NakRepr};
use peregrine_wire::query::{PatternKind, QueryFrame, QueryRepr};
use peregrine_wire::status::{StatusFrame, StatusRepr};
use peregrine_wire::{FrameRepr, FrameType, Header, WireError};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    frame_type: Option<String>,
    hex: String,
    valid: bool,
    #[serde(default)]
    fields: Option<Map<String, Value>>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_field: Option<String>,
    meaning: String,
}

fn load() -> Vec<Vector> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/golden/frames.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn unhex(name: &str, hex: &str) -> Vec<u8> {
    assert!(hex.len() % 2 == 0, "{name}: odd number of hex digits");
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .unwrap_or_else(|_| panic!("{name}: bad hex at {i}"))
        })
        .collect()
}

const TYPE_NAMES: [(&str, FrameType); 10] = [
    ("DATA", FrameType::Data),
    ("PAD", FrameType::Pad),
    ("HEARTBEAT", FrameType::Heartbeat),
    ("NAK", FrameType::Nak),
    ("ADVERTISE", FrameType::Advertise),
    ("QUERY", FrameType::Query),
    ("BYE", FrameType::Bye),
    ("STATUS", FrameType::Status),
    ("COOKIE", FrameType::Cookie),
    ("AUTH", FrameType::Auth),
];

#[test]
fn the_library_names_each_frame_type_as_the_vectors_do() {
    for (name, ty) in TYPE_NAMES {
        assert_eq!(ty.name(), name);
        assert_eq!(FrameType::from_u8(ty as u8), Ok(ty), "{name}");
    }
}

fn frame_type_named(name: &str) -> FrameType {
    TYPE_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown frame_type name {name}"))
        .1
}

/// Reads the `fields` object of one vector, and at the end checks that every key was used, so
/// a misspelt field in the JSON cannot go unchecked.
struct Fields<'v> {
    vector: &'v str,
    map: &'v Map<String, Value>,
    used: BTreeSet<&'static str>,
}

impl<'v> Fields<'v> {
    fn get(&mut self, key: &'static str) -> &'v Value {
        self.used.insert(key);
        self.map
            .get(key)
            .unwrap_or_else(|| panic!("{}: missing field {key}", self.vector))
    }
    fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }
    /// A JSON number, or a decimal string for values above 2^53.
    fn u64(&mut self, key: &'static str) -> u64 {
        let vector = self.vector;
        match self.get(key) {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("{vector}: field {key} is not an unsigned integer"))
    }
    fn u32(&mut self, key: &'static str) -> u32 {
        let v = self.u64(key);
        u32::try_from(v).unwrap_or_else(|_| panic!("{}: {key} = {v} exceeds u32", self.vector))
    }
    fn str(&mut self, key: &'static str) -> &'v str {
        let vector = self.vector;
        self.get(key)
            .as_str()
            .unwrap_or_else(|| panic!("{vector}: field {key} is not a string"))
    }
    /// `payload` (UTF-8 text) or `payload_hex`.
    fn payload(&mut self) -> Vec<u8> {
        if self.has("payload_hex") {
            let vector = self.vector;
            unhex(vector, self.str("payload_hex"))
        } else {
            self.str("payload").as_bytes().to_vec()
        }
    }
    /// `flags` (a list of names), with the names and bits of `table` (DATA's or STATUS's).
    fn flags(&mut self, table: &[(&str, u16)]) -> u16 {
        let vector = self.vector;
        let names = self
            .get("flags")
            .as_array()
            .unwrap_or_else(|| panic!("{vector}: flags"));
        names
            .iter()
            .map(|n| {
                let name = n.as_str();
                table
                    .iter()
                    .find(|(t, _)| Some(*t) == name)
                    .unwrap_or_else(|| panic!("{vector}: unknown flag {name:?}"))
                    .1
            })
            .fold(0, |a, b| a | b)
    }
    fn ranges(&mut self) -> Vec<NakRange> {
        let vector = self.vector;
        let list = self
            .get("ranges")
            .as_array()
            .unwrap_or_else(|| panic!("{vector}: ranges"));
        list.iter()
            .map(|r| {
                let map = r.as_object().unwrap_or_else(|| panic!("{vector}: range"));
                let mut f = Fields {
                    vector,
                    map,
                    used: BTreeSet::new(),
                };
                let range = NakRange {
                    start: f.u64("start"),
                    count: f.u32("count"),
                };
                f.finish();
                range
            })
            .collect()
    }
    fn finish(self) {
        for key in self.map.keys() {
            assert!(
                self.used.contains(key.as_str()),
                "{}: field {key} is not checked",
                self.vector
            );
        }
    }
}

const DATA_FLAGS: [(&str, u16); 4] = [
    ("BEGIN", flags::BEGIN),
    ("END", flags::END),
    ("URGENT", flags::URGENT),
    ("RETRANSMIT", flags::RETRANSMIT),
];

const STATUS_FLAGS: [(&str, u16); 2] =
    [("JOIN", status_flags::JOIN), ("LEAVE", status_flags::LEAVE)];

/// Parses `bytes` with the decoder of `ty` alone (not through [`FrameRepr::parse`]).
fn parse_specific(ty: FrameType, bytes: &[u8]) -> Result<FrameRepr<'_>, WireError> {
    Ok(match ty {
        FrameType::Data => FrameRepr::Data(DataRepr::parse(&DataFrame::new_checked(bytes)?)?),
        FrameType::Pad => FrameRepr::Pad(PadRepr::parse(&DataFrame::new_checked(bytes)?)?),
        FrameType::Heartbeat => {
            FrameRepr::Heartbeat(HeartbeatRepr::parse(&HeartbeatFrame::new_checked(bytes)?)?)
        }
        FrameType::Nak => FrameRepr::Nak(NakRepr::parse(&NakFrame::new_checked(bytes)?)?),
        FrameType::Advertise => {
            FrameRepr::Advertise(AdvertiseRepr::parse(&AdvertiseFrame::new_checked(bytes)?)?)
        }
        FrameType::Query => FrameRepr::Query(QueryRepr::parse(&QueryFrame::new_checked(bytes)?)?),
        FrameType::Bye => FrameRepr::Bye(ByeRepr::parse(&ByeFrame::new_checked(bytes)?)?),
        FrameType::Status => {
            FrameRepr::Status(StatusRepr::parse(&StatusFrame::new_checked(bytes)?)?)
        }
        FrameType::Cookie => {
            FrameRepr::Cookie(CookieRepr::parse(&CookieFrame::new_checked(bytes)?)?)
        }
        FrameType::Auth => FrameRepr::Auth(AuthRepr::parse(&AuthFrame::new_checked(bytes)?)?),
    })
}

fn check_valid(v: &Vector) {
    let name = v.name.as_str();
    let bytes = unhex(name, &v.hex);
    let ty = frame_type_named(
        v.frame_type
            .as_deref()
            .expect("valid vectors name their type"),
    );
    assert!(
        v.error.is_none() && v.error_field.is_none(),
        "{name}: valid vector with an error"
    );

    let header = Header::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(header.frame_type(), Ok(ty), "{name}: frame type byte");
    let parsed = FrameRepr::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        parse_specific(ty, &bytes),
        Ok(parsed),
        "{name}: decoders disagree"
    );

    // Rebuild the expected repr from the JSON fields alone.
    let map = v
        .fields
        .as_ref()
        .unwrap_or_else(|| panic!("{name}: valid vector without fields"));
    let mut f = Fields {
        vector: name,
        map,
        used: BTreeSet::new(),
    };
    let frame_length = f.u64("frame_length") as usize;
    assert_eq!(
        frame_length,
        bytes.len(),
        "{name}: hex is not exactly one frame"
    );
    let session_id = f.u32("session_id");
    let payload;
    let ranges;
    let expected = match ty {
        FrameType::Data => {
            payload = f.payload();
            FrameRepr::Data(DataRepr {
                session_id,
                stream_id: f.u32("stream_id"),
                sequence: f.u64("sequence"),
                message_length: f.u32("message_length"),
                flags: f.flags(&DATA_FLAGS),
                payload: &payload,
            })
        }
        FrameType::Pad => FrameRepr::Pad(PadRepr {
            session_id,
            sequence: f.u64("sequence"),
            frame_length: frame_length as u32,
        }),
        FrameType::Heartbeat => FrameRepr::Heartbeat(HeartbeatRepr {
            session_id,
            stream_id: f.u32("stream_id"),
            next_sequence: f.u64("next_sequence"),
            oldest_retained: f.u64("oldest_retained"),
        }),
        FrameType::Nak => {
            ranges = f.ranges();
            FrameRepr::Nak(NakRepr {
                session_id,
                stream_id: f.u32("stream_id"),
                receiver_id: f.u32("receiver_id"),
                ranges: NakRanges::new(&ranges).unwrap_or_else(|e| panic!("{name}: {e}")),
            })
        }
        FrameType::Advertise => FrameRepr::Advertise(AdvertiseRepr {
            session_id,
            stream_id: f.u32("stream_id"),
            ttl_ms: f.u32("ttl_ms"),
            topic: f.str("topic"),
            uri: f.str("uri"),
        }),
        FrameType::Query => FrameRepr::Query(QueryRepr {
            session_id,
            query_id: f.u32("query_id"),
            kind: match f.str("pattern_kind") {
                "exact" => PatternKind::Exact,
                "glob" => PatternKind::Glob,
                "regex" => PatternKind::Regex,
                other => panic!("{name}: unknown pattern_kind {other}"),
            },
            pattern: f.str("pattern"),
        }),
        FrameType::Bye => FrameRepr::Bye(ByeRepr {
            session_id,
            stream_id: f.u32("stream_id"),
            final_next_sequence: f.u64("final_next_sequence"),
        }),
        FrameType::Status => FrameRepr::Status(StatusRepr {
            session_id,
            stream_id: f.u32("stream_id"),
            receiver_id: f.u32("receiver_id"),
            next_sequence: f.u64("next_sequence"),
            window: f.u32("window"),
            flags: f.flags(&STATUS_FLAGS),
        }),
        FrameType::Cookie => FrameRepr::Cookie(CookieRepr {
            cookie: unhex(name, f.str("cookie_hex"))
                .try_into()
                .unwrap_or_else(|_| panic!("{name}: cookie_hex is not 16 bytes")),
        }),
        // The key id travels in the common header's session_id field.
        FrameType::Auth => FrameRepr::Auth(AuthRepr {
            mac: if f.has("flags") {
                Mac::from_flags(f.flags(&[("BLAKE3", FLAG_BLAKE3)]))
                    .unwrap_or_else(|| panic!("{name}: flags name no MAC"))
            } else {
                Mac::HmacSha256
            },
            key_id: session_id,
            tag: unhex(name, f.str("tag_hex"))
                .try_into()
                .unwrap_or_else(|_| panic!("{name}: tag_hex is not 16 bytes")),
        }),
    };
    f.finish();
    assert_eq!(
        parsed, expected,
        "{name}: decoded fields differ from the JSON"
    );
    if let FrameRepr::Query(q) = parsed {
        assert_eq!(
            Some(q.kind.name()),
            map.get("pattern_kind").and_then(Value::as_str)
        );
    }

    // Re-emit over a poisoned buffer: every byte must be written, and identically.
    assert_eq!(parsed.buffer_len(), bytes.len(), "{name}: buffer_len");
    let mut out = vec![0xa5u8; bytes.len()];
    assert_eq!(parsed.emit(&mut out), bytes.len());
    assert_eq!(out, bytes, "{name}: re-emitted bytes differ");

    // Alone in a datagram, it is one frame.
    let frames: Vec<_> = Frames::new(&bytes).collect();
    assert_eq!(frames, [Ok((ty, &bytes[..]))], "{name}: Frames");
}

fn check_invalid(v: &Vector) {
    let name = v.name.as_str();
    let bytes = unhex(name, &v.hex);
    assert!(
        v.fields.is_none(),
        "{name}: invalid vectors carry no fields"
    );
    let want = v
        .error
        .as_deref()
        .unwrap_or_else(|| panic!("{name}: invalid vector without error"));
    assert!(
        WireError::NAMES.contains(&want),
        "{name}: unknown error name {want}"
    );

    let err = FrameRepr::parse(&bytes).expect_err(name);
    assert_eq!(err.name(), want, "{name}: got {err:?}");
    assert_eq!(
        err.field(),
        v.error_field.as_deref(),
        "{name}: error_field (got {err:?})"
    );
    if let Some(t) = v.frame_type.as_deref() {
        let specific = parse_specific(frame_type_named(t), &bytes).expect_err(name);
        assert_eq!(specific, err, "{name}: the {t} decoder disagrees");
    }
}

#[test]
fn golden_vectors() {
    let vectors = load();
    let mut names = BTreeSet::new();
    for v in &vectors {
        assert!(
            names.insert(v.name.as_str()),
            "duplicate vector name {}",
            v.name
        );
        assert!(!v.meaning.is_empty(), "{}: empty meaning", v.name);
        if v.valid {
            check_valid(v);
        } else {
            check_invalid(v);
        }
    }
}

#[test]
fn golden_vectors_cover_every_type_and_the_required_errors() {
    let vectors = load();
    let mut valid_per_type: BTreeMap<&str, usize> = BTreeMap::new();
    for v in vectors.iter().filter(|v| v.valid) {
        *valid_per_type
            .entry(v.frame_type.as_deref().unwrap())
            .or_default() += 1;
    }
    for (t, _) in TYPE_NAMES {
        assert!(
            valid_per_type.get(t).copied().unwrap_or(0) >= 2,
            "fewer than 2 valid {t} vectors"
        );
    }
    let invalid: BTreeSet<&str> = vectors
        .iter()
        .filter(|v| !v.valid)
        .map(|v| v.name.as_str())
        .collect();
    assert!(invalid.len() >= 10);
    for required in [
        "bad_magic",
        "version_2",
        "unknown_type_0x7f",
        "truncated_header",
        "heartbeat_frame_length_below_fixed_part",
        "header_reserved_nonzero",
        "nak_count_zero",
        "advertise_invalid_utf8",
        "data_whole_message_length_mismatch",
        "data_unknown_flag_bits",
        "status_join_and_leave",
        "status_receiver_id_zero",
        "status_session_zero_keepalive",
        "cookie_session_nonzero",
        "cookie_wrong_length",
        "auth_unknown_flag",
        "auth_wrong_length",
    ] {
        assert!(
            invalid.contains(required),
            "missing invalid vector {required}"
        );
    }
    let has = |pred: &dyn Fn(&Vector) -> bool| vectors.iter().any(|v| v.valid && pred(v));
    let flags_of = |v: &Vector| -> Vec<String> {
        v.fields
            .as_ref()
            .and_then(|f| f.get("flags"))
            .and_then(Value::as_array)
            .map_or(vec![], |a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
    };
    assert!(has(&|v| flags_of(v) == ["BEGIN"]), "no DATA BEGIN fragment");
    assert!(has(&|v| {
        let f = flags_of(v);
        f.iter().any(|s| s == "URGENT") && f.iter().any(|s| s == "RETRANSMIT")
    }));
    let is_status = |v: &Vector| v.frame_type.as_deref() == Some("STATUS");
    let session_of = |v: &Vector| v.fields.as_ref().and_then(|f| f.get("session_id")).cloned();
    assert!(
        has(&|v| is_status(v) && flags_of(v) == ["JOIN"] && session_of(v) == Some(0.into())),
        "no STATUS JOIN with session 0"
    );
    assert!(
        has(&|v| is_status(v) && flags_of(v).is_empty()),
        "no STATUS keepalive"
    );
    assert!(
        has(&|v| is_status(v) && flags_of(v) == ["LEAVE"]),
        "no STATUS LEAVE"
    );
}
