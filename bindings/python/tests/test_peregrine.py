"""The Python package against real shared memory, sockets and processes.

Run with pytest after `pip install bindings/python`. The tests that start a Rust
`peregrine pub` process need its path in PEREGRINE_BIN (crates/cli/tests/python.rs sets it);
without it they say so and skip.
"""

import array
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import peregrine

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"


def unique(what: str) -> str:
    return f"py-{what}-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"


def receive(sub, want: int, timeout: float = 10.0, publisher=None):
    """Every message until `want` came or `timeout` passed, as (sequence, bytes, topic)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        if publisher is not None:
            publisher.do_work()
        batch = sub.poll(64)
        got.extend((m.sequence, bytes(m.payload), m.topic) for m in batch)
        if not batch:
            time.sleep(0.0005)
    return got


def test_messages_arrive_in_order_with_their_payloads():
    uri = f"ipc://{unique('order')}"
    with peregrine.Context() as ctx, ctx.publisher("py.order", uri) as pub, ctx.subscriber(
        "py.order", uri
    ) as sub:
        sent = [i.to_bytes(8, "little") + bytes([i % 251]) * (i % 100) for i in range(2000)]
        for i, payload in enumerate(sent):
            assert pub.offer(payload) == i
        got = receive(sub, len(sent))
        assert got == [(i, p, "py.order") for i, p in enumerate(sent)]
        assert pub.counters()["messages"] == 2000
        c = sub.counters()
        assert (c["messages"], c["lost"], c["gaps"]) == (2000, 0, 0)
        events = sub.events()
        assert [e.kind for e in events] == ["connected"]
        assert events[0].sequence == 0 and events[0].session_id == pub.session_id


def test_payloads_are_memoryviews_of_one_buffer_per_poll():
    uri = f"ipc://{unique('view')}"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.view", uri)
        sub = ctx.subscriber("py.view", uri, idle="spin")
        for i in range(3):
            pub.offer(bytes([i]) * 5)
        msgs = sub.poll(10)
        assert len(msgs) == 3
        views = [m.payload for m in msgs]
        assert all(isinstance(v, memoryview) and v.readonly for v in views)
        assert [bytes(v) for v in views] == [b"\x00" * 5, b"\x01" * 5, b"\x02" * 5]
        # Views of one object: the poll's buffer, copied once from the transport.
        assert views[0].obj is views[1].obj is views[2].obj
        assert len(msgs[1]) == 5
        # Still valid after later polls overwrote nothing of theirs.
        pub.offer(b"later")
        assert bytes(sub.poll(10)[0].payload) == b"later"
        assert bytes(views[2]) == b"\x02" * 5


def test_offer_takes_any_contiguous_buffer():
    uri = f"ipc://{unique('buffers')}"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.buffers", uri)
        sub = ctx.subscriber("py.buffers", uri, idle="spin")
        pub.offer(b"bytes")
        pub.offer(bytearray(b"bytearray"))
        pub.offer(memoryview(b"..memoryview..")[2:-2])
        pub.offer(array.array("B", b"array"))
        pub.offer(b"")
        assert [p for _, p, _ in receive(sub, 5)] == [
            b"bytes",
            b"bytearray",
            b"memoryview",
            b"array",
            b"",
        ]
        with pytest.raises(ValueError, match="contiguous"):
            pub.offer(memoryview(b"abcdef")[::2])
        with pytest.raises(TypeError):
            pub.offer("text is not bytes")


def test_poll_batch_gives_columns():
    uri = f"ipc://{unique('batch')}"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.batch", uri)
        sub = ctx.subscriber("py.batch", uri, idle="spin")
        sent = [b"a" * (i + 1) for i in range(100)]
        for p in sent:
            pub.offer(p)
        batch = sub.poll_batch(4096)
        assert len(batch) == 100
        assert list(batch.sequences) == list(range(100))
        offsets = list(batch.offsets)
        assert offsets[0] == 0 and offsets[-1] == sum(len(p) for p in sent)
        data = batch.data
        assert [bytes(data[offsets[i] : offsets[i + 1]]) for i in range(100)] == sent
        assert set(batch.session_ids) == {pub.session_id}
        assert bytes(batch[-1].payload) == sent[-1] and batch[-1].sequence == 99
        assert [m.sequence for m in batch] == list(range(100))
        with pytest.raises(IndexError):
            batch[100]
        assert len(sub.poll_batch()) == 0


def test_a_callback_that_raises_does_not_poison_the_subscriber():
    uri = f"ipc://{unique('raise')}"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.raise", uri)
        sub = ctx.subscriber("py.raise", uri, idle="spin")
        for i in range(10):
            pub.offer(bytes([i]))
        seen = []

        def handler(m):
            seen.append(m.sequence)
            if m.sequence == 2:
                raise RuntimeError("the application failed on message 2")

        with pytest.raises(RuntimeError, match="message 2"):
            sub.poll_with(handler, 100)
        assert seen == [0, 1, 2]
        # The next poll goes on after the message that raised: nothing lost, nothing twice.
        assert sub.poll_with(handler, 100) == 7
        assert seen == list(range(10))
        c = sub.counters()
        assert (c["messages"], c["lost"]) == (10, 0)
        pub.offer(b"more")
        assert [bytes(m.payload) for m in sub.poll()] == [b"more"]


def test_the_message_iterator_and_its_timeout():
    uri = f"ipc://{unique('iter')}"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.iter", uri)
        sub = ctx.subscriber("py.iter", uri, idle="backoff")
        for i in range(50):
            pub.offer(str(i).encode())
        got = [bytes(m.payload) for m in sub.messages(timeout=0.5)]
        assert got == [str(i).encode() for i in range(50)]
        t0 = time.monotonic()
        assert list(sub.messages(timeout=0.2)) == []
        assert time.monotonic() - t0 >= 0.2
        with pytest.raises(ValueError, match="timeout"):
            sub.messages(timeout=-1)
        pub.offer(b"first")
        assert bytes(next(iter(sub)).payload) == b"first"


def test_closing_and_errors_raise_with_the_library_message():
    uri = f"ipc://{unique('errors')}"
    ctx = peregrine.Context()
    with ctx.publisher("py.errors", uri) as pub:
        with pytest.raises(peregrine.MessageTooLarge, match="exceeds"):
            pub.offer(b"x" * (pub.max_message_len + 1))
    with pytest.raises(peregrine.Closed):
        pub.offer(b"x")
    assert pub.counters()["messages"] == 0
    with ctx.subscriber("py.errors", uri) as sub:
        pass
    with pytest.raises(peregrine.Closed):
        sub.poll()
    with pytest.raises(peregrine.OpenError, match="smoke"):
        ctx.publisher("py.errors", "smoke://nowhere")
    with pytest.raises(ValueError, match="idle strategy 'lazy'"):
        ctx.subscriber("py.errors", uri, idle="lazy")
    with pytest.raises(peregrine.ConfigError, match="no_such_key"):
        peregrine.Context("[udp]\nno_such_key = 1\n")
    with pytest.raises(ValueError):
        ctx.subscribe("(", regex=True)
    assert issubclass(peregrine.BackPressured, peregrine.PeregrineError)
    ctx.close()
    with pytest.raises(peregrine.Closed):
        ctx.publisher("py.errors", uri)


def test_back_pressure_raises_and_nothing_is_lost():
    uri = f"ipc://{unique('full')}?capacity=64k"
    with peregrine.Context() as ctx:
        pub = ctx.publisher("py.full", uri)
        sub = ctx.subscriber("py.full", uri, idle="spin")
        sent = 0
        with pytest.raises(peregrine.BackPressured, match="back-pressured"):
            while True:
                pub.offer(sent.to_bytes(8, "little") * 16)
                sent += 1
        got = receive(sub, sent)
        assert [s for s, _, _ in got] == list(range(sent))
        assert pub.offer(b"room again") == sent


def test_topic_resolution_by_glob_finds_a_publisher_by_name():
    prefix = unique("resolve").replace("-", "_")
    with peregrine.Context() as ctx:
        sub = ctx.subscribe(f"{prefix}.*")
        pub = ctx.publish(f"{prefix}.quotes")
        deadline = time.monotonic() + 10
        while pub.subscriber_count < 1:
            assert time.monotonic() < deadline, "the subscriber never attached"
            sub.poll()
            pub.do_work()
            time.sleep(0.001)
        for i in range(100):
            pub.offer(b"q%d" % i)
        got = receive(sub, 100, publisher=pub)
        assert [(p, t) for _, p, t in got] == [(b"q%d" % i, f"{prefix}.quotes") for i in range(100)]
        kinds = [e.kind for e in sub.events()]
        assert "source_found" in kinds
        assert sub.sources()[0][1] == f"{prefix}.quotes"


def test_a_python_subscriber_receives_from_a_rust_peregrine_pub_process():
    exe = os.environ.get("PEREGRINE_BIN")
    if not exe:
        pytest.skip("PEREGRINE_BIN is not set (crates/cli/tests/python.rs sets it)")
    topic = unique("rust").replace("-", "_") + ".feed"
    with peregrine.Context() as ctx:
        sub = ctx.subscribe(topic)
        proc = subprocess.Popen(
            [exe, "pub", topic, "--rate", "50k", "--count", "3000", "--size", "48",
             "--wait-subscribers", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            got = receive(sub, 3000, timeout=30)
        finally:
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode()
        assert len(got) == 3000
        for i, (seq, payload, t) in enumerate(got):
            assert seq == i and t == topic
            assert len(payload) == 48
            m = re.fullmatch(rb"#(\d+)\.*", payload)
            assert m and int(m.group(1)) == i, payload
        assert sub.counters()["lost"] == 0


def test_the_pingpong_example_across_processes():
    name = unique("pingpong")
    pong = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "pingpong.py"), "pong", name], stderr=subprocess.PIPE
    )
    try:
        ping = subprocess.run(
            [sys.executable, str(EXAMPLES / "pingpong.py"), "ping", name, "2000"],
            capture_output=True,
            timeout=60,
        )
        assert ping.returncode == 0, ping.stderr.decode()
        result = json.loads(ping.stdout)
        assert result["count"] == 2000
        assert 0 < result["min_ns"] <= result["median_ns"] <= result["p99_ns"] <= result["max_ns"]
    finally:
        assert pong.wait(timeout=30) == 0, pong.stderr.read().decode()


def test_the_receive_cost_example_runs():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "receive_cost.py"), "20000"],
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()
    result = json.loads(out.stdout)
    for key in ("offer", "poll", "poll_batch", "poll_batch_loop"):
        assert result[f"{key}_ns_per_msg"] > 0


def test_a_failover_group_gives_each_sequence_once_and_refuses_a_plain_publisher():
    ua, ub, up = (f"ipc://{unique(k)}" for k in ("fo-a", "fo-b", "fo-plain"))
    with peregrine.Context() as ctx:
        subs = [ctx.subscriber("py.orders", u) for u in (ua, ub, up)]
        a, b, plain = (ctx.publisher("py.orders", u) for u in (ua, ub, up))
        with pytest.raises(peregrine.PeregrineError, match="set_failover_group"):
            a.offer_sequenced(0, b"x")
        with pytest.raises(ValueError, match="1 to 64 bytes"):
            a.set_failover_group("")
        with pytest.raises(ValueError, match="window_ms=0"):
            peregrine.FailoverSubscriber(subs, "engine", window_ms=0)
        a.set_failover_group("engine")
        b.set_failover_group("engine")
        fs = peregrine.FailoverSubscriber(subs, "engine")
        with pytest.raises(peregrine.Closed):
            subs[0].poll()
        # A sends 0..99 and dies with them; B sends 50..149 (and a gap no member fills: 150..159).
        for s in range(150):
            if s < 100:
                assert a.offer_sequenced(s, f"#{s}".encode()) == s
            if s >= 50:
                b.offer_sequenced(s, memoryview(f"#{s}".encode()))
        for s in range(160, 170):
            b.offer_sequenced(s, f"#{s}".encode())
        plain.offer(b"plain")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 160 and time.monotonic() < deadline:
            batch = fs.poll(64)
            got.extend((m.sequence, bytes(m.payload), m.topic) for m in batch)
            fs.idle(len(batch))
        assert got == [(s, f"#{s}".encode(), "py.orders") for s in [*range(150), *range(160, 170)]]
        for _ in range(50):
            fs.poll()
        events = []
        while (e := fs.next_event()) is not None:
            events.append(e)
        lost = [(e.sequence, e.count) for e in events if e.kind == "group_lost"]
        assert lost == [(150, 10)]
        refused = [e for e in events if e.kind == "refused"]
        assert len(refused) == 1 and refused[0].session_id == plain.session_id
        assert "plain publisher" in refused[0].reason and "'engine'" in refused[0].reason
        c = fs.counters()
        assert (c["delivered"], c["lost"], c["duplicates"], c["refused_messages"]) == (160, 10, 50, 1)
        assert sorted(fs.members) == sorted([a.session_id, b.session_id])
        fs.close()
        with pytest.raises(peregrine.Closed):
            fs.poll()


def test_a_durable_merging_subscriber_resumes_where_it_stood():
    """A recorder process (`peregrine record`) records a Python publisher's topic; a durable
    MergingSubscriber takes messages 0-9, is closed (its positions kept in the folder), and
    opened again after 10 more were sent without it: it gets 10 to 19 from the recording,
    then 20 to 24 live, each once; a merge from sequence 0 gets all 25."""
    exe = os.environ.get("PEREGRINE_BIN")
    if not exe:
        pytest.skip("PEREGRINE_BIN is not set (crates/cli/tests/python.rs sets it)")
    import tempfile

    topic = unique("durable").replace("-", "_") + ".rec"
    folder = tempfile.mkdtemp(prefix="peregrine-py-rec-")
    rec = subprocess.Popen(
        [exe, "record", "--topics", topic, "--dir", folder, "--fsync", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rec.stdout.readline().startswith("recording "), rec.stderr.read()
        with peregrine.Context() as ctx:
            pub = ctx.publish(topic)
            deadline = time.monotonic() + 20
            while pub.subscriber_count == 0:
                assert time.monotonic() < deadline, "the recorder never attached"
                time.sleep(0.01)
            sent = 0

            def send(n):
                nonlocal sent
                for _ in range(n):
                    pub.offer(f"m{sent}".encode())
                    sent += 1
                pub.flush()

            def recorded(n):
                deadline = time.monotonic() + 20
                while True:
                    out = subprocess.run(
                        [exe, "replay", "--dir", folder, topic], capture_output=True, text=True
                    )
                    if f"replayed {n} messages" in out.stderr:
                        return
                    assert time.monotonic() < deadline, out.stderr
                    time.sleep(0.02)

            def take(s, until, sending=0):
                """(sequence, payload) until sequence `until`, sending one message a poll
                while `sending` are left."""
                got = []
                deadline = time.monotonic() + 20
                while not got or got[-1][0] < until:
                    assert time.monotonic() < deadline, got
                    if sending:
                        send(1)
                        sending -= 1
                    got += [(m.sequence, bytes(m.payload).decode()) for m in s.poll(64)]
                    time.sleep(0.001)
                return got

            with peregrine.MergingSubscriber(ctx, topic, dir=folder, durable="py-risk") as s:
                send(10)
                first = take(s, 9)
                assert first == [(i, f"m{i}") for i in range(first[0][0], 10)]
                assert s.positions() == [(pub.session_id, 10)]
            send(10)
            recorded(20)
            with peregrine.MergingSubscriber(ctx, topic, dir=folder, durable="py-risk") as s:
                got = take(s, 24, sending=5)
                assert got == [(i, f"m{i}") for i in range(10, 25)]
                kinds = []
                while (e := s.next_event()) is not None:
                    kinds.append(e.kind)
                assert "seam" in kinds or "caught_up" in kinds, kinds
                with pytest.raises(ValueError, match="no durable name"):
                    peregrine.MergingSubscriber(ctx, topic, dir=folder).commit()
            recorded(25)
            with peregrine.MergingSubscriber(ctx, topic, dir=folder, from_seq=0) as s:
                send(1)
                assert take(s, 25) == [(i, f"m{i}") for i in range(26)]
            with pytest.raises(ValueError, match="one of them"):
                peregrine.MergingSubscriber(ctx, topic)
    finally:
        rec.terminate()
        rec.wait(timeout=20)
