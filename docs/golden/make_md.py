#!/usr/bin/env python3
"""Writes md.json, the golden vectors of the Peregrine market data protocol (docs/market-data.md).

The encoder below is written from docs/market-data.md alone, independently of the Rust crate, so
that crates/md/tests/golden.rs checks two implementations against each other. md.json is the
reference: edit this script and regenerate only to add vectors, and review the diff (an existing
vector's hex must never change within a protocol version). Every invalid vector has exactly one
defect and names the error it must be rejected with.

    python3 docs/golden/make_md.py > docs/golden/md.json
"""
import json
import struct

TYPES = {
    "REFRESH": 0x01, "UPDATE": 0x02, "STATUS": 0x03, "LOGIN": 0x10, "LOGIN_RESPONSE": 0x11,
    "OPEN": 0x12, "CLOSE": 0x13, "CONFLATED": 0x14, "PING": 0x15, "PONG": 0x16,
    "PAUSE": 0x17, "RESUME": 0x18, "DIRECTORY": 0x19, "DICTIONARY_REQUEST": 0x1A,
    "DICTIONARY": 0x1B, "POST": 0x1C, "ACK": 0x1D, "IMAGE_REQUEST": 0x20,
}
ACK_CODES = {"accepted": 0, "refused": 1, "not-entitled": 2, "service-down": 3, "unknown-service": 4,
             "busy": 5, "timeout": 6, "invalid": 7}
REFRESH_FLAGS = {"SOLICITED": 0x01, "CONFLATED": 0x02, "SNAPSHOT": 0x04, "VIEW": 0x08}
OPEN_FLAGS = {"SNAPSHOT": 0x01, "VIEW": 0x02}
STATES = {"ok": 0, "stale": 1, "closed": 2, "not-entitled": 3, "not-found": 4, "rejected": 5}
RESULTS = {"accepted": 0, "denied": 1, "unsupported-version": 2}
KINDS = {"int": 1, "price": 2, "time": 3, "enum": 4, "string": 5}


def header(length, type_name, flags=0, item_id=0):
    return struct.pack("<HBBI", length, TYPES[type_name], flags, item_id)


def field(f):
    """One field of a field list from its JSON form."""
    kind = f["kind"]
    raw_kind = f.get("raw_kind", KINDS[kind])
    if kind == "int":
        return struct.pack("<HBBq", f["fid"], raw_kind, f.get("aux", 0), int(f["value"]))
    if kind == "price":
        return struct.pack("<HBbq", f["fid"], raw_kind, f["exponent"], int(f["mantissa"]))
    if kind == "time":
        return struct.pack("<HBBQ", f["fid"], raw_kind, 0, int(f["value_ns"]))
    if kind == "enum":
        return struct.pack("<HBBH", f["fid"], raw_kind, 0, f["value"])
    value = f["value_bytes"] if "value_bytes" in f else f["value"].encode()
    return struct.pack("<HBB", f["fid"], raw_kind, len(value)) + value


def fields_bytes(fields):
    return b"".join(field(f) for f in fields)


def update(item_id, timestamp_ns, item_seq, fields, flags=0, reserved=0, count=None, extra=b""):
    body = fields_bytes(fields) + extra
    n = len(fields) if count is None else count
    fixed = struct.pack("<QIHH", timestamp_ns, item_seq, n, reserved)
    return header(24 + len(body), "UPDATE", flags, item_id) + fixed + body


def pad8(n):
    return (8 - n % 8) % 8


def refresh(item_id, flags, timestamp_ns, item_seq, service, name, fields, padding=None, service_len=None):
    s = service.encode() if isinstance(service, str) else service
    n = name.encode() if isinstance(name, str) else name
    names = s + n
    pad = bytes(pad8(24 + len(names))) if padding is None else padding
    body = fields_bytes(fields)
    sl = len(s) if service_len is None else service_len
    fixed = struct.pack("<QIHBB", timestamp_ns, item_seq, len(fields), sl, len(n))
    length = 24 + len(names) + len(pad) + len(body)
    return header(length, "REFRESH", flag_bits(flags, REFRESH_FLAGS), item_id) + fixed + names + pad + body


def flag_bits(names, table):
    bits = 0
    for n in names:
        bits |= table[n] if isinstance(n, str) else n
    return bits


def status(item_id, request_id, state, service, name, text, raw_state=None, length_delta=0):
    s, n = service.encode(), name.encode()
    t = text if isinstance(text, bytes) else text.encode()
    st = STATES[state] if raw_state is None else raw_state
    fixed = struct.pack("<IBBBB", request_id, st, len(s), len(n), len(t))
    return header(16 + len(s) + len(n) + len(t) + length_delta, "STATUS", 0, item_id) + fixed + s + n + t


