"""Test seams of the operator: an in-memory :class:`~gazette.operator.reconcile.SpecStore`.

:class:`MemorySpecStore` keeps keys, values and revisions like etcd does and
applies changes with the same checked semantics as
:func:`gazette.keyspace.apply_changes` (all or nothing; a missing key has mod
revision 0), so the reconcile rules can be unit-tested without a server::

    store = testing.MemorySpecStore()
    outcome = await reconcile.reconcile(body, reconcile.JOURNALS, config, store)
    assert store.values["/gazette/cluster/items/a/journal"] == spec.SerializeToString()

``fail`` makes every call raise SpecStoreError (etcd is down).
"""

from __future__ import annotations

from collections.abc import Sequence

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.operator import errors, reconcile

__all__ = ["MemorySpecStore"]


class MemorySpecStore:
    """A dict standing in for etcd, with revisions."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.mod_revisions: dict[str, int] = {}
        self.revision = 1
        self.fail = False
        self.writes = 0

    def _check(self) -> None:
        if self.fail:
            raise errors.SpecStoreError("etcd is unavailable (MemorySpecStore.fail)")

    def put(self, key: str, value: bytes) -> int:
        """Write ``key`` out of band (as a person with etcdctl would); returns the revision."""
        self.revision += 1
        self.values[key] = value
        self.mod_revisions[key] = self.revision
        return self.revision

    async def get(self, root: str, name: str) -> reconcile.Stored | None:
        self._check()
        key = keyspace.item_key(root, name)
        if key not in self.values:
            return None
        return reconcile.Stored(self.values[key], self.mod_revisions[key])

    async def apply(self, root: str, changes: Sequence[keyspace.Change]) -> keyspace.ApplyResult:
        self._check()
        ok = all(
            c.expect_mod_revision == keyspace.ANY_REVISION
            or self.mod_revisions.get(keyspace.item_key(root, c.name), 0) == c.expect_mod_revision
            for c in changes
        )
        if ok and changes:
            self.revision += 1
            self.writes += 1
            for c in changes:
                key = keyspace.item_key(root, c.name)
                if c.value is None:
                    self.values.pop(key, None)
                    self.mod_revisions.pop(key, None)
                else:
                    self.values[key] = c.value
                    self.mod_revisions[key] = self.revision
        return keyspace.ApplyResult(
            succeeded=ok, revision=self.revision, etcd=pb.Header.Etcd(revision=self.revision)
        )
