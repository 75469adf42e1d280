//! The sending half of a network session, sans I/O: numbering, fragmentation, batching, flow
//! control limit, heartbeat schedule.
//!
//! [`Sender`] turns messages into DATA frames in its own batch buffer and hands finished
//! batches to a sink closure the driver supplies (a `sendmsg` with UDP GSO, a `sendmmsg`, or a
//! TCP write). It never reads a clock: every call takes `now_ns`.
//!
//! **Datagram packing** ([`Packing::Datagrams`]): the buffer is a row of segments of exactly
//! `segment_len` bytes (the datagram size). Frames are packed into the current segment at
//! 8-byte aligned offsets; a frame that does not fit starts the next segment, and the space left
//! in the previous one is filled with a PAD frame, so every segment but the last of a batch is
//! exactly `segment_len` long and the whole batch can leave in one UDP GSO send. When the space
//! left is too small for a PAD frame (8 to 24 bytes), the batch ends with that short segment.
//!
//! **Stream packing** ([`Packing::Stream`], TCP): frames follow each other at 8-byte aligned
//! offsets with zero padding between them; `segment_len` is only the largest frame.
//!
//! **Fragmentation:** a message longer than `segment_len - 32` bytes is split into DATA frames
//! of consecutive sequence numbers (BEGIN on the first, END on the last, every one carrying the
//! whole `message_length`), each filling a whole segment (docs/protocol.md §12).
//!
//! **Send modes:** *urgent* hands every message to the sink at once; *normal* keeps messages
//! until `batch_bytes` are waiting, until the oldest has waited `batch_interval_ns` (checked on
//! every `offer` and `poll`), or until `flush`.
//!
//! ```
//! use peregrine_proto::sender::{Batch, Packing, Sender, SenderConfig, SendMode};
//!
//! let cfg = SenderConfig {
//!     mode: SendMode::Normal { batch_bytes: 65_000, batch_interval_ns: 100_000 },
//!     ..SenderConfig::new(0x1234, 7, Packing::Datagrams, 1472)
//! };
//! let mut sender = Sender::new(cfg);
//! let mut datagrams = 0;
//! let mut sink = |b: Batch<'_>| -> Result<(), ()> { datagrams += b.segments(); Ok(()) };
//! for i in 0..100u64 {
//!     sender.offer(&i.to_le_bytes(), 0, &mut sink).unwrap();
//! }
//! sender.flush(0, &mut sink).unwrap();
//! // 100 frames of 40 bytes in 1472-byte datagrams (36 each, then a PAD): one batch of 3.
//! assert_eq!(datagrams, 3);
//! ```

use crate::rate::TokenBucket;
use crate::retention::RetentionBuffer;
use peregrine_wire::align_frame;
use peregrine_wire::data::{data_header, emit_pad, DATA_HEADER_LEN, MAX_MESSAGE_LEN};
use peregrine_wire::header::flags;
use peregrine_wire::heartbeat::{HeartbeatFrame, HeartbeatRepr, HEARTBEAT_LEN};
use std::collections::VecDeque;

/// How frames are laid out in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// Fixed-size datagrams (UDP): every segment but the last is exactly `segment_len`.
    Datagrams,
    /// A byte stream (TCP): frames back to back.
    Stream,
}

/// When batched messages leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// Every message leaves in the `offer` that published it.
    Urgent,
    /// Messages wait until `batch_bytes` are batched, the oldest has waited
    /// `batch_interval_ns`, or `flush` is called.
    Normal {
        batch_bytes: usize,
        batch_interval_ns: u64,
    },
}

/// A sender's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    pub session_id: u32,
    pub stream_id: u32,
    pub packing: Packing,
    /// Datagram size (or, for a stream, the largest frame): a multiple of 8, at least 64.
    pub segment_len: usize,
    /// Largest batch handed to the sink at once, in bytes (rounded down to whole segments).
    pub max_batch_len: usize,
    pub mode: SendMode,
    /// First heartbeat after the last send, doubling up to `heartbeat_max_ns` while idle.
    pub heartbeat_min_ns: u64,
    pub heartbeat_max_ns: u64,
    /// Retention for retransmission: bytes of sent DATA frames kept (0: none)...
    pub retain_bytes: usize,
    /// ...and their largest age.
    pub retain_age_ns: u64,
    /// A range is not retransmitted again within this time of its last retransmission (a NAK
    /// from another receiver for the same loss is answered by the same retransmission).
    pub retransmit_linger_ns: u64,
    /// Most frames retransmitted for one NAK (the rest of its ranges are ignored and counted).
    pub retransmit_max_frames: u64,
    /// Data rate limit in bytes per second, datagrams as sent (0: none): `offer` refuses with
    /// `BackPressured` while the batches sent are ahead of it. Bursts up to 1 ms of the rate or
    /// one batch, whichever is larger.
    pub rate_bytes_per_s: u64,
    /// Retransmission rate limit in bytes per second (0: none): NAKs are answered only within
    /// it, so a flood of NAKs cannot turn into a flood of data.
    pub retransmit_rate_bytes_per_s: u64,
}

