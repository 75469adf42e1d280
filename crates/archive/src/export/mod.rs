//! Tick capture for research: a folder of recordings written as one Apache Parquet file
//! (`peregrine record export`; docs/recording.md, "Export to Parquet").
//!
//! Rows are messages, in the order they were received (every stream chosen, merged by
//! receive time). Topics named `md.*` (the market data backbone: a feed's `md.SERVICE`, the
//! distributors' `md.SERVICE.req`) are decoded into columns: the message type, the time the
//! feed put in it, service, item (named by the stream's REFRESH or STATUS of its id), the
//! item's sequence, a STATUS's state and text, and one column per dictionary field (prices as
//! exact decimals, times as UTC timestamps). Other topics, and a backbone message that does
//! not decode, are rows of raw bytes (`payload`). [`columns`] has the schema.
//!
//! ```no_run
//! use peregrine_archive::export::{export_parquet, ExportOptions};
//! use std::path::Path;
//!
//! let summary = export_parquet(Path::new("rec"), Path::new("ticks.parquet"), &ExportOptions::default())?;
//! println!("{} rows, {} of market data", summary.rows, summary.market_data);
//! # Ok::<(), peregrine_archive::export::ExportError>(())
//! ```

pub mod columns;

use crate::{ArchiveError, Damage, Entry, RecordingReader};
use columns::{Columns, FieldLoss, MdColumns, SchemaError};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use peregrine_md::codec::Message;
use peregrine_md::dictionary::Dictionary;
use peregrine_proto::resolver::{Pattern, PatternError};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Topic names or globs; empty exports every topic of the folder.
    pub topics: Vec<String>,
    /// The fields of market data: one column each, named and typed as here.
    pub dictionary: Dictionary,
    /// Rows per Parquet row group (and per Arrow batch held in memory).
    pub rows_per_group: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            topics: Vec::new(),
            dictionary: Dictionary::builtin(),
            rows_per_group: 64 * 1024,
        }
    }
}

/// What an export wrote, and what it left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// Recordings (streams) read.
    pub streams: usize,
    pub rows: u64,
    /// Rows decoded as market data.
    pub market_data: u64,
    /// Rows of raw bytes (other topics, and `undecodable`).
    pub raw: u64,
    /// Messages of `md.*` topics that are not market data messages: written raw.
    pub undecodable: u64,
    /// Field values left out (no column for their id) or null (not the column's kind).
    pub fields: FieldLoss,
    /// Damaged records, skipped (each reported where it is).
    pub damaged: Vec<Damage>,
}

