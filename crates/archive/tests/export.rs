//! The export to Parquet, read back by an independent reader (pyarrow, installed with pip
//! into a virtual environment under target/): every column's type and every value of every
//! row checked against the messages the test recorded (REFRESH, UPDATE and STATUS of a
//! backbone, a message there that is not market data, raw messages of another topic,
//! streams interleaved in time), and the summary's counts of what was left out.
//!
//! Without python3 (with venv), or when pip cannot fetch pyarrow, the test says so in one
//! line and skips; under `PEREGRINE_REQUIRE_TOOLS=1` (.ci/run) that is a failure.

use peregrine_archive::export::{export_parquet, ExportOptions};
use peregrine_archive::folder::stream_dir;
use peregrine_archive::{Durability, RecordingWriter, StreamMeta, WriterOptions};
use peregrine_md::codec::{Message, RefreshRepr, StatusRepr, UpdateRepr};
use peregrine_md::model::{Field, ItemState, Value};
use serde_json::{json, Map, Value as Json};
use std::path::Path;
use std::process::Command;

const READ: &str = r#"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
t = f.read()
cols = {}
for name in t.column_names:
    c = t.column(name)
    if pa.types.is_timestamp(c.type):
        v = c.cast(pa.int64()).to_pylist()
    elif pa.types.is_decimal(c.type):
        v = [None if x is None else str(int(x.scaleb(c.type.scale))) for x in c.to_pylist()]
    elif pa.types.is_binary(c.type):
        v = [None if x is None else x.hex() for x in c.to_pylist()]
    else:
        v = c.to_pylist()
    cols[name] = v
rows = [{n: cols[n][i] for n in t.column_names} for i in range(t.num_rows)]
print(json.dumps({
    "schema": [[f.name, str(f.type), f.nullable] for f in t.schema],
    "row_groups": f.num_row_groups,
    "rows": rows,
}))
"#;

fn md(m: Message<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    m.emit_to_vec(&mut v);
    v
}

/// Every column null but the four every row has, then `set`.
fn row(receive_ns: u64, topic: &str, session: u32, seq: u64, set: &[(&str, Json)]) -> Json {
    let names = [
        "message_type",
        "embedded_time",
        "service",
        "item",
        "item_id",
        "item_seq",
        "state",
        "text",
        "payload",
    ];
    let mut r = Map::new();
    r.insert("receive_time".into(), json!(receive_ns));
    r.insert("topic".into(), json!(topic));
    r.insert("session_id".into(), json!(session));
    r.insert("sequence".into(), json!(seq));
    for n in names {
        r.insert(n.into(), Json::Null);
    }
    for def in peregrine_md::dictionary::Dictionary::builtin().iter() {
        r.insert(def.name.clone(), Json::Null);
    }
    for (k, v) in set {
        assert!(r.contains_key(*k), "no column {k}");
        r.insert((*k).into(), v.clone());
    }
    Json::Object(r)
}

