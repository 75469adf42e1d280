#!/usr/bin/env python3
"""Publishes a file of ticks as a market data provider (peregrine.md.Provider).

    python3 examples/md_provider.py crates/md/ticks/sample.csv --speed 10

Each line of the file is one tick: `time,service,item` then `FIELD=value` pairs, for example

    2026-11-27T14:30:00.000000Z,FEED1,AAA.O,BID=189.21,ASK=189.22,BIDSIZE=300

Field names and types come from the dictionary (the built-in crates/md/fields.toml, or
--dictionary): prices as decimals (sent exactly, never through a float), ints, enum codes or
names (CURRENCY=USD), times in UTC (2026-11-27T14:30:00.123456789Z) or integer nanoseconds,
strings as they are (quote the whole cell, "DSPLY_NAME=A, B", for a comma). Blank lines and
lines starting with # are skipped. The first tick of an item is its refresh (its full image),
later ones are updates of the fields they name.

The whole file is checked before anything is published: an error names the file, the line
and the value (`ticks.csv:12: BIDSIZE=12.5: ...`), and the exit status is 2.

Ticks are paced by their times: --speed 1 (the default) replays them as recorded, --speed 10
ten times faster, --speed 0 as fast as the backbone takes them. Back-pressure (the backbone's
slowest subscriber has no room) is waited out with do_work, never dropped. After the last
tick the provider keeps answering the distributors' image requests (so a consumer that comes
later still gets every item's image) for --linger seconds, or until interrupted by default.
One provider per service of the file, all on one backbone.
"""

import argparse
import csv
import re
import signal
import sys
import time
from decimal import Decimal, InvalidOperation

import peregrine
from peregrine import md

TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|\+00:?00)$"
)
SERVICE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}$")
ITEM_RE = re.compile(r"[!-)+->@-~]{1,128}$")  # printable ASCII, no space, '*' or '?'


class BadTick(Exception):
    pass


def days_from_civil(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def utc_ns(text):
    """Nanoseconds since the epoch of an ISO 8601 UTC time (to the nanosecond)."""
    m = TIME_RE.match(text)
    if not m:
        raise BadTick(f"{text!r} is not a UTC time: give 2026-11-27T14:30:00.000000Z")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 60 and y >= 1970):
        raise BadTick(f"{text!r} is not a valid UTC time after 1970")
    frac = (m.group(7) or "").ljust(9, "0")
    return ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 10**9) + int(frac)


def parse_value(name, text, field):
    """A field's text as the Python value its dictionary type takes."""
    kind = field["type"]
    try:
        if kind == "price":
            value = Decimal(text)
            if not value.is_finite():
                raise InvalidOperation
            return value
        if kind == "int":
            return int(text)
        if kind == "enum":
            if text.isdigit():
                return int(text)
            if text in field["values"].values():
                return text
            names = ", ".join(field["values"].values()) or "none"
            raise BadTick(f"{name}={text}: not a code or name of the enum {name} (names: {names})")
        if kind == "time":
            return int(text) if text.isdigit() else utc_ns(text)
        return text
    except (ValueError, InvalidOperation):
        raise BadTick(f"{name}={text}: not a {kind} (the dictionary's type of {name})") from None


