"""Scenario tests: several allocator members in one process against a real etcd.

A separate watcher KeySpace checks invariants at every revision it observes:
at most one primary per item, no member taking on assignments past its limit,
and (once armed) no item below its desired replication. Convergence checks
then require exactly one primary, packed slots, full replication and spread
over two zones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator

import aetcd
import pytest

from gazette import allocator, keyspace
from gazette.allocator import keys, testing, txn
from gazette.allocator.state import State

pytestmark = pytest.mark.integration

ROOT = "/gazette/alloc"
WAIT = 30.0


def member_value(limit: int, exiting: bool = False) -> bytes:
    return json.dumps({"R": limit, "E": exiting}).encode()


class Cluster:
    def __init__(self, client: aetcd.Client, tg: asyncio.TaskGroup) -> None:
        self.client = client
        self.tg = tg
        self.decode = keys.key_value_decoder(ROOT, testing.JSONDecoder())
        self.sessions: dict[tuple[str, str], tuple[allocator.Session, asyncio.Task[None]]] = {}
        self.watcher = keyspace.KeySpace(ROOT, self.decode)
        self.violations: list[str] = []
        self.floor_armed = False
        self.revisions_checked = 0
        self._prev_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.last_write = 0  # revision of our last write; convergence is judged after it

    # -- invariants at every observed revision ---------------------------------

    def check(self) -> None:
        s = State(ROOT, "", self.watcher.key_values, revision=self.watcher.revision)
        self.revisions_checked += 1
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for i in range(len(s.items)):
            item = s.item(i)
            asn = [kv.decoded for kv in s.assignments_of(i)]
            primaries = sum(1 for a in asn if a.slot == 0)
            if primaries > 1:
                self.violations.append(f"rev {s.revision}: {item.id} has {primaries} primaries")
            if self.floor_armed and len(asn) < item.desired_replication:
                self.violations.append(
                    f"rev {s.revision}: {item.id} has {len(asn)} < {item.desired_replication} replicas"
                )
            for a in asn:
                counts[(a.member_zone, a.member_suffix)] += 1
        for mi in range(len(s.members)):
            m = s.member(mi)
            n = counts[(m.zone, m.suffix)]
            if n > m.item_limit and n > self._prev_counts[(m.zone, m.suffix)]:
                self.violations.append(
                    f"rev {s.revision}: {m.zone}#{m.suffix} grew to {n} > limit {m.item_limit}"
                )
        self._prev_counts = counts

    # -- members and items -----------------------------------------------------

    async def start(self, zone: str, suffix: str, limit: int) -> allocator.Session:
        ks = keyspace.KeySpace(ROOT, self.decode)
        session = allocator.Session(
            self.client,
            ks,
            keys.member_key(ROOT, zone, suffix),
            member_value(limit),
            member_value(limit, exiting=True),
            config=allocator.SessionConfig(lease_ttl=10),
        )
        task = self.tg.create_task(session.run(), name=f"member {zone}#{suffix}")
        self.sessions[(zone, suffix)] = (session, task)
        await asyncio.wait_for(session.ready.wait(), WAIT)
        assert session.announcement is not None
        self.last_write = max(self.last_write, session.announcement.revision)
        return session

    async def stop(self, zone: str, suffix: str) -> None:
        session, task = self.sessions.pop((zone, suffix))
        session.request_exit()
        await asyncio.wait_for(task, WAIT)

    async def set_limit(self, zone: str, suffix: str, limit: int) -> None:
        session, _ = self.sessions[(zone, suffix)]
        assert session.announcement is not None
        session.spec, session.exiting_spec = member_value(limit), member_value(limit, True)
        await session.announcement.update(session.spec)
        self.last_write = max(self.last_write, session.announcement.revision)

    async def put_items(self, items: dict[str, int]) -> None:
        ops = [
            txn.put(keys.item_key(ROOT, i), json.dumps({"R": r}).encode()) for i, r in items.items()
        ]
        resp = await txn.commit(self.client, [], ops)
        assert resp.succeeded
        self.last_write = max(self.last_write, resp.header.revision)

    async def kill(self, zone: str, suffix: str) -> None:
        """Stop a member abruptly: its lease is revoked, its keys vanish."""
        _, task = self.sessions.pop((zone, suffix))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

        async def gone() -> None:
            while self.watcher.search(keys.member_key(ROOT, zone, suffix)) is not None:
                await self.watcher.wait_for_update()

        await asyncio.wait_for(gone(), WAIT)

    async def converged(self, *, zones: int = 2) -> State:
        """Wait for a fully converged assignment; return its State."""
        why = ""

        async def poll() -> State:
            nonlocal why
            await self.watcher.wait_for_revision(self.last_write)
            while True:
                s = State(ROOT, "", self.watcher.key_values, revision=self.watcher.revision)
                why = self._not_converged(s, zones)
                if not why:
                    return s
                await self.watcher.wait_for_update()

        try:
            return await asyncio.wait_for(poll(), WAIT)
        except TimeoutError:
            pytest.fail(f"not converged: {why}")

    @staticmethod
    def _not_converged(s: State, zones: int) -> str:
        counts: collections.Counter[int] = collections.Counter()
        for i in range(len(s.items)):
            item = s.item(i)
            asn = [kv.decoded for kv in s.assignments_of(i)]
            if len(asn) != item.desired_replication:
                return f"{item.id} has {len(asn)} of {item.desired_replication} replicas"
            if item.desired_replication and sorted(a.slot for a in asn) != list(range(len(asn))):
                return f"{item.id} slots {[a.slot for a in asn]} aren't packed from 0"
            if len(asn) >= 2 and zones >= 2 and len({a.member_zone for a in asn}) < 2:
                return f"{item.id} spans one zone"
            for a in asn:
                mi = s.find_member(a.member_zone, a.member_suffix)
                if mi == -1:
                    return f"{item.id} assigned to missing member {a.member_suffix}"
                counts[mi] += 1
        if len(s.assignments) != sum(counts.values()):
            return "dead assignments remain"
        for mi, n in counts.items():
            if n > s.effective_limit(mi):
                return f"member {s.member(mi).suffix} holds {n} > {s.effective_limit(mi)}"
        return ""


@contextlib.asynccontextmanager
async def cluster(client: aetcd.Client) -> AsyncIterator[Cluster]:
    async with asyncio.TaskGroup() as tg:
        c = Cluster(client, tg)
        await c.watcher.load(client)
        c.watcher.add_observer(c.check)
        watch = tg.create_task(c.watcher.watch(client))
        try:
            yield c
        finally:
            # Teardown, not a scenario: members stop abruptly (a graceful exit
            # of every member could never hand its items off).
            c.floor_armed = False
            for zs in list(c.sessions):
                await c.kill(*zs)
            watch.cancel()
    assert c.violations == [], c.violations[:10]
    assert c.revisions_checked > 1


async def test_members_join_leave_and_limits(etcd: aetcd.Client) -> None:
    async with cluster(etcd) as c:
        await c.put_items({f"item-{i:02d}": 3 for i in range(12)})
        for z in ("zone-a", "zone-b", "zone-c"):
            await c.start(z, "m1", 12)
        s = await c.converged(zones=3)
        assert s.member_total_count == [12, 12, 12]

        # Members join: the load spreads onto them.
        for z in ("zone-a", "zone-b"):
            await c.start(z, "m2", 8)
        s = await c.converged()
        assert len(s.members) == 5

        # A limit drops: its member sheds down to it.
        await c.set_limit("zone-a", "m1", 6)
        s = await c.converged()
        assert s.member_total_count[s.find_member("zone-a", "m1")] <= 6

        # A member leaves gracefully: its run ends once drained; its key is gone.
        await c.stop("zone-b", "m2")
        s = await c.converged()
        assert s.find_member("zone-b", "m2") == -1


async def test_replication_changes(etcd: aetcd.Client) -> None:
    async with cluster(etcd) as c:
        for z, m in (("zone-a", "m1"), ("zone-a", "m2"), ("zone-b", "m1"), ("zone-b", "m2")):
            await c.start(z, m, 10)
        await c.put_items({f"item-{i}": 1 for i in range(6)})
        await c.converged()
        await c.put_items({f"item-{i}": 3 for i in range(6)})
        s = await c.converged()
        assert len(s.assignments) == 18
        await c.put_items({f"item-{i}": 2 for i in range(6)})
        s = await c.converged()
        assert len(s.assignments) == 12
        await c.put_items({"item-0": 0})
        s = await c.converged()
        assert len(s.assignments) == 10


async def test_rolling_restart_keeps_replication(etcd: aetcd.Client) -> None:
    async with cluster(etcd) as c:
        old = [
            ("zone-a", "m1"),
            ("zone-a", "m2"),
            ("zone-b", "m1"),
            ("zone-b", "m2"),
            ("zone-c", "m1"),
        ]
        for z, m in old:
            await c.start(z, m, 10)
        await c.put_items({f"item-{i:02d}": 2 for i in range(15)})
        await c.converged()
        c.floor_armed = True  # from here on, no item may drop below its replication

        # Replace every member, oldest (the leader) included: start its
        # successor, then stop it gracefully, waiting for the hand-off.
        for z, m in old:
            await c.start(z, m + "-new", 10)
            await c.stop(z, m)
            await c.converged()
        s = await c.converged()
        assert sorted(s.member(i).suffix for i in range(len(s.members))) == sorted(
            m + "-new" for _, m in old
        )


async def test_dead_member_lease_and_dead_items(etcd: aetcd.Client) -> None:
    async with cluster(etcd) as c:
        for z, m in (("zone-a", "m1"), ("zone-b", "m1"), ("zone-b", "m2")):
            await c.start(z, m, 10)
        await c.put_items({"item-x": 2, "item-y": 2})
        await c.converged()
        # An assignment of an item that doesn't exist is cleaned up.
        resp = await txn.commit(etcd, [], [txn.put(ROOT + "/assign/ghost#zone-a#m1#0", b"")])
        assert resp.succeeded
        await c.converged()
        # A member whose lease is revoked vanishes with its assignments; others take over.
        await c.kill("zone-b", "m1")
        s = await c.converged()
        assert s.find_member("zone-b", "m1") == -1
