"""The market data API (peregrine.md) against a real `peregrine distributor` process.

A Python Provider publishes on a loopback multicast backbone of the test's own, the
distributor (the Rust binary in PEREGRINE_BIN, which crates/cli/tests/python.rs sets) caches
and fans out, and a Python Consumer checks what arrives: every value exactly as published.
The examples (examples/md_provider.py, examples/md_board.py) run here too, so they cannot rot.
"""

import datetime
import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest

import peregrine
from peregrine import md

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
SAMPLE_TICKS = ROOT / "crates" / "md" / "ticks" / "sample.csv"
TOKEN = "s3cret"
_nets = itertools.count()


def backbone():
    """A multicast group and ports of this test's own (the Rust md tests use 239.255.95.x)."""
    n = next(_nets)
    pid = os.getpid()
    group = f"239.255.97.{1 + (pid + n * 37) % 250}"
    port = 20_000 + ((pid % 4999) * 2 + n * 2) % 9_990
    return f"mcast://{group}:{port}", f"mcast://{group}:{port + 1}"


class Distributor:
    """A `peregrine distributor` process on a free port; its output lines are collected."""

    def __init__(self, tmp_path, backbone_uri, requests_uri, items, more_users="", args=(),
                 alice_extra=""):
        exe = os.environ.get("PEREGRINE_BIN")
        if not exe:
            pytest.skip("PEREGRINE_BIN is not set (crates/cli/tests/python.rs sets it)")
        users = tmp_path / "users.toml"
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        quoted = ", ".join(f'"{i}"' for i in items)
        users.write_text(f'[users.alice]\ntoken_sha256 = "{digest}"\nitems = [{quoted}]\n'
                         + alice_extra + more_users)
        self.proc = subprocess.Popen(
            [exe, "distributor", "--listen", "127.0.0.1:0", "--users", str(users),
             "--backbone", backbone_uri, "--requests", requests_uri, "--mode", "latency",
             "--json", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = []
        listening = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if '"listening"' in line:
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(10):
            self.stop()
            pytest.fail("the distributor did not start:\n" + "\n".join(self.lines))
        line = next(l for l in self.lines if '"listening"' in l)
        self.address = json.loads(line)["listening"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def net(tmp_path):
    """(distributor, backbone, requests): alice may see AAA.* and BBB.*."""
    bb, rq = backbone()
    d = Distributor(tmp_path, bb, rq, ["AAA.*", "BBB.*"])
    yield d, bb, rq
    d.stop()


def pump(prov, cons, until, seconds=8.0, what="events"):
    """Drives the provider and polls the consumer until `until(events)` holds."""
    got = []
    deadline = time.monotonic() + seconds
    while not until(got):
        assert time.monotonic() < deadline, f"no {what} within {seconds} s: {got[-20:]}"
        prov.do_work()
        got.extend(cons.poll(timeout=0.002))
    return got


def test_a_python_provider_and_consumer_exchange_exact_values(net):
    dist, bb, rq = net
    quotim = datetime.datetime(2026, 11, 27, 14, 30, 0, 123456, tzinfo=datetime.timezone.utc)
    trade_ns = 1_795_789_800_123_456_789  # 2026-11-27T14:30:00.123456789Z
    images = {
        "AAA.O": {"BID": Decimal("189.2101"), "ASK": Decimal("189.2200"), "BIDSIZE": 300,
                  "DSPLY_NAME": "APPLE", "CURRENCY": 840, "QUOTIM": quotim,
                  "TRDTIM_1": trade_ns, "#9001": "padding"},
        "BBB.O": {"BID": Decimal("0.000000000001"), "ASK": Decimal("5E+6"), "BIDSIZE": -7,
                  "DSPLY_NAME": "BANANA", "CURRENCY": 978},
        "ZZZ.O": {"BID": Decimal("1.5"), "ASK": Decimal("1.6")},
    }
    with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
        assert "authenticated" in prov.sealing
        # The provider publishes first; the distributor asks it for the images it missed.
        for item, fields in images.items():
            prov.refresh(item, fields)
        cons = md.Consumer([dist.address], user="alice", token=TOKEN)
        cons_ns = md.Consumer(dist.address, user="alice", token=TOKEN.encode(), times="ns",
                              busy_poll_us=50)
        assert cons.is_logged_in and cons.fileno() >= 0 and cons.distributor == dist.address
        req = cons.open("FEED1", ["AAA.O", "ZZZ.O", "B*"])
        cons_ns.open("FEED1", "AAA.O")

        def refreshed(evs, items=("AAA.O", "BBB.O")):
            return all(any(e.kind == "refresh" and e.item == i for e in evs) for i in items)

        got = pump(prov, cons, refreshed, what="images of AAA.O and BBB.O")
        got_ns = pump(prov, cons_ns, lambda evs: refreshed(evs, ["AAA.O"]))
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        trade_time = epoch + datetime.timedelta(microseconds=trade_ns // 1000)
        for e in got:
            if e.kind == "refresh":
                # Times given as int nanoseconds arrive as datetime (to the microsecond).
                assert e.fields == {**images[e.item], **(
                    {"TRDTIM_1": trade_time} if e.item == "AAA.O" else {})}, e
                assert e.item_seq == 0 and e.state is None
        # Exactly: same digits, same exponent, same text.
        aaa = next(e for e in got if e.kind == "refresh" and e.item == "AAA.O")
        assert str(aaa.fields["BID"]) == "189.2101" and str(aaa.fields["ASK"]) == "189.2200"
        assert aaa.fields["QUOTIM"].tzinfo is not None and aaa.fields["QUOTIM"] == quotim
        assert aaa.fields["#9001"] == "padding"
        aaa_ns = next(e for e in got_ns if e.kind == "refresh")
        assert aaa_ns.fields["TRDTIM_1"] == trade_ns
        assert aaa_ns.fields["QUOTIM"] == int(quotim.timestamp()) * 10**9 + 123_456_000

        # Updates in every form a price may be given: Decimal, str, int, float.
        published = {}  # (item, item_seq) -> fields as they must arrive
        forms = [lambda n: Decimal(f"189.{2101 + n:04d}"), lambda n: f"-{n}.5",
                 lambda n: 190 + n, lambda n: float(f"{189 + n}.21")]
        for n in range(300):
            item = ("AAA.O", "BBB.O", "ZZZ.O")[n % 3]
            given = forms[n % 4](n)
            fields = {"BID": given, "BIDSIZE": n}
            seq = prov.item_seq(item)
            while True:
                try:
                    prov.update(item, fields)
                    break
                except peregrine.BackPressured:
                    prov.do_work()
            want = Decimal(repr(given)) if isinstance(given, float) else Decimal(given)
            published[(item, seq)] = {"BID": want, "BIDSIZE": n}
            prov.do_work()
            got.extend(cons.poll(timeout=0))

        def all_updates(evs):
            return sum(e.kind == "update" for e in evs) >= 200

        got += pump(prov, cons, lambda evs: all_updates(got + evs), what="200 updates")
        updates = [e for e in got if e.kind == "update"]
        assert len(updates) == 200, [e for e in got if e.kind != "update"][-5:]
        for e in updates:
            want = published[(e.item, e.item_seq)]
            assert e.fields == want, e
            assert str(e.fields["BID"]) == str(want["BID"]), e
        assert {e.item for e in updates} == {"AAA.O", "BBB.O"}
        # ZZZ.O: not entitled, and nothing of it ever arrived.
        zzz = [e for e in got if e.item == "ZZZ.O"]
        assert [(e.kind, e.state, e.request) for e in zzz] == [("status", "not-entitled", req)]
        assert "ZZZ.O" in zzz[0].text
        assert not [e for e in got if e.kind in ("gap", "disconnected", "conflated")]
        c = cons.counters()
        assert c["gaps"] == 0 and c["updates"] == 200 and c["connections"] == 1

        # A status, and the request closed: nothing more of AAA.O.
        prov.status("AAA.O", "stale", "feed halted")
        st = pump(prov, cons, lambda evs: any(e.kind == "status" for e in evs))
        assert [(e.item, e.state, e.text) for e in st if e.kind == "status"] == [
            ("AAA.O", "stale", "feed halted")]
        cons.close(req)
        # The distributor handles one consumer's messages in order: once a later request is
        # answered, the CLOSE was applied (the backbone's REFRESH below could otherwise reach
        # the distributor before it).
        probe = cons.open("FEED1", "ZZZ.O")
        pump(prov, cons, lambda evs: any(e.kind == "status" and e.request == probe for e in evs))
        prov.refresh("AAA.O", images["AAA.O"])
        late = []
        for _ in range(100):
            prov.do_work()
            late.extend(cons.poll(timeout=0.002))
        assert not [e for e in late if e.item == "AAA.O"], late
        with pytest.raises(ValueError, match="request 99 is not open"):
            cons.close(99)
        cons.disconnect()
        cons_ns.disconnect()
        with pytest.raises(peregrine.Closed):
            cons.poll(0)


def test_an_events_fields_are_made_once_when_read(net):
    dist, bb, rq = net
    with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
        prov.refresh("AAA.O", BID=Decimal("1.25"), ASKSIZE=4)
        with md.Consumer(dist.address, "alice", TOKEN) as cons:
            cons.open("FEED1", "AAA.O")
            evs = pump(prov, cons, lambda evs: any(e.kind == "refresh" for e in evs))
            e = next(e for e in evs if e.kind == "refresh")
            assert e.fields is e.fields
            assert e.fields == {"BID": Decimal("1.25"), "ASKSIZE": 4}
            assert "AAA.O" in repr(e) and "BID=1.25" in repr(e)
            assert e.timestamp_ns > 0 and e.solicited in (True, False)


def test_poll_releases_the_gil_while_it_waits(net):
    dist, _, _ = net
    with md.Consumer(dist.address, "alice", TOKEN) as cons:
        ticks = 0
        stop = False

        def spin():
            nonlocal ticks
            while not stop:
                ticks += 1

        t = threading.Thread(target=spin)
        t.start()
        while ticks == 0:
            time.sleep(0.001)
        t0 = time.monotonic()
        before = ticks
        assert cons.poll(timeout=0.3) == []
        during = ticks - before
        waited = time.monotonic() - t0
        stop = True
        t.join()
        assert waited >= 0.29
        # With the GIL held for the whole wait, the other thread could not have run at all.
        assert during > 0, "another thread did not run during a 0.3 s poll"


def test_a_wrong_token_is_refused_and_a_bad_address_is_an_error(net):
    dist, _, _ = net
    with pytest.raises(md.LoginRefused, match="login refused"):
        md.Consumer(dist.address, "alice", "wrong")
    assert issubclass(md.LoginRefused, md.MarketDataError)
    assert issubclass(md.MarketDataError, peregrine.PeregrineError)
    with pytest.raises(ValueError, match="HOST:PORT"):
        md.Consumer("no-port", "alice", TOKEN)
    with pytest.raises(ValueError, match="times="):
        md.Consumer(dist.address, "alice", TOKEN, times="float")
    with md.Consumer(dist.address, "alice", TOKEN) as cons:
        with pytest.raises(ValueError, match="'bad item'|\"bad item\""):
            cons.open("FEED1", ["bad item"])
        with pytest.raises(ValueError, match="service"):
            cons.open("FEED 1", ["AAA.O"])


def test_bad_input_raises_value_error_naming_the_value():
    bb, rq = backbone()
    with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
        with pytest.raises(ValueError, match="AAA.O: an update before the item's first refresh"):
            prov.update("AAA.O", {"BID": 1})
        with pytest.raises(ValueError, match=r"DSPLY_NAME: Decimal\('189.21'\) is not a str"):
            prov.refresh("AAA.O", {"DSPLY_NAME": Decimal("189.21")})
        with pytest.raises(ValueError, match='"NOPE" is not in the dictionary'):
            prov.refresh("AAA.O", {"NOPE": 1})
        with pytest.raises(ValueError, match="\"AAA O\": holds the character ' '"):
            prov.refresh("AAA O", {"BID": 1})
        with pytest.raises(ValueError, match="BID: '1.0000000000001' has 13 decimal places"):
            prov.refresh("AAA.O", {"BID": "1.0000000000001"})
        with pytest.raises(ValueError, match="BID: 0.30000000000000004 has 17 decimal places"):
            prov.refresh("AAA.O", {"BID": 0.1 + 0.2})
        with pytest.raises(ValueError, match="BID: 'abc' is not a decimal number"):
            prov.refresh("AAA.O", {"BID": "abc"})
        with pytest.raises(ValueError, match="BID: 99999999999999999999 is too large"):
            prov.refresh("AAA.O", {"BID": 99999999999999999999})
        with pytest.raises(ValueError, match="BIDSIZE: 1.5 is not an int"):
            prov.refresh("AAA.O", {"BIDSIZE": 1.5})
        with pytest.raises(ValueError, match="BID: True is not a price"):
            prov.refresh("AAA.O", {"BID": True})
        with pytest.raises(ValueError, match="QUOTIM: .* is a naive datetime"):
            prov.refresh("AAA.O", {"QUOTIM": datetime.datetime(2026, 1, 1)})
        with pytest.raises(ValueError, match="CURRENCY: 'XXX' is not a value of this enum.*USD"):
            prov.refresh("AAA.O", {"CURRENCY": "XXX"})
        with pytest.raises(ValueError, match="CURRENCY: 70000 is not an enum code"):
            prov.refresh("AAA.O", {"CURRENCY": 70000})
        with pytest.raises(ValueError, match="given twice"):
            prov.refresh("AAA.O", {"BID": 1, "#22": 2})
        with pytest.raises(ValueError, match="DSPLY_NAME: .* 256 bytes"):
            prov.refresh("AAA.O", {"DSPLY_NAME": "x" * 256})
        with pytest.raises(ValueError, match='state "ok"'):
            prov.status("AAA.O", "ok")
        with pytest.raises(TypeError, match="dict"):
            prov.refresh("AAA.O", 42)
        # Nothing refused was kept: the item is still unknown.
        assert prov.item_seq("AAA.O") is None and prov.counters()["refreshes"] == 0
        # Every accepted form of every type.
        prov.refresh("AAA.O", {"BID": 189.21, "ASK": "189.22", "TRDPRC_1": 189, 12: Decimal("2"),
                               "CURRENCY": "USD", "QUOTIM": 0, "DSPLY_NAME": "A"})
        prov.update("AAA.O", BID=Decimal("1E+9"), ASK="1.000000000000000",
                    QUOTIM=datetime.datetime.now(datetime.timezone.utc))
        assert prov.item_seq("AAA.O") == 2 and prov.items() == [("AAA.O", 1)]
    with pytest.raises(peregrine.Closed):
        prov.update("AAA.O", {"BID": 1})
    with pytest.raises(ValueError, match="not-a-file"):
        md.Provider("FEED1", backbone=bb, requests=rq, dictionary="/not-a-file")
    with pytest.raises(ValueError, match="service"):
        md.Provider("FEED 1", backbone=bb, requests=rq)


def test_the_dictionary_lists_names_ids_and_types():
    d = md.dictionary()
    assert d["BID"] == {"fid": 22, "type": "price", "values": {}}
    assert d["CURRENCY"]["values"][840] == "USD"
    assert d["QUOTIM"]["type"] == "time"


def test_the_examples_publish_the_sample_ticks_and_show_a_board(tmp_path):
    bb, rq = backbone()
    dist = Distributor(tmp_path, bb, rq, ["*"])
    provider = None
    try:
        board = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "md_board.py"), "--connect", dist.address,
             "--user", "alice", "--token", TOKEN, "--plain", "--count", "40", "--seconds", "20",
             "AAA.O", "AAB.N", "AAC.L"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Logged in and watching before the first tick is published.
        first = board.stdout.readline()
        assert first.startswith("# board: FEED1 on "), first + board.stderr.read()
        provider = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "md_provider.py"), str(SAMPLE_TICKS),
             "--backbone", bb, "--requests", rq, "--speed", "50", "--linger", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = board.communicate(timeout=30)
        assert board.returncode == 0, err
        rows = [l.split() for l in out.splitlines() if l and not l.startswith("#")]
        # Items not published yet when opened: "not-found", kept open, then their refresh.
        assert {r[2] for r in rows if r[1] == "status"} <= {"not-found"}, out
        assert len([r for r in rows if r[1] in ("refresh", "update")]) == 40, out
        # Every price shown is one of the sample file's, as written there.
        sample = SAMPLE_TICKS.read_text()
        for r in rows:
            if r[1] in ("refresh", "update"):
                assert r[0] in ("AAA.O", "AAB.N", "AAC.L"), r
                for cell in r[2:6]:
                    value = cell.rstrip("*")
                    assert value == "-" or f"={value}" in sample, (cell, r)
    finally:
        if provider is not None:
            provider.terminate()
            p_out, p_err = provider.communicate(timeout=10)
            assert "published" in p_err or "published" in p_out, p_err
        dist.stop()


def test_the_provider_example_names_the_line_of_a_bad_tick(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "# comment\n"
        "2026-11-27T14:30:00.000000Z,FEED1,AAA.O,BID=189.21\n"
        "2026-11-27T14:30:00.100000Z,FEED1,AAA.O,BIDSIZE=12.5\n"
    )
    bb, rq = backbone()
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "md_provider.py"), str(bad), "--backbone", bb,
         "--requests", rq, "--speed", "0", "--linger", "0"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 2, out.stderr
    assert f"{bad}:3:" in out.stderr and "BIDSIZE" in out.stderr and "12.5" in out.stderr


def make_pki(tmp_path):
    """A CA, the distributor's certificate (localhost, 127.0.0.1), dora's client certificate
    (CN=dora, O=Desk) and another CA, made with openssl as docs/operations.md shows."""
    import shutil
    openssl = shutil.which("openssl")
    if not openssl:
        why = "openssl is missing (apt-get install openssl)"
        if os.environ.get("PEREGRINE_REQUIRE_TOOLS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    d = tmp_path / "pki"
    d.mkdir()

    def run(*args):
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca in ("ca", "other"):
        run("req", "-x509", *ec, "-days", "30", "-subj", f"/CN={ca} test CA",
            "-keyout", f"{ca}.key", "-out", f"{ca}.crt")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subj, ext in (("md", "/CN=md", ["-extfile", "san.ext"]),
                            ("dora", "/CN=dora/O=Desk", ["-extfile", "client.ext"])):
        run("req", *ec, "-subj", subj, "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", *ext, "-out", f"{name}.crt")
        os.chmod(d / f"{name}.key", 0o600)
    return d


def test_a_consumer_over_tls_and_a_user_identified_by_its_certificate(tmp_path):
    pki = make_pki(tmp_path)
    bb, rq = backbone()
    dora = '\n[users.dora]\ncert_subject = "CN=dora,O=Desk"\nitems = ["*"]\n'
    d = Distributor(tmp_path, bb, rq, ["AAA.*"], more_users=dora,
                    args=["--tls-cert", str(pki / "md.crt"), "--tls-key", str(pki / "md.key"),
                          "--tls-client-ca", str(pki / "ca.crt")])
    try:
        prov = md.Provider("FEED1", backbone=bb, requests=rq)
        prov.refresh("AAA.O", {"BID": Decimal("189.21")})
        with md.Consumer(d.address, "alice", TOKEN, tls_ca=str(pki / "ca.crt")) as cons:
            cons.open("FEED1", "AAA.O")
            got = pump(prov, cons, lambda evs: any(e.kind == "refresh" for e in evs))
            ref = next(e for e in got if e.kind == "refresh")
            assert ref.fields["BID"] == Decimal("189.21")
        with md.Consumer(d.address, "dora", "-", tls_ca=str(pki / "ca.crt"),
                         tls_cert=str(pki / "dora.crt"), tls_key=str(pki / "dora.key")) as cons:
            cons.open("FEED1", "AAA.O")
            pump(prov, cons, lambda evs: any(e.kind == "refresh" for e in evs))
        # A consumer trusting another CA is refused, naming why.
        with pytest.raises(md.MarketDataError, match="UnknownIssuer"):
            md.Consumer(d.address, "alice", TOKEN, tls_ca=str(pki / "other.crt"))
        # dora without her certificate is refused.
        with pytest.raises(md.LoginRefused):
            md.Consumer(d.address, "dora", "-", tls_ca=str(pki / "ca.crt"))
        with pytest.raises(ValueError, match="go together"):
            md.Consumer(d.address, "alice", TOKEN, tls_ca=str(pki / "ca.crt"),
                        tls_cert=str(pki / "dora.crt"))
        prov.close()
    finally:
        d.stop()


def test_a_snapshot_pause_and_resume_and_the_ping_round_trip(net):
    dist, bb, rq = net
    with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
        prov.refresh("AAA.O", {"BID": Decimal("1.00")})
        prov.refresh("BBB.O", {"BID": Decimal("2.00")})
        cons = md.Consumer([dist.address], user="alice", token=TOKEN, ping_interval_ms=200)
        assert cons.ping_interval_ms == 1000, "raised to the distributor's minimum"
        # A streaming request; once its images came, they are in the distributor's cache.
        req = cons.open("FEED1", ["AAA.O", "BBB.O"])
        first = pump(prov, cons, lambda g: len([e for e in g if e.kind == "refresh"]) == 2,
                     what="the request's images")
        # The directory: FEED1, up once the provider was heard, open to alice (told at the
        # login `Consumer()` waited for, or as a "service" event after it).
        services = [(e.item, e.state, e.may_open) for e in first if e.kind == "service"]
        assert (cons.services.get("FEED1") == {"up": True, "may_open": True}
                or ("FEED1", "up", True) in services), (cons.services, services)
        # A snapshot: each image flagged, then "closed" with no item ends it.
        snap = cons.snapshot("FEED1", ["AAA.O", "BBB.O"])
        got = pump(prov, cons, lambda g: any(e.kind == "status" and e.request == snap
                                             for e in g), what="the snapshot's end")
        images = [e for e in got if e.kind == "refresh"]
        assert sorted(e.item for e in images) == ["AAA.O", "BBB.O"]
        assert all(e.snapshot for e in images)
        end = [e for e in got if e.kind == "status"][-1]
        assert (end.item, end.state, end.text) == ("", "closed", "snapshot complete")
        # The request paused: updates wait in the distributor; resume sends the latest. The
        # distributor reads a client's messages in order, so once a snapshot asked after the
        # PAUSE is answered the PAUSE is in force; a second, unpaused consumer shows when the
        # distributor has the updates. No step depends on how fast a process is.
        watcher = md.Consumer([dist.address], user="alice", token=TOKEN)
        watcher.open("FEED1", "AAA.O")
        pump(prov, watcher, lambda g: any(e.kind == "refresh" for e in g),
             what="the watcher's image")
        cons.pause(req)
        fence = cons.snapshot("FEED1", "AAA.O")
        quiet = pump(prov, cons, lambda g: any(e.kind == "status" and e.request == fence
                                               for e in g), what="the snapshot after the pause")
        for i in range(3, 6):
            prov.update("AAA.O", {"BID": Decimal(f"{i}.00")})
        pump(prov, watcher, lambda g: any(e.kind == "update" and e.fields.get("BID") == Decimal("5.00")
                                          for e in g), what="the updates at the distributor")
        quiet.extend(cons.poll(timeout=0.1))
        assert not [e for e in quiet if e.kind == "update"], quiet
        watcher.disconnect()
        cons.resume(req)
        got = pump(prov, cons, lambda g: any(e.kind == "refresh" for e in g),
                   what="the image on resume")
        image = next(e for e in got if e.kind == "refresh")
        assert image.conflated and image.fields["BID"] == Decimal("5.00")
        # A view: BIDSIZE only; an update of BID alone is not sent, one of BIDSIZE is.
        viewer = md.Consumer([dist.address], user="alice", token=TOKEN)
        sizes = viewer.open("FEED1", "AAA.O", view=["BIDSIZE"])
        got = pump(prov, viewer, lambda g: any(e.kind == "refresh" for e in g),
                   what="the viewed image")
        assert all(set(e.fields) <= {"BIDSIZE"} for e in got if e.kind in ("refresh", "update"))
        prov.update("AAA.O", {"BID": Decimal("6.00")})
        prov.update("AAA.O", {"BIDSIZE": 8})
        got = pump(prov, viewer, lambda g: any(e.kind == "update" for e in g),
                   what="an update of the viewed field")
        updates = [e for e in got if e.kind == "update"]
        assert [e.fields for e in updates] == [{"BIDSIZE": 8}], updates
        assert all(e.request == sizes for e in updates), updates
        # A second request of the item with another view: the distributor sends the union,
        # and each request gets its own events with its own fields.
        bids = viewer.open("FEED1", "AAA.O", view=["BID"])
        got = pump(prov, viewer, lambda g: any(e.kind == "refresh" and e.request == bids
                                               for e in g), what="the second view's image")
        assert all(set(e.fields) <= ({"BID"} if e.request == bids else {"BIDSIZE"})
                   for e in got if e.kind in ("refresh", "update")), got
        prov.update("AAA.O", {"BID": Decimal("7.00")})
        prov.update("AAA.O", {"BIDSIZE": 9})
        got = pump(prov, viewer, lambda g: any(e.kind == "update" and e.fields.get("BIDSIZE") == 9
                                               for e in g), what="updates of both views")
        updates = [(e.request, e.fields) for e in got if e.kind == "update"]
        assert updates == [(bids, {"BID": Decimal("7.00")}), (sizes, {"BIDSIZE": 9})], updates
        with pytest.raises(ValueError, match="NOPE"):
            viewer.open("FEED1", "AAA.O", view=["NOPE"])
        viewer.disconnect()
        # The PINGs at the agreed interval time the round trip.
        deadline = time.monotonic() + 5
        while cons.rtt_us is None:
            assert time.monotonic() < deadline, "no round trip timed"
            prov.do_work()
            cons.poll(timeout=0.05)
        assert cons.rtt_us > 0 and cons.counters()["pings_sent"] >= 1
        cons.disconnect()


def test_a_post_reaches_the_python_provider_and_one_ack_answers_it(tmp_path):
    bb, rq = backbone()
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    bob = f'\n[users.bob]\ntoken_sha256 = "{digest}"\nitems = ["*"]\n'
    served = tmp_path / "served.toml"
    served.write_text('[fields.MY_BID]\nfid = 22\ntype = "price"\n'
                      '[fields.MY_SIZE]\nfid = 30\ntype = "int"\n')
    # alice may post to AAA.*, bob to nothing.
    d = Distributor(tmp_path, bb, rq, ["AAA.*"], more_users=bob,
                    args=("--dictionary", str(served)), alice_extra='post = ["AAA.*"]\n')
    try:
        with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
            prov.refresh("AAA.O", {"BID": Decimal("1.00"), "BIDSIZE": 1})
            cons = md.Consumer([d.address], user="alice", token=TOKEN)
            # Fields are named by the distributor's dictionary, downloaded at login.
            assert cons.downloaded_dictionary()["MY_BID"]["fid"] == 22
            cons.open("FEED1", "AAA.O")
            got = pump(prov, cons, lambda g: any(e.kind == "refresh" for e in g),
                       what="the image")
            image = next(e for e in got if e.kind == "refresh")
            assert image.fields == {"MY_BID": Decimal("1.00"), "MY_SIZE": 1}, image.fields
            # An entitled post: the provider takes it and publishes it; one ack answers it.
            pid = cons.post("FEED1", "AAA.O", {"MY_BID": Decimal("1.25")})
            deadline = time.monotonic() + 8
            post = None
            while post is None:
                assert time.monotonic() < deadline, "the post did not reach the provider"
                prov.do_work()
                post = prov.poll_post()
                cons.poll(timeout=0.002)
            assert (post.user, post.item, post.refresh) == ("alice", "AAA.O", False)
            assert post.fields == {"BID": Decimal("1.25")}, "the provider's own names"
            prov.publish_post(post)
            with pytest.raises(ValueError, match="answered already"):
                prov.accept(post)
            got = pump(prov, cons, lambda g: any(e.kind == "ack" for e in g)
                       and any(e.kind == "update" for e in g), what="the ack and the update")
            acks = [e for e in got if e.kind == "ack"]
            updates = [e for e in got if e.kind == "update"]
            assert [(a.post_id, a.item, a.state) for a in acks] == [(pid, "AAA.O", "accepted")]
            assert updates[-1].fields == {"MY_BID": Decimal("1.25")}
            # Refused by the provider, with its reason.
            pid = cons.post("FEED1", "AAA.O", MY_SIZE=5)
            deadline = time.monotonic() + 8
            while (post := prov.poll_post()) is None:
                assert time.monotonic() < deadline, "the second post did not reach the provider"
                prov.do_work()
                cons.poll(timeout=0.002)
            prov.refuse(post, "sizes are the exchange's")
            got = pump(prov, cons, lambda g: any(e.kind == "ack" for e in g), what="the nack")
            nack = next(e for e in got if e.kind == "ack")
            assert (nack.post_id, nack.state, nack.text) == (pid, "refused",
                                                             "sizes are the exchange's")
            # Not entitled: answered by the distributor, never seen by the provider.
            other = md.Consumer([d.address], user="bob", token=TOKEN)
            pid = other.post("FEED1", "AAA.O", {"MY_BID": 2})
            got = pump(prov, other, lambda g: any(e.kind == "ack" for e in g), what="bob's nack")
            nack = next(e for e in got if e.kind == "ack")
            assert (nack.post_id, nack.state) == (pid, "not-entitled"), nack.text
            prov.do_work()
            assert prov.poll_post() is None
            assert prov.counters()["posts"] == 2
            other.disconnect()
            cons.disconnect()
    finally:
        d.stop()


def test_the_websocket_example_watches_a_view_and_posts(tmp_path):
    pytest.importorskip("websocket", reason="websocket-client (crates/cli/tests/python.rs installs it)")
    bb, rq = backbone()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        ws_port = s.getsockname()[1]
    d = Distributor(tmp_path, bb, rq, ["AAA.*"], args=("--websocket", f"127.0.0.1:{ws_port}"),
                    alice_extra='post = ["AAA.*"]\n')
    url = f"ws://127.0.0.1:{ws_port}/ws"
    try:
        with md.Provider("FEED1", backbone=bb, requests=rq) as prov:
            prov.refresh("AAA.O", {"BID": Decimal("1.00"), "ASK": Decimal("1.02"), "BIDSIZE": 5})
            watcher = subprocess.Popen(
                [sys.executable, str(EXAMPLES / "md_ws.py"), "--url", url, "--user", "alice",
                 "--token", TOKEN, "--view", "BID", "--count", "3", "--seconds", "20",
                 "AAA.O", "ZZZ.O"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 20
            i = 0
            while watcher.poll() is None:
                assert time.monotonic() < deadline, "the example did not finish"
                prov.do_work()
                i += 1
                if i % 20 == 0:
                    prov.update("AAA.O", {"BID": Decimal(f"1.{i:02d}"), "BIDSIZE": i})
                time.sleep(0.005)
            out, err = watcher.communicate()
            assert watcher.returncode == 0, err
            lines = out.splitlines()
            data = [l for l in lines if l.startswith("AAA.O")]
            # The image first, its price exact (1.00, not 1.0); then updates of the view.
            assert data[0].startswith("AAA.O refresh BID=1.") and len(data[0].split("=")[1]) == 4, out
            assert any(l.startswith('ZZZ.O status Suspect NotEntitled') for l in lines), out
            assert all(set(kv.split("=")[0] for kv in l.split()[2:]) == {"BID"} for l in data), out
            # A post through the example: the provider answers it.
            poster = subprocess.Popen(
                [sys.executable, str(EXAMPLES / "md_ws.py"), "--url", url, "--user", "alice",
                 "--token", TOKEN, "--post", "AAA.O", "BID=2.50"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 20
            while poster.poll() is None:
                assert time.monotonic() < deadline, "the post was not answered"
                prov.do_work()
                post = prov.poll_post()
                if post is not None:
                    prov.publish_post(post)
                time.sleep(0.005)
            out, err = poster.communicate()
            assert poster.returncode == 0 and out.strip() == "ACK AAA.O accepted", out + err
    finally:
        d.stop()


def test_two_numbered_providers_are_one_stream_and_either_may_close(net):
    """A/B feeds: two providers numbering alike; each update arrives once, and when one
    closes the other carries on with nothing stale."""
    dist, bb, rq = net
    a = md.Provider("FEED1", backbone=bb, requests=rq)
    b = md.Provider("FEED1", backbone=bb, requests=rq)
    for p in (a, b):
        p.refresh_numbered("AAA.O", 0, {"BID": 100})
    with pytest.raises(ValueError, match="item_seq 0 is not after the last one sent"):
        a.update_numbered("AAA.O", 0, {"BID": 1})
    with md.Consumer(dist.address, "alice", TOKEN) as cons:
        cons.open("FEED1", "AAA.O")
        got = pump(a, cons, lambda evs: any(e.kind == "refresh" for e in evs), what="image")
        got += pump(b, cons, lambda evs: True)

        def publish(provs, ks):
            for k in ks:
                for p in provs[k % len(provs):] + provs[:k % len(provs)]:
                    while True:
                        try:
                            p.update_numbered("AAA.O", k, {"BID": 100 + k})
                            break
                        except peregrine.BackPressured:
                            p.do_work()
                got.extend(cons.poll(timeout=0))

        def updates(evs):
            return [(e.item_seq, e.fields["BID"]) for e in evs if e.kind == "update"]

        publish([a, b], range(1, 201))
        got += pump(b, cons, lambda evs: len(updates(got + evs)) >= 200, what="200 updates")
        a.close()
        publish([b], range(201, 301))
        got += pump(b, cons, lambda evs: len(updates(got + evs)) >= 300, what="300 updates")
        assert updates(got) == [(k, 100 + k) for k in range(1, 301)]
        stale = [e for e in got if e.kind == "status" and e.state == "stale"]
        assert stale == []
    b.close()


def test_a_warm_standby_consumer_fails_over_with_nothing_stale_and_nothing_twice(tmp_path):
    """Two distributors of one backbone; a consumer with warm_standby=True delivers from the
    first and stands by, paused, on the second. The first stops: the standby takes over, no
    item goes stale and no item_seq comes twice or backwards."""
    bb, rq = backbone()
    for d in ("1", "2"):
        (tmp_path / d).mkdir()
    d1 = Distributor(tmp_path / "1", bb, rq, ["AAA.*"])
    try:
        d2 = Distributor(tmp_path / "2", bb, rq, ["AAA.*"])
    except BaseException:
        d1.stop()
        raise
    prov = md.Provider("FEED1", backbone=bb, requests=rq)
    try:
        with pytest.raises(ValueError, match="warm_standby=True takes two addresses"):
            md.Consumer(d1.address, "alice", TOKEN, warm_standby=True)
        for i in range(3):
            prov.refresh_numbered(f"AAA.{i}", 0, {"BID": 100})
        with md.Consumer([d1.address, d2.address], "alice", TOKEN,
                         warm_standby=True) as cons:
            assert cons.standby["failovers"] == 0
            with pytest.raises(ValueError, match="not available on a warm standby consumer"):
                cons.pause(0)
            cons.open("FEED1", "AAA.*")
            got = pump(prov, cons, lambda evs: cons.standby["standing_by"],
                       what="the standby standing by")

            def publish(ks):
                for k in ks:
                    for i in range(3):
                        while True:
                            try:
                                prov.update_numbered(f"AAA.{i}", k, {"BID": 100 + k})
                                break
                            except peregrine.BackPressured:
                                prov.do_work()
                    got.extend(cons.poll(timeout=0))

            def last(evs, i):
                seqs = [e.item_seq for e in evs
                        if e.kind in ("refresh", "update") and e.item == f"AAA.{i}"]
                return seqs[-1] if seqs else None

            publish(range(1, 101))
            got += pump(prov, cons, lambda evs: all(last(got + evs, i) == 100 for i in range(3)),
                        what="update 100 of each item")
            d1.stop()
            publish(range(101, 201))
            got += pump(prov, cons, lambda evs: all(last(got + evs, i) == 200 for i in range(3)),
                        what="update 200 of each item after the failover")
            assert cons.standby["failovers"] == 1
            assert cons.distributor == d2.address
            assert any(e.kind == "disconnected" for e in got)
            for i in range(3):
                seqs = [e.item_seq for e in got
                        if e.kind in ("refresh", "update") and e.item == f"AAA.{i}"]
                assert seqs == sorted(set(seqs)), f"AAA.{i}: twice or backwards: {seqs}"
            stale = [e for e in got if e.kind == "status" and e.state == "stale"]
            assert stale == []
    finally:
        prov.close()
        d1.stop()
        d2.stop()
