#!/usr/bin/env bash
# Seeds the corpora, builds every fuzz target and runs each for a short time, one at a time
# (on 2 cores two fuzzers would measure each other). Needs a nightly toolchain and cargo-fuzz.
#   fuzz/run_all.sh            # 5 s per target
#   SECONDS_EACH=60 fuzz/run_all.sh
# A crash fails the run; its input is kept under fuzz/artifacts/<target>/.
# No sanitizer (`-s none`): the fuzzed crates (wire, proto, md, archive) forbid unsafe code, so
# AddressSanitizer, cargo-fuzz's default, finds nothing there and only slows the build (1 min
# 34 s against 1 min 8 s on 2 cores) and every run.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${SECONDS_EACH:-5}
python3 seed_corpus.py
cargo +nightly fuzz build -s none
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo +nightly fuzz list); do
    if ! cargo +nightly fuzz run -s none "$target" -- -max_total_time="$seconds" -print_final_stats=1 \
        >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz target $target failed: see fuzz/artifacts/$target/" >&2
        exit 1
    fi
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || echo 'cov: ?')
    echo "$target: $runs runs in ${seconds} s, $cov edges"
done
