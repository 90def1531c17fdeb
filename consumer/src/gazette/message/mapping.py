"""Mapping messages onto the journals of a topic (Gazette `message/routines.go`).

A mapping is a callable ``mapping(msg) -> (journal, content_type)``. These
build one over a changing set of partitions: ``partitions`` returns the
current ``pb.ListResponse`` of candidate journals (a
:class:`~gazette.broker.client.WatchedList` is accepted as is), and the
content-type is the chosen journal's ``content-type`` label.

* :class:`ModuloMapping` — ``fnv1a32(key) % len(journals)``: stable while
  the partitions are;
* :class:`RendezvousMapping` — highest random weight (``fnv1a32(key) XOR
  fnv1a32(journal name)``, first journal wins ties): adding or removing a
  partition moves only the keys that must move;
* :class:`RandomMapping` — a uniformly random partition.

The key function returns the message's mapping key as bytes. Journal-name
hashes and content-types are computed once per ListResponse object (keep
the same object while nothing changed, as ``WatchedList`` does).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Generic, TypeVar

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.message import errors

__all__ = [
    "ModuloMapping",
    "Partitions",
    "RandomMapping",
    "RendezvousMapping",
    "fnv1a32",
]

M = TypeVar("M")

#: The current partitions: a callable returning the listing (None: not known yet), or a WatchedList.
Partitions = Callable[[], pb.ListResponse | None] | client.WatchedList

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


@functools.lru_cache(maxsize=4096)
def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a of ``data`` (Go ``hash/fnv.New32a``).

    A loop per byte, but of mapping keys only (a few dozen bytes per published
    message, never journal content); recent keys are remembered.
    """
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return h


class _Snapshot:
    """What a mapping needs of one ListResponse: names, content-types and name hashes."""

    __slots__ = ("content_types", "hashes", "listing", "names")

    def __init__(self, listing: pb.ListResponse | None) -> None:
        self.listing = listing
        journals = listing.journals if listing is not None else ()
        self.names = [j.spec.name for j in journals]
        self.content_types = [pb.value_of(j.spec.labels, pb.LABEL_CONTENT_TYPE) for j in journals]
        self.hashes = [fnv1a32(n.encode()) for n in self.names]


class _Mapping:
    __slots__ = ("_partitions", "_snapshot")

    def __init__(self, partitions: Partitions) -> None:
        if isinstance(partitions, client.WatchedList):
            watched = partitions
            self._partitions: Callable[[], pb.ListResponse | None] = lambda: watched.listing
        else:
            self._partitions = partitions
        self._snapshot = _Snapshot(None)

    def _current(self) -> _Snapshot:
        listing = self._partitions()
        snap = self._snapshot
        if listing is not snap.listing:
            snap = self._snapshot = _Snapshot(listing)
        if not snap.names:
            raise errors.EmptyListResponse()
        return snap


class ModuloMapping(_Mapping, Generic[M]):
    """Maps on ``fnv1a32(key_fn(msg)) % len(journals)``."""

    __slots__ = ("_key_fn",)

    def __init__(self, key_fn: Callable[[M], bytes], partitions: Partitions) -> None:
        super().__init__(partitions)
        self._key_fn = key_fn

    def __call__(self, msg: M) -> tuple[str, str]:
        snap = self._current()
        i = fnv1a32(self._key_fn(msg)) % len(snap.names)
        return snap.names[i], snap.content_types[i]


class RendezvousMapping(_Mapping, Generic[M]):
    """Maps on the highest ``fnv1a32(key_fn(msg)) ^ fnv1a32(journal)`` (rendezvous hashing)."""

    __slots__ = ("_key_fn",)

    def __init__(self, key_fn: Callable[[M], bytes], partitions: Partitions) -> None:
        super().__init__(partitions)
        self._key_fn = key_fn

    def __call__(self, msg: M) -> tuple[str, str]:
        snap = self._current()
        h = fnv1a32(self._key_fn(msg))
        best, ind = 0, 0
        for i, jh in enumerate(snap.hashes):
            w = h ^ jh
            if w > best:
                best, ind = w, i
        return snap.names[ind], snap.content_types[ind]


class RandomMapping(_Mapping, Generic[M]):
    """Maps each message onto a uniformly random journal."""

    __slots__ = ()

    def __call__(self, msg: M) -> tuple[str, str]:
        snap = self._current()
        i = random.randrange(len(snap.names))
        return snap.names[i], snap.content_types[i]
