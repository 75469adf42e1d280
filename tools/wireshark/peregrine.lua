-- Wireshark dissector for Peregrine's wire protocol, version 1 (docs/protocol.md).
--
-- Decodes every frame type (DATA, PAD, HEARTBEAT, NAK, ADVERTISE, QUERY, BYE, STATUS, COOKIE,
-- AUTH) in UDP datagrams (unicast and multicast: several frames per datagram, each starting at
-- an 8-byte aligned offset) and in TCP streams (frames padded to 8 bytes, reassembled across
-- segments). Peregrine traffic is found on any port by a heuristic: a frame header with the
-- magic "PG", version 1, a known frame type and a frame length that fits. A frame that breaks
-- a rule of docs/protocol.md is shown with the rule (`peregrine.error`) and an expert error.
--
-- Use:  wireshark -X lua_script:tools/wireshark/peregrine.lua
--       tshark -X lua_script:tools/wireshark/peregrine.lua -r capture.pcap -Y peregrine
-- or copy the file into Wireshark's personal Lua plugins folder (Help > About > Folders).
-- Display filters: peregrine.frame_type == 1, peregrine.sequence, peregrine.topic, ...

local proto = Proto("peregrine", "Peregrine messaging")

local MAGIC = 0x4750
local VERSION = 1
local HEADER_LEN = 16

local frame_types = {
    [0x01] = "DATA", [0x02] = "PAD", [0x03] = "HEARTBEAT", [0x04] = "NAK",
    [0x05] = "ADVERTISE", [0x06] = "QUERY", [0x07] = "BYE", [0x08] = "STATUS",
    [0x09] = "COOKIE", [0x0A] = "AUTH",
}
local pattern_kinds = { [0] = "exact", [1] = "glob", [2] = "regex" }