def read_ticks(path, dictionary):
    """Every tick of the file as (line, time_ns, service, item, fields); BadTick names the
    line of the first bad one."""
    ticks = []
    with open(path, newline="") as f:
        for line_no, row in enumerate(csv.reader(f), 1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            try:
                if len(row) < 4:
                    raise BadTick("give time,service,item and at least one FIELD=value")
                when, service, item = (c.strip() for c in row[:3])
                t = utc_ns(when)
                if not SERVICE_RE.match(service):
                    raise BadTick(f"service {service!r}: give 1 to 64 of A-Z a-z 0-9 . _ -")
                if not ITEM_RE.match(item):
                    raise BadTick(
                        f"item {item!r}: give 1 to 128 printable ASCII characters without "
                        "space, '*' or '?'"
                    )
                fields = {}
                for cell in row[3:]:
                    name, eq, text = cell.strip().partition("=")
                    if not eq:
                        raise BadTick(f"{cell!r} is not FIELD=value")
                    if name not in dictionary:
                        raise BadTick(f"{name}: not a field of the dictionary")
                    if name in fields:
                        raise BadTick(f"{name} given twice")
                    fields[name] = parse_value(name, text, dictionary[name])
                if ticks and t < ticks[-1][1]:
                    raise BadTick(f"{when} is earlier than the tick before it")
            except BadTick as e:
                raise BadTick(f"{path}:{line_no}: {e}") from None
            ticks.append((line_no, t, service, item, fields))
    if not ticks:
        raise BadTick(f"{path}: no ticks")
    return ticks


def send(prov, publish, *args):
    """Publishes, waiting out back-pressure with do_work (nothing is ever dropped)."""
    deadline = None
    while True:
        try:
            return publish(*args)
        except peregrine.BackPressured:
            prov.do_work()
            deadline = deadline or time.monotonic() + 10
            if time.monotonic() > deadline:
                raise
            time.sleep(0.0002)


def interrupted(_signum, _frame):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ticks", help="the ticks file (CSV: time,service,item,FIELD=value...)")
    ap.add_argument("--backbone", default=md.DEFAULT_BACKBONE, help="the backbone URI")
    ap.add_argument("--requests", help="where image requests come (default: port + 1)")
    ap.add_argument("--speed", type=float, default=1.0,
                    help="pace: 1 as recorded, 10 ten times faster, 0 as fast as possible")
    ap.add_argument("--linger", type=float, default=None,
                    help="seconds to keep answering image requests after the last tick "
                         "(default: until interrupted)")
    ap.add_argument("--dictionary", help="a dictionary file (default: the built-in one)")
    a = ap.parse_args()
    if a.speed < 0:
        ap.error("--speed: give 0 (as fast as possible) or more")

    try:
        ticks = read_ticks(a.ticks, md.dictionary(a.dictionary))
    except (BadTick, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    # SIGTERM ends it as Ctrl-C does: the summary is printed and the providers closed.
    signal.signal(signal.SIGTERM, interrupted)
    providers = {}
    seen = set()
    refreshes = updates = 0
    done = False
    start = time.monotonic()
    try:
        first_t = ticks[0][1]
        for line_no, t, service, item, fields in ticks:
            prov = providers.get(service)
            if prov is None:
                prov = md.Provider(service, backbone=a.backbone, requests=a.requests,
                                   dictionary=a.dictionary)
                providers[service] = prov
                print(f"providing {service} on {a.backbone}: {prov.sealing}", file=sys.stderr)
            if a.speed > 0:
                due = start + (t - first_t) / 1e9 / a.speed
                while (wait := due - time.monotonic()) > 0:
                    for p in providers.values():
                        p.do_work()
                    time.sleep(min(wait, 0.001))
            try:
                if (service, item) in seen:
                    send(prov, prov.update, item, fields)
                    updates += 1
                else:
                    send(prov, prov.refresh, item, fields)
                    seen.add((service, item))
                    refreshes += 1
            except ValueError as e:
                print(f"error: {a.ticks}:{line_no}: {e}", file=sys.stderr)
                return 2
            prov.do_work()
        print(f"published {refreshes + updates} ticks ({refreshes} refreshes, {updates} "
              f"updates) of {len(seen)} items in {time.monotonic() - start:.2f} s",
              file=sys.stderr)
        done = True
        end = None if a.linger is None else time.monotonic() + a.linger
        while end is None or time.monotonic() < end:
            for p in providers.values():
                p.do_work()
            time.sleep(0.001)
    except KeyboardInterrupt:
        if not done:
            print(f"published {refreshes + updates} ticks ({refreshes} refreshes, {updates} "
                  "updates) before being interrupted", file=sys.stderr)
    finally:
        for p in providers.values():
            c = p.counters()
            print(f"{p.service}: {c['refreshes']} refreshes ({c['solicited_refreshes']} answering "
                  f"{c['image_requests']} image requests), {c['updates']} updates",
                  file=sys.stderr)
            p.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
