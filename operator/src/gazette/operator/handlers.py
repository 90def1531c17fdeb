"""The kopf handlers: thin wrappers binding Kubernetes events to :mod:`.reconcile`.

:func:`build_registry` registers, for each kind (Journals and Shards), in a
registry of its own (no module-level state):

* an index of claims (``etcd key -> objects naming it``), which kopf fills from
  the initial listing before any handler runs, so the oldest object wins from
  the first event on;
* one reconcile handler on resume, create and update (kopf calls update for
  changes of spec, labels and annotations, not of status), which patches the
  reconcile condition and posts an Event on its transitions (:mod:`.events`);
* a deletion handler for ``deletionPolicy: Delete`` only, so only those objects get
  the finalizer: deleting a ``Retain`` object, or its namespace, never waits for the
  operator (there are no per-object timers or daemons, for which kopf would add a
  finalizer to every object);
* an event handler seeing every event of every object of the watched namespaces:
  it hands served objects to the :class:`~gazette.operator.controller.Controller`
  (out-of-band etcd edits, names changing hands and Shard status are its, driven by
  etcd watches), and gives an object without the ``gazette.dev/cluster`` label a
  ``NoCluster`` condition and a Warning, instead of leaving it silently unserved.

Status patches go to the status subresource and kopf handles ``update`` for changes
of spec, labels and annotations only, so no status write causes a reconcile. The
reconcile handler sends the whole ``conditions`` list (a JSON merge patch replaces
lists) from the object as kopf saw it, setting only its own condition in place; the
controller patches with the object's resourceVersion as a precondition, so when
their writes race the controller's is refused and recomputed from the newer object.
On Shards, the reconcile outcome is the ``Applied`` condition, and ``Ready`` says
whether a primary serves the shard (:mod:`.status`).

Objects are those labelled ``gazette.dev/cluster=<cluster>``, without
``gazette.dev/unmanaged: "true"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kopf

from gazette.operator import controller as controller_
from gazette.operator import crd, errors, events, kube, metrics, reconcile, status
from gazette.operator import health as health_
from gazette.operator import lag as lag_

__all__ = [
    "PROGRESS_PREFIX",
    "HandlerConfig",
    "Post",
    "QuietObservers",
    "build_registry",
    "kopf_post",
    "login",
    "on_apply",
    "on_delete",
    "on_event",
    "operator_settings",
]

_logger = logging.getLogger(__name__)

PROGRESS_PREFIX = f"kopf.{crd.GROUP}"
"""Where kopf keeps its handlers' progress (annotations ``kopf.gazette.dev/...``)."""

_WATCH_SERVER_TIMEOUT = 300  # Seconds a watch lasts before it is made anew (an int: the API
# server parses timeoutSeconds as one).
_CONNECT_TIMEOUT = 30.0
_REQUEST_TIMEOUT = 60.0
_WORKER_LIMIT = 128  # Objects handled at once (kopf workers).
_WORKER_IDLE = 0.5  # Seconds a worker waits for another event of its object before it ends.
_POSTER_LIMIT = 16  # Events posted at once.

Post = Callable[[Mapping[str, Any], events.Event], None]
"""Posts an Event about an object (``kopf.event`` in handlers; a list in tests)."""


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerConfig:
    """What the handlers and the controller need to know, beyond the etcd prefixes.

    ``cluster``: the value of ``gazette.dev/cluster`` this operator serves.
    ``retry_delay``: seconds before retrying after an etcd failure.
    ``status_interval``: the least seconds between two status writes of one Shard
    (the debounce of its replicas' churn).
    ``settle_delay``: seconds an etcd key changed out of band waits before it is
    compared with its object. ``lag``: how often Shards' lag is checked, and where.
    """

    reconcile: reconcile.ReconcileConfig = dataclasses.field(
        default_factory=reconcile.ReconcileConfig
    )
    cluster: str = "default"
    retry_delay: float = 5.0
    status_interval: float = 2.0
    settle_delay: float = 0.5
    lag: lag_.LagConfig = dataclasses.field(default_factory=lag_.LagConfig)

    def controller(self) -> controller_.ControllerConfig:
        """The same settings, for the :class:`~gazette.operator.controller.Controller`."""
        return controller_.ControllerConfig(
            reconcile=self.reconcile,
            cluster=self.cluster,
            retry_delay=self.retry_delay,
            status_interval=self.status_interval,
            settle_delay=self.settle_delay,
            lag=self.lag,
        )


