#!/usr/bin/env python3
"""Writes recording.json, the golden vectors of Peregrine's recording format (docs/recording.md).

The encoder below is written from docs/recording.md alone, independently of the Rust crate
(CRC-32 from Python's zlib), so that crates/archive/tests/golden.rs checks two implementations
against each other. recording.json is the reference: edit this script and regenerate only to add
vectors, and review the diff (an existing vector's hex must never change within a format
version). Every invalid vector has exactly one defect and names the error it must be rejected
with.

    python3 docs/golden/make_recording.py > docs/golden/recording.json
"""
import json
import struct
import zlib

MESSAGE, PADDING = 1, 2


def pad8(b):
    return b + bytes(-len(b) % 8)


def record(kind, length, sequence, receive_ns, payload=b"", crc=None, flags=0, reserved=0):
    """A record: crc32 over everything after it (the header's bytes 4 to 32, then the
    payload), the payload, zeros to 8 (a padding record's filler is not part of the vector)."""
    rest = struct.pack("<IBBHIQQ", length, kind, flags, reserved, 0, sequence, receive_ns)
    if crc is None:
        crc = zlib.crc32(rest + payload)
    return pad8(struct.pack("<I", crc) + rest + payload)


def segment_header(segment_len, base, session, stream, created, topic, crc=None, version=1):
    t = topic.encode()
    header_len = 64 + (len(t) + 7) // 8 * 8
    b = b"PGRECORD" + struct.pack("<HHIQQIIQH", version, header_len, 0, segment_len, base,
                                  session, stream, created, len(t))
    b += bytes(14) + pad8(t)
    if crc is None:
        crc = zlib.crc32(b)
    return b[:12] + struct.pack("<I", crc) + b[16:]


def flip(b, i):
    return b[:i] + bytes([b[i] ^ 0x01]) + b[i + 1:]


T = 1_800_000_000_123_456_789
hello = record(MESSAGE, 5, 42, T, b"hello")
seg = segment_header(1 << 20, 3 << 20, 0xDEADBEEF, 7, T, "orders.eu")

vectors = [
    {"name": "message_hello", "what": "record", "hex": hello.hex(), "valid": True,
     "fields": {"kind": "message", "length": 5, "sequence": 42, "receive_ns": T,
                "payload_hex": b"hello".hex()},
     "meaning": "a 5-byte message, sequence 42, zeros to 8 after it"},
    {"name": "message_empty", "what": "record", "hex": record(MESSAGE, 0, 0, 0).hex(), "valid": True,
     "fields": {"kind": "message", "length": 0, "sequence": 0, "receive_ns": 0, "payload_hex": ""},
     "meaning": "an empty message at sequence 0: the header alone"},
    {"name": "message_eight", "what": "record",
     "hex": record(MESSAGE, 8, 2**64 - 1, 1, bytes(range(8))).hex(), "valid": True,
     "fields": {"kind": "message", "length": 8, "sequence": 2**64 - 1, "receive_ns": 1,
                "payload_hex": bytes(range(8)).hex()},
     "meaning": "an 8-byte message needs no zeros after it; the largest sequence"},
    {"name": "padding_32", "what": "record", "hex": record(PADDING, 32, 0, 0).hex(), "valid": True,
     "fields": {"kind": "padding", "length": 32, "sequence": 0, "receive_ns": 0, "payload_hex": ""},
     "meaning": "padding: 32 more bytes of the segment hold nothing (its checksum covers the header)"},
    {"name": "message_bad_crc", "what": "record", "hex": flip(hello, 32).hex(), "valid": False,
     "error": "checksum", "meaning": "the payload's first byte flipped"},
    {"name": "message_bad_kind", "what": "record",
     "hex": record(3, 5, 42, T, b"hello").hex(), "valid": False, "error": "record.kind",
     "meaning": "kind 3 is not defined (the checksum is right)"},
    {"name": "message_flags", "what": "record",
     "hex": record(MESSAGE, 5, 42, T, b"hello", flags=1).hex(), "valid": False,
     "error": "record.flags", "meaning": "no flag is defined"},
    {"name": "padding_sequence", "what": "record",
     "hex": record(PADDING, 0, 5, 0).hex(), "valid": False, "error": "record.sequence",
     "meaning": "padding carries no sequence"},
    {"name": "message_truncated", "what": "record", "hex": hello[:36].hex(), "valid": False,
     "error": "truncated", "meaning": "the payload cut short"},
    {"name": "segment_orders", "what": "segment_header", "hex": seg.hex(), "valid": True,
     "fields": {"segment_len": 1 << 20, "base_position": 3 << 20, "session_id": 0xDEADBEEF,
                "stream_id": 7, "created_ns": T, "topic": "orders.eu", "header_len": 80},
     "meaning": "a header with a 9-byte topic, zeros to 8: the first record at 80"},
    {"name": "segment_bad_magic", "what": "segment_header", "hex": flip(seg, 0).hex(),
     "valid": False, "error": "magic", "meaning": "not a segment file"},
    {"name": "segment_version_2", "what": "segment_header",
     "hex": segment_header(1 << 20, 0, 1, 1, T, "x", version=2).hex(), "valid": False,
     "error": "version", "meaning": "a version this reader does not know"},
    {"name": "segment_bad_crc", "what": "segment_header", "hex": flip(seg, 70).hex(),
     "valid": False, "error": "checksum", "meaning": "a byte of the topic flipped"},
]

def request(topic, kind, position, version=1, reserved=0):
    t = topic.encode()
    return b"PGRQ" + struct.pack("<HBBQHHI", version, kind, reserved, position, len(t), 0, 0) + t


