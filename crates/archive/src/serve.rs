//! Replay over TCP (docs/recording.md, "Replay over TCP"): [`ReplayServer`] serves the
//! recordings of a folder (a recorder's, usually in the recorder's process), and
//! [`ReplayClient`] asks one for a topic from a place and reads the answer. The answer holds
//! each recording as its files do (a segment header naming the stream, then its records, each
//! with its checksum, then 32 zero bytes), and ends with an end or an error frame.
//!
//! The server serves every topic of its folder to whoever connects, without authentication:
//! it listens on loopback unless told otherwise.

use crate::durable;
use crate::folder::recordings_of;
use crate::format::positions::{self, Op, PositionsRepr};
use crate::format::record::{parse_record, RecordRepr, RECORD_HEADER_LEN};
use crate::format::replay::{
    emit_end, emit_error, error_len, parse_end, From, RequestRepr, END_LEN, END_MAGIC, ERROR_MAGIC,
    REQUEST_FIXED_LEN,
};
use crate::format::segment_header::{SegmentHeaderRepr, FIXED_LEN, MAGIC};
use crate::format::{align8, FormatError};
use crate::{ArchiveError, Entry, StreamMeta};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Replays served at once; a client past them gets an error frame.
pub const MAX_CLIENTS: usize = 64;
/// A client has this long to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the recordings of a folder over TCP until dropped.
#[derive(Debug)]
pub struct ReplayServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ReplayServer {
    /// Listens on `listen` and serves the recordings in `dir` (each client in a thread of its
    /// own, [`MAX_CLIENTS`] at once).
    pub fn start(dir: &Path, listen: SocketAddr) -> Result<ReplayServer, ArchiveError> {
        let net = |op, source| ArchiveError::Net {
            addr: listen.to_string(),
            op,
            source,
        };
        let listener = TcpListener::bind(listen).map_err(|e| net("listen on", e))?;
        let addr = listener.local_addr().map_err(|e| net("listen on", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, dir) = (stop.clone(), dir.to_path_buf());
            std::thread::Builder::new()
                .name("replay-server".into())
                .spawn(move || accept(listener, dir, stop))
                .map_err(|e| net("start serving on", e))?
        };
        Ok(ReplayServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port it got for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept(listener: TcpListener, dir: PathBuf, stop: Arc<AtomicBool>) {
    let clients = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut stream) = conn else { continue };
        if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::AcqRel);
            let _ = stream.write_all(&emit_error(&format!(
                "{MAX_CLIENTS} replays are being served: try again later"
            )));
            continue;
        }
        let (dir, clients) = (dir.clone(), clients.clone());
        let spawned = std::thread::Builder::new()
            .name("replay".into())
            .spawn(move || {
                let peer = stream
                    .peer_addr()
                    .map_or_else(|_| "?".to_string(), |a| a.to_string());
                if let Err(e) = serve_one(&dir, &mut stream) {
                    tracing::info!("replay to {peer}: {e}");
                    let _ = stream.write_all(&emit_error(&e));
                    // Closed with unread bytes the connection would be reset, and the error
                    // lost with it: the client's rest is read (briefly) first.
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut sink = [0u8; 4096];
                    for _ in 0..16 {
                        match stream.read(&mut sink) {
                            Ok(n) if n > 0 => {}
                            _ => break,
                        }
                    }
                }
                clients.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            tracing::warn!("replay: could not start a thread for a client");
        }
    }
}