def login(user, token, magic=b"PGMD", version=1, item_id=0, ping_interval_ms=None):
    """Version 1: user and token at 16. Version 2: a u32 ping interval at 16, user and token at 20
    (ping_interval_ms=None writes the version 1 layout whatever the version says)."""
    u = user.encode()
    ping = b"" if ping_interval_ms is None else struct.pack("<I", ping_interval_ms)
    return header(16 + len(ping) + len(u) + len(token), "LOGIN", 0, item_id) + magic + struct.pack(
        "<HBB", version, len(u), len(token)) + ping + u + token


def login_response(result, text, raw_result=None, ping_interval_ms=None):
    """With ping_interval_ms: flag LIVENESS (0x01) and the u32 interval before the text."""
    t = text.encode()
    r = RESULTS[result] if raw_result is None else raw_result
    if ping_interval_ms is None:
        return header(10 + len(t), "LOGIN_RESPONSE") + struct.pack("<BB", r, len(t)) + t
    return header(14 + len(t), "LOGIN_RESPONSE", 0x01) + struct.pack("<BBI", r, len(t), ping_interval_ms) + t


def pause(type_name, request_id, flags=0, length=12):
    return header(length, type_name, flags) + struct.pack("<I", request_id) + bytes(length - 12)


def directory(services, complete=True, count=None, reserved=0):
    """services: (name, up, open) each; an entry is u8 state, u8 flags (0x01 OPEN), u8 name_len, name."""
    body = b"".join(struct.pack("<BBB", int(up), int(op), len(n.encode())) + n.encode() for n, up, op in services)
    n = len(services) if count is None else count
    return header(12 + len(body), "DIRECTORY", 0x01 if complete else 0) + struct.pack("<HH", n, reserved) + body


def ping(type_name, payload, item_id=0, length=16):
    return header(length, type_name, 0, item_id) + struct.pack("<Q", payload) + bytes(length - 16)


def open_(request_id, service, patterns, reserved=0, count=None, extra=b"", flags=(), view=None):
    """With `view` (a list of field ids): flag VIEW, then u16 count and the ids after the patterns."""
    s = service.encode()
    if view is not None:
        flags = list(flags) + ["VIEW"]
        extra = struct.pack("<H", len(view)) + b"".join(struct.pack("<H", f) for f in view) + extra
    body = b"".join(struct.pack("<B", len(p)) + p for p in (p.encode() if isinstance(p, str) else p for p in patterns))
    n = len(patterns) if count is None else count
    fixed = struct.pack("<IBBH", request_id, len(s), reserved, n)
    return header(16 + len(s) + len(body) + len(extra), "OPEN", flag_bits(flags, OPEN_FLAGS)) + fixed + s + body + extra


def close(request_id, length=12):
    return header(length, "CLOSE") + struct.pack("<I", request_id) + bytes(length - 12)


def conflated(items, updates_dropped, item_id=0):
    return header(16, "CONFLATED", 0, item_id) + struct.pack("<II", items, updates_dropped)


def image_request(item_id, request_id, flags=0):
    return header(12, "IMAGE_REQUEST", flags, item_id) + struct.pack("<I", request_id)


def dictionary_request(flags=0, length=8):
    return header(length, "DICTIONARY_REQUEST", flags) + bytes(length - 8)


def dictionary(entries, part=0, complete=True, count=None):
    """entries: (fid, type name, name, {code: label}) each: u16 fid, u8 type, u8 name_len, name,
    u16 value_count, then per value u16 code, u8 label_len, label."""
    body = b""
    for fid, kind, name, values in entries:
        n = name.encode()
        body += struct.pack("<HBB", fid, KINDS[kind] if isinstance(kind, str) else kind, len(n)) + n
        body += struct.pack("<H", len(values))
        for code, label in values.items():
            lb = label.encode()
            body += struct.pack("<HB", code, len(lb)) + lb
    n = len(entries) if count is None else count
    return header(12 + len(body), "DICTIONARY", 0x01 if complete else 0) + struct.pack("<HH", part, n) + body


def post(origin, post_id, service, name, user, fields, refresh=False, reserved=0, padding=None):
    """u64 origin, u32 post_id, u16 field_count, u8 service_len, u8 name_len, u8 user_len, 3 reserved,
    the names, zero padding to 8 from the message's start, the fields."""
    s, n, u = service.encode(), name.encode(), user.encode()
    fixed = struct.pack("<QIHBBB", origin, post_id, len(fields), len(s), len(n), len(u)) + bytes([reserved, 0, 0])
    names = s + n + u
    pad = bytes(pad8(28 + len(names))) if padding is None else padding
    body = fixed + names + pad + fields_bytes(fields)
    return header(8 + len(body), "POST", 0x01 if refresh else 0) + body


