//! The UDP header (RFC 768) and its checksum over the IPv4 pseudo-header.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------------------------------+-------------------------------+
//! |          source port          |       destination port        |  0
//! +-------------------------------+-------------------------------+
//! |            length             |           checksum            |  4
//! +-------------------------------+-------------------------------+
//! |                          payload ...                          |  8
//! ```
//!
//! `length` counts the header and the payload. The checksum is the Internet checksum of the
//! pseudo-header (source address, destination address, zero, protocol 17, UDP length), the
//! header and the payload, an odd payload padded with a zero byte. Over IPv4 a checksum of 0
//! means the sender computed none, so a computed 0 is sent as `0xffff` (its other
//! ones'-complement form).

use super::ipv4::PROTOCOL_UDP;
use super::{checksum_add, checksum_fold, read_be16, write_be16, PacketError};
use core::net::Ipv4Addr;

/// Field ranges of the UDP header.
pub mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
    pub const PAYLOAD: usize = 8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// The ones'-complement sum (see [`checksum_add`]) of the IPv4 pseudo-header of a UDP datagram
/// of `udp_length` bytes from `src` to `dst`.
#[inline]
pub fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, udp_length: u16) -> u64 {
    let (s, d, l) = (src.octets(), dst.octets(), udp_length.to_be_bytes());
    checksum_add(
        0,
        &[
            s[0],
            s[1],
            s[2],
            s[3],
            d[0],
            d[1],
            d[2],
            d[3],
            0,
            PROTOCOL_UDP,
            l[0],
            l[1],
        ],
    )
}

/// The Internet checksum of the pseudo-header and `datagram` (header and payload, its checksum
/// field as it is; the pseudo-header's length is `datagram.len()`). With the checksum field
/// zero it is the checksum to send (a 0 to be sent as `0xffff`); with the field filled in, 0
/// when the checksum holds.
///
/// # Panics
/// If `datagram` is longer than 65,535 bytes.
#[inline]
pub fn checksum(src: Ipv4Addr, dst: Ipv4Addr, datagram: &[u8]) -> u16 {
    let len = u16::try_from(datagram.len()).expect("a UDP datagram's length");
    !checksum_fold(checksum_add(pseudo_header_sum(src, dst, len), datagram))
}

/// A checked view of a UDP datagram: the IPv4 payload (the view's
/// [`payload`](Self::payload) ends at the UDP length).
#[derive(Debug, Clone, Copy)]
pub struct UdpDatagram<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpDatagram { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, PacketError> {
        let d = UdpDatagram { buffer };
        d.check()?;
        Ok(d)
    }

    /// Checks that the buffer holds the 8-byte header and that `8 <= length <= buffer length`.
    /// The checksum needs the IPv4 addresses: [`verify_checksum`](Self::verify_checksum).
    pub fn check(&self) -> Result<(), PacketError> {
        let ip_payload = self.buffer.as_ref().len();
        if ip_payload < HEADER_LEN {
            return Err(PacketError::UdpTruncated { ip_payload });
        }
        let udp_length = self.length();
        if usize::from(udp_length) < HEADER_LEN || usize::from(udp_length) > ip_payload {
            return Err(PacketError::BadUdpLength {
                udp_length,
                ip_payload,
            });
        }
        Ok(())
    }

    /// Checks the checksum of a datagram sent from `src` to `dst`, over its `length` bytes. A
    /// checksum of 0 (none computed) is accepted.
    ///
    /// # Panics
    /// Unless [`check`](Self::check) passed.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> Result<(), PacketError> {
        let found = self.checksum();
        if found == 0 {
            return Ok(());
        }
        let datagram = &self.buffer.as_ref()[..usize::from(self.length())];
        let pseudo = pseudo_header_sum(src, dst, self.length());
        if checksum_fold(checksum_add(pseudo, datagram)) == 0xffff {
            return Ok(());
        }
        // The sum without the checksum field: the field's 2 bytes are at an even offset.
        let sum = checksum_add(
            checksum_add(pseudo, &datagram[..field::CHECKSUM.start]),
            &datagram[field::CHECKSUM.end..],
        );
        Err(PacketError::BadUdpChecksum {
            found,
            expected: wire_checksum(!checksum_fold(sum)),
        })
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn src_port(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// The length of the datagram, header included, in bytes.
    pub fn length(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::LENGTH)
    }
    pub fn checksum(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The bytes from the end of the header to the UDP length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..usize::from(self.length())]
    }
}

impl<'a> UdpDatagram<&'a [u8]> {
    /// [`payload`](Self::payload) with the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[field::PAYLOAD..usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpDatagram<T> {
    pub fn set_src_port(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::SRC_PORT, v)
    }
    pub fn set_dst_port(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::DST_PORT, v)
    }
    pub fn set_length(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::LENGTH, v)
    }
    pub fn set_checksum(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    /// Computes the checksum of the datagram's `length` bytes sent from `src` to `dst` and
    /// writes it, a computed 0 as `0xffff`.
    ///
    /// # Panics
    /// If the buffer is shorter than the length field.
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let len = usize::from(self.length());
        let c = checksum(src, dst, &self.buffer.as_ref()[..len]);
        self.set_checksum(wire_checksum(c));
    }
}

/// A computed checksum as sent over IPv4: 0 is sent as `0xffff`, since 0 means "none".
#[inline]
const fn wire_checksum(computed: u16) -> u16 {
    if computed == 0 {
        0xffff
    } else {
        computed
    }
}

