//! `peregrine replay`: reads a topic's recordings (every session, oldest first) from a
//! sequence or a time, printing what `peregrine sub --print` prints, or counting.

use super::{printable, shown};
use crate::flags::archive::ReplayArgs;
use anyhow::{bail, Result};
use peregrine_archive::recorder::recordings_of;
use peregrine_archive::{Entry, Pacer};
use std::io::Write;

pub fn run(a: ReplayArgs) -> Result<()> {
    let recordings = recordings_of(&a.dir, &a.topic)?;
    if recordings.is_empty() {
        bail!(
            "{} holds no recording of topic {} (record it with peregrine record --topics {} --dir {})",
            a.dir.display(),
            printable(&a.topic),
            printable(&a.topic),
            a.dir.display()
        );
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut messages, mut damaged) = (0u64, 0u64);
    let mut pacer = a.pace.map(Pacer::new);
    for r in &recordings {
        let session = r.meta().session_id;
        let mut c = match (a.from_seq, a.since) {
            (Some(s), _) => r.from_sequence(s)?,
            (None, Some(t)) => r.from_time(t)?,
            (None, None) => r.cursor(),
        };
        while let Some(e) = c.next_entry() {
            match e? {
                Entry::Message {
                    sequence,
                    receive_ns,
                    payload,
                } => {
                    if let Some(p) = pacer.as_mut() {
                        // Lines go out as their messages are due.
                        out.flush()?;
                        p.wait(receive_ns);
                    }
                    messages += 1;
                    if a.print {
                        writeln!(
                            out,
                            "{} session={session:08x} seq={sequence} len={}: {}",
                            printable(&a.topic),
                            payload.len(),
                            shown(payload)
                        )?;
                    }
                }
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
    out.flush()?;
    drop(out);
    eprintln!(
        "replayed {messages} messages of {} from {} recording(s){}",
        printable(&a.topic),
        recordings.len(),
        if damaged > 0 {
            format!(", {damaged} damaged records skipped")
        } else {
            String::new()
        }
    );
    Ok(())
}