/// Answers one client: its request read, every recording of its topic sent from its place,
/// then the end frame. An error before the answer started is returned for an error frame.
fn serve_one(dir: &Path, stream: &mut TcpStream) -> Result<(), String> {
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut fixed = [0u8; REQUEST_FIXED_LEN];
    stream
        .read_exact(&mut fixed)
        .map_err(|e| format!("no request: {e}"))?;
    if fixed[0..4] == positions::MAGIC {
        return serve_positions(dir, stream, &fixed);
    }
    let len = RequestRepr::topic_len(&fixed).map_err(|e| format!("a bad request: {e}"))?;
    let mut req = fixed.to_vec();
    req.resize(REQUEST_FIXED_LEN + len, 0);
    stream
        .read_exact(&mut req[REQUEST_FIXED_LEN..])
        .map_err(|e| format!("a request cut short: {e}"))?;
    let req = RequestRepr::parse(&req).map_err(|e| format!("a bad request: {e}"))?;
    let recordings = recordings_of(dir, &req.topic).map_err(|e| e.to_string())?;
    if recordings.is_empty() {
        return Err(format!(
            "no recording of topic {}",
            req.topic.escape_debug()
        ));
    }
    let mut out = BufWriter::with_capacity(256 << 10, &*stream);
    let mut buf = Vec::new();
    let mut sent = 0u64;
    let io = |e: std::io::Error| format!("sending: {e}");
    for r in &recordings {
        let header = SegmentHeaderRepr {
            segment_len: r.segment_len(),
            base_position: 0,
            session_id: r.meta().session_id,
            stream_id: r.meta().stream_id,
            created_ns: 0,
            topic: r.meta().topic.clone(),
        };
        out.write_all(&header.emit()).map_err(io)?;
        let mut c = match req.from {
            From::Start => r.cursor(),
            From::Sequence(s) => r.from_sequence(s).map_err(|e| e.to_string())?,
            From::Time(t) => r.from_time(t).map_err(|e| e.to_string())?,
        };
        while let Some(e) = c.next_entry() {
            match e {
                Ok(Entry::Message {
                    sequence,
                    receive_ns,
                    payload,
                }) => {
                    buf.clear();
                    RecordRepr::message(sequence, receive_ns, payload.len())
                        .append(&mut buf, payload);
                    out.write_all(&buf).map_err(io)?;
                    sent += 1;
                }
                Ok(Entry::Damaged(d)) => tracing::warn!(
                    "{}: a damaged record at offset {} not replayed ({})",
                    d.path.display(),
                    d.offset,
                    d.error
                ),
                Err(e) => tracing::warn!("replay: {e}"),
            }
        }
        out.write_all(&[0u8; RECORD_HEADER_LEN]).map_err(io)?;
    }
    out.write_all(&emit_end(sent)).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(())
}

/// Answers a durable subscriber's positions frame (`fixed`: its first bytes, read): a load
/// with the positions to resume from, a save with the end frame once they are kept.
fn serve_positions(dir: &Path, stream: &mut TcpStream, fixed: &[u8]) -> Result<(), String> {
    let mut frame = fixed.to_vec();
    frame.resize(positions::FIXED_LEN, 0);
    stream
        .read_exact(&mut frame[fixed.len()..])
        .map_err(|e| format!("a positions frame cut short: {e}"))?;
    let len =
        PositionsRepr::frame_len(&frame).map_err(|e| format!("a bad positions frame: {e}"))?;
    frame.resize(len, 0);
    stream
        .read_exact(&mut frame[positions::FIXED_LEN..])
        .map_err(|e| format!("a positions frame cut short: {e}"))?;
    let p = PositionsRepr::parse(&frame).map_err(|e| format!("a bad positions frame: {e}"))?;
    let reply = match p.op {
        Op::Load => {
            let kept = durable::load(dir, &p.name, &p.topic).map_err(|e| e.to_string())?;
            let answer = match kept {
                Some(k) => PositionsRepr {
                    op: Op::Positions,
                    entries: durable::resume_points(dir, &k).map_err(|e| e.to_string())?,
                    ..k
                },
                None => PositionsRepr {
                    op: Op::Positions,
                    created_ns: 0,
                    entries: Vec::new(),
                    ..p
                },
            };
            answer.emit()
        }
        Op::Save => {
            if let Some(k) = durable::load(dir, &p.name, &p.topic).map_err(|e| e.to_string())? {
                if k.created_ns != p.created_ns {
                    return Err(format!(
                        "the durable name {} was created at {} here, not {}: another subscriber uses it",
                        p.name, k.created_ns, p.created_ns
                    ));
                }
            }
            durable::save(dir, &p).map_err(|e| e.to_string())?;
            emit_end(p.entries.len() as u64).to_vec()
        }
        Op::Positions => return Err("a positions answer is not a request".into()),
    };
    stream
        .write_all(&reply)
        .map_err(|e| format!("sending: {e}"))
}

