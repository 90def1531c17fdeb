"""Mirrors of etcd prefixes, one watch each, telling which keys changed.

The operator follows a handful of prefixes, whatever the number of objects:
``<broker root>/items`` (every JournalSpec), and for each consumer application
``<app prefix>/items`` (its ShardSpecs) and ``<app prefix>/assign`` (its shards'
replicas). Each is a :class:`gazette.keyspace.KeySpace`, loaded once and then
kept current by one watch; :class:`Mirrors` starts following a prefix the first
time it is asked for (:meth:`Mirrors.follow`) and keeps doing so while
:meth:`Mirrors.run` runs.

After every update, listeners (:meth:`Mirrors.listen`) hear which keys of which
prefix changed: the keys of the applied watch events, or after a (re)load the
difference with the previous mirror. That is how the operator notices a spec
edited or deleted behind its back, or a replica changing status, without a
timer or an etcd read per object.

Failures are survived as the KeySpace's own watch survives them, plus what it
leaves to its owner: a watch that loses etcd restarts with back-off inside
:meth:`KeySpace.watch`; a compacted resume revision
(:class:`~gazette.keyspace.errors.WatchCompactedError`), an inconsistent update or
any other etcd error reloads the prefix (back-off between failed loads), keeping
the last mirror meanwhile.

Usage::

    mirrors = mirrors.Mirrors(client)
    mirrors.listen(lambda prefix, keys, loaded: print(prefix, keys))
    mirrors.follow("/gazette/cluster/items", decoder)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(mirrors.run())
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

import aetcd
import aetcd.exceptions

from gazette import keyspace
from gazette.broker import protocol as pb

__all__ = ["Listener", "Mirror", "Mirrors", "ViewConfig", "changed_keys"]

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
Listener = Callable[[str, Sequence[str], bool], None]
"""``(prefix, changed keys, loaded)``; ``loaded`` is true after a (re)load of the prefix."""


@dataclasses.dataclass(frozen=True, slots=True)
class ViewConfig:
    """Tunables of the watches.

    ``keyspace``: the KeySpaces' (``watch_delay`` batches bursts of changes, as a
    consumer's own mirror does). ``reload_backoff``: seconds before the n-th
    consecutive reload after a failure (the last entry repeats).
    """

    keyspace: keyspace.KeySpaceConfig = dataclasses.field(
        default_factory=lambda: keyspace.KeySpaceConfig(watch_delay=0.1)
    )
    reload_backoff: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 5.0)


def changed_keys(old: Sequence[keyspace.KeyValue], new: Sequence[keyspace.KeyValue]) -> list[str]:
    """Keys present in only one of two sorted mirrors, or at another mod revision."""
    out: list[str] = []
    i = j = 0
    while i < len(old) or j < len(new):
        if j >= len(new) or (i < len(old) and old[i].key < new[j].key):
            out.append(old[i].key)
            i += 1
        elif i >= len(old) or new[j].key < old[i].key:
            out.append(new[j].key)
            j += 1
        else:
            if old[i].mod_revision != new[j].mod_revision:
                out.append(new[j].key)
            i += 1
            j += 1
    return out


class Mirror(keyspace.KeySpace):
    """A KeySpace that tells its listener which keys each update changed."""

    def __init__(
        self,
        root: str,
        decoder: keyspace.Decoder,
        config: keyspace.KeySpaceConfig,
        notify: Callable[[Mirror, Sequence[str], bool], None],
    ) -> None:
        super().__init__(root, decoder, config)
        self._notify = notify
        self.loaded = False

    def load_snapshot(self, header: pb.Header.Etcd, raw: Sequence[keyspace.KeyValue]) -> None:
        old = self.key_values
        super().load_snapshot(header, raw)
        self.loaded = True
        self._notify(self, changed_keys(old, self.key_values), True)

    def apply(self, *responses: keyspace.WatchResponse) -> None:
        super().apply(*responses)
        keys = sorted({e.kv.key for r in responses for e in r.events})
        if keys:
            self._notify(self, keys, False)


class Mirrors:
    """Mirrors of every prefix asked for, one watch each, and who listens to their changes."""

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
        self._mirrors: dict[str, Mirror] = {}
        self._requests: asyncio.Queue[Mirror] = asyncio.Queue()
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        """Call ``listener(prefix, keys, loaded)`` after each update of any mirror.

        Listeners run synchronously in the watch's task: they must not block.
        """
        self._listeners.append(listener)

    def follow(self, prefix: str, decoder: keyspace.Decoder) -> Mirror:
        """The mirror of ``prefix``, followed from now on (``decoder`` applies the first time)."""
        mirror = self._mirrors.get(prefix)
        if mirror is None:
            mirror = self._mirrors[prefix] = Mirror(
                prefix, decoder, self._config.keyspace, self._notify
            )
            self._requests.put_nowait(mirror)
        return mirror

    def get(self, prefix: str) -> Mirror | None:
        """The mirror of ``prefix`` if it is followed (loaded or not)."""
        return self._mirrors.get(prefix)

    def _notify(self, mirror: Mirror, keys: Sequence[str], loaded: bool) -> None:
        for listener in self._listeners:
            listener(mirror.root, keys, loaded)

    async def run(self) -> None:
        """Follow every prefix asked for, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            while True:
                mirror = await self._requests.get()
                logger.info("following %s", mirror.root)
                tg.create_task(self._follow(mirror), name=f"mirror:{mirror.root}")

    async def _follow(self, mirror: Mirror) -> None:
        failures = 0
        while True:
            try:
                await mirror.load(self._client)
                failures = 0
                await mirror.watch(self._client)
            except keyspace.errors.WatchCompactedError as e:
                # Our resume revision is gone: read the prefix afresh (Gazette's consumers
                # would exit; the operator has nothing to lose by reloading).
                logger.warning("%s: %s; reloading", mirror.root, e)
            except (keyspace.errors.KeySpaceError, aetcd.exceptions.ClientError) as e:
                delay = self._config.reload_backoff[
                    min(failures, len(self._config.reload_backoff) - 1)
                ]
                failures += 1
                logger.warning(
                    "%s: %s (reloading in %.1fs; attempt %d)", mirror.root, e, delay, failures
                )
                await self._sleep(delay)
