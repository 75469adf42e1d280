#!/usr/bin/env python3
"""Writes frames.json, the golden vectors of the Peregrine wire protocol (docs/protocol.md).

The encoder below is written from docs/protocol.md alone, independently of the Rust crate, so
that crates/wire/tests/golden.rs checks two implementations against each other. frames.json is
the reference: edit this script and regenerate only to add vectors, and review the diff (an
existing vector's hex must never change within a protocol version).

    python3 docs/golden/make_frames.py > docs/golden/frames.json
    python3 docs/golden/make_frames.py --sealed > docs/golden/sealed.json   # datagrams with AUTH
"""
import hashlib
import hmac
import json
import struct
import sys

MAGIC = 0x4750
TYPES = {"DATA": 1, "PAD": 2, "HEARTBEAT": 3, "NAK": 4, "ADVERTISE": 5, "QUERY": 6, "BYE": 7, "STATUS": 8,
         "COOKIE": 9, "AUTH": 10}
FLAGS = {"BEGIN": 1, "END": 2, "URGENT": 4, "RETRANSMIT": 8}
STATUS_FLAGS = {"JOIN": 1, "LEAVE": 2}
KINDS = {"exact": 0, "glob": 1, "regex": 2}


def header(frame_length, frame_type, flags=0, session_id=0, magic=MAGIC, version=1, reserved=0):
    return struct.pack("<IHBBHHI", frame_length, magic, version, frame_type, flags, reserved, session_id)


def flag_bits(names, table=FLAGS):
    bits = 0
    for n in names:
        bits |= table[n]
    return bits


def data(session_id, stream_id, sequence, message_length, flags, payload, **hdr):
    body = struct.pack("<IIQ", stream_id, message_length, sequence) + payload
    return header(32 + len(payload), TYPES["DATA"], flag_bits(flags), session_id, **hdr) + body


def pad(session_id, sequence, frame_length):
    return header(frame_length, TYPES["PAD"], 0, session_id) + struct.pack("<IIQ", 0, 0, sequence) + bytes(
        frame_length - 32
    )


def heartbeat(session_id, stream_id, next_sequence, oldest_retained, flags=0, reserved=0):
    return header(40, TYPES["HEARTBEAT"], flags, session_id) + struct.pack(
        "<IIQQ", stream_id, reserved, next_sequence, oldest_retained
    )


def nak(session_id, stream_id, receiver_id, ranges, range_count=None):
    n = len(ranges) if range_count is None else range_count
    body = struct.pack("<IIHHI", stream_id, receiver_id, n, 0, 0)
    for start, count in ranges:
        body += struct.pack("<QII", start, count, 0)
    return header(32 + 16 * len(ranges), TYPES["NAK"], 0, session_id) + body


def advertise(session_id, stream_id, ttl_ms, topic, uri):
    t = topic if isinstance(topic, bytes) else topic.encode()
    u = uri if isinstance(uri, bytes) else uri.encode()
    body = struct.pack("<IIHHI", stream_id, ttl_ms, len(t), len(u), 0) + t + u
    return header(32 + len(t) + len(u), TYPES["ADVERTISE"], 0, session_id) + body


def query(session_id, query_id, kind, pattern, kind_byte=None):
    p = pattern if isinstance(pattern, bytes) else pattern.encode()
    k = KINDS[kind] if kind_byte is None else kind_byte
    body = struct.pack("<BBHI", k, 0, len(p), query_id) + p
    return header(24 + len(p), TYPES["QUERY"], 0, session_id) + body


def bye(session_id, stream_id, final_next_sequence):
    return header(32, TYPES["BYE"], 0, session_id) + struct.pack("<IIQ", stream_id, 0, final_next_sequence)


