"""Ping-pong between two Python processes over shared memory: the half round trip.

    python pingpong.py pong NAME            # start first: echoes every ping
    python pingpong.py ping NAME [COUNT]    # prints {"median_ns": ..., "p99_ns": ...}

Both sides busy-poll (idle="spin"); the ping side times each round trip with
time.perf_counter_ns() and checks the echo carries its number.
"""

import json
import sys
import time

import peregrine


def pong(name: str) -> int:
    with peregrine.Context() as ctx:
        pub = ctx.publisher("pingpong.pong", f"ipc://{name}-pong")
        sub = ctx.subscriber("pingpong.ping", f"ipc://{name}-ping", idle="spin")
        deadline = time.monotonic() + 30
        connected = False
        while True:
            got = sub.poll(16)
            for m in got:
                while True:
                    try:
                        pub.offer(m.payload)
                        break
                    except peregrine.BackPressured:
                        pass
            if got:
                continue
            for ev in sub.events():
                if ev.kind == "connected":
                    connected = True
                if ev.kind in ("publisher_closed", "publisher_died"):
                    return 0
            if not connected and time.monotonic() > deadline:
                print("pingpong: no ping side came within 30 s", file=sys.stderr)
                return 1


def ping(name: str, count: int) -> int:
    warmup = max(count // 10, 1)
    with peregrine.Context() as ctx:
        pub = ctx.publisher("pingpong.ping", f"ipc://{name}-ping")
        sub = ctx.subscriber("pingpong.pong", f"ipc://{name}-pong", idle="spin")
        deadline = time.monotonic() + 30
        while pub.subscriber_count < 1 or not sub.is_connected:
            sub.poll(16)
            if time.monotonic() > deadline:
                print("pingpong: the pong side did not attach within 30 s", file=sys.stderr)
                return 1
        samples = []
        clock = time.perf_counter_ns
        for i in range(warmup + count):
            payload = i.to_bytes(8, "little") * 4  # 32 bytes
            t0 = clock()
            pub.offer(payload)
            got = sub.poll(1)
            while not got:
                got = sub.poll(1)
            t1 = clock()
            if bytes(got[0].payload[:8]) != payload[:8]:
                print(f"pingpong: ping {i} came back wrong", file=sys.stderr)
                return 1
            if i >= warmup:
                samples.append((t1 - t0) / 2)
        pub.close()
        samples.sort()
        n = len(samples)
        print(json.dumps({
            "count": n,
            "size": 32,
            "min_ns": samples[0],
            "median_ns": samples[n // 2],
            "p99_ns": samples[n * 99 // 100],
            "p999_ns": samples[n * 999 // 1000],
            "max_ns": samples[-1],
        }))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "pong":
        sys.exit(pong(sys.argv[2]))
    if len(sys.argv) >= 3 and sys.argv[1] == "ping":
        sys.exit(ping(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200000))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
