//! Ethernet II, IPv4 and UDP headers, for a driver that sends and receives whole Ethernet frames.
//!
//! AF_XDP (kernel bypass) hands the xdp driver raw Ethernet frames from the NIC's receive ring
//! and takes raw frames for its transmit ring: no kernel network stack builds the headers in
//! front of a Peregrine datagram or checks those of a received one. The driver does both with
//! this module, on its hot path, without allocating:
//!
//! - [`UdpPacketRepr::emit`] writes the [`HEADERS_LEN`] (42) header bytes in front of a payload
//!   the caller already wrote at `frame[HEADERS_LEN..]`, both checksums included;
//! - [`parse`] checks a received frame and returns its addresses and UDP payload
//!   ([`UdpPacket`]).
//!
//! ```text
//! +------------------+--------------------------------+---------+---------+-------------+
//! | Ethernet II (14) | IPv4 (20; 24..60 with options) | UDP (8) | payload | padding ... |
//! +------------------+--------------------------------+---------+---------+-------------+
//! ```
//!
//! Emitted frames are untagged Ethernet II, IPv4 without options, DSCP/ECN 0, don't-fragment
//! set, fragment offset 0, and a UDP checksum over the pseudo-header, header and payload (a
//! computed 0 is sent as `0xffff`, RFC 768).
//!
//! [`parse`] rejects, each with its own [`PacketError`] variant naming the value found:
//!
//! 1. a frame shorter than the 42 header bytes ([`Truncated`](PacketError::Truncated));
//! 2. an 802.1Q or 802.1ad VLAN tag ([`VlanTagged`](PacketError::VlanTagged)), any other
//!    ethertype than IPv4 ([`NotIpv4`](PacketError::NotIpv4));
//! 3. an IP version other than 4, an IHL below 5 or a header longer than the frame, a total
//!    length smaller than the header or larger than the frame, a bad header checksum;
//! 4. a fragment (more-fragments set or a nonzero offset: the driver does not reassemble);
//! 5. a protocol other than UDP (17);
//! 6. an IP payload shorter than the UDP header, a UDP length below 8 or beyond the IP payload,
//!    a nonzero UDP checksum that does not verify (0 means "no checksum" in IPv4 and is
//!    accepted).
//!
//! IPv4 options are accepted and skipped once the header checksum holds. Bytes after the IPv4
//! total length are Ethernet padding (frames are padded to 60 bytes) and ignored, as are bytes
//! after the UDP length. Parsing never panics, whatever the bytes.
//!
//! One module per header, each with its checked view, field ranges, parsed form and tests:
//! [`ethernet`], [`ipv4`], [`udp`]. The Internet checksum ([`checksum`], RFC 1071) is here.
//! All fields are big-endian (network order), unlike Peregrine's own frames.
//!
//! ```
//! use core::net::{Ipv4Addr, SocketAddrV4};
//! use peregrine_wire::packet::{self, UdpPacketRepr, HEADERS_LEN};
//!
//! let repr = UdpPacketRepr {
//!     src_mac: [0x02, 0, 0, 0x77, 0, 0x01],
//!     dst_mac: packet::ethernet::multicast_mac(Ipv4Addr::new(239, 1, 2, 3)),
//!     src: SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 40001),
//!     dst: SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 40002),
//!     ttl: 1,
//!     ident: 0,
//! };
//! let mut frame = [0u8; 2048];
//! frame[HEADERS_LEN..HEADERS_LEN + 5].copy_from_slice(b"hello");
//! let len = repr.emit(&mut frame, 5).unwrap();
//! let packet = packet::parse(&frame[..len]).unwrap();
//! assert_eq!(packet.payload, b"hello");
//! assert_eq!(packet.repr(), repr);
//! ```

use core::fmt;
use core::net::{Ipv4Addr, SocketAddrV4};

pub mod ethernet;
pub mod ipv4;
pub mod udp;

use ethernet::{EthernetFrame, EthernetRepr};
use ipv4::{Ipv4Packet, Ipv4Repr};
use udp::{UdpDatagram, UdpRepr};

/// Bytes of the headers [`UdpPacketRepr::emit`] writes: Ethernet (14), IPv4 without options
/// (20), UDP (8). The payload starts at this offset of an emitted frame.
pub const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// The largest UDP payload an IPv4 datagram without options can carry: the 16-bit total
/// length (65,535) minus the IPv4 and UDP headers.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - ipv4::HEADER_LEN - udp::HEADER_LEN;

/// The headers of a UDP datagram to send: what [`UdpPacketRepr::emit`] writes in front of a
/// payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacketRepr {
    pub src_mac: [u8; 6],
    /// The next hop's address, or [`ethernet::multicast_mac`] of a multicast group.
    pub dst_mac: [u8; 6],
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub ttl: u8,
    /// The IPv4 identification field. Datagrams are sent with don't-fragment set, so it only
    /// needs to be unique among fragments (RFC 6864); any value does.
    pub ident: u16,
}

impl UdpPacketRepr {
    /// Writes the [`HEADERS_LEN`] header bytes in front of the `payload_len` bytes the caller
    /// already wrote at `frame[HEADERS_LEN..HEADERS_LEN + payload_len]`, and returns the
    /// frame's length, `HEADERS_LEN + payload_len`. Bytes after it are left alone (the NIC pads
    /// a frame shorter than 60 bytes).
    ///
    /// Errors, writing nothing, when `payload_len` exceeds [`MAX_PAYLOAD_LEN`] or `frame` is
    /// shorter than `HEADERS_LEN + payload_len`.
    pub fn emit(&self, frame: &mut [u8], payload_len: usize) -> Result<usize, PacketError> {
        if payload_len > MAX_PAYLOAD_LEN {
            return Err(PacketError::PayloadTooLong { payload_len });
        }
        let len = HEADERS_LEN + payload_len;
        if frame.len() < len {
            return Err(PacketError::Truncated {
                needed: len,
                available: frame.len(),
            });
        }
        let (eth, ip) = frame[..len].split_at_mut(ethernet::HEADER_LEN);
        EthernetRepr {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            ethertype: ethernet::ethertype::IPV4,
        }
        .emit(&mut EthernetFrame::new_unchecked(eth));
        let (ip_header, datagram) = ip.split_at_mut(ipv4::HEADER_LEN);
        Ipv4Repr {
            src: *self.src.ip(),
            dst: *self.dst.ip(),
            protocol: ipv4::PROTOCOL_UDP,
            ttl: self.ttl,
            ident: self.ident,
            payload_len: udp::HEADER_LEN + payload_len,
        }
        .emit(&mut Ipv4Packet::new_unchecked(ip_header));
        UdpRepr {
            src_port: self.src.port(),
            dst_port: self.dst.port(),
        }
        .emit(
            &mut UdpDatagram::new_unchecked(datagram),
            *self.src.ip(),
            *self.dst.ip(),
        );
        Ok(len)
    }
}