/// What a replay from a server brings.
#[derive(Debug, PartialEq, Eq)]
pub enum RemoteEntry<'a> {
    /// A recording (one stream of the topic) starts: its messages follow.
    Recording(StreamMeta),
    Message {
        sequence: u64,
        receive_ns: u64,
        payload: &'a [u8],
    },
    /// The server sent every message it had: how many.
    End { messages: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Between,
    Records,
    Done,
}

/// A replay asked of a server: see [`next_entry`](Self::next_entry).
#[derive(Debug)]
pub struct ReplayClient {
    addr: String,
    r: BufReader<TcpStream>,
    state: State,
    buf: Vec<u8>,
    /// The longest record the current recording may hold.
    max_record: usize,
}

impl ReplayClient {
    /// Connects to the server at `addr` and asks for `topic` from `from`.
    pub fn connect(addr: &str, topic: &str, from: From) -> Result<ReplayClient, ArchiveError> {
        let net = |op, source| ArchiveError::Net {
            addr: addr.to_string(),
            op,
            source,
        };
        if topic.is_empty() || topic.len() > crate::format::segment_header::MAX_TOPIC_LEN {
            return Err(ArchiveError::Config(format!(
                "topic of {} bytes: give 1 to 1024",
                topic.len()
            )));
        }
        let mut stream = TcpStream::connect(addr).map_err(|e| net("connect to", e))?;
        let _ = stream.set_nodelay(true);
        let req = RequestRepr {
            topic: topic.to_string(),
            from,
        };
        stream
            .write_all(&req.emit())
            .map_err(|e| net("send the request to", e))?;
        Ok(ReplayClient {
            addr: addr.to_string(),
            r: BufReader::with_capacity(256 << 10, stream),
            state: State::Between,
            buf: Vec::new(),
            max_record: 0,
        })
    }

    /// Reads `n` more bytes onto the end of `buf`.
    /// [`connect`](Self::connect) to the first of `addrs` that answers (two recorders of one
    /// stream, for redundancy): the errors of those that did not are in the error when none
    /// did. A recorder that answers but has no recording of the topic counts as answering.
    pub fn connect_first(
        addrs: &[String],
        topic: &str,
        from: From,
    ) -> Result<ReplayClient, ArchiveError> {
        let mut failed = Vec::new();
        for a in addrs {
            match ReplayClient::connect(a, topic, from) {
                Ok(c) => return Ok(c),
                Err(e @ ArchiveError::Config(_)) => return Err(e),
                Err(e) => failed.push(e.to_string()),
            }
        }
        Err(ArchiveError::Remote {
            addr: addrs.join(","),
            text: format!("no recorder answered: {}", failed.join("; ")),
        })
    }

    /// Asks the recorder at `addr` where durable subscriber `name` of `topic` resumes:
    /// its kept positions and the streams that began since, or no entries and `created_ns`
    /// zero for a name it has never kept.
    pub fn load_positions(
        addr: &str,
        name: &str,
        topic: &str,
    ) -> Result<PositionsRepr, ArchiveError> {
        let req = PositionsRepr {
            op: Op::Load,
            name: name.to_string(),
            topic: topic.to_string(),
            created_ns: 0,
            entries: Vec::new(),
        };
        let reply = positions_exchange(addr, &req)?;
        match reply {
            Reply::Positions(p) if p.name == name && p.topic == topic => Ok(p),
            _ => Err(ArchiveError::BadReply {
                addr: addr.to_string(),
                error: FormatError::BadField {
                    field: "positions.op",
                    value: 0,
                },
            }),
        }
    }