def ack(origin, post_id, code, text, raw_code=None, length_delta=0):
    t = text.encode()
    c = ACK_CODES[code] if raw_code is None else raw_code
    return header(22 + len(t) + length_delta, "ACK") + struct.pack("<QIBB", origin, post_id, c, len(t)) + t


def big(v):
    """Integers beyond 2^53 in magnitude are written as decimal strings so every JSON reader keeps them exact."""
    return str(v) if abs(v) >= 2**53 else v


vectors = []


def valid(name, type_name, raw, fields, meaning):
    fields = dict(fields)
    fields["length"] = len(raw)
    vectors.append({"name": name, "type": type_name, "valid": True, "hex": raw.hex(), "fields": fields, "meaning": meaning})


def invalid(name, type_name, raw, error, meaning, field=None):
    v = {"name": name, "type": type_name, "valid": False, "hex": raw.hex(), "error": error}
    if field is not None:
        v["error_field"] = field
    v["meaning"] = meaning
    vectors.append(v)


def patch(raw, offset, fmt, value):
    b = bytearray(raw)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


BID = {"fid": 22, "kind": "price", "mantissa": 18921, "exponent": -2}
ASK = {"fid": 25, "kind": "price", "mantissa": 18922, "exponent": -2}
BIDSIZE = {"fid": 30, "kind": "int", "value": 300}
ASKSIZE = {"fid": 31, "kind": "int", "value": 500}
QUOTIM = {"fid": 1025, "kind": "time", "value_ns": big(1_714_570_200_123_456_789)}
L1 = [BID, ASK, BIDSIZE, ASKSIZE]
TS = 1_700_000_000_000_000_000

# ---- UPDATE -----------------------------------------------------------------------------------
u = dict(item_id=7, timestamp_ns=TS, item_seq=42, fields=L1)
valid("update_level1_four_fields", "UPDATE", update(**u), dict(u, timestamp_ns=big(TS)),
      "a level-1 update: BID, ASK, BIDSIZE, ASKSIZE, 24 + 4 x 12 = 72 bytes")
u = dict(item_id=7, timestamp_ns=TS, item_seq=43, fields=L1 + [QUOTIM])
valid("update_level1_with_quote_time", "UPDATE", update(**u), dict(u, timestamp_ns=big(TS)),
      "the same plus QUOTIM (time): 84 bytes")
every = [
    {"fid": 1, "kind": "int", "value": big(-2**63)},
    {"fid": 2, "kind": "price", "mantissa": big(2**63 - 1), "exponent": 6},
    {"fid": 4, "kind": "price", "mantissa": -5, "exponent": -12},
    {"fid": 5, "kind": "time", "value_ns": big(2**64 - 1)},
    {"fid": 15, "kind": "enum", "value": 840},
    {"fid": 3, "kind": "string", "value": "APPLE INC \u20ac"},
    {"fid": 32767, "kind": "string", "value": ""},
]
u = dict(item_id=0xFFFFFFFF, timestamp_ns=0, item_seq=0xFFFFFFFF, fields=every)
valid("update_every_kind_and_extremes", "UPDATE", update(**u), u,
      "every kind at its limits: i64 min, exponents 6 and -12, u64 max time, an enum, a UTF-8 string, an empty string with the largest fid")
u = dict(item_id=1, timestamp_ns=5, item_seq=1, fields=[])
valid("update_no_fields", "UPDATE", update(**u), u, "an update with no fields: the fixed part alone")

invalid("update_length_below_header", None, patch(update(**u), 0, "<H", 7), "BadLength",
        "length 7 is shorter than the 8-byte header")
invalid("update_truncated", "UPDATE", update(7, TS, 42, L1)[:60], "Truncated",
        "length says 72 bytes, 60 are there")
invalid("unknown_type_0x7f", None, bytes([8, 0, 0x7F, 0, 0, 0, 0, 0]), "UnknownType",
        "type 0x7f is not defined in version 1")
invalid("update_length_below_fixed_part", "UPDATE", header(16, "UPDATE", 0, 7) + bytes(8), "BadLength",
        "an UPDATE of 16 bytes cannot hold its 24-byte fixed part")
invalid("update_flags_nonzero", "UPDATE", update(7, TS, 42, L1, flags=1), "BadField",
        "UPDATE defines no flag", "update.flags")
invalid("update_item_id_zero", "UPDATE", update(0, TS, 42, L1), "BadField",
        "an UPDATE is about an item: item_id 0 is refused", "update.item_id")
invalid("update_reserved_nonzero", "UPDATE", update(7, TS, 42, L1, reserved=1), "BadField",
        "the reserved u16 at 22 must be zero", "update.reserved")
invalid("update_fid_repeated", "UPDATE", update(7, TS, 42, [BID, ASK, dict(BIDSIZE, fid=22)]), "BadField",
        "BID twice in one field list", "field.fid_repeated")
