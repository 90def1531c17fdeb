"""Resolving a journal: its Route, and whether this broker serves, proxies or refuses.

The rules are Gazette's ``broker/resolver.go``: the local id from our member
key (or a placeholder once it's gone), proxy header checks, waiting for a
minimum etcd revision, the journal's spec and assignments (hidden unless the
caller's claims allow them), the Route with endpoints, the process that
should serve, and the status, first match wins::

    no spec                               JOURNAL_NOT_FOUND
    suspended FULL                        SUSPENDED
    require_primary and no primary        NO_JOURNAL_PRIMARY_BROKER
    no members                            INSUFFICIENT_JOURNAL_BROKERS
    not may_proxy and not ours            NOT_JOURNAL_PRIMARY_BROKER / NOT_JOURNAL_BROKER
    otherwise                             OK

A non-OK resolution carries our own id as process id: we authored the error.

A :class:`Resolution` also holds what the serving broker needs:

* the local :class:`~gazette.broker.server.replica.Replica` of the journal,
  from the :class:`~gazette.broker.server.replica.ReplicaSet`;
* ``invalidated``, an event set once the journal's assignments (or stores)
  change after this resolution was made, which wakes RPCs blocked on the
  replica's spool or pipeline so they re-resolve;
* ``assignments_consistent``: every assignment value already holds the Route
  (:func:`gazette.broker.journals.assignments_consistent`, which the primary
  establishes);
* the item and assignment key/values, which guard the broker's own etcd
  transactions (assignment values, suspension).

The allocator underneath is generic (:class:`gazette.allocator.ObservedState`,
:func:`gazette.allocator.route_of`); everything about journals is here and in
:mod:`gazette.broker.journals`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from gazette import allocator
from gazette.allocator import keys as alloc_keys
from gazette.broker import journals
from gazette.broker import protocol as pb
from gazette.broker.server import errors

if TYPE_CHECKING:
    from gazette.broker.server.replica import Replica

Status = pb.Status
_MISSING_ID = ("local-BrokerSpec", "missing-from-Etcd")


class LocalReplicas(Protocol):
    """Where the resolver finds this broker's replica of a journal (a ReplicaSet)."""

    def get(self, journal: str) -> Replica | None: ...


