"""The kopf handlers: thin wrappers binding Kubernetes events to :mod:`.reconcile`.

:func:`build_registry` registers, for each kind (Journals and Shards), in a
registry of its own (no module-level state):

* an index of claims (``etcd key -> objects naming it``), which kopf fills from
  the initial listing before any handler runs, so the oldest object wins from
  the first event on;
* one reconcile handler on resume, create and update (kopf calls update for
  changes of spec, labels and annotations, not of status);
* a timer per object, every ``resync_interval``: the periodic pass that puts
  back specs edited or deleted out of band in etcd, lets the next oldest object
  take over a name whose owner went, and retries what failed;
* a deletion handler for ``deletionPolicy: Delete`` only, so only those objects
  get the finalizer;
* for Shards, given :class:`~gazette.operator.assignments.AssignmentViews`, a status
  timer per object, every ``status_interval``: it reads the shard's replicas from the
  application's assignment mirror (one etcd watch per application, no etcd call
  here) and patches ``status`` (primary, standbys, route, replicas, Ready) when it
  changed. The interval is the debounce: a shard's status is written at most once
  per interval, however its replicas churn.

Status patches go to the status subresource and kopf handles ``update`` for changes
of spec, labels and annotations only, so no status write causes a reconcile. Both
writers send the whole ``conditions`` list (a JSON merge patch replaces lists), each
from the object as kopf last saw it, and each sets only its own condition, in place:
when their writes race, one may put back the other's previous condition, which that
writer sees differ and writes again on its next pass (the next status interval for
Ready, the next resync for Applied).
On Shards, the reconcile outcome is the ``Applied`` condition, and ``Ready`` says
whether a primary serves the shard (:mod:`.status`).

Objects are those labelled ``gazette.dev/cluster=<cluster>``, without
``gazette.dev/unmanaged: "true"``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from gazette.operator import assignments, crd, errors, reconcile, status

__all__ = [
    "STATUS_TIMER",
    "HandlerConfig",
    "QuietStatusTimer",
    "build_registry",
    "on_apply",
    "on_delete",
    "on_shard_status",
    "operator_settings",
]

STATUS_TIMER = "status_shard"
"""The id of the Shard status timer."""

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerConfig:
    """What the handlers need to know, beyond the etcd prefixes.

    ``cluster``: the value of ``gazette.dev/cluster`` this operator serves.
    ``resync_interval``: seconds between periodic passes over each object.
    ``retry_delay``: seconds before retrying after an etcd failure.
    ``status_interval``: seconds between looks at each Shard's replicas (the longest a
    change of primary takes to show, and the shortest time between two status writes).
    """

    reconcile: reconcile.ReconcileConfig = dataclasses.field(
        default_factory=reconcile.ReconcileConfig
    )
    cluster: str = "default"
    resync_interval: float = 60.0
    retry_delay: float = 5.0
    status_interval: float = 2.0


def operator_settings(settings: kopf.OperatorSettings | None = None) -> kopf.OperatorSettings:
    """kopf settings of the operator: our own finalizer and annotation names, quiet events."""
    settings = settings or kopf.OperatorSettings()
    settings.persistence.finalizer = crd.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=crd.GROUP)
    # In status, not in an annotation: then the outcome of a handler is one PATCH of the
    # status subresource instead of that plus one of the object (bench_operator halves its
    # API writes).
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(
        field=f"status.{crd.LAST_HANDLED_FIELD}"
    )
    # Conditions say what happened; an Event per handled object would double the API
    # writes of a large `kubectl apply`. Warnings and errors are still posted.
    settings.posting.level = logging.WARNING
    return settings


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # In a pod: the service account. Elsewhere: $KUBECONFIG or ~/.kube/config.
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _claims(index: Any, key: str | None) -> list[reconcile.Claim]:
    if key is None or index is None:
        return []
    return list(index.get(key, ()))


async def on_apply(
    body: Mapping[str, Any],
    patch: dict[str, Any],
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    store: reconcile.SpecStore,
    index: Any = None,
    *,
    clock: Callable[[], datetime.datetime] = _now,
    logger: Any = _logger,
) -> reconcile.Outcome:
    """The resume / create / update / timer handler: reconcile, then patch the status.

    ``index`` is the kind's claims index (``key -> claims``). Puts the new status into
    ``patch["status"]`` only when it differs; raises ``kopf.TemporaryError`` after an
    etcd failure, so kopf retries (the status saying EtcdError is patched still).
    """
    key = reconcile.claim_key(body, kind, config.reconcile)
    outcome = await reconcile.reconcile(body, kind, config.reconcile, store, _claims(index, key))
    condition = status.APPLIED if kind is reconcile.SHARDS else status.READY
    new = status.status_for(body, outcome, clock(), kind=condition)
    if new is not None:
        patch.setdefault("status", {}).update(new)
        logger.info("%s: %s", outcome.reason, outcome.message)
    if outcome.retry:
        raise kopf.TemporaryError(outcome.message, delay=config.retry_delay)
    return outcome


async def on_delete(
    body: Mapping[str, Any],
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    store: reconcile.SpecStore,
    index: Any = None,
    *,
    logger: Any = _logger,
) -> str:
    """The deletion handler (``deletionPolicy: Delete``): remove the spec from etcd.

    Raises ``kopf.TemporaryError`` when etcd fails, so the finalizer holds and kopf retries.
    """
    key = reconcile.claim_key(body, kind, config.reconcile)
    try:
        message = await reconcile.delete(body, kind, config.reconcile, store, _claims(index, key))
    except errors.SpecStoreError as e:
        raise kopf.TemporaryError(str(e), delay=config.retry_delay) from e
    logger.info("deletionPolicy Delete: %s", message)
    return message


def shard_target(body: Mapping[str, Any], config: HandlerConfig) -> tuple[str, str] | None:
    """(application prefix, shard id) of a Shard object, or None when it names none."""
    key = reconcile.claim_key(body, reconcile.SHARDS, config.reconcile)
    if key is None:
        return None
    labels = (body.get("metadata") or {}).get("labels") or {}
    prefix = f"{config.reconcile.consumers_root}/{labels[crd.CONSUMER_LABEL]}"
    return prefix, str(body["spec"]["name"])


def on_shard_status(
    body: Mapping[str, Any],
    patch: dict[str, Any],
    config: HandlerConfig,
    views: assignments.AssignmentViews,
    *,
    clock: Callable[[], datetime.datetime] = _now,
    logger: Any = _logger,
) -> dict[str, Any] | None:
    """The Shard status timer: put the status of the shard's replicas into ``patch``.

    Only when it differs from the object's; nothing while the application's
    assignments are not loaded yet. Returns what was put, or None.
    """
    target = shard_target(body, config)
    if target is None:
        replicas: list[status.Replica] = []
    else:
        got = views.replicas(*target)
        if got is None:
            return None
        replicas = got
    new = status.shard_status_for(body, replicas, clock())
    if new is None:
        return None
    patch.setdefault("status", {}).update(new)
    cond = status.ready_condition(new) or {}
    logger.info("Ready %s (%s): %s", cond.get("status"), cond.get("reason"), cond.get("message"))
    return new


class QuietStatusTimer(logging.Filter):
    """Drops kopf's "Timer 'status_shard' succeeded." lines: one per Shard per interval.

    kopf logs every handler's success at INFO; for a timer that looks at each Shard every
    couple of seconds that is noise drowning what the operator does (a status that
    changed is logged by :func:`on_shard_status` itself).
    """

    _message = f"Timer {STATUS_TIMER!r} succeeded."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self._message


def build_registry(
    config: HandlerConfig,
    store: reconcile.SpecStore,
    *,
    views: assignments.AssignmentViews | None = None,
    clock: Callable[[], datetime.datetime] = _now,
) -> kopf.OperatorRegistry:
    """A kopf registry serving Journals and Shards of ``config.cluster`` into ``store``.

    With ``views``, Shards also get the status of their replicas (a status timer).
    """
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(_login)
    for kind in (reconcile.JOURNALS, reconcile.SHARDS):
        _register(registry, kind, config, store, clock)
    if views is not None:
        _register_shard_status(registry, config, views, clock)
    return registry


def _filters(config: HandlerConfig, registry: kopf.OperatorRegistry) -> dict[str, Any]:
    return {
        "labels": {crd.CLUSTER_LABEL: config.cluster},
        "when": _managed,
        "registry": registry,
    }


def _register_shard_status(
    registry: kopf.OperatorRegistry,
    config: HandlerConfig,
    views: assignments.AssignmentViews,
    clock: Callable[[], datetime.datetime],
) -> None:
    async def shard_status(body: kopf.Body, patch: kopf.Patch, logger: Any, **_: Any) -> None:
        on_shard_status(body, patch, config, views, clock=clock, logger=logger)

    kopf.timer(
        crd.GROUP,
        crd.VERSION,
        crd.SHARD.plural,
        id=STATUS_TIMER,
        interval=config.status_interval,
        **_filters(config, registry),
    )(shard_status)


def _managed(annotations: Mapping[str, str], **_: Any) -> bool:
    return annotations.get(crd.UNMANAGED_ANNOTATION) != "true"


def _register(
    registry: kopf.OperatorRegistry,
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    store: reconcile.SpecStore,
    clock: Callable[[], datetime.datetime],
) -> None:
    resource = (crd.GROUP, crd.VERSION, kind.crd.plural)
    filters = _filters(config, registry)
    index_name = f"{kind.crd.singular}_claims"

    def claims(body: kopf.Body, **_: Any) -> dict[str, reconcile.Claim]:
        key = reconcile.claim_key(body, kind, config.reconcile)
        return {} if key is None else {key: reconcile.claim_of(body)}

    kopf.index(*resource, id=index_name, **filters)(claims)

    async def apply(body: kopf.Body, patch: kopf.Patch, logger: Any, **kwargs: Any) -> None:
        await on_apply(
            body, patch, kind, config, store, kwargs.get(index_name), clock=clock, logger=logger
        )

    apply.__name__ = f"apply_{kind.crd.singular}"
    kopf.on.resume(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)
    kopf.on.create(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)
    kopf.on.update(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)
    kopf.timer(
        *resource,
        id=f"resync_{kind.crd.singular}",
        interval=config.resync_interval,
        initial_delay=config.resync_interval,
        **filters,
    )(apply)

    async def remove(body: kopf.Body, logger: Any, **kwargs: Any) -> None:
        await on_delete(body, kind, config, store, kwargs.get(index_name), logger=logger)

    kopf.on.delete(
        *resource,
        id=f"delete_{kind.crd.singular}",
        field="spec.deletionPolicy",
        value="Delete",
        **filters,
    )(remove)
