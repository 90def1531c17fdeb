"""Sorted, decoded key/values and the merge of watch events into them.

Everything here is pure and synchronous: it's the part of the KeySpace that
unit tests drive with in-process events (the seam), and that the watch loop
feeds with events converted from etcd's protobufs.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import logging
import operator
from collections.abc import Callable, Iterable, Sequence

log = logging.getLogger(__name__)

__all__ = [
    "Decoder",
    "Event",
    "EventType",
    "KeyValue",
    "merge_events",
    "prefix_range_end",
    "prefixed",
    "range_of",
    "search",
]

#: Turns a raw (key, value) into the object kept as ``KeyValue.decoded``.
#: Raising any exception means "skip this key" (it is logged, never fatal).
Decoder = Callable[[str, bytes], object]


class EventType(enum.IntEnum):
    """Kind of a watch event; the values are etcd's ``mvccpb.Event.EventType``."""

    PUT = 0
    DELETE = 1


@dataclasses.dataclass(frozen=True, slots=True)
class KeyValue:
    """One etcd key/value of the mirror with its decoded form.

    Keys are etcd's bytes read as UTF-8 (Gazette's keys are UTF-8; stray bytes
    are kept as surrogate escapes). For valid UTF-8, ``str`` order equals etcd's
    byte order, so the mirror sorts the way etcd does.
    """

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0
    decoded: object = None


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A watch event. For DELETE, ``kv`` carries the key and the deleting revision."""

    type: EventType
    kv: KeyValue


_key_of = operator.attrgetter("key")


def search(kvs: Sequence[KeyValue], key: str) -> tuple[int, bool]:
    """Index of ``key`` in sorted ``kvs`` (or where it would go), and whether it's there."""
    ind = bisect.bisect_left(kvs, key, key=_key_of)
    return ind, ind < len(kvs) and kvs[ind].key == key


def range_of(kvs: Sequence[KeyValue], start: str, end: str) -> Sequence[KeyValue]:
    """The KeyValues of sorted ``kvs`` with ``start <= key < end``."""
    lo = bisect.bisect_left(kvs, start, key=_key_of)
    hi = bisect.bisect_left(kvs, end, lo=lo, key=_key_of)
    return kvs[lo:hi]


def prefix_range_end(prefix: str) -> str:
    """The smallest key greater than every key starting with ``prefix``.

    Works on code points (the last one that can be incremented is), which is
    etcd's byte increment for the ASCII prefixes Gazette uses. An empty result
    means "no upper bound".
    """
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x10FFFF:
            chars[-1] = chr(last + 1)
            return "".join(chars)
        chars.pop()
    return ""


def prefixed(kvs: Sequence[KeyValue], prefix: str) -> Sequence[KeyValue]:
    """The KeyValues of sorted ``kvs`` whose key starts with ``prefix``."""
    end = prefix_range_end(prefix)
    if not end:
        lo = bisect.bisect_left(kvs, prefix, key=_key_of)
        return kvs[lo:]
    return range_of(kvs, prefix, end)


def decode_kv(kv: KeyValue, decode: Decoder) -> KeyValue | None:
    """``kv`` with its decoded form, or None (logged) when the decoder refuses it."""
    try:
        decoded = decode(kv.key, kv.value)
    # A decoder is caller code judging values written by anyone: whatever it
    # raises only means "not a valid value", and must never stop the mirror.
    except Exception as err:  # noqa: BLE001
        log.warning(
            "skipping key %r at mod revision %d: decode failed: %s",
            kv.key,
            kv.mod_revision,
            err,
        )
        return None
    # Spelled out: dataclasses.replace() is markedly slower, felt in large loads
    # (bench/bench_keyspace.py).
    return KeyValue(
        kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease, decoded
    )


def merge_events(
    current: Sequence[KeyValue], events: Iterable[Event], decode: Decoder
) -> list[KeyValue]:
    """A new sorted list: ``current`` with ``events`` applied; ``current`` is untouched.

    ``events`` must be in (key, mod_revision) order. Rules, for each event:

    * PUT of an unknown key inserts it (a warning when it doesn't look like a
      creation: a bad value skipped earlier may be fixed by a later put);
    * PUT of a known key replaces it, unless its mod revision isn't newer (an old
      replay: ignored); a decode failure keeps the previous value;
    * DELETE of a known key removes it, unless not newer (ignored);
    * DELETE of an unknown key is ignored with a warning (the key may have been
      skipped for a bad value).

    Runs of untouched keys are copied by slices, so applying a batch costs one
    pass over the mirror plus a binary search per event.
    """
    out: list[KeyValue] = []
    cursor = 0
    for event in events:
        key = event.kv.key
        ind = bisect.bisect_left(current, key, lo=cursor, key=_key_of)
        if ind < len(current) and current[ind].key == key:
            ind += 1
        if ind > cursor:
            out.extend(current[cursor:ind])
            cursor = ind
        _update_tail(out, event, decode)
    out.extend(current[cursor:])
    return out


def _update_tail(out: list[KeyValue], event: Event, decode: Decoder) -> None:
    """Apply ``event`` to ``out``, whose last element is at or before its key."""
    kv = event.kv
    tail = out[-1] if out else None

    if tail is None or tail.key < kv.key:
        if event.type is EventType.DELETE:
            log.warning(
                "ignoring deletion of unknown key %r (revision %d)", kv.key, kv.mod_revision
            )
            return
        decoded = decode_kv(kv, decode)
        if decoded is None:
            return
        out.append(decoded)
        if kv.create_revision != kv.mod_revision:
            log.warning(
                "modification of unknown key %r applied as a creation "
                "(create revision %d, mod revision %d)",
                kv.key,
                kv.create_revision,
                kv.mod_revision,
            )
        elif kv.version != 1:
            log.warning("created key %r has version %d (expected 1)", kv.key, kv.version)
        return

    if tail.key > kv.key:  # pragma: no cover - callers order events
        raise AssertionError(f"events out of key order ({tail.key!r} > {kv.key!r})")

    if tail.mod_revision >= kv.mod_revision:
        log.warning(
            "ignoring stale event of key %r (mod revision %d, mirror has %d)",
            kv.key,
            kv.mod_revision,
            tail.mod_revision,
        )
        return
    if event.type is EventType.DELETE:
        out.pop()
        return

    decoded = decode_kv(kv, decode)
    if decoded is None:
        return
    if tail.create_revision != kv.create_revision:
        log.warning(
            "key %r changed create revision (%d -> %d) without a deletion; applied",
            kv.key,
            tail.create_revision,
            kv.create_revision,
        )
    elif tail.version + 1 != kv.version:
        log.warning(
            "key %r skipped versions (%d -> %d); applied",
            kv.key,
            tail.version,
            kv.version,
        )
    out[-1] = decoded