impl SenderConfig {
    /// Defaults: urgent, batches of up to 64 KiB, heartbeats from 100 us to 100 ms.
    pub fn new(session_id: u32, stream_id: u32, packing: Packing, segment_len: usize) -> Self {
        SenderConfig {
            session_id,
            stream_id,
            packing,
            segment_len,
            max_batch_len: 65_000,
            mode: SendMode::Urgent,
            heartbeat_min_ns: 100_000,
            heartbeat_max_ns: 100_000_000,
            retain_bytes: 0,
            retain_age_ns: 0,
            retransmit_linger_ns: 1_000_000,
            retransmit_max_frames: 4096,
            rate_bytes_per_s: 0,
            retransmit_rate_bytes_per_s: 0,
        }
    }
}

/// Smallest segment: a DATA header and 32 bytes of payload.
pub const MIN_SEGMENT_LEN: usize = 64;

/// A finished batch handed to the sink.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The frames. With datagram packing: consecutive datagrams of `segment_len` bytes, the last
    /// one possibly shorter.
    pub bytes: &'a [u8],
    /// The datagram size (datagram packing) or 0 (stream packing: one contiguous write).
    pub segment_len: usize,
}

impl<'a> Batch<'a> {
    /// How many datagrams the batch holds (1 for a stream write).
    pub fn segments(&self) -> usize {
        if self.segment_len == 0 {
            1
        } else {
            self.bytes.len().div_ceil(self.segment_len)
        }
    }
    /// The datagrams one by one (the whole batch for stream packing).
    pub fn datagrams(&self) -> impl Iterator<Item = &'a [u8]> {
        let step = if self.segment_len == 0 {
            self.bytes.len().max(1)
        } else {
            self.segment_len
        };
        self.bytes.chunks(step)
    }
}

/// Why `offer` published nothing.
// Not #[non_exhaustive]: every driver maps each case to its own `OfferError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError<E> {
    /// The message is longer than [`MAX_MESSAGE_LEN`].
    TooLarge { len: usize, max: usize },
    /// Flow control: the receivers have not made room for this many more frames.
    BackPressured,
    /// The sink failed (the driver keeps the details).
    Sink(E),
}

/// The sender of one stream of one session. See the [module documentation](self).
#[derive(Debug)]
pub struct Sender {
    cfg: SenderConfig,
    next_sequence: u64,
    buf: Vec<u8>,
    /// Bytes used in `buf`.
    len: usize,
    /// Start of the current segment (datagram packing).
    seg_start: usize,
    /// The batch must end with the current segment (it could not be padded to full length).
    sealed: bool,
    /// End of the last frame written (without its alignment padding).
    last_end: usize,
    /// When the oldest batched frame was written.
    first_pending_ns: Option<u64>,
    /// Sequence number of the oldest batched (not yet sent) frame.
    first_pending_sequence: Option<u64>,
    /// Flow control: frames with sequence `>= limit` may not be sent yet.
    limit: u64,
    heartbeat_interval_ns: u64,
    heartbeat_deadline_ns: u64,
    stats: SenderStats,
    retention: Option<RetentionBuffer>,
    /// Ranges retransmitted lately: (start, end, when).
    recent_retransmits: VecDeque<(u64, u64, u64)>,
    /// Retransmission batch buffer (datagram packing).
    rtx: Vec<u8>,
    rate: Option<TokenBucket>,
    retransmit_rate: Option<TokenBucket>,
    /// The inline paths' window, so that their checks are a few compares (see
    /// [`refresh_inline`](Self::refresh_inline)): a frame ending at or below `inline_room_end`
    /// fits in the buffer and the current segment, with the mode normal, a batch begun and no
    /// rate (0: no inline path at all)...
    inline_room_end: usize,
    /// ...and at or below `inline_batch_end`, it also leaves the batch under `batch_bytes`.
    inline_batch_end: usize,
    /// Tests: every offer through the general path (the batch fast path is compared with it).
    #[cfg(test)]
    general_only: bool,
}

