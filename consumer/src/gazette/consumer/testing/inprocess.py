"""A consumer process in the test's own event loop (``process.serve``), for API tests.

:func:`serving` runs one as an async context manager and stops it on exit;
:func:`argv` is its loopback command line; :class:`DisabledShards` is an
application for processes whose shards are all disabled (only their
``consumer.Shard`` API is under test: gazctl, tokens, TLS); :class:`MemoryStore` a
store of one checkpoint in memory, for applications that commit but never fail over.

Usage::

    async with testing.serving(
        testing.argv(etcd=etcd.endpoint, broker=broker.endpoint, prefix="/gazette/consumers/t",
                     extra=["--consumer.auth-keys", key]),
        testing.DisabledShards(),
    ) as serving:
        ...  # serving.endpoint
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from typing import Any

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import config, process

__all__ = ["DisabledShards", "MemoryStore", "argv", "serving"]


class DisabledShards:
    """An application never called: every shard of the process is disabled."""

    async def new_store(self, shard: Any) -> Any:
        raise AssertionError("a disabled shard was assigned")

    def new_message(self, spec: Any) -> Any:
        raise AssertionError("a disabled shard was assigned")

    async def consume_message(self, *args: Any) -> None:
        raise AssertionError("a disabled shard was assigned")

    async def finalize_txn(self, *args: Any) -> None:
        raise AssertionError("a disabled shard was assigned")


class MemoryStore:
    """A store whose checkpoint lives in memory: enough for a shard to commit
    transactions, not to fence an older primary (for tests that fail none over)."""

    def __init__(self) -> None:
        self.checkpoint = pc.Checkpoint()

    async def restore_checkpoint(self, shard: Any) -> pc.Checkpoint:
        return self.checkpoint

    def start_commit(
        self, shard: Any, cp: pc.Checkpoint, wait_for: Collection[AsyncOperation]
    ) -> AsyncOperation:
        async def commit() -> None:
            for op in wait_for:
                await op.wait()
            self.checkpoint = cp

        op: AsyncOperation = shard.run_operation("commit", commit())
        return op

    async def destroy(self) -> None:
        pass


def argv(
    *,
    etcd: str,
    broker: str,
    prefix: str,
    id: str = "consumer-0",
    zone: str = "local",
    extra: Iterable[str] = (),
) -> list[str]:
    """Flags of a process on 127.0.0.1 (any port, no HTTP port, a 3 s lease)."""
    return [
        "--consumer.app", "unused:Unused",
        "--consumer.zone", zone,
        "--consumer.id", id,
        "--consumer.host", "127.0.0.1",
        "--consumer.http-port", "-1",
        "--broker.address", broker,
        "--etcd.address", etcd,
        "--etcd.prefix", prefix,
        "--etcd.lease", "3s",
        "--consumer.drain-timeout", "5s",
        *extra,
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def serving(
    args: Sequence[str], app: Any, *, within: float = 30.0
) -> AsyncIterator[process.Serving]:
    """Serve ``app`` with the flags ``args`` (no environment) until the block ends.

    Fails if the process does not start, or does not stop, within ``within`` seconds.
    """
    cfg = config.parse(list(args), env={})
    stop = asyncio.Event()
    started: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(process.serve(cfg, app, stop=stop, started=started))
    try:
        async with asyncio.timeout(within):
            done, _ = await asyncio.wait((started, task), return_when=asyncio.FIRST_COMPLETED)
        if started not in done:
            task.result()  # Raises what ended it.
            raise RuntimeError("the consumer process returned before it served")
        yield started.result()
    finally:
        stop.set()
        async with asyncio.timeout(within):
            await task
