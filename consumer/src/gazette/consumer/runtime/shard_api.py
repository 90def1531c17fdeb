"""The ``consumer.Shard`` gRPC service of a consumer process (Gazette ``consumer/shard_api.go``).

* **List**: every shard matching the selector (the ``id`` meta-label
  included), with its revisions, Route (endpoints from the members' specs)
  and the ReplicaStatus of each assignment, in Route order.
* **Stat**: a shard's progress — the read-through offsets of its committed
  transactions and where their ACKs were published — from its primary. A
  process that is not the primary proxies the request to it once (the
  forwarded request carries the header). Offsets in ``read_through`` make
  the primary wait until it has committed through them (a read barrier).
* **Apply**: upserts and deletes of ShardSpecs in one checked etcd
  transaction (``expect_mod_revision``: 0 must not exist, -1 unconditional).
* **GetHints**: a shard's primary and backup recovery-log hints, as etcd holds them.
* **Unassign**: removes shards' assignments (FAILED ones always; the primary
  unless ``only_failed``), so the allocator assigns them afresh.

Statuses map as Gazette's: SHARD_NOT_FOUND, NO_SHARD_PRIMARY,
ETCD_TRANSACTION_FAILED, SHARD_STOPPED; bad requests are INVALID_ARGUMENT
naming the field.

Authorization (``--consumer.auth-keys``; Gazette ``consumer/protocol/auth.go``):
every RPC first verifies its bearer token — List needs LIST, Stat and
GetHints READ, Apply and Unassign APPLY — and a refusal is UNAUTHENTICATED
with the reason. The token's selector then limits the RPC as Gazette's
handlers do: List shows, and Stat and GetHints find, only the shards it
selects (on their labels and ``id``); an Apply upsert must be selected by its
new labels, and a delete or an Unassign by the shard's ``id`` alone, else the
whole request is UNAUTHENTICATED (``not authorized to <id>``). A Stat ends
(DEADLINE_EXCEEDED) when its token expires, and one proxied to the primary
carries this process's own token, narrowed to READ of that shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import grpc

from gazette import allocator, keyspace
from gazette.allocator import txn as etcd_txn
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.consumer.runtime.resolver import Resolver
from gazette.consumer.runtime.service import Service

__all__ = ["ShardAPI"]

log = logging.getLogger(__name__)


class ShardAPI(pc_grpc.ShardServicer):
    """Serves ``consumer.Shard`` from a process's :class:`Service`."""

    def __init__(self, svc: Service, etcd: Any, resolver: Resolver) -> None:
        self.svc = svc
        self.etcd = etcd
        #: Also verifies requests' tokens and signs those of proxied Stats.
        self.resolver = resolver

    # -- helpers ----------------------------------------------------------

    @property
    def _state(self) -> allocator.State:
        return self.svc.observed.state

    def _header(self) -> pb.Header:
        return self.resolver.header()

    async def _invalid(self, context: grpc.aio.ServicerContext, request: Any) -> bool:
        try:
            pc.validate(request)
        except pb.ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return True
        return False

    def _shard(self, state: allocator.State, item_index: int) -> pc.ListResponse.Shard:
        item_kv = state.items[item_index]
        item: allocator.Item = item_kv.decoded
        out = pc.ListResponse.Shard(
            mod_revision=item_kv.mod_revision, create_revision=item_kv.create_revision
        )
        out.spec.CopyFrom(item.spec)
        assignments = state.assignments_of(item_index)
        out.route.CopyFrom(allocator.route_of(assignments))
        allocator.attach_endpoints(out.route, state)
        for kv in assignments:
            out.status.append(kv.decoded.value)
        return out

    # -- RPCs ---------------------------------------------------------------

    async def List(
        self, request: pc.ListRequest, context: grpc.aio.ServicerContext
    ) -> pc.ListResponse:
        claims = await self.resolver.verify(context, auth.Capability.LIST)
        if await self._invalid(context, request):
            return pc.ListResponse()
        state = self._state
        resp = pc.ListResponse(status=pc.Status.OK)
        resp.header.CopyFrom(self._header())
        for i, kv in enumerate(state.items):
            spec: pc.ShardSpec = kv.decoded.spec
            labels = pc.label_set_ext(spec)
            if pb.matches(request.selector, labels) and pb.matches(claims.selector, labels):
                resp.shards.append(self._shard(state, i))
        return resp

    async def Stat(
        self, request: pc.StatRequest, context: grpc.aio.ServicerContext
    ) -> pc.StatResponse:
        claims = await self.resolver.verify(context, auth.Capability.READ)
        if await self._invalid(context, request):
            return pc.StatResponse()
        try:
            async with _until_expiry(claims):
                return await self._stat(request, claims, context)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded")
            raise  # Not reached: abort raises.

    async def _stat(
        self, request: pc.StatRequest, claims: auth.Claims, context: grpc.aio.ServicerContext
    ) -> pc.StatResponse:
        resp = pc.StatResponse()
        res = self.resolver.resolve(
            request.shard, request.header if request.HasField("header") else None, claims
        )
        resp.header.CopyFrom(res.header)
        if res.status != pc.Status.OK and res.status != pc.Status.SHARD_STOPPED:
            resp.status = res.status
            return resp
        if res.endpoint:
            forwarded = pc.StatRequest()
            forwarded.CopyFrom(request)
            forwarded.header.CopyFrom(res.header)
            proxied: pc.StatResponse = await pc_grpc.ShardStub(
                self.resolver.channel(res.endpoint)
            ).Stat(
                forwarded,
                timeout=context.time_remaining(),
                metadata=self.resolver.authorize(auth.Capability.READ, request.shard),
            )
            return proxied
        # Primary here: wait (even while its store is still being recovered).
        replica = self.svc.replicas.get(request.shard)
        if replica is None:
            resp.status = pc.Status.SHARD_STOPPED
            return resp
        try:
            await self._wait_read_through(replica, dict(request.read_through))
        except _Stopped:
            resp.status = pc.Status.SHARD_STOPPED
            return resp
        read_through, publish_at = replica.progress()
        resp.status = pc.Status.OK
        resp.read_through.update(read_through)
        resp.publish_at.update(publish_at)
        return resp

    async def _wait_read_through(self, replica: Any, want: dict[str, int]) -> None:
        sources = {s.journal for s in replica.spec.sources}
        want = {j: o for j, o in want.items() if j in sources and o > 0}
        while True:
            if replica.stopping.is_set() or replica.primary_done.done():
                raise _Stopped
            if replica.store_ready.is_set():
                have, _ = replica.progress()
                if all(have.get(j, 0) >= o for j, o in want.items()):
                    return
            waits = [
                asyncio.ensure_future(replica.wait_progress()),
                asyncio.ensure_future(replica.store_ready.wait()),
                asyncio.ensure_future(replica.stopping.wait()),
            ]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    async def Apply(
        self, request: pc.ApplyRequest, context: grpc.aio.ServicerContext
    ) -> pc.ApplyResponse:
        claims = await self.resolver.verify(context, auth.Capability.APPLY)
        if await self._invalid(context, request):
            return pc.ApplyResponse()
        for change in request.changes:
            # Upserts by their new labels; deletes, as Unassign, by id alone.
            if change.HasField("upsert"):
                shard, labels = change.upsert.id, pc.label_set_ext(change.upsert)
            else:
                shard, labels = change.delete, _id_labels(change.delete)
            if not pb.matches(claims.selector, labels):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {shard}")
        changes: list[keyspace.Change] = []
        hint_puts: list[Any] = []
        for change in request.changes:
            if change.HasField("primary_hints"):
                hint_puts.append(
                    etcd_txn.put(
                        pc.hint_primary_key(change.upsert), rl.hints_to_json(change.primary_hints)
                    )
                )
            if change.HasField("upsert"):
                name, value = change.upsert.id, change.upsert.SerializeToString()
                changes.append(keyspace.Change(name, value, change.expect_mod_revision))
            else:
                changes.append(keyspace.Change(change.delete, None, change.expect_mod_revision))
        ks = self.svc.observed.ks
        result = await keyspace.apply_changes(self.etcd, ks.root, changes)
        if result.succeeded and hint_puts:
            # Gazette puts the hints in the same transaction; ours follow the specs' one.
            await etcd_txn.commit(self.etcd, [], hint_puts)
        resp = pc.ApplyResponse()
        if result.changed:
            with contextlib.suppress(TimeoutError):
                await ks.wait_for_revision(result.revision, timeout=10.0)
            resp.status = pc.Status.OK
        else:
            resp.status = pc.Status.ETCD_TRANSACTION_FAILED
        resp.header.CopyFrom(self._header())
        resp.header.etcd.revision = result.revision
        return resp

    async def GetHints(
        self, request: pc.GetHintsRequest, context: grpc.aio.ServicerContext
    ) -> pc.GetHintsResponse:
        claims = await self.resolver.verify(context, auth.Capability.READ)
        if await self._invalid(context, request):
            return pc.GetHintsResponse()
        resp = pc.GetHintsResponse()
        resp.header.CopyFrom(self._header())
        state = self._state
        index = state.find_item(request.shard)
        if index == -1:
            resp.status = pc.Status.SHARD_NOT_FOUND
            return resp
        spec: pc.ShardSpec = state.items[index].decoded.spec
        if not pb.matches(claims.selector, pc.label_set_ext(spec)):
            resp.status = pc.Status.SHARD_NOT_FOUND
            return resp
        journal = pc.recovery_log(spec)
        if journal:
            keys = [pc.hint_primary_key(spec), *pc.hint_backup_keys(spec)]
            result = await etcd_txn.commit(self.etcd, [], [etcd_txn.get(k) for k in keys])
            for i, r in enumerate(result.responses):
                slot = resp.primary_hints if i == 0 else resp.backup_hints.add()
                kvs = r.response_range.kvs
                if kvs and kvs[0].value:
                    hints = rl.hints_from_value(bytes(kvs[0].value))
                    if hints.log != journal:
                        await context.abort(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            f"hints.Log {hints.log} != ShardSpec.RecoveryLog {journal}",
                        )
                    slot.hints.CopyFrom(hints)
        resp.status = pc.Status.OK
        return resp

    async def Unassign(
        self, request: pc.UnassignRequest, context: grpc.aio.ServicerContext
    ) -> pc.UnassignResponse:
        claims = await self.resolver.verify(context, auth.Capability.APPLY)
        if await self._invalid(context, request):
            return pc.UnassignResponse()
        for shard_id in request.shards:
            if not pb.matches(claims.selector, _id_labels(shard_id)):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {shard_id}"
                )
        state = self._state
        cmps: list[Any] = []
        ops: list[Any] = []
        affected: list[str] = []
        for shard_id in request.shards:
            index = state.find_item(shard_id)
            if index == -1:
                continue
            for kv in state.assignments_of(index):
                a: allocator.Assignment = kv.decoded
                failed = a.value.code == pc.ReplicaStatus.FAILED
                if failed or (a.slot == 0 and not request.only_failed):
                    cmps.append(etcd_txn.mod_revision_is(kv.key, kv.mod_revision))
                    ops.append(etcd_txn.delete(kv.key))
                    if shard_id not in affected:
                        affected.append(shard_id)
        resp = pc.UnassignResponse(status=pc.Status.OK, shards=affected)
        if request.dry_run or not ops:
            return resp
        result = await etcd_txn.commit(self.etcd, cmps, ops)
        if not result.succeeded:
            resp.status = pc.Status.ETCD_TRANSACTION_FAILED
            return resp
        with contextlib.suppress(TimeoutError):
            await self.svc.observed.ks.wait_for_revision(int(result.header.revision), timeout=10.0)
        return resp


class _Stopped(Exception):
    pass


def _id_labels(shard_id: str) -> pb.LabelSet:
    return pb.LabelSet(labels=[pb.Label(name="id", value=shard_id)])


def _until_expiry(claims: auth.Claims) -> asyncio.Timeout:
    """A timeout at the claims' expiry (none for claims that don't expire)."""
    if claims.expires_at is None:
        return asyncio.timeout(None)
    loop = asyncio.get_running_loop()
    return asyncio.timeout_at(loop.time() + max(0.0, claims.expires_at - time.time()))