def status(session_id, stream_id, receiver_id, next_sequence, window, flags, reserved=0, raw_flags=None):
    """STATUS: 16-byte header, stream_id u32, receiver_id u32, next_sequence u64, window u32,
    reserved u32; always 40 bytes. raw_flags overrides the flag bits (for invalid vectors)."""
    bits = flag_bits(flags, STATUS_FLAGS) if raw_flags is None else raw_flags
    return header(40, TYPES["STATUS"], bits, session_id) + struct.pack(
        "<IIQII", stream_id, receiver_id, next_sequence, window, reserved
    )


def cookie(cookie16, session_id=0, flags=0):
    """COOKIE: 16-byte header, the 16-byte cookie; always 32 bytes."""
    return header(32, TYPES["COOKIE"], flags, session_id) + cookie16


def auth(key_id, tag16, flags=0):
    """AUTH: 16-byte header whose session_id field is the key id, the 16-byte tag; 32 bytes."""
    return header(32, TYPES["AUTH"], flags, key_id) + tag16


def key_id_of(key):
    """The first four bytes of SHA-256 of the key, little-endian."""
    return struct.unpack("<I", hashlib.sha256(key).digest()[:4])[0]


# ---- BLAKE3, from its specification (https://github.com/BLAKE3-team/BLAKE3-specs), so the
# sealed vectors' second MAC is computed independently of the blake3 crate ---------------------
B3_IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
B3_PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
CHUNK_START, CHUNK_END, PARENT, ROOT, KEYED_HASH, DERIVE_KEY_CONTEXT, DERIVE_KEY_MATERIAL = 1, 2, 4, 8, 16, 32, 64


def _b3_g(v, a, b, c, d, x, y):
    m = 0xFFFFFFFF
    rot = lambda w, n: ((w >> n) | (w << (32 - n))) & m
    v[a] = (v[a] + v[b] + x) & m; v[d] = rot(v[d] ^ v[a], 16)
    v[c] = (v[c] + v[d]) & m;     v[b] = rot(v[b] ^ v[c], 12)
    v[a] = (v[a] + v[b] + y) & m; v[d] = rot(v[d] ^ v[a], 8)
    v[c] = (v[c] + v[d]) & m;     v[b] = rot(v[b] ^ v[c], 7)


def _b3_compress(cv, block, counter, block_len, flags):
    """The compression function: 16 output words."""
    w = list(struct.unpack("<16I", block))
    v = cv[:] + B3_IV[:4] + [counter & 0xFFFFFFFF, counter >> 32, block_len, flags]
    for r in range(7):
        _b3_g(v, 0, 4, 8, 12, w[0], w[1]); _b3_g(v, 1, 5, 9, 13, w[2], w[3])
        _b3_g(v, 2, 6, 10, 14, w[4], w[5]); _b3_g(v, 3, 7, 11, 15, w[6], w[7])
        _b3_g(v, 0, 5, 10, 15, w[8], w[9]); _b3_g(v, 1, 6, 11, 12, w[10], w[11])
        _b3_g(v, 2, 7, 8, 13, w[12], w[13]); _b3_g(v, 3, 4, 9, 14, w[14], w[15])
        if r < 6:
            w = [w[i] for i in B3_PERM]
    return [v[i] ^ v[i + 8] for i in range(8)] + [v[i + 8] ^ cv[i] for i in range(8)]


