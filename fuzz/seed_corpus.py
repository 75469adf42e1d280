#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ for every target of fuzz/Cargo.toml with the golden vectors of
docs/golden/frames.json (valid and invalid), so libFuzzer starts from real frames instead of
having to discover the magic number, plus datagrams that pack valid frames at 8-byte aligned
offsets: all of them, and each frame type's vectors together (a resolver datagram of
advertisements and queries, a data datagram, a control datagram). Targets that read whole
datagrams or sequences of them (frames, resolver, receiver, sender_naks) start from those.

    python3 fuzz/seed_corpus.py        # from the repository root or from fuzz/
"""
import json
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
TARGETS = re.findall(r'^\[\[bin\]\]\s*\nname\s*=\s*"([^"]+)"', (HERE / "Cargo.toml").read_text(), re.M)
if not TARGETS:
    raise SystemExit("no [[bin]] targets found in fuzz/Cargo.toml")

vectors = json.loads((HERE.parent / "docs" / "golden" / "frames.json").read_text())
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

seeds = 0
for target in TARGETS:
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    for v in vectors:
        (out / f"golden_{v['name']}").write_bytes(bytes.fromhex(v["hex"]))
    for name, vs in groups.items():
        if vs:
            (out / f"packed_{name}").write_bytes(pack(vs))
    seeds += len(vectors) + sum(1 for vs in groups.values() if vs)
print(f"seeded {len(TARGETS)} corpora ({', '.join(TARGETS)}): {seeds} inputs")
