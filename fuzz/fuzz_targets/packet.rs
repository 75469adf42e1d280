//! Ethernet II + IPv4 + UDP, the xdp driver's headers: parse never panics; what parses lies
//! within the frame, its checksums hold, and re-emitting it around its payload gives a frame
//! that parses to the same packet (and the same bytes, for a frame laid out as emit lays it out).
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::packet::{self, udp, HEADERS_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = packet::parse(data) else {
        return;
    };
    // What parsed has the 42 header bytes, an IPv4 header whose checksum holds, and a UDP
    // checksum that is absent or holds.
    assert!(data.len() >= HEADERS_LEN + packet.payload.len());
    let ihl = usize::from(data[14] & 0x0f) * 4;
    assert_eq!(packet::checksum(&data[14..14 + ihl]), 0);
    let datagram = &data[14 + ihl..14 + ihl + 8 + packet.payload.len()];
    assert_eq!(&datagram[8..], packet.payload);
    if datagram[6..8] != [0, 0] {
        assert_eq!(
            udp::checksum(*packet.src.ip(), *packet.dst.ip(), datagram),
            0
        );
    }

    let mut out = vec![0xa5u8; HEADERS_LEN + packet.payload.len()];
    out[HEADERS_LEN..].copy_from_slice(packet.payload);
    let len = packet
        .repr()
        .emit(&mut out, packet.payload.len())
        .expect("a parsed payload fits");
    assert_eq!(len, out.len());
    assert_eq!(packet::parse(&out), Ok(packet));
    // The same bytes when the input was laid out as emit lays it out: IHL 5, DSCP/ECN 0,
    // don't-fragment, exact lengths, a UDP checksum; and not the IPv4 checksum 0xffff, the
    // other form of the zero that emit writes as 0x0000.
    let be16 = |i: usize| usize::from(u16::from_be_bytes([data[i], data[i + 1]]));
    let canonical = data[14] == 0x45
        && data[15] == 0
        && data[20..22] == [0x40, 0]
        && data[24..26] != [0xff, 0xff]
        && data[40..42] != [0, 0]
        && be16(16) == len - 14
        && be16(38) == len - 34;
    if canonical {
        assert_eq!(&out[..], &data[..len]);
    }
});
