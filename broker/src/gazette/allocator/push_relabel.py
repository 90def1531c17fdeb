"""A greedy, sparse push/relabel max-flow solver over a virtual network.

This follows Gazette's ``sparse_push_relabel``: the network is not
materialised; the solver asks it for *pages* of arcs of a node as it
discharges that node, and the network may vary arc capacities with the
node's height relative to the source. Arc presentation order (and the
``push_front`` flag, which makes a flow's residual the last one tried)
steers the solver towards the previous solution, so it departs from the
current assignments only where a maximum flow requires it.

Active nodes are kept in a max-heap on height with the sift order of Go's
``container/heap``, so ties break as Gazette's do. Flows are kept in doubly
linked lists per node (outgoing and incoming), stored column-wise in lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

PAGE_INITIAL = 0
PAGE_EOF = 2**31 - 1
SOURCE = 0
SINK = 1
_MAX_HEIGHT = 2**31 - 1


class Arc(NamedTuple):
    to: int
    capacity: int
    push_front: bool = False


class Network(Protocol):
    def nodes(self) -> int:
        """Number of nodes, including the source (0) and the sink (1)."""
        ...

    def initial_height(self, node: int) -> int:
        """A lower bound of the node's distance to the sink (0 is always correct)."""
        ...

    def arcs(self, mf: MaxFlow, node: int, page: int) -> tuple[Sequence[Arc], int]:
        """The page of the node's arcs and the token of the next page (or PAGE_EOF)."""
        ...


