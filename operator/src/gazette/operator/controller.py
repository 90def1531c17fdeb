"""What the operator does beside kopf's handlers, driven by etcd watches instead of timers.

kopf calls the handlers of :mod:`gazette.operator.handlers` when an object
changes. What changes elsewhere is caught here, with one watch per etcd prefix
(:mod:`gazette.operator.mirrors`) whatever the number of objects, and no
per-object timer (kopf would put a finalizer on every object to stop it):

* **Out-of-band edits.** Every JournalSpec (``<broker root>/items``) and each
  application's ShardSpecs (``<app prefix>/items``) are mirrored. A key that
  changes is compared, after ``settle_delay``, with the spec its owning object
  declares (no etcd read: the mirror has the value); when they differ, as after an
  ``etcdctl put`` or ``del``, the owner is reconciled again, which writes its spec
  back (a ``Restored`` Event says so). Keys no object declares are left alone.
* **Names changing hands.** When the object owning a key goes (deleted, its name or
  cluster changed, unmanaged), the next oldest object declaring the key is
  reconciled and takes it over; the others' ``ResourceConflict`` messages follow.
* **Objects moving to another cluster.** When an object's ``gazette.dev/cluster``
  label changes to another cluster, that cluster's operator writes its spec into its
  etcd, and this one removes the key the object's status recorded from its own
  (:func:`gazette.operator.reconcile.release`: only if it still holds what this
  operator wrote and no other object here declares it). Removing the label, or
  ``gazette.dev/unmanaged``, detaches the object instead: etcd is left as it is.
* **Retries.** A reconcile here that meets an etcd failure is tried again after
  ``retry_delay``, like kopf retries its handlers.
* **Shard status.** A Shard's replicas (``<app prefix>/assign``) are re-read from the
  mirror when they or the object change, and its status patched when it differs, at
  most once per ``status_interval`` an object.
* **Shard lag.** Every ``lag.interval`` seconds (unless 0), one round asks each served
  Shard's primary how far it has read (:mod:`gazette.operator.lag`) and patches the
  ``lag*`` status fields that changed (:func:`gazette.operator.status.lag_status_for`).
  The one periodic task here, and not a kopf timer: kopf puts a finalizer on every
  object with a timer, so deleting any Shard would wait for the operator.

The objects come from :meth:`Controller.observe`, which kopf's ``on.event`` handler
calls with every event of every Journal and Shard of the watched namespaces.
Statuses are patched with the object's resourceVersion as a precondition
(:mod:`gazette.operator.kube`): a patch computed from a stale object is refused and
recomputed from the newer one, so the handlers' writes are never undone.

Example::

    ctl = controller.Controller(config, store, kube_client, views)
    registry = handlers.build_registry(handler_config, store, controller=ctl)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(ctl.run())
        ...  # kopf.operator(registry=registry, ...)
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from gazette import keyspace
from gazette.consumer import lag as consumer_lag
from gazette.consumer import protocol as pc
from gazette.operator import assignments, crd, errors, events, kube, metrics, reconcile, status
from gazette.operator import health as health_
from gazette.operator import lag as lag_

__all__ = ["Controller", "ControllerConfig", "shard_target"]

logger = logging.getLogger(__name__)

_KINDS = {k.crd.kind: k for k in (reconcile.JOURNALS, reconcile.SHARDS)}
_CONCURRENCY = 16  # Reconciles or status patches in flight at once.


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Tunables of the controller.

    ``cluster``: the value of ``gazette.dev/cluster`` served. ``retry_delay``: seconds
    before a failed reconcile or patch is tried again. ``status_interval``: the least
    seconds between two status writes of one Shard (the debounce of replica churn).
    ``settle_delay``: seconds a changed etcd key waits before it is compared with its
    object, so that the handler which wrote it has finished. ``lag``: the Shards' lag
    checks.
    """

    reconcile: reconcile.ReconcileConfig = dataclasses.field(
        default_factory=reconcile.ReconcileConfig
    )
    cluster: str = "default"
    retry_delay: float = 5.0
    status_interval: float = 2.0
    settle_delay: float = 0.5
    lag: lag_.LagConfig = dataclasses.field(default_factory=lag_.LagConfig)