def blake3(data, key_words=B3_IV, flags=0, out_len=32):
    """BLAKE3 of `data` (any length) with the given key words and mode flags, `out_len` <= 64."""
    chunks = [data[i:i + 1024] for i in range(0, len(data), 1024)] or [b""]

    def chunk_output(index, chunk):
        """The last block's compression inputs of a chunk (its root or chaining value)."""
        blocks = [chunk[i:i + 64] for i in range(0, len(chunk), 64)] or [b""]
        cv = list(key_words)
        for n, b in enumerate(blocks):
            f = flags | (CHUNK_START if n == 0 else 0)
            if n == len(blocks) - 1:
                return cv, b.ljust(64, b"\0"), index, len(b), f | CHUNK_END
            cv = _b3_compress(cv, b, index, 64, f)[:8]

    outputs = [chunk_output(i, c) for i, c in enumerate(chunks)]
    # Merge chaining values pairwise, left subtrees holding the largest power of two of chunks.
    def tree(lo, hi):
        if hi - lo == 1:
            return outputs[lo]
        half = 1 << ((hi - lo - 1).bit_length() - 1)
        left, right = tree(lo, lo + half), tree(lo + half, hi)
        lcv = _b3_compress(*left)[:8]
        rcv = _b3_compress(*right)[:8]
        return list(key_words), struct.pack("<16I", *(lcv + rcv)), 0, 64, flags | PARENT

    cv, block, counter, block_len, f = tree(0, len(outputs))
    out = _b3_compress(cv, block, 0, block_len, f | ROOT)
    return struct.pack("<16I", *out)[:out_len]


def blake3_keyed(key, data):
    return blake3(data, list(struct.unpack("<8I", key)), KEYED_HASH)


def blake3_derive_key(context, material):
    context_key = blake3(context.encode(), B3_IV, DERIVE_KEY_CONTEXT)
    return blake3(material, list(struct.unpack("<8I", context_key)), DERIVE_KEY_MATERIAL)


# The BLAKE3 key of an AUTH key (peregrine_proto::auth::BLAKE3_CONTEXT).
AUTH_BLAKE3_CONTEXT = "peregrine 2026-11 auth blake3"
AUTH_MACS = {"hmac-sha256": 0, "blake3": 1}


def seal(key, frames, mac="hmac-sha256"):
    """A datagram of `frames` (already packed at 8-byte offsets) ended by its AUTH frame: the
    tag is the first 16 bytes of the MAC over every byte before the tag (the AUTH frame's flags
    name the MAC: 0 HMAC-SHA256, 1 BLAKE3 keyed with a key derived from the AUTH key)."""
    body = frames + bytes(-len(frames) % 8)
    head = header(32, TYPES["AUTH"], AUTH_MACS[mac], key_id_of(key))
    if mac == "blake3":
        tag = blake3_keyed(blake3_derive_key(AUTH_BLAKE3_CONTEXT, key), body + head)[:16]
    else:
        tag = hmac.new(key, body + head, hashlib.sha256).digest()[:16]
    return body + head + tag


def u64(v):
    """Integers above 2^53 are written as decimal strings so every JSON reader keeps them exact."""
    return str(v) if v >= 2**53 else v


def patch(b, offset, fmt, value):
    b = bytearray(b)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


vectors = []


def valid(name, frame_type, raw, fields, meaning):
    fields = dict(fields)
    fields["frame_length"] = len(raw)
    vectors.append(
        {"name": name, "frame_type": frame_type, "valid": True, "hex": raw.hex(), "fields": fields, "meaning": meaning}
    )


def invalid(name, frame_type, raw, error, meaning, field=None):
    v = {"name": name, "frame_type": frame_type, "valid": False, "hex": raw.hex(), "error": error}
    if field is not None:
        v["error_field"] = field
    v["meaning"] = meaning
    vectors.append(v)


S = 0x12345678

# ---- DATA -------------------------------------------------------------------------------------
d = dict(session_id=S, stream_id=7, sequence=42, message_length=5, flags=["BEGIN", "END"])
valid("data_whole_message", "DATA", data(payload=b"hello", **d), dict(d, payload="hello"),
      "a whole 5-byte message in one frame (BEGIN|END), payload length equals message_length")
frag = bytes(range(16))
d = dict(session_id=S, stream_id=7, sequence=100, message_length=40, flags=["BEGIN"])
valid("data_fragment_begin", "DATA", data(payload=frag, **d), dict(d, payload_hex=frag.hex()),
      "first of three fragments of a 40-byte message: BEGIN only, message_length is the whole message's")
