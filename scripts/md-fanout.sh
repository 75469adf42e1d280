#!/usr/bin/env bash
# The market data tier on one host: a feed, a distributor and N clients, each client watching
# half of its items in common with every other client and half of its own (the issue's "50%
# watchlist overlap"), the feed drawing every one of the 4000 sample items alike.
#
#   scripts/md-fanout.sh BIN [RATE] [CLIENTS] [SECONDS] [MODE] [PER_CLIENT]
#   scripts/md-fanout.sh target/release/peregrine 100k 16 10 throughput 468
#   scripts/md-fanout.sh target/release/peregrine 100k 1 10 latency all   # one client, every item
#   CLIENT_ARGS="--busy-poll-us 50" scripts/md-fanout.sh ...               # more client flags
#
# Prints each client's summary (updates, gaps, conflations, one-way latency) and the
# distributor's counters; "every update delivered" means: no client conflated, gapped or was
# disconnected, and the clients' updates add up to what the distributor sent (less what was in
# flight when they stopped).
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 BIN [RATE] [CLIENTS] [SECONDS] [MODE] [PER_CLIENT|all]}")
RATE=${2:-100k}
CLIENTS=${3:-16}
SECONDS_=${4:-10}
MODE=${5:-throughput}
PER=${6:-468}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"

GROUP="mcast://239.255.96.$((1 + $$ % 250)):$((42000 + $$ % 10000 * 2))"
python3 - "$ROOT/crates/md/items/sample.txt" "$CLIENTS" "$PER" <<'EOF'
import sys
items = open(sys.argv[1]).read().split()
n, per = int(sys.argv[2]), sys.argv[3]
if per == "all":
    for k in range(n):
        open(f"w{k}.txt", "w").write("*\n")
else:
    half = int(per) // 2
    common = items[:half]
    for k in range(n):
        own = items[half + k * half: half + (k + 1) * half]
        assert len(own) == half, "not enough items for that many clients"
        open(f"w{k}.txt", "w").write("\n".join(common + own) + "\n")
EOF
cat > users.toml <<EOF
[users.bench]
token_sha256 = "$(echo bench | "$BIN" distributor --hash-token)"
items = ["*"]
EOF

"$BIN" distributor --listen 127.0.0.1:0 --users users.toml --backbone "$GROUP" --mode "$MODE" --json > dist.out 2>&1 &
DIST=$!
for _ in $(seq 100); do grep -q listening dist.out 2>/dev/null && break; sleep 0.05; done
ADDR=$(python3 -c 'import json; print(json.loads(open("dist.out").readline())["listening"])')
"$BIN" feed --items "$ROOT/crates/md/items/sample.txt" --rate "$RATE" --zipf 0 --backbone "$GROUP" \
    --duration "$((SECONDS_ + 3))" --json > feed.out 2>&1 &
FEED=$!
sleep 1.5 # the feed found, every image in the cache
PIDS=()
for k in $(seq 0 $((CLIENTS - 1))); do
    PEREGRINE_MD_TOKEN=bench "$BIN" client --connect "$ADDR" --user bench --watch "w$k.txt" \
        --seconds "$SECONDS_" --json ${CLIENT_ARGS:-} > "c$k.out" 2>&1 &
    PIDS+=($!)
done
wait "${PIDS[@]}"
kill -TERM "$DIST"
wait "$DIST" || true
wait "$FEED" || true
sleep 0.2

python3 - "$CLIENTS" "$RATE" "$MODE" <<'EOF'
import json, sys
n, rate, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def last(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")][-1]
feed = last("feed.out")
dist = last("dist.out")["counters"]
total = 0
print(f"feed: {feed['updates']} updates in {feed['t']} s ({rate}/s asked), mode {mode}")
print("client  updates  upd/s  gaps  conflated  reconnects  lat_mean_us  lat_p50  lat_p99  lat_p99.9  lat_max")
for k in range(n):
    c = last(f"c{k}.out")
    l = c["latency_us"]
    total += c["updates"]
    print(f"{k:>6} {c['updates']:>8} {c['updates']/c['seconds']:>6.0f} {c['gaps']:>5} {c['conflated']:>10} "
          f"{c['reconnects']:>11} {l['mean']:>12} {l['median']:>8} {l['p99']:>8} {l['p99_9']:>10} {l['max']:>8}")
print(f"distributor: updates_applied {dist['updates_applied']}, updates_sent {dist['updates_sent']}, "
      f"clients' updates {total}, updates_conflated {dist['updates_conflated']}, "
      f"slow_disconnects {dist['slow_disconnects']}, sequence_gaps {dist['sequence_gaps']}, "
      f"backbone_losses {dist['backbone_losses']}")
EOF