/// The parsed form of a UDP header; the length and checksum follow from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a datagram sent from `src` to `dst`, checking its length and checksum first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        datagram: &UdpDatagram<&T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<Self, PacketError> {
        datagram.check()?;
        datagram.verify_checksum(src, dst)?;
        Ok(UdpRepr {
            src_port: datagram.src_port(),
            dst_port: datagram.dst_port(),
        })
    }

    /// Bytes `emit` writes: always [`HEADER_LEN`] (the payload is the caller's).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 8 header bytes in front of the payload already in the buffer, which must be
    /// exactly the datagram: the length is the buffer's, the checksum covers the whole buffer.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`] or longer than 65,535 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        datagram: &mut UdpDatagram<T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) {
        let len = datagram.buffer.as_ref().len();
        assert!(len >= HEADER_LEN, "a UDP datagram holds its header");
        datagram.set_src_port(self.src_port);
        datagram.set_dst_port(self.dst_port);
        datagram.set_length(u16::try_from(len).expect("a UDP datagram's length"));
        datagram.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::tests::{GOLDEN_EMPTY, GOLDEN_PEREGRINE, GOLDEN_ZERO_CHECKSUM};

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

    fn golden_repr() -> UdpRepr {
        UdpRepr {
            src_port: 40001,
            dst_port: 40002,
        }
    }

    #[test]
    fn parses_the_kernel_datagram() {
        let d = UdpDatagram::new_checked(&GOLDEN_PEREGRINE[34..]).unwrap();
        assert_eq!((d.length(), d.checksum()), (17, 0x99ff));
        assert_eq!(d.payload(), b"peregrine");
        assert_eq!(UdpRepr::parse(&d, SRC, DST).unwrap(), golden_repr());
    }

    #[test]
    fn emit_computes_the_kernels_checksum_over_an_odd_payload() {
        let mut buf = GOLDEN_PEREGRINE[34..].to_vec();
        buf[..8].fill(0xa5);
        golden_repr().emit(&mut UdpDatagram::new_unchecked(&mut buf[..]), SRC, DST);
        assert_eq!(&buf[..], &GOLDEN_PEREGRINE[34..]);
    }

    #[test]
    fn emit_sends_a_computed_zero_as_ffff() {
        // The kernel chose 0xffff for this payload, whose checksum computes to 0.
        let golden = &GOLDEN_ZERO_CHECKSUM[34..];
        let mut zeroed = golden.to_vec();
        zeroed[6..8].fill(0);
        assert_eq!(checksum(SRC, DST, &zeroed), 0);
        let mut buf = golden.to_vec();
        buf[..8].fill(0xa5);
        golden_repr().emit(&mut UdpDatagram::new_unchecked(&mut buf[..]), SRC, DST);
        assert_eq!(&buf[6..8], &[0xff, 0xff]);
        assert_eq!(&buf[..], golden);
        assert_eq!(checksum(SRC, DST, golden), 0);
    }

    #[test]
    fn emit_of_an_empty_payload_matches_the_kernel() {
        let mut buf = [0xa5u8; 8];
        golden_repr().emit(&mut UdpDatagram::new_unchecked(&mut buf[..]), SRC, DST);
        assert_eq!(&buf[..], &GOLDEN_EMPTY[34..]);
    }

    #[test]
    fn the_checksum_covers_the_pseudo_header() {
        let d = UdpDatagram::new_checked(&GOLDEN_PEREGRINE[34..]).unwrap();
        assert!(d.verify_checksum(SRC, DST).is_ok());
        // Same bytes, other addresses: the checksum no longer holds.
        assert_eq!(
            d.verify_checksum(SRC, Ipv4Addr::new(10, 77, 0, 3)),
            Err(PacketError::BadUdpChecksum {
                found: 0x99ff,
                expected: 0x99fe
            })
        );
    }

    #[test]
    fn zero_checksum_means_none() {
        let mut buf = GOLDEN_PEREGRINE[34..].to_vec();
        buf[6..8].fill(0);
        buf[8] ^= 0xff; // not covered by any checksum now
        let d = UdpDatagram::new_checked(&buf[..]).unwrap();
        assert!(d.verify_checksum(SRC, DST).is_ok());
    }

    #[test]
    fn rejects_buffer_shorter_than_the_header() {
        assert_eq!(
            UdpDatagram::new_checked(&GOLDEN_EMPTY[34..41]).unwrap_err(),
            PacketError::UdpTruncated { ip_payload: 7 }
        );
    }

    #[test]
    fn rejects_length_below_8_or_beyond_the_buffer() {
        let mut buf = GOLDEN_PEREGRINE[34..].to_vec();
        buf[5] = 7;
        assert_eq!(
            UdpDatagram::new_checked(&buf[..]).unwrap_err(),
            PacketError::BadUdpLength {
                udp_length: 7,
                ip_payload: 17
            }
        );
        buf[5] = 18;
        assert_eq!(
            UdpDatagram::new_checked(&buf[..]).unwrap_err(),
            PacketError::BadUdpLength {
                udp_length: 18,
                ip_payload: 17
            }
        );
    }

    #[test]
    fn payload_ends_at_the_udp_length() {
        let mut buf = GOLDEN_PEREGRINE[34..].to_vec();
        buf.extend_from_slice(&[0; 5]);
        let d = UdpDatagram::new_checked(&buf[..]).unwrap();
        assert_eq!(d.payload(), b"peregrine");
        assert!(d.verify_checksum(SRC, DST).is_ok());
    }
}
