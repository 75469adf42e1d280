#!/usr/bin/env python3
"""A market data client over the distributor's WebSocket JSON API (`peregrine distributor
--websocket ADDR`), with the `websocket-client` library (`pip install websocket-client`); no
Peregrine package needed. The messages are the Refinitiv WebSocket API's (tr_json2), so a
script written for that API needs little more than the URL.

    python3 examples/md_ws.py --url ws://127.0.0.1:14580/ws --user alice AAA.O AAB.N
    python3 examples/md_ws.py --url ws://127.0.0.1:14580/ws --user alice --post AAA.O BID=189.25

It logs in (the token from --token or PEREGRINE_MD_TOKEN), opens the items given (--view
BID,ASK for those fields only) and prints one line per message: `ITEM refresh|update
FIELD=VALUE ...` or `ITEM status STATE CODE "text"`. It answers the distributor's pings.
--count N stops after N refreshes and updates, --seconds S after S seconds. With --post ITEM
FIELD=VALUE... it posts one update instead and prints its Ack (`ACK ITEM accepted`, or `NACK
ITEM CODE "text"` and status 1). Over TLS: --url wss://HOST:PORT/ws and --ca FILE.
"""

import argparse
import json
import os
import ssl
import sys
import time
from decimal import Decimal

import websocket  # websocket-client


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="ws://127.0.0.1:14580/ws")
    p.add_argument("--user", required=True)
    p.add_argument("--token", default=os.environ.get("PEREGRINE_MD_TOKEN"))
    p.add_argument("--service", default="FEED1")
    p.add_argument("--view", help="fields to receive only, comma-separated: BID,ASK")
    p.add_argument("--count", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--ca", help="the CA of the distributor's certificate (wss://)")
    p.add_argument("--post", action="store_true", help="post ITEM FIELD=VALUE... and exit")
    p.add_argument("args", nargs="+", help="items (or, with --post, ITEM FIELD=VALUE...)")
    a = p.parse_args()
    if not a.token:
        p.error("no token: give --token T or set PEREGRINE_MD_TOKEN")

    sslopt = {"ca_certs": a.ca} if a.ca else None
    ws = websocket.create_connection(a.url, timeout=10, sslopt=sslopt)
    send = lambda m: ws.send(json.dumps(m))
    send({"ID": 1, "Domain": "Login",
          "Key": {"Name": a.user, "Elements": {"AuthenticationToken": a.token}}})

    names = {}  # stream ID -> item
    if a.post:
        item, fields = a.args[0], {}
        for kv in a.args[1:]:
            k, _, v = kv.partition("=")
            fields[k] = v
    counted = 0
    end = time.monotonic() + a.seconds if a.seconds else None
    while True:
        if end is not None:
            left = end - time.monotonic()
            if left <= 0:
                return 0
            ws.settimeout(left)
        try:
            frame = ws.recv()
        except websocket.WebSocketTimeoutException:
            return 0
        if not frame:
            print("# the distributor closed the connection", file=sys.stderr)
            return 1
        # Prices come as JSON numbers with every digit: read them as exact decimals.
        data = json.loads(frame, parse_float=Decimal)
        for m in data if isinstance(data, list) else [data]:
            t = m.get("Type")
            if t == "Ping":
                send({"Type": "Pong"})
            elif t == "Error":
                print(f"# error: {m.get('Text')}", file=sys.stderr)
                return 1
            elif m.get("Domain") == "Login":
                if m.get("State", {}).get("Data") != "Ok":
                    print(f"# login refused: {m.get('State', {}).get('Text')}", file=sys.stderr)
                    return 1
                if a.post:
                    send({"ID": 2, "Type": "Post", "Key": {"Service": a.service, "Name": item},
                          "PostID": 1, "Ack": True,
                          "Message": {"Type": "Update", "Fields": fields}})
                    continue
                for i, name in enumerate(a.args):
                    req = {"ID": 2 + i, "Key": {"Service": a.service, "Name": name}}
                    if a.view:
                        req["View"] = a.view.split(",")
                    names[2 + i] = name
                    send(req)
            elif t == "Ack":
                if "NakCode" in m:
                    print(f'NACK {item} {m["NakCode"]} "{m.get("Text", "")}"')
                    return 1
                print(f"ACK {item} accepted")
                return 0
            elif t in ("Refresh", "Update"):
                name = names.get(m["ID"], m.get("Key", {}).get("Name", "?"))
                fields = " ".join(f"{k}={v}" for k, v in m.get("Fields", {}).items())
                print(f"{name} {t.lower()} {fields}", flush=True)
                counted += 1
                if a.count and counted >= a.count:
                    return 0
            elif t == "Status":
                st = m.get("State", {})
                name = names.get(m.get("ID"), "?")
                print(f'{name} status {st.get("Data")} {st.get("Code", "-")} "{st.get("Text", "")}"',
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
