//! Checks the codec against `docs/golden/md.json`, the vectors written by an independent
//! encoder (`docs/golden/make_md.py`) from docs/market-data.md.
//!
//! - valid vectors: the bytes parse (the generic and the type's own decoder agree), every
//!   decoded field equals the JSON, and emitting the parsed form gives back the same bytes;
//! - invalid vectors: both decoders reject the bytes with exactly the error the JSON names;
//! - the valid vectors back to back are one TCP stream that [`Messages`] splits back.

use peregrine_md::codec::*;
use peregrine_md::dictionary::FieldDef;
use peregrine_md::model::{Field, ItemState, Kind, Price, Value as FieldValue};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    #[serde(rename = "type")]
    message_type: Option<String>,
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
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/golden/md.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn unhex(name: &str, hex: &str) -> Vec<u8> {
    assert!(hex.len() % 2 == 0, "{name}: odd number of hex digits");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_else(|_| panic!("{name}: hex")))
        .collect()
}

fn type_named(name: &str) -> MessageType {
    *MessageType::ALL
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("unknown type name {name}"))
}

/// Reads one JSON object and checks at the end that every key was used, so a misspelt key
/// cannot go unchecked.
struct Fields<'v> {
    vector: &'v str,
    map: &'v Map<String, Value>,
    used: BTreeSet<&'static str>,
}