    /// Asks the recorder at `addr` to keep `p` (op [`Op::Save`]) as its name's positions;
    /// returns once it has them on disk.
    pub fn save_positions(addr: &str, p: &PositionsRepr) -> Result<(), ArchiveError> {
        match positions_exchange(addr, p)? {
            Reply::Saved => Ok(()),
            Reply::Positions(_) => Err(ArchiveError::BadReply {
                addr: addr.to_string(),
                error: FormatError::BadField {
                    field: "positions.op",
                    value: Op::Positions as u64,
                },
            }),
        }
    }

    fn read_more(&mut self, n: usize) -> Result<(), ArchiveError> {
        let at = self.buf.len();
        self.buf.resize(at + n, 0);
        self.r
            .read_exact(&mut self.buf[at..])
            .map_err(|e| ArchiveError::Net {
                addr: self.addr.clone(),
                op: "read the replay from",
                source: e,
            })
    }

    fn bad(&self, error: FormatError) -> ArchiveError {
        ArchiveError::BadReply {
            addr: self.addr.clone(),
            error,
        }
    }

    /// Reads the next item: a recording's start, a record (checked, left in `buf`), the end.
    fn step(&mut self) -> Result<Option<Step>, ArchiveError> {
        loop {
            self.buf.clear();
            match self.state {
                State::Done => return Ok(None),
                State::Between => {
                    self.read_more(8)?;
                    if self.buf[..8] == MAGIC {
                        self.read_more(FIXED_LEN - 8)?;
                        let header_len = u16::from_le_bytes([self.buf[10], self.buf[11]]) as usize;
                        let max = FIXED_LEN + crate::format::segment_header::MAX_TOPIC_LEN + 8;
                        if !(FIXED_LEN..=max).contains(&header_len) {
                            return Err(self.bad(FormatError::BadField {
                                field: "segment.header_len",
                                value: header_len as u64,
                            }));
                        }
                        self.read_more(header_len - FIXED_LEN)?;
                        let h = SegmentHeaderRepr::parse(&self.buf).map_err(|e| self.bad(e))?;
                        self.max_record = (h.segment_len as usize).saturating_sub(h.header_len());
                        self.state = State::Records;
                        return Ok(Some(Step::Recording(StreamMeta {
                            topic: h.topic,
                            session_id: h.session_id,
                            stream_id: h.stream_id,
                        })));
                    } else if self.buf[..4] == END_MAGIC {
                        self.read_more(END_LEN - 8)?;
                        let n = parse_end(&self.buf).map_err(|e| self.bad(e))?;
                        self.state = State::Done;
                        return Ok(Some(Step::End(n)));
                    } else if self.buf[..4] == ERROR_MAGIC {
                        let len = error_len(&self.buf).map_err(|e| self.bad(e))?;
                        self.buf.clear();
                        self.read_more(len)?;
                        self.state = State::Done;
                        return Err(ArchiveError::Remote {
                            addr: self.addr.clone(),
                            text: String::from_utf8_lossy(&self.buf).into_owned(),
                        });
                    } else {
                        return Err(self.bad(FormatError::BadMagic));
                    }
                }
                State::Records => {
                    self.read_more(RECORD_HEADER_LEN)?;
                    if self.buf.iter().all(|&b| b == 0) {
                        self.state = State::Between;
                        continue;
                    }
                    let len = u32::from_le_bytes(self.buf[4..8].try_into().expect("4 bytes"));
                    let len = len as usize;
                    if RECORD_HEADER_LEN + len > self.max_record {
                        return Err(self.bad(FormatError::BadField {
                            field: "record.length",
                            value: len as u64,
                        }));
                    }
                    self.read_more(align8(len))?;
                    match parse_record(&self.buf) {
                        Ok((r, _)) if r.kind == crate::format::record::RecordKind::Message => {
                            return Ok(Some(Step::Message))
                        }
                        Ok(_) => {
                            return Err(self.bad(FormatError::BadField {
                                field: "record.kind",
                                value: 2,
                            }))
                        }
                        Err(e) => return Err(self.bad(e)),
                    }
                }
            }
        }
    }