@dataclasses.dataclass
class Resolution:
    """Outcome of resolving a journal (Gazette's ``resolution``, ``broker/resolver.go``)."""

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

    def __init__(self, observed: allocator.ObservedState, replicas: LocalReplicas) -> None:
        self.observed = observed
        self.replicas = replicas
        self._stopped = False

    def local_id(self) -> pb.ProcessSpec.ID:
        m = self.observed.state.local_member
        if m is None:
            return pb.ProcessSpec.ID(zone=_MISSING_ID[0], suffix=_MISSING_ID[1])
        return pb.ProcessSpec.ID(zone=m.zone, suffix=m.suffix)

    def stop_serving_local_replicas(self) -> None:
        """From now on, resolving to ourselves fails (the broker is shutting down)."""
        self._stopped = True

    async def wait_primary_moved(
        self, journal: str, primary: pb.ProcessSpec.ID, moved: asyncio.Event
    ) -> None:
        """Set ``moved`` once ``journal``'s route no longer has ``primary`` as its primary."""
        ks = self.observed.ks
        while True:
            await ks.wait_for_update()
            state = self.observed.state
            index = state.find_item(journal)
            rt = allocator.route_of(state.assignments_of(index) if index != -1 else ())
            if rt.primary == -1 or rt.members[rt.primary] != primary:
                moved.set()
                return

    async def resolve(
        self,
        journal: str,
        *,
        may_proxy: bool,
        require_primary: bool,
        min_etcd_revision: int = 0,
        proxy_header: pb.Header | None = None,
        authorized: Callable[[pb.JournalSpec], bool] | None = None,
    ) -> Resolution:
        """Resolve ``journal`` (a ``;meta`` suffix is ignored).

        ``authorized(spec)`` says whether the caller's claims select the
        journal (default: all); a journal they don't is not found. Raises
        :class:`~gazette.broker.server.errors.ResolutionError` if
        ``proxy_header`` names another cluster or process, or if the journal
        resolves to us after :meth:`stop_serving_local_replicas`.
        """
        journal = journal.split(";", 1)[0]
        local_id = self.local_id()
        ks = self.observed.ks

        if proxy_header is not None:
            _check_proxy_header(proxy_header, ks.header, local_id)
            min_etcd_revision = max(min_etcd_revision, proxy_header.etcd.revision)
        if min_etcd_revision > ks.revision:
            await ks.wait_for_revision(min_etcd_revision)
            local_id = self.local_id()

        state = self.observed.state
        header = pb.Header()
        header.etcd.CopyFrom(ks.header)

        spec: pb.JournalSpec | None = None
        item_kv: alloc_keys.KeyValue | None = None
        assignments: Sequence[alloc_keys.KeyValue] = ()
        index = state.find_item(journal)
        if index != -1:
            candidate: pb.JournalSpec = state.item(index).spec
            if authorized is None or authorized(candidate):
                spec, item_kv = candidate, state.items[index]
                assignments = state.assignments_of(index)

        rt = allocator.route_of(assignments)
        allocator.attach_endpoints(rt, state)
        header.route.CopyFrom(rt)

        def is_local(m: pb.ProcessSpec.ID) -> bool:
            return m.zone == local_id.zone and m.suffix == local_id.suffix

        process_id: pb.ProcessSpec.ID | None = None
        if require_primary and rt.primary != -1:
            process_id = rt.members[rt.primary]
        elif not require_primary and any(is_local(m) for m in rt.members):
            process_id = local_id
        ours = process_id is not None and is_local(process_id)
        if ours and self._stopped:
            raise errors.ResolverStopped()
        replica = None if self._stopped else self.replicas.get(journal)

        if spec is None:
            status = Status.JOURNAL_NOT_FOUND
        elif spec.suspend.level == pb.JournalSpec.Suspend.FULL:
            status = Status.SUSPENDED
        elif require_primary and rt.primary == -1:
            status = Status.NO_JOURNAL_PRIMARY_BROKER
        elif not rt.members:
            status = Status.INSUFFICIENT_JOURNAL_BROKERS
        elif not may_proxy and not ours:
            status = (
                Status.NOT_JOURNAL_PRIMARY_BROKER if require_primary else Status.NOT_JOURNAL_BROKER
            )
        else:
            status = Status.OK

        if status != Status.OK:
            process_id = local_id
        if process_id is not None:
            header.process_id.CopyFrom(process_id)

        return Resolution(
            status=status,
            header=header,
            local_id=local_id,
            journal_spec=spec,
            replica=replica,
            # Without a replica nothing can invalidate the resolution: nobody waits on it.
            invalidated=replica.signal if replica is not None else asyncio.Event(),
            assignments_consistent=journals.assignments_consistent(assignments),
            item=item_kv,
            assignments=assignments,
        )


def _check_proxy_header(
    hdr: pb.Header, our_etcd: pb.Header.Etcd, local_id: pb.ProcessSpec.ID
) -> None:
    """A proxied request must come from our etcd cluster and be meant for us."""
    if hdr.etcd.cluster_id != our_etcd.cluster_id:
        raise errors.ResolutionError(
            f"request Etcd ClusterId doesn't match our own "
            f"({hdr.etcd.cluster_id} vs {our_etcd.cluster_id})"
        )
    pid = hdr.process_id
    if (pid.zone or pid.suffix) and (pid.zone, pid.suffix) != (local_id.zone, local_id.suffix):
        raise errors.ResolutionError(
            f"request ProcessId doesn't match our own ({pid.zone}#{pid.suffix} vs "
            f"{local_id.zone}#{local_id.suffix})"
        )
