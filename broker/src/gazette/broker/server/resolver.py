"""Journal resolution as the broker's RPCs and the append FSM see it.

:class:`gazette.allocator.Resolver` implements Gazette's rules (status, route,
process id, proxy header checks, waiting for a revision). This adapter adds
what belongs to the serving broker (Gazette ``broker/resolver.go``):

* the local :class:`~gazette.broker.server.replica.Replica` of the journal,
  from the :class:`~gazette.broker.server.replica.ReplicaSet`;
* ``invalidated``, an event set once the journal's assignments (or stores)
  change after this resolution was made, which wakes RPCs blocked on the
  replica's spool or pipeline so they re-resolve;
* ``assignments_consistent``: every assignment value already holds the Route
  (the allocator's consistency gate, which the primary establishes);
* the item and assignment key/values, which guard the broker's own etcd
  transactions (assignment values, suspension).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gazette import allocator
from gazette.allocator import keys as alloc_keys
from gazette.broker import protocol as pb
from gazette.broker.server import errors

if TYPE_CHECKING:
    from gazette.broker.server.replica import Replica, ReplicaSet


@dataclasses.dataclass
class Resolution:
    """Outcome of resolving a journal (the append FSM's ``Resolution``)."""

    status: int
    header: pb.Header
    local_id: pb.ProcessSpec.ID
    journal_spec: pb.JournalSpec | None
    replica: Replica | None
    invalidated: asyncio.Event
    assignments_consistent: bool
    item: alloc_keys.KeyValue | None
    assignments: Sequence[alloc_keys.KeyValue]

    @property
    def is_local(self) -> bool:
        """Whether this broker is the resolved process (it serves the request)."""
        return self.header.process_id == self.local_id


def unrouted_header(observed: allocator.ObservedState, local_id: pb.ProcessSpec.ID) -> pb.Header:
    """Header of RPCs not tied to a journal: our id, no route, the KeySpace's etcd header."""
    hdr = pb.Header()
    hdr.process_id.CopyFrom(local_id)
    hdr.route.primary = -1
    hdr.etcd.CopyFrom(observed.ks.header)
    return hdr


class Resolver:
    """Resolves journals against the broker's KeySpace and its local replicas."""

    def __init__(self, observed: allocator.ObservedState, replicas: ReplicaSet) -> None:
        self.observed = observed
        self.replicas = replicas
        self._inner = allocator.Resolver(observed, local_replica=replicas.get)

    def local_id(self) -> pb.ProcessSpec.ID:
        return self._inner.local_id()

    def stop_serving_local_replicas(self) -> None:
        """From now on, resolving to ourselves fails (the broker is shutting down)."""
        self._inner.stopped = True

    async def resolve(
        self,
        journal: str,
        *,
        may_proxy: bool,
        require_primary: bool,
        min_etcd_revision: int = 0,
        proxy_header: pb.Header | None = None,
    ) -> Resolution:
        try:
            res = await self._inner.resolve(
                journal,
                allocator.ResolveOptions(
                    may_proxy=may_proxy,
                    require_primary=require_primary,
                    min_etcd_revision=min_etcd_revision,
                    proxy_header=proxy_header,
                ),
            )
        except allocator.errors.ResolveError as e:
            raise errors.ResolutionError(str(e)) from e

        replica: Replica | None = res.local_replica
        # Without a replica nothing can invalidate the resolution: nobody waits on it.
        invalidated = replica.signal if replica is not None else asyncio.Event()
        consistent = allocator.journal_is_consistent(None, None, res.assignments)  # type: ignore[arg-type]
        return Resolution(
            status=res.status,
            header=res.header,
            local_id=res.local_id,
            journal_spec=res.spec,
            replica=replica,
            invalidated=invalidated,
            assignments_consistent=consistent,
            item=res.item,
            assignments=res.assignments,
        )
