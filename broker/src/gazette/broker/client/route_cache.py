"""A bounded cache of journals' routes, so RPCs can go straight to a route member."""

from __future__ import annotations

import collections

from gazette.broker import protocol as pb
from gazette.broker.client import config

__all__ = ["RouteCache"]


class RouteCache:
    """Least-recently-used map of journal name to its last known ``pb.Route``.

    Entries older than ``ttl`` seconds are dropped when looked up. Updating a
    journal with an empty route (no members) forgets it: there is no member to
    dispatch to, so the default address (which proxies) is the better choice.
    """

    def __init__(self, size: int, ttl: float, clock: config.Clock | None = None) -> None:
        if size <= 0:
            raise ValueError(f"RouteCache size must be > 0 (got {size})")
        self._size = size
        self._ttl = ttl
        self._clock = clock or config.SystemClock()
        self._entries: collections.OrderedDict[str, tuple[pb.Route, float]] = (
            collections.OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def update(self, journal: str, route: pb.Route | None) -> None:
        if route is None or not route.members:
            self._entries.pop(journal, None)
            return
        copy = pb.Route()
        copy.CopyFrom(route)
        self._entries[journal] = (copy, self._clock.now())
        self._entries.move_to_end(journal)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def forget(self, journal: str) -> None:
        self._entries.pop(journal, None)

    def route(self, journal: str) -> pb.Route | None:
        """The cached route of ``journal``, or None."""
        entry = self._entries.get(journal)
        if entry is None:
            return None
        route, at = entry
        if at + self._ttl < self._clock.now():
            del self._entries[journal]
            return None
        self._entries.move_to_end(journal)
        return route
