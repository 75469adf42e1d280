//! The XDP steering program: which received frames go to Peregrine's AF_XDP socket and which
//! to the kernel. Sans-I/O: this module only builds instructions; [`super::bpf`] loads them.
//!
//! The program redirects a frame to the socket of its receive queue (the `xsks` map) only when
//! it is an untagged Ethernet II frame carrying IPv4 without options (IHL 5), not a fragment,
//! protocol UDP, and its destination address and port are a key of the `streams` map (the
//! streams this process subscribed to). Every other frame, and a stream's frame on a queue with
//! no socket, passes to the kernel untouched (`XDP_PASS`): ARP, other ports, the kernel's own
//! traffic keep working while a stream runs. The program reads only headers; the driver checks
//! every field and checksum again ([`peregrine_wire::packet::parse`]).
//!
//! A `streams` key is 8 bytes: the IPv4 destination address and the UDP destination port as
//! they are on the wire (network order), then two zero bytes ([`stream_key`]).

use std::net::SocketAddrV4;

/// `XDP_PASS`: the frame goes on to the kernel's stack.
pub const XDP_PASS: i32 = 2;

/// Length of a `streams` key.
pub const STREAM_KEY_LEN: usize = 8;

/// The `streams` key of packets addressed to `dst`.
pub fn stream_key(dst: SocketAddrV4) -> [u8; STREAM_KEY_LEN] {
    let a = dst.ip().octets();
    let p = dst.port().to_be_bytes();
    [a[0], a[1], a[2], a[3], p[0], p[1], 0, 0]
}

// Instruction classes and fields of the eBPF encoding (Documentation/bpf/standardization).
const LDX_MEM: u8 = 0x61; // BPF_LDX | BPF_MEM; add the size below
const STX_MEM: u8 = 0x63; // BPF_STX | BPF_MEM
const ST_MEM: u8 = 0x62; // BPF_ST | BPF_MEM (immediate)
const SIZE_W: u8 = 0x00;
const SIZE_H: u8 = 0x08;
const SIZE_B: u8 = 0x10;
const ALU64_MOV_K: u8 = 0xb7;
const ALU64_MOV_X: u8 = 0xbf;
const ALU64_ADD_K: u8 = 0x07;
const ALU64_AND_K: u8 = 0x57;
const JMP_JEQ_K: u8 = 0x15;
const JMP_JNE_K: u8 = 0x55;
const JMP_JGT_X: u8 = 0x2d;
const JMP_CALL: u8 = 0x85;
const JMP_EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;
/// `BPF_PSEUDO_MAP_FD`: a 64-bit load's immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;

/// One instruction: opcode, destination and source registers, offset, immediate, as the
/// kernel reads `struct bpf_insn` on a little-endian machine.
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | (((dst & 0xf) | ((src & 0xf) << 4)) as u64) << 8
        | ((off as u16) as u64) << 16
        | ((imm as u32) as u64) << 32
}

