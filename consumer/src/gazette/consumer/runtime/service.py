"""The shards of this process: created, promoted and stopped as etcd assigns them.

Gazette's ``consumer/resolver.go`` (local shard management). :class:`Service`
observes the consumer KeySpace; after every update it walks the local
assignments:

* an assignment with no local replica starts a :class:`ShardReplica`;
* the same assignment (same create revision), or a move to a lower slot
  (promotion to primary moves the key to slot 0), keeps the replica and
  updates it;
* anything else is a new assignment: a fresh replica, the old one stopped;
* a replica whose assignment is gone is stopped (its store destroyed).
"""

from __future__ import annotations

import asyncio
import logging

from gazette import allocator, task
from gazette.consumer.runtime.shard import ShardReplica, ShardServices

__all__ = ["Service"]

log = logging.getLogger(__name__)


class Service:
    """Keeps one :class:`ShardReplica` per shard assigned to this process."""

    def __init__(self, shards: ShardServices, observed: allocator.ObservedState) -> None:
        self.shards = shards
        self.observed = observed
        self.replicas: dict[str, ShardReplica] = {}
        self._group: task.Group | None = None
        self._stopped = False

    async def run(self, stop: asyncio.Event) -> None:
        """Serve shards until ``stop`` is set; then stop them all and wait for them."""
        async with task.Group("shards") as group:
            self._group = group
            self.observed.ks.add_observer(self.update)
            self.update()
            await stop.wait()
            self.stop_all()

    def stop_all(self) -> None:
        self._stopped = True
        replicas, self.replicas = self.replicas, {}
        for rep in replicas.values():
            rep.stop()

    def update(self) -> None:
        """Reconcile replicas with the current local assignments (a KeySpace observer)."""
        if self._stopped or self._group is None:
            return
        state = self.observed.state
        nxt: dict[str, ShardReplica] = {}
        for li in state.local_items:
            item: allocator.Item = li.item.decoded
            sid = item.id
            if sid in nxt:
                continue
            kv = li.assignments[li.index]
            slot = li.assignment.slot
            rep = self.replicas.get(sid)
            if rep is not None and (
                kv.create_revision == rep.assignment.create_revision or slot < rep.slot
            ):
                del self.replicas[sid]
                rep.update(li.item, kv)
            else:
                rep = ShardReplica(self.shards, li.item, kv)
                self._group.spawn(f"shard {sid}", rep.serve())
                log.info("shard %s assigned here (slot %d)", sid, slot)
            nxt[sid] = rep
        prev, self.replicas = self.replicas, nxt
        for sid, rep in prev.items():
            log.info("shard %s no longer assigned here", sid)
            rep.stop()
