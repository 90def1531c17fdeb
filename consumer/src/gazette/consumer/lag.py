"""How far a shard is behind its sources: its primary's read-through offsets against write heads.

One implementation for every tool that shows lag: ``gazctl shards list --lag`` (its Lag
column, YAML comments and ``-o json`` member) and the operator, which writes it into
each Shard object's ``status`` (``kubectl get shards`` prints it). Gazette computes it
in ``cmd/gazctl/gazctlcmd/shards_list.go``: a shard's primary answers ``Stat`` with the
offset it has read (and committed) through in each journal, and each journal's write
head is read with a metadata-only read at offset -1.

- :class:`ShardLag` — one shard's answer: per source (:class:`SourceLag`) its
  read-through offset, its write head (or why that is unknown) and their difference;
  or why the shard as a whole could not be asked (:attr:`ShardLag.error`, e.g.
  ``NO_SHARD_PRIMARY``). :attr:`ShardLag.total` is None unless every part is known:
  a partial sum is never passed off as the lag.
- :class:`WriteHeads` — write heads read once per journal however many shards read
  it (one round of checks shares one), with ``gazette.broker.client.write_head``.
- :func:`shard_lag` — a shard's lag from a ``stat`` call and its sources; ``stat``
  raises :class:`LagUnknown` with the reason when the shard can't say.

The Stat call is the caller's: gazctl asks any consumer process (which forwards it to
the primary), the operator asks the primary whose endpoint etcd holds.

Usage::

    async with client.JournalClient(config) as jc:
        heads = lag.WriteHeads(jc)
        found = await lag.shard_lag(lambda: stat(shard_id), ["examples/words/part-000"], heads)
        found.total  # bytes unread, or None (found.error says why)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping

from gazette.broker import client
from gazette.consumer import protocol as pc

__all__ = [
    "STAT_TIMEOUT",
    "LagUnknown",
    "ShardLag",
    "SourceLag",
    "WriteHeads",
    "shard_lag",
    "source_journals",
]

#: Seconds one shard's Stat may take (a primary still recovering its store answers late).
STAT_TIMEOUT = 10.0


class LagUnknown(Exception):
    """A shard's lag can't be known; ``reason`` is short (a Status or gRPC code name)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class SourceLag:
    """One source journal of a shard: read through, and the write head or why it is unknown."""

    journal: str
    read_through: int
    write_head: int | None
    error: str = ""

    @property
    def lag(self) -> int | None:
        """Bytes written but not yet read (None when the head is unknown)."""
        if self.write_head is None:
            return None
        # A head read before the Stat answered can trail what the shard has read since.
        return max(0, self.write_head - self.read_through)


@dataclasses.dataclass(frozen=True, slots=True)
class ShardLag:
    """Where a shard's primary has read through each source, or why it could not be asked."""

    sources: tuple[SourceLag, ...] = ()
    error: str = ""

    @property
    def total(self) -> int | None:
        """Bytes unread over every source; None if the shard or any head is unknown."""
        if self.error:
            return None
        lags = [s.lag for s in self.sources]
        if any(x is None for x in lags):
            return None
        return sum(x for x in lags if x is not None)

    def column(self) -> str:
        """Gazette's table form: ``journal:bytes unread, ...``."""
        if self.error:
            return f"<{self.error}>"
        return ", ".join(
            f"{s.journal}:{s.lag}" if s.lag is not None else f"{s.journal}:<{s.error}>"
            for s in self.sources
        )

    def as_json(self) -> dict[str, object]:
        """Offsets as numbers: ``{"sources": [...], "total": n}``, or ``{"error": why}``."""
        if self.error:
            return {"error": self.error}
        sources: list[dict[str, object]] = []
        total = 0
        for s in self.sources:
            if s.lag is not None:
                total += s.lag
                sources.append(
                    {
                        "journal": s.journal,
                        "read_through": s.read_through,
                        "write_head": s.write_head,
                        "lag": s.lag,
                    }
                )
            else:
                sources.append(
                    {"journal": s.journal, "read_through": s.read_through, "error": s.error}
                )
        return {"sources": sources, "total": total}

    def comment(self) -> str:
        """One line per shard, as ``gazctl shards list -o yaml --lag`` comments it."""
        if self.error:
            return f"lag unknown: {self.error}"
        return "; ".join(
            f"{s.journal} read through {s.read_through}, "
            + (f"lag {s.lag} bytes" if s.lag is not None else f"head unknown: {s.error}")
            for s in self.sources
        )


class WriteHeads:
    """Write heads of journals, each read once (concurrent askers share the read)."""

    def __init__(self, jc: client.JournalClient, *, timeout: float = STAT_TIMEOUT) -> None:
        self._jc = jc
        self._timeout = timeout
        self._reads: dict[str, asyncio.Future[int]] = {}

    async def get(self, journal: str) -> int:
        """The write head of ``journal``; raises LagUnknown with a one-line reason."""
        read = self._reads.get(journal)
        if read is None:
            read = self._reads[journal] = asyncio.ensure_future(self._read(journal))
        try:
            return await asyncio.shield(read)
        except client.errors.ClientError as e:
            raise LagUnknown(str(e).splitlines()[0][:80]) from e
        except TimeoutError as e:
            raise LagUnknown(f"no write head in {self._timeout:g}s") from e

    async def _read(self, journal: str) -> int:
        async with asyncio.timeout(self._timeout):
            return await client.write_head(self._jc, journal)

    async def close(self) -> None:
        """Cancel reads nobody waits for any more."""
        for read in self._reads.values():
            read.cancel()
        await asyncio.gather(*self._reads.values(), return_exceptions=True)


def source_journals(spec: pc.ShardSpec) -> list[str]:
    """The journals a shard reads, sorted, each once."""
    return sorted({src.journal for src in spec.sources})


async def shard_lag(
    stat: Callable[[], Awaitable[pc.StatResponse]],
    journals: Iterable[str],
    heads: WriteHeads,
    *,
    stat_timeout: float = STAT_TIMEOUT,
) -> ShardLag:
    """The lag of a shard reading ``journals``, whose primary ``stat`` asks.

    ``stat`` raises :class:`LagUnknown` when the shard can't answer (no primary, a
    failed RPC); it gets ``timeout`` seconds. The write heads are read after the Stat
    answered, so a lag is never below what it was when the Stat was taken.
    """
    try:
        async with asyncio.timeout(stat_timeout):
            resp = await stat()
    except LagUnknown as e:
        return ShardLag(error=e.reason)
    except TimeoutError:
        return ShardLag(error=f"no answer in {stat_timeout:g}s")
    read: Mapping[str, int] = resp.read_through
    names = sorted(set(journals))

    async def one(journal: str) -> SourceLag:
        at = int(read.get(journal, 0))
        try:
            return SourceLag(journal, at, await heads.get(journal))
        except LagUnknown as e:
            return SourceLag(journal, at, None, e.reason)

    return ShardLag(tuple(await asyncio.gather(*(one(j) for j in names))))
