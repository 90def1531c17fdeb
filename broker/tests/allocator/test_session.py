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
import importlib
import json
import time
import types
from collections.abc import AsyncIterator

import aetcd
import prometheus_client
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


async def test_resign_gives_the_lease_up_at_once_and_announces_the_given_spec(
    etcd: aetcd.Client,
) -> None:
    # A broker cut off from its peers (gazette.broker.server.isolation): its key and
    # assignments go now, not at the lease's expiry, and it comes back with no room.
    config = allocator.SessionConfig(lease_ttl=20, announce_retry=0.25, reannounce_backoff=0.1)
    no_room = json.dumps({"R": 0}).encode()
    loop = asyncio.get_running_loop()
    async with running(etcd, config) as (session, task):
        await wait_ready(session, task, 20)
        first = session.lease_id
        started = time.monotonic()
        await session.resign(no_room)
        assert not session.lease.valid(loop.time())  # Before etcd even answered.
        while not (session.ready.is_set() and session.lease_id not in (0, first)):
            assert not task.done(), task.exception()
            assert time.monotonic() - started < 10, "not announced again"
            await asyncio.sleep(0.05)
        # Far sooner than the 20 s lease would have expired.
        assert time.monotonic() - started < 5
        assert session.lease.valid(loop.time())
        got = await etcd.get(KEY.encode())
        assert got is not None and got.value == no_room and int(got.lease) == session.lease_id

        await session.update_spec(SPEC)  # Room again, under the same lease.
        got = await etcd.get(KEY.encode())
        assert got is not None and got.value == SPEC and int(got.lease) == session.lease_id


def _no_kv_stub(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The announce module, with the etcd connection step made a no-op."""
    from gazette.keyspace import etcd as ks_etcd

    async def no_stub(_client: object) -> None:
        return None

    monkeypatch.setattr(ks_etcd, "kv_stub", no_stub)
    return importlib.import_module("gazette.allocator.announce")


class _FlakyEtcd:
    """Answers refresh_lease from a script: a TTL, None (lease gone) or an exception."""

    def __init__(self, script: list[object]) -> None:
        self.script = script

    async def refresh_lease(self, lease_id: int) -> object:
        step = self.script.pop(0) if self.script else 10
        if step == "hang":  # A connection into a partition: no answer, no failure.
            await asyncio.sleep(3600)
        if isinstance(step, Exception):
            raise step
        if step is None:
            return types.SimpleNamespace(TTL=-1)
        return types.SimpleNamespace(TTL=step)


def _sample(name: str) -> float | None:
    return prometheus_client.REGISTRY.get_sample_value(name)


async def test_keep_alive_doubts_past_the_lease_and_recovers_when_etcd_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # etcd away longer than the lease: the member is in doubt (serves no writes),
    # not lost; an etcd that kept the lease (a restart extends leases) ends the doubt.
    announce = _no_kv_stub(monkeypatch)
    down = aetcd.exceptions.ConnectionFailedError("etcd down")
    client = _FlakyEtcd([3, down, down, down, down, 3])
    doubts: list[float] = []
    health = announce.LeaseHealth(on_doubt=lambda: doubts.append(0))
    loop = asyncio.get_running_loop()
    # What the chart's lease-doubt alert reads: one doubt counted, in doubt until it ends.
    counted = _sample("gazette_allocator_lease_doubts_total")
    task = asyncio.ensure_future(
        announce.keep_alive(client, 7, 3, health=health)  # type: ignore[arg-type]
    )
    try:
        await asyncio.sleep(0.2)
        assert health.valid(loop.time()) and doubts == []
        await asyncio.sleep(3.5)  # Four failed refreshes, one second apart.
        assert doubts == [0] and not health.valid(loop.time())
        assert not task.done()  # Still trying: only etcd's word ends the lease.
        assert _sample("gazette_allocator_lease_doubts_total") == (counted or 0) + 1
        assert _sample("gazette_allocator_lease_in_doubt") == 1
        await asyncio.sleep(1.6)  # The fifth refresh, at 5 s, succeeds.
        assert health.valid(loop.time())
        assert _sample("gazette_allocator_lease_in_doubt") == 0
    finally:
        task.cancel()


async def test_a_keep_alive_that_gets_no_answer_is_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Over a connection into a partition the refresh hangs: the member must doubt
    # its lease (and store what it holds) within a refresh interval, not when TCP gives up.
    announce = _no_kv_stub(monkeypatch)
    client = _FlakyEtcd([3, "hang", 3])
    doubts: list[float] = []
    health = announce.LeaseHealth(on_doubt=lambda: doubts.append(0))
    task = asyncio.ensure_future(
        announce.keep_alive(client, 7, 3, health=health)  # type: ignore[arg-type]
    )
    try:
        await asyncio.sleep(1.5)  # The second refresh (at 1 s) hangs for its 1 s bound.
        assert doubts == []
        await asyncio.sleep(0.8)
        assert doubts == [0] and not task.done()
    finally:
        task.cancel()


async def test_keep_alive_raises_lease_lost_on_etcd_s_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    announce = _no_kv_stub(monkeypatch)
    client = _FlakyEtcd([None])
    with pytest.raises(allocator.errors.LeaseLost):
        async with asyncio.timeout(5):
            await announce.keep_alive(client, 7, 3)  # type: ignore[arg-type]


async def test_announce_follows_the_old_key_going(etcd: aetcd.Client) -> None:
    # A restarted member announces as soon as etcd deletes its previous incarnation's
    # key, not at its next poll (30 s here).
    announce = importlib.import_module("gazette.allocator.announce")
    old_lease = await allocator.grant_lease(etcd, 60)
    assert (await txn.commit(etcd, [], [txn.put(KEY, SPEC, lease=old_lease)])).succeeded
    new_lease = await allocator.grant_lease(etcd, 60)
    task = asyncio.create_task(announce.announce(etcd, KEY, SPEC, new_lease, retry_interval=30))
    await asyncio.sleep(1.0)
    assert not task.done()
    revoked = time.monotonic()
    await allocator.revoke_lease(etcd, old_lease)  # As its expiry would.
    ann = await asyncio.wait_for(task, 10)
    assert time.monotonic() - revoked < 2.0
    assert await member_lease(etcd) == new_lease and ann.key == KEY
    await allocator.revoke_lease(etcd, new_lease)


async def test_announce_polls_when_the_watch_fails(
    etcd: aetcd.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gazette.keyspace import errors as ks_errors
    from gazette.keyspace import etcd as ks_etcd

    async def no_watch(_client: object) -> None:
        raise ks_errors.EtcdError("no watch today")

    monkeypatch.setattr(ks_etcd, "watch_stub", no_watch)
    announce = importlib.import_module("gazette.allocator.announce")
    old_lease = await allocator.grant_lease(etcd, 60)
    assert (await txn.commit(etcd, [], [txn.put(KEY, SPEC, lease=old_lease)])).succeeded
    new_lease = await allocator.grant_lease(etcd, 60)
    task = asyncio.create_task(announce.announce(etcd, KEY, SPEC, new_lease, retry_interval=0.5))
    await asyncio.sleep(0.2)
    await allocator.revoke_lease(etcd, old_lease)
    await asyncio.wait_for(task, 10)  # By polling.
    assert await member_lease(etcd) == new_lease
    assert not await announce.wait_deleted(etcd, KEY, 1, 0.1)
    await allocator.revoke_lease(etcd, new_lease)
