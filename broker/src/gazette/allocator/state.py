"""State: the allocator's view of a KeySpace, recomputed after every update.

A :class:`State` is extracted from the sorted entries of a KeySpace and
pivoted on the local member key: it holds the members, items and assignments,
the zones with capacity, slot totals, per-member assignment counts, the
capacity exiting members shed, the local member's items, and a hash of the
network (members, items and their numbers) so the leader re-solves only when
the problem itself changed.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import keys

IsConsistentFn = Callable[[keys.Item, keys.KeyValue, Sequence[keys.KeyValue]], bool]
"""Whether an item is consistent, given one of its assignments and all of them.

Consistent means the replicas have synchronised and the cohort can lose one:
the allocator removes an assignment only while the item stays consistent."""


def always_consistent(_item: keys.Item, _kv: keys.KeyValue, _all: Sequence[keys.KeyValue]) -> bool:
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class LocalItem:
    """An item assigned to the local member."""

    item: keys.KeyValue
    assignments: Sequence[keys.KeyValue]  # every assignment of the item
    index: int  # of ours within ``assignments``

    @property
    def assignment(self) -> keys.Assignment:
        a: keys.Assignment = self.assignments[self.index].decoded
        return a


class State:
    """Allocator state extracted from KeySpace ``entries`` (sorted on key).

    Members, items and assignments are the entries whose ``decoded`` value is
    a :class:`keys.Member`, :class:`keys.Item` or :class:`keys.Assignment`;
    anything else under the root is ignored.
    """

    def __init__(
        self,
        root: str,
        local_key: str,
        entries: Sequence[keys.KeyValue],
        is_consistent: IsConsistentFn = always_consistent,
        revision: int = 0,
    ) -> None:
        self.root = root
        self.local_key = local_key
        self.is_consistent = is_consistent
        self.revision = revision

        members: list[keys.KeyValue] = []
        items: list[keys.KeyValue] = []
        assignments: list[keys.KeyValue] = []
        for kv in entries:
            d = kv.decoded
            if isinstance(d, keys.Assignment):
                assignments.append(kv)
            elif isinstance(d, keys.Member):
                members.append(kv)
            elif isinstance(d, keys.Item):
                items.append(kv)
        self.members = members
        self.items = items
        self.assignments = assignments

        self.member_index: dict[tuple[str, str], int] = {}
        self.zones: list[str] = []
        self.zone_slots: list[int] = []
        self.member_slots = 0
        self.item_slots = 0
        n = len(members)
        self.member_total_count = [0] * n
        self.member_primary_count = [0] * n
        self.shed_capacity = [0] * n
        self.local_member_index = -1
        self.local_items: list[LocalItem] = []
        # [begin, end) of each item's assignments within ``assignments``.
        self.item_assignments: list[tuple[int, int]] = []

        # The network hash folds (key, number) of every member and item: one
        # digest of one joined string, not a digest update per key.
        fold: list[str] = []
        exiting: list[int] = []
        for i, kv in enumerate(members):
            m: keys.Member = kv.decoded
            self.member_index[(m.zone, m.suffix)] = i
            slots = m.item_limit
            if slots != 0:
                if not self.zones or self.zones[-1] < m.zone:
                    self.zones.append(m.zone)
                    self.zone_slots.append(slots)
                elif self.zones[-1] > m.zone:
                    raise AssertionError("members are not ordered on (zone, suffix)")
                else:
                    self.zone_slots[-1] += slots
            self.member_slots += slots
            fold.append(kv.key)
            fold.append(str(slots))
            if m.exiting:
                exiting.append(i)
            if kv.key == local_key:
                self.local_member_index = i

        # Join items with their (ordered) assignments. Assignments of items
        # which don't exist are skipped here; the leader deletes them.
        max_replication = 0
        ai = 0
        na = len(assignments)
        asn_ids = [kv.decoded.item_id for kv in assignments]
        for item_kv in items:
            item: keys.Item = item_kv.decoded
            item_id = item.id
            r = item.desired_replication
            self.item_slots += r
            if r > max_replication:
                max_replication = r
            fold.append(item_kv.key)
            fold.append(str(r))

            while ai < na and asn_ids[ai] < item_id:
                ai += 1
            begin = ai
            while ai < na and asn_ids[ai] == item_id:
                ai += 1
            self.item_assignments.append((begin, ai))
            cohort = assignments[begin:ai]
            for j, a_kv in enumerate(cohort):
                a: keys.Assignment = a_kv.decoded
                mi = self.member_index.get((a.member_zone, a.member_suffix))
                if mi is None:
                    continue
                if mi == self.local_member_index:
                    self.local_items.append(LocalItem(item_kv, cohort, j))
                if a.slot == 0:
                    self.member_primary_count[mi] += 1
                self.member_total_count[mi] += 1

        # Exiting members shed capacity, oldest first, out of the cluster's
        # spare slots; enough members to meet the largest replication keep theirs.
        excess = max(0, self.member_slots - self.item_slots)
        exiting.sort(key=lambda i: members[i].create_revision)
        max_shedding = max(0, len(members) - max_replication)
        for n_shed, i in enumerate(exiting):
            if n_shed == max_shedding or excess == 0:
                break
            shed = min(members[i].decoded.item_limit, excess)
            self.shed_capacity[i] = shed
            self.member_slots -= shed
            excess -= shed
            fold.append(members[i].key)
            fold.append(str(shed))

        # Not Gazette's CRC-64: the hash never leaves the process, only its changes matter.
        digest = hashlib.blake2b("\x00".join(fold).encode(), digest_size=8).digest()
        self.network_hash = int.from_bytes(digest, "big")

    def __repr__(self) -> str:
        ms = [
            (m.zone, m.suffix, m.item_limit, m.exiting) for m in (kv.decoded for kv in self.members)
        ]
        its = [(i.id, i.desired_replication) for i in (kv.decoded for kv in self.items)]
        asn = [
            (a.item_id, a.member_zone, a.member_suffix, a.slot)
            for a in (kv.decoded for kv in self.assignments)
        ]
        return f"State(members={ms}, items={its}, assignments={asn})"

    # -- lookups -----------------------------------------------------------

    def member(self, index: int) -> keys.Member:
        m: keys.Member = self.members[index].decoded
        return m

    def item(self, index: int) -> keys.Item:
        it: keys.Item = self.items[index].decoded
        return it

    def find_member(self, zone: str, suffix: str) -> int:
        """Index of the member, or -1."""
        return self.member_index.get((zone, suffix), -1)

    def find_item(self, item_id: str) -> int:
        """Index of the item, or -1."""
        ids = _ItemIds(self.items)
        i = bisect.bisect_left(ids, item_id)
        return i if i < len(self.items) and self.items[i].decoded.id == item_id else -1

    def assignments_of(self, item_index: int) -> Sequence[keys.KeyValue]:
        b, e = self.item_assignments[item_index]
        return self.assignments[b:e]

    # -- derived -----------------------------------------------------------

    @property
    def local_member(self) -> keys.Member | None:
        return None if self.local_member_index == -1 else self.member(self.local_member_index)

    def leader_index(self) -> int:
        """Index of the member with the smallest create revision (first key on ties), or -1."""
        best = -1
        for i, kv in enumerate(self.members):
            if best == -1 or kv.create_revision < self.members[best].create_revision:
                best = i
        return best

    def is_leader(self) -> bool:
        return self.local_member_index != -1 and self.leader_index() == self.local_member_index

    def should_exit(self) -> bool:
        m = self.local_member
        return m is not None and m.exiting and not self.local_items

    def effective_limit(self, member_index: int) -> int:
        return self.member(member_index).item_limit - self.shed_capacity[member_index]

    def load_ratio(self, a: keys.Assignment, counts: Sequence[int]) -> float:
        """``counts`` of the assignment's member over its effective limit (inf if gone)."""
        mi = self.member_index.get((a.member_zone, a.member_suffix))
        if mi is None:
            return float("inf")
        limit = self.effective_limit(mi)
        if limit <= 0:
            return float("inf") if counts[mi] else 0.0
        return counts[mi] / limit


class _ItemIds(Sequence[str]):
    """A sequence view of item ids, for bisect."""

    def __init__(self, items: Sequence[Any]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i].decoded.id
