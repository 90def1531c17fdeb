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

from gazette.allocator import errors, flow_network, item_state, keys, txn
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
    """Keeps a :class:`State` of a KeySpace current, pivoted on ``local_key``.

    Each KeySpace update builds a new State: a State held by a reader is a
    snapshot that never changes under it.
    """

    def __init__(
        self, ks: KeySpace, local_key: str, is_consistent: IsConsistentFn = always_consistent
    ) -> None:
        self.ks = ks
        self.local_key = local_key
        self.is_consistent = is_consistent
        self.state = self._extract()
        ks.add_observer(self._observe)

    def _extract(self) -> State:
        return State(
            self.ks.root, self.local_key, self.ks.key_values, self.is_consistent, self.ks.revision
        )

    def _observe(self) -> None:
        self.state = self._extract()


def change_summary(
    current: Sequence[keys.KeyValue], desired: Sequence[keys.Assignment]
) -> tuple[int, int, int]:
    """(added, removed, unchanged) if ``current`` became ``desired``."""
    cur = {(a.item_id, a.member_zone, a.member_suffix) for a in (kv.decoded for kv in current)}
    want = {(a.item_id, a.member_zone, a.member_suffix) for a in desired}
    return len(want - cur), len(cur - want), len(cur & want)


async def allocate(
    client: aetcd.Client,
    observed: ObservedState,
    *,
    on_round: RoundHook | None = None,
    solver: Solver = solve,
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

    while True:
        state = observed.state
        if state.local_member_index == -1:
            raise errors.MemberKeyMissing(state.local_key)
        if state.should_exit():
            return
        next_rev = state.revision + 1

        if state.is_leader():
            if state.network_hash != last_hash:
                start = time.perf_counter()
                # Solving takes a while on large networks: keep the event loop
                # (lease keep-alives, RPCs) running meanwhile.
                desired = await asyncio.to_thread(solver, state)
                added, removed, same = change_summary(state.assignments, desired)
                log.info(
                    "solved for maximum assignment: %d desired (+%d -%d =%d) of %d item slots, "
                    "%d member slots, %d items, %d members, rev %d, in %.3fs",
                    len(desired),
                    added,
                    removed,
                    same,
                    state.item_slots,
                    state.member_slots,
                    len(state.items),
                    len(state.members),
                    state.revision,
                    time.perf_counter() - start,
                )
                if len(desired) < state.item_slots:
                    log.warning(
                        "cannot reach desired replication for all items (%d replicas unattainable)",
                        state.item_slots - len(desired),
                    )
                last_hash = state.network_hash

            member_kv = state.members[state.local_member_index]
            t = txn.BatchedTxn(client, txn.mod_revision_is(member_kv.key, member_kv.mod_revision))
            failed: errors.AllocatorError | None = None
            try:
                await item_state.converge(t, state, desired)
                await t.flush()
            except (errors.TxnFailed, errors.EtcdError) as e:
                failed = e
            # Read through whatever was applied, even if a later txn failed.
            next_rev = max(next_rev, t.revision)
            if failed is not None:
                log.warning(
                    "converge round %d failed at rev %d (will retry): %s",
                    rnd,
                    state.revision,
                    failed,
                )
            else:
                if on_round is not None:
                    res = on_round(rnd, t.revision == 0)
                    if inspect.isawaitable(res):
                        await res
                rnd += 1

        await ks.wait_for_revision(next_rev)
