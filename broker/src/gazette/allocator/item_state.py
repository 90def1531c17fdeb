"""Converging current assignments towards the desired ones, safely.

For each item, current and desired assignments are diffed on (zone, suffix)
into *add*, *remove* and *reorder* (kept) sets, then constrained:

* removals go in decreasing member load, and stop before the number of
  consistent replicas would fall below the desired replication;
* if no kept assignment holds slot 0, the best one is promoted (consistent
  first, then lowest primary load) by moving its key to slot 0;
* additions to members already at their effective limit are dropped;
* when nothing is added or removed, at most one kept assignment is packed
  into the lowest free slot per round.

Each item's operations form one checkpoint of a checked transaction: adds
compare the member key's mod revision, removes compare the item's and each
assignment's mod revision, moves compare the moved key. Assignments of
deleted items are removed after checking the item still doesn't exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from gazette.allocator import keys, metrics, txn
from gazette.allocator.state import State


def _mod_unchanged(kv: keys.RawKeyValue) -> txn.Compare:
    return txn.mod_revision_is(kv.key, kv.mod_revision)


class _Converger:
    def __init__(self, state: State, t: txn.CheckpointTxn) -> None:
        self.s = state
        self.txn = t
        # Counters move as operations are emitted, so later items of the same
        # round see the load of earlier decisions.
        self.total = list(state.member_total_count)
        self.primary = list(state.member_primary_count)

    async def remove_dead(self, dead: Sequence[keys.KeyValue]) -> None:
        i = 0
        while i < len(dead):
            item_id = dead[i].decoded.item_id
            j = i
            while j < len(dead) and dead[j].decoded.item_id == item_id:
                j += 1
            # The item must still not exist: don't race its re-creation.
            self.txn.if_(txn.create_revision_is(keys.item_key(self.s.root, item_id), 0))
            for kv in dead[i:j]:
                self.txn.if_(_mod_unchanged(kv))
                self.txn.then(txn.delete(kv.key))
            await self.txn.checkpoint()
            i = j

    async def item(
        self, index: int, current: Sequence[keys.KeyValue], desired: Sequence[keys.Assignment]
    ) -> None:
        s = self.s
        if len(current) == len(desired) and _settled(current, desired):
            return  # nothing to add, remove, promote or pack: the common case
        item = s.item(index)
        add: list[keys.Assignment] = []
        remove: list[keys.KeyValue] = []
        reorder: list[keys.KeyValue] = []

        next_slot = 0
        for kv in current:
            next_slot = max(next_slot, kv.decoded.slot + 1)
        i = j = 0
        while i < len(current) and j < len(desired):
            a: keys.Assignment = current[i].decoded
            ca = (a.member_zone, a.member_suffix)
            cd = (desired[j].member_zone, desired[j].member_suffix)
            if ca > cd:
                d = desired[j]
                add.append(keys.Assignment(d.item_id, d.member_zone, d.member_suffix, next_slot))
                next_slot += 1
                j += 1
            elif ca < cd:
                remove.append(current[i])
                i += 1
            else:
                reorder.append(current[i])
                i += 1
                j += 1
        remove.extend(current[i:])
        for d in desired[j:]:
            add.append(keys.Assignment(d.item_id, d.member_zone, d.member_suffix, next_slot))
            next_slot += 1

        # Constrain removals: most loaded members first; never let the count of
        # consistent replicas drop below the desired replication.
        remove.sort(key=lambda kv: s.load_ratio(kv.decoded, self.total), reverse=True)
        n = sum(1 for kv in current if s.is_consistent(item, kv, current))
        r = item.desired_replication
        limit = 0
        while n >= r and limit != len(remove):
            c = s.is_consistent(item, remove[limit], current)
            if c and n == r:
                break
            if c:
                n -= 1
            limit += 1
        reorder.extend(remove[limit:])
        del remove[limit:]

        # Constrain reorders: slot 0 first; promote if there's no primary.
        reorder.sort(key=lambda kv: kv.decoded.slot)
        if reorder and reorder[0].decoded.slot != 0:
            best = -1
            best_c = False
            best_r = 0.0
            for k, kv in enumerate(reorder):
                c = s.is_consistent(item, kv, current)
                ratio = s.load_ratio(kv.decoded, self.primary)
                if best == -1 or (c and not best_c) or (c == best_c and ratio < best_r):
                    best, best_c, best_r = k, c, ratio
            reorder.insert(0, reorder.pop(best))

        # Constrain adds: never past a member's effective limit.
        kept_adds = []
        for a in add:
            mi = s.find_member(a.member_zone, a.member_suffix)
            if mi == -1:
                raise AssertionError(f"desired member {a.member_zone}#{a.member_suffix} not found")
            if s.effective_limit(mi) > self.total[mi]:
                kept_adds.append(a)
        add = kept_adds

        t = self.txn
        for a in add:
            mi = s.find_member(a.member_zone, a.member_suffix)
            member_kv = s.members[mi]
            # The member's limit may have dropped since we read it.
            t.if_(_mod_unchanged(member_kv))
            t.then(txn.put(keys.assignment_key(s.root, a), b"", lease=member_kv.lease))
            metrics.assignment_added.inc()
            if a.slot == 0:
                self.primary[mi] += 1
            self.total[mi] += 1

        for k, kv in enumerate(remove):
            if k == 0:
                # The item's replication may have grown since we read it.
                t.if_(_mod_unchanged(s.items[index]))
            t.if_(_mod_unchanged(kv))
            t.then(txn.delete(kv.key))
            metrics.assignment_removed.inc()
            a = kv.decoded
            mi = s.find_member(a.member_zone, a.member_suffix)
            if mi != -1:  # a member may be gone before its assignments are
                if a.slot == 0:
                    self.primary[mi] -= 1
                self.total[mi] -= 1

        if reorder and reorder[0].decoded.slot != 0:
            a = reorder[0].decoded
            mi = s.find_member(a.member_zone, a.member_suffix)
            if mi != -1:
                self.primary[mi] += 1
            self._move(reorder[0], 0)

        if not add and not remove:
            for k in range(1, len(reorder)):
                if reorder[k].decoded.slot != k:
                    self._move(reorder[k], k)
                    break
        await t.checkpoint()

    def _move(self, kv: keys.KeyValue, slot: int) -> None:
        """Atomically move an assignment to ``slot``, keeping its value and lease."""
        metrics.assignment_packed.inc()
        a: keys.Assignment = kv.decoded
        moved = keys.Assignment(a.item_id, a.member_zone, a.member_suffix, slot)
        self.txn.if_(_mod_unchanged(kv))
        self.txn.then(
            txn.delete(kv.key),
            txn.put(keys.assignment_key(self.s.root, moved), kv.value, lease=kv.lease),
        )


def _settled(current: Sequence[keys.KeyValue], desired: Sequence[keys.Assignment]) -> bool:
    """Whether ``current`` holds exactly the ``desired`` members in packed slots 0..n-1.

    Then :meth:`_Converger.item` would emit nothing (no add, no removal, a
    primary in slot 0, nothing to pack), so skipping it changes nothing but
    the cost of a round: a leader walks every item every round, and most are
    settled (consistency checks of a journal decode Routes).
    """
    seen = 0
    n = len(current)
    for kv, d in zip(current, desired, strict=True):
        a: keys.Assignment = kv.decoded
        if a.member_zone != d.member_zone or a.member_suffix != d.member_suffix:
            return False
        slot = a.slot
        if slot < 0 or slot >= n or seen >> slot & 1:
            return False
        seen |= 1 << slot
    return True


async def converge(t: txn.CheckpointTxn, state: State, desired: Sequence[keys.Assignment]) -> None:
    """Emit, into ``t``, the allowed changes bringing ``state`` closer to ``desired``.

    ``desired`` is ordered on (item, zone, suffix) like :func:`solve` returns it.
    The caller flushes ``t``.
    """
    c = _Converger(state, t)
    asn = state.assignments
    last_end = 0
    d = 0
    for index, item_kv in enumerate(state.items):
        begin, end = state.item_assignments[index]
        await c.remove_dead(asn[last_end:begin])
        last_end = end
        item_id = item_kv.decoded.id
        # Desired assignments of items no longer present are skipped.
        while d < len(desired) and desired[d].item_id < item_id:
            d += 1
        d_end = d
        while d_end < len(desired) and desired[d_end].item_id == item_id:
            d_end += 1
        await c.item(index, asn[begin:end], desired[d:d_end])
        d = d_end
    await c.remove_dead(asn[last_end:])
