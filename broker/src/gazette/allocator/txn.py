"""Checked etcd transactions, batched by checkpoint, several in flight.

A :class:`BatchedTxn` gathers *checkpoints* (a group of comparisons and
operations that must apply together) into as few etcd transactions as the
server's limits allow (``TxnConfig.max_ops`` comparisons and as many
operations, 128 by default: etcd's default ``--max-txn-ops``, which Gazette
also assumes), adding the *fixed* comparisons (the leader's member key is
unchanged) to every transaction it sends. A comparison already made by the
same transaction is not repeated: a leader adding 42 items' replicas in one
transaction checks each member key once, not once per replica.

Gazette sends its transactions one after another. Here up to
``TxnConfig.max_in_flight`` are outstanding at once: a round's checkpoints
touch disjoint keys (each item's own assignments) and compare keys the round
never writes (member keys, item keys), so the order etcd applies them in
doesn't matter, and a leader writing 30,000 assignments waits for 235 round
trips a few at a time rather than one by one. Use it as an async context
manager: leaving it flushes and waits for every transaction in flight.

A transaction whose comparisons fail is an error (:class:`errors.TxnFailed`):
nothing is retried here, the allocator retries next round. Once one fails,
no further transaction is sent; those already in flight still complete, and
:attr:`BatchedTxn.revision` is the greatest revision of those which applied.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from types import TracebackType
from typing import Any, Protocol, Self

import aetcd
import grpc

from gazette.allocator import errors, metrics
from gazette.keyspace import errors as ks_errors
from gazette.keyspace import etcd as ks_etcd

log = logging.getLogger(__name__)

MAX_TXN_OPS = 128
"""etcd's default ``--max-txn-ops``: the most comparisons, or operations, of one transaction."""


@dataclasses.dataclass(frozen=True)
class TxnConfig:
    """How the allocator leader batches its writes."""

    max_ops: int = MAX_TXN_OPS
    """Comparisons (and operations) per transaction: at most etcd's ``--max-txn-ops``."""
    max_in_flight: int = 4
    """Transactions outstanding at once (1: Gazette's one after another)."""


Compare = Any  # etcdserverpb.Compare
Op = Any  # etcdserverpb.RequestOp

_rpc: Any = aetcd.rpc