d = dict(session_id=S, stream_id=7, sequence=101, message_length=40, flags=[])
valid("data_fragment_middle", "DATA", data(payload=frag, **d), dict(d, payload_hex=frag.hex()),
      "middle fragment: no BEGIN or END, next sequence number, message_length repeated")
tail = bytes([0xEE] * 8)
d = dict(session_id=S, stream_id=7, sequence=102, message_length=40, flags=["END"])
valid("data_fragment_end", "DATA", data(payload=tail, **d), dict(d, payload_hex=tail.hex()),
      "last fragment: END; the three payloads add up to message_length (16 + 16 + 8)")
d = dict(session_id=S, stream_id=9, sequence=7, message_length=4, flags=["BEGIN", "END", "URGENT", "RETRANSMIT"])
valid("data_urgent_retransmit", "DATA", data(payload=b"retx", **d), dict(d, payload="retx"),
      "a retransmission (answering a NAK) of a frame first sent in urgent mode")
d = dict(session_id=1, stream_id=1, sequence=0, message_length=0, flags=["BEGIN", "END"])
valid("data_empty_message", "DATA", data(payload=b"", **d), dict(d, payload=""),
      "an empty message: 32-byte frame, message_length 0, first sequence number of the stream")
d = dict(session_id=0xFFFFFFFF, stream_id=0xFFFFFFFF, sequence=2**64 - 2, message_length=1, flags=["BEGIN", "END"])
valid("data_extreme_values", "DATA", data(payload=b"\x00", **d), dict(d, sequence=u64(2**64 - 2), payload_hex="00"),
      "largest ids and the largest usable sequence number (2^64-1 is never a sequence)")

# ---- PAD --------------------------------------------------------------------------------------
valid("pad_end_of_lap", "PAD", pad(S, 43, 64), dict(session_id=S, sequence=43),
      "fills the last 64 bytes of a shared-memory ring lap; the next DATA frame will carry sequence 43")
valid("pad_minimal", "PAD", pad(S, 0, 32), dict(session_id=S, sequence=0),
      "the smallest PAD frame: the fixed part alone")

# ---- HEARTBEAT --------------------------------------------------------------------------------
h = dict(session_id=S, stream_id=7, next_sequence=42, oldest_retained=10)
valid("heartbeat_idle_sender", "HEARTBEAT", heartbeat(**h), h,
      "idle sender: next DATA will be 42, frames 10..41 can still be retransmitted")
h = dict(session_id=S, stream_id=7, next_sequence=0, oldest_retained=0)
valid("heartbeat_nothing_sent", "HEARTBEAT", heartbeat(**h), h,
      "a stream that has sent nothing yet (and so retains nothing)")
h = dict(session_id=S, stream_id=3, next_sequence=2**60, oldest_retained=2**60)
valid("heartbeat_retains_nothing", "HEARTBEAT", heartbeat(**h), dict(h, next_sequence=u64(2**60), oldest_retained=u64(2**60)),
      "oldest_retained equals next_sequence: the sender can retransmit nothing")

# ---- NAK --------------------------------------------------------------------------------------
n = dict(session_id=S, stream_id=7, receiver_id=0xDEADBEEF)
rs = [(10, 3), (2**32, 1)]
valid("nak_two_ranges", "NAK", nak(ranges=rs, **n), dict(n, ranges=[{"start": s, "count": c} for s, c in rs]),
      "receiver 0xdeadbeef misses sequences 10, 11, 12 and 4294967296")
rs = [(5, 1)]
valid("nak_single_sequence", "NAK", nak(ranges=rs, **n), dict(n, ranges=[{"start": 5, "count": 1}]),
      "one missing sequence number")
rs = [(2**64 - 2, 1)]
valid("nak_range_at_the_top", "NAK", nak(ranges=rs, **n), dict(n, ranges=[{"start": u64(2**64 - 2), "count": 1}]),
      "a range whose exclusive end is exactly 2^64-1: the largest that does not overflow")

