//! Checks this crate against `docs/golden/recording.json`, vectors written by an independent
//! encoder (docs/golden/make_recording.py, from docs/recording.md): valid ones parse to
//! exactly their fields and emit back to the same bytes; invalid ones are refused with the
//! error they name.

use peregrine_archive::format::index::IndexEntry;
use peregrine_archive::format::positions::{Op, PositionsRepr};
use peregrine_archive::format::record::{parse_record, RecordKind};
use peregrine_archive::format::replay::{
    emit_end, emit_error, error_len, parse_end, From, RequestRepr,
};
use peregrine_archive::format::segment_header::SegmentHeaderRepr;
use peregrine_archive::format::FormatError;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    what: String,
    hex: String,
    valid: bool,
    #[serde(default)]
    fields: Option<Map<String, Value>>,
    #[serde(default)]
    error: Option<String>,
    meaning: String,
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The word of the JSON's `error` a parse error stands for.
fn error_word(e: &FormatError) -> String {
    match e {
        FormatError::Truncated { .. } => "truncated".into(),
        FormatError::BadMagic => "magic".into(),
        FormatError::UnsupportedVersion(_) => "version".into(),
        FormatError::BadField { field, .. } => field.to_string(),
        FormatError::BadChecksum { .. } => "checksum".into(),
    }
}

#[test]
fn every_vector_parses_to_its_fields_or_is_refused_with_its_error() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/golden/recording.json"
    );
    let vectors: Vec<Vector> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(vectors.len() >= 10);
    for v in &vectors {
        let bytes = unhex(&v.hex);
        let what = format!("{} ({})", v.name, v.meaning);
        let result: Result<Map<String, Value>, FormatError> = match v.what.as_str() {
            "record" => parse_record(&bytes).map(|(r, payload)| {
                // Emitting the parsed form gives back the same bytes.
                let mut again = Vec::new();
                r.append(&mut again, payload);
                if r.kind == RecordKind::Message {
                    assert_eq!(again, bytes, "{what}: emit");
                } else {
                    assert_eq!(again[..32], bytes[..32], "{what}: emit");
                }
                let mut m = Map::new();
                let kind = match r.kind {
                    RecordKind::Message => "message",
                    RecordKind::Padding => "padding",
                };
                m.insert("kind".into(), kind.into());
                m.insert("length".into(), r.length.into());
                m.insert("sequence".into(), r.sequence.into());
                m.insert("receive_ns".into(), r.receive_ns.into());
                let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
                m.insert("payload_hex".into(), hex.into());
                m
            }),
            "segment_header" => SegmentHeaderRepr::parse(&bytes).map(|h| {
                assert_eq!(h.emit(), bytes, "{what}: emit");
                let mut m = Map::new();
                m.insert("segment_len".into(), h.segment_len.into());
                m.insert("base_position".into(), h.base_position.into());
                m.insert("session_id".into(), h.session_id.into());
                m.insert("stream_id".into(), h.stream_id.into());
                m.insert("created_ns".into(), h.created_ns.into());
                m.insert("topic".into(), h.topic.clone().into());
                m.insert("header_len".into(), h.header_len().into());
                m
            }),
            "request" => RequestRepr::parse(&bytes).map(|r| {
                assert_eq!(r.emit(), bytes, "{what}: emit");
                let (from, position) = match r.from {
                    From::Start => ("start", 0),
                    From::Sequence(s) => ("sequence", s),
                    From::Time(t) => ("time", t),
                };
                let mut m = Map::new();
                m.insert("topic".into(), r.topic.clone().into());
                m.insert("from".into(), from.into());
                m.insert("position".into(), position.into());
                m
            }),
            "end" => parse_end(&bytes).map(|n| {
                assert_eq!(emit_end(n).to_vec(), bytes, "{what}: emit");
                let mut m = Map::new();
                m.insert("messages".into(), n.into());
                m
            }),
            "error" => error_len(&bytes).map(|n| {
                let text = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
                assert_eq!(emit_error(text), bytes, "{what}: emit");
                let mut m = Map::new();
                m.insert("length".into(), n.into());
                m
            }),
            "positions" => PositionsRepr::parse(&bytes).map(|p| {
                assert_eq!(p.emit(), bytes, "{what}: emit");
                let op = match p.op {
                    Op::Load => "load",
                    Op::Positions => "positions",
                    Op::Save => "save",
                };
                let mut m = Map::new();
                m.insert("op".into(), op.into());
                m.insert("name".into(), p.name.clone().into());
                m.insert("topic".into(), p.topic.clone().into());
                m.insert("created_ns".into(), p.created_ns.into());
                let entries: Vec<Value> = p
                    .entries
                    .iter()
                    .map(|(s, n)| Value::from(vec![Value::from(*s), Value::from(*n)]))
                    .collect();
                m.insert("entries".into(), entries.into());
                m
            }),
            "index_entry" => IndexEntry::parse(&bytes).map(|e| {
                assert_eq!(e.emit().to_vec(), bytes, "{what}: emit");
                let mut m = Map::new();
                m.insert("sequence".into(), e.sequence.into());
                m.insert("receive_ns".into(), e.receive_ns.into());
                m.insert("offset".into(), e.offset.into());
                m
            }),
            other => panic!("{what}: unknown kind of vector {other}"),
        };
        match (v.valid, result) {
            (true, Ok(fields)) => assert_eq!(Some(&fields), v.fields.as_ref(), "{what}"),
            (false, Err(e)) => assert_eq!(Some(error_word(&e)), v.error, "{what}: {e}"),
            (valid, r) => panic!("{what}: valid {valid}, got {r:?}"),
        }
    }
}
