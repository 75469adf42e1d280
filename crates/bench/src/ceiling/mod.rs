//! Same-run ceilings for throughput: what the bare mechanism under a transport moves between
//! the same two CPUs, measured in the same run as Peregrine, so that its rate reads as a
//! fraction of the machine's (`x ceiling`), as a latency reads against the floor.
//!
//! - `ipc`: [`ring`], a plain single-producer single-consumer byte ring (rtrb) carrying messages
//!   of the same size, as big as the stream's log, one commit per message on the producer and
//!   in place, a batch at a time, on the consumer.
//! - `udp` and `mcast`: [`udp`], bare sockets moving datagrams of the size Peregrine sends, each
//!   counted as the messages Peregrine packs into one, three ways: one `send` and one `recv` per
//!   datagram; UDP GSO on the sender (the batch Peregrine sends in one call) with one `recv`
//!   per datagram; GSO and UDP GRO on the receiver.
//! - `tcp`: [`tcp`], bare sockets writing the bytes Peregrine's frames take, in writes of the
//!   size of Peregrine's batches.
//!
//! Each side is a thread of the bench process pinned to the CPU its Peregrine counterpart
//! uses (a thread sees the same caches and the same kernel paths as a process). The rate is the
//! reader's, from its first message to its last, as a Peregrine subscriber's is.

pub mod ring;
pub mod tcp;
pub mod udp;

use crate::{BenchError, CpuPair};
use peregrine::Scheme;
use peregrine_transport::net::NetConfig;
use peregrine_transport::Uri;
use peregrine_wire::align_frame;
use peregrine_wire::data::DATA_HEADER_LEN;
use std::time::Duration;

/// What a ceiling run moves, and for how long.
#[derive(Debug, Clone)]
pub struct CeilingConfig {
    pub transport: Scheme,
    /// Message size in bytes.
    pub size: usize,
    /// `ipc`: the ring's size in bytes (the stream's log capacity).
    pub capacity: u64,
    /// The writer runs on `a`, the reader on `b`.
    pub cpus: CpuPair,
    /// How long the writer writes.
    pub duration: Duration,
}

/// Which bare mechanism a ceiling measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingKind {
    /// A plain SPSC ring of the same message size.
    Ring,
    /// Bare UDP sockets, one system call per datagram each side.
    Sockets,
    /// Bare UDP sockets, GSO on the sender, one `recv` per datagram.
    SocketsGso,
    /// Bare UDP sockets, GSO on the sender and GRO on the receiver.
    SocketsGsoGro,
    /// Bare TCP sockets writing the same bytes.
    Stream,
}

impl CeilingKind {
    /// The words the results and the report use.
    pub fn describe(self) -> &'static str {
        match self {
            CeilingKind::Ring => "SPSC ring",
            CeilingKind::Sockets => "bare sockets",
            CeilingKind::SocketsGso => "bare sockets, GSO",
            CeilingKind::SocketsGsoGro => "bare sockets, GSO+GRO",
            CeilingKind::Stream => "bare sockets",
        }
    }
}

/// One ceiling measured.
#[derive(Debug, Clone)]
pub struct Ceiling {
    pub kind: CeilingKind,
    /// Messages per second the reader received (datagrams and bytes counted as the messages
    /// Peregrine carries in them).
    pub msgs_per_s: f64,
    /// Units the writer wrote and the reader received (messages, datagrams or bytes).
    pub written: u64,
    pub read: u64,
    /// The kernel refused the offload (GSO or GRO): measured without it.
    pub offload_refused: Option<String>,
}

/// How Peregrine lays a message of `size` bytes on the wire of a network transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireShape {
    /// Bytes of each datagram (udp, mcast) or of the largest frame (tcp).
    pub segment_len: usize,
    /// Whole messages in one datagram or frame (at least 1).
    pub msgs_per_segment: usize,
    /// Datagrams or frames one message takes (more than 1 when it is fragmented).
    pub segments_per_msg: usize,
    /// Bytes one message takes on a TCP stream (its frames, aligned).
    pub stream_bytes_per_msg: usize,
}

impl WireShape {
    /// The shape on `udp`/`mcast` (`segment_len` 1472, the default datagram) or `tcp` (65,536,
    /// the default largest frame).
    pub fn new(size: usize, segment_len: usize) -> WireShape {
        let frame = align_frame(DATA_HEADER_LEN + size);
        let per_fragment = segment_len - DATA_HEADER_LEN;
        let segments_per_msg = size.div_ceil(per_fragment).max(1);
        WireShape {
            segment_len,
            msgs_per_segment: if segments_per_msg > 1 {
                1
            } else {
                (segment_len / frame).max(1)
            },
            segments_per_msg,
            stream_bytes_per_msg: if segments_per_msg > 1 {
                // Every fragment fills its frame but the last.
                (segments_per_msg - 1) * segment_len
                    + align_frame(DATA_HEADER_LEN + size - (segments_per_msg - 1) * per_fragment)
            } else {
                frame
            },
        }
    }

