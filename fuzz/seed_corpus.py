#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ for every target of fuzz/Cargo.toml with the golden vectors of
docs/golden/frames.json (valid and invalid), so libFuzzer starts from real frames instead of
having to discover the magic number, plus datagrams that pack valid frames at 8-byte aligned
offsets: all of them, and each frame type's vectors together (a resolver datagram of
advertisements and queries, a data datagram, a control datagram). Targets that read whole
datagrams or sequences of them (frames, resolver, receiver, sender_naks) start from those.

The packet target (Ethernet II + IPv4 + UDP, peregrine_wire::packet) is seeded with the frames
the Linux kernel sent for the golden vectors of crates/wire/src/packet.rs, and with frames built
here, as the xdp driver emits them, around each packed datagram above.

The recording target is seeded from docs/golden/recording.json. The market data targets (md, md_*) are seeded from docs/golden/md.json instead: md with every
vector and streams of the valid ones back to back; md_distributor with scripts in its input
language (fuzz_targets/md_distributor.rs) that log a client in and feed it each vector, feed
each vector to the backbone, and play a whole session (open, refresh, updates, loss, drain).

    python3 fuzz/seed_corpus.py        # from the repository root or from fuzz/
"""
import json
import pathlib
import re
import struct

HERE = pathlib.Path(__file__).resolve().parent
TARGETS = re.findall(r'^\[\[bin\]\]\s*\nname\s*=\s*"([^"]+)"', (HERE / "Cargo.toml").read_text(), re.M)
if not TARGETS:
    raise SystemExit("no [[bin]] targets found in fuzz/Cargo.toml")

vectors = json.loads((HERE.parent / "docs" / "golden" / "frames.json").read_text())
md_vectors = json.loads((HERE.parent / "docs" / "golden" / "md.json").read_text())
valid = [v for v in vectors if v["valid"]]


def pack(vs):
    out = b""
    for v in vs:
        frame = bytes.fromhex(v["hex"])
        out += frame + bytes(-len(frame) % 8)
    return out


def kind(v):
    # Vector names start with their frame type: data_..., advertise_..., nak_...
    return v["name"].split("_")[0]


groups = {"all_valid": valid}
for v in valid:
    groups.setdefault(kind(v), []).append(v)
groups["resolver"] = [v for v in valid if kind(v) in ("advertise", "query")]
groups["control"] = [v for v in valid if kind(v) in ("heartbeat", "nak", "status", "bye")]


# The frames the Linux kernel sent for the golden vectors of crates/wire/src/packet.rs (how they
# were captured is told there): b"peregrine", b"peregrine wire", b"", a UDP checksum computed as
# 0 and sent as 0xffff, a multicast datagram, an IPv4 header with a Router Alert option.
KERNEL_FRAMES = {
    "peregrine": "020000770002020000770001080045000025446040004011e1cb0a4d00010a4d0002"
                 "9c419c42001199ff706572656772696e65",
    "even": "02000077000202000077000108004500002a446140004011e1c50a4d00010a4d0002"
            "9c419c420016b006706572656772696e652077697265",
    "empty": "02000077000202000077000108004500001c446240004011e1d20a4d00010a4d0002"
             "9c419c420008b2bd",
    "zero_checksum": "020000770002020000770001080045000022446340004011e1cb0a4d00010a4d0002"
                     "9c419c42000effff7a65726fc5dc",
    "multicast": "01005e4d00090200007700010800450000216595400001111a930a4d0001ef4d0009"
                 "9c439c44000d8ad06d63617374",
    "options": "02000077000202000077000108004600002720f640004011702f0a4d00010a4d0002"
               "940400009c459c46000fec5e6f7074696f6e73",
}


def internet_checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def udp_frame(payload, ident=0):
    """An Ethernet II + IPv4 + UDP frame around payload, as peregrine_wire::packet emits it."""
    src, dst = bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2])
    udp_len = 8 + len(payload)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ident, 0x4000, 64, 17, 0, src, dst))
    ip[10:12] = internet_checksum(bytes(ip)).to_bytes(2, "big")
    udp = bytearray(struct.pack("!HHHH", 40001, 40002, udp_len, 0)) + payload
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp[6:8] = (internet_checksum(pseudo + bytes(udp)) or 0xffff).to_bytes(2, "big")
    macs = bytes.fromhex("020000770002" "020000770001")
    return macs + b"\x08\x00" + bytes(ip) + bytes(udp)


def md_seeds(target):
    """Inputs for the market data targets, by file name."""
    out = {f"golden_{v['name']}": bytes.fromhex(v["hex"]) for v in md_vectors}
    valid_md = [bytes.fromhex(v["hex"]) for v in md_vectors if v["valid"]]
    out["stream_all_valid"] = b"".join(valid_md)
    out["stream_client"] = b"".join(
        bytes.fromhex(v["hex"]) for v in md_vectors if v["valid"] and v["type"] in ("LOGIN", "OPEN", "CLOSE"))
    if target == "md":
        return out
    # md_distributor's language: a setup byte, then ops (low nibble: the op, high nibble: its
    # client slot or service). 0x00 connect, 0x02 LOGIN (arg byte 5: bob, right token),
    # 0x01 client bytes (len, bytes), 0x03 OPEN (request, service, count-1, patterns),
    # 0x05 backbone bytes (len, bytes), 0x06 REFRESH (feed id, name, seq, fields),
    # 0x07 UPDATE (feed id, seq, value), 0x09 loss, 0x0a feed gone, 0x0b feed back,
    # 0x0c drained (keep half?).
    login = bytes([0x00, 0x02, 0x05])
    scripts = {}
    for v in md_vectors:
        b = bytes.fromhex(v["hex"])
        if len(b) <= 255:
            scripts[f"client_{v['name']}"] = bytes([0]) + login + bytes([0x01, len(b)]) + b
            scripts[f"backbone_{v['name']}"] = bytes([0, 0x05, len(b)]) + b
    session = bytearray([0]) + login + bytes([0x10, 0x12, 0x04])  # a second client: alice
    session += bytes([0x03, 1, 0, 1, 1, 2])  # bob opens AAA.* and *
    session += bytes([0x13, 1, 0, 0, 0])  # alice opens AAA.O
    for fid, name in [(1, 0), (2, 1), (3, 2)]:
        session += bytes([0x06, fid, name, 1, 2])
    for seq in range(2, 40):
        session += bytes([0x07, 1 + seq % 3, seq // 3 + 1, seq])
    # loss, a fresh image, both clients drain (all, half), the feed goes and comes back
    session += bytes([0x09, 0x06, 1, 0, 50, 1, 0x0c, 0, 0x1c, 1, 0x0a, 0x0b, 0x06, 7, 0, 1, 3])
    scripts["session"] = bytes(session)
    scripts["session_small_queue_disconnect"] = bytes([2]) + bytes(session[1:])
    return {**out, **scripts}


seeds = 0
for target in TARGETS:
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    if target == "packet":
        frames = {f"kernel_{n}": bytes.fromhex(h) for n, h in KERNEL_FRAMES.items()}
        frames["kernel_empty_padded"] = frames["kernel_empty"] + bytes(18)
        for i, (name, vs) in enumerate(groups.items()):
            if vs:
                frames[f"udp_packed_{name}"] = udp_frame(pack(vs), ident=i)
        for name, data in frames.items():
            (out / name).write_bytes(data)
        seeds += len(frames)
        continue
    if target == "failover":
        # A member's message (the failover header's golden bytes), an empty one, a plain one.
        golden = bytes.fromhex("5047464ff6ea5d860807060504030201") + b"hi"
        for name, data in [("golden", golden), ("empty", golden[:16]), ("plain", b"#17....")]:
            (out / name).write_bytes(data)
            seeds += 1
        continue
    if target == "recording":
        # The recording format's golden vectors, and a segment's header followed by records.
        rec = json.loads((HERE.parent / "docs" / "golden" / "recording.json").read_text())
        for v in rec:
            (out / f"golden_{v['name']}").write_bytes(bytes.fromhex(v["hex"]))
        good = [bytes.fromhex(v["hex"]) for v in rec if v["valid"]]
        (out / "packed_valid").write_bytes(b"".join(good))
        seeds += len(rec) + 1
        continue
    if target == "md" or target.startswith("md_"):
        for name, data in md_seeds(target).items():
            (out / name).write_bytes(data)
            seeds += 1
        continue
    for v in vectors:
        (out / f"golden_{v['name']}").write_bytes(bytes.fromhex(v["hex"]))
    for name, vs in groups.items():
        if vs:
            (out / f"packed_{name}").write_bytes(pack(vs))
    seeds += len(vectors) + sum(1 for vs in groups.values() if vs)
print(f"seeded {len(TARGETS)} corpora ({', '.join(TARGETS)}): {seeds} inputs")
