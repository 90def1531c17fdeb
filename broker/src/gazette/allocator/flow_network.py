"""The zone-aware assignment flow network, solved by sparse push/relabel.

Nodes: 0 source, 1 sink, then one node per item, one per (item, zone)
"zone-item", one per member::

    source -> item         capacity = desired replication
    item -> zone-item      three pages: zones the item is in now (keep), an
                           even spread ceil(R/zones), then max(R-1, 1) per zone;
                           that last bound forces >= 2 zones. Once the item is
                           about to push back to the source, one page of
                           capacity R to every zone lifts the zone rule.
    zone-item -> member    current members first (capacity 1), then every
                           member of the zone (capacity 1)
    member -> sink         effective limit scaled to this network's share of
                           item slots, and scaled further to the member's fair
                           share until the member's height shows pressure

Arcs of a current assignment are ``push_front``: their residuals are the last
to be walked back, so current assignments are kept unless the flow must move.
This is the structure of Gazette's ``sparse_flow_network.go``.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from gazette.allocator import keys, push_relabel
from gazette.allocator.push_relabel import PAGE_EOF, PAGE_INITIAL, SINK, SOURCE, Arc, MaxFlow
from gazette.allocator.state import State

ITEMS_PER_NETWORK = 10_000
"""Items are solved in independent networks of this many: linear in items."""

# An item at this height relative to the source is about to push back to it:
# rather than leave replicas unassigned, let one zone take them all.
_ITEM_OVERFLOW = 1
# Members resist taking more than their fair share until their relative height
# exceeds this. It must stay below -1 so a member never reaches +1 (which would
# in turn let items overflow) while capacity remains elsewhere.
_MEMBER_OVERFLOW = -1

_PAGE_UNIFORM = PAGE_INITIAL + 1
_PAGE_R_MINUS_ONE = _PAGE_UNIFORM + 1
_PAGE_ALL_MEMBERS = _PAGE_R_MINUS_ONE + 1


def scale_and_round(c: int, num: int, den: int) -> int:
    """``c * min(num/den, 1)``, rounded up."""
    if num > den:
        return c
    return -((-c * num) // den)


class SparseFlowNetwork:
    def __init__(self, state: State, first_item: int, end_item: int) -> None:
        self.s = state
        self.first_item = first_item
        self.n_items = end_item - first_item
        nz = len(state.zones)
        self.nz = nz
        self.first_item_node = SINK + 1
        self.first_zone_item_node = self.first_item_node + self.n_items
        self.first_member_node = self.first_zone_item_node + self.n_items * nz

        zone_index = {z: i for i, z in enumerate(state.zones)}
        self.replication = [state.item(i).desired_replication for i in range(first_item, end_item)]
        self.my_item_slots = sum(self.replication)

        # Current assignments of each zone-item, as member node ids.
        self.zone_item_current: list[list[int]] = [[] for _ in range(self.n_items * nz)]
        for local in range(self.n_items):
            for a_kv in state.assignments_of(first_item + local):
                a: keys.Assignment = a_kv.decoded
                z = zone_index.get(a.member_zone)
                mi = state.member_index.get((a.member_zone, a.member_suffix))
                if z is None or mi is None:
                    continue
                self.zone_item_current[local * nz + z].append(self.first_member_node + mi)

        self.all_members_of_zone: list[list[Arc]] = [[] for _ in range(nz)]
        for mi in range(len(state.members)):
            z = zone_index.get(state.member(mi).zone)
            if z is not None:
                self.all_members_of_zone[z].append(Arc(self.first_member_node + mi, 1))

        self.effective_limit = [state.effective_limit(i) for i in range(len(state.members))]

    def nodes(self) -> int:
        return self.first_member_node + len(self.s.members)

    def initial_height(self, node: int) -> int:
        if node < self.first_zone_item_node:
            return 3
        if node < self.first_member_node:
            return 2
        return 1

    def arcs(self, mf: MaxFlow, node: int, page: int) -> tuple[Sequence[Arc], int]:
        if node < self.first_zone_item_node:
            if node == SOURCE:
                return self._source_arcs(), PAGE_EOF
            if node == SINK:
                raise AssertionError("the sink is never discharged")
            item = node - self.first_item_node
            r = self.replication[item]
            if self.nz == 1 or mf.relative_height(node) == _ITEM_OVERFLOW:
                return self._all_item_arcs(item, r), PAGE_EOF
            if page == PAGE_INITIAL:
                return self._current_item_arcs(item, max(r - 1, 1)), _PAGE_UNIFORM
            if page == _PAGE_UNIFORM:
                return self._all_item_arcs(item, scale_and_round(r, 1, self.nz)), _PAGE_R_MINUS_ONE
            return self._all_item_arcs(item, max(r - 1, 1)), PAGE_EOF
        if node < self.first_member_node:
            zone_item = node - self.first_zone_item_node
            if page == PAGE_INITIAL:
                return [
                    Arc(m, 1, True) for m in self.zone_item_current[zone_item]
                ], _PAGE_ALL_MEMBERS
            return self.all_members_of_zone[zone_item % self.nz], PAGE_EOF
        member = node - self.first_member_node
        c = scale_and_round(self.effective_limit[member], self.my_item_slots, self.s.item_slots)
        if mf.relative_height(node) < _MEMBER_OVERFLOW:
            c = scale_and_round(c, self.s.item_slots, self.s.member_slots)
        return (Arc(SINK, c),), PAGE_EOF

    def _source_arcs(self) -> list[Arc]:
        # Gazette clips these capacities to a greedy budget of member slots, in
        # item order, to speed over-subscribed networks. That loses optimality
        # (an early item may take budget it can't place: one member of limit 2,
        # items of replication 2 and 1 get 1 replica, not 2), which our property
        # test found; capacities here are the full desired replication.
        return [Arc(self.first_item_node + item, r) for item, r in enumerate(self.replication)]

    def _all_item_arcs(self, item: int, c: int) -> list[Arc]:
        base = self.first_zone_item_node + item * self.nz
        return [Arc(base + z, c) for z in range(self.nz)]

    def _current_item_arcs(self, item: int, bound: int) -> list[Arc]:
        base = item * self.nz
        out = []
        for z in range(self.nz):
            n = min(len(self.zone_item_current[base + z]), bound)
            if n:
                out.append(Arc(self.first_zone_item_node + base + z, n, True))
        return out

    def extract(self, mf: MaxFlow, out: list[keys.Assignment]) -> None:
        """Append the assignments of the solved flow, per item in (zone, suffix) order."""
        members = self.s.members
        for local in range(self.n_items):
            item_id = self.s.item(self.first_item + local).id
            got = []
            for z in range(self.nz):
                for to, _rate in mf.flows(self.first_zone_item_node + local * self.nz + z):
                    m: keys.Member = members[to - self.first_member_node].decoded
                    got.append(keys.Assignment(item_id, m.zone, m.suffix))
            got.sort()
            out.extend(got)


def solve_push_relabel(state: State) -> list[keys.Assignment]:
    """Desired assignments of every item, ordered on (item, zone, suffix), slots unset."""
    out: list[keys.Assignment] = []
    if not state.items or not state.zones:
        return out
    for begin in range(0, len(state.items), ITEMS_PER_NETWORK):
        end = min(begin + ITEMS_PER_NETWORK, len(state.items))
        network = SparseFlowNetwork(state, begin, end)
        mf = push_relabel.find_max_flow(network)
        network.extract(mf, out)
    return augment_to_maximum(state, out)


def augment_to_maximum(state: State, desired: list[keys.Assignment]) -> list[keys.Assignment]:
    """Complete a solution to a maximum assignment with augmenting paths.

    The height-dependent capacities of the network steer push/relabel well but
    can stop it short of a maximum flow (our property test finds such cases,
    e.g. an item of replication 4 over 4 members and two of replication 2
    sharing them). Where items lack replicas and members have room, this looks
    for alternating paths (an item takes a member, whose other item moves to
    another member, ...) ending at a member with room, ignoring zones. It costs
    nothing when every item is fully replicated or no member has room.
    """
    ni, nm = len(state.items), len(state.members)
    index = {state.item(i).id: i for i in range(ni)}
    assigned: list[set[int]] = [set() for _ in range(ni)]
    holding: list[set[int]] = [set() for _ in range(nm)]
    for a in desired:
        i, m = index[a.item_id], state.member_index[(a.member_zone, a.member_suffix)]
        assigned[i].add(m)
        holding[m].add(i)
    need = [state.item(i).desired_replication - len(assigned[i]) for i in range(ni)]
    room = [state.effective_limit(m) - len(holding[m]) for m in range(nm)]
    if not any(n > 0 for n in need) or not any(r > 0 for r in room):
        return desired
    zones = set(state.zones)
    candidates = [m for m in range(nm) if state.member(m).zone in zones]

    augmented = 0
    while True:
        # Multi-source BFS from items lacking replicas.
        item_from: dict[int, int] = {i: -1 for i in range(ni) if need[i] > 0}
        member_from: dict[int, int] = {}
        queue = collections.deque(item_from)
        found = -1
        while queue and found == -1:
            i = queue.popleft()
            for m in candidates:
                if m in member_from or m in assigned[i]:
                    continue
                member_from[m] = i
                if room[m] > 0:
                    found = m
                    break
                for i2 in holding[m]:
                    if i2 not in item_from:
                        item_from[i2] = m
                        queue.append(i2)
        if found == -1:
            break
        room[found] -= 1
        m = found
        while True:
            i = member_from[m]
            assigned[i].add(m)
            holding[m].add(i)
            prev = item_from[i]
            if prev == -1:
                need[i] -= 1
                break
            assigned[i].discard(prev)
            holding[prev].discard(i)
            m = prev
        augmented += 1

    if not augmented:
        return desired
    out = []
    for i in range(ni):
        item_id = state.item(i).id
        for m in assigned[i]:
            mem = state.member(m)
            out.append(keys.Assignment(item_id, mem.zone, mem.suffix))
    out.sort()
    return out
