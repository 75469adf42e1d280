//! Splits a TCP byte stream into messages.

use super::header::{field, MessageType, HEADER_LEN};
use super::{read_u16, MdError};

/// The complete messages at the start of a buffer read from a TCP stream, in order, and what
/// is left of a partial one at its end.
///
/// Only the framing is checked here (`length >= 8` and a known type, as soon as the bytes
/// that hold them are in): parse each message with [`Message::parse`](super::Message::parse).
/// After an error nothing more is yielded: the stream cannot be trusted past it, and the
/// distributor closes such a connection.
///
/// ```
/// use peregrine_md::codec::{Messages, MessageType};
///
/// let close = [12, 0, 0x13, 0, 0, 0, 0, 0, 1, 0, 0, 0];
/// let mut stream = close.to_vec();
/// stream.extend_from_slice(&close[..5]); // the next message is still on its way
/// let mut messages = Messages::new(&stream);
/// assert_eq!(messages.next(), Some(Ok((MessageType::Close, &close[..]))));
/// assert_eq!(messages.next(), None);
/// assert_eq!(messages.remaining(), &close[..5]); // keep these, read more
/// assert_eq!(messages.missing(), 7); // its length says 12 bytes; 5 are in
/// ```
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Messages<'a> {
    pub fn new(buffer: &'a [u8]) -> Self {
        Messages {
            rest: buffer,
            failed: false,
        }
    }

    /// The bytes not consumed: the start of a partial message once iteration ended without
    /// an error (keep them and append what the socket reads next), or the message that failed.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    /// Bytes still to read before the partial message in [`remaining`](Self::remaining) is
    /// complete: exact once its two length bytes are in, else the bytes the header still
    /// lacks. 0 when nothing is left.
    pub fn missing(&self) -> usize {
        match self.rest {
            [] => 0,
            [a, b, ..] => usize::from(u16::from_le_bytes([*a, *b])).saturating_sub(self.rest.len()),
            _ => HEADER_LEN - self.rest.len(),
        }
    }

    /// True once a framing error was yielded.
    pub fn failed(&self) -> bool {
        self.failed
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<(MessageType, &'a [u8]), MdError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.len() < 2 {
            return None;
        }
        let length = read_u16(self.rest, field::LENGTH);
        let fail = |this: &mut Self, e| {
            this.failed = true;
            Some(Err(e))
        };
        if usize::from(length) < HEADER_LEN {
            return fail(
                self,
                MdError::BadLength {
                    length,
                    reason: "smaller than the 8-byte header",
                },
            );
        }
        let ty = match self.rest.get(field::TYPE).map(|&t| MessageType::from_u8(t)) {
            None => return None,
            Some(Err(e)) => return fail(self, e),
            Some(Ok(ty)) => ty,
        };
        let (message, rest) = self.rest.split_at_checked(usize::from(length))?;
        self.rest = rest;
        Some(Ok((ty, message)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CLOSE: [u8; 12] = [12, 0, 0x13, 0, 0, 0, 0, 0, 1, 0, 0, 0];

    #[test]
    fn yields_complete_messages_and_keeps_the_partial_one() {
        let mut stream = CLOSE.repeat(3);
        stream.truncate(30);
        let mut m = Messages::new(&stream);
        assert_eq!(m.next(), Some(Ok((MessageType::Close, &CLOSE[..]))));
        assert_eq!(m.next(), Some(Ok((MessageType::Close, &CLOSE[..]))));
        assert_eq!(m.next(), None);
        assert_eq!(m.remaining(), &CLOSE[..6]);
        assert_eq!(m.missing(), 6);
        assert!(!m.failed());
    }

    #[test]
    fn a_bad_length_or_type_stops_the_stream_at_once() {
        let stream = [4u8, 0];
        let mut m = Messages::new(&stream);
        assert!(matches!(
            m.next(),
            Some(Err(MdError::BadLength { length: 4, .. }))
        ));
        assert_eq!(m.next(), None);
        assert!(m.failed());
        let stream = [12u8, 0, 0x7f];
        assert_eq!(
            Messages::new(&stream).next(),
            Some(Err(MdError::UnknownType(0x7f)))
        );
    }

    proptest! {
        #[test]
        fn any_split_of_a_stream_yields_the_same_messages(
            cut in 0usize..=36,
        ) {
            let stream = CLOSE.repeat(3);
            let mut seen = Vec::new();
            let mut pending = Vec::new();
            for chunk in [&stream[..cut], &stream[cut..]] {
                pending.extend_from_slice(chunk);
                let mut m = Messages::new(&pending);
                for msg in m.by_ref() {
                    seen.push(msg.unwrap().1.to_vec());
                }
                pending = m.remaining().to_vec();
            }
            prop_assert_eq!(seen, vec![CLOSE.to_vec(); 3]);
            prop_assert!(pending.is_empty());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut m = Messages::new(&bytes);
            let mut total = 0;
            for msg in m.by_ref() {
                let Ok((_, b)) = msg else { break };
                total += b.len();
            }
            prop_assert!(total + m.remaining().len() == bytes.len());
        }
    }
}
