"""The replicas of shards, as consumers report them in etcd: one watch per application.

A consumer application's assignments are under its etcd prefix (Gazette
``consumer/key_space.go``; :mod:`gazette.allocator.keys`)::

    <prefix>/assign/<shard id>#<zone>#<suffix>#<slot>    ReplicaStatus (empty: IDLE)

:class:`AssignmentViews` keeps a :class:`gazette.keyspace.KeySpace` of
``<prefix>/assign`` for each application whose Shards the operator serves — one
watch per prefix however many shards it holds — and answers a shard's replicas
from that mirror without any etcd call. A prefix is followed from the first time
someone asks for it (:meth:`AssignmentViews.replicas` returns None until its first
load), for as long as :meth:`AssignmentViews.run` runs (applications come and go
rarely: the watch of one whose Shards are all gone stays until the operator restarts).

Failures are survived as the KeySpace's own watch survives them, plus what it
leaves to its owner: a watch that loses etcd restarts with back-off inside
:meth:`KeySpace.watch`; a compacted resume revision
(:class:`~gazette.keyspace.errors.WatchCompactedError`), an inconsistent update or
any other etcd error reloads the prefix (back-off between failed loads), keeping
the last mirror meanwhile, so a Shard's status holds still while etcd is away.

Usage::

    views = assignments.AssignmentViews(client)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(views.run())
        replicas = views.replicas("/gazette/consumers/word-count", "word-count/part-000")
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

import aetcd
import aetcd.exceptions

from gazette import allocator, keyspace
from gazette.consumer import protocol as pc
from gazette.operator import status

__all__ = ["AssignmentDecoder", "AssignmentViews", "ViewConfig", "replicas_of"]

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class ViewConfig:
    """Tunables of the assignment watches.

    ``keyspace``: the KeySpace's (``watch_delay`` batches bursts of assignment
    changes, as a consumer's own mirror does). ``reload_backoff``: seconds before the
    n-th consecutive reload after a failure (the last entry repeats).
    """

    keyspace: keyspace.KeySpaceConfig = dataclasses.field(
        default_factory=lambda: keyspace.KeySpaceConfig(watch_delay=0.1)
    )
    reload_backoff: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 5.0)


class AssignmentDecoder:
    """An allocator Decoder of assignments only: the value is a validated ReplicaStatus.

    Items and members are not under ``<prefix>/assign``; met there (a key the watched
    range holds by accident), they are refused, and the KeySpace skips them.
    """

    def decode_item(self, item_id: str, value: bytes) -> allocator.ItemValue:
        raise allocator.errors.DecodeError(item_id, "not an assignment")

    def decode_member(self, zone: str, suffix: str, value: bytes) -> allocator.MemberValue:
        raise allocator.errors.DecodeError(f"{zone}#{suffix}", "not an assignment")

    def decode_assignment(
        self, item_id: str, zone: str, suffix: str, slot: int, value: bytes
    ) -> pc.ReplicaStatus:
        replica = pc.ReplicaStatus.FromString(value)
        pc.validate(replica)
        return replica


def replicas_of(kvs: Sequence[keyspace.KeyValue]) -> list[status.Replica]:
    """The replicas of decoded assignment KeyValues."""
    out = []
    for kv in kvs:
        a = kv.decoded
        if not isinstance(a, allocator.Assignment):
            continue
        value = a.value if isinstance(a.value, pc.ReplicaStatus) else pc.ReplicaStatus()
        out.append(
            status.Replica(
                a.member_zone, a.member_suffix, a.slot, int(value.code), tuple(value.errors)
            )
        )
    return out


class _View:
    """The mirror of one application's assignments."""

    def __init__(self, prefix: str, config: ViewConfig) -> None:
        self.prefix = prefix
        decode = allocator.key_value_decoder(prefix, AssignmentDecoder())
        self.ks = keyspace.KeySpace(prefix + "/assign", decode, config.keyspace)
        self.loaded = False


class AssignmentViews:
    """Mirrors of the assignments of every application asked about, one watch each."""

    def __init__(
        self,
        client: aetcd.Client,
        config: ViewConfig | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._client = client
        self._config = config or ViewConfig()
        self._sleep = sleep
        self._views: dict[str, _View] = {}
        self._requests: asyncio.Queue[_View] = asyncio.Queue()

    def replicas(self, prefix: str, shard_id: str) -> list[status.Replica] | None:
        """The replicas of shard ``shard_id`` of the application at ``prefix``.

        None until the prefix's assignments were loaded once (the first call starts
        following it). Never blocks: the answer is the mirror's.
        """
        view = self._views.get(prefix)
        if view is None:
            view = self._views[prefix] = _View(prefix, self._config)
            self._requests.put_nowait(view)
        if not view.loaded:
            return None
        try:
            start = allocator.item_assignments_prefix(prefix, shard_id)
        except ValueError:
            return []  # An id no shard can have (its object is InvalidSpec): no replicas.
        return replicas_of(view.ks.prefixed(start))

    async def run(self) -> None:
        """Follow every prefix asked about, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            while True:
                view = await self._requests.get()
                logger.info("following the assignments of %s", view.prefix)
                tg.create_task(self._follow(view), name=f"assignments:{view.prefix}")

    async def _follow(self, view: _View) -> None:
        failures = 0
        while True:
            try:
                await view.ks.load(self._client)
                view.loaded = True
                failures = 0
                await view.ks.watch(self._client)
            except keyspace.errors.WatchCompactedError as e:
                # Our resume revision is gone: read the prefix afresh (Gazette's consumers
                # would exit; the operator has nothing to lose by reloading).
                logger.warning("assignments of %s: %s; reloading", view.prefix, e)
            except (keyspace.errors.KeySpaceError, aetcd.exceptions.ClientError) as e:
                delay = self._config.reload_backoff[
                    min(failures, len(self._config.reload_backoff) - 1)
                ]
                failures += 1
                logger.warning(
                    "assignments of %s: %s (reloading in %.1fs; attempt %d)",
                    view.prefix,
                    e,
                    delay,
                    failures,
                )
                await self._sleep(delay)
