"""Client-side Prometheus metrics, with the names Gazette's Go client uses.

Each counter is created (and ``prometheus_client`` imported) when it is
first used rather than with the client: importing ``prometheus_client``
costs more than a one-shot command's RPC. A process that never serves
metrics (``gazctl``) calls :func:`disable` before using the client, and its
counters count nothing.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

__all__ = [
    "APPEND_BYTES",
    "DISCARD_FRAGMENT_BYTES",
    "FRAGMENT_OPEN",
    "FRAGMENT_OPEN_BYTES",
    "FRAGMENT_OPEN_CONTENT_LENGTH",
    "READ_BYTES",
    "READ_FRAGMENT_BYTES",
    "disable",
]

if TYPE_CHECKING:
    import prometheus_client as prom

    APPEND_BYTES: prom.Counter
    READ_BYTES: prom.Counter
    FRAGMENT_OPEN: prom.Counter
    FRAGMENT_OPEN_BYTES: prom.Counter
    FRAGMENT_OPEN_CONTENT_LENGTH: prom.Counter
    READ_FRAGMENT_BYTES: prom.Counter
    DISCARD_FRAGMENT_BYTES: prom.Counter

_JOURNAL = ("journal",)
_JOURNAL_CODEC = ("journal", "codec")

#: Attribute -> (metric name, help, label names).
_COUNTERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "APPEND_BYTES": ("gazette_append_bytes", "Total number of journal bytes appended.", _JOURNAL),
    "READ_BYTES": ("gazette_read_bytes", "Total number of journal bytes read.", _JOURNAL),
    "FRAGMENT_OPEN": (
        "gazette_fragment_open",
        "Fragments opened straight from their store.",
        _JOURNAL_CODEC,
    ),
    "FRAGMENT_OPEN_BYTES": (
        "gazette_fragment_open_bytes",
        "Uncompressed bytes of fragments opened straight from their store.",
        _JOURNAL_CODEC,
    ),
    "FRAGMENT_OPEN_CONTENT_LENGTH": (
        "gazette_fragment_open_content_length",
        "Stored (possibly compressed) bytes of fragments opened straight from their store.",
        _JOURNAL_CODEC,
    ),
    "READ_FRAGMENT_BYTES": (
        "gazette_read_fragment_bytes",
        "Uncompressed bytes read from fragments opened straight from their store.",
        _JOURNAL_CODEC,
    ),
    "DISCARD_FRAGMENT_BYTES": (
        "gazette_discard_fragment_bytes",
        "Uncompressed bytes skipped to reach the read offset within a fragment.",
        _JOURNAL_CODEC,
    ),
}

_disabled = False
_create = threading.Lock()  # A counter is registered once, whichever thread first uses it.


class _NullCounter:
    """What a counter is once :func:`disable` was called: labels of it count nothing."""

    def labels(self, *values: str) -> _NullCounter:
        return self

    def inc(self, amount: float = 1) -> None:
        pass


def disable() -> None:
    """Make counters not yet used count nothing, never importing ``prometheus_client``.

    For one-shot processes that never expose metrics; call it before using the client.
    """
    global _disabled
    _disabled = True


def __getattr__(name: str) -> Any:
    spec = _COUNTERS.get(name)
    if spec is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _create:
        counter: Any = globals().get(name)
        if counter is not None:
            return counter
        if _disabled:
            counter = _NullCounter()
        else:
            import prometheus_client

            metric, doc, labels = spec
            counter = prometheus_client.Counter(metric, doc, labels)
        globals()[name] = counter  # Later lookups find it without coming here.
        return counter