#[test]
fn an_export_reads_back_in_pyarrow_value_for_value() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let Some(python) =
        peregrine_testkit::python_with(&tmp.join("../pyarrow-venv"), &[("pyarrow", "pyarrow")])
    else {
        return;
    };
    let dir = tmp.join(format!("export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = WriterOptions {
        durability: Durability::None,
        ..WriterOptions::default()
    };
    let t0 = 1_795_924_800_000_000_000u64; // 2026-11-29T04:00:00Z
    let (feed, orders) = (0x0000_0a0bu32, 0x0000_0c0du32);

    // The backbone of FEED1: an image, two updates (one with a field the dictionary lacks),
    // a state change, and a message that is not market data.
    let refresh = md(Message::Refresh(RefreshRepr {
        item_id: 7,
        flags: 0,
        timestamp_ns: t0 - 5,
        item_seq: 1,
        service: "FEED1",
        name: "AAPL.O",
        fields: peregrine_md::codec::FieldList::List(&[
            Field::new(3, Value::Str("APPLE INC")),
            Field::new(22, Value::price(18921, -2)),
            Field::new(25, Value::price(-5, -12)),
            Field::new(30, Value::Int(-300)),
            Field::new(15, Value::Enum(840)),
            Field::new(18, Value::TimeNs(t0 - 1_000)),
            Field::new(6, Value::price(i64::MAX, 6)),
        ]),
    }));
    let update = md(Message::Update(UpdateRepr {
        item_id: 7,
        timestamp_ns: t0 + 15,
        item_seq: 2,
        fields: peregrine_md::codec::FieldList::List(&[
            Field::new(22, Value::price(18922, -2)),
            Field::new(31, Value::Int(i64::MAX)),
            Field::new(9999, Value::Int(1)),
        ]),
    }));
    // An update of an item this recording never saw the image of: no name, the topic's
    // service.
    let unknown_item = md(Message::Update(UpdateRepr {
        item_id: 8,
        timestamp_ns: t0 + 25,
        item_seq: 5,
        fields: peregrine_md::codec::FieldList::List(&[Field::new(25, Value::price(1, 0))]),
    }));
    let status = md(Message::Status(StatusRepr {
        item_id: 7,
        request_id: 0,
        state: ItemState::Stale,
        service: "",
        name: "",
        text: "feed lost its source",
    }));
    let junk = b"not a market data message".to_vec();
    {
        let meta = StreamMeta {
            topic: "md.FEED1".into(),
            session_id: feed,
            stream_id: 1,
        };
        let mut w =
            RecordingWriter::open(&stream_dir(&dir, "md.FEED1", feed), &meta, opts, 0).unwrap();
        w.append(0, t0, &refresh).unwrap();
        w.append(1, t0 + 20, &update).unwrap();
        w.append(2, t0 + 30, &unknown_item).unwrap();
        w.append(3, t0 + 40, &status).unwrap();
        w.append(5, t0 + 50, &junk).unwrap();
        w.close().unwrap();
    }
    {
        let meta = StreamMeta {
            topic: "orders".into(),
            session_id: orders,
            stream_id: 1,
        };
        let mut w =
            RecordingWriter::open(&stream_dir(&dir, "orders", orders), &meta, opts, 0).unwrap();
        w.append(10, t0 + 10, b"buy 100").unwrap();
        w.append(11, t0 + 35, &[0, 255, 7]).unwrap();
        w.close().unwrap();
    }

    let out = dir.join("ticks.parquet");
    let summary = export_parquet(
        &dir,
        &out,
        &ExportOptions {
            rows_per_group: 3,
            ..ExportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(summary.streams, 2);
    assert_eq!(summary.rows, 7);
    assert_eq!(summary.market_data, 4);
    assert_eq!(summary.raw, 3);
    assert_eq!(summary.undecodable, 1);
    assert_eq!(summary.fields.unknown_fields, 1, "fid 9999");
    assert_eq!(summary.fields.kind_mismatches, 0);
    assert!(summary.damaged.is_empty());
    assert!(!dir.join("ticks.parquet.partial").exists());

    let read = Command::new(&python)
        .args(["-c", READ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "pyarrow could not read the export: {}",
        String::from_utf8_lossy(&read.stderr)
    );
    let got: Json = serde_json::from_slice(&read.stdout).unwrap();

    // The schema: the fixed columns, then the dictionary's fields by id with their kinds.
    let schema: Vec<(String, String, bool)> =
        serde_json::from_value(got["schema"].clone()).unwrap();
    let ts = "timestamp[ns, tz=UTC]".to_string();
    let mut want = vec![
        ("receive_time".to_string(), ts.clone(), false),
        ("topic".into(), "string".into(), false),
        ("session_id".into(), "uint32".into(), false),
        ("sequence".into(), "uint64".into(), false),
        ("message_type".into(), "string".into(), true),
        ("embedded_time".into(), ts.clone(), true),
        ("service".into(), "string".into(), true),
        ("item".into(), "string".into(), true),
        ("item_id".into(), "uint32".into(), true),
        ("item_seq".into(), "uint32".into(), true),
        ("state".into(), "string".into(), true),
        ("text".into(), "string".into(), true),
        ("payload".into(), "binary".into(), true),
    ];
    for def in peregrine_md::dictionary::Dictionary::builtin().iter() {
        let ty = match def.kind.name() {
            "int" => "int64".to_string(),
            "price" => "decimal128(38, 12)".into(),
            "time" => ts.clone(),
            "enum" => "uint16".into(),
            _ => "string".into(),
        };
        want.push((def.name.clone(), ty, true));
    }
    assert_eq!(schema, want);
    assert_eq!(got["row_groups"], json!(3), "7 rows in groups of 3");

    // Every row, in receive order across the two streams.
    let s = |x: &str| json!(x);
    let expected = vec![
        row(
            t0,
            "md.FEED1",
            feed,
            0,
            &[
                ("message_type", s("REFRESH")),
                ("embedded_time", json!(t0 - 5)),
                ("service", s("FEED1")),
                ("item", s("AAPL.O")),
                ("item_id", json!(7)),
                ("item_seq", json!(1)),
                ("DSPLY_NAME", s("APPLE INC")),
                ("BID", s("189210000000000")),
                ("ASK", s("-5")),
                ("BIDSIZE", json!(-300)),
                ("CURRENCY", json!(840)),
                ("TRDTIM_1", json!(t0 - 1_000)),
                (
                    "TRDPRC_1",
                    s(&(i128::from(i64::MAX) * 10i128.pow(18)).to_string()),
                ),
            ],
        ),
        row(
            t0 + 10,
            "orders",
            orders,
            10,
            &[("payload", s("62757920313030"))],
        ),
        row(
            t0 + 20,
            "md.FEED1",
            feed,
            1,
            &[
                ("message_type", s("UPDATE")),
                ("embedded_time", json!(t0 + 15)),
                ("service", s("FEED1")),
                ("item", s("AAPL.O")),
                ("item_id", json!(7)),
                ("item_seq", json!(2)),
                ("BID", s("189220000000000")),
                ("ASKSIZE", json!(i64::MAX)),
            ],
        ),
        row(
            t0 + 30,
            "md.FEED1",
            feed,
            2,
            &[
                ("message_type", s("UPDATE")),
                ("embedded_time", json!(t0 + 25)),
                ("service", s("FEED1")),
                ("item_id", json!(8)),
                ("item_seq", json!(5)),
                ("ASK", s("1000000000000")),
            ],
        ),
        row(t0 + 35, "orders", orders, 11, &[("payload", s("00ff07"))]),
        row(
            t0 + 40,
            "md.FEED1",
            feed,
            3,
            &[
                ("message_type", s("STATUS")),
                ("service", s("FEED1")),
                ("item", s("AAPL.O")),
                ("item_id", json!(7)),
                ("state", s(ItemState::Stale.name())),
                ("text", s("feed lost its source")),
            ],
        ),
        row(t0 + 50, "md.FEED1", feed, 5, &[("payload", s(&hex(&junk)))]),
    ];
    let rows = got["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len());
    for (i, (g, w)) in rows.iter().zip(&expected).enumerate() {
        assert_eq!(g, w, "row {i}");
    }

    // One topic by name: only its rows.
    let only = dir.join("orders.parquet");
    let s2 = export_parquet(
        &dir,
        &only,
        &ExportOptions {
            topics: vec!["ord*".into()],
            ..ExportOptions::default()
        },
    )
    .unwrap();
    assert_eq!((s2.streams, s2.rows, s2.raw), (1, 2, 2));

    // Nothing recorded of a topic: an error naming it, and no file.
    let none = dir.join("none.parquet");
    let e = export_parquet(
        &dir,
        &none,
        &ExportOptions {
            topics: vec!["quotes".into()],
            ..ExportOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no recording of quotes"), "{e}");
    assert!(!none.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
