"""Resolving a journal to its Route, and whether this broker serves, proxies or refuses.

The rules are Gazette's ``broker/resolver.go``: local id from our member key
(or a placeholder once it's gone), proxy header checks, waiting for a minimum
revision, the journal's spec and assignments (hidden unless the caller's
claims allow them), the Route with endpoints, the process id that should
serve, and the status, first match wins::

    no spec                               JOURNAL_NOT_FOUND
    suspended FULL                        SUSPENDED
    require_primary and no primary        NO_JOURNAL_PRIMARY_BROKER
    no members                            INSUFFICIENT_JOURNAL_BROKERS
    not may_proxy and not ours            NOT_JOURNAL_PRIMARY_BROKER / NOT_JOURNAL_BROKER
    otherwise                             OK

A non-OK resolution carries our own id as process id: we authored the error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import errors, keys, routes
from gazette.allocator.allocator import ObservedState
from gazette.broker import protocol as pb

Status = pb.Status
_MISSING_ID = ("local-BrokerSpec", "missing-from-Etcd")


@dataclasses.dataclass(frozen=True)
class ResolveOptions:
    may_proxy: bool = False
    require_primary: bool = False
    min_etcd_revision: int = 0
    proxy_header: pb.Header | None = None


@dataclasses.dataclass
class Resolution:
    status: int
    local_id: pb.ProcessSpec.ID
    header: pb.Header
    spec: pb.JournalSpec | None
    item: keys.KeyValue | None
    assignments: Sequence[keys.KeyValue]
    local_replica: Any = None
    """What ``local_replica(journal)`` returned, if this broker holds a replica."""


class Resolver:
    """Resolves journals against an :class:`ObservedState` of the broker keyspace.

    ``authorized(spec)`` says whether the caller's claims select the journal
    (default: all). ``local_replica(journal)`` returns this broker's replica of
    a journal, if any; set ``stopped`` once local replicas stopped serving.
    """

    def __init__(
        self,
        observed: ObservedState,
        *,
        local_replica: Callable[[str], Any] | None = None,
    ) -> None:
        self.observed = observed
        self.local_replica = local_replica
        self.stopped = False

    def local_id(self) -> pb.ProcessSpec.ID:
        m = self.observed.state.local_member
        if m is None:
            return pb.ProcessSpec.ID(zone=_MISSING_ID[0], suffix=_MISSING_ID[1])
        return pb.ProcessSpec.ID(zone=m.zone, suffix=m.suffix)

    async def resolve(
        self,
        journal: str,
        opts: ResolveOptions = ResolveOptions(),
        authorized: Callable[[pb.JournalSpec], bool] | None = None,
    ) -> Resolution:
        journal = journal.split(";", 1)[0]  # strip any ;meta suffix
        local_id = self.local_id()
        min_rev = opts.min_etcd_revision
        ks = self.observed.ks

        if (hdr := opts.proxy_header) is not None:
            our_etcd = ks.header
            if hdr.etcd.cluster_id != our_etcd.cluster_id:
                raise errors.ResolveError(
                    f"request Etcd ClusterId doesn't match our own ({hdr.etcd.cluster_id} vs {our_etcd.cluster_id})"
                )
            pid = hdr.process_id
            if (pid.zone or pid.suffix) and (pid.zone, pid.suffix) != (
                local_id.zone,
                local_id.suffix,
            ):
                raise errors.ResolveError(
                    f"request ProcessId doesn't match our own ({pid.zone}#{pid.suffix} vs "
                    f"{local_id.zone}#{local_id.suffix})"
                )
            min_rev = max(min_rev, hdr.etcd.revision)

        if min_rev > ks.revision:
            await ks.wait_for_revision(min_rev)
            local_id = self.local_id()

        state = self.observed.state
        header = pb.Header()
        header.etcd.CopyFrom(ks.header)

        spec: pb.JournalSpec | None = None
        item_kv: keys.KeyValue | None = None
        assignments: Sequence[keys.KeyValue] = ()
        index = state.find_item(journal)
        if index != -1:
            candidate = state.item(index).spec
            if authorized is None or authorized(candidate):
                spec, item_kv = candidate, state.items[index]
                assignments = state.assignments_of(index)

        rt = routes.route_of(assignments)
        routes.attach_endpoints(rt, state)
        header.route.CopyFrom(rt)

        def is_local(m: pb.ProcessSpec.ID) -> bool:
            return m.zone == local_id.zone and m.suffix == local_id.suffix

        process_id: pb.ProcessSpec.ID | None = None
        if opts.require_primary and rt.primary != -1:
            process_id = rt.members[rt.primary]
        elif not opts.require_primary and any(is_local(m) for m in rt.members):
            process_id = local_id

        replica = None
        if process_id is not None and is_local(process_id) and self.stopped:
            raise errors.ResolveError("resolver has stopped serving local replicas")
        if self.local_replica is not None and not self.stopped:
            replica = self.local_replica(journal)

        ours = process_id is not None and is_local(process_id)
        if spec is None:
            status = Status.JOURNAL_NOT_FOUND
        elif spec.suspend.level == pb.JournalSpec.Suspend.FULL:
            status = Status.SUSPENDED
        elif opts.require_primary and rt.primary == -1:
            status = Status.NO_JOURNAL_PRIMARY_BROKER
        elif not rt.members:
            status = Status.INSUFFICIENT_JOURNAL_BROKERS
        elif not opts.may_proxy and not ours:
            status = (
                Status.NOT_JOURNAL_PRIMARY_BROKER
                if opts.require_primary
                else Status.NOT_JOURNAL_BROKER
            )
        else:
            status = Status.OK

        if status != Status.OK:
            process_id = local_id
        if process_id is not None:
            header.process_id.CopyFrom(process_id)

        return Resolution(status, local_id, header, spec, item_kv, assignments, replica)