impl<'v> Fields<'v> {
    fn new(vector: &'v str, map: &'v Map<String, Value>) -> Self {
        Fields {
            vector,
            map,
            used: BTreeSet::new(),
        }
    }
    fn get(&mut self, key: &'static str) -> &'v Value {
        self.used.insert(key);
        self.map
            .get(key)
            .unwrap_or_else(|| panic!("{}: missing field {key}", self.vector))
    }
    /// A JSON integer, or a decimal string for values beyond 2^53.
    fn i128(&mut self, key: &'static str) -> i128 {
        let vector = self.vector;
        match self.get(key) {
            Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("{vector}: {key} is not an integer"))
    }
    fn int<T: TryFrom<i128>>(&mut self, key: &'static str) -> T {
        let v = self.i128(key);
        T::try_from(v).unwrap_or_else(|_| panic!("{}: {key} = {v} out of range", self.vector))
    }
    fn str(&mut self, key: &'static str) -> &'v str {
        let vector = self.vector;
        self.get(key)
            .as_str()
            .unwrap_or_else(|| panic!("{vector}: {key} is not a string"))
    }
    fn list(&mut self, key: &'static str) -> &'v Vec<Value> {
        let vector = self.vector;
        self.get(key)
            .as_array()
            .unwrap_or_else(|| panic!("{vector}: {key} is not a list"))
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

fn field_list<'v>(vector: &'v str, list: &'v [Value]) -> Vec<Field<'v>> {
    list.iter()
        .map(|f| {
            let mut f = Fields::new(vector, f.as_object().expect("a field is an object"));
            let fid = f.int("fid");
            let value = match f.str("kind") {
                "int" => FieldValue::Int(f.int("value")),
                "price" => FieldValue::Price(Price {
                    mantissa: f.int("mantissa"),
                    exponent: f.int("exponent"),
                }),
                "time" => FieldValue::TimeNs(f.int("value_ns")),
                "enum" => FieldValue::Enum(f.int("value")),
                "string" => FieldValue::Str(f.str("value")),
                other => panic!("{vector}: unknown kind {other}"),
            };
            f.finish();
            Field::new(fid, value)
        })
        .collect()
}

fn flags(vector: &str, names: &[Value]) -> u8 {
    names
        .iter()
        .map(|n| match n.as_str() {
            Some("SOLICITED") => refresh_flags::SOLICITED,
            Some("CONFLATED") => refresh_flags::CONFLATED,
            // OPEN's SNAPSHOT and REFRESH's have their own values.
            Some("SNAPSHOT") if vector.starts_with("open") => open_flags::SNAPSHOT,
            Some("SNAPSHOT") => refresh_flags::SNAPSHOT,
            Some("VIEW") => refresh_flags::VIEW,
            other => panic!("{vector}: unknown flag {other:?}"),
        })
        .fold(0, |a, b| a | b)
}

fn state(vector: &str, name: &str) -> ItemState {
    *ItemState::ALL
        .iter()
        .find(|s| s.name() == name)
        .unwrap_or_else(|| panic!("{vector}: unknown state {name}"))
}

/// Parses `bytes` with the decoder of `ty` alone (not through [`Message::parse`]).
fn parse_specific(ty: MessageType, b: &[u8]) -> Result<Message<'_>, MdError> {
    Ok(match ty {
        MessageType::Refresh => {
            Message::Refresh(RefreshRepr::parse(&RefreshView::new_checked(b)?)?)
        }
        MessageType::Update => Message::Update(UpdateRepr::parse(&UpdateView::new_checked(b)?)?),
        MessageType::Status => Message::Status(StatusRepr::parse(&StatusView::new_checked(b)?)?),
        MessageType::Login => Message::Login(LoginRepr::parse(&LoginView::new_checked(b)?)?),
        MessageType::LoginResponse => Message::LoginResponse(LoginResponseRepr::parse(
            &LoginResponseView::new_checked(b)?,
        )?),
        MessageType::Open => Message::Open(OpenRepr::parse(&OpenView::new_checked(b)?)?),
        MessageType::Close => Message::Close(CloseRepr::parse(&CloseView::new_checked(b)?)?),
        MessageType::Conflated => {
            Message::Conflated(ConflatedRepr::parse(&ConflatedView::new_checked(b)?)?)
        }
        MessageType::Ping => {
            Message::Ping(PingRepr::parse(&PingView::new_checked(b, PingKind::Ping)?)?)
        }
        MessageType::Pong => {
            Message::Pong(PingRepr::parse(&PingView::new_checked(b, PingKind::Pong)?)?)
        }
        MessageType::Pause => Message::Pause(PauseRepr::parse(&PauseView::new_checked(
            b,
            PauseKind::Pause,
        )?)?),
        MessageType::Resume => Message::Resume(PauseRepr::parse(&PauseView::new_checked(
            b,
            PauseKind::Resume,
        )?)?),
        MessageType::Directory => {
            Message::Directory(DirectoryRepr::parse(&DirectoryView::new_checked(b)?)?)
        }
        MessageType::DictionaryRequest => Message::DictionaryRequest(DictionaryRequestRepr::parse(
            &DictionaryRequestView::new_checked(b)?,
        )?),
        MessageType::Dictionary => {
            Message::Dictionary(DictionaryRepr::parse(&DictionaryView::new_checked(b)?)?)
        }
        MessageType::Post => Message::Post(PostRepr::parse(&PostView::new_checked(b)?)?),
        MessageType::Ack => Message::Ack(AckRepr::parse(&AckView::new_checked(b)?)?),
        MessageType::ImageRequest => {
            Message::ImageRequest(ImageRequestRepr::parse(&ImageRequestView::new_checked(b)?)?)
        }
    })
}

fn check_valid(v: &Vector) {
    let name = v.name.as_str();
    let bytes = unhex(name, &v.hex);
    let ty = type_named(
        v.message_type
            .as_deref()
            .expect("valid vectors name their type"),
    );
    assert!(
        v.error.is_none() && v.error_field.is_none(),
        "{name}: valid with an error"
    );
    let parsed = Message::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        parse_specific(ty, &bytes),
        Ok(parsed),
        "{name}: decoders disagree"
    );
    assert_eq!(parsed.message_type(), ty, "{name}: type");
    assert_eq!(
        parsed.check(),
        Ok(()),
        "{name}: a parsed message passes check"
    );

    let map = v
        .fields
        .as_ref()
        .unwrap_or_else(|| panic!("{name}: no fields"));
    let mut f = Fields::new(name, map);
    assert_eq!(
        f.int::<usize>("length"),
        bytes.len(),
        "{name}: hex is not one message"
    );
    let list;
    let patterns: Vec<&str>;
    let token;
    let fids: Option<Vec<u16>>;
    let entries: Vec<ServiceEntry<'_>>;
    let defs: Vec<FieldDef>;
    let dict_entries: Vec<DictEntry<'_>>;
    let expected = match ty {
        MessageType::Update => {
            list = field_list(name, f.list("fields"));
            Message::Update(UpdateRepr {
                item_id: f.int("item_id"),
                timestamp_ns: f.int("timestamp_ns"),
                item_seq: f.int("item_seq"),
                fields: FieldList::List(&list),
            })
        }
        MessageType::Refresh => {
            list = field_list(name, f.list("fields"));
            Message::Refresh(RefreshRepr {
                item_id: f.int("item_id"),
                flags: flags(name, f.list("flags")),
                timestamp_ns: f.int("timestamp_ns"),
                item_seq: f.int("item_seq"),
                service: f.str("service"),
                name: f.str("name"),
                fields: FieldList::List(&list),
            })
        }
        MessageType::Status => Message::Status(StatusRepr {
            item_id: f.int("item_id"),
            request_id: f.int("request_id"),
            state: state(name, f.str("state")),
            service: f.str("service"),
            name: f.str("name"),
            text: f.str("text"),
        }),
        MessageType::Login => {
            token = unhex(name, f.str("token_hex"));
            Message::Login(LoginRepr {
                version: f.int("version"),
                ping_interval_ms: f.int("ping_interval_ms"),
                user: f.str("user"),
                token: &token,
            })
        }
        MessageType::LoginResponse => {
            let result = f.str("result");
            let interval = f.get("ping_interval_ms");
            Message::LoginResponse(LoginResponseRepr {
                ping_interval_ms: (!interval.is_null()).then(|| f.int("ping_interval_ms")),
                result: (0..=2)
                    .filter_map(LoginResult::from_u8)
                    .find(|r| r.name() == result)
                    .unwrap_or_else(|| panic!("{name}: unknown result {result}")),
                text: f.str("text"),
            })
        }
        MessageType::Open => {
            patterns = f
                .list("patterns")
                .iter()
                .map(|p| p.as_str().expect("patterns are strings"))
                .collect();
            let view = f.get("view");
            fids = view
                .as_array()
                .map(|l| l.iter().map(|v| v.as_u64().expect("fids") as u16).collect());
            Message::Open(OpenRepr {
                flags: flags(name, f.list("flags")),
                request_id: f.int("request_id"),
                service: f.str("service"),
                patterns: PatternList::List(&patterns),
                view: fids.as_deref().map(ViewList::List),
            })
        }
        MessageType::Close => Message::Close(CloseRepr {
            request_id: f.int("request_id"),
        }),
        MessageType::Conflated => Message::Conflated(ConflatedRepr {
            items: f.int("items"),
            updates_dropped: f.int("updates_dropped"),
        }),
        MessageType::Ping => Message::Ping(PingRepr {
            payload: f.int("payload"),
        }),
        MessageType::Pong => Message::Pong(PingRepr {
            payload: f.int("payload"),
        }),
        MessageType::Pause => Message::Pause(PauseRepr {
            request_id: f.int("request_id"),
        }),
        MessageType::Resume => Message::Resume(PauseRepr {
            request_id: f.int("request_id"),
        }),
        MessageType::Directory => {
            entries = f
                .list("services")
                .iter()
                .map(|e| {
                    let mut e = Fields::new(name, e.as_object().expect("an entry is an object"));
                    let entry = ServiceEntry {
                        name: e.str("name"),
                        up: e.get("up").as_bool().expect("up is a bool"),
                        open: e.get("open").as_bool().expect("open is a bool"),
                    };
                    e.finish();
                    entry
                })
                .collect();
            Message::Directory(DirectoryRepr {
                complete: f.get("complete").as_bool().expect("complete is a bool"),
                services: EntryList::List(&entries),
            })
        }
        MessageType::DictionaryRequest => Message::DictionaryRequest(DictionaryRequestRepr),
        MessageType::Dictionary => {
            defs = f
                .list("fields")
                .iter()
                .map(|e| {
                    let mut e = Fields::new(name, e.as_object().expect("an entry is an object"));
                    let kind = e.str("type");
                    let values = e
                        .get("values")
                        .as_object()
                        .expect("values is an object")
                        .iter()
                        .map(|(code, label)| {
                            (
                                code.parse::<u16>().expect("codes are numbers"),
                                label.as_str().expect("labels are strings").to_string(),
                            )
                        })
                        .collect();
                    let def = FieldDef {
                        fid: e.int("fid"),
                        name: e.str("name").to_string(),
                        kind: Kind::ALL
                            .into_iter()
                            .find(|k| k.name() == kind)
                            .unwrap_or_else(|| panic!("{name}: unknown type {kind}")),
                        values,
                    };
                    e.finish();
                    def
                })
                .collect();
            dict_entries = defs.iter().map(FieldDef::entry).collect();
            Message::Dictionary(DictionaryRepr {
                complete: f.get("complete").as_bool().expect("complete is a bool"),
                part: f.int("part"),
                fields: DefList::List(&dict_entries),
            })
        }
        MessageType::Post => {
            list = field_list(name, f.list("fields"));
            Message::Post(PostRepr {
                refresh: f.get("refresh").as_bool().expect("refresh is a bool"),
                origin: f.int("origin"),
                post_id: f.int("post_id"),
                service: f.str("service"),
                name: f.str("name"),
                user: f.str("user"),
                fields: FieldList::List(&list),
            })
        }
        MessageType::Ack => {
            let code = f.str("code");
            Message::Ack(AckRepr {
                origin: f.int("origin"),
                post_id: f.int("post_id"),
                code: AckCode::ALL
                    .into_iter()
                    .find(|c| c.name() == code)
                    .unwrap_or_else(|| panic!("{name}: unknown code {code}")),
                text: f.str("text"),
            })
        }
        MessageType::ImageRequest => Message::ImageRequest(ImageRequestRepr {
            item_id: f.int("item_id"),
            request_id: f.int("request_id"),
        }),
    };
    f.finish();
    assert_eq!(
        parsed, expected,
        "{name}: decoded fields differ from the JSON"
    );

    // Emit both (the parsed form and the one built from JSON) over a poisoned buffer.
    for repr in [parsed, expected] {
        assert_eq!(repr.buffer_len(), bytes.len(), "{name}: buffer_len");
        let mut out = vec![0xa5u8; bytes.len()];
        assert_eq!(repr.emit(&mut out), bytes.len());
        assert_eq!(out, bytes, "{name}: emitted bytes differ");
    }
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
        .unwrap_or_else(|| panic!("{name}: no error"));
    assert!(
        MdError::NAMES.contains(&want),
        "{name}: unknown error {want}"
    );
    let err = Message::parse(&bytes).expect_err(name);
    assert_eq!(err.name(), want, "{name}: got {err:?}");
    assert_eq!(
        err.field(),
        v.error_field.as_deref(),
        "{name}: error_field (got {err:?})"
    );
    if let Some(t) = v.message_type.as_deref() {
        let specific = parse_specific(type_named(t), &bytes).expect_err(name);
        assert_eq!(specific, err, "{name}: the {t} decoder disagrees");
    }
}

#[test]
fn golden_vectors() {
    let vectors = load();
    let mut names = BTreeSet::new();
    for v in &vectors {
        assert!(names.insert(v.name.as_str()), "duplicate vector {}", v.name);
        assert!(!v.meaning.is_empty(), "{}: empty meaning", v.name);
        if v.valid {
            check_valid(v);
        } else {
            check_invalid(v);
        }
    }
}

#[test]
fn golden_vectors_cover_every_type_and_every_error() {
    let vectors = load();
    let mut valid: BTreeMap<&str, usize> = BTreeMap::new();
    let mut invalid: BTreeMap<&str, usize> = BTreeMap::new();
    let mut errors = BTreeSet::new();
    for v in &vectors {
        let t = v.message_type.as_deref().unwrap_or("-");
        if v.valid {
            *valid.entry(t).or_default() += 1;
        } else {
            *invalid.entry(t).or_default() += 1;
            errors.insert(v.error.as_deref().unwrap());
        }
    }
    for t in MessageType::ALL {
        assert!(
            valid.get(t.name()).copied().unwrap_or(0) >= 2,
            "fewer than 2 valid {}",
            t.name()
        );
        assert!(invalid.contains_key(t.name()), "no invalid {}", t.name());
    }
    for e in MdError::NAMES {
        if e != "WrongType" {
            // WrongType needs a caller asking for one type and getting another: not a
            // property of bytes alone.
            assert!(errors.contains(e), "no vector rejected with {e}");
        }
    }
}

#[test]
fn the_valid_vectors_back_to_back_split_into_the_same_messages() {
    let vectors = load();
    let messages: Vec<Vec<u8>> = vectors
        .iter()
        .filter(|v| v.valid)
        .map(|v| unhex(&v.name, &v.hex))
        .collect();
    let stream = messages.concat();
    for cut in [0, 1, 7, stream.len() / 2, stream.len() - 1] {
        let mut got = Vec::new();
        let mut pending = Vec::new();
        for chunk in [&stream[..cut], &stream[cut..]] {
            pending.extend_from_slice(chunk);
            let mut m = Messages::new(&pending);
            for msg in m.by_ref() {
                got.push(msg.unwrap().1.to_vec());
            }
            pending = m.remaining().to_vec();
        }
        assert_eq!(got, messages, "cut at {cut}");
        assert!(pending.is_empty());
    }
}