_Departed = tuple[reconcile.SpecKind, Mapping[str, Any], Mapping[str, Any]]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def shard_target(
    body: Mapping[str, Any], config: reconcile.ReconcileConfig
) -> tuple[str, str] | None:
    """(application prefix, shard id) of a Shard object, or None when it names none."""
    key = reconcile.claim_key(body, reconcile.SHARDS, config)
    if key is None:
        return None
    labels = _meta(body).get("labels") or {}
    prefix = f"{config.consumers_root}/{labels[crd.CONSUMER_LABEL]}"
    return prefix, str(body["spec"]["name"])


class _Due:
    """Items to handle once each, no earlier than a time: adding again keeps the earlier."""

    def __init__(self) -> None:
        self._due: dict[Hashable, float] = {}
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._due)

    def add(self, item: Hashable, delay: float = 0.0) -> None:
        at = asyncio.get_running_loop().time() + delay
        if item not in self._due or at < self._due[item]:
            self._due[item] = at
            self._wake.set()

    def take_ready(self) -> list[Hashable]:
        """Take the items that are due now."""
        now = asyncio.get_running_loop().time()
        ready = [item for item, at in self._due.items() if at <= now]
        for item in ready:
            del self._due[item]
        return ready

    async def take(self) -> list[Hashable]:
        """Wait for items that are due, and take them all."""
        loop = asyncio.get_running_loop()
        while True:
            ready = self.take_ready()
            if ready:
                return ready
            self._wake.clear()
            wait = min(self._due.values()) - loop.time() if self._due else None
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass


@dataclasses.dataclass(slots=True)
class _Objects:
    """The objects of one kind served, by uid, and which of them name each etcd key."""

    bodies: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    keys: dict[str, str | None] = dataclasses.field(default_factory=dict)
    by_key: dict[str, set[str]] = dataclasses.field(default_factory=dict)

    def put(self, uid: str, body: Mapping[str, Any], key: str | None) -> str | None:
        """Store ``body``; return the key it named before, if that changed."""
        old = self.keys.get(uid)
        self.bodies[uid] = body
        self.keys[uid] = key
        if old == key:
            return None
        self._unlink(uid, old)
        if key is not None:
            self.by_key.setdefault(key, set()).add(uid)
        return old

    def pop(self, uid: str) -> str | None:
        """Forget ``uid``; return the key it named."""
        self.bodies.pop(uid, None)
        old = self.keys.pop(uid, None)
        self._unlink(uid, old)
        return old

    def _unlink(self, uid: str, key: str | None) -> None:
        if key is None:
            return
        uids = self.by_key.get(key)
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self.by_key[key]

    def naming(self, key: str) -> list[Mapping[str, Any]]:
        return [self.bodies[uid] for uid in sorted(self.by_key.get(key, ()))]


