"""Scenario tests: several allocator members in one process against a real etcd.

A watcher follows the keyspace with its own etcd watch and applies it one
revision at a time (a KeySpace's own watch batches responses, and etcd may
put several revisions in one response), checking at every revision:

* at most one primary per item, and exactly one per assigned item (relaxed
  only between a member's abrupt death, which takes its primaries with it,
  and the next convergence);
* no member taking on assignments past its effective limit (a member whose
  limit just dropped still holds more until it sheds them: it may not grow);
* replicas over two zones for every item of replication >= 2 holding two or
  more replicas, whenever two zones have members with capacity (relaxed after
  an abrupt death until the next convergence, and during teardown);
* once armed (rolling restarts), no item below its desired replication.

Convergence checks then require exactly one primary, packed slots, full
replication and spread over two zones. Each scenario prints the revisions
observed and the assignments checked (``pytest -s`` shows them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator

import aetcd
import grpc
import prometheus_client
import pytest

from gazette import allocator, keyspace
from gazette.allocator import keys, testing, txn
from gazette.allocator.state import State
from gazette.broker import protocol as pb
from gazette.keyspace import etcd as ks_etcd

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
        self.floor_armed = False  # no item below its replication (rolling restarts)
        self.spread_armed = True  # replicas over two zones where two have capacity
        self.primary_armed = True  # exactly one primary per assigned item
        self.revisions_checked = 0
        self.assignments_checked = 0
        self.floor_checks = 0  # item-revisions checked against the floor
        self.spread_checks = 0  # item-revisions checked for zone spread
        self._prev_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.last_write = 0  # revision of our last write; convergence is judged after it
        self.leader_round = asyncio.Event()  # set, then replaced, at each leader round

    def _on_round(self, _round: int, _idle: bool) -> None:
        done, self.leader_round = self.leader_round, asyncio.Event()
        done.set()

    # -- following etcd one revision at a time -------------------------------

    async def follow(self) -> None:
        """Apply the watch of ROOT to ``watcher`` revision by revision."""
        stub = await ks_etcd.watch_stub(self.client)
        call = stub.Watch(metadata=ks_etcd.metadata(self.client))
        try:
            await call.write(
                aetcd.rpc.WatchRequest(
                    create_request=aetcd.rpc.WatchCreateRequest(
                        key=ROOT.encode(),
                        range_end=keyspace.prefix_range_end(ROOT).encode(),
                        start_revision=self.watcher.revision + 1,
                    )
                )
            )
            while True:
                msg = await call.read()
                assert msg is not grpc.aio.EOF and not msg.canceled, "watch ended"
                header = ks_etcd.header_of(msg.header)
                group: list[keyspace.Event] = []
                # etcd never splits a revision over two responses.
                for ev in msg.events:
                    e = keyspace.Event(keyspace.EventType(ev.type), ks_etcd.key_value_of(ev.kv))
                    if group and group[-1].kv.mod_revision != e.kv.mod_revision:
                        self.watcher.apply(keyspace.WatchResponse(header, group))
                        group = []
                    group.append(e)
                if group:
                    self.watcher.apply(keyspace.WatchResponse(header, group))
        finally:
            call.cancel()

    # -- invariants at every observed revision ---------------------------------

    def check(self) -> None:
        s = State(ROOT, "", self.watcher.key_values, revision=self.watcher.revision)
        self.revisions_checked += 1
        self.assignments_checked += len(s.assignments)
        zones_with_capacity = {
            s.member(mi).zone for mi in range(len(s.members)) if s.effective_limit(mi) > 0
        }
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for i in range(len(s.items)):
            item = s.item(i)
            asn = [kv.decoded for kv in s.assignments_of(i)]
            primaries = sum(1 for a in asn if a.slot == 0)
            if primaries > 1 or (self.primary_armed and asn and primaries != 1):
                self.violations.append(f"rev {s.revision}: {item.id} has {primaries} primaries")
            if self.floor_armed:
                self.floor_checks += 1
                if len(asn) < item.desired_replication:
                    self.violations.append(
                        f"rev {s.revision}: {item.id} has {len(asn)} < "
                        f"{item.desired_replication} replicas"
                    )
            if (
                self.spread_armed
                and item.desired_replication >= 2
                and len(asn) >= 2
                and len(zones_with_capacity) >= 2
            ):
                self.spread_checks += 1
                if len({a.member_zone for a in asn}) < 2:
                    self.violations.append(
                        f"rev {s.revision}: {item.id} spans one zone "
                        f"({[a.member_suffix for a in asn]})"
                    )
            for a in asn:
                counts[(a.member_zone, a.member_suffix)] += 1
        for mi in range(len(s.members)):
            m = s.member(mi)
            n, limit = counts[(m.zone, m.suffix)], s.effective_limit(mi)
            if n > limit and n > self._prev_counts[(m.zone, m.suffix)]:
                self.violations.append(
                    f"rev {s.revision}: {m.zone}#{m.suffix} grew to {n} > limit {limit}"
                )
        self._prev_counts = counts

    def report(self, name: str) -> None:
        print(
            f"{name}: {self.revisions_checked} revisions observed, "
            f"{self.assignments_checked} assignments checked "
            f"({self.spread_checks} zone-spread and {self.floor_checks} replication-floor "
            f"item checks), {len(self.violations)} violations"
        )

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
            on_round=self._on_round,
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
        """Stop a member abruptly: its lease is revoked, its keys vanish.

        Its replicas (and primaries) vanish at once: primary and spread checks
        are relaxed until the next convergence.
        """
        self.primary_armed = self.spread_armed = False
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
                    self.primary_armed = self.spread_armed = True
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
async def cluster(client: aetcd.Client, name: str) -> AsyncIterator[Cluster]:
    async with asyncio.TaskGroup() as tg:
        c = Cluster(client, tg)
        await c.watcher.load(client)
        c.watcher.add_observer(c.check)
        follow = tg.create_task(c.follow())
        try:
            yield c
        finally:
            # Teardown, not a scenario: members stop abruptly (a graceful exit
            # of every member could never hand its items off).
            c.floor_armed = False
            for zs in list(c.sessions):
                await c.kill(*zs)
            follow.cancel()
    c.report(name)
    assert c.violations == [], c.violations[:10]
    assert c.revisions_checked > 5
    assert c.assignments_checked > 0


async def test_members_join_leave_and_limits(etcd: aetcd.Client) -> None:
    async with cluster(etcd, "members_join_leave_and_limits") as c:
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
        # The leader's Gazette-named metrics follow its rounds (the round of
        # the last join may still be to come: nothing had to move).
        reg = prometheus_client.REGISTRY

        async def members_gauge_is(n: int) -> None:
            while reg.get_sample_value("gazette_allocator_members") != n:
                await c.leader_round.wait()

        await asyncio.wait_for(members_gauge_is(5), WAIT)
        assert reg.get_sample_value("gazette_allocator_items") == 12
        assert reg.get_sample_value("gazette_allocator_desired_replication_slots") == 36
        assert (reg.get_sample_value("gazette_allocator_converge_total") or 0) > 0
        assert (reg.get_sample_value("gazette_allocator_max_flow_runtime_seconds_count") or 0) > 0

        # A limit drops: its member sheds down to it.
        await c.set_limit("zone-a", "m1", 6)
        s = await c.converged()
        assert s.member_total_count[s.find_member("zone-a", "m1")] <= 6

        # A member leaves gracefully: its run ends once drained; its key is gone.
        await c.stop("zone-b", "m2")
        s = await c.converged()
        assert s.find_member("zone-b", "m2") == -1


async def test_replication_changes(etcd: aetcd.Client) -> None:
    async with cluster(etcd, "replication_changes") as c:
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
    async with cluster(etcd, "rolling_restart_keeps_replication") as c:
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


async def test_rolling_restart_over_three_zones_near_capacity(etcd: aetcd.Client) -> None:
    """45 items of replication 3 on 6 members of limit 25 (150 slots for 135
    replicas): every member is replaced in turn, its successor starting first."""
    async with cluster(etcd, "rolling_restart_over_three_zones_near_capacity") as c:
        old = [(z, m) for z in ("zone-a", "zone-b", "zone-c") for m in ("m1", "m2")]
        for z, m in old:
            await c.start(z, m, 25)
        await c.put_items({f"item-{i:02d}": 3 for i in range(45)})
        s = await c.converged(zones=3)
        assert len(s.assignments) == 135
        c.floor_armed = True

        for z, m in old:
            await c.start(z, m + "-new", 25)
            await c.stop(z, m)
            s = await c.converged(zones=3)
            assert len(s.assignments) == 135
        assert c.floor_checks >= 45 * 6


async def test_dead_member_lease_and_dead_items(etcd: aetcd.Client) -> None:
    async with cluster(etcd, "dead_member_lease_and_dead_items") as c:
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


def test_the_checker_sees_each_violation() -> None:
    """A negative control: every invariant, broken in a snapshot, is reported."""

    def kv(key: str, value: bytes, rev: int) -> keyspace.KeyValue:
        return keyspace.KeyValue(ROOT + key, value, rev, rev, 1)

    raw = [
        kv("/assign/one-zone#zone-a#m1#0", b"", 5),
        kv("/assign/one-zone#zone-a#m2#1", b"", 6),
        kv("/assign/two-primaries#zone-a#m1#0", b"", 7),
        kv("/assign/two-primaries#zone-b#m3#0", b"", 8),
        kv("/items/one-zone", b'{"R": 2}', 3),
        kv("/items/short", b'{"R": 2}', 4),
        kv("/items/two-primaries", b'{"R": 2}', 4),
        kv("/members/zone-a#m1", member_value(1), 1),
        kv("/members/zone-a#m2", member_value(5), 1),
        kv("/members/zone-b#m3", member_value(5), 2),
    ]
    c = Cluster(None, None)  # type: ignore[arg-type]
    c.floor_armed = True
    c.watcher.load_snapshot(pb.Header.Etcd(cluster_id=1, revision=8), raw)
    c.check()
    found = sorted(v.split(": ", 1)[1].split(" (")[0] for v in c.violations)
    assert found == [
        "one-zone spans one zone",
        "short has 0 < 2 replicas",
        "two-primaries has 2 primaries",
        "zone-a#m1 grew to 2 > limit 1",
    ]