class _DiffBaseStorage(kopf.StatusDiffBaseStorage):
    """kopf's diff base in the status, its essence built without copying the whole object.

    kopf deep-copies each event's body, ``managedFields`` and ``status`` included, only to
    drop all but ``spec``, labels and annotations: the largest cost of an event in
    bench_operator's profile at 10,000 Journals. The same essence comes from a copy of
    what it keeps.
    """

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)  # Fields of anywhere.
        meta = body.get("metadata") or {}
        slim: Any = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        slim["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return super().build(body=kopf.Body(slim))


def operator_settings(
    settings: kopf.OperatorSettings | None = None, *, instance: str = ""
) -> kopf.OperatorSettings:
    """kopf settings of the operator: our own finalizer and annotation names, our Events only.

    ``instance`` is the ``reportingInstance`` of the Events kopf posts (the leader
    election's identity, so ``kubectl events`` tells the replicas apart).

    The finalizer is ``gazette.dev/delete-spec``, which kopf adds only for the handlers
    that require one: the deletion handler of ``deletionPolicy: Delete`` objects.
    """
    settings = settings or kopf.OperatorSettings()
    settings.persistence.finalizer = crd.FINALIZER
    # Not crd.GROUP: kopf leaves every annotation under its progress prefix out of what it
    # compares to tell an update, and gazette.dev/paused must count (unpausing an object
    # went unnoticed once no timer reconciled it anyway: test_operator_e2e found it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PROGRESS_PREFIX)
    # In status, not in an annotation: then the outcome of a handler is one PATCH of the
    # status subresource instead of that plus one of the object (bench_operator halves its
    # API writes).
    settings.persistence.diffbase_storage = _DiffBaseStorage(
        field=f"status.{crd.LAST_HANDLED_FIELD}"
    )
    # Our Events (Warning on InvalidSpec, ResourceConflict, EtcdError; Normal on Applied)
    # are posted with kopf.event on transitions only (gazette.operator.events). kopf's
    # own log lines are not posted (posting.loggers stays off): one Event per handled
    # object would double the API writes of a large `kubectl apply`.
    settings.posting.enabled = True
    settings.posting.loggers = False
    settings.posting.reporting_component = kube.COMPONENT
    if instance:
        settings.posting.reporting_instance = instance
    # Watches end on our side too, not only when the API server ends them: a connection
    # that silently died (a NAT or load balancer dropping it) is re-made within
    # client_timeout, and one that says nothing for inactivity_timeout (the API server
    # sends bookmarks every minute) sooner. Other requests are bounded as well, so a
    # handler never waits on the API server for longer than liveness tolerates.
    settings.watching.server_timeout = _WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = _WATCH_SERVER_TIMEOUT + 30
    settings.watching.connect_timeout = _CONNECT_TIMEOUT
    settings.networking.connect_timeout = _CONNECT_TIMEOUT
    settings.networking.request_timeout = _REQUEST_TIMEOUT
    # kopf runs one worker per object with events to handle, by default without a limit,
    # and its API session has no connection limit either: 10,000 Journals in one apply
    # became thousands of concurrent TLS connections and etcd calls, which timed out,
    # were retried, and starved the Lease's renewals (bench_operator). A bounded number of
    # workers, each leaving soon after its object's last event, keeps the pace instead.
    settings.queueing.worker_limit = _WORKER_LIMIT
    settings.queueing.idle_timeout = _WORKER_IDLE
    # The same for kopf's Event posters (one per object, also unlimited): Events are
    # informative, so they trail the status patches rather than compete with them.
    settings.posting.worker_limit = _POSTER_LIMIT
    settings.posting.idle_timeout = _WORKER_IDLE
    return settings


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account. Elsewhere: $KUBECONFIG or ~/.kube/config."""
    settings = kwargs.get("settings")
    return kube.login(settings if isinstance(settings, kopf.OperatorSettings) else None)


def _no_post(body: Mapping[str, Any], event: events.Event) -> None:
    del body, event


def kopf_post(body: Mapping[str, Any], event: events.Event) -> None:
    """Post ``event`` with kopf, which queues it and posts it in the background."""
    kopf.event(dict(body), type=event.type, reason=event.reason, message=event.message)  # type: ignore[arg-type]


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
    post: Post = _no_post,
    health: health_.Health | None = None,
) -> reconcile.Outcome:
    """The resume / create / update handler: reconcile, then patch the status.

    ``index`` is the kind's claims index (``key -> claims``). Puts the new status into
    ``patch["status"]`` only when it differs, and posts the Event of a transition;
    raises ``kopf.TemporaryError`` after an etcd failure, so kopf retries (the status
    saying EtcdError is patched still). The reconcile is counted in
    :mod:`gazette.operator.metrics` and tracked by ``health`` (liveness).
    """
    key = reconcile.claim_key(body, kind, config.reconcile)
    started = time.perf_counter()
    with _working(health, "reconcile", kind, body):
        outcome = await reconcile.reconcile(
            body,
            kind,
            config.reconcile,
            store,
            _claims(index, key),
            claimed=lambda other: _claims(index, other),
        )
    metrics.observe(kind, body, outcome, time.perf_counter() - started, clock())
    condition = status.APPLIED if kind is reconcile.SHARDS else status.READY
    new = status.status_for(body, outcome, clock(), kind=condition)
    if new is not None:
        patch.setdefault("status", {}).update(new)
        logger.info("%s: %s", outcome.reason, outcome.message)
    for event in (events.for_outcome(body, outcome, condition), events.for_move(outcome)):
        if event is not None:
            post(body, event)
    if outcome.moved is not None:
        log = logger.warning if outcome.moved.warning else logger.info
        log("moved: %s", outcome.moved.message)
    if outcome.retry:
        raise kopf.TemporaryError(outcome.message, delay=config.retry_delay)
    return outcome


def _working(
    health: health_.Health | None, what: str, kind: reconcile.SpecKind, body: Mapping[str, Any]
) -> contextlib.AbstractContextManager[None]:
    if health is None:
        return contextlib.nullcontext()
    meta = body.get("metadata") or {}
    return health.working(f"{what} {kind.crd.kind} {meta.get('namespace')}/{meta.get('name')}")


async def on_delete(
    body: Mapping[str, Any],
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    store: reconcile.SpecStore,
    index: Any = None,
    *,
    logger: Any = _logger,
    health: health_.Health | None = None,
) -> str:
    """The deletion handler (``deletionPolicy: Delete``): remove the spec from etcd.

    Raises ``kopf.TemporaryError`` when etcd fails, so the finalizer holds and kopf retries.
    """
    key = reconcile.claim_key(body, kind, config.reconcile)
    try:
        with _working(health, "delete", kind, body):
            message = await reconcile.delete(
                body,
                kind,
                config.reconcile,
                store,
                _claims(index, key),
                claimed=lambda other: _claims(index, other),
            )
    except errors.SpecStoreError as e:
        metrics.errors.labels(kind.crd.kind, "etcd").inc()
        raise kopf.TemporaryError(str(e), delay=config.retry_delay) from e
    logger.info("deletionPolicy Delete: %s", message)
    return message


def on_event(
    event_type: str | None,
    body: Mapping[str, Any],
    patch: dict[str, Any],
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    controller: controller_.Controller | None = None,
    *,
    clock: Callable[[], datetime.datetime] = _now,
    post: Post = _no_post,
) -> None:
    """The handler of every watch event of every object (``event_type`` None: listed).

    Hands it to ``controller``; and an object without the ``gazette.dev/cluster`` label
    (and not unmanaged) gets the condition ``NoCluster`` (on Shards ``Applied`` and
    ``Ready``) in ``patch``, and a Warning the first time.
    """
    if controller is not None:
        controller.observe(kind, event_type, body)
    labels = (body.get("metadata") or {}).get("labels") or {}
    if event_type == "DELETED" or crd.CLUSTER_LABEL in labels or reconcile.is_unmanaged(body):
        return
    outcome = reconcile.Outcome(
        reconcile.Reason.NO_CLUSTER,
        f"no label {crd.CLUSTER_LABEL}, so no operator serves this object: label it "
        f"{crd.CLUSTER_LABEL}=<the Gazette cluster's name> (the operator's --cluster)",
    )
    first = status.APPLIED if kind is reconcile.SHARDS else status.READY
    now = clock()
    new = status.status_for(body, outcome, now, kind=first)
    if kind is reconcile.SHARDS:
        seen = {**body, "status": {**(body.get("status") or {}), **(new or {})}}
        ready = status.status_for(seen, outcome, now, kind=status.READY)
        if ready is not None:
            new = {**(new or {}), **ready}
    if new is not None:
        patch.setdefault("status", {}).update(new)
    event = events.for_outcome(body, outcome, first)
    if event is not None:
        post(body, event)


class QuietObservers(logging.Filter):
    """Drops kopf's "Handler 'observe_journal' succeeded." lines: one per event of every object.

    kopf logs every handler's success at INFO; for the event handler, which sees each
    watch event of each object, that is noise drowning what the operator does.
    """

    _messages = frozenset(
        f"Handler 'observe_{kind.crd.singular}' succeeded."
        for kind in (reconcile.JOURNALS, reconcile.SHARDS)
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self._messages


def build_registry(
    config: HandlerConfig,
    store: reconcile.SpecStore,
    *,
    controller: controller_.Controller | None = None,
    credentials: kube.Credentials | None = None,
    clock: Callable[[], datetime.datetime] = _now,
    post: Post = kopf_post,
    health: health_.Health | None = None,
) -> kopf.OperatorRegistry:
    """A kopf registry serving Journals and Shards of ``config.cluster`` into ``store``.

    ``controller`` hears of every object event (out-of-band etcd edits, names changing
    hands, Shard status); ``credentials`` receive what kopf logged in with; ``health``
    tracks the handlers' work (liveness).
    """
    registry = kopf.OperatorRegistry()

    def login_and_share(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = login(**kwargs)
        if credentials is not None:
            credentials.set(info)
        return info

    kopf.on.login(registry=registry)(login_and_share)
    for kind in (reconcile.JOURNALS, reconcile.SHARDS):
        _register(registry, kind, config, store, controller, clock, post, health)
    return registry


def _filters(config: HandlerConfig, registry: kopf.OperatorRegistry) -> dict[str, Any]:
    return {
        "labels": {crd.CLUSTER_LABEL: config.cluster},
        "when": _managed,
        "registry": registry,
    }


def _managed(annotations: Mapping[str, str], **_: Any) -> bool:
    return annotations.get(crd.UNMANAGED_ANNOTATION) != "true"


def _register(
    registry: kopf.OperatorRegistry,
    kind: reconcile.SpecKind,
    config: HandlerConfig,
    store: reconcile.SpecStore,
    controller: controller_.Controller | None,
    clock: Callable[[], datetime.datetime],
    post: Post,
    health: health_.Health | None,
) -> None:
    resource = (crd.GROUP, crd.VERSION, kind.crd.plural)
    filters = _filters(config, registry)
    index_name = f"{kind.crd.singular}_claims"

    # Async, as every handler here: kopf runs a sync one in a thread of its executor,
    # a hand-over per event that cost more than the function itself.
    async def claims(body: kopf.Body, **_: Any) -> dict[str, reconcile.Claim]:
        if reconcile.is_unmanaged(body):
            return {}
        key = reconcile.claim_key(body, kind, config.reconcile)
        return {} if key is None else {key: reconcile.claim_of(body)}

    # The unmanaged check is the function's own, not a `when` filter: kopf calls a filter
    # with the whole of its keyword arguments built, on each event of each object, and
    # the index sees every event.
    kopf.index(*resource, id=index_name, labels=filters["labels"], registry=registry)(claims)

    async def apply(body: kopf.Body, patch: kopf.Patch, logger: Any, **kwargs: Any) -> None:
        await on_apply(
            body,
            patch,
            kind,
            config,
            store,
            kwargs.get(index_name),
            clock=clock,
            logger=logger,
            post=post,
            health=health,
        )

    apply.__name__ = f"apply_{kind.crd.singular}"
    kopf.on.resume(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)
    kopf.on.create(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)
    kopf.on.update(*resource, id=f"apply_{kind.crd.singular}", **filters)(apply)

    async def remove(body: kopf.Body, logger: Any, **kwargs: Any) -> None:
        await on_delete(
            body, kind, config, store, kwargs.get(index_name), logger=logger, health=health
        )

    kopf.on.delete(
        *resource,
        id=f"delete_{kind.crd.singular}",
        field="spec.deletionPolicy",
        value="Delete",
        **filters,
    )(remove)

    async def observe(
        event: Mapping[str, Any], body: kopf.Body, patch: kopf.Patch, **_: Any
    ) -> None:
        # Async: kopf runs sync handlers in threads, away from the controller's loop.
        # No filters: objects of other clusters, unlabelled or unmanaged ones are seen too,
        # so the controller forgets those that stop being its own.
        on_event(
            event.get("type"),
            dict(body),
            patch,
            kind,
            config,
            controller,
            clock=clock,
            post=post,
        )

    observe.__name__ = f"observe_{kind.crd.singular}"
    kopf.on.event(*resource, id=f"observe_{kind.crd.singular}", registry=registry)(observe)