class Controller:
    """The watches and the writes they call for; see the module's docstring."""

    def __init__(
        self,
        config: ControllerConfig,
        store: reconcile.SpecStore,
        api: kube.KubeAPI,
        views: assignments.AssignmentViews,
        *,
        clock: Callable[[], datetime.datetime] = _now,
        health: health_.Health | None = None,
    ) -> None:
        self._config = config
        self._health = health or health_.Health()
        self._store = store
        self._api = api
        self._views = views
        self._mirrors = views.mirrors
        self._clock = clock
        self._objects = {kind: _Objects() for kind in _KINDS}
        # Mirrored roots of specs: root -> kind.
        self._roots: dict[str, reconcile.SpecKind] = {}
        self._resync = _Due()
        self._forced: set[tuple[str, str]] = set()
        # Objects that moved to another cluster: uid -> (kind, last body served, new body).
        self._departed: dict[str, _Departed] = {}
        self._departures = _Due()
        self._status = _Due()
        self._status_written: dict[str, float] = {}
        self._lag = lag_.LagChecker(
            config.lag, self._mirrors, broker_root=config.reconcile.broker_root
        )
        self._mirrors.listen(self._on_keys)
        self._follow(self._journal_root(), reconcile.JOURNALS)

    # --- What kopf tells ------------------------------------------------------

    def serves(self, body: Mapping[str, Any]) -> bool:
        """Whether this operator serves object ``body`` (its cluster, not unmanaged)."""
        labels = _meta(body).get("labels") or {}
        return labels.get(crd.CLUSTER_LABEL) == self._config.cluster and not (
            reconcile.is_unmanaged(body)
        )

    def observe(
        self, kind: reconcile.SpecKind, event_type: str | None, body: Mapping[str, Any]
    ) -> None:
        """Take note of a watch event of object ``body`` (``event_type`` None: listed)."""
        objects = self._objects[kind.crd.kind]
        uid = str(_meta(body).get("uid", ""))
        if event_type == "DELETED" or not self.serves(body):
            previous = objects.bodies.get(uid)
            left = objects.pop(uid)
            self._status_written.pop(uid, None)
            if left is not None and left in objects.by_key:
                self._take_over(kind, left)
            if event_type != "DELETED" and previous is not None and self._went_elsewhere(body):
                self._departed[uid] = (kind, previous, body)
                # After settle_delay, so the other cluster's operator has written it first.
                self._departures.add(uid, self._config.settle_delay)
            return
        self._departed.pop(uid, None)  # Back before its key was released: nothing to do.
        key = reconcile.claim_key(body, kind, self._config.reconcile)
        left = objects.put(uid, body, key)
        if left is not None and left in objects.by_key:
            self._take_over(kind, left)
        if kind is reconcile.SHARDS:
            target = shard_target(body, self._config.reconcile)
            if target is not None:
                self._follow(f"{target[0]}/items", reconcile.SHARDS)
                self._views.follow(target[0])
                if self._config.lag.enabled:
                    self._lag.follow(target[0])
            self._status.add(uid)

    def _went_elsewhere(self, body: Mapping[str, Any]) -> bool:
        """Whether ``body`` now belongs to another cluster (not just unlabelled or detached)."""
        cluster = (_meta(body).get("labels") or {}).get(crd.CLUSTER_LABEL)
        return (
            bool(cluster)
            and cluster != self._config.cluster
            and not reconcile.is_unmanaged(body)
            and not reconcile.is_paused(body)
        )

    def _take_over(self, kind: reconcile.SpecKind, key: str) -> None:
        """The owner of ``key`` changed: reconcile whoever declares it now."""
        self._forced.add((kind.crd.kind, key))
        self._resync.add((kind.crd.kind, key))

    # --- What etcd tells ------------------------------------------------------

    def _journal_root(self) -> str:
        return f"{self._config.reconcile.broker_root}/items"

    def _follow(self, root: str, kind: reconcile.SpecKind) -> None:
        if root not in self._roots:
            self._roots[root] = kind
            self._mirrors.follow(root, _raw)

    def _on_keys(self, root: str, keys: Sequence[str], loaded: bool) -> None:
        kind = self._roots.get(root)
        if kind is not None:
            objects = self._objects[kind.crd.kind]
            for key in keys:
                if key.startswith(root + "/") and key in objects.by_key:
                    self._resync.add((kind.crd.kind, key), self._config.settle_delay)
            return
        prefix = assignments.AssignmentViews.prefix_of(root)
        if prefix is None:
            return
        shards = self._objects[reconcile.SHARDS.crd.kind]
        if loaded:
            # The first load (or a reload): every Shard of the application.
            items = prefix + "/items/"
            for key, uids in shards.by_key.items():
                if key.startswith(items):
                    for uid in uids:
                        self._status.add(uid)
        ids = {assignments.shard_of_assignment(prefix, key) for key in keys}
        for shard_id in ids:
            if shard_id is None:
                continue
            try:
                item_key = keyspace.item_key(prefix, shard_id)
            except ValueError:
                continue
            for uid in shards.by_key.get(item_key, ()):
                self._status.add(uid)

    # --- Running --------------------------------------------------------------

    async def run(self) -> None:
        """Follow etcd and write what it calls for, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._mirrors.run(), name="etcd mirrors")
            tg.create_task(self._loop(self._resync, self._resync_key), name="resync")
            tg.create_task(self._loop(self._departures, self._release), name="departures")
            tg.create_task(self._loop(self._status, self._shard_status), name="shard status")
            if self._config.lag.enabled:
                tg.create_task(self._lag_rounds(), name="shard lag")

    async def _loop(self, due: _Due, handle: Callable[[Any], Any]) -> None:
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def one(item: Hashable) -> None:
            async with limit:
                with self._health.working(f"{handle.__name__.lstrip('_')} {item}"):
                    await handle(item)

        while True:
            items = await due.take()
            async with asyncio.TaskGroup() as tg:
                for item in items:
                    tg.create_task(one(item))

    async def run_due(self) -> None:
        """Handle, one at a time, whatever is due now (tests drive the controller so)."""
        for due, handle in (
            (self._resync, self._resync_key),
            (self._departures, self._release),
            (self._status, self._shard_status),
        ):
            for item in due.take_ready():
                await handle(item)

    def pending(self) -> tuple[int, int]:
        """(resyncs, status evaluations) waiting."""
        return len(self._resync), len(self._status)

    def queues(self) -> dict[str, int]:
        """The work waiting in each queue, by name (``gazette_operator_pending``)."""
        return {
            "resync": len(self._resync),
            "release": len(self._departures),
            "shard_status": len(self._status),
        }

    def census(self) -> dict[tuple[str, str, str, str], int]:
        """The objects served, by (kind, condition type, status, reason) of each condition."""
        out: dict[tuple[str, str, str, str], int] = {}
        for kind_name, objects in self._objects.items():
            for body in objects.bodies.values():
                conditions = (body.get("status") or {}).get("conditions") or ()
                if not conditions:
                    labels = (kind_name, "", "", "")
                    out[labels] = out.get(labels, 0) + 1
                for cond in conditions:
                    if isinstance(cond, Mapping):
                        labels = (
                            kind_name,
                            str(cond.get("type", "")),
                            str(cond.get("status", "")),
                            str(cond.get("reason", "")),
                        )
                        out[labels] = out.get(labels, 0) + 1
        return out

    # --- Resync: the objects naming one key -----------------------------------

    async def _resync_key(self, item: Any) -> None:
        kind_name, key = item
        kind = _KINDS[kind_name]
        forced = item in self._forced
        self._forced.discard(item)
        bodies = self._objects[kind_name].naming(key)
        if not bodies:
            return
        claims = [reconcile.claim_of(b) for b in bodies]
        owner = min(range(len(bodies)), key=lambda i: claims[i].order())
        owner_body = bodies[owner]
        if _meta(owner_body).get("deletionTimestamp"):
            return  # Its deletion settles the key first; its DELETED event comes back here.
        restored = False
        if not forced:
            root = key[: key.index("/items/")] + "/items"
            mirror = self._mirrors.get(root)
            if mirror is None or not mirror.loaded:
                return
            kv = mirror.search(key)
            written = reconcile.recorded(owner_body)
            if (
                kv is not None
                and written is not None
                and written.key == key
                and written.mod_revision == kv.mod_revision
            ):
                # Untouched since the operator wrote it for this object (any write moves the
                # mod revision): the echo of its own write, as after each reconcile. What
                # changed in the object since is kopf's to handle.
                return
            held = None if kv is None else kv.value
            if not reconcile.drifted(owner_body, kind, self._config.reconcile, held):
                return
            restored = True
            logger.info("%s changed in etcd behind the operator's back: restoring it", key)
        # The owner first: the others' conflict messages name it.
        order = [owner] + [i for i in range(len(bodies)) if i != owner]
        objects = self._objects[kind_name]
        for i in order if forced else [owner]:
            body = bodies[i]
            others = claims[:i] + claims[i + 1 :]
            started = time.perf_counter()
            outcome = await reconcile.reconcile(
                body,
                kind,
                self._config.reconcile,
                self._store,
                others,
                claimed=lambda other: [reconcile.claim_of(b) for b in objects.naming(other)],
            )
            metrics.observe(kind, body, outcome, time.perf_counter() - started, self._clock())
            ok = await self._report(kind, body, outcome, restored=restored and i == owner)
            if outcome.retry or not ok:
                # Again later, in full: etcd failed, or the object changed meanwhile.
                self._forced.add(item)
                delay = self._config.retry_delay if outcome.retry else self._config.settle_delay
                self._resync.add(item, delay)
                return

    async def _report(
        self,
        kind: reconcile.SpecKind,
        body: Mapping[str, Any],
        outcome: reconcile.Outcome,
        *,
        restored: bool,
    ) -> bool:
        """Patch the status and post the Event of ``outcome``; False if it must be redone."""
        condition = status.APPLIED if kind is reconcile.SHARDS else status.READY
        new = status.status_for(body, outcome, self._clock(), kind=condition)
        event = events.for_outcome(body, outcome, condition)
        if restored and outcome.wrote:
            event = events.Event(
                events.NORMAL,
                "Restored",
                f"{outcome.key} was changed in etcd, not through this object: wrote its "
                f"spec back at revision {outcome.mod_revision}",
            )
        if new is not None:
            result = await self._patch(kind, body, new)
            if result is not kube.PatchResult.OK:
                return result is kube.PatchResult.GONE
        for one in (event, events.for_move(outcome)):
            if one is not None:
                await self._api.post_event(body, one)
        return True

    # --- Objects gone to another cluster --------------------------------------

    async def _release(self, item: Any) -> None:
        """Remove from this cluster's etcd the spec of an object now another cluster's."""
        uid = str(item)
        departed = self._departed.pop(uid, None)
        if departed is None:
            return
        kind, previous, body = departed
        held = reconcile.recorded(previous)
        if held is None or held.cluster not in (None, self._config.cluster):
            return
        # Key strings do not tell etcds apart: two clusters' operators on one etcd and one
        # prefix (a setup to avoid) would see this delete undone by the other's watch.
        objects = self._objects[kind.crd.kind]
        claims = [reconcile.claim_of(b) for b in objects.naming(held.key)]
        try:
            moved = await reconcile.release(previous, kind, self._store, held, claims)
        except errors.SpecStoreError as e:
            metrics.errors.labels(kind.crd.kind, "etcd").inc()
            logger.warning("releasing %s: %s (retrying)", held.key, e)
            self._departed.setdefault(uid, departed)
            self._departures.add(uid, self._config.retry_delay)
            return
        cluster = (_meta(body).get("labels") or {}).get(crd.CLUSTER_LABEL)
        if moved.warning:
            logger.warning("%s", moved.message)
            event = events.Event(events.WARNING, "KeyLeftBehind", moved.message)
        elif moved.deleted:
            if moved.revision:
                metrics.etcd_writes.labels(kind.crd.kind, "delete").inc()
            logger.info("%s moved to cluster %s: %s", held.key, cluster, moved.message)
            event = events.Event(
                events.NORMAL,
                "Moved",
                f"the object is cluster {cluster}'s now: {moved.message} "
                f"(cluster {self._config.cluster}'s etcd)",
            )
        else:
            return
        await self._api.post_event(body, event)

    async def _patch(
        self, kind: reconcile.SpecKind, body: Mapping[str, Any], new: Mapping[str, Any]
    ) -> kube.PatchResult | None:
        meta = _meta(body)
        try:
            return await self._api.patch_status(
                kind.crd,
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                new,
                meta.get("resourceVersion"),
            )
        except errors.KubeAPIError as e:
            metrics.errors.labels(kind.crd.kind, "kube").inc()
            logger.warning(
                "patching the status of %s/%s: %s", meta.get("namespace"), meta.get("name"), e
            )
            return None

    # --- Shard status ---------------------------------------------------------

    async def _shard_status(self, item: Any) -> None:
        uid = str(item)
        body = self._objects[reconcile.SHARDS.crd.kind].bodies.get(uid)
        if body is None:
            return
        target = shard_target(body, self._config.reconcile)
        replicas: list[status.Replica] = []
        if target is not None:
            got = self._views.replicas(*target)
            if got is None:
                return  # Not loaded yet: the load schedules every Shard of the application.
            replicas = got
        new = status.shard_status_for(body, replicas, self._clock())
        if new is None:
            return
        loop = asyncio.get_running_loop()
        last = self._status_written.get(uid)
        wait = 0.0 if last is None else last + self._config.status_interval - loop.time()
        if wait > 0:
            self._status.add(uid, wait)
            return
        self._status_written[uid] = loop.time()
        result = await self._patch(reconcile.SHARDS, body, new)
        if result is None:
            self._status.add(uid, self._config.retry_delay)
        elif result is kube.PatchResult.OK:
            cond = status.ready_condition(new) or {}
            logger.info(
                "shard %s/%s: Ready %s (%s): %s",
                _meta(body).get("namespace"),
                _meta(body).get("name"),
                cond.get("status"),
                cond.get("reason"),
                cond.get("message"),
            )
        # A conflict: the newer object's event schedules this again.

    # --- Shard lag -------------------------------------------------------------

    async def _lag_rounds(self) -> None:
        # Not tracked by the liveness check as one piece of work: a round over thousands
        # of Shards whose primaries don't answer is long (each ask is bounded by
        # stat_timeout), without the operator being wedged.
        while True:
            await asyncio.sleep(self._config.lag.interval)
            await self.check_lag()

    def _lag_targets(
        self,
    ) -> tuple[list[lag_.Target], dict[str, consumer_lag.ShardLag]]:
        """The Shards to ask, and the answers known without asking (their spec isn't theirs)."""
        targets: list[lag_.Target] = []
        known: dict[str, consumer_lag.ShardLag] = {}
        for uid, body in self._objects[reconcile.SHARDS.crd.kind].bodies.items():
            applied = status.condition(body.get("status") or {}, status.APPLIED)
            if applied is None or _meta(body).get("deletionTimestamp"):
                continue
            target = shard_target(body, self._config.reconcile)
            if target is None or not status.holds_spec(applied):
                known[uid] = consumer_lag.ShardLag(error="the spec is not in etcd")
                continue
            replicas = self._views.replicas(*target)
            if replicas is None:
                continue  # Not loaded yet: the next round.
            primary = next(
                (r for r in replicas if r.slot == 0 and r.code == pc.ReplicaStatus.PRIMARY), None
            )
            spec = body.get("spec") or {}
            journals = [
                str(src["journal"])
                for src in spec.get("sources") or ()
                if isinstance(src, Mapping) and src.get("journal")
            ]
            targets.append(lag_.Target(uid, target[0], target[1], journals, primary))
        return targets, known

    async def check_lag(self) -> int:
        """One round of lag checks over the Shards served; returns the statuses patched."""
        targets, found = self._lag_targets()
        found.update(await self._lag.check(targets))
        patched = 0
        shards = self._objects[reconcile.SHARDS.crd.kind].bodies
        for uid, one in found.items():
            body = shards.get(uid)  # The latest seen: the object may have changed meanwhile.
            if body is None:
                continue
            new = status.lag_status_for(body, one, self._clock(), refresh=self._config.lag.refresh)
            if new is None:
                continue
            result = await self._patch(reconcile.SHARDS, body, new)
            # A conflict or a failure: the next round writes what it finds then.
            if result is kube.PatchResult.OK:
                patched += 1
                logger.debug(
                    "shard %s/%s: lag %s%s",
                    _meta(body).get("namespace"),
                    _meta(body).get("name"),
                    new.get("lag"),
                    f" (unknown: {new['lagUnknown']})" if new.get("lagUnknown") else "",
                )
        return patched


def _raw(key: str, value: bytes) -> None:
    """The mirrors of specs keep the raw values: they are decoded when compared."""
    del key, value
