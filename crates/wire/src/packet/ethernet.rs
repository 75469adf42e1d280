//! The Ethernet II header: destination and source MAC addresses, then the ethertype.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                  destination MAC (6 bytes)                    |  0
//! +                               +-------------------------------+
//! |                               |     source MAC (6 bytes)      |  4
//! +-------------------------------+                               +
//! |                                                               |  8
//! +-------------------------------+-------------------------------+
//! |        ethertype (u16)        |  payload ...                    12
//! +-------------------------------+
//! ```
//!
//! The frame check sequence is the NIC's: AF_XDP frames neither carry nor expect it. An 802.1Q
//! tag would sit where the ethertype is (TPID `0x8100`); [`parse`](super::parse) rejects it.

use super::{read_be16, write_be16, PacketError};
use core::net::Ipv4Addr;

/// Field ranges of the Ethernet II header.
pub mod field {
    use crate::Field;
    pub const DST_MAC: Field = 0..6;
    pub const SRC_MAC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// The shortest frame on the wire without its 4-byte frame check sequence: shorter frames are
/// padded to it by the sender's NIC, so a received frame may hold bytes past its IPv4 packet.
pub const MIN_FRAME_LEN: usize = 60;

/// Ethertypes the driver meets.
pub mod ethertype {
    /// IPv4, the only one [`parse`](super::super::parse) accepts.
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// An 802.1Q VLAN tag (its TPID).
    pub const VLAN: u16 = 0x8100;
    /// An 802.1ad service VLAN tag (QinQ).
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// The Ethernet address IPv4 multicast `group` is sent to (RFC 1112): `01:00:5e` followed by
/// the group's low 23 bits. 32 groups share each address, so receivers still check the IP
/// destination.
pub const fn multicast_mac(group: Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// A checked view of an Ethernet II frame.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, PacketError> {
        let f = EthernetFrame { buffer };
        f.check()?;
        Ok(f)
    }

    /// Checks that the buffer holds the 14-byte header. The ethertype is the caller's to check.
    pub fn check(&self) -> Result<(), PacketError> {
        let available = self.buffer.as_ref().len();
        if available < HEADER_LEN {
            return Err(PacketError::Truncated {
                needed: HEADER_LEN,
                available,
            });
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn dst_mac(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::DST_MAC])
    }
    pub fn src_mac(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::SRC_MAC])
    }
    pub fn ethertype(&self) -> u16 {
        read_be16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// Everything after the header, padding included.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    pub fn set_dst_mac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::DST_MAC].copy_from_slice(&v)
    }
    pub fn set_src_mac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SRC_MAC].copy_from_slice(&v)
    }
    pub fn set_ethertype(&mut self, v: u16) {
        write_be16(self.buffer.as_mut(), field::ETHERTYPE, v)
    }
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(b);
    m
}

/// The parsed form of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header, checking its length first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<Self, PacketError> {
        frame.check()?;
        Ok(EthernetRepr {
            dst_mac: frame.dst_mac(),
            src_mac: frame.src_mac(),
            ethertype: frame.ethertype(),
        })
    }

    /// Bytes `emit` writes: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 14 header bytes.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_mac(self.dst_mac);
        frame.set_src_mac(self.src_mac);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::tests::{GOLDEN_MULTICAST, GOLDEN_PEREGRINE};

    fn golden_repr() -> EthernetRepr {
        EthernetRepr {
            dst_mac: [0x02, 0x00, 0x00, 0x77, 0x00, 0x02],
            src_mac: [0x02, 0x00, 0x00, 0x77, 0x00, 0x01],
            ethertype: ethertype::IPV4,
        }
    }

    #[test]
    fn parses_the_kernel_header() {
        let frame = EthernetFrame::new_checked(&GOLDEN_PEREGRINE[..]).unwrap();
        assert_eq!(frame.ethertype(), 0x0800);
        assert_eq!(frame.payload(), &GOLDEN_PEREGRINE[14..]);
        assert_eq!(EthernetRepr::parse(&frame).unwrap(), golden_repr());
    }

    #[test]
    fn emit_writes_every_header_byte_and_nothing_after() {
        let mut buf = [0xa5u8; 16];
        golden_repr().emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..14], &GOLDEN_PEREGRINE[..14]);
        assert_eq!(&buf[14..], &[0xa5; 2]);
    }

    #[test]
    fn rejects_buffer_shorter_than_the_header() {
        assert_eq!(
            EthernetFrame::new_checked(&GOLDEN_PEREGRINE[..13]).unwrap_err(),
            PacketError::Truncated {
                needed: 14,
                available: 13
            }
        );
        assert!(EthernetFrame::new_checked(&GOLDEN_PEREGRINE[..14]).is_ok());
    }

    #[test]
    fn multicast_mac_matches_the_kernels() {
        // The kernel sent 239.77.0.9 to 01:00:5e:4d:00:09.
        let group = Ipv4Addr::new(239, 77, 0, 9);
        assert_eq!(multicast_mac(group), GOLDEN_MULTICAST[..6]);
    }

    #[test]
    fn multicast_mac_keeps_the_low_23_bits() {
        let m = |a, b, c, d| multicast_mac(Ipv4Addr::new(a, b, c, d));
        assert_eq!(m(224, 0, 0, 1), [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
        assert_eq!(m(239, 255, 255, 255), [0x01, 0x00, 0x5e, 0x7f, 0xff, 0xff]);
        // The 24th bit is dropped: 224.128.1.2 and 224.0.1.2 share an address.
        assert_eq!(m(224, 128, 1, 2), m(224, 0, 1, 2));
        assert_eq!(m(224, 128, 1, 2), [0x01, 0x00, 0x5e, 0x00, 0x01, 0x02]);
    }
}
