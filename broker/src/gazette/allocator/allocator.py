"""The allocate loop: every member runs it, the leader acts.

The leader (the member key with the smallest create revision) re-solves the
desired assignments when the network hash changes, and otherwise converges
towards its last solution, which stays a valid maximum assignment; keeping it
also damps the small instabilities of re-solving. Every round's writes go out
in batched transactions that also check the leader's own member key is
unchanged, then the loop waits for the KeySpace to reach the next revision
(and at least the revision it wrote).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import aetcd

from gazette.allocator import errors, flow_network, item_state, keys, metrics, txn
from gazette.allocator.state import IsConsistentFn, State, always_consistent
from gazette.keyspace import KeySpace

log = logging.getLogger(__name__)

RoundHook = Callable[[int, bool], Awaitable[None] | None]
"""Called after each successful leader round with (round, idle); idle means nothing was written."""

Solver = Callable[[State], list[keys.Assignment]]


def solve(state: State) -> list[keys.Assignment]:
    """Desired assignments of ``state``: a maximum, zone-spread, stable assignment."""
    return flow_network.solve_push_relabel(state)


class ObservedState:
    """The :class:`State` of a KeySpace, pivoted on ``local_key``, kept current.

    The State is extracted lazily, on the first read of :attr:`state` after
    the KeySpace changed, and cached for that snapshot: a leader writing
    30,000 assignments sees the KeySpace update tens of times before its next
    round, and extracting a State at every one of them cost more than the
    round itself (``bench/bench_allocator.py``). A State held by a reader is a
    snapshot that never changes under it.
    """

    def __init__(
        self, ks: KeySpace, local_key: str, is_consistent: IsConsistentFn = always_consistent
    ) -> None:
        self.ks = ks
        self.local_key = local_key
        self.is_consistent = is_consistent
        self._state: State | None = None
        self._snapshot: tuple[Sequence[keys.KeyValue], int] | None = None

    @property
    def state(self) -> State:
        """The State of the KeySpace as it is now."""
        kvs, rev = self.ks.key_values, self.ks.revision
        snap = self._snapshot
        # The KeySpace swaps its list whole on every update: identity is the test.
        if self._state is None or snap is None or snap[0] is not kvs or snap[1] != rev:
            self._state = State(self.ks.root, self.local_key, kvs, self.is_consistent, rev)
            self._snapshot = (kvs, rev)
            metrics.state_extractions.inc()
        return self._state


def change_summary(
    current: Sequence[keys.KeyValue], desired: Sequence[keys.Assignment]
) -> tuple[int, int, int]:
    """(added, removed, unchanged) if ``current`` became ``desired``.

    Both are in (item, zone, suffix) order, as a State and :func:`solve` give
    them: one merge walk, like Gazette's.
    """
    added = removed = same = 0
    i = j = 0
    nc, nd = len(current), len(desired)
    while i < nc and j < nd:
        a: keys.Assignment = current[i].decoded
        d = desired[j]
        ca = (a.item_id, a.member_zone, a.member_suffix)
        cd = (d.item_id, d.member_zone, d.member_suffix)
        if ca < cd:
            removed += 1
            i += 1
        elif ca > cd:
            added += 1
            j += 1
        else:
            same += 1
            i += 1
            j += 1
    return added + nd - j, removed + nc - i, same


async def allocate(
    client: aetcd.Client,
    observed: ObservedState,
    *,
    on_round: RoundHook | None = None,
    solver: Solver = solve,
    txn_config: txn.TxnConfig | None = None,
) -> None:
    """Run the allocate loop until the local member may exit.

    Returns once the local member is exiting and holds no assignments. Raises
    :class:`~gazette.allocator.errors.MemberKeyMissing` if the local member key
    is gone. Failed rounds (a transaction whose checks failed, an etcd error)
    are logged and retried at the next revision.
    """
    desired: list[keys.Assignment] = []
    last_hash: int | None = None
    rnd = 0
    ks = observed.ks

    try:
        while True:
            state = observed.state
            if state.local_member_index == -1:
                raise errors.MemberKeyMissing(state.local_key)
            if state.should_exit():
                return
            next_rev = state.revision + 1

            leading = state.is_leader()
            metrics.leader.set(1 if leading else 0)
            if leading:
                if state.network_hash != last_hash:
                    desired = await _solve(solver, state, last_hash)
                    last_hash = state.network_hash

                member_kv = state.members[state.local_member_index]
                leader_check = txn.mod_revision_is(member_kv.key, member_kv.mod_revision)
                t = txn.BatchedTxn(client, leader_check, config=txn_config or txn.TxnConfig())
                failed: errors.AllocatorError | None = None
                try:
                    async with t:
                        await item_state.converge(t, state, desired)
                except (errors.TxnFailed, errors.EtcdError) as e:
                    failed = e
                # Read through whatever was applied, even if another txn failed.
                next_rev = max(next_rev, t.revision)
                if failed is not None:
                    metrics.converge_failed.inc()
                    log.warning(
                        "converge round %d failed at rev %d (will retry): %s",
                        rnd,
                        state.revision,
                        failed,
                    )
                else:
                    metrics.converge.inc()
                    metrics.members.set(len(state.members))
                    metrics.items.set(len(state.items))
                    metrics.desired_replication_slots.set(state.item_slots)
                    metrics.under_replicated_items.set(under_replicated(state))
                    if on_round is not None:
                        res = on_round(rnd, t.revision == 0)
                        if inspect.isawaitable(res):
                            await res
                    rnd += 1

            await ks.wait_for_revision(next_rev)
    finally:
        metrics.leader.set(0)
        metrics.under_replicated_items.set(0)


def under_replicated(state: State) -> int:
    """Items of ``state`` with fewer assignments to live members than their desired replication.

    Assignments to members gone from etcd don't count: they serve nothing until the
    leader replaces them.
    """
    live = state.member_index

    def held(i: int) -> int:
        return sum(
            1
            for kv in state.assignments_of(i)
            if (kv.decoded.member_zone, kv.decoded.member_suffix) in live
        )

    return sum(1 for i, kv in enumerate(state.items) if held(i) < kv.decoded.desired_replication)


async def _solve(solver: Solver, state: State, last_hash: int | None) -> list[keys.Assignment]:
    start = time.perf_counter()
    # Solving takes a while on large networks: keep the event loop (lease
    # keep-alives, RPCs, the KeySpace watch) running meanwhile.
    desired = await asyncio.to_thread(solver, state)
    took = time.perf_counter() - start
    metrics.max_flow_runtime_seconds.observe(took)
    if log.isEnabledFor(logging.INFO):
        added, removed, same = change_summary(state.assignments, desired)
        log.info(
            "solved for maximum assignment: %d desired (+%d -%d =%d) of %d item slots, "
            "%d member slots, %d items, %d members, hash %x -> %x, rev %d, in %.3fs",
            len(desired),
            added,
            removed,
            same,
            state.item_slots,
            state.member_slots,
            len(state.items),
            len(state.members),
            last_hash or 0,
            state.network_hash,
            state.revision,
            took,
        )
    if len(desired) < state.item_slots:
        log.warning(
            "cannot reach desired replication for all items (%d replicas unattainable)",
            state.item_slots - len(desired),
        )
    return desired
