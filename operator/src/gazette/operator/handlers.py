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
  get the finalizer.

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

from gazette.operator import crd, errors, reconcile, status

__all__ = ["HandlerConfig", "build_registry", "on_apply", "on_delete", "operator_settings"]

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerConfig:
    """What the handlers need to know, beyond the etcd prefixes.

    ``cluster``: the value of ``gazette.dev/cluster`` this operator serves.
    ``resync_interval``: seconds between periodic passes over each object.
    ``retry_delay``: seconds before retrying after an etcd failure.
    """

    reconcile: reconcile.ReconcileConfig = dataclasses.field(
        default_factory=reconcile.ReconcileConfig
    )
    cluster: str = "default"
    resync_interval: float = 60.0
    retry_delay: float = 5.0


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
    new = status.status_for(body, outcome, clock())
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


def build_registry(
    config: HandlerConfig,
    store: reconcile.SpecStore,
    *,
    clock: Callable[[], datetime.datetime] = _now,
) -> kopf.OperatorRegistry:
    """A kopf registry serving Journals and Shards of ``config.cluster`` into ``store``."""
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(_login)
    for kind in (reconcile.JOURNALS, reconcile.SHARDS):
        _register(registry, kind, config, store, clock)
    return registry


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
    filters: dict[str, Any] = {
        "labels": {crd.CLUSTER_LABEL: config.cluster},
        "when": _managed,
        "registry": registry,
    }
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