# ---- ADVERTISE --------------------------------------------------------------------------------
a = dict(session_id=S, stream_id=7, ttl_ms=5000, topic="px.eurusd/", uri="udp://10.0.0.1:9")
valid("advertise_udp", "ADVERTISE", advertise(**a), a,
      "topic px.eurusd/ is published by session 0x12345678 stream 7 at a UDP address, valid for 5 s")
a = dict(session_id=2, stream_id=1, ttl_ms=0, topic="marchés/€", uri="shm://orders")
valid("advertise_withdraw_utf8", "ADVERTISE", advertise(**a), a,
      "ttl 0 withdraws the advertisement; topics are UTF-8 (lengths are in bytes, not characters)")

# ---- QUERY ------------------------------------------------------------------------------------
q = dict(session_id=1, query_id=42, pattern_kind="glob", pattern="px.*/**?")
valid("query_glob", "QUERY", query(q["session_id"], q["query_id"], "glob", q["pattern"]), q,
      "context 1 asks (query 42) for topics matching a glob pattern")
q = dict(session_id=1, query_id=43, pattern_kind="exact", pattern="orders")
valid("query_exact", "QUERY", query(1, 43, "exact", "orders"), q, "who publishes exactly the topic 'orders'?")
q = dict(session_id=0xCAFE, query_id=0, pattern_kind="regex", pattern="^px\\.[a-z]{6}$")
valid("query_regex", "QUERY", query(0xCAFE, 0, "regex", q["pattern"]), q,
      "a regular expression that must match the whole topic name")

# ---- BYE --------------------------------------------------------------------------------------
b = dict(session_id=S, stream_id=7, final_next_sequence=256)
valid("bye_after_256_frames", "BYE", bye(**b), b, "stream 7 ends after sequences 0..255")
b = dict(session_id=S, stream_id=8, final_next_sequence=0)
valid("bye_empty_stream", "BYE", bye(**b), b, "a stream that ends without having sent any DATA")

# ---- STATUS -----------------------------------------------------------------------------------
st = dict(session_id=0, stream_id=7, receiver_id=0xDEADBEEF, next_sequence=0, window=0, flags=["JOIN"])
valid("status_join_session_unknown", "STATUS", status(**st), st,
      "receiver 0xdeadbeef joins stream 7 before it knows the publisher's session (0) and before any DATA")
st = dict(session_id=S, stream_id=7, receiver_id=0xDEADBEEF, next_sequence=42, window=65536, flags=[])
valid("status_keepalive", "STATUS", status(**st), st,
      "periodic keepalive: the receiver expects sequence 42 next and can take 65536 bytes beyond it")
st = dict(session_id=S, stream_id=7, receiver_id=0xDEADBEEF, next_sequence=256, window=0, flags=["LEAVE"])
valid("status_leave", "STATUS", status(**st), st,
      "the receiver leaves after sequences 0..255, reporting no window")
st = dict(session_id=0xFFFFFFFF, stream_id=0xFFFFFFFF, receiver_id=0xFFFFFFFF, next_sequence=2**64 - 1,
          window=0xFFFFFFFF, flags=["JOIN"])
valid("status_max_values", "STATUS", status(**st), dict(st, next_sequence=u64(2**64 - 1)),
      "largest ids, window and next_sequence (after sequence 2^64-2); a re-JOIN to a known session")

# ---- invalid ----------------------------------------------------------------------------------
good_data = data(S, 7, 42, 5, ["BEGIN", "END"], b"hello")
good_hb = heartbeat(S, 7, 42, 10)
invalid("empty_buffer", None, b"", "Truncated", "zero bytes: not even a header")
invalid("truncated_header", "DATA", good_data[:10], "Truncated", "10 bytes: shorter than the 16-byte common header")
invalid("truncated_frame", "DATA", good_data[:30], "Truncated", "frame_length says 37 but only 30 bytes arrived")
invalid("bad_magic", "DATA", patch(good_data, 4, "<H", 0x4751), "BadMagic", "magic 0x4751 instead of 0x4750")
invalid("version_2", "DATA", patch(good_data, 6, "<B", 2), "UnsupportedVersion",
        "protocol version 2 is not spoken by version 1 receivers")
