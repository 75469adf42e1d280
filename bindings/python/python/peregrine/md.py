"""Peregrine market data: publish items as a provider, receive them from a distributor as a
consumer (docs/market-data.md, "The provider and consumer APIs").

    from decimal import Decimal
    from peregrine import md

    prov = md.Provider("FEED1", backbone="mcast://239.255.90.1:40900")
    prov.refresh("AAA.O", {"BID": Decimal("189.21"), "ASK": 189.22, "BIDSIZE": 300,
                           "DSPLY_NAME": "APPLE", "CURRENCY": "USD"})
    prov.update("AAA.O", {"BID": "189.23"})
    prov.status("AAA.O", "stale", "feed halted")       # "stale" or "closed"
    while running:
        prov.do_work()        # every millisecond or so: answers image requests, repairs NAKs
        while (post := prov.poll_post()) is not None:
            prov.publish_post(post)     # a client's contribution: publish it, say "accepted"

    cons = md.Consumer(["127.0.0.1:14500"], user="alice", token="s3cret")
    req = cons.open("FEED1", ["AAA.O", "MSFT.*"])
    for ev in cons.poll(timeout=1.0):
        if ev.kind in ("refresh", "update"):
            print(ev.item, ev.item_seq, ev.fields)      # {"BID": Decimal("189.23")}
        elif ev.kind == "status":
            print(ev.item, ev.state, ev.text)          # "not-entitled", "stale", ...
    cons.close(req)
    pid = cons.post("FEED1", "AAA.O", {"BID": Decimal("189.25")})   # an "ack" event answers

Provider
    `Provider(service, backbone=DEFAULT_BACKBONE, requests=None, dictionary=None,
    max_items=None, context=None)` publishes one service's items. The backbone is sealed
    with the user's key unless its URI says `auth=none` (`prov.sealing` says how).
    `refresh(item, fields, **more)` publishes an item's full image, `update(item, fields,
    **more)` what changed (after a refresh), `status(item, "stale" | "closed", text)`.
    `refresh_numbered(item, item_seq, fields)` and `update_numbered(item, item_seq, fields)`
    carry the application's `item_seq` (the upstream's numbering): two providers fed the
    same stream then form an A/B pair, each message taken from whichever comes first.
    The provider keeps each item's image and answers the distributors' image requests from
    it, a few per `do_work()`: call `do_work()` every millisecond or so, busy or idle. It has
    no thread of its own.

    Posts: a client's contribution to an item of the service, forwarded by a distributor
    (only for users whose `post` globs in the users file match the item). `poll_post()`
    returns the next `Post` (`user`, `item`, `refresh`, `fields`) or None; answer each once:
    `accept(post)`, `refuse(post, reason)`, or `publish_post(post)` (publishes its fields as
    an update, or a refresh, of its item and accepts it). A post not answered within the
    distributor's timeout (5 s) is answered "timeout" to its poster.

Fields
    A dict of field name to value: names of the dictionary (the built-in one,
    crates/md/fields.toml, or the file given as `dictionary`), `"#FID"` or an int id for a
    field it does not know (typed by the Python value: int, Decimal/float, str, datetime).
    Values by the field's type:

    - price: given as Decimal, int, float (read as `Decimal(repr(f))`: 189.21 is 189.21) or
      str; sent as a mantissa and an exponent from -12 to 6 (trailing zeros are kept:
      "189.20" arrives as Decimal("189.20")). Received as `decimal.Decimal`, exactly.
    - int: a Python int. enum: an int code (or, when sending, the name of a value the
      dictionary gives, "USD"); received as the int code.
    - string: str (at most 255 bytes of UTF-8).
    - time: an aware `datetime` or int nanoseconds since the epoch; received as a UTC
      `datetime` (to the microsecond) or, with `Consumer(times="ns")`, exact int nanoseconds.

Errors
    Bad input raises ValueError naming the value and the fix (an update before the item's
    refresh, a value of the wrong type, a name the dictionary lacks, a bad item name), and
    nothing is sent. Back-pressure raises `BackPressured` (`peregrine.BackPressured`): the
    backbone's slowest subscriber has no room yet, nothing was sent and nothing changed; call
    `do_work()` and send it again (the provider never retries by itself). A consumer that
    reaches no distributor, or a protocol error, raises `MarketDataError`; a refused login
    `LoginRefused`. Closed objects raise `peregrine.Closed`. All are `PeregrineError`s.

Consumer
    `Consumer(addresses, user, token=None, times="datetime", dictionary=None, busy_poll_us=0,
    tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None, ping_interval_ms=None,
    warm_standby=False)`
    connects to the first distributor of the list that accepts and logs in (the token
    defaults to the environment's PEREGRINE_MD_TOKEN; `busy_poll_us` keeps `poll` reading
    that long after data, for lower latency at the cost of a busy core). `open(service, patterns)` returns a request id,
    `close(request)` closes it; `snapshot(service, patterns)` asks for the images only (each a
    "refresh" with `snapshot` True, then a "status" "closed" with an empty item ends it);
    `open(service, patterns, view=["BID", "ASK"])` (and `snapshot(..., view=...)`) asks for
    those fields only: an update that changes none of them is not sent.
    `pause(request)` and `resume(request)` (0: every request) hold a request's updates in the
    distributor, which sends the latest image of each item that changed on resume. `poll(timeout=1.0)` waits with the GIL released and returns a
    list of `Event`; `kind` is "refresh", "update", "status", "gap", "conflated",
    "logged_in" or "disconnected" (see `Event`). An event's `fields` dict is made only when
    first read, so skipping events is cheap. On a lost connection every item is reported
    "stale", then "disconnected"; the consumer reconnects (back-off 50 ms to 2 s, through
    its list), logs in again ("logged_in"), reopens every request, and fresh refreshes
    follow. `fileno()` gives the socket for `selectors` (-1 between connections).
    `disconnect()` (or leaving a `with` block) ends it. Use a consumer from one thread at a
    time: a call from another thread waits until a `poll` in progress returns.

    Liveness: the consumer and the distributor PING each other every `ping_interval_ms`
    (default: the distributor's, 5000 unless configured); a distributor silent for three
    intervals is given up like a lost connection, and a consumer that does not call `poll`
    for three intervals is closed by the distributor. `rtt_us` is the last round trip,
    `ping_interval_ms` the interval agreed. `services` is the distributor's directory as last
    told (name -> {"up", "may_open"}); each change also comes as a "service" event.

    The dictionary: after each login the consumer downloads the distributor's field
    dictionary (a "dictionary" event) and names fields by it; `downloaded_dictionary()`
    returns it as `dictionary()` does. With `dictionary="fields.toml"` the application's
    own names fields, and a field the two dictionaries type differently raises
    `MarketDataError` naming it.

    Posting: `post(service, item, fields, refresh=False, **more)` sends a contribution
    (fields as `Provider.update` takes them) and returns its id; exactly one "ack" event
    with that `post_id` answers it, `state` "accepted" or why not ("refused" by the
    provider with its `text`, "not-entitled", "service-down", "unknown-service", "busy",
    "timeout", "invalid").

    Warm standby: `Consumer(["md1:14500", "md2:14500"], ..., warm_standby=True)` logs in to
    both: the first delivers, the second holds the same requests open and paused. When the
    active connection is lost the standby is resumed and takes over: a "disconnected"
    event, then the new active's events, no item "stale" that the standby had an image of,
    and no message the application already had again. `standby` gives {"standing_by",
    "standby_items", "failovers", "duplicates_dropped"} (None without a standby); `pause`,
    `resume` and `snapshot` raise ValueError on such a consumer.

    Over TLS: `Consumer(..., tls_ca="ca.crt")` checks the distributor's certificate against
    that CA and the address's host (or `tls_server_name="md1.example"`); add
    `tls_cert="dora.crt", tls_key="dora.key"` for a user the distributor identifies by its
    client certificate (its token is then any non-empty text). A certificate that does not
    verify raises `MarketDataError` naming why ("invalid peer certificate: UnknownIssuer").

`dictionary(path=None)` lists a dictionary's fields: name -> {"fid", "type", "values"}.
"""

from . import _peregrine
from ._peregrine import BackPressured, Closed, PeregrineError

_md = _peregrine._md

Consumer = _md.Consumer
Event = _md.Event
Post = _md.Post
Provider = _md.Provider
MarketDataError = _md.MarketDataError
LoginRefused = _md.LoginRefused
DEFAULT_BACKBONE = _md.DEFAULT_BACKBONE
dictionary = _md.dictionary

__all__ = [
    "BackPressured",
    "Closed",
    "Consumer",
    "DEFAULT_BACKBONE",
    "Event",
    "LoginRefused",
    "MarketDataError",
    "PeregrineError",
    "Post",
    "Provider",
    "dictionary",
]
