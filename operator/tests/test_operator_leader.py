"""Leader election over a Lease: one holder at a time, take-over after it stops renewing.

Replicas are :class:`leader.Elector` objects over one in-memory API server
(:class:`testing.MemoryKube`, which refuses a replace from a stale resourceVersion as
the API server does), each with a clock the test moves.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest

from gazette.operator import leader, testing

NS, NAME = "gazette", "gazette-operator-default"
WALL = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replica(
    api: testing.MemoryKube, identity: str, clock: Clock | None = None, **timing: float
) -> leader.Elector:
    config = leader.LeaderConfig(name=NAME, namespace=NS, identity=identity, **timing)
    return leader.Elector(config, api, clock=clock or Clock(), wall=lambda: WALL)


def holder(api: testing.MemoryKube) -> str:
    return str(api.leases[(NS, NAME)]["spec"].get("holderIdentity") or "")


async def test_the_first_replica_creates_and_holds_the_lease() -> None:
    api = testing.MemoryKube()
    a = replica(api, "a")
    assert await a.try_acquire_or_renew()
    lease = api.leases[(NS, NAME)]
    assert lease["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2030-01-01T00:00:00.000000Z",
        "renewTime": "2030-01-01T00:00:00.000000Z",
        "leaseTransitions": 0,
    }
    assert a.is_leader
    # Renewing keeps it and its acquire time.
    version = lease["metadata"]["resourceVersion"]
    assert await a.try_acquire_or_renew()
    assert api.leases[(NS, NAME)]["metadata"]["resourceVersion"] != version


async def test_a_standby_waits_a_lease_duration_of_its_own_clock_then_takes_over() -> None:
    api = testing.MemoryKube()
    a, clock = replica(api, "a"), Clock()
    b = replica(api, "b", clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert (b.is_leader, b.holder) == (False, "a")
    # a renews: b sees the record change, and starts counting again.
    clock.now += 10
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.now += 14
    assert not await b.try_acquire_or_renew()
    # a stopped renewing 15 s ago, as b's clock tells.
    clock.now += 1.5
    assert await b.try_acquire_or_renew()
    assert holder(api) == "b"
    assert api.leases[(NS, NAME)]["spec"]["leaseTransitions"] == 1
    # a, come back, finds it lost it.
    with pytest.raises(leader.LeadershipLost, match="held by b"):
        await a.try_acquire_or_renew()
    assert not a.is_leader


async def test_of_two_racing_replicas_one_wins() -> None:
    api = testing.MemoryKube()
    a, b = replica(api, "a"), replica(api, "b")
    assert await a.try_acquire_or_renew()
    await a.release()
    got = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(got) == [False, True]
    assert holder(api) == ("a" if got[0] else "b")


async def test_a_released_lease_is_taken_at_once() -> None:
    api = testing.MemoryKube()
    a, b = replica(api, "a"), replica(api, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert not a.is_leader and holder(api) == ""
    assert await b.try_acquire_or_renew()
    assert holder(api) == "b"


async def test_acquire_stands_by_until_the_holder_goes_or_stop_is_set() -> None:
    api = testing.MemoryKube()
    timing = {"lease_duration": 0.6, "renew_deadline": 0.4, "retry_period": 0.05}
    a = replica(api, "a", **timing)
    b = leader.Elector(leader.LeaderConfig(name=NAME, namespace=NS, identity="b", **timing), api)
    assert await a.try_acquire_or_renew()
    stop = asyncio.Event()
    async with asyncio.timeout(5):
        standby = asyncio.create_task(b.acquire(stop))
        await asyncio.sleep(0.2)
        assert not standby.done()
        await a.release()
        assert await standby
    assert holder(api) == "b"

    stop.set()
    c = replica(api, "c", **timing)
    async with asyncio.timeout(5):
        assert not await c.acquire(stop)


async def test_hold_renews_and_gives_up_after_the_renew_deadline() -> None:
    api = testing.MemoryKube()
    timing = {"lease_duration": 0.6, "renew_deadline": 0.3, "retry_period": 0.05}
    a = leader.Elector(leader.LeaderConfig(name=NAME, namespace=NS, identity="a", **timing), api)
    assert await a.try_acquire_or_renew()
    async with asyncio.timeout(5):
        holding = asyncio.create_task(a.hold())
        await asyncio.sleep(0.2)
        renewed = api.leases[(NS, NAME)]["metadata"]["resourceVersion"]
        await asyncio.sleep(0.2)
        assert api.leases[(NS, NAME)]["metadata"]["resourceVersion"] != renewed
        assert not holding.done()
        api.fail = True  # The API server goes away.
        with pytest.raises(leader.LeadershipLost, match="not renewed"):
            await holding
    assert not a.is_leader


def test_timing_must_leave_room_to_stop() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        leader.LeaderConfig(lease_duration=10, renew_deadline=10)


def test_default_namespace() -> None:
    assert leader.default_namespace((), {"POD_NAMESPACE": "ops"}) == "ops"
    assert leader.default_namespace(("team-*", "gazette"), {}) in ("gazette",)
    assert leader.default_namespace(("team-*",), {}) == "default"