local f = proto.fields
f.frame = ProtoField.none("peregrine.frame", "Frame")
f.frame_length = ProtoField.uint32("peregrine.frame_length", "Frame length", base.DEC)
f.magic = ProtoField.uint16("peregrine.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("peregrine.version", "Version", base.DEC)
f.frame_type = ProtoField.uint8("peregrine.frame_type", "Frame type", base.HEX, frame_types)
f.flags = ProtoField.uint16("peregrine.flags", "Flags", base.HEX)
f.data_begin = ProtoField.bool("peregrine.flags.begin", "BEGIN", 16, nil, 0x0001)
f.data_end = ProtoField.bool("peregrine.flags.end", "END", 16, nil, 0x0002)
f.data_urgent = ProtoField.bool("peregrine.flags.urgent", "URGENT", 16, nil, 0x0004)
f.data_retransmit = ProtoField.bool("peregrine.flags.retransmit", "RETRANSMIT", 16, nil, 0x0008)
f.status_join = ProtoField.bool("peregrine.flags.join", "JOIN", 16, nil, 0x0001)
f.status_leave = ProtoField.bool("peregrine.flags.leave", "LEAVE", 16, nil, 0x0002)
f.reserved = ProtoField.uint32("peregrine.reserved", "Reserved", base.HEX)
f.session_id = ProtoField.uint32("peregrine.session_id", "Session id", base.DEC)
f.key_id = ProtoField.uint32("peregrine.key_id", "Key id (AUTH)", base.HEX)
f.stream_id = ProtoField.uint32("peregrine.stream_id", "Stream id", base.DEC)
f.message_length = ProtoField.uint32("peregrine.message_length", "Message length", base.DEC)
f.sequence = ProtoField.uint64("peregrine.sequence", "Sequence", base.DEC)
f.payload = ProtoField.bytes("peregrine.payload", "Payload")
f.next_sequence = ProtoField.uint64("peregrine.next_sequence", "Next sequence", base.DEC)
f.oldest_retained = ProtoField.uint64("peregrine.oldest_retained", "Oldest retained", base.DEC)
f.receiver_id = ProtoField.uint32("peregrine.receiver_id", "Receiver id", base.DEC)
f.range_count = ProtoField.uint16("peregrine.range_count", "Range count", base.DEC)
f.range = ProtoField.none("peregrine.nak.range", "Range")
f.range_start = ProtoField.uint64("peregrine.nak.start", "Start", base.DEC)
f.range_count_n = ProtoField.uint32("peregrine.nak.count", "Count", base.DEC)
f.ttl_ms = ProtoField.uint32("peregrine.ttl_ms", "TTL (ms)", base.DEC)
f.topic_len = ProtoField.uint16("peregrine.topic_len", "Topic length", base.DEC)
f.uri_len = ProtoField.uint16("peregrine.uri_len", "URI length", base.DEC)
f.topic = ProtoField.string("peregrine.topic", "Topic", base.UNICODE)
f.uri = ProtoField.string("peregrine.uri", "URI", base.UNICODE)
f.pattern_kind = ProtoField.uint8("peregrine.pattern_kind", "Pattern kind", base.DEC, pattern_kinds)
f.pattern_len = ProtoField.uint16("peregrine.pattern_len", "Pattern length", base.DEC)
f.query_id = ProtoField.uint32("peregrine.query_id", "Query id", base.DEC)
f.pattern = ProtoField.string("peregrine.pattern", "Pattern", base.UNICODE)
f.final_next_sequence = ProtoField.uint64("peregrine.final_next_sequence", "Final next sequence", base.DEC)
f.window = ProtoField.uint32("peregrine.window", "Window", base.DEC)
f.cookie = ProtoField.bytes("peregrine.cookie", "Cookie")
f.tag = ProtoField.bytes("peregrine.tag", "Tag (HMAC-SHA256, 16 bytes)")
f.padding = ProtoField.bytes("peregrine.padding", "Alignment padding")
f.error = ProtoField.string("peregrine.error", "Invalid frame")

local ef_invalid = ProtoExpert.new("peregrine.invalid", "Invalid Peregrine frame",
    expert.group.MALFORMED, expert.severity.ERROR)
local ef_retransmit = ProtoExpert.new("peregrine.retransmission", "Retransmission (answers a NAK)",
    expert.group.SEQUENCE, expert.severity.NOTE)
proto.experts = { ef_invalid, ef_retransmit }

local function align8(n)
    return n + ((8 - n % 8) % 8)
end

-- A frame header at `off` that looks like Peregrine's: magic, version, known type, and a
-- length of at least a header.
local function header_ok(tvb, off)
    if tvb:len() - off < HEADER_LEN then return false end
    local len = tvb(off, 4):le_uint()
    return tvb(off + 4, 2):le_uint() == MAGIC
        and tvb(off + 6, 1):uint() == VERSION
        and frame_types[tvb(off + 7, 1):uint()] ~= nil
        and len >= HEADER_LEN
end

-- Whether the frame being dissected broke a rule (its Info text says so).
local frame_invalid = false

local function invalid(tree, t, why)
    frame_invalid = true
    tree:add(f.error, t(0, 0), why):set_generated()
    tree:add_proto_expert_info(ef_invalid, why)
    return false
end

-- A reserved field must be zero.
local function reserved(tree, t, off, size, name)
    tree:add_le(f.reserved, t(off, size))
    if t(off, size):le_uint() ~= 0 then
        return invalid(tree, t, "BadField " .. name .. ": reserved, must be zero")
    end
    return true
end

local function exact(tree, t, want, name)
    if t:len() ~= want then
        return invalid(tree, t, string.format("BadLength: %s is exactly %d bytes, not %d",
            name, want, t:len()))
    end
    return true
end

-- Whether `bytes` (a ByteArray) is UTF-8 without NUL: no overlong forms, no surrogates,
-- nothing above U+10FFFF.
local function utf8_without_nul(bytes)
    local n, i = bytes:len(), 0
    while i < n do
        local c = bytes:get_index(i)
        local more, min
        if c == 0 then return false
        elseif c < 0x80 then more, min = 0, 0
        elseif c >= 0xC2 and c <= 0xDF then more, min = 1, 0x80
        elseif c >= 0xE0 and c <= 0xEF then more, min = 2, 0x800
        elseif c >= 0xF0 and c <= 0xF4 then more, min = 3, 0x10000
        else return false end
        if i + more >= n and more > 0 then return false end
        local cp = more == 0 and c or bit.band(c, bit.rshift(0x3F, more))
        for k = 1, more do
            local d = bytes:get_index(i + k)
            if bit.band(d, 0xC0) ~= 0x80 then return false end
            cp = cp * 64 + bit.band(d, 0x3F)
        end
        if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return false end
        i = i + more + 1
    end
    return true
end

-- A frame type without flags.
local function no_flags(tree, t, flags, name)
    if flags ~= 0 then
        return invalid(tree, t, "BadField " .. name .. ".flags: must be zero")
    end
    return true
end

-- A frame type of `min` bytes or more.
local function at_least(tree, t, min, name)
    if t:len() < min then
        return invalid(tree, t, string.format("BadLength: %s is at least %d bytes", name, min))
    end
    return true
end

local function text(tree, t, off, len, field, name)
    local r = t(off, len)
    tree:add_packet_field(field, r, ENC_UTF_8)
    if not utf8_without_nul(r:bytes()) then
        return invalid(tree, t, "BadText " .. name .. ": not UTF-8 without NUL")
    end
    return true
end

-- Type-specific parts. `t` is the frame's own bytes (frame_length of them); each returns
-- a one-line summary for the Info column.
local body = {}

body[0x01] = function(t, tree, flags)
    if not at_least(tree, t, 32, "DATA") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    tree:add_le(f.message_length, t(20, 4))
    tree:add_le(f.sequence, t(24, 8))
    if t:len() > 32 then tree:add(f.payload, t(32)) end
    if bit.band(flags, 0xfff0) ~= 0 then
        invalid(tree, t, "BadField data.flags: undefined bits set")
    end
    local mlen = t(20, 4):le_uint()
    local plen = t:len() - 32
    if mlen > 2 ^ 30 then
        invalid(tree, t, "BadField data.message_length: above 2^30")
    elseif bit.band(flags, 3) == 3 and plen ~= mlen then
        invalid(tree, t, "BadLength: a whole message's payload is its message_length")
    elseif plen > mlen then
        invalid(tree, t, "BadLength: a fragment longer than its message")
    end
    if bit.band(flags, 0x0008) ~= 0 then tree:add_proto_expert_info(ef_retransmit) end
    return string.format("DATA stream=%d seq=%s len=%d", t(16, 4):le_uint(),
        tostring(t(24, 8):le_uint64()), plen)
end

body[0x02] = function(t, tree, flags)
    if not at_least(tree, t, 32, "PAD") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    tree:add_le(f.message_length, t(20, 4))
    tree:add_le(f.sequence, t(24, 8))
    if flags ~= 0 then invalid(tree, t, "BadField pad.flags: must be zero")
    elseif t(16, 4):le_uint() ~= 0 then invalid(tree, t, "BadField pad.stream_id: must be zero")
    elseif t(20, 4):le_uint() ~= 0 then invalid(tree, t, "BadField pad.message_length: must be zero") end
    return "PAD next seq=" .. tostring(t(24, 8):le_uint64())
end

body[0x03] = function(t, tree, flags)
    if not exact(tree, t, 40, "HEARTBEAT") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    reserved(tree, t, 20, 4, "heartbeat.reserved")
    tree:add_le(f.next_sequence, t(24, 8))
    tree:add_le(f.oldest_retained, t(32, 8))
    no_flags(tree, t, flags, "heartbeat")
    if t(32, 8):le_uint64() > t(24, 8):le_uint64() then
        invalid(tree, t, "BadField heartbeat.oldest_retained: above next_sequence")
    end
    return string.format("HEARTBEAT stream=%d next=%s oldest=%s", t(16, 4):le_uint(),
        tostring(t(24, 8):le_uint64()), tostring(t(32, 8):le_uint64()))
end

body[0x04] = function(t, tree, flags)
    if not at_least(tree, t, 32, "NAK") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    tree:add_le(f.receiver_id, t(20, 4))
    tree:add_le(f.range_count, t(24, 2))
    reserved(tree, t, 26, 2, "nak.reserved")
    reserved(tree, t, 28, 4, "nak.reserved")
    no_flags(tree, t, flags, "nak")
    local n = t(24, 2):le_uint()
    if n < 1 or n > 64 then
        return invalid(tree, t, "BadField nak.range_count: 1 to 64")
    end
    if not exact(tree, t, 32 + 16 * n, "this NAK") then return nil end
    for i = 0, n - 1 do
        local o = 32 + 16 * i
        local r = tree:add(f.range, t(o, 16))
        r:add_le(f.range_start, t(o, 8))
        r:add_le(f.range_count_n, t(o + 8, 4))
        r:append_text(string.format(": %s + %d", tostring(t(o, 8):le_uint64()),
            t(o + 8, 4):le_uint()))
        reserved(r, t, o + 12, 4, "nak.range.reserved")
        if t(o + 8, 4):le_uint() == 0 then invalid(tree, t, "BadField nak.range.count: at least 1") end
        if t(o, 8):le_uint64() > UInt64.max() - t(o + 8, 4):le_uint() then
            invalid(tree, t, "BadField nak.range.start: start + count overflows")
        end
    end
    return string.format("NAK stream=%d ranges=%d", t(16, 4):le_uint(), n)
end

body[0x05] = function(t, tree, flags)
    if not at_least(tree, t, 32, "ADVERTISE") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    tree:add_le(f.ttl_ms, t(20, 4))
    tree:add_le(f.topic_len, t(24, 2))
    tree:add_le(f.uri_len, t(26, 2))
    reserved(tree, t, 28, 4, "advertise.reserved")
    no_flags(tree, t, flags, "advertise")
    local tl, ul = t(24, 2):le_uint(), t(26, 2):le_uint()
    if tl < 1 or tl > 1024 then return invalid(tree, t, "BadField advertise.topic_len: 1 to 1024") end
    if ul < 1 or ul > 1024 then return invalid(tree, t, "BadField advertise.uri_len: 1 to 1024") end
    if not exact(tree, t, 32 + tl + ul, "this ADVERTISE") then return nil end
    text(tree, t, 32, tl, f.topic, "advertise.topic")
    text(tree, t, 32 + tl, ul, f.uri, "advertise.uri")
    return string.format("ADVERTISE %s at %s ttl=%dms", t(32, tl):string(ENC_UTF_8),
        t(32 + tl, ul):string(ENC_UTF_8),
        t(20, 4):le_uint())
end

body[0x06] = function(t, tree, flags)
    if not at_least(tree, t, 24, "QUERY") then return nil end
    tree:add(f.pattern_kind, t(16, 1))
    reserved(tree, t, 17, 1, "query.reserved")
    tree:add_le(f.pattern_len, t(18, 2))
    tree:add_le(f.query_id, t(20, 4))
    no_flags(tree, t, flags, "query")
    if pattern_kinds[t(16, 1):uint()] == nil then
        invalid(tree, t, "BadField query.pattern_kind: 0, 1 or 2")
    end
    local pl = t(18, 2):le_uint()
    if pl < 1 or pl > 1024 then return invalid(tree, t, "BadField query.pattern_len: 1 to 1024") end
    if not exact(tree, t, 24 + pl, "this QUERY") then return nil end
    text(tree, t, 24, pl, f.pattern, "query.pattern")
    return string.format("QUERY %s %s", pattern_kinds[t(16, 1):uint()] or "?",
        t(24, pl):string(ENC_UTF_8))
end

body[0x07] = function(t, tree, flags)
    if not exact(tree, t, 32, "BYE") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    reserved(tree, t, 20, 4, "bye.reserved")
    tree:add_le(f.final_next_sequence, t(24, 8))
    no_flags(tree, t, flags, "bye")
    return string.format("BYE stream=%d final next=%s", t(16, 4):le_uint(),
        tostring(t(24, 8):le_uint64()))
end

body[0x08] = function(t, tree, flags)
    if not exact(tree, t, 40, "STATUS") then return nil end
    tree:add_le(f.stream_id, t(16, 4))
    tree:add_le(f.receiver_id, t(20, 4))
    tree:add_le(f.next_sequence, t(24, 8))
    tree:add_le(f.window, t(32, 4))
    reserved(tree, t, 36, 4, "status.reserved")
    if bit.band(flags, 0xfffc) ~= 0 or flags == 3 then
        invalid(tree, t, "BadField status.flags: only one of JOIN and LEAVE")
    elseif t(20, 4):le_uint() == 0 then
        invalid(tree, t, "BadField status.receiver_id: never 0")
    elseif t(12, 4):le_uint() == 0 and flags ~= 1 then
        invalid(tree, t, "BadField status.session_id: 0 only with JOIN")
    end
    local what = (flags == 1 and "JOIN") or (flags == 2 and "LEAVE") or "keepalive"
    return string.format("STATUS %s stream=%d next=%s window=%d", what, t(16, 4):le_uint(),
        tostring(t(24, 8):le_uint64()), t(32, 4):le_uint())
end

body[0x09] = function(t, tree, flags)
    if not exact(tree, t, 32, "COOKIE") then return nil end
    tree:add(f.cookie, t(16, 16))
    if flags ~= 0 then invalid(tree, t, "BadField cookie.flags: must be zero")
    elseif t(12, 4):le_uint() ~= 0 then invalid(tree, t, "BadField cookie.session_id: must be zero") end
    return "COOKIE"
end

body[0x0A] = function(t, tree, flags)
    if not exact(tree, t, 32, "AUTH") then return nil end
    tree:add(f.tag, t(16, 16))
    -- Flag 0x0001: the tag is BLAKE3's (keyed with a key derived from the pre-shared key);
    -- without it, HMAC-SHA256's. No other flag is defined.
    local mac = "hmac-sha256"
    if flags == 0x0001 then mac = "blake3"
    elseif flags ~= 0 then invalid(tree, t, "BadField auth.flags: only 0x0001 (BLAKE3) is defined") end
    return string.format("AUTH key=%08x mac=%s", t(12, 4):le_uint(), mac)
end

-- One frame: `t` holds exactly its frame_length bytes.
local function dissect_frame(t, tree)
    frame_invalid = false
    local ftype = t(7, 1):uint()
    local name = frame_types[ftype] or string.format("0x%02x", ftype)
    local sub = tree:add(f.frame, t())
    sub:set_text(string.format("Frame: %s, %d bytes", name, t:len()))
    sub:add_le(f.frame_length, t(0, 4))
    sub:add_le(f.magic, t(4, 2))
    sub:add(f.version, t(6, 1))
    sub:add(f.frame_type, t(7, 1))
    local flags = t(8, 2):le_uint()
    local ft = sub:add_le(f.flags, t(8, 2))
    if ftype == 0x01 then
        ft:add_le(f.data_begin, t(8, 2))
        ft:add_le(f.data_end, t(8, 2))
        ft:add_le(f.data_urgent, t(8, 2))
        ft:add_le(f.data_retransmit, t(8, 2))
    elseif ftype == 0x08 then
        ft:add_le(f.status_join, t(8, 2))
        ft:add_le(f.status_leave, t(8, 2))
    end
    reserved(sub, t, 10, 2, "header.reserved")
    if ftype == 0x0A then
        sub:add_le(f.key_id, t(12, 4))
    end
    sub:add_le(f.session_id, t(12, 4))
    local summary = body[ftype](t, sub, flags) or name
    if frame_invalid then
        summary = summary .. " [invalid]"
    end
    return summary
end

-- The frames of `tvb` from offset 0. On TCP (`stream`), asks for more bytes when a frame (or
-- its padding) continues in a later segment. Returns the bytes consumed, or 0 when the data
-- does not start with a Peregrine frame.
local function dissect(tvb, pinfo, tree, stream)
    local len = tvb:len()
    if not header_ok(tvb, 0) then return 0 end
    pinfo.cols.protocol = "Peregrine"
    local root = tree:add(proto, tvb())
    local off = 0
    local infos = {}
    while off < len do
        if len - off < HEADER_LEN then
            if stream then
                pinfo.desegment_offset = off
                pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
                break
            end
            root:add(f.padding, tvb(off))
            break
        end
        if not header_ok(tvb, off) then
            -- Zero bytes after a frame are padding: a datagram padded to its size (each
            -- datagram of a UDP GSO send but the last is, and a capture on the sending host
            -- shows the GSO send as one packet of many datagrams). Skip them, 8 at a time, to
            -- the next frame or the end; anything else is not Peregrine's.
            local zeros = off
            while zeros + 8 <= len and tvb(zeros, 4):le_uint() == 0 and tvb(zeros + 4, 4):le_uint() == 0 do
                zeros = zeros + 8
            end
            if zeros > off and (zeros >= len or header_ok(tvb, zeros)) and not stream then
                if zeros >= len then
                    root:add(f.padding, tvb(off))
                    break
                end
                root:add(f.padding, tvb(off, zeros - off))
                off = zeros
            elseif zeros >= len - 7 and zeros > off and not stream then
                root:add(f.padding, tvb(off))
                break
            else
                invalid(root, tvb(off):tvb(), "a frame header without the magic, version or a known type")
                break
            end
        end
        local flen = tvb(off, 4):le_uint()
        local need = stream and align8(flen) or flen
        if len - off < need then
            if stream then
                pinfo.desegment_offset = off
                pinfo.desegment_len = need - (len - off)
                break
            end
            invalid(root, tvb(off):tvb(), string.format(
                "BadLength: frame_length %d is longer than the %d bytes left", flen, len - off))
            break
        end
        infos[#infos + 1] = dissect_frame(tvb(off, flen):tvb(), root)
        local nexto = off + align8(flen)
        if nexto > off + flen and nexto <= len then
            root:add(f.padding, tvb(off + flen, nexto - off - flen))
        end
        off = nexto
    end
    if #infos == 0 then
        infos[1] = "[invalid]"
    end
    pinfo.cols.info:set(table.concat(infos, ", "))
    pinfo.cols.info:fence()
    return len
end

function proto.dissector(tvb, pinfo, tree)
    return dissect(tvb, pinfo, tree, pinfo.port_type == 2)
end

local function heuristic(stream)
    return function(tvb, pinfo, tree)
        if not header_ok(tvb, 0) then return false end
        local flen = tvb(0, 4):le_uint()
        -- A datagram holds its first frame whole; a stream may continue it later.
        if not stream and flen > tvb:len() then return false end
        if flen > 64 * 1024 * 1024 + 64 then return false end
        pinfo.conversation = proto
        dissect(tvb, pinfo, tree, stream)
        return true
    end
end

proto:register_heuristic("udp", heuristic(false))
proto:register_heuristic("tcp", heuristic(true))
DissectorTable.get("udp.port"):add_for_decode_as(proto)
DissectorTable.get("tcp.port"):add_for_decode_as(proto)
