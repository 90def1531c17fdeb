"""A named group of asyncio tasks in which the first failure stops the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Group:
    """A named :class:`asyncio.TaskGroup` whose first failure leaves as itself.

    Tasks are spawned with a name. When one fails, the group (as the TaskGroup
    beneath it) cancels its siblings and the body of the ``async with``, then
    waits for them all. The failure is logged once, here, naming the group
    and the task, and is raised out of the ``async with`` as itself (not as
    an exception group), with a note naming the task: catch it by type, and
    don't log it again. Failures of siblings while they are being cancelled
    are logged and dropped: the first one is the cause.

    If the body itself raises, that exception leaves as itself once the
    tasks are cancelled and done. :meth:`cancel` ends every task without
    error (Gazette's ``Group.Cancel``); the body goes on.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._tg = asyncio.TaskGroup()
        self._tasks: list[asyncio.Task[Any]] = []
        self._failure: Exception | None = None

    @property
    def failure(self) -> Exception | None:
        """The first failure of a task, if any."""
        return self._failure

    async def __aenter__(self) -> Self:
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._tg.__aexit__(et, exc, tb)
        except BaseExceptionGroup as eg:
            if exc is not None and any(e is exc for e in eg.exceptions):
                return  # The body failed first: its exception goes on as itself.
            failure = self._failure
            if failure is None:  # Every task failure passes _failed(): can't happen.
                raise
        else:
            return
        # Outside the handler, and keeping its own cause: the exception group is noise.
        raise failure from failure.__cause__

    def spawn(self, name: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` as task ``name`` of the group."""
        task = self._tg.create_task(self._run(name, coro), name=f"{self.name}/{name}")
        self._tasks.append(task)
        return task

    def cancel(self) -> None:
        """Cancel every task of the group (not the body): they end without error."""
        for task in self._tasks:
            task.cancel()

    async def _run(self, name: str, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return await coro
        except Exception as e:
            self._failed(name, e)
            raise

    def _failed(self, name: str, e: Exception) -> None:
        if self._failure is None:
            self._failure = e
            e.add_note(f"in task {name!r} of group {self.name!r}")
            log.error("task %s of group %s failed", name, self.name, exc_info=e)
        else:
            log.warning(
                "task %s of group %s also failed as the group stopped: %s",
                name,
                self.name,
                e,
                exc_info=e,
            )