    /// The next entry; `None` after [`RemoteEntry::End`] or an error.
    pub fn next_entry(&mut self) -> Option<Result<RemoteEntry<'_>, ArchiveError>> {
        match self.step() {
            Ok(Some(Step::Message)) => {
                let b = &self.buf;
                let len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
                Some(Ok(RemoteEntry::Message {
                    sequence: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
                    receive_ns: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
                    payload: &b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len],
                }))
            }
            Ok(Some(Step::Recording(meta))) => Some(Ok(RemoteEntry::Recording(meta))),
            Ok(Some(Step::End(messages))) => Some(Ok(RemoteEntry::End { messages })),
            Ok(None) => None,
            Err(e) => {
                self.state = State::Done;
                Some(Err(e))
            }
        }
    }
}

/// What [`ReplayClient::step`] read.
enum Step {
    Recording(StreamMeta),
    /// A checked message record, in `buf`.
    Message,
    End(u64),
}

/// A recorder's answer to a positions frame.
enum Reply {
    Positions(PositionsRepr),
    Saved,
}

/// Sends `req` to `addr` and reads the answer: positions, an end frame, or an error frame.
fn positions_exchange(addr: &str, req: &PositionsRepr) -> Result<Reply, ArchiveError> {
    let net = |op, source| ArchiveError::Net {
        addr: addr.to_string(),
        op,
        source,
    };
    if req.topic.is_empty() || req.topic.len() > crate::format::segment_header::MAX_TOPIC_LEN {
        return Err(ArchiveError::Config(format!(
            "topic of {} bytes: give 1 to 1024",
            req.topic.len()
        )));
    }
    positions::check_name(&req.name).map_err(ArchiveError::Config)?;
    if req.entries.len() > positions::MAX_ENTRIES {
        return Err(ArchiveError::Config(format!(
            "{} positions: at most {} streams",
            req.entries.len(),
            positions::MAX_ENTRIES
        )));
    }
    let mut stream = TcpStream::connect(addr).map_err(|e| net("connect to", e))?;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    stream
        .write_all(&req.emit())
        .map_err(|e| net("send the positions to", e))?;
    let bad = |error| ArchiveError::BadReply {
        addr: addr.to_string(),
        error,
    };
    let mut head = [0u8; 8];
    stream
        .read_exact(&mut head)
        .map_err(|e| net("read the answer from", e))?;
    if head[0..4] == positions::MAGIC {
        let mut b = head.to_vec();
        b.resize(positions::FIXED_LEN, 0);
        stream
            .read_exact(&mut b[8..])
            .map_err(|e| net("read the answer from", e))?;
        let len = PositionsRepr::frame_len(&b).map_err(bad)?;
        b.resize(len, 0);
        stream
            .read_exact(&mut b[positions::FIXED_LEN..])
            .map_err(|e| net("read the answer from", e))?;
        let p = PositionsRepr::parse(&b).map_err(bad)?;
        if p.op != Op::Positions {
            return Err(bad(FormatError::BadField {
                field: "positions.op",
                value: p.op as u64,
            }));
        }
        Ok(Reply::Positions(p))
    } else if head[0..4] == END_MAGIC {
        let mut b = head.to_vec();
        b.resize(END_LEN, 0);
        stream
            .read_exact(&mut b[8..])
            .map_err(|e| net("read the answer from", e))?;
        parse_end(&b).map_err(bad)?;
        Ok(Reply::Saved)
    } else if head[0..4] == ERROR_MAGIC {
        let len = error_len(&head).map_err(bad)?;
        let mut text = vec![0u8; len];
        stream
            .read_exact(&mut text)
            .map_err(|e| net("read the answer from", e))?;
        Err(ArchiveError::Remote {
            addr: addr.to_string(),
            text: String::from_utf8_lossy(&text).into_owned(),
        })
    } else {
        Err(bad(FormatError::BadMagic))
    }
}
