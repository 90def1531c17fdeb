"""The member Session against a real etcd: its lease across a long announce, and re-announce.

Found by the broker's SIGKILL fault test: a restarted broker announces the key
of its previous incarnation, which lives until the old lease expires. The
session's own lease must stay alive all that time (it used to be kept alive
only once announced, so it expired first), and a lost lease must lead to a
new announcement rather than an ExceptionGroup out of :meth:`Session.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import aetcd
import pytest

from gazette import allocator, keyspace
from gazette.allocator import keys, testing, txn

pytestmark = pytest.mark.integration

ROOT = "/gazette/session"
KEY = keys.member_key(ROOT, "zone-a", "m1")
SPEC = json.dumps({"R": 4}).encode()
EXITING = json.dumps({"R": 4, "E": True}).encode()


@contextlib.asynccontextmanager
async def running(
    client: aetcd.Client, config: allocator.SessionConfig
) -> AsyncIterator[tuple[allocator.Session, asyncio.Task[None]]]:
    ks = keyspace.KeySpace(ROOT, keys.key_value_decoder(ROOT, testing.JSONDecoder()))
    session = allocator.Session(client, ks, KEY, SPEC, EXITING, config=config)
    task = asyncio.create_task(session.run(), name="session under test")
    try:
        yield session, task
    finally:
        if not task.done():
            session.request_exit()
            try:
                await asyncio.wait_for(task, 20)
            finally:
                task.cancel()


async def member_lease(client: aetcd.Client) -> int | None:
    got = await client.get(KEY.encode())
    return None if got is None else int(got.lease)


async def wait_ready(session: allocator.Session, task: asyncio.Task[None], within: float) -> None:
    ready = asyncio.create_task(session.ready.wait())
    try:
        done, _ = await asyncio.wait((ready, task), timeout=within, return_when="FIRST_COMPLETED")
    finally:
        ready.cancel()
    if task in done:
        task.result()  # Raises what ended the session.
        pytest.fail("session returned before it was ready")
    assert session.ready.is_set(), f"session not ready after {within}s"


async def test_announce_outlasts_own_lease_ttl(etcd: aetcd.Client) -> None:
    # A previous incarnation's key under a lease nobody refreshes, outliving
    # the new session's TTL by several times.
    old_lease = await allocator.grant_lease(etcd, 8)
    resp = await txn.commit(etcd, [], [txn.put(KEY, SPEC, lease=old_lease)])
    assert resp.succeeded

    config = allocator.SessionConfig(lease_ttl=2, announce_retry=0.25, reannounce=False)
    started = time.monotonic()
    async with running(etcd, config) as (session, task):
        await wait_ready(session, task, 30)
        waited = time.monotonic() - started
        # The old key outlived our TTL: the announce really waited past it.
        assert waited > 2 * config.lease_ttl, waited
        assert session.lease_id != old_lease
        assert await member_lease(etcd) == session.lease_id

        # Kept alive once announced, too: several TTLs later the key is ours.
        await asyncio.sleep(3 * config.lease_ttl)
        assert not task.done()
        assert await member_lease(etcd) == session.lease_id

        session.request_exit()
        await asyncio.wait_for(task, 20)
    assert await member_lease(etcd) is None  # Revoked on exit.
    print(f"announced after waiting {waited:.1f}s out an old key (own lease TTL 2s)")


async def test_reannounces_after_lease_loss(etcd: aetcd.Client) -> None:
    config = allocator.SessionConfig(lease_ttl=2, announce_retry=0.25, reannounce_backoff=0.1)
    async with running(etcd, config) as (session, task):
        await wait_ready(session, task, 20)
        first = session.lease_id
        assert await member_lease(etcd) == first

        # Losing the lease (as if etcd expired it) deletes our key: the
        # session must notice from within its task group and announce anew.
        await allocator.revoke_lease(etcd, first)
        deadline = time.monotonic() + 20
        while not (session.ready.is_set() and session.lease_id not in (0, first)):
            assert not task.done(), task.exception()
            assert time.monotonic() < deadline, "no new announcement"
            await asyncio.sleep(0.05)
        second = session.lease_id
        assert await member_lease(etcd) == second

        session.request_exit()
        await asyncio.wait_for(task, 20)
    assert await member_lease(etcd) is None
