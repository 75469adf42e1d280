//! The TCP ceiling: one bare loopback connection (`TCP_NODELAY`, as Peregrine's) carrying the
//! bytes Peregrine's frames take for the same messages, written in Peregrine's batch size (as
//! many whole frames as fit in 65,000 bytes) and read 64 KiB at a time. TCP paces the writer
//! itself, so nothing is lost: the reader's rate is the ceiling.

use super::{Ceiling, CeilingConfig, CeilingKind, Reads, WireShape};
use crate::BenchError;
use peregrine_proto::sender::SendMode;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Runs the TCP ceiling for `cfg.duration`.
pub fn measure(cfg: &CeilingConfig) -> Result<Ceiling, BenchError> {
    let net = super::loopback_defaults(cfg.transport)?;
    let shape = WireShape::new(cfg.size, net.segment_len);
    let per_msg = shape.stream_bytes_per_msg;
    // Peregrine's batch in normal send mode, in whole frames.
    let batch_bytes = match net.mode {
        SendMode::Normal { batch_bytes, .. } => batch_bytes,
        SendMode::Urgent => per_msg,
    };
    let write_len = (batch_bytes / per_msg).max(1) * per_msg;
    let ctx =
        |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ctx("the ceiling's listener"))?;
    let addr = listener.local_addr()?;
    let (sent, read) = std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<_, BenchError> {
            peregrine_agent::pin_to_cpu(cfg.cpus.b)?;
            let mut conn = accept_within(&listener, Duration::from_secs(10))
                .map_err(ctx("the ceiling's reader"))?;
            conn.set_nodelay(true)?;
            // A writer that never finishes is a bug: do not wait for it forever.
            conn.set_read_timeout(Some(cfg.duration + Duration::from_secs(10)))?;
            let mut buf = vec![0u8; 65_536];
            let mut reads = Reads::default();
            loop {
                let n = conn.read(&mut buf).map_err(ctx("the ceiling's reader"))?;
                if n == 0 {
                    break;
                }
                reads.saw(n as u64);
            }
            Ok(reads)
        });
        let writer = s.spawn(|| -> Result<u64, BenchError> {
            peregrine_agent::pin_to_cpu(cfg.cpus.a)?;
            let mut conn = TcpStream::connect(addr).map_err(ctx("the ceiling's writer"))?;
            conn.set_nodelay(true)?;
            let buf = vec![0x5au8; write_len];
            let mut bytes = 0u64;
            let t0 = Instant::now();
            while t0.elapsed() < cfg.duration {
                for _ in 0..16 {
                    conn.write_all(&buf).map_err(ctx("the ceiling's writer"))?;
                    bytes += buf.len() as u64;
                }
            }
            conn.shutdown(Shutdown::Write)?;
            Ok(bytes)
        });
        let sent = writer.join().expect("the ceiling's writer does not panic");
        let read = reader.join().expect("the ceiling's reader does not panic");
        Ok::<_, BenchError>((sent?, read?))
    })?;
    Ok(Ceiling {
        kind: CeilingKind::Stream,
        msgs_per_s: read.rate(1.0 / per_msg as f64),
        written: sent,
        read: read.total,
        offload_refused: None,
    })
}

/// The writer's connection, or an error once `limit` has passed without one (a writer that
/// failed before connecting).
fn accept_within(listener: &TcpListener, limit: Duration) -> io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let t0 = Instant::now();
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false)?;
                return Ok(conn);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && t0.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {} s", limit.as_secs()),
                ));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine::Scheme;

    #[test]
    fn the_stream_ceiling_reads_every_byte_written() {
        let cfg = CeilingConfig {
            transport: Scheme::Tcp,
            size: 32,
            capacity: 0,
            cpus: super::super::test_cpus(),
            duration: Duration::from_millis(50),
        };
        let c = measure(&cfg).unwrap();
        assert!(c.written > 0);
        assert_eq!(c.read, c.written);
    }
}