invalid("update_fid_zero", "UPDATE", update(7, TS, 42, [dict(BIDSIZE, fid=0)]), "BadField",
        "field id 0 is not an id", "field.fid")
invalid("update_fid_32768", "UPDATE", update(7, TS, 42, [dict(BIDSIZE, fid=32768)]), "BadField",
        "field ids stop at 32767 (the high bit is reserved)", "field.fid")
invalid("update_unknown_kind", "UPDATE", update(7, TS, 42, [dict(BIDSIZE, raw_kind=6)]), "BadField",
        "kind 6 is not defined", "field.kind")
invalid("update_int_aux_nonzero", "UPDATE", update(7, TS, 42, [dict(BIDSIZE, aux=1)]), "BadField",
        "an int's aux must be zero", "field.aux")
invalid("update_price_exponent_7", "UPDATE", update(7, TS, 42, [dict(BID, exponent=7)]), "BadField",
        "a price's exponent is -12 to 6", "field.exponent")
invalid("update_price_exponent_minus_13", "UPDATE", update(7, TS, 42, [dict(BID, exponent=-13)]), "BadField",
        "a price's exponent is -12 to 6", "field.exponent")
invalid("update_string_invalid_utf8", "UPDATE",
        update(7, TS, 42, [{"fid": 3, "kind": "string", "value_bytes": b"\xff\xfe"}]), "BadText",
        "a string field must be UTF-8", "field.string")
invalid("update_field_runs_past_the_end", "UPDATE", update(7, TS, 42, [BID], count=2), "BadLength",
        "two fields announced, one present: the second runs past the end")
invalid("update_bytes_after_the_last_field", "UPDATE", update(7, TS, 42, [BID], extra=b"\x00\x00"), "BadLength",
        "two bytes follow the last field")

# ---- REFRESH ----------------------------------------------------------------------------------
r = dict(item_id=9, flags=["SOLICITED"], timestamp_ns=TS, item_seq=1, service="FEED1", name="AAPL.O",
         fields=[BID, {"fid": 15, "kind": "enum", "value": 840}, {"fid": 3, "kind": "string", "value": "APPLE INC"}])
valid("refresh_solicited", "REFRESH", refresh(**r), dict(r, timestamp_ns=big(TS)),
      "an image answering a request: names padded from 35 to 40 bytes, then three fields")
r = dict(item_id=1, flags=["CONFLATED"], timestamp_ns=3, item_seq=77, service="ELEKTRON", name="EUR=", fields=L1)
valid("refresh_conflated", "REFRESH", refresh(**r), r,
      "an image sent after a conflation: 24 + 8 + 4 = 36, padded to 40")
r = dict(item_id=2, flags=[], timestamp_ns=0, item_seq=0, service="A", name="B" * 7, fields=[])
valid("refresh_no_padding_no_fields", "REFRESH", refresh(**r), r,
      "names of 1 + 7 bytes end on a multiple of 8: no padding; an empty image")
r = dict(item_id=3, flags=["SOLICITED", "CONFLATED"], timestamp_ns=1, item_seq=2, service="S" * 64, name="N" * 128,
         fields=[BIDSIZE])
valid("refresh_longest_names", "REFRESH", refresh(**r), r,
      "the longest service (64) and item name (128), both flags")

base = dict(item_id=9, flags=["SOLICITED"], timestamp_ns=TS, item_seq=1, service="FEED1", name="AAPL.O", fields=[BID])
valid("refresh_snapshot", "REFRESH", refresh(**dict(base, flags=["SOLICITED", "SNAPSHOT"])),
      dict(base, flags=["SOLICITED", "SNAPSHOT"]), "an image answering a snapshot request (version 2)")
valid("refresh_view", "REFRESH", refresh(**dict(base, flags=["SOLICITED", "VIEW"])),
      dict(base, flags=["SOLICITED", "VIEW"]), "an image cut to the client's view (version 2)")
invalid("refresh_unknown_flag", "REFRESH", refresh(**dict(base, flags=[0x10])), "BadField",
        "REFRESH defines flags 0x01, 0x02, 0x04 and 0x08 only", "refresh.flags")
invalid("refresh_item_id_zero", "REFRESH", refresh(**dict(base, item_id=0)), "BadField",
        "a REFRESH is about an item", "refresh.item_id")
invalid("refresh_service_len_zero", "REFRESH", refresh(**dict(base, service="", name="FEED1AAPL.O")), "BadField",
        "the service is 1 to 64 bytes", "refresh.service_len")
invalid("refresh_service_len_65", "REFRESH", refresh(**dict(base, service="S" * 65)), "BadField",
        "the service is 1 to 64 bytes", "refresh.service_len")
invalid("refresh_name_with_a_star", "REFRESH", refresh(**dict(base, name="AAPL.*")), "BadText",
        "an item name holds no '*' (globs are for OPEN)", "refresh.name")
