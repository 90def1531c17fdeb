"""Client-side Prometheus metrics, with the names Gazette's Go client uses."""

from __future__ import annotations

import prometheus_client as prom

__all__ = [
    "APPEND_BYTES",
    "DISCARD_FRAGMENT_BYTES",
    "FRAGMENT_OPEN",
    "FRAGMENT_OPEN_BYTES",
    "FRAGMENT_OPEN_CONTENT_LENGTH",
    "READ_BYTES",
    "READ_FRAGMENT_BYTES",
]

APPEND_BYTES = prom.Counter(
    "gazette_append_bytes", "Total number of journal bytes appended.", ["journal"]
)
READ_BYTES = prom.Counter("gazette_read_bytes", "Total number of journal bytes read.", ["journal"])
FRAGMENT_OPEN = prom.Counter(
    "gazette_fragment_open", "Fragments opened straight from their store.", ["journal", "codec"]
)
FRAGMENT_OPEN_BYTES = prom.Counter(
    "gazette_fragment_open_bytes",
    "Uncompressed bytes of fragments opened straight from their store.",
    ["journal", "codec"],
)
FRAGMENT_OPEN_CONTENT_LENGTH = prom.Counter(
    "gazette_fragment_open_content_length",
    "Stored (possibly compressed) bytes of fragments opened straight from their store.",
    ["journal", "codec"],
)
READ_FRAGMENT_BYTES = prom.Counter(
    "gazette_read_fragment_bytes",
    "Uncompressed bytes read from fragments opened straight from their store.",
    ["journal", "codec"],
)
DISCARD_FRAGMENT_BYTES = prom.Counter(
    "gazette_discard_fragment_bytes",
    "Uncompressed bytes skipped to reach the read offset within a fragment.",
    ["journal", "codec"],
)