/// Builds the program around the two maps' descriptors.
pub fn steering(streams_map: i32, xsks_map: i32) -> Vec<u64> {
    // Registers: r1 context then helper arguments, r2 packet start, r3 packet end, r5
    // scratch, r6 the context kept across the call, r10 the frame pointer.
    let mut p = Vec::with_capacity(40);
    p.push(insn(ALU64_MOV_X, 6, 1, 0, 0)); // r6 = ctx
    p.push(insn(LDX_MEM | SIZE_W, 2, 1, 0, 0)); // r2 = ctx->data
    p.push(insn(LDX_MEM | SIZE_W, 3, 1, 4, 0)); // r3 = ctx->data_end
    p.push(insn(ALU64_MOV_X, 4, 2, 0, 0)); // r4 = r2
    p.push(insn(ALU64_ADD_K, 4, 0, 0, 42)); // r4 += Ethernet + IPv4 + UDP headers
    let to_pass = |p: &Vec<u64>| p.len(); // index of a jump to patch
    let mut jumps = vec![to_pass(&p)];
    p.push(insn(JMP_JGT_X, 4, 3, 0, 0)); // too short: pass
    p.push(insn(LDX_MEM | SIZE_H, 5, 2, 12, 0)); // ethertype
    jumps.push(to_pass(&p));
    p.push(insn(JMP_JNE_K, 5, 0, 0, 0x0008)); // not 0x0800 (read little-endian): pass
    p.push(insn(LDX_MEM | SIZE_B, 5, 2, 14, 0)); // version and IHL
    jumps.push(to_pass(&p));
    p.push(insn(JMP_JNE_K, 5, 0, 0, 0x45)); // not IPv4 without options: pass
    p.push(insn(LDX_MEM | SIZE_B, 5, 2, 23, 0)); // protocol
    jumps.push(to_pass(&p));
    p.push(insn(JMP_JNE_K, 5, 0, 0, 17)); // not UDP: pass
    p.push(insn(LDX_MEM | SIZE_H, 5, 2, 20, 0)); // flags and fragment offset
    p.push(insn(ALU64_AND_K, 5, 0, 0, 0xff3f)); // more-fragments bit and offset
    jumps.push(to_pass(&p));
    p.push(insn(JMP_JNE_K, 5, 0, 0, 0)); // a fragment: the kernel reassembles
                                         // The key on the stack at r10-8: destination address, destination port, zero.
    p.push(insn(LDX_MEM | SIZE_H, 5, 2, 30, 0));
    p.push(insn(STX_MEM | SIZE_H, 10, 5, -8, 0));
    p.push(insn(LDX_MEM | SIZE_H, 5, 2, 32, 0));
    p.push(insn(STX_MEM | SIZE_H, 10, 5, -6, 0));
    p.push(insn(LDX_MEM | SIZE_H, 5, 2, 36, 0));
    p.push(insn(STX_MEM | SIZE_H, 10, 5, -4, 0));
    p.push(insn(ST_MEM | SIZE_H, 10, 0, -2, 0));
    p.push(insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, streams_map)); // r1 = &streams
    p.push(insn(0, 0, 0, 0, 0));
    p.push(insn(ALU64_MOV_X, 2, 10, 0, 0)); // r2 = &key
    p.push(insn(ALU64_ADD_K, 2, 0, 0, -8));
    p.push(insn(JMP_CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM));
    jumps.push(to_pass(&p));
    p.push(insn(JMP_JEQ_K, 0, 0, 0, 0)); // not a stream of ours: pass
    p.push(insn(LDX_MEM | SIZE_W, 2, 6, 16, 0)); // r2 = ctx->rx_queue_index
    p.push(insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, xsks_map)); // r1 = &xsks
    p.push(insn(0, 0, 0, 0, 0));
    p.push(insn(ALU64_MOV_K, 3, 0, 0, XDP_PASS)); // no socket on this queue: pass
    p.push(insn(JMP_CALL, 0, 0, 0, HELPER_REDIRECT_MAP));
    p.push(insn(JMP_EXIT, 0, 0, 0, 0));
    let pass = p.len();
    p.push(insn(ALU64_MOV_K, 0, 0, 0, XDP_PASS));
    p.push(insn(JMP_EXIT, 0, 0, 0, 0));
    for j in jumps {
        // A jump's offset counts from the instruction after it.
        let off = (pass - j - 1) as i16;
        p[j] = (p[j] & !(0xffff << 16)) | (u64::from(off as u16) << 16);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // `r0 = 2; exit` (`return XDP_PASS;`): the bytes of `struct bpf_insn` the instruction
        // set document gives (opcode, registers, 16-bit offset, 32-bit immediate, little-endian).
        assert_eq!(
            insn(ALU64_MOV_K, 0, 0, 0, 2).to_le_bytes(),
            [0xb7, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(
            insn(JMP_EXIT, 0, 0, 0, 0).to_le_bytes(),
            [0x95, 0, 0, 0, 0, 0, 0, 0]
        );
        // `*(u16 *)(r10 - 8) = r5`: registers in one byte (dst low nibble, src high), the
        // offset as a little-endian i16.
        assert_eq!(
            insn(STX_MEM | SIZE_H, 10, 5, -8, 0).to_le_bytes(),
            [0x6b, 0x5a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        // `r2 += -8`: a negative immediate.
        assert_eq!(
            insn(ALU64_ADD_K, 2, 0, 0, -8).to_le_bytes(),
            [0x07, 0x02, 0, 0, 0xf8, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn every_jump_lands_on_the_pass_exit() {
        let p = steering(7, 8);
        let pass = p.len() - 2;
        assert_eq!(p[pass], insn(ALU64_MOV_K, 0, 0, 0, XDP_PASS));
        let mut jumps = 0;
        for (i, &ins) in p.iter().enumerate() {
            let code = ins as u8;
            if matches!(code, JMP_JEQ_K | JMP_JNE_K | JMP_JGT_X) {
                let off = (ins >> 16) as u16 as i16;
                assert_eq!(i as i64 + 1 + i64::from(off), pass as i64, "jump at {i}");
                jumps += 1;
            }
        }
        assert_eq!(jumps, 6);
        // The map loads carry the descriptors given.
        let maps: Vec<i32> = p
            .iter()
            .filter(|&&i| i as u8 == LD_IMM64)
            .map(|&i| (i >> 32) as i32)
            .collect();
        assert_eq!(maps, [7, 8]);
    }

    #[test]
    fn a_stream_key_is_address_and_port_in_network_order() {
        let k = stream_key(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 0x9c40));
        assert_eq!(k, [10, 1, 2, 3, 0x9c, 0x40, 0, 0]);
    }
}
