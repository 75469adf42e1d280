#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ with the golden vectors of docs/golden/frames.json (valid and
invalid), so libFuzzer starts from real frames instead of having to discover the magic number.
The frames target also gets datagrams packing every valid vector at 8-byte aligned offsets.

    python3 fuzz/seed_corpus.py        # from the repository root or from fuzz/
"""
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
TARGETS = ["header", "data", "heartbeat", "nak", "advertise", "query", "bye", "status", "cookie", "frames"]

vectors = json.loads((HERE.parent / "docs" / "golden" / "frames.json").read_text())
for target in TARGETS:
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    for v in vectors:
        (out / f"golden_{v['name']}").write_bytes(bytes.fromhex(v["hex"]))

packed = b""
for v in (v for v in vectors if v["valid"]):
    frame = bytes.fromhex(v["hex"])
    packed += frame + bytes(-len(frame) % 8)
(HERE / "corpus" / "frames" / "golden_all_valid_packed").write_bytes(packed)
print(f"seeded {len(TARGETS)} corpora with {len(vectors)} vectors each")