/// A received UDP datagram: what [`parse`] returns from a frame it checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub ttl: u8,
    /// The IPv4 identification field.
    pub ident: u16,
    /// The UDP payload: `udp_length - 8` bytes, without Ethernet padding.
    pub payload: &'a [u8],
}

impl UdpPacket<'_> {
    /// The headers that [`UdpPacketRepr::emit`] needs to send this payload again with the same
    /// addresses, TTL and identification.
    pub const fn repr(&self) -> UdpPacketRepr {
        UdpPacketRepr {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            src: self.src,
            dst: self.dst,
            ttl: self.ttl,
            ident: self.ident,
        }
    }
}

/// Checks an Ethernet frame holding a UDP datagram over IPv4 and returns its fields; see the
/// [module documentation](self) for what is checked, in which order. Never panics.
pub fn parse(frame: &[u8]) -> Result<UdpPacket<'_>, PacketError> {
    parse_checking(frame, false).map(|(p, _)| p)
}

/// [`parse`], also accepting a UDP checksum left for offload: a field holding only the
/// pseudo-header's sum, which is what a local virtual device (a veth pair, a tap) carries when
/// the sending kernel counted on a NIC to finish the checksum (`CHECKSUM_PARTIAL`) and none
/// did. The flag says whether the frame's checksum was of that form (its payload then covered
/// by no checksum, as the kernel itself accepts such frames from a local device).
pub fn parse_allowing_offload(frame: &[u8]) -> Result<(UdpPacket<'_>, bool), PacketError> {
    parse_checking(frame, true)
}

fn parse_checking(frame: &[u8], allow_partial: bool) -> Result<(UdpPacket<'_>, bool), PacketError> {
    if frame.len() < HEADERS_LEN {
        return Err(PacketError::Truncated {
            needed: HEADERS_LEN,
            available: frame.len(),
        });
    }
    let eth = EthernetFrame::new_checked(frame)?;
    match eth.ethertype() {
        ethernet::ethertype::IPV4 => {}
        tpid @ (ethernet::ethertype::VLAN | ethernet::ethertype::QINQ) => {
            let tci = eth
                .payload()
                .get(..2)
                .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]));
            return Err(PacketError::VlanTagged {
                tpid,
                vlan_id: tci & 0x0fff,
            });
        }
        ethertype => return Err(PacketError::NotIpv4 { ethertype }),
    }
    let ip = Ipv4Packet::new_checked(&frame[ethernet::HEADER_LEN..])?;
    if ip.more_fragments() || ip.fragment_offset() != 0 {
        return Err(PacketError::Fragment {
            more_fragments: ip.more_fragments(),
            offset: ip.fragment_offset(),
        });
    }
    if ip.protocol() != ipv4::PROTOCOL_UDP {
        return Err(PacketError::NotUdp {
            protocol: ip.protocol(),
        });
    }
    let (src, dst, ttl, ident) = (ip.src(), ip.dst(), ip.ttl(), ip.ident());
    let datagram = UdpDatagram::new_checked(ip.into_payload())?;
    let mut partial = false;
    if let Err(e) = datagram.verify_checksum(src, dst) {
        let offload = checksum_fold(udp::pseudo_header_sum(src, dst, datagram.length()))
            == datagram.checksum();
        if !(allow_partial && offload) {
            return Err(e);
        }
        partial = true;
    }
    let packet = UdpPacket {
        src_mac: eth.src_mac(),
        dst_mac: eth.dst_mac(),
        src: SocketAddrV4::new(src, datagram.src_port()),
        dst: SocketAddrV4::new(dst, datagram.dst_port()),
        ttl,
        ident,
        payload: datagram.into_payload(),
    };
    Ok((packet, partial))
}

/// Adds `data` to the ones'-complement sum `sum` (RFC 1071) as big-endian 16-bit words; an
/// odd trailing byte is the high byte of a last word padded with zero. Start from 0 and finish
/// with [`checksum_fold`]. To sum several pieces, every piece but the last must have an even
/// length.
///
/// It sums the piece as little-endian 32-bit words in a 64-bit accumulator, with no carry to
/// handle (the piece would need 16 GiB to overflow it), which the compiler turns into vector
/// additions: 2^16 is 1 in ones'-complement arithmetic, so a 32-bit word counts as its two
/// halves, and by RFC 1071's byte-order independence the little-endian sum, folded, is the
/// big-endian one with its bytes swapped. The piece's folded sum is then added to `sum` with
/// an end-around carry.
#[inline]
pub fn checksum_add(sum: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(4);
    let mut le: u64 = words
        .by_ref()
        .map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .sum();
    let rest = words.remainder();
    if rest.len() >= 2 {
        le += u64::from(u16::from_le_bytes([rest[0], rest[1]]));
    }
    if rest.len() % 2 == 1 {
        // The high byte of a big-endian word, the low byte of a little-endian one.
        le += u64::from(rest[rest.len() - 1]);
    }
    let piece = u64::from(checksum_fold(le).swap_bytes());
    let (s, carry) = sum.overflowing_add(piece);
    // No overflow: after a carry, s <= 2^64 - 2.
    s + u64::from(carry)
}

/// Folds a sum of [`checksum_add`] to 16 bits with end-around carries. The result is 0 only
/// when every byte summed was 0.
#[inline]
pub const fn checksum_fold(sum: u64) -> u16 {
    let s = (sum & 0xffff_ffff) + (sum >> 32); // < 2^33
    let s = (s & 0xffff) + (s >> 16); // < 2^18
    let s = (s & 0xffff) + (s >> 16); // <= 0x10001
    let s = (s & 0xffff) + (s >> 16); // <= 0xffff
    s as u16
}

/// The Internet checksum of `data` (RFC 1071): the ones' complement of its ones'-complement
/// sum. Over a header whose checksum field is zero, it is the value to write there; over a
/// header including its checksum field, it is 0 when the checksum holds.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !checksum_fold(checksum_add(0, data))
}

