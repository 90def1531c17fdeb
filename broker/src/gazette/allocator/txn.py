"""Checked etcd transactions, batched by checkpoint.

A :class:`BatchedTxn` gathers *checkpoints* (a group of comparisons and
operations that must apply together) into as few etcd transactions as the
server's limits allow (128 comparisons / 128 operations, etcd's default
``--max-txn-ops``), adding the *fixed* comparisons (the leader's member key
is unchanged) to every transaction it sends. A transaction whose comparisons
fail is an error: nothing is retried here, the allocator retries next round.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import aetcd
import grpc

from gazette.allocator import errors
from gazette.keyspace import errors as ks_errors
from gazette.keyspace import etcd as ks_etcd

log = logging.getLogger(__name__)

MAX_TXN_OPS = 128

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


class BatchedTxn:
    """Checkpoints grouped into etcd transactions; see the module docstring."""

    def __init__(self, client: aetcd.Client, *fixed: Compare, max_ops: int = MAX_TXN_OPS) -> None:
        if len(fixed) >= max_ops:
            raise ValueError("too many fixed comparisons")
        self._client = client
        self._fixed = list(fixed)
        self._max = max_ops
        self._cmps: list[Compare] = []
        self._ops: list[Op] = []
        self._next_cmps: list[Compare] = []
        self._next_ops: list[Op] = []
        self._revision = 0
        self.txns = 0  # transactions sent, for metrics and tests

    @property
    def revision(self) -> int:
        """Revision of the last applied transaction (0 if none): read through it."""
        return self._revision

    def if_(self, *cmps: Compare) -> None:
        self._next_cmps.extend(cmps)

    def then(self, *ops: Op) -> None:
        self._next_ops.extend(ops)

    async def checkpoint(self) -> None:
        if not self._next_ops:
            if self._next_cmps:
                raise AssertionError("comparisons must come with operations")
            return
        nc, no = self._next_cmps, self._next_ops
        self._next_cmps, self._next_ops = [], []
        if not self._cmps:
            self._cmps.extend(self._fixed)
        if len(self._cmps) + len(nc) > self._max or len(self._ops) + len(no) > self._max:
            await self.flush()
            self._cmps.extend(self._fixed)
        self._cmps.extend(nc)
        self._ops.extend(no)

    async def flush(self) -> None:
        if self._next_cmps or self._next_ops:
            raise AssertionError("checkpoint before flush")
        if not self._ops:
            return
        cmps, ops = self._cmps, self._ops
        self._cmps, self._ops = [], []
        resp = await commit(self._client, cmps, ops)
        self.txns += 1
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
            raise errors.TxnFailed()
        self._revision = int(resp.header.revision)
