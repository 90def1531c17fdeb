"""The etcd :class:`~gazette.operator.reconcile.SpecStore`: reads and writes of specs, batched.

Writes go through :func:`gazette.keyspace.apply_changes`, the checked transaction of the
Apply RPCs. What arrives while etcd answers an earlier call waits and goes in the next
one, so a large ``kubectl apply`` costs a few etcd transactions a batch of objects
instead of two calls an object, and a lone call goes out at once:

* reads of many keys are one read-only transaction of range requests;
* the changes of concurrent applies under one root, each guarded by its own expected
  mod revision, are one transaction. When any guard fails, so does the whole
  transaction (it is all or nothing), and each apply is then made again on its own,
  so each caller learns its own outcome and no write is let through unguarded. A batch
  never names a key twice (etcd refuses that), and stays under etcd's limit of
  operations in a transaction.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import aetcd
import aetcd.exceptions
import aetcd.rpc

from gazette import keyspace
from gazette.keyspace import etcd
from gazette.operator import errors, reconcile

__all__ = ["EtcdSpecStore"]

_MAX_OPS = 100  # Reads or changes in one transaction (etcd's --max-txn-ops is 128 by default).
_IN_FLIGHT = 4  # Transactions of each sort (reads, writes) in flight at once.

_T = TypeVar("_T")
# What a failed etcd call raises (a malformed change, ValueError, too), for its caller.
_FAILURES = (keyspace.errors.EtcdError, aetcd.exceptions.ClientError, ValueError)


@dataclasses.dataclass(slots=True)
class _Pending(Generic[_T]):
    request: _T
    future: asyncio.Future[Any]


class _Batcher(Generic[_T]):
    """Requests run in batches by ``run``, at most ``in_flight`` batches at once.

    ``fits(batch, request)`` says whether ``request`` may join ``batch`` (else it waits
    for a later one). ``run`` settles the futures of its batch; should it raise, the
    futures it left unsettled get the exception.
    """

    def __init__(
        self,
        run: Callable[[list[_Pending[_T]]], Awaitable[None]],
        fits: Callable[[list[_Pending[_T]], _T], bool],
        *,
        in_flight: int = _IN_FLIGHT,
        limit: int = _MAX_OPS,
    ) -> None:
        self._run = run
        self._fits = fits
        self._in_flight = in_flight
        self._limit = limit
        self._queue: collections.deque[_Pending[_T]] = collections.deque()
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: _T) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(request, future))
        self._pump()
        return await future

    def _pump(self) -> None:
        while self._queue and self._running < self._in_flight:
            batch: list[_Pending[_T]] = []
            later: list[_Pending[_T]] = []
            # Look a bounded way down the queue for requests that fit: what doesn't keeps
            # its place for the next batch.
            scan = 4 * self._limit
            while self._queue and len(batch) < self._limit and scan > 0:
                scan -= 1
                pending = self._queue.popleft()
                if pending.future.done():
                    continue  # Its caller gave up (a timeout): nothing to do.
                if not batch or self._fits(batch, pending.request):
                    batch.append(pending)
                else:
                    later.append(pending)
            self._queue.extendleft(reversed(later))
            if not batch:
                return
            self._running += 1
            task = asyncio.create_task(self._settle(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _settle(self, batch: list[_Pending[_T]]) -> None:
        try:
            await self._run(batch)
        except _FAILURES as e:
            _fail(batch, e)  # Each caller's call failed so.
        finally:
            # Whatever else ended the batch (a bug, the loop closing) fails its callers too,
            # rather than leave them waiting for their timeouts.
            _fail(batch, errors.SpecStoreError("the etcd call ended without an answer"))
            self._running -= 1
            self._pump()


def _fail(batch: Sequence[_Pending[Any]], error: BaseException) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(error)


@dataclasses.dataclass(frozen=True, slots=True)
class _Apply:
    root: str
    changes: tuple[keyspace.Change, ...]


def _read_fits(batch: list[_Pending[str]], key: str) -> bool:
    del batch, key
    return True


def _apply_fits(batch: list[_Pending[_Apply]], request: _Apply) -> bool:
    if batch[0].request.root != request.root:
        return False
    names = {c.name for p in batch for c in p.request.changes}
    if any(c.name in names for c in request.changes):
        return False  # etcd refuses a transaction writing one key twice.
    return len(names) + len(request.changes) <= _MAX_OPS


class EtcdSpecStore:
    """Specs in a real etcd, through a connected ``aetcd.Client``.

    ``timeout`` bounds each call (the wait for its batch included), so a hung etcd
    turns into an ``EtcdError`` status and a retry rather than a stuck handler.
    """

    def __init__(self, client: aetcd.Client, *, timeout: float = 10.0) -> None:
        self._client = client
        self._timeout = timeout
        self._reads = _Batcher(self._read, _read_fits)
        self._writes = _Batcher(self._write, _apply_fits)

    async def get(self, root: str, name: str) -> reconcile.Stored | None:
        key = keyspace.item_key(root, name)
        try:
            async with asyncio.timeout(self._timeout):
                stored: reconcile.Stored | None = await self._reads.submit(key)
        except (keyspace.errors.EtcdError, aetcd.exceptions.ClientError, TimeoutError) as e:
            raise errors.SpecStoreError(f"reading {key}: {e or type(e).__name__}") from e
        return stored

    async def apply(self, root: str, changes: Sequence[keyspace.Change]) -> keyspace.ApplyResult:
        try:
            async with asyncio.timeout(self._timeout):
                result: keyspace.ApplyResult = await self._writes.submit(
                    _Apply(root, tuple(keyspace.Change(*c) for c in changes))
                )
        except (keyspace.errors.EtcdError, aetcd.exceptions.ClientError, TimeoutError) as e:
            raise errors.SpecStoreError(f"writing under {root}: {e or type(e).__name__}") from e
        return result

    async def check(self, root: str) -> None:
        """A quorum read under ``root`` (the readiness probe): raises SpecStoreError unless
        etcd answers."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.get(root.encode())
        except (aetcd.exceptions.ClientError, TimeoutError) as e:
            raise errors.SpecStoreError(f"etcd: {e or type(e).__name__}") from e

    async def _read(self, batch: list[_Pending[str]]) -> None:
        keys = sorted({p.request for p in batch})
        request = aetcd.rpc.TxnRequest(
            success=[
                aetcd.rpc.RequestOp(request_range=aetcd.rpc.RangeRequest(key=k.encode()))
                for k in keys
            ]
        )
        response = await etcd.txn(self._client, request, f"reading {len(keys)} specs")
        found: dict[str, reconcile.Stored | None] = {}
        for key, op in zip(keys, response.responses, strict=True):
            kvs = op.response_range.kvs
            found[key] = (
                reconcile.Stored(bytes(kvs[0].value), int(kvs[0].mod_revision)) if kvs else None
            )
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(found[pending.request])

    async def _write(self, batch: list[_Pending[_Apply]]) -> None:
        root = batch[0].request.root
        if len(batch) > 1:
            changes = [c for p in batch for c in p.request.changes]
            try:
                result = await keyspace.apply_changes(self._client, root, changes)
            except ValueError:
                result = None  # A malformed change: on its own, only its caller fails.
            except keyspace.errors.EtcdError as e:
                if e.code != "INVALID_ARGUMENT":
                    raise  # etcd failed: it fails each of them alike.
                result = None  # Refused as a whole (say, one key twice in one apply).
            if result is not None and result.succeeded:
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_result(result)
                return
            # A guard failed, failing them all: each apply again on its own, so only
            # the ones whose key changed fail.
        await asyncio.gather(*(self._write_one(p) for p in batch))

    async def _write_one(self, pending: _Pending[_Apply]) -> None:
        if pending.future.done():
            return
        try:
            result = await keyspace.apply_changes(
                self._client, pending.request.root, pending.request.changes
            )
        except _FAILURES as e:
            _fail([pending], e)
            return
        if not pending.future.done():
            pending.future.set_result(result)
