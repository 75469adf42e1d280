//! The IPv4 header (RFC 791).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------+-------+---------------+-------------------------------+
//! |version|  IHL  |   DSCP/ECN    |         total length          |  0
//! +-------+-------+---------------+-----+-------------------------+
//! |        identification         |flags|    fragment offset      |  4
//! +---------------+---------------+-----+-------------------------+
//! |      TTL      |   protocol    |        header checksum        |  8
//! +---------------+---------------+-------------------------------+
//! |                        source address                         | 12
//! +---------------------------------------------------------------+
//! |                     destination address                       | 16
//! +---------------------------------------------------------------+
//! |                 options (IHL > 5), payload ...                | 20
//! ```
//!
//! IHL is the header length in 4-byte words (5 to 15). The flags are reserved (0),
//! don't-fragment and more-fragments; the fragment offset counts 8-byte units. The header
//! checksum is the [Internet checksum](super::checksum) of the header, options included.
//! [`Ipv4Repr::emit`] writes headers without options, DSCP/ECN 0 and don't-fragment set.

use super::{checksum, checksum_add, checksum_fold, read_be16, read_ipv4, write_be16, PacketError};
use core::net::Ipv4Addr;

/// Field ranges of the IPv4 header.
pub mod field {
    use crate::Field;
    pub const VERSION_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLAGS_FRAGMENT: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
    pub const OPTIONS: usize = 20;
}

/// Length of the IPv4 header without options, as [`Ipv4Repr::emit`] writes it.
pub const HEADER_LEN: usize = field::OPTIONS;
/// Length of the longest IPv4 header: IHL 15.
pub const MAX_HEADER_LEN: usize = 60;
/// The version field of every IPv4 header.
pub const VERSION: u8 = 4;
/// The protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// Bits of the flags and fragment offset field.
pub mod flags {
    /// Don't fragment.
    pub const DF: u16 = 0x4000;
    /// More fragments follow.
    pub const MF: u16 = 0x2000;
    /// The fragment offset, in 8-byte units.
    pub const OFFSET_MASK: u16 = 0x1fff;
}

/// A checked view of an IPv4 packet: the bytes after the Ethernet header, Ethernet padding
/// included (the view's [`payload`](Self::payload) ends at the total length).
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, PacketError> {
        let p = Ipv4Packet { buffer };
        p.check()?;
        Ok(p)
    }

    /// Checks, in order: the buffer holds 20 bytes, version 4, `5 <= IHL` and the header fits
    /// in the buffer, `header_len <= total_length <= buffer length`, and the header checksum
    /// (options included). Fragments and the protocol are the caller's to check.
    pub fn check(&self) -> Result<(), PacketError> {
        let b = self.buffer.as_ref();
        let available = b.len();
        if available < HEADER_LEN {
            return Err(PacketError::Truncated {
                needed: HEADER_LEN,
                available,
            });
        }
        if self.version() != VERSION {
            return Err(PacketError::BadIpVersion {
                version: self.version(),
            });
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN || header_len > available {
            return Err(PacketError::BadIhl {
                ihl: self.ihl(),
                available,
            });
        }
        let total_length = self.total_length();
        if usize::from(total_length) < header_len || usize::from(total_length) > available {
            return Err(PacketError::BadTotalLength {
                total_length,
                header_len,
                available,
            });
        }
        let header = &b[..header_len];
        if checksum(header) != 0 {
            // The sum without the checksum field: the field's 2 bytes are at an even offset.
            let sum = checksum_add(
                checksum_add(0, &header[..field::CHECKSUM.start]),
                &header[field::CHECKSUM.end..],
            );
            return Err(PacketError::BadIpChecksum {
                found: self.checksum(),
                expected: !checksum_fold(sum),
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION_IHL] >> 4
    }
    /// The header length in 4-byte words.
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION_IHL] & 0x0f
    }
    /// The header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// The length of the packet, header included, in bytes.
    pub fn total_length(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::TOTAL_LENGTH)
    }
    pub fn ident(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::IDENT)
    }
    fn flags_fragment(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::FLAGS_FRAGMENT)
    }
    pub fn dont_fragment(&self) -> bool {
        self.flags_fragment() & flags::DF != 0
    }
    pub fn more_fragments(&self) -> bool {
        self.flags_fragment() & flags::MF != 0
    }
    /// The fragment offset in bytes (the field counts 8-byte units).
    pub fn fragment_offset(&self) -> u16 {
        (self.flags_fragment() & flags::OFFSET_MASK) << 3
    }
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    pub fn src(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SRC)
    }
    pub fn dst(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::DST)
    }
    /// The options: `header_len - 20` bytes, skipped by [`parse`](super::parse).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }
    /// The bytes from the end of the header to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_length())]
    }
}

impl<'a> Ipv4Packet<&'a [u8]> {
    /// [`payload`](Self::payload) with the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[self.header_len()..usize::from(self.total_length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version and IHL byte.
    pub fn set_version_ihl(&mut self, version: u8, ihl: u8) {
        self.buffer.as_mut()[field::VERSION_IHL] = version << 4 | (ihl & 0x0f)
    }
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v
    }
    pub fn set_total_length(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::TOTAL_LENGTH, v)
    }
    pub fn set_ident(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::IDENT, v)
    }
    /// Sets the flags and fragment offset field, raw ([`flags`]).
    pub fn set_flags_fragment(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::FLAGS_FRAGMENT, v)
    }
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v
    }
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v
    }
    pub fn set_checksum(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    pub fn set_src(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v.octets())
    }
    pub fn set_dst(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v.octets())
    }
    /// Computes the header checksum over the IHL's header length and writes it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_len();
        let c = checksum(&self.buffer.as_ref()[..len]);
        self.set_checksum(c);
    }
}

