"""The README's Python snippets, read out of README.md and run as written, so they cannot drift
from the library.

Only what a test must own is changed: every snippet runs with a shared-memory folder
(PEREGRINE_SHM_DIR) and a topic resolution group (PEREGRINE_RESOLVER_GROUP) of its own, and
the market data snippet's distributor address and backbone become those of a `peregrine
distributor` process started here (user alice, token s3cret, as the README's walkthrough makes).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from test_md import Distributor, backbone

ROOT = Path(__file__).resolve().parents[3]


def snippets():
    """The README's ```python blocks, in order."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def snippet(marker):
    found = [s for s in snippets() if marker in s]
    assert len(found) == 1, f"one README Python snippet holding {marker!r}, not {len(found)}"
    return found[0]


def run(code, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    pid = os.getpid()
    env = dict(
        os.environ,
        PEREGRINE_SHM_DIR=str(shm),
        PEREGRINE_RESOLVER_GROUP=f"239.255.98.{1 + pid % 250}:{15_000 + pid % 5_000}",
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_every_python_snippet_of_the_readme_is_run_here():
    # A new snippet must be given a test below (and this count moved).
    assert len(snippets()) == 2, snippets()


def test_the_messaging_snippet_runs_as_written(tmp_path):
    r = run(snippet("import peregrine\n"), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "0 b'bid 189.20 ask 189.21'" in lines, r.stdout
    assert lines[-1] == "md.eq.MSFT b'bid 420.10'", r.stdout


def test_the_market_data_snippet_runs_as_written(tmp_path):
    bb, rq = backbone()
    dist = Distributor(tmp_path, bb, rq, ["AA*", "MSFT.O"])
    try:
        code = snippet("from peregrine import md")
        ours = code.replace('"127.0.0.1:14500"', f'"{dist.address}"').replace(
            "mcast://239.255.90.1:40900", bb
        )
        assert dist.address in ours and bb in ours and "14500" not in ours, ours
        r = run(ours, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        # What arrived within the snippet's one-second poll: events of the items it opened,
        # AAA.O's image and update among them if they came in time.
        for line in r.stdout.splitlines():
            kind, item, _ = line.split(" ", 2)
            assert kind in ("refresh", "update", "status"), r.stdout
            assert item == "AAA.O" or item.startswith("AAB."), r.stdout
    finally:
        dist.stop()