def _b(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def mod_revision_is(key: str, revision: int) -> Compare:
    return _rpc.Compare(
        key=_b(key), result=_rpc.Compare.EQUAL, target=_rpc.Compare.MOD, mod_revision=revision
    )


def create_revision_is(key: str, revision: int) -> Compare:
    return _rpc.Compare(
        key=_b(key), result=_rpc.Compare.EQUAL, target=_rpc.Compare.CREATE, create_revision=revision
    )


def version_is(key: str, version: int) -> Compare:
    return _rpc.Compare(
        key=_b(key), result=_rpc.Compare.EQUAL, target=_rpc.Compare.VERSION, version=version
    )


def version_above(key: str, version: int) -> Compare:
    return _rpc.Compare(
        key=_b(key), result=_rpc.Compare.GREATER, target=_rpc.Compare.VERSION, version=version
    )


def put(key: str, value: bytes, lease: int = 0, ignore_lease: bool = False) -> Op:
    return _rpc.RequestOp(
        request_put=_rpc.PutRequest(
            key=_b(key), value=value, lease=lease, ignore_lease=ignore_lease
        )
    )


def get(key: str) -> Op:
    return _rpc.RequestOp(request_range=_rpc.RangeRequest(key=_b(key)))


def delete(key: str) -> Op:
    return _rpc.RequestOp(request_delete_range=_rpc.DeleteRangeRequest(key=_b(key)))


async def commit(
    client: aetcd.Client, cmps: list[Compare], ops: list[Op], failure: list[Op] | None = None
) -> Any:
    """Run one etcd transaction; returns etcd's TxnResponse."""
    try:
        stub = await ks_etcd.kv_stub(client)
        return await stub.Txn(
            _rpc.TxnRequest(compare=cmps, success=ops, failure=failure or []),
            metadata=ks_etcd.metadata(client),
        )
    except grpc.aio.AioRpcError as e:
        raise errors.EtcdError(f"etcd txn: {e.details() or e.code().name}") from e
    except ks_errors.EtcdError as e:
        raise errors.EtcdError(f"etcd txn: {e}") from e


class CheckpointTxn(Protocol):
    def if_(self, *cmps: Compare) -> None: ...
    def then(self, *ops: Op) -> None: ...
    async def checkpoint(self) -> None: ...
    async def flush(self) -> None: ...
    @property
    def revision(self) -> int: ...


def _compare_identity(c: Compare) -> tuple[Any, ...]:
    """What makes two comparisons the same check."""
    return (
        c.key,
        c.range_end,
        c.target,
        c.result,
        c.WhichOneof("target_union"),
        c.version,
        c.create_revision,
        c.mod_revision,
        c.value,
        c.lease,
    )


class BatchedTxn:
    """Checkpoints grouped into etcd transactions; see the module docstring.

    ``async with BatchedTxn(client, *fixed) as t: ...`` flushes on a clean
    exit and, in any case, waits for the transactions in flight; errors of
    those transactions are raised by :meth:`checkpoint` and :meth:`flush`.
    """

    def __init__(
        self,
        client: aetcd.Client,
        *fixed: Compare,
        config: TxnConfig | None = None,
    ) -> None:
        config = config or TxnConfig()
        if len(fixed) >= config.max_ops:
            raise ValueError("too many fixed comparisons")
        if config.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._client = client
        self._fixed = list(fixed)
        self._fixed_ids = {_compare_identity(c) for c in fixed}
        self._max = config.max_ops
        self._cmps: list[Compare] = []
        self._cmp_ids: set[tuple[Any, ...]] = set()
        self._ops: list[Op] = []
        self._next_cmps: list[Compare] = []
        self._next_ops: list[Op] = []
        self._revision = 0
        self._error: errors.AllocatorError | None = None
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._tg: asyncio.TaskGroup | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self.txns = 0  # transactions applied, for metrics and tests

    async def __aenter__(self) -> Self:
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        tg, self._tg = self._tg, None
        assert tg is not None
        try:
            if e is None:
                await self.flush()
            elif not isinstance(e, asyncio.CancelledError) and self._in_flight:
                # Don't cancel transactions etcd may already have applied: the
                # caller must learn their revision to read through it.
                await asyncio.wait(list(self._in_flight))
        finally:
            if isinstance(e, Exception):
                # Nothing is in flight any more: let the error leave as itself,
                # not wrapped in the TaskGroup's exception group.
                await tg.__aexit__(None, None, None)
            else:
                await tg.__aexit__(et, e, tb)

    @property
    def revision(self) -> int:
        """Greatest revision of the applied transactions (0 if none): read through it."""
        return self._revision

    def if_(self, *cmps: Compare) -> None:
        self._next_cmps.extend(cmps)

    def then(self, *ops: Op) -> None:
        self._next_ops.extend(ops)

    async def checkpoint(self) -> None:
        if self._error is not None:
            raise self._error
        if not self._next_ops:
            if self._next_cmps:
                raise AssertionError("comparisons must come with operations")
            return
        nc, no = self._next_cmps, self._next_ops
        self._next_cmps, self._next_ops = [], []
        if not self._cmps:
            self._start()
        new = self._new_compares(nc)
        if len(self._cmps) + len(new) > self._max or len(self._ops) + len(no) > self._max:
            await self._send()
            self._start()
            new = self._new_compares(nc)
        for ident, c in new:
            self._cmp_ids.add(ident)
            self._cmps.append(c)
        self._ops.extend(no)

    def _start(self) -> None:
        self._cmps.extend(self._fixed)
        self._cmp_ids.update(self._fixed_ids)

    def _new_compares(self, cmps: list[Compare]) -> list[tuple[tuple[Any, ...], Compare]]:
        out: list[tuple[tuple[Any, ...], Compare]] = []
        seen = self._cmp_ids
        for c in cmps:
            ident = _compare_identity(c)
            if ident not in seen and all(ident != o for o, _ in out):
                out.append((ident, c))
        return out

    async def flush(self) -> None:
        """Send what's batched, then wait for every transaction in flight."""
        if self._next_cmps or self._next_ops:
            raise AssertionError("checkpoint before flush")
        if self._error is None:
            await self._send()
        if self._in_flight:
            await asyncio.wait(list(self._in_flight))
        if self._error is not None:
            raise self._error

    async def _send(self) -> None:
        if self._error is not None:
            raise self._error
        if not self._ops:
            self._cmps.clear()
            self._cmp_ids.clear()
            return
        cmps, ops = self._cmps, self._ops
        self._cmps, self._ops, self._cmp_ids = [], [], set()
        await self._slots.acquire()
        if self._error is not None:
            # One in flight failed while we waited for its slot.
            self._slots.release()
            raise self._error
        if self._tg is None:
            await self._commit(cmps, ops)
        else:
            task = self._tg.create_task(self._commit(cmps, ops), name="allocator txn")
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

    async def _commit(self, cmps: list[Compare], ops: list[Op]) -> None:
        try:
            resp = await commit(self._client, cmps, ops)
        except errors.EtcdError as e:
            metrics.leader_txns.labels(metrics.TXN_ERROR).inc()
            self._error = self._error or e
            return
        finally:
            self._slots.release()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "leader etcd txn: %d cmps, %d ops, succeeded=%s, rev=%d",
                len(cmps),
                len(ops),
                resp.succeeded,
                resp.header.revision,
            )
        if not resp.succeeded:
            # The revision of a failed txn may be outside our KeySpace: waiting
            # for it could block for ever, so it is not kept.
            metrics.leader_txns.labels(metrics.TXN_FAILED).inc()
            self._error = self._error or errors.TxnFailed()
            return
        metrics.leader_txns.labels(metrics.TXN_SUCCEEDED).inc()
        self.txns += 1
        self._revision = max(self._revision, int(resp.header.revision))
