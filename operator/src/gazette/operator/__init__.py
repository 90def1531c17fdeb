"""The Kubernetes operator: Journal and Shard objects in, Gazette specs in etcd out.

Users declare journals and shards as custom resources (``gazette.dev/v1alpha1``,
kinds ``Journal`` / ``gj`` and ``Shard`` / ``gs``, category ``gazette``) and the
operator makes the cluster's etcd follow them: it validates each object's spec
with the protocol's own validation and writes it under Gazette's key layout,
``<etcd prefix>/items/<journal>`` and ``<consumers prefix>/<app>/items/<shard>``,
with the same checked transaction the Apply RPCs use
(:func:`gazette.keyspace.apply_changes`). It works before any broker is up.

Modules:

* :mod:`.crd` — the CustomResourceDefinitions, the one source of ``crds/*.yaml``
  (``make crds``), and the label, annotation and finalizer names.
* :mod:`.mapping` — pure conversion between an object's ``spec`` and
  ``pb.JournalSpec`` / ``pc.ShardSpec``.
* :mod:`.reconcile` — the rules (validation, ownership of names, checked writes,
  deletion policy, pausing), as plain async functions over a :class:`SpecStore`.
* :mod:`.status` — the ``status``: the reconcile outcome (Ready on Journals, Applied on
  Shards, observedGeneration, modRevision) and a Shard's replicas (primary, standbys,
  route, replicas, and Ready: a primary serves it).
* :mod:`.assignments` — the shards' replicas as consumers report them in etcd, one
  watch per consumer application's prefix.
* :mod:`.handlers` — kopf handlers binding events, timers and indexes to the above.
* :mod:`.store` — the etcd SpecStore; :mod:`.testing` — an in-memory one for tests.
* :mod:`.config`, :mod:`.runner` — ``python -m gazette.operator`` and its flags.

Objects carry ``gazette.dev/cluster=<cluster>`` (Shards also
``gazette.dev/consumer=<app>``); ``gazette.dev/paused: "true"`` keeps the operator
from writing, ``gazette.dev/unmanaged: "true"`` makes it ignore the object;
``spec.deletionPolicy`` is ``Retain`` (default) or ``Delete``.

``kubectl get shards -l app=word-count`` shows each shard's primary, its status
reduced over its replicas, its standbys and whether it is Ready (served by a primary).

Usage::

    python -m gazette.operator --etcd.address http://etcd:2379 \\
        --etcd.prefix /gazette/cluster --cluster default --namespace gazette

or, reconciling one object by hand::

    from gazette.operator import reconcile, store

    outcome = await reconcile.reconcile(
        body, reconcile.JOURNALS, reconcile.ReconcileConfig(), store.EtcdSpecStore(client)
    )
    print(outcome.reason, outcome.message)
"""

from __future__ import annotations

from gazette.operator import (
    assignments,
    config,
    crd,
    errors,
    handlers,
    mapping,
    reconcile,
    status,
    store,
)
from gazette.operator.errors import InvalidSpecError, OperatorError, SpecStoreError
from gazette.operator.reconcile import (
    JOURNALS,
    SHARDS,
    Outcome,
    Reason,
    ReconcileConfig,
    SpecStore,
)

__all__ = [
    "JOURNALS",
    "SHARDS",
    "InvalidSpecError",
    "OperatorError",
    "Outcome",
    "Reason",
    "ReconcileConfig",
    "SpecStore",
    "SpecStoreError",
    "assignments",
    "config",
    "crd",
    "errors",
    "handlers",
    "mapping",
    "reconcile",
    "status",
    "store",
]