invalid("unknown_type_0x7f", None, patch(good_hb, 7, "<B", 0x7F), "UnknownFrameType", "frame type 0x7f is not defined")
invalid("unknown_type_0x00", None, patch(good_hb, 7, "<B", 0x00), "UnknownFrameType", "frame type 0 is not defined")
invalid("frame_length_below_header", "HEARTBEAT", patch(good_hb, 0, "<I", 12), "BadLength",
        "frame_length 12 is smaller than the common header")
invalid("heartbeat_frame_length_below_fixed_part", "HEARTBEAT", patch(good_hb, 0, "<I", 32)[:32], "BadLength",
        "frame_length 32 is smaller than the 40-byte HEARTBEAT")
invalid("data_frame_length_below_fixed_part", "DATA", patch(good_data, 0, "<I", 24)[:24], "BadLength",
        "frame_length 24 is smaller than the 32-byte DATA fixed part")
invalid("header_reserved_nonzero", "HEARTBEAT", patch(good_hb, 10, "<H", 1), "BadField",
        "the common header's reserved field is not zero", field="header.reserved")
invalid("heartbeat_reserved_nonzero", "HEARTBEAT", patch(good_hb, 20, "<I", 0x100), "BadField",
        "the HEARTBEAT's reserved field is not zero", field="heartbeat.reserved")
invalid("heartbeat_with_flags", "HEARTBEAT", patch(good_hb, 8, "<H", FLAGS["URGENT"]), "BadField",
        "no flag is defined for HEARTBEAT", field="heartbeat.flags")
invalid("heartbeat_oldest_above_next", "HEARTBEAT", heartbeat(S, 7, 42, 43), "BadField",
        "oldest_retained 43 above next_sequence 42", field="heartbeat.oldest_retained")
invalid("heartbeat_too_long", "HEARTBEAT", patch(good_hb + bytes(8), 0, "<I", 48), "BadLength",
        "HEARTBEAT has a fixed length of 40 bytes")
invalid("nak_count_zero", "NAK", nak(S, 7, 1, [(10, 0)]), "BadField", "a NAK range asking for 0 sequence numbers",
        field="nak.range.count")
invalid("nak_no_ranges", "NAK", nak(S, 7, 1, []), "BadField", "a NAK with range_count 0", field="nak.range_count")
invalid("nak_range_overflows", "NAK", nak(S, 7, 1, [(2**64 - 1, 1)]), "BadField",
        "start + count overflows a u64", field="nak.range.start")
invalid("nak_range_count_mismatch", "NAK", nak(S, 7, 1, [(10, 1), (20, 1)], range_count=1), "BadLength",
        "range_count 1 but frame_length holds two ranges")
invalid("nak_range_reserved_nonzero", "NAK", patch(nak(S, 7, 1, [(10, 1)]), 44, "<I", 7), "BadField",
        "a range entry's reserved field is not zero", field="nak.range.reserved")
invalid("advertise_invalid_utf8", "ADVERTISE", advertise(S, 7, 5000, b"px\xff\xfe", "udp://10.0.0.1:9"), "BadText",
        "the topic is not valid UTF-8", field="advertise.topic")
invalid("advertise_nul_in_uri", "ADVERTISE", advertise(S, 7, 5000, "px", b"udp://\x0010"), "BadText",
        "the URI contains a NUL byte", field="advertise.uri")
invalid("advertise_empty_topic", "ADVERTISE", advertise(S, 7, 5000, b"", "udp://10.0.0.1:9"), "BadField",
        "topic_len 0: topics are never empty", field="advertise.topic_len")
invalid("advertise_topic_too_long", "ADVERTISE", advertise(S, 7, 5000, "t" * 1025, "u"), "BadField",
        "topic_len 1025 is above MAX_TOPIC_LEN (1024)", field="advertise.topic_len")