class MaxFlow:
    """The state, then the result, of a solve. Use :func:`find_max_flow`."""

    def __init__(self, network: Network) -> None:
        n = network.nodes()
        self.n = n
        self.height = [0] * n
        self.next_height = [_MAX_HEIGHT] * n
        self.excess = [0] * n
        self.fwd_head = [0] * n
        self.fwd_tail = [0] * n
        self.rev_head = [0] * n
        self.rev_tail = [0] * n
        self.page = [PAGE_INITIAL] * n
        self.ind = [0] * n
        self.height_counts = [0] * n
        self.discharge_idx = [0] * n
        self.active: list[int] = [SOURCE]
        # Flows, column-wise; id 0 is a zero-rate sentinel.
        self.f_from = [0]
        self.f_to = [0]
        self.f_rate = [0]
        self.f_fprev = [0]
        self.f_fnext = [0]
        self.f_rprev = [0]
        self.f_rnext = [0]
        self.free: list[int] = []

        self.excess[SOURCE] = 2**31 - 1
        self.height[SOURCE] = n
        self.height_counts[0] = 1  # the sink; the source's height is out of range
        for i in range(SINK + 1, n):
            h = network.initial_height(i)
            self.height[i] = h
            self.height_counts[h] += 1

    def relative_height(self, node: int) -> int:
        """The node's height less the source's: networks may relax capacities as it grows."""
        return self.height[node] - self.height[SOURCE]

    def flows(self, node: int) -> list[tuple[int, int]]:
        """(to, rate) of each flow out of ``node``, in list order."""
        out = []
        fid = self.fwd_head[node]
        while fid:
            out.append((self.f_to[fid], self.f_rate[fid]))
            fid = self.f_fnext[fid]
        return out

    def flow_to_sink(self) -> int:
        total = 0
        fid = self.rev_head[SINK]
        while fid:
            total += self.f_rate[fid]
            fid = self.f_rnext[fid]
        return total

    # -- the heap (Go container/heap order, max on height) -----------------

    def _up(self, j: int) -> None:
        a, h = self.active, self.height
        while j > 0:
            i = (j - 1) // 2
            if not h[a[j]] > h[a[i]]:
                break
            a[i], a[j] = a[j], a[i]
            j = i

    def _down(self, i: int, n: int) -> None:
        a, h = self.active, self.height
        while True:
            j = 2 * i + 1
            if j >= n:
                break
            j2 = j + 1
            if j2 < n and h[a[j2]] > h[a[j]]:
                j = j2
            if not h[a[j]] > h[a[i]]:
                break
            a[i], a[j] = a[j], a[i]
            i = j

    def _push_active(self, node: int) -> None:
        self.active.append(node)
        self._up(len(self.active) - 1)

    def _pop_active(self) -> int:
        a = self.active
        n = len(a) - 1
        a[0], a[n] = a[n], a[0]
        self._down(0, n)
        return a.pop()

    def _heapify(self) -> None:
        n = len(self.active)
        for i in range(n // 2 - 1, -1, -1):
            self._down(i, n)

    # -- flows ---------------------------------------------------------------

    def _add_flow(self, frm: int, to: int, push_front: bool) -> int:
        if self.free:
            fid = self.free.pop()
        else:
            fid = len(self.f_rate)
            self.f_from.append(0)
            self.f_to.append(0)
            self.f_rate.append(0)
            self.f_fprev.append(0)
            self.f_fnext.append(0)
            self.f_rprev.append(0)
            self.f_rnext.append(0)
        self.f_from[fid], self.f_to[fid], self.f_rate[fid] = frm, to, 0
        fp = fn = rp = rn = 0
        if push_front:
            head = self.fwd_head[frm]
            if head == 0:
                self.fwd_head[frm] = self.fwd_tail[frm] = fid
            else:
                self.f_fprev[head] = fid
                self.fwd_head[frm], fn = fid, head
            head = self.rev_head[to]
            if head == 0:
                self.rev_head[to] = self.rev_tail[to] = fid
            else:
                self.f_rprev[head] = fid
                self.rev_head[to], rn = fid, head
        else:
            tail = self.fwd_tail[frm]
            if tail == 0:
                self.fwd_head[frm] = self.fwd_tail[frm] = fid
            else:
                self.f_fnext[tail] = fid
                fp, self.fwd_tail[frm] = tail, fid
            tail = self.rev_tail[to]
            if tail == 0:
                self.rev_head[to] = self.rev_tail[to] = fid
            else:
                self.f_rnext[tail] = fid
                rp, self.rev_tail[to] = tail, fid
        self.f_fprev[fid], self.f_fnext[fid] = fp, fn
        self.f_rprev[fid], self.f_rnext[fid] = rp, rn
        return fid

    def _remove_flow(self, fid: int) -> None:
        frm, to = self.f_from[fid], self.f_to[fid]
        fp, fn, rp, rn = self.f_fprev[fid], self.f_fnext[fid], self.f_rprev[fid], self.f_rnext[fid]
        if fp == 0:
            self.fwd_head[frm] = fn
        else:
            self.f_fnext[fp] = fn
        if fn == 0:
            self.fwd_tail[frm] = fp
        else:
            self.f_fprev[fn] = fp
        if rp == 0:
            self.rev_head[to] = rn
        else:
            self.f_rnext[rp] = rn
        if rn == 0:
            self.rev_tail[to] = rp
        else:
            self.f_rprev[rn] = rp
        self.free.append(fid)
        self.f_from[fid] = self.f_to[fid] = self.f_rate[fid] = 0
        self.f_fprev[fid] = self.f_fnext[fid] = self.f_rprev[fid] = self.f_rnext[fid] = 0

    # -- discharge -----------------------------------------------------------

    def discharge(
        self, nid: int, arcs_of: Callable[[MaxFlow, int, int], tuple[Sequence[Arc], int]]
    ) -> None:
        # The hot loop of the solver: height checks, excess updates and heap
        # pushes are inlined (a member shedding excess may walk a thousand
        # residuals per discharge). Keep the order of operations Gazette's:
        # solutions must stay identical to the Go allocator's.
        page, ind, excess = self.page, self.ind, self.excess
        height, next_height = self.height, self.next_height
        f_rate, f_to, f_from, f_rprev = self.f_rate, self.f_to, self.f_from, self.f_rprev
        didx = self.discharge_idx
        push_active = self._push_active

        # Index the node's outgoing flows by destination, for O(1) lookups.
        fid = self.fwd_head[nid]
        while fid:
            didx[f_to[fid]] = fid
            fid = self.f_fnext[fid]
        try:
            arcs: Sequence[Arc] = ()
            n_arcs = 0
            shift = 0
            next_page = PAGE_INITIAL
            fid = 0
            hn = height[nid]
            if page[nid] != PAGE_EOF:
                arcs, next_page = arcs_of(self, nid, page[nid])
                n_arcs = len(arcs)
                if n_arcs:
                    shift = nid % n_arcs
            else:
                fid = self.rev_tail[nid]

            while True:
                if page[nid] != PAGE_EOF:
                    i = ind[nid]
                    if i != n_arcs:
                        # Push along the current arc. Rotating the start by the
                        # node id spreads nodes sharing arcs over different targets.
                        a = i + shift
                        if a >= n_arcs:
                            a -= n_arcs
                        to, cap, front = arcs[a]
                        fid = didx[to]
                        if f_rate[fid] >= cap:
                            ind[nid] = i + 1
                            continue
                        ht = height[to]
                        if hn <= ht:
                            if next_height[nid] > ht + 1:
                                next_height[nid] = ht + 1
                            ind[nid] = i + 1
                            continue
                        if fid == 0:
                            fid = self._add_flow(nid, to, front)
                            didx[to] = fid
                        delta = cap - f_rate[fid]
                        ex = excess[nid]
                        if delta > ex:
                            delta = ex
                        f_rate[fid] += delta
                        excess[nid] = ex - delta
                        if excess[to] == 0 and to != SINK:
                            push_active(to)
                        excess[to] += delta
                        if ex == delta:
                            return  # resume at this same arc, should excess return
                        ind[nid] = i + 1
                    else:
                        page[nid], ind[nid] = next_page, 0
                        if next_page != PAGE_EOF:
                            arcs, next_page = arcs_of(self, nid, page[nid])
                            n_arcs = len(arcs)
                            shift = nid % n_arcs if n_arcs else 0
                        else:
                            fid = self.rev_tail[nid]  # residuals, LIFO
                elif fid != 0:
                    # Skip the residuals we may not push back along (at or
                    # above our height) in a tight loop: most of a discharge's
                    # steps on a tight network are these.
                    nh = next_height[nid]
                    frm = f_from[fid]
                    ht = height[frm]
                    while hn <= ht:
                        if nh > ht + 1:
                            nh = ht + 1
                        fid = f_rprev[fid]
                        if fid == 0:
                            break
                        frm = f_from[fid]
                        ht = height[frm]
                    next_height[nid] = nh
                    if fid == 0:
                        continue  # no residual left: relabel
                    prev = f_rprev[fid]
                    delta = f_rate[fid]
                    ex = excess[nid]
                    if delta > ex:
                        delta = ex
                    f_rate[fid] -= delta
                    excess[nid] = ex - delta
                    if excess[frm] == 0 and frm != SINK:
                        push_active(frm)
                    excess[frm] += delta
                    if f_rate[fid] == 0:
                        self._remove_flow(fid)
                    if ex == delta:
                        return
                    fid = prev
                else:
                    if nid == SOURCE:
                        return  # the source is never relabelled: done
                    self._relabel(nid)
                    hn = height[nid]
                    page[nid], next_page, arcs, n_arcs = PAGE_INITIAL, PAGE_INITIAL, (), 0
                    ind[nid] = 0
        finally:
            fid = self.fwd_head[nid]
            while fid:
                didx[f_to[fid]] = 0
                fid = self.f_fnext[fid]

    def _relabel(self, nid: int) -> None:
        n = self.n
        height, counts = self.height, self.height_counts
        g = height[nid]
        # Gap heuristic: if nid alone holds height g, nodes above g (below n)
        # are cut off from the sink. They are lifted to n-1, not the textbook
        # n+1, so networks still get to relax capacities at those heights
        # before excess drains back to the source.
        if 0 < g < n - 1 and self.next_height[nid] < n - 1 and counts[g] == 1:
            if counts[self.next_height[nid]] != 0:
                for i in range(n):
                    h = height[i]
                    if g < h < n:
                        counts[h] -= 1
                        height[i] = n - 1
                        self.next_height[i] = _MAX_HEIGHT
                        self.page[i] = PAGE_INITIAL
                        self.ind[i] = 0
                self._heapify()
            self.next_height[nid] = n - 1

        if height[nid] < n:
            counts[height[nid]] -= 1
        if self.next_height[nid] < n:
            counts[self.next_height[nid]] += 1
        height[nid], self.next_height[nid] = self.next_height[nid], _MAX_HEIGHT


def find_max_flow(network: Network) -> MaxFlow:
    """Solve ``network`` for a maximum flow from SOURCE to SINK."""
    mf = MaxFlow(network)
    arcs_of = network.arcs
    while mf.active:
        mf.discharge(mf._pop_active(), arcs_of)
    return mf
