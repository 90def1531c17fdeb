"""converge() with a recording transaction: the item_state rules."""

from __future__ import annotations

from typing import Any

import prometheus_client

from gazette.allocator import item_state, keys, testing, txn
from gazette.allocator.state import State

ROOT = "/root"


class RecordingTxn:
    """Collects checkpoints as (compares, ops) of readable tuples."""

    def __init__(self) -> None:
        self.checkpoints: list[tuple[list[Any], list[Any]]] = []
        self._c: list[Any] = []
        self._o: list[Any] = []
        self.revision = 0

    def if_(self, *cmps: Any) -> None:
        self._c.extend(cmps)

    def then(self, *ops: Any) -> None:
        self._o.extend(ops)

    async def checkpoint(self) -> None:
        if self._o:
            self.checkpoints.append((self._c, self._o))
        self._c, self._o = [], []

    async def flush(self) -> None:
        pass

    def ops(self) -> list[tuple[str, str]]:
        out = []
        for _, ops in self.checkpoints:
            for op in ops:
                if op.HasField("request_put"):
                    out.append(("put", op.request_put.key.decode()))
                else:
                    out.append(("del", op.request_delete_range.key.decode()))
        return out


def A(item: str, zone: str, suffix: str) -> keys.Assignment:
    return keys.Assignment(item, zone, suffix)


async def run(state: State, desired: list[keys.Assignment]) -> RecordingTxn:
    t = RecordingTxn()
    await item_state.converge(t, state, desired)
    return t


MEMBERS = [("a", "m1", 10), ("a", "m2", 10), ("b", "m3", 10), ("b", "m4", 10)]


async def test_adds_to_empty_item_start_at_slot_zero() -> None:
    s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)])
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert t.ops() == [("put", "/root/assign/i#a#m1#0"), ("put", "/root/assign/i#b#m3#1")]
    cmps, _ = t.checkpoints[0]
    # Each add checks its member key is unchanged.
    assert [c.key.decode() for c in cmps] == ["/root/members/a#m1", "/root/members/b#m3"]


async def test_add_before_remove_when_at_replication() -> None:
    s = testing.build_state(
        ROOT, "", MEMBERS, [("i", 2)], [("i", "a", "m1", 0), ("i", "a", "m2", 1)]
    )
    # Desired moves m2 -> m3: the add goes out, but the removal must wait.
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert t.ops() == [("put", "/root/assign/i#b#m3#2")]


async def test_remove_once_over_replicated_and_consistent() -> None:
    asn = [("i", "a", "m1", 0), ("i", "a", "m2", 1), ("i", "b", "m3", 2)]
    s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)], asn)
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert t.ops() == [("del", "/root/assign/i#a#m2#1")]
    cmps, _ = t.checkpoints[0]
    assert cmps[0].key.decode() == "/root/items/i"  # the item's replication is re-checked


async def test_no_remove_while_inconsistent() -> None:
    asn = [("i", "a", "m1", 0), ("i", "a", "m2", 1), ("i", "b", "m3", 2)]
    s = testing.build_state(
        ROOT,
        "",
        MEMBERS,
        [("i", 2)],
        asn,
        is_consistent=testing.json_is_consistent,
        consistent=False,
    )
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    # Nothing removed; with nothing added or removed, one slot gets packed.
    assert t.ops() == []


async def test_promote_to_slot_zero_then_pack() -> None:
    asn = [("i", "a", "m1", 2), ("i", "b", "m3", 3)]
    s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)], asn)
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert t.ops() == [
        ("del", "/root/assign/i#a#m1#2"),
        ("put", "/root/assign/i#a#m1#0"),
        ("del", "/root/assign/i#b#m3#3"),
        ("put", "/root/assign/i#b#m3#1"),
    ]


async def test_promotion_prefers_consistent_then_least_primary_load() -> None:
    members = [("a", "m1", 10), ("a", "m2", 10), ("b", "m3", 10)]
    asn = [("i", "a", "m1", 1), ("i", "a", "m2", 2), ("j", "a", "m1", 0), ("j", "b", "m3", 1)]
    s = testing.build_state(ROOT, "", members, [("i", 2), ("j", 2)], asn)
    t = await run(s, [A("i", "a", "m1"), A("i", "a", "m2"), A("j", "a", "m1"), A("j", "b", "m3")])
    # m1 already is a primary (of j): m2 is promoted for i.
    assert t.ops()[:2] == [("del", "/root/assign/i#a#m2#2"), ("put", "/root/assign/i#a#m2#0")]


