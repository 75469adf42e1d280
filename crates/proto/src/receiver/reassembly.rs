//! Messages from DATA frames in sequence order: a frame with BEGIN and END is a whole message
//! (delivered from the frame itself); the fragments of a longer one are gathered in a buffer
//! kept between messages. Fragments before the first BEGIN, and after a gap cut a message,
//! are dropped (docs/protocol.md §12); fragments that do not add up to their announced length
//! drop the message and count as corrupt.

use peregrine_wire::data::DataRepr;
use peregrine_wire::header::flags;

/// One session's reassembly.
#[derive(Debug)]
pub(super) struct Reassembly {
    /// The message being gathered: (first sequence, message length, bytes). After a message
    /// completes, `(0, 0, buffer)` keeps the allocation.
    partial: Option<(u64, usize, Vec<u8>)>,
    /// Waiting for a BEGIN (joined mid-message, or a gap cut a message).
    need_begin: bool,
}

/// What one in-order DATA frame made.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step<'a> {
    /// Nothing to deliver yet (a fragment gathered, or dropped waiting for a BEGIN).
    Nothing,
    /// A whole message, in the frame.
    Whole(&'a [u8]),
    /// The last fragment of a message starting at sequence `first`: deliver `message`, then
    /// hand it back with [`Reassembly::recycle`].
    Complete { first: u64, message: Vec<u8> },
    /// Fragments that do not add up, or a message longer than allowed: dropped.
    Corrupt,
}

impl Reassembly {
    pub(super) fn new(need_begin: bool) -> Self {
        Reassembly {
            partial: None,
            need_begin,
        }
    }

    /// Frames were skipped (lost, given up, or a join moved): the message being gathered
    /// cannot complete; wait for the next BEGIN.
    pub(super) fn cut(&mut self) {
        self.partial = None;
        self.need_begin = true;
    }

    /// The next frame in sequence.
    // Inlined, the fragment path too: split out of the receiver they cost no more instructions
    // than before (crates/proto/examples/receive_loop.rs: +0.5% at 32 B, +0.3% for messages
    // in three fragments; called, the fragment path cost +4.7%).
    #[inline(always)]
    pub(super) fn on_frame<'a>(&mut self, d: &DataRepr<'a>, max_message_len: usize) -> Step<'a> {
        if d.flags & (flags::BEGIN | flags::END) == flags::BEGIN | flags::END {
            self.whole();
            return Step::Whole(d.payload);
        }
        self.on_fragment(d, max_message_len)
    }

    /// A whole message (BEGIN|END) came in sequence: whatever was being gathered is over, and
    /// the next fragment must be a BEGIN.
    #[inline(always)]
    pub(super) fn whole(&mut self) {
        self.need_begin = false;
        self.partial = None;
    }

    /// A frame without both BEGIN and END: one of a longer message's fragments.
    #[inline]
    fn on_fragment<'a>(&mut self, d: &DataRepr<'a>, max_message_len: usize) -> Step<'a> {
        let begin = d.flags & flags::BEGIN != 0;
        let end = d.flags & flags::END != 0;
        if begin {
            self.need_begin = false;
        } else if self.need_begin {
            return Step::Nothing; // a fragment of a message whose start we never saw
        }
        let len = d.message_length as usize;
        if begin {
            if len > max_message_len {
                self.need_begin = true;
                return Step::Corrupt;
            }
            let mut buf = self.partial.take().map(|r| r.2).unwrap_or_default();
            buf.clear();
            buf.reserve(len);
            buf.extend_from_slice(d.payload);
            self.partial = Some((d.sequence, len, buf));
            return Step::Nothing;
        }
        let Some((first, total, mut buf)) = self.partial.take() else {
            self.need_begin = true;
            return Step::Nothing;
        };
        if total != len
            || buf.len() + d.payload.len() > total
            || (end && buf.len() + d.payload.len() != total)
        {
            // Fragments that do not add up: drop the message.
            self.need_begin = true;
            return Step::Corrupt;
        }
        buf.extend_from_slice(d.payload);
        if !end {
            self.partial = Some((first, total, buf));
            return Step::Nothing;
        }
        Step::Complete {
            first,
            message: buf,
        }
    }

    /// Takes back a completed message's buffer for the next fragmented message.
    pub(super) fn recycle(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        self.partial = Some((0, 0, buf));
        self.need_begin = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(sequence: u64, fl: u16, message_length: u32, payload: &[u8]) -> DataRepr<'_> {
        DataRepr {
            flags: fl,
            session_id: 1,
            stream_id: 2,
            sequence,
            message_length,
            payload,
        }
    }

    const B: u16 = flags::BEGIN;
    const E: u16 = flags::END;

    #[test]
    fn fragments_make_one_message_and_a_whole_frame_is_delivered_in_place() {
        let mut r = Reassembly::new(false);
        assert_eq!(
            r.on_frame(&frame(0, B | E, 3, b"abc"), 100),
            Step::Whole(b"abc")
        );
        assert_eq!(r.on_frame(&frame(1, B, 5, b"he"), 100), Step::Nothing);
        assert_eq!(r.on_frame(&frame(2, 0, 5, b"l"), 100), Step::Nothing);
        let Step::Complete { first, message } = r.on_frame(&frame(3, E, 5, b"lo"), 100) else {
            panic!("not complete");
        };
        assert_eq!((first, &message[..]), (1, &b"hello"[..]));
        r.recycle(message);
        // The next fragmented message reuses the buffer and starts clean.
        assert_eq!(r.on_frame(&frame(4, B, 2, b"x"), 100), Step::Nothing);
        assert!(matches!(
            r.on_frame(&frame(5, E, 2, b"y"), 100),
            Step::Complete { first: 4, ref message } if message == b"xy"
        ));
    }

    #[test]
    fn fragments_before_a_begin_or_after_a_cut_are_dropped() {
        let mut r = Reassembly::new(true);
        assert_eq!(r.on_frame(&frame(7, E, 4, b"tail"), 100), Step::Nothing);
        assert_eq!(r.on_frame(&frame(8, B, 4, b"ab"), 100), Step::Nothing);
        r.cut();
        assert_eq!(r.on_frame(&frame(10, E, 4, b"cd"), 100), Step::Nothing);
        assert_eq!(
            r.on_frame(&frame(11, B | E, 1, b"z"), 100),
            Step::Whole(b"z")
        );
    }

    #[test]
    fn fragments_that_do_not_add_up_or_a_message_too_long_are_corrupt() {
        let mut r = Reassembly::new(false);
        assert_eq!(r.on_frame(&frame(0, B, 101, b"a"), 100), Step::Corrupt);
        assert_eq!(r.on_frame(&frame(1, E, 101, b"b"), 100), Step::Nothing);
        // Another length announced mid-message.
        r.on_frame(&frame(2, B, 4, b"ab"), 100);
        assert_eq!(r.on_frame(&frame(3, E, 5, b"cd"), 100), Step::Corrupt);
        // More bytes than announced.
        r.on_frame(&frame(4, B, 4, b"ab"), 100);
        assert_eq!(r.on_frame(&frame(5, 0, 4, b"cde"), 100), Step::Corrupt);
        // Fewer at the END.
        r.on_frame(&frame(6, B, 4, b"ab"), 100);
        assert_eq!(r.on_frame(&frame(7, E, 4, b"c"), 100), Step::Corrupt);
        // After each, the next BEGIN starts afresh.
        assert_eq!(
            r.on_frame(&frame(8, B | E, 2, b"ok"), 100),
            Step::Whole(b"ok")
        );
    }
}
