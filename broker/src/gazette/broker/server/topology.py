"""Publishing the keyspace into the native data plane's registry.

The data plane resolves journals on its own threads, against state it owns (the
crate's ``registry`` module): no RPC there waits for Python. Python stays the one
reader of etcd, and after every KeySpace update :class:`Publisher` hands the data
plane what changed: the etcd header, this broker's id, every member's endpoint when
a member changed, and the spec, route and consistency of each journal whose item or
assignments changed (found from :attr:`KeySpace.changed_keys`, so an update costs
what it changed, not what the keyspace holds). A snapshot load publishes everything.

The registry resolves as :class:`~gazette.broker.server.resolver.Resolver` does;
``broker/tests/server/test_topology.py`` checks the two agree on a live cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from gazette import allocator
from gazette.allocator import keys as alloc_keys
from gazette.broker import journals

log = logging.getLogger(__name__)

JournalUpdate = tuple[str, bytes, bytes, bool]
"""(name, serialized JournalSpec, serialized Route without endpoints, consistent)."""


class Registry(Protocol):
    """What is published into (``gazette.dataplane.Topology``)."""

    def publish(
        self,
        etcd: bytes,
        local_id: tuple[str, str] | None,
        members: list[tuple[str, str, str]] | None,
        journals: list[JournalUpdate],
        removed: list[str],
    ) -> None: ...


class Publisher:
    """A KeySpace observer that keeps a data plane registry current."""

    def __init__(self, observed: allocator.ObservedState, registry: Registry) -> None:
        self.observed = observed
        self.registry = registry
        root = observed.ks.root
        self._items = root + alloc_keys.ITEMS_PREFIX
        self._assign = root + alloc_keys.ASSIGNMENTS_PREFIX
        self._members = root + alloc_keys.MEMBERS_PREFIX
        self._published: set[str] = set()
        #: Called before each publication (the native data plane's replicas first).
        self.before_publish: Callable[[], None] | None = None

    def start(self) -> None:
        """Publish the keyspace as it is, then every update as it comes."""
        self.publish(None)
        self.observed.ks.add_observer(self.update)

    def update(self) -> None:
        """Publish the last update (the KeySpace calls this after each)."""
        self.publish(self.observed.ks.changed_keys)

    def publish(self, changed: Iterable[str] | None) -> None:
        """Publish the journals and members ``changed`` names (None: all of them)."""
        state = self.observed.state
        members_changed = changed is None
        names: Iterable[str]
        if changed is None:
            names = [kv.decoded.id for kv in state.items]
            removed = self._published.difference(names)
        else:
            touched: set[str] = set()
            for key in changed:
                if key.startswith(self._items):
                    touched.add(key[len(self._items) :])
                elif key.startswith(self._assign):
                    touched.add(key[len(self._assign) :].split(alloc_keys.SEP, 1)[0])
                elif key.startswith(self._members):
                    members_changed = True
            names = touched
            removed = set()

        updates: list[JournalUpdate] = []
        for name in names:
            index = state.find_item(name)
            if index == -1:
                if name in self._published:
                    removed.add(name)
                continue
            updates.append(journal_update(name, state, index))
            self._published.add(name)
        self._published.difference_update(removed)

        members = None
        if members_changed:
            members = [
                (m.zone, m.suffix, allocator.member_endpoint(m.spec))
                for m in (kv.decoded for kv in state.members)
            ]
        local = state.local_member
        if self.before_publish is not None:
            self.before_publish()
        self.registry.publish(
            self.observed.ks.header.SerializeToString(),
            (local.zone, local.suffix) if local is not None else None,
            members,
            updates,
            sorted(removed),
        )


def journal_update(name: str, state: allocator.State, index: int) -> JournalUpdate:
    """What the registry holds of the journal at ``index`` of ``state``."""
    assignments: Sequence[alloc_keys.KeyValue] = state.assignments_of(index)
    route = allocator.route_of(assignments)
    return (
        name,
        state.items[index].value,
        route.SerializeToString(),
        journals.assignments_consistent(assignments),
    )
