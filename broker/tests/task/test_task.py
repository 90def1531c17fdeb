"""gazette.task: Group (first failure cancels the rest, leaves as itself) and race."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gazette import task


class Boom(Exception):
    pass


# -- Group ---------------------------------------------------------------------------------


async def test_group_runs_tasks_to_completion() -> None:
    async with task.Group("g") as g:
        a = g.spawn("a", asyncio.sleep(0, result=1))
        b = g.spawn("b", asyncio.sleep(0, result=2))
    assert (a.result(), b.result()) == (1, 2)
    assert a.get_name() == "g/a" and g.failure is None


async def test_first_failure_cancels_siblings_and_body_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sibling_cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            sibling_cancelled.set()
            raise

    async def fail() -> None:
        await asyncio.sleep(0)
        raise Boom("bad")

    body_cancelled = False
    with caplog.at_level(logging.INFO, logger="gazette.task"), pytest.raises(Boom) as info:
        async with task.Group("broker") as g:
            g.spawn("sibling", sibling())
            g.spawn("failing", fail())
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                body_cancelled = True
                raise
    assert sibling_cancelled.is_set() and body_cancelled
    assert g.failure is info.value
    assert "in task 'failing' of group 'broker'" in (info.value.__notes__ or [])
    records = [r for r in caplog.records if r.name == "gazette.task.group"]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert "failing" in records[0].getMessage() and "broker" in records[0].getMessage()


async def test_failure_keeps_its_cause() -> None:
    async def fail() -> None:
        try:
            raise KeyError("k")
        except KeyError as e:
            raise Boom("wrapped") from e

    with pytest.raises(Boom) as info:
        async with task.Group("g") as g:
            g.spawn("f", fail())
    assert isinstance(info.value.__cause__, KeyError)


async def test_later_failures_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def fail_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ValueError("cleanup failed") from None

    async def fail() -> None:
        await asyncio.sleep(0)
        raise Boom("first")

    with caplog.at_level(logging.WARNING, logger="gazette.task"), pytest.raises(Boom):
        async with task.Group("g") as g:
            g.spawn("cleanup", fail_when_cancelled())
            g.spawn("first", fail())
    levels = sorted(r.levelno for r in caplog.records if r.name == "gazette.task.group")
    assert levels == [logging.WARNING, logging.ERROR]


async def test_body_failure_leaves_as_itself_and_cancels_tasks() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    with pytest.raises(Boom, match="body"):
        async with task.Group("g") as g:
            t = g.spawn("forever", forever())
            await started.wait()
            raise Boom("body")
    assert t.cancelled()


async def test_cancel_ends_tasks_without_error() -> None:
    async with task.Group("g") as g:
        t = g.spawn("forever", asyncio.Event().wait())
        await asyncio.sleep(0)
        g.cancel()
    assert t.cancelled() and g.failure is None


async def test_outer_cancellation_propagates() -> None:
    entered = asyncio.Event()

    async def run() -> None:
        async with task.Group("g") as g:
            g.spawn("forever", asyncio.Event().wait())
            entered.set()
            await asyncio.Event().wait()

    runner = asyncio.ensure_future(run())
    await entered.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


# -- race ----------------------------------------------------------------------------------


async def test_race_result_first() -> None:
    ev = asyncio.Event()
    assert await task.race(asyncio.sleep(0, result="x"), ev) == ("x", False)


async def test_race_event_first_cancels_and_ends_the_loser() -> None:
    ev = asyncio.Event()
    ended = asyncio.Event()

    async def slow() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()
        return "never"

    asyncio.get_running_loop().call_soon(ev.set)
    assert await task.race(slow(), asyncio.Event(), ev) == (None, True)
    assert ended.is_set()  # the loser has ended when race returns


async def test_race_event_already_set_does_not_start_a_coroutine() -> None:
    ev = asyncio.Event()
    ev.set()
    started = False

    async def work() -> int:
        nonlocal started
        started = True
        return 1

    assert await task.race(work(), ev) == (None, True)
    assert not started


async def test_race_prefers_a_result_ready_with_the_event() -> None:
    q: asyncio.Queue[str] = asyncio.Queue()
    q.put_nowait("spool")
    ev = asyncio.Event()
    fut: asyncio.Future[str] = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)  # The get completes...
    ev.set()  # ... and the event is set too.
    assert await task.race(fut, ev) == ("spool", False)


async def test_race_raises_the_failure_of_aw() -> None:
    async def fail() -> None:
        raise Boom("x")

    with pytest.raises(Boom):
        await task.race(fail(), asyncio.Event())


async def test_race_interrupted_get_leaves_the_item_in_its_queue() -> None:
    q: asyncio.Queue[str] = asyncio.Queue(1)
    ev = asyncio.Event()
    asyncio.get_running_loop().call_soon(ev.set)
    assert await task.race(q.get(), ev, give_back=q.put_nowait) == (None, True)
    q.put_nowait("spool")
    assert q.get_nowait() == "spool"  # No stale getter took it.


async def test_race_cancelled_as_the_get_completes_gives_the_item_back() -> None:
    # A Replicate stream cancelled (its peer hung up) just as it got the spool.
    q: asyncio.Queue[str] = asyncio.Queue(1)
    racer = asyncio.ensure_future(task.race(q.get(), asyncio.Event(), give_back=q.put_nowait))
    await asyncio.sleep(0)  # racer waits on the get.
    q.put_nowait("spool")
    await asyncio.sleep(0)  # The get task completes, racer is woken but not yet run...
    racer.cancel()  # ... and is cancelled.
    with pytest.raises(asyncio.CancelledError):
        await racer
    await asyncio.sleep(0)
    assert q.get_nowait() == "spool"


async def test_race_gives_back_what_a_cancelled_aw_still_returned() -> None:
    ev = asyncio.Event()
    got: list[str] = []

    async def stubborn() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "obtained anyway"
        return "never"

    asyncio.get_running_loop().call_soon(ev.set)
    assert await task.race(stubborn(), ev, give_back=got.append) == (None, True)
    assert got == ["obtained anyway"]


async def test_race_retrieves_the_failure_of_an_abandoned_aw() -> None:
    # filterwarnings=error and asyncio's "exception was never retrieved" would fail this test.
    ev = asyncio.Event()

    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise Boom("on cancel") from None

    asyncio.get_running_loop().call_soon(ev.set)
    assert await task.race(fails_on_cancel(), ev) == (None, True)


async def test_race_under_a_timeout() -> None:
    ended = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await task.race(slow(), asyncio.Event())
    assert ended.is_set()


async def test_race_as_a_timed_wait_for_events() -> None:
    ev = asyncio.Event()
    assert await task.race(asyncio.sleep(0.001), ev) == (None, False)  # timed out
    ev.set()
    assert await task.race(asyncio.sleep(10), ev) == (None, True)
