"""Recovery-log journals on an in-process broker, and a bare shard, for tests of stores."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.server import testing as server_testing

__all__ = ["TaskShard", "recovery_logs"]


@contextlib.asynccontextmanager
async def recovery_logs(
    etcd_endpoint: str, work_dir: str | os.PathLike[str], *names: str
) -> AsyncIterator[client.JournalClient]:
    """One in-process broker with recovery-log journals ``names``, each taking appends.

    Yields a client of the broker; the broker stops (and its etcd root is wiped) on exit.
    """
    async with (
        server_testing.InProcessCluster(
            etcd_endpoint, work_dir=pathlib.Path(work_dir), brokers=1
        ) as cluster,
        client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc,
    ):
        specs = [
            testing.journal_spec(
                name, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)]
            )
            for name in names
        ]
        await client.apply_journals(
            jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=s) for s in specs])
        )
        deadline = time.monotonic() + 30
        for name in names:
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, name, b""), 5)
                    break
                except (client.errors.ClientError, TimeoutError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        yield jc


class TaskShard:
    """What stores use of a shard: its FQN, and ``run_operation`` on a caller's task group."""

    def __init__(self, fqn: str, tg: asyncio.TaskGroup) -> None:
        self.fqn = fqn
        self._tg = tg

    def run_operation(self, name: str, coro: Coroutine[Any, Any, None]) -> client.AsyncOperation:
        op = client.AsyncOperation()

        async def run() -> None:
            try:
                await coro
            except Exception as e:  # noqa: BLE001 - the operation carries it.
                op.resolve(e)
            else:
                op.resolve(None)

        self._tg.create_task(run())
        return op