invalid("refresh_service_with_a_space", "REFRESH", refresh(**dict(base, service="FEED 1")), "BadText",
        "a service is A-Z a-z 0-9 . _ -", "refresh.service")
invalid("refresh_padding_nonzero", "REFRESH", refresh(**dict(base, padding=b"\x00\x01\x00\x00\x00")), "BadField",
        "the padding after the names must be zero", "refresh.padding")
invalid("refresh_names_run_past_the_end", "REFRESH", patch(refresh(**dict(base, fields=[])), 0, "<H", 35), "BadLength",
        "length 35 ends inside the padding after the names")

# ---- STATUS -----------------------------------------------------------------------------------
s = dict(item_id=0, request_id=5, state="not-entitled", service="FEED1", name="MSFT.O", text="not yours")
valid("status_not_entitled", "STATUS", status(**s), s, "the answer to an OPEN of a name the user may not see")
s = dict(item_id=12, request_id=0, state="stale", service="FEED1", name="AAA.O", text="backbone loss: waiting for a fresh image")
valid("status_stale", "STATUS", status(**s), s, "an item went stale, unsolicited")
s = dict(item_id=0, request_id=0, state="rejected", service="", name="", text="malformed message")
valid("status_rejected_connection", "STATUS", status(**s), s,
      "the connection's last message was refused (request 0, no item, no names); the connection closes")
s = dict(item_id=0, request_id=3, state="not-found", service="FEED9", name="A*", text="")
valid("status_not_found_glob", "STATUS", status(**s), s, "a glob echoed back in an answer, empty text")

invalid("status_state_6", "STATUS", status(0, 1, "ok", "", "", "", raw_state=6), "BadField",
        "states are 0 to 5", "status.state")
invalid("status_length_mismatch", "STATUS", status(0, 1, "ok", "F", "N", "t", length_delta=1) + b"x", "BadLength",
        "a trailing byte the lengths do not account for")
invalid("status_text_invalid_utf8", "STATUS", status(0, 1, "ok", "", "", b"\xc3"), "BadText",
        "the text must be UTF-8", "status.text")
invalid("status_service_with_a_star", "STATUS", status(0, 1, "ok", "FEED*", "", ""), "BadText",
        "a service holds no '*'", "status.service")
invalid("status_service_len_65", "STATUS", status(0, 1, "ok", "S" * 65, "", ""), "BadField",
        "a service is at most 64 bytes", "status.service_len")

# ---- LOGIN ------------------------------------------------------------------------------------
valid("login_alice", "LOGIN", login("alice", b"secret"), dict(version=1, user="alice", token_hex=b"secret".hex(), ping_interval_ms=0),
      "user alice, token 'secret' (its SHA-256 is what the users file holds)")
token = bytes(range(255))
valid("login_binary_token", "LOGIN", login("svc.feed-1_A", token),
      dict(version=1, user="svc.feed-1_A", token_hex=token.hex(), ping_interval_ms=0),
      "a 255-byte binary token; the token is opaque bytes")
valid("login_v2_ping_5s", "LOGIN", login("alice", b"secret", version=2, ping_interval_ms=5000),
      dict(version=2, user="alice", token_hex=b"secret".hex(), ping_interval_ms=5000),
      "version 2: the client asks for a 5 s ping interval")
valid("login_v2_default_interval", "LOGIN", login("bob", b"pw", version=2, ping_interval_ms=0),
      dict(version=2, user="bob", token_hex=b"pw".hex(), ping_interval_ms=0),
      "version 2 asking for the distributor's default interval")
invalid("login_v2_in_the_v1_layout", "LOGIN", login("alice", b"secret", version=2), "BadLength",
        "version 2 has 4 more bytes (the interval) before the user")
invalid("login_bad_magic", "LOGIN", login("alice", b"secret", magic=b"XGMD"), "BadMagic",
        "not 'PGMD': not a Peregrine market data client")
invalid("login_version_3", "LOGIN", login("alice", b"secret", version=3, ping_interval_ms=0), "UnsupportedVersion",
        "a client of version 3: the distributor answers 'unsupported version'")
invalid("login_version_0", "LOGIN", login("alice", b"secret", version=0), "UnsupportedVersion",
        "there is no version 0")
invalid("login_token_len_zero", "LOGIN", login("alice", b""), "BadField",
        "a token is 1 to 255 bytes", "login.token_len")
invalid("login_user_with_a_space", "LOGIN", login("al ice", b"secret"), "BadText",
        "a user is A-Z a-z 0-9 . _ -", "login.user")
invalid("login_item_id_nonzero", "LOGIN", login("alice", b"secret", item_id=1), "BadField",
        "LOGIN is about no item", "login.item_id")

