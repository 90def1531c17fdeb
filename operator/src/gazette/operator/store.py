"""The etcd :class:`~gazette.operator.reconcile.SpecStore`: reads with the client, writes
with :func:`gazette.keyspace.apply_changes`, the checked transaction of the Apply RPCs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aetcd
import aetcd.exceptions

from gazette import keyspace
from gazette.operator import errors, reconcile

__all__ = ["EtcdSpecStore"]


class EtcdSpecStore:
    """Specs in a real etcd, through a connected ``aetcd.Client``.

    ``timeout`` bounds each call, so a hung etcd turns into an ``EtcdError``
    status and a retry rather than a stuck handler.
    """

    def __init__(self, client: aetcd.Client, *, timeout: float = 10.0) -> None:
        self._client = client
        self._timeout = timeout

    async def get(self, root: str, name: str) -> reconcile.Stored | None:
        key = keyspace.item_key(root, name)
        try:
            async with asyncio.timeout(self._timeout):
                kv = await self._client.get(key.encode())
        except (aetcd.exceptions.ClientError, TimeoutError) as e:
            raise errors.SpecStoreError(f"reading {key}: {e or type(e).__name__}") from e
        if kv is None:
            return None
        return reconcile.Stored(bytes(kv.value), int(kv.mod_revision))

    async def apply(self, root: str, changes: Sequence[keyspace.Change]) -> keyspace.ApplyResult:
        try:
            async with asyncio.timeout(self._timeout):
                return await keyspace.apply_changes(self._client, root, changes)
        except (keyspace.errors.EtcdError, TimeoutError) as e:
            raise errors.SpecStoreError(f"writing under {root}: {e or type(e).__name__}") from e

    async def check(self, root: str) -> None:
        """A quorum read under ``root`` (the readiness probe): raises SpecStoreError unless
        etcd answers."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.get(root.encode())
        except (aetcd.exceptions.ClientError, TimeoutError) as e:
            raise errors.SpecStoreError(f"etcd: {e or type(e).__name__}") from e
