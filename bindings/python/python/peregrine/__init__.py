"""Peregrine: broker-less low-latency publish/subscribe for trading and market data.

    import peregrine

    with peregrine.Context() as ctx:
        pub = ctx.publisher("md.eq.AAPL", "ipc://quotes")
        sub = ctx.subscriber("md.eq.AAPL", "ipc://quotes")
        pub.offer(b"bid 189.20 ask 189.21")
        for msg in sub.messages(timeout=1.0):
            print(msg.sequence, bytes(msg.payload))
            break

`Context.publish(topic)` and `Context.subscribe(pattern)` find each other by topic name
(topic resolution) with no URI to share. Errors raise `PeregrineError` (or one of its
subclasses) carrying the library's message.
"""

from ._peregrine import (
    BackPressured,
    Batch,
    Closed,
    ConfigError,
    Context,
    Event,
    FailoverSubscriber,
    MergingSubscriber,
    Message,
    MessageIterator,
    MessageTooLarge,
    OpenError,
    PeregrineError,
    Publisher,
    Subscriber,
    __version__,
)

__all__ = [
    "BackPressured",
    "Batch",
    "Closed",
    "ConfigError",
    "Context",
    "Event",
    "FailoverSubscriber",
    "MergingSubscriber",
    "Message",
    "MessageIterator",
    "MessageTooLarge",
    "OpenError",
    "PeregrineError",
    "Publisher",
    "Subscriber",
    "__version__",
]