#[inline]
fn read_be16(b: &[u8], f: crate::Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_be_bytes(a)
}

#[inline]
fn write_be16(b: &mut [u8], f: crate::Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
fn read_ipv4(b: &[u8], f: crate::Field) -> Ipv4Addr {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    Ipv4Addr::from(a)
}

/// Why a frame was rejected by [`parse`] (or a view's `new_checked`), or why
/// [`UdpPacketRepr::emit`] could not write one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PacketError {
    /// The buffer is shorter than the headers (and, on emit, the payload) need.
    Truncated { needed: usize, available: usize },
    /// An 802.1Q (TPID `0x8100`) or 802.1ad (`0x88a8`) VLAN tag follows the MAC addresses.
    VlanTagged { tpid: u16, vlan_id: u16 },
    /// The ethertype is not IPv4 (`0x0800`).
    NotIpv4 { ethertype: u16 },
    /// The IP version field is not 4.
    BadIpVersion { version: u8 },
    /// The IHL is below 5 words, or the header it gives is longer than the `available` bytes
    /// after the Ethernet header.
    BadIhl { ihl: u8, available: usize },
    /// The IPv4 total length is smaller than the header or larger than the `available` bytes
    /// after the Ethernet header.
    BadTotalLength {
        total_length: u16,
        header_len: usize,
        available: usize,
    },
    /// The IPv4 header checksum does not verify; `expected` is the value that would.
    BadIpChecksum { found: u16, expected: u16 },
    /// A fragment: more-fragments is set or the offset (in bytes) is not 0.
    Fragment { more_fragments: bool, offset: u16 },
    /// The IPv4 protocol is not UDP (17).
    NotUdp { protocol: u8 },
    /// The IPv4 payload is shorter than the 8-byte UDP header.
    UdpTruncated { ip_payload: usize },
    /// The UDP length is below 8 or beyond the IPv4 payload.
    BadUdpLength { udp_length: u16, ip_payload: usize },
    /// The UDP checksum is not 0 and does not verify; `expected` is the value that would.
    BadUdpChecksum { found: u16, expected: u16 },
    /// On emit: the payload is longer than [`MAX_PAYLOAD_LEN`].
    PayloadTooLong { payload_len: usize },
}

impl PacketError {
    /// How many kinds of error there are: [`index`](Self::index) is below this.
    pub const KINDS: usize = 13;

    /// The variant's names, indexed by [`index`](Self::index). Stable: they name the driver's
    /// rejection counters.
    pub const NAMES: [&'static str; Self::KINDS] = [
        "Truncated",
        "VlanTagged",
        "NotIpv4",
        "BadIpVersion",
        "BadIhl",
        "BadTotalLength",
        "BadIpChecksum",
        "Fragment",
        "NotUdp",
        "UdpTruncated",
        "BadUdpLength",
        "BadUdpChecksum",
        "PayloadTooLong",
    ];

    /// A stable small index per variant, for an array of rejection counters.
    pub const fn index(&self) -> usize {
        match self {
            PacketError::Truncated { .. } => 0,
            PacketError::VlanTagged { .. } => 1,
            PacketError::NotIpv4 { .. } => 2,
            PacketError::BadIpVersion { .. } => 3,
            PacketError::BadIhl { .. } => 4,
            PacketError::BadTotalLength { .. } => 5,
            PacketError::BadIpChecksum { .. } => 6,
            PacketError::Fragment { .. } => 7,
            PacketError::NotUdp { .. } => 8,
            PacketError::UdpTruncated { .. } => 9,
            PacketError::BadUdpLength { .. } => 10,
            PacketError::BadUdpChecksum { .. } => 11,
            PacketError::PayloadTooLong { .. } => 12,
        }
    }

    /// The variant's name, e.g. `"NotIpv4"`.
    pub const fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PacketError::Truncated { needed, available } => {
                write!(
                    f,
                    "frame truncated: needs {needed} bytes, {available} available"
                )
            }
            PacketError::VlanTagged { tpid, vlan_id } => write!(
                f,
                "frame is VLAN-tagged (TPID 0x{tpid:04x}, VLAN {vlan_id}): only untagged \
                 Ethernet II frames are accepted (let the NIC strip the tag)"
            ),
            PacketError::NotIpv4 { ethertype } => {
                write!(f, "ethertype 0x{ethertype:04x} is not IPv4 (0x0800)")
            }
            PacketError::BadIpVersion { version } => {
                write!(f, "IP version {version} in an IPv4 frame (expected 4)")
            }
            PacketError::BadIhl { ihl, available } => {
                if ihl < 5 {
                    write!(f, "IPv4 IHL {ihl} is below the minimum of 5 (20 bytes)")
                } else {
                    write!(
                        f,
                        "IPv4 IHL {ihl} gives a {}-byte header, longer than the {available} \
                         bytes after the Ethernet header",
                        usize::from(ihl) * 4
                    )
                }
            }
            PacketError::BadTotalLength {
                total_length,
                header_len,
                available,
            } => {
                if usize::from(total_length) < header_len {
                    write!(
                        f,
                        "IPv4 total length {total_length} is smaller than its {header_len}-byte \
                         header"
                    )
                } else {
                    write!(
                        f,
                        "IPv4 total length {total_length} exceeds the {available} bytes after \
                         the Ethernet header"
                    )
                }
            }
            PacketError::BadIpChecksum { found, expected } => write!(
                f,
                "IPv4 header checksum 0x{found:04x} does not verify (0x{expected:04x} would)"
            ),
            PacketError::Fragment {
                more_fragments,
                offset,
            } => write!(
                f,
                "IPv4 fragment (more fragments: {more_fragments}, offset {offset} bytes): \
                 fragments are not reassembled, keep datagrams within the path MTU"
            ),
            PacketError::NotUdp { protocol } => {
                write!(f, "IP protocol {protocol} is not UDP (17)")
            }
            PacketError::UdpTruncated { ip_payload } => write!(
                f,
                "IPv4 payload of {ip_payload} bytes is shorter than the 8-byte UDP header"
            ),
            PacketError::BadUdpLength {
                udp_length,
                ip_payload,
            } => {
                if udp_length < 8 {
                    write!(f, "UDP length {udp_length} is below the 8-byte header")
                } else {
                    write!(
                        f,
                        "UDP length {udp_length} exceeds the {ip_payload}-byte IPv4 payload"
                    )
                }
            }
            PacketError::BadUdpChecksum { found, expected } => write!(
                f,
                "UDP checksum 0x{found:04x} does not verify (0x{expected:04x} would)"
            ),
            PacketError::PayloadTooLong { payload_len } => write!(
                f,
                "UDP payload of {payload_len} bytes exceeds the {MAX_PAYLOAD_LEN} bytes an \
                 IPv4 datagram can carry"
            ),
        }
    }
}