    /// Messages carried by `segments` datagrams.
    pub fn msgs_in_segments(&self, segments: f64) -> f64 {
        segments * self.msgs_per_segment as f64 / self.segments_per_msg as f64
    }
}

/// Peregrine's settings for a `transport` stream on loopback with nothing set on its URI (its
/// datagram or frame size, socket buffers and batch), as the run being compared used them.
fn loopback_defaults(transport: Scheme) -> Result<NetConfig, BenchError> {
    let uri = match transport {
        Scheme::Mcast => "mcast://239.255.77.3:9",
        Scheme::Tcp => "tcp://127.0.0.1:9",
        _ => "udp://127.0.0.1:9",
    };
    let parsed = Uri::parse(uri).map_err(|e| BenchError::Config(e.to_string()))?;
    NetConfig::from_uri(&parsed).map_err(|e| BenchError::Config(e.to_string()))
}

/// Measures the ceilings of `cfg.transport`: the ring for `ipc`, three socket ceilings for
/// `udp` and `mcast` (GSO first: the one Peregrine's rate is read against), one for `tcp`.
pub fn measure(cfg: &CeilingConfig) -> Result<Vec<Ceiling>, BenchError> {
    match cfg.transport {
        Scheme::Ipc => Ok(vec![ring::measure(cfg)?]),
        Scheme::Udp | Scheme::Mcast => Ok(vec![
            udp::measure(cfg, udp::Offload::Gso)?,
            udp::measure(cfg, udp::Offload::None)?,
            udp::measure(cfg, udp::Offload::GsoGro)?,
        ]),
        Scheme::Tcp => Ok(vec![tcp::measure(cfg)?]),
        other => Err(BenchError::Config(format!(
            "no throughput ceiling for --transport {other}: give ipc, udp, mcast or tcp"
        ))),
    }
}

/// What a ceiling's reader counted: every unit read (messages or bytes), and the time from its
/// first read to its last, over which the units of every read but the first are its rate (the
/// first read's units arrived before its clock started), as a Peregrine subscriber's is.
#[derive(Debug, Default, Clone, Copy)]
struct Reads {
    total: u64,
    timed: u64,
    first_ns: u64,
    last_ns: u64,
}

impl Reads {
    /// One read of `units`, now.
    fn saw(&mut self, units: u64) {
        let now = peregrine_agent::monotonic_ns();
        if self.first_ns == 0 {
            self.first_ns = now;
        } else {
            self.timed += units;
        }
        self.last_ns = now;
        self.total += units;
    }

    /// Units per second, `per_unit` messages each (0 after a single read).
    fn rate(&self, per_unit: f64) -> f64 {
        if self.last_ns > self.first_ns {
            self.timed as f64 * per_unit * 1e9 / (self.last_ns - self.first_ns) as f64
        } else {
            0.0
        }
    }
}

/// Two CPUs for the tests' ceilings (one if the process may use only one).
#[cfg(test)]
fn test_cpus() -> CpuPair {
    let cpus = peregrine_agent::allowed_cpus();
    CpuPair {
        a: cpus[0],
        b: *cpus.get(1).unwrap_or(&cpus[0]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_shape_counts_messages_as_peregrine_packs_them() {
        // 32-byte messages: 64-byte frames, 23 in a 1472-byte datagram.
        let s = WireShape::new(32, 1472);
        assert_eq!((s.msgs_per_segment, s.segments_per_msg), (23, 1));
        assert_eq!(s.stream_bytes_per_msg, 64);
        assert_eq!(s.msgs_in_segments(2.0), 46.0);
        // 1440 bytes fill one datagram exactly; 1441 need two fragments.
        assert_eq!(WireShape::new(1440, 1472).segments_per_msg, 1);
        let f = WireShape::new(1441, 1472);
        assert_eq!((f.msgs_per_segment, f.segments_per_msg), (1, 2));
        assert_eq!(f.msgs_in_segments(4.0), 2.0);
        assert_eq!(f.stream_bytes_per_msg, 1472 + 40);
        // Zero-byte messages are a header each.
        assert_eq!(WireShape::new(0, 1472).msgs_per_segment, 46);
    }

    #[test]
    fn a_reader_s_rate_leaves_out_its_first_read_and_needs_two() {
        let mut r = Reads::default();
        r.saw(10);
        assert_eq!((r.total, r.timed, r.rate(1.0)), (10, 0, 0.0));
        r.first_ns = 1_000_000_000;
        r.saw(20);
        r.saw(30);
        r.last_ns = 2_000_000_000;
        assert_eq!((r.total, r.timed), (60, 50));
        assert_eq!(r.rate(2.0), 100.0);
    }
}
