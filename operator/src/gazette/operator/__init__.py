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
* :mod:`.mapping` — pure conversion between an object's ``spec`` and labels and
  ``pb.JournalSpec`` / ``pc.ShardSpec``.
* :mod:`.reconcile` — the rules (validation, ownership of names, checked writes,
  deletion policy, pausing), as plain async functions over a :class:`SpecStore`.
* :mod:`.status` — the ``status``: the reconcile outcome (Ready on Journals, Applied on
  Shards, observedGeneration, modRevision) and a Shard's replicas (primary, standbys,
  route, replicas, and Ready: a primary serves it).
* :mod:`.lag` — each Shard's lag, asked of its primary (endpoints from etcd) in rounds
  of the controller, as ``gazctl shards list --lag`` computes it
  (:mod:`gazette.consumer.lag`).
* :mod:`.events` — which outcomes are posted as Kubernetes Events (Warning on
  InvalidSpec, ResourceConflict, EtcdError, NoCluster; Normal on Applied).
* :mod:`.mirrors` — etcd prefixes mirrored with one watch each, telling which keys
  changed; :mod:`.assignments` — the shards' replicas, one watch per consumer
  application's prefix.
* :mod:`.controller` — what the watches call for: specs edited out of band in etcd put
  back, names taken over when their owner goes, Shard status; and the rounds of lag
  checks; no per-object timers.
* :mod:`.kube` — the operator's own status patches, Events and Lease, outside kopf's
  handlers.
* :mod:`.handlers` — kopf handlers binding events and indexes to the above.
* :mod:`.leader` — leader election over a ``coordination.k8s.io`` Lease: replicas stand
  by, one writes.
* :mod:`.health` — ``/readyz`` (the API server and etcd answer), ``/healthz`` (nothing
  is stuck) and ``/metrics`` (:mod:`.metrics`).
* :mod:`.store` — the etcd SpecStore; :mod:`.testing` — in-memory etcd and API server
  stand-ins for tests.
* :mod:`.teardown` — on the way out, the objects of served namespaces being deleted:
  their Delete specs removed and the finalizer taken off, so the deletion finishes.
* :mod:`.config`, :mod:`.runner` — ``python -m gazette.operator`` and its flags.

Objects carry ``gazette.dev/cluster=<cluster>`` (Shards also
``gazette.dev/consumer=<app>``); one without it gets the condition ``NoCluster``.
``gazette.dev/paused: "true"`` keeps the operator from writing,
``gazette.dev/unmanaged: "true"`` makes it ignore the object; ``spec.deletionPolicy``
is ``Retain`` (default: no finalizer, so deletions never wait for the operator) or
``Delete`` (a finalizer holds the object until its spec left etcd). Namespaces are
deleted pods first: a stopping operator whose served namespace is being deleted does
that deletion before it exits (:mod:`.teardown`), so the namespace does not hang on
its finalizers.

An object that comes to name another etcd key moves its spec: relabelling a Shard's
``gazette.dev/consumer``, or changing the operator's ``--etcd.prefix`` or
``--consumers.prefix``, writes the new key and then removes the one ``status.etcdKey``
recorded (a ``Moved`` Event says so), unless it changed in etcd since the operator
wrote it or another object declares it (``KeyLeftBehind`` when it is left with nothing
declaring it). Relabelling ``gazette.dev/cluster`` to another cluster hands the object
over: that cluster's operator writes its spec into its etcd, and this one removes it
from its own. Removing the label, or ``gazette.dev/unmanaged``, detaches the object and
leaves etcd as it is. ``deletionPolicy`` is about deleting the object; a move is not
a deletion.

Replicas elect a leader with the Lease ``gazette-operator-<cluster>`` (in
``$POD_NAMESPACE``); only the leader writes to etcd and to the API server, the others
stand by and take over when it stops (at once when it stops gracefully and releases
the Lease, within the lease duration when it dies). RBAC for it: ``get``, ``create``
and ``update`` on ``leases.coordination.k8s.io`` in that namespace.

An object's ``metadata.labels`` outside the domains Kubernetes and the operator
reserve are its Gazette labels, so ``kubectl get journals -l topic=logs`` lists what
``gazctl journals list -l topic=logs`` lists; ``spec.labels`` adds what Kubernetes
labels cannot say (several values of a name, values such as
``application/x-ndjson``). ``kubectl get journals --field-selector
spec.name=examples/logs/web`` finds a journal by name.

``kubectl get shards -l app=word-count`` shows each shard's primary, its status
reduced over its replicas, its standbys, whether it is Ready (served by a primary) and
its LAG: the bytes of its sources its primary has not read through, asked every
``--shard-lag-interval`` seconds (:mod:`.lag`; empty, ``status.lagUnknown`` saying why,
when it can't be known).

Usage::

    python -m gazette.operator --etcd.address http://etcd:2379 \\
        --etcd.prefix /gazette/cluster --cluster default --namespace gazette \\
        --health.address :8080   # readinessProbe /readyz, livenessProbe /healthz, /metrics

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
    controller,
    crd,
    errors,
    events,
    handlers,
    health,
    kube,
    lag,
    leader,
    mapping,
    metrics,
    mirrors,
    reconcile,
    status,
    store,
    teardown,
)
from gazette.operator.errors import (
    InvalidSpecError,
    KubeAPIError,
    OperatorError,
    SpecStoreError,
)
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
    "KubeAPIError",
    "OperatorError",
    "Outcome",
    "Reason",
    "ReconcileConfig",
    "SpecStore",
    "SpecStoreError",
    "assignments",
    "config",
    "controller",
    "crd",
    "errors",
    "events",
    "handlers",
    "health",
    "kube",
    "lag",
    "leader",
    "mapping",
    "metrics",
    "mirrors",
    "reconcile",
    "status",
    "store",
    "teardown",
]