invalid("advertise_length_mismatch", "ADVERTISE", patch(advertise(S, 7, 5000, "px", "u") + bytes(5), 0, "<I", 40),
        "BadLength", "frame_length 40 but 32 + topic_len + uri_len is 35")
invalid("query_unknown_pattern_kind", "QUERY", query(1, 1, None, "x", kind_byte=3), "BadField",
        "pattern_kind 3 is not defined", field="query.pattern_kind")
invalid("query_invalid_utf8", "QUERY", query(1, 1, "exact", b"\xc3("), "BadText", "the pattern is not valid UTF-8",
        field="query.pattern")
invalid("data_whole_message_length_mismatch", "DATA", data(S, 7, 42, 6, ["BEGIN", "END"], b"hello"), "BadLength",
        "an unfragmented DATA frame with 5 payload bytes but message_length 6")
invalid("data_fragment_larger_than_message", "DATA", data(S, 7, 42, 4, ["BEGIN"], b"hello"), "BadLength",
        "a fragment carrying more bytes than the whole message")
invalid("data_unknown_flag_bits", "DATA", patch(good_data, 8, "<H", 0x0013), "BadField",
        "flag bit 0x0010 is not defined in version 1", field="data.flags")
invalid("data_message_too_large", "DATA", data(S, 7, 42, 2**30 + 1, ["BEGIN"], b"hello"), "BadField",
        "message_length above MAX_MESSAGE_LEN (2^30)", field="data.message_length")
invalid("pad_with_flags", "PAD", patch(pad(S, 43, 32), 8, "<H", FLAGS["END"]), "BadField",
        "PAD frames carry no flags", field="pad.flags")
invalid("bye_wrong_length", "BYE", patch(bye(S, 7, 1) + bytes(8), 0, "<I", 40), "BadLength",
        "BYE has a fixed length of 32 bytes")
invalid("bye_reserved_nonzero", "BYE", patch(bye(S, 7, 1), 20, "<I", 1), "BadField",
        "the BYE's reserved field is not zero", field="bye.reserved")
good_status = status(S, 7, 0xDEADBEEF, 42, 65536, [])
invalid("status_too_long", "STATUS", patch(good_status + bytes(8), 0, "<I", 48), "BadLength",
        "STATUS has a fixed length of 40 bytes")
invalid("status_undefined_flag", "STATUS", status(S, 7, 0xDEADBEEF, 42, 65536, [], raw_flags=0x0004), "BadField",
        "flag bit 0x0004 is not defined for STATUS", field="status.flags")
invalid("status_join_and_leave", "STATUS", status(S, 7, 0xDEADBEEF, 42, 65536, ["JOIN", "LEAVE"]), "BadField",
        "JOIN and LEAVE together", field="status.flags")
invalid("status_reserved_nonzero", "STATUS", status(S, 7, 0xDEADBEEF, 42, 65536, [], reserved=1), "BadField",
        "the STATUS's reserved field is not zero", field="status.reserved")
invalid("status_receiver_id_zero", "STATUS", status(S, 7, 0, 42, 65536, []), "BadField",
        "receiver_id 0: receivers pick a non-zero id", field="status.receiver_id")
invalid("status_session_zero_keepalive", "STATUS", status(0, 7, 0xDEADBEEF, 42, 65536, []), "BadField",
        "session_id 0 (not known yet) is allowed only with JOIN, not on a keepalive", field="status.session_id")
invalid("status_session_zero_leave", "STATUS", status(0, 7, 0xDEADBEEF, 42, 65536, ["LEAVE"]), "BadField",
        "session_id 0 (not known yet) is allowed only with JOIN, not with LEAVE", field="status.session_id")

# ---- COOKIE (resolverd address proof) ---------------------------------------------------------
C = bytes(range(16))
valid("cookie_none_yet", "COOKIE", cookie(bytes(16)), {"session_id": 0, "cookie_hex": "00" * 16},
      "a resolver client's first datagram to resolverd: it has no cookie yet (all zero), so the daemon answers with one")