/// The parsed form of an IPv4 header, as [`Ipv4Repr::emit`] writes it: no options, DSCP/ECN 0,
/// don't-fragment set, fragment offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub ident: u16,
    /// Bytes after the header: `total_length - header_len`.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses a packet, checking it first. Options, DSCP/ECN and the fragment fields are not
    /// part of the repr.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Self, PacketError> {
        packet.check()?;
        Ok(Ipv4Repr {
            src: packet.src(),
            dst: packet.dst(),
            protocol: packet.protocol(),
            ttl: packet.ttl(),
            ident: packet.ident(),
            payload_len: usize::from(packet.total_length()) - packet.header_len(),
        })
    }

    /// Bytes `emit` writes: always [`HEADER_LEN`] (the payload is the caller's).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 20 header bytes, checksum included.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`] or `payload_len` exceeds 65,515 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        let total_length =
            u16::try_from(HEADER_LEN + self.payload_len).expect("an IPv4 packet's total length");
        packet.set_version_ihl(VERSION, (HEADER_LEN / 4) as u8);
        packet.set_dscp_ecn(0);
        packet.set_total_length(total_length);
        packet.set_ident(self.ident);
        packet.set_flags_fragment(flags::DF);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src(self.src);
        packet.set_dst(self.dst);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::tests::{GOLDEN_OPTIONS, GOLDEN_PEREGRINE};
    use std::vec::Vec;

    /// The IPv4 packet of the kernel's `peregrine` frame (header at 14..34).
    fn golden_packet() -> &'static [u8] {
        &GOLDEN_PEREGRINE[14..]
    }

    fn golden_repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(10, 77, 0, 1),
            dst: Ipv4Addr::new(10, 77, 0, 2),
            protocol: PROTOCOL_UDP,
            ttl: 64,
            ident: 0x4460,
            payload_len: 17,
        }
    }

    /// Recomputes the header checksum after a test changed a field.
    fn refill(mut b: Vec<u8>) -> Vec<u8> {
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    #[test]
    fn parses_the_kernel_header() {
        let p = Ipv4Packet::new_checked(golden_packet()).unwrap();
        assert_eq!((p.version(), p.ihl(), p.header_len()), (4, 5, 20));
        assert_eq!(p.total_length(), 37);
        assert!(p.dont_fragment() && !p.more_fragments());
        assert_eq!(p.fragment_offset(), 0);
        assert_eq!(p.checksum(), 0xe1cb);
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.payload(), &GOLDEN_PEREGRINE[34..]);
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), golden_repr());
    }

    #[test]
    fn emit_reproduces_the_kernel_header() {
        let mut buf = [0xa5u8; 24];
        golden_repr().emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..20], &golden_packet()[..20]);
        assert_eq!(&buf[20..], &[0xa5; 4]);
    }

    #[test]
    fn a_valid_header_sums_to_zero() {
        assert_eq!(checksum(&golden_packet()[..20]), 0);
        assert_eq!(checksum(&GOLDEN_OPTIONS[14..38]), 0);
    }

    #[test]
    fn options_are_part_of_the_header_and_skipped() {
        let p = Ipv4Packet::new_checked(&GOLDEN_OPTIONS[14..]).unwrap();
        assert_eq!((p.ihl(), p.header_len()), (6, 24));
        // Router Alert (RFC 2113), as the kernel sent it.
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.payload(), &GOLDEN_OPTIONS[38..]);
        assert_eq!(Ipv4Repr::parse(&p).unwrap().payload_len, 15);
    }

    #[test]
    fn rejects_buffer_shorter_than_20_bytes() {
        assert_eq!(
            Ipv4Packet::new_checked(&golden_packet()[..19]).unwrap_err(),
            PacketError::Truncated {
                needed: 20,
                available: 19
            }
        );
    }

    #[test]
    fn rejects_version_6() {
        let mut b = golden_packet().to_vec();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadIpVersion { version: 6 }
        );
    }

    #[test]
    fn rejects_ihl_below_5_and_beyond_the_buffer() {
        let mut b = golden_packet().to_vec();
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadIhl {
                ihl: 4,
                available: 37
            }
        );
        b[0] = 0x4f; // 60 bytes
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadIhl {
                ihl: 15,
                available: 37
            }
        );
    }

    #[test]
    fn rejects_total_length_outside_header_to_buffer() {
        let mut b = golden_packet().to_vec();
        b[3] = 19;
        let b = refill(b);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadTotalLength {
                total_length: 19,
                header_len: 20,
                available: 37
            }
        );
        let mut b = b;
        b[3] = 38;
        let b = refill(b);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadTotalLength {
                total_length: 38,
                header_len: 20,
                available: 37
            }
        );
    }

    #[test]
    fn bad_checksum_reports_the_value_that_would_verify() {
        let mut b = golden_packet().to_vec();
        b[11] ^= 0x01;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadIpChecksum {
                found: 0xe1ca,
                expected: 0xe1cb
            }
        );
        // A changed field without a new checksum: the TTL a router decremented.
        let mut b = golden_packet().to_vec();
        b[8] = 63;
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            PacketError::BadIpChecksum { found: 0xe1cb, .. }
        ));
        assert!(Ipv4Packet::new_checked(&refill(b)[..]).is_ok());
    }

    #[test]
    fn fragment_fields_read_in_bytes() {
        let mut b = golden_packet().to_vec();
        b[6] = 0x20; // MF, offset 0x0101 units
        b[7] = 0x01;
        b[6] |= 0x01;
        let b = refill(b);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_fragments() && !p.dont_fragment());
        assert_eq!(p.fragment_offset(), 0x0101 * 8);
    }
}