vectors += [
    {"name": "request_start", "what": "request", "hex": request("orders.eu", 0, 0).hex(),
     "valid": True, "fields": {"topic": "orders.eu", "from": "start", "position": 0},
     "meaning": "every message of topic orders.eu"},
    {"name": "request_sequence", "what": "request", "hex": request("t", 1, 1200).hex(),
     "valid": True, "fields": {"topic": "t", "from": "sequence", "position": 1200},
     "meaning": "from sequence 1200 of each recording"},
    {"name": "request_time", "what": "request", "hex": request("t", 2, T).hex(),
     "valid": True, "fields": {"topic": "t", "from": "time", "position": T},
     "meaning": "from the first message received at T or later"},
    {"name": "request_bad_from", "what": "request", "hex": request("t", 3, 0).hex(),
     "valid": False, "error": "request.from", "meaning": "from 3 is not defined"},
    {"name": "request_no_topic", "what": "request", "hex": request("", 0, 0).hex(),
     "valid": False, "error": "request.topic_len", "meaning": "a topic is 1 to 1024 bytes"},
    {"name": "request_http", "what": "request", "hex": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".hex(),
     "valid": False, "error": "magic", "meaning": "not a replay request"},
    {"name": "end_42", "what": "end", "hex": (b"PGRZ" + struct.pack("<IQ", 0, 42)).hex(),
     "valid": True, "fields": {"messages": 42}, "meaning": "the server sent 42 messages"},
    {"name": "error_text", "what": "error",
     "hex": (b"PGRX" + struct.pack("<HH", 11, 0) + b"no recordin").hex(), "valid": True,
     "fields": {"length": 11}, "meaning": "an error frame of 11 bytes of text"},
]


def positions(op, name, topic, created, entries, crc=None, version=1):
    """A durable subscriber's positions frame: crc32 of the whole frame with its crc field
    read as zeros."""
    n, t = name.encode(), topic.encode()
    body = pad8(n + t)
    for session, nxt in entries:
        body += struct.pack("<IIQ", session, 0, nxt)
    head = b"PGRP" + struct.pack("<HBBQHHI", version, op, 0, created, len(n), len(t), len(entries))
    b = head + struct.pack("<II", 0, 0) + body
    if crc is None:
        crc = zlib.crc32(b)
    return b[:24] + struct.pack("<I", crc) + b[28:]


kept = positions(2, "risk-1", "orders.eu", T, [(0x0A0B0C0D, 42), (7, 2**64 - 1)])
vectors += [
    {"name": "positions_kept", "what": "positions", "hex": kept.hex(), "valid": True,
     "fields": {"op": "positions", "name": "risk-1", "topic": "orders.eu", "created_ns": T,
                "entries": [[0x0A0B0C0D, 42], [7, 2**64 - 1]]},
     "meaning": "durable risk-1 of orders.eu: session 0a0b0c0d from sequence 42, session 7 from the last"},
    {"name": "positions_load", "what": "positions",
     "hex": positions(1, "risk-1", "orders.eu", 0, []).hex(), "valid": True,
     "fields": {"op": "load", "name": "risk-1", "topic": "orders.eu", "created_ns": 0,
                "entries": []},
     "meaning": "where does durable risk-1 of orders.eu resume?"},
    {"name": "positions_save_new", "what": "positions",
     "hex": positions(3, "n", "t", T, []).hex(), "valid": True,
     "fields": {"op": "save", "name": "n", "topic": "t", "created_ns": T, "entries": []},
     "meaning": "keep the new name n of topic t (no stream yet)"},
    {"name": "positions_bad_crc", "what": "positions", "hex": flip(kept, 41).hex(),
     "valid": False, "error": "checksum", "meaning": "a byte of the topic flipped"},
    {"name": "positions_bad_op", "what": "positions",
     "hex": positions(4, "n", "t", 0, []).hex(), "valid": False, "error": "positions.op",
     "meaning": "op 4 is not defined"},
    {"name": "positions_bad_name", "what": "positions",
     "hex": positions(2, "a b", "t", 0, []).hex(), "valid": False, "error": "positions.name",
     "meaning": "a space is not allowed in a durable name"},
    {"name": "positions_same_session", "what": "positions",
     "hex": positions(2, "n", "t", 0, [(1, 5), (1, 6)]).hex(), "valid": False,
     "error": "positions.entry.session", "meaning": "a session given twice"},
    {"name": "positions_load_with_entries", "what": "positions",
     "hex": positions(1, "n", "t", 0, [(1, 5)]).hex(), "valid": False,
     "error": "positions.count", "meaning": "a load carries no positions"},
]


def index_entry(sequence, receive_ns, offset, reserved=0, crc=None):
    """A segment index entry: crc32 of its first 24 bytes."""
    b = struct.pack("<QQQ", sequence, receive_ns, offset)
    if crc is None:
        crc = zlib.crc32(b)
    return b + struct.pack("<II", crc, reserved)


entry = index_entry(42, T, 65_616)
vectors += [
    {"name": "index_entry", "what": "index_entry", "hex": entry.hex(), "valid": True,
     "fields": {"sequence": 42, "receive_ns": T, "offset": 65_616},
     "meaning": "message 42, received at T, starts 65,616 bytes into its segment"},
    {"name": "index_entry_bad_crc", "what": "index_entry", "hex": flip(entry, 17).hex(),
     "valid": False, "error": "checksum", "meaning": "a byte of the offset flipped"},
    {"name": "index_entry_reserved", "what": "index_entry",
     "hex": index_entry(42, T, 65_616, reserved=1).hex(), "valid": False,
     "error": "index.reserved", "meaning": "the reserved word is not zero"},
]
print(json.dumps(vectors, indent=1))
