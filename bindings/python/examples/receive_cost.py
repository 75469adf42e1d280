"""What receiving costs Python per message, over shared memory in one process.

    python receive_cost.py [MESSAGES]

Publishes MESSAGES messages of 32 bytes into a log large enough to hold them all, then drains
them three ways, timing each with time.perf_counter_ns():

- poll:             for m in sub.poll(256): touch m.sequence and m.payload
- poll_batch:       sub.poll_batch(4096), the columns only (no object per message)
- poll_batch_loop:  sub.poll_batch(4096), then a Python loop over batch.sequences

and prints one JSON object: nanoseconds per message for each, and for offer.
"""

import json
import os
import sys
import time

import peregrine

SIZE = 32


def drain(sub, how: str, total: int) -> int:
    got = 0
    if how == "poll":
        while got < total:
            for m in sub.poll(256):
                m.sequence
                m.payload
                got += 1
    elif how == "poll_batch":
        while got < total:
            got += len(sub.poll_batch(4096))
    else:
        last = 0
        while got < total:
            for seq in sub.poll_batch(4096).sequences:
                last = seq
                got += 1
    return got


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    result = {"messages": total, "size": SIZE}
    name = f"receive-cost-{os.getpid()}"
    with peregrine.Context() as ctx:
        for how in ("poll", "poll_batch", "poll_batch_loop"):
            uri = f"ipc://{name}-{how}?capacity=256m"
            pub = ctx.publisher("receive.cost", uri)
            sub = ctx.subscriber("receive.cost", uri, idle="spin")
            payload = b"x" * SIZE
            t0 = time.perf_counter_ns()
            for _ in range(total):
                pub.offer(payload)
            t1 = time.perf_counter_ns()
            result.setdefault("offer_ns_per_msg", (t1 - t0) / total)
            t0 = time.perf_counter_ns()
            got = drain(sub, how, total)
            t1 = time.perf_counter_ns()
            if got != total or sub.counters()["lost"] != 0:
                print(f"{how}: received {got} of {total}", file=sys.stderr)
                return 1
            result[f"{how}_ns_per_msg"] = (t1 - t0) / total
            sub.close()
            pub.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
