"""Fakes shared by the runtime's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gazette.broker.client import AsyncOperation


class TaskShard:
    """What stores use of a shard: its FQN, and ``run_operation`` on a task group of the test."""

    def __init__(self, fqn: str, tg: asyncio.TaskGroup) -> None:
        self.fqn = fqn
        self._tg = tg

    def run_operation(self, name: str, coro: Coroutine[Any, Any, None]) -> AsyncOperation:
        op = AsyncOperation()

        async def run() -> None:
            try:
                await coro
            except Exception as e:  # noqa: BLE001 - the operation carries it.
                op.resolve(e)
            else:
                op.resolve(None)

        self._tg.create_task(run())
        return op
