#!/usr/bin/env python3
"""A live quote board: a market data consumer (peregrine.md.Consumer) showing a watchlist.

    python3 examples/md_board.py --connect 127.0.0.1:14500 --user alice AAA.O AAB.N 'AAC.*'

It logs in to the distributor (the token from --token or PEREGRINE_MD_TOKEN), opens the
items given (names or globs) and redraws a table of ITEM BID ASK BIDSIZE ASKSIZE (or
--fields) as they change: the cells the item's last message changed are marked (green when
up, red when down, bold otherwise; `*` without a terminal). Prices are shown exactly as
published (decimal.Decimal, never a float). An item's state other than ok (stale,
not-entitled, not-found...) shows in the STATE column.

--plain prints one line per message instead of redrawing, `ITEM KIND VALUE...` with `*` after
each value the message changed and `-` for a value not known yet (`ITEM status STATE "text"`
for a status), for logs and tests. --count N stops after N refreshes and updates, --seconds
S after S seconds; otherwise it runs until interrupted.
"""

import argparse
import signal
import sys
import time
from decimal import Decimal

from peregrine import md

RESET, BOLD, GREEN, RED, DIM = "\x1b[0m", "\x1b[1m", "\x1b[32m", "\x1b[31m", "\x1b[2m"


class Row:
    __slots__ = ("values", "changed", "state", "text", "messages")

    def __init__(self):
        self.values = {}
        self.changed = {}  # field -> "up" | "down" | "new"
        self.state = ""
        self.text = ""
        self.messages = 0


def direction(old, new):
    if isinstance(old, (int, Decimal)) and isinstance(new, (int, Decimal)):
        return "up" if new > old else "down" if new < old else "same"
    return "new"


def show(value):
    return "-" if value is None else str(value)


class Board:
    def __init__(self, fields, plain, out=sys.stdout):
        self.fields = fields
        self.plain = plain
        self.out = out
        self.rows = {}
        self.note = ""
        self.color = not plain and out.isatty()

    def apply(self, ev):
        """Applies one event; returns True for a refresh or update."""
        if ev.kind in ("refresh", "update"):
            row = self.rows.setdefault(ev.item, Row())
            fields = ev.fields
            if ev.kind == "refresh":
                row.values = {}
            row.changed = {
                f: direction(row.values.get(f), fields[f]) for f in self.fields if f in fields
            }
            row.values.update(fields)
            row.state, row.text = "", ""
            row.messages += 1
            if self.plain:
                cells = [show(row.values.get(f)) + ("*" if f in row.changed else "")
                         for f in self.fields]
                print(ev.item, ev.kind, *cells, file=self.out, flush=True)
            return True
        if ev.kind == "status":
            row = self.rows.setdefault(ev.item, Row())
            row.state, row.text, row.changed = ev.state, ev.text, {}
            if self.plain:
                print(ev.item, "status", ev.state, f'"{ev.text}"', file=self.out, flush=True)
        elif ev.kind in ("disconnected", "logged_in", "gap", "conflated"):
            self.note = {
                "disconnected": f"disconnected ({ev.text}): reconnecting",
                "logged_in": f"logged in to {ev.text}",
                "gap": f"gap on {ev.item}: expected {ev.expected}, got {ev.got}",
                "conflated": f"conflated: {ev.items} items, {ev.updates_dropped} updates dropped",
            }[ev.kind]
            if self.plain:
                print("#", self.note, file=self.out, flush=True)
        return False

    def cell(self, row, field, width):
        text = show(row.values.get(field)).rjust(width)
        how = row.changed.get(field)
        if how is None:
            return text
        if not self.color:
            return text[1:] + "*" if text.startswith(" ") else text + "*"
        return {"up": GREEN, "down": RED}.get(how, BOLD) + text + RESET

    def draw(self, header):
        width = 14
        lines = [header, ""]
        lines.append("ITEM".ljust(16) + "".join(f.rjust(width) for f in self.fields) + "  STATE")
        for item in sorted(self.rows):
            row = self.rows[item]
            state = row.state and f"{row.state} {row.text}"
            if self.color and row.state:
                state = DIM + state + RESET
            lines.append(item.ljust(16)
                         + "".join(self.cell(row, f, width) for f in self.fields)
                         + "  " + state)
        lines += ["", self.note]
        self.out.write("\x1b[H\x1b[J" + "\n".join(lines) + "\n")
        self.out.flush()


def stop(_signum, _frame):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("items", nargs="+", help="item names or globs to watch")
    ap.add_argument("--connect", action="append",
                    help="a distributor HOST:PORT (repeat for fail-over; default 127.0.0.1:14500)")
    ap.add_argument("--user", required=True)
    ap.add_argument("--token", help="the user's token (default: PEREGRINE_MD_TOKEN)")
    ap.add_argument("--service", default="FEED1")
    ap.add_argument("--fields", default="BID,ASK,BIDSIZE,ASKSIZE",
                    help="the columns, dictionary names separated by commas")
    ap.add_argument("--count", type=int, help="stop after this many refreshes and updates")
    ap.add_argument("--seconds", type=float, help="stop after this many seconds")
    ap.add_argument("--plain", action="store_true", help="print lines instead of redrawing")
    a = ap.parse_args()
    fields = [f.strip() for f in a.fields.split(",") if f.strip()]
    known = md.dictionary()
    unknown = [f for f in fields if f not in known]
    if unknown:
        ap.error(f"--fields: {', '.join(unknown)} not in the dictionary")

    signal.signal(signal.SIGTERM, stop)
    board = Board(fields, a.plain)
    end = None if a.seconds is None else time.monotonic() + a.seconds
    count = 0
    try:
        cons = md.Consumer(a.connect or ["127.0.0.1:14500"], user=a.user, token=a.token)
    except (md.MarketDataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    header = f"{a.service} on {cons.distributor} as {a.user}: {' '.join(a.items)}"
    try:
        with cons:
            cons.open(a.service, a.items)
            if a.plain:
                print("# board:", header, file=sys.stdout, flush=True)
            drawn = 0.0
            while (a.count is None or count < a.count) and (end is None or time.monotonic() < end):
                wait = 0.1 if end is None else max(0.0, min(0.1, end - time.monotonic()))
                changed = False
                for ev in cons.poll(timeout=wait):
                    changed = True
                    if board.apply(ev):
                        count += 1
                        if a.count is not None and count >= a.count:
                            break
                if not a.plain and changed and time.monotonic() - drawn >= 0.05:
                    board.draw(header)
                    drawn = time.monotonic()
            if not a.plain:
                board.draw(header)
    except KeyboardInterrupt:
        pass
    except md.MarketDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
