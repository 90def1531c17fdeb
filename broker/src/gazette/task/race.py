"""Awaiting one thing unless an event comes first, leaving nothing behind."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


async def race(
    aw: Awaitable[T],
    *events: asyncio.Event,
    give_back: Callable[[T], object] | None = None,
) -> tuple[T, bool] | tuple[None, bool]:
    """Await ``aw`` unless one of ``events`` is set first: ``(result, interrupted)``.

    * ``aw`` finished first (or together with an event): ``(its result, False)``;
      its failure is raised.
    * An event came first: ``(None, True)``. ``aw`` is cancelled and has ended
      before this returns (a stream it was reading is free again). A coroutine
      is not even started if an event is already set.
    * We are cancelled (for a time limit, wrap the call in ``asyncio.timeout``):
      ``aw`` is cancelled and ended likewise, then the cancellation goes on.

    Whatever ``aw`` obtained that nobody will take is handed to ``give_back``:
    a ``Queue.get()`` that completed as we were cancelled, or that finished
    despite its cancellation. Without this, a spool or pipeline taken from
    its one-slot queue at that moment is lost and the journal wedges (a
    Replicate stream whose peer hung up as it got the spool). An abandoned
    ``aw`` that failed has its failure retrieved (logged at debug), so asyncio
    never reports it as unretrieved.
    """
    if inspect.iscoroutine(aw) and any(e.is_set() for e in events):
        aw.close()
        return None, True

    fut = asyncio.ensure_future(aw)
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait((fut, *waits), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # We were cancelled: ``fut`` is abandoned.
        _end(waits)
        if _abandon(fut, give_back):
            # A second cancellation interrupts this wait; ``fut`` still settles.
            await asyncio.wait((fut,))
        raise
    # The event waits hold nothing: cancelled, they end at the loop's next turn.
    _end(waits)
    if fut.done():
        return fut.result(), False
    if _abandon(fut, give_back):
        await asyncio.wait((fut,))
    return None, True


def _end(futures: Sequence[asyncio.Future[Any]]) -> None:
    for f in futures:
        f.cancel()


def _abandon(fut: asyncio.Future[T], give_back: Callable[[T], object] | None) -> bool:
    """Cancel ``fut``; once it is done, retrieve its outcome and give back a result.

    Returns whether ``fut`` is still running (it was cancelled, and will settle).
    """

    def settle(f: asyncio.Future[T]) -> None:
        if f.cancelled():
            return
        if (e := f.exception()) is not None:
            log.debug("an abandoned await failed: %s", e)
        elif give_back is not None:
            give_back(f.result())

    if fut.done():
        settle(fut)
        return False
    fut.cancel()
    fut.add_done_callback(settle)
    return True
