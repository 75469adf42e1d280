//! A receiver's settings: [`ReceiverConfig`], and where it starts a session it first hears
//! mid-stream ([`LateJoin`]). How it asks for lost frames is [`NakConfig`].

use super::NakConfig;
use std::fmt;
use std::str::FromStr;

/// A receiver's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverConfig {
    pub stream_id: u32,
    /// Random id this receiver puts in its STATUS frames.
    pub receiver_id: u32,
    /// Largest message reassembled; longer ones are dropped and counted as corrupt.
    pub max_message_len: usize,
    /// Sessions followed at once; frames of further sessions are dropped and counted.
    pub max_sessions: usize,
    /// A session heard from for this long is declared dead.
    pub session_timeout_ns: u64,
    /// STATUS keep-alive interval towards each session's sender.
    pub status_interval_ns: u64,
    /// Flow-control window announced in STATUS frames, in frames past the next expected one
    /// (0: no window, the sender is not held back by this receiver).
    pub window_frames: u32,
    /// With `window_frames` 0: a window of this many bytes (the receive buffer this receiver
    /// may fill), announced in frames of the average length seen so far (1472 bytes until a
    /// thousand frames were seen, at least 64). 0: no window.
    pub window_bytes: u64,
    /// With `window_frames` 0: a window of this many datagrams (a receive ring of that many
    /// slots, `xdp=`), announced in frames: the datagrams times the data frames a datagram has
    /// carried on average (1 until a thousand frames were seen). Takes precedence over
    /// `window_bytes`. 0: not used.
    pub window_datagrams: u32,
    /// Loss repair by NAK (`None`: a gap is reported as `Lost` at once).
    pub nak: Option<NakConfig>,
    /// The least sequence jump a single frame is believed for; the bound is larger when the
    /// window or the sender's announced retention is ([`Receiver::jump_bound`](super::Receiver::jump_bound)). `u64::MAX`:
    /// no bound (TCP, where the connection vouches for every frame).
    pub max_jump_frames: u64,
    /// Where a session joined mid-stream starts (needs `nak`; without it, always at the first
    /// frame seen).
    pub late_join: LateJoin,
    /// A session may be heard from a second source address: A and B lines
    /// (`mcast://...?b=GROUP`), whose sender may send line B from another interface
    /// (`b_iface=`). The first other source a session is heard from is bound as its B line's,
    /// as the first one was as its own; a third is foreign. STATUS frames go to both, a NAK to
    /// the one last heard.
    pub second_source: bool,
}

impl ReceiverConfig {
    pub fn new(stream_id: u32, receiver_id: u32) -> Self {
        ReceiverConfig {
            stream_id,
            receiver_id,
            max_message_len: 64 << 20,
            max_sessions: 64,
            session_timeout_ns: 5_000_000_000,
            status_interval_ns: 100_000_000,
            window_frames: 0,
            window_bytes: 0,
            window_datagrams: 0,
            nak: None,
            max_jump_frames: 4096,
            late_join: LateJoin::Start,
            second_source: false,
        }
    }
}

/// Where a receiver starts a session it first hears mid-stream (`late_join=` on `udp://` and
/// `mcast://` subscribers; docs/protocol.md §13). Anything before the first frame seen is asked
/// for by NAK, like a gap: what the sender still retains is delivered in order before the
/// rest, what it no longer retains is reported `Lost` (except for [`Start`](Self::Start),
/// which asks only when the sender still has the session's first message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LateJoin {
    /// At the first frame seen: nothing sent before is delivered or reported.
    None,
    /// The default: a session first heard within its first [`LATE_JOIN_START_MAX`] sequence
    /// numbers, whose first message the sender still retains (it began moments ago, within
    /// the sender's retention), is delivered from that first message; any other session
    /// starts at the first frame seen, as with `None`. A subscriber that exists when a source
    /// starts gets the source from its first message, however long topic resolution or the
    /// JOIN took, and one joining a long-running stream is not handed its history.
    #[default]
    Start,
    /// From the session's first message (sequence 0), as far back as the sender retains;
    /// the rest is reported `Lost`.
    All,
    /// The last N sequence numbers before the first frame seen (N messages when none is
    /// fragmented), as far back as the sender retains; the rest is reported `Lost`.
    Last(u64),
}

/// [`LateJoin::Start`] recovers a session from its first message only when the first frame
/// seen is at most this many sequence numbers in.
pub const LATE_JOIN_START_MAX: u64 = 65_536;

impl fmt::Display for LateJoin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LateJoin::None => f.write_str("none"),
            LateJoin::Start => f.write_str("start"),
            LateJoin::All => f.write_str("all"),
            LateJoin::Last(n) => write!(f, "{n}"),
        }
    }
}

/// A `late_join` value that is none of `none`, `start`, `all` or a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateJoinError(pub String);

impl fmt::Display for LateJoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "late_join={} is not accepted: use none (start at the first message seen), start (from the first message when the stream began moments ago; the default), all (everything the publisher still retains) or a number of messages to go back, for example late_join=1000",
            self.0
        )
    }
}
impl std::error::Error for LateJoinError {}

impl FromStr for LateJoin {
    type Err = LateJoinError;
    fn from_str(v: &str) -> Result<Self, Self::Err> {
        match v {
            "none" => Ok(LateJoin::None),
            "start" => Ok(LateJoin::Start),
            "all" => Ok(LateJoin::All),
            _ => match v.parse::<u64>() {
                Ok(0) => Ok(LateJoin::None),
                Ok(n) => Ok(LateJoin::Last(n)),
                Err(_) => Err(LateJoinError(v.to_string())),
            },
        }
    }
}