async def test_adds_never_exceed_member_limit() -> None:
    members = [("a", "m1", 1), ("b", "m3", 10)]
    s = testing.build_state(ROOT, "", members, [("i", 2), ("j", 2)], [("i", "a", "m1", 0)])
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3"), A("j", "a", "m1"), A("j", "b", "m3")])
    assert ("put", "/root/assign/j#a#m1#0") not in t.ops()
    # Slots are numbered before the limit drops an add (as Gazette): promotion follows next round.
    assert ("put", "/root/assign/j#b#m3#1") in t.ops()


async def test_dead_assignments_are_removed_if_item_absent() -> None:
    s = testing.build_state(
        ROOT,
        "",
        MEMBERS,
        [("i", 1)],
        [("gone", "a", "m1", 0), ("i", "a", "m1", 0), ("zz", "b", "m3", 0)],
    )
    t = await run(s, [A("i", "a", "m1")])
    assert t.ops() == [("del", "/root/assign/gone#a#m1#0"), ("del", "/root/assign/zz#b#m3#0")]
    cmps, _ = t.checkpoints[0]
    assert cmps[0].key.decode() == "/root/items/gone" and cmps[0].create_revision == 0


def test_batched_txn_limits() -> None:
    # Comparison / op builders carry etcd's fields.
    c = txn.mod_revision_is("k", 7)
    assert (c.key, c.mod_revision) == (b"k", 7)
    p = txn.put("k", b"v", lease=3)
    assert (p.request_put.lease, p.request_put.value) == (3, b"v")


def _sample(name: str) -> float:
    v = prometheus_client.REGISTRY.get_sample_value(name)
    assert v is not None, name
    return v


GAZETTE_METRICS = [
    "gazette_allocator_assignment_added_total",
    "gazette_allocator_assignment_packed_total",
    "gazette_allocator_assignment_removed_total",
    "gazette_allocator_converge_total",
    "gazette_allocator_max_flow_runtime_seconds_count",
    "gazette_allocator_desired_replication_slots",
    "gazette_allocator_items",
    "gazette_allocator_members",
]


async def test_converge_moves_gazettes_counters() -> None:
    before = {n: _sample(n) for n in GAZETTE_METRICS}

    def delta(name: str) -> float:
        return _sample(name) - before[name]

    # Two adds to an empty item.
    s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)])
    await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert delta("gazette_allocator_assignment_added_total") == 2
    # One removal of an over-replicated item, and one promotion + one pack.
    asn = [("i", "a", "m1", 0), ("i", "a", "m2", 1), ("i", "b", "m3", 2)]
    s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)], asn)
    await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert delta("gazette_allocator_assignment_removed_total") == 1
    s = testing.build_state(
        ROOT, "", MEMBERS, [("i", 2)], [("i", "a", "m1", 2), ("i", "b", "m3", 3)]
    )
    await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert delta("gazette_allocator_assignment_packed_total") == 2
    # A settled item moves nothing.
    s = testing.build_state(
        ROOT, "", MEMBERS, [("i", 2)], [("i", "a", "m1", 0), ("i", "b", "m3", 1)]
    )
    t = await run(s, [A("i", "a", "m1"), A("i", "b", "m3")])
    assert t.ops() == []
    assert delta("gazette_allocator_assignment_added_total") == 2
    assert delta("gazette_allocator_assignment_removed_total") == 1
    assert delta("gazette_allocator_assignment_packed_total") == 2


def test_settled_items_are_exactly_those_converge_leaves_alone() -> None:
    a = [("i", "a", "m1"), ("i", "b", "m3")]
    for slots, settled in (((0, 1), True), ((1, 0), True), ((0, 2), False), ((1, 1), False)):
        asn = [(*x, slot) for x, slot in zip(a, slots, strict=True)]
        s = testing.build_state(ROOT, "", MEMBERS, [("i", 2)], asn)
        assert item_state._settled(s.assignments, [A(*x) for x in a]) is settled
    s = testing.build_state(
        ROOT, "", MEMBERS, [("i", 2)], [("i", "a", "m1", 0), ("i", "a", "m2", 1)]
    )
    assert not item_state._settled(s.assignments, [A(*x) for x in a])
