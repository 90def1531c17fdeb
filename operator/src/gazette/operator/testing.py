"""Test seams of the operator: in-memory stand-ins for etcd and the API server.

:class:`MemorySpecStore` keeps keys, values and revisions like etcd does and
applies changes with the same checked semantics as
:func:`gazette.keyspace.apply_changes` (all or nothing; a missing key has mod
revision 0), so the reconcile rules can be unit-tested without a server::

    store = testing.MemorySpecStore()
    outcome = await reconcile.reconcile(body, reconcile.JOURNALS, config, store)
    assert store.values["/gazette/cluster/items/a/journal"] == spec.SerializeToString()

``fail`` makes every call raise SpecStoreError (etcd is down).

:class:`MemoryKube` is a :class:`~gazette.operator.kube.KubeAPI` that records status
patches and Events, and answers a patch from a stale resourceVersion with a conflict
like the API server does; as a :class:`~gazette.operator.kube.LeaseAPI` it keeps
Leases the same way (``fail`` makes its calls raise KubeAPIError), and as a
:class:`~gazette.operator.kube.NamespaceAPI` it lists its objects by kind, answers for
the Namespaces in ``namespaces`` and takes finalizers off::

    api = testing.MemoryKube()
    api.objects[("ns", "name")] = body
    ...
    assert api.events[0].reason == "Restored"
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.operator import crd, errors, events, kube, reconcile

__all__ = ["MemoryKube", "MemorySpecStore"]


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


class MemoryKube:
    """Objects by (namespace, name), with resourceVersions; status patches and Events recorded.

    A patch carrying a resourceVersion other than the object's gets CONFLICT; one of an
    unknown object GONE. ``fail`` makes every patch raise KubeAPIError.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []
        self.events: list[events.Event] = []
        self.event_objects: list[str] = []
        self.fail = False
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self._version = 100

    def add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``body`` with a new resourceVersion; return the stored copy."""
        self._version += 1
        stored = copy.deepcopy(dict(body))
        stored["metadata"]["resourceVersion"] = str(self._version)
        meta = stored["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = stored
        return stored

    async def patch_status(
        self,
        kind: crd.Kind,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> kube.PatchResult:
        if self.fail:
            raise errors.KubeAPIError("the API server is unavailable (MemoryKube.fail)")
        stored = self.objects.get((namespace, name))
        if stored is None:
            return kube.PatchResult.GONE
        if resource_version and stored["metadata"].get("resourceVersion") != resource_version:
            return kube.PatchResult.CONFLICT
        self.patches.append((kind.kind, namespace, name, copy.deepcopy(dict(status))))
        merged = {**stored, "status": {**stored.get("status", {}), **copy.deepcopy(dict(status))}}
        self.add(merged)
        return kube.PatchResult.OK

    async def post_event(self, body: Mapping[str, Any], event: events.Event) -> None:
        self.events.append(event)
        self.event_objects.append(str((body.get("metadata") or {}).get("name")))

    # --- Namespaces and finalizers -------------------------------------------------

    async def get_namespace(self, name: str) -> dict[str, Any] | None:
        if self.fail:
            raise errors.KubeAPIError("the API server is unavailable (MemoryKube.fail)")
        found = self.namespaces.get(name)
        return copy.deepcopy(found) if found is not None else None

    async def list_objects(self, kind: crd.Kind, namespace: str | None) -> list[dict[str, Any]]:
        if self.fail:
            raise errors.KubeAPIError("the API server is unavailable (MemoryKube.fail)")
        return [
            copy.deepcopy(o)
            for (ns, _), o in sorted(self.objects.items())
            if o.get("kind", kind.kind) == kind.kind and namespace in (None, ns)
        ]

    async def remove_finalizer(
        self, kind: crd.Kind, body: Mapping[str, Any], finalizer: str
    ) -> kube.PatchResult:
        if self.fail:
            raise errors.KubeAPIError("the API server is unavailable (MemoryKube.fail)")
        meta = body.get("metadata") or {}
        stored = self.objects.get((str(meta.get("namespace")), str(meta.get("name"))))
        if stored is None:
            return kube.PatchResult.GONE
        if stored["metadata"].get("resourceVersion") != meta.get("resourceVersion"):
            return kube.PatchResult.CONFLICT
        changed = copy.deepcopy(stored)
        rest = [f for f in changed["metadata"].get("finalizers") or [] if f != finalizer]
        changed["metadata"]["finalizers"] = rest
        self.add(changed)
        return kube.PatchResult.OK

    # --- Leases -----------------------------------------------------------------

    def _lease_check(self) -> None:
        if self.fail:
            raise errors.KubeAPIError("the API server is unavailable (MemoryKube.fail)")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._lease_check()
        got = self.leases.get((namespace, name))
        return copy.deepcopy(got) if got is not None else None

    async def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any] | None:
        self._lease_check()
        name = lease["metadata"]["name"]
        if (namespace, name) in self.leases:
            return None
        self._version += 1
        stored = copy.deepcopy(dict(lease))
        stored["metadata"] = {**stored["metadata"], "resourceVersion": str(self._version)}
        self.leases[(namespace, name)] = stored
        return copy.deepcopy(stored)

    async def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        self._lease_check()
        stored = self.leases.get((namespace, name))
        version = (lease.get("metadata") or {}).get("resourceVersion")
        if stored is None or stored["metadata"]["resourceVersion"] != version:
            return None
        self._version += 1
        new = copy.deepcopy(dict(lease))
        new["metadata"] = {**new["metadata"], "resourceVersion": str(self._version)}
        self.leases[(namespace, name)] = new
        return copy.deepcopy(new)