# ---- LOGIN_RESPONSE ---------------------------------------------------------------------------
valid("login_response_accepted", "LOGIN_RESPONSE", login_response("accepted", ""),
      dict(result="accepted", text="", ping_interval_ms=None), "accepted, no text")
valid("login_response_denied", "LOGIN_RESPONSE", login_response("denied", "unknown user or wrong token"),
      dict(result="denied", text="unknown user or wrong token", ping_interval_ms=None), "refused; the connection closes")
valid("login_response_unsupported_version", "LOGIN_RESPONSE",
      login_response("unsupported-version", "this distributor speaks version 1"),
      dict(result="unsupported-version", text="this distributor speaks version 1", ping_interval_ms=None),
      "the client's version is not spoken")
valid("login_response_liveness", "LOGIN_RESPONSE", login_response("accepted", "", ping_interval_ms=5000),
      dict(result="accepted", text="", ping_interval_ms=5000), "a version 2 login accepted; both sides ping every 5 s")
invalid("login_response_liveness_on_a_refusal", "LOGIN_RESPONSE",
        login_response("denied", "no", ping_interval_ms=5000), "BadField",
        "only an acceptance carries an interval", "login_response.flags")
invalid("login_response_liveness_interval_zero", "LOGIN_RESPONSE",
        login_response("accepted", "", ping_interval_ms=0), "BadField",
        "an agreed interval is never 0", "login_response.ping_interval_ms")
invalid("login_response_result_3", "LOGIN_RESPONSE", login_response("accepted", "", raw_result=3), "BadField",
        "results are 0 to 2", "login_response.result")

# ---- OPEN -------------------------------------------------------------------------------------
o = dict(request_id=7, service="FEED1", patterns=["MSFT.O", "AAA.*"])
valid("open_name_and_glob", "OPEN", open_(**o), dict(o, flags=[], view=None), "one exact name and one glob in one request")
o = dict(request_id=0xFFFFFFFF, service="ELEKTRON", patterns=["EUR="])
valid("open_one_name", "OPEN", open_(**o), dict(o, flags=[], view=None), "the largest request id, one name")
o = dict(request_id=9, service="FEED1", patterns=["AAA.*"], flags=["SNAPSHOT"])
valid("open_snapshot", "OPEN", open_(**o), dict(o, view=None), "the images only: the request is closed once answered (version 2)")
o = dict(request_id=10, service="FEED1", patterns=["AAA.O", "MSFT.*"], view=[22, 25])
valid("open_view_bid_ask", "OPEN", open_(**o), dict(o, flags=[]), "BID and ASK only (version 2; VIEW is set by the view)")
o = dict(request_id=11, service="FEED1", patterns=["AAA.O"], flags=["SNAPSHOT"], view=[22])
valid("open_snapshot_view", "OPEN", open_(**o), o, "a snapshot of BID only")
invalid("open_view_count_zero", "OPEN", open_(1, "FEED1", ["A"], view=[]), "BadField",
        "a view lists 1 to 1024 fields", "open.view_count")
invalid("open_view_fid_twice", "OPEN", open_(1, "FEED1", ["A"], view=[22, 22]), "BadField",
        "a field is listed once", "open.view_fid")
invalid("open_view_fid_zero", "OPEN", open_(1, "FEED1", ["A"], view=[0]), "BadField",
        "field ids are 1 to 32767", "open.view_fid")
invalid("open_view_short", "OPEN", open_(1, "FEED1", ["A"], view=[22], extra=b"\x00"), "BadLength",
        "a byte after the view's ids")
invalid("open_flag_0x04", "OPEN", open_(1, "FEED1", ["A"], flags=[0x04]), "BadField",
        "OPEN defines only SNAPSHOT and VIEW", "open.flags")
invalid("open_request_id_zero", "OPEN", open_(0, "FEED1", ["A"]), "BadField",
        "request id 0 means 'unsolicited' in answers: an OPEN must not use it", "open.request_id")
invalid("open_count_zero", "OPEN", open_(1, "FEED1", []), "BadField",
        "an OPEN names at least one pattern", "open.count")
invalid("open_pattern_len_zero", "OPEN", open_(1, "FEED1", [b""]), "BadField",
        "a pattern is 1 to 128 bytes", "open.pattern_len")
invalid("open_pattern_with_a_space", "OPEN", open_(1, "FEED1", ["A B"]), "BadText",
        "a pattern is printable ASCII without space", "open.pattern")
invalid("open_reserved_nonzero", "OPEN", open_(1, "FEED1", ["A"], reserved=1), "BadField",
        "the reserved byte at 13 must be zero", "open.reserved")
invalid("open_bytes_after_the_last_pattern", "OPEN", open_(1, "FEED1", ["A"], extra=b"\x00"), "BadLength",
        "a byte follows the last pattern")
