"""Prometheus metrics of the operator, served at ``/metrics`` (:mod:`gazette.operator.health`).

Gazette has no operator, so the names are ours, prefixed ``gazette_operator_``
(prometheus_client adds ``_total`` to counters):

* ``reconciles_total{kind, reason}``: reconciles by outcome (the reason of the
  reconcile condition: Applied, InvalidSpec, ResourceConflict, EtcdError, Paused),
  whether kopf's handlers or the controller's etcd watches called for them;
  ``reconcile_seconds{kind}``: how long each took (etcd reads and writes).
* ``errors_total{kind, source}``: failures, ``source`` ``etcd`` (a reconcile, move or
  delete etcd failed) or ``kube`` (a status patch the API server failed or refused).
* ``reconcile_lag_seconds{kind}``: from an object's last change in the API server
  (the latest time in its ``managedFields`` outside the status) to its new generation
  being Applied in etcd: what a user waits for after ``kubectl apply``. Second
  precision, as the API server records times.
* ``etcd_writes_total{kind, op}``: specs put or deleted in etcd.
* ``leader`` (1 while this replica holds the Lease and serves) and
  ``leader_acquired_total``; ``check_ok{check}`` (1 when the readiness check
  ``kube`` or ``etcd`` last passed).
* ``objects{kind, condition, status, reason}`` and ``pending{queue}``: computed when
  scraped from the controller's view of the objects it serves
  (:class:`ControllerCollector`), so nothing is counted twice or forgotten.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import prometheus_client as prom
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gazette.operator import reconcile

__all__ = [
    "ControllerCollector",
    "change_time",
    "check_ok",
    "errors",
    "etcd_writes",
    "leader",
    "leader_transitions",
    "observe",
    "reconcile_lag_seconds",
    "reconcile_seconds",
    "reconciles",
]

reconciles = prom.Counter(
    "gazette_operator_reconciles",
    "Reconciles of Journal and Shard objects, by kind and outcome.",
    ["kind", "reason"],
)
reconcile_seconds = prom.Histogram(
    "gazette_operator_reconcile_seconds",
    "Duration of one reconcile (its etcd reads and writes).",
    ["kind"],
)
errors = prom.Counter(
    "gazette_operator_errors",
    "Failures of the operator's writes, by where they failed (etcd, kube).",
    ["kind", "source"],
)
reconcile_lag_seconds = prom.Histogram(
    "gazette_operator_reconcile_lag_seconds",
    "Seconds from an object's last change in the API server to its spec applied in etcd.",
    ["kind"],
    buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
etcd_writes = prom.Counter(
    "gazette_operator_etcd_writes",
    "Specs the operator put into or deleted from etcd.",
    ["kind", "op"],
)
leader = prom.Gauge(
    "gazette_operator_leader",
    "1 while this replica holds the leader Lease and serves, else 0.",
)
leader_transitions = prom.Counter(
    "gazette_operator_leader_acquired",
    "Times this replica acquired the leader Lease.",
)
check_ok = prom.Gauge(
    "gazette_operator_check_ok",
    "1 when the readiness check (kube: the API server accepts our credentials; etcd: "
    "a quorum read answers) last passed, else 0.",
    ["check"],
)


def _parse(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def change_time(body: Mapping[str, Any]) -> datetime.datetime | None:
    """When the object was last changed outside its status, as the API server recorded it."""
    meta = body.get("metadata") or {}
    times = [
        t
        for entry in meta.get("managedFields") or ()
        if isinstance(entry, Mapping) and entry.get("subresource") != "status"
        for t in (_parse(entry.get("time")),)
        if t is not None
    ]
    if times:
        return max(times)
    return _parse(meta.get("creationTimestamp"))


def observe(
    kind: reconcile.SpecKind,
    body: Mapping[str, Any],
    outcome: reconcile.Outcome,
    seconds: float,
    now: datetime.datetime,
) -> None:
    """Count one reconcile of ``body`` that took ``seconds`` and ended in ``outcome``."""
    name = kind.crd.kind
    reconciles.labels(name, str(outcome.reason)).inc()
    reconcile_seconds.labels(name).observe(seconds)
    if outcome.reason is reconcile.Reason.ETCD_ERROR:
        errors.labels(name, "etcd").inc()
    if outcome.wrote:
        etcd_writes.labels(name, "put").inc()
    if outcome.moved is not None and outcome.moved.revision:
        etcd_writes.labels(name, "delete").inc()
    if outcome.reason is not reconcile.Reason.APPLIED:
        return
    meta = body.get("metadata") or {}
    observed = (body.get("status") or {}).get("observedGeneration")
    if observed is not None and observed == meta.get("generation"):
        return  # Not a new generation: a resume, a retry or a drift put back.
    changed = change_time(body)
    if changed is not None:
        reconcile_lag_seconds.labels(name).observe(max(0.0, (now - changed).total_seconds()))


Census = Mapping[tuple[str, str, str, str], int]
"""Objects by (kind, condition type, condition status, reason)."""


class ControllerCollector(Collector):
    """``gazette_operator_objects`` and ``gazette_operator_pending``, read when scraped.

    ``census`` counts the served objects by condition; ``pending`` the work waiting in
    each queue (both :class:`gazette.operator.controller.Controller`'s).
    """

    def __init__(
        self, census: Callable[[], Census], pending: Callable[[], Mapping[str, int]]
    ) -> None:
        self._census = census
        self._pending = pending

    def describe(self) -> list[Metric]:
        return []  # Registered without describing: the label values come when scraped.

    def collect(self) -> Iterator[Metric]:
        objects = GaugeMetricFamily(
            "gazette_operator_objects",
            "Journal and Shard objects served, by the status and reason of each condition.",
            labels=["kind", "condition", "status", "reason"],
        )
        for labels, count in sorted(self._census().items()):
            objects.add_metric(list(labels), count)
        yield objects
        pending = GaugeMetricFamily(
            "gazette_operator_pending",
            "Work waiting in the controller's queues (resyncs, releases, shard statuses).",
            labels=["queue"],
        )
        for queue, count in sorted(self._pending().items()):
            pending.add_metric([queue], count)
        yield pending
