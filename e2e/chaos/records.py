"""Self-describing records: each line names its writer and sequence and can be rebuilt.

A record is one line ``<writer> <seq> <crc32 of payload, 8 hex> <payload>\\n``.
The payload's length and bytes derive from ``(writer, seq)`` alone, so the
checker needs nothing but the journal to tell a whole, correct record from a
torn or foreign one, and to rebuild what an acknowledged append must read as.
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from collections.abc import Iterator

__all__ = ["RecordId", "Span", "parse", "record"]

#: Payload lengths: mostly small, now and then large (a record may cross fragments).
_SIZES = (16, 40, 100, 300, 900, 2500, 7000, 20000)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class RecordId:
    writer: str
    seq: int

    def __str__(self) -> str:
        return f"{self.writer}#{self.seq}"


def record(rid: RecordId) -> bytes:
    """The one and only encoding of record ``rid``."""
    seed = f"{rid.writer}/{rid.seq}".encode()
    digest = hashlib.sha1(seed).digest()
    # Weighted towards small records: the first byte picks a size class, the
    # second a length within it.
    size_class = _SIZES[min(digest[0] % 10, len(_SIZES) - 1)]
    size = 8 + (digest[1] * size_class) // 255
    payload = hashlib.shake_128(seed).hexdigest((size + 1) // 2)[:size].encode()
    return b"%s %d %08x %s\n" % (rid.writer.encode(), rid.seq, zlib.crc32(payload), payload)


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """A line of the journal at ``[begin, end)``: a record, or garbage (``rid`` None)."""

    begin: int
    end: int
    rid: RecordId | None


def parse(content: bytes, base: int = 0) -> Iterator[Span]:
    """The lines of ``content`` (which starts at journal offset ``base``).

    A line that isn't exactly the encoding of the record it names is garbage,
    as is a trailing partial line.
    """
    pos = 0
    while pos < len(content):
        nl = content.find(b"\n", pos)
        end = len(content) if nl < 0 else nl + 1
        line = content[pos:end]
        yield Span(base + pos, base + end, _identify(line))
        pos = end


def _identify(line: bytes) -> RecordId | None:
    parts = line.split(b" ", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    try:
        rid = RecordId(parts[0].decode("ascii"), int(parts[1]))
    except UnicodeDecodeError:
        return None
    return rid if record(rid) == line else None
