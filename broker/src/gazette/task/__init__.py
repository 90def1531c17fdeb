"""Structured concurrency helpers: task groups and races (Gazette's ``task`` package).

Every background task of a process belongs to a named group, and every wait
on "this, unless that happens first" ends with nothing left running. Two
tools, used by the broker now and the consumer runtime next:

* :class:`Group` (Gazette ``task/group.go``): a named :class:`asyncio.TaskGroup`
  of named tasks. The first failure cancels the siblings (and the body of the
  ``async with``), is logged once naming the group and the task, and leaves
  the group as itself, not wrapped in an exception group.
* :func:`race`: await one awaitable unless an :class:`asyncio.Event` is set
  first (for a time limit too, wrap it in ``asyncio.timeout``). The loser is cancelled and has ended before
  ``race`` returns; a result it obtained that nobody will take (a spool got
  from its slot just as the RPC was cancelled) goes to ``give_back``.

It depends on nothing else of ours: it is ground, as ``gazette.broker.protocol``.

Usage::

    from gazette import task

    async with task.Group("broker") as group:
        group.spawn("allocator session", session.run())
        group.spawn("persister", persister.serve())
        await stop.wait()
        group.cancel()

    spool, invalidated = await task.race(
        replica.spool_slot.get(), resolution.invalidated, give_back=replica.spool_slot.put_nowait
    )
    if invalidated:
        ...  # re-resolve
"""

from gazette.task.group import Group
from gazette.task.race import race

__all__ = ["Group", "race"]