/// What a sender counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub messages: u64,
    pub bytes: u64,
    /// DATA frames written: the next sequence number, as every frame takes one and the first
    /// is 0 (kept by the sender's sequence, not counted again per frame).
    pub frames: u64,
    pub batches: u64,
    pub datagrams: u64,
    pub heartbeats: u64,
    pub back_pressured: u64,
    pub naks_received: u64,
    /// Frames sent again.
    pub retransmitted: u64,
    /// Requested frames no longer retained (the receiver reports them lost).
    pub nak_unavailable: u64,
    /// Requested frames not sent yet (a confused or hostile receiver).
    pub nak_future: u64,
    /// Requested frames retransmitted moments ago (answered by that retransmission).
    pub nak_lingering: u64,
    /// Requested frames beyond the per-NAK cap.
    pub nak_capped: u64,
    /// Requested frames not retransmitted for the retransmission rate limit.
    pub nak_rate_limited: u64,
    /// Offers refused by the data rate limit.
    pub rate_limited: u64,
}

impl Sender {
    /// A sender starting at sequence 0.
    ///
    /// # Panics
    /// If `segment_len` is not a multiple of 8 of at least [`MIN_SEGMENT_LEN`] (drivers
    /// validate the configuration first).
    pub fn new(cfg: SenderConfig) -> Self {
        assert!(
            cfg.segment_len >= MIN_SEGMENT_LEN && cfg.segment_len % 8 == 0,
            "segment_len {} must be a multiple of 8 of at least {MIN_SEGMENT_LEN}",
            cfg.segment_len
        );
        let cap = match cfg.packing {
            Packing::Datagrams => (cfg.max_batch_len / cfg.segment_len).max(1) * cfg.segment_len,
            Packing::Stream => cfg.max_batch_len.max(cfg.segment_len),
        };
        Sender {
            cfg,
            next_sequence: 0,
            buf: vec![0; cap],
            len: 0,
            seg_start: 0,
            sealed: false,
            last_end: 0,
            first_pending_ns: None,
            first_pending_sequence: None,
            limit: u64::MAX,
            heartbeat_interval_ns: cfg.heartbeat_min_ns,
            heartbeat_deadline_ns: cfg.heartbeat_min_ns,
            stats: SenderStats::default(),
            retention: (cfg.retain_bytes > 0)
                .then(|| RetentionBuffer::new(cfg.retain_bytes, cfg.retain_age_ns)),
            recent_retransmits: VecDeque::new(),
            rtx: Vec::new(),
            rate: bucket(cfg.rate_bytes_per_s, cfg.max_batch_len),
            retransmit_rate: bucket(cfg.retransmit_rate_bytes_per_s, cfg.max_batch_len),
            inline_room_end: 0,
            inline_batch_end: 0,
            #[cfg(test)]
            general_only: false,
        }
    }

    /// Recomputes the inline window from what it depends on: the mode, the rate, the buffer,
    /// the batch's first frame, the current segment. Called wherever one of them
    /// changes (`reserve`, `flush`); the inline paths change none of them.
    fn refresh_inline(&mut self) {
        (self.inline_room_end, self.inline_batch_end) = (0, 0);
        #[cfg(test)]
        if self.general_only {
            return;
        }
        let SendMode::Normal { batch_bytes, .. } = self.cfg.mode else {
            return;
        };
        if self.first_pending_ns.is_none() || self.rate.is_some() {
            return;
        }
        // Frames start at multiples of 8 from the segment's start and `segment_len` is one,
        // so "its aligned end within the segment" is "its end within the segment".
        let room = match self.cfg.packing {
            Packing::Stream => self.buf.len(),
            Packing::Datagrams => self.buf.len().min(self.seg_start + self.cfg.segment_len),
        };
        self.inline_room_end = room;
        // `offered` sends the batch once it holds `batch_bytes`: stay below.
        self.inline_batch_end = room.min(batch_bytes.saturating_sub(1));
    }

