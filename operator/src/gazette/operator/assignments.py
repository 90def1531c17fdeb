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

Failures are survived as :class:`gazette.operator.mirrors.Mirrors` survives them
(the last mirror is kept meanwhile), so a Shard's status holds still while etcd is
away. Listeners of the mirrors hear which assignment keys changed;
:func:`shard_of_assignment` tells whose they are.

Usage::

    views = assignments.AssignmentViews(client)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(views.run())
        replicas = views.replicas("/gazette/consumers/word-count", "word-count/part-000")
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import aetcd
import aetcd.exceptions

from gazette import allocator, keyspace
from gazette.consumer import protocol as pc
from gazette.operator import mirrors as mirrors_
from gazette.operator import status
from gazette.operator.mirrors import ViewConfig

__all__ = [
    "AssignmentDecoder",
    "AssignmentViews",
    "ViewConfig",
    "replicas_of",
    "shard_of_assignment",
]

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

# Gazette's layout of an allocator keyspace (gazette.allocator.keys).
_ASSIGN = "/assign/"
_SEP = "#"


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


def _assign_root(prefix: str) -> str:
    return prefix + _ASSIGN.rstrip("/")


def shard_of_assignment(prefix: str, key: str) -> str | None:
    """The shard id of assignment key ``key`` of the application at ``prefix``, if it is one."""
    start = prefix + _ASSIGN
    if not key.startswith(start):
        return None
    shard_id, sep, _ = key[len(start) :].rpartition(_SEP)  # ...#zone#suffix#slot
    for _ in range(2):
        shard_id, sep, _ = shard_id.rpartition(_SEP)
    return shard_id if sep and shard_id else None


class AssignmentViews:
    """Mirrors of the assignments of every application asked about, one watch each.

    Built on :class:`gazette.operator.mirrors.Mirrors` (its own, or ``mirrors`` shared
    with the operator's other watches; then whoever owns it runs it).
    """

    def __init__(
        self,
        client: aetcd.Client,
        config: ViewConfig | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        mirrors: mirrors_.Mirrors | None = None,
    ) -> None:
        self.mirrors = mirrors or mirrors_.Mirrors(client, config, sleep=sleep)

    def follow(self, prefix: str) -> mirrors_.Mirror:
        """The assignments mirror of the application at ``prefix``, followed from now on."""
        return self.mirrors.follow(
            _assign_root(prefix), allocator.key_value_decoder(prefix, AssignmentDecoder())
        )

    @staticmethod
    def prefix_of(root: str) -> str | None:
        """The application prefix whose assignments mirror has root ``root``, if it is one."""
        suffix = _ASSIGN.rstrip("/")
        return root[: -len(suffix)] if root.endswith(suffix) else None

    def replicas(self, prefix: str, shard_id: str) -> list[status.Replica] | None:
        """The replicas of shard ``shard_id`` of the application at ``prefix``.

        None until the prefix's assignments were loaded once (the first call starts
        following it). Never blocks: the answer is the mirror's.
        """
        view = self.follow(prefix)
        if not view.loaded:
            return None
        try:
            start = allocator.item_assignments_prefix(prefix, shard_id)
        except ValueError:
            return []  # An id no shard can have (its object is InvalidSpec): no replicas.
        return replicas_of(view.prefixed(start))

    async def run(self) -> None:
        """Follow every prefix asked about, until cancelled."""
        await self.mirrors.run()