invalid("open_pattern_runs_past_the_end", "OPEN", open_(1, "FEED1", ["A"], count=2), "BadLength",
        "two patterns announced, one present")

# ---- CLOSE, CONFLATED, IMAGE_REQUEST ----------------------------------------------------------
valid("close_request_7", "CLOSE", close(7), dict(request_id=7), "closes what OPEN 7 opened")
valid("close_largest_id", "CLOSE", close(0xFFFFFFFF), dict(request_id=0xFFFFFFFF), "the largest request id")
invalid("close_request_id_zero", "CLOSE", close(0), "BadField", "request id 0 is never open", "close.request_id")
invalid("close_length_16", "CLOSE", close(7, length=16), "BadLength", "CLOSE is always 12 bytes")
valid("conflated_two_items", "CONFLATED", conflated(2, 300), dict(items=2, updates_dropped=300),
      "two images follow; 300 updates were not sent")
valid("conflated_saturated", "CONFLATED", conflated(1, 0xFFFFFFFF), dict(items=1, updates_dropped=0xFFFFFFFF),
      "updates_dropped saturates at 2^32-1")
invalid("conflated_item_id_nonzero", "CONFLATED", conflated(2, 300, item_id=4), "BadField",
        "CONFLATED is about no item", "conflated.item_id")
valid("image_request_all", "IMAGE_REQUEST", image_request(0, 1), dict(item_id=0, request_id=1),
      "every image of the service")
valid("image_request_one", "IMAGE_REQUEST", image_request(500, 2), dict(item_id=500, request_id=2),
      "the image of the feed's item 500")
valid("ping_payload", "PING", ping("PING", 0x0123456789ABCDEF), dict(payload=big(0x0123456789ABCDEF)),
      "a PING; its payload is the sender's to choose (its clock)")
valid("ping_payload_zero", "PING", ping("PING", 0), dict(payload=0), "any payload, 0 included")
valid("pong_payload_max", "PONG", ping("PONG", 2**64 - 1), dict(payload=big(2**64 - 1)), "the largest payload")
valid("pong_echo", "PONG", ping("PONG", 0x0123456789ABCDEF), dict(payload=big(0x0123456789ABCDEF)),
      "the PONG answering it carries the same payload")
invalid("ping_length_24", "PING", ping("PING", 1, length=24), "BadLength", "PING is always 16 bytes")
invalid("pong_item_id_nonzero", "PONG", ping("PONG", 1, item_id=3), "BadField",
        "PONG is about no item", "pong.item_id")
valid("pause_request_3", "PAUSE", pause("PAUSE", 3), dict(request_id=3), "pause request 3: its items conflated")
valid("pause_all", "PAUSE", pause("PAUSE", 0), dict(request_id=0), "pause every request open now")
valid("resume_request_3", "RESUME", pause("RESUME", 3), dict(request_id=3), "resume it: a refresh per item that changed")
valid("resume_all", "RESUME", pause("RESUME", 0), dict(request_id=0), "resume every paused request")
invalid("pause_flags_nonzero", "PAUSE", pause("PAUSE", 1, flags=1), "BadField", "PAUSE defines no flag", "pause.flags")
invalid("resume_length_16", "RESUME", pause("RESUME", 1, length=16), "BadLength", "RESUME is always 12 bytes")
valid("directory_complete", "DIRECTORY", directory([("FEED1", True, True), ("FX", False, False)]),
      dict(complete=True, services=[dict(name="FEED1", up=True, open=True), dict(name="FX", up=False, open=False)]),
      "after a login: FEED1 up and open to the client, FX down and not open to it")
valid("directory_change", "DIRECTORY", directory([("FEED1", False, True)], complete=False),
      dict(complete=False, services=[dict(name="FEED1", up=False, open=True)]),
      "a change: FEED1's provider went away")
invalid("directory_count_zero", "DIRECTORY", directory([], count=0), "BadField",
        "a directory lists at least one service", "directory.count")
invalid("directory_state_2", "DIRECTORY", directory([("FEED1", 2, True)]), "BadField",
        "a state is 0 (down) or 1 (up)", "directory.state")
invalid("directory_entry_past_the_end", "DIRECTORY", directory([("FEED1", True, True)], count=2), "BadLength",
        "two entries announced, one present")
valid("dictionary_request", "DICTIONARY_REQUEST", dictionary_request(), dict(),
      "a client asks for the distributor's field dictionary")
valid("dictionary_request_again", "DICTIONARY_REQUEST", dictionary_request(), dict(),
      "asked again (after a reconnection): the same 8 bytes")
invalid("dictionary_request_length_12", "DICTIONARY_REQUEST", dictionary_request(length=12), "BadLength",
        "DICTIONARY_REQUEST is the header alone")