    pub fn config(&self) -> &SenderConfig {
        &self.cfg
    }
    /// The sequence number the next DATA frame will carry.
    #[inline]
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }
    pub fn stats(&self) -> SenderStats {
        SenderStats {
            frames: self.next_sequence,
            ..self.stats
        }
    }
    /// Bytes batched and not yet handed to the sink.
    pub fn pending_len(&self) -> usize {
        self.len
    }
    /// Largest payload of one frame.
    pub fn max_frame_payload(&self) -> usize {
        self.cfg.segment_len - DATA_HEADER_LEN
    }
    /// How many frames (sequence numbers) a message of `len` bytes takes.
    pub fn frames_for(&self, len: usize) -> u64 {
        // Most messages fit in one frame: no division for them.
        if len <= self.max_frame_payload() {
            return 1;
        }
        len.div_ceil(self.max_frame_payload()) as u64
    }

    /// Counts an offer the driver refused for its own back-pressure (a full TCP queue).
    pub fn note_back_pressure(&mut self) {
        self.stats.back_pressured += 1;
    }

    /// Sets the flow-control limit: frames with sequence `>= limit` wait (`u64::MAX`: none).
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Publishes `payload`; returns the sequence number of its first frame.
    pub fn offer<E, S>(
        &mut self,
        payload: &[u8],
        now_ns: u64,
        sink: &mut S,
    ) -> Result<u64, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
    {
        self.offer_inner(
            payload.len(),
            now_ns,
            sink,
            |dst| dst.copy_from_slice(payload),
            Some(payload),
        )
    }

    /// Publishes a message of `len` bytes written in place by `fill` (zero copy when it fits in
    /// one frame; a fragmented message is filled into a temporary buffer first).
    pub fn offer_with<E, S, F>(
        &mut self,
        len: usize,
        now_ns: u64,
        sink: &mut S,
        fill: F,
    ) -> Result<u64, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
        F: FnOnce(&mut [u8]),
    {
        self.offer_inner(len, now_ns, sink, fill, None)
    }

    /// `fill` writes a message that fits in one frame; a longer one is fragmented from `whole`
    /// when the caller has it as a slice, else from a temporary buffer `fill` writes.
    #[inline]
    fn offer_inner<E, S, F>(
        &mut self,
        len: usize,
        now_ns: u64,
        sink: &mut S,
        fill: F,
        whole: Option<&[u8]>,
    ) -> Result<u64, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
        F: FnOnce(&mut [u8]),
    {
        if let Some(at) = self.reserve_in_batch(len) {
            // The common case, inlined into the caller's loop: one frame, in a batch that has
            // room for it, with no limit or rate to consult.
            let first = self.next_sequence;
            self.write_one_frame(at, len, fill);
            self.offered(len, now_ns, sink)?;
            return Ok(first);
        }
        self.offer_general(len, now_ns, sink, fill, whole)
    }

    /// Writes a one-frame message of `len` bytes (by `fill`) into the batch being built, when
    /// that is all there is to do: the batch already has a frame and room for this one, the
    /// mode is normal, there is no flow-control limit or rate to consult, and the batch need
    /// not leave after it (`batch_bytes` not reached). Returns the message's sequence number,
    /// as [`offer_with`](Self::offer_with) would. Otherwise it changes nothing and gives `fill`
    /// back, for `offer_with`.
    ///
    /// It never calls a sink, so a driver can take it inline in its callers' loops and keep
    /// its own offer, with the sink and everything else, out of line (the TCP publisher does).
    ///
    /// It reads no clock. The batch interval is checked by the calls that take the time
    /// (`offer`, `offer_with`, `poll`, `flush`), and this one does what they would do at the
    /// time last given to them: a driver calls it between them without reading the clock
    /// again, and a batch whose interval passed meanwhile leaves at the next call that takes
    /// the time (the TCP publisher makes one every 64 sequence numbers at most).
    #[inline(always)]
    pub fn offer_in_batch<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> Result<u64, F> {
        // `inline_batch_end` is `inline_room_end` kept below `batch_bytes`.
        let Some(at) = self.reserve_within(len, self.inline_batch_end) else {
            return Err(fill);
        };
        // What `offer_inner` and `offered` do for this message, the flush excepted: the checks
        // above say it would not happen.
        let first = self.next_sequence;
        self.write_one_frame(at, len, fill);
        self.stats.messages += 1;
        self.stats.bytes += len as u64;
        Ok(first)
    }

    /// Room for a one-frame message of `len` bytes in the batch being built, in normal mode,
    /// with no flow-control limit or rate reached: its offset, the room taken (the frame's
    /// alignment padding zeroed) as [`reserve`](Self::reserve) would. `None` for everything
    /// else (the first frame of a batch, a full batch or segment, fragments, urgent mode),
    /// which [`offer_general`](Self::offer_general) handles.
    #[inline(always)]
    fn reserve_in_batch(&mut self, len: usize) -> Option<usize> {
        self.reserve_within(len, self.inline_room_end)
    }

    /// Room for a one-frame message of `len` bytes at the batch's end when its frame ends at or
    /// below `end` (an inline window, 0 when there is no inline path: it covers the mode, the
    /// rate, the batch's first frame, the buffer and the segment) and the flow-control limit
    /// lets it go: its offset, the room taken with its alignment padding zeroed, as
    /// [`reserve`](Self::reserve) would.
    #[inline(always)]
    fn reserve_within(&mut self, len: usize, end: usize) -> Option<usize> {
        let frame_len = DATA_HEADER_LEN + len;
        let aligned = align_frame(frame_len);
        let at = self.len;
        if frame_len > self.cfg.segment_len
            || at + aligned > end
            || self.next_sequence >= self.limit
        {
            return None;
        }
        if aligned > frame_len {
            self.buf[at + frame_len..at + aligned].fill(0);
        }
        self.len = at + aligned;
        self.last_end = at + frame_len;
        Some(at)
    }

    /// Everything [`reserve_in_batch`](Self::reserve_in_batch) leaves: a batch's first frame,
    /// a full batch, fragments, flow control and the rate limit, urgent mode.
    #[inline(never)]
    fn offer_general<E, S, F>(
        &mut self,
        len: usize,
        now_ns: u64,
        sink: &mut S,
        fill: F,
        whole: Option<&[u8]>,
    ) -> Result<u64, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
        F: FnOnce(&mut [u8]),
    {
        if len > MAX_MESSAGE_LEN as usize {
            return Err(SendError::TooLarge {
                len,
                max: MAX_MESSAGE_LEN as usize,
            });
        }
        let frames = self.frames_for(len);
        if self.limit != u64::MAX && self.next_sequence + frames > self.limit {
            self.stats.back_pressured += 1;
            // What is batched is within the limit: it leaves now. Held for the batch interval
            // instead, a publisher that only offers while refused would keep it until a timer
            // (a receiver cannot open a window for frames it never got): a window of a few
            // batches ran at one window per keep-alive, 10K msgs/s.
            if self.pending_len() > 0 {
                self.flush(now_ns, sink)?;
            }
            return Err(SendError::BackPressured);
        }
        if let Some(b) = self.rate.as_mut() {
            if !b.has_credit(now_ns) {
                self.stats.rate_limited += 1;
                return Err(SendError::BackPressured);
            }
        }
        let first = self.next_sequence;
        if frames == 1 {
            let urgent = if matches!(self.cfg.mode, SendMode::Urgent) {
                flags::URGENT
            } else {
                0
            };
            let at = self.reserve(DATA_HEADER_LEN + len, now_ns, sink)?;
            self.write_data_header(at, flags::BEGIN | flags::END | urgent, len, len);
            fill(&mut self.buf[at + DATA_HEADER_LEN..at + DATA_HEADER_LEN + len]);
        } else {
            let owned;
            let whole = match whole {
                Some(w) => w,
                None => {
                    let mut v = vec![0u8; len];
                    fill(&mut v);
                    owned = v;
                    &owned[..]
                }
            };
            let chunk = self.max_frame_payload();
            let mut off = 0;
            while off < len {
                let n = chunk.min(len - off);
                let mut fl = 0;
                if off == 0 {
                    fl |= flags::BEGIN;
                }
                if off + n == len {
                    fl |= flags::END;
                    if matches!(self.cfg.mode, SendMode::Urgent) {
                        fl |= flags::URGENT;
                    }
                }
                let at = self.reserve(DATA_HEADER_LEN + n, now_ns, sink)?;
                self.write_data_header(at, fl, len, n);
                self.buf[at + DATA_HEADER_LEN..at + DATA_HEADER_LEN + n]
                    .copy_from_slice(&whole[off..off + n]);
                off += n;
            }
        }
        self.offered(len, now_ns, sink)?;
        Ok(first)
    }

    /// A message of `len` bytes is in the batch: it is counted, and the batch leaves when the
    /// mode says (urgent: now; normal: at `batch_bytes`, or when its oldest message waited
    /// `batch_interval_ns`).
    #[inline(always)]
    fn offered<E, S>(&mut self, len: usize, now_ns: u64, sink: &mut S) -> Result<(), SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
    {
        self.stats.messages += 1;
        self.stats.bytes += len as u64;
        match self.cfg.mode {
            SendMode::Urgent => self.flush(now_ns, sink),
            SendMode::Normal {
                batch_bytes,
                batch_interval_ns,
            } => {
                let waited = self
                    .first_pending_ns
                    .map_or(0, |t| now_ns.saturating_sub(t));
                if self.len >= batch_bytes || waited >= batch_interval_ns {
                    self.flush(now_ns, sink)?;
                }
                Ok(())
            }
        }
    }

    /// Writes a one-frame message at `at`: its header, then its payload by `fill`. The frame
    /// is taken as one slice, so the inline paths pay one bounds check, not one for the header
    /// and another for the payload (with the buffer's length loaded again for each).
    #[inline(always)]
    fn write_one_frame<F: FnOnce(&mut [u8])>(&mut self, at: usize, len: usize, fill: F) {
        let header = data_header(
            flags::BEGIN | flags::END,
            self.cfg.session_id,
            self.cfg.stream_id,
            len as u32,
            len,
            self.next_sequence,
        );
        let (head, payload) =
            self.buf[at..at + DATA_HEADER_LEN + len].split_at_mut(DATA_HEADER_LEN);
        head.copy_from_slice(&header);
        fill(payload);
        self.next_sequence += 1;
    }

    #[inline(always)]
    fn write_data_header(&mut self, at: usize, fl: u16, message_len: usize, payload_len: usize) {
        self.buf[at..at + DATA_HEADER_LEN].copy_from_slice(&data_header(
            fl,
            self.cfg.session_id,
            self.cfg.stream_id,
            message_len as u32,
            payload_len,
            self.next_sequence,
        ));
        self.next_sequence += 1;
    }

    /// Finds room for a frame of `frame_len` bytes, flushing the batch if needed; returns its
    /// offset in `buf`. The frame's padding to 8 bytes is zeroed.
    fn reserve<E, S>(
        &mut self,
        frame_len: usize,
        now_ns: u64,
        sink: &mut S,
    ) -> Result<usize, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
    {
        debug_assert!(frame_len <= self.cfg.segment_len);
        let aligned = align_frame(frame_len);
        match self.cfg.packing {
            Packing::Stream => {
                if self.len + aligned > self.buf.len() {
                    self.flush(now_ns, sink)?;
                }
            }
            Packing::Datagrams => {
                let seg = self.cfg.segment_len;
                let used = self.len - self.seg_start;
                if used + frame_len > seg {
                    // Start a new segment: pad this one to full length, or end the batch here.
                    let left = seg - used;
                    if left >= DATA_HEADER_LEN {
                        emit_pad(
                            &mut self.buf[self.len..self.len + left],
                            self.cfg.session_id,
                            self.next_sequence,
                            left as u32,
                        );
                        self.buf[self.len + DATA_HEADER_LEN..self.len + left].fill(0);
                        self.len += left;
                    } else if left > 0 {
                        self.sealed = true;
                    }
                    if self.sealed || self.len + seg > self.buf.len() {
                        self.flush(now_ns, sink)?;
                    }
                    self.seg_start = self.len;
                }
            }
        }
        let at = self.len;
        // Zero the alignment padding after the frame (within the buffer), if it has any.
        let end = (at + aligned).min(self.buf.len());
        if end > at + frame_len {
            self.buf[at + frame_len..end].fill(0);
        }
        self.len = end;
        self.last_end = at + frame_len;
        if self.first_pending_ns.is_none() {
            self.first_pending_ns = Some(now_ns);
            self.first_pending_sequence = Some(self.next_sequence);
        }
        self.refresh_inline();
        Ok(at)
    }

    /// Hands everything batched to the sink.
    pub fn flush<E, S>(&mut self, now_ns: u64, sink: &mut S) -> Result<(), SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
    {
        if self.len == 0 {
            return Ok(());
        }
        // A datagram need not carry the last frame's alignment padding; a stream must (the
        // next batch continues at an aligned offset).
        let len = match self.cfg.packing {
            Packing::Datagrams => self.last_end,
            Packing::Stream => self.len,
        };
        let segment_len = match self.cfg.packing {
            Packing::Datagrams => self.cfg.segment_len,
            Packing::Stream => 0,
        };
        let batch = Batch {
            bytes: &self.buf[..len],
            segment_len,
        };
        let segments = batch.segments() as u64;
        let r = sink(batch);
        if let Some(b) = self.rate.as_mut() {
            b.charge(len as u64, now_ns);
        }
        if let Some(ret) = self.retention.as_mut() {
            let first = self.first_pending_sequence.unwrap_or(self.next_sequence);
            ret.push(batch.bytes, segment_len, first, now_ns);
            ret.expire(now_ns);
        }
        self.len = 0;
        self.last_end = 0;
        self.seg_start = 0;
        self.sealed = false;
        self.first_pending_ns = None;
        self.first_pending_sequence = None;
        self.refresh_inline();
        self.stats.batches += 1;
        self.stats.datagrams += segments;
        self.on_sent(now_ns);
        r.map_err(SendError::Sink)
    }

    fn on_sent(&mut self, now_ns: u64) {
        self.heartbeat_interval_ns = self.cfg.heartbeat_min_ns;
        self.heartbeat_deadline_ns = now_ns + self.heartbeat_interval_ns;
    }

    /// Runs the timers: flushes a batch whose oldest message has waited `batch_interval_ns`, and
    /// says whether a heartbeat is due (the caller then sends [`heartbeat`](Self::heartbeat) to
    /// every receiver and calls [`heartbeat_sent`](Self::heartbeat_sent)). Returns the time of
    /// the next deadline.
    pub fn poll<E, S>(&mut self, now_ns: u64, sink: &mut S) -> Result<PollOutcome, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
    {
        if let (
            Some(t),
            SendMode::Normal {
                batch_interval_ns, ..
            },
        ) = (self.first_pending_ns, self.cfg.mode)
        {
            if now_ns.saturating_sub(t) >= batch_interval_ns {
                self.flush(now_ns, sink)?;
            }
        }
        let heartbeat_due = self.len == 0 && now_ns >= self.heartbeat_deadline_ns;
        let mut next = self.heartbeat_deadline_ns;
        if let (
            Some(t),
            SendMode::Normal {
                batch_interval_ns, ..
            },
        ) = (self.first_pending_ns, self.cfg.mode)
        {
            next = next.min(t + batch_interval_ns);
        }
        Ok(PollOutcome {
            heartbeat_due,
            next_deadline_ns: next,
        })
    }

    /// The sequence number of the next frame not yet handed to the sink (batched frames are
    /// not sent yet).
    pub fn sent_next_sequence(&self) -> u64 {
        self.first_pending_sequence.unwrap_or(self.next_sequence)
    }

    /// The HEARTBEAT frame for this stream now. It announces only what was sent: a frame still
    /// in the batch would otherwise look lost to a receiver, which would then drop it as a
    /// duplicate when it comes.
    pub fn heartbeat(&self) -> [u8; HEARTBEAT_LEN] {
        let mut b = [0u8; HEARTBEAT_LEN];
        let next = self.sent_next_sequence();
        HeartbeatRepr {
            session_id: self.cfg.session_id,
            stream_id: self.cfg.stream_id,
            next_sequence: next,
            oldest_retained: self.oldest_retained(),
        }
        .emit(&mut HeartbeatFrame::new_unchecked(&mut b[..]));
        b
    }

    /// Records that a heartbeat was sent: the next one comes after twice the interval (up to
    /// the maximum) unless data is sent first.
    pub fn heartbeat_sent(&mut self, now_ns: u64) {
        self.stats.heartbeats += 1;
        self.heartbeat_interval_ns =
            (self.heartbeat_interval_ns * 2).min(self.cfg.heartbeat_max_ns);
        self.heartbeat_deadline_ns = now_ns + self.heartbeat_interval_ns;
    }
}