impl core::error::Error for PacketError {}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::test_util::{mutate, mutations};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::string::ToString;
    use std::vec::Vec;

    // Golden frames: sent by the Linux kernel (6.18) and captured off a veth pair, so their
    // checksums come from an encoder other than this one.
    //
    //   ip netns add gA; ip netns add gB
    //   ip link add va address 02:00:00:77:00:01 netns gA type veth \
    //       peer name vb address 02:00:00:77:00:02 netns gB
    //   ip -n gA addr add 10.77.0.1/24 dev va; ip -n gB addr add 10.77.0.2/24 dev vb
    //   ip -n gA link set va up; ip -n gB link set vb up
    //   ip netns exec gA ethtool -K va tx off   # no offload: UDP checksums computed in software
    //   ip netns exec gB tshark -i vb -f udp -w g.pcap   # and a receiver on 10.77.0.2:40002
    //
    // then python3 in gA: a UDP socket bound to 10.77.0.1:40001 and connected to
    // 10.77.0.2:40002 (the kernel then numbers the IPv4 identification per socket) sent
    // b"peregrine", b"peregrine wire", b"" and b"zero\xc5\xdc" (the last two bytes chosen so that
    // the UDP checksum computes to 0: the kernel sent 0xffff); a socket bound to
    // 10.77.0.1:40003 with IP_MULTICAST_IF 10.77.0.1 sent b"mcast" to 239.77.0.9:40004; a
    // socket bound to 10.77.0.1:40005 with IP_OPTIONS Router Alert (94 04 00 00) sent
    // b"options" to 10.77.0.2:40006. The kernel set don't-fragment on all of them.
    // `tshark -r g.pcap -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE -V` reported
    // every checksum good; the bytes are `tshark -x`'s. `ip netns del gA; ip netns del gB`.

    /// 10.77.0.1:40001 -> 10.77.0.2:40002, ident 0x4460, b"peregrine" (odd length).
    #[rustfmt::skip]
    pub(crate) static GOLDEN_PEREGRINE: [u8; 51] = [
        0x02, 0x00, 0x00, 0x77, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x45, 0x00, 0x00, 0x25, 0x44, 0x60, 0x40, 0x00, 0x40, 0x11, 0xe1, 0xcb,
        0x0a, 0x4d, 0x00, 0x01, 0x0a, 0x4d, 0x00, 0x02,
        0x9c, 0x41, 0x9c, 0x42, 0x00, 0x11, 0x99, 0xff,
        0x70, 0x65, 0x72, 0x65, 0x67, 0x72, 0x69, 0x6e, 0x65,
    ];
    /// Same socket, ident 0x4461, b"peregrine wire" (even length).
    #[rustfmt::skip]
    pub(crate) static GOLDEN_EVEN: [u8; 56] = [
        0x02, 0x00, 0x00, 0x77, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x45, 0x00, 0x00, 0x2a, 0x44, 0x61, 0x40, 0x00, 0x40, 0x11, 0xe1, 0xc5,
        0x0a, 0x4d, 0x00, 0x01, 0x0a, 0x4d, 0x00, 0x02,
        0x9c, 0x41, 0x9c, 0x42, 0x00, 0x16, 0xb0, 0x06,
        0x70, 0x65, 0x72, 0x65, 0x67, 0x72, 0x69, 0x6e, 0x65, 0x20, 0x77, 0x69, 0x72, 0x65,
    ];
    /// Same socket, ident 0x4462, an empty payload: 42 bytes, as captured (unpadded on veth).
    #[rustfmt::skip]
    pub(crate) static GOLDEN_EMPTY: [u8; 42] = [
        0x02, 0x00, 0x00, 0x77, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x45, 0x00, 0x00, 0x1c, 0x44, 0x62, 0x40, 0x00, 0x40, 0x11, 0xe1, 0xd2,
        0x0a, 0x4d, 0x00, 0x01, 0x0a, 0x4d, 0x00, 0x02,
        0x9c, 0x41, 0x9c, 0x42, 0x00, 0x08, 0xb2, 0xbd,
    ];
    /// Same socket, ident 0x4463, a payload whose UDP checksum computes to 0: sent as 0xffff.
    #[rustfmt::skip]
    pub(crate) static GOLDEN_ZERO_CHECKSUM: [u8; 48] = [
        0x02, 0x00, 0x00, 0x77, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x45, 0x00, 0x00, 0x22, 0x44, 0x63, 0x40, 0x00, 0x40, 0x11, 0xe1, 0xcb,
        0x0a, 0x4d, 0x00, 0x01, 0x0a, 0x4d, 0x00, 0x02,
        0x9c, 0x41, 0x9c, 0x42, 0x00, 0x0e, 0xff, 0xff,
        0x7a, 0x65, 0x72, 0x6f, 0xc5, 0xdc,
    ];
    /// 10.77.0.1:40003 -> 239.77.0.9:40004 (to 01:00:5e:4d:00:09), TTL 1, ident 0x6595,
    /// b"mcast".
    #[rustfmt::skip]
    pub(crate) static GOLDEN_MULTICAST: [u8; 47] = [
        0x01, 0x00, 0x5e, 0x4d, 0x00, 0x09, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x45, 0x00, 0x00, 0x21, 0x65, 0x95, 0x40, 0x00, 0x01, 0x11, 0x1a, 0x93,
        0x0a, 0x4d, 0x00, 0x01, 0xef, 0x4d, 0x00, 0x09,
        0x9c, 0x43, 0x9c, 0x44, 0x00, 0x0d, 0x8a, 0xd0,
        0x6d, 0x63, 0x61, 0x73, 0x74,
    ];
    /// 10.77.0.1:40005 -> 10.77.0.2:40006, ident 0x20f6, IHL 6 with a Router Alert option,
    /// b"options".
    #[rustfmt::skip]
    pub(crate) static GOLDEN_OPTIONS: [u8; 53] = [
        0x02, 0x00, 0x00, 0x77, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x00,
        0x46, 0x00, 0x00, 0x27, 0x20, 0xf6, 0x40, 0x00, 0x40, 0x11, 0x70, 0x2f,
        0x0a, 0x4d, 0x00, 0x01, 0x0a, 0x4d, 0x00, 0x02,
        0x94, 0x04, 0x00, 0x00,
        0x9c, 0x45, 0x9c, 0x46, 0x00, 0x0f, 0xec, 0x5e,
        0x6f, 0x70, 0x74, 0x69, 0x6f, 0x6e, 0x73,
    ];

    const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];
    const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x02];

    fn addr(d: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, d), port)
    }

    /// The packet the kernel sent on its connected socket with `ident`.
    fn unicast(ident: u16, payload: &'static [u8]) -> UdpPacket<'static> {
        UdpPacket {
            src_mac: MAC_A,
            dst_mac: MAC_B,
            src: addr(1, 40001),
            dst: addr(2, 40002),
            ttl: 64,
            ident,
            payload,
        }
    }

    /// Every golden frame with the packet it holds.
    fn goldens() -> [(&'static [u8], UdpPacket<'static>); 6] {
        [
            (&GOLDEN_PEREGRINE, unicast(0x4460, b"peregrine")),
            (&GOLDEN_EVEN, unicast(0x4461, b"peregrine wire")),
            (&GOLDEN_EMPTY, unicast(0x4462, b"")),
            (&GOLDEN_ZERO_CHECKSUM, unicast(0x4463, b"zero\xc5\xdc")),
            (
                &GOLDEN_MULTICAST,
                UdpPacket {
                    src_mac: MAC_A,
                    dst_mac: [0x01, 0x00, 0x5e, 0x4d, 0x00, 0x09],
                    src: addr(1, 40003),
                    dst: SocketAddrV4::new(Ipv4Addr::new(239, 77, 0, 9), 40004),
                    ttl: 1,
                    ident: 0x6595,
                    payload: b"mcast",
                },
            ),
            (
                &GOLDEN_OPTIONS,
                UdpPacket {
                    src: addr(1, 40005),
                    dst: addr(2, 40006),
                    ..unicast(0x20f6, b"options")
                },
            ),
        ]
    }

    /// Recomputes the IPv4 header checksum of a frame a test changed.
    pub(crate) fn fix_ip_checksum(frame: &mut [u8]) {
        Ipv4Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]).fill_checksum();
    }

    /// Recomputes the UDP checksum of a frame (without IPv4 options) a test changed.
    fn fix_udp_checksum(frame: &mut [u8]) {
        let (src, dst) = (read_ipv4(frame, 26..30), read_ipv4(frame, 30..34));
        let mut d = UdpDatagram::new_unchecked(&mut frame[34..]);
        d.fill_checksum(src, dst);
    }

    /// Emits `repr` around `payload` into a buffer pre-filled with 0xa5.
    fn emit_frame(repr: &UdpPacketRepr, payload: &[u8]) -> Vec<u8> {
        let mut frame = std::vec![0xa5u8; HEADERS_LEN + payload.len()];
        frame[HEADERS_LEN..].copy_from_slice(payload);
        assert_eq!(repr.emit(&mut frame, payload.len()), Ok(frame.len()));
        frame
    }

    fn parse_err(frame: &[u8]) -> PacketError {
        parse(frame).unwrap_err()
    }

    #[test]
    fn parses_the_kernels_frames() {
        for (frame, expected) in goldens() {
            assert_eq!(parse(frame), Ok(expected));
        }
    }

    #[test]
    fn emit_reproduces_the_kernels_frames_byte_for_byte() {
        for (frame, packet) in goldens() {
            if frame == &GOLDEN_OPTIONS[..] {
                continue; // emit writes no options
            }
            assert_eq!(emit_frame(&packet.repr(), packet.payload), frame);
        }
    }

    #[test]
    fn emit_writes_only_the_headers_in_front_of_the_payload() {
        let mut frame = [0xa5u8; 64];
        frame[HEADERS_LEN..HEADERS_LEN + 9].copy_from_slice(b"peregrine");
        let repr = unicast(0x4460, b"").repr();
        assert_eq!(repr.emit(&mut frame, 9), Ok(51));
        assert_eq!(frame[..51], GOLDEN_PEREGRINE);
        assert_eq!(frame[51..], [0xa5; 13]);
    }

    #[test]
    fn emit_sends_a_computed_zero_udp_checksum_as_ffff() {
        let frame = emit_frame(&unicast(0x4463, b"").repr(), b"zero\xc5\xdc");
        assert_eq!(frame[40..42], [0xff, 0xff]);
        let mut zeroed = frame.clone();
        zeroed[40..42].fill(0);
        let (src, dst) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(udp::checksum(src, dst, &zeroed[34..]), 0);
        assert_eq!(frame, GOLDEN_ZERO_CHECKSUM);
        assert_eq!(parse(&frame).unwrap().payload, b"zero\xc5\xdc");
    }

    #[test]
    fn odd_length_checksum_pads_a_zero_byte() {
        assert_eq!(checksum(&[0x12, 0x34, 0x56]), !(0x1234u16 + 0x5600));
        assert_eq!(checksum(&[0xab]), !0xab00);
        // Summed in pieces: an odd piece only last.
        let sum = checksum_add(checksum_add(0, &[0x12, 0x34]), &[0x56]);
        assert_eq!(!checksum_fold(sum), checksum(&[0x12, 0x34, 0x56]));
        // The kernel's checksum of the 9-byte b"peregrine" datagram.
        let frame = emit_frame(&unicast(0x4460, b"").repr(), b"peregrine");
        assert_eq!(frame[40..42], [0x99, 0xff]);
    }

    #[test]
    fn checksum_matches_the_rfc_1071_example() {
        // RFC 1071 section 3: these bytes sum to 0xddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum_fold(checksum_add(0, &bytes)), 0xddf2);
        assert_eq!(checksum(&bytes), !0xddf2);
    }

    #[test]
    fn checksum_fold_carries_around() {
        assert_eq!(checksum_fold(0), 0);
        assert_eq!(checksum_fold(0x1_0000), 1);
        assert_eq!(checksum_fold(0xffff), 0xffff);
        assert_eq!(checksum_fold(u64::MAX), 0xffff);
        assert_eq!(checksum(&[]), 0xffff);
        // A carry out of the 64-bit accumulator goes around too.
        assert_eq!(checksum_add(u64::MAX, &[0, 0, 0, 0, 0, 0, 0, 1]), 1);
        assert_eq!(checksum(&[0xff; 17]), !0xff00);
    }

    #[test]
    fn accepts_ipv4_options_and_skips_them() {
        let p = parse(&GOLDEN_OPTIONS).unwrap();
        assert_eq!(p.payload, b"options");
        assert_eq!(p.dst, addr(2, 40006));
    }

    #[test]
    fn accepts_and_ignores_ethernet_padding() {
        for fill in [0x00, 0xa5] {
            let mut frame = GOLDEN_EMPTY.to_vec();
            frame.resize(ethernet::MIN_FRAME_LEN, fill);
            assert_eq!(parse(&frame), Ok(unicast(0x4462, b"")));
        }
        let mut frame = GOLDEN_PEREGRINE.to_vec();
        frame.resize(ethernet::MIN_FRAME_LEN, 0);
        assert_eq!(parse(&frame).unwrap().payload, b"peregrine");
    }

    #[test]
    fn a_checksum_left_for_offload_is_accepted_only_when_asked_and_flagged() {
        // What a veth carries from a kernel that left the checksum to a NIC: the field holds
        // the pseudo-header's folded sum (`~csum_tcpudp_magic(...)`).
        let mut frame = GOLDEN_PEREGRINE;
        let p = parse(&frame).unwrap();
        let len = u16::try_from(p.payload.len() + udp::HEADER_LEN).unwrap();
        let partial = checksum_fold(udp::pseudo_header_sum(*p.src.ip(), *p.dst.ip(), len));
        frame[40..42].copy_from_slice(&partial.to_be_bytes());
        assert!(matches!(
            parse(&frame),
            Err(PacketError::BadUdpChecksum { .. })
        ));
        let (q, was_partial) = parse_allowing_offload(&frame).unwrap();
        assert!(was_partial);
        assert_eq!(q.payload, b"peregrine");
        // A full checksum is not flagged; any other wrong value is still refused.
        assert!(!parse_allowing_offload(&GOLDEN_PEREGRINE).unwrap().1);
        frame[41] ^= 1;
        assert!(matches!(
            parse_allowing_offload(&frame),
            Err(PacketError::BadUdpChecksum { .. })
        ));
    }

    #[test]
    fn accepts_zero_udp_checksum_as_none() {
        let mut frame = GOLDEN_PEREGRINE.to_vec();
        frame[40..42].fill(0);
        frame[50] ^= 0x20; // no checksum covers the payload now
        assert_eq!(parse(&frame).unwrap().payload, b"peregrinE");
    }

    #[test]
    fn udp_length_below_the_ip_payload_bounds_the_payload() {
        let mut frame = GOLDEN_PEREGRINE.to_vec();
        frame[39] = 8 + 4;
        fix_udp_checksum(&mut frame);
        assert_eq!(parse(&frame).unwrap().payload, b"pere");
    }

    #[test]
    fn rejects_frame_shorter_than_the_headers() {
        for len in [0, 13, 41] {
            assert_eq!(
                parse_err(&GOLDEN_EMPTY[..len]),
                PacketError::Truncated {
                    needed: 42,
                    available: len
                }
            );
        }
    }

    #[test]
    fn rejects_frame_cut_inside_the_payload() {
        assert_eq!(
            parse_err(&GOLDEN_PEREGRINE[..50]),
            PacketError::BadTotalLength {
                total_length: 37,
                header_len: 20,
                available: 36
            }
        );
    }

    #[test]
    fn rejects_other_ethertypes_naming_them() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[12..14].copy_from_slice(&[0x86, 0xdd]);
        let e = parse_err(&frame);
        assert_eq!(e, PacketError::NotIpv4 { ethertype: 0x86dd });
        assert_eq!(e.to_string(), "ethertype 0x86dd is not IPv4 (0x0800)");
        frame[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            parse_err(&frame),
            PacketError::NotIpv4 { ethertype: 0x0806 }
        );
    }

    #[test]
    fn rejects_vlan_tagged_frames() {
        for tpid in [ethernet::ethertype::VLAN, ethernet::ethertype::QINQ] {
            // The tag goes between the source MAC and the ethertype: TPID, then PCP 3, VLAN 42.
            let mut frame = GOLDEN_PEREGRINE[..12].to_vec();
            frame.extend_from_slice(&tpid.to_be_bytes());
            frame.extend_from_slice(&[0x60, 42]);
            frame.extend_from_slice(&GOLDEN_PEREGRINE[12..]);
            assert_eq!(
                parse_err(&frame),
                PacketError::VlanTagged { tpid, vlan_id: 42 }
            );
        }
    }

    #[test]
    fn rejects_ip_version_other_than_4() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[14] = 0x65;
        assert_eq!(parse_err(&frame), PacketError::BadIpVersion { version: 6 });
    }

    #[test]
    fn rejects_ihl_below_5() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[14] = 0x44;
        assert_eq!(
            parse_err(&frame),
            PacketError::BadIhl {
                ihl: 4,
                available: 37
            }
        );
    }

    #[test]
    fn rejects_ip_header_longer_than_the_frame() {
        let mut frame = GOLDEN_EMPTY;
        frame[14] = 0x4f;
        assert_eq!(
            parse_err(&frame),
            PacketError::BadIhl {
                ihl: 15,
                available: 28
            }
        );
    }

    #[test]
    fn rejects_total_length_smaller_than_the_header() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[17] = 19;
        fix_ip_checksum(&mut frame);
        assert_eq!(
            parse_err(&frame),
            PacketError::BadTotalLength {
                total_length: 19,
                header_len: 20,
                available: 37
            }
        );
    }

    #[test]
    fn rejects_total_length_beyond_the_frame() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[17] = 38;
        fix_ip_checksum(&mut frame);
        assert_eq!(
            parse_err(&frame),
            PacketError::BadTotalLength {
                total_length: 38,
                header_len: 20,
                available: 37
            }
        );
    }

    #[test]
    fn rejects_a_bad_ip_header_checksum() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[25] ^= 0x10;
        assert_eq!(
            parse_err(&frame),
            PacketError::BadIpChecksum {
                found: 0xe1db,
                expected: 0xe1cb
            }
        );
        // In an option too.
        let mut frame = GOLDEN_OPTIONS;
        frame[35] = 0x05;
        assert!(matches!(
            parse_err(&frame),
            PacketError::BadIpChecksum { found: 0x702f, .. }
        ));
    }

    #[test]
    fn rejects_a_first_fragment() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[20] = 0x20; // MF, offset 0
        fix_ip_checksum(&mut frame);
        assert_eq!(
            parse_err(&frame),
            PacketError::Fragment {
                more_fragments: true,
                offset: 0
            }
        );
    }

    #[test]
    fn rejects_a_later_fragment() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[20..22].copy_from_slice(&185u16.to_be_bytes()); // offset 1480 bytes, last
        fix_ip_checksum(&mut frame);
        assert_eq!(
            parse_err(&frame),
            PacketError::Fragment {
                more_fragments: false,
                offset: 1480
            }
        );
    }

    #[test]
    fn rejects_protocols_other_than_udp() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[23] = 6;
        fix_ip_checksum(&mut frame);
        assert_eq!(parse_err(&frame), PacketError::NotUdp { protocol: 6 });
    }

    #[test]
    fn rejects_ip_payload_shorter_than_the_udp_header() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[17] = 27;
        fix_ip_checksum(&mut frame);
        assert_eq!(
            parse_err(&frame),
            PacketError::UdpTruncated { ip_payload: 7 }
        );
    }

    #[test]
    fn rejects_udp_length_below_8() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[39] = 7;
        assert_eq!(
            parse_err(&frame),
            PacketError::BadUdpLength {
                udp_length: 7,
                ip_payload: 17
            }
        );
    }

    #[test]
    fn rejects_udp_length_beyond_the_ip_payload() {
        // The frame has the bytes (padding), the IPv4 packet does not.
        let mut frame = GOLDEN_PEREGRINE.to_vec();
        frame.resize(60, 0);
        frame[39] = 18;
        assert_eq!(
            parse_err(&frame),
            PacketError::BadUdpLength {
                udp_length: 18,
                ip_payload: 17
            }
        );
    }

    #[test]
    fn rejects_a_bad_udp_checksum() {
        let mut frame = GOLDEN_PEREGRINE;
        frame[42] ^= 0x20; // b"Peregrine"
        let mut fixed = frame;
        fix_udp_checksum(&mut fixed);
        let expected = u16::from_be_bytes([fixed[40], fixed[41]]);
        assert_eq!(
            parse_err(&frame),
            PacketError::BadUdpChecksum {
                found: 0x99ff,
                expected
            }
        );
        assert_eq!(parse(&fixed).unwrap().payload, b"Peregrine");
    }

    #[test]
    fn emit_rejects_a_frame_too_short_for_headers_and_payload() {
        let repr = unicast(1, b"").repr();
        let mut frame = [0xa5u8; 50];
        assert_eq!(
            repr.emit(&mut frame, 9),
            Err(PacketError::Truncated {
                needed: 51,
                available: 50
            })
        );
        assert_eq!(frame, [0xa5; 50]);
        assert_eq!(repr.emit(&mut frame, 8), Ok(50));
    }

    #[test]
    fn emit_rejects_a_payload_beyond_the_16_bit_lengths() {
        let repr = unicast(1, b"").repr();
        let mut frame = std::vec![0u8; HEADERS_LEN + MAX_PAYLOAD_LEN + 1];
        assert_eq!(
            repr.emit(&mut frame, MAX_PAYLOAD_LEN + 1),
            Err(PacketError::PayloadTooLong {
                payload_len: 65_508
            })
        );
        assert_eq!(
            repr.emit(&mut frame, usize::MAX),
            Err(PacketError::PayloadTooLong {
                payload_len: usize::MAX
            })
        );
        // The largest fits: total length 65,535, UDP length 65,515.
        let len = repr.emit(&mut frame, MAX_PAYLOAD_LEN).unwrap();
        assert_eq!(frame[16..18], [0xff, 0xff]);
        assert_eq!(frame[38..40], 65_515u16.to_be_bytes());
        assert_eq!(parse(&frame[..len]).unwrap().payload.len(), MAX_PAYLOAD_LEN);
    }

    #[test]
    fn every_error_kind_has_a_stable_index_and_name() {
        let all = [
            PacketError::Truncated {
                needed: 42,
                available: 0,
            },
            PacketError::VlanTagged {
                tpid: 0x8100,
                vlan_id: 1,
            },
            PacketError::NotIpv4 { ethertype: 0x86dd },
            PacketError::BadIpVersion { version: 6 },
            PacketError::BadIhl {
                ihl: 4,
                available: 40,
            },
            PacketError::BadTotalLength {
                total_length: 1,
                header_len: 20,
                available: 40,
            },
            PacketError::BadIpChecksum {
                found: 1,
                expected: 2,
            },
            PacketError::Fragment {
                more_fragments: true,
                offset: 0,
            },
            PacketError::NotUdp { protocol: 6 },
            PacketError::UdpTruncated { ip_payload: 4 },
            PacketError::BadUdpLength {
                udp_length: 4,
                ip_payload: 8,
            },
            PacketError::BadUdpChecksum {
                found: 1,
                expected: 2,
            },
            PacketError::PayloadTooLong {
                payload_len: 70_000,
            },
        ];
        assert_eq!(all.len(), PacketError::KINDS);
        for (i, e) in all.iter().enumerate() {
            assert_eq!(e.index(), i);
            assert_eq!(e.name(), PacketError::NAMES[i]);
            assert!(std::format!("{e:?}").starts_with(e.name()));
        }
    }

    #[test]
    fn display_names_the_value_found() {
        let cases = [
            (
                PacketError::VlanTagged {
                    tpid: 0x8100,
                    vlan_id: 42,
                },
                "frame is VLAN-tagged (TPID 0x8100, VLAN 42): only untagged Ethernet II frames \
                 are accepted (let the NIC strip the tag)",
            ),
            (
                PacketError::BadIhl {
                    ihl: 4,
                    available: 40,
                },
                "IPv4 IHL 4 is below the minimum of 5 (20 bytes)",
            ),
            (
                PacketError::BadIhl {
                    ihl: 15,
                    available: 28,
                },
                "IPv4 IHL 15 gives a 60-byte header, longer than the 28 bytes after the \
                 Ethernet header",
            ),
            (
                PacketError::BadIpChecksum {
                    found: 0xe1db,
                    expected: 0xe1cb,
                },
                "IPv4 header checksum 0xe1db does not verify (0xe1cb would)",
            ),
            (
                PacketError::Fragment {
                    more_fragments: false,
                    offset: 1480,
                },
                "IPv4 fragment (more fragments: false, offset 1480 bytes): fragments are not \
                 reassembled, keep datagrams within the path MTU",
            ),
            (
                PacketError::NotUdp { protocol: 6 },
                "IP protocol 6 is not UDP (17)",
            ),
            (
                PacketError::BadUdpLength {
                    udp_length: 18,
                    ip_payload: 17,
                },
                "UDP length 18 exceeds the 17-byte IPv4 payload",
            ),
            (
                PacketError::PayloadTooLong {
                    payload_len: 65_508,
                },
                "UDP payload of 65508 bytes exceeds the 65507 bytes an IPv4 datagram can carry",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }

    /// The ones'-complement sum of RFC 1071 word by word, to check the fast one against.
    fn reference_checksum(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        for pair in data.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            sum += hi | pair.get(1).map_or(0, |&lo| u64::from(lo));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    prop_compose! {
        fn any_repr()(
            src_mac: [u8; 6],
            dst_mac: [u8; 6],
            src_ip: [u8; 4],
            dst_ip: [u8; 4],
            src_port: u16,
            dst_port: u16,
            ttl: u8,
            ident: u16,
        ) -> UdpPacketRepr {
            UdpPacketRepr {
                src_mac,
                dst_mac,
                src: SocketAddrV4::new(src_ip.into(), src_port),
                dst: SocketAddrV4::new(dst_ip.into(), dst_port),
                ttl,
                ident,
            }
        }
    }

    /// Frames worth feeding the parser: random bytes, or a golden frame with a few bytes
    /// changed and maybe cut (the checks past the checksums are then reached, with fixed
    /// checksums, a quarter of the time).
    fn arbitrary_frame() -> BoxedStrategy<Vec<u8>> {
        let raw = vec(any::<u8>(), 0..128);
        let mutated = (0..6usize, mutations(), any::<bool>(), any::<bool>()).prop_map(
            |(i, m, fix_ip, fix_udp)| {
                let (golden, _) = goldens()[i];
                let mut b = golden.to_vec();
                mutate(&mut b, &m);
                if fix_ip && b.len() >= HEADERS_LEN && b[14] & 0x0f == 5 {
                    fix_ip_checksum(&mut b);
                    let udp_length = usize::from(u16::from_be_bytes([b[38], b[39]]));
                    if fix_udp && (8..=b.len() - 34).contains(&udp_length) {
                        fix_udp_checksum(&mut b[..34 + udp_length]);
                    }
                }
                b
            },
        );
        prop_oneof![1 => raw, 3 => mutated].boxed()
    }

    /// If `bytes` parse, re-emitting the packet gives a frame that parses to the same packet;
    /// and the same bytes when `bytes` were laid out as emit lays them out.
    fn assert_consistent(bytes: &[u8]) -> Result<(), TestCaseError> {
        let Ok(packet) = parse(bytes) else {
            return Ok(());
        };
        let out = emit_frame(&packet.repr(), packet.payload);
        prop_assert_eq!(parse(&out), Ok(packet));
        let canonical = bytes[14] == 0x45
            && bytes[15] == 0
            && bytes[20..22] == [0x40, 0]
            && bytes[24..26] != [0xff, 0xff] // the other zero of an all-ones sum
            && bytes[40..42] != [0, 0]
            && usize::from(u16::from_be_bytes([bytes[16], bytes[17]])) == out.len() - 14
            && usize::from(u16::from_be_bytes([bytes[38], bytes[39]])) == out.len() - 34;
        if canonical {
            prop_assert_eq!(&out[..], &bytes[..out.len()]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            repr in any_repr(),
            payload in vec(any::<u8>(), 0..1472),
        ) {
            let frame = emit_frame(&repr, &payload);
            let packet = parse(&frame).unwrap();
            prop_assert_eq!(packet.repr(), repr);
            prop_assert_eq!(packet.payload, &payload[..]);
            prop_assert_eq!(checksum(&frame[14..34]), 0);
            let (src, dst) = (*repr.src.ip(), *repr.dst.ip());
            prop_assert_eq!(udp::checksum(src, dst, &frame[34..]), 0);
            assert_consistent(&frame)?;
        }

        #[test]
        fn fast_checksum_matches_the_word_by_word_sum(
            data in vec(any::<u8>(), 0..2000),
            split in any::<usize>(),
        ) {
            prop_assert_eq!(checksum(&data), reference_checksum(&data));
            // Summed in two pieces, the first of even length.
            let at = (split % (data.len() + 1)) & !1;
            let sum = checksum_add(checksum_add(0, &data[..at]), &data[at..]);
            prop_assert_eq!(!checksum_fold(sum), reference_checksum(&data));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_frame()) {
            assert_consistent(&bytes)?;
        }

        #[test]
        fn a_single_changed_byte_is_caught_unless_no_checksum_covers_it(
            repr in any_repr(),
            payload in vec(any::<u8>(), 0..200),
            at in any::<usize>(),
            x in 1u8..=255,
        ) {
            let mut frame = emit_frame(&repr, &payload);
            let at = at % frame.len();
            frame[at] ^= x;
            let Ok(packet) = parse(&frame) else {
                return Ok(());
            };
            // Only the MAC addresses are outside both checksums; a UDP checksum byte changed
            // to 0 leaves no UDP checksum; a shorter UDP length can verify by chance.
            let udp_checksum_gone = frame[40..42] == [0, 0];
            prop_assert!(at < 12 || udp_checksum_gone || (38..40).contains(&at), "byte {at}");
            prop_assert_eq!(checksum(&frame[14..34]), 0);
            let udp_length = usize::from(u16::from_be_bytes([frame[38], frame[39]]));
            let (src, dst) = (*repr.src.ip(), *repr.dst.ip());
            prop_assert!(
                udp_checksum_gone || udp::checksum(src, dst, &frame[34..34 + udp_length]) == 0
            );
            prop_assert_eq!(&packet.src_mac[..], &frame[6..12]);
            prop_assert_eq!(&packet.dst_mac[..], &frame[..6]);
            prop_assert_eq!((packet.src, packet.dst, packet.ttl), (repr.src, repr.dst, repr.ttl));
            assert_consistent(&frame)?;
        }
    }
}
