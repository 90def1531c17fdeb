"""A broker cut off from every peer gives its journals up while etcd still answers it.

Cut a primary from the other brokers but not from etcd, and nothing in Gazette
changes the journal's route: the primary keeps its lease, so the allocator keeps
it, and every append waits on a replica it can't reach until the network heals.
Its replicas' journals wait on it the same way. That is "safe by stopping".

:class:`Isolation` watches for that case. Every ``interval`` it asks a few other
members (up to ``max_probes``, picked at random) for a trivial ``List``, bounded
by ``probe_timeout``. Once no member has answered for ``timeout`` s, although
one did before, the broker is isolated: ``on_isolated`` (the broker process
re-announces itself with no room for journals and gives its lease up, so etcd
deletes its assignments at once, as a lease expiry would; see
:meth:`gazette.allocator.Session.resign`). The first answer after that calls
``on_rejoined`` (room for journals again).

Why these rules:

- Only a broker that *lost* contact gives up, not one that never had it: the
  first broker up after every broker was killed hears nobody for a while and
  must not resign for that.
- With fewer than two other members a cut can't be told from a dead peer (two
  brokers cut apart would both give up): the broker never counts as isolated.
- A peer that missed two probes in a row is reported (``on_unreachable``) so
  that its cached channel is dropped: after a heal, a connection that was
  carrying calls into the partition resumes only at TCP's next retransmission,
  seconds later; a fresh one connects at once.
- A broker whose etcd is away too is no worse off for resigning: its lease is
  in doubt already, and the revocation fails (the lease then expires).
- A probe refused outright (``Connection refused``: the peer's host answered,
  nothing listens there) counts as an answer: the network works, the peer is
  down. Dead peers are not a partition (their keys go with their leases), and
  a broker whose peers were all SIGKILLed at once on their hosts keeps its
  journals (:func:`refused`).

``List`` is served by Go brokers too, so mixed clusters probe each other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc

log = logging.getLogger(__name__)

__all__ = ["PROBE_JOURNAL", "Isolation", "IsolationConfig", "Peer", "refused"]

#: The journal name a probe lists (no journal needs to exist by that name).
PROBE_JOURNAL = "gazette/isolation-probe"

Peer = tuple[str, str]
"""(member name, endpoint) of another broker."""


def refused(e: BaseException) -> bool:
    """Whether a failed call was refused by the peer's host (a reset, not silence)."""
    details = e.details() if isinstance(e, grpc.aio.AioRpcError) else None
    return bool(details) and "Connection refused" in str(details)


@dataclasses.dataclass(frozen=True)
class IsolationConfig:
    timeout: float = 3.0
    """Seconds without an answer from any peer before the broker gives its journals up
    (``--broker.isolation-timeout``; 0 turns the watch off)."""
    interval: float = 1.0
    """Seconds between probe rounds."""
    probe_timeout: float = 1.0
    """How long one probe may take."""
    max_probes: int = 8
    """Peers probed per round, at most."""


class Isolation:
    """See the module docstring. Run :meth:`run` in a task."""

    def __init__(
        self,
        peers: Callable[[], Sequence[Peer]],
        probe: Callable[[str], Awaitable[None]],
        *,
        on_isolated: Callable[[str], Awaitable[None]],
        on_rejoined: Callable[[], Awaitable[None]],
        on_unreachable: Callable[[str], None] = lambda _endpoint: None,
        config: IsolationConfig = IsolationConfig(),
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.peers = peers
        self.probe = probe
        self.on_isolated = on_isolated
        self.on_rejoined = on_rejoined
        self.on_unreachable = on_unreachable
        self.config = config
        self.clock = clock
        self.rng = rng or random.Random()
        #: Whether the broker gave its journals up (and no peer answered since).
        self.isolated = False
        self._heard_at: float | None = None  # None: no peer answered yet.
        self._misses: dict[str, int] = {}

    async def run(self) -> None:
        cfg = self.config
        if cfg.timeout <= 0:
            return
        while True:
            started = self.clock()
            try:
                await self.round()
            except Exception:  # a bug here must not take the broker down with it
                log.exception("isolation watch round failed (will go on)")
            await asyncio.sleep(max(0.0, cfg.interval - (self.clock() - started)))

    async def round(self) -> None:
        """Probe some peers once, and act on what they (don't) say."""
        cfg = self.config
        peers = [p for p in self.peers() if p[1]]
        if len(peers) < 2:
            # Nobody to tell a cut from a dead peer by: start counting afresh later.
            self._heard_at = None
            return
        sample = self.rng.sample(peers, min(cfg.max_probes, len(peers)))
        answered = await asyncio.gather(*(self._probe(ep) for _, ep in sample))
        now = self.clock()
        if any(answered):
            self._heard_at = now
            if self.isolated:
                self.isolated = False
                log.warning("a peer answers again: taking journals again")
                await self.on_rejoined()
            return
        if self.isolated or self._heard_at is None or now - self._heard_at < cfg.timeout:
            return
        self.isolated = True
        names = ", ".join(name for name, _ in sample)
        why = (
            f"no other broker answered for {now - self._heard_at:.1f}s "
            f"(--broker.isolation-timeout {cfg.timeout:g}s; probed {names})"
        )
        log.warning("cut off from every peer: %s: giving this broker's journals up", why)
        await self.on_isolated(why)

    async def _probe(self, endpoint: str) -> bool:
        try:
            async with asyncio.timeout(self.config.probe_timeout):
                await self.probe(endpoint)
        except Exception as e:  # noqa: BLE001  # any failure is a miss; it is counted
            if refused(e):
                self._misses.pop(endpoint, None)
                return True
            misses = self._misses.get(endpoint, 0) + 1
            self._misses[endpoint] = misses
            if misses == 2:
                log.info("peer %s did not answer twice (%s): dropping its connection", endpoint, e)
                self.on_unreachable(endpoint)
            return False
        self._misses.pop(endpoint, None)
        return True