impl Sender {
    /// The oldest sequence number that can still be retransmitted (the next unsent one when
    /// nothing is retained).
    pub fn oldest_retained(&self) -> u64 {
        match &self.retention {
            Some(r) if !r.is_empty() => r.oldest(),
            _ => self.sent_next_sequence(),
        }
    }

    /// Answers a NAK: sends the retained frames of `ranges` (start, count) again, with the
    /// RETRANSMIT flag, through `sink` (the driver decides where: the asking receiver, or the
    /// group so that other receivers' NAKs for the same loss are answered too). Bounded work:
    /// at most `retransmit_max_frames` frames per NAK, nothing not yet sent, nothing
    /// retransmitted within `retransmit_linger_ns`; everything else is counted.
    pub fn on_nak<E, S, I>(
        &mut self,
        ranges: I,
        now_ns: u64,
        sink: &mut S,
    ) -> Result<u64, SendError<E>>
    where
        S: FnMut(Batch<'_>) -> Result<(), E>,
        I: IntoIterator<Item = (u64, u64)>,
    {
        self.stats.naks_received += 1;
        let Some(ret) = self.retention.as_mut() else {
            for (_, count) in ranges {
                self.stats.nak_unavailable += count;
            }
            return Ok(0);
        };
        ret.expire(now_ns);
        let linger = self.cfg.retransmit_linger_ns;
        self.recent_retransmits
            .retain(|&(_, _, at)| now_ns.saturating_sub(at) < linger);
        let sent_next = self.first_pending_sequence.unwrap_or(self.next_sequence);
        let seg = self.cfg.segment_len;
        let cap_frames = self.cfg.retransmit_max_frames;
        let cap = (self.cfg.max_batch_len / seg).max(1) * seg;
        if self.rtx.len() != cap {
            self.rtx = vec![0; cap];
        }
        let mut len = 0usize; // bytes used in rtx
        let mut last_end = 0usize;
        let mut sent = 0u64;
        for (start, count) in ranges {
            let end = start.saturating_add(count);
            // Not sent yet: a receiver cannot have lost it.
            if end > sent_next {
                self.stats.nak_future += end - start.max(sent_next);
            }
            let end = end.min(sent_next);
            if start >= end {
                continue;
            }
            let oldest = ret.oldest();
            if start < oldest {
                self.stats.nak_unavailable += end.min(oldest) - start;
            }
            let mut q = start.max(oldest);
            while q < end {
                if sent >= cap_frames {
                    self.stats.nak_capped += end - q;
                    break;
                }
                if let Some(&(_, e, _)) = self
                    .recent_retransmits
                    .iter()
                    .find(|&&(s0, e0, _)| s0 <= q && q < e0)
                {
                    let skip = e.min(end) - q;
                    self.stats.nak_lingering += skip;
                    q += skip;
                    continue;
                }
                let Some(frame) = ret.get(q) else { break };
                let flen = frame.len();
                if let Some(b) = self.retransmit_rate.as_mut() {
                    if !b.has_credit(now_ns) {
                        self.stats.nak_rate_limited += end - q;
                        break;
                    }
                    b.charge(align_frame(flen) as u64, now_ns);
                }
                let seg_start = len - len % seg;
                let used = len - seg_start;
                if used + flen > seg || (used == 0 && len + seg > cap && len > 0) {
                    // Next segment: pad this one, or end the batch.
                    let left = seg - used;
                    if used > 0 && left >= DATA_HEADER_LEN && len + left + seg <= cap {
                        emit_pad(
                            &mut self.rtx[len..len + left],
                            self.cfg.session_id,
                            sent_next,
                            left as u32,
                        );
                        self.rtx[len + DATA_HEADER_LEN..len + left].fill(0);
                        len += left;
                        if let Some(b) = self.retransmit_rate.as_mut() {
                            b.charge(left as u64, now_ns);
                        }
                    } else if len > 0 {
                        let b = Batch {
                            bytes: &self.rtx[..last_end],
                            segment_len: seg,
                        };
                        sink(b).map_err(SendError::Sink)?;
                        len = 0;
                    }
                }
                self.rtx[len..len + flen].copy_from_slice(frame);
                let f =
                    u16::from_le_bytes([self.rtx[len + 8], self.rtx[len + 9]]) | flags::RETRANSMIT;
                self.rtx[len + 8..len + 10].copy_from_slice(&f.to_le_bytes());
                last_end = len + flen;
                let aligned = align_frame(flen);
                self.rtx[last_end..(len + aligned).min(cap)].fill(0);
                len = (len + aligned).min(cap);
                sent += 1;
                q += 1;
            }
            let done_to = q.min(end);
            if done_to > start.max(oldest) {
                self.recent_retransmits
                    .push_back((start.max(oldest), done_to, now_ns));
                if self.recent_retransmits.len() > 256 {
                    self.recent_retransmits.pop_front();
                }
            }
        }
        if len > 0 {
            sink(Batch {
                bytes: &self.rtx[..last_end],
                segment_len: seg,
            })
            .map_err(SendError::Sink)?;
        }
        self.stats.retransmitted += sent;
        Ok(sent)
    }
}

/// A rate limiter for `rate_bytes_per_s` (none for 0), bursting 1 ms of the rate or one batch.
fn bucket(rate_bytes_per_s: u64, max_batch_len: usize) -> Option<TokenBucket> {
    (rate_bytes_per_s > 0).then(|| {
        TokenBucket::new(
            rate_bytes_per_s,
            (rate_bytes_per_s / 1000).max(max_batch_len as u64),
            0,
        )
    })
}

/// What [`Sender::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollOutcome {
    pub heartbeat_due: bool,
    pub next_deadline_ns: u64,
}

#[cfg(test)]
mod tests;