valid("cookie_from_the_daemon", "COOKIE", cookie(C), {"session_id": 0, "cookie_hex": C.hex()},
      "the cookie resolverd gave this source address, as the daemon sends it and as the client echoes it")
invalid("cookie_session_nonzero", "COOKIE", cookie(C, session_id=S), "BadField", "a COOKIE's session_id is zero",
        field="cookie.session_id")
invalid("cookie_flags_nonzero", "COOKIE", cookie(C, flags=1), "BadField", "COOKIE defines no flag",
        field="cookie.flags")
invalid("cookie_wrong_length", "COOKIE", patch(cookie(C) + bytes(8), 0, "<I", 40), "BadLength",
        "COOKIE has a fixed length of 32 bytes")

# ---- AUTH (pre-shared-key message authentication) ---------------------------------------------
T = bytes.fromhex("f0e1d2c3b4a5968778695a4b3c2d1e0f")
valid("auth_tag", "AUTH", auth(S, T), {"session_id": S, "tag_hex": T.hex()},
      "the AUTH frame ending a datagram signed with key 0x12345678 (the key id is in the session_id field)")
valid("auth_zero_key_id", "AUTH", auth(0, bytes(16)), {"session_id": 0, "tag_hex": "00" * 16},
      "key id 0 and an all-zero tag are well-formed: only the MAC check, with the key, can reject them")
valid("auth_blake3", "AUTH", auth(S, T, flags=1), {"session_id": S, "flags": ["BLAKE3"], "tag_hex": T.hex()},
      "flag 0x0001: the tag is BLAKE3's (keyed with a key derived from the AUTH key), not HMAC-SHA256's")
invalid("auth_unknown_flag", "AUTH", auth(S, T, flags=2), "BadField", "AUTH defines one flag (0x0001, BLAKE3)",
        field="auth.flags")
invalid("auth_wrong_length", "AUTH", patch(auth(S, T) + bytes(8), 0, "<I", 40), "BadLength",
        "AUTH has a fixed length of 32 bytes")

if "--sealed" in sys.argv:
    # docs/golden/sealed.json: whole datagrams sealed with a known key, for the MAC itself.
    key = bytes(range(32))
    hb = heartbeat(S, 7, 42, 10)
    d = data(S, 7, 42, 5, ["BEGIN", "END"], b"hello")
    cases = [
        ("heartbeat", hb, "one HEARTBEAT (40 bytes) then the AUTH frame"),
        ("data_padded", d, "one 37-byte DATA frame, 3 bytes of zero padding, then the AUTH frame"),
        ("two_frames", d + bytes(-len(d) % 8) + hb, "DATA and HEARTBEAT packed at 8-byte offsets, then AUTH"),
    ]
    # Two known answers of the BLAKE3 specification's test vectors (test_vectors.json: the
    # hash of 0 bytes, and of 1025 bytes of the pattern i % 251, which crosses a chunk) guard
    # the port above.
    assert blake3(b"").hex() == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert blake3(bytes(i % 251 for i in range(1025))).hex().startswith("d00278ae47eb27b3")
    out = {"key_hex": key.hex(), "key_id": key_id_of(key),
           "mac": "the first 16 bytes of the datagram's MAC: HMAC-SHA256, or BLAKE3 keyed with "
                  "derive_key(\"" + AUTH_BLAKE3_CONTEXT + "\", key)",
           "datagrams": [{"name": n if mac == "hmac-sha256" else n + "_blake3", "mac": mac,
                          "frames_hex": f.hex(), "sealed_hex": seal(key, f, mac).hex(), "meaning": m}
                         for mac in AUTH_MACS for n, f, m in cases]}
    print(json.dumps(out, indent=2))
else:
    print(json.dumps(vectors, indent=2, ensure_ascii=False))