CURRENCY = (15, "enum", "CURRENCY", {840: "USD", 978: "EUR"})
valid("dictionary_one_part", "DICTIONARY",
      dictionary([CURRENCY, (22, "price", "BID", {})]),
      dict(complete=True, part=0, fields=[
          dict(fid=15, type="enum", name="CURRENCY", values={"840": "USD", "978": "EUR"}),
          dict(fid=22, type="price", name="BID", values={})]),
      "a whole dictionary in one part: an enum with the names of two codes, and a price")
valid("dictionary_first_of_two", "DICTIONARY", dictionary([(3, "string", "DSPLY_NAME", {})], complete=False),
      dict(complete=False, part=0, fields=[dict(fid=3, type="string", name="DSPLY_NAME", values={})]),
      "part 0 of a dictionary sent in several parts: more follow")
valid("dictionary_empty", "DICTIONARY", dictionary([]), dict(complete=True, part=0, fields=[]),
      "a distributor with an empty dictionary sends one empty, complete part")
invalid("dictionary_fids_not_increasing", "DICTIONARY",
        dictionary([(22, "price", "BID", {}), (15, "price", "ASK", {})]), "BadField",
        "fids increase within a part", "dictionary.fid")
invalid("dictionary_values_on_a_price", "DICTIONARY", dictionary([(22, "price", "BID", {1: "X"})]), "BadField",
        "only enums name their codes", "dictionary.value_count")
invalid("dictionary_lowercase_name", "DICTIONARY", dictionary([(22, "price", "bid", {})]), "BadText",
        "field names are A-Z 0-9 _", "dictionary.name")
invalid("dictionary_unknown_type", "DICTIONARY", dictionary([(22, 9, "BID", {})]), "BadField",
        "types are 1 to 5", "dictionary.type")
invalid("dictionary_entry_past_the_end", "DICTIONARY", dictionary([(22, "price", "BID", {})], count=2), "BadLength",
        "two entries announced, one present")
POSTED = [dict(BID), {"fid": 31, "kind": "int", "value": 700}]
valid("post_from_a_client", "POST", post(0, 7, "FEED1", "AAA.O", "", POSTED),
      dict(refresh=False, origin=0, post_id=7, service="FEED1", name="AAA.O", user="", fields=POSTED),
      "a client posts an update of AAA.O (origin 0 and no user: the distributor sets them)")
valid("post_forwarded_refresh", "POST", post(0x0102030405060708, 1, "FEED1", "NEW.ITEM", "alice", [dict(ASK)], refresh=True),
      dict(refresh=True, origin=big(0x0102030405060708), post_id=1, service="FEED1", name="NEW.ITEM", user="alice",
           fields=[dict(ASK)]),
      "the distributor forwards alice's full image of a new item to the provider, under its origin and its post id")
invalid("post_id_zero", "POST", post(0, 0, "FEED1", "AAA.O", "", POSTED), "BadField",
        "a post has an id", "post.post_id")
invalid("post_origin_without_user", "POST", post(5, 1, "FEED1", "AAA.O", "", POSTED), "BadField",
        "an origin goes with a user", "post.user_len")
invalid("post_reserved_nonzero", "POST", post(0, 1, "FEED1", "AAA.O", "", POSTED, reserved=1), "BadField",
        "reserved bytes are zero", "post.reserved")
invalid("post_padding_nonzero", "POST", post(0, 1, "FEED1", "AAA.O", "", POSTED, padding=b"\x00\x01"),
        "BadField", "padding is zero", "post.padding")
valid("ack_accepted", "ACK", ack(0, 7, "accepted", ""), dict(origin=0, post_id=7, code="accepted", text=""),
      "the distributor tells the client its post 7 was accepted")
valid("ack_refused_on_the_backbone", "ACK", ack(0x0102030405060708, 1, "refused", "market closed"),
      dict(origin=big(0x0102030405060708), post_id=1, code="refused", text="market closed"),
      "the provider refuses the distributor's post 1, with its reason")
valid("ack_timeout", "ACK", ack(0, 9, "timeout", "no answer"), dict(origin=0, post_id=9, code="timeout", text="no answer"),
      "no answer came in time")
invalid("ack_unknown_code", "ACK", ack(0, 7, "accepted", "", raw_code=8), "BadField",
        "codes are 0 to 7", "ack.code")
invalid("ack_post_id_zero", "ACK", ack(0, 0, "accepted", ""), "BadField", "an ACK answers a post", "ack.post_id")
invalid("ack_length_not_text", "ACK", ack(0, 7, "refused", "x", length_delta=1) + b"y", "BadLength",
        "an ACK is 22 bytes and its text")
invalid("image_request_flags_nonzero", "IMAGE_REQUEST", image_request(0, 1, flags=0x80), "BadField",
        "IMAGE_REQUEST defines no flag", "image_request.flags")

print(json.dumps(vectors, indent=2, ensure_ascii=False))
