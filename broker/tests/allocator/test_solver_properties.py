"""Property test of the solver alone, on random topologies.

Invariants of every solution: no item over its desired replication, no member
twice for an item, no member over its effective limit, replicas over >= 2
zones whenever a full assignment with that spread exists; and optimality:
the assigned count equals a maximum flow computed independently here.
"""

from __future__ import annotations

import collections

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gazette.allocator import allocator, testing
from gazette.allocator.state import State

ROOT = "/root"


def max_flow(n: int, edges: list[tuple[int, int, int]], s: int, t: int) -> int:
    """Edmonds-Karp on an adjacency matrix of residual capacities (small graphs)."""
    cap = [collections.defaultdict(int) for _ in range(n)]
    for u, v, c in edges:
        cap[u][v] += c
        cap[v][u] += 0
    flow = 0
    while True:
        parent = {s: s}
        q = collections.deque([s])
        while q and t not in parent:
            u = q.popleft()
            for v, c in cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    q.append(v)
        if t not in parent:
            return flow
        bottleneck, v = float("inf"), t
        while v != s:
            bottleneck = min(bottleneck, cap[parent[v]][v])
            v = parent[v]
        v = t
        while v != s:
            u = parent[v]
            cap[u][v] -= int(bottleneck)
            cap[v][u] += int(bottleneck)
            v = u
        flow += int(bottleneck)


def reference_max(state: State, zone_spread: bool) -> int:
    """Max replicas assignable; with ``zone_spread``, at most max(R-1, 1) per zone per item."""
    zones = state.zones
    ni, nm, nz = len(state.items), len(state.members), len(zones)
    src, sink = 0, 1
    item0, zi0, m0 = 2, 2 + ni, 2 + ni + ni * nz
    edges = []
    for i in range(ni):
        r = state.item(i).desired_replication
        edges.append((src, item0 + i, r))
        for z in range(nz):
            cz = max(r - 1, 1) if zone_spread and nz > 1 else r
            edges.append((item0 + i, zi0 + i * nz + z, cz))
    for m in range(nm):
        mem = state.member(m)
        if mem.zone in zones:
            z = zones.index(mem.zone)
            for i in range(ni):
                edges.append((zi0 + i * nz + z, m0 + m, 1))
        edges.append((m0 + m, sink, max(state.effective_limit(m), 0)))
    return max_flow(m0 + nm, edges, src, sink)


@st.composite
def topologies(draw: st.DrawFn) -> State:
    n_zones = draw(st.integers(1, 3))
    members = []
    for z in range(n_zones):
        for k in range(draw(st.integers(1, 4))):
            members.append(
                (
                    f"zone-{z}",
                    f"m{k}",
                    draw(st.integers(0, 6)),
                    draw(st.booleans()) and draw(st.booleans()),
                )
            )
    items = [(f"item-{i:02d}", draw(st.integers(0, 4))) for i in range(draw(st.integers(0, 12)))]
    assignments = []
    for item_id, _ in items:
        chosen = (
            draw(st.lists(st.sampled_from(members), max_size=3, unique=True)) if members else []
        )
        for slot, m in enumerate(sorted(chosen)):
            assignments.append((item_id, m[0], m[1], slot))
    assignments.sort()
    return testing.build_state(ROOT, "", members, items, assignments)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies())
def test_solver_invariants_and_optimality(state: State) -> None:
    desired = allocator.solve(state)

    assert desired == sorted(desired)
    per_item = collections.defaultdict(list)
    per_member: collections.Counter[tuple[str, str]] = collections.Counter()
    for a in desired:
        per_item[a.item_id].append(a)
        per_member[(a.member_zone, a.member_suffix)] += 1

    for i in range(len(state.items)):
        item = state.item(i)
        got = per_item.get(item.id, [])
        assert len(got) <= item.desired_replication
        assert len({(a.member_zone, a.member_suffix) for a in got}) == len(got)
    for (zone, suffix), n in per_member.items():
        mi = state.find_member(zone, suffix)
        assert mi != -1
        assert n <= state.effective_limit(mi), (zone, suffix)

    best = reference_max(state, zone_spread=False)
    assert len(desired) == best

    # When every item can be fully replicated with at most R-1 replicas per zone,
    # every replicated item must span two zones.
    if (
        len(state.zones) > 1
        and best == state.item_slots
        and reference_max(state, zone_spread=True) == best
    ):
        for item_id, got in per_item.items():
            if len(got) >= 2:
                assert len({a.member_zone for a in got}) >= 2, (item_id, got)