/// Why an export failed (the output file is then not written).
#[derive(Debug)]
pub enum ExportError {
    Archive(ArchiveError),
    Pattern(PatternError),
    /// The folder holds no recording of the topics asked for.
    NothingToExport {
        dir: PathBuf,
        topics: Vec<String>,
    },
    /// A dictionary field is named as a fixed column.
    Clash {
        name: String,
    },
    Write {
        path: PathBuf,
        error: String,
    },
    Config(String),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Archive(e) => e.fmt(f),
            ExportError::Pattern(e) => e.fmt(f),
            ExportError::NothingToExport { dir, topics } if topics.is_empty() => write!(
                f,
                "{} holds no recording: give the folder `peregrine record --dir` wrote",
                dir.display()
            ),
            ExportError::NothingToExport { dir, topics } => write!(
                f,
                "{} holds no recording of {}: name recorded topics (the folder's topic folders list them)",
                dir.display(),
                topics.join(", ")
            ),
            ExportError::Clash { name } => write!(
                f,
                "the dictionary's field {name} has the name of a fixed column ({}): rename the field",
                columns::FIXED_COLUMNS.join(", ")
            ),
            ExportError::Write { path, error } => write!(f, "write {}: {error}", path.display()),
            ExportError::Config(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for ExportError {}

impl From<ArchiveError> for ExportError {
    fn from(e: ArchiveError) -> Self {
        ExportError::Archive(e)
    }
}

/// True for the topics exported as market data: the backbone's (`md.SERVICE`,
/// `md.SERVICE.req`).
pub fn is_market_data_topic(topic: &str) -> bool {
    topic.starts_with("md.") && topic.len() > 3
}

/// The recordings under `dir` whose topic one of `patterns` matches (every one when there
/// are none), by topic then session.
pub fn recordings_matching(
    dir: &Path,
    patterns: &[Pattern],
) -> Result<Vec<RecordingReader>, ArchiveError> {
    let mut out = Vec::new();
    let topics = std::fs::read_dir(dir).map_err(|e| ArchiveError::io(dir, "read folder", e))?;
    for t in topics {
        let t = t.map_err(|e| ArchiveError::io(dir, "read folder", e))?;
        // (`.durable`, the durable subscribers' positions: no topic folder starts with `.`.)
        if !t.file_type().is_ok_and(|ft| ft.is_dir())
            || t.file_name().as_encoded_bytes().starts_with(b".")
        {
            continue;
        }
        out.extend(
            crate::folder::recordings_in(&t.path())?
                .into_iter()
                .filter(|r| {
                    patterns.is_empty() || patterns.iter().any(|p| p.matches(&r.meta().topic))
                }),
        );
    }
    out.sort_by(|a, b| {
        (&a.meta().topic, a.meta().session_id).cmp(&(&b.meta().topic, b.meta().session_id))
    });
    Ok(out)
}

/// Writes the recordings of `opts.topics` under `dir` to the Parquet file `out` (replaced
/// whole: written beside it, then renamed).
pub fn export_parquet(
    dir: &Path,
    out: &Path,
    opts: &ExportOptions,
) -> Result<ExportSummary, ExportError> {
    if opts.rows_per_group == 0 {
        return Err(ExportError::Config(
            "rows per group must be at least 1 (the default is 65536)".into(),
        ));
    }
    let patterns = opts
        .topics
        .iter()
        .map(|t| Pattern::exact_or_glob(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ExportError::Pattern)?;
    let readers = recordings_matching(dir, &patterns)?;
    if readers.is_empty() {
        return Err(ExportError::NothingToExport {
            dir: dir.to_path_buf(),
            topics: opts.topics.clone(),
        });
    }
    let mut columns = Columns::new(&opts.dictionary).map_err(|e| match e {
        SchemaError::Clash { name } => ExportError::Clash { name },
        SchemaError::Arrow(e) => ExportError::Write {
            path: out.to_path_buf(),
            error: e.to_string(),
        },
    })?;
    let partial = partial_path(out);
    let write_err = |e: &dyn fmt::Display| ExportError::Write {
        path: out.to_path_buf(),
        error: e.to_string(),
    };
    let file = std::fs::File::create(&partial).map_err(|e| write_err(&e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(opts.rows_per_group))
        .build();
    let result = (|| {
        let mut writer = ArrowWriter::try_new(file, columns.schema(), Some(props))
            .map_err(|e: ParquetError| write_err(&e))?;
        let mut summary = ExportSummary {
            streams: readers.len(),
            ..ExportSummary::default()
        };
        let mut merge = Merge::new(&readers);
        let mut items: Vec<HashMap<u32, (String, String)>> = vec![HashMap::new(); readers.len()];
        while let Some(i) = merge.next(&mut summary.damaged)? {
            let head = &merge.heads[i];
            let meta = readers[i].meta();
            let decoded = is_market_data_topic(&meta.topic)
                .then(|| Message::parse(&head.payload).ok())
                .flatten()
                .filter(|m| m.buffer_len() == head.payload.len());
            match decoded {
                Some(m) => {
                    push_message(
                        &mut columns,
                        &mut items[i],
                        &meta.topic,
                        meta.session_id,
                        head,
                        &m,
                        &mut summary.fields,
                    );
                    summary.market_data += 1;
                }
                None => {
                    columns.push_raw(
                        head.receive_ns,
                        &meta.topic,
                        meta.session_id,
                        head.sequence,
                        &head.payload,
                    );
                    summary.raw += 1;
                    summary.undecodable += u64::from(is_market_data_topic(&meta.topic));
                }
            }
            summary.rows += 1;
            merge.advance(i, &mut summary.damaged)?;
            if columns.rows() >= opts.rows_per_group {
                let batch = columns.finish().map_err(|e| write_err(&e))?;
                writer.write(&batch).map_err(|e| write_err(&e))?;
            }
        }
        if columns.rows() > 0 {
            let batch = columns.finish().map_err(|e| write_err(&e))?;
            writer.write(&batch).map_err(|e| write_err(&e))?;
        }
        writer.close().map_err(|e| write_err(&e))?;
        Ok(summary)
    })();
    match result {
        Ok(summary) => {
            std::fs::rename(&partial, out).map_err(|e| write_err(&e))?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// `FILE.partial` beside `out`.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// The row of one market data message. `items` names a stream's item ids as its REFRESHes
/// and STATUSes gave them.
fn push_message(
    columns: &mut Columns,
    items: &mut HashMap<u32, (String, String)>,
    topic: &str,
    session_id: u32,
    head: &Head,
    m: &Message<'_>,
    loss: &mut FieldLoss,
) {
    // The service of the backbone topic `md.SERVICE[.req]`, for messages that carry none.
    let topic_service = topic
        .strip_prefix("md.")
        .map(|s| s.strip_suffix(".req").unwrap_or(s));
    let mut learn = |id: u32, service: &str, name: &str| {
        if id != 0 && !name.is_empty() {
            let known = items.get(&id);
            if known.is_none_or(|(s, n)| s != service || n != name) {
                items.insert(id, (service.to_string(), name.to_string()));
            }
        }
    };
    let (md, fields) = match m {
        Message::Refresh(r) => {
            learn(r.item_id, r.service, r.name);
            (
                MdColumns {
                    embedded_ns: Some(r.timestamp_ns),
                    service: Some(r.service),
                    item: Some(r.name),
                    item_id: Some(r.item_id),
                    item_seq: Some(r.item_seq),
                    ..MdColumns::default()
                },
                Some(r.fields),
            )
        }
        Message::Status(s) => {
            learn(s.item_id, s.service, s.name);
            (
                MdColumns {
                    service: (!s.service.is_empty()).then_some(s.service),
                    item: (!s.name.is_empty()).then_some(s.name),
                    item_id: Some(s.item_id),
                    state: Some(s.state.name()),
                    text: Some(s.text),
                    ..MdColumns::default()
                },
                None,
            )
        }
        Message::Update(u) => (
            MdColumns {
                embedded_ns: Some(u.timestamp_ns),
                item_id: Some(u.item_id),
                item_seq: Some(u.item_seq),
                ..MdColumns::default()
            },
            Some(u.fields),
        ),
        Message::ImageRequest(r) => (
            MdColumns {
                item_id: Some(r.item_id),
                ..MdColumns::default()
            },
            None,
        ),
        _ => (MdColumns::default(), None),
    };
    let known = md.item_id.and_then(|id| items.get(&id));
    let md = MdColumns {
        message_type: message_type(m),
        service: md
            .service
            .or(known.map(|(s, _)| s.as_str()))
            .or(topic_service),
        item: md.item.or(known.map(|(_, n)| n.as_str())),
        ..md
    };
    columns.push_md(
        head.receive_ns,
        topic,
        session_id,
        head.sequence,
        &md,
        fields.iter().flat_map(|f| f.iter()),
        loss,
    );
}

fn message_type(m: &Message<'_>) -> &'static str {
    use peregrine_md::codec::MessageType as T;
    let t = match m {
        Message::Refresh(_) => T::Refresh,
        Message::Update(_) => T::Update,
        Message::Status(_) => T::Status,
        Message::Login(_) => T::Login,
        Message::LoginResponse(_) => T::LoginResponse,
        Message::Open(_) => T::Open,
        Message::Close(_) => T::Close,
        Message::Conflated(_) => T::Conflated,
        Message::Ping(_) => T::Ping,
        Message::Pong(_) => T::Pong,
        Message::Pause(_) => T::Pause,
        Message::Resume(_) => T::Resume,
        Message::Directory(_) => T::Directory,
        Message::DictionaryRequest(_) => T::DictionaryRequest,
        Message::Dictionary(_) => T::Dictionary,
        Message::Post(_) => T::Post,
        Message::Ack(_) => T::Ack,
        Message::ImageRequest(_) => T::ImageRequest,
    };
    t.name()
}

/// The next message of one stream, copied out of its cursor.
#[derive(Debug, Default)]
struct Head {
    sequence: u64,
    receive_ns: u64,
    payload: Vec<u8>,
}

/// The streams' messages merged by receive time (ties in stream order).
struct Merge<'r> {
    cursors: Vec<crate::Cursor<'r>>,
    heads: Vec<Head>,
    order: BinaryHeap<Reverse<(u64, usize)>>,
    started: bool,
}

impl<'r> Merge<'r> {
    fn new(readers: &'r [RecordingReader]) -> Merge<'r> {
        Merge {
            cursors: readers.iter().map(RecordingReader::cursor).collect(),
            heads: readers.iter().map(|_| Head::default()).collect(),
            order: BinaryHeap::new(),
            started: false,
        }
    }

    /// Reads stream `i`'s next message into its head and queues it; damage is noted and
    /// skipped.
    fn fill(&mut self, i: usize, damaged: &mut Vec<Damage>) -> Result<(), ArchiveError> {
        while let Some(e) = self.cursors[i].next_entry() {
            match e? {
                Entry::Message {
                    sequence,
                    receive_ns,
                    payload,
                } => {
                    let h = &mut self.heads[i];
                    h.sequence = sequence;
                    h.receive_ns = receive_ns;
                    h.payload.clear();
                    h.payload.extend_from_slice(payload);
                    self.order.push(Reverse((receive_ns, i)));
                    return Ok(());
                }
                Entry::Damaged(d) => damaged.push(d),
            }
        }
        Ok(())
    }

    /// The stream whose head is next.
    fn next(&mut self, damaged: &mut Vec<Damage>) -> Result<Option<usize>, ArchiveError> {
        if !self.started {
            self.started = true;
            for i in 0..self.cursors.len() {
                self.fill(i, damaged)?;
            }
        }
        Ok(self.order.peek().map(|Reverse((_, i))| *i))
    }

    /// Stream `i`'s head was taken: its next message is read and queued.
    fn advance(&mut self, i: usize, damaged: &mut Vec<Damage>) -> Result<(), ArchiveError> {
        let popped = self.order.pop();
        debug_assert_eq!(popped.map(|Reverse((_, s))| s), Some(i));
        self.fill(i, damaged)
    }
}
