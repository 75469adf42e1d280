//! `peregrine replay`: reads a topic's recordings (every session, oldest first) from a folder
//! or from a recorder over TCP, from a sequence or a time, printing what `peregrine sub
//! --print` prints (or counting), at full speed or at the recorded pace.

use super::{message_line, printable};
use crate::flags::archive::ReplayArgs;
use anyhow::{bail, Result};
use peregrine_archive::folder::recordings_of;
use peregrine_archive::format::replay::From;
use peregrine_archive::{Entry, Pacer, RemoteEntry, ReplayClient};
use std::io::Write;

/// Where the lines go, paced or not.
struct Sink<'a> {
    out: std::io::BufWriter<std::io::StdoutLock<'a>>,
    pacer: Option<Pacer>,
    print: bool,
    topic: String,
    messages: u64,
}

impl Sink<'_> {
    fn message(
        &mut self,
        session: u32,
        sequence: u64,
        receive_ns: u64,
        payload: &[u8],
    ) -> Result<()> {
        if let Some(p) = self.pacer.as_mut() {
            // Lines go out as their messages are due.
            self.out.flush()?;
            p.wait(receive_ns);
        }
        self.messages += 1;
        if self.print {
            writeln!(
                self.out,
                "{}",
                message_line(&self.topic, session, sequence, payload)
            )?;
        }
        Ok(())
    }
}

pub fn run(a: ReplayArgs) -> Result<()> {
    let from = match (a.from_seq, a.since) {
        (Some(s), _) => From::Sequence(s),
        (None, Some(t)) => From::Time(t),
        (None, None) => From::Start,
    };
    let mut sink = Sink {
        out: std::io::BufWriter::new(std::io::stdout().lock()),
        pacer: a.pace.map(Pacer::new),
        print: a.print,
        topic: a.topic.clone(),
        messages: 0,
    };
    let (recordings, damaged) = match (&a.dir, &a.recorder) {
        (Some(dir), _) => local(dir, &a.topic, from, &mut sink)?,
        (None, Some(addrs)) => remote(addrs, &a.topic, from, &mut sink)?,
        (None, None) => bail!("give --dir DIR or --recorder HOST:PORT"),
    };
    sink.out.flush()?;
    let messages = sink.messages;
    drop(sink);
    eprintln!(
        "replayed {messages} messages of {} from {recordings} recording(s){}",
        printable(&a.topic),
        if damaged > 0 {
            format!(", {damaged} damaged records skipped")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// From a folder: (recordings, damaged records).
fn local(
    dir: &std::path::Path,
    topic: &str,
    from: From,
    sink: &mut Sink<'_>,
) -> Result<(usize, u64)> {
    let recordings = recordings_of(dir, topic)?;
    if recordings.is_empty() {
        bail!(
            "{} holds no recording of topic {} (record it with peregrine record --topics {} --dir {})",
            dir.display(),
            printable(topic),
            printable(topic),
            dir.display()
        );
    }
    let mut damaged = 0;
    for r in &recordings {
        let session = r.meta().session_id;
        let mut c = match from {
            From::Start => r.cursor(),
            From::Sequence(s) => r.from_sequence(s)?,
            From::Time(t) => r.from_time(t)?,
        };
        while let Some(e) = c.next_entry() {
            match e? {
                Entry::Message {
                    sequence,
                    receive_ns,
                    payload,
                } => sink.message(session, sequence, receive_ns, payload)?,
                Entry::Damaged(d) => {
                    damaged += 1;
                    tracing::warn!(
                        "{}: a damaged record at offset {} skipped ({})",
                        d.path.display(),
                        d.offset,
                        d.error
                    );
                }
            }
        }
    }
    Ok((recordings.len(), damaged))
}

/// From a recorder over TCP: (recordings, 0; the server skips damaged records itself).
fn remote(addrs: &[String], topic: &str, from: From, sink: &mut Sink<'_>) -> Result<(usize, u64)> {
    let mut c = ReplayClient::connect_first(addrs, topic, from)?;
    let addr = addrs.join(",");
    let (mut recordings, mut session) = (0, 0);
    let mut ended = false;
    while let Some(e) = c.next_entry() {
        match e? {
            RemoteEntry::Recording(meta) => {
                recordings += 1;
                session = meta.session_id;
            }
            RemoteEntry::Message {
                sequence,
                receive_ns,
                payload,
            } => sink.message(session, sequence, receive_ns, payload)?,
            RemoteEntry::End { messages } => {
                ended = true;
                if messages != sink.messages {
                    bail!(
                        "the recorder at {addr} said it sent {messages} messages, {} came",
                        sink.messages
                    );
                }
            }
        }
    }
    if !ended {
        bail!("the replay from {addr} ended without its end frame");
    }
    Ok((recordings, 0))
}
